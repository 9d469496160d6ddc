/* heap_sim.c — XLA's default heap simulation strategy, GlobalDecreasingSizeBestFitHeap
 * (spatial order): temporaries are placed one by one, largest first (ties: longer-lived
 * first, then earlier), each at the smallest free gap left by the already-placed buffers
 * that overlap it in time — including the gap up to the current top of the heap — or else
 * on top. The heap size it ends with is XLA's temp allocation size, fragmentation included.
 *
 * Where a buffer may go depends only on the union of the byte ranges of the placed buffers
 * that overlap it in time, and that union is short: buffers are packed side by side, so the
 * 150 buffers in the way of a typical one in a big model merge into about ten ranges. The
 * simulator therefore keeps unions, not buffers. Time is cut into blocks of W steps (about 64
 * buffer ends each) under a segment tree over blocks; a placed buffer is
 *   - in the `own` union of the tree nodes that make up the blocks it covers whole (the
 *     canonical nodes of a segment tree), which every query below such a node reads (each
 *     node caches the union of `own` along its path from the root, rebuilt when something
 *     on the path changed; each block has a bit mask of the levels above it with any);
 *   - in the `sub` union of those nodes and of every node above the blocks it touches, at
 *     every other level and only as high as a query still to come reads, so that a query
 *     covering a node whole reads one union (or three) for everything under it;
 *   - as itself (its exact steps) in the `raw` list of the one or two blocks it covers only
 *     in part, which queries ending inside those blocks filter step by step.
 * A query reads O(log blocks) unions plus the raw lists of its two end blocks; an insertion
 * updates as many. Unions are merged by insertion when short and linearly when long, so
 * hostile inputs (thousands of gaps) stay linear per list. The result is the same as sorting
 * every overlapping buffer by offset: tests/test_hlo_heap.c checks it against that plain
 * algorithm, tests/test_hlo_shared.c pins the plans of the shared modules. */
#include "hlo.h"

#include <stdlib.h>
#include <string.h>

/* Occupied bytes [lo, hi), hi rounded up to the alignment (as gaps start there). */
typedef struct range {
  uint64_t lo, hi;
} range_t;

/* Ends every list (r[n]), so merges need no bounds checks. */
#define SENTINEL ((range_t){UINT64_MAX, UINT64_MAX})

/* Disjoint ranges sorted by offset, storage from the pool, r[n] == SENTINEL. */
typedef struct range_list {
  range_t *r;
  uint32_t n, cap;
} range_list_t;

/* A buffer in a block it covers only in part: its exact steps and bytes. */
typedef struct raw_chunk {
  uint32_t start, end;
  range_t bytes;
} raw_chunk_t;

typedef struct tree_node {
  range_list_t own; /* buffers covering this node's blocks whole, stored here */
  range_list_t sub; /* every buffer stored at or below this node, or touching its blocks */
  /* The union of own here and at every node above, built when a query needs it and kept
   * while neither this own nor the path above has changed (stamps of h->clock). */
  range_list_t path;
  uint64_t own_changed, path_built, path_built_on;
  uint64_t path_own_seen; /* own_changed when path was built */
  uint32_t path_above;    /* the node with an own union above, whose path this one extends */
} tree_node_t;

/* Bump allocation for the range lists, freed all at once. */
typedef struct pool_block {
  struct pool_block *next;
  size_t used, cap;
  range_t items[];
} pool_block_t;

typedef struct heap_state {
  unsigned block_bits; /* W = 1 << block_bits steps per block */
  size_t leaves;       /* power of two >= number of blocks */
  int sub_levels; /* sub unions are kept up to this level (no query still to come reads higher) */
  tree_node_t *node;  /* 2 * leaves, heap order: node 1 is the root, leaf b is leaves + b */
  uint32_t *own_mask; /* per block: bit l set when its ancestor at level l has an own union */
  uint32_t *raw_at;   /* per block: first slot in raw[] */
  uint32_t *raw_n;    /* per block: slots filled */
  raw_chunk_t *raw;
  pool_block_t *pool;
  uint64_t clock; /* stamps changes of own unions and builds of path unions */
  /* The union of the ranges in the way of the buffer being placed (sorted, disjoint, a
   * sentinel after the last), built from the lists and raw chunks the query reads. */
  range_t *acc, *tmp; /* tmp: the other buffer of merges */
  size_t n_acc, cap_acc;
} heap_state_t;

/* ---- range lists ---- */

static range_t *pool_take(heap_state_t *h, size_t n) {
  pool_block_t *b = h->pool;
  if (!b || b->cap - b->used < n) {
    size_t cap = n > 8192 ? n : 8192;
    b = malloc(sizeof *b + cap * sizeof(range_t));
    if (!b)
      return NULL;
    b->used = 0;
    b->cap = cap;
    b->next = h->pool;
    h->pool = b;
  }
  range_t *r = b->items + b->used;
  b->used += n;
  return r;
}

/* Adds [lo, hi) to the sorted, disjoint ranges r[0..n) (r[n] the sentinel, room for n + 2),
 * merging the ones it overlaps or touches; the search starts at `from` (no range before it
 * reaches lo). Returns the new count; *at is where [lo, hi) now lies, the place to start the
 * next search from when adding ranges in order. */
static inline uint32_t ranges_add(range_t *r, uint32_t n, uint32_t from, uint64_t lo, uint64_t hi,
                                  uint32_t *at) {
  uint32_t i = from;
  while (r[i].hi < lo) /* the sentinel stops it */
    i++;
  *at = i;
  if (i == n || r[i].lo > hi) { /* a range of its own: the rest and the sentinel move up */
    for (uint32_t k = n + 1; k > i; k--)
      r[k] = r[k - 1];
    r[i] = (range_t){lo, hi};
    return n + 1;
  }
  if (r[i].lo <= lo && r[i].hi >= hi)
    return n; /* already inside */
  uint32_t j = i + 1;
  while (j < n && r[j].lo <= hi)
    j++;
  uint64_t last_hi = r[j - 1].hi;
  r[i] = (range_t){r[i].lo < lo ? r[i].lo : lo, hi > last_hi ? hi : last_hi};
  if (j > i + 1) /* r[i + 1..j) were merged into r[i] */
    for (uint32_t k = j; k <= n; k++)
      r[k - (j - i - 1)] = r[k];
  return n - (j - i - 1);
}

