/* test_hlo_shared.c — every real XLA module in ../shared/hlo plans without error, with the
 * argument and output sizes their signatures imply, a peak at least as large as what is
 * live throughout, heap offsets that never overlap for buffers live at the same time, and
 * plans identical to the ones recorded (a fingerprint of every buffer's offset, size and live
 * range: making the planner faster must not move a byte). Skipped when the shared data is
 * absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"

typedef struct shared_module {
  const char *file;
  uint64_t arguments; /* from the entry signature */
  uint64_t outputs;
  uint64_t alias;
} shared_module_t;

static const shared_module_t modules[] = {
    /* 111 outputs in parameter 0's tuple (input_output_alias); the output tuple's table
     * (111 pointers) is the only unaliased output */
    {"attention_model.hlo", 0, 0, 0},
    /* s32[10] + s32[128,10] + s32[1]; f32[1,121] */
    {"graphsage_tf.hlo", 40 + 5120 + 4, 484, 0},
    {"hlo_llama3_8b_cp_bf16_1x4.hlo", 24093310988ull, 0, 0},
    /* f32[1,300,300,3]; (f32[1,1917,1,4], f32[1,1917,90]) and the tuple's table */
    {"ssd_mobilenet_tf.hlo", 1080000, 30672 + 690120 + 16, 0},
};

static void check_offsets(const hbm_profile_t *prof) {
  int64_t n = hbm_profile_buffer_count(prof);
  for (int64_t i = 0; i < n; i++) {
    const hbm_buffer_t *a = hbm_profile_buffer(prof, i);
    if (a->flags & HBM_BUF_INDEFINITE)
      continue;
    assert_true(a->start < a->end);
    for (int64_t j = i + 1; j < n; j++) {
      const hbm_buffer_t *b = hbm_profile_buffer(prof, j);
      if ((b->flags & HBM_BUF_INDEFINITE) || b->space != a->space)
        continue;
      bool together = a->start < b->end && b->start < a->end;
      bool overlap = a->address < b->address + b->size && b->address < a->address + a->size;
      if (together && overlap)
        fail_msg("%s and %s overlap in time and memory", a->label, b->label);
    }
  }
}

static void every_shared_module_plans(void **state) {
  (void)state;
  th_need_shared();
  for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/hlo/%s", HBM_SHARED_DIR, modules[i].file);
    hbm_plan_options_t opt = {.memory = 16ull << 30};
    hbm_plan_t *p = hbm_plan_file(path, &opt);
    if (!p)
      fail_msg("%s: %s", modules[i].file, hbm_last_error());
    const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
    const hbm_profile_t *prof = hbm_plan_profile(p);
    assert_true(hbm_profile_step_count(prof) > 100);
    assert_true(s->n_buffers > 100);
    assert_non_null(s->peak_instruction);
    assert_true(s->peak_bytes >= s->argument_bytes);
    assert_true(s->peak_bytes > 0);
    assert_true(s->temp_bytes + s->fragmentation_bytes >= s->temp_bytes);
    if (modules[i].arguments)
      assert_true(s->argument_bytes == modules[i].arguments);
    if (modules[i].outputs)
      assert_true(s->output_bytes == modules[i].outputs);
    check_offsets(prof);
    /* the report and JSON render */
    FILE *null = fopen("/dev/null", "w");
    assert_int_equal(hbm_plan_report_text(p, null), HBM_OK);
    assert_int_equal(hbm_plan_report_json(p, null), HBM_OK);
    fclose(null);
    print_message("%s: arguments %llu, outputs %llu (aliased %llu), temp %llu, peak %llu at %s\n",
                  modules[i].file, (unsigned long long)s->argument_bytes,
                  (unsigned long long)s->output_bytes, (unsigned long long)s->alias_bytes,
                  (unsigned long long)s->temp_bytes, (unsigned long long)s->peak_bytes,
                  s->peak_instruction);
    hbm_plan_free(p);
  }
}

