/* test_import_index.c — the profile index (src/profile/index*.c): what `hbm report` and the
 * viewer's first view read instead of the profile. For a runtime profile of 30,000 steps over
 * two spaces (reservations, OOMs, markers; several blocks and levels of maxima) and a plan
 * with labels and padding, the summary profile read from the index must answer exactly as
 * the profile does: the text report at three widths and the JSON report byte for byte, and
 * the timeline over random ranges at random resolutions point for point (both from
 * hbm_analyze: the expected values are the profile's own analysis). An index that no longer
 * matches its file (rewritten, touched), one damaged in any byte or cut short, is not used;
 * HBM_INDEX=never reads none; a read-only directory's index goes to $XDG_CACHE_HOME/hbm. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "profile/index.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_random(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* A runtime profile: allocations and frees at random over two spaces, every op tagged. */
static hbm_profile_t *make_runtime(int steps) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "host.42");
  assert_non_null(p);
  assert_int_equal(hbm_profile_set_meta(p, "host", "host"), HBM_OK);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "sim0", 0, 64ull << 30), 0);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "sim1", 0, 0), 1);
  static const char *const ops[] = {"jit(step)/dot", "jit(step)/add", "embed", NULL};
  int64_t live[2][64];
  memset(live, -1, sizeof live);
  int64_t t = 0;
  for (int s = 0; s < steps; s++) {
    int64_t step = hbm_profile_add_step(p, t += (int64_t)(next_random() % 1000), NULL);
    int space = (int)(next_random() % 2), slot = (int)(next_random() % 64);
    if (live[space][slot] >= 0) {
      assert_int_equal(hbm_profile_end_buffer(p, live[space][slot], step), HBM_OK);
      live[space][slot] = -1;
      continue;
    }
    hbm_buffer_t b = {.address = (uint64_t)slot << 30,
                      .size = (next_random() % 4096 + 1) << 12,
                      .start = step,
                      .end = -1,
                      .space = space,
                      .category = (hbm_category_t)(next_random() % HBM_CAT_COUNT),
                      .op = ops[next_random() % 4],
                      .group = slot % 3 ? "activations" : NULL};
    b.unpadded_size = b.size;
    assert_true((live[space][slot] = hbm_profile_add_buffer(p, &b)) >= 0);
    if (s % 997 == 0) {
      hbm_reserve_event_t r = {step, space, HBM_RESERVE_GROW, (uint64_t)s << 32, 1ull << 30};
      assert_int_equal(hbm_profile_add_reserve(p, &r), HBM_OK);
    }
  }
  hbm_oom_event_t o = {steps / 2, 1, 1ull << 40, "RESOURCE_EXHAUSTED: out of memory\nhere"};
  assert_int_equal(hbm_profile_add_oom(p, &o), HBM_OK);
  hbm_marker_t m = {steps / 3, HBM_MARKER_STEP_BEGIN, 7, "step 7"};
  assert_int_equal(hbm_profile_add_marker(p, &m), HBM_OK);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  return p;
}

/* A plan: labelled steps, padded buffers, indefinite ones. */
static hbm_profile_t *make_plan(void) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_PLAN, "module_0001.jit_f");
  assert_non_null(p);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "tpu", 0, 16ull << 30), 0);
  char label[32];
  for (int i = 0; i < 9000; i++) {
    snprintf(label, sizeof label, "fusion.%d", i);
    assert_int_equal(hbm_profile_add_step(p, 0, i % 5 ? label : NULL), i);
  }
  for (int i = 0; i < 8000; i++) {
    hbm_buffer_t b = {.address = (uint64_t)(i % 50) * 65536,
                      .size = (uint64_t)(i % 97 + 1) * 4096,
                      .unpadded_size = (uint64_t)(i % 97 + 1) * 1000,
                      .start = i,
                      .end = i + 1 + i % 700,
                      .category = i % 11 ? HBM_CAT_TEMPORARY : HBM_CAT_PARAMETER,
                      .flags = i % 211 == 0 ? HBM_BUF_INDEFINITE : 0,
                      .op = "fusion",
                      .label = "%fusion = f32[8] fusion(%p)"};
    if (b.end > 9000)
      b.end = 9000;
    assert_true(hbm_profile_add_buffer(p, &b) == i);
  }
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  return p;
}

static char *report(const hbm_profile_t *p, bool json, int width) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  assert_int_equal(json ? hbm_report_json(p, -1, f) : hbm_report_text(p, -1, width, f), HBM_OK);
  fclose(f);
  return text;
}

/* The summary of its devices (`hbm report` on several devices): the largest against the
 * median compares the buffers at the two peaks, which a summary profile keeps. */
