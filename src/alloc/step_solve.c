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
 * unknown) take their bytes for the whole step, blocks of the step before that are still live
 * (their end known) until their free is due. */
#include "alloc/step.h"

#include <stdlib.h>
#include <string.h>

#define EXACT_MAX 8 /* steps with at most this many free blocks are solved exactly */
#define BUDGET_NS 1200000000
#define SEARCH_ROUNDS 24 /* more orders are tried while the solving took less than this */

typedef struct span {
  uint64_t lo, hi;
} span_t;

typedef struct solver {
  hbm__step_item_t *items;
  uint32_t n;
  const hbm__step_obstacle_t *obstacles;
  uint32_t n_obstacles;
  uint64_t limit;
  /* The placed items, indexed by time: a segment tree over [0, size) whose nodes list the items
   * whose intervals cover them (each interval in O(log n) nodes), for the items live at a
   * point; and placed[], for those starting inside an interval (item k starts at k). */
  uint32_t size;
  uint32_t **node;
  uint32_t *node_n, *node_cap;
  uint64_t *placed; /* bit per item */
  uint32_t *stamp;  /* per item: the query that last saw it */
  uint32_t query;
  span_t *occupied, *sorted; /* scratch */
  uint64_t *offset;          /* per item: its offset in the current attempt */
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

static bool add_to_node(solver_t *s, uint32_t v, uint32_t item) {
  if (s->node_n[v] == s->node_cap[v]) {
    uint32_t cap = s->node_cap[v] ? 2 * s->node_cap[v] : 4;
    uint32_t *grown = realloc(s->node[v], cap * sizeof *grown);
    if (!grown)
      return false;
    s->node[v] = grown;
    s->node_cap[v] = cap;
  }
  s->node[v][s->node_n[v]++] = item;
  return true;
}

static bool index_item(solver_t *s, uint32_t item) {
  uint32_t lo[2], hi[2];
  int k = intervals(&s->items[item], s->n, lo, hi);
  for (int i = 0; i < k; i++)
    for (uint32_t l = lo[i] + s->size, r = hi[i] + s->size; l < r; l >>= 1, r >>= 1) {
      if ((l & 1) && !add_to_node(s, l++, item))
        return false;
      if ((r & 1) && !add_to_node(s, --r, item))
        return false;
    }
  s->placed[item / 64] |= 1ull << (item % 64);
  return true;
}

/* Sorts spans by their start, a byte at a time (least significant first): a query sorts up
 * to thousands of spans, where a comparison sort was most of the solving time. */
static void sort_spans(span_t *v, span_t *tmp, uint32_t m) {
  uint64_t most = 0;
  for (uint32_t i = 0; i < m; i++)
    most |= v[i].lo;
  for (unsigned shift = 0; shift < 64 && (most >> shift); shift += 8) {
    uint32_t count[257] = {0};
    for (uint32_t i = 0; i < m; i++)
      count[((v[i].lo >> shift) & 255) + 1]++;
    for (int b = 0; b < 256; b++)
      count[b + 1] += count[b];
    for (uint32_t i = 0; i < m; i++)
      tmp[count[(v[i].lo >> shift) & 255]++] = v[i];
    memcpy(v, tmp, m * sizeof *v);
  }
}

static void see(solver_t *s, uint32_t other, uint32_t *m) {
  if (s->stamp[other] == s->query)
    return;
  s->stamp[other] = s->query;
  s->occupied[(*m)++] = (span_t){s->offset[other], s->offset[other] + s->items[other].bytes};
}

/* The memory taken, while `item` is live, by the obstacles and the items placed so far: for
 * each of its intervals [lo, hi), the items live at lo and those starting inside. */
static uint32_t occupied_during(solver_t *s, uint32_t item) {
  uint32_t m = 0, lo[2], hi[2];
  int k = intervals(&s->items[item], s->n, lo, hi);
  for (uint32_t i = 0; i < s->n_obstacles; i++) /* an obstacle is there from the start */
    if (lo[0] < s->obstacles[i].until || k == 2)
      s->occupied[m++] =
          (span_t){s->obstacles[i].offset, s->obstacles[i].offset + s->obstacles[i].bytes};
  s->query++;
  for (int i = 0; i < k; i++) {
    for (uint32_t v = lo[i] + s->size; v >= 1; v >>= 1)
      for (uint32_t j = 0; j < s->node_n[v]; j++)
        see(s, s->node[v][j], &m);
    for (uint32_t w = (lo[i] + 1) / 64; w * 64 < hi[i]; w++)
      for (uint64_t bits = s->placed[w]; bits; bits &= bits - 1) {
        uint32_t other = w * 64 + (uint32_t)__builtin_ctzll(bits);
        if (other > lo[i] && other < hi[i])
          see(s, other, &m);
      }
  }
  sort_spans(s->occupied, s->sorted, m);
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
  memset(s->node_n, 0, 2ull * s->size * sizeof *s->node_n);
  memset(s->placed, 0, (s->n / 64 + 1) * sizeof *s->placed);
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

/* The search: the best order so far, a few of its blocks swapped with near neighbours, placed
 * again; kept when lower. Until the time budget is spent (deterministic: a fixed seed). */
static uint64_t search(solver_t *s, uint32_t *best_order, uint32_t *order, uint32_t m,
                       uint64_t *best, uint64_t best_heap, int64_t t0) {
  uint64_t seed = 0x2545F4914F6CDD1Dull;
  for (int round = 0; round < SEARCH_ROUNDS && hbm__now_ns() - t0 < BUDGET_NS; round++) {
    memcpy(order, best_order, (size_t)m * sizeof *order);
    uint32_t swaps = m / 64 + 1;
    for (uint32_t k = 0; k < swaps; k++) {
      seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
      uint32_t i = (uint32_t)(seed % m), j = i + 1 + (uint32_t)((seed >> 32) % 8);
      if (j < m) {
        uint32_t t = order[i];
        order[i] = order[j], order[j] = t;
      }
    }
    uint64_t h = attempt(s, order, m, true);
    if (h < best_heap) {
      best_heap = h;
      memcpy(best, s->offset, (size_t)s->n * sizeof *best);
      memcpy(best_order, order, (size_t)m * sizeof *order);
    }
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
  for (uint32_t v = 0; s->node && v < 2 * s->size; v++)
    free(s->node[v]);
  free(s->node);
  free(s->node_n);
  free(s->node_cap);
  free(s->placed);
  free(s->stamp);
  free(s->occupied);
  free(s->sorted);
  free(s->offset);
}

static bool solver_init(solver_t *s) {
  for (s->size = 1; s->size < s->n; s->size *= 2)
    ;
  s->node = calloc(2ull * s->size, sizeof *s->node);
  s->node_n = calloc(2ull * s->size, sizeof *s->node_n);
  s->node_cap = calloc(2ull * s->size, sizeof *s->node_cap);
  s->placed = calloc(s->n / 64 + 1, sizeof *s->placed);
  s->stamp = calloc(s->n, sizeof *s->stamp);
  s->occupied = malloc(((size_t)s->n + s->n_obstacles + 1) * sizeof *s->occupied);
  s->sorted = malloc(((size_t)s->n + s->n_obstacles + 1) * sizeof *s->sorted);
  s->offset = calloc(s->n, sizeof *s->offset);
  return s->node && s->node_n && s->node_cap && s->placed && s->stamp && s->occupied && s->sorted &&
         s->offset;
}

hbm_status_t hbm__step_solve(hbm__step_item_t *items, uint32_t n,
                             const hbm__step_obstacle_t *obstacles, uint32_t n_obstacles,
                             uint64_t limit, uint64_t *heap) {
  if (n == 0)
    return hbm__error(HBM_ERR_INVALID, "an empty step");
  solver_t s = {
      .items = items, .n = n, .obstacles = obstacles, .n_obstacles = n_obstacles, .limit = limit};
  uint32_t *order = malloc((size_t)n * sizeof *order);
  uint32_t *best_order = malloc((size_t)n * sizeof *best_order);
  keyed_t *scratch = malloc((size_t)n * sizeof *scratch);
  uint64_t *best = malloc((size_t)n * sizeof *best);
  bool ok = order && best_order && scratch && best && solver_init(&s);
  uint64_t best_heap = UINT64_MAX;
  int64_t t0 = hbm__now_ns();
  uint32_t m = 0;
  for (int how = 0; ok && how < N_ORDERS && (how == 0 || hbm__now_ns() - t0 < BUDGET_NS); how++) {
    make_order(&s, how, scratch, order, &m);
    uint64_t h =
        m <= EXACT_MAX ? exact(&s, order, m, 0, best, best_heap) : attempt(&s, order, m, true);
    if (m > EXACT_MAX && h < best_heap) {
      memcpy(best, s.offset, (size_t)n * sizeof *best);
      memcpy(best_order, order, (size_t)m * sizeof *order);
    }
    best_heap = h < best_heap ? h : best_heap;
    if (m <= EXACT_MAX)
      break; /* the exact search tried every order */
  }
  if (ok && m > EXACT_MAX && best_heap != UINT64_MAX)
    best_heap = search(&s, best_order, order, m, best, best_heap, t0);
  if (ok && best_heap != UINT64_MAX)
    for (uint32_t i = 0; i < n; i++)
      if (items[i].planned)
        items[i].offset = best[i];
  solver_free(&s);
  free(order);
  free(best_order);
  free(scratch);
  free(best);
  if (!ok)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory planning the step");
  if (best_heap == UINT64_MAX)
    return HBM_ERR_NO_MEMORY;
  *heap = best_heap;
  return HBM_OK;
}
