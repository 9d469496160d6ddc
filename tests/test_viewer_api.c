/* test_viewer_api.c — the viewer's JSON API, called through its request handler without a
 * socket: every endpoint on a fixture logdir (two plans, a runtime profile with an OOM, a
 * corrupt and a truncated profile), checked against the analysis of the same file; bad
 * arguments, unknown names and path traversal; runs that appear and files that change while
 * the viewer is up.
 *
 * `test_viewer_api --write-fixtures DIR [EVENTS]` only writes the fixture logdir (the browser
 * test, tests/viewer_browser.sh, uses it). */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "helpers.h"
#include "profile/index.h"
#include "viewer/viewer.h"
#include "viewer_fixtures.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *logdir;
static hbm__viewer_t *viewer;

static const char *const plan_a = "module_0001.jit_train_step.hbmtrace";
static const char *const plan_b = "module_0002.jit_eval_step.hbmtrace";
static const char *const train = "testhost.4242.hbmtrace";

/* GET url (path?query) through the handler; returns the parsed JSON (NULL for non-JSON) and
 * the status. */
static json_t *request_method(const char *method, const char *url, int *status, char **body) {
  hbm__response_t r;
  hbm__viewer_handle_url(viewer, method, url, &r);
  *status = r.status;
  json_t *root = NULL;
  if (r.content_type && !strcmp(r.content_type, "application/json"))
    root = json_loadb(r.body, r.len, 0, NULL);
  if (body)
    *body = strndup(r.body, r.len);
  hbm__response_free(&r);
  return root;
}

static json_t *get(const char *url, int expect_status) {
  int status;
  char *body;
  json_t *root = request_method("GET", url, &status, &body);
  if (status != expect_status)
    fprintf(stderr, "GET %s: %d (expected %d): %.300s\n", url, status, expect_status, body);
  free(body);
  assert_int_equal(status, expect_status);
  return root;
}

