/* test_import_xprof_memory_viewer_json.c — XProf's own memory_viewer JSON (what its
 * converter returns and users save from its page) read as a profile
 * (src/import/xprof_memory_viewer_json.c), recognised by content by hbm_profile_load and
 * `hbm report`. The fixture tests/data/memory_viewer.json is written by hand in XProf's
 * format; the numbers below are worked out from it in the comments. Bad input gives the line
 * and column (malformed JSON) or the field (a value out of range), never a number made up.
 * tests/python/test_corpus_xprof.py reads XProf's real output for every corpus program. */
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

#define FIXTURE HBM_SOURCE_DIR "/tests/data/memory_viewer.json"

/* The fixture (hand calculation): parameter p 0.75 MiB, output out 0.25 MiB, a thread-local
 * 4 B allocation (left out, as XProf's peak does); temporaries a_fusion 1 MiB and b_fusion
 * 2 MiB. Events: 0 alloc a, 1 alloc b, 2 free a, 3 c revives a's memory, 4 free b, 5 free c:
 * heap after each 1, 3, 2, 3, 1, 0 MiB, XProf's heapSizes (before each event, then the end,
 * whole-program 1 MiB included) 1, 2, 4, 3, 4, 2, 1. a's block spans events 0-5 (XProf keeps
 * one block for a revived buffer): the heap says it was dead after event 2, so it is split.
 * Peak 4 MiB after event 1: p, out, a_fusion, b_fusion; arguments 0.75 MiB, outputs 0.25,
 * temporaries 3; total allocation (XLA's allocations) 4 MiB. */
