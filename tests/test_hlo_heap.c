/* test_hlo_heap.c — the heap simulator (XLA's GlobalDecreasingSizeBestFitHeap): offsets
 * worked out by hand (largest first, smallest gap that fits, above everything in the way
 * only when no gap holds it, alignment; XLA's choice of the smaller of its spatial and temporal
 * orders), and on random inputs: buffers live at the same time never share bytes, offsets are
 * aligned, the heap holds at least the live peak, results are deterministic, and every offset is
 * the one a plain quadratic implementation of the algorithm gives (the fast one must never change a
 * plan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "hlo/hlo.h"

static void expect_offsets(hlo_interval_t *iv, size_t n, uint64_t alignment,
                           const uint64_t *offsets, uint64_t heap) {
  uint64_t got;
  assert_int_equal(hbm__hlo_best_fit(iv, n, alignment, &got), HBM_OK);
  for (size_t i = 0; i < n; i++)
    if (iv[i].offset != offsets[i])
      fail_msg("interval %zu at %llu, expected %llu", i, (unsigned long long)iv[i].offset,
               (unsigned long long)offsets[i]);
  assert_true(got == heap);
}

/* The temporaries of tests/data/hlo/chain.hlo. */
static void chain_by_hand(void **state) {
  (void)state;
  hlo_interval_t iv[] = {
      {2, 6, 4096, 0, 0}, /* a */
      {3, 5, 4096, 0, 0}, /* b */
      {4, 7, 8192, 0, 0}, /* c: largest, placed first at 0 */
      {5, 9, 64, 0, 0},   /* d */
      {6, 8, 256, 0, 0},  /* e: just above c, the only one in its way */
      {7, 9, 64, 0, 0},   /* f: the smallest gap, between e and d */
  };
  const uint64_t offsets[] = {8192, 12288, 0, 12288, 8192, 8448};
  expect_offsets(iv, 6, 1, offsets, 16384);
}

static hlo_interval_t best_fit_case[] = {
    {0, 10, 40, 0, 0}, /* A */
    {0, 4, 35, 0, 0},  /* B */
    {6, 10, 30, 0, 0}, /* C: fits where B was */
    {0, 10, 20, 0, 0}, /* D: on top */
    {4, 6, 10, 0, 0},  /* E: the 35-byte gap B and C leave at 40 */
    {6, 10, 5, 0, 0},  /* F: the 5-byte gap between C and D, not the top */
    {0, 4, 3, 0, 0},   /* G: nothing free below the top */
};

static void smallest_gap_wins(void **state) {
  (void)state;
  hlo_interval_t iv[7];
  memcpy(iv, best_fit_case, sizeof iv);
  const uint64_t offsets[] = {0, 40, 40, 75, 40, 70, 95};
  expect_offsets(iv, 7, 1, offsets, 98);
}

/* The space above everything in a buffer's way is one free chunk of unbounded size (XLA's
 * MakeFreeChunks starts from [0, INT64_MAX)), not a gap up to the heap's current top: S
 * [6,10) has R (60-90) in its way; below R a 60-byte gap, above R 30 bytes up to the top (P,
 * long gone, made it 120). Best fit takes the 60-byte gap at 0, not the space at 90 that
 * would be smaller if the top bounded it. */
static void the_space_above_is_unbounded(void **state) {
  (void)state;
  hlo_interval_t iv[] = {
      {0, 2, 120, 0, 0}, /* P: at 0, the top at 120 */
      {4, 6, 60, 0, 0},  /* Q: at 0 (P is gone) */
      {4, 10, 30, 0, 0}, /* R: above Q, at 60 */
      {6, 10, 20, 0, 0}, /* S: the gap below R */
  };
  const uint64_t offsets[] = {0, 0, 60, 0};
  expect_offsets(iv, 4, 1, offsets, 120);
}

static void alignment_rounds_offsets(void **state) {
  (void)state;
  hlo_interval_t iv[7];
  memcpy(iv, best_fit_case, sizeof iv);
  const uint64_t offsets[] = {0, 48, 48, 96, 48, 80, 128};
  expect_offsets(iv, 7, 16, offsets, 131);
}

static void ties_break_by_duration_then_order(void **state) {
  (void)state;
  /* Equal sizes: the longer-lived first, then the earlier. Empty ones sit at 0. */
  hlo_interval_t iv[] = {
      {0, 2, 8, 0, 0}, {0, 4, 8, 0, 0}, {1, 3, 8, 0, 0}, {0, 4, 0, 0, 0}, {5, 5, 8, 0, 0}};
  const uint64_t offsets[] = {8, 0, 16, 0, 0};
  expect_offsets(iv, 5, 1, offsets, 24);
}