static char *devices_report(const hbm_profile_t *p, bool json) {
  char *text = NULL;
  size_t len = 0;
  const char *names[] = {"profile"};
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  assert_int_equal(json ? hbm_report_devices_json(&p, names, 1, f)
                        : hbm_report_devices_text(&p, names, 1, f),
                   HBM_OK);
  fclose(f);
  return text;
}

/* The summary profile's reports (text at three widths, JSON, the devices' summary) are the
 * profile's, byte for byte; `peaks_apart`: its devices peak apart, which the summary shows. */
static void assert_same_reports(const hbm_profile_t *full, const hbm_profile_t *sum,
                                bool peaks_apart) {
  assert_true(hbm__profile_is_summary(sum) && !hbm__profile_is_summary(full));
  for (int k = 0; k < 6; k++) {
    bool json = k == 3 || k == 5;
    char *a = k < 4 ? report(full, json, 60 + 70 * k) : devices_report(full, json);
    char *b = k < 4 ? report(sum, json, 60 + 70 * k) : devices_report(sum, json);
    if (strcmp(a, b))
      fail_msg("report %d differs:\n%s\n---- from the index ----\n%s", k, a, b);
    if (k == 4 && peaks_apart && !strstr(a, "beyond the median"))
      fail_msg("two devices that peak apart, and no difference shown:\n%s", a);
    free(a);
    free(b);
  }
}

/* The summary profile answers as the profile does. */
static void assert_same(const hbm_profile_t *full, const hbm_profile_t *sum) {
  assert_same_reports(full, sum, hbm_profile_space_count(full) > 1);
  int64_t n = hbm_profile_step_count(full);
  assert_int_equal(hbm_profile_step_count(sum), n);
  for (int space = 0; space < hbm_profile_space_count(full); space++) {
    hbm_analysis_t *a = hbm_analyze(full, space), *b = hbm_analyze(sum, space);
    assert_non_null(a);
    assert_non_null(b);
    hbm_timeline_point_t pa[700], pb[700];
    for (int q = 0; q < 300; q++) {
      int64_t from = (int64_t)(next_random() % (uint64_t)n),
              to = from + (int64_t)(next_random() % (uint64_t)(n - from + 1));
      size_t points = 1 + next_random() % 700;
      size_t na = hbm_analysis_timeline(a, from, to, points, pa);
      size_t nb = hbm_analysis_timeline(b, from, to, points, pb);
      assert_int_equal(na, nb);
      for (size_t i = 0; i < na; i++)
        if (memcmp(&pa[i], &pb[i], sizeof pa[i]))
          fail_msg("space %d [%lld, %lld) in %zu points: point %zu is step %lld (%llu bytes), "
                   "from the index step %lld (%llu)",
                   space, (long long)from, (long long)to, points, i, (long long)pa[i].step,
                   (unsigned long long)pa[i].bytes, (long long)pb[i].step,
                   (unsigned long long)pb[i].bytes);
      int64_t s = from < n ? from : 0;
      assert_int_equal(hbm_analysis_bytes_at(a, s), hbm_analysis_bytes_at(b, s));
      assert_int_equal(hbm_profile_step_time(full, s), hbm_profile_step_time(sum, s));
      const char *la = hbm_profile_step_label(full, s), *lb = hbm_profile_step_label(sum, s);
      assert_true((!la && !lb) || (la && lb && !strcmp(la, lb)));
    }
    hbm_analysis_free(a);
    hbm_analysis_free(b);
  }
}

/* Saves p, loads it back (the index belongs to a file), writes its index. */
static char *indexed(hbm_profile_t *p, const char *name, hbm_profile_t **loaded) {
  char *path = malloc(strlen(th_dir) + strlen(name) + 2);
  sprintf(path, "%s/%s", th_dir, name);
  assert_int_equal(hbm_profile_save(p, path), HBM_OK);
  *loaded = hbm_profile_load(path);
  assert_non_null(*loaded);
  assert_int_equal(hbm__index_write(*loaded, path), HBM_OK);
  return path;
}

static void summary_answers_as_the_profile(void **state) {
  (void)state;
  hbm_profile_t *made[2] = {make_runtime(30000), make_plan()};
  for (int i = 0; i < 2; i++) {
    hbm_profile_t *full;
    char *path = indexed(made[i], i ? "plan.hbmtrace" : "run.hbmtrace", &full);
    /* no loader: every answer, the devices' difference too, must come from the index alone
     * (reading the 1 GiB file whole for the difference took `hbm report` from 0.09 s to 3.7 s) */
    hbm_profile_t *sum = hbm__index_open(path, NULL);
    if (!sum)
      fail_msg("%s", hbm_last_error());
    assert_same(full, sum);
    hbm_profile_free(sum);
    hbm_profile_free(full);
    hbm_profile_free(made[i]);
    free(path);
  }
}

