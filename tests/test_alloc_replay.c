/* test_alloc_replay.c — `hbm replay` and hbm_replay_run on a small log whose numbers were
 * worked out by hand (tests/data/replay/small.csv, below), on bad logs (a free of an
 * unknown pointer, a second allocation of a live pointer, a malformed line: each named by
 * its line, and counted with --lenient), and on one real log of ../shared/traces when it is
 * there: the peak live bytes must be what `hbm report --json` says.
 *
 * small.csv, sizes in MiB (E is 1000 bytes, 1 KiB once rounded), in bfc mode on M MiB; the
 * arena places blocks of 4 MiB or more at the high end of the free chunk chosen for them:
 *   line  2 A 1  at [0,1)        line  7 E 1000 B, best fit: the hole [1,3) → [1,1+1K)
 *   line  3 B 2  at [1,3)        line  8 free A: holes [0,1) and [1+1K,3)
 *   line  4 C 1  at [3,4)        line  9 F 4 (live 8 MiB + 1000 B: the peak) fits only at
 *   line  5 free B: hole [1,3)           the top, [M-4,M), when M - 7 >= 4: min memory 11
 *   line  6 D 3  at [4,7)        line 10 an 'allocate failure' record: counted, not replayed
 *   then C, D, E, F are freed and G (512 KiB) stays live to the end.
 * Growth commits what a request lacks beyond the free tail, in 2 MiB granules: A 2, B +2,
 * D +4 (hole too small, tail 0), F +4 (the tail has 1 MiB - 1 KiB): 12 MiB reserved, and
 * 12 is also its minimum. Expandable maps the granules that live blocks cover: 0 and 1 for
 * A, B, C, E; 2 and 3 for D; two at the top of its range for F: 12 MiB mapped, minimum 12.
 * Platform holds exactly the live blocks rounded to 256 bytes: 8 MiB + 1 KiB, minimum 9.
 * The async pool takes segments of 2, 4 and then 8 MiB (F needs a new one): 14 MiB; on
 * 10 MiB its last segment is the 4 MiB that is left, which still holds F. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hbm.h"
#include "helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define SMALL HBM_SOURCE_DIR "/tests/data/replay/small.csv"
#define PEAK_LIVE (8 * MiB + 1000)

static void assert_contains(const char *text, const char *part) {
  if (!strstr(text, part))
    fail_msg("expected '%s' in:\n%s", part, text);
}

/* Runs `hbm ARGS` (stdout and stderr together); returns the exit status. */
static int run_hbm(const char *args, char **out) {
  char cmd[8300];
  snprintf(cmd, sizeof cmd, "env -u HBM_PROFILE_DIR '%s' %s", HBM_BIN, args);
  return th_run(cmd, out);
}

static json_t *parse_json(const char *text) {
  json_error_t err;
  json_t *root = json_loads(text, 0, &err);
  if (!root)
    fail_msg("not JSON (%s): %s", err.text, text);
  return root;
}

static uint64_t json_u64(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v))
    fail_msg("no integer '%s'", key);
  return (uint64_t)json_integer_value(v);
}

static void read_small(hbm_alloc_log_t *log) {
  if (hbm_alloc_log_read(SMALL, 0, log) != HBM_OK)
    fail_msg("%s", hbm_last_error());
}

/* One replay of small.csv in `mode` on `memory` bytes, with the min-memory search. */
static hbm_replay_result_t replay_small(hbm_mode_t mode, uint64_t memory) {
  hbm_alloc_log_t log;
  read_small(&log);
  hbm_replay_options_t opt;
  hbm_replay_options_default(&opt);
  opt.mode = mode;
  opt.memory = memory;
  opt.min_memory = 1;
  opt.repeat = -1;
  hbm_replay_result_t r;
  if (hbm_replay_run(&log, &opt, &r) != HBM_OK)
    fail_msg("replay in %s: %s", hbm_mode_name(mode), hbm_last_error());
  hbm_alloc_log_free(&log);
  return r;
}

