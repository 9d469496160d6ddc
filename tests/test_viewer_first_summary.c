/* test_viewer_first_summary.c — the viewer's first view of a big .hbmtrace or RMM log that
 * has no index (issue 24): the first summary comes from the one-pass summary `hbm report`
 * reads (hbm__profile_load_first), not from the whole file, while the whole file is read
 * behind it; every answer the first view gives (the summary, the timeline whole and zoomed,
 * the buffers at the peak, of every space) is the one the viewer gives once the whole file has
 * taken the summary's place, byte for byte, and the peaks are those of hbm_analyze on the file
 * read whole (hbm_profile_load). With HBM_INDEX=always (auto: 16 MiB or more) the one pass writes
 * the index on the way; with never it writes none; a file under the threshold is read whole, as
 * before. "Big" (hbm__summary_min_bytes, 16 MiB) is lowered to 1 byte here so that the files stay
 * small: a capture recorded here (two devices, tags, step markers) and an RMM log written here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "helpers.h"
#include "profile/index.h"
#include "rec_device.h"
#include "viewer/viewer.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *logdir, *capture, *run;

/* GET url (path?query) through the handler: the body (the caller frees); the status must be
 * 200. */
static char *get_body(hbm__viewer_t *v, const char *url) {
  hbm__response_t r;
  hbm__viewer_handle_url(v, "GET", url, &r);
  if (r.status != 200)
    fail_msg("GET %s: %d: %.300s", url, r.status, r.body ? r.body : "");
  char *body = strndup(r.body, r.len);
  hbm__response_free(&r);
  return body;
}

static json_t *get_json(hbm__viewer_t *v, const char *url) {
  char *body = get_body(v, url);
  json_t *root = json_loads(body, 0, NULL);
  assert_non_null(root);
  free(body);
  return root;
}

/* /api/profile's from_index: the entry is a summary (from an index or the one pass). */
static bool first_view_is_summary(hbm__viewer_t *v, const char *file, int *n_spaces) {
  char url[600];
  snprintf(url, sizeof url, "/api/profile?run=%s&profile=%s", run, file);
  json_t *info = get_json(v, url);
  bool summary = json_is_true(json_object_get(info, "from_index"));
  if (n_spaces)
    *n_spaces = (int)json_array_size(json_object_get(info, "spaces"));
  json_decref(info);
  return summary;
}

/* What the first view asks about space s, as one string: its summary, its timeline whole and
 * zoomed to a tenth of the steps, its buffers at the peak (without the file's own facts each
 * answer carries: its load time and where it came from). */
static char *first_view_answers(hbm__viewer_t *v, const char *file, int s, int64_t n_steps) {
  char url[800], *all = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&all, &len);
  const char *asks[] = {"summary", "timeline", "timeline", "buffers_at_peak"};
  for (int k = 0; k < 4; k++) {
    int n = snprintf(url, sizeof url, "/api/%s?run=%s&profile=%s&space=%d", asks[k], run, file, s);
    if (k == 1)
      snprintf(url + n, sizeof url - (size_t)n, "&points=300");
    if (k == 2)
      snprintf(url + n, sizeof url - (size_t)n, "&points=77&from=%lld&to=%lld",
               (long long)(n_steps / 3), (long long)(n_steps / 3 + n_steps / 10 + 1));
    json_t *answer = get_json(v, url);
    json_object_del(answer, "profile"); /* the file's: its load time, from_index */
    char *body = json_dumps(answer, JSON_SORT_KEYS | JSON_COMPACT);
    fprintf(out, "%s\n%s\n", url, body);
    free(body);
    json_decref(answer);
  }
  fclose(out);
  return all;
}

static char *index_of(const char *file) {
  char path[4300], *where = malloc(4400);
  snprintf(path, sizeof path, "%s/plugins/profile/%s/%s", logdir, run, file);
  assert_true(hbm__index_path(path, true, where, 4400));
  return where;
}

/* The first view of `file` (no index) with HBM_INDEX=mode: from the one pass, equal to the
 * whole file's answers once that has taken its place, the peaks hbm_analyze's. */