/* Source stacks (XProf's "Source Stack", from an .xplane.pb) and span ends (a revived buffer's)
 * are not in .hbmtrace files, so the
 * profile is indexed as it is in memory, beside a file that stands for it: read back from the
 * index, the buffers at the peak keep their stacks (format 2 lost them: the corpus's XProf
 * comparison saw every stack as None on a second `hbm report`). */
static void index_keeps_source_stacks(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_PLAN, "jit_f(3)");
  assert_non_null(p);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "jit_f(3)", 0, 0), 0);
  for (int i = 0; i < 4; i++)
    assert_int_equal(hbm_profile_add_step(p, 0, NULL), i);
  static const char *const stacks[] = {"model.py:10:4\ntrain.py:99:2", NULL, "model.py:12:8"};
  for (int i = 0; i < 3; i++) {
    hbm_buffer_t b = {.size = 4096u << i,
                      .unpadded_size = 4096u << i,
                      .start = i,
                      .end = 4,
                      .span_end = i ? 0 : 2, /* its value ends at 2, its bytes stay to 4 */
                      .category = HBM_CAT_TEMPORARY,
                      .op = "fusion",
                      .source = "model.py:10",
                      .stack = stacks[i]};
    assert_int_equal(hbm_profile_add_buffer(p, &b), i);
  }
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  char path[4200];
  snprintf(path, sizeof path, "%s/stacks.xplane.pb", th_dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("stands for the profile", f);
  fclose(f);
  assert_int_equal(hbm__index_write(p, path), HBM_OK);
  hbm_profile_t *sum = hbm__index_open(path, NULL);
  if (!sum)
    fail_msg("%s", hbm_last_error());
  size_t n;
  hbm_analysis_t *a = hbm_analyze(sum, 0);
  assert_non_null(a);
  const int64_t *at_peak = hbm_analysis_buffers_at_peak(a, &n);
  assert_int_equal(n, 3);
  for (size_t k = 0; k < n; k++) {
    const hbm_buffer_t *b = hbm_profile_buffer(sum, at_peak[k]);
    const char *want = stacks[at_peak[k]];
    assert_true((!want && !b->stack) || (want && b->stack && !strcmp(want, b->stack)));
    assert_int_equal(hbm_buffer_span_end(b), at_peak[k] ? 4 : 2); /* format 4 keeps it */
  }
  char *full = report(p, true, 0), *from_index = report(sum, true, 0);
  assert_string_equal(full, from_index);
  assert_non_null(strstr(from_index, "train.py:99:2"));
  free(full);
  free(from_index);
  hbm_analysis_free(a);
  hbm_profile_free(sum);
  hbm_profile_free(p);
}

/* A profile of no steps (an empty capture, an RMM log of only its header): its index reads
 * back, and the summary reports as the profile does (0 steps, 0 buffers, its spaces, metadata
 * and marker); its timeline has no points, as the profile's has none. Such an index was
 * refused, and report and view read the file whole every time. */
static void zero_step_index_reads_back(void **state) {
  (void)state;
  hbm_profile_t *made = hbm_profile_new(HBM_PROFILE_RUNTIME, "idle");
  assert_non_null(made);
  assert_int_equal(hbm_profile_set_meta(made, "host", "idle-host"), HBM_OK);
  assert_int_equal(hbm_profile_add_space(made, "HBM", "sim0", 0, 16ull << 30), 0);
  assert_int_equal(hbm_profile_add_space(made, "HBM", "sim1", 0, 0), 1);
  hbm_marker_t m = {.step = 0, .kind = HBM_MARKER_TEXT, .text = "nothing happened"};
  assert_int_equal(hbm_profile_add_marker(made, &m), HBM_OK);
  assert_int_equal(hbm_profile_finish(made), HBM_OK);
  hbm_profile_t *full;
  char *path = indexed(made, "idle.hbmtrace", &full);
  assert_int_equal(hbm_profile_step_count(full), 0);
  hbm_profile_t *sum = hbm__index_open(path, NULL);
  if (!sum)
    fail_msg("the index of a profile of no steps was refused: %s", hbm_last_error());
  assert_int_equal(hbm_profile_step_count(sum), 0);
  assert_int_equal(hbm_profile_space_count(sum), 2);
  assert_same_reports(full, sum, false); /* nothing allocated: no peaks */
  for (int space = 0; space < 2; space++) {
    hbm_analysis_t *a = hbm_analyze(full, space), *b = hbm_analyze(sum, space);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(hbm_analysis_summary(b)->peak_bytes, 0);
    assert_int_equal(hbm_analysis_summary(b)->peak_step, hbm_analysis_summary(a)->peak_step);
    hbm_timeline_point_t pa[8], pb[8];
    assert_int_equal(hbm_analysis_timeline(b, 0, 0, 8, pb), hbm_analysis_timeline(a, 0, 0, 8, pa));
    hbm_analysis_free(a);
    hbm_analysis_free(b);
  }
  hbm_profile_free(sum);
  hbm_profile_free(full);
  hbm_profile_free(made);
  free(path);
}

