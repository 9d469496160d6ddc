/* test_alloc_step_markers.c — mode learn (`hbm replay --mode learn`) on the traces frameworks
 * write, with the step markers they hold: an XProf trace (.xplane.pb) whose busiest allocator
 * repeats a step and whose step events mark it — host events with a step_num stat, as
 * jax.profiler.StepTraceAnnotation writes them (a /host:CPU event "train" with the int64 stats
 * _r and step_num; seen in a trace JAX 0.10 wrote), or a device plane's "Steps" line — and a
 * PyTorch memory snapshot whose trace repeats a step (snapshots hold no step markers: the
 * stream itself is the pattern). The fixtures are built here (XSpaces with protobuf-c through
 * tests/xplane_fixtures.h, the pickle opcode by opcode); the expected numbers are the hand
 * calculations of tests/test_alloc_step.c for the same loops, repeated beside each test.
 * (None of the 13 snapshots in ../shared/real/torch holds a repeated step: each records one
 * forward pass or one training step, and mode learn finds no step in any.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"
#include "xplane_fixtures.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define STEPS 5

static uint64_t act_size(int i) { return (uint64_t)(i + 1) * MiB + 4 * KiB * (uint64_t)i; }
static uint64_t tmp_size(int i) { return 64 * KiB * (uint64_t)(i + 1) + 256; }
static uint64_t grad_size(int i) { return 32 * KiB * (uint64_t)(i + 1) + 512; }

/* ---- a loop, as a list of operations ---- */

typedef struct op {
  bool alloc;
  uint64_t addr, size;
} op_t;

typedef struct loop {
  op_t ops[STEPS * 6 * 12];
  size_t n, step_first[STEPS]; /* the operation each step begins with */
  uint64_t next_addr;
} loop_t;

static uint64_t alloc_op(loop_t *l, uint64_t size) {
  uint64_t addr = l->next_addr += 64 * MiB; /* never live twice */
  l->ops[l->n++] = (op_t){true, addr, size};
  return addr;
}

static void free_op(loop_t *l, uint64_t addr) { l->ops[l->n++] = (op_t){false, addr, 0}; }

/* The loop of test_alloc_step.c with `a` activations a step: forward act[i], tmp[i] (freed at
 * once); backward grad[i] (freed at once), then act[i] freed. 6a operations a step. */
static void make_loop(loop_t *l, int a) {
  memset(l, 0, sizeof *l);
  l->next_addr = 0x7f0000000000ull;
  for (int s = 0; s < STEPS; s++) {
    uint64_t act[12];
    l->step_first[s] = l->n;
    for (int i = 0; i < a; i++) {
      act[i] = alloc_op(l, act_size(i));
      free_op(l, alloc_op(l, tmp_size(i)));
    }
    for (int i = a - 1; i >= 0; i--) {
      free_op(l, alloc_op(l, grad_size(i)));
      free_op(l, act[i]);
    }
  }
}

/* ---- hbm replay's JSON ---- */

static long long json_number(const char *json, const char *key) {
  char want[128];
  snprintf(want, sizeof want, "\"%s\": ", key);
  const char *at = strstr(json, want);
  if (!at)
    fail_msg("%s missing in:\n%s", key, json);
  return strtoll(at + strlen(want), NULL, 10);
}

/* The plan replay's JSON reports: a step of `period` operations, the second beginning at that
 * event, `planned` of the later operations served and `fallback` not, nothing failed. */
static void assert_plan(const char *out, long long events, long long period, long long planned,
                        long long fallback) {
  assert_int_equal(json_number(out, "events"), events);
  assert_int_equal(json_number(out, "step_operations"), period);
  assert_int_equal(json_number(out, "first_step_end_event"), period);
  assert_int_equal(json_number(out, "planned_operations"), planned);
  assert_int_equal(json_number(out, "fallback_operations"), fallback);
  assert_int_equal(json_number(out, "failed_allocations"), 0);
}

/* Not inlined: gcc 12's -Wdangling-pointer (Release) takes the text th_run returns through
 * &out for the local `out` itself once this is inlined into a caller. */
__attribute__((noinline)) static char *replay_json(const char *path) {
  char cmd[8400], *out = NULL;
  snprintf(cmd, sizeof cmd,
           "env -u HBM_PROFILE_DIR '%s' replay '%s' --mode learn --repeat 0 --json", HBM_BIN, path);
  if (th_run(cmd, &out) != 0)
    fail_msg("hbm replay %s failed:\n%s", path, out ? out : "");
  return out;
}

