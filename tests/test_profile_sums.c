/* test_profile_sums.c — byte totals that do not fit in 64 bits (issue 26, finding 2). Sizes
 * near 2^62 and 2^63 come from damaged or hostile files (an .hbmtrace, an RMM log, an HLO
 * module); their sums once wrapped to tiny numbers ("peak in use 64B"). Every total now is
 * exact up to HBM_BYTES_MAX = 2^63 - 1 and saturates there, marked overflowed, in the
 * analysis, the text and JSON reports and the planner, which refuses such a module. The
 * expected values are worked out by hand in the comments (Q = 2^62 = 4611686018427387904). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"

#define Q (UINT64_C(1) << 62)
#define MAX_TEXT "9223372036854775807" /* 2^63 - 1 */

/* Four parameters of Q bytes allocated at steps 0-3, then a 64 B temporary at step 4, freed
 * at step 5. Live: Q, 2Q = 2^63, 3Q, 4Q = 2^64, 2^64 + 64, 2^64. In 64 bits 4Q + 64 wraps to
 * 64 ("peak in use 64B"); saturated, every step from 1 on is 2^63 - 1, the first (the peak)
 * being step 1. */
static hbm_profile_t *four_quarters(void) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "quarters");
  assert_non_null(p);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "sim0", 0, 0), 0);
  for (int i = 0; i < 6; i++)
    assert_int_equal(hbm_profile_add_step(p, i * 10, NULL), i);
  hbm_tag_t param = {.op = "w", .group = "g", .category = HBM_CAT_PARAMETER};
  hbm_tag_t temp = {.op = "t", .group = "g", .category = HBM_CAT_TEMPORARY};
  for (int i = 0; i < 4; i++)
    assert_int_equal(hbm_profile_alloc_at(p, i, 0, (uint64_t)i * Q, Q, &param), i);
  assert_int_equal(hbm_profile_alloc_at(p, 4, 0, 0x1000, 64, &temp), 4);
  assert_int_equal(hbm_profile_free_at(p, 5, 0, 0x1000), HBM_OK);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  return p;
}

static void totals_saturate(void **state) {
  (void)state;
  hbm_profile_t *p = four_quarters();
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_non_null(a);
  const hbm_summary_t *s = hbm_analysis_summary(a);
  assert_true(s->overflowed);
  assert_true(s->peak_bytes == HBM_BYTES_MAX);
  assert_int_equal(s->peak_step, 1);
  assert_true(hbm_analysis_bytes_at(a, 0) == Q); /* exact below the limit */
  for (int step = 1; step < 6; step++)
    assert_true(hbm_analysis_bytes_at(a, step) == HBM_BYTES_MAX);
  /* at step 1: the parameters at 0 and Q, 2^63 together */
  assert_true(s->category_bytes[HBM_CAT_PARAMETER] == HBM_BYTES_MAX);
  assert_true(s->argument_bytes == HBM_BYTES_MAX);
  size_t n;
  const hbm_group_total_t *g = hbm_analysis_groups(a, &n);
  assert_int_equal(n, 1);
  assert_true(g[0].bytes == HBM_BYTES_MAX);
  hbm_timeline_point_t pts[6];
  assert_int_equal(hbm_analysis_timeline(a, 0, 6, 6, pts), 6);
  assert_true(pts[4].bytes == HBM_BYTES_MAX && pts[4].unpadded == HBM_BYTES_MAX);
  hbm_analysis_free(a);
  char text[64];
  assert_string_equal(hbm_format_bytes(HBM_BYTES_MAX, text, sizeof text), "≥ 8.00EiB (overflowed)");
  hbm_profile_free(p);
}

/* Just below the limit the sums are exact: Q + (Q - 2) = 2^63 - 2 (64-bit cells). Two
 * buffers of 3Q/2 one after the other add up past the limit (128-bit cells) but are never live
 * together: the peak is 3Q/2 = 6917529027641081856 exactly, nothing overflowed. */
static void exact_up_to_the_limit(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "below");
  hbm_profile_add_space(p, "HBM", "sim0", 0, 0);
  for (int i = 0; i < 4; i++)
    hbm_profile_add_step(p, i, NULL);
  hbm_profile_alloc_at(p, 0, 0, 0, Q, NULL);
  hbm_profile_alloc_at(p, 1, 0, Q, Q - 2, NULL);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_true(hbm_analysis_summary(a)->peak_bytes == UINT64_C(9223372036854775806));
  assert_false(hbm_analysis_summary(a)->overflowed);
  hbm_analysis_free(a);
  hbm_profile_free(p);

  p = hbm_profile_new(HBM_PROFILE_RUNTIME, "apart");
  hbm_profile_add_space(p, "HBM", "sim0", 0, 0);
  for (int i = 0; i < 4; i++)
    hbm_profile_add_step(p, i, NULL);
  hbm_profile_alloc_at(p, 0, 0, 0, Q / 2 * 3, NULL);
  hbm_profile_free_at(p, 1, 0, 0);
  hbm_profile_alloc_at(p, 2, 0, 0, Q / 2 * 3, NULL);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  a = hbm_analyze(p, 0);
  assert_true(hbm_analysis_summary(a)->peak_bytes == UINT64_C(6917529027641081856));
  assert_false(hbm_analysis_summary(a)->overflowed);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

