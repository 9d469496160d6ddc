/* bfc.c — the best-fit-with-coalescing arena and the two strategies built on it:
 *   "bfc"    (XLA's default): the whole limit taken from the device at the first allocation,
 *            everything sub-allocated from that one region;
 *   "growth" (XLA_PYTHON_CLIENT_PREALLOCATE=false): regions taken on demand — 2 MiB first,
 *            doubling as XLA's BFC does — freed memory reused, never given back.
 *
 * The arena keeps its metadata on the host and never touches device memory. Chunks are
 * 256-byte multiples (XLA's minimum and rounding). Free chunks sit in segregated lists
 * indexed TLSF-style: a first level per power of two and 32 linear subdivisions of each,
 * with one bitmap per level, so finding a free chunk that surely fits is a few bit scans
 * (O(1)) whatever the number of chunks. When that "good fit" finds nothing, the one class
 * that may still hold a big-enough chunk is searched for its best fit, so an allocation
 * fails only when no free chunk can hold it. Chunks know their address-order neighbours in
 * their region, and a freed chunk merges with free neighbours at once, so no two free
 * chunks are ever adjacent. Chunk records live in one array and refer to each other by
 * index (32 bits), which keeps them small and makes the handle given to the front an
 * index. */
#include "alloc/alloc.h"

#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX
#define SL_BITS 5
#define SL_COUNT (1u << SL_BITS)
#define FL_COUNT 52 /* sizes up to 2^56 units of 256 bytes */
#define MAX_UNITS (1ull << 55)
#define UNIT HBM__MIN_BLOCK

typedef struct chunk {
  uint64_t addr;
  uint64_t size;       /* bytes, a multiple of 256 */
  uint32_t prev, next; /* address-order neighbours in the region (NIL at its ends) */
  uint32_t free_prev;  /* links in the size-class list while free */
  uint32_t free_next;  /* ... and in the list of unused records while unused */
  uint32_t region;
  uint8_t is_free;
  uint8_t fl, sl; /* its class while free */
} chunk_t;

typedef struct region {
  uint64_t base, size;
  uint32_t first; /* its lowest chunk */
  bool live;
} region_t;

struct hbm__arena {
  chunk_t *chunks;
  uint32_t n_chunks, cap_chunks;
  uint32_t unused; /* free list of chunk records */
  region_t *regions;
  uint32_t n_regions, cap_regions;
  uint64_t fl_bitmap;
  uint32_t sl_bitmap[FL_COUNT];
  uint32_t heads[FL_COUNT][SL_COUNT];
  uint64_t reserved;  /* bytes in live regions */
  uint64_t allocated; /* bytes in used chunks */
};

/* ---- size classes ---- */

static unsigned msb64(uint64_t x) { return 63u - (unsigned)__builtin_clzll(x); }

static void size_class(uint64_t units, unsigned *fl, unsigned *sl) {
  if (units < SL_COUNT) {
    *fl = 0;
    *sl = (unsigned)units;
    return;
  }
  unsigned msb = msb64(units);
  *fl = msb - SL_BITS + 1;
  *sl = (unsigned)(units >> (msb - SL_BITS)) & (SL_COUNT - 1);
}

/* The smallest class boundary >= units: every chunk in that class or above fits. */
static uint64_t round_to_class(uint64_t units) {
  if (units < SL_COUNT)
    return units;
  uint64_t step = 1ull << (msb64(units) - SL_BITS);
  return (units + step - 1) & ~(step - 1);
}

/* ---- free lists ---- */

static void insert_free(hbm__arena_t *a, uint32_t i) {
  chunk_t *c = &a->chunks[i];
  unsigned fl, sl;
  size_class(c->size / UNIT, &fl, &sl);
  c->is_free = 1;
  c->fl = (uint8_t)fl;
  c->sl = (uint8_t)sl;
  c->free_prev = NIL;
  c->free_next = a->heads[fl][sl];
  if (c->free_next != NIL)
    a->chunks[c->free_next].free_prev = i;
  a->heads[fl][sl] = i;
  a->fl_bitmap |= 1ull << fl;
  a->sl_bitmap[fl] |= 1u << sl;
}

