/* test_hlo_xla.c — the rules that make `hbm plan` reproduce XLA's buffer assignment (issue
 * 11), each on a small hand-written module with its sizes worked out by hand beside it:
 * temporaries in output and aliased-parameter allocations, tuple-shaped temporaries and
 * the order CombineTempAllocations lays the temp allocation out in, thread-local reducer
 * values (also inside fusions), the backends' heap alignment, all-reduce-start results
 * over their operand (and synchronous all-reduces not), tuple tables never reused, the
 * CPU's stricter rule for a fusion writing over its operand, the warnings for modules
 * XLA's numbers cannot be compared with, leading stack-frame tables, and the dump readers
 * taking XLA's totals as written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

static hbm_plan_t *plan_as(const char *text, int backend) {
  hbm_plan_options_t opt = {.backend = backend};
  hbm_plan_t *p = hbm_plan_text(text, strlen(text), "test.hlo", &opt);
  if (!p)
    fail_msg("%s", hbm_last_error());
  return p;
}

static uint64_t temp_of(const char *text, int backend) {
  hbm_plan_t *p = plan_as(text, backend);
  uint64_t t = hbm_plan_get_summary(p)->temp_bytes;
  hbm_plan_free(p);
  return t;
}

static char *json_of(const hbm_plan_t *p) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_int_equal(hbm_plan_report_json(p, f), HBM_OK);
  fclose(f);
  return text;
}

static void json_has(const hbm_plan_t *p, const char *needle) {
  char *j = json_of(p);
  if (!strstr(j, needle))
    fail_msg("no %s in\n%.600s", needle, j);
  free(j);
}

/* a (1024 B) is last read by r, which is element-wise over it: XLA's LiveRangeInterferes
 * lets ranges that only touch share when the later may overwrite the earlier, so a lives
 * in r's output allocation and the temp allocation is empty. The plain planner (none)
 * keeps a in the heap: 1024. */
static const char *touch_elementwise = "HloModule touch, is_scheduled=true\n"
                                       "ENTRY e {\n"
                                       "  p = f32[256]{0} parameter(0)\n"
                                       "  a = f32[256]{0} exponential(p)\n"
                                       "  ROOT r = f32[256]{0} negate(a)\n"
                                       "}\n";

static void temporary_in_output_allocation(void **state) {
  (void)state;
  hbm_plan_t *p = plan_as(touch_elementwise, HBM_PLAN_BACKEND_GPU);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_true(s->argument_bytes == 1024 && s->output_bytes == 1024);
  assert_true(s->temp_bytes == 0);
  json_has(p, "\"total_bytes\": 2048");
  hbm_plan_free(p);
  assert_true(temp_of(touch_elementwise, HBM_PLAN_BACKEND_CPU) == 0);
  assert_true(temp_of(touch_elementwise, HBM_PLAN_BACKEND_NONE) == 1024);
}

/* t (1024 B) is last read by the dot that defines the output: a dot cannot write over its
 * operand, so the ranges interfere and t stays in the temp allocation: 1024. */
static void touching_needs_an_elementwise_user(void **state) {
  (void)state;
  const char *m = "HloModule dot, is_scheduled=true\n"
                  "ENTRY e {\n"
                  "  p = f32[16,16]{1,0} parameter(0)\n"
                  "  t = f32[16,16]{1,0} transpose(p), dimensions={1,0}\n"
                  "  ROOT d = f32[16,16]{1,0} dot(t, t), lhs_contracting_dims={1}, "
                  "rhs_contracting_dims={0}\n"
                  "}\n";
  assert_true(temp_of(m, HBM_PLAN_BACKEND_GPU) == 1024);
}

/* p is donated to the output (input_output_alias), so its allocation is reusable: it holds
 * p over steps [0,1] and r from step 3 on. t [1,2] starts where p is last read, by a
 * reverse (not element-wise): it interferes. u [2,3] is free of p and touches r, which is
 * element-wise over it: u lives in p's allocation. The temp allocation holds t: 1024. The
 * plain planner keeps t and u (live together at step 2) apart: 2048. */
