/* layout.c — where the allocation timeline draws each buffer vertically: its "row", a position
 * in a stack of bands, one per allocation, each as tall as the bytes it holds.
 *
 * Raw addresses mislead. In a plan, every argument, output and constant is its own XLA
 * allocation at offset 0, so a 200 GiB output drawn at its offset lies on top of the 200 GiB
 * temporary at offset 0 of the temp heap and hides it, and the axis ends at the heap's top
 * while the peak counts every allocation. In a runtime profile, a 16 KiB buffer 11 GiB below
 * the others (another allocator region) stretches the axis so the rest is a sliver at the top.
 * So:
 *  - plan: the temp heap (the buffers that share it, at their heap offsets) at the bottom,
 *    then each whole-program buffer (HBM_BUF_INDEFINITE: its own allocation) stacked above,
 *    grouped by category — no two allocations share rows, and the stack is as tall as XLA's
 *    "Total hbm usage"; values that share bytes with another live one (aliases) are drawn
 *    apart, in rows of their own on top;
 *  - runtime: address ranges that buffers used, with every gap no buffer ever touched that is
 *    larger than HBM__GAP_MIN and 1/32 of the used bytes cut out (a gap is drawn as a line).
 * Within a band, addresses keep their order and distances, so fragmentation stays visible. */
#include "viewer/viewer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define HBM__GAP_MIN (1u << 20)

typedef struct layout_builder {
  const hbm_profile_t *p;
  int space;
  uint64_t *row; /* per buffer of the profile */
  hbm__band_t *bands;
  size_t n, cap;
  uint64_t top;
} layout_builder_t;

static bool add_band(layout_builder_t *lb, const char *kind, const char *label, uint64_t base,
                     uint64_t size, size_t count) {
  if (lb->n == lb->cap) {
    hbm__band_t *b = hbm__grow_array(lb->bands, &lb->cap, lb->n + 1, sizeof *b, 8);
    if (!b)
      return false;
    lb->bands = b;
  }
  hbm__band_t *b = &lb->bands[lb->n++];
  memset(b, 0, sizeof *b);
  snprintf(b->kind, sizeof b->kind, "%s", kind);
  snprintf(b->label, sizeof b->label, "%s", label);
  b->base = base;
  b->row = lb->top;
  b->size = size;
  b->count = count;
  lb->top += size;
  return true;
}

static bool in_space(const hbm_buffer_t *b, int space) { return b && b->space == space; }

/* ---- plans ---- */

static void plan_heap(layout_builder_t *lb) {
  uint64_t top = 0;
  size_t count = 0;
  for (int64_t i = 0; i < hbm_profile_buffer_count(lb->p); i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(lb->p, i);
    if (!in_space(b, lb->space) || (b->flags & HBM_BUF_INDEFINITE))
      continue;
    lb->row[i] = lb->top + b->address;
    if (hbm__end_of(b->address, b->size) > top) /* saturated, never wrapped */
      top = hbm__end_of(b->address, b->size);
    count++;
  }
  if (count)
    add_band(lb, "heap", "temp heap (shared by the temporaries)", 0, top, count);
}

/* Whole-program buffers of one category, each in rows of its own. */
static void plan_allocations(layout_builder_t *lb, hbm_category_t cat, const char *what) {
  uint64_t rows = 0;
  size_t count = 0;
  for (int64_t i = 0; i < hbm_profile_buffer_count(lb->p); i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(lb->p, i);
    if (!in_space(b, lb->space) || !(b->flags & HBM_BUF_INDEFINITE) || b->category != cat)
      continue;
    lb->row[i] = hbm__bytes_add(lb->top, rows);
    rows = hbm__bytes_add(rows, b->size);
    count++;
  }
  if (!count)
    return;
  char label[96];
  snprintf(label, sizeof label, "%s (%zu allocation%s)", what, count, count == 1 ? "" : "s");
  add_band(lb, "allocations", label, 0, rows, count);
}

/* ---- values that share memory ---- */