/* Adds [lo, hi) to the union in l; false when memory ran out. */
static bool list_add(heap_state_t *h, range_list_t *l, uint64_t lo, uint64_t hi) {
  uint32_t n = l->n, from = 0, at;
  if (n + 2 > l->cap) {
    uint32_t cap = l->cap ? l->cap * 2 : 4;
    range_t *grown = pool_take(h, cap);
    if (!grown)
      return false;
    if (n)
      memcpy(grown, l->r, n * sizeof *grown);
    grown[n] = SENTINEL;
    l->r = grown;
    l->cap = cap;
  }
  if (n > 16) { /* long lists (high in the tree): binary search */
    uint32_t a = 0, b = n;
    while (a < b) {
      uint32_t mid = a + (b - a) / 2;
      if (l->r[mid].hi < lo)
        a = mid + 1;
      else
        b = mid;
    }
    from = a;
  }
  l->n = ranges_add(l->r, n, from, lo, hi, &at);
  return true;
}

/* The union of the sorted, disjoint ranges a[0..na) and b[0..nb) into out (room for
 * na + nb + 1: a sentinel ends it); returns its count. Linear, whatever the lengths. */
static uint32_t merge_ranges(const range_t *a, uint32_t na, const range_t *b, uint32_t nb,
                             range_t *out) {
  uint32_t i = 0, j = 0, n = 0;
  while (i < na || j < nb) {
    range_t x = j == nb || (i < na && a[i].lo <= b[j].lo) ? a[i++] : b[j++];
    if (n && x.lo <= out[n - 1].hi) {
      if (x.hi > out[n - 1].hi)
        out[n - 1].hi = x.hi;
    } else {
      out[n++] = x;
    }
  }
  out[n] = SENTINEL;
  return n;
}

static bool acc_reserve(heap_state_t *h, size_t need) {
  if (need <= h->cap_acc)
    return true;
  size_t cap = h->cap_acc ? h->cap_acc : 64;
  while (cap < need)
    cap *= 2;
  range_t *a = realloc(h->acc, cap * sizeof *a);
  if (a)
    h->acc = a;
  range_t *t = a ? realloc(h->tmp, cap * sizeof *t) : NULL;
  if (!t)
    return false;
  h->tmp = t;
  h->cap_acc = cap;
  return true;
}

/* Adds the ranges of l (sorted, a sentinel after them) to the union acc: a few one by one,
 * each search starting where the last one ended; more by a merge, so that a union of
 * thousands of ranges (hostile input) costs linear time per list. */
static bool acc_list(heap_state_t *h, const range_list_t *l) {
  uint32_t n = l->n, na = (uint32_t)h->n_acc;
  if (!n)
    return true;
  if (!acc_reserve(h, (size_t)na + n + 2))
    return false;
  if (!na) {
    memcpy(h->acc, l->r, (n + 1) * sizeof *l->r);
    h->n_acc = n;
    return true;
  }
  if (n > 8) {
    h->n_acc = merge_ranges(h->acc, na, l->r, n, h->tmp);
    range_t *t = h->acc;
    h->acc = h->tmp;
    h->tmp = t;
    return true;
  }
  uint32_t at = 0;
  for (uint32_t k = 0; k < n; k++)
    na = ranges_add(h->acc, na, at, l->r[k].lo, l->r[k].hi, &at);
  h->n_acc = na;
  return true;
}

/* ---- the block tree ---- */

static uint64_t align_up(uint64_t v, uint64_t a) {
  if (a <= 1)
    return v;
  uint64_t r = v % a;
  if (!r)
    return v;
  return v + (a - r) < v ? UINT64_MAX : v + (a - r);
}

static bool block_is_whole(size_t b, size_t first_whole, size_t end_whole) {
  return b >= first_whole && b < end_whole;
}

/* Rebuilds nd->path as the path union of node `above` (0: none) plus nd->own. */
static bool build_path(heap_state_t *h, tree_node_t *nd, uint32_t above) {
  const range_list_t *up = above ? &h->node[above].path : NULL;
  uint32_t n_up = up ? up->n : 0, need = n_up + nd->own.n + 2;
  if (need > nd->path.cap) {
    uint32_t cap = nd->path.cap ? nd->path.cap : 4;
    while (cap < need)
      cap *= 2;
    if (!(nd->path.r = pool_take(h, cap)))
      return false;
    nd->path.cap = cap;
  }
  nd->path.n = merge_ranges(up ? up->r : NULL, n_up, nd->own.r, nd->own.n, nd->path.r);
  return true;
}

/* The union of the own lists above leaf (the levels in `mask`), into *out (NULL when there
 * are none): each node's path union, rebuilt top-down where something above has changed. */
static bool path_union(heap_state_t *h, size_t leaf, uint32_t mask, const range_list_t **out) {
  uint32_t above = 0;
  uint64_t above_built = 0;
  while (mask) {
    unsigned lv = 31u - (unsigned)__builtin_clz(mask);
    mask &= ~(1u << lv);
    uint32_t v = (uint32_t)(leaf >> lv);
    tree_node_t *nd = &h->node[v];
    if (nd->path_above != above || nd->path_built_on != above_built ||
        nd->path_own_seen != nd->own_changed) {
      if (!build_path(h, nd, above))
        return false;
      nd->path_above = above;
      nd->path_built_on = above_built;
      nd->path_own_seen = nd->own_changed;
      nd->path_built = ++h->clock;
    }
    above = v;
    above_built = nd->path_built;
  }
  *out = above ? &h->node[above].path : NULL;
  return true;
}

/* Sub unions are kept at every SUB_STRIDE-th level only: an insertion updates fewer of them,
 * and the few queries that read a node in between read its children instead. */
#define SUB_STRIDE 2u

/* Adds everything under node v (at `level`) to the union: its sub union, or, between the
 * levels that keep them, its own union and its children's everything. */
static bool acc_under(heap_state_t *h, size_t v, unsigned level) {
  if (level % SUB_STRIDE == 0)
    return acc_list(h, &h->node[v].sub);
  return acc_list(h, &h->node[v].own) && acc_under(h, 2 * v, level - 1) &&
         acc_under(h, 2 * v + 1, level - 1);
}