static json_t *getf(int expect_status, const char *fmt, ...) HBM_PRINTF(2, 3);
static json_t *getf(int expect_status, const char *fmt, ...) {
  char url[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(url, sizeof url, fmt, ap);
  va_end(ap);
  return get(url, expect_status);
}

static int64_t jint(const json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  assert_non_null(v);
  return json_integer_value(v);
}

static const char *jstr(const json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  assert_true(json_is_string(v));
  return json_string_value(v);
}

/* An independent load and analysis of one fixture file, to compare the API with. */
static hbm_analysis_t *analyse_file(const char *run, const char *file, hbm_profile_t **p) {
  char path[4096];
  snprintf(path, sizeof path, "%s/plugins/profile/%s/%s", logdir, run, file);
  *p = hbm_profile_load(path);
  assert_non_null(*p);
  hbm_analysis_t *a = hbm_analyze(*p, 0);
  assert_non_null(a);
  return a;
}

static int setup(void **state) {
  logdir = th_mkdtemp("viewer-api");
  if (!logdir || vf_write_logdir(logdir, 3000) != 0)
    return -1;
  viewer = hbm__viewer_new(logdir);
  return viewer ? 0 : -1;
}

static int teardown(void **state) {
  hbm__viewer_free(viewer);
  th_rmtree(logdir);
  free(logdir);
  return 0;
}

/* ---- the logdir ---- */

static void test_runs_newest_first(void **state) {
  json_t *root = get("/api/runs", 200);
  json_t *runs = json_object_get(root, "runs");
  assert_int_equal(json_array_size(runs), 3);
  assert_string_equal(jstr(json_array_get(runs, 0), "run"), VF_RUN_PLANS);
  assert_int_equal(jint(json_array_get(runs, 0), "profiles"), 2);
  assert_string_equal(jstr(json_array_get(runs, 1), "run"), VF_RUN_TRAIN);
  assert_string_equal(jstr(root, "logdir"), logdir);
  json_decref(root);
}

static void test_profiles_default_is_largest_module(void **state) {
  json_t *root = get("/api/profiles?run=" VF_RUN_PLANS, 200);
  assert_int_equal(json_array_size(json_object_get(root, "profiles")), 2);
  assert_string_equal(jstr(root, "default"), plan_a);
  json_decref(root);
  json_decref(get("/api/profiles?run=no_such_run", 404));
  json_decref(get("/api/profiles", 400));
}

static void test_profile_info(void **state) {
  json_t *root = getf(200, "/api/profile?run=%s&profile=%s", VF_RUN_TRAIN, train);
  assert_string_equal(jstr(root, "kind"), "runtime");
  json_t *spaces = json_object_get(root, "spaces");
  assert_int_equal(json_array_size(spaces), 2);
  assert_string_equal(jstr(json_array_get(spaces, 0), "name"), "HBM");
  assert_string_equal(jstr(json_array_get(spaces, 1), "name"), "Host");
  assert_string_equal(jstr(json_object_get(root, "meta"), "host"), "testhost");
  assert_true(json_is_null(json_object_get(root, "warning")));
  json_decref(root);
}

/* ---- one profile ---- */

static void test_summary_is_the_analysis(void **state) {
  hbm_profile_t *p;
  hbm_analysis_t *a = analyse_file(VF_RUN_PLANS, plan_a, &p);
  const hbm_summary_t *s = hbm_analysis_summary(a);
  json_t *root = getf(200, "/api/summary?run=%s&profile=%s&space=0", VF_RUN_PLANS, plan_a);
  assert_int_equal(jint(root, "peak_bytes"), s->peak_bytes);
  assert_int_equal(jint(root, "peak_step"), s->peak_step);
  assert_int_equal(jint(root, "peak_unpadded_bytes"), s->peak_unpadded_bytes);
  assert_int_equal(jint(root, "padding_bytes"), s->padding_bytes);
  assert_int_equal(jint(root, "argument_bytes"), s->argument_bytes);
  assert_int_equal(jint(root, "temporary_bytes"), s->temporary_bytes);
  assert_int_equal(jint(root, "heap_bytes"), s->heap_bytes);
  assert_int_equal(jint(root, "n_buffers_at_peak"), s->n_buffers_at_peak);
  assert_true(s->padding_bytes > 0); /* the fixture's tiled layouts */
  assert_string_equal(jstr(root, "space_name"), "HBM");
  assert_string_equal(jstr(root, "peak_label"), hbm_profile_step_label(p, s->peak_step));
  assert_true(json_array_size(json_object_get(root, "groups")) >= 3);
  json_decref(root);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

static void test_timeline_keeps_the_peak(void **state) {
  json_t *sum = getf(200, "/api/summary?run=%s&profile=%s", VF_RUN_TRAIN, train);
  int64_t peak = jint(sum, "peak_bytes"), peak_step = jint(sum, "peak_step");
  int64_t n_steps = jint(sum, "n_steps");
  json_decref(sum);
  json_t *tl = getf(200, "/api/timeline?run=%s&profile=%s&points=37", VF_RUN_TRAIN, train);
  json_t *bytes = json_object_get(tl, "bytes"), *steps = json_object_get(tl, "step");
  assert_int_equal(json_array_size(bytes), 37);
  assert_int_equal(json_array_size(json_object_get(tl, "op")), 37);
  assert_int_equal(json_array_size(json_object_get(tl, "reserved")), 37);
  int64_t max = 0;
  bool has_peak_step = false;
  for (size_t i = 0; i < 37; i++) {
    int64_t b = json_integer_value(json_array_get(bytes, i));
    max = b > max ? b : max;
    has_peak_step |= json_integer_value(json_array_get(steps, i)) == peak_step;
  }
  assert_int_equal(max, peak);
  assert_true(has_peak_step);
  /* runtime steps name the buffer allocated or freed there (an index into "ops") */
  json_t *op0 = json_array_get(json_object_get(tl, "op"), 0);
  assert_true(json_is_string(json_array_get(json_object_get(tl, "ops"), json_integer_value(op0))));
  json_decref(tl);
  tl = getf(200, "/api/timeline?run=%s&profile=%s&from=10&to=20&points=1000", VF_RUN_TRAIN, train);
  assert_int_equal(json_array_size(json_object_get(tl, "step")), 10);
  assert_int_equal(json_integer_value(json_array_get(json_object_get(tl, "step"), 0)), 10);
  json_decref(tl);
  tl = getf(200, "/api/timeline?run=%s&profile=%s&from=0&to=%lld", VF_RUN_TRAIN, train,
            (long long)n_steps + 100); /* clamped */
  assert_int_equal(jint(tl, "to"), n_steps);
  json_decref(tl);
  json_decref(getf(400, "/api/timeline?run=%s&profile=%s&from=20&to=10", VF_RUN_TRAIN, train));
  json_decref(getf(400, "/api/timeline?run=%s&profile=%s&points=many", VF_RUN_TRAIN, train));
  json_decref(getf(400, "/api/timeline?run=%s&profile=%s&from=1x", VF_RUN_TRAIN, train));
}

static void test_buffers_at_peak_orders(void **state) {
  hbm_profile_t *p;
  hbm_analysis_t *a = analyse_file(VF_RUN_PLANS, plan_a, &p);
  size_t n;
  const int64_t *by_size = hbm_analysis_buffers_at_peak_by_size(a, &n);
  const char *orders[] = {"program", "size", "padding"};
  for (int k = 0; k < 3; k++) {
    json_t *root = getf(200, "/api/buffers_at_peak?run=%s&profile=%s&order=%s", VF_RUN_PLANS,
                        plan_a, orders[k]);
    json_t *bufs = json_object_get(root, "buffers");
    assert_int_equal(json_array_size(bufs), n);
    assert_int_equal(jint(root, "count"), n);
    for (size_t i = 1; i < n; i++) {
      json_t *prev = json_array_get(bufs, i - 1), *cur = json_array_get(bufs, i);
      if (k == 1)
        assert_true(jint(prev, "size") >= jint(cur, "size"));
      if (k == 2)
        assert_true(jint(prev, "size") - jint(prev, "unpadded") >=
                    jint(cur, "size") - jint(cur, "unpadded"));
    }
    if (k == 1)
      assert_int_equal(jint(json_array_get(bufs, 0), "id"), by_size[0]);
    json_decref(root);
  }
  json_decref(
      getf(400, "/api/buffers_at_peak?run=%s&profile=%s&order=colour", VF_RUN_PLANS, plan_a));
  /* limit: the first ones, the rest summed */
  json_t *all =
      getf(200, "/api/buffers_at_peak?run=%s&profile=%s&order=size", VF_RUN_PLANS, plan_a);
  json_t *cut =
      getf(200, "/api/buffers_at_peak?run=%s&profile=%s&order=size&limit=3", VF_RUN_PLANS, plan_a);
  assert_int_equal(json_array_size(json_object_get(cut, "buffers")), 3);
  json_t *rest = json_object_get(cut, "rest");
  assert_int_equal(jint(rest, "count"), (int64_t)n - 3);
  int64_t rest_bytes = 0;
  for (size_t i = 3; i < n; i++)
    rest_bytes += jint(json_array_get(json_object_get(all, "buffers"), i), "size");
  assert_int_equal(jint(rest, "size"), rest_bytes);
  assert_true(json_is_null(json_object_get(all, "rest")));
  json_decref(all);
  json_decref(cut);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

static void test_buffers_at_any_step(void **state) {
  json_t *sum = getf(200, "/api/summary?run=%s&profile=%s", VF_RUN_TRAIN, train);
  int64_t peak_step = jint(sum, "peak_step"), peak = jint(sum, "peak_bytes");
  json_decref(sum);
  /* at the peak step, the same buffers as the peak's, in the same order */
  json_t *at = getf(200, "/api/buffers_at?run=%s&profile=%s&step=%lld&order=size", VF_RUN_TRAIN,
                    train, (long long)peak_step);
  json_t *pk = getf(200, "/api/buffers_at_peak?run=%s&profile=%s&order=size", VF_RUN_TRAIN, train);
  assert_int_equal(jint(at, "bytes"), peak);
  json_t *a = json_object_get(at, "buffers"), *b = json_object_get(pk, "buffers");
  assert_int_equal(json_array_size(a), json_array_size(b));
  for (size_t i = 0; i < json_array_size(a); i++)
    assert_int_equal(jint(json_array_get(a, i), "id"), jint(json_array_get(b, i), "id"));
  json_decref(at);
  json_decref(pk);
  /* just before the OOM: what was live there */
  json_t *oom = getf(200, "/api/oom?run=%s&profile=%s", VF_RUN_TRAIN, train);
  int64_t oom_step = jint(json_array_get(json_object_get(oom, "events"), 0), "step");
  json_decref(oom);
  at = getf(200, "/api/buffers_at?run=%s&profile=%s&step=%lld", VF_RUN_TRAIN, train,
            (long long)oom_step);
  assert_true(jint(at, "count") > 0);
  int64_t sum_sizes = 0;
  for (size_t i = 0; i < json_array_size(json_object_get(at, "buffers")); i++)
    sum_sizes += jint(json_array_get(json_object_get(at, "buffers"), i), "size");
  assert_int_equal(sum_sizes, jint(at, "bytes"));
  json_decref(at);
  json_decref(getf(400, "/api/buffers_at?run=%s&profile=%s", VF_RUN_TRAIN, train));
  json_decref(getf(400, "/api/buffers_at?run=%s&profile=%s&step=x", VF_RUN_TRAIN, train));
  json_decref(getf(400, "/api/buffers_at?run=%s&profile=%s&step=1&order=z", VF_RUN_TRAIN, train));
}

static void test_buffer_card(void **state) {
  json_t *list =
      getf(200, "/api/buffers_at_peak?run=%s&profile=%s&order=padding", VF_RUN_PLANS, plan_a);
  int64_t id = jint(json_array_get(json_object_get(list, "buffers"), 0), "id");
  json_decref(list);
  json_t *card =
      getf(200, "/api/buffer?run=%s&profile=%s&id=%lld", VF_RUN_PLANS, plan_a, (long long)id);
  int64_t size = jint(card, "size"), unpadded = jint(card, "unpadded_size");
  assert_true(size > unpadded); /* the most padded buffer is padded */
  assert_int_equal(jint(card, "padding"), size - unpadded);
  assert_true(json_real_value(json_object_get(card, "expansion")) > 1.0);
  assert_string_equal(jstr(card, "category"), "temporary");
  assert_non_null(strstr(jstr(card, "shape"), "T(8,128)"));
  assert_non_null(strstr(jstr(card, "label"), jstr(card, "op")));
  assert_string_equal(jstr(card, "source"), "model.py:57");
  assert_true(jint(card, "end") > jint(card, "start"));
  json_decref(card);
  json_decref(getf(404, "/api/buffer?run=%s&profile=%s&id=99999999", VF_RUN_PLANS, plan_a));
  json_decref(getf(404, "/api/buffer?run=%s&profile=%s&id=-1", VF_RUN_PLANS, plan_a));
  json_decref(getf(400, "/api/buffer?run=%s&profile=%s&id=abc", VF_RUN_PLANS, plan_a));
  json_decref(getf(400, "/api/buffer?run=%s&profile=%s", VF_RUN_PLANS, plan_a));
}

static void test_allocations_largest_first_and_search(void **state) {
  json_t *all =
      getf(200, "/api/allocations?run=%s&profile=%s&limit=10&cols=40&rows=20", VF_RUN_TRAIN, train);
  json_t *rects = json_object_get(all, "rects");
  json_t *sizes = json_object_get(rects, "size");
  assert_int_equal(jint(all, "shown"), 10);
  assert_int_equal(json_array_size(sizes), 10);
  assert_true(jint(all, "matched") > 10);
  assert_int_equal(jint(all, "matched"), jint(all, "in_window"));
  for (size_t i = 1; i < 10; i++)
    assert_true(json_integer_value(json_array_get(sizes, i - 1)) >=
                json_integer_value(json_array_get(sizes, i)));
  json_t *density = json_object_get(all, "density");
  assert_int_equal(jint(density, "cols"), 40);
  assert_int_equal(strlen(jstr(density, "cells")), 40 * 20 / 3 * 4 + 4); /* base64 of 800 B */
  json_decref(all);

  json_t *found =
      getf(200, "/api/allocations?run=%s&profile=%s&q=LAYER_03/DOT", VF_RUN_TRAIN, train);
  json_t *ops = json_object_get(json_object_get(found, "rects"), "ops");
  assert_true(jint(found, "matched") > 0);
  assert_int_equal(json_array_size(ops), 1);
  assert_string_equal(json_string_value(json_array_get(ops, 0)),
                      "jit(train_step)/layer_03/dot_general");
  json_decref(found);

  json_t *none = getf(200, "/api/allocations?run=%s&profile=%s&q=no-such-op", VF_RUN_TRAIN, train);
  assert_int_equal(jint(none, "matched"), 0);
  json_decref(none);

  json_t *window = getf(200, "/api/allocations?run=%s&profile=%s&from=100&to=101&lo=0&hi=1",
                        VF_RUN_TRAIN, train);
  assert_true(jint(window, "matched") <= 1); /* the lowest byte at one step: one buffer */
  json_decref(window);
  json_decref(getf(400, "/api/allocations?run=%s&profile=%s&from=9&to=3", VF_RUN_TRAIN, train));
}

/* The buffer lists come in pages of any size: pages side by side are the list at once, in
 * the same order (buffers of equal size too), without a gap or an overlap. */
static void test_pages_of_buffers(void **state) {
  json_t *all = getf(200, "/api/allocations?run=%s&profile=%s&limit=60", VF_RUN_TRAIN, train);
  json_t *ids = json_object_get(json_object_get(all, "rects"), "id");
  size_t n = json_array_size(ids);
  assert_true(n > 20);
  for (size_t page = 0; page * 20 < n; page++) {
    json_t *one = getf(200, "/api/allocations?run=%s&profile=%s&limit=20&offset=%zu", VF_RUN_TRAIN,
                       train, page * 20);
    json_t *got = json_object_get(json_object_get(one, "rects"), "id");
    assert_int_equal(jint(one, "offset"), page * 20);
    for (size_t i = 0; i < json_array_size(got); i++)
      assert_int_equal(json_integer_value(json_array_get(got, i)),
                       json_integer_value(json_array_get(ids, page * 20 + i)));
    json_decref(one);
  }
  json_decref(all);
  json_t *bars =
      getf(200, "/api/buffers_at_peak?run=%s&profile=%s&order=size&limit=10", VF_RUN_TRAIN, train);
  json_t *page = getf(200, "/api/buffers_at_peak?run=%s&profile=%s&order=size&limit=5&offset=5",
                      VF_RUN_TRAIN, train);
  json_t *a = json_object_get(bars, "buffers"), *b = json_object_get(page, "buffers");
  assert_int_equal(json_array_size(b), 5);
  for (size_t i = 0; i < 5; i++)
    assert_int_equal(jint(json_array_get(b, i), "id"), jint(json_array_get(a, 5 + i), "id"));
  assert_int_equal(jint(json_object_get(page, "rest"), "count"), jint(bars, "count") - 10);
  /* searched on the server: every buffer at the peak whose op, shape or group has it, any case */
  const char *op = jstr(json_array_get(a, 0), "op");
  json_t *whole =
      getf(200, "/api/buffers_at_peak?run=%s&profile=%s&order=size", VF_RUN_TRAIN, train);
  size_t want = 0;
  json_t *list = json_object_get(whole, "buffers");
  for (size_t i = 0; i < json_array_size(list); i++) {
    json_t *o = json_array_get(list, i);
    const char *fields[] = {"op", "shape", "group"};
    bool has = false;
    for (int f = 0; f < 3; f++) {
      const char *text = json_string_value(json_object_get(o, fields[f]));
      has |= text && strcasestr(text, op) != NULL;
    }
    want += has;
  }
  char lower[256];
  snprintf(lower, sizeof lower, "%s", op);
  for (char *c = lower; *c; c++)
    *c = (char)tolower((unsigned char)*c);
  json_t *found = getf(200, "/api/buffers_at_peak?run=%s&profile=%s&order=size&q=%s&limit=2",
                       VF_RUN_TRAIN, train, lower);
  assert_true(want > 0);
  assert_int_equal(jint(found, "count"), want);
  assert_string_equal(jstr(found, "q"), lower);
  json_decref(found);
  json_decref(whole);
  json_decref(bars);
  json_decref(page);
}

static void test_oom_events(void **state) {
  json_t *root = getf(200, "/api/oom?run=%s&profile=%s", VF_RUN_TRAIN, train);
  json_t *events = json_object_get(root, "events");
  assert_int_equal(json_array_size(events), 1);
  json_t *e = json_array_get(events, 0);
  assert_non_null(strstr(jstr(e, "message"), "RESOURCE_EXHAUSTED: Out of memory"));
  assert_int_equal(jint(e, "requested"), VF_RUNTIME_LIMIT);
  assert_true(jint(e, "bytes_in_use") > 0);
  assert_int_equal(json_array_size(json_object_get(root, "markers")), 0); /* not asked for */
  json_decref(root);
  root = getf(200, "/api/oom?run=%s&profile=%s&markers=1", VF_RUN_TRAIN, train);
  json_t *markers = json_object_get(root, "markers");
  assert_true(json_array_size(markers) > 0);
  size_t begins = 0, ends = 0; /* the fixture marks the begin and the end of each iteration */
  for (size_t i = 0; i < json_array_size(markers); i++) {
    const char *kind = jstr(json_array_get(markers, i), "kind");
    begins += !strcmp(kind, "step_begin");
    ends += !strcmp(kind, "step_end");
  }
  assert_true(begins > 0);
  assert_int_equal(ends, begins);
  json_decref(root);
  root = getf(200, "/api/oom?run=%s&profile=%s&space=1", VF_RUN_TRAIN, train);
  assert_int_equal(json_array_size(json_object_get(root, "events")), 0); /* not on Host */
  json_decref(root);
}

/* /api/compare: hbm diff's tables (each adding up to the change of the peak), the summaries
 * side by side, both timelines; /api/devices: the run's devices, each at its summary's peak. */
static void test_compare_two_plans(void **state) {
  json_t *a = getf(200, "/api/summary?run=%s&profile=%s", VF_RUN_PLANS, plan_a);
  json_t *b = getf(200, "/api/summary?run=%s&profile=%s", VF_RUN_PLANS, plan_b);
  json_t *c = getf(200, "/api/compare?run=%s&profile=%s&b_run=%s&b_profile=%s", VF_RUN_PLANS,
                   plan_a, VF_RUN_PLANS, plan_b);
  json_int_t change = jint(b, "peak_bytes") - jint(a, "peak_bytes");
  assert_int_equal(jint(json_object_get(c, "delta"), "peak_bytes"), change);
  assert_int_equal(jint(json_object_get(c, "a"), "peak_bytes"), jint(a, "peak_bytes"));
  json_t *diff = json_object_get(c, "diff");
  assert_int_equal(jint(diff, "change"), change);
  static const char *const tables[] = {"by_buffer", "by_op",    "by_source", "by_category",
                                       "by_shape",  "by_group", "by_reason"};
  for (size_t k = 0; k < HBM_ARRAY_LEN(tables); k++) {
    json_t *rows = json_object_get(diff, tables[k]), *row;
    char rest_key[32];
    snprintf(rest_key, sizeof rest_key, "%s_rest", tables[k]);
    json_int_t sum = /* the rows past the top 50, summed (absent when none) */
        json_integer_value(json_object_get(json_object_get(diff, rest_key), "delta"));
    size_t i;
    json_array_foreach(rows, i, row) sum += jint(row, "delta");
    assert_int_equal(sum, change);
  }
  assert_true(json_array_size(json_object_get(diff, "by_op")) > 0);
  json_t *tl = json_object_get(c, "timeline_b");
  assert_int_equal(jint(tl, "n_steps"), jint(b, "n_steps"));
  assert_int_equal(json_array_size(json_object_get(tl, "steps")),
                   json_array_size(json_object_get(tl, "bytes")));
  json_decref(c);
  json_decref(getf(400, "/api/compare?run=%s&profile=%s", VF_RUN_PLANS, plan_a));
  /* Plans are programs, not devices: a run of two plans has none. A run of two runtime
   * profiles (and one that does not load, named) has two. */
  json_t *d = getf(200, "/api/devices?run=%s", VF_RUN_PLANS);
  assert_int_equal(jint(d, "count"), 0);
  json_decref(d);
  json_t *whole = getf(200, "/api/summary?run=%s&profile=whole.hbmtrace", VF_RUN_BROKEN);
  json_t *cut = getf(200, "/api/summary?run=%s&profile=truncated.hbmtrace", VF_RUN_BROKEN);
  d = getf(200, "/api/devices?run=%s", VF_RUN_BROKEN);
  assert_int_equal(jint(d, "count"), 2);
  json_int_t hi = jint(whole, "peak_bytes") > jint(cut, "peak_bytes") ? jint(whole, "peak_bytes")
                                                                      : jint(cut, "peak_bytes");
  assert_int_equal(jint(json_object_get(d, "largest"), "peak_bytes"), hi);
  assert_string_equal(json_string_value(json_array_get(json_object_get(d, "not_loaded"), 0)),
                      "corrupt.hbmtrace");
  json_decref(d);
  json_decref(whole);
  json_decref(cut);
  json_decref(get("/api/devices", 400));
  json_decref(get("/api/devices?run=nope", 404));
  json_decref(a);
  json_decref(b);
}

/* ---- bad input ---- */

static void test_errors_and_traversal(void **state) {
  const char *bad404[] = {
      "/api/summary?run=../../..&profile=etc%2Fpasswd",
      "/api/summary?run=" VF_RUN_PLANS "&profile=..%2F" VF_RUN_TRAIN "%2Ftesthost.4242.hbmtrace",
      "/api/summary?run=%2e%2e&profile=%2e%2e",
      "/api/summary?run=" VF_RUN_PLANS "&profile=%2Fetc%2Fpasswd",
      "/api/summary?run=plugins&profile=profile",
      "/api/summary?run=" VF_RUN_PLANS "&profile=module_0001.jit_train_step.hbmtrace&space=7",
      "/api/summary?run=" VF_RUN_PLANS "&profile=module_0001.jit_train_step.hbmtrace&space=-1",
      "/api/no_such_endpoint",
  };
  for (size_t i = 0; i < HBM_ARRAY_LEN(bad404); i++) {
    json_t *root = get(bad404[i], 404);
    assert_true(json_is_string(json_object_get(root, "error")));
    json_decref(root);
  }
  json_decref(get("/api/summary?profile=x", 400));
  json_decref(get("/api/summary?run=x", 400));
  json_decref(get("/api/summary?run=" VF_RUN_PLANS "&profile="
                  "module_0001.jit_train_step.hbmtrace"
                  "&space=abc",
                  400));
  int status;
  char *body;
  json_t *none = request_method("GET", "/../../etc/passwd", &status, &body);
  assert_null(none);
  assert_int_equal(status, 404);
  assert_non_null(strstr(body, "<!doctype html>"));
  assert_null(strstr(body, "root:"));
  free(body);
  none = request_method("GET", "/%3Cscript%3E", &status, &body);
  assert_int_equal(status, 404);
  assert_null(strstr(body, "<script>")); /* the path is escaped in the page */
  free(body);
  none = request_method("POST", "/api/runs", &status, NULL);
  assert_int_equal(status, 405);
  json_decref(none);
  none = request_method("GET", "/", &status, &body);
  assert_int_equal(status, 200);
  assert_non_null(strstr(body, "Memory Viewer"));
  free(body);
}

static void test_corrupt_and_truncated_profiles(void **state) {
  json_t *root = getf(500, "/api/summary?run=%s&profile=corrupt.hbmtrace", VF_RUN_BROKEN);
  const char *msg = jstr(root, "error");
  assert_non_null(strstr(msg, "corrupt.hbmtrace")); /* names the file */
  assert_true(strlen(msg) > strlen("cannot load " VF_RUN_BROKEN "/corrupt.hbmtrace: "));
  json_decref(root);
  root = getf(200, "/api/profile?run=%s&profile=truncated.hbmtrace", VF_RUN_BROKEN);
  assert_true(json_is_string(json_object_get(root, "warning"))); /* the loss, for the banner */
  json_decref(root);
  root = getf(200, "/api/summary?run=%s&profile=truncated.hbmtrace", VF_RUN_BROKEN);
  assert_true(jint(root, "n_steps") > 0);
  json_decref(root);
}

static void test_symlink_out_of_logdir_is_refused(void **state) {
  char *outside = th_mkdtemp("viewer-outside");
  char target[4200], link[4200];
  snprintf(target, sizeof target, "%s/secret.hbmtrace", outside);
  assert_int_equal(vf_save(vf_plan_profile("secret", 10, 3, 1), outside, "secret.hbmtrace"), 0);
  snprintf(link, sizeof link, "%s/plugins/profile/%s/secret.hbmtrace", logdir, VF_RUN_PLANS);
  assert_int_equal(symlink(target, link), 0);
  usleep((HBM__LISTING_MS + 100) * 1000);
  json_t *root = get("/api/profiles?run=" VF_RUN_PLANS, 200);
  assert_int_equal(json_array_size(json_object_get(root, "profiles")), 2);
  json_decref(root);
  json_decref(get("/api/summary?run=" VF_RUN_PLANS "&profile=secret.hbmtrace", 404));
  unlink(link);
  th_rmtree(outside);
  free(outside);
}

/* ---- a live logdir ---- */

static void test_new_run_and_changed_file(void **state) {
  json_t *root = get("/api/runs", 200);
  size_t before = json_array_size(json_object_get(root, "runs"));
  json_decref(root);
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/plugins/profile/2026_02_01_00_00_00", logdir);
  assert_int_equal(vf_mkdirs(dir), 0);
  assert_int_equal(vf_save(vf_plan_profile("late", 30, 5, 1), dir, "late.hbmtrace"), 0);
  usleep((HBM__LISTING_MS + 100) * 1000);
  root = get("/api/runs", 200);
  json_t *runs = json_object_get(root, "runs");
  assert_int_equal(json_array_size(runs), before + 1);
  assert_string_equal(jstr(json_array_get(runs, 0), "run"), "2026_02_01_00_00_00");
  json_decref(root);
  json_t *first = get("/api/summary?run=2026_02_01_00_00_00&profile=late.hbmtrace", 200);
  /* the file is rewritten with a bigger plan: the next request sees the new one */
  assert_int_equal(vf_save(vf_plan_profile("late", 30, 5, 8), dir, "late.hbmtrace"), 0);
  usleep((HBM__LISTING_MS + 100) * 1000);
  json_t *second = get("/api/summary?run=2026_02_01_00_00_00&profile=late.hbmtrace", 200);
  assert_true(jint(second, "peak_bytes") > jint(first, "peak_bytes"));
  json_decref(first);
  json_decref(second);
}

/* An RMM log records no reserved memory and no memory type: both are unknown on the page, as
 * in `hbm report` ("peak reserved unknown"), never "0 B" or "HBM". */
static void test_rmm_log_reserved_unknown(void **state) {
  char dir[4200], *csv = th_read(HBM_SOURCE_DIR "/tests/data/profile/small.csv", NULL);
  assert_non_null(csv);
  snprintf(dir, sizeof dir, "%s/plugins/profile/2025_12_30_00_00_00", logdir);
  assert_int_equal(vf_mkdirs(dir), 0);
  char path[4300];
  snprintf(path, sizeof path, "%s/small.csv", dir);
  assert_int_equal(th_write(path, csv, strlen(csv)), 0);
  free(csv);
  usleep((HBM__LISTING_MS + 100) * 1000);
  json_t *s = get("/api/summary?run=2025_12_30_00_00_00&profile=small.csv", 200);
  assert_true(json_is_false(json_object_get(s, "reserved_known")));
  assert_true(json_is_null(json_object_get(s, "peak_reserved_bytes")));
  assert_true(json_is_null(json_object_get(s, "reserved_at_peak")));
  assert_string_equal(jstr(s, "space_name"), "unknown");
  assert_int_equal(jint(s, "peak_bytes"), 800); /* in use: 100, 400, 300, 800, 800, 500, 0 */
  json_decref(s);
  json_t *t = get("/api/timeline?run=2025_12_30_00_00_00&profile=small.csv", 200);
  assert_true(json_is_null(json_object_get(t, "reserved")));
  json_decref(t);
}

static void test_cache_keeps_at_most_its_limit(void **state) {
  char dir[4200], file[64];
  snprintf(dir, sizeof dir, "%s/plugins/profile/2025_12_31_00_00_00", logdir);
  assert_int_equal(vf_mkdirs(dir), 0);
  int n = HBM__CACHE_MAX + 4;
  for (int i = 0; i < n; i++) {
    snprintf(file, sizeof file, "module_%04d.m.hbmtrace", i);
    assert_int_equal(vf_save(vf_plan_profile("m", 12 + i, (uint32_t)i, 1), dir, file), 0);
  }
  usleep((HBM__LISTING_MS + 100) * 1000);
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < n; i++) {
      json_t *root =
          getf(200, "/api/summary?run=2025_12_31_00_00_00&profile=module_%04d.m.hbmtrace", i);
      assert_int_equal(jint(root, "n_steps"), 12 + i);
      json_decref(root);
      assert_true(viewer->cache.n_entries <= HBM__CACHE_MAX);
    }
}

/* A profile with an index: the first view comes from the index (the summary, the timeline
 * equal to the whole file's analysis), what needs every buffer waits for the whole file, which
 * then replaces the summary. */
static void test_first_view_from_the_index(void **state) {
  char dir[4200], path[4300];
  snprintf(dir, sizeof dir, "%s/plugins/profile/2026_01_02_00_00_00", logdir);
  assert_int_equal(vf_mkdirs(dir), 0);
  assert_int_equal(vf_save(vf_runtime_profile("indexed", 4000, 7, true), dir, "big.hbmtrace"), 0);
  snprintf(path, sizeof path, "%s/big.hbmtrace", dir);
  hbm_profile_t *full;
  hbm_analysis_t *a = analyse_file("2026_01_02_00_00_00", "big.hbmtrace", &full);
  assert_int_equal(hbm__index_write(full, path), HBM_OK);
  usleep((HBM__LISTING_MS + 100) * 1000);
  const char *q = "run=2026_01_02_00_00_00&profile=big.hbmtrace";
  json_t *info = getf(200, "/api/profile?%s", q);
  assert_true(json_is_true(json_object_get(info, "from_index")));
  json_decref(info);
  json_t *sum = getf(200, "/api/summary?%s", q);
  assert_int_equal(jint(sum, "peak_bytes"), (int64_t)hbm_analysis_summary(a)->peak_bytes);
  assert_int_equal(jint(sum, "peak_step"), hbm_analysis_summary(a)->peak_step);
  json_decref(sum);
  json_t *tl = getf(200, "/api/timeline?%s&points=37&from=100&to=3900", q);
  hbm_timeline_point_t pts[37];
  size_t n = hbm_analysis_timeline(a, 100, 3900, 37, pts);
  json_t *steps = json_object_get(tl, "step"), *bytes = json_object_get(tl, "bytes");
  assert_int_equal(json_array_size(steps), n);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(json_integer_value(json_array_get(steps, i)), pts[i].step);
    assert_int_equal(json_integer_value(json_array_get(bytes, i)), (int64_t)pts[i].bytes);
  }
  json_decref(tl);
  /* a buffer not at the peak: its card waits for the whole file */
  json_t *card = getf(200, "/api/buffer?%s&id=1", q);
  assert_int_equal(jint(card, "size"), (int64_t)hbm_profile_buffer(full, 1)->size);
  json_decref(card);
  info = getf(200, "/api/profile?%s", q);
  assert_true(json_is_false(json_object_get(info, "from_index")));
  json_decref(info);
  hbm_analysis_free(a);
  hbm_profile_free(full);
}

/* A profile read from its file gets its index (HBM_INDEX=always) once its first summary is
 * answered, not as soon as it is read: the writer analyses every space again, which would
 * compete with the summary the user waits for. */
static void test_index_written_after_first_summary(void **state) {
  char dir[4200], path[4300], index[4400];
  snprintf(dir, sizeof dir, "%s/plugins/profile/2026_01_04_00_00_00", logdir);
  assert_int_equal(vf_mkdirs(dir), 0);
  assert_int_equal(vf_save(vf_runtime_profile("later", 3000, 5, true), dir, "later.hbmtrace"), 0);
  snprintf(path, sizeof path, "%s/later.hbmtrace", dir);
  assert_true(hbm__index_path(path, true, index, sizeof index));
  setenv("HBM_INDEX", "always", 1);
  usleep((HBM__LISTING_MS + 100) * 1000);
  const char *q = "run=2026_01_04_00_00_00&profile=later.hbmtrace";
  json_t *info = getf(200, "/api/profile?%s", q);
  assert_true(json_is_false(json_object_get(info, "from_index")));
  json_decref(info);
  hbm__cache_t *c = &viewer->cache;
  pthread_mutex_lock(&c->lock);
  int writers = c->n_workers; /* read, not analysed: no writer yet */
  pthread_mutex_unlock(&c->lock);
  assert_int_equal(writers, 0);
  assert_int_not_equal(access(index, F_OK), 0);
  json_decref(getf(200, "/api/summary?%s", q));
  pthread_mutex_lock(&c->lock); /* the writer, started once the summary was answered */
  while (c->n_workers)
    pthread_cond_wait(&c->loaded, &c->lock);
  pthread_mutex_unlock(&c->lock);
  unsetenv("HBM_INDEX");
  assert_int_equal(access(index, F_OK), 0);
}

/* The loaded profiles' bytes are bounded too: past the bound, the least recently used goes. */
static void test_cache_keeps_to_its_bytes(void **state) {
  size_t max = viewer->cache.max_bytes;
  viewer->cache.max_bytes = 1; /* every profile is bigger: one at a time */
  for (int i = 0; i < 2; i++) {
    json_t *root =
        getf(200, "/api/summary?run=2025_12_31_00_00_00&profile=module_%04d.m.hbmtrace", i);
    json_decref(root);
    json_decref(
        getf(200, "/api/summary?run=2025_12_31_00_00_00&profile=module_%04d.m.hbmtrace", i + 1));
    assert_true(viewer->cache.n_entries <= 2);
  }
  viewer->cache.max_bytes = max;
}

/* A PyTorch snapshot: no buffer has a category, so its allocations are coloured by group (the
 * top user frame, as memory_viz does), the rectangles say which, and the card shows the stack. */
static void test_snapshot_coloured_by_frame(void **state) {
  char dir[4200], path[4300];
  snprintf(dir, sizeof dir, "%s/plugins/profile/2026_01_03_00_00_00", logdir);
  assert_int_equal(vf_mkdirs(dir), 0);
  size_t len = 0;
  char *pk = th_read(HBM_SOURCE_DIR "/tests/data/torch/small.pickle", &len);
  assert_non_null(pk);
  snprintf(path, sizeof path, "%s/small.pickle", dir);
  assert_int_equal(th_write(path, pk, len), 0);
  free(pk);
  usleep((HBM__LISTING_MS + 100) * 1000);
  const char *q = "run=2026_01_03_00_00_00&profile=small.pickle";
  json_t *al = getf(200, "/api/allocations?%s&limit=100&cols=40&rows=20", q);
  assert_string_equal(jstr(al, "color_by"), "group");
  json_t *rects = json_object_get(al, "rects");
  json_t *classes = json_object_get(rects, "classes"), *cls = json_object_get(rects, "class");
  assert_true(json_array_size(classes) >= 2);
  assert_int_equal(json_array_size(cls), json_array_size(json_object_get(rects, "id")));
  bool forward = false;
  for (size_t i = 0; i < json_array_size(classes); i++)
    forward |= !strcmp(json_string_value(json_array_get(classes, i)), "model.py:54 forward");
  assert_true(forward);
  int64_t id = -1;
  for (size_t i = 0; i < json_array_size(cls) && id < 0; i++) {
    int64_t c = json_integer_value(json_array_get(cls, i));
    assert_true(c >= 0 && (size_t)c < json_array_size(classes));
    if (!strcmp(json_string_value(json_array_get(classes, (size_t)c)), "model.py:54 forward"))
      id = json_integer_value(json_array_get(json_object_get(rects, "id"), i));
  }
  assert_true(id >= 0);
  json_decref(al);
  json_t *card = getf(200, "/api/buffer?%s&id=%lld", q, (long long)id);
  assert_string_equal(jstr(card, "group"), "model.py:54 forward");
  assert_non_null(strstr(jstr(card, "label"), "model.py"));
  json_decref(card);
  /* a profile with categories keeps colouring by them */
  json_t *plan = getf(200, "/api/allocations?run=%s&profile=%s&limit=10", VF_RUN_TRAIN, train);
  assert_string_equal(jstr(plan, "color_by"), "category");
  assert_null(json_object_get(json_object_get(plan, "rects"), "classes"));
  json_decref(plan);
}

static void test_missing_logdir(void **state) {
  assert_null(hbm__viewer_new("/nonexistent/hbm/logdir"));
  assert_int_equal(hbm_last_status(), HBM_ERR_NOT_FOUND);
  assert_non_null(strstr(hbm_last_error(), "/nonexistent/hbm/logdir"));
  assert_null(hbm__viewer_new(HBM_SOURCE_DIR "/CMakeLists.txt"));
  assert_int_equal(hbm_last_status(), HBM_ERR_INVALID);
}

static void test_empty_logdir(void **state) {
  char *empty = th_mkdtemp("viewer-empty");
  hbm__viewer_t *v = hbm__viewer_new(empty);
  assert_non_null(v);
  hbm__viewer_t *saved = viewer;
  viewer = v;
  json_t *root = get("/api/runs", 200);
  assert_int_equal(json_array_size(json_object_get(root, "runs")), 0);
  json_decref(root);
  json_decref(get("/api/profiles?run=anything", 404));
  viewer = saved;
  hbm__viewer_free(v);
  th_rmtree(empty);
  free(empty);
}

static void test_query_parsing(void **state) {
  hbm__query_t q;
  hbm__query_init(&q);
  const char raw[] = "a=1&b=x%20y+z&a=2&&flag&c=%zz&d=%41%42";
  hbm__query_parse(&q, raw, strlen(raw));
  assert_string_equal(hbm__query_get(&q, "a"), "1"); /* first value wins */
  assert_string_equal(hbm__query_get(&q, "b"), "x y z");
  assert_string_equal(hbm__query_get(&q, "flag"), "");
  assert_string_equal(hbm__query_get(&q, "c"), "%zz");
  assert_string_equal(hbm__query_get(&q, "d"), "AB");
  assert_null(hbm__query_get(&q, "e"));
  hbm__query_free(&q);
  for (int i = 0; i < 40; i++) { /* more than HBM__QUERY_MAX arguments: the rest are dropped */
    char key[16];
    snprintf(key, sizeof key, "k%d", i);
    hbm__query_add(&q, key, "v");
  }
  assert_int_equal(q.n, HBM__QUERY_MAX);
  hbm__query_free(&q);
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "--write-fixtures"))
    return vf_write_logdir(argv[2], argc >= 4 ? atoll(argv[3]) : 3000) == 0 ? 0 : 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runs_newest_first),
      cmocka_unit_test(test_profiles_default_is_largest_module),
      cmocka_unit_test(test_profile_info),
      cmocka_unit_test(test_summary_is_the_analysis),
      cmocka_unit_test(test_timeline_keeps_the_peak),
      cmocka_unit_test(test_buffers_at_peak_orders),
      cmocka_unit_test(test_buffers_at_any_step),
      cmocka_unit_test(test_buffer_card),
      cmocka_unit_test(test_allocations_largest_first_and_search),
      cmocka_unit_test(test_snapshot_coloured_by_frame),
      cmocka_unit_test(test_pages_of_buffers),
      cmocka_unit_test(test_oom_events),
      cmocka_unit_test(test_compare_two_plans),
      cmocka_unit_test(test_errors_and_traversal),
      cmocka_unit_test(test_corrupt_and_truncated_profiles),
      cmocka_unit_test(test_symlink_out_of_logdir_is_refused),
      cmocka_unit_test(test_new_run_and_changed_file),
      cmocka_unit_test(test_rmm_log_reserved_unknown),
      cmocka_unit_test(test_cache_keeps_at_most_its_limit),
      cmocka_unit_test(test_first_view_from_the_index),
      cmocka_unit_test(test_index_written_after_first_summary),
      cmocka_unit_test(test_cache_keeps_to_its_bytes),
      cmocka_unit_test(test_missing_logdir),
      cmocka_unit_test(test_empty_logdir),
      cmocka_unit_test(test_query_parsing),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
