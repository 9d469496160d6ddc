/* test_alloc_step_floor.c — the first planned step's floor (src/alloc/step_floor.c) and the
 * solver's height with survivors above (step_solve.c), on small instances in the shape of the
 * transformer log's first planned step, worked out by hand beside each test: blocks of the
 * step before (survivors) lie where bfc put them, two of them share a 2 MiB granule, the one
 * freed first leaves half of it free, and whether any later block can use that half decides
 * whether the step can reach the whole granules of its peak live bytes.
 *
 * Units: MiB; the granule G = 2 MiB; time in allocations of the step (item k starts at k);
 * an obstacle occupies its bytes while t < until. The floor at t: granules touched by what
 * cannot move + whole granules for the movable bytes live at t that the free pieces inside
 * those granules cannot take (a piece takes blocks that start after it was freed and fit). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <stdlib.h>
#include <string.h>

#include "alloc/step.h"
#include "hbm.h"

#define MiB (1ull << 20)
#define G (2 * MiB)

static hbm__step_item_t item(uint32_t start, uint32_t end, uint64_t bytes) {
  return (hbm__step_item_t){
      .size = bytes, .bytes = bytes, .start = start, .end = end, .planned = true};
}

/* Survivor S1 at [0, 1) until `s1_until`, S2 at [1, 2) until 3 (granule 0 shared); the step
 * (n = 3): i0 3 MiB over [0, 3), i1 `i1_bytes` over [1, 3), i2 3 MiB over [2, 3). */
static uint64_t shape_floor(uint32_t s1_until, uint64_t i1_bytes) {
  hbm__step_obstacle_t o[2] = {{0, MiB, s1_until}, {MiB, MiB, 3}};
  hbm__step_item_t items[3] = {item(0, 3, 3 * MiB), item(1, 3, i1_bytes), item(2, 3, 3 * MiB)};
  return hbm__step_first_floor(items, 3, o, 2, G);
}

/* i1 (1 MiB) comes after S1 is freed (until 1): it fits S1's half granule.
 *   t = 2, the peak: live S2 1 + i0 3 + i1 1 + i2 3 = 8 MiB → whole granules: 4.
 *   fixed: S2 → granule 0 (1); its free piece [0, 1), free since 1, takes i1 (start 1 >= 1,
 *   1 MiB <= 1 MiB): 1 MiB. Movable 7 - 1 = 6 MiB → 3 granules. 1 + 3 = 4 granules = 8 MiB.
 *   t = 1: S2 + i0 + i1 = 5 MiB: 1 + ceil((4 - 1) / 2) = 3. t = 0: S1, S2, i0: 1 + 2 = 3.
 * The floor is the whole granules' floor, 8 MiB. */
static void later_block_fills_the_half_granule(void **state) {
  (void)state;
  assert_int_equal(shape_floor(1, MiB), 8 * MiB);
}

/* The transformer's case: i1 (1 MiB) is allocated at 1, before S1's free at 2, and nothing
 * allocated after the free is small enough (i2: 3 MiB).
 *   t = 2: live 8 MiB as above (whole granules 4). Fixed: S2 → 1 granule; the piece [0, 1)
 *   free since 2 takes no block (i1 started at 1 < 2; i2 is 3 MiB > 1 MiB; it lies at offset
 *   0, so no block runs into it from below). Movable 3 + 1 + 3 = 7 MiB → 4 granules.
 *   1 + 4 = 5 granules = 10 MiB, 1.25x the 8 MiB live: no placement does better. */
static void half_granule_freed_too_late(void **state) {
  (void)state;
  assert_int_equal(shape_floor(2, MiB), 10 * MiB);
}

/* The same with i1 4 MiB, after the free (until 1): too big for the 1 MiB piece.
 *   t = 2: live 1 + 3 + 4 + 3 = 11 MiB → whole granules 6 (12 MiB). Fixed 1 granule; the
 *   piece takes nothing; movable 10 MiB → 5 granules: 6 = 12 MiB, the whole granules' floor
 *   again (the half granule costs nothing once 11 MiB round up to 12 anyway). */
static void too_big_for_the_piece(void **state) {
  (void)state;
  assert_int_equal(shape_floor(1, 4 * MiB), 12 * MiB);
}

/* A piece at the end of the granules that what cannot move touches borders unmapped memory:
 * a block of any size may begin there and run on. S at [0, 1) until 2 (n = 2), i0 4 MiB over
 * [0, 2), i1 4 MiB over [1, 2).
 *   t = 1: fixed S → granule 0; piece [1, 2) (never occupied: free since 0), at the run's
 *   end: takes i0 or i1 up to its 1 MiB → 1 MiB. Movable 8 - 1 = 7 → 4 granules: 5 = 10 MiB.
 *   (Live 9 MiB: whole granules 5. Placing i0 at 1 MiB, i1 at 5 MiB maps [0, 10): 5.) */
static void open_piece_takes_any_block(void **state) {
  (void)state;
  hbm__step_obstacle_t o[1] = {{0, MiB, 2}};
  hbm__step_item_t items[2] = {item(0, 2, 4 * MiB), item(1, 2, 4 * MiB)};
  assert_int_equal(hbm__step_first_floor(items, 2, o, 1, G), 10 * MiB);
}

/* The solver counts a survivor lying above a block while it lives: survivor S 4 MiB at
 * 64 MiB until 2 (bfc puts large blocks high); i0 2 MiB over [0, 3), i1 2 MiB over [1, 3),
 * i2 2 MiB over [2, 3).
 *   i0 at 0 (height 2 + 4 above = 6), i1 at 2 (4 + 4 = 8: S still lives at 1), i2 at 4
 *   (6: S is gone at 2). The highest: 8 MiB; the plain highest end would be 6. */
static void solver_counts_survivors_above(void **state) {
  (void)state;
  hbm__step_obstacle_t o[1] = {{64 * MiB, 4 * MiB, 2}};
  hbm__step_item_t items[3] = {item(0, 3, 2 * MiB), item(1, 3, 2 * MiB), item(2, 3, 2 * MiB)};
  uint64_t heap = 0;
  assert_int_equal(hbm__step_solve(items, 3, o, 1, 1024 * MiB, true, &heap), HBM_OK);
  assert_int_equal(heap, 8 * MiB);
  assert_int_equal(items[0].offset + items[1].offset + items[2].offset, 6 * MiB); /* 0, 2, 4 */
  /* the steady placement (not the first step's): the plain highest end, 6 MiB */
  assert_int_equal(hbm__step_solve(items, 3, o, 1, 1024 * MiB, false, &heap), HBM_OK);
  assert_int_equal(heap, 6 * MiB);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(later_block_fills_the_half_granule),
      cmocka_unit_test(half_granule_freed_too_late),
      cmocka_unit_test(too_big_for_the_piece),
      cmocka_unit_test(open_piece_takes_any_block),
      cmocka_unit_test(solver_counts_survivors_above),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