static void temporary_in_donated_parameter(void **state) {
  (void)state;
  const char *m = "HloModule alias, is_scheduled=true, input_output_alias={ {}: (0, {}, "
                  "may-alias) }\n"
                  "ENTRY e {\n"
                  "  p = f32[256]{0} parameter(0)\n"
                  "  t = f32[256]{0} reverse(p), dimensions={0}\n"
                  "  u = f32[256]{0} reverse(t), dimensions={0}\n"
                  "  ROOT r = f32[256]{0} negate(u)\n"
                  "}\n";
  hbm_plan_t *p = plan_as(m, HBM_PLAN_BACKEND_GPU);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_true(s->argument_bytes == 1024 && s->output_bytes == 1024 && s->alias_bytes == 1024);
  assert_true(s->temp_bytes == 1024);
  json_has(p, "\"total_bytes\": 2048");
  hbm_plan_free(p);
  assert_true(temp_of(m, HBM_PLAN_BACKEND_NONE) == 2048);
}

/* cc's tuple table (16 B) gets an allocation of its own. cc{0} [1,4] touches r (add, over
 * it) and goes into r's allocation; cc{1} [1,4] overlaps cc{0} there, so the heap holds
 * cc{1}: 256. XLA's allocations in creation order (largest first, live-out first): r, p,
 * the table T, then the heap H: [r, p, T, H]. std::partition leaves T, H in that order;
 * laid end to end with GPU's 128-byte alignment: T at 0, H at 128, 128 + 256 = 384. */
static const char *tuple_module = "HloModule tuples, is_scheduled=true\n"
                                  "ENTRY e {\n"
                                  "  p = f32[64]{0} parameter(0)\n"
                                  "  cc = (f32[64]{0}, f32[64]{0}) custom-call(p), "
                                  "custom_call_target=\"two\"\n"
                                  "  g0 = f32[64]{0} get-tuple-element(cc), index=0\n"
                                  "  g1 = f32[64]{0} get-tuple-element(cc), index=1\n"
                                  "  ROOT r = f32[64]{0} add(g0, g1)\n"
                                  "}\n";

/* The same with a reduction of r into a second output. New allocations: the output tuple
 * table O_t (16 B, live out), the result `sum` (4), the constant z (4), and after the heap
 * the reducer's three thread-local values L (x, y, s; 4 B each). Creation order:
 * [r, p, O_t, T, sum, z, H, L, L, L]. libstdc++'s std::partition swaps T with the last L
 * and H with the next one: [r, p, O_t, L, sum, z, L, L, H, T]. So the heap comes first
 * (256 B at 0) and the table after it at 256: 256 + 16 = 272. Total: arguments 256 +
 * outputs (256 + 16 + 4) + constant 4 + thread-local 12 + temp 272 = 820. */
static const char *tuple_module_with_reducer =
    "HloModule tuples2, is_scheduled=true\n"
    "%add_f32 (x: f32[], y: f32[]) -> f32[] {\n"
    "  x = f32[] parameter(0)\n"
    "  y = f32[] parameter(1)\n"
    "  ROOT s = f32[] add(x, y)\n"
    "}\n"
    "ENTRY e {\n"
    "  p = f32[64]{0} parameter(0)\n"
    "  z = f32[] constant(0)\n"
    "  cc = (f32[64]{0}, f32[64]{0}) custom-call(p), custom_call_target=\"two\"\n"
    "  g0 = f32[64]{0} get-tuple-element(cc), index=0\n"
    "  g1 = f32[64]{0} get-tuple-element(cc), index=1\n"
    "  r = f32[64]{0} add(g0, g1)\n"
    "  sum = f32[] reduce(r, z), dimensions={0}, to_apply=%add_f32\n"
    "  ROOT out = (f32[64]{0}, f32[]) tuple(r, sum)\n"
    "}\n";

static void tuple_tables_and_the_combined_temp(void **state) {
  (void)state;
  assert_true(temp_of(tuple_module, HBM_PLAN_BACKEND_GPU) == 384);
  hbm_plan_t *p = plan_as(tuple_module_with_reducer, HBM_PLAN_BACKEND_GPU);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_true(s->argument_bytes == 256);
  assert_true(s->output_bytes == 276);
  assert_true(s->temp_bytes == 272);
  json_has(p, "\"thread_local_bytes\": 12");
  json_has(p, "\"constant_bytes\": 4");
  json_has(p, "\"total_bytes\": 820");
  hbm_plan_free(p);
}

