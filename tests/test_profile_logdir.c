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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(new_runs_never_collide),
      cmocka_unit_test(plain_directory_is_one_run),
      cmocka_unit_test(missing_directory_is_reported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