static void check_first_view(const char *file, const char *mode) {
  char path[4300], url[700];
  snprintf(path, sizeof path, "%s/plugins/profile/%s/%s", logdir, run, file);
  char *index = index_of(file);
  unlink(index);
  /* the truth, read before the viewer starts: TSan does not follow mremap (the trace reader's
   * array of events grows with it), so two readers at once would look like a race to it */
  hbm_profile_t *whole = hbm_profile_load(path);
  assert_non_null(whole);
  setenv("HBM_INDEX", mode, 1);
  hbm__viewer_t *v = hbm__viewer_new(logdir);
  assert_non_null(v);
  int n_spaces = 0;
  if (!first_view_is_summary(v, file, &n_spaces))
    fail_msg("%s: the first view of a big file without an index read it whole", file);
  /* always: the one pass wrote the index on the way (auto too, for 16 MiB or more); never: none */
  assert_int_equal(access(index, F_OK) == 0, !strcmp(mode, "always"));
  assert_int_equal(n_spaces, hbm_profile_space_count(whole));
  assert_true(n_spaces > 0);
  int64_t n_steps = hbm_profile_step_count(whole);
  char **first = calloc((size_t)n_spaces, sizeof *first);
  for (int s = 0; s < n_spaces; s++) {
    first[s] = first_view_answers(v, file, s, n_steps);
    hbm_analysis_t *a = hbm_analyze(whole, s);
    assert_non_null(a);
    snprintf(url, sizeof url, "/api/summary?run=%s&profile=%s&space=%d", run, file, s);
    json_t *sum = get_json(v, url);
    const hbm_summary_t *want = hbm_analysis_summary(a);
    assert_int_equal(json_integer_value(json_object_get(sum, "peak_bytes")), want->peak_bytes);
    assert_int_equal(json_integer_value(json_object_get(sum, "peak_step")), want->peak_step);
    assert_int_equal(json_integer_value(json_object_get(sum, "n_buffers")), want->n_buffers);
    assert_int_equal(json_integer_value(json_object_get(sum, "n_steps")), n_steps);
    json_decref(sum);
    hbm_analysis_free(a);
  }
  /* a buffer's card needs every buffer: it waits for the whole file, which then answers */
  snprintf(url, sizeof url, "/api/buffer?run=%s&profile=%s&id=0", run, file);
  free(get_body(v, url));
  assert_false(first_view_is_summary(v, file, NULL));
  for (int s = 0; s < n_spaces; s++) {
    char *again = first_view_answers(v, file, s, n_steps);
    assert_string_equal(first[s], again);
    free(again);
    free(first[s]);
  }
  free(first);
  hbm_profile_free(whole);
  hbm__viewer_free(v);
  unsetenv("HBM_INDEX");
  unlink(index);
  free(index);
}

static void capture_first_view_in_one_pass(void **state) {
  (void)state;
  check_first_view(basename(capture), "never");
  check_first_view(basename(capture), "always");
}

static void rmm_log_first_view_in_one_pass(void **state) {
  (void)state;
  check_first_view("log.csv", "never");
  check_first_view("log.csv", "always");
}

/* Under the threshold the file is read whole, as before. */
static void small_file_read_whole(void **state) {
  (void)state;
  uint64_t was = hbm__summary_min_bytes;
  hbm__summary_min_bytes = UINT64_MAX;
  setenv("HBM_INDEX", "never", 1);
  hbm__viewer_t *v = hbm__viewer_new(logdir);
  assert_non_null(v);
  assert_false(first_view_is_summary(v, "log.csv", NULL));
  hbm__viewer_free(v);
  unsetenv("HBM_INDEX");
  hbm__summary_min_bytes = was;
}

/* ---- the files ---- */

static const hbm_tag_t tags[] = {
    {"jit(f)/dot", "bf16[8,128]", HBM_CAT_TEMPORARY, "activations", "m.py:3"},
    {"weights", "f32[1024]", HBM_CAT_PARAMETER, "params", "init.py:1"},
    {"out", NULL, HBM_CAT_OUTPUT, NULL, NULL},
};

/* A capture of two devices, 12,000 allocations with frees and step markers, recorded into
 * the logdir; its path. */
static char *record_capture(void) {
  fake_device_t a = {0}, b = {0};
  open_device(&a, "simA");
  open_device(&b, "simB");
  if (hbm_profiler_start(logdir) != HBM_OK)
    return NULL;
  char *path = strdup(hbm_profiler_path());
  for (uint64_t i = 0; i < 12000; i++) {
    fake_device_t *d = i % 3 ? &a : &b;
    dev_alloc(d, 0x1000 + (i % 89) * 0x100000, 512 + (i * 7919) % 60000, &tags[i % 3]);
    if (i % 3 != 2)
      dev_free(d, 0x1000 + ((i * 37) % 89) * 0x100000);
    if (i % 1000 == 999)
      hbm_profiler_step_end((int64_t)i);
  }
  if (hbm_profiler_stop() != HBM_OK)
    return NULL;
  close_device(&a);
  close_device(&b);
  return path;
}

/* An RMM log beside it: 20,000 lines of allocations and frees on two threads. */
static int write_rmm_log(const char *dir) {
  char path[4300];
  snprintf(path, sizeof path, "%s/log.csv", dir);
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  fprintf(f, "Thread,Time,Action,Pointer,Size,Stream\n");
  bool live[128] = {false};
  for (int i = 0; i < 20000; i++) {
    int slot = (int)((i * 2654435761u) % 128);
    fprintf(f, "%d,%.6f,%s,0x%x,%d,0x0\n", 100 + i % 2, i * 1e-5, live[slot] ? "free" : "allocate",
            0x10000000 + slot * 0x100000, 256 + (slot * 977) % 40000);
    live[slot] = !live[slot];
  }
  return fclose(f);
}

static int setup(void **state) {
  (void)state;
  logdir = th_mkdtemp("viewer-first");
  if (!logdir || !(capture = record_capture()))
    return -1;
  char *copy = strdup(capture), *dir = dirname(copy);
  run = strdup(basename(dir));
  int rc = write_rmm_log(dir);
  free(copy);
  hbm__summary_min_bytes = 1; /* every file is "big" */
  return rc;
}

static int teardown(void **state) {
  (void)state;
  th_rmtree(logdir);
  free(logdir);
  free(capture);
  free(run);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(capture_first_view_in_one_pass),
      cmocka_unit_test(rmm_log_first_view_in_one_pass),
      cmocka_unit_test(small_file_read_whole),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