/* A reduction inside a fusion: XLA gives the reducer's values (x, y, s: 4 B each)
 * thread-local allocations although the fusion body itself has none: 12 B. Total: 256 +
 * 4 + 12 = 272. */
static void thread_local_reducer_inside_a_fusion(void **state) {
  (void)state;
  const char *m = "HloModule tl, is_scheduled=true\n"
                  "%add (x: f32[], y: f32[]) -> f32[] {\n"
                  "  x = f32[] parameter(0)\n"
                  "  y = f32[] parameter(1)\n"
                  "  ROOT s = f32[] add(x, y)\n"
                  "}\n"
                  "%fused (fp: f32[64]) -> f32[] {\n"
                  "  fp = f32[64]{0} parameter(0)\n"
                  "  c = f32[] constant(0)\n"
                  "  ROOT r = f32[] reduce(fp, c), dimensions={0}, to_apply=%add\n"
                  "}\n"
                  "ENTRY e {\n"
                  "  p = f32[64]{0} parameter(0)\n"
                  "  ROOT f = f32[] fusion(p), kind=kInput, calls=%fused\n"
                  "}\n";
  hbm_plan_t *p = plan_as(m, HBM_PLAN_BACKEND_GPU);
  json_has(p, "\"thread_local_bytes\": 12");
  json_has(p, "\"total_bytes\": 272");
  hbm_plan_free(p);
}

/* a and b (100 B each) are both live at the concatenate, which cannot write over them:
 * both in the heap, b above a at the next multiple of the alignment. GPU (128): 128 +
 * 100 = 228; CPU (64): 128 + 100 = 228 too (100 rounds up to 128); the plain planner
 * (alignment 1): 200. The backend is read from the file name when not given. */
static void backend_alignment(void **state) {
  (void)state;
  const char *m = "HloModule align, is_scheduled=true\n"
                  "ENTRY e {\n"
                  "  p = f32[25]{0} parameter(0)\n"
                  "  a = f32[25]{0} exponential(p)\n"
                  "  b = f32[25]{0} log(p)\n"
                  "  ROOT r = f32[50]{0} concatenate(a, b), dimensions={0}\n"
                  "}\n";
  assert_true(temp_of(m, HBM_PLAN_BACKEND_GPU) == 228);
  assert_true(temp_of(m, HBM_PLAN_BACKEND_CPU) == 228);
  assert_true(temp_of(m, HBM_PLAN_BACKEND_NONE) == 200);
  hbm_plan_options_t opt = {0};
  hbm_plan_t *p =
      hbm_plan_text(m, strlen(m), "module_0001.f.sm_8.0_gpu_after_optimizations.txt", &opt);
  assert_non_null(p);
  assert_true(hbm_plan_get_summary(p)->temp_bytes == 228);
  json_has(p, "\"backend\": \"gpu\"");
  hbm_plan_free(p);
}

/* e [1,2] is last read by the all-reduce-start whose result is the output: all-reduce-start
 * and its operand are an in-place pair (XLA's GetInPlaceInputOutputPairs), one buffer on
 * every backend, so e is the output's buffer: temp 0 (the plain planner joins the pair
 * too: e dies there and may be written). */
static void all_reduce_over_its_operand(void **state) {
  (void)state;
  const char *m = "HloModule ar, is_scheduled=true\n"
                  "%add (x: f32[], y: f32[]) -> f32[] {\n"
                  "  x = f32[] parameter(0)\n"
                  "  y = f32[] parameter(1)\n"
                  "  ROOT s = f32[] add(x, y)\n"
                  "}\n"
                  "ENTRY e {\n"
                  "  p = f32[64]{0} parameter(0)\n"
                  "  e = f32[64]{0} exponential(p)\n"
                  "  ars = f32[64]{0} all-reduce-start(e), replica_groups={}, to_apply=%add\n"
                  "  ROOT ard = f32[64]{0} all-reduce-done(ars)\n"
                  "}\n";
  assert_true(temp_of(m, HBM_PLAN_BACKEND_GPU) == 0);
  assert_true(temp_of(m, HBM_PLAN_BACKEND_NONE) == 0);
}

