/* test_import_load.c — hbm_profile_load recognises each format from the content, not the
 * file name: an .hbmtrace (saved profile), an RMM CSV log, HLO text (after comments), XLA's
 * buffer-assignment and memory-usage-report dumps (planned, and copied out of the plan), and
 * anything else gets a message naming what was expected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"

#define DATA HBM_SOURCE_DIR "/tests/data/profile/"

static const char *write_temp(const char *name, const char *text) {
  static char path[4200];
  snprintf(path, sizeof path, "%s/%s", th_dir, name);
  assert_int_equal(th_write(path, text, strlen(text)), 0);
  return path;
}

static uint64_t peak_of(const hbm_profile_t *p, int space) {
  hbm_analysis_t *a = hbm_analyze(p, space);
  assert_non_null(a);
  uint64_t peak = hbm_analysis_summary(a)->peak_bytes;
  hbm_analysis_free(a);
  return peak;
}

static void csv_by_content(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(DATA "small.csv");
  assert_non_null(p);
  assert_int_equal(hbm_profile_kind(p), HBM_PROFILE_RUNTIME);
  assert_true(peak_of(p, 0) == 800);
  hbm_profile_free(p);
  /* the name does not matter; a bad line is reported with its number */
  const char *path = write_temp("log.txt", "Thread,Time,Action,Pointer,Size,Stream\n"
                                           "1,0.5,allocate,0x10,100,0x0\n"
                                           "1,0.6,free,0x20,100,0x0\n");
  assert_null(hbm_profile_load(path));
  assert_non_null(strstr(hbm_last_error(), "log.txt:3: free of 0x20"));
}

/* A log cut short or damaged in its bytes keeps what came before; "lost" counts the rest. */
static void damaged_log_is_read_up_to_the_damage(void **state) {
  (void)state;
  static const char head[] = "Thread,Time,Action,Pointer,Size,Stream\n"
                             "1,0.5,allocate,0x10,100,0x0\n"
                             "1,0.6,allocate,0x20,50,0x0\n";
  char text[512];
  /* cut inside the fourth line: its 15 bytes ("1,0.7,free,0x10"), no newline, are what is lost */
  snprintf(text, sizeof text, "%s1,0.7,free,0x10", head);
  hbm_profile_t *p = hbm_profile_load(write_temp("cut.csv", text));
  assert_non_null(p);
  assert_true(hbm_profile_buffer_count(p) == 2 && peak_of(p, 0) == 150);
  const char *lost = hbm_profile_meta(p, "lost");
  assert_non_null(lost);
  assert_non_null(strstr(lost, "lost 15 bytes from line 4 to the end (file truncated: "));
  assert_non_null(strstr(lost, "cut.csv:4: expected 6 fields"));
  hbm_profile_free(p);
  /* a damaged pointer on line 4 and the line after it, 22 bytes each with their newline */
  snprintf(text, sizeof text, "%s1,0.7,free,0xZZ,0,0x0\n1,0.8,free,0x10,0,0x0\n", head);
  p = hbm_profile_load(write_temp("bad.csv", text));
  assert_non_null(p);
  lost = hbm_profile_meta(p, "lost");
  assert_non_null(lost);
  assert_non_null(strstr(lost, "lost 44 bytes from line 4 to the end (damaged: "));
  assert_non_null(strstr(lost, "bad.csv:4: field 4 (Pointer)"));
  hbm_profile_free(p);
  /* damage at the first event leaves nothing to keep: an error, as before */
  assert_null(hbm_profile_load(write_temp("first.csv", "Thread,Time,Action,Pointer,Size,Stream\n"
                                                       "1,0.5,allocate,0x10\n")));
  assert_non_null(strstr(hbm_last_error(), "first.csv:2: expected 6 fields"));
}

static void trace_by_content(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(DATA "small.csv");
  char path[4200];
  snprintf(path, sizeof path, "%s/saved.bin", th_dir);
  assert_int_equal(hbm_profile_save(p, path), HBM_OK);
  hbm_profile_t *q = hbm_profile_load(path);
  assert_non_null(q);
  assert_string_equal(hbm_profile_name(q), "small.csv");
  assert_true(hbm_profile_buffer_count(q) == hbm_profile_buffer_count(p));
  assert_true(peak_of(q, 0) == 800);
  assert_int_equal(hbm_profile_oom_count(q), 1);
  hbm_profile_free(q);
  hbm_profile_free(p);
}

static void hlo_after_comments(void **state) {
  (void)state;
  const char *path = write_temp("module.txt", "// a comment\n\n  // another\n"
                                              "HloModule tiny\n\n"
                                              "ENTRY main {\n"
                                              "  p0 = f32[1024]{0} parameter(0)\n"
                                              "  ROOT add = f32[1024]{0} add(p0, p0)\n"
                                              "}\n");
  hbm_profile_t *p = hbm_profile_load(path);
  if (!p)
    fail_msg("%s", hbm_last_error());
  assert_int_equal(hbm_profile_kind(p), HBM_PROFILE_PLAN);
  assert_true(peak_of(p, 0) >= 2 * 4096); /* the parameter and the result */
  hbm_profile_free(p);
}

static void xla_buffer_assignment(void **state) {
  (void)state;
  hbm_profile_t *p =
      hbm_profile_load(DATA "module_0001.jit_f.gpu_after_optimizations-buffer-assignment.txt");
  if (!p)
    fail_msg("%s", hbm_last_error());
  assert_int_equal(hbm_profile_kind(p), HBM_PROFILE_PLAN);
  assert_true(hbm_profile_buffer_count(p) >= 3);
  assert_true(peak_of(p, 0) >= 614400000ull);
  hbm_profile_free(p);
}

static void xla_memory_report_goes_to_the_planner(void **state) {
  (void)state;
  hbm_profile_t *p =
      hbm_profile_load(DATA "module_0002.jit_g.gpu_after_optimizations-memory-usage-report.txt");
  if (p) {
    assert_int_equal(hbm_profile_kind(p), HBM_PROFILE_PLAN);
    hbm_profile_free(p);
  } else { /* recognised: whatever the planner says, it is not "not a profile" */
    assert_null(strstr(hbm_last_error(), "not a profile hbm can read"));
  }
}

static void unknown_content_is_refused(void **state) {
  (void)state;
  const char *texts[] = {"", "hello world\n", "\x89PNG\r\n\x1a\n", "// only a comment\n",
                         "HBMTRAC"};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    const char *path = write_temp("unknown", texts[i]);
    assert_null(hbm_profile_load(path));
    assert_non_null(strstr(hbm_last_error(), "not a profile hbm can read: expected"));
  }
  assert_null(hbm_profile_load("/nonexistent/profile.hbmtrace"));
  assert_non_null(strstr(hbm_last_error(), "/nonexistent/profile.hbmtrace"));
  assert_null(hbm_profile_load(th_dir)); /* a directory */
  assert_int_equal(hbm_last_status(), HBM_ERR_IO);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(csv_by_content),
      cmocka_unit_test(damaged_log_is_read_up_to_the_damage),
      cmocka_unit_test(trace_by_content),
      cmocka_unit_test(hlo_after_comments),
      cmocka_unit_test(xla_buffer_assignment),
      cmocka_unit_test(xla_memory_report_goes_to_the_planner),
      cmocka_unit_test(unknown_content_is_refused),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