static void remove_free(hbm__arena_t *a, uint32_t i) {
  chunk_t *c = &a->chunks[i];
  unsigned fl = c->fl, sl = c->sl;
  if (c->free_prev != NIL)
    a->chunks[c->free_prev].free_next = c->free_next;
  else
    a->heads[fl][sl] = c->free_next;
  if (c->free_next != NIL)
    a->chunks[c->free_next].free_prev = c->free_prev;
  if (a->heads[fl][sl] == NIL) {
    a->sl_bitmap[fl] &= ~(1u << sl);
    if (!a->sl_bitmap[fl])
      a->fl_bitmap &= ~(1ull << fl);
  }
  c->is_free = 0;
}

/* The head of the first non-empty class at or above (fl, sl), NIL if none. */
static uint32_t find_class_at_least(const hbm__arena_t *a, unsigned fl, unsigned sl) {
  if (fl >= FL_COUNT)
    return NIL;
  uint32_t sl_map = a->sl_bitmap[fl] & (~0u << sl);
  if (!sl_map) {
    uint64_t fl_map = fl + 1 < 64 ? a->fl_bitmap & (~0ull << (fl + 1)) : 0;
    if (!fl_map)
      return NIL;
    fl = (unsigned)__builtin_ctzll(fl_map);
    sl_map = a->sl_bitmap[fl];
  }
  sl = (unsigned)__builtin_ctz(sl_map);
  return a->heads[fl][sl];
}

/* The smallest chunk of at least `units` in units' own class (the good-fit search skips it,
 * since not all of its chunks fit). */
static uint32_t best_in_own_class(const hbm__arena_t *a, uint64_t units) {
  unsigned fl, sl;
  size_class(units, &fl, &sl);
  uint32_t best = NIL;
  for (uint32_t i = a->heads[fl][sl]; i != NIL; i = a->chunks[i].free_next) {
    const chunk_t *c = &a->chunks[i];
    if (c->size >= units * UNIT && (best == NIL || c->size < a->chunks[best].size))
      best = i;
  }
  return best;
}

/* ---- chunk records ---- */

/* Makes sure n records can be taken without allocating, so that an operation either fails
 * before it changes anything or succeeds. */
static bool reserve_records(hbm__arena_t *a, uint32_t n) {
  uint32_t spare = 0;
  for (uint32_t i = a->unused; i != NIL && spare < n; i = a->chunks[i].free_next)
    spare++;
  if (spare + (a->cap_chunks - a->n_chunks) >= n)
    return true;
  uint32_t cap = a->cap_chunks ? a->cap_chunks * 2 : 64;
  if (cap < a->n_chunks + n || cap > NIL - 1)
    return false;
  chunk_t *grown = realloc(a->chunks, (size_t)cap * sizeof *grown);
  if (!grown)
    return false;
  a->chunks = grown;
  a->cap_chunks = cap;
  return true;
}

static uint32_t take_record(hbm__arena_t *a) {
  uint32_t i = a->unused;
  if (i != NIL)
    a->unused = a->chunks[i].free_next;
  else
    i = a->n_chunks++;
  memset(&a->chunks[i], 0, sizeof a->chunks[i]);
  return i;
}

static void drop_record(hbm__arena_t *a, uint32_t i) {
  a->chunks[i].free_next = a->unused;
  a->chunks[i].size = 0;
  a->unused = i;
}

/* Cuts chunk i at `keep` bytes; the new record (returned) holds the rest and follows i in
 * address order. Records must have been reserved. */
static uint32_t split_chunk(hbm__arena_t *a, uint32_t i, uint64_t keep) {
  uint32_t j = take_record(a);
  chunk_t *c = &a->chunks[i], *rest = &a->chunks[j];
  rest->addr = c->addr + keep;
  rest->size = c->size - keep;
  rest->region = c->region;
  rest->prev = i;
  rest->next = c->next;
  if (c->next != NIL)
    a->chunks[c->next].prev = j;
  c->next = j;
  c->size = keep;
  return j;
}

