/* test_hlo_plan.c — the public planner (hbm_plan_*): the peak and the buffers at the peak of
 * small modules checked by hand, the plan as a profile (steps, categories, tags, offsets,
 * spaces by memory colour), padding, XLA's texts (the seed's RESOURCE_EXHAUSTED line, the
 * E1000 report), JSON keys, and refusals of bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

static char *fixture(const char *dir, const char *name) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/%s/%s", HBM_SOURCE_DIR, dir, name);
  return path;
}

static hbm_plan_t *plan(const char *name, uint64_t memory) {
  hbm_plan_options_t opt = {.memory = memory};
  hbm_plan_t *p = hbm_plan_file(fixture("tests/data/hlo", name), &opt);
  if (!p)
    fail_msg("%s: %s", name, hbm_last_error());
  return p;
}

static char *report(const hbm_plan_t *p, bool json) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_int_equal(json ? hbm_plan_report_json(p, f) : hbm_plan_report_text(p, f), HBM_OK);
  fclose(f);
  return text;
}

static const hbm_buffer_t *buffer_labelled(const hbm_profile_t *prof, const char *prefix) {
  for (int64_t i = 0; i < hbm_profile_buffer_count(prof); i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(prof, i);
    if (b->label && strncmp(b->label, prefix, strlen(prefix)) == 0)
      return b;
  }
  fail_msg("no buffer labelled %s", prefix);
  return NULL;
}

static void chain_peak_by_hand(void **state) {
  (void)state;
  hbm_plan_t *p = plan("chain.hlo", 0);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_true(s->argument_bytes == 64);
  assert_true(s->output_bytes == 64);
  assert_true(s->alias_bytes == 0);
  assert_true(s->temp_bytes == 16384); /* a + b + c live at c */
  assert_true(s->temp_unpadded_bytes == 16384);
  /* + parameter 64, constant 4, output 64, the reducer's three f32 values 12 */
  assert_true(s->peak_bytes == 16384 + 144);
  assert_int_equal(s->peak_step, 4);
  assert_string_equal(s->peak_instruction, "c");
  assert_true(s->fragmentation_bytes == 0);
  assert_int_equal(s->fits, 1);
  assert_true(s->n_instructions == 12);
  assert_true(s->n_buffers == 12);
  /* buffers at the peak, through the one analysis module */
  const hbm_profile_t *prof = hbm_plan_profile(p);
  assert_int_equal(hbm_profile_kind(prof), HBM_PROFILE_PLAN);
  assert_string_equal(hbm_profile_name(prof), "chain");
  hbm_analysis_t *a = hbm_analyze(prof, 0);
  const hbm_summary_t *as = hbm_analysis_summary(a);
  assert_true(as->peak_bytes == s->peak_bytes);
  assert_int_equal(as->n_buffers_at_peak, 9);
  size_t n;
  const int64_t *by_size = hbm_analysis_buffers_at_peak_by_size(a, &n);
  assert_int_equal(n, 9);
  const char *largest[] = {"%c = ", "%a = ", "%b = ", "%p = ", "%r = "};
  for (size_t i = 0; i < 5; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(prof, by_size[i]);
    if (strncmp(b->label, largest[i], strlen(largest[i])) != 0)
      fail_msg("buffer %zu at the peak is %s, expected %s", i, b->label, largest[i]);
  }
  hbm_analysis_free(a);
  hbm_plan_free(p);
}

static void chain_profile_tags(void **state) {
  (void)state;
  hbm_plan_t *p = plan("chain.hlo", 0);
  const hbm_profile_t *prof = hbm_plan_profile(p);
  assert_int_equal(hbm_profile_step_count(prof), 9);
  assert_string_equal(hbm_profile_step_label(prof, 0), "p");
  assert_string_equal(hbm_profile_step_label(prof, 4), "c");
  assert_int_equal(hbm_profile_space_count(prof), 1);
  assert_string_equal(hbm_profile_space(prof, 0)->name, "HBM");
  const hbm_buffer_t *a = buffer_labelled(prof, "%a = ");
  assert_true(a->size == 4096 && a->unpadded_size == 4096);
  assert_int_equal(a->start, 2);
  assert_int_equal(a->end, 6);
  assert_true(a->address == 8192);
  assert_int_equal(a->category, HBM_CAT_TEMPORARY);
  assert_int_equal(a->flags, 0);
  assert_string_equal(a->op, "jit(f)/broadcast_in_dim");
  assert_string_equal(a->shape, "f32[64,16]{1,0}");
  assert_string_equal(a->opcode, "broadcast");
  assert_string_equal(a->label, "%a = f32[64,16]{1,0} broadcast(%p)");
  assert_string_equal(a->source, "model.py:7");
  const hbm_buffer_t *c = buffer_labelled(prof, "%c = ");
  assert_true(c->address == 0);
  assert_string_equal(c->op, "jit(f)/concatenate");
  assert_null(c->source);
  const hbm_buffer_t *pa = buffer_labelled(prof, "%p = ");
  assert_int_equal(pa->category, HBM_CAT_PARAMETER);
  assert_true(pa->flags & HBM_BUF_INDEFINITE);
  assert_string_equal(pa->op, "input");
  const hbm_buffer_t *r = buffer_labelled(prof, "%r = ");
  assert_int_equal(r->category, HBM_CAT_OUTPUT);
  assert_true(r->flags & HBM_BUF_INDEFINITE);
  assert_true(r->flags & HBM_BUF_LIVE_OUT);
  assert_string_equal(r->op, "r"); /* no metadata: the instruction's name */
  assert_int_equal(buffer_labelled(prof, "%zero = ")->category, HBM_CAT_CONSTANT);
  assert_int_equal(buffer_labelled(prof, "%sum = ")->category, HBM_CAT_THREAD_LOCAL);
  /* allocation order is program order */
  for (int64_t i = 1; i < hbm_profile_buffer_count(prof); i++)
    assert_true(hbm_profile_buffer(prof, i)->id > hbm_profile_buffer(prof, i - 1)->id);
  hbm_plan_free(p);
}