/* XLA lets values share bytes: an in-place op's output, an all-reduce's buffer, a tuple and
 * its elements. At one offset with overlapping live ranges, one would be drawn over the other;
 * such a value leaves the band and gets rows of its own in an "aliases" band on top. Found by
 * a sweep over steps with the live rectangles kept sorted by row (none of them overlap). */
typedef struct sweep {
  int64_t *live; /* indices of the buffers drawn so far and still live, by row */
  size_t n;
} sweep_t;

static int cmp_start(const void *a, const void *b, void *ctx) {
  const hbm_buffer_t *x = hbm_profile_buffer(ctx, *(const int64_t *)a);
  const hbm_buffer_t *y = hbm_profile_buffer(ctx, *(const int64_t *)b);
  if (x->start != y->start)
    return x->start < y->start ? -1 : 1;
  return *(const int64_t *)a < *(const int64_t *)b ? -1 : 1;
}

/* Whether buffer i (starting now) overlaps a live one; else it joins them. */
static bool sweep_collides(sweep_t *sw, const hbm_profile_t *p, const uint64_t *row, int64_t i) {
  const hbm_buffer_t *b = hbm_profile_buffer(p, i);
  size_t k = 0;
  for (size_t j = 0; j < sw->n; j++) /* those that ended are gone */
    if (hbm_profile_buffer(p, sw->live[j])->end > b->start)
      sw->live[k++] = sw->live[j];
  sw->n = k;
  size_t lo = 0, hi = sw->n; /* first live one at or above row[i] */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (row[sw->live[mid]] < row[i])
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo > 0 && row[sw->live[lo - 1]] + hbm_profile_buffer(p, sw->live[lo - 1])->size > row[i])
    return true;
  if (lo < sw->n && row[sw->live[lo]] < row[i] + b->size)
    return true;
  memmove(sw->live + lo + 1, sw->live + lo, (sw->n - lo) * sizeof *sw->live);
  sw->live[lo] = i;
  sw->n++;
  return false;
}

static bool plan_aliases(layout_builder_t *lb) {
  int64_t total = hbm_profile_buffer_count(lb->p);
  size_t n = 0, moved = 0;
  int64_t *idx = malloc((total > 0 ? (size_t)total : 1) * sizeof *idx);
  sweep_t sw = {malloc((total > 0 ? (size_t)total : 1) * sizeof *sw.live), 0};
  if (!idx || !sw.live) {
    free(idx);
    free(sw.live);
    return false;
  }
  for (int64_t i = 0; i < total; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(lb->p, i);
    if (in_space(b, lb->space) && b->size && b->end > b->start)
      idx[n++] = i;
  }
  qsort_r(idx, n, sizeof *idx, cmp_start, (void *)lb->p);
  uint64_t rows = 0;
  for (size_t k = 0; k < n; k++)
    if (sweep_collides(&sw, lb->p, lb->row, idx[k])) {
      lb->row[idx[k]] = hbm__bytes_add(lb->top, rows);
      rows = hbm__bytes_add(rows, hbm_profile_buffer(lb->p, idx[k])->size);
      moved++;
    }
  free(idx);
  free(sw.live);
  if (!moved)
    return true;
  char label[96];
  snprintf(label, sizeof label, "aliases (%zu value%s sharing memory with one below)", moved,
           moved == 1 ? "" : "s");
  return add_band(lb, "aliases", label, 0, rows, moved);
}

static bool layout_plan(layout_builder_t *lb) {
  plan_heap(lb);
  static const struct {
    hbm_category_t cat;
    const char *what;
  } order[] = {{HBM_CAT_OUTPUT, "outputs"},
               {HBM_CAT_PARAMETER, "arguments"},
               {HBM_CAT_CONSTANT, "constants"},
               {HBM_CAT_THREAD_LOCAL, "thread-local"},
               {HBM_CAT_TEMPORARY, "whole-program temporaries"},
               {HBM_CAT_UNKNOWN, "other allocations"}};
  for (size_t k = 0; k < HBM_ARRAY_LEN(order); k++)
    plan_allocations(lb, order[k].cat, order[k].what);
  return plan_aliases(lb);
}

