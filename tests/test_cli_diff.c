/* test_cli_diff.c — `hbm diff A B`: on pairs of real profiles from ../shared/real (PyTorch
 * snapshots of one model at context 128 and 256, training and inference; two XProf programs
 * of one file; two XProf files) both peaks equal what `hbm report --json` gives for each and
 * every table of `--json` adds up to the change; a plan against a snapshot still compares and
 * says what does not; the selectors (#SPACE, @STEP between step markers, @FROM:TO) on a
 * profile made here, with hand-computed peaks; bad input gives an exit status and a message
 * naming what is wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"

#define TORCH HBM_SHARED_DIR "/real/torch/Wedsonlin_assignment2-systems__results_medium_"
#define XPROF HBM_SHARED_DIR "/real/xprof/AMD-AGI_TraceLens__jax08_"

static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *fmt, ...) {
  char cmd[8192];
  int n = snprintf(cmd, sizeof cmd, "%s ", HBM_BIN);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
  va_end(ap);
  return th_run(cmd, out);
}

static json_t *run_json(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *run_json(const char *fmt, ...) {
  char args[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  char cmd[8192], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", HBM_BIN, args);
  int rc = th_run(cmd, &out);
  if (rc != 0)
    fail_msg("%s: exit %d: %.500s", cmd, rc, out ? out : "");
  json_error_t err;
  json_t *j = json_loads(out, 0, &err);
  if (!j)
    fail_msg("%s: not JSON (%s): %.300s", cmd, err.text, out);
  free(out);
  return j;
}

static json_int_t int_at(json_t *o, const char *key) {
  return json_integer_value(json_object_get(o, key));
}

/* Every by_* table's deltas sum to "change". */
static void assert_rows_add_up(json_t *d) {
  const char *key;
  json_t *rows;
  int tables = 0;
  json_object_foreach(d, key, rows) {
    if (strncmp(key, "by_", 3) || !json_is_array(rows))
      continue;
    json_int_t sum = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) sum += int_at(row, "delta");
    if (sum != int_at(d, "change"))
      fail_msg("%s adds up to %lld, the change is %lld", key, (long long)sum,
               (long long)int_at(d, "change"));
    tables++;
  }
  assert_int_equal(tables, HBM_DIFF_BY_COUNT);
}

/* The peak of `space` (device) in `hbm report --json PATH`; the top level's when NULL. */
static json_int_t report_peak(const char *path, const char *device) {
  json_t *r = run_json("report --json '%s'", path);
  json_int_t peak = int_at(r, "peak_bytes");
  if (device) {
    size_t i;
    json_t *s;
    peak = -1;
    json_array_foreach(json_object_get(r, "spaces"), i, s) {
      if (!strcmp(json_string_value(json_object_get(s, "device")), device) &&
          !strcmp(json_string_value(json_object_get(s, "space")), "HBM"))
        peak = int_at(s, "peak_bytes");
    }
  }
  json_decref(r);
  return peak;
}

static void check_pair(const char *a, const char *device_a, const char *b, const char *device_b) {
  char sa[4200], sb[4200];
  snprintf(sa, sizeof sa, "%s%s%s", a, device_a ? "#" : "", device_a ? device_a : "");
  snprintf(sb, sizeof sb, "%s%s%s", b, device_b ? "#" : "", device_b ? device_b : "");
  json_t *d = run_json("diff --json '%s' '%s'", sa, sb);
  json_int_t pa = report_peak(a, device_a), pb = report_peak(b, device_b);
  assert_int_equal(int_at(json_object_get(d, "a"), "peak_bytes"), pa);
  assert_int_equal(int_at(json_object_get(d, "b"), "peak_bytes"), pb);
  assert_int_equal(int_at(d, "change"), pb - pa);
  assert_rows_add_up(d);
  json_decref(d);
}