static void shared_chunks_place_together(void **state) {
  (void)state;
  /* x and y (one share group: an element-wise op reusing its operand) take one offset,
   * chosen at the larger's turn; z, live between them, overlaps neither and may sit at the
   * same offset, as XLA's colocated intervals allow. w overlaps x and z. */
  hlo_interval_t iv[] = {
      {0, 1, 100, 0, 7}, /* x */
      {3, 4, 60, 0, 7},  /* y */
      {1, 3, 100, 0, 0}, /* z */
      {0, 2, 40, 0, 0},  /* w */
  };
  const uint64_t offsets[] = {0, 0, 0, 100};
  expect_offsets(iv, 4, 1, offsets, 140);
}

/* XLA keeps the smaller of its two orders' heaps (ChooseBestHeapAlgorithm). By hand:
 *   a [4,5) 50, b [1,5) 20, c [0,2) 60, d [4,5) 20.
 * Spatial (size first): c at 0; a at 0 (c is gone by then); b over c and a, at 60; d over
 * a (0-50) and b (60-80): the 10-byte gap is too small, on top at 80: heap 100.
 * Temporal (longest-lived first): b at 0; c over b at 20; a over b at 20 (just above b,
 * the only one in its way: the space above is one unbounded free chunk, whatever the heap's
 * top); d over b and a (20-70): no gap, at 70: heap 90, the one kept. */
static void the_smaller_of_both_orders(void **state) {
  (void)state;
  const hlo_interval_t four[] = {
      {4, 5, 50, 0, 0}, {1, 5, 20, 0, 0}, {0, 2, 60, 0, 0}, {4, 5, 20, 0, 0}};
  hlo_interval_t iv[4];
  memcpy(iv, four, sizeof iv);
  const uint64_t spatial[] = {0, 60, 0, 80};
  expect_offsets(iv, 4, 1, spatial, 100);
  memcpy(iv, four, sizeof iv);
  uint64_t heap;
  assert_int_equal(hbm__hlo_best_fit_order(iv, 4, 1, NULL, HLO_HEAP_TEMPORAL, &heap), HBM_OK);
  assert_true(heap == 90);
  memcpy(iv, four, sizeof iv);
  assert_int_equal(hbm__hlo_best_fit_events(iv, 4, 1, NULL, &heap), HBM_OK);
  const uint64_t temporal[] = {20, 0, 20, 70};
  for (size_t i = 0; i < 4; i++)
    assert_true(iv[i].offset == temporal[i]);
  assert_true(heap == 90);
  /* The spatial plan is kept where the temporal one is larger: chain_by_hand's intervals,
   * longest first: a at 0, d (over a) at 4096, c (over a, d) at 4160, b (over a and c; the
   * 64 bytes between them too few) on top at 12352: 16448 against the spatial 16384. */
  hlo_interval_t chain[] = {{2, 6, 4096, 0, 0}, {3, 5, 4096, 0, 0}, {4, 7, 8192, 0, 0},
                            {5, 9, 64, 0, 0},   {6, 8, 256, 0, 0},  {7, 9, 64, 0, 0}};
  hlo_interval_t copy[6];
  memcpy(copy, chain, sizeof chain);
  assert_int_equal(hbm__hlo_best_fit_order(copy, 6, 1, NULL, HLO_HEAP_TEMPORAL, &heap), HBM_OK);
  assert_true(heap == 16448);
  assert_int_equal(hbm__hlo_best_fit_events(chain, 6, 1, NULL, &heap), HBM_OK);
  const uint64_t chain_spatial[] = {8192, 12288, 0, 12288, 8192, 8448};
  for (size_t i = 0; i < 6; i++)
    assert_true(chain[i].offset == chain_spatial[i]);
}

