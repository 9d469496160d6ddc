/* step_solve.c — mode learn's second part: the placement of one step, solved offline. Every
 * block's lifetime in the step is known (step_detect.c), so this is the dynamic storage
 * allocation problem XLA's heap simulator and the literature's planners solve: rectangles of
 * (time × bytes) stacked in one region as low as possible. The bound is the most bytes live at
 * once; greedy best fit comes close to it when the order is right, so several orders are
 * tried (XLA's decreasing size, area, lifetime, start), each placing a block in the smallest
 * gap left by the blocks placed before it that overlap it in time (else on top of them), and
 * the lowest plan wins. On small steps the search is exact: every order, each block at the
 * lowest offset that fits, which reaches an optimum (any optimal placement, its blocks taken
 * by offset, is rebuilt by that order).
 *
 * Time is a circle (the step repeats): a block live across the step's end is two intervals
 * at one offset. Blocks live now (fixed) keep their address; obstacles (blocks whose end is
 * unknown) take their bytes for the whole step. */
#include "alloc/step.h"

#include <stdlib.h>
#include <string.h>

#define BUCKETS 512 /* time buckets of the index of placed blocks */
#define EXACT_MAX 8 /* steps with at most this many free blocks are solved exactly */

typedef struct span {
  uint64_t lo, hi;
} span_t;

typedef struct solver {
  hbm__step_item_t *items;
  uint32_t n;
  const hbm__step_obstacle_t *obstacles;
  uint32_t n_obstacles;
  uint64_t limit;
  uint32_t n_buckets;
  uint32_t **bucket; /* placed items touching each time bucket */
  uint32_t *bucket_n, *bucket_cap;
  uint32_t *stamp; /* per item: the query that last saw it */
  uint32_t query;
  span_t *occupied; /* scratch */
  uint64_t *offset; /* per item: its offset in the current attempt */
} solver_t;

/* The item's time as one or two intervals of [0, n). */
static int intervals(const hbm__step_item_t *it, uint32_t n, uint32_t lo[2], uint32_t hi[2]) {
  if (it->end - it->start >= n) { /* the whole step */
    lo[0] = 0, hi[0] = n;
    return 1;
  }
  lo[0] = it->start;
  hi[0] = it->end < n ? it->end : n;
  if (it->end <= n)
    return 1;
  lo[1] = 0, hi[1] = it->end - n;
  return 2;
}

static bool overlap_in_time(const hbm__step_item_t *a, const hbm__step_item_t *b, uint32_t n) {
  uint32_t alo[2], ahi[2], blo[2], bhi[2];
  int na = intervals(a, n, alo, ahi), nb = intervals(b, n, blo, bhi);
  for (int i = 0; i < na; i++)
    for (int j = 0; j < nb; j++)
      if (alo[i] < bhi[j] && blo[j] < ahi[i])
        return true;
  return false;
}

static uint32_t bucket_of(const solver_t *s, uint32_t t) {
  return (uint32_t)((uint64_t)t * s->n_buckets / s->n);
}

static bool add_to_bucket(solver_t *s, uint32_t b, uint32_t item) {
  if (s->bucket_n[b] == s->bucket_cap[b]) {
    uint32_t cap = s->bucket_cap[b] ? 2 * s->bucket_cap[b] : 16;
    uint32_t *grown = realloc(s->bucket[b], cap * sizeof *grown);
    if (!grown)
      return false;
    s->bucket[b] = grown;
    s->bucket_cap[b] = cap;
  }
  s->bucket[b][s->bucket_n[b]++] = item;
  return true;
}

static bool index_item(solver_t *s, uint32_t item) {
  uint32_t lo[2], hi[2];
  int k = intervals(&s->items[item], s->n, lo, hi);
  for (int i = 0; i < k; i++)
    for (uint32_t b = bucket_of(s, lo[i]); b <= bucket_of(s, hi[i] - 1); b++)
      if (!add_to_bucket(s, b, item))
        return false;
  return true;
}

