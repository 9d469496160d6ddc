/* test_plan_share_events.c — when XLA's heap simulator frees a value whose memory a result
 * takes over (ShareWith: an element-wise result of the same shape whose operand dies at it),
 * on a hand-written CPU module with XLA's result worked out by hand beside it.
 *
 * XLA's HeapSimulator::RunComputation replays each step's events: the values defined there
 * are allocated in (start, end, id) order, then the values last read there are freed. An
 * operand taken over by a result is not freed with the others: it is freed at the result's
 * step, just before the result's ShareWith. Every event is one tick of the heap algorithm's
 * clock, and GlobalDecreasingSizeBestFitHeap's spatial order (size, then span in ticks, then
 * id) breaks ties by those spans, so freeing the operand a step early (in the step before,
 * where its range of steps ends) lengthens the span of what is freed after it there. That
 * was the difference on the corpus programs norm_layer_grad_32x256_bf16 and
 * _4x16x16x128_bf16 (1,024 and 16,384 bytes below XLA's temp size). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

/* Steps (schedule positions) and XLA's live ranges [def, last use], inclusive. p0, p1 are
 * parameters, c0 a constant, a and out outputs: none is in the heap, and no temporary
 * (128 bytes at least) fits their allocations (4 and 8 bytes).
 *
 *   region 1                                  region 2
 *   3 g  f32[32]     128  [3, 9]  -> t at 9   11 L  f32[24,32] 3072 [11,15]
 *   4 M  f32[24,32] 3072  [4, 5]              12 d1 f32[1,32]   128 [12,12]
 *   5 C  f32[16,32] 2048  [5, 6]              13 d2 f32[1,32]   128 [13,13]
 *   6 A  f32[32,32] 4096  [6, 8]              14 X  f32[32,32] 4096 [14,17]
 *   7 B  f32[32,32] 4096  [7, 9]              15 e1 f32[1,32]   128 [15,15]
 *   9 D  f32[1,32]   128  [9, 9]              16 Z  f32[28,32] 3584 [16,18]
 *   10 t f32[32]     128  [10,10] shares g    17 e2, 18 e3 f32[1,32] 128, dead
 *
 * t = negate(g) is element-wise with g's shape and g dies at it: XLA shares g's memory
 * with t. Ticks (alloc a, free f), as XLA replays them:
 *   3 g a0 | 4 M a1 | 5 C a2, M f3 | 6 A a4, C f5 | 7 B a6 | 8 A f7 | 9 D a8, B f9, D f10 |
 *   10 g f11, t share 12, t f13 | 11 L a14 | 12 d1 15,16 | 13 d2 17,18 | 14 X a19 |
 *   15 e1 a20, L f21, e1 f22 | 16 Z a23 | 17 e2 a24, X f25, e2 f26 | 18 e3 a27, Z f28, e3 f29
 * Spans: A 7-4 = 3, B 9-6 = 3: a tie, and B goes first: XLA numbers values in
 * MakeInstructionPostOrder's order, a depth-first walk from each instruction without users in
 * program order, D (step 9) the first of them: p0, B, D, p1, g, t, ... and A only from out,
 * so B has the lower id. (With g freed in step 9's frees, before B, B's span would be 4 and
 * B would go first all the same; the corpus programs above pin that part.)
 *
 * Spatial order (size, span, id): B, A, X (4096); Z; M, L (3072; L's span 7 > M's 2); C;
 * then the 128-byte ones, g with t first (g's span 11, the longest).
 * With A first instead (the order of ids in the text):
 *   A @0. B overlaps A: @4096. X @0 (region 2 overlaps nothing of region 1). Z overlaps X:
 *   @4096 (top 7680). M @0. L overlaps X only: @4096 (its end 7168 under Z's). C overlaps
 *   M [0,3072) at 5 and A [0,4096) at 6, not B (from 7): @4096, top 6144. g+t overlap
 *   A, B, C, M: @8192, top 8320. D (B, g) @0; the region-2 128-byte ones below 7808.
 *   Heap 8320.
 * B first, as XLA: B @0, A @4096, C between M's end 3072 and A's 4096 does not fit (1024
 * < 2048): @8192, g+t @10240: heap 10368.
 * Temporal order (span, size, id): g+t (13); L (7); X (6); Z (5); A, B, C (3); ...:
 *   region 2 alone: L @0, X over L @3072 (top 7168), Z overlaps X not L but 3584 > 3072:
 *   @7168, top 10752. 10752 > 8320.
 * 10752 > 10368: XLA keeps the smaller, the spatial heap: temp_size_in_bytes = 10368 (the
 * CPU's 64-byte alignment divides every size here). */