static void small_log_numbers_by_hand(void **state) {
  (void)state;
  static const struct {
    hbm_mode_t mode;
    uint64_t peak_reserved, min_memory;
  } want[] = {
      {HBM_MODE_BFC, 64 * MiB, 11 * MiB},        {HBM_MODE_GROWTH, 12 * MiB, 12 * MiB},
      {HBM_MODE_EXPANDABLE, 12 * MiB, 12 * MiB}, {HBM_MODE_PLATFORM, 8 * MiB + KiB, 9 * MiB},
      {HBM_MODE_ASYNC, 14 * MiB, 10 * MiB},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    hbm_replay_result_t r = replay_small(want[i].mode, 64 * MiB);
    const char *mode = hbm_mode_name(want[i].mode);
    assert_int_equal(r.events, 13);
    assert_int_equal(r.allocations, 7);
    assert_int_equal(r.failure_records, 1);
    assert_true(r.peak_live_bytes == PEAK_LIVE);
    if (r.peak_reserved_bytes != want[i].peak_reserved || r.min_memory_bytes != want[i].min_memory)
      fail_msg("%s: peak reserved %llu (want %llu), min memory %llu (want %llu)", mode,
               (unsigned long long)r.peak_reserved_bytes, (unsigned long long)want[i].peak_reserved,
               (unsigned long long)r.min_memory_bytes, (unsigned long long)want[i].min_memory);
    assert_int_equal(r.failed_allocations, 0);
    assert_int_equal(r.first_failure_event, -1);
    assert_null(r.first_failure_message);
    hbm_replay_result_free(&r);
  }
}

/* On 10 MiB, F does not fit: 6 MiB are free but in pieces of 1, 2 and 3 MiB. */
static void first_failure_and_its_diagnosis(void **state) {
  (void)state;
  hbm_replay_result_t r = replay_small(HBM_MODE_BFC, 10 * MiB);
  assert_int_equal(r.failed_allocations, 1);
  assert_int_equal(r.first_failure_event, 7);
  assert_int_equal(r.first_failure_line, 9);
  assert_true(r.first_failure_size == 4 * MiB);
  assert_non_null(r.first_failure_message);
  assert_contains(r.first_failure_message,
                  "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4194304 bytes.");
  assert_contains(r.first_failure_message, "cause: fragmentation: 6.00MiB are free");
  assert_contains(r.first_failure_message, "largest contiguous free block is 3.00MiB");
  assert_true(r.min_memory_bytes == 11 * MiB);
  hbm_replay_result_free(&r);
  /* Expandable mode has no such fragmentation: what is short there is the limit itself. */
  r = replay_small(HBM_MODE_EXPANDABLE, 10 * MiB);
  assert_int_equal(r.first_failure_event, 7);
  assert_contains(r.first_failure_message, "cause: in use + request over the limit");
  hbm_replay_result_free(&r);
}

static void cli_text_and_json(void **state) {
  (void)state;
  char *out = NULL;
  assert_int_equal(run_hbm("replay " SMALL " --memory 10MiB --repeat 2", &out), 1);
  assert_contains(out, "events               13 (7 allocations), 1 'allocate failure' record");
  assert_contains(out, "peak live            8.00MiB (8389608 bytes)");
  assert_contains(out, "failed allocations   1");
  assert_contains(out, "first failure        event 7 (line 9 of the log), 4.00MiB requested");
  assert_contains(out, "    RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4194304");
  assert_contains(out, "time per operation");
  assert_contains(out, "median of 2 replays");
  free(out);
  assert_int_equal(run_hbm("replay " SMALL " --mode growth --min-memory --json", &out), 0);
  json_t *root = parse_json(out);
  assert_true(json_u64(root, "events") == 13);
  assert_true(json_u64(root, "peak_live_bytes") == PEAK_LIVE);
  assert_true(json_u64(root, "peak_reserved_bytes") == 12 * MiB);
  assert_true(json_u64(root, "min_memory_bytes") == 12 * MiB);
  assert_true(json_u64(root, "failed_allocations") == 0);
  assert_true(json_is_real(json_object_get(root, "ns_per_op")));
  assert_true(json_real_value(json_object_get(root, "ns_per_op")) > 0);
  assert_true(json_is_null(json_object_get(root, "first_failure")));
  assert_string_equal(json_string_value(json_object_get(root, "mode")), "growth");
  json_decref(root);
  free(out);
  assert_int_equal(run_hbm("replay " SMALL " --memory 10MiB --json --repeat 0", &out), 1);
  root = parse_json(out);
  json_t *first = json_object_get(root, "first_failure");
  assert_true(json_u64(first, "line") == 9 && json_u64(first, "size") == 4 * MiB);
  assert_contains(json_string_value(json_object_get(first, "message")), "fragmentation");
  assert_true(json_is_null(json_object_get(root, "ns_per_op")));
  assert_true(json_is_null(json_object_get(root, "min_memory_bytes")));
  json_decref(root);
  free(out);
}

static void cli_refuses_bad_usage(void **state) {
  (void)state;
  char *out = NULL;
  assert_int_equal(run_hbm("replay " SMALL " --mode fast", &out), 2);
  assert_contains(out, "--mode");
  free(out);
  assert_int_equal(run_hbm("replay " SMALL " --memory lots", &out), 2);
  free(out);
  assert_int_equal(run_hbm("replay " SMALL " --repeat -3", &out), 2);
  free(out);
  assert_int_equal(run_hbm("replay", &out), 2);
  assert_contains(out, "usage: hbm replay LOG");
  free(out);
  assert_int_equal(run_hbm("replay /nonexistent/log.csv", &out), 1);
  free(out);
}

