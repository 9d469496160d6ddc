/* test_cli_plan_fit.c — `hbm plan --fit`: a module family where the batch varies, as files
 * (--fit 'fam_b{}.hlo') and as a command that prints the module of a batch (--fit-command).
 * The module for batch N holds a parameter, a temporary and an output of 1024 N bytes each, so
 * the largest batch that fits M bytes is floor(M / 3072) (by hand); exit statuses 0 (found),
 * 2 (not even the smallest) and 1 (a module could not be made), and usage errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

static const char generator[] = "#!/bin/sh\n"
                                "n=$1\n"
                                "[ \"$n\" = 13 ] && exit 3\n"
                                "cat <<H\n"
                                "HloModule fam_$n, is_scheduled=true\n\n"
                                "ENTRY main {\n"
                                "  p = f32[$n,256]{1,0} parameter(0)\n"
                                "  t = f32[$n,256]{1,0} exponential(p)\n"
                                "  ROOT r = f32[$n,256]{1,0} add(t, p)\n"
                                "}\n"
                                "H\n";

static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *fmt, ...) {
  char cmd[8192];
  int n = snprintf(cmd, sizeof cmd, "cd '%s' && '%s' plan ", th_dir, HBM_BIN);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
  va_end(ap);
  return th_run(cmd, out);
}

static int setup(void **state) {
  if (th_tmpdir_setup(state))
    return -1;
  char path[4200], cmd[8600];
  snprintf(path, sizeof path, "%s/gen.sh", th_dir);
  if (th_write(path, generator, strlen(generator)))
    return -1;
  /* Files for batches 1, 2, 4, 100, 200, 300, 400 (and a stray file with no number). */
  snprintf(cmd, sizeof cmd,
           "cd '%s' && chmod +x gen.sh && for n in 1 2 4 100 200 300 400; do ./gen.sh $n > "
           "fam_b$n.hlo; done && ./gen.sh 5 > fam_bx.hlo",
           th_dir);
  return th_run(cmd, NULL);
}

static void command_family(void **state) {
  (void)state;
  char *out;
  assert_int_equal(run(&out, "--fit-command './gen.sh {}' --memory 1MiB --dimension batch "
                             "--backend none"),
                   0);
  assert_non_null(strstr(out, "hbm fit: the largest batch that fits in 1.00MiB is 341\n"));
  assert_non_null(strstr(out, "batch 342: 1.00MiB (1050624 bytes) used of 1.00MiB: does not fit"));
  assert_non_null(strstr(out, "what is at the peak at batch 342, where it stops fitting:"));
  assert_non_null(strstr(out, "Ran out of memory in memory space hbm."));
  free(out);
  /* From 16 in multiples of 16: 336 * 3072 fits 1 MiB, 352 does not. */
  assert_int_equal(run(&out, "--fit-command './gen.sh {}' --memory 1MiB --from 16 --multiple 16 "
                             "--json --backend none"),
                   0);
  assert_non_null(strstr(out, "\"value\": 336"));
  assert_non_null(strstr(out, "\"next\": 352"));
  free(out);
}

static void file_family(void **state) {
  (void)state;
  char *out;
  assert_int_equal(run(&out, "--fit 'fam_b{}.hlo' --memory 1MiB --backend none"), 0);
  assert_non_null(strstr(out, "the largest value that fits in 1.00MiB is 300\n"));
  assert_non_null(strstr(out, "value 400: 1.17MiB (1228800 bytes) used"));
  free(out);
  assert_int_equal(run(&out, "--fit 'fam_b{}.hlo' --memory 1MiB --to 250 --backend none"), 0);
  assert_non_null(strstr(out, "every value tried fits in 1.00MiB; the largest, 200, is"));
  free(out);
  assert_int_equal(run(&out, "--fit 'none_{}.hlo' --memory 1MiB"), 1);
  assert_non_null(strstr(out, "no file matches"));
  free(out);
}

static void does_not_fit_and_errors(void **state) {
  (void)state;
  char *out;
  assert_int_equal(run(&out, "--fit 'fam_b{}.hlo' --memory 2KiB --backend none"), 2);
  assert_non_null(strstr(out, "even the smallest value, 1, does not fit in 2.00KiB"));
  assert_non_null(strstr(out, "Largest program allocations in hbm"));
  free(out);
  /* The generator fails for 13: bisection between 8 and 16 reaches it. */
  assert_int_equal(run(&out, "--fit-command './gen.sh {}' --memory 40KiB --backend none"), 1);
  assert_non_null(strstr(out, "./gen.sh 13: exit status 3"));
  free(out);
  assert_int_equal(run(&out, "--fit 'fam_b.hlo' --memory 1MiB"), 2);
  assert_non_null(strstr(out, "must hold {}"));
  free(out);
  assert_int_equal(run(&out, "--fit 'fam_b{}.hlo'"), 2);
  assert_non_null(strstr(out, "--fit needs --memory"));
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(command_family),
      cmocka_unit_test(file_family),
      cmocka_unit_test(does_not_fit_and_errors),
  };
  return cmocka_run_group_tests(tests, setup, th_tmpdir_teardown);
}
