/* test_cli_plan.c — `hbm plan`: the seed's error and exit status 2 on a 16 GiB device, the
 * E1000 report, JSON, --remat with --remat-out, --logdir (a profile that loads back), parse
 * errors (exit 1, file:line:column) and usage errors (exit 2), --backend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"

static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Runs `hbm plan <arguments>`, stdout and stderr together in *out. */
static int run(char **out, const char *fmt, ...) {
  char cmd[8192];
  int n = snprintf(cmd, sizeof cmd, "%s plan ", HBM_BIN);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd + n, sizeof cmd - (size_t)n, fmt, ap);
  va_end(ap);
  return th_run(cmd, out);
}

#define DATA HBM_SOURCE_DIR "/tests/data/hlo/"

static void seed_error_and_exit_status(void **state) {
  (void)state;
  char *out;
  int rc = run(&out, "%s/examples/seed_oom.hlo --memory 16GiB", HBM_SOURCE_DIR);
  assert_int_equal(rc, 2);
  const char *first = "RESOURCE_EXHAUSTED: Allocation (size=107374182400) would exceed memory "
                      "(size=17179869184) :: #allocation1 [shape = "
                      "'u8[327680,327680]{1,0:T(8,128)(4,1)}', space=hbm, size = "
                      "0xffffffffffffffff, tag = 'output of xor_convert_fusion@{}'] :: "
                      "<no-hlo-instruction>\n";
  if (strncmp(out, first, strlen(first)) != 0)
    fail_msg("%.300s", out);
  assert_non_null(strstr(out, "hbm's diagnosis"));
  free(out);
  /* without --memory there is nothing to exceed */
  assert_int_equal(run(NULL, "%s/examples/seed_oom.hlo", HBM_SOURCE_DIR), 0);
}

static void report_and_json(void **state) {
  (void)state;
  char *out;
  assert_int_equal(run(&out, DATA "chain.hlo --memory 10000 --top 2"), 2);
  assert_non_null(strstr(out, "Ran out of memory in memory space hbm. Used 16.1K of 9.8K hbm."));
  assert_non_null(strstr(out, "  2. Size: 4.0K"));
  assert_null(strstr(out, "  3. Size:"));
  free(out);
  assert_int_equal(run(&out, DATA "chain.hlo --json"), 0);
  json_error_t err;
  json_t *j = json_loads(out, 0, &err);
  if (!j)
    fail_msg("%s: %s", err.text, out);
  assert_int_equal(json_integer_value(json_object_get(j, "temp_bytes")), 16384);
  assert_string_equal(json_string_value(json_object_get(j, "peak_instruction")), "c");
  json_decref(j);
  free(out);
}

static void remat_writes_a_module(void **state) {
  (void)state;
  char *dir = th_mkdtemp("plan");
  char *out;
  assert_int_equal(run(&out, DATA "remat.hlo --memory 10MiB --remat --remat-out %s/r.hlo", dir), 0);
  assert_non_null(strstr(out, "%bc (4.00M) recomputed as %bc.remat1"));
  free(out);
  assert_int_equal(run(&out, "%s/r.hlo --memory 10MiB", dir), 0);
  assert_non_null(strstr(out, "Total hbm usage >= 8.11M:"));
  free(out);
  th_rmtree(dir);
  free(dir);
}

static void logdir_profile_loads(void **state) {
  (void)state;
  char *dir = th_mkdtemp("plan-logdir");
  char *out;
  assert_int_equal(run(&out, DATA "chain.hlo --logdir %s", dir), 0);
  free(out);
  hbm_logdir_entry_t entries[4];
  size_t total = 0;
  assert_int_equal(hbm_logdir_list(dir, entries, 4, &total), HBM_OK);
  assert_int_equal(total, 1);
  assert_string_equal(entries[0].file, "chain.hbmtrace");
  hbm_profile_t *p = hbm_profile_load(entries[0].path);
  if (!p)
    fail_msg("%s", hbm_last_error());
  assert_int_equal(hbm_profile_kind(p), HBM_PROFILE_PLAN);
  assert_int_equal(hbm_profile_step_count(p), 9);
  assert_int_equal(hbm_profile_buffer_count(p), 12);
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_true(hbm_analysis_summary(a)->peak_bytes == 16384 + 144);
  hbm_analysis_free(a);
  hbm_profile_free(p);
  th_rmtree(dir);
  free(dir);
}

static void errors_and_usage(void **state) {
  (void)state;
  char *dir = th_mkdtemp("plan-bad");
  char path[4200];
  snprintf(path, sizeof path, "%s/bad.hlo", dir);
  const char *bad =
      "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT q f32[2] negate(p)\n}\n";
  assert_int_equal(th_write(path, bad, strlen(bad)), 0);
  char *out;
  assert_int_equal(run(&out, "%s", path), 1);
  assert_non_null(strstr(out, "bad.hlo:4:10: expected '='"));
  free(out);
  assert_int_equal(run(&out, "%s/missing.hlo", dir), 1);
  free(out);
  const char *usage[] = {"",
                         "--memory 16GiB",
                         DATA "chain.hlo --memory lots",
                         DATA "chain.hlo --remat",
                         DATA "chain.hlo --frobnicate",
                         DATA "chain.hlo " DATA "call.hlo",
                         DATA "chain.hlo --top 0"};
  for (size_t i = 0; i < sizeof usage / sizeof usage[0]; i++) {
    int rc = run(&out, "%s", usage[i]);
    if (rc != 2)
      fail_msg("'%s' exited %d:\n%s", usage[i], rc, out);
    assert_non_null(strstr(out, "hbm plan"));
    free(out);
  }
  assert_int_equal(run(&out, "--help"), 0);
  assert_non_null(strstr(out, "usage: hbm plan MODULE"));
  free(out);
  th_rmtree(dir);
  free(dir);
}

/* --backend: XLA's GPU rules put exp(p) in the output's allocation (temp 0), the plain
 * planner does not (1024 B: f32[256]); see tests/data/hlo/xla_reuse.hlo. */
static void backend_option(void **state) {
  (void)state;
  char *out;
  assert_int_equal(run(&out, DATA "xla_reuse.hlo --json --backend gpu"), 0);
  assert_non_null(strstr(out, "\"temp_bytes\": 0,"));
  assert_non_null(strstr(out, "\"backend\": \"gpu\""));
  free(out);
  assert_int_equal(run(&out, DATA "xla_reuse.hlo --json --backend none"), 0);
  assert_non_null(strstr(out, "\"temp_bytes\": 1024,"));
  free(out);
  assert_int_equal(run(&out, DATA "xla_reuse.hlo --backend quantum"), 2);
  assert_non_null(strstr(out, "--backend takes gpu, cpu, tpu or none"));
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(seed_error_and_exit_status), cmocka_unit_test(report_and_json),
      cmocka_unit_test(remat_writes_a_module),      cmocka_unit_test(logdir_profile_loads),
      cmocka_unit_test(errors_and_usage),           cmocka_unit_test(backend_option),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