/* Merges chunk j (which follows i) into i. */
static void merge_next(hbm__arena_t *a, uint32_t i, uint32_t j) {
  chunk_t *c = &a->chunks[i], *n = &a->chunks[j];
  c->size += n->size;
  c->next = n->next;
  if (n->next != NIL)
    a->chunks[n->next].prev = i;
  drop_record(a, j);
}

/* ---- the arena ---- */

hbm__arena_t *hbm__arena_new(void) {
  hbm__arena_t *a = calloc(1, sizeof *a);
  if (!a) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for an allocator arena");
    return NULL;
  }
  a->unused = NIL;
  memset(a->heads, 0xff, sizeof a->heads);
  return a;
}

void hbm__arena_delete(hbm__arena_t *a) {
  if (!a)
    return;
  free(a->chunks);
  free(a->regions);
  free(a);
}

hbm_status_t hbm__arena_add_region(hbm__arena_t *a, uint64_t base, uint64_t size) {
  if (size == 0 || size % UNIT || base % UNIT || size / UNIT > MAX_UNITS)
    return hbm__error(HBM_ERR_INTERNAL, "arena region %#llx+%llu is not 256-byte aligned",
                      (unsigned long long)base, (unsigned long long)size);
  uint32_t r = a->n_regions;
  for (uint32_t i = 0; i < a->n_regions; i++)
    if (!a->regions[i].live)
      r = i;
  if (r == a->n_regions && a->n_regions == a->cap_regions) {
    uint32_t cap = a->cap_regions ? a->cap_regions * 2 : 8;
    region_t *grown = realloc(a->regions, cap * sizeof *grown);
    if (!grown)
      return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for arena regions");
    a->regions = grown;
    a->cap_regions = cap;
  }
  if (!reserve_records(a, 1))
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for arena chunks");
  if (r == a->n_regions)
    a->n_regions++;
  uint32_t i = take_record(a);
  a->chunks[i] = (chunk_t){.addr = base, .size = size, .prev = NIL, .next = NIL, .region = r};
  a->regions[r] = (region_t){.base = base, .size = size, .first = i, .live = true};
  insert_free(a, i);
  a->reserved += size;
  return HBM_OK;
}

hbm_status_t hbm__arena_alloc(hbm__arena_t *a, uint64_t size, uint64_t alignment,
                              hbm__block_t *out) {
  uint64_t units = size / UNIT + (size % UNIT != 0);
  uint64_t pad = alignment > UNIT ? alignment / UNIT - 1 : 0;
  if (size == 0 || units > MAX_UNITS || pad > MAX_UNITS)
    return HBM_ERR_NO_MEMORY;
  uint64_t need = units + pad; /* with pad, any start leaves room to align */
  unsigned fl, sl;
  size_class(round_to_class(need), &fl, &sl);
  uint32_t i = find_class_at_least(a, fl, sl);
  if (i == NIL)
    i = best_in_own_class(a, need);
  if (i == NIL)
    return HBM_ERR_NO_MEMORY;
  if (!reserve_records(a, 2))
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for arena chunks");
  remove_free(a, i);
  uint64_t gap = hbm__round_up(a->chunks[i].addr, alignment) - a->chunks[i].addr;
  if (gap) { /* the unaligned head stays free */
    uint32_t j = split_chunk(a, i, gap);
    insert_free(a, i);
    i = j;
  }
  if (a->chunks[i].size > units * UNIT) /* the tail stays free */
    insert_free(a, split_chunk(a, i, units * UNIT));
  a->allocated += a->chunks[i].size;
  out->addr = a->chunks[i].addr;
  out->allocated = a->chunks[i].size;
  out->handle = i;
  return HBM_OK;
}

