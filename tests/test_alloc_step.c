/* test_alloc_step.c — mode learn (HBM_PLAN=step, src/alloc/step_*.c) on generated training
 * loops whose numbers are worked out by hand below, and on loops whose later steps differ
 * (sizes changed, allocations inserted, order permuted, a step cut short): no allocation may
 * fail that the default mode serves on the same memory, and the result says how much fell
 * back. Also: blocks served from a plan are found by address (hbm_block_size, hbm_walk), two
 * threads share a learn device, a profile records the plan, the variable is parsed.
 *
 * The step (A = 12): forward, for i = 0..11, allocate act[i] (i + 1 MiB + 4 KiB·i), then a
 * temporary tmp[i] (64 KiB·(i + 1) + 256) and free it; backward, for i = 11..0, allocate
 * grad[i] (32 KiB·(i + 1) + 512), free it, free act[i]. 6 operations per i: 72 per step, 36
 * allocations. Every size differs, so nothing inside a step repeats.
 *   - The detector hashes 8 operations: at the 8th operation of step 2 the hash of step 1's
 *     first 8 proposes period 72, which repeats 8 back; each operation adds one, and at 64
 *     repeated (64 operations into step 2, CONFIRM) the plan starts. Those 64 were served by
 *     the memory underneath.
 *   - Live at that point, of the step: backward has done 28 of its operations (9 whole i,
 *     11..3, and the allocation of grad[2]): act[0..2] and grad[2] are taken over where they
 *     are; their 4 frees go the general way. So of the 4 steps after the first (288
 *     operations), 64 + 4 = 68 fall back: 220 served, 220/288.
 *   - The most bytes live in the step: at the end of forward, all of act and tmp[11]:
 *     sum(i + 1 MiB + 4 KiB·i) + 64 KiB·12 + 256 = 78 MiB + 264 KiB + 768 KiB + 256. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/step.h" /* the strategy's account, for the markers' test */
#include "alloc_helpers.h"
#include "hbm.h"
#include "helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define A 12
#define STEP_OPS (6 * A)
#define STEPS 5
#define BOUND (78 * MiB + 264 * KiB + 768 * KiB + 256)

static uint64_t act_size(int i) { return (uint64_t)(i + 1) * MiB + 4 * KiB * (uint64_t)i; }
static uint64_t tmp_size(int i) { return 64 * KiB * (uint64_t)(i + 1) + 256; }
static uint64_t grad_size(int i) { return 32 * KiB * (uint64_t)(i + 1) + 512; }

/* ---- generated logs ---- */

typedef enum variant { SAME, RESIZED, INSERTED, PERMUTED, CUT_SHORT } variant_t;

typedef struct gen {
  hbm_alloc_log_t log;
  size_t cap;
  uint64_t next_pointer;
} gen_t;

static void emit(gen_t *g, hbm_log_action_t action, uint64_t pointer, uint64_t size) {
  if (g->log.n_events == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 1024;
    g->log.events = realloc(g->log.events, g->cap * sizeof *g->log.events);
    assert_non_null(g->log.events);
  }
  g->log.events[g->log.n_events] = (hbm_log_event_t){.action = action,
                                                     .pointer = pointer,
                                                     .size = size,
                                                     .time_ns = (int64_t)g->log.n_events,
                                                     .line = (int64_t)g->log.n_events + 2};
  g->log.n_events++;
}

static uint64_t alloc_op(gen_t *g, uint64_t size) {
  uint64_t p = g->next_pointer += 1ull << 32; /* never live twice */
  emit(g, HBM_LOG_ALLOCATE, p, size);
  return p;
}

static void free_op(gen_t *g, uint64_t p) { emit(g, HBM_LOG_FREE, p, 0); }