/* Adds to the union acc the bytes of the placed buffers that overlap steps [s, e). */
static bool query(heap_state_t *h, uint32_t s, uint32_t e) {
  unsigned wb = h->block_bits;
  size_t t0 = s >> wb, t1 = (e - 1) >> wb;                        /* blocks touched */
  size_t f0 = ((uint64_t)s + (1u << wb) - 1) >> wb, f1 = e >> wb; /* blocks inside */
  size_t leaf0 = h->leaves + t0, leaf1 = h->leaves + t1;
  /* Buffers covering a whole node above either end block. */
  const range_list_t *above0 = NULL, *above1 = NULL;
  if (!path_union(h, leaf0, h->own_mask[t0], &above0) || (above0 && !acc_list(h, above0)))
    return false;
  if (t1 != t0 && (!path_union(h, leaf1, h->own_mask[t1], &above1) ||
                   (above1 && above1 != above0 && !acc_list(h, above1))))
    return false;
  /* Everything under the nodes that make up the blocks inside. */
  unsigned level = 0;
  for (size_t l = h->leaves + f0, r = h->leaves + f1; l < r; l >>= 1, r >>= 1, level++) {
    if ((l & 1) && !acc_under(h, l++, level))
      return false;
    if ((r & 1) && !acc_under(h, --r, level))
      return false;
  }
  /* The end blocks, step by step. */
  for (int k = 0; k < 2; k++) {
    size_t b = k ? t1 : t0;
    if ((k && t1 == t0) || block_is_whole(b, f0, f1))
      continue;
    const raw_chunk_t *c = h->raw + h->raw_at[b];
    uint32_t n = h->raw_n[b], na = (uint32_t)h->n_acc, at;
    if (!acc_reserve(h, na + n + 2))
      return false;
    if (!na)
      h->acc[0] = SENTINEL;
    for (uint32_t i = 0; i < n; i++)
      if (c[i].start < e && c[i].end > s)
        na = ranges_add(h->acc, na, 0, c[i].bytes.lo, c[i].bytes.hi, &at);
    h->n_acc = na;
  }
  return true;
}

/* Sets bit `level` in the own masks of the blocks under node v. */
static void mark_own(heap_state_t *h, size_t v, unsigned level) {
  size_t first = (v << level) - h->leaves, n = (size_t)1 << level;
  for (size_t b = first; b < first + n; b++)
    h->own_mask[b] |= 1u << level;
}

/* Enters a placed buffer: steps [s, e), bytes r. */
static bool insert(heap_state_t *h, uint32_t s, uint32_t e, range_t r) {
  unsigned wb = h->block_bits;
  size_t t0 = s >> wb, t1 = (e - 1) >> wb;
  size_t f0 = ((uint64_t)s + (1u << wb) - 1) >> wb, f1 = e >> wb;
  bool ok = true;
  unsigned level = 0;
  for (size_t l = h->leaves + f0, rr = h->leaves + f1; ok && l < rr; l >>= 1, rr >>= 1, level++) {
    size_t v[2], nv = 0;
    if (l & 1)
      v[nv++] = l++;
    if (rr & 1)
      v[nv++] = --rr;
    for (size_t k = 0; ok && k < nv; k++) {
      if (!h->node[v[k]].own.n)
        mark_own(h, v[k], level);
      ok = list_add(h, &h->node[v[k]].own, r.lo, r.hi);
      h->node[v[k]].own_changed = ++h->clock;
      if (ok && level % SUB_STRIDE == 0 && (int)level <= h->sub_levels)
        ok = list_add(h, &h->node[v[k]].sub, r.lo, r.hi);
    }
  }
  size_t leaf0 = h->leaves + t0, leaf1 = h->leaves + t1;
  for (int lv = 0; ok && lv <= h->sub_levels; lv += (int)SUB_STRIDE) {
    ok = list_add(h, &h->node[leaf0 >> lv].sub, r.lo, r.hi);
    if (ok && (leaf1 >> lv) != (leaf0 >> lv))
      ok = list_add(h, &h->node[leaf1 >> lv].sub, r.lo, r.hi);
  }
  for (int k = 0; ok && k < 2; k++) {
    size_t b = k ? t1 : t0;
    if ((k && t1 == t0) || block_is_whole(b, f0, f1))
      continue;
    h->raw[h->raw_at[b] + h->raw_n[b]++] = (raw_chunk_t){s, e, r};
  }
  return ok;
}

/* ---- best fit ---- */

/* The best-fit offset for `size` in the union of the ranges in the way: the smallest gap
 * between them that holds it (the lowest of equal ones), else just above them. As XLA's
 * GlobalDecreasingSizeBestFitHeap (MakeFreeChunks, SlicedAllocationFinder::Find), the space
 * above the last range in the way is one free chunk of unbounded size, whatever the heap's
 * current top: it is taken only when no gap holds the buffer. */
static uint64_t best_fit(heap_state_t *h, uint64_t size) {
  uint64_t best = UINT64_MAX, best_gap = UINT64_MAX, cursor = 0;
  for (size_t i = 0; i < h->n_acc; i++) {
    const range_t *c = &h->acc[i];
    if (c->lo > cursor) {
      uint64_t gap = c->lo - cursor;
      if (gap >= size && gap < best_gap) {
        best = cursor;
        best_gap = gap;
      }
    }
    if (c->hi > cursor)
      cursor = c->hi;
  }
  return best != UINT64_MAX ? best : cursor;
}

/* ---- setting up ---- */

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

typedef struct order_key {
  uint64_t size;     /* the largest member's */
  uint32_t duration; /* from the earliest start to the latest end of the members */
  uint32_t index;    /* the group's first interval: ties go to the earlier */
  uint32_t group;
  uint32_t count;      /* members */
  uint32_t start, end; /* of a group of one: so placing it reads no interval */
} order_key_t;

/* Byte d of a key's sort order, least significant first, inverted so that larger ones come
 * first. Spatial: durations (bytes 0-3) then sizes (4-11); temporal: sizes (0-7) then
 * durations (8-11). */
static unsigned key_byte(const order_key_t *k, unsigned d, hlo_heap_order_t how) {
  if (how == HLO_HEAP_TEMPORAL)
    return 255u - (unsigned)(((d < 8 ? k->size : k->duration) >> (8 * (d < 8 ? d : d - 8))) & 0xff);
  uint64_t v = d < 4 ? k->duration : k->size;
  return 255u - (unsigned)((v >> (8 * (d < 4 ? d : d - 4))) & 0xff);
}

/* Sorts keys made in index order by XLA's spatial order (size, largest first, then duration,
 * longest first) or its temporal one (duration, then size), ties staying in index order: a
 * stable radix sort on the bytes of the secondary key, then of the primary, skipping the bytes
 * every key shares. */
static bool sort_placement(order_key_t *keys, size_t n, hlo_heap_order_t how) {
  order_key_t *tmp = malloc(n * sizeof *tmp);
  size_t(*count)[256] = calloc(12, sizeof *count);
  if (!tmp || !count) {
    free(tmp);
    free(count);
    return false;
  }
  for (size_t i = 0; i < n; i++)
    for (unsigned d = 0; d < 12; d++)
      count[d][key_byte(&keys[i], d, how)]++;
  order_key_t *from = keys, *to = tmp;
  for (unsigned d = 0; d < 12; d++) {
    size_t at = 0;
    bool trivial = false;
    for (unsigned b = 0; b < 256; b++) {
      size_t c = count[d][b];
      trivial = trivial || c == n;
      count[d][b] = at;
      at += c;
    }
    if (trivial)
      continue;
    for (size_t i = 0; i < n; i++)
      to[count[d][key_byte(&from[i], d, how)]++] = from[i];
    order_key_t *t = from;
    from = to;
    to = t;
  }
  if (from != keys)
    memcpy(keys, from, n * sizeof *keys);
  free(tmp);
  free(count);
  return true;
}