/* Reserved memory: two regions of 3Q/2 grown at steps 0 and 1, [0, 3Q/2) and [3Q/2, 3Q):
 * 3Q reserved at step 1 saturates. A third mapping at the very top of the address space,
 * [2^64 - 4096, +8192), ends past 2^64: its end is the end of the address space, not 4096. A
 * 64 B buffer at 0 at step 1 (the peak): the free range [64, 3Q) of 3Q - 64 bytes is past the
 * limit too, so the largest free block is 2^63 - 1. */
static void reservations_saturate(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "reserved");
  int sp = hbm_profile_add_space(p, "HBM", "sim0", 0, 0);
  for (int i = 0; i < 3; i++)
    hbm_profile_add_step(p, i, NULL);
  hbm_reserve_event_t e[] = {{0, sp, HBM_RESERVE_GROW, 0, Q / 2 * 3},
                             {1, sp, HBM_RESERVE_GROW, Q / 2 * 3, Q / 2 * 3},
                             {2, sp, HBM_RESERVE_MAP, UINT64_MAX - 4095, 8192}};
  for (int i = 0; i < 3; i++)
    assert_int_equal(hbm_profile_add_reserve(p, &e[i]), HBM_OK);
  hbm_profile_alloc_at(p, 1, sp, 0, 64, NULL);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  hbm_analysis_t *a = hbm_analyze(p, sp);
  const hbm_summary_t *s = hbm_analysis_summary(a);
  assert_int_equal(s->peak_step, 1);
  assert_true(s->reserved_at_peak == HBM_BYTES_MAX);
  assert_true(s->peak_reserved_bytes == HBM_BYTES_MAX);
  assert_true(s->largest_free_at_peak == HBM_BYTES_MAX);
  assert_true(s->overflowed);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

static void expect_output(const char *cmd, int status, const char *const *wanted, size_t n) {
  char *out = NULL;
  int rc = th_run(cmd, &out);
  assert_non_null(out);
  if (rc != status)
    fail_msg("%s: exit %d, expected %d: %s", cmd, rc, status, out);
  for (size_t i = 0; i < n; i++)
    if (!strstr(out, wanted[i]))
      fail_msg("%s: expected '%s' in:\n%s", cmd, wanted[i], out);
  free(out);
}

/* `hbm report FILE` and `hbm report --json FILE` on a profile whose peak overflowed. */
static void expect_saturated_report(const char *path, const char *text_line, const char *json) {
  char cmd[8600];
  snprintf(cmd, sizeof cmd, "%s report %s", HBM_BIN, path);
  expect_output(cmd, 0, &text_line, 1);
  snprintf(cmd, sizeof cmd, "%s report --json %s", HBM_BIN, path);
  const char *wanted[] = {"\"peak_bytes\": " MAX_TEXT, "\"overflowed\": true", json};
  expect_output(cmd, 0, wanted, 3);
}

/* The same profile saved as an .hbmtrace and reported by `hbm report`: text and JSON. */
static void hbmtrace_report(void **state) {
  (void)state;
  char path[4200];
  snprintf(path, sizeof path, "%s/quarters.hbmtrace", th_dir);
  hbm_profile_t *p = four_quarters();
  assert_int_equal(hbm_profile_save(p, path), HBM_OK);
  hbm_profile_free(p);
  expect_saturated_report(path, "peak in use      ≥ 8.00EiB (overflowed) at step 1",
                          "\"parameter\": " MAX_TEXT);
}

/* An RMM log of four allocations of Q and one of 64 B: 4Q + 64 wrapped to 64 before. */
static void rmm_log_report(void **state) {
  (void)state;
  char path[4200];
  snprintf(path, sizeof path, "%s/quarters.csv", th_dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "Thread,Time,Action,Pointer,Size,Stream\n");
  for (int i = 0; i < 4; i++)
    fprintf(f, "1,0.%d,allocate,0x%x000,4611686018427387904,0x0\n", i + 1, i + 1);
  fprintf(f, "1,0.5,allocate,0x9000,64,0x0\n");
  fclose(f);
  expect_saturated_report(path, "peak in use      ≥ 8.00EiB (overflowed) at step 1",
                          "\"timeline\"");
}

/* An HLO module with four parameters of f32[2^60] (Q bytes each): the planner refuses it
 * with the bound instead of placing buffers at offsets that wrap. */
static void planner_refuses(void **state) {
  (void)state;
  char path[4200], cmd[8600];
  snprintf(path, sizeof path, "%s/quarters.hlo", th_dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "HloModule quarters\n\nENTRY main {\n");
  for (int i = 0; i < 4; i++)
    fprintf(f, "  p%d = f32[1152921504606846976] parameter(%d)\n", i, i);
  fprintf(f, "  ROOT t = (f32[1152921504606846976], f32[1152921504606846976]) tuple(p0, p1)\n}\n");
  fclose(f);
  const char *why[] = {"the buffers of memory space HBM add up to more than " MAX_TEXT " bytes"};
  snprintf(cmd, sizeof cmd, "%s plan %s", HBM_BIN, path);
  expect_output(cmd, 1, why, 1);
  snprintf(cmd, sizeof cmd, "%s report %s", HBM_BIN, path);
  expect_output(cmd, 1, why, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(totals_saturate),       cmocka_unit_test(exact_up_to_the_limit),
      cmocka_unit_test(reservations_saturate), cmocka_unit_test(hbmtrace_report),
      cmocka_unit_test(rmm_log_report),        cmocka_unit_test(planner_refuses),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