/* One step; `v` changes it (used from the third step on). */
static void step(gen_t *g, variant_t v) {
  uint64_t act[A];
  int order[A];
  for (int i = 0; i < A; i++)
    order[i] = i;
  if (v == PERMUTED) { /* act[3] and act[4] allocated the other way round */
    order[3] = 4;
    order[4] = 3;
  }
  for (int k = 0; k < A; k++) {
    int i = order[k];
    act[i] = alloc_op(g, act_size(i) + (v == RESIZED && i == 5 ? MiB : 0));
    free_op(g, alloc_op(g, tmp_size(i)));
    if (v == INSERTED && k == 6)
      for (int x = 0; x < 10; x++) /* extra blocks, freed at once */
        free_op(g, alloc_op(g, 3 * KiB * (uint64_t)(x + 1) + 100));
  }
  for (int i = A - 1; i >= 0; i--) {
    if (v != CUT_SHORT)
      free_op(g, alloc_op(g, grad_size(i)));
    free_op(g, act[i]);
  }
}

static hbm_alloc_log_t loop_log(variant_t v) {
  gen_t g = {0};
  for (int s = 0; s < STEPS; s++)
    step(&g, s >= 2 ? v : SAME);
  return g.log;
}

static hbm_replay_result_t replay(const hbm_alloc_log_t *log, hbm_mode_t mode, uint64_t memory) {
  hbm_replay_options_t opt;
  hbm_replay_options_default(&opt);
  opt.mode = mode;
  opt.memory = memory;
  opt.repeat = -1;
  hbm_replay_result_t r;
  if (hbm_replay_run(log, &opt, &r) != HBM_OK)
    fail_msg("hbm_replay_run(%s): %s", hbm_mode_name(mode), hbm_last_error());
  return r;
}

/* ---- the steps found, planned and served ---- */

static void repeating_loop_is_planned(void **state) {
  (void)state;
  hbm_alloc_log_t log = loop_log(SAME);
  assert_int_equal(log.n_events, STEPS * STEP_OPS);
  hbm_replay_result_t r = replay(&log, HBM_MODE_LEARN, 1024 * MiB);
  assert_int_equal(r.failed_allocations, 0);
  assert_int_equal(r.step_operations, STEP_OPS);
  assert_int_equal(r.first_step_end_event, STEP_OPS);
  assert_int_equal(r.plans, 1);
  assert_int_equal(r.plans_retired, 0);
  assert_int_equal(r.fallback_operations, 64 + 4);
  assert_int_equal(r.planned_operations, 220);
  assert_true(r.planned_fraction > 220.0 / 288 - 1e-9 && r.planned_fraction < 220.0 / 288 + 1e-9);
  assert_int_equal(r.plan_bound_bytes, BOUND);
  assert_int_equal(r.steady_peak_live_bytes, BOUND);
  /* the plan holds the step in its bound (the steps nest: act[0] outermost), plus at most
   * the granules it touches at each end */
  assert_true(r.plan_bytes >= BOUND);
  assert_true(r.steady_reserved_bytes <= BOUND + 4 * 2 * MiB);
  hbm_replay_result_free(&r);
  free(log.events);
}

/* Blocks of the step before, live when the plan begins (the survivors), are not held twice.
 * The step (80 operations, 40 allocations): big[i] = 8 + 2i MiB (i = 0..3, 44 MiB: bfc puts
 * them at the top of the range), 30 pairs s[j] = 64 KiB·(j + 1) + 256, allocated and freed at
 * once, act[i] = 2 MiB·(i + 1) (i = 0..5, 42 MiB), then big[0..3] freed, then act[5..0]. The
 * most live is 44 + 42 = 86 MiB, every block a whole number of 2 MiB granules but the s[j].
 * The plan begins 64 operations into the second step, after the pairs: the four bigs are live
 * (the survivors), and their frees are due 6 allocations later. Mapping the plan's span at
 * once would hold 86 MiB beside them (130 MiB); the first planned step's own placement goes
 * around them, its blocks map what they use, and from the second planned step on the span
 * (86 MiB: the steps nest) is mapped: at no time more than the 86 MiB live. Falling back: the
 * 64 operations before the plan and the 4 frees of the survivors, of 4 × 80. */
