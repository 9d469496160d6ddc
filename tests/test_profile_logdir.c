/* test_profile_logdir.c — XProf's layout: hbm_logdir_new_run makes a fresh run directory
 * each time (twelve in one second: twelve runs), hbm_logdir_list gives the profiles newest run
 * first ("..._10" after "..._9"), lists a plain directory as one run, and skips what is not a
 * profile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hbm.h"
#include "helpers.h"

static void touch(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *path = malloc(n);
  snprintf(path, n, "%s/%s", dir, name);
  assert_int_equal(th_write(path, "x", 1), 0);
  free(path);
}

static void new_runs_never_collide(void **state) {
  (void)state;
  char *dir = th_mkdtemp("logdir");
  char runs[12][4200];
  for (int i = 0; i < 12; i++) {
    assert_int_equal(hbm_logdir_new_run(dir, runs[i], sizeof runs[i]), HBM_OK);
    assert_non_null(strstr(runs[i], "/plugins/profile/"));
    struct stat st;
    assert_int_equal(stat(runs[i], &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    for (int k = 0; k < i; k++)
      assert_string_not_equal(runs[i], runs[k]);
    char name[64];
    snprintf(name, sizeof name, "host.%d.hbmtrace", i);
    touch(runs[i], name);
  }
  touch(runs[3], "notes.md"); /* not a profile */
  touch(runs[3], "module_1.x-buffer-assignment.txt");
  hbm_logdir_entry_t e[32];
  size_t total;
  assert_int_equal(hbm_logdir_list(dir, e, 32, &total), HBM_OK);
  assert_int_equal(total, 13);
  /* newest run first: the last one made */
  assert_string_equal(e[0].file, "host.11.hbmtrace");
  assert_string_equal(e[1].file, "host.10.hbmtrace");
  assert_string_equal(e[12].file, "host.0.hbmtrace"); /* run 3 holds two */
  assert_true(e[0].bytes == 1 && e[0].mtime > 0);
  char expect[4300];
  snprintf(expect, sizeof expect, "%s/host.11.hbmtrace", runs[11]);
  assert_string_equal(e[0].path, expect);
  /* a smaller array gets the first entries and the total */
  assert_int_equal(hbm_logdir_list(dir, e, 2, &total), HBM_OK);
  assert_int_equal(total, 13);
  assert_string_equal(e[1].file, "host.10.hbmtrace");
  th_rmtree(dir);
  free(dir);
}

static void plain_directory_is_one_run(void **state) {
  (void)state;
  char *dir = th_mkdtemp("xla_dump");
  touch(dir, "module_0001.jit_f.sm_8.0_gpu_after_optimizations.txt");
  touch(dir, "module_0001.jit_f.sm_8.0_gpu_after_optimizations-buffer-assignment.txt");
  touch(dir, "module_0001.jit_f.sm_8.0_gpu_after_optimizations-memory-usage-report.txt");
  touch(dir, "module_0001.jit_f.before_optimizations.txt");
  touch(dir, "log.csv");
  touch(dir, ".hidden.csv");
  hbm_logdir_entry_t e[8];
  size_t total;
  assert_int_equal(hbm_logdir_list(dir, e, 8, &total), HBM_OK);
  assert_int_equal(total, 4);
  const char *base = strrchr(dir, '/') + 1;
  for (size_t i = 0; i < total; i++)
    assert_string_equal(e[i].run, base);
  assert_string_equal(e[0].file, "log.csv");
  th_rmtree(dir);
  free(dir);
}

static void missing_directory_is_reported(void **state) {
  (void)state;
  size_t total = 99;
  assert_int_equal(hbm_logdir_list("/nonexistent/logdir", NULL, 0, &total), HBM_ERR_NOT_FOUND);
  assert_int_equal(total, 0);
  assert_non_null(strstr(hbm_last_error(), "/nonexistent/logdir: no such directory"));
  char buf[64];
  assert_int_equal(hbm_logdir_new_run("/tmp", buf, sizeof buf / 8), HBM_ERR_INVALID);
  assert_int_equal(hbm_logdir_new_run("", buf, sizeof buf), HBM_ERR_INVALID);
}

static void link_to(const char *target, const char *dir, const char *name) {
  char path[8700];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  assert_int_equal(symlink(target, path), 0);
}

