/* step_floor.c — the least memory the first planned step can take, whatever the placement.
 *
 * When a plan starts, the blocks of the step before (the survivors) still lie where the
 * memory underneath put them, and physical memory is mapped in whole granules (2 MiB on a
 * GPU). A granule a survivor touches stays mapped while it lives, and the rest of it can only
 * hold blocks that come after the bytes there were freed and that fit in the free piece. So
 * the first planned step may need more than the whole granules of its peak live bytes: on
 * the transformer log two 1 MiB survivors share granules with blocks that outlive them, are
 * freed just before the step's peak, and nothing allocated after them but before the peak is
 * small enough to use their halves.
 *
 * The bound, at each moment t of the first step (in allocations, as the solver's time):
 *   granules touched by what cannot move (live survivors and other obstacles, the blocks
 *   fixed at their steady offsets) + whole granules for the bytes of the movable blocks live
 *   at t that the free pieces inside those granules cannot take.
 * A piece is counted generously (so the result is a lower bound): it takes the movable blocks
 * live at t that start no earlier than it became free (the earliest release over it; never
 * occupied: from the start) and fit in it (any size where it borders unmapped granules), up
 * to its own length. The most over t is the floor; t are tried by their cheap upper bound
 * (granules of what cannot move + whole granules of all the movable bytes), highest first, at
 * most EVALUATED of them. */
#include "alloc/step.h"

#include <stdlib.h>

#define EVALUATED 32 /* moments evaluated in full */

typedef hbm__step_range_t range_t;

typedef struct fixed_block {
  uint64_t lo, hi;
  uint32_t from, until; /* live over [from, until) */
} fixed_block_t;

typedef struct floor_ctx {
  const hbm__step_item_t *items;
  uint32_t n;
  fixed_block_t *fixed; /* obstacles, then the fixed items */
  size_t n_fixed;
  uint64_t gran;
  range_t *runs, *pieces; /* scratch: granule runs of what is fixed, free pieces in them */
} floor_ctx_t;

