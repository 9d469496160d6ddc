/* test_viewer_explain.c — a pasted out-of-memory error in the Memory Viewer: `hbm explain
 * FILE --logdir DIR` saves the error's peak buffers as a profile, and the viewer's JSON API
 * (called through its request handler, no socket) serves it: the run, its buffers at the peak
 * largest first, the summary's peak, the OOM event with hbm's explanation. Expected numbers
 * come from the fixture's text (tests/data/explain/xla_gpu_jupyter.txt): buffers of 1.00GiB,
 * 512.00MiB, 256.00MiB and 128.00MiB, and "trying to allocate 2147483648 bytes". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "helpers.h"
#include "viewer/viewer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB(x) ((int64_t)(x)*1048576)

static char *logdir;
static hbm__viewer_t *viewer;

static json_t *get(const char *url) {
  hbm__response_t r;
  hbm__viewer_handle_url(viewer, "GET", url, &r);
  if (r.status != 200)
    fprintf(stderr, "GET %s: %d: %.300s\n", url, r.status, r.body);
  assert_int_equal(r.status, 200);
  json_t *root = json_loadb(r.body, r.len, 0, NULL);
  hbm__response_free(&r);
  assert_non_null(root);
  return root;
}

static int setup(void **state) {
  (void)state;
  logdir = th_mkdtemp("viewer-explain");
  char cmd[8192];
  snprintf(cmd, sizeof cmd,
           "'%s' explain '%s/tests/data/explain/xla_gpu_jupyter.txt' --logdir '%s'", HBM_BIN,
           HBM_SOURCE_DIR, logdir);
  char *out = NULL;
  int rc = th_run(cmd, &out);
  if (rc != 0)
    fprintf(stderr, "%s: exit %d: %s\n", cmd, rc, out ? out : "");
  free(out);
  if (rc != 0)
    return -1; /* the setup command failed: the test fails */
  viewer = hbm__viewer_new(logdir);
  return viewer ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  hbm__viewer_free(viewer);
  th_rmtree(logdir);
  free(logdir);
  return 0;
}

/* The one run `hbm explain --logdir` wrote. */
static const char *the_run(char *buf, size_t cap) {
  json_t *root = get("/api/runs");
  json_t *runs = json_object_get(root, "runs");
  assert_int_equal(json_array_size(runs), 1);
  snprintf(buf, cap, "%s", json_string_value(json_object_get(json_array_get(runs, 0), "run")));
  json_decref(root);
  return buf;
}

static void test_buffers_at_peak(void **state) {
  (void)state;
  char run[256], url[1024];
  snprintf(url, sizeof url, "/api/buffers_at_peak?run=%s&profile=explain.hbmtrace&order=size",
           the_run(run, sizeof run));
  json_t *root = get(url);
  json_t *bufs = json_object_get(root, "buffers");
  assert_int_equal(json_array_size(bufs), 4);
  const int64_t sizes[] = {MIB(1024), MIB(512), MIB(256), MIB(128)};
  for (size_t i = 0; i < 4; i++)
    assert_int_equal(json_integer_value(json_object_get(json_array_get(bufs, i), "size")),
                     sizes[i]);
  json_decref(root);

  snprintf(url, sizeof url, "/api/summary?run=%s&profile=explain.hbmtrace", run);
  root = get(url);
  /* all four live together: 1024 + 512 + 256 + 128 MiB */
  assert_int_equal(json_integer_value(json_object_get(root, "peak_bytes")), MIB(1920));
  json_decref(root);
}

static void test_oom_event(void **state) {
  (void)state;
  char run[256], url[1024];
  snprintf(url, sizeof url, "/api/oom?run=%s&profile=explain.hbmtrace", the_run(run, sizeof run));
  json_t *root = get(url);
  json_t *events = json_object_get(root, "events");
  assert_int_equal(json_array_size(events), 1);
  json_t *e = json_array_get(events, 0);
  assert_int_equal(json_integer_value(json_object_get(e, "requested")), 2147483648);
  const char *message = json_string_value(json_object_get(e, "message"));
  assert_non_null(message);
  assert_non_null(strstr(message, "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
                                  "trying to allocate 2147483648 bytes."));
  assert_non_null(strstr(message, "cause: in use + request over the limit"));
  json_decref(root);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buffers_at_peak),
      cmocka_unit_test(test_oom_event),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
