/* step_solve.c — mode learn's second part: the placement of one step, solved offline. Every
 * block's lifetime in the step is known (step_detect.c), so this is the dynamic storage
 * allocation problem XLA's heap simulator and the literature's planners solve: rectangles of
 * (time × bytes) stacked in one region as low as possible. The bound is the most bytes live at
 * once; greedy best fit comes close to it when the order is right, so several orders are
 * tried (XLA's decreasing size, area, lifetime, start), each placing a block in the smallest
 * gap left by the blocks placed before it that overlap it in time (else on top of them), and
 * the lowest plan wins (a block's height: its end; in the first planned step's placement plus
 * the survivors of the step before that lie above it while it lives, see footprint()); then a
 * search moves the blocks that end on top ahead in the order (search() says how), which reaches the
 * bound on most logs. On small steps the search is exact: every order, each block at the lowest
 * offset that fits, which reaches an optimum (any optimal placement, its blocks taken by offset, is
 * rebuilt by that order).
 *
 * Time is a circle (the step repeats): a block live across the step's end is two intervals
 * at one offset (step_plan.c clips the ends to solve one step as a line). Fixed blocks keep
 * their offset; obstacles take their bytes until their free is due (blocks of the step before)
 * or for the whole step (blocks whose end is not known). */
#include "alloc/step.h"

#include <stdlib.h>
#include <string.h>

#define EXACT_MAX 8          /* steps with at most this many free blocks are solved exactly */
#define BUDGET_NS 1200000000 /* orders and the search stop when the solving took this long */
#define PER_CEILING 8        /* placements (of every block) tried under one ceiling */
#define CLOSE_ENOUGH 1024    /* the search stops within 1/1024 of the bound */

typedef struct span {
  uint64_t lo, hi;
} span_t;