void hbm__arena_release(hbm__arena_t *a, const hbm__block_t *b) {
  uint32_t i = (uint32_t)b->handle;
  a->allocated -= a->chunks[i].size;
  uint32_t prev = a->chunks[i].prev, next = a->chunks[i].next;
  if (next != NIL && a->chunks[next].is_free) {
    remove_free(a, next);
    merge_next(a, i, next);
  }
  if (prev != NIL && a->chunks[prev].is_free) {
    remove_free(a, prev);
    merge_next(a, prev, i);
    i = prev;
  }
  insert_free(a, i);
}

hbm_status_t hbm__arena_split(hbm__arena_t *a, hbm__block_t *b, uint64_t keep, hbm__block_t *rest) {
  uint32_t i = (uint32_t)b->handle;
  if (keep == 0 || keep % UNIT || keep >= a->chunks[i].size)
    return hbm__error(HBM_ERR_INTERNAL, "arena split at %llu of a %llu-byte chunk",
                      (unsigned long long)keep, (unsigned long long)a->chunks[i].size);
  if (!reserve_records(a, 1))
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for arena chunks");
  uint32_t j = split_chunk(a, i, keep);
  b->allocated = keep;
  rest->addr = a->chunks[j].addr;
  rest->allocated = a->chunks[j].size;
  rest->handle = j;
  return HBM_OK;
}

uint64_t hbm__arena_largest_free(const hbm__arena_t *a) {
  if (!a->fl_bitmap)
    return 0;
  unsigned fl = msb64(a->fl_bitmap);
  unsigned sl = 31u - (unsigned)__builtin_clz(a->sl_bitmap[fl]);
  uint64_t largest = 0;
  for (uint32_t i = a->heads[fl][sl]; i != NIL; i = a->chunks[i].free_next)
    if (a->chunks[i].size > largest)
      largest = a->chunks[i].size;
  return largest;
}

uint64_t hbm__arena_reserved(const hbm__arena_t *a) { return a->reserved; }
uint64_t hbm__arena_allocated(const hbm__arena_t *a) { return a->allocated; }

void hbm__arena_drop_free_regions(hbm__arena_t *a,
                                  void (*release)(void *ctx, uint64_t base, uint64_t size),
                                  void *ctx) {
  for (uint32_t r = 0; r < a->n_regions; r++) {
    region_t *region = &a->regions[r];
    uint32_t first = region->first;
    if (!region->live || !a->chunks[first].is_free || a->chunks[first].size != region->size)
      continue;
    remove_free(a, first);
    drop_record(a, first);
    region->live = false;
    a->reserved -= region->size;
    release(ctx, region->base, region->size);
  }
}

void hbm__arena_for_each_region(const hbm__arena_t *a,
                                void (*fn)(void *ctx, uint64_t base, uint64_t size), void *ctx) {
  for (uint32_t r = 0; r < a->n_regions; r++)
    if (a->regions[r].live)
      fn(ctx, a->regions[r].base, a->regions[r].size);
}

static int compare_region_base(const void *x, const void *y, void *arena) {
  const region_t *regions = ((const hbm__arena_t *)arena)->regions;
  uint64_t a = regions[*(const uint32_t *)x].base, b = regions[*(const uint32_t *)y].base;
  return a < b ? -1 : a > b;
}

hbm_status_t hbm__arena_walk(const hbm__arena_t *a, int (*fn)(const hbm__chunk_info_t *, void *),
                             void *ctx) {
  uint32_t *order = malloc((a->n_regions + 1) * sizeof *order);
  if (!order)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory walking an arena");
  uint32_t n = 0;
  for (uint32_t r = 0; r < a->n_regions; r++)
    if (a->regions[r].live)
      order[n++] = r;
  qsort_r(order, n, sizeof *order, compare_region_base, (void *)a);
  int stop = 0;
  for (uint32_t k = 0; k < n && !stop; k++) {
    const region_t *region = &a->regions[order[k]];
    for (uint32_t i = region->first; i != NIL && !stop; i = a->chunks[i].next) {
      hbm__chunk_info_t info = {.region_base = region->base,
                                .region_size = region->size,
                                .addr = a->chunks[i].addr,
                                .size = a->chunks[i].size,
                                .in_use = !a->chunks[i].is_free};
      stop = fn(&info, ctx);
    }
  }
  free(order);
  return HBM_OK;
}