static void survivors_are_not_held_twice(void **state) {
  (void)state;
  gen_t g = {0};
  for (int s = 0; s < STEPS; s++) {
    uint64_t big[4], act[6];
    for (int i = 0; i < 4; i++)
      big[i] = alloc_op(&g, (8 + 2 * (uint64_t)i) * MiB);
    for (int j = 0; j < 30; j++)
      free_op(&g, alloc_op(&g, 64 * KiB * (uint64_t)(j + 1) + 256));
    for (int i = 0; i < 6; i++)
      act[i] = alloc_op(&g, 2 * MiB * (uint64_t)(i + 1));
    for (int i = 0; i < 4; i++)
      free_op(&g, big[i]);
    for (int i = 5; i >= 0; i--)
      free_op(&g, act[i]);
  }
  hbm_replay_result_t r = replay(&g.log, HBM_MODE_LEARN, 1024 * MiB);
  assert_int_equal(r.failed_allocations, 0);
  assert_int_equal(r.step_operations, 80);
  assert_int_equal(r.first_step_end_event, 80);
  assert_int_equal(r.plans, 1);
  assert_int_equal(r.fallback_operations, 64 + 4);
  assert_int_equal(r.planned_operations, 4 * 80 - 68);
  assert_int_equal(r.steady_peak_live_bytes, 86 * MiB);
  assert_int_equal(r.plan_bound_bytes, 86 * MiB);
  assert_int_equal(r.plan_bytes, 86 * MiB);
  assert_int_equal(r.steady_reserved_bytes, 86 * MiB);
  assert_int_equal(r.first_planned_reserved_bytes, 86 * MiB); /* survivors and the plan */
  assert_int_equal(r.first_planned_peak_live_bytes, 86 * MiB);
  /* its floor (step_floor.c): the plan's step begins at act[0]; after act[5] (its 6th
   * allocation) the survivors, 44 MiB of whole granules, and the acts, 42 MiB that can go
   * nowhere else than new granules, are live: 22 + 21 granules */
  assert_int_equal(r.first_planned_floor_bytes, 86 * MiB);
  assert_int_equal(r.later_reserved_bytes, 86 * MiB); /* the span, mapped whole */
  assert_int_equal(r.later_peak_live_bytes, 86 * MiB);
  hbm_replay_result_free(&r);
  free(g.log.events);
}

/* A later step that differs never costs an allocation the default mode serves: each variant
 * replays on the smallest memory bfc needs for it, rounded up to the 2 MiB granule mode learn
 * maps physical memory in (on a sim device of an odd number of MiB, bfc's one region is
 * exact, while the last granule of mode learn's range cannot be mapped whole). */