/* The groups in placement order: by their largest member, then the span they cover (the
 * temporal order: the span, then the largest member), then their first interval. */
static order_key_t *placement_order(const hlo_interval_t *iv, size_t n, const heap_groups_t *g,
                                    const uint32_t *ev, hlo_heap_order_t how) {
  order_key_t *order = malloc((g->n + 1) * sizeof *order);
  uint32_t *group_at = malloc(n * sizeof *group_at); /* first interval → its group */
  bool ok = order && group_at;
  for (size_t i = 0; ok && i < n; i++)
    group_at[i] = UINT32_MAX;
  for (size_t k = 0; ok && k < g->n; k++)
    group_at[g->members[g->first[k]]] = (uint32_t)k; /* members are in index order */
  size_t m = 0;
  for (size_t i = 0; ok && i < n; i++) {
    uint32_t k = group_at[i];
    if (k == UINT32_MAX)
      continue;
    uint64_t size = 0;
    uint32_t lo = UINT32_MAX, hi = 0, elo = UINT32_MAX, ehi = 0, lead = UINT32_MAX;
    for (uint32_t j = 0; j < g->count[k]; j++) {
      uint32_t x_at = g->members[g->first[k] + j];
      const hlo_interval_t *x = &iv[x_at];
      size = x->size > size ? x->size : size;
      if (lead == UINT32_MAX || x->start < iv[lead].start)
        lead = x_at;
      lo = x->start < lo ? x->start : lo;
      hi = x->end > hi ? x->end : hi;
      if (ev) {
        elo = ev[2 * x_at] < elo ? ev[2 * x_at] : elo;
        ehi = ev[2 * x_at + 1] > ehi ? ev[2 * x_at + 1] : ehi;
      }
    }
    /* XLA's spatial order reads the duration of the interval it allocates (the group's
     * first) alone, not of what shares it; its temporal order extends it to them all. */
    if (ev && how == HLO_HEAP_SPATIAL) {
      elo = ev[2 * lead];
      ehi = ev[2 * lead + 1];
    }
    uint32_t span = ev ? (ehi > elo ? ehi - elo : 0) : (hi > lo ? hi - lo : 0);
    order[m++] = (order_key_t){size, span, (uint32_t)i, k, g->count[k], lo, hi};
  }
  free(group_at);
  if (ok && sort_placement(order, m, how))
    return order;
  free(order);
  return NULL;
}

static bool takes_space(const hlo_interval_t *x) { return x->size && x->end > x->start; }

/* Block size, tree and raw slots for the intervals that take space. Blocks hold 32 to 64
 * buffer ends each, whatever the density: fewer make the tree deeper, more make the raw
 * lists long (measured on the shared modules, blocks of 32 to 128 steps do best). */
static bool build_tree(heap_state_t *h, const hlo_interval_t *iv, size_t n) {
  uint64_t steps = 1, ends = 0;
  for (size_t i = 0; i < n; i++)
    if (takes_space(&iv[i])) {
      steps = iv[i].end > steps ? iv[i].end : steps;
      ends += 2;
    }
  /* It stops with fewer than ends / 64 + 1 < 2^27 blocks (or 4 blocks of 2^30 steps), so the
   * levels of the tree fit the 32-bit own masks. */
  h->block_bits = 0;
  while (h->block_bits < 30 && ((uint64_t)2 << h->block_bits) * ends <= 128 * steps)
    h->block_bits++;
  size_t blocks = (size_t)((steps - 1) >> h->block_bits) + 1;
  h->leaves = 1;
  while (h->leaves < blocks)
    h->leaves *= 2;
  h->node = calloc(2 * h->leaves, sizeof *h->node);
  h->own_mask = calloc(h->leaves, sizeof *h->own_mask);
  h->raw_at = calloc(h->leaves + 1, sizeof *h->raw_at);
  h->raw_n = calloc(h->leaves, sizeof *h->raw_n);
  if (!h->node || !h->own_mask || !h->raw_at || !h->raw_n)
    return false;
  /* Raw slots: each interval in the one or two blocks it covers in part. */
  unsigned wb = h->block_bits;
  for (size_t i = 0; i < n; i++) {
    if (!takes_space(&iv[i]))
      continue;
    size_t t0 = iv[i].start >> wb, t1 = (iv[i].end - 1) >> wb;
    size_t f0 = ((uint64_t)iv[i].start + (1u << wb) - 1) >> wb, f1 = iv[i].end >> wb;
    if (!block_is_whole(t0, f0, f1))
      h->raw_at[t0 + 1]++;
    if (t1 != t0 && !block_is_whole(t1, f0, f1))
      h->raw_at[t1 + 1]++;
  }
  for (size_t b = 1; b <= h->leaves; b++)
    h->raw_at[b] += h->raw_at[b - 1];
  h->raw = malloc(((size_t)h->raw_at[h->leaves] + 1) * sizeof *h->raw);
  return h->raw != NULL;
}

