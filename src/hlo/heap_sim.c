/* heap_sim.c — XLA's default heap simulation strategy, GlobalDecreasingSizeBestFitHeap
 * (spatial order): temporaries are placed one by one, largest first (ties: longer-lived
 * first, then earlier), each at the smallest free gap left by the already-placed buffers
 * that overlap it in time — including the gap up to the current top of the heap — or else
 * on top. The heap size it ends with is XLA's temp allocation size, fragmentation included.
 *
 * Finding the placed buffers that overlap an interval: a short-lived one (most buffers)
 * that overlaps [s, e) starts in [s - L, e), a short scan of the intervals sorted by start,
 * where L is chosen so that at most 1/64 of the intervals are longer; those sit in a
 * segment tree over the same order holding the latest end placed under each node, so a
 * query costs O(k log n) for the k long ones it meets. */
#include "hlo.h"

#include <stdlib.h>
#include <string.h>

typedef struct placed_chunk {
  uint64_t offset, size;
} placed_chunk_t;

typedef struct order_key {
  uint64_t size;
  uint32_t duration;
  uint32_t index; /* the group's first interval: ties go to the earlier */
  uint32_t group;
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
  uint32_t short_len;  /* intervals this long or shorter are found by scanning */
  uint8_t *placed;     /* per interval, short ones only */
  start_key_t *sorted; /* intervals by start */
  uint32_t *slot_of;   /* interval index → position in sorted */
  uint32_t *tree;      /* segment tree: max end of placed intervals under each node */
  size_t leaves;
  placed_chunk_t *found; /* chunks overlapping the buffer being placed */
  size_t n_found, cap_found;
  size_t n_long_placed;
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

static bool push_found(heap_state_t *h, const hlo_interval_t *x) {
  if (h->n_found == h->cap_found) {
    size_t cap = h->cap_found ? h->cap_found * 2 : 64;
    placed_chunk_t *f = realloc(h->found, cap * sizeof *f);
    if (!f)
      return false;
    h->found = f;
    h->cap_found = cap;
  }
  h->found[h->n_found++] = (placed_chunk_t){x->offset, x->size};
  return true;
}

static bool is_long(const heap_state_t *h, const hlo_interval_t *x) {
  return x->end - x->start > h->short_len;
}

/* The smallest power of two (at least 16) that at most n/64 intervals are longer than. */
static uint32_t choose_short_len(const hlo_interval_t *iv, size_t n) {
  size_t by_log[33] = {0};
  for (size_t i = 0; i < n; i++) {
    uint32_t len = iv[i].end > iv[i].start ? iv[i].end - iv[i].start : 0;
    int lg = 0;
    while (lg < 32 && (1u << lg) < len)
      lg++;
    by_log[lg]++; /* len <= 2^lg */
  }
  size_t longer = n;
  for (int lg = 0; lg < 32; lg++) {
    longer -= by_log[lg];
    if (lg >= 4 && longer <= n / 64)
      return 1u << lg;
  }
  return 1u << 31;
}

/* Appends to found[] the placed intervals that overlap interval `idx` in time; false if
 * memory ran out. Walking outwards from idx's own place in the start order replaces binary
 * searches: only intervals starting in [start - short_len, end) can be short and overlap. */
static bool tree_overlapping(heap_state_t *h, size_t n, uint32_t idx) {
  const hlo_interval_t *q = &h->iv[idx];
  uint32_t start_q = q->start, end_q = q->end;
  uint32_t from = start_q > h->short_len ? start_q - h->short_len : 0;
  size_t slot = h->slot_of[idx];
  size_t prefix = slot; /* first position starting at or after end_q */
  while (prefix < n && h->sorted[prefix].start < end_q)
    prefix++;
  size_t lo = slot;
  while (lo > 0 && h->sorted[lo - 1].start >= from)
    lo--;
  for (size_t i = lo; i < prefix; i++) {
    uint32_t other = h->sorted[i].index;
    const hlo_interval_t *x = &h->iv[other];
    if (h->placed[other] && x->end > start_q && !push_found(h, x))
      return false;
  }
  if (!h->n_long_placed)
    return true;
  /* Long intervals: the segment tree (short ones are never entered in it). */
  tree_range_t stack[130];
  size_t sp = 0;
  if (prefix)
    stack[sp++] = (tree_range_t){1, 0, h->leaves};
  while (sp) {
    tree_range_t r = stack[--sp];
    if (r.first >= prefix || h->tree[r.node] <= start_q)
      continue;
    if (r.width == 1) {
      if (!push_found(h, &h->iv[h->sorted[r.first].index]))
        return false;
      continue;
    }
    stack[sp++] = (tree_range_t){2 * r.node + 1, r.first + r.width / 2, r.width / 2};
    stack[sp++] = (tree_range_t){2 * r.node, r.first, r.width / 2};
  }
  return true;
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

/* Groups of intervals placed together: an interval alone is a group of one. */
typedef struct heap_groups {
  uint32_t *first; /* per group: index into members */
  uint32_t *count;
  uint32_t *members; /* interval indices, grouped */
  size_t n;
} heap_groups_t;

/* Members of each share group together (a counting sort by share id), then every interval
 * that shares with none as a group of its own. */
static bool make_groups(hlo_interval_t *iv, size_t n, heap_groups_t *g) {
  g->members = malloc(n * sizeof *g->members);
  g->first = malloc(n * sizeof *g->first);
  g->count = malloc(n * sizeof *g->count);
  uint32_t max_share = 0;
  for (size_t i = 0; i < n; i++)
    max_share = iv[i].share > max_share ? iv[i].share : max_share;
  uint32_t *at = calloc((size_t)max_share + 2, sizeof *at);
  if (!g->members || !g->first || !g->count || !at) {
    free(at);
    return false;
  }
  for (size_t i = 0; i < n; i++)
    if (iv[i].share)
      at[iv[i].share + 1]++;
  for (uint32_t k = 1; k <= max_share + 1; k++)
    at[k] += at[k - 1];
  size_t shared = at[max_share + 1], alone = shared;
  g->n = 0;
  for (uint32_t k = 1; k <= max_share; k++)
    if (at[k + 1] > at[k]) {
      g->first[g->n] = at[k];
      g->count[g->n++] = at[k + 1] - at[k];
    }
  for (size_t i = 0; i < n; i++) {
    if (iv[i].share) {
      g->members[at[iv[i].share]++] = (uint32_t)i;
    } else {
      g->first[g->n] = (uint32_t)alone;
      g->count[g->n++] = 1;
      g->members[alone++] = (uint32_t)i;
    }
  }
  free(at);
  return true;
}

/* The intervals in order of start (ties: index), by counting sort: starts are steps. */
static bool sort_by_start(const hlo_interval_t *iv, size_t n, start_key_t *out) {
  uint32_t max = 0;
  for (size_t i = 0; i < n; i++)
    max = iv[i].start > max ? iv[i].start : max;
  size_t *at = calloc((size_t)max + 2, sizeof *at);
  if (!at)
    return false;
  for (size_t i = 0; i < n; i++)
    at[iv[i].start + 1]++;
  for (size_t k = 1; k <= (size_t)max + 1; k++)
    at[k] += at[k - 1];
  for (size_t i = 0; i < n; i++)
    out[at[iv[i].start]++] = (start_key_t){iv[i].start, (uint32_t)i};
  free(at);
  return true;
}

hbm_status_t hbm__hlo_best_fit(hlo_interval_t *iv, size_t n, uint64_t alignment, uint64_t *heap) {
  *heap = 0;
  if (n == 0)
    return HBM_OK;
  if (n >= UINT32_MAX)
    return hbm__error(HBM_ERR_INVALID, "too many buffers for the heap simulator");
  heap_state_t h = {.iv = iv};
  heap_groups_t g = {0};
  order_key_t *order = NULL;
  h.sorted = malloc(n * sizeof *h.sorted);
  h.slot_of = malloc(n * sizeof *h.slot_of);
  h.leaves = 1;
  while (h.leaves < n)
    h.leaves *= 2;
  h.tree = calloc(2 * h.leaves, sizeof *h.tree);
  h.placed = calloc(n, 1);
  h.short_len = choose_short_len(iv, n);
  bool ok = h.sorted && h.slot_of && h.tree && h.placed && make_groups(iv, n, &g);
  if (ok)
    ok = (order = malloc(g.n * sizeof *order)) != NULL;
  if (ok) {
    ok = sort_by_start(iv, n, h.sorted);
    for (size_t i = 0; ok && i < n; i++)
      h.slot_of[h.sorted[i].index] = (uint32_t)i;
    /* Groups by their largest member, then the span they cover, then the first index. */
    for (size_t k = 0; k < g.n; k++) {
      uint64_t size = 0;
      uint32_t lo = UINT32_MAX, hi = 0, first = UINT32_MAX;
      for (uint32_t j = 0; j < g.count[k]; j++) {
        const hlo_interval_t *x = &iv[g.members[g.first[k] + j]];
        size = x->size > size ? x->size : size;
        lo = x->start < lo ? x->start : lo;
        hi = x->end > hi ? x->end : hi;
        first = g.members[g.first[k] + j] < first ? g.members[g.first[k] + j] : first;
      }
      order[k] = (order_key_t){size, hi > lo ? hi - lo : 0, first, (uint32_t)k};
    }
    qsort(order, g.n, sizeof *order, placement_order);
  }
  uint64_t top = 0;
  for (size_t k = 0; ok && k < g.n; k++) {
    uint32_t grp = order[k].group;
    const uint32_t *mem = &g.members[g.first[grp]];
    uint64_t size = order[k].size;
    /* Chunks in the way of any member: the group needs a gap free during each of them. */
    h.n_found = 0;
    for (uint32_t j = 0; ok && j < g.count[grp]; j++) {
      const hlo_interval_t *x = &iv[mem[j]];
      if (x->size && x->end > x->start)
        ok = tree_overlapping(&h, n, mem[j]);
    }
    if (!ok)
      break;
    uint64_t offset = size ? best_fit(&h, size, top, alignment) : 0;
    if (size && offset + size > top)
      top = offset + size;
    for (uint32_t j = 0; j < g.count[grp]; j++) {
      hlo_interval_t *x = &iv[mem[j]];
      bool placed = x->size && x->end > x->start;
      x->offset = placed ? offset : 0;
      if (placed && is_long(&h, x)) {
        tree_place(&h, h.slot_of[mem[j]], x->end);
        h.n_long_placed++;
      } else if (placed)
        h.placed[mem[j]] = 1;
    }
  }
  *heap = top;
  free(order);
  free(h.sorted);
  free(h.slot_of);
  free(h.found);
  free(h.tree);
  free(h.placed);
  free(g.members);
  free(g.first);
  free(g.count);
  return ok ? HBM_OK : hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (heap simulator)");
}

/* ------------------------------------------------------------------------------------------ */

/* Intervals for the temporaries of one colour: one per buffer; buffers of one share group
 * (element-wise reuse) are placed at one offset. */
static hbm_status_t simulate_color(hlo_assignment_t *as, int color, uint64_t alignment) {
  uint32_t nb = as->n_buffers;
  uint32_t *iv_of = malloc((nb + 1) * sizeof *iv_of);
  uint32_t *group_size = calloc(nb + 1, sizeof *group_size);
  hlo_interval_t *iv = malloc((nb + 1) * sizeof *iv);
  int64_t *delta = calloc((size_t)as->n_steps + 2, sizeof *delta);
  if (!iv_of || !group_size || !iv || !delta) {
    free(iv_of);
    free(group_size);
    free(iv);
    free(delta);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (heap simulator)");
  }
  for (uint32_t i = 0; i < nb; i++) {
    const hlo_buffer_t *b = &as->buffers[i];
    if (!b->indefinite && b->color == color && b->end > b->start)
      group_size[b->share_group]++;
  }
  size_t n = 0;
  for (uint32_t i = 0; i < nb; i++) {
    hlo_buffer_t *b = &as->buffers[i];
    iv_of[i] = UINT32_MAX;
    if (b->indefinite || b->color != color || b->end <= b->start)
      continue;
    delta[b->start] += (int64_t)b->bytes;
    delta[b->end] -= (int64_t)b->bytes;
    uint32_t share = group_size[b->share_group] > 1 ? b->share_group + 1 : 0;
    iv_of[i] = (uint32_t)n;
    iv[n++] = (hlo_interval_t){b->start, b->end, b->bytes, 0, share};
  }
  uint64_t heap;
  hbm_status_t st = hbm__hlo_best_fit(iv, n, alignment, &heap);
  if (st == HBM_OK) {
    for (uint32_t i = 0; i < nb; i++)
      if (iv_of[i] != UINT32_MAX)
        as->buffers[i].offset = iv[iv_of[i]].offset;
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
  free(iv_of);
  free(group_size);
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