static void divergent_steps_never_fail(void **state) {
  (void)state;
  const variant_t variants[] = {RESIZED, INSERTED, PERMUTED, CUT_SHORT};
  const char *names[] = {"resized", "inserted", "permuted", "cut short"};
  hbm_alloc_log_t same = loop_log(SAME);
  hbm_replay_result_t clean = replay(&same, HBM_MODE_LEARN, 1024 * MiB);
  for (size_t k = 0; k < sizeof variants / sizeof *variants; k++) {
    hbm_alloc_log_t log = loop_log(variants[k]);
    uint64_t min = 0;
    assert_int_equal(hbm_replay_min_memory(&log, HBM_MODE_BFC, &min), HBM_OK);
    min = (min + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
    hbm_replay_result_t bfc = replay(&log, HBM_MODE_BFC, min);
    hbm_replay_result_t learn = replay(&log, HBM_MODE_LEARN, min);
    if (bfc.failed_allocations || learn.failed_allocations)
      fail_msg("%s, on %llu bytes: bfc failed %llu, learn %llu", names[k], (unsigned long long)min,
               (unsigned long long)bfc.failed_allocations,
               (unsigned long long)learn.failed_allocations);
    hbm_replay_result_t roomy = replay(&log, HBM_MODE_LEARN, 1024 * MiB);
    assert_int_equal(roomy.failed_allocations, 0);
    if (roomy.fallback_operations <= clean.fallback_operations)
      fail_msg("%s: %llu operations fell back, as many as on the same steps", names[k],
               (unsigned long long)roomy.fallback_operations);
    hbm_replay_result_free(&bfc);
    hbm_replay_result_free(&learn);
    hbm_replay_result_free(&roomy);
    free(log.events);
  }
  hbm_replay_result_free(&clean);
  free(same.events);
}

/* `hbm replay --mode learn` says what the plan served and what fell back. */
static void replay_command_reports_the_plan(void **state) {
  (void)state;
  hbm_alloc_log_t log = loop_log(INSERTED);
  char path[4200];
  snprintf(path, sizeof path, "%s/loop.csv", th_dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "Thread,Time,Action,Pointer,Size,Stream\n");
  for (size_t i = 0; i < log.n_events; i++) {
    const hbm_log_event_t *e = &log.events[i];
    fprintf(f, "1,%zu,%s,0x%llx,%llu,0x0\n", i, e->action == HBM_LOG_ALLOCATE ? "allocate" : "free",
            (unsigned long long)e->pointer,
            (unsigned long long)(e->action == HBM_LOG_ALLOCATE ? e->size : 0));
  }
  fclose(f);
  char cmd[8400], *out = NULL;
  snprintf(cmd, sizeof cmd, "env -u HBM_PROFILE_DIR '%s' replay '%s' --mode learn --repeat 1",
           HBM_BIN, path);
  assert_int_equal(th_run(cmd, &out), 0);
  if (!strstr(out, "step                 72 operations") || !strstr(out, "fell back"))
    fail_msg("no plan in:\n%s", out);
  free(out);
  snprintf(cmd, sizeof cmd, "env -u HBM_PROFILE_DIR '%s' replay '%s' --mode learn --json", HBM_BIN,
           path);
  assert_int_equal(th_run(cmd, &out), 0);
  const char *keys[] = {"\"peak_live_bytes\"",
                        "\"steady_reserved_bytes\"",
                        "\"planned_fraction\"",
                        "\"ns_per_op\"",
                        "\"first_planned_reserved_bytes\"",
                        "\"later_reserved_bytes\"",
                        "\"first_planned_floor_bytes\""};
  for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
    if (!strstr(out, keys[k]))
      fail_msg("%s missing in:\n%s", keys[k], out);
  free(out);
  free(log.events);
}

/* ---- the library ---- */

/* Runs `steps` steps of the loop on dev; every block's size is checked by address. */
static void run_loop(hbm_device_t *dev, int steps) {
  for (int s = 0; s < steps; s++) {
    void *act[A];
    for (int i = 0; i < A; i++) {
      act[i] = hbm_alloc(dev, act_size(i), 0);
      void *t = hbm_alloc(dev, tmp_size(i), 0);
      assert_non_null(act[i]);
      assert_non_null(t);
      assert_int_equal(hbm_block_size(dev, act[i]), act_size(i));
      assert_int_equal(hbm_free(dev, t), HBM_OK);
    }
    for (int i = A - 1; i >= 0; i--) {
      void *gr = hbm_alloc(dev, grad_size(i), 0);
      assert_non_null(gr);
      assert_int_equal(hbm_block_size(dev, gr), grad_size(i));
      assert_int_equal(hbm_free(dev, gr), HBM_OK);
      assert_int_equal(hbm_free(dev, act[i]), HBM_OK);
    }
  }
}

static int count_block(const hbm_block_info_t *b, void *ctx) {
  (void)b;
  ++*(int *)ctx;
  return 0;
}

/* A block the plan served is a block like any other: found by address, walked, freed once. */
static void plan_blocks_are_found_by_address(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("tstep", HBM_MODE_LEARN, 1024 * MiB, 1.0);
  assert_int_equal(hbm_device_mode(dev), HBM_MODE_LEARN);
  run_loop(dev, 4); /* planned from the second step on */
  void *a = hbm_alloc(dev, act_size(0), 0), *b = hbm_alloc(dev, tmp_size(0), 0);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(hbm_block_size(dev, a), act_size(0));
  int n = 0;
  assert_int_equal(hbm_walk(dev, count_block, &n), HBM_OK);
  assert_int_equal(n, 2);
  assert_int_equal(hbm_free(dev, b), HBM_OK);
  assert_int_equal(hbm_free(dev, b), HBM_ERR_NOT_FOUND); /* once */
  assert_int_equal(hbm_free(dev, a), HBM_OK);
  hbm_stats_t s = th_stats(dev);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.num_live, 0);
  assert_int_equal(s.num_allocs, 4 * 3 * A + 2); /* act, tmp, grad per i */
  hbm_close(dev);
}