static void free_state(heap_state_t *h) {
  for (pool_block_t *b = h->pool, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  free(h->node);
  free(h->own_mask);
  free(h->raw_at);
  free(h->raw_n);
  free(h->raw);
  free(h->acc);
  free(h->tmp);
}

/* Enters a placed interval at `offset`; false if memory ran out. */
static bool place_member(heap_state_t *h, hlo_interval_t *x, uint32_t start, uint32_t end,
                         uint64_t size, uint64_t offset, uint64_t alignment) {
  bool placed = size && end > start;
  x->offset = placed ? offset : 0;
  uint64_t hi = offset + size < offset ? UINT64_MAX : offset + size;
  return !placed || insert(h, start, end, (range_t){offset, align_up(hi, alignment)});
}

/* Places one group (its members at one offset); false if memory ran out. */
static bool place_group(heap_state_t *h, hlo_interval_t *iv, const order_key_t *key,
                        const heap_groups_t *g, uint64_t alignment, uint64_t *top) {
  /* Ranges in the way of any member: the group needs a gap free during each of them. */
  h->n_acc = 0;
  bool alone = key->count == 1;
  const uint32_t *mem = alone ? NULL : &g->members[g->first[key->group]];
  if (alone && key->size && key->end > key->start && !query(h, key->start, key->end))
    return false;
  for (uint32_t j = 0; !alone && j < key->count; j++)
    if (takes_space(&iv[mem[j]]) && !query(h, iv[mem[j]].start, iv[mem[j]].end))
      return false;
  uint64_t size = key->size;
  uint64_t offset = size ? best_fit(h, size) : 0;
  if (size && offset + size > *top)
    *top = offset + size;
  if (alone)
    return place_member(h, &iv[key->index], key->start, key->end, size, offset, alignment);
  for (uint32_t j = 0; j < key->count; j++) {
    hlo_interval_t *x = &iv[mem[j]];
    if (!place_member(h, x, x->start, x->end, x->size, offset, alignment))
      return false;
  }
  return true;
}

/* The highest tree level a query of [s, e) reads a sub union at: log2 of its whole blocks. */
static int query_level(const heap_state_t *h, uint32_t s, uint32_t e) {
  uint64_t f0 = ((uint64_t)s + (1u << h->block_bits) - 1) >> h->block_bits;
  uint64_t f1 = e >> h->block_bits, whole = f1 > f0 ? f1 - f0 : 0;
  int level = -1;
  while (whole >> (level + 1))
    level++;
  return level;
}

/* Per group in placement order: the highest level a later query reads a sub union at, so
 * insertions keep sub unions only that high (long buffers are mostly large and go first). */
static int8_t *sub_levels_needed(const heap_state_t *h, const hlo_interval_t *iv,
                                 const order_key_t *order, const heap_groups_t *g) {
  int8_t *after = malloc(g->n + 1);
  if (!after)
    return NULL;
  int highest = -1;
  for (size_t k = g->n; k-- > 0;) {
    after[k] = (int8_t)highest;
    const order_key_t *key = &order[k];
    for (uint32_t j = 0; j < key->count; j++) {
      const hlo_interval_t *x = key->count == 1 ? NULL : &iv[g->members[g->first[key->group] + j]];
      uint32_t s = x ? x->start : key->start, e = x ? x->end : key->end;
      if ((x ? x->size : key->size) && e > s) {
        int level = query_level(h, s, e);
        highest = level > highest ? level : highest;
      }
    }
  }
  return after;
}

static hbm_status_t best_fit_below(hlo_interval_t *iv, size_t n, uint64_t alignment,
                                   const uint32_t *ev, hlo_heap_order_t how, uint64_t limit,
                                   uint64_t *heap);

hbm_status_t hbm__hlo_best_fit(hlo_interval_t *iv, size_t n, uint64_t alignment, uint64_t *heap) {
  return hbm__hlo_best_fit_order(iv, n, alignment, NULL, HLO_HEAP_SPATIAL, heap);
}

hbm_status_t hbm__hlo_best_fit_order(hlo_interval_t *iv, size_t n, uint64_t alignment,
                                     const uint32_t *ev, hlo_heap_order_t how, uint64_t *heap) {
  return best_fit_below(iv, n, alignment, ev, how, UINT64_MAX, heap);
}

/* Places the intervals in order `how`; stops (its plan unfinished, *heap at least `limit`)
 * once the heap reaches `limit`: such a plan cannot be the smaller one. */
static hbm_status_t best_fit_below(hlo_interval_t *iv, size_t n, uint64_t alignment,
                                   const uint32_t *ev, hlo_heap_order_t how, uint64_t limit,
                                   uint64_t *heap) {
  *heap = 0;
  if (n == 0)
    return HBM_OK;
  if (n >= UINT32_MAX)
    return hbm__error(HBM_ERR_INVALID, "too many buffers for the heap simulator");
  heap_state_t h = {0};
  heap_groups_t g = {0};
  order_key_t *order = NULL;
  bool ok = build_tree(&h, iv, n) && make_groups(iv, n, &g);
  if (ok)
    ok = (order = placement_order(iv, n, &g, ev, how)) != NULL;
  int8_t *levels_after = ok ? sub_levels_needed(&h, iv, order, &g) : NULL;
  ok = ok && levels_after;
  uint64_t top = 0;
  for (size_t k = 0; ok && k < g.n && top < limit; k++) {
    h.sub_levels = levels_after[k];
    ok = place_group(&h, iv, &order[k], &g, alignment, &top);
  }
  free(levels_after);
  *heap = top;
  free(order);
  free_state(&h);
  free(g.members);
  free(g.first);
  free(g.count);
  return ok ? HBM_OK : hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (heap simulator)");
}

static const hlo_interval_t *share_iv;

static int by_share_start(const void *pa, const void *pb) {
  const hlo_interval_t *a = &share_iv[*(const uint32_t *)pa], *b = &share_iv[*(const uint32_t *)pb];
  if (a->share != b->share)
    return a->share < b->share ? -1 : 1;
  return a->start < b->start ? -1 : a->start > b->start;
}

/* Do the members of every share group live one after another (never two at once)? Then
 * each occupies its own bytes whenever it is live, and live sizes add up. */
static bool shares_disjoint(const hlo_interval_t *iv, size_t n, bool *ok) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    k += iv[i].share != 0 && takes_space(&iv[i]);
  if (k == 0)
    return true;
  uint32_t *idx = malloc(k * sizeof *idx);
  if (!idx) {
    *ok = false;
    return false;
  }
  k = 0;
  for (size_t i = 0; i < n; i++)
    if (iv[i].share != 0 && takes_space(&iv[i]))
      idx[k++] = (uint32_t)i;
  share_iv = iv;
  qsort(idx, k, sizeof *idx, by_share_start);
  bool disjoint = true;
  for (size_t j = 1; j < k && disjoint; j++)
    disjoint = iv[idx[j]].share != iv[idx[j - 1]].share || iv[idx[j - 1]].end <= iv[idx[j]].start;
  free(idx);
  return disjoint;
}

/* A lower bound on any placement's heap: at every step the live intervals sit side by side,
 * each but the topmost taking its size rounded up to the alignment (the next offset is
 * aligned), so the heap is at least their aligned sizes less the largest rounding of any.
 * 0 when it cannot be told (memory, or a share group whose members overlap in time). */
static uint64_t heap_lower_bound(const hlo_interval_t *iv, size_t n, uint64_t alignment) {
  uint32_t steps = 0;
  uint64_t slack = 0;
  for (size_t i = 0; i < n; i++) {
    if (!takes_space(&iv[i]))
      continue;
    steps = iv[i].end > steps ? iv[i].end : steps;
    uint64_t rounded = align_up(iv[i].size, alignment) - iv[i].size;
    slack = rounded > slack ? rounded : slack;
  }
  bool ok = true;
  int64_t *delta = shares_disjoint(iv, n, &ok) ? calloc((size_t)steps + 1, sizeof *delta) : NULL;
  if (!delta)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (takes_space(&iv[i])) {
      delta[iv[i].start] += (int64_t)align_up(iv[i].size, alignment);
      delta[iv[i].end] -= (int64_t)align_up(iv[i].size, alignment);
    }
  int64_t live = 0, most = 0;
  for (uint32_t t = 0; t <= steps; t++) {
    live += delta[t];
    most = live > most ? live : most;
  }
  free(delta);
  return (uint64_t)most > slack ? (uint64_t)most - slack : 0;
}