/* A synchronous all-reduce is neither an in-place pair (only all-reduce-start is, in
 * XLA's GetInPlaceInputOutputPairs) nor element-wise, so on the CPU e [1,2] (256 B) meets
 * the output ar at step 2 and may not live in its allocation: temp 256, as in XLA's CPU
 * dump of a psum (its fusion result stays in the preallocated temp). Thread-local: the
 * reducer's x, y, s (12 B). Total: 256 (p) + 256 (ar) + 12 + 256 = 780. The GPU's hook
 * says yes for it (buffer_sharing.cc, CanShareBufferHint: "NCCL all-reduce can be
 * performed in-place", one operand): e ends where ar begins and lives in its allocation,
 * temp 0. */
static void sync_all_reduce_keeps_its_operand(void **state) {
  (void)state;
  const char *m = "HloModule psum, is_scheduled=true\n"
                  "%add (x: f32[], y: f32[]) -> f32[] {\n"
                  "  x = f32[] parameter(0)\n"
                  "  y = f32[] parameter(1)\n"
                  "  ROOT s = f32[] add(x, y)\n"
                  "}\n"
                  "ENTRY e {\n"
                  "  p = f32[64]{0} parameter(0)\n"
                  "  e = f32[64]{0} exponential(p)\n"
                  "  ROOT ar = f32[64]{0} all-reduce(e), replica_groups={}, to_apply=%add\n"
                  "}\n";
  hbm_plan_t *p = plan_as(m, HBM_PLAN_BACKEND_CPU);
  assert_true(hbm_plan_get_summary(p)->temp_bytes == 256);
  json_has(p, "\"total_bytes\": 780");
  hbm_plan_free(p);
  assert_true(temp_of(m, HBM_PLAN_BACKEND_GPU) == 0);
}

/* A tuple-shaped output's table is never reused (BufferAllocation::is_reusable() is false
 * for tuple allocations). s = negate(q) (4 B) lives [2,3]: it meets b (256 B, defined at
 * step 3 by a broadcast, which cannot write over it), and would fit the 8-byte table of t,
 * defined at step 4 after s died — but XLA does not put it there: temp 4 (one 4-byte
 * buffer; XLA's CPU dump of an Adam step keeps its two bias-correction scalars in the
 * temp allocation the same way). */
static void tuple_tables_are_not_reused(void **state) {
  (void)state;
  const char *m = "HloModule table, is_scheduled=true\n"
                  "ENTRY e {\n"
                  "  p = f32[64]{0} parameter(0)\n"
                  "  q = f32[] parameter(1)\n"
                  "  s = f32[] negate(q)\n"
                  "  b = f32[64]{0} broadcast(s), dimensions={}\n"
                  "  ROOT t = (f32[64]{0}) tuple(b)\n"
                  "}\n";
  assert_true(temp_of(m, HBM_PLAN_BACKEND_CPU) == 4);
  assert_true(temp_of(m, HBM_PLAN_BACKEND_GPU) == 4);
}

/* Whether a loop fusion may write its result over an operand that dies there: the GPU's
 * hook (buffer_sharing.cc, FusionCanShareBufferHint) asks for the same elements and bytes,
 * and every instruction reached from the parameter element-wise, a bitcast or a tuple on a
 * path to the result; XLA's own rule, which the CPU uses (it has no hook), asks for equal
 * shapes, layout included, and every transitive use element-wise or a tuple. a (f32[256],
 * 1024 B) lives [1,2] and is last read by the fusion r that defines the output (1024 B):
 * - bitcast root: r is f32[4,64], a is f32[256] (shapes differ, bytes equal); the body
 *   negates x, then bitcasts: GPU shares (a in r's allocation, temp 0), CPU does not
 *   (temp 1024) — the transformer zoo program's copy_bitcast fusions;
 * - reverse after the negate: shapes equal, but the reverse reached from x is neither
 *   element-wise nor a bitcast: temp 1024 on both. */