static void *thread_loop(void *dev) {
  run_loop(dev, 200);
  return NULL;
}

/* Two threads on one learn device: their requests interleave, so the plan serves some and the
 * memory underneath the rest; every block's size is right and nothing is lost. */
static void threads_share_a_learn_device(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("tstep", HBM_MODE_LEARN, 2048 * MiB, 1.0);
  run_loop(dev, 3); /* one thread first: a plan */
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, thread_loop, dev), 0);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  hbm_stats_t s = th_stats(dev);
  assert_int_equal(s.bytes_in_use, 0);
  assert_int_equal(s.num_live, 0);
  assert_int_equal(s.num_ooms, 0);
  hbm_close(dev);
}

/* The program's own step markers (hbm_profiler_step_begin, with or without a profile): a loop
 * of 6 pairs (36 operations a step, so the stream would need 72 repeated ones, 2 periods, to
 * confirm) marked at every step is planned from the third step's first operation, the marker
 * having shown two alike steps. By hand, of the 4 steps after the first (144 operations): the
 * 36 of the second step and the third's first (op 72, allocating act[0], which the plan takes
 * over, live) were not planned, nor that block's free: 38; 106 served. */
static void step_markers_start_the_plan(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("tstep", HBM_MODE_LEARN, 1024 * MiB, 1.0);
  for (int s = 0; s < STEPS; s++) {
    hbm_profiler_step_begin(s);
    void *act[6];
    for (int i = 0; i < 6; i++) {
      act[i] = hbm_alloc(dev, act_size(i), 0);
      assert_int_equal(hbm_free(dev, hbm_alloc(dev, tmp_size(i), 0)), HBM_OK);
    }
    for (int i = 5; i >= 0; i--) {
      assert_int_equal(hbm_free(dev, hbm_alloc(dev, grad_size(i), 0)), HBM_OK);
      assert_int_equal(hbm_free(dev, act[i]), HBM_OK);
    }
  }
  hbm__step_stats_t st;
  hbm__step_get_stats(hbm__device_strategy(dev), &st);
  assert_int_equal(st.period, 36);
  assert_int_equal(st.first_step_end, 36);
  assert_int_equal(st.ops, STEPS * 36);
  assert_int_equal(st.planned_ops, 106);
  hbm_close(dev);
}

