/* step_plan.c — mode learn's third part: where a step found goes in the range of the memory
 * underneath, two placements solved by step_solve.c and served by step_serve.c.
 *
 * - The steady placement, for every step from the second planned one on: the step alone, as
 *   a circle (a block live across the step's end keeps its place into the next), around the
 *   blocks of the memory underneath that are not the step's (their end is not known).
 * - The first planned step's. When the plan begins, blocks of the step before are still live
 *   where bfc put them (the survivors), and the first step's blocks must go around them until
 *   their frees are due. This one is solved as a line, not a circle: the first step's blocks
 *   still live at its end are fixed where the steady placement wants them, so the second
 *   planned step finds them where it expects them, and the rest is free to fill bfc's holes.
 *
 * Why two: one circular placement that goes around the survivors must keep room for them and
 * for their next copies at once (the part of the circle before their frees), and one that
 * keeps them where bfc put them keeps bfc's arrangement for good: 1.09x and 1.02x the bound
 * on the transformer log (163 MiB), where the steady placement alone reaches it. */
#include "alloc/step.h"

#include <stdlib.h>
#include <string.h>

typedef struct walk_ctx {
  hbm__step_item_t *items;
  uint32_t n;
  hbm_u64map_t survivors; /* address → item, the step's blocks live now */
  uint64_t base;
  hbm__step_obstacle_t *obstacles; /* the survivors first, then the other blocks */
  size_t n_obstacles, cap;
  bool failed;
} walk_ctx_t;

static bool add_obstacle(walk_ctx_t *w, hbm__step_obstacle_t o) {
  if (w->n_obstacles == w->cap) {
    hbm__step_obstacle_t *grown =
        hbm__grow_array(w->obstacles, &w->cap, w->n_obstacles + 1, sizeof *grown, 64);
    if (!grown)
      return false;
    w->obstacles = grown;
  }
  w->obstacles[w->n_obstacles++] = o;
  return true;
}

/* Every used chunk of the memory underneath: a survivor is an obstacle until its free is due
 * (its item ends a step after it began), anything else for the whole step. */
static int see_chunk(const hbm__chunk_info_t *c, void *ctx) {
  walk_ctx_t *w = ctx;
  uint64_t k;
  uint32_t until = UINT32_MAX;
  if (!c->in_use)
    return 0;
  if (hbm_u64map_remove(&w->survivors, c->addr, &k) && w->items[k].bytes == c->size)
    until = w->items[k].end - w->n;
  w->failed = !add_obstacle(w, (hbm__step_obstacle_t){c->addr - w->base, c->size, until});
  return w->failed;
}

/* The survivors and the other used chunks as obstacles (*n_survivors of them first: those with
 * an end); survivors the walk did not find are not the step's (their items are not planned). */
static bool find_obstacles(hbm__strategy_t *mem, hbm__step_item_t *items, uint32_t n, uint64_t base,
                           walk_ctx_t *w) {
  *w = (walk_ctx_t){.items = items, .n = n, .base = base};
  hbm_u64map_init(&w->survivors);
  for (uint32_t k = 0; k < n && !w->failed; k++)
    if (items[k].planned && items[k].live_now)
      w->failed = !hbm_u64map_put(&w->survivors, items[k].addr, k);
  if (!w->failed)
    mem->ops->walk(mem, see_chunk, w);
  for (uint64_t i = 0; i < w->survivors.cap; i++)
    if (w->survivors.used && w->survivors.used[i] == 1)
      items[w->survivors.values[i]].planned = false;
  hbm_u64map_free(&w->survivors);
  return !w->failed;
}

/* Obstacles with an end (survivors) first, in place: how many. */
static size_t survivors_first(hbm__step_obstacle_t *o, size_t n) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (o[i].until != UINT32_MAX) {
      hbm__step_obstacle_t t = o[m];
      o[m++] = o[i], o[i] = t;
    }
  return m;
}

/* A block live across the step's end, placed by the steady placement, would meet a survivor
 * in the first planned step: it is allocated there before the survivor's free is due. */
static bool meets_survivor(const hbm__step_item_t *items, uint32_t n,
                           const hbm__step_obstacle_t *survivors, size_t n_survivors) {
  for (uint32_t k = 0; k < n; k++) {
    const hbm__step_item_t *it = &items[k];
    if (!it->planned || it->end <= n)
      continue;
    for (size_t i = 0; i < n_survivors; i++) {
      const hbm__step_obstacle_t *o = &survivors[i];
      if (o->until > it->start && o->offset < it->offset + it->bytes &&
          it->offset < o->offset + o->bytes)
        return true;
    }
  }
  return false;
}

static hbm_status_t solve(hbm__step_places_t *out, hbm__step_item_t *items, uint32_t n,
                          const hbm__step_obstacle_t *o, size_t n_o, uint64_t limit, bool first,
                          uint64_t *heap) {
  int64_t t0 = hbm__now_ns();
  hbm_status_t rc = hbm__step_solve(items, n, o, (uint32_t)n_o, limit, first, heap);
  out->solve_ms += (double)(hbm__now_ns() - t0) / 1e6;
  return rc;
}

/* The steady placement: around the other blocks only, unless a block it leaves live across
 * the step's end would meet a survivor in the first step (then around those too). */