/* ---- the bfc and growth strategies ---- */

#define FIRST_REGION (2ull << 20)

typedef struct bfc {
  hbm__strategy_t base;
  hbm__arena_t *arena;
  bool preallocate;
  bool preallocated;
  uint64_t next_region; /* growth: the size the next region will have (doubles) */
  uint64_t peak_reserved;
} bfc_t;

static bfc_t *bfc_of(hbm__strategy_t *s) { return (bfc_t *)s; }

static void note_reserved(bfc_t *b) {
  uint64_t reserved = hbm__arena_reserved(b->arena);
  if (reserved > b->peak_reserved)
    b->peak_reserved = reserved;
}

static void device_refused(hbm__failure_t *why, hbm__failure_kind_t kind, uint64_t bytes) {
  why->kind = kind;
  why->device_request = bytes;
  snprintf(why->detail, sizeof why->detail, "%s", hbm_last_error());
}

/* Takes a region from the device and hands it to the arena. */
static hbm_status_t add_device_region(bfc_t *b, uint64_t size, hbm_reserve_op_t op,
                                      hbm__failure_t *why) {
  hbm__strategy_env_t *env = &b->base.env;
  void *base;
  hbm_status_t st = hbm__device_region_alloc(env->device, size, &base);
  if (st != HBM_OK) {
    device_refused(why, op == HBM_RESERVE_PREALLOCATE ? HBM__FAIL_PREALLOC : HBM__FAIL_DEVICE,
                   size);
    return HBM_ERR_NO_MEMORY;
  }
  st = hbm__arena_add_region(b->arena, (uint64_t)(uintptr_t)base, size);
  if (st != HBM_OK) {
    hbm__device_region_free(env->device, base, size);
    why->kind = HBM__FAIL_HOST;
    return st;
  }
  note_reserved(b);
  if (env->on_reserve)
    env->on_reserve(env->ctx, op, (uint64_t)(uintptr_t)base, size);
  return HBM_OK;
}

/* Growth: a new region of at least `need` bytes within the limit. Like XLA, regions double
 * (2 MiB, 4 MiB, ...) so that few are needed; unlike XLA, when the device refuses the doubled
 * size, it asks once for exactly what is needed. */
static hbm_status_t grow(bfc_t *b, uint64_t need, hbm__failure_t *why) {
  uint64_t limit = b->base.env.limit, reserved = hbm__arena_reserved(b->arena);
  uint64_t headroom = limit > reserved ? (limit - reserved) / UNIT * UNIT : 0;
  if (need > headroom) {
    why->kind = HBM__FAIL_LIMIT;
    return HBM_ERR_NO_MEMORY;
  }
  bool increased = false;
  while (need > b->next_region) {
    b->next_region *= 2;
    increased = true;
  }
  uint64_t size = b->next_region < headroom ? b->next_region : headroom;
  hbm_status_t st = add_device_region(b, size, HBM_RESERVE_GROW, why);
  if (st == HBM_ERR_NO_MEMORY && why->kind == HBM__FAIL_DEVICE && size > need)
    st = add_device_region(b, size = need, HBM_RESERVE_GROW, why);
  if (st == HBM_OK && !increased)
    b->next_region *= 2;
  return st;
}