static void cpu_sharing_needs_equal_shapes(void **state) {
  (void)state;
  const char *bitcast_root = "HloModule bc, is_scheduled=true\n"
                             "%f (x: f32[256]) -> f32[4,64] {\n"
                             "  x = f32[256]{0} parameter(0)\n"
                             "  n = f32[256]{0} negate(x)\n"
                             "  ROOT b = f32[4,64]{1,0} bitcast(n)\n"
                             "}\n"
                             "ENTRY e {\n"
                             "  p = f32[256]{0} parameter(0)\n"
                             "  a = f32[256]{0} exponential(p)\n"
                             "  ROOT r = f32[4,64]{1,0} fusion(a), kind=kLoop, calls=%f\n"
                             "}\n";
  const char *reverse_after = "HloModule rev, is_scheduled=true\n"
                              "%f (x: f32[256]) -> f32[256] {\n"
                              "  x = f32[256]{0} parameter(0)\n"
                              "  n = f32[256]{0} negate(x)\n"
                              "  ROOT v = f32[256]{0} reverse(n), dimensions={0}\n"
                              "}\n"
                              "ENTRY e {\n"
                              "  p = f32[256]{0} parameter(0)\n"
                              "  a = f32[256]{0} exponential(p)\n"
                              "  ROOT r = f32[256]{0} fusion(a), kind=kLoop, calls=%f\n"
                              "}\n";
  assert_true(temp_of(bitcast_root, HBM_PLAN_BACKEND_GPU) == 0);
  assert_true(temp_of(bitcast_root, HBM_PLAN_BACKEND_CPU) == 1024);
  assert_true(temp_of(reverse_after, HBM_PLAN_BACKEND_GPU) == 1024);
  assert_true(temp_of(reverse_after, HBM_PLAN_BACKEND_CPU) == 1024);
  /* the element-wise negate of touch_elementwise has equal shapes: shared on both */
  assert_true(temp_of(touch_elementwise, HBM_PLAN_BACKEND_CPU) == 0);
}

/* A sort may write each sorted array over its operand: the iota i [1,2] and the sorted
 * indices s{1} [2,2] share one 256-byte chunk (without the rule: 512). The comparator's
 * values are thread-local (a, b, c, d, lt: 4+4+4+4+1 = 17 B) except its constant, which
 * XLA allocates as a constant (4 B). Allocations in creation order: s{0} (output), p, the
 * table T, the constant C, the heap H, then five thread-local L:
 * [O, p, T, C, H, L, L, L, L, L]; std::partition leaves [O, p, L, C, L, L, L, L, H, T]:
 * H at 0 (256 B) and T at 256: temp 272. Total: 256 + 256 + 4 + 17 + 272 = 805. */
static void sort_over_its_operands(void **state) {
  (void)state;
  const char *m = "HloModule sort, is_scheduled=true\n"
                  "%cmp (a: f32[], b: f32[], c: s32[], d: s32[]) -> pred[] {\n"
                  "  a = f32[] parameter(0)\n"
                  "  b = f32[] parameter(1)\n"
                  "  c = s32[] parameter(2)\n"
                  "  d = s32[] parameter(3)\n"
                  "  k = f32[] constant(0)\n"
                  "  ROOT lt = pred[] compare(a, b), direction=LT\n"
                  "}\n"
                  "ENTRY e {\n"
                  "  p = f32[64]{0} parameter(0)\n"
                  "  i = s32[64]{0} iota(), iota_dimension=0\n"
                  "  s = (f32[64]{0}, s32[64]{0}) sort(p, i), dimensions={0}, to_apply=%cmp\n"
                  "  ROOT g = f32[64]{0} get-tuple-element(s), index=0\n"
                  "}\n";
  hbm_plan_t *p = plan_as(m, HBM_PLAN_BACKEND_GPU);
  assert_true(hbm_plan_get_summary(p)->temp_bytes == 272);
  json_has(p, "\"thread_local_bytes\": 17");
  json_has(p, "\"constant_bytes\": 4");
  json_has(p, "\"total_bytes\": 805");
  hbm_plan_free(p);
}