static uint64_t next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void random_placements_never_overlap(void **state) {
  (void)state;
  enum { N = 1500, STEPS = 400 };
  hlo_interval_t *iv = calloc(N, sizeof *iv);
  hlo_interval_t *again = calloc(N, sizeof *again);
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  for (int round = 0; round < 4; round++) {
    uint64_t alignment = round == 3 ? 64 : 1;
    for (size_t i = 0; i < N; i++) {
      uint32_t start = (uint32_t)(next_random(&seed) % STEPS);
      uint32_t len = 1 + (uint32_t)(next_random(&seed) % (round == 0 ? 5 : 60));
      uint64_t size = 1 + next_random(&seed) % (round == 2 ? 8 : 100000);
      iv[i] = (hlo_interval_t){start, start + len, size, 0, 0};
      if (round == 1 && i % 3 == 0 && i > 0 && iv[i - 1].end <= start) {
        /* a chain reusing the previous one's chunk: same offset, disjoint in time */
        iv[i].share = (uint32_t)i;
        iv[i - 1].share = iv[i - 1].share ? iv[i - 1].share : (uint32_t)i;
        iv[i].share = iv[i - 1].share;
      }
    }
    memcpy(again, iv, N * sizeof *iv);
    uint64_t heap, heap2;
    assert_int_equal(hbm__hlo_best_fit(iv, N, alignment, &heap), HBM_OK);
    assert_int_equal(hbm__hlo_best_fit(again, N, alignment, &heap2), HBM_OK);
    assert_true(heap == heap2);
    uint64_t top = 0;
    for (size_t i = 0; i < N; i++) {
      assert_true(iv[i].offset == again[i].offset);
      assert_true(iv[i].offset % alignment == 0);
      if (iv[i].offset + iv[i].size > top)
        top = iv[i].offset + iv[i].size;
      for (size_t j = i + 1; j < N; j++) {
        bool together = iv[i].start < iv[j].end && iv[j].start < iv[i].end;
        bool touching =
            iv[i].offset < iv[j].offset + iv[j].size && iv[j].offset < iv[i].offset + iv[i].size;
        if (together && touching)
          fail_msg("round %d: %zu and %zu overlap", round, i, j);
        if (iv[i].share && iv[i].share == iv[j].share && iv[i].offset != iv[j].offset)
          fail_msg("round %d: %zu and %zu share but sit apart", round, i, j);
      }
    }
    assert_true(top == heap);
    uint64_t live[STEPS + 64] = {0}, peak = 0;
    for (size_t i = 0; i < N; i++)
      for (uint32_t s = iv[i].start; s < iv[i].end; s++)
        live[s] += iv[i].size;
    for (size_t s = 0; s < STEPS + 64; s++)
      peak = live[s] > peak ? live[s] : peak;
    assert_true(heap >= peak);
  }
  free(iv);
  free(again);
}

/* ---- the algorithm written plainly, as the reference for the fast one ---- */

typedef struct ref_group {
  uint64_t size;     /* the largest member's */
  uint32_t span;     /* from the earliest start to the latest end of its members */
  uint32_t first;    /* smallest member index */
  uint32_t *members; /* interval indices */
  size_t n_members;
} ref_group_t;

static int ref_order(const void *x, const void *y) {
  const ref_group_t *a = x, *b = y;
  if (a->size != b->size)
    return a->size > b->size ? -1 : 1;
  if (a->span != b->span)
    return a->span > b->span ? -1 : 1;
  return a->first < b->first ? -1 : a->first > b->first;
}

static int ref_order_temporal(const void *x, const void *y) {
  const ref_group_t *a = x, *b = y;
  if (a->span != b->span)
    return a->span > b->span ? -1 : 1;
  if (a->size != b->size)
    return a->size > b->size ? -1 : 1;
  return a->first < b->first ? -1 : a->first > b->first;
}

static int by_offset(const void *x, const void *y) {
  const uint64_t *a = x, *b = y; /* {offset, end} */
  return a[0] < b[0] ? -1 : a[0] > b[0];
}

/* Intervals with a share id together, every other one alone. */
static size_t ref_groups(const hlo_interval_t *iv, size_t n, ref_group_t *g, uint32_t *members) {
  size_t n_groups = 0, used = 0;
  bool *done = calloc(n + 1, sizeof *done);
  for (size_t i = 0; i < n; i++) {
    if (done[i])
      continue;
    ref_group_t *grp = &g[n_groups++];
    *grp = (ref_group_t){0, 0, (uint32_t)i, &members[used], 0};
    uint32_t lo = UINT32_MAX, hi = 0;
    for (size_t j = i; j < n; j++) {
      if (j != i && (!iv[i].share || iv[j].share != iv[i].share))
        continue;
      done[j] = true;
      members[used++] = (uint32_t)j;
      grp->n_members++;
      grp->size = iv[j].size > grp->size ? iv[j].size : grp->size;
      lo = iv[j].start < lo ? iv[j].start : lo;
      hi = iv[j].end > hi ? iv[j].end : hi;
    }
    grp->span = hi > lo ? hi - lo : 0;
  }
  free(done);
  return n_groups;
}