static hbm_status_t place_steady(hbm__step_places_t *out, hbm__step_item_t *items, uint32_t n,
                                 const walk_ctx_t *w, size_t n_survivors, uint64_t limit) {
  uint64_t heap;
  hbm_status_t rc = solve(out, items, n, w->obstacles + n_survivors, w->n_obstacles - n_survivors,
                          limit, false, &heap);
  if (rc == HBM_OK && meets_survivor(items, n, w->obstacles, n_survivors))
    rc = solve(out, items, n, w->obstacles, w->n_obstacles, limit, false, &heap);
  return rc;
}

/* The first planned step's placement, as a line: blocks live past its end where the steady
 * placement has them, the others around the survivors and the other blocks. */
static hbm_status_t place_first(hbm__step_places_t *out, const hbm__step_item_t *items, uint32_t n,
                                const walk_ctx_t *w, uint64_t limit, uint64_t gran) {
  hbm__step_item_t *line = malloc((size_t)n * sizeof *line);
  if (!line)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory planning the step");
  for (uint32_t k = 0; k < n; k++) {
    line[k] = items[k];
    line[k].fixed = items[k].end > n; /* at its steady offset */
    line[k].end = items[k].end < n ? items[k].end : n;
  }
  uint64_t heap;
  hbm_status_t rc = solve(out, line, n, w->obstacles, w->n_obstacles, limit, true, &heap);
  for (uint32_t k = 0; k < n && rc == HBM_OK; k++)
    out->first[k] = items[k].planned ? line[k].offset : HBM__STEP_NO_OFFSET;
  if (rc == HBM_OK) { /* (its time counts as solving: the bench's solve ms shows it) */
    int64_t t0 = hbm__now_ns();
    out->first_floor = hbm__step_first_floor(line, n, w->obstacles, w->n_obstacles, gran);
    out->solve_ms += (double)(hbm__now_ns() - t0) / 1e6;
  }
  free(line);
  return rc;
}

static int compare_range(const void *x, const void *y) {
  const hbm__step_range_t *a = x, *b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* The stretches that blocks at these offsets use (their bytes merged, in order); NULL when
 * host memory ran out. */
static hbm__step_range_t *stretches(const hbm__step_item_t *items, uint32_t n,
                                    const uint64_t *const offsets[2], size_t *n_out) {
  hbm__step_range_t *r = malloc((2 * (size_t)n + 1) * sizeof *r);
  size_t m = 0, k = 0;
  for (uint32_t i = 0; r && i < n; i++)
    for (int j = 0; j < 2 && items[i].planned; j++)
      if (offsets[j])
        r[m++] = (hbm__step_range_t){offsets[j][i], offsets[j][i] + items[i].bytes};
  if (!r)
    return NULL;
  qsort(r, m, sizeof *r, compare_range);
  for (size_t i = 0; i < m;) {
    hbm__step_range_t merged = r[i];
    for (i++; i < m && r[i].lo <= merged.hi; i++)
      merged.hi = r[i].hi > merged.hi ? r[i].hi : merged.hi;
    r[k++] = merged;
  }
  *n_out = k;
  return r;
}

void hbm__step_places_free(hbm__step_places_t *p) {
  free(p->steady);
  free(p->first);
  free(p->stretches);
  free(p->held);
  memset(p, 0, sizeof *p);
}

hbm_status_t hbm__step_place(hbm__strategy_t *mem, uint64_t base, hbm__step_item_t *items,
                             uint32_t n, uint64_t limit, hbm__step_places_t *out) {
  memset(out, 0, sizeof *out);
  walk_ctx_t w = {0};
  out->steady = malloc(((size_t)n + 1) * sizeof *out->steady);
  out->first = malloc(((size_t)n + 1) * sizeof *out->first);
  bool ok = out->steady && out->first && find_obstacles(mem, items, n, base, &w);
  hbm_status_t rc = ok ? HBM_OK : hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory planning");
  size_t n_survivors = ok ? survivors_first(w.obstacles, w.n_obstacles) : 0;
  for (uint32_t k = 0; k < n; k++)
    items[k].fixed = false;
  if (rc == HBM_OK)
    rc = place_steady(out, items, n, &w, n_survivors, limit);
  for (uint32_t k = 0; k < n && rc == HBM_OK; k++)
    out->steady[k] = items[k].planned ? items[k].offset : HBM__STEP_NO_OFFSET;
  if (rc == HBM_OK)
    rc = place_first(out, items, n, &w, limit, hbm__expandable_granule(mem));
  const uint64_t *const steady_only[2] = {out->steady, NULL}, *const both[2] = {out->steady,
                                                                                out->first};
  if (rc == HBM_OK && (!(out->stretches = stretches(items, n, steady_only, &out->n_stretches)) ||
                       !(out->held = stretches(items, n, both, &out->n_held))))
    rc = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory planning the step");
  for (size_t i = 0; rc == HBM_OK && i < out->n_stretches; i++)
    out->steady_bytes += out->stretches[i].hi - out->stretches[i].lo;
  out->span = rc == HBM_OK && out->n_held ? out->held[out->n_held - 1].hi : 0;
  free(w.obstacles);
  if (rc != HBM_OK)
    hbm__step_places_free(out);
  return rc;
}
