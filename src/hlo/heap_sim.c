/* heap_sim.c — XLA's default heap simulation strategy, GlobalDecreasingSizeBestFitHeap
 * (spatial order): temporaries are placed one by one, largest first (ties: longer-lived
 * first, then earlier), each at the smallest free gap left by the already-placed buffers
 * that overlap it in time — including the gap up to the current top of the heap — or else
 * on top. The heap size it ends with is XLA's temp allocation size, fragmentation included.
 *
 * Finding the placed buffers that overlap an interval uses a segment tree over the
 * intervals sorted by start, holding the latest end of the placed ones, so a query costs
 * O((k + 1) log n) for k overlapping buffers rather than a scan of everything placed. */
#include "hlo.h"

#include <stdlib.h>
#include <string.h>

typedef struct placed_chunk {
  uint64_t offset, size;
} placed_chunk_t;

typedef struct order_key {
  uint64_t size;
  uint32_t duration;
  uint32_t index;
} order_key_t;

static int placement_order(const void *x, const void *y) {
  const order_key_t *a = x, *b = y;
  if (a->size != b->size)
    return a->size > b->size ? -1 : 1;
  if (a->duration != b->duration)
    return a->duration > b->duration ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

typedef struct start_key {
  uint32_t start;
  uint32_t index;
} start_key_t;

static int by_start(const void *x, const void *y) {
  const start_key_t *a = x, *b = y;
  if (a->start != b->start)
    return a->start < b->start ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

/* Sorts chunks by offset. The heap simulator sorts the chunks overlapping every buffer it
 * places, so this is its inner loop: an inlined quicksort (median of three, insertion sort
 * for short runs, smaller half first so the stack stays O(log n)) beats qsort's calls. */
static void sort_chunks(placed_chunk_t *a, size_t n) {
  size_t lo_stack[64], hi_stack[64];
  size_t sp = 0;
  lo_stack[sp] = 0;
  hi_stack[sp++] = n;
  while (sp) {
    size_t lo = lo_stack[--sp], hi = hi_stack[sp];
    while (hi - lo > 16) {
      size_t mid = lo + (hi - lo) / 2;
      uint64_t x = a[lo].offset, y = a[mid].offset, z = a[hi - 1].offset;
      uint64_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
      size_t i = lo, j = hi - 1;
      for (;;) {
        while (a[i].offset < pivot)
          i++;
        while (a[j].offset > pivot)
          j--;
        if (i >= j)
          break;
        placed_chunk_t t = a[i];
        a[i] = a[j];
        a[j] = t;
        i++;
        j--;
      }
      size_t split = j + 1; /* [lo, split) <= pivot <= [split, hi) */
      if (split - lo < hi - split) {
        lo_stack[sp] = split;
        hi_stack[sp++] = hi;
        hi = split;
      } else {
        lo_stack[sp] = lo;
        hi_stack[sp++] = split;
        lo = split;
      }
    }
    for (size_t i = lo + 1; i < hi; i++) {
      placed_chunk_t t = a[i];
      size_t j = i;
      while (j > lo && a[j - 1].offset > t.offset) {
        a[j] = a[j - 1];
        j--;
      }
      a[j] = t;
    }
  }
}

static uint64_t align_up(uint64_t v, uint64_t a) {
  if (a <= 1)
    return v;
  uint64_t r = v % a;
  return r ? v + (a - r) : v;
}

typedef struct heap_state {
  hlo_interval_t *iv;
  start_key_t *sorted; /* intervals by start */
  uint32_t *slot_of;   /* interval index → position in sorted */
  uint32_t *tree;      /* segment tree: max end of placed intervals under each node */
  size_t leaves;
  placed_chunk_t *found;
  size_t n_found;
} heap_state_t;

static void tree_place(heap_state_t *h, uint32_t slot, uint32_t end) {
  size_t node = h->leaves + slot;
  h->tree[node] = end;
  for (node /= 2; node >= 1; node /= 2) {
    uint32_t l = h->tree[2 * node], r = h->tree[2 * node + 1];
    h->tree[node] = l > r ? l : r;
  }
}

typedef struct tree_range {
  size_t node, first, width; /* a tree node and the leaves [first, first + width) under it */
} tree_range_t;

/* Placed intervals with start < end_q and end > start_q. */
static void tree_overlapping(heap_state_t *h, size_t n, uint32_t start_q, uint32_t end_q) {
  h->n_found = 0;
  /* Positions [0, prefix) of the start order have start < end_q. */
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (h->sorted[mid].start < end_q)
      lo = mid + 1;
    else
      hi = mid;
  }
  size_t prefix = lo;
  tree_range_t stack[130];
  size_t sp = 0;
  if (prefix)
    stack[sp++] = (tree_range_t){1, 0, h->leaves};
  while (sp) {
    size_t node = stack[sp - 1].node, first = stack[sp - 1].first, width = stack[sp - 1].width;
    sp--;
    if (first >= prefix || h->tree[node] <= start_q)
      continue;
    if (width == 1) {
      uint32_t idx = h->sorted[first].index;
      h->found[h->n_found++] = (placed_chunk_t){h->iv[idx].offset, h->iv[idx].size};
      continue;
    }
    stack[sp++] = (tree_range_t){2 * node + 1, first + width / 2, width / 2};
    stack[sp++] = (tree_range_t){2 * node, first, width / 2};
  }
}

/* The best-fit offset for `size` among the chunks found, given the heap's current top. */
static uint64_t best_fit(heap_state_t *h, uint64_t size, uint64_t heap_top, uint64_t alignment) {
  sort_chunks(h->found, h->n_found);
  uint64_t best = UINT64_MAX, best_gap = UINT64_MAX, cursor = 0;
  for (size_t i = 0; i < h->n_found; i++) {
    const placed_chunk_t *c = &h->found[i];
    if (c->offset > cursor) {
      uint64_t gap = c->offset - cursor;
      if (gap >= size && gap < best_gap) {
        best = cursor;
        best_gap = gap;
      }
    }
    uint64_t end = align_up(c->offset + c->size, alignment);
    if (end > cursor)
      cursor = end;
  }
  if (heap_top > cursor) {
    uint64_t gap = heap_top - cursor;
    if (gap >= size && gap < best_gap)
      best = cursor;
  }
  return best != UINT64_MAX ? best : cursor;
}

hbm_status_t hbm__hlo_best_fit(hlo_interval_t *iv, size_t n, uint64_t alignment, uint64_t *heap) {
  *heap = 0;
  if (n == 0)
    return HBM_OK;
  if (n >= UINT32_MAX)
    return hbm__error(HBM_ERR_INVALID, "too many buffers for the heap simulator");
  heap_state_t h = {.iv = iv};
  order_key_t *order = malloc(n * sizeof *order);
  h.sorted = malloc(n * sizeof *h.sorted);
  h.slot_of = malloc(n * sizeof *h.slot_of);
  h.found = malloc(n * sizeof *h.found);
  h.leaves = 1;
  while (h.leaves < n)
    h.leaves *= 2;
  h.tree = calloc(2 * h.leaves, sizeof *h.tree);
  if (!order || !h.sorted || !h.slot_of || !h.found || !h.tree) {
    free(order);
    free(h.sorted);
    free(h.slot_of);
    free(h.found);
    free(h.tree);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (heap simulator)");
  }
  for (size_t i = 0; i < n; i++) {
    order[i] = (order_key_t){iv[i].size, iv[i].end - iv[i].start, (uint32_t)i};
    h.sorted[i] = (start_key_t){iv[i].start, (uint32_t)i};
  }
  qsort(order, n, sizeof *order, placement_order);
  qsort(h.sorted, n, sizeof *h.sorted, by_start);
  for (size_t i = 0; i < n; i++)
    h.slot_of[h.sorted[i].index] = (uint32_t)i;
  uint64_t top = 0;
  for (size_t k = 0; k < n; k++) {
    hlo_interval_t *cur = &iv[order[k].index];
    if (cur->size == 0 || cur->end <= cur->start) {
      cur->offset = 0;
      continue;
    }
    tree_overlapping(&h, n, cur->start, cur->end);
    cur->offset = best_fit(&h, cur->size, top, alignment);
    if (cur->offset + cur->size > top)
      top = cur->offset + cur->size;
    tree_place(&h, h.slot_of[order[k].index], cur->end);
  }
  *heap = top;
  free(order);
  free(h.sorted);
  free(h.slot_of);
  free(h.found);
  free(h.tree);
  return HBM_OK;
}

/* ------------------------------------------------------------------------------------------ */

static hbm_status_t simulate_color(hlo_assignment_t *as, int color, uint64_t alignment) {
  uint32_t nb = as->n_buffers;
  uint32_t *group_iv = malloc((nb + 1) * sizeof *group_iv);
  hlo_interval_t *iv = malloc((nb + 1) * sizeof *iv);
  int64_t *delta = calloc((size_t)as->n_steps + 2, sizeof *delta);
  if (!group_iv || !iv || !delta) {
    free(group_iv);
    free(iv);
    free(delta);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (heap simulator)");
  }
  size_t n = 0;
  for (uint32_t i = 0; i < nb; i++)
    group_iv[i] = UINT32_MAX;
  for (uint32_t i = 0; i < nb; i++) {
    hlo_buffer_t *b = &as->buffers[i];
    if (b->indefinite || b->color != color || b->end <= b->start)
      continue;
    delta[b->start] += (int64_t)b->bytes;
    delta[b->end] -= (int64_t)b->bytes;
    uint32_t g = b->share_group;
    if (group_iv[g] == UINT32_MAX) {
      group_iv[g] = (uint32_t)n;
      iv[n++] = (hlo_interval_t){b->start, b->end, b->bytes, 0};
    } else {
      hlo_interval_t *x = &iv[group_iv[g]];
      x->start = b->start < x->start ? b->start : x->start;
      x->end = b->end > x->end ? b->end : x->end;
      x->size = b->bytes > x->size ? b->bytes : x->size;
    }
  }
  uint64_t heap;
  hbm_status_t st = hbm__hlo_best_fit(iv, n, alignment, &heap);
  if (st == HBM_OK) {
    for (uint32_t i = 0; i < nb; i++) {
      hlo_buffer_t *b = &as->buffers[i];
      if (!b->indefinite && b->color == color && group_iv[b->share_group] != UINT32_MAX)
        b->offset = iv[group_iv[b->share_group]].offset;
    }
    as->heap_bytes[color] = heap;
    int64_t live = 0, peak = 0;
    uint32_t peak_step = 0;
    for (uint32_t s = 0; s < as->n_steps; s++) {
      live += delta[s];
      if (live > peak) {
        peak = live;
        peak_step = s;
      }
    }
    as->temp_peak[color] = (uint64_t)peak;
    as->temp_peak_step[color] = peak_step;
  }
  free(group_iv);
  free(iv);
  free(delta);
  return st;
}

hbm_status_t hbm__hlo_simulate_heap(hlo_assignment_t *as, const hlo_plan_opts_t *opt) {
  int n_colors = 1;
  for (uint32_t i = 0; i < as->n_buffers; i++)
    if (as->buffers[i].color + 1 > n_colors)
      n_colors = as->buffers[i].color + 1;
  free(as->heap_bytes);
  free(as->temp_peak);
  free(as->temp_peak_step);
  as->n_colors = n_colors;
  as->heap_bytes = calloc((size_t)n_colors, sizeof *as->heap_bytes);
  as->temp_peak = calloc((size_t)n_colors, sizeof *as->temp_peak);
  as->temp_peak_step = calloc((size_t)n_colors, sizeof *as->temp_peak_step);
  if (!as->heap_bytes || !as->temp_peak || !as->temp_peak_step)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (heap simulator)");
  uint64_t alignment = opt && opt->alignment ? opt->alignment : 1;
  for (int c = 0; c < n_colors; c++) {
    hbm_status_t st = simulate_color(as, c, alignment);
    if (st != HBM_OK)
      return st;
  }
  return HBM_OK;
}
