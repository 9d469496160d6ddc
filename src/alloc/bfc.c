/* bfc.c — the two strategies built on the best-fit arena (arena.c):
 *   "bfc"    (XLA's default): the whole limit taken from the device at the first allocation,
 *            everything sub-allocated from that one region;
 *   "growth" (XLA_PYTHON_CLIENT_PREALLOCATE=false): memory taken on demand, freed memory
 *            reused, never given back (XLA's semantics).
 *
 * Growth differs from XLA in how it grows. XLA takes separate regions of doubling size (2 MiB,
 * 4 MiB, ...), which cannot merge with each other: a freed block at the end of one region
 * and one at the start of the next stay two holes, and the last doubling can take twice what
 * is needed — XLA's growth mode reserves 1.2-2x the peak on real logs. Here, where the device
 * has virtual memory (the sim device, CUDA with VMM), growth reserves an address range the
 * size of the limit once and commits physical memory at its end, granule by granule, exactly
 * as much as the request that did not fit lacks: the arena stays one region whose free tail
 * simply grows, so the reservation follows the arena's high-water mark (1.00-1.04x the peak
 * on the real logs). Without virtual memory it falls back to XLA's doubling regions. */
#include "alloc/alloc.h"

#include <stdlib.h>
#include <string.h>

#define FIRST_REGION (2ull << 20)
/* In a growing range "the high end of a chunk" is often just below where the range will
 * grow next, so fewer blocks go there than in a preallocated arena: on the real logs this
 * threshold keeps the reservation within 1.00-1.04x of the peak (4 MiB: up to 1.07x). */
#define GROWTH_PLACE_HIGH (16ull << 20)
#define UNIT HBM__MIN_BLOCK

/* Physical memory committed at the end of the growth range. */
typedef struct piece {
  uint64_t addr, size;
  hbm__phys_t phys;
} piece_t;

