/* test_cli_messages.c — what a new user reads (issue 13): `hbm replay` of a missing file does
 * not suggest --lenient; `hbm plan` errors carry the `hbm plan:` prefix; a ')' missing at the
 * end of a line is reported on that line; `hbm help plan` is plan's help; HBM_PROFILE_DIR is
 * where `hbm demo` and `hbm plan` write unless --logdir says otherwise, and a bad one is named;
 * the demo gives its profile's path once; the planner names every buffer larger than the device
 * and says which peak its rematerialization line gives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"

static int hbm(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Runs `[ENV] hbm ARGS` (fmt may start with variable assignments before "@"), output in *out. */
static int hbm(char **out, const char *fmt, ...) {
  char args[4096], cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  char *at = strchr(args, '@');
  if (at) {
    *at = '\0';
    snprintf(cmd, sizeof cmd, "env -u HBM_PROFILE_DIR %s '%s' %s", args, HBM_BIN, at + 1);
  } else {
    snprintf(cmd, sizeof cmd, "env -u HBM_PROFILE_DIR '%s' %s", HBM_BIN, args);
  }
  return th_run(cmd, out);
}

static size_t count(const char *text, const char *part) {
  size_t n = 0;
  for (const char *p = strstr(text, part); p; p = strstr(p + 1, part))
    n++;
  return n;
}