/* XLA's BufferAssigner runs GlobalDecreasingSizeBestFitHeap in both orders, spatial then
 * temporal, and keeps the first of the smallest heaps (ChooseBestHeapAlgorithm), unless a
 * backend gives its own order (neither CPU nor GPU does). The temporal run is skipped when
 * the spatial heap is already as small as any placement can be: it could only tie, and a tie
 * keeps the spatial plan. */
hbm_status_t hbm__hlo_best_fit_events(hlo_interval_t *iv, size_t n, uint64_t alignment,
                                      const uint32_t *ev, uint64_t *heap) {
  hbm_status_t st = hbm__hlo_best_fit_order(iv, n, alignment, ev, HLO_HEAP_SPATIAL, heap);
  if (st != HBM_OK || n < 2 || *heap <= heap_lower_bound(iv, n, alignment))
    return st;
  hlo_interval_t *temporal = malloc(n * sizeof *temporal);
  if (!temporal)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (heap simulator)");
  memcpy(temporal, iv, n * sizeof *temporal);
  uint64_t heap_t = 0;
  st = best_fit_below(temporal, n, alignment, ev, HLO_HEAP_TEMPORAL, *heap, &heap_t);
  if (st == HBM_OK && heap_t < *heap) {
    memcpy(iv, temporal, n * sizeof *iv);
    *heap = heap_t;
  }
  free(temporal);
  return st;
}

/* ------------------------------------------------------------------------------------------ */

/* The step after the last one an interval is live in, as XLA's live range has it: a giver's
 * range runs to the step of the result taking its memory. */
#define GIVES 1u /* share role bits of an interval (giver_marks) */
#define TAKES 2u

static uint32_t xla_end(const hlo_interval_t *iv, const uint8_t *role, uint32_t i) {
  return iv[i].end + (role[i] & GIVES);
}

/* The intervals in XLA's replay order, (start, end, id), into order[]: two stable counting
 * passes, by end then by start (both are steps). false when memory ran out. */
static bool replay_order(const hlo_interval_t *iv, const uint8_t *role, size_t n, uint32_t n_steps,
                         uint32_t *order) {
  uint32_t *count = calloc((size_t)n_steps + 2, sizeof *count);
  uint32_t *by_end = malloc((n + 1) * sizeof *by_end);
  bool ok = count && by_end;
  for (size_t i = 0; ok && i < n; i++)
    count[xla_end(iv, role, (uint32_t)i)]++;
  for (uint32_t s = 1; ok && s <= n_steps + 1; s++)
    count[s] += count[s - 1];
  for (size_t i = n; ok && i-- > 0;)
    by_end[--count[xla_end(iv, role, (uint32_t)i)]] = (uint32_t)i;
  if (ok)
    memset(count, 0, ((size_t)n_steps + 2) * sizeof *count);
  for (size_t i = 0; ok && i < n; i++)
    count[iv[i].start]++;
  for (uint32_t s = 1; ok && s <= n_steps + 1; s++)
    count[s] += count[s - 1];
  for (size_t k = n; ok && k-- > 0;)
    order[--count[iv[by_end[k]].start]] = by_end[k];
  free(count);
  free(by_end);
  return ok;
}

/* Ticks the free of the giver of step s whose memory interval j takes, if any (XLA frees it
 * just before it shares it: ShareWith). givers[g_at .. g_end) are freed at s. A step defines
 * one instruction's values, of which at most one takes memory: linear over all steps. */
static uint32_t free_giver(const hlo_interval_t *iv, const uint8_t *role, uint32_t j,
                           const uint32_t *givers, size_t g_at, size_t g_end, uint32_t *ev,
                           uint8_t *freed, uint32_t tick) {
  for (size_t g = g_at; (role[j] & TAKES) && g < g_end; g++)
    if (!freed[g] && (role[givers[g]] & GIVES) && iv[givers[g]].share == iv[j].share) {
      ev[2 * givers[g] + 1] = tick++;
      freed[g] = 1;
      break;
    }
  return tick;
}

/* XLA's heap simulator counts time in events, not steps: at each step the values defined
 * there are allocated (in (start, end, id) order), then those last read there are freed;
 * every event is one tick. A value whose memory a result takes over (ShareWith) is freed
 * instead as that result is allocated, just before it. Its placement order breaks ties in
 * size by these spans. ev[2i], ev[2i+1]: interval i's alloc and free ticks. NULL when memory
 * ran out. */
static uint32_t *event_times(const hlo_interval_t *iv, const uint8_t *role, size_t n,
                             uint32_t n_steps) {
  uint32_t *order = malloc((n + 1) * sizeof *order);
  uint32_t *ev = malloc((2 * n + 1) * sizeof *ev);
  uint32_t *frees_at = calloc((size_t)n_steps + 2, sizeof *frees_at);
  uint32_t *free_order = malloc((n + 1) * sizeof *free_order);
  uint8_t *freed = calloc(n + 1, 1); /* per slot of free_order: a giver already freed */
  if (!order || !ev || !frees_at || !free_order || !freed ||
      !replay_order(iv, role, n, n_steps, order)) {
    free(order);
    free(ev);
    free(frees_at);
    free(free_order);
    free(freed);
    return NULL;
  }
  /* frees bucketed by the step they happen at (xla_end - 1), keeping the sorted order */
  for (size_t i = 0; i < n; i++)
    frees_at[xla_end(iv, role, (uint32_t)i)]++;
  for (uint32_t s = 1; s <= n_steps + 1; s++)
    frees_at[s] += frees_at[s - 1];
  for (size_t k = n; k-- > 0;)
    free_order[--frees_at[xla_end(iv, role, order[k])]] = order[k];
  uint32_t tick = 0;
  size_t a = 0, f = 0;
  for (uint32_t s = 0; s <= n_steps; s++) {
    size_t f_end = f; /* free_order[f .. f_end): freed at step s */
    while (f_end < n && xla_end(iv, role, free_order[f_end]) == s + 1)
      f_end++;
    for (; a < n && iv[order[a]].start == s; a++) {
      tick = free_giver(iv, role, order[a], free_order, f, f_end, ev, freed, tick);
      ev[2 * order[a]] = tick++;
    }
    for (; f < f_end; f++)
      if (!freed[f])
        ev[2 * free_order[f] + 1] = tick++;
  }
  free(order);
  free(frees_at);
  free(free_order);
  free(freed);
  return ev;
}