/* After optimizations XLA's copy insertion has run, so its alias analysis joins in-place
 * updates, loops and branches without looking at liveness. Here d updates a in place
 * although a is read again after d: XLA keeps them one buffer {a, d}, live over [3, 5]:
 * 256 B of temp (the concatenate cannot write over it). The plain planner, which infers
 * the copy XLA would insert into an unoptimized module, keeps a and d apart: 512. */
static void must_alias_after_optimizations(void **state) {
  (void)state;
  const char *m = "HloModule dus, is_scheduled=true\n"
                  "ENTRY e {\n"
                  "  p = f32[64]{0} parameter(0)\n"
                  "  u = f32[8]{0} parameter(1)\n"
                  "  z = s32[] constant(0)\n"
                  "  a = f32[64]{0} exponential(p)\n"
                  "  d = f32[64]{0} dynamic-update-slice(a, u, z)\n"
                  "  ROOT s = f32[128]{0} concatenate(a, d), dimensions={0}\n"
                  "}\n";
  assert_true(temp_of(m, HBM_PLAN_BACKEND_GPU) == 256);
  assert_true(temp_of(m, HBM_PLAN_BACKEND_NONE) == 512);
}

/* Ties in size are broken by the span in XLA's event time, not in steps. a [1,4), b [3,6),
 * c [5,8), d [7,10) (256 B each) form a chain (a-b, b-c, c-d overlap) with equal step
 * spans; the unused fillers f1 (step 2) and f2 (step 8) are allocated and freed inside a's
 * and d's spans only. Events: a alloc 0, f1 1-2, b alloc 3, a free 4, c alloc 5, b free 6,
 * d alloc 7, c free 8, f2 9-10, d free 11: spans a 4, b 3, c 3, d 4. Placement order a, d,
 * b, c: a at 0, d at 0 (apart in time), b over a at 256, c over b and d at 512: 768 bytes.
 * In steps (the plain planner) the order is a, b, c, d: a 0, b 256, c 0, d 256: 512. The
 * output (a pred) is too small to take any temporary. */
static void ties_broken_in_event_time(void **state) {
  (void)state;
  const char *m = "HloModule events, is_scheduled=true\n"
                  "ENTRY e {\n"
                  "  p = f32[64]{0} parameter(0)\n"
                  "  a = f32[64]{0} reverse(p), dimensions={0}\n"
                  "  f1 = f32[1]{0} custom-call(), custom_call_target=\"filler\"\n"
                  "  b = f32[64]{0} reverse(a), dimensions={0}\n"
                  "  k1 = f32[] constant(0)\n"
                  "  c = f32[64]{0} reverse(b), dimensions={0}\n"
                  "  k2 = f32[] constant(0)\n"
                  "  d = f32[64]{0} reverse(c), dimensions={0}\n"
                  "  f2 = f32[1]{0} custom-call(), custom_call_target=\"filler\"\n"
                  "  ROOT r = pred[] custom-call(d), custom_call_target=\"done\"\n"
                  "}\n";
  assert_true(temp_of(m, HBM_PLAN_BACKEND_GPU) == 768);
  assert_true(temp_of(m, HBM_PLAN_BACKEND_CPU) == 768);
  assert_true(temp_of(m, HBM_PLAN_BACKEND_NONE) == 512);
}

/* t1 [1,4) and t2 [2,4) (256 B each) both die before the output r (256 B) is defined, so
 * either could live in r's allocation, but not both (they overlap). t1 comes first and
 * takes it; t2 is left in the heap with u (512 B, [3,5)): 768. Which one XLA picks
 * depends on its post-order, so the plan says so, naming the 256 bytes at stake. */