static const hbm_logdir_skip_t *skipped_at(const hbm_logdir_scan_t *s, const char *end) {
  for (size_t i = 0; i < s->n_skipped; i++) {
    size_t n = strlen(s->skipped[i].path), m = strlen(end);
    if (n >= m && !strcmp(s->skipped[i].path + n - m, end))
      return &s->skipped[i];
  }
  fail_msg("nothing skipped at ...%s", end);
  return NULL;
}

/* Links users make in a logdir (issue 27): r2/a_link.csv -> ../r1/a.csv stays inside and is
 * listed with its real path; r2/b.csv -> a file elsewhere, the run run9 -> a directory
 * elsewhere and r2/dangling.csv -> nothing are skipped, each with its reason, unless
 * HBM_LOGDIR_FOLLOW_LINKS, which lists the two that lead outside (marked so). A logdir that is
 * itself reached through a link is no different. */
static void links_inside_listed_outside_skipped(void **state) {
  (void)state;
  char *dir = th_mkdtemp("links"), *out = th_mkdtemp("elsewhere");
  char base[1024], r1[1100], r2[1100], run9[1100], alias[1100], real_a[4200], cmd[4000];
  snprintf(base, sizeof base, "%s/plugins/profile", dir);
  snprintf(r1, sizeof r1, "%s/r1", base);
  snprintf(r2, sizeof r2, "%s/r2", base);
  snprintf(run9, sizeof run9, "%s/run9", out);
  snprintf(alias, sizeof alias, "%s.alias", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s' '%s'", r1, r2, run9);
  assert_int_equal(th_run(cmd, NULL), 0);
  touch(r1, "a.csv");
  touch(out, "b.csv");
  touch(run9, "c.csv");
  char target[1100];
  snprintf(target, sizeof target, "%s/b.csv", out);
  link_to("../r1/a.csv", r2, "a_link.csv");
  link_to(target, r2, "b.csv");
  link_to("/nonexistent/hbm/d.csv", r2, "dangling.csv");
  link_to(run9, base, "run9");
  assert_int_equal(symlink(dir, alias), 0);
  char *real_dir = realpath(dir, NULL);
  snprintf(real_a, sizeof real_a, "%s/plugins/profile/r1/a.csv", real_dir);
  const char *logdirs[] = {dir, alias};
  for (int k = 0; k < 2; k++) {
    hbm_logdir_scan_t s;
    assert_int_equal(hbm_logdir_scan(logdirs[k], 0, &s), HBM_OK);
    assert_int_equal(s.n_entries, 2); /* r2/a_link.csv, then r1/a.csv */
    assert_string_equal(s.entries[0].file, "a_link.csv");
    assert_string_equal(s.entries[0].real, real_a);
    assert_int_equal(s.entries[0].outside, 0);
    assert_int_equal(s.n_skipped, 3);
    assert_non_null(strstr(skipped_at(&s, "/r2/b.csv")->why, "outside the logdir"));
    assert_non_null(strstr(skipped_at(&s, "/r2/b.csv")->why, "--follow-links"));
    assert_non_null(strstr(skipped_at(&s, "/plugins/profile/run9")->why, "outside the logdir"));
    assert_non_null(strstr(skipped_at(&s, "/r2/dangling.csv")->why,
                           "a symbolic link to /nonexistent/hbm/d.csv, which does not exist"));
    hbm_logdir_scan_free(&s);
  }
  hbm_logdir_scan_t s;
  assert_int_equal(hbm_logdir_scan(dir, HBM_LOGDIR_FOLLOW_LINKS, &s), HBM_OK);
  assert_int_equal(s.n_entries, 4);
  assert_string_equal(s.entries[0].file, "c.csv"); /* run9, the newest name */
  assert_int_equal(s.entries[0].outside, 1);
  assert_int_equal(s.n_skipped, 1); /* the dangling link */
  hbm_logdir_scan_free(&s);
  size_t total;
  assert_int_equal(hbm_logdir_list(dir, NULL, 0, &total), HBM_OK); /* the same policy */
  assert_int_equal(total, 2);
  unlink(alias);
  free(real_dir);
  th_rmtree(dir);
  th_rmtree(out);
  free(dir);
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(new_runs_never_collide),
      cmocka_unit_test(plain_directory_is_one_run),
      cmocka_unit_test(missing_directory_is_reported),
      cmocka_unit_test(links_inside_listed_outside_skipped),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