/* For each group, largest first (longest-lived first in the temporal order): every placed
 * interval overlapping a member in time, sorted by offset; the smallest gap between them
 * (aligned ends) that holds the group, ties to the lowest; else above them all (XLA's
 * MakeFreeChunks: the space above is one free chunk of unbounded size). */
static uint64_t reference_best_fit(hlo_interval_t *iv, size_t n, uint64_t alignment,
                                   hlo_heap_order_t how) {
  ref_group_t *g = calloc(n + 1, sizeof *g);
  uint32_t *members = calloc(n + 1, sizeof *members);
  bool *placed = calloc(n + 1, sizeof *placed);
  uint64_t *found = calloc(2 * n + 2, sizeof *found);
  size_t n_groups = ref_groups(iv, n, g, members);
  qsort(g, n_groups, sizeof *g, how == HLO_HEAP_TEMPORAL ? ref_order_temporal : ref_order);
  uint64_t top = 0;
  for (size_t k = 0; k < n_groups; k++) {
    size_t n_found = 0;
    for (size_t j = 0; j < n; j++) {
      bool in_the_way = false;
      for (size_t m = 0; m < g[k].n_members && placed[j] && !in_the_way; m++) {
        const hlo_interval_t *x = &iv[g[k].members[m]];
        in_the_way = x->size && x->start < x->end && iv[j].start < x->end && x->start < iv[j].end;
      }
      if (in_the_way) {
        found[2 * n_found] = iv[j].offset;
        found[2 * n_found++ + 1] = iv[j].offset + iv[j].size;
      }
    }
    qsort(found, n_found, 2 * sizeof *found, by_offset);
    uint64_t best = UINT64_MAX, best_gap = UINT64_MAX, cursor = 0, size = g[k].size;
    for (size_t f = 0; f < n_found; f++) {
      if (found[2 * f] > cursor && found[2 * f] - cursor >= size &&
          found[2 * f] - cursor < best_gap) {
        best = cursor;
        best_gap = found[2 * f] - cursor;
      }
      uint64_t end = (found[2 * f + 1] + alignment - 1) / alignment * alignment;
      cursor = end > cursor ? end : cursor;
    }
    uint64_t offset = !size ? 0 : best != UINT64_MAX ? best : cursor;
    if (size && offset + size > top)
      top = offset + size;
    for (size_t m = 0; m < g[k].n_members; m++) {
      uint32_t i = g[k].members[m];
      placed[i] = iv[i].size && iv[i].end > iv[i].start;
      iv[i].offset = placed[i] ? offset : 0;
    }
  }
  free(g);
  free(members);
  free(placed);
  free(found);
  return top;
}

/* Random intervals in the shapes planners meet: many short-lived, some living across most of
 * the program, a few sizes repeated (ties), empty ones, and share groups (chains reusing one
 * chunk, and now and then members that overlap). Kind 3 is hostile: long lives and sizes all
 * different, so that the free space breaks into hundreds of gaps. */
static void random_case(hlo_interval_t *iv, size_t n, uint32_t steps, int kind, uint64_t *seed) {
  static const uint64_t common[] = {4096, 8192, 1 << 20, 3 << 20, 512, 100, 4 << 20, 65536};
  for (size_t i = 0; i < n; i++) {
    uint32_t start = (uint32_t)(next_random(seed) % steps), len;
    uint64_t r = next_random(seed) % 100;
    if (r < 60)
      len = 1 + (uint32_t)(next_random(seed) % 3);
    else if (r < 85)
      len = 1 + (uint32_t)(next_random(seed) % 40);
    else if (r < 97)
      len = (uint32_t)(next_random(seed) % steps);
    else
      len = 0;
    if (kind == 3)
      len = 1 + (uint32_t)(next_random(seed) % steps);
    if (kind == 1 && r % 7 == 0) { /* live across everything, as XLA's long temporaries */
      start = (uint32_t)(next_random(seed) % 4);
      len = steps - start;
    }
    uint64_t size = kind >= 2 ? 1 + next_random(seed) % 1000000
                              : common[next_random(seed) % (sizeof common / sizeof *common)];
    if (next_random(seed) % 50 == 0)
      size = 0;
    iv[i] = (hlo_interval_t){start, start + len, size, 0, 0};
    uint64_t chain = next_random(seed) % 10;
    if (i > 0 && chain < 2 && (iv[i - 1].end <= start || chain == 0))
      iv[i].share = iv[i - 1].share ? iv[i - 1].share : (uint32_t)i;
    if (iv[i].share)
      iv[i - 1].share = iv[i].share;
  }
}