/* How many runs a logdir holds (0 when it does not exist). */
static int runs_in(const char *logdir) {
  char path[4200];
  if (snprintf(path, sizeof path, "%s/plugins/profile", logdir) >= (int)sizeof path)
    fail_msg("logdir path too long: %s", logdir);
  DIR *d = opendir(path);
  if (!d)
    return 0;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static void replay_of_a_missing_file(void **state) {
  (void)state;
  char *out;
  assert_int_equal(hbm(&out, "replay /nonexistent-hbm-log.csv"), 1);
  assert_non_null(strstr(out, "hbm replay: /nonexistent-hbm-log.csv: cannot open"));
  assert_null(strstr(out, "--lenient")); /* skipping lines cannot help a missing file */
  free(out);
}

static void plan_errors_have_the_prefix(void **state) {
  (void)state;
  char *out;
  assert_int_equal(hbm(&out, "plan /nonexistent-hbm-module.hlo"), 1);
  assert_true(strncmp(out, "hbm plan: /nonexistent-hbm-module.hlo: ", 39) == 0);
  free(out);
}

/* Line 3 lacks its ')': XLA's parser, and hbm's, is told so on line 3, not at line 4's first
 * token. */
static void missing_paren_reported_on_its_line(void **state) {
  (void)state;
  char path[4200], *out;
  snprintf(path, sizeof path, "%s/paren.hlo", th_dir);
  const char *text = "HloModule m\n"
                     "ENTRY %e (a: f32[4]) -> f32[4] {\n"
                     "  %a = f32[4]{0} parameter(0\n"
                     "  ROOT %n = f32[4]{0} negate(%a)\n"
                     "}\n";
  assert_int_equal(th_write(path, text, strlen(text)), 0);
  assert_int_equal(hbm(&out, "plan '%s'", path), 1);
  /* "  %a = f32[4]{0} parameter(0" is 28 characters: the ')' belongs in column 29 */
  if (!strstr(out, "paren.hlo:3:29: expected ')' at the end of the line"))
    fail_msg("%s", out);
  free(out);
}

static void help_of_a_command(void **state) {
  (void)state;
  char *out;
  assert_int_equal(hbm(&out, "help plan"), 0);
  assert_true(strncmp(out, "usage: hbm plan MODULE", 22) == 0);
  free(out);
  assert_int_equal(hbm(&out, "help frobnicate"), 2);
  assert_non_null(strstr(out, "unknown command 'frobnicate'"));
  free(out);
}

/* The variable over the default, --logdir over the variable; the path printed once. */
static void demo_logdir_from_the_variable(void **state) {
  (void)state;
  char env_dir[4200], flag_dir[4200], *out;
  snprintf(env_dir, sizeof env_dir, "%s/from-env", th_dir);
  snprintf(flag_dir, sizeof flag_dir, "%s/from-flag", th_dir);
  assert_int_equal(hbm(&out, "HBM_PROFILE_DIR='%s' @demo", env_dir), 1);
  assert_int_equal(runs_in(env_dir), 1);
  assert_int_equal(count(out, "Profile: "), 1);
  assert_int_equal(count(out, "See it with: hbm report "), 1);
  assert_int_equal(count(out, "profile: "), 0); /* once, not again in other words */
  char see[4300];
  snprintf(see, sizeof see, "See it with: hbm report %s\n", env_dir);
  assert_non_null(strstr(out, see));
  free(out);
  assert_int_equal(hbm(&out, "HBM_PROFILE_DIR='%s' @demo --logdir '%s'", env_dir, flag_dir), 1);
  assert_int_equal(runs_in(env_dir), 1);
  assert_int_equal(runs_in(flag_dir), 1);
  free(out);
  /* hbm plan: saved to the variable's logdir when no --logdir is given */
  assert_int_equal(hbm(&out, "HBM_PROFILE_DIR='%s' @plan '%s/examples/seed_oom.hlo' --memory 16GiB",
                       env_dir, HBM_SOURCE_DIR),
                   2);
  assert_int_equal(runs_in(env_dir), 2);
  free(out);
}

static void bad_profile_dir_is_named(void **state) {
  (void)state;
  char *out;
  assert_int_equal(hbm(&out, "HBM_PROFILE_DIR=/proc/nope-hbm @demo"), 1);
  assert_non_null(strstr(out, "HBM_PROFILE_DIR=/proc/nope-hbm: "));
  free(out);
  /* the library, when a program opens a device with the variable set */
  setenv("HBM_PROFILE_DIR", "/proc/nope-hbm", 1);
  hbm_device_t *dev = hbm_open(NULL);
  unsetenv("HBM_PROFILE_DIR");
  if (dev) {
    hbm_close(dev);
    th_skip("hbm_open accepted HBM_PROFILE_DIR=/proc/nope-hbm: a build without the profiler");
  }
  assert_non_null(strstr(hbm_last_error(), "HBM_PROFILE_DIR=/proc/nope-hbm: "));
}

/* examples/seed_oom.hlo on 16 GiB: XLA refuses %xor_convert_fusion (100 GiB) first, but
 * %normal_fusion and %dot.1 (200 GiB each, bf16[327680,327680] = 327680 * 327680 * 2 bytes)
 * do not fit either: the diagnosis names all three. */
static void every_oversized_buffer_named(void **state) {
  (void)state;
  char *out;
  assert_int_equal(hbm(&out, "plan '%s/examples/seed_oom.hlo' --memory 16GiB", HBM_SOURCE_DIR), 2);
  assert_non_null(strstr(out, "3 buffers are each larger than the whole device of 16.00G"));
  assert_non_null(strstr(out, "      200.00G %normal_fusion = "));
  assert_non_null(strstr(out, "      200.00G %dot.1 = "));
  assert_non_null(strstr(out, "      100.00G %xor_convert_fusion = "));
  free(out);
}

static void remat_says_which_peak(void **state) {
  (void)state;
  char *out;
  assert_int_equal(
      hbm(&out, "plan '%s/tests/data/hlo/remat.hlo' --memory 10MiB --remat", HBM_SOURCE_DIR), 0);
  assert_non_null(strstr(out, " (the buffers live at once; the total usage below adds"));
  assert_non_null(strstr(out, "the total usage below adds the heap's fragmentation"));
  free(out);
}

/* The README's `hbm demo` output is the program's: every line of it but the elided ones
 * ("...") and the profile's path (a timestamp and a pid) appears in the demo's output, run as
 * a new user runs it (no HBM_SIM_NAME), with the README's logdir replaced by the test's. */
static void readme_demo_output_matches(void **state) {
  (void)state;
  char *readme = th_read(HBM_SOURCE_DIR "/README.md", NULL), *out, logdir[4200];
  assert_non_null(readme);
  const char *start = strstr(readme, "```\n$ build/hbm demo\n");
  assert_non_null(start);
  start += strlen("```\n$ build/hbm demo\n");
  const char *end = strstr(start, "```");
  assert_non_null(end);
  snprintf(logdir, sizeof logdir, "%s/readme", th_dir);
  assert_int_equal(hbm(&out, "-u HBM_SIM_NAME @demo --logdir '%s'", logdir), 1);
  size_t checked = 0;
  for (const char *line = start; line < end;) {
    const char *nl = strchr(line, '\n');
    char want[1024];
    snprintf(want, sizeof want, "%.*s", (int)(nl - line), line);
    line = nl + 1;
    char *tmp = strstr(want, "hbm report /tmp/hbm");
    if (tmp)
      snprintf(tmp, sizeof want - (size_t)(tmp - want), "hbm report %s", logdir);
    if (!want[0] || strstr(want, "...") || !strncmp(want, "Profile: ", 9))
      continue;
    if (!strstr(out, want))
      fail_msg("README line not in the demo's output:\n%s\n--- output:\n%s", want, out);
    checked++;
  }
  assert_true(checked >= 15);
  free(out);
  free(readme);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(replay_of_a_missing_file),
      cmocka_unit_test(plan_errors_have_the_prefix),
      cmocka_unit_test(missing_paren_reported_on_its_line),
      cmocka_unit_test(help_of_a_command),
      cmocka_unit_test(demo_logdir_from_the_variable),
      cmocka_unit_test(bad_profile_dir_is_named),
      cmocka_unit_test(every_oversized_buffer_named),
      cmocka_unit_test(remat_says_which_peak),
      cmocka_unit_test(readme_demo_output_matches),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