static const char *const share_tie_module =
    "HloModule share_tie, is_scheduled=true\n"
    "\n"
    "ENTRY main {\n"
    "  p0 = f32[32,32]{1,0} parameter(0)\n"
    "  p1 = f32[32]{0} parameter(1)\n"
    "  c0 = f32[] constant(0)\n"
    "  g = f32[32]{0} negate(p1)\n"
    "  M = f32[24,32]{1,0} slice(p0), slice={[0:24], [0:32]}\n"
    "  C = f32[16,32]{1,0} slice(M), slice={[0:16], [0:32]}\n"
    "  A = f32[32,32]{1,0} pad(C, c0), padding=0_16x0_0\n"
    "  B = f32[32,32]{1,0} negate(p0)\n"
    "  a = f32[1,1]{1,0} slice(A), slice={[0:1], [0:1]}\n"
    "  D = f32[1,32]{1,0} slice(B), slice={[0:1], [0:32]}\n"
    "  t = f32[32]{0} negate(g)\n"
    "  L = f32[24,32]{1,0} slice(p0), slice={[0:24], [0:32]}\n"
    "  d1 = f32[1,32]{1,0} slice(p0), slice={[0:1], [0:32]}\n"
    "  d2 = f32[1,32]{1,0} slice(p0), slice={[1:2], [0:32]}\n"
    "  X = f32[32,32]{1,0} exponential(p0)\n"
    "  e1 = f32[1,32]{1,0} slice(L), slice={[0:1], [0:32]}\n"
    "  Z = f32[28,32]{1,0} slice(X), slice={[0:28], [0:32]}\n"
    "  e2 = f32[1,32]{1,0} slice(X), slice={[1:2], [0:32]}\n"
    "  e3 = f32[1,32]{1,0} slice(Z), slice={[2:3], [0:32]}\n"
    "  ROOT out = (f32[1,1]{1,0}) tuple(a)\n"
    "}\n";

/* The heap offset of the temporary named op, or UINT64_MAX. */
static uint64_t offset_of(const hbm_plan_t *p, const char *op) {
  const hbm_profile_t *prof = hbm_plan_profile(p);
  for (int64_t i = 0; i < hbm_profile_buffer_count(prof); i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(prof, i);
    if (b->op && strcmp(b->op, op) == 0 && b->category == HBM_CAT_TEMPORARY)
      return b->address;
  }
  return UINT64_MAX;
}

static void shared_operand_freed_at_the_results_step(void **state) {
  (void)state;
  hbm_plan_options_t opt = {.backend = HBM_PLAN_BACKEND_CPU};
  hbm_plan_t *p = hbm_plan_text(share_tie_module, strlen(share_tie_module), "share_tie.hlo", &opt);
  if (!p)
    fail_msg("%s", hbm_last_error());
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_int_equal(s->temp_bytes, 10368);
  assert_int_equal(s->output_bytes, 12); /* a (4) and the output tuple's table (8) */
  /* the placements worked out above */
  assert_int_equal(offset_of(p, "B"), 0);
  assert_int_equal(offset_of(p, "A"), 4096);
  assert_int_equal(offset_of(p, "C"), 8192);
  assert_int_equal(offset_of(p, "g"), 10240);
  assert_int_equal(offset_of(p, "t"), 10240);
  hbm_plan_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(shared_operand_freed_at_the_results_step),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
