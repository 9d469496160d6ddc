/* test_profile_cli.c — `hbm report` and `hbm export` run as a user runs them: on an RMM log,
 * a saved profile, a logdir and a run directory, a truncated profile (the loss is printed),
 * with --json and --space; the JSON and the Chrome trace are parsed and checked; bad input
 * exits non-zero with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"

#define SMALL_CSV HBM_SOURCE_DIR "/tests/data/profile/small.csv"

/* Runs `hbm ARGS`; returns the exit status and the output (stdout and stderr). */
static int hbm(char **out, const char *fmt, ...) {
  char args[8192], cmd[8400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof cmd, "'%s' %s", HBM_BIN, args);
  return th_run(cmd, out);
}

static json_t *parse_json(const char *text) {
  json_error_t err;
  json_t *j = json_loads(text, 0, &err);
  if (!j)
    fail_msg("invalid JSON (line %d: %s) in:\n%.2000s", err.line, err.text, text);
  return j;
}

static void report_of_an_rmm_log(void **state) {
  (void)state;
  char *out;
  assert_int_equal(hbm(&out, "report '%s' --json 2>/dev/null", SMALL_CSV), 0);
  json_t *j = parse_json(out);
  /* in use after each event: 100, 400, 300, 800, 800, 500, 0 */
  assert_true(json_integer_value(json_object_get(j, "peak_bytes")) == 800);
  assert_true(json_integer_value(json_object_get(j, "peak_step")) == 3);
  assert_true(
      json_is_null(json_object_get(j, "peak_reserved_bytes"))); /* unknown: no reservations */
  assert_true(json_integer_value(json_object_get(j, "limit_bytes")) == 0);
  json_t *buffers = json_object_get(j, "buffers_at_peak");
  assert_int_equal(json_array_size(buffers), 2);
  assert_true(json_integer_value(json_object_get(json_array_get(buffers, 0), "size")) == 500);
  assert_true(json_integer_value(json_object_get(json_array_get(buffers, 1), "size")) == 300);
  assert_true(json_is_null(json_object_get(json_array_get(buffers, 0), "op")));
  assert_string_equal(json_string_value(json_object_get(json_array_get(buffers, 0), "category")),
                      "unknown");
  json_t *ooms = json_object_get(j, "oom_events");
  assert_int_equal(json_array_size(ooms), 1);
  assert_true(json_integer_value(json_object_get(json_array_get(ooms, 0), "requested")) == 1000000);
  json_decref(j);
  free(out);

  assert_int_equal(hbm(&out, "report '%s' --width 80", SMALL_CSV), 0);
  assert_non_null(strstr(out, "peak in use      800B at step 3 (t = 3.00 us)"));
  assert_non_null(strstr(out, "OOM events (1)"));
  assert_non_null(strstr(out, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                              "1000000 bytes."));
  free(out);
}

/* A runtime profile of n alloc/free pairs with tags, saved to path. */
static void save_synthetic(const char *path, int n, const char *device) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "synthetic");
  hbm_profile_add_space(p, "HBM", device, 0, 1ull << 30);
  hbm_tag_t tag = {"jit(step)/dot_general", "bf16[256,4096]", HBM_CAT_TEMPORARY, "activations",
                   "model.py:30"};
  for (int i = 0; i < n; i++) {
    int64_t s = hbm_profile_add_step(p, (int64_t)i * 1000, NULL);
    hbm_profile_alloc_at(p, s, 0, 0x10000 + (uint64_t)(i % 512) * 0x10000,
                         4096 + (uint64_t)(i % 97), &tag);
    if (i >= 256) {
      s = hbm_profile_add_step(p, (int64_t)i * 1000 + 500, NULL);
      assert_int_equal(
          hbm_profile_free_at(p, s, 0, 0x10000 + (uint64_t)((i - 256) % 512) * 0x10000), HBM_OK);
    }
  }
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  assert_int_equal(hbm_profile_save(p, path), HBM_OK);
  hbm_profile_free(p);
}

static void report_of_a_logdir_and_a_run(void **state) {
  (void)state;
  char logdir[4200], run[4300], path[4400];
  snprintf(logdir, sizeof logdir, "%s/logdir", th_dir);
  assert_int_equal(hbm_logdir_new_run(logdir, run, sizeof run), HBM_OK);
  snprintf(path, sizeof path, "%s/host.1.hbmtrace", run);
  save_synthetic(path, 2000, "sim0");
  char *out;
  assert_int_equal(hbm(&out, "report '%s' --json 2>/dev/null", logdir), 0);
  json_t *j = parse_json(out);
  assert_string_equal(json_string_value(json_object_get(j, "device")), "sim0");
  assert_true(json_integer_value(json_object_get(j, "peak_bytes")) > 256 * 4096);
  json_t *b = json_array_get(json_object_get(j, "buffers_at_peak"), 0);
  assert_string_equal(json_string_value(json_object_get(b, "op")), "jit(step)/dot_general");
  assert_string_equal(json_string_value(json_object_get(b, "shape")), "bf16[256,4096]");
  assert_string_equal(json_string_value(json_object_get(b, "category")), "temporary");
  json_decref(j);
  free(out);
  assert_int_equal(hbm(&out, "report '%s' --space sim0", run), 0);
  assert_non_null(strstr(out, "== HBM on sim0 =="));
  free(out);
  assert_int_equal(hbm(&out, "report '%s' --space sim9", run), 2);
  assert_non_null(strstr(out, "no memory space 'sim9' (it has: HBM on sim0)"));
  free(out);
  /* a second profile in the same run: both are reported */
  snprintf(path, sizeof path, "%s/host.2.hbmtrace", run);
  save_synthetic(path, 300, "sim1");
  assert_int_equal(hbm(&out, "report '%s' --json 2>/dev/null", logdir), 0);
  j = parse_json(out);
  assert_int_equal(json_array_size(json_object_get(j, "profiles")), 2);
  assert_string_equal(json_string_value(json_object_get(j, "device")), "sim0"); /* higher peak */
  json_decref(j);
  free(out);
  assert_int_equal(hbm(&out, "report '%s'", logdir), 0);
  assert_non_null(strstr(out, "host.1.hbmtrace"));
  assert_non_null(strstr(out, "host.2.hbmtrace"));
  free(out);
  assert_int_equal(hbm(&out, "export '%s' -o /dev/null", logdir), 2);
  assert_non_null(strstr(out, "name one of them"));
  free(out);
}