/* ---- XProf traces ---- */

enum { EV_ALLOC = 1, EV_FREE = 2, EV_TRAIN = 3 };
enum { S_ALLOCATOR = 10, S_ADDR, S_REQUESTED, S_ALLOCATION, S_IN_USE, S_ROOT, S_STEP_NUM };
typedef enum markers { NO_MARKERS, HOST_MARKERS, DEVICE_STEPS } markers_t;

/* Operation k at 1000 ns + 10 ns·k on the allocator "GPU_0_bfc"; a step's marker 5 ns before
 * its first operation. */
static void write_trace(const loop_t *l, markers_t markers, const char *path) {
  xf_arena_t a = {0};
  HbmXplane__XSpace *s = xf_space(&a, 2);
  HbmXplane__XPlane *cpu = xf_plane(&a, s, "/host:CPU", 2, 16);
  xf_event_meta(&a, cpu, EV_ALLOC, "MemoryAllocation", 0);
  xf_event_meta(&a, cpu, EV_FREE, "MemoryDeallocation", 0);
  xf_event_meta(&a, cpu, EV_TRAIN, "train", 0);
  const char *names[] = {"allocator_name",  "addr", "requested_bytes", "allocation_bytes",
                         "bytes_allocated", "_r",   "step_num"};
  for (int i = 0; i < 7; i++)
    xf_stat_meta(&a, cpu, S_ALLOCATOR + i, names[i]);
  HbmXplane__XLine *mem = xf_line(&a, cpu, 1000, l->n), *python = xf_line(&a, cpu, 1000, STEPS);
  uint64_t in_use = 0;
  for (size_t k = 0; k < l->n; k++) {
    const op_t *o = &l->ops[k];
    HbmXplane__XEvent *e = xf_xevent(&a, mem, o->alloc ? EV_ALLOC : EV_FREE, 10000 * (int64_t)k, 5);
    xf_event_str(&a, e, S_ALLOCATOR, "GPU_0_bfc");
    xf_event_u64(&a, e, S_ADDR, o->addr);
    xf_event_u64(&a, e, S_REQUESTED, o->size);
    xf_event_u64(&a, e, S_ALLOCATION, o->size);
    in_use += o->size; /* (frees carry no size here: what is in use is not what is checked) */
    xf_event_u64(&a, e, S_IN_USE, in_use);
  }
  HbmXplane__XLine *steps = NULL;
  if (markers == DEVICE_STEPS) {
    HbmXplane__XPlane *gpu = xf_plane(&a, s, "/device:GPU:0", 1, 1);
    steps = xf_line(&a, gpu, 1000, STEPS);
    steps->name = xf_str(&a, "Steps");
  }
  for (int st = 0; markers != NO_MARKERS && st < STEPS; st++) {
    int64_t at = 10000 * (int64_t)l->step_first[st] - 5000;
    if (markers == DEVICE_STEPS) {
      xf_xevent(&a, steps, st, at, 0);
      continue;
    }
    HbmXplane__XEvent *e = xf_xevent(&a, python, EV_TRAIN, at, 2);
    xf_event_i64(&a, e, S_ROOT, 1);
    xf_event_i64(&a, e, S_STEP_NUM, st);
  }
  size_t len;
  uint8_t *bytes = xf_pack_space(s, &len);
  assert_non_null(bytes);
  assert_int_equal(th_write(path, (const char *)bytes, len), 0);
  free(bytes);
  xf_free(&a);
}

/* The loop of 6 pairs (36 operations a step, so the stream alone would need 72 repeated ones,
 * two periods, to confirm it), marked at every step, is planned from the third step's first
 * operation: the markers showed two alike steps. By hand (test_alloc_step.c,
 * step_markers_start_the_plan): of the 4 steps after the first (144 operations), the second
 * step's 36 and the third's first (allocating act[0], which the plan takes over, live) were
 * not planned, nor that block's free: 38; 106 served. */
static void xprof_step_markers_start_the_plan(void **state) {
  (void)state;
  loop_t l;
  make_loop(&l, 6);
  const markers_t kinds[] = {HOST_MARKERS, DEVICE_STEPS};
  for (size_t k = 0; k < 2; k++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/marked%zu.xplane.pb", th_dir, k);
    write_trace(&l, kinds[k], path);
    char *out = replay_json(path);
    assert_non_null(strstr(out, "\"allocator\": \"GPU_0_bfc\""));
    assert_int_equal(json_number(out, "step_markers"), STEPS);
    assert_plan(out, STEPS * 36, 36, 106, 38);
    free(out);
  }
}

