/* test_viewer_links.c — symbolic links in a logdir, in the viewer and in `hbm report`
 * (issue 26, finding 5; issue 27, section 3): a profile linked into the logdir from inside it
 * is served; one linked from outside is skipped and /api/runs says which and why, as
 * `hbm report DIR` does on stderr, unless --follow-links; and a link swapped in after the
 * listing (the race) is refused instead of followed out of the logdir. The logdir:
 *   plugins/profile/r1/a.csv         an RMM log (tests/data/profile/small.csv)
 *   plugins/profile/r2/linked.csv -> ../r1/a.csv   (inside)
 *   plugins/profile/r2/out.csv    -> <elsewhere>/b.csv (outside: one allocation of 12345 B) */
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
#include <unistd.h>

static char *logdir, *elsewhere;
static char r1[1100], r2[1100];

static int setup(void **state) {
  (void)state;
  logdir = th_mkdtemp("viewer-links");
  elsewhere = th_mkdtemp("viewer-elsewhere");
  char cmd[4000], target[1100], path[1200];
  snprintf(r1, sizeof r1, "%s/plugins/profile/r1", logdir);
  snprintf(r2, sizeof r2, "%s/plugins/profile/r2", logdir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s' && cp '%s/tests/data/profile/small.csv' '%s/a.csv'",
           r1, r2, HBM_SOURCE_DIR, r1);
  if (th_run(cmd, NULL) != 0)
    return -1;
  const char *b = "Thread,Time,Action,Pointer,Size,Stream\n1,0.1,allocate,0x1000,12345,0x0\n";
  snprintf(target, sizeof target, "%s/b.csv", elsewhere);
  snprintf(path, sizeof path, "%s/linked.csv", r2);
  if (th_write(target, b, strlen(b)) != 0 || symlink("../r1/a.csv", path) != 0)
    return -1;
  snprintf(path, sizeof path, "%s/out.csv", r2);
  return symlink(target, path);
}

static int teardown(void **state) {
  (void)state;
  th_rmtree(logdir);
  th_rmtree(elsewhere);
  free(logdir);
  free(elsewhere);
  return 0;
}

/* One GET through the handler: the status and the body (malloc'd). */
static char *ask(hbm__viewer_t *v, const char *path, const char *query, int *status) {
  hbm__query_t q;
  hbm__query_init(&q);
  hbm__query_parse(&q, query, strlen(query));
  hbm__response_t r;
  hbm__viewer_handle(v, "GET", path, &q, &r);
  *status = r.status;
  char *body = strndup(r.body, r.len);
  hbm__response_free(&r);
  hbm__query_free(&q);
  return body;
}

static json_t *runs_of(hbm__viewer_t *v) {
  int status;
  char *body = ask(v, "/api/runs", "", &status);
  assert_int_equal(status, 200);
  json_t *root = json_loads(body, 0, NULL);
  free(body);
  assert_non_null(root);
  return root;
}

static void inside_served_outside_skipped(void **state) {
  (void)state;
  hbm__viewer_t *v = hbm__viewer_new(logdir);
  assert_non_null(v);
  json_t *runs = runs_of(v);
  json_t *skipped = json_object_get(runs, "skipped");
  assert_int_equal(json_array_size(skipped), 1);
  json_t *one = json_array_get(skipped, 0);
  assert_string_equal(json_string_value(json_object_get(one, "path")),
                      "plugins/profile/r2/out.csv");
  assert_non_null(strstr(json_string_value(json_object_get(one, "why")), "outside the logdir"));
  assert_int_equal(json_integer_value(json_object_get(runs, "skipped_count")), 1);
  json_decref(runs);
  int status;
  free(ask(v, "/api/summary", "run=r2&profile=linked.csv", &status));
  assert_int_equal(status, 200);
  free(ask(v, "/api/summary", "run=r2&profile=out.csv", &status));
  assert_int_equal(status, 404);
  hbm__viewer_free(v);

  /* `hbm report DIR` (its newest run, r2) reads the same and says the same on stderr */
  char cmd[4200], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s report '%s'", HBM_BIN, logdir);
  assert_int_equal(th_run(cmd, &out), 0);
  assert_non_null(strstr(out, "plugins/profile/r2/out.csv: through a symbolic link it is"));
  assert_non_null(strstr(out, "profile: linked.csv"));
  assert_null(strstr(out, "12345"));
  free(out);
}

/* --follow-links: the link leading outside is served too, nothing is skipped. */
static void follow_links_serves_both(void **state) {
  (void)state;
  hbm__viewer_t *v = hbm__viewer_new(logdir);
  v->cache.flags = HBM_LOGDIR_FOLLOW_LINKS;
  json_t *runs = runs_of(v);
  assert_int_equal(json_array_size(json_object_get(runs, "skipped")), 0);
  assert_true(json_is_true(json_object_get(runs, "follow_links")));
  json_decref(runs);
  int status;
  char *body = ask(v, "/api/summary", "run=r2&profile=out.csv", &status);
  assert_int_equal(status, 200);
  assert_non_null(strstr(body, "\"peak_bytes\":12345"));
  free(body);
  hbm__viewer_free(v);
  char cmd[4200], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s report --follow-links '%s'", HBM_BIN, logdir);
  assert_int_equal(th_run(cmd, &out), 0);
  assert_non_null(strstr(out, "=== ")); /* both profiles of r2, one after the other */
  assert_null(strstr(out, "skipped"));
  free(out);
}

/* The race: r1/a.csv is listed (a plain file inside), then replaced by a link to the file
 * outside before its first request. The viewer opens what it listed without following links:
 * refused (500, "changed since the logdir was listed"), or, when the listing was refreshed
 * meanwhile, no longer listed (404) — never the outside file's 12345 bytes. */
static void link_swapped_in_after_listing_is_refused(void **state) {
  (void)state;
  hbm__viewer_t *v = hbm__viewer_new(logdir);
  json_decref(runs_of(v));
  char a[1200], kept[1200], target[1100];
  snprintf(a, sizeof a, "%s/a.csv", r1);
  snprintf(kept, sizeof kept, "%s/a.kept", r1);
  snprintf(target, sizeof target, "%s/b.csv", elsewhere);
  assert_int_equal(rename(a, kept), 0);
  assert_int_equal(symlink(target, a), 0);
  int status;
  char *body = ask(v, "/api/summary", "run=r1&profile=a.csv", &status);
  print_message("after the swap: %d %.200s\n", status, body);
  if (status == 500)
    assert_non_null(strstr(body, "changed since the logdir was listed"));
  else
    assert_int_equal(status, 404);
  assert_null(strstr(body, "12345"));
  free(body);
  hbm__viewer_free(v);
  assert_int_equal(unlink(a), 0);
  assert_int_equal(rename(kept, a), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(inside_served_outside_skipped),
      cmocka_unit_test(follow_links_serves_both),
      cmocka_unit_test(link_swapped_in_after_listing_is_refused),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
