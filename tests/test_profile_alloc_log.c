/* test_profile_alloc_log.c — RMM CSV logs: a small log checked by hand (events, numbering of
 * threads and streams, times in both formats, its profile's peak and OOM); every kind of bad
 * line gives "file:line: ... expected ..."; lenient mode skips and counts; and the real logs
 * in ../shared/traces (skipped when absent) parse, with the profile's peak equal to the peak
 * computed here from the same events. */
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

static const char *small_path(void) { return HBM_SOURCE_DIR "/tests/data/profile/small.csv"; }

static void small_log_by_hand(void **state) {
  (void)state;
  hbm_alloc_log_t log;
  assert_int_equal(hbm_alloc_log_read(small_path(), 0, &log), HBM_OK);
  assert_int_equal(log.n_events, 7);
  assert_int_equal(log.skipped, 0);
  const hbm_log_event_t *e = log.events;
  assert_int_equal(e[0].action, HBM_LOG_ALLOCATE);
  assert_true(e[0].pointer == 0x1000 && e[0].size == 100 && e[0].time_ns == 1000);
  assert_true(e[0].line == 2 && e[0].thread == 0 && e[0].stream == 0);
  assert_int_equal(e[2].action, HBM_LOG_FREE);
  assert_true(e[2].thread == 1);
  assert_true(e[3].stream == 1 && e[3].size == 500);
  assert_int_equal(e[4].action, HBM_LOG_ALLOCATE_FAILURE);
  assert_true(e[4].size == 1000000 && e[4].line == 6);
  assert_true(e[6].time_ns == 7000);

  hbm_profile_t *p = hbm_alloc_log_to_profile(&log, small_path());
  assert_non_null(p);
  assert_string_equal(hbm_profile_name(p), "small.csv");
  assert_int_equal(hbm_profile_space_count(p), 1);
  assert_string_equal(hbm_profile_space(p, 0)->name, "unknown"); /* the CSV does not say */
  assert_string_equal(hbm_profile_space(p, 0)->device, "log");
  assert_true(hbm_profile_step_count(p) == 7); /* one step per event, the failure too */
  assert_true(hbm_profile_step_time(p, 0) == 0 && hbm_profile_step_time(p, 6) == 6000);
  /* in use after each event: 100, 400, 300, 800, 800, 500, 0 */
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_true(hbm_analysis_summary(a)->peak_bytes == 800);
  assert_true(hbm_analysis_summary(a)->peak_step == 3);
  assert_true(hbm_analysis_bytes_at(a, 5) == 500);
  hbm_analysis_free(a);
  assert_int_equal(hbm_profile_oom_count(p), 1);
  const hbm_oom_event_t *oom = hbm_profile_oom(p, 0);
  assert_true(oom->step == 4 && oom->requested == 1000000);
  assert_non_null(strstr(oom->message, "RESOURCE_EXHAUSTED: Out of memory while trying to "
                                       "allocate 1000000 bytes."));
  assert_non_null(strstr(oom->message, "small.csv:6"));
  assert_string_equal(hbm_profile_buffer(p, 0)->source, "small.csv:2");
  hbm_profile_free(p);
  hbm_alloc_log_free(&log);
}

static void parse_text(const char *text, int lenient, hbm_alloc_log_t *log, hbm_status_t want) {
  hbm_status_t s = hbm_alloc_log_parse(text, strlen(text), "t.csv", lenient, log);
  if (s != want)
    fprintf(stderr, "unexpected status %d: %s\n", (int)s, hbm_last_error());
  assert_int_equal(s, want);
}

static void clock_times_and_forms(void **state) {
  (void)state;
  hbm_alloc_log_t log;
  const char *text = "\xef\xbb\xbfThread, Time, Action, Pointer, Size, Stream\r\n"
                     "7,23:59:59.999999,allocate,0x7F0000000000,8,0x0\r\n"
                     "\r\n"
                     "7,00:00:00.000001,deallocate,7f0000000000,8,0x0\r\n"
                     "140573312345856,1634567890.5,allocate,0xA,1,0x7f8a38001020";
  parse_text(text, 0, &log, HBM_OK);
  assert_int_equal(log.n_events, 3);
  int64_t day = 24ll * 3600 * 1000000000;
  assert_true(log.events[0].time_ns == day - 1000);
  assert_true(log.events[1].time_ns == day + 1000); /* past midnight */
  assert_int_equal(log.events[1].action, HBM_LOG_FREE);
  assert_true(log.events[1].line == 4);
  assert_true(log.events[2].time_ns == 1634567890500000000ll);
  assert_true(log.events[2].thread == 1 && log.events[2].stream == 1);
  hbm_alloc_log_free(&log);
}