static void same_offsets_as_the_reference(void **state) {
  (void)state;
  static const uint64_t alignments[] = {1, 1, 8, 256};
  static const size_t sizes[] = {1, 2, 5, 17, 60, 200, 700, 1500};
  uint64_t seed = 0x2545f4914f6cdd1dull;
  hlo_interval_t *iv = calloc(1500, sizeof *iv), *ref = calloc(1500, sizeof *ref);
  for (int round = 0; round < 128; round++) {
    size_t n = sizes[round % 8];
    uint32_t steps = 1 + (uint32_t)(next_random(&seed) % (round % 3 == 0 ? 30 : 3000));
    uint64_t alignment = alignments[(round / 8) % 4];
    hlo_heap_order_t how = round % 2 ? HLO_HEAP_TEMPORAL : HLO_HEAP_SPATIAL;
    random_case(iv, n, steps, (round / 2) % 4, &seed);
    memcpy(ref, iv, n * sizeof *iv);
    uint64_t heap, want = reference_best_fit(ref, n, alignment, how);
    assert_int_equal(hbm__hlo_best_fit_order(iv, n, alignment, NULL, how, &heap), HBM_OK);
    for (size_t i = 0; i < n; i++)
      if (iv[i].offset != ref[i].offset)
        fail_msg("round %d (n %zu, %u steps, alignment %llu): interval %zu [%u,%u) size %llu "
                 "at %llu, the reference puts it at %llu",
                 round, n, steps, (unsigned long long)alignment, i, iv[i].start, iv[i].end,
                 (unsigned long long)iv[i].size, (unsigned long long)iv[i].offset,
                 (unsigned long long)ref[i].offset);
    if (heap != want)
      fail_msg("round %d: heap %llu, the reference %llu", round, (unsigned long long)heap,
               (unsigned long long)want);
  }
  free(iv);
  free(ref);
}

/* XLA's choice on random inputs: the smaller of the two reference heaps, the spatial one on a
 * tie, with that order's offsets. */
static void choice_is_the_smaller_reference(void **state) {
  (void)state;
  uint64_t seed = 0x853c49e6748fea9bull;
  hlo_interval_t *iv = calloc(700, sizeof *iv), *sp = calloc(700, sizeof *sp),
                 *tp = calloc(700, sizeof *tp);
  int temporal_won = 0;
  for (int round = 0; round < 64; round++) {
    size_t n = 2 + (size_t)(next_random(&seed) % 698);
    uint32_t steps = 1 + (uint32_t)(next_random(&seed) % (round % 2 ? 40 : 2000));
    random_case(iv, n, steps, round % 4, &seed);
    memcpy(sp, iv, n * sizeof *iv);
    memcpy(tp, iv, n * sizeof *iv);
    uint64_t want_sp = reference_best_fit(sp, n, 8, HLO_HEAP_SPATIAL);
    uint64_t want_tp = reference_best_fit(tp, n, 8, HLO_HEAP_TEMPORAL), heap;
    const hlo_interval_t *want = want_tp < want_sp ? tp : sp;
    temporal_won += want_tp < want_sp;
    assert_int_equal(hbm__hlo_best_fit_events(iv, n, 8, NULL, &heap), HBM_OK);
    assert_true(heap == (want_tp < want_sp ? want_tp : want_sp));
    for (size_t i = 0; i < n; i++)
      assert_true(iv[i].offset == want[i].offset);
  }
  assert_true(temporal_won > 0); /* both branches of the choice were taken */
  assert_true(temporal_won < 64);
  free(iv);
  free(sp);
  free(tp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chain_by_hand),
      cmocka_unit_test(smallest_gap_wins),
      cmocka_unit_test(the_space_above_is_unbounded),
      cmocka_unit_test(alignment_rounds_offsets),
      cmocka_unit_test(ties_break_by_duration_then_order),
      cmocka_unit_test(shared_chunks_place_together),
      cmocka_unit_test(random_placements_never_overlap),
      cmocka_unit_test(same_offsets_as_the_reference),
      cmocka_unit_test(the_smaller_of_both_orders),
      cmocka_unit_test(choice_is_the_smaller_reference),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