static void reads_xprofs_own_json(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(FIXTURE);
  if (!p)
    fail_msg("%s", hbm_last_error());
  assert_string_equal(hbm_profile_meta(p, "format"), "xprof-memory-viewer-json");
  assert_null(hbm_profile_meta(p, "lost")); /* the blocks make XProf's heap */
  assert_int_equal(hbm_profile_space_count(p), 1);
  assert_string_equal(hbm_profile_space(p, 0)->name, "HBM");
  assert_string_equal(hbm_profile_space(p, 0)->device, "jit_f");
  assert_int_equal(hbm_profile_step_count(p), 6);
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_non_null(a);
  const hbm_summary_t *s = hbm_analysis_summary(a);
  assert_true(s->peak_bytes == 4194304);
  assert_int_equal(s->peak_step, 1);
  assert_true(s->argument_bytes == 786432);
  assert_true(s->output_bytes == 262144);
  assert_true(s->temporary_bytes == 3145728);
  assert_true(s->heap_bytes == 4194304);
  static const uint64_t heap[] = {2, 4, 3, 4, 2, 1}; /* MiB after each event */
  for (int step = 0; step < 6; step++)
    assert_true(hbm_analysis_bytes_at(a, step) == heap[step] << 20);
  size_t n;
  const int64_t *at = hbm_analysis_buffers_at_peak(a, &n);
  assert_int_equal(n, 4);
  static const char *const ops[] = {"p", "out", "a_fusion", "b_fusion"};
  for (size_t i = 0; i < n; i++)
    assert_string_equal(hbm_profile_buffer(p, at[i])->op, ops[i]);
  const hbm_buffer_t *b = hbm_profile_buffer(p, at[3]);
  assert_string_equal(b->source, "model.py:42");
  assert_string_equal(b->stack, "model.py:42:8\ntrain.py:10:4");
  assert_string_equal(b->opcode, "fusion");
  assert_string_equal(b->shape, "f32[524288]{0}");
  assert_int_equal(hbm_profile_buffer(p, at[0])->category, HBM_CAT_PARAMETER);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

static const char *write_text(const char *name, const char *text) {
  static char path[4200];
  snprintf(path, sizeof path, "%s/%s", th_dir, name);
  assert_int_equal(th_write(path, text, strlen(text)), 0);
  return path;
}

static void expect_error(const char *name, const char *text, const char *what) {
  hbm_profile_t *p = hbm_profile_load(write_text(name, text));
  if (p)
    fail_msg("%s: loaded", name);
  if (!strstr(hbm_last_error(), name) || !strstr(hbm_last_error(), what))
    fail_msg("%s: expected '%s' in: %s", name, what, hbm_last_error());
}

static void bad_input_says_where(void **state) {
  (void)state;
  expect_error("cut.json", "{\"heapSizes\": [1, 2,\n  3", "line 2, column 3");
  expect_error("type.json", "{\"heapSizes\": 7}",
               "field heapSizes: expected an array of sizes in MiB");
  expect_error("negative.json", "{\"heapSizes\": [1, -2]}",
               "field heapSizes[]: expected a size in MiB, from 0 to 2^28");
  expect_error("huge.json", "{\"heapSizes\": [1], \"totalBufferAllocationMib\": 1e300}",
               "field totalBufferAllocationMib: expected a size in MiB");
  expect_error("span.json",
               "{\"heapSizes\": [0, 1, 0], \"bufferBlocks\": [{\"logicalBufferId\": 3, "
               "\"startStep\": 9, \"endStep\": 12, \"size\": 1048576}]}",
               "field bufferBlocks[]: a span of events outside the heap timeline");
  expect_error("list.json", "[{\"heapSizes\": [1]}]", ""); /* not the tool's object at all */
}

/* Blocks that cannot make XProf's heap: here the heap rises by 1 MiB at event 1 where no
 * block starts nor can be revived, and falls by 2 MiB at event 2 where no live block is that
 * large. The profile shows the blocks and says at how many events they differ, rather than
 * inventing a buffer. */
static void blocks_that_do_not_add_up_are_said(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(
      write_text("short.json",
                 "{\"moduleName\": \"jit_g\", \"heapSizes\": [0, 1, 2, 0], "
                 "\"bufferBlocks\": [{\"logicalBufferId\": 1, \"name\": \"x\", \"startStep\": 0, "
                 "\"endStep\": 2, \"size\": 1048576}]}"));
  assert_non_null(p);
  const char *lost = hbm_profile_meta(p, "lost");
  assert_non_null(lost);
  assert_non_null(strstr(lost, "do not make XProf's heapSizes at 2 of 3 events"));
  hbm_profile_free(p);
}

/* A block whose span ends before its bytes leave (a buffer revived by SHARE_WITH, freed while a
 * later sharer holds its bytes): r's span is events 0-1, s's 2-4, both 1 MiB. heapSizes
 * (before each event, then the end) 0, 1, 1, 2, 1, 0: after each event 1, 1, 2, 1, 0 MiB.
 * The fall at event 3 ends r (its span ended at 1: its bytes were held), not s (its span goes
 * on to 4; nearest, 1 event away against r's 2, was the old rule's pick); the fall at 4 ends
 * s. So r's bytes live [0, 3) and its card shows XProf's span [0, 1); s lives [2, 4). */
static void revived_block_keeps_its_span(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(
      write_text("revived.json",
                 "{\"moduleName\": \"jit_r\", \"heapSizes\": [0, 1, 1, 2, 1, 0], "
                 "\"bufferBlocks\": [{\"logicalBufferId\": 1, \"name\": \"r\", \"startStep\": 0, "
                 "\"endStep\": 1, \"size\": 1048576, \"offset\": 0}, {\"logicalBufferId\": 2, "
                 "\"name\": \"s\", \"startStep\": 2, \"endStep\": 4, \"size\": 1048576, "
                 "\"offset\": 1048576}]}"));
  if (!p)
    fail_msg("%s", hbm_last_error());
  assert_null(hbm_profile_meta(p, "lost"));
  const hbm_buffer_t *r = NULL, *s = NULL;
  for (int64_t i = 0; i < hbm_profile_buffer_count(p); i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    if (b->op && !strcmp(b->op, "r"))
      r = b;
    else if (b->op && !strcmp(b->op, "s"))
      s = b;
  }
  assert_non_null(r);
  assert_non_null(s);
  assert_true(r->start == 0 && r->end == 3 && hbm_buffer_span_end(r) == 1);
  assert_true(s->start == 2 && s->end == 4 && hbm_buffer_span_end(s) == 4);
  hbm_profile_free(p);
}

/* A program with no heap-simulator event (XProf gives no heapSizes, or only the heap before
 * it): one step, its whole-program allocation live there. */
static void program_without_events(void **state) {
  (void)state;
  const char *files[] = {HBM_SOURCE_DIR "/fuzz/corpus/xprof_memory_viewer_json/no_heap_sizes.json",
                         HBM_SOURCE_DIR "/fuzz/corpus/xprof_memory_viewer_json/one_point.json"};
  for (int i = 0; i < 2; i++) {
    hbm_profile_t *p = hbm_profile_load(files[i]);
    if (!p)
      fail_msg("%s: %s", files[i], hbm_last_error());
    assert_int_equal(hbm_profile_step_count(p), 1);
    hbm_analysis_t *a = hbm_analyze(p, 0);
    assert_true(hbm_analysis_summary(a)->peak_bytes == 1048576);
    assert_null(hbm_profile_meta(p, "lost"));
    hbm_analysis_free(a);
    hbm_profile_free(p);
  }
}

static void report_reads_it(void **state) {
  (void)state;
  char *out = NULL;
  assert_int_equal(th_run("'" HBM_BIN "' report --json '" FIXTURE "'", &out), 0);
  assert_non_null(strstr(out, "\"peak_bytes\": 4194304"));
  assert_non_null(strstr(out, "\"source\": \"model.py:42\""));
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(reads_xprofs_own_json),
      cmocka_unit_test(bad_input_says_where),
      cmocka_unit_test(blocks_that_do_not_add_up_are_said),
      cmocka_unit_test(revived_block_keeps_its_span),
      cmocka_unit_test(program_without_events),
      cmocka_unit_test(report_reads_it),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