static void stale_or_damaged_index_is_not_used(void **state) {
  (void)state;
  hbm_profile_t *made = make_runtime(5000), *full;
  char *path = indexed(made, "stale.hbmtrace", &full);
  char where[4200];
  assert_true(hbm__index_path(path, false, where, sizeof where));
  size_t len;
  char *good = th_read(where, &len);
  assert_non_null(good);
  /* any byte changed: the checksums say so */
  for (size_t at = 0; at < len; at += len / 97 + 1) {
    good[at] ^= 0x20;
    assert_int_equal(th_write(where, good, len), 0);
    hbm_profile_t *p = hbm__index_open(path, hbm_profile_load);
    if (p)
      fail_msg("an index damaged at byte %zu of %zu was used", at, len);
    good[at] ^= 0x20;
  }
  /* cut short */
  assert_int_equal(th_write(where, good, len / 2), 0);
  assert_null(hbm__index_open(path, hbm_profile_load));
  /* whole again: used; HBM_INDEX=never: not */
  assert_int_equal(th_write(where, good, len), 0);
  hbm_profile_t *p = hbm__index_open(path, hbm_profile_load);
  assert_non_null(p);
  hbm_profile_free(p);
  setenv("HBM_INDEX", "never", 1);
  assert_false(hbm__index_allowed());
  unsetenv("HBM_INDEX");
  /* the profile rewritten (another mtime): not used */
  struct timespec later[2] = {{0, UTIME_OMIT}, {time(NULL) + 5, 0}};
  assert_int_equal(utimensat(AT_FDCWD, path, later, 0), 0);
  assert_null(hbm__index_open(path, hbm_profile_load));
  free(good);
  hbm_profile_free(full);
  hbm_profile_free(made);
  free(path);
}

/* In a child (its own environment): the profile's directory is marked read-only (mode 0555;
 * root could write there all the same, and must not), so its index goes to
 * $XDG_CACHE_HOME/hbm and is read from there. */
static int index_in_cache(const char *path, const char *cache) {
  setenv("XDG_CACHE_HOME", cache, 1);
  hbm_profile_t *p = hbm_profile_load(path);
  if (!p || hbm__index_write(p, path) != HBM_OK)
    return 1;
  char where[4200];
  if (!hbm__index_path(path, false, where, sizeof where) || strncmp(where, cache, strlen(cache)))
    return 2;
  hbm_profile_t *sum = hbm__index_open(path, hbm_profile_load);
  int rc = sum && hbm_profile_step_count(sum) == hbm_profile_step_count(p) ? 0 : 3;
  hbm_profile_free(sum);
  hbm_profile_free(p);
  return rc;
}

static void read_only_logdir_uses_the_cache(void **state) {
  (void)state;
  char dir[4200], cache[4200], path[4300];
  snprintf(dir, sizeof dir, "%s/readonly", th_dir);
  snprintf(cache, sizeof cache, "%s/cache", th_dir);
  snprintf(path, sizeof path, "%s/run.hbmtrace", dir);
  assert_int_equal(mkdir(dir, 0755), 0);
  assert_int_equal(mkdir(cache, 0777), 0);
  assert_int_equal(chmod(cache, 0777), 0);
  hbm_profile_t *made = make_runtime(3000);
  assert_int_equal(hbm_profile_save(made, path), HBM_OK);
  hbm_profile_free(made);
  assert_int_equal(chmod(dir, 0555), 0);
  assert_int_equal(chmod(th_dir, 0755), 0);
  pid_t pid = fork();
  if (pid == 0)
    _exit(index_in_cache(path, cache));
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  chmod(dir, 0755);
  assert_true(WIFEXITED(status));
  if (WEXITSTATUS(status))
    fail_msg("the index in the cache directory: step %d failed", WEXITSTATUS(status));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(summary_answers_as_the_profile),
      cmocka_unit_test(index_keeps_source_stacks),
      cmocka_unit_test(zero_step_index_reads_back),
      cmocka_unit_test(stale_or_damaged_index_is_not_used),
      cmocka_unit_test(read_only_logdir_uses_the_cache),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