static void torch_context_lengths(void **state) {
  (void)state;
  th_need_shared();
  check_pair(TORCH "128_training_memory_snapshot__0db7d8c.pickle", NULL,
             TORCH "256_training_memory_snapshot__8a4284c.pickle", NULL);
  check_pair(TORCH "128_inference_memory_snapshot__77da8fe.pickle", NULL,
             TORCH "256_inference_memory_snapshot__e0143d8.pickle", NULL);
  /* The text says the same change: 9103544320 - 7013335044 = 2090209276 bytes = +1.95GiB. */
  char *out;
  assert_int_equal(run(&out, "diff '%s' '%s'", TORCH "128_training_memory_snapshot__0db7d8c.pickle",
                       TORCH "256_training_memory_snapshot__8a4284c.pickle"),
                   0);
  assert_non_null(strstr(out, "change of the peak: +1.95GiB (+29.8%)"));
  assert_non_null(strstr(out, "by source"));
  free(out);
}

static void xprof_programs(void **state) {
  (void)state;
  th_need_shared();
  check_pair(XPROF "gemm__tw003.xplane.pb", "jit_dot(49)", XPROF "gemm__tw003.xplane.pb",
             "jit_dot(79)");
  check_pair(XPROF "gemm__tw003.xplane.pb", NULL, XPROF "attention__tw003.xplane.pb", NULL);
  /* A program picked by a part of its name when only one program has it. */
  json_t *d = run_json("diff --json '%s#dot(49)' '%s#0'", XPROF "gemm__tw003.xplane.pb",
                       XPROF "gemm__tw003.xplane.pb");
  assert_string_equal(json_string_value(json_object_get(json_object_get(d, "a"), "device")),
                      "jit_dot(49)");
  json_decref(d);
}

/* A plan (an XProf program) against a PyTorch snapshot: compared, and the notes say what is
 * not comparable. */
static void different_kinds(void **state) {
  (void)state;
  th_need_shared();
  check_pair(XPROF "gemm__tw003.xplane.pb", "jit_dot(49)",
             TORCH "128_inference_memory_snapshot__77da8fe.pickle", NULL);
  json_t *d = run_json("diff --json '%s#jit_dot(49)' '%s'", XPROF "gemm__tw003.xplane.pb",
                       TORCH "128_inference_memory_snapshot__77da8fe.pickle");
  json_t *notes = json_object_get(d, "notes");
  assert_true(json_array_size(notes) >= 2);
  assert_non_null(strstr(json_string_value(json_array_get(notes, 0)), "A is a compile-time plan"));
  json_decref(d);
}

/* A runtime profile of 12 events in two training steps, each step marked:
 *   step 1: events 0-5:  alloc 100 (a), alloc 200 (b), free a, alloc 50 (c), free b, free c
 *   step 2: events 6-11: alloc 100 (a), alloc 400 (b), free a, alloc 50 (c), free b, free c
 * Peaks (hand sums): step 1 = 300 (a + b), step 2 = 500; steps 0-3 = 300; all = 500. */
static char *write_stepped_profile(void) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "steps");
  assert_int_equal(hbm_profile_add_space(p, "HBM", "sim0", 0, 0), 0);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "sim1", 0, 0), 1);
  hbm_tag_t ta = {.op = "a"}, tb = {.op = "b"}, tc = {.op = "c"};
  int64_t t = 0;
  for (int step = 1; step <= 2; step++) {
    hbm_marker_t begin = {
        .step = hbm_profile_step_count(p), .kind = HBM_MARKER_STEP_BEGIN, .value = step};
    assert_int_equal(hbm_profile_add_marker(p, &begin), HBM_OK);
    uint64_t b_size = step == 1 ? 200 : 400;
    assert_true(hbm_profile_alloc_at(p, hbm_profile_add_step(p, t++, NULL), 0, 0x100, 100, &ta) >=
                0);
    assert_true(
        hbm_profile_alloc_at(p, hbm_profile_add_step(p, t++, NULL), 0, 0x200, b_size, &tb) >= 0);
    assert_int_equal(hbm_profile_free_at(p, hbm_profile_add_step(p, t++, NULL), 0, 0x100), HBM_OK);
    assert_true(hbm_profile_alloc_at(p, hbm_profile_add_step(p, t++, NULL), 0, 0x900, 50, &tc) >=
                0);
    assert_int_equal(hbm_profile_free_at(p, hbm_profile_add_step(p, t++, NULL), 0, 0x200), HBM_OK);
    assert_int_equal(hbm_profile_free_at(p, hbm_profile_add_step(p, t++, NULL), 0, 0x900), HBM_OK);
    hbm_marker_t end = {
        .step = hbm_profile_step_count(p), .kind = HBM_MARKER_STEP_END, .value = step};
    assert_int_equal(hbm_profile_add_marker(p, &end), HBM_OK);
  }
  assert_true(hbm_profile_alloc_at(p, 0, 1, 0x10, 7, NULL) >= 0); /* sim1: one small buffer */
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  size_t len = strlen(th_dir) + 32;
  char *path = malloc(len);
  snprintf(path, len, "%s/steps.hbmtrace", th_dir);
  assert_int_equal(hbm_profile_save(p, path), HBM_OK);
  hbm_profile_free(p);
  return path;
}