/* Each bad log: exit status 1 and "file:line: what", or with --lenient the line skipped and
 * counted (text and JSON). */
static void bad_logs_name_the_line(void **state) {
  (void)state;
  static const struct {
    const char *file, *where, *what;
    uint64_t events;
  } cases[] = {
      {"unknown_free.csv", "unknown_free.csv:4: ", "free of 0x9000, which is not allocated", 3},
      {"duplicate.csv", "duplicate.csv:4: ", "allocation of 0x1000, which is still live", 3},
      {"malformed.csv", "malformed.csv:3: ", "expected 6 fields", 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char args[1024], *out = NULL;
    snprintf(args, sizeof args, "replay %s/tests/data/replay/%s --repeat 0", HBM_SOURCE_DIR,
             cases[i].file);
    assert_int_equal(run_hbm(args, &out), 1);
    assert_contains(out, cases[i].where);
    assert_contains(out, cases[i].what);
    assert_contains(out, "--lenient");
    free(out);
    snprintf(args, sizeof args, "replay %s/tests/data/replay/%s --repeat 0 --lenient --json",
             HBM_SOURCE_DIR, cases[i].file);
    assert_int_equal(run_hbm(args, &out), 0);
    json_t *root = parse_json(out);
    assert_true(json_u64(root, "skipped_lines") == 1);
    assert_true(json_u64(root, "events") == cases[i].events);
    assert_contains(json_string_value(json_object_get(root, "first_skipped")), cases[i].where);
    json_decref(root);
    free(out);
  }
}

/* A log made in code, not read: inconsistent events are refused, not replayed. */
static void inconsistent_events_are_refused(void **state) {
  (void)state;
  hbm_log_event_t events[] = {
      {.action = HBM_LOG_ALLOCATE, .pointer = 0x1000, .size = 100, .line = 2},
      {.action = HBM_LOG_FREE, .pointer = 0x2000, .line = 3},
  };
  hbm_alloc_log_t log = {.events = events, .n_events = 2};
  uint64_t min = 0;
  assert_int_equal(hbm_replay_min_memory(&log, HBM_MODE_BFC, &min), HBM_ERR_INVALID);
  assert_contains(hbm_last_error(), "line 3");
  hbm_replay_options_t opt;
  hbm_replay_options_default(&opt);
  opt.memory = 100; /* less than a MiB */
  hbm_replay_result_t r;
  assert_int_equal(hbm_replay_run(&log, &opt, &r), HBM_ERR_INVALID);
  assert_int_equal(hbm_replay_run(NULL, NULL, &r), HBM_ERR_INVALID);
  hbm_alloc_log_t empty = {0};
  assert_int_equal(hbm_replay_run(&empty, NULL, &r), HBM_OK);
  assert_int_equal(r.events, 0);
  assert_true(r.peak_live_bytes == 0 && r.ns_per_op == 0);
  hbm_replay_result_free(&r);
  assert_int_equal(hbm_replay_min_memory(&empty, HBM_MODE_GROWTH, &min), HBM_OK);
  assert_true(min == MiB);
}

/* The peak a replay reports is the one `hbm report --json` computes, here and on a real log. */
static void peak_agrees_with_report(const char *path) {
  char args[4096], *out = NULL;
  snprintf(args, sizeof args, "report '%s' --json", path);
  assert_int_equal(run_hbm(args, &out), 0);
  json_t *report = parse_json(out);
  uint64_t peak = json_u64(report, "peak_bytes");
  json_decref(report);
  free(out);
  snprintf(args, sizeof args, "replay '%s' --json --repeat 1", path);
  assert_int_equal(run_hbm(args, &out), 0);
  json_t *replay = parse_json(out);
  if (json_u64(replay, "peak_live_bytes") != peak)
    fail_msg("%s: replay says %llu, report %llu", path,
             (unsigned long long)json_u64(replay, "peak_live_bytes"), (unsigned long long)peak);
  json_decref(replay);
  free(out);
}

static void peak_is_the_reports(void **state) {
  (void)state;
  peak_agrees_with_report(SMALL);
  th_need_shared();
  peak_agrees_with_report(HBM_SHARED_DIR "/traces/gpt-medium-ctx128-infer-gpu.csv");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(small_log_numbers_by_hand),
      cmocka_unit_test(first_failure_and_its_diagnosis),
      cmocka_unit_test(cli_text_and_json),
      cmocka_unit_test(cli_refuses_bad_usage),
      cmocka_unit_test(bad_logs_name_the_line),
      cmocka_unit_test(inconsistent_events_are_refused),
      cmocka_unit_test(peak_is_the_reports),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