typedef struct solver {
  hbm__step_item_t *items;
  uint32_t n;
  const hbm__step_obstacle_t *obstacles;
  uint32_t n_obstacles;
  uint64_t limit;
  bool first; /* the first planned step's placement: survivors above count (footprint) */
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
  bool failed;               /* host memory ran out */
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

/* The memory taken while `item` is live if it ends at `end`: its end, and in the first
 * planned step's placement the obstacles that are freed during the step (survivors) lying
 * above it then. A survivor bfc put high up (it
 * puts blocks of 4 MiB and more at the top) is memory too while it lives: the step's blocks
 * live with it must then stay that much lower. Obstacles that stay the whole step are the
 * same whatever the placement, and do not count. */
static uint64_t footprint(const solver_t *s, uint32_t item, uint64_t end) {
  if (!s->first)
    return end;
  uint32_t lo[2], hi[2];
  int k = intervals(&s->items[item], s->n, lo, hi);
  uint64_t above = 0;
  for (uint32_t i = 0; i < s->n_obstacles; i++) {
    const hbm__step_obstacle_t *o = &s->obstacles[i];
    if (o->until != UINT32_MAX && o->offset >= end && (lo[0] < o->until || k == 2))
      above += o->bytes;
  }
  return end + above;
}

static void reset(solver_t *s) {
  memset(s->node_n, 0, 2ull * s->size * sizeof *s->node_n);
  memset(s->placed, 0, (s->n / 64 + 1) * sizeof *s->placed);
}

/* One greedy attempt in `order` (the fixed items first, where they are), placing the items
 * until one would end above `ceiling` (or the limit): how many it placed (n_order: all), and in
 * *heap the highest end of those (the fixed ones lie where bfc put them, maybe far above: what
 * they take is theirs whatever the order). s->failed when host memory ran out. */
static uint32_t attempt(solver_t *s, const uint32_t *order, uint32_t n_order, bool best_fit,
                        uint64_t ceiling, uint64_t *heap) {
  reset(s);
  *heap = 0;
  ceiling = ceiling < s->limit ? ceiling : s->limit;
  for (uint32_t i = 0; i < s->n && !s->failed; i++) {
    const hbm__step_item_t *it = &s->items[i];
    if (!it->planned || !it->fixed)
      continue;
    s->offset[i] = it->offset;
    s->failed = !index_item(s, i);
  }
  for (uint32_t k = 0; k < n_order && !s->failed; k++) {
    uint32_t i = order[k];
    uint64_t at = choose_offset(s, i, best_fit), end = footprint(s, i, at + s->items[i].bytes);
    if (end > ceiling)
      return k;
    s->failed = !index_item(s, i);
    s->offset[i] = at;
    *heap = end > *heap ? end : *heap;
  }
  return s->failed ? 0 : n_order;
}

/* The highest end of a whole attempt, UINT64_MAX when it does not fit under the limit. */
static uint64_t attempt_all(solver_t *s, const uint32_t *order, uint32_t n_order, bool best_fit) {
  uint64_t heap;
  return attempt(s, order, n_order, best_fit, UINT64_MAX, &heap) == n_order && !s->failed
             ? heap
             : UINT64_MAX;
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

/* The best placement so far: its highest end, offsets and (greedy ones) order. */
typedef struct best {
  uint64_t heap;
  uint64_t *offset;
  uint32_t *order;
} best_t;

/* The placement just made (whole: heap its highest end) is kept when it is lower. */
static void consider(solver_t *s, best_t *b, const uint32_t *order, uint32_t m, uint64_t heap) {
  if (heap >= b->heap || s->failed)
    return;
  b->heap = heap;
  memcpy(b->offset, s->offset, (size_t)s->n * sizeof *b->offset);
  memcpy(b->order, order, (size_t)m * sizeof *order);
}

/* Every order of a few items, first fit. */
static void exact(solver_t *s, uint32_t *order, uint32_t m, uint32_t k, best_t *b) {
  if (k == m) {
    consider(s, b, order, m, attempt_all(s, order, m, false));
    return;
  }
  for (uint32_t i = k; i < m; i++) {
    uint32_t t = order[k];
    order[k] = order[i], order[i] = t;
    exact(s, order, m, k + 1, b);
    order[i] = order[k], order[k] = t;
  }
}

/* The most bytes live at once of the planned items (free_only: of those the solver places,
 * with the survivors among the obstacles, until their frees are due). */
static uint64_t live_bound(const hbm__step_item_t *items, uint32_t n, bool free_only,
                           const hbm__step_obstacle_t *obstacles, uint32_t n_obstacles) {
  int64_t *delta = calloc((size_t)n + 1, sizeof *delta);
  if (!delta)
    return 0;
  for (uint32_t i = 0; i < n_obstacles; i++)
    if (obstacles[i].until != UINT32_MAX) {
      delta[0] += (int64_t)obstacles[i].bytes;
      delta[obstacles[i].until < n ? obstacles[i].until : n] -= (int64_t)obstacles[i].bytes;
    }
  for (uint32_t i = 0; i < n; i++) {
    uint32_t lo[2], hi[2];
    if (!items[i].planned || (free_only && items[i].fixed))
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

uint64_t hbm__step_live_bound(const hbm__step_item_t *items, uint32_t n) {
  return live_bound(items, n, false, NULL, 0);
}

/* The search ("squeaky wheel"): the order is placed again under a ceiling, and the first
 * block that would end above it moves to the front of the order (it is placed before the
 * blocks that took its room). A placement that fits is the new best, and the ceiling drops:
 * it bisects between the bound (the most bytes live at once: no plan is lower) and the best
 * plan, giving up on a ceiling after PER_CEILING placements' worth of blocks. On the logs the
 * greedy orders end 0.1-1.8% above the bound and this reaches it, or 0.1% of it, in a few
 * placements. Until the time budget is spent; deterministic. */
static void search(solver_t *s, best_t *b, uint32_t *order, uint32_t m, uint64_t hi, int64_t t0) {
  uint64_t lo = live_bound(s->items, s->n, true, s->obstacles, s->first ? s->n_obstacles : 0);
  uint64_t ceiling = lo, budget = (uint64_t)PER_CEILING * m;
  memcpy(order, b->order, (size_t)m * sizeof *order);
  while (hi - lo > hi / CLOSE_ENOUGH && hbm__now_ns() - t0 < BUDGET_NS) {
    uint64_t heap;
    uint32_t k = attempt(s, order, m, true, ceiling, &heap);
    if (s->failed)
      break;
    if (k < m) { /* block order[k] would pass the ceiling: it goes first */
      uint32_t item = order[k];
      memmove(order + 1, order, (size_t)k * sizeof *order);
      order[0] = item;
      budget = k && budget > k ? budget - k : 0; /* k = 0: nothing to move ahead of */
      if (budget)
        continue;
      lo = ceiling + HBM__MIN_BLOCK; /* not found in time: assume none fits under it */
    } else {
      hi = heap;
      consider(s, b, order, m, heap);
    }
    ceiling = (lo + (hi - lo) / 2) / HBM__MIN_BLOCK * HBM__MIN_BLOCK;
    budget = (uint64_t)PER_CEILING * m;
  }
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
                             uint64_t limit, bool first, uint64_t *heap) {
  if (n == 0)
    return hbm__error(HBM_ERR_INVALID, "an empty step");
  solver_t s = {.items = items,
                .n = n,
                .obstacles = obstacles,
                .n_obstacles = n_obstacles,
                .limit = limit,
                .first = first};
  uint32_t *order = malloc((size_t)n * sizeof *order);
  keyed_t *scratch = malloc((size_t)n * sizeof *scratch);
  best_t b = {.heap = UINT64_MAX,
              .offset = malloc((size_t)n * sizeof *b.offset),
              .order = malloc((size_t)n * sizeof *b.order)};
  bool ok = order && scratch && b.offset && b.order && solver_init(&s);
  int64_t t0 = hbm__now_ns();
  uint32_t m = 0;
  uint64_t lowest = UINT64_MAX; /* the lowest highest end of the greedy orders */
  for (int how = 0; ok && how < N_ORDERS && (how == 0 || hbm__now_ns() - t0 < BUDGET_NS); how++) {
    make_order(&s, how, scratch, order, &m);
    if (m <= EXACT_MAX) {
      exact(&s, order, m, 0, &b);
      break; /* every order tried */
    }
    uint64_t h = attempt_all(&s, order, m, true);
    consider(&s, &b, order, m, h);
    lowest = h < lowest ? h : lowest;
  }
  if (ok && m > EXACT_MAX && lowest != UINT64_MAX)
    search(&s, &b, order, m, lowest, t0);
  ok = ok && !s.failed;
  if (ok && b.heap != UINT64_MAX)
    for (uint32_t i = 0; i < n; i++)
      if (items[i].planned)
        items[i].offset = b.offset[i];
  solver_free(&s);
  free(order);
  free(scratch);
  free(b.offset);
  free(b.order);
  if (!ok)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory planning the step");
  if (b.heap == UINT64_MAX)
    return HBM_ERR_NO_MEMORY;
  *heap = b.heap;
  return HBM_OK;
}