static void padding_and_memory_spaces(void **state) {
  (void)state;
  hbm_plan_t *p = plan("layouts.hlo", 0);
  const hbm_profile_t *prof = hbm_plan_profile(p);
  const hbm_buffer_t *par = buffer_labelled(prof, "%p = ");
  assert_true(par->size == 4096 && par->unpadded_size == 1200);
  assert_string_equal(par->shape, "f32[3,100]{1,0:T(8,128)}");
  const hbm_buffer_t *sc = buffer_labelled(prof, "%scalar = ");
  assert_true(sc->size == 512 && sc->unpadded_size == 4);
  const hbm_buffer_t *bf = buffer_labelled(prof, "%bf = ");
  assert_true(bf->size == 2048 && bf->unpadded_size == 768);
  assert_true(buffer_labelled(prof, "%packed = ")->size == 500);
  /* S(1): its own space */
  assert_int_equal(hbm_profile_space_count(prof), 2);
  const hbm_buffer_t *fast = buffer_labelled(prof, "%fast = ");
  assert_int_equal(fast->space, 1);
  assert_string_equal(hbm_profile_space(prof, 1)->name, "VMEM");
  assert_int_equal(hbm_profile_space(prof, 1)->color, 1);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_true(s->argument_bytes == 4096);
  hbm_plan_free(p);
}

static void the_seed_error(void **state) {
  (void)state;
  hbm_plan_options_t opt = {.memory = 17179869184ull};
  hbm_plan_t *p = hbm_plan_file(fixture("examples", "seed_oom.hlo"), &opt);
  assert_non_null(p);
  assert_int_equal(hbm_plan_get_summary(p)->fits, 0);
  char *text = report(p, false);
  const char *expect =
      "RESOURCE_EXHAUSTED: Allocation (size=107374182400) would exceed memory "
      "(size=17179869184) :: #allocation1 [shape = 'u8[327680,327680]{1,0:T(8,128)(4,1)}', "
      "space=hbm, size = 0xffffffffffffffff, tag = 'output of xor_convert_fusion@{}'] :: "
      "<no-hlo-instruction>\n";
  if (strncmp(text, expect, strlen(expect)) != 0)
    fail_msg("got:\n%.400s", text);
  assert_non_null(strstr(text, "larger than the whole device"));
  assert_non_null(strstr(text, "Total hbm usage >= 500.00G:"));
  free(text);
  hbm_plan_free(p);
}

