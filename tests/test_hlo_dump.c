/* test_hlo_dump.c — XLA's own dumps (--xla_dump_to) read into plans: buffer assignments in
 * the current form (" value: <id name @color> (size=,offset=)"), with an HloLiveRange
 * section, and in the old LogicalBuffer form ("name[](#id @c) [offset,size]"); memory usage
 * reports in the current per-memory-space form and the old "Allocations sorted by size" form.
 * The fixtures in tests/data/hlo/dumps/ follow XLA's printing code exactly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

static hbm_plan_t *plan_dump(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/data/hlo/dumps/%s", HBM_SOURCE_DIR, name);
  hbm_plan_options_t opt = {0};
  hbm_plan_t *p = hbm_plan_file(path, &opt);
  if (!p)
    fail_msg("%s: %s", name, hbm_last_error());
  return p;
}

static const hbm_buffer_t *buffer_op(const hbm_profile_t *prof, const char *op) {
  for (int64_t i = 0; i < hbm_profile_buffer_count(prof); i++)
    if (hbm_profile_buffer(prof, i)->op && !strcmp(hbm_profile_buffer(prof, i)->op, op))
      return hbm_profile_buffer(prof, i);
  fail_msg("no buffer %s", op);
  return NULL;
}

static void buffer_assignment_current_form(void **state) {
  (void)state;
  hbm_plan_t *p = plan_dump("module_0001.jit_step.gpu_after_optimizations-buffer-assignment.txt");
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  const hbm_profile_t *prof = hbm_plan_profile(p);
  assert_string_equal(hbm_profile_name(prof), "jit_step");
  assert_true(s->argument_bytes == 307200000);
  assert_true(s->output_bytes == 307200000); /* the parameter is also the output */
  assert_true(s->alias_bytes == 307200000);
  assert_true(s->temp_bytes == 614400000);
  /* No live ranges: values in id order, each live until its bytes are reused. fusion.2
   * reuses input_concatenate_fusion's offset 0, so two temporaries are live at most. */
  assert_int_equal(hbm_profile_step_count(prof), 3);
  assert_string_equal(hbm_profile_step_label(prof, 0), "input_concatenate_fusion");
  const hbm_buffer_t *first = buffer_op(prof, "input_concatenate_fusion");
  assert_int_equal(first->start, 0);
  assert_int_equal(first->end, 2);
  assert_int_equal(buffer_op(prof, "fusion.1")->end, 3);
  assert_true(buffer_op(prof, "fusion.1")->address == 307200000);
  assert_true(s->peak_bytes == 614400000 + 307200000 + 4 + 4);
  assert_int_equal(s->peak_step, 1);
  const hbm_buffer_t *arg = buffer_op(prof, "Arg_0.1");
  assert_int_equal(arg->category, HBM_CAT_PARAMETER);
  assert_true(arg->flags & HBM_BUF_INDEFINITE);
  assert_string_equal(arg->shape, "f32[100000,768]{1,0}");
  assert_int_equal(buffer_op(prof, "add.2")->category, HBM_CAT_THREAD_LOCAL);
  assert_int_equal(buffer_op(prof, "constant.4")->category, HBM_CAT_CONSTANT);
  assert_non_null(strstr(hbm_profile_meta(prof, "live_ranges"), "reconstructed"));
  hbm_plan_free(p);
}

static void buffer_assignment_with_live_ranges(void **state) {
  (void)state;
  hbm_plan_t *p = plan_dump("module_0002.jit_scan.gpu_after_optimizations-buffer-assignment.txt");
  const hbm_profile_t *prof = hbm_plan_profile(p);
  assert_int_equal(hbm_profile_step_count(prof), 6);
  assert_string_equal(hbm_profile_step_label(prof, 5), "tuple.3");
  /* "input_concatenate_fusion{}:2-3": live at steps 2 and 3 */
  const hbm_buffer_t *b = buffer_op(prof, "input_concatenate_fusion");
  assert_int_equal(b->start, 2);
  assert_int_equal(b->end, 4);
  assert_int_equal(buffer_op(prof, "fusion.2")->start, 4);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_int_equal(s->peak_step, 3);
  assert_string_equal(s->peak_instruction, "fusion.1");
  assert_non_null(strstr(hbm_profile_meta(prof, "live_ranges"), "HloLiveRange"));
  hbm_plan_free(p);
}

