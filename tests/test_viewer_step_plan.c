/* test_viewer_step_plan.c — /api/step_plan, the viewer's "Step plan" panel: mode learn's plan
 * read from a profile's markers (as src/alloc/step_serve.c records them; test_alloc_step.c
 * checks that a captured run writes them and that `hbm report` reads them), through the
 * request handler without a socket; null for a profile without a plan. The numbers below are
 * the markers' own: 2 planned steps, 68 + 72 of 72 + 72 operations served, 82 MiB reserved
 * before the plan and 80 MiB at most in the planned steps (2 MiB saved).
 *
 * `test_viewer_step_plan --write-fixtures DIR` only writes the logdir (run1: learn.hbmtrace
 * with the plan, bfc.hbmtrace without) for the browser test, tests/browser/step_plan.test.mjs. */
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

#define MiB (1ull << 20)

/* A runtime profile of 300 steps (one 1 MiB buffer), with the plan's markers or none; false
 * when it could not be written. */
static bool write_profile(const char *path, bool with_plan) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "learn");
  if (!p)
    return false;
  int space = hbm_profile_add_space(p, "HBM", "sim0", 0, 0);
  bool ok = space >= 0;
  for (int i = 0; i < 300 && ok; i++)
    ok = hbm_profile_add_step(p, i, NULL) == i;
  ok = ok && hbm_profile_alloc_at(p, 0, space, 0x1000, MiB, NULL) >= 0;
  const char *texts[] = {
      "hbm plan: step of 72 operations (36 allocations) found in the stream; plan 82845952 "
      "bytes for a step live peak of 82845952 bytes; the first step reserved 85983232 bytes",
      "hbm plan: step 1: 68 of 72 operations served from the plan, 4 fell back; 83886080 bytes "
      "reserved at most",
      "hbm plan: step 2: 72 of 72 operations served from the plan, 0 fell back; 83886080 bytes "
      "reserved at most"};
  const int64_t at[] = {135, 207, 279};
  for (int i = 0; with_plan && ok && i < 3; i++) {
    hbm_marker_t m = {at[i], HBM_MARKER_TEXT, 0, texts[i]};
    ok = hbm_profile_add_marker(p, &m) == HBM_OK;
  }
  ok = ok && hbm_profile_finish(p) == HBM_OK && hbm_profile_save(p, path) == HBM_OK;
  hbm_profile_free(p);
  return ok;
}

/* DIR/plugins/profile/run1/{learn,bfc}.hbmtrace; false when they could not be written. */
static bool write_logdir(const char *logdir) {
  char dir[4200], path[4300], cmd[4400];
  snprintf(dir, sizeof dir, "%s/plugins/profile/run1", logdir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  if (system(cmd) != 0)
    return false;
  snprintf(path, sizeof path, "%s/learn.hbmtrace", dir);
  bool ok = write_profile(path, true);
  snprintf(path, sizeof path, "%s/bfc.hbmtrace", dir);
  return ok && write_profile(path, false);
}

static json_t *get(hbm__viewer_t *v, const char *query) {
  hbm__query_t q;
  hbm__query_init(&q);
  hbm__query_parse(&q, query, strlen(query));
  hbm__response_t r;
  hbm__viewer_handle(v, "GET", "/api/step_plan", &q, &r);
  assert_int_equal(r.status, 200);
  json_t *root = json_loadb(r.body, r.len, 0, NULL);
  hbm__response_free(&r);
  hbm__query_free(&q);
  assert_non_null(root);
  return root;
}

static json_int_t number(const json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  assert_non_null(v);
  return json_integer_value(v);
}

static void step_plan_endpoint(void **state) {
  (void)state;
  assert_true(write_logdir(th_dir));
  hbm__viewer_t *v = hbm__viewer_new(th_dir);
  assert_non_null(v);
  json_t *root = get(v, "run=run1&profile=learn.hbmtrace");
  json_t *plan = json_object_get(root, "step_plan");
  assert_true(json_is_object(plan));
  assert_int_equal(number(plan, "step_operations"), 72);
  assert_int_equal(number(plan, "step_allocations"), 36);
  assert_int_equal(number(plan, "plans"), 1);
  assert_int_equal(number(plan, "plan_bytes"), 82845952);
  assert_int_equal(number(plan, "served_operations"), 68 + 72);
  assert_int_equal(number(plan, "saved_bytes"), 85983232 - 83886080); /* 2 MiB */
  json_t *steps = json_object_get(plan, "steps");
  assert_int_equal(json_array_size(steps), 2);
  assert_int_equal(number(json_array_get(steps, 0), "fell_back"), 4);
  assert_int_equal(number(json_array_get(steps, 1), "served"), 72);
  json_decref(root);
  root = get(v, "run=run1&profile=bfc.hbmtrace");
  assert_true(json_is_null(json_object_get(root, "step_plan")));
  json_decref(root);
  hbm__viewer_free(v);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--write-fixtures"))
    return write_logdir(argv[2]) ? 0 : 1;
  const struct CMUnitTest tests[] = {cmocka_unit_test(step_plan_endpoint)};
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