/* A profile captured in mode learn says what the plan did (markers `hbm plan: ...`). */
static void profile_records_the_plan(void **state) {
  (void)state;
  assert_int_equal(hbm_profiler_start(th_dir), HBM_OK);
  hbm_device_t *dev = th_open_sim("tstep", HBM_MODE_LEARN, 1024 * MiB, 1.0);
  run_loop(dev, 4);
  hbm_close(dev);
  char path[4200];
  snprintf(path, sizeof path, "%s", hbm_profiler_path());
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  hbm_profile_t *p = hbm_profile_load(path);
  assert_non_null(p);
  int found = 0, steps = 0;
  for (size_t i = 0; i < hbm_profile_marker_count(p); i++) {
    const char *text = hbm_profile_marker(p, i)->text;
    found += text && !strncmp(text, "hbm plan: step of 72 operations", 31);
    steps += text && strstr(text, "operations served from the plan") != NULL;
  }
  assert_int_equal(found, 1);
  assert_true(steps >= 2);
  char *text = NULL; /* and `hbm report` shows it */
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  assert_int_equal(hbm_report_text(p, -1, 80, out), HBM_OK);
  fclose(out);
  /* per planned step (periods from the plan's start, 64 operations into the second step):
   * the first serves all but the frees of the 4 blocks it took over, the second all 72 */
  if (!strstr(text, "step plan (mode learn)") || !strstr(text, "72 operations (36 allocations)") ||
      !strstr(text, "2 steps, 140 of 144 operations from the plan (97.22%), 4 fell back") ||
      !strstr(text, "step 1         94.44% of 72 operations") ||
      !strstr(text, "step 2        100.00% of 72 operations") || !strstr(text, "saved"))
    fail_msg("no step plan in the report:\n%s", text);
  free(text);
  out = open_memstream(&text, &len); /* the JSON, the viewer's panel's source */
  assert_int_equal(hbm_report_json(p, -1, out), HBM_OK);
  fclose(out);
  json_error_t err;
  json_t *root = json_loads(text, 0, &err), *plan = json_object_get(root, "step_plan");
  assert_non_null(plan);
  assert_int_equal(json_integer_value(json_object_get(plan, "step_operations")), 72);
  assert_int_equal(json_integer_value(json_object_get(plan, "bound_bytes")), BOUND);
  assert_int_equal(json_integer_value(json_object_get(plan, "served_operations")), 140);
  json_t *planned = json_object_get(plan, "steps");
  assert_int_equal(json_array_size(planned), 2);
  assert_int_equal(json_integer_value(json_object_get(json_array_get(planned, 0), "fell_back")), 4);
  /* saved: the step before the plan's most reserved, less the planned steps' most */
  json_int_t most = 0;
  for (size_t i = 0; i < 2; i++) {
    json_int_t r =
        json_integer_value(json_object_get(json_array_get(planned, i), "reserved_bytes"));
    most = r > most ? r : most;
  }
  assert_true(most > 0);
  assert_int_equal(json_integer_value(json_object_get(plan, "saved_bytes")),
                   json_integer_value(json_object_get(plan, "first_step_reserved_bytes")) - most);
  json_decref(root);
  free(text);
  hbm_profile_free(p);
}

static void plan_variable_is_parsed(void **state) {
  (void)state;
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  assert_int_equal(hbm_config_set(&cfg, "HBM_PLAN", "step", HBM_ORIGIN_ENV), HBM_OK);
  assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_LEARN);
  assert_int_equal(hbm_config_validate(&cfg), HBM_OK);
  assert_int_equal(hbm_config_set(&cfg, "HBM_PLAN", "sometimes", HBM_ORIGIN_ENV), HBM_ERR_INVALID);
  assert_non_null(
      strstr(hbm_last_error(), "HBM_PLAN=sometimes: invalid value; expected step or none"));
  assert_int_equal(hbm_config_set(&cfg, "HBM_EXPANDABLE", "1", HBM_ORIGIN_ENV), HBM_OK);
  assert_int_equal(hbm_config_validate(&cfg), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "HBM_PLAN=step"));
  hbm_mode_t mode;
  assert_int_equal(hbm_mode_parse("learn", &mode), HBM_OK);
  assert_int_equal(mode, HBM_MODE_LEARN);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(repeating_loop_is_planned),
      cmocka_unit_test(survivors_are_not_held_twice),
      cmocka_unit_test(divergent_steps_never_fail),
      cmocka_unit_test(replay_command_reports_the_plan),
      cmocka_unit_test(plan_blocks_are_found_by_address),
      cmocka_unit_test(threads_share_a_learn_device),
      cmocka_unit_test(profile_records_the_plan),
      cmocka_unit_test(step_markers_start_the_plan),
      cmocka_unit_test(plan_variable_is_parsed),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