/* A buffer's live segments as XLA's heap simulator sees them: one per value (two for a
 * loop value split around its body, see alias.c), made disjoint as HloLiveRange's
 * NormalizeAliasedBuffers does (in (start, end) order each segment ends where the next
 * starts, and the next reaches as far as either), and kept inside the buffer's range. */
typedef struct segment {
  uint32_t start, end; /* [start, end) */
} segment_t;

static int by_segment(const void *pa, const void *pb) {
  const segment_t *a = pa, *b = pb;
  if (a->start != b->start)
    return a->start < b->start ? -1 : 1;
  return a->end < b->end ? -1 : a->end > b->end;
}

static size_t value_segments(const hlo_assignment_t *as, const hlo_buffer_t *b,
                             const uint32_t *vals, uint32_t nv, segment_t *seg) {
  size_t n = 0;
  for (uint32_t k = 0; k < nv; k++) {
    const hlo_value_t *v = &as->values[vals[k]];
    uint32_t end = v->last_use >= as->n_steps ? as->n_steps : v->last_use + 1;
    if (v->split_use != UINT32_MAX && v->split_def < end) {
      seg[n++] = (segment_t){v->def_step, v->split_use + 1};
      seg[n++] = (segment_t){v->split_def, end};
    } else {
      seg[n++] = (segment_t){v->def_step, end};
    }
  }
  qsort(seg, n, sizeof *seg, by_segment);
  for (size_t i = 0; i + 1 < n; i++) {
    if (seg[i + 1].end < seg[i].end)
      seg[i + 1].end = seg[i].end;
    if (seg[i].end > seg[i + 1].start + 1) /* XLA's ends are inclusive */
      seg[i].end = seg[i + 1].start + 1;
  }
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t lo = seg[i].start < b->start ? b->start : seg[i].start;
    uint32_t hi = seg[i].end > b->end ? b->end : seg[i].end;
    if (hi > lo)
      seg[m++] = (segment_t){lo, hi};
  }
  return m;
}

/* Values of each buffer (a CSR over buffers); NULL when memory ran out. */
static uint32_t *values_by_buffer(const hlo_assignment_t *as, uint32_t **first_out) {
  uint32_t *first = calloc((size_t)as->n_buffers + 2, sizeof *first);
  uint32_t *vals = malloc(((size_t)as->n_values + 1) * sizeof *vals);
  if (!first || !vals) {
    free(first);
    free(vals);
    return NULL;
  }
  for (uint32_t v = 0; v < as->n_values; v++)
    if (as->value_buffer[v] != UINT32_MAX)
      first[as->value_buffer[v] + 2]++;
  for (uint32_t b = 0; b < as->n_buffers; b++)
    first[b + 2] += first[b + 1];
  for (uint32_t v = 0; v < as->n_values; v++)
    if (as->value_buffer[v] != UINT32_MAX)
      vals[first[as->value_buffer[v] + 1]++] = v;
  *first_out = first;
  return vals;
}

typedef struct color_ivs {
  hlo_vec_t iv;    /* hlo_interval_t */
  uint32_t *iv_of; /* buffer → its first interval, UINT32_MAX */
  uint32_t *iv_n;  /* buffer → how many intervals it has */
  int64_t *delta;  /* live temp bytes, by step */
  segment_t *seg;  /* scratch */
} color_ivs_t;

static bool push_interval(color_ivs_t *c, hlo_interval_t x) {
  if (!hbm__hlo_vec_push(&c->iv, &x))
    return false;
  c->delta[x.start] += (int64_t)x.size;
  c->delta[x.end] -= (int64_t)x.size;
  return true;
}

/* Records the union of a buffer's segments when it has gaps (b->n_segs, as->segs). */
static bool record_gaps(hlo_assignment_t *as, hlo_buffer_t *b, const segment_t *seg, size_t m) {
  uint32_t at = as->n_segs, n = 0;
  for (size_t k = 0; k < m; k++) {
    if (n && seg[k].start <= as->segs[2 * (at + n - 1) + 1]) {
      if (seg[k].end > as->segs[2 * (at + n - 1) + 1])
        as->segs[2 * (at + n - 1) + 1] = seg[k].end;
      continue;
    }
    if (at + n == as->segs_cap) {
      uint32_t cap = as->segs_cap ? 2 * as->segs_cap : 64;
      uint32_t *grown = realloc(as->segs, 2 * (size_t)cap * sizeof *grown);
      if (!grown)
        return false;
      as->segs = grown;
      as->segs_cap = cap;
    }
    as->segs[2 * (at + n)] = seg[k].start;
    as->segs[2 * (at + n) + 1] = seg[k].end;
    n++;
  }
  if (n > 1) {
    b->n_segs = n;
    b->seg_at = at;
    as->n_segs = at + n;
  }
  return true;
}

/* The intervals of one heap buffer: its range, or with the XLA backends one per value
 * segment (as XLA's HloValues, even where they follow each other without a gap), placed at
 * one offset (a share group of their own, or the buffer's). */
static bool buffer_intervals(color_ivs_t *c, hlo_assignment_t *as, uint32_t i, uint32_t share,
                             const uint32_t *vfirst, const uint32_t *vals) {
  hlo_buffer_t *b = &as->buffers[i];
  size_t m = 0;
  if (vals && vfirst[i + 1] - vfirst[i] > 1)
    m = value_segments(as, b, vals + vfirst[i], vfirst[i + 1] - vfirst[i], c->seg);
  else if (vals && vfirst[i + 1] - vfirst[i] == 1 &&
           as->values[vals[vfirst[i]]].split_use != UINT32_MAX)
    m = value_segments(as, b, vals + vfirst[i], 1, c->seg);
  c->iv_of[i] = (uint32_t)c->iv.len;
  c->iv_n[i] = 1;
  if (m <= 1)
    return push_interval(c, (hlo_interval_t){b->start, b->end, b->bytes, 0, share});
  if (!record_gaps(as, b, c->seg, m))
    return false;
  /* Live bytes by the union of the values (once per step), intervals one per value: XLA's
   * heap simulator ticks each value's alloc/share and free, and its spatial order reads the
   * span of the first value alone. */
  for (uint32_t k = 0; k < (b->n_segs ? b->n_segs : 1); k++) {
    const uint32_t *seg = b->n_segs ? &as->segs[2 * (b->seg_at + k)] : NULL;
    c->delta[seg ? seg[0] : b->start] += (int64_t)b->bytes;
    c->delta[seg ? seg[1] : b->end] -= (int64_t)b->bytes;
  }
  c->iv_n[i] = (uint32_t)m;
  for (size_t k = 0; k < m; k++)
    if (!hbm__hlo_vec_push(&c->iv, &(hlo_interval_t){c->seg[k].start, c->seg[k].end, b->bytes, 0,
                                                     share ? share : i + 1}))
      return false;
  return true;
}