static void truncated_profile_reports_its_loss(void **state) {
  (void)state;
  char path[4200];
  snprintf(path, sizeof path, "%s/big.hbmtrace", th_dir);
  save_synthetic(path, 60000, "sim0");
  size_t len;
  char *data = th_read(path, &len);
  assert_non_null(data);
  assert_int_equal(th_write(path, data, len - 100), 0); /* cut inside the last block */
  free(data);
  char *out;
  assert_int_equal(hbm(&out, "report '%s'", path), 0);
  char *note = strstr(out, "note: lost ");
  assert_non_null(note);
  assert_non_null(strstr(note, " bytes after block "));
  assert_non_null(strstr(note, "(file truncated)"));
  free(out);
  assert_int_equal(hbm(&out, "report '%s' --json 2>/dev/null", path), 0);
  json_t *j = parse_json(out);
  assert_non_null(strstr(json_string_value(json_object_get(j, "lost")), "file truncated"));
  json_decref(j);
  free(out);
}

static void export_opens_as_chrome_trace(void **state) {
  (void)state;
  char *out, trace[4200];
  assert_int_equal(hbm(&out, "export '%s' --format chrome 2>/dev/null", SMALL_CSV), 0);
  json_t *j = parse_json(out);
  json_t *events = json_object_get(j, "traceEvents");
  assert_true(json_array_size(events) > 0);
  int begins = 0, counters = 0, ooms = 0;
  for (size_t i = 0; i < json_array_size(events); i++) {
    json_t *e = json_array_get(events, i);
    const char *ph = json_string_value(json_object_get(e, "ph"));
    begins += !strcmp(ph, "b");
    counters += !strcmp(ph, "C");
    ooms += !strcmp(ph, "i");
  }
  assert_int_equal(begins, 3);
  assert_true(counters >= 5);
  assert_int_equal(ooms, 1);
  json_decref(j);
  free(out);
  snprintf(trace, sizeof trace, "%s/trace.json", th_dir);
  assert_int_equal(hbm(&out, "export '%s' -o '%s'", SMALL_CSV, trace), 0);
  free(out);
  char *text = th_read(trace, NULL);
  json_decref(parse_json(text));
  free(text);
}

static void bad_input_fails_with_a_message(void **state) {
  (void)state;
  char *out;
  assert_int_equal(hbm(&out, "report /nonexistent/x.csv"), 1);
  assert_non_null(strstr(out, "hbm report: /nonexistent/x.csv: no such file or directory"));
  free(out);
  assert_int_equal(hbm(&out, "report '%s'/empty", th_dir), 1);
  assert_non_null(strstr(out, "no such file or directory"));
  free(out);
  assert_int_equal(hbm(&out, "report \"$(mkdir '%s/empty' && echo '%s/empty')\"", th_dir, th_dir),
                   1);
  assert_non_null(strstr(out, "empty: no profiles found"));
  free(out);
  char junk[4200];
  snprintf(junk, sizeof junk, "%s/junk.bin", th_dir);
  assert_int_equal(th_write(junk, "\x01\x02garbage", 9), 0);
  assert_int_equal(hbm(&out, "report '%s'", junk), 1);
  assert_non_null(strstr(out, "not a profile hbm can read"));
  free(out);
  assert_int_equal(hbm(&out, "export '%s' --format pprof", SMALL_CSV), 2);
  assert_non_null(strstr(out, "unknown format 'pprof' (expected chrome)"));
  free(out);
  assert_int_equal(hbm(&out, "report"), 2);
  assert_non_null(strstr(out, "usage: hbm report"));
  free(out);
  assert_int_equal(hbm(&out, "report --help"), 0);
  free(out);
}

/* The report's peak and `hbm replay`'s peak live bytes are the same number for one log.
 * `hbm replay` failing is a failure of this test, not a reason to skip it. */
static void report_peak_equals_replay_peak(void **state) {
  (void)state;
  char *out;
  assert_int_equal(hbm(&out, "replay '%s' --json 2>/dev/null", SMALL_CSV), 0);
  assert_non_null(strchr(out, '{'));
  json_t *replay = parse_json(strchr(out, '{'));
  free(out);
  assert_int_equal(hbm(&out, "report '%s' --json 2>/dev/null", SMALL_CSV), 0);
  json_t *report = parse_json(out);
  free(out);
  assert_true(json_integer_value(json_object_get(replay, "peak_live_bytes")) ==
              json_integer_value(json_object_get(report, "peak_bytes")));
  json_decref(replay);
  json_decref(report);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(report_of_an_rmm_log),
      cmocka_unit_test(report_of_a_logdir_and_a_run),
      cmocka_unit_test(truncated_profile_reports_its_loss),
      cmocka_unit_test(export_opens_as_chrome_trace),
      cmocka_unit_test(bad_input_fails_with_a_message),
      cmocka_unit_test(report_peak_equals_replay_peak),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