static void selectors(void **state) {
  (void)state;
  char *path = write_stepped_profile();
  json_t *d = run_json("diff --json '%s@1' '%s@2'", path, path);
  assert_int_equal(int_at(json_object_get(d, "a"), "peak_bytes"), 300);
  assert_int_equal(int_at(json_object_get(d, "b"), "peak_bytes"), 500);
  assert_int_equal(int_at(d, "change"), 200);
  assert_rows_add_up(d);
  /* b grew from 200 to 400: the only row. */
  json_t *rows = json_object_get(d, "by_op");
  assert_int_equal(json_array_size(rows), 1);
  assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 0), "key")), "b");
  assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 0), "reason")),
                      "grew");
  assert_non_null(strstr(json_string_value(json_object_get(json_object_get(d, "a"), "label")),
                         "training step 1 = steps 0-6"));
  json_decref(d);
  d = run_json("diff --json '%s@0:3' '%s'", path, path);
  assert_int_equal(int_at(json_object_get(d, "a"), "peak_bytes"), 300);
  assert_int_equal(int_at(json_object_get(d, "b"), "peak_bytes"), 500);
  json_decref(d);
  d = run_json("diff --json '%s#sim1' '%s#0@2'", path, path);
  assert_int_equal(int_at(json_object_get(d, "a"), "peak_bytes"), 7);
  assert_string_equal(json_string_value(json_object_get(json_object_get(d, "a"), "device")),
                      "sim1");
  assert_int_equal(int_at(json_object_get(d, "b"), "peak_bytes"), 500);
  json_decref(d);
  free(path);
}

static void bad_input(void **state) {
  (void)state;
  char *path = write_stepped_profile(), *out;
  assert_int_equal(run(&out, "diff '%s#cuda:7' '%s'", path, path), 1);
  assert_non_null(strstr(out, "#cuda:7: no such memory space (its memory spaces: 0: HBM on sim0, "
                              "1: HBM on sim1)"));
  free(out);
  assert_int_equal(run(&out, "diff '%s@9' '%s'", path, path), 1);
  assert_non_null(strstr(out, "the profile marks no training step 9"));
  free(out);
  assert_int_equal(run(&out, "diff '%s@x' '%s'", path, path), 2);
  assert_non_null(strstr(out, "expected @STEP (a training step) or @FROM:TO"));
  free(out);
  assert_int_equal(run(&out, "diff '%s@5:2' '%s'", path, path), 2);
  assert_non_null(strstr(out, "FROM < TO <= 12"));
  free(out);
  assert_int_equal(run(&out, "diff '%s' %s/missing.hbmtrace", path, th_dir), 1);
  assert_non_null(strstr(out, "missing.hbmtrace"));
  free(out);
  assert_int_equal(run(&out, "diff '%s'", path), 2);
  assert_non_null(strstr(out, "two profiles are needed"));
  free(out);
  /* Not a profile at all: the loader's message, exit 1. */
  char junk[4200];
  snprintf(junk, sizeof junk, "%s/junk.bin", th_dir);
  assert_int_equal(th_write(junk, "\x01\x02\x03garbage", 10), 0);
  assert_int_equal(run(&out, "diff '%s' '%s'", junk, path), 1);
  assert_non_null(strstr(out, "junk.bin"));
  free(out);
  free(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(torch_context_lengths),
      cmocka_unit_test(xprof_programs),
      cmocka_unit_test(different_kinds),
      cmocka_unit_test(selectors),
      cmocka_unit_test(bad_input),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