static void competing_temporaries_are_warned_about(void **state) {
  (void)state;
  const char *m = "HloModule contention, is_scheduled=true\n"
                  "ENTRY e {\n"
                  "  p = f32[64]{0} parameter(0)\n"
                  "  t1 = f32[64]{0} reverse(p), dimensions={0}\n"
                  "  t2 = f32[64]{0} reverse(p), dimensions={0}\n"
                  "  u = f32[128]{0} concatenate(t1, t2), dimensions={0}\n"
                  "  ROOT r = f32[64]{0} slice(u), slice={[0:64]}\n"
                  "}\n";
  hbm_plan_t *p = plan_as(m, HBM_PLAN_BACKEND_GPU);
  assert_true(hbm_plan_get_summary(p)->temp_bytes == 768);
  size_t n;
  const char *const *w = hbm_plan_warnings(p, &n);
  assert_int_equal(n, 1);
  assert_non_null(strstr(w[0], "1 temporary (256B) was left"));
  assert_non_null(strstr(w[0], "competing for the same output allocations"));
  /* with no temporary in r's allocation: t1, t2 and u all live at step 3, 1024 B; 256 more */
  assert_non_null(strstr(w[0], "by at most 256B"));
  hbm_plan_free(p);
}

/* The bound the warning names holds when the temporary that took the output allocation is
 * larger than the one left out. t1 (1024 B) [1,3] takes r's allocation (1024 B, from step
 * 4); t2 (256 B) [2,3] meets t1 there and goes to the heap with u (1280 B) [3,4]: u at 0,
 * t2 at 1280, temp 1536. Had XLA put t2 in r instead, t1 and u would make the heap 2304:
 * 768 more than hbm's, more than the 256 contended bytes. With no temporary in an output
 * allocation t1, t2 and u are all live at step 3: 2560, so the bound is 2560 - 1536 =
 * 1024, which covers it. */
static void contention_bound_covers_the_other_choice(void **state) {
  (void)state;
  const char *m = "HloModule bound, is_scheduled=true\n"
                  "ENTRY e {\n"
                  "  p = f32[256]{0} parameter(0)\n"
                  "  t1 = f32[256]{0} reverse(p), dimensions={0}\n"
                  "  t2 = f32[64]{0} slice(p), slice={[0:64]}\n"
                  "  u = f32[320]{0} concatenate(t1, t2), dimensions={0}\n"
                  "  ROOT r = f32[256]{0} slice(u), slice={[0:256]}\n"
                  "}\n";
  hbm_plan_t *p = plan_as(m, HBM_PLAN_BACKEND_GPU);
  assert_true(hbm_plan_get_summary(p)->temp_bytes == 1536);
  size_t n;
  const char *const *w = hbm_plan_warnings(p, &n);
  assert_int_equal(n, 1);
  assert_non_null(strstr(w[0], "1 temporary (256B) was left"));
  assert_non_null(strstr(w[0], "by at most 1.0K"));
  hbm_plan_free(p);
}

/* Newer XLA prints its stack-frame tables between the header and the computations. */
static void leading_stack_frame_tables(void **state) {
  (void)state;
  const char *m = "HloModule frames, is_scheduled=true\n\n"
                  "FileNames\n1 \"/tmp/t.py\"\n\n"
                  "FunctionNames\n1 \"<module>\"\n2 \"f\"\n\n"
                  "FileLocations\n1 {file_name_id=1 function_name_id=1 line=8 end_line=8 "
                  "column=4 end_column=26}\n\n"
                  "StackFrames\n1 {file_location_id=1 parent_frame_id=1}\n\n"
                  "ENTRY e {\n"
                  "  p = f32[256]{0} parameter(0)\n"
                  "  ROOT r = f32[256]{0} negate(p)\n"
                  "}\n";
  hbm_plan_t *p = plan_as(m, HBM_PLAN_BACKEND_CPU);
  assert_true(hbm_plan_get_summary(p)->output_bytes == 1024);
  hbm_plan_free(p);
}

static size_t n_warnings(const char *text) {
  hbm_plan_t *p = plan_as(text, 0);
  size_t n;
  hbm_plan_warnings(p, &n);
  if (n)
    json_has(p, "\"warnings\": [");
  hbm_plan_free(p);
  return n;
}

/* Not scheduled (before optimizations) and partitioned without SPMD applied: warned
 * about, also in the JSON; a scheduled module whose entry was partitioned is not. */