/* RMM logs events in the order they happen: a time earlier than the line before's is noted in
 * the profile (and its report) with the line, and the events keep the log's order. Lines 4
 * (0.3 s after 0.6 s) and 5 (0.2 s after 0.3 s) go back: 2 times, first at line 4. Clock times
 * that pass midnight (23:59:59 then 00:00:00) are not going back. */
static void times_going_backwards_are_noted(void **state) {
  (void)state;
  hbm_alloc_log_t log;
  parse_text("Thread,Time,Action,Pointer,Size,Stream\n"
             "1,0.5,allocate,0x1000,100,0x0\n"
             "1,0.6,allocate,0x2000,100,0x0\n"
             "1,0.3,free,0x1000,100,0x0\n"
             "1,0.2,free,0x2000,100,0x0\n",
             0, &log, HBM_OK);
  hbm_profile_t *p = hbm_alloc_log_to_profile(&log, "t.csv");
  assert_non_null(p);
  const char *note = hbm_profile_meta(p, "notes");
  assert_non_null(note);
  assert_non_null(strstr(note, "the log's times go backwards 2 times, first at t.csv:4 "
                               "(0.300000 s, after 0.600000 s on line 3)"));
  assert_int_equal(hbm_profile_step_count(p), 4); /* in the log's order */
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_int_equal(hbm_report_text(p, -1, 80, f), HBM_OK);
  fclose(f);
  assert_non_null(strstr(text, "note: the log's times go backwards 2 times, first at t.csv:4"));
  free(text);
  hbm_profile_free(p);
  hbm_alloc_log_free(&log);

  parse_text("Thread,Time,Action,Pointer,Size,Stream\n"
             "7,23:59:59.999999,allocate,0x7F0000000000,8,0x0\n"
             "7,00:00:00.000001,free,0x7F0000000000,8,0x0\n",
             0, &log, HBM_OK);
  p = hbm_alloc_log_to_profile(&log, "t.csv");
  assert_null(hbm_profile_meta(p, "notes"));
  hbm_profile_free(p);
  hbm_alloc_log_free(&log);
}

