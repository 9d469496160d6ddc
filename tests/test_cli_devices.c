/* test_cli_devices.c — many devices, one view: `hbm report DIR` on a folder of per-rank
 * profiles prints the device summary first (the largest named, median, smallest, spread, and
 * what the largest holds beyond the median, attributed as `hbm diff` does); `--json` carries
 * it under "devices". Ranks made here with hand-computed peaks, and a folder of real PyTorch
 * snapshots from ../shared/real (expected figures: `hbm report --json` of each file alone). A
 * single device gets no summary. */
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

#define MIB (1024 * 1024)

static json_t *report_json(const char *path) {
  char cmd[8192], *out = NULL;
  snprintf(cmd, sizeof cmd, "'%s' report --json '%s' 2>/dev/null", HBM_BIN, path);
  int rc = th_run(cmd, &out);
  if (rc != 0)
    fail_msg("%s: exit %d", cmd, rc);
  json_t *j = json_loads(out, 0, NULL);
  if (!j)
    fail_msg("%s: not JSON: %.300s", cmd, out);
  free(out);
  return j;
}

static json_int_t int_at(json_t *o, const char *key) {
  return json_integer_value(json_object_get(o, key));
}

/* One rank: a runtime profile of one GPU whose buffers are all live at the end. */
static void write_rank(const char *dir, int rank, const char *const *ops, const uint64_t *sizes,
                       size_t n) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "rank");
  assert_int_equal(hbm_profile_add_space(p, "HBM", "cuda:0", 0, 0), 0);
  for (size_t i = 0; i < n; i++) {
    hbm_tag_t tag = {.op = ops[i]};
    int64_t step = hbm_profile_add_step(p, (int64_t)i, NULL);
    assert_true(hbm_profile_alloc_at(p, step, 0, 0x1000 * (i + 1), sizes[i], &tag) >= 0);
  }
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  char path[4200];
  assert_true(snprintf(path, sizeof path, "%s/rank%d.hbmtrace", dir, rank) < (int)sizeof path);
  assert_int_equal(hbm_profile_save(p, path), HBM_OK);
  hbm_profile_free(p);
}

/* In MiB: rank0: a 6 + b 4 = 10; rank1: a 6 + b 4 + c 5 = 15; rank2: a 6 + b 6 = 12. Largest
 * rank1, median rank2 (the middle of 10, 12, 15), smallest rank0, spread 5 (3 = 25% over the
 * median). Rank1 over rank2: +3 = c only at the largest's peak +5, b shrank -2 (the
 * two peaks compared: rank2 has no c at all, but the summary reads only the peaks). */
static void made_ranks(void **state) {
  (void)state;
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/ranks", th_dir);
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  assert_int_equal(th_run(cmd, NULL), 0);
  const char *ab[] = {"a", "b"}, *abc[] = {"a", "b", "c"};
  write_rank(dir, 0, ab, (uint64_t[]){6 * MIB, 4 * MIB}, 2);
  write_rank(dir, 1, abc, (uint64_t[]){6 * MIB, 4 * MIB, 5 * MIB}, 3);
  write_rank(dir, 2, ab, (uint64_t[]){6 * MIB, 6 * MIB}, 2);
  char *out = NULL;
  snprintf(cmd, sizeof cmd, "'%s' report '%s' --width 80", HBM_BIN, dir);
  assert_int_equal(th_run(cmd, &out), 0);
  const char *want = "== 3 devices ==\n"
                     "  largest     15.00MiB  rank1.hbmtrace cuda:0\n"
                     "  median      12.00MiB  rank2.hbmtrace cuda:0\n"
                     "  smallest    10.00MiB  rank0.hbmtrace cuda:0\n"
                     "  spread       5.00MiB  (largest - smallest, 25.0% over the median)\n";
  if (strncmp(out, want, strlen(want)))
    fail_msg("got:\n%.600s", out);
  assert_non_null(strstr(out, "what the largest holds at its peak beyond the median's (+3.00MiB"));
  assert_non_null(strstr(out, "+5.00MiB     only at the largest's peak   c\n"));
  assert_non_null(strstr(out, "-2.00MiB     shrank                       b\n"));
  free(out);
  json_t *j = report_json(dir);
  json_t *d = json_object_get(j, "devices");
  assert_int_equal(int_at(d, "count"), 3);
  assert_int_equal(int_at(d, "spread_bytes"), 5 * MIB);
  assert_int_equal(int_at(json_object_get(d, "largest"), "peak_bytes"), 15 * MIB);
  assert_non_null(
      strstr(json_string_value(json_object_get(json_object_get(d, "largest"), "profile")),
             "rank1.hbmtrace"));
  assert_int_equal(int_at(json_object_get(d, "median"), "peak_bytes"), 12 * MIB);
  json_t *diff = json_object_get(d, "difference");
  assert_int_equal(int_at(diff, "change"), 3 * MIB);
  assert_int_equal(json_array_size(json_object_get(diff, "by_op")), 2);
  json_decref(j);
  /* One rank alone: no summary. */
  char one[4300];
  snprintf(one, sizeof one, "%s/rank0.hbmtrace", dir);
  j = report_json(one);
  assert_null(json_object_get(j, "devices"));
  json_decref(j);
}

static const char *const snapshots[] = {
    "kkaitlyn111_cs336-a2-systems__memory_files_memory_ctx128_forward__9199557.pickle",
    "kkaitlyn111_cs336-a2-systems__memory_files_memory_ctx512_forward___b9620cc.pickle",
    "kkaitlyn111_cs336-a2-systems__memory_files_memory_ctx256_forward_mixed__73107f1.pickle",
};

/* Three real snapshots as ranks 0-2 of one run (a folder of them). */
static void real_rank_snapshots(void **state) {
  (void)state;
  th_need_shared();
  char dir[4200], cmd[9000];
  snprintf(dir, sizeof dir, "%s/snapshots", th_dir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  assert_int_equal(th_run(cmd, NULL), 0);
  json_int_t peaks[3], lo = -1, hi = -1;
  int largest = 0;
  for (int i = 0; i < 3; i++) {
    char src[4200], dst[4300];
    snprintf(src, sizeof src, "%s/real/torch/%s", HBM_SHARED_DIR, snapshots[i]);
    snprintf(dst, sizeof dst, "%s/rank%d.pickle", dir, i);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
    assert_int_equal(th_run(cmd, NULL), 0);
    json_t *one = report_json(dst);
    peaks[i] = int_at(one, "peak_bytes");
    json_decref(one);
    if (lo < 0 || peaks[i] < lo)
      lo = peaks[i];
    if (peaks[i] > hi)
      hi = peaks[i], largest = i;
  }
  json_t *j = report_json(dir);
  json_t *d = json_object_get(j, "devices");
  assert_int_equal(int_at(d, "count"), 3);
  assert_int_equal(int_at(json_object_get(d, "largest"), "peak_bytes"), hi);
  char label[64];
  snprintf(label, sizeof label, "rank%d.pickle cuda:0", largest);
  assert_string_equal(json_string_value(json_object_get(json_object_get(d, "largest"), "label")),
                      label);
  assert_int_equal(int_at(d, "spread_bytes"), hi - lo);
  json_decref(j);
  char *out = NULL;
  snprintf(cmd, sizeof cmd, "'%s' report '%s' --width 80", HBM_BIN, dir);
  assert_int_equal(th_run(cmd, &out), 0);
  assert_int_equal(strncmp(out, "== 3 devices ==\n  largest ", 26), 0);
  assert_non_null(strstr(out, label));
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(made_ranks),
      cmocka_unit_test(real_rank_snapshots),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