static void aliased_outputs_of_training_steps(void **state) {
  (void)state;
  th_need_shared();
  /* Both training steps donate their state: every output but the result tuple's table
   * lives in a parameter's buffer. */
  const char *files[] = {"attention_model.hlo", "hlo_llama3_8b_cp_bf16_1x4.hlo"};
  const uint64_t tables[] = {111 * 8, 46 * 8}; /* and a few scalars (loss, norms) */
  for (size_t i = 0; i < 2; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/hlo/%s", HBM_SHARED_DIR, files[i]);
    hbm_plan_options_t opt = {0};
    hbm_plan_t *p = hbm_plan_file(path, &opt);
    assert_non_null(p);
    const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
    assert_true(s->alias_bytes > 0);
    if (s->output_bytes - s->alias_bytes > tables[i] + 64)
      fail_msg("%s: %llu output bytes not aliased", files[i],
               (unsigned long long)(s->output_bytes - s->alias_bytes));
    hbm_plan_free(p);
  }
}

/* FNV-1a over every buffer's offset, size, live range and flags, and the plan's totals. */
static uint64_t plan_fingerprint(const hbm_plan_t *p) {
  const hbm_profile_t *prof = hbm_plan_profile(p);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  uint64_t h = 0xcbf29ce484222325ull;
  int64_t n = hbm_profile_buffer_count(prof);
  for (int64_t i = 0; i <= n; i++) {
    uint64_t words[5] = {s->temp_bytes, s->peak_bytes, (uint64_t)s->peak_step, 0, 0};
    if (i < n) {
      const hbm_buffer_t *b = hbm_profile_buffer(prof, i);
      words[0] = b->address;
      words[1] = b->size;
      words[2] = (uint64_t)b->start;
      words[3] = (uint64_t)b->end;
      words[4] = b->flags | (uint64_t)b->space << 8 | (uint64_t)b->category << 16;
    }
    for (size_t w = 0; w < 5; w++)
      for (int byte = 0; byte < 8; byte++)
        h = (h ^ ((words[w] >> (8 * byte)) & 0xff)) * 0x100000001b3ull;
  }
  return h;
}

static void plans_are_unchanged(void **state) {
  (void)state;
  th_need_shared();
  static const struct {
    const char *file;
    uint64_t alignment;
    uint64_t fingerprint;
  } expected[] = {
      /* recorded from the planner before its heap simulator was rewritten for speed; the
       * two modules with (synchronous) all-reduces are back at those pins since all-reduce
       * results stopped taking their operand's buffer again: only all-reduce-start is an
       * in-place pair in XLA's CanShareOperandBufferWithUser (XLA's CPU dump of a psum).
       * attention_model's moved when a reducer's tuple stopped defining thread-local values
       * for its elements (XLA's tuple defines its table only: the CPU corpus's argmax
       * reducer, 8 bytes too many before). All but graphsage_tf's moved when the space above
       * the buffers in a temporary's way became one unbounded free chunk, as XLA's
       * MakeFreeChunks has it, instead of a gap up to the heap's current top that best fit
       * could prefer: offsets only, every module's temp size the same */
      {"attention_model.hlo", 1, 0x17c42185b296296eull},
      {"attention_model.hlo", 256, 0x21bc308e9d8205aeull},
      {"graphsage_tf.hlo", 1, 0xbe4e6e506db212e6ull},
      {"graphsage_tf.hlo", 256, 0xeee5fac9396a5a1dull},
      {"hlo_llama3_8b_cp_bf16_1x4.hlo", 1, 0x443e43e0b3922864ull},
      {"hlo_llama3_8b_cp_bf16_1x4.hlo", 256, 0x503424209bda556cull},
      {"ssd_mobilenet_tf.hlo", 1, 0x0904a4b631dd928full},
      {"ssd_mobilenet_tf.hlo", 256, 0xe25d17c93d6d6612ull},
  };
  int changed = 0;
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/hlo/%s", HBM_SHARED_DIR, expected[i].file);
    hbm_plan_options_t opt = {.alignment = expected[i].alignment};
    hbm_plan_t *p = hbm_plan_file(path, &opt);
    if (!p)
      fail_msg("%s: %s", expected[i].file, hbm_last_error());
    uint64_t got = plan_fingerprint(p);
    if (got != expected[i].fingerprint) {
      print_error("%s (alignment %llu): fingerprint 0x%016llxull, expected 0x%016llxull\n",
                  expected[i].file, (unsigned long long)expected[i].alignment,
                  (unsigned long long)got, (unsigned long long)expected[i].fingerprint);
      changed++;
    }
    hbm_plan_free(p);
  }
  assert_int_equal(changed, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_shared_module_plans),
      cmocka_unit_test(aliased_outputs_of_training_steps),
      cmocka_unit_test(plans_are_unchanged),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
