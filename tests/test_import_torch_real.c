/* test_import_torch_real.c — the 13 real PyTorch memory snapshots in ../shared/real/torch/
 * (GPT-style models on CUDA GPUs, from public course repositories). For each, the numbers
 * are computed here a second way, straight from the pickle's tree, and compared with what
 * hbm's profile and analysis report:
 *   - the peak in use, as memory_viz's Active Memory Timeline draws it (MemoryViz.js's rule,
 *     docs/pytorch-snapshots.md): the trace's alloc / free_completed events, plus what was live
 *     before the trace began (frees of addresses no alloc holds; blocks active_allocated at the
 *     dump, placed by the sizes before them, that no alloc holds at the trace's end);
 *   - the reserved bytes at the end = the sum of the segments' total_size (PyTorch's own);
 *   - the bytes live as the timeline ends (the trace and the segments agree, so the
 *     reconstruction before the trace is right);
 * and the same numbers from a second decoder of the pickles, written in Python (below).
 * Skipped (not passed) when ../shared is absent. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "hbm.h"
#include "helpers.h"
#include "import/pickle.h"

#define REAL HBM_SHARED_DIR "/real/torch"

typedef struct truth {
  uint64_t peak, reserved_end, live_end;
} truth_t;

static uint64_t field(const pk_value_t *d, const char *key) {
  int64_t v = 0;
  pk_int(pk_get(d, key), &v);
  return (uint64_t)v;
}

static bool is_free(const char *action) {
  return !strcmp(action, "free_completed") || !strcmp(action, "free");
}

/* The size memory_viz draws a block with: with 'frames' its requested_size, else its
 * requested_size unless 0, else its size (these files have no 2.0 'history'). */
static uint64_t drawn_size(const pk_value_t *block) {
  uint64_t requested = field(block, "requested_size");
  return pk_get(block, "frames") || requested ? requested : field(block, "size");
}

/* Blocks in state active_allocated at the dump that no alloc of the trace holds at its end,
 * each where memory_viz places it (its segment's address plus the sizes before it): live from
 * the start. Also the reserved bytes, and checks that 'address' agrees with that place. */
static void blocks_at_dump(const pk_value_t *root, const hbm_u64map_t *held, truth_t *t,
                           uint64_t *before) {
  size_t n_segs, n_blocks;
  pk_value_t *const *segs = pk_items(pk_get(root, "segments"), &n_segs);
  for (size_t i = 0; i < n_segs; i++) {
    t->reserved_end += field(segs[i], "total_size");
    uint64_t at = field(segs[i], "address");
    pk_value_t *const *blocks = pk_items(pk_get(segs[i], "blocks"), &n_blocks);
    for (size_t k = 0; k < n_blocks; at += field(blocks[k], "size"), k++) {
      assert_int_equal(field(blocks[k], "address"), at);
      const char *state = pk_str(pk_get(blocks[k], "state"));
      if (state && !strcmp(state, "active_allocated") && !hbm_u64map_get(held, at, NULL))
        *before += drawn_size(blocks[k]);
    }
  }
}

/* MemoryViz.js's Active Memory Timeline (docs/pytorch-snapshots.md), as a third reading:
 * the trace once for what was live before it (frees of addresses no alloc holds), the blocks
 * at the dump, then the trace again for the running total. The real files have one device. */
static truth_t compute_truth(const pk_value_t *root) {
  truth_t t = {0, 0, 0};
  size_t n_traces, n;
  pk_value_t *const *traces = pk_items(pk_get(root, "device_traces"), &n_traces);
  assert_int_equal(n_traces, 1);
  pk_value_t *const *events = pk_items(traces[0], &n);
  hbm_u64map_t held, live;
  hbm_u64map_init(&held);
  hbm_u64map_init(&live);
  uint64_t before = 0;
  for (size_t i = 0; i < n; i++) {
    const char *action = pk_str(pk_get(events[i], "action"));
    uint64_t addr = field(events[i], "addr");
    if (!strcmp(action, "alloc"))
      assert_true(hbm_u64map_put(&held, addr, 1));
    else if (is_free(action) && !hbm_u64map_remove(&held, addr, NULL))
      before += field(events[i], "size");
  }
  blocks_at_dump(root, &held, &t, &before);
  uint64_t now = before;
  t.peak = now;
  for (size_t i = 0; i < n; i++) {
    const char *action = pk_str(pk_get(events[i], "action"));
    uint64_t addr = field(events[i], "addr"), size = field(events[i], "size"), was;
    if (!strcmp(action, "alloc")) {
      assert_true(hbm_u64map_put(&live, addr, size));
      now += size;
    } else if (is_free(action)) {
      now -= hbm_u64map_remove(&live, addr, &was) ? was : size; /* else: before the trace */
    }
    if (now > t.peak)
      t.peak = now;
  }
  t.live_end = now;
  hbm_u64map_free(&held);
  hbm_u64map_free(&live);
  return t;
}

/* The same three numbers from a second decoder: tests/data/torch/second_decoder.py, whose
 * data-only stack machine reads the opcodes that Python's pickletools.genops lists (nothing is
 * unpickled, nothing runs). Its output over these files, 2026-11-25: the files' numbers, not
 * hbm's. */