/* ---- runtime profiles ---- */

/* A buffer by address: sorted as plain pairs, without a lookup per comparison (500k buffers
 * of a 1M-event profile sort in a few tens of milliseconds). */
typedef struct by_address {
  uint64_t address, size;
  int64_t index;
} by_address_t;

static int cmp_address(const void *a, const void *b) {
  const by_address_t *x = a, *y = b;
  if (x->address != y->address)
    return x->address < y->address ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

/* The bytes covered by the union of the buffers' address ranges (sorted by address). */
static uint64_t used_bytes(const by_address_t *bufs, size_t n) {
  uint64_t used = 0, end = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t lo = bufs[i].address > end ? bufs[i].address : end;
    uint64_t hi = hbm__end_of(bufs[i].address, bufs[i].size);
    if (hi > lo)
      used = hbm__bytes_add(used, hi - lo);
    if (hi > end)
      end = hi;
  }
  return used;
}

static bool range_band(layout_builder_t *lb, uint64_t base, uint64_t end, size_t count) {
  char label[64];
  snprintf(label, sizeof label, "addresses from 0x%" PRIx64, base);
  return add_band(lb, "range", label, base, end - base, count);
}

static bool layout_runtime(layout_builder_t *lb) {
  size_t n = 0;
  int64_t total = hbm_profile_buffer_count(lb->p);
  by_address_t *bufs = malloc((total > 0 ? (size_t)total : 1) * sizeof *bufs);
  if (!bufs)
    return false;
  for (int64_t i = 0; i < total; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(lb->p, i);
    if (in_space(b, lb->space))
      bufs[n++] = (by_address_t){b->address, b->size, i};
  }
  qsort(bufs, n, sizeof *bufs, cmp_address);
  uint64_t gap = used_bytes(bufs, n) / 32;
  if (gap < HBM__GAP_MIN)
    gap = HBM__GAP_MIN;
  bool ok = true;
  uint64_t base = 0, end = 0;
  size_t count = 0;
  for (size_t i = 0; i < n && ok; i++) {
    const by_address_t *b = &bufs[i];
    if (count && b->address > end && b->address - end > gap) {
      ok = range_band(lb, base, end, count);
      count = 0;
    }
    if (!count)
      base = end = b->address;
    lb->row[b->index] = lb->top + (b->address - base);
    if (hbm__end_of(b->address, b->size) > end)
      end = hbm__end_of(b->address, b->size);
    count++;
  }
  if (ok && count)
    ok = range_band(lb, base, end, count);
  free(bufs);
  return ok;
}

bool hbm__layout_build(const hbm_profile_t *p, int space, uint64_t *row, hbm__layout_t *out) {
  layout_builder_t lb = {.p = p, .space = space, .row = row};
  bool ok = true;
  if (hbm_profile_kind(p) == HBM_PROFILE_PLAN)
    ok = layout_plan(&lb);
  else
    ok = layout_runtime(&lb);
  if (!ok) {
    free(lb.bands);
    return false;
  }
  out->bands = lb.bands;
  out->n_bands = lb.n;
  out->height = lb.top;
  return true;
}

/* The band that holds row `row` (the last one for rows past the top). */
const hbm__band_t *hbm__layout_band_at(const hbm__layout_t *l, uint64_t row) {
  size_t lo = 0, hi = l->n_bands;
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (l->bands[mid].row <= row)
      lo = mid;
    else
      hi = mid;
  }
  return l->n_bands ? &l->bands[lo] : NULL;
}

json_t *hbm__json_bands(const hbm__layout_t *l) {
  json_t *bands = json_array();
  for (size_t i = 0; i < l->n_bands; i++) {
    const hbm__band_t *b = &l->bands[i];
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string(b->kind));
    json_object_set_new(o, "label", hbm__json_text(b->label));
    json_object_set_new(o, "row", hbm__json_u64(b->row));
    json_object_set_new(o, "size", hbm__json_u64(b->size));
    json_object_set_new(o, "count", json_integer((json_int_t)b->count));
    json_array_append_new(bands, o);
  }
  return bands;
}