/* Per interval, its share role: GIVES on the last interval of a buffer whose memory passes
 * at its end to a result of its share group in this heap, TAKES on that result's first
 * interval (the buffers' `gives` and `takes`); NULL when memory ran out. */
static uint8_t *giver_marks(const hlo_assignment_t *as, int color, const color_ivs_t *c) {
  uint8_t *role = calloc(c->iv.len + 1, 1);
  const hlo_interval_t *iv = c->iv.data;
  for (uint32_t i = 0; role && i < as->n_buffers; i++) {
    const hlo_buffer_t *b = &as->buffers[i];
    uint32_t first = c->iv_of[i];
    if (!(b->gives || b->takes) || b->color != color || first == UINT32_MAX || !iv[first].share)
      continue;
    uint32_t last = first + c->iv_n[i] - 1;
    if (b->gives && iv[last].end == b->end)
      role[last] |= GIVES;
    if (b->takes && iv[first].start == b->start)
      role[first] |= TAKES;
  }
  return role;
}

typedef struct keyed {
  uint64_t key;
  uint32_t buffer;
} keyed_t;

static int by_key(const void *pa, const void *pb) {
  const keyed_t *a = pa, *b = pb;
  if (a->key != b->key)
    return a->key < b->key ? -1 : 1;
  return a->buffer < b->buffer ? -1 : a->buffer > b->buffer;
}

/* The buffers in XLA's HloValue id order (value_order.c), whose ties in placement and in
 * event order this follows; NULL when memory ran out. */
static uint32_t *xla_buffer_order(const hlo_assignment_t *as) {
  uint64_t *key = hbm__hlo_xla_value_keys(as);
  keyed_t *k = malloc(((size_t)as->n_buffers + 1) * sizeof *k);
  uint32_t *order = malloc(((size_t)as->n_buffers + 1) * sizeof *order);
  if (key && k && order) {
    for (uint32_t i = 0; i < as->n_buffers; i++)
      k[i] = (keyed_t){key[i], i};
    qsort(k, as->n_buffers, sizeof *k, by_key);
    for (uint32_t i = 0; i < as->n_buffers; i++)
      order[i] = k[i].buffer;
  } else {
    free(order);
    order = NULL;
  }
  free(key);
  free(k);
  return order;
}

/* Intervals for the temporaries of one colour: one per buffer (per value of a buffer with
 * the XLA backends); buffers of one share group (element-wise reuse) are placed at one
 * offset. */
static hbm_status_t simulate_color(hlo_assignment_t *as, int color, uint64_t alignment,
                                   bool xla_events) {
  uint32_t nb = as->n_buffers;
  color_ivs_t c = {0};
  hbm__hlo_vec_init(&c.iv, sizeof(hlo_interval_t));
  for (uint32_t i = 0; i < nb; i++)
    if (as->buffers[i].color == color)
      as->buffers[i].n_segs = 0;
  uint32_t *group_size = calloc(nb + 1, sizeof *group_size);
  uint32_t *vfirst = NULL, *vals = xla_events ? values_by_buffer(as, &vfirst) : NULL;
  uint32_t *by_id = xla_events ? xla_buffer_order(as) : NULL;
  c.iv_of = malloc((nb + 1) * sizeof *c.iv_of);
  c.iv_n = malloc((nb + 1) * sizeof *c.iv_n);
  c.delta = calloc((size_t)as->n_steps + 2, sizeof *c.delta);
  c.seg = malloc((2 * (size_t)as->n_values + 1) * sizeof *c.seg);
  bool ok = group_size && c.iv_of && c.iv_n && c.delta && c.seg && (!xla_events || (vals && by_id));
  for (uint32_t i = 0; ok && i < nb; i++) {
    const hlo_buffer_t *b = &as->buffers[i];
    if (!b->indefinite && !b->separate && b->color == color && b->end > b->start)
      group_size[b->share_group]++;
  }
  for (uint32_t k = 0; ok && k < nb; k++) {
    uint32_t i = by_id ? by_id[k] : k;
    hlo_buffer_t *b = &as->buffers[i];
    c.iv_of[i] = UINT32_MAX;
    if (b->indefinite || b->color != color || b->end <= b->start)
      continue;
    if (b->separate) { /* its own allocation: live, but not in the heap */
      c.delta[b->start] += (int64_t)b->bytes;
      c.delta[b->end] -= (int64_t)b->bytes;
      continue;
    }
    uint32_t share = group_size[b->share_group] > 1 ? b->share_group + 1 : 0;
    ok = buffer_intervals(&c, as, i, share, vfirst, vals);
  }
  uint64_t heap = 0;
  hlo_interval_t *iv = c.iv.data;
  uint8_t *role = ok && xla_events ? giver_marks(as, color, &c) : NULL;
  uint32_t *ev = role ? event_times(iv, role, c.iv.len, as->n_steps) : NULL;
  free(role);
  hbm_status_t st = !ok || (xla_events && !ev)
                        ? hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (heap simulator)")
                        : hbm__hlo_best_fit_events(iv, c.iv.len, alignment, ev, &heap);
  free(ev);
  if (st == HBM_OK) {
    for (uint32_t i = 0; i < nb; i++)
      if (c.iv_of[i] != UINT32_MAX)
        as->buffers[i].offset = iv[c.iv_of[i]].offset;
    as->heap_bytes[color] = heap;
    int64_t live = 0, peak = 0;
    uint32_t peak_step = 0;
    for (uint32_t s = 0; s < as->n_steps; s++) {
      live += c.delta[s];
      if (live > peak) {
        peak = live;
        peak_step = s;
      }
    }
    as->temp_peak[color] = (uint64_t)peak;
    as->temp_peak_step[color] = peak_step;
  }
  free(c.iv_of);
  free(c.iv_n);
  hbm__hlo_vec_free(&c.iv);
  free(c.delta);
  free(c.seg);
  free(group_size);
  free(vfirst);
  free(vals);
  free(by_id);
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
  as->n_segs = 0;
  as->heap_bytes = calloc((size_t)n_colors, sizeof *as->heap_bytes);
  as->temp_peak = calloc((size_t)n_colors, sizeof *as->temp_peak);
  as->temp_peak_step = calloc((size_t)n_colors, sizeof *as->temp_peak_step);
  if (!as->heap_bytes || !as->temp_peak || !as->temp_peak_step)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (heap simulator)");
  uint64_t alignment = opt && opt->alignment ? opt->alignment : 1;
  for (int c = 0; c < n_colors; c++) {
    hbm_status_t st = simulate_color(as, c, alignment, opt && opt->xla_allocations);
    if (st != HBM_OK)
      return st;
  }
  return opt && opt->xla_allocations ? hbm__hlo_combine_temps(as, alignment) : HBM_OK;
}