static void buffer_assignment_old_form(void **state) {
  (void)state;
  hbm_plan_t *p =
      plan_dump("module_0003.cluster_0.5.cpu_after_optimizations-buffer-assignment.txt");
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  const hbm_profile_t *prof = hbm_plan_profile(p);
  assert_string_equal(hbm_profile_name(prof), "cluster_0.5");
  assert_true(s->argument_bytes == 400);
  assert_true(s->output_bytes == 400);
  assert_true(s->temp_bytes == 1024);
  /* exp.1 [0,400) dies when tanh.1 takes [0,512); neg.1 sits at 512 throughout */
  assert_int_equal(buffer_op(prof, "exp.1")->end, 2);
  assert_true(buffer_op(prof, "neg.1")->address == 512);
  assert_true(s->peak_bytes == 400 + 400 + 400 + 512);
  assert_true(s->fragmentation_bytes == 1024 - 912);
  hbm_plan_free(p);
}

static void memory_usage_report_current_form(void **state) {
  (void)state;
  hbm_plan_t *p =
      plan_dump("module_0004.jit_train.tpu_after_optimizations-memory-usage-report.txt");
  const hbm_profile_t *prof = hbm_plan_profile(p);
  assert_string_equal(hbm_profile_name(prof), "jit_train");
  assert_int_equal(hbm_profile_space_count(prof), 2);
  assert_string_equal(hbm_profile_space(prof, 1)->name, "Host");
  assert_int_equal(hbm_profile_space(prof, 1)->color, 5);
  const hbm_buffer_t *b = buffer_op(prof, "3 values at offset 0");
  assert_true(b->size == 8u << 20);
  assert_string_equal(b->shape, "f32[8,256,1024], 2×bf16[8,256,2048]");
  const hbm_buffer_t *tiled = buffer_op(prof, "2 values at offset 12582912");
  assert_true(tiled->address == 12582912);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_true(s->temp_bytes == 19660800);
  assert_true(s->peak_bytes == 19660800);
  hbm_plan_free(p);
}

static void memory_usage_report_old_form(void **state) {
  (void)state;
  hbm_plan_t *p = plan_dump("module_0005.jit_step.gpu_after_optimizations-memory-usage-report.txt");
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  /* sizes are printed rounded to 0.01 MiB */
  assert_true(s->argument_bytes > 307190000 && s->argument_bytes < 307210000);
  assert_true(s->alias_bytes == s->argument_bytes);
  assert_true(s->temp_bytes > 614390000 && s->temp_bytes < 614410000);
  const hbm_profile_t *prof = hbm_plan_profile(p);
  assert_int_equal(hbm_profile_buffer_count(prof), 5);
  hbm_plan_free(p);
}

static void malformed_dumps(void **state) {
  (void)state;
  static const struct {
    const char *text, *expect;
  } cases[] = {
      {"BufferAssignment:\nallocation x: size 4:\n", "bad.txt:2:12: expected 'allocation N:'"},
      {"allocation 0: size 4, constant:\n value: <3 c @0> (size=4,offset=zz): f32[]\n",
       "bad.txt:2:33: expected an offset"},
      {"allocation 0: parameter 0:\n", "expected 'size N' in the allocation header"},
      {"BufferAssignment:\n\nTotal bytes used: 0 (0B)\n", "expected an allocation"},
      {"Memory Space: default (color=0)\nTotal bytes: 4 (4B)\n  4B(100%); huge; 0; 1; f32[]\n",
       "bad.txt:3:13: expected a size such as 1.00MiB"},
      {"allocation 0: size 8, preallocated-temp:\n value: <1 a @0> (size=8,offset=0): f32[2]\n"
       "HloLiveRange (max 1):\n  InstructionSequence:\n    no colon here\n",
       "expected 'N:instruction'"},
  };
  hbm_plan_options_t opt = {0};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hbm_plan_t *p = hbm_plan_text(cases[i].text, strlen(cases[i].text), "bad.txt", &opt);
    if (p)
      fail_msg("case %zu was accepted", i);
    if (!strstr(hbm_last_error(), cases[i].expect))
      fail_msg("case %zu: got '%s', expected '%s'", i, hbm_last_error(), cases[i].expect);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(buffer_assignment_current_form),
      cmocka_unit_test(buffer_assignment_with_live_ranges),
      cmocka_unit_test(buffer_assignment_old_form),
      cmocka_unit_test(memory_usage_report_current_form),
      cmocka_unit_test(memory_usage_report_old_form),
      cmocka_unit_test(malformed_dumps),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