static int compare_span(const void *x, const void *y) {
  const span_t *a = x, *b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* The memory taken, while `item` is live, by the obstacles and the items placed so far. */
static uint32_t occupied_during(solver_t *s, uint32_t item) {
  uint32_t m = 0, lo[2], hi[2];
  const hbm__step_item_t *it = &s->items[item];
  for (uint32_t i = 0; i < s->n_obstacles; i++)
    s->occupied[m++] = (span_t){s->obstacles[i].offset,
                                s->obstacles[i].offset + s->obstacles[i].bytes};
  s->query++;
  int k = intervals(it, s->n, lo, hi);
  for (int i = 0; i < k; i++)
    for (uint32_t b = bucket_of(s, lo[i]); b <= bucket_of(s, hi[i] - 1); b++)
      for (uint32_t j = 0; j < s->bucket_n[b]; j++) {
        uint32_t other = s->bucket[b][j];
        if (s->stamp[other] == s->query)
          continue;
        s->stamp[other] = s->query;
        if (overlap_in_time(it, &s->items[other], s->n))
          s->occupied[m++] = (span_t){s->offset[other], s->offset[other] + s->items[other].bytes};
      }
  qsort(s->occupied, m, sizeof *s->occupied, compare_span);
  return m;
}

/* The offset for `item`: the smallest gap that holds it (best fit) or the lowest (first
 * fit), else above everything live with it. */
static uint64_t choose_offset(solver_t *s, uint32_t item, bool best_fit) {
  uint64_t bytes = s->items[item].bytes, at = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
  uint32_t m = occupied_during(s, item);
  for (uint32_t i = 0; i < m; i++) {
    const span_t *o = &s->occupied[i];
    if (o->lo >= at + bytes && o->lo - at < best_gap) {
      best = at;
      best_gap = o->lo - at;
      if (!best_fit)
        return best;
    }
    at = o->hi > at ? o->hi : at;
  }
  return best != UINT64_MAX ? best : at;
}

static void reset(solver_t *s) {
  for (uint32_t b = 0; b < s->n_buckets; b++)
    s->bucket_n[b] = 0;
}

/* One greedy attempt in `order` (the fixed items first, where they are): the highest end of
 * the items it placed (the fixed ones lie where bfc put them, maybe far above: what they take
 * is theirs whatever the order), or UINT64_MAX when it does not fit under the limit (or host
 * memory ran out). */
static uint64_t attempt(solver_t *s, const uint32_t *order, uint32_t n_order, bool best_fit) {
  reset(s);
  uint64_t heap = 0;
  for (uint32_t i = 0; i < s->n; i++) {
    const hbm__step_item_t *it = &s->items[i];
    if (!it->planned || !it->fixed)
      continue;
    s->offset[i] = it->offset;
    if (!index_item(s, i))
      return UINT64_MAX;
  }
  for (uint32_t k = 0; k < n_order; k++) {
    uint32_t i = order[k];
    uint64_t at = choose_offset(s, i, best_fit);
    if (at + s->items[i].bytes > s->limit || !index_item(s, i))
      return UINT64_MAX;
    s->offset[i] = at;
    heap = at + s->items[i].bytes > heap ? at + s->items[i].bytes : heap;
  }
  return heap;
}

/* ---- orders ---- */

typedef struct keyed {
  uint64_t key1, key2;
  uint32_t item;
} keyed_t;

static int compare_keyed(const void *x, const void *y) { /* descending keys, then item */
  const keyed_t *a = x, *b = y;
  if (a->key1 != b->key1)
    return a->key1 > b->key1 ? -1 : 1;
  if (a->key2 != b->key2)
    return a->key2 > b->key2 ? -1 : 1;
  return a->item < b->item ? -1 : a->item > b->item;
}

enum { BY_AREA, BY_SIZE, BY_LIFETIME, BY_START, N_ORDERS };

static void make_order(const solver_t *s, int how, keyed_t *scratch, uint32_t *order,
                       uint32_t *n_order) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < s->n; i++) {
    const hbm__step_item_t *it = &s->items[i];
    if (!it->planned || it->fixed)
      continue;
    uint64_t life = it->end - it->start;
    keyed_t k = {0, 0, i};
    switch (how) {
    case BY_AREA: k.key1 = it->bytes * life, k.key2 = it->bytes; break;
    case BY_SIZE: k.key1 = it->bytes, k.key2 = life; break;
    case BY_LIFETIME: k.key1 = life, k.key2 = it->bytes; break;
    default: k.key1 = UINT64_MAX - it->start, k.key2 = it->bytes; break;
    }
    scratch[m++] = k;
  }
  qsort(scratch, m, sizeof *scratch, compare_keyed);
  for (uint32_t i = 0; i < m; i++)
    order[i] = scratch[i].item;
  *n_order = m;
}