/* Without markers the same trace is found in the stream, two periods later: fewer served. */
static void xprof_without_markers_waits_for_the_stream(void **state) {
  (void)state;
  loop_t l;
  make_loop(&l, 6);
  char path[4200];
  snprintf(path, sizeof path, "%s/unmarked.xplane.pb", th_dir);
  write_trace(&l, NO_MARKERS, path);
  char *out = replay_json(path);
  assert_int_equal(json_number(out, "step_markers"), 0);
  assert_int_equal(json_number(out, "step_operations"), 36);
  long long planned = json_number(out, "planned_operations");
  if (planned >= 106 || planned <= 0)
    fail_msg("%lld operations planned without markers, 106 with them", planned);
  free(out);
}

/* ---- PyTorch snapshots: the pickle, opcode by opcode (protocol 4) ---- */

typedef struct pickle {
  char *data;
  size_t n, cap;
} pickle_t;

static void emit(pickle_t *p, const void *bytes, size_t n) {
  if (p->n + n > p->cap) {
    p->cap = 2 * (p->n + n) + 1024;
    p->data = realloc(p->data, p->cap);
    assert_non_null(p->data);
  }
  memcpy(p->data + p->n, bytes, n);
  p->n += n;
}

static void emit_str(pickle_t *p, const char *s) { /* SHORT_BINUNICODE */
  uint8_t head[2] = {0x8c, (uint8_t)strlen(s)};
  emit(p, head, 2);
  emit(p, s, strlen(s));
}

static void emit_int(pickle_t *p, uint64_t v) { /* LONG1 of 8 bytes, little-endian */
  uint8_t b[10] = {0x8a, 8};
  for (int i = 0; i < 8; i++)
    b[2 + i] = (uint8_t)(v >> (8 * i));
  emit(p, b, sizeof b);
}

/* {'segments': [], 'device_traces': [[{'action': 'alloc' | 'free_completed', 'addr': A,
 * 'size': S, 'stream': 0, 'time_us': T}, ...]]}: what torch.cuda.memory._dump_snapshot
 * writes for one device (its segments left empty: nothing was live at the dump). */
static void write_snapshot(const loop_t *l, const char *path) {
  pickle_t p = {0};
  emit(&p, "\x80\x04}(", 4); /* PROTO 4, EMPTY_DICT, MARK */
  emit_str(&p, "segments");
  emit(&p, "]", 1);
  emit_str(&p, "device_traces");
  emit(&p, "](](", 4); /* [ MARK [ MARK */
  uint64_t size_of[STEPS * 6 * 12] = {0};
  for (size_t k = 0; k < l->n; k++) {
    const op_t *o = &l->ops[k];
    if (o->alloc)
      size_of[k] = o->size;
    for (size_t j = 0; !o->alloc && j < k; j++) /* a free names its block's size */
      if (l->ops[j].alloc && l->ops[j].addr == o->addr)
        size_of[k] = l->ops[j].size;
    emit(&p, "}(", 2);
    emit_str(&p, "action");
    emit_str(&p, o->alloc ? "alloc" : "free_completed");
    emit_str(&p, "addr");
    emit_int(&p, o->addr);
    emit_str(&p, "size");
    emit_int(&p, size_of[k]);
    emit_str(&p, "stream");
    emit_int(&p, 0);
    emit_str(&p, "time_us");
    emit_int(&p, 1700000000000000ull + k);
    emit(&p, "u", 1); /* SETITEMS */
  }
  emit(&p, "eeu.", 4); /* APPENDS, APPENDS, SETITEMS, STOP */
  assert_int_equal(th_write(path, p.data, p.n), 0);
  free(p.data);
}

/* The loop of 12 activations (72 operations a step), by hand (test_alloc_step.c): the plan
 * starts 64 operations into the second step; those 64 and the 4 frees of the blocks it takes
 * over fall back: of the 4 later steps (288 operations), 220 served. */
static void snapshot_repeating_step_is_planned(void **state) {
  (void)state;
  loop_t l;
  make_loop(&l, 12);
  char path[4200];
  snprintf(path, sizeof path, "%s/loop.pickle", th_dir);
  write_snapshot(&l, path);
  char *out = replay_json(path);
  assert_non_null(strstr(out, "\"pytorch\""));
  assert_plan(out, STEPS * 72, 72, 220, 68);
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(xprof_step_markers_start_the_plan),
      cmocka_unit_test(xprof_without_markers_waits_for_the_stream),
      cmocka_unit_test(snapshot_repeating_step_is_planned),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