static int compare_range(const void *x, const void *y) {
  const range_t *a = x, *b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

static bool live_at(const fixed_block_t *f, uint32_t t) { return f->from <= t && t < f->until; }

/* The granule runs touched by what is fixed at t, merged and in order: how many; *granules
 * their total in granules. */
static size_t fixed_runs(floor_ctx_t *c, uint32_t t, uint64_t *granules) {
  size_t m = 0, k = 0;
  for (size_t i = 0; i < c->n_fixed; i++)
    if (live_at(&c->fixed[i], t))
      c->runs[m++] = (range_t){c->fixed[i].lo / c->gran * c->gran,
                               (c->fixed[i].hi + c->gran - 1) / c->gran * c->gran};
  qsort(c->runs, m, sizeof *c->runs, compare_range);
  *granules = 0;
  for (size_t i = 0; i < m;) {
    range_t r = c->runs[i];
    for (i++; i < m && c->runs[i].lo <= r.hi; i++)
      r.hi = c->runs[i].hi > r.hi ? c->runs[i].hi : r.hi;
    c->runs[k++] = r;
    *granules += (r.hi - r.lo) / c->gran;
  }
  return k;
}

/* When piece [lo, hi) became free, at the earliest: the earliest release over it, or 0 when
 * part of it was never released (scratch: c->runs is in use, so its own). */
static uint32_t free_since(const floor_ctx_t *c, uint64_t lo, uint64_t hi, uint32_t t,
                           range_t *scratch) {
  uint32_t since = UINT32_MAX;
  size_t m = 0;
  for (size_t i = 0; i < c->n_fixed; i++) {
    const fixed_block_t *f = &c->fixed[i];
    if (f->until > t || f->hi <= lo || hi <= f->lo)
      continue;
    since = f->until < since ? f->until : since;
    scratch[m++] = (range_t){f->lo > lo ? f->lo : lo, f->hi < hi ? f->hi : hi};
  }
  qsort(scratch, m, sizeof *scratch, compare_range);
  uint64_t at = lo;
  for (size_t i = 0; i < m && scratch[i].lo <= at; i++)
    at = scratch[i].hi > at ? scratch[i].hi : at;
  return at < hi ? 0 : since;
}

/* The free pieces inside one granule run at t (what is fixed there cut out): how many. */
static size_t pieces_in(floor_ctx_t *c, range_t run, uint32_t t, range_t *out) {
  size_t m = 0, k = 0;
  for (size_t i = 0; i < c->n_fixed; i++)
    if (live_at(&c->fixed[i], t) && c->fixed[i].lo < run.hi && run.lo < c->fixed[i].hi)
      c->pieces[m++] = (range_t){c->fixed[i].lo, c->fixed[i].hi};
  qsort(c->pieces, m, sizeof *c->pieces, compare_range);
  uint64_t at = run.lo;
  for (size_t i = 0; i < m; i++) {
    if (c->pieces[i].lo > at)
      out[k++] = (range_t){at, c->pieces[i].lo};
    at = c->pieces[i].hi > at ? c->pieces[i].hi : at;
  }
  if (at < run.hi)
    out[k++] = (range_t){at, run.hi};
  return k;
}

/* What the movable blocks live at t can put in free piece p of run r, at most. */
static uint64_t usable(const floor_ctx_t *c, range_t p, range_t r, uint32_t t, range_t *scratch) {
  uint32_t since = free_since(c, p.lo, p.hi, t, scratch);
  /* a block may run on into the unmapped granules beside the run (none below offset 0) */
  bool open = (p.lo == r.lo && p.lo > 0) || p.hi == r.hi;
  uint64_t sum = 0, len = p.hi - p.lo;
  for (uint32_t k = 0; k < c->n && sum < len; k++) {
    const hbm__step_item_t *it = &c->items[k];
    if (it->planned && !it->fixed && it->start <= t && t < it->end && it->start >= since &&
        (open || it->bytes <= len))
      sum += it->bytes;
  }
  return sum < len ? sum : len;
}

/* The bound at t, in granules; *cheap gets the upper estimate (nothing in the pieces). */
static uint64_t bound_at(floor_ctx_t *c, uint32_t t, uint64_t movable, bool full, uint64_t *cheap) {
  uint64_t granules;
  size_t m = fixed_runs(c, t, &granules);
  *cheap = granules + (movable + c->gran - 1) / c->gran;
  if (!full)
    return *cheap;
  uint64_t fill = 0;
  range_t *p = malloc((c->n_fixed + 1) * sizeof *p),
          *scratch = malloc((c->n_fixed + 1) * sizeof *p);
  if (!p || !scratch) { /* no memory to look closer: what cannot move, at least */
    free(p);
    free(scratch);
    return granules;
  }
  for (size_t i = 0; i < m; i++) {
    size_t k = pieces_in(c, c->runs[i], t, p);
    for (size_t j = 0; j < k; j++)
      fill += usable(c, p[j], c->runs[i], t, scratch);
  }
  free(p);
  free(scratch);
  return granules + (movable > fill ? (movable - fill + c->gran - 1) / c->gran : 0);
}

typedef struct moment {
  uint64_t cheap;
  uint32_t t;
} moment_t;

static int compare_moment(const void *x, const void *y) { /* highest estimate first */
  const moment_t *a = x, *b = y;
  return a->cheap > b->cheap ? -1 : a->cheap < b->cheap;
}

/* Movable bytes live at each moment (n + 1 entries; malloc'd). */
static uint64_t *movable_bytes(const hbm__step_item_t *items, uint32_t n) {
  int64_t *delta = calloc((size_t)n + 1, sizeof *delta);
  if (!delta)
    return NULL;
  for (uint32_t k = 0; k < n; k++)
    if (items[k].planned && !items[k].fixed && items[k].start < items[k].end) {
      delta[items[k].start] += (int64_t)items[k].bytes;
      delta[items[k].end < n ? items[k].end : n] -= (int64_t)items[k].bytes;
    }
  int64_t live = 0;
  for (uint32_t t = 0; t <= n; t++) {
    live += delta[t];
    delta[t] = live;
  }
  return (uint64_t *)delta;
}

static bool collect_fixed(floor_ctx_t *c, const hbm__step_obstacle_t *o, size_t n_o) {
  c->fixed = malloc((n_o + c->n + 1) * sizeof *c->fixed);
  if (!c->fixed)
    return false;
  for (size_t i = 0; i < n_o; i++)
    c->fixed[c->n_fixed++] = (fixed_block_t){o[i].offset, o[i].offset + o[i].bytes, 0, o[i].until};
  for (uint32_t k = 0; k < c->n; k++) {
    const hbm__step_item_t *it = &c->items[k];
    if (it->planned && it->fixed)
      c->fixed[c->n_fixed++] =
          (fixed_block_t){it->offset, it->offset + it->bytes, it->start, it->end};
  }
  return true;
}

uint64_t hbm__step_first_floor(const hbm__step_item_t *line, uint32_t n,
                               const hbm__step_obstacle_t *obstacles, size_t n_obstacles,
                               uint64_t gran) {
  floor_ctx_t c = {.items = line, .n = n, .gran = gran};
  uint64_t *movable = NULL, best = 0;
  moment_t *when = NULL;
  if (!gran || n == 0 || !collect_fixed(&c, obstacles, n_obstacles))
    goto done;
  c.runs = malloc((c.n_fixed + 1) * sizeof *c.runs);
  c.pieces = malloc((c.n_fixed + 1) * sizeof *c.pieces);
  movable = movable_bytes(line, n);
  when = malloc((size_t)n * sizeof *when);
  if (!c.runs || !c.pieces || !movable || !when)
    goto done;
  for (uint32_t t = 0; t < n; t++) {
    when[t].t = t;
    bound_at(&c, t, movable[t], false, &when[t].cheap);
  }
  qsort(when, n, sizeof *when, compare_moment);
  for (uint32_t i = 0; i < n && i < EVALUATED && when[i].cheap > best; i++) {
    uint64_t cheap, b = bound_at(&c, when[i].t, movable[when[i].t], true, &cheap);
    best = b > best ? b : best;
  }
done:
  free(c.fixed);
  free(c.runs);
  free(c.pieces);
  free(movable);
  free(when);
  return best * gran;
}