typedef struct bfc {
  hbm__strategy_t base;
  hbm__arena_t *arena;
  bool preallocate;
  bool preallocated;
  uint64_t peak_reserved;
  /* growth on a virtual range */
  bool range_tried;   /* whether reserving it was attempted */
  uint64_t range;     /* its base, 0 when there is none */
  uint64_t range_cap; /* the most that may be committed in it (granule multiple) */
  uint64_t committed;
  piece_t *pieces;
  size_t n_pieces, cap_pieces;
  /* growth by regions (no virtual memory) */
  uint64_t next_region; /* the size the next region will have (doubles) */
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

static void report(bfc_t *b, hbm_reserve_op_t op, uint64_t addr, uint64_t size) {
  hbm__strategy_env_t *env = &b->base.env;
  if (env->on_reserve)
    env->on_reserve(env->ctx, op, addr, size);
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
  st = hbm__arena_add_region(b->arena, (uint64_t)(uintptr_t)base, size, size);
  if (st != HBM_OK) {
    hbm__device_region_free(env->device, base, size);
    why->kind = HBM__FAIL_HOST;
    return st;
  }
  note_reserved(b);
  report(b, op, (uint64_t)(uintptr_t)base, size);
  return HBM_OK;
}

/* ---- growth on a virtual range ---- */

/* Reserves the range once; false (and growth by regions) when the device cannot. */
static bool have_range(bfc_t *b) {
  if (b->range_tried)
    return b->range != 0;
  b->range_tried = true;
  hbm__device_t *d = b->base.env.device;
  uint64_t gran = d->granularity, cap = b->base.env.limit / gran * gran;
  void *base;
  if (cap == 0 || hbm__device_va_reserve(d, cap, &base) != HBM_OK) {
    hbm__error_clear();
    return false;
  }
  b->range = (uint64_t)(uintptr_t)base;
  b->range_cap = cap;
  return true;
}

static bool remember_piece(bfc_t *b, piece_t piece) {
  if (b->n_pieces == b->cap_pieces) {
    piece_t *grown = hbm__grow_array(b->pieces, &b->cap_pieces, b->n_pieces + 1, sizeof *grown, 16);
    if (!grown)
      return false;
    b->pieces = grown;
  }
  b->pieces[b->n_pieces++] = piece;
  return true;
}

/* Commits `size` more bytes (a granule multiple) at the end of the range. */
static hbm_status_t commit(bfc_t *b, uint64_t size, hbm__failure_t *why) {
  hbm__device_t *d = b->base.env.device;
  piece_t piece = {.addr = b->range + b->committed, .size = size};
  if (hbm__device_phys_create(d, size, &piece.phys) != HBM_OK) {
    device_refused(why, HBM__FAIL_DEVICE, size);
    return HBM_ERR_NO_MEMORY;
  }
  hbm_status_t st = hbm__device_map(d, (void *)(uintptr_t)piece.addr, size, piece.phys, 0);
  if (st != HBM_OK) { /* nothing was mapped: nothing to unmap */
    device_refused(why, HBM__FAIL_DEVICE, size);
    hbm__device_phys_release(d, piece.phys, size);
    return HBM_ERR_NO_MEMORY;
  }
  if (!remember_piece(b, piece))
    st = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the growth allocator");
  else
    st = b->committed ? hbm__arena_extend_region(b->arena, b->range, size)
                      : hbm__arena_add_region(b->arena, b->range, size, b->range_cap);
  if (st != HBM_OK) {
    if (b->n_pieces && b->pieces[b->n_pieces - 1].addr == piece.addr)
      b->n_pieces--;
    hbm__device_unmap(d, (void *)(uintptr_t)piece.addr, size);
    hbm__device_phys_release(d, piece.phys, size);
    why->kind = st == HBM_ERR_HOST_MEMORY ? HBM__FAIL_HOST : HBM__FAIL_DEVICE;
    return st == HBM_ERR_HOST_MEMORY ? st : HBM_ERR_NO_MEMORY;
  }
  b->committed += size;
  note_reserved(b);
  report(b, HBM_RESERVE_GROW, piece.addr, size);
  return HBM_OK;
}

/* What a request of `need` bytes lacks beyond the free tail of the range, in whole granules. */
static uint64_t range_shortfall(bfc_t *b, uint64_t need) {
  uint64_t gran = b->base.env.device->granularity;
  uint64_t tail = b->committed ? hbm__arena_free_tail(b->arena, b->range) : 0;
  return hbm__round_up_sat(need > tail ? need - tail : UNIT, gran);
}

/* ---- growth by regions ---- */

/* A new region of at least `need` bytes within the limit. Like XLA, regions double (2 MiB,
 * 4 MiB, ...) so that few are needed; unlike XLA, when the device refuses the doubled size,
 * it asks once for exactly what is needed. */
static hbm_status_t grow_region(bfc_t *b, uint64_t need, uint64_t headroom, hbm__failure_t *why) {
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

static hbm_status_t grow(bfc_t *b, uint64_t need, hbm__failure_t *why) {
  uint64_t limit = b->base.env.limit, reserved = hbm__arena_reserved(b->arena);
  uint64_t headroom = limit > reserved ? (limit - reserved) / UNIT * UNIT : 0;
  if (have_range(b)) {
    uint64_t size = range_shortfall(b, need);
    if (size <= b->range_cap - b->committed && size <= headroom)
      return commit(b, size, why);
    /* the last bytes of a limit that is not a granule multiple: a region of their own */
    if (need <= headroom)
      return add_device_region(b, need, HBM_RESERVE_GROW, why);
  } else if (need <= headroom) {
    return grow_region(b, need, headroom, why);
  }
  why->kind = HBM__FAIL_LIMIT;
  return HBM_ERR_NO_MEMORY;
}

/* ---- the strategy ---- */

static hbm_status_t bfc_alloc(hbm__strategy_t *s, uint64_t size, uint64_t alignment,
                              hbm_stream_t *stream, hbm__block_t *out, hbm__failure_t *why) {
  bfc_t *b = bfc_of(s);
  (void)stream;
  hbm_status_t st = hbm__arena_alloc(b->arena, size, alignment, out);
  if (HBM_LIKELY(st == HBM_OK))
    return st;
  if (st != HBM_ERR_NO_MEMORY) {
    why->kind = HBM__FAIL_HOST;
    return st;
  }
  uint64_t limit = s->env.limit;
  if (size > limit) {
    why->kind = HBM__FAIL_LIMIT;
    return HBM_ERR_NO_MEMORY;
  }
  if (b->preallocate) {
    if (b->preallocated) {
      why->kind = HBM__FAIL_LIMIT;
      return HBM_ERR_NO_MEMORY;
    }
    st = add_device_region(b, limit, HBM_RESERVE_PREALLOCATE, why);
    if (st != HBM_OK)
      return st;
    b->preallocated = true;
  } else {
    /* Regions are at least region_alignment-aligned; a stricter alignment needs slack. */
    uint64_t align_slack = alignment > s->env.device->region_alignment ? alignment - UNIT : 0;
    st = grow(b, hbm__round_up(size, UNIT) + align_slack, why);
    if (st != HBM_OK)
      return st;
  }
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
  bfc_t *b = ctx;
  if (b->range && base == b->range)
    return; /* the growth range: its pieces are released below */
  hbm__device_region_free(b->base.env.device, (void *)(uintptr_t)base, size);
  report(b, HBM_RESERVE_RELEASE, base, size);
}

static void release_range(bfc_t *b) {
  hbm__device_t *d = b->base.env.device;
  for (size_t i = 0; i < b->n_pieces; i++) {
    const piece_t *p = &b->pieces[i];
    hbm__device_unmap(d, (void *)(uintptr_t)p->addr, p->size);
    hbm__device_phys_release(d, p->phys, p->size);
  }
  if (b->committed)
    report(b, HBM_RESERVE_RELEASE, b->range, b->committed);
  if (b->range)
    hbm__device_va_release(d, (void *)(uintptr_t)b->range, b->range_cap);
  free(b->pieces);
}

static void bfc_destroy(hbm__strategy_t *s) {
  bfc_t *b = bfc_of(s);
  hbm__arena_for_each_region(b->arena, release_region, b);
  release_range(b);
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
  b->arena = hbm__arena_new(true);
  if (!b->arena) {
    free(b);
    return HBM_ERR_HOST_MEMORY;
  }
  b->base.ops = &bfc_ops;
  b->base.env = *env;
  b->base.arena = b->arena;
  if (!preallocate)
    hbm__arena_place_high(b->arena, GROWTH_PLACE_HIGH);
  b->preallocate = preallocate;
  b->next_region = FIRST_REGION;
  *out = &b->base;
  return HBM_OK;
}