static void e1000_text(void **state) {
  (void)state;
  /* 16528 bytes needed, 10000 available, the largest buffer 8192: out of memory, but no
   * single buffer is too large. */
  hbm_plan_t *p = plan("chain.hlo", 10000);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_int_equal(s->fits, 0);
  char *text = report(p, false);
  const char *lines[] = {
      "Ran out of memory in memory space hbm. Used 16.1K of 9.8K hbm. Exceeded hbm capacity "
      "by 6.4K.\n\nTotal hbm usage >= 16.1K:\n"
      "    reserved             0B\n"
      "    program           16.1K\n"
      "    arguments           64B\n\n"
      "Output size 64B; shares 0B with arguments.\n\n"
      "Program hbm requirement 16.1K:\n"
      "    global              16B\n"
      "    output              64B\n"
      "    HLO temp          16.0K (100.0% utilization: Unpadded (16.0K) Padded (16.0K), "
      "0.0% fragmentation (0B))\n\n"
      "  Largest program allocations in hbm:\n\n"
      "  1. Size: 8.0K\n"
      "     Operator: op_name=\"jit(f)/concatenate\"\n"
      "     Shape: f32[32,64]{1,0}\n"
      "     Unpadded size: 8.0K\n"
      "     XLA label: %c = f32[32,64]{1,0} concatenate(%b, %b)\n"
      "     Allocation type: HLO temp\n"
      "     ==========================\n\n"
      "  2. Size: 4.0K\n"
      "     Operator: op_type=\"BroadcastTo\" op_name=\"jit(f)/broadcast_in_dim\" "
      "source_file=\"model.py\" source_line=7\n",
      /* one entry of two lines (the brackets say the concatenation is meant) */
      ("hbm's diagnosis (chain, 12 instructions, 12 buffers):\n"
       "  - The peak, 16.1K, is at c (step 4 of 9)"),
      "  - It needs 16.1K but the device has 9.8K: 6.4K too much.\n",
      "hbm plan --remat",
  };
  for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
    if (!strstr(text, lines[i]))
      fail_msg("missing:\n%s\nin:\n%s", lines[i], text);
  free(text);
  hbm_plan_free(p);
  /* enough memory: only the report, no "Ran out" */
  p = plan("chain.hlo", 1 << 20);
  text = report(p, false);
  assert_null(strstr(text, "Ran out of memory"));
  assert_non_null(strstr(text, "Total hbm usage >= 16.1K:"));
  free(text);
  hbm_plan_free(p);
}

static void reserved_counts(void **state) {
  (void)state;
  hbm_plan_options_t opt = {.memory = 20000, .reserved = 4096};
  hbm_plan_t *p = hbm_plan_file(fixture("tests/data/hlo", "chain.hlo"), &opt);
  assert_int_equal(hbm_plan_get_summary(p)->fits, 0);
  char *text = report(p, false);
  assert_non_null(strstr(text, "    reserved           4.0K\n"));
  free(text);
  hbm_plan_free(p);
  opt.reserved = 0;
  p = hbm_plan_file(fixture("tests/data/hlo", "chain.hlo"), &opt);
  assert_int_equal(hbm_plan_get_summary(p)->fits, 1);
  hbm_plan_free(p);
}

static void json_keys(void **state) {
  (void)state;
  hbm_plan_t *p = plan("io_alias.hlo", 0);
  char *text = report(p, true);
  json_error_t err;
  json_t *j = json_loads(text, 0, &err);
  if (!j)
    fail_msg("bad JSON: %s\n%s", err.text, text);
  assert_int_equal(json_integer_value(json_object_get(j, "argument_bytes")), 4096);
  assert_int_equal(json_integer_value(json_object_get(j, "output_bytes")), 2048 + 2048 + 16);
  assert_int_equal(json_integer_value(json_object_get(j, "alias_bytes")), 2048);
  assert_int_equal(json_integer_value(json_object_get(j, "temp_bytes")), 0);
  assert_true(json_is_integer(json_object_get(j, "peak_bytes")));
  assert_true(json_is_string(json_object_get(j, "peak_instruction")));
  json_t *at = json_object_get(j, "buffers_at_peak");
  assert_true(json_is_array(at) && json_array_size(at) == 4);
  json_t *b = json_array_get(at, 0);
  const char *keys[] = {"size", "unpadded_size", "op", "shape", "category", "opcode", "label"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (!json_object_get(b, keys[i]))
      fail_msg("buffers_at_peak[0] has no %s", keys[i]);
  json_decref(j);
  free(text);
  hbm_plan_free(p);
}

static void take_profile_and_module_text(void **state) {
  (void)state;
  hbm_plan_t *p = plan("chain.hlo", 0);
  char *text = hbm_plan_module_text(p);
  assert_non_null(strstr(text, "HloModule chain"));
  free(text);
  hbm_profile_t *prof = hbm_plan_take_profile(p);
  assert_non_null(prof);
  assert_null(hbm_plan_take_profile(p));
  hbm_plan_free(p);
  assert_int_equal(hbm_profile_step_count(prof), 9);
  hbm_profile_free(prof);
}

static void bad_input(void **state) {
  (void)state;
  hbm_plan_options_t opt = {0};
  assert_null(
      hbm_plan_text("HloModule m\nENTRY e {\n  p = f32[2] negate(q)\n}\n", 44, "bad.hlo", &opt));
  assert_int_equal(hbm_last_status(), HBM_ERR_PARSE);
  assert_non_null(strstr(hbm_last_error(), "bad.hlo:3:"));
  assert_null(hbm_plan_file("/nonexistent/module.hlo", &opt));
  assert_int_equal(hbm_last_status(), HBM_ERR_IO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chain_peak_by_hand),
      cmocka_unit_test(chain_profile_tags),
      cmocka_unit_test(padding_and_memory_spaces),
      cmocka_unit_test(the_seed_error),
      cmocka_unit_test(e1000_text),
      cmocka_unit_test(reserved_counts),
      cmocka_unit_test(json_keys),
      cmocka_unit_test(take_profile_and_module_text),
      cmocka_unit_test(bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