static hbm_status_t bfc_alloc(hbm__strategy_t *s, uint64_t size, uint64_t alignment,
                              hbm_stream_t *stream, hbm__block_t *out, hbm__failure_t *why) {
  bfc_t *b = bfc_of(s);
  (void)stream;
  uint64_t limit = s->env.limit;
  if (size > limit) {
    why->kind = HBM__FAIL_LIMIT;
    return HBM_ERR_NO_MEMORY;
  }
  if (b->preallocate && !b->preallocated) {
    hbm_status_t st = add_device_region(b, limit, HBM_RESERVE_PREALLOCATE, why);
    if (st != HBM_OK)
      return st;
    b->preallocated = true;
  }
  hbm_status_t st = hbm__arena_alloc(b->arena, size, alignment, out);
  if (st != HBM_ERR_NO_MEMORY || b->preallocate) {
    if (st == HBM_ERR_NO_MEMORY)
      why->kind = HBM__FAIL_LIMIT;
    else if (st != HBM_OK)
      why->kind = HBM__FAIL_HOST;
    return st;
  }
  /* Regions are at least region_alignment-aligned; a stricter alignment needs slack. */
  uint64_t align_slack = alignment > s->env.device->region_alignment ? alignment - UNIT : 0;
  st = grow(b, hbm__round_up(size, UNIT) + align_slack, why);
  if (st != HBM_OK)
    return st;
  st = hbm__arena_alloc(b->arena, size, alignment, out);
  if (st != HBM_OK)
    why->kind = st == HBM_ERR_NO_MEMORY ? HBM__FAIL_LIMIT : HBM__FAIL_HOST;
  return st;
}

static void bfc_free(hbm__strategy_t *s, const hbm__block_t *blk, hbm_stream_t *stream,
                     bool ordered) {
  (void)stream, (void)ordered;
  hbm__arena_release(bfc_of(s)->arena, blk);
}

static void bfc_stats(hbm__strategy_t *s, hbm__strategy_stats_t *out) {
  bfc_t *b = bfc_of(s);
  memset(out, 0, sizeof *out);
  out->reserved = hbm__arena_reserved(b->arena);
  out->peak_reserved = b->peak_reserved;
  out->allocated = hbm__arena_allocated(b->arena);
  out->free_bytes = out->reserved - out->allocated;
  out->largest_free = hbm__arena_largest_free(b->arena);
}

static hbm_status_t bfc_walk(hbm__strategy_t *s, int (*fn)(const hbm__chunk_info_t *, void *),
                             void *ctx) {
  return hbm__arena_walk(bfc_of(s)->arena, fn, ctx);
}

/* XLA's BFC allocator never gives memory back, preallocated or grown. */
static hbm_status_t bfc_trim(hbm__strategy_t *s) {
  (void)s;
  return HBM_OK;
}

static uint64_t bfc_largest_free(hbm__strategy_t *s) {
  return hbm__arena_largest_free(bfc_of(s)->arena);
}

static void release_region(void *ctx, uint64_t base, uint64_t size) {
  hbm__strategy_env_t *env = ctx;
  hbm__device_region_free(env->device, (void *)(uintptr_t)base, size);
  if (env->on_reserve)
    env->on_reserve(env->ctx, HBM_RESERVE_RELEASE, base, size);
}

static void bfc_destroy(hbm__strategy_t *s) {
  bfc_t *b = bfc_of(s);
  hbm__arena_for_each_region(b->arena, release_region, &s->env);
  hbm__arena_delete(b->arena);
  free(b);
}

static const hbm__strategy_ops_t bfc_ops = {
    .name = "bfc",
    .alloc = bfc_alloc,
    .free = bfc_free,
    .stats = bfc_stats,
    .walk = bfc_walk,
    .trim = bfc_trim,
    .largest_free = bfc_largest_free,
    .destroy = bfc_destroy,
};

hbm_status_t hbm__bfc_create(const hbm__strategy_env_t *env, bool preallocate,
                             hbm__strategy_t **out) {
  bfc_t *b = calloc(1, sizeof *b);
  if (!b)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for a BFC allocator");
  b->arena = hbm__arena_new();
  if (!b->arena) {
    free(b);
    return HBM_ERR_HOST_MEMORY;
  }
  b->base.ops = &bfc_ops;
  b->base.env = *env;
  b->preallocate = preallocate;
  b->next_region = FIRST_REGION;
  *out = &b->base;
  return HBM_OK;
}