static const struct {
  const char *file;
  uint64_t peak, reserved_end, live_end;
} second_decoder[] = {
    {"MAGMA27_assignment2-systems__memory_snapshot__a80ccc7.pickle", 13923997700u, 14180941824u,
     1373919236u},
    {"Wedsonlin_assignment2-systems__results_medium_128_inference_memory_snapshot__77da8fe.pickle",
     1736962048u, 1763704832u, 1701310464u},
    {"Wedsonlin_assignment2-systems__results_medium_128_training_memory_snapshot__0db7d8c.pickle",
     7013335044u, 7235174400u, 6808535044u},
    {"Wedsonlin_assignment2-systems__results_medium_256_inference_memory_snapshot__e0143d8.pickle",
     1793775616u, 1864368128u, 1701367808u},
    {"Wedsonlin_assignment2-systems__results_medium_256_training_memory_snapshot__8a4284c.pickle",
     9103544320u, 9265217536u, 6829096964u},
    {"bcrafton_assignment2-systems__memory_snapshot__06f51ae.pickle", 3849232640u, 4238344192u,
     3064418304u},
    {"kkaitlyn111_cs336-a2-systems__cs336_systems_memory_logs_memory_ctx128_forward__d7d40ad."
     "pickle",
     17602723840u, 17878220800u, 17602723840u},
    {"kkaitlyn111_cs336-a2-systems__memory_ctx128_forward__03016ee.pickle", 19352504320u,
     19667091456u, 19352504320u},
    {"kkaitlyn111_cs336-a2-systems__memory_files_memory_ctx128_forward__9199557.pickle",
     19352504320u, 19667091456u, 19352504320u},
    {"kkaitlyn111_cs336-a2-systems__memory_files_memory_ctx128_fullstep__8606015.pickle",
     54802667524u, 61111009280u, 54597857284u},
    {"kkaitlyn111_cs336-a2-systems__memory_files_memory_ctx256_forward_mixed__73107f1.pickle",
     28262939648u, 28848422912u, 28252453888u},
    {"kkaitlyn111_cs336-a2-systems__memory_files_memory_ctx512_forward___b9620cc.pickle",
     43675396096u, 44715474944u, 43675396096u},
    {"kkaitlyn111_cs336-a2-systems__memory_files_memory_ctx512_forward_mixed__f1bbbe1.pickle",
     39860763648u, 40514879488u, 39839792128u},
};

static void check_second_decoder(const char *name, const truth_t *t) {
  for (size_t i = 0; i < sizeof second_decoder / sizeof *second_decoder; i++) {
    if (strcmp(second_decoder[i].file, name))
      continue;
    if (t->peak != second_decoder[i].peak || t->reserved_end != second_decoder[i].reserved_end ||
        t->live_end != second_decoder[i].live_end)
      fail_msg("%s: the C reader's tree gives %llu %llu %llu, the second decoder %llu %llu %llu",
               name, (unsigned long long)t->peak, (unsigned long long)t->reserved_end,
               (unsigned long long)t->live_end, (unsigned long long)second_decoder[i].peak,
               (unsigned long long)second_decoder[i].reserved_end,
               (unsigned long long)second_decoder[i].live_end);
    return;
  }
  fail_msg("%s is not among the files the second decoder read", name);
}

static void check_file(const char *path, const char *name) {
  size_t len;
  char *data = th_read(path, &len);
  assert_non_null(data);
  pk_doc_t *doc = pk_parse((const uint8_t *)data, len, name, NULL);
  if (!doc)
    fail_msg("%s", hbm_last_error());
  truth_t t = compute_truth(pk_root(doc));
  pk_free(doc);
  check_second_decoder(name, &t);
  free(data);

  hbm_profile_t *p = hbm_profile_load(path);
  if (!p)
    fail_msg("%s", hbm_last_error());
  assert_int_equal(hbm_profile_space_count(p), 1);
  hbm_analysis_t *a = hbm_analyze(p, 0);
  const hbm_summary_t *s = hbm_analysis_summary(a);
  int64_t last = hbm_profile_step_count(p) - 1;
  hbm_timeline_point_t end;
  assert_int_equal(hbm_analysis_timeline(a, last, last + 1, 1, &end), 1);
  printf("  %-40.40s peak %12llu reserved %12llu (peak %12llu) live at end %12llu\n", name,
         (unsigned long long)s->peak_bytes, (unsigned long long)end.reserved,
         (unsigned long long)s->peak_reserved_bytes, (unsigned long long)end.bytes);
  if (s->peak_bytes != t.peak || end.reserved != t.reserved_end || end.bytes != t.live_end)
    fail_msg("%s: hbm peak %llu reserved %llu live %llu; from the trace %llu, %llu, %llu", name,
             (unsigned long long)s->peak_bytes, (unsigned long long)end.reserved,
             (unsigned long long)end.bytes, (unsigned long long)t.peak,
             (unsigned long long)t.reserved_end, (unsigned long long)t.live_end);
  assert_true(s->peak_reserved_bytes >= end.reserved);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

static void real_snapshots(void **state) {
  (void)state;
  DIR *dir = opendir(REAL);
  if (!dir)
    th_skip("no real PyTorch snapshots (%s)", REAL);
  int files = 0;
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    size_t n = strlen(e->d_name);
    if (n < 7 || strcmp(e->d_name + n - 7, ".pickle"))
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", REAL, e->d_name);
    check_file(path, e->d_name);
    files++;
  }
  closedir(dir);
  assert_int_equal(files, 13);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(real_snapshots)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