static void warnings_for_modules_xla_did_not_size(void **state) {
  (void)state;
  const char *unscheduled = "HloModule u\nENTRY e {\n  ROOT p = f32[4]{0} parameter(0)\n}\n";
  const char *global = "HloModule g, is_scheduled=true, num_partitions=4\n"
                       "ENTRY main {\n  ROOT p = f32[4]{0} parameter(0)\n}\n";
  const char *spmd = "HloModule s, is_scheduled=true, num_partitions=4\n"
                     "ENTRY main.4_spmd {\n  ROOT p = f32[4]{0} parameter(0)\n}\n";
  assert_int_equal(n_warnings(unscheduled), 1);
  assert_int_equal(n_warnings(global), 1);
  assert_int_equal(n_warnings(spmd), 0);
  hbm_plan_t *p = plan_as(global, 0);
  size_t n;
  const char *const *w = hbm_plan_warnings(p, &n);
  assert_non_null(strstr(w[0], "num_partitions=4"));
  hbm_plan_free(p);
}

/* A buffer assignment whose temp allocation holds a and b at the same offset (they never
 * live together): the plan takes XLA's sizes as written, 2176 B of temp, never a re-pack,
 * and the total from "Total bytes used". The module name comes from the file name behind
 * a prefix and a GPU platform with a dot of its own. */
static void dump_totals_as_written(void **state) {
  (void)state;
  const char *ba = "BufferAssignment:\n"
                   "allocation 0: size 1024, parameter 0, shape |f32[256]| at ShapeIndex {}:\n"
                   " value: <0 p @0> (size=1024,offset=0): f32[256]{0}\n"
                   "allocation 1: size 1024, output shape is |f32[256]|, maybe-live-out:\n"
                   " value: <3 r @0> (size=1024,offset=0): f32[256]{0}\n"
                   "allocation 2: size 2176, preallocated-temp:\n"
                   " value: <1 a @0> (size=1024,offset=0): f32[256]{0}\n"
                   " value: <2 b @0> (size=1024,offset=0): f32[256]{0}\n"
                   " value: <4 c @0> (size=1024,offset=1152): f32[256]{0}\n"
                   "\nTotal bytes used: 4224 (4.12KiB)\n";
  hbm_plan_options_t opt = {0};
  hbm_plan_t *p = hbm_plan_text(
      ba, strlen(ba),
      "ab12__module_0007.jit_f.sm_8.0_gpu_after_optimizations-buffer-assignment.txt", &opt);
  assert_non_null(p);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_true(s->argument_bytes == 1024 && s->output_bytes == 1024);
  assert_true(s->temp_bytes == 2176);
  json_has(p, "\"total_bytes\": 4224");
  json_has(p, "\"module\": \"jit_f\"");
  json_has(p, "\"source\": \"buffer-assignment\"");
  hbm_plan_free(p);
  /* the memory usage report: its first line is the exact total */
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/data/hlo/dumps/%s", HBM_SOURCE_DIR,
           "module_0005.jit_step.gpu_after_optimizations-memory-usage-report.txt");
  p = hbm_plan_file(path, &opt);
  assert_non_null(p);
  json_has(p, "\"total_bytes\": 921600008"); /* "Total bytes used: 921600008 (878.91MiB)" */
  hbm_plan_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(temporary_in_output_allocation),
      cmocka_unit_test(touching_needs_an_elementwise_user),
      cmocka_unit_test(temporary_in_donated_parameter),
      cmocka_unit_test(tuple_tables_and_the_combined_temp),
      cmocka_unit_test(thread_local_reducer_inside_a_fusion),
      cmocka_unit_test(backend_alignment),
      cmocka_unit_test(all_reduce_over_its_operand),
      cmocka_unit_test(sync_all_reduce_keeps_its_operand),
      cmocka_unit_test(tuple_tables_are_not_reused),
      cmocka_unit_test(cpu_sharing_needs_equal_shapes),
      cmocka_unit_test(sort_over_its_operands),
      cmocka_unit_test(must_alias_after_optimizations),
      cmocka_unit_test(ties_broken_in_event_time),
      cmocka_unit_test(competing_temporaries_are_warned_about),
      cmocka_unit_test(contention_bound_covers_the_other_choice),
      cmocka_unit_test(leading_stack_frame_tables),
      cmocka_unit_test(warnings_for_modules_xla_did_not_size),
      cmocka_unit_test(dump_totals_as_written),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