/* Every order of a few items, first fit: the lowest heap, its offsets in best[]. */
static uint64_t exact(solver_t *s, uint32_t *order, uint32_t m, uint32_t k, uint64_t *best,
                      uint64_t best_heap) {
  if (k == m) {
    uint64_t heap = attempt(s, order, m, false);
    if (heap < best_heap)
      for (uint32_t i = 0; i < s->n; i++)
        best[i] = s->offset[i];
    return heap < best_heap ? heap : best_heap;
  }
  for (uint32_t i = k; i < m; i++) {
    uint32_t t = order[k];
    order[k] = order[i], order[i] = t;
    best_heap = exact(s, order, m, k + 1, best, best_heap);
    order[i] = order[k], order[k] = t;
  }
  return best_heap;
}

uint64_t hbm__step_live_bound(const hbm__step_item_t *items, uint32_t n) {
  int64_t *delta = calloc((size_t)n + 1, sizeof *delta);
  if (!delta)
    return 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t lo[2], hi[2];
    if (!items[i].planned)
      continue;
    int k = intervals(&items[i], n, lo, hi);
    for (int j = 0; j < k; j++) {
      delta[lo[j]] += (int64_t)items[i].bytes;
      delta[hi[j]] -= (int64_t)items[i].bytes;
    }
  }
  int64_t live = 0, most = 0;
  for (uint32_t t = 0; t < n; t++) {
    live += delta[t];
    most = live > most ? live : most;
  }
  free(delta);
  return (uint64_t)most;
}

static void solver_free(solver_t *s) {
  for (uint32_t b = 0; b < s->n_buckets; b++)
    free(s->bucket[b]);
  free(s->bucket);
  free(s->bucket_n);
  free(s->bucket_cap);
  free(s->stamp);
  free(s->occupied);
  free(s->offset);
}

static bool solver_init(solver_t *s) {
  s->n_buckets = s->n < BUCKETS ? s->n : BUCKETS;
  s->bucket = calloc(s->n_buckets, sizeof *s->bucket);
  s->bucket_n = calloc(s->n_buckets, sizeof *s->bucket_n);
  s->bucket_cap = calloc(s->n_buckets, sizeof *s->bucket_cap);
  s->stamp = calloc(s->n, sizeof *s->stamp);
  s->occupied = malloc(((size_t)s->n + s->n_obstacles + 1) * sizeof *s->occupied);
  s->offset = calloc(s->n, sizeof *s->offset);
  return s->bucket && s->bucket_n && s->bucket_cap && s->stamp && s->occupied && s->offset;
}

hbm_status_t hbm__step_solve(hbm__step_item_t *items, uint32_t n,
                             const hbm__step_obstacle_t *obstacles, uint32_t n_obstacles,
                             uint64_t limit, uint64_t *heap) {
  if (n == 0)
    return hbm__error(HBM_ERR_INVALID, "an empty step");
  solver_t s = {.items = items, .n = n, .obstacles = obstacles, .n_obstacles = n_obstacles,
                .limit = limit};
  uint32_t *order = malloc((size_t)n * sizeof *order);
  keyed_t *scratch = malloc((size_t)n * sizeof *scratch);
  uint64_t *best = malloc((size_t)n * sizeof *best);
  bool ok = order && scratch && best && solver_init(&s);
  uint64_t best_heap = UINT64_MAX;
  for (int how = 0; ok && how < N_ORDERS; how++) {
    uint32_t m;
    make_order(&s, how, scratch, order, &m);
    uint64_t h = m <= EXACT_MAX ? exact(&s, order, m, 0, best, best_heap)
                                : attempt(&s, order, m, true);
    if (m > EXACT_MAX && h < best_heap)
      memcpy(best, s.offset, (size_t)n * sizeof *best);
    best_heap = h < best_heap ? h : best_heap;
    if (m <= EXACT_MAX)
      break; /* the exact search tried every order */
  }
  if (ok && best_heap != UINT64_MAX)
    for (uint32_t i = 0; i < n; i++)
      if (items[i].planned)
        items[i].offset = best[i];
  solver_free(&s);
  free(order);
  free(scratch);
  free(best);
  if (!ok)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory planning the step");
  if (best_heap == UINT64_MAX)
    return HBM_ERR_NO_MEMORY;
  *heap = best_heap;
  return HBM_OK;
}