static void bad_lines_say_where_and_what(void **state) {
  (void)state;
  static const struct {
    const char *line3, *expect;
  } cases[] = {
      {"1,0.1,allocate,0xZZ,8,0x0", "t.csv:3: field 4 (Pointer): expected a hex pointer"},
      {"1,0.1,allocate,0x10,8", "t.csv:3: expected 6 fields"},
      {"1,0.1,allocate,0x10,8,0x0,extra", "t.csv:3: expected 6 fields"},
      {"1,0.1,alloc,0x10,8,0x0", "t.csv:3: field 3 (Action): expected allocate, free or"},
      {"1,yesterday,allocate,0x10,8,0x0", "t.csv:3: field 2 (Time): expected seconds"},
      {"1,25:00:00.0,allocate,0x10,8,0x0", "t.csv:3: field 2 (Time)"},
      {"x,0.1,allocate,0x10,8,0x0", "t.csv:3: field 1 (Thread): expected a decimal"},
      {"1,0.1,allocate,0x10,-8,0x0", "t.csv:3: field 5 (Size): expected a decimal"},
      {"1,0.1,allocate,0x10,0,0x0", "t.csv:3: allocation of 0 bytes"},
      {"1,0.1,free,0x20,8,0x0", "t.csv:3: free of 0x20, which is not allocated (expected"},
      {"1,0.1,allocate,0x1,8,0x0", "t.csv:3: allocation of 0x1, which is still live "
                                   "(allocated on line 2"},
      {"1,0.1,free,0x1,9,0x0", "t.csv:3: free of 0x1 with size 9, but it was allocated with "
                               "size 4 on line 2"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char text[256];
    snprintf(text, sizeof text,
             "Thread,Time,Action,Pointer,Size,Stream\n1,0.0,allocate,0x1,4,"
             "0x0\n%s\n",
             cases[i].line3);
    hbm_alloc_log_t log;
    parse_text(text, 0, &log, HBM_ERR_PARSE);
    if (!strstr(hbm_last_error(), cases[i].expect))
      fail_msg("case %zu: '%s' lacks '%s'", i, hbm_last_error(), cases[i].expect);
    assert_null(log.events);
  }
  hbm_alloc_log_t log;
  parse_text("Time,Thread\n", 0, &log, HBM_ERR_PARSE);
  assert_non_null(strstr(hbm_last_error(), "t.csv:1: expected the RMM log header"));
  parse_text("", 0, &log, HBM_ERR_PARSE);
  assert_non_null(strstr(hbm_last_error(), "t.csv:1: empty file"));
  assert_int_equal(hbm_alloc_log_read("/nonexistent.csv", 0, &log), HBM_ERR_IO);
}

static void lenient_skips_and_counts(void **state) {
  (void)state;
  const char *text = "Thread,Time,Action,Pointer,Size,Stream\n"
                     "1,0.1,allocate,0x10,8,0x0\n"
                     "1,0.2,free,0x99,8,0x0\n"     /* unknown pointer */
                     "1,0.3,allocate,0x10,8,0x0\n" /* still live */
                     "garbage\n"
                     "1,0.4,free,0x10,8,0x0\n";
  hbm_alloc_log_t log;
  parse_text(text, 1, &log, HBM_OK);
  assert_int_equal(log.n_events, 2);
  assert_int_equal(log.skipped, 3);
  assert_non_null(strstr(log.first_skip, "t.csv:3: free of 0x99"));
  hbm_profile_t *p = hbm_alloc_log_to_profile(&log, "t.csv");
  assert_non_null(p);
  assert_true(hbm_profile_buffer_count(p) == 1);
  hbm_profile_free(p);
  hbm_alloc_log_free(&log);
}

static void hostile_bytes_give_messages(void **state) {
  (void)state;
  uint64_t x = 12345;
  char buf[512];
  for (int round = 0; round < 2000; round++) {
    size_t n = 0;
    n += (size_t)snprintf(buf, sizeof buf, "Thread,Time,Action,Pointer,Size,Stream\n");
    while (n < sizeof buf - 1) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      static const char alphabet[] = "0123456789,.:x\nafreloc \r";
      buf[n++] = alphabet[(x >> 33) % (sizeof alphabet - 1)];
      if ((x >> 20) % 97 == 0)
        break;
    }
    hbm_alloc_log_t log;
    hbm_status_t s = hbm_alloc_log_parse(buf, n, "fuzz.csv", (int)(round & 1), &log);
    if (s == HBM_OK)
      hbm_alloc_log_free(&log);
    else
      assert_non_null(strstr(hbm_last_error(), "fuzz.csv:"));
  }
}

/* ---- the real logs ---- */

static void real_logs_parse_and_peak_matches(void **state) {
  (void)state;
  th_need_shared();
  const char *dir_path = HBM_SHARED_DIR "/traces";
  DIR *dir = opendir(dir_path);
  if (!dir)
    th_skip("cannot open %s", dir_path);
  struct dirent *de;
  int logs = 0;
  while ((de = readdir(dir)) != NULL) {
    size_t len = strlen(de->d_name);
    if (len < 5 || strcmp(de->d_name + len - 4, ".csv") != 0)
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir_path, de->d_name);
    size_t bytes;
    char *text = th_read(path, &bytes);
    size_t lines = 0;
    for (size_t i = 0; i < bytes; i++)
      lines += text[i] == '\n';
    free(text);
    hbm_alloc_log_t log;
    assert_int_equal(hbm_alloc_log_read(path, 0, &log), HBM_OK);
    assert_true(log.n_events == lines - 1);
    /* the peak of the same events, computed here */
    uint64_t live = 0, peak = 0;
    for (size_t i = 0; i < log.n_events; i++) {
      if (log.events[i].action == HBM_LOG_ALLOCATE)
        live += log.events[i].size;
      else if (log.events[i].action == HBM_LOG_FREE)
        live -= log.events[i].size;
      peak = live > peak ? live : peak;
    }
    hbm_profile_t *p = hbm_alloc_log_to_profile(&log, path);
    assert_non_null(p);
    hbm_analysis_t *a = hbm_analyze(p, 0);
    assert_true(hbm_analysis_summary(a)->peak_bytes == peak);
    hbm_analysis_free(a);
    hbm_profile_free(p);
    hbm_alloc_log_free(&log);
    logs++;
  }
  closedir(dir);
  assert_true(logs >= 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(small_log_by_hand),
      cmocka_unit_test(clock_times_and_forms),
      cmocka_unit_test(times_going_backwards_are_noted),
      cmocka_unit_test(bad_lines_say_where_and_what),
      cmocka_unit_test(lenient_skips_and_counts),
      cmocka_unit_test(hostile_bytes_give_messages),
      cmocka_unit_test(real_logs_parse_and_peak_matches),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
