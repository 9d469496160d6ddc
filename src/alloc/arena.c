/* arena.c — the best-fit-with-coalescing arena that the bfc, growth, async and expandable
 * strategies sub-allocate from. Its metadata lives on the host; it never touches device
 * memory.
 *
 * Chunks are 256-byte multiples (XLA's minimum and rounding). Free chunks sit in segregated
 * lists indexed TLSF-style: a first level per power of two of the size in 256-byte units and
 * 32 linear subdivisions of each, with one bitmap per level, so the first class that can
 * hold a request is a few bit scans away whatever the number of chunks. Classes below
 * 64 units (16 KiB) hold one size each; above, a class spans about 3% of its sizes.
 *
 * Placement (measured on the real logs in ../shared/traces, see BENCHMARKS.md):
 *   - best fit: the smallest free chunk that holds the request — in the request's own class
 *     (whose chunks may be too small) or else in the next non-empty class — ties going to
 *     the lowest address. Exact best fit with always-split is what keeps a preallocated
 *     arena within 1-3% of the peak; XLA's rule "split only if the chunk is at least twice
 *     the request" is where most of its waste comes from.
 *   - requests of HBM__PLACE_HIGH bytes or more go to the high end of the chosen chunk,
 *     smaller ones to its low end: big, long-lived tensors and small, short-lived ones then
 *     gather at opposite ends of holes, which leaves the holes whole more often.
 *
 * Speed (the hot path of hbm_alloc / hbm_free in the bfc and growth modes):
 *   - chunk records are 32 bytes in one array, linked by 32-bit index, recycled through a
 *     free list: no host allocation once the arena has grown to its working size;
 *   - each region is bracketed by two zero-size sentinel chunks that are never free, so
 *     neighbour checks and relinking need no end-of-region cases;
 *   - the free flag is the low bit of the size;
 *   - splitting leaves the free remainder in the record (and class list) it had, and merging
 *     keeps the surviving free neighbour's, so most operations relink one list entry or none;
 *   - an optional address index finds a used block's record from its address, so that the
 *     front needs no table of its own: a hash table of 32-bit record numbers (open
 *     addressing, Fibonacci hashing of the address, at most an eighth full, backward-shift
 *     deletion), sized by the number of live blocks, not by the address space. (It replaced
 *     one entry per 256 bytes of every region, mapped lazily: on an 8 GiB arena that is
 *     128 MiB of index whose pages were first touched — a page fault, under the device's
 *     lock — whenever a block started somewhere new, hundreds per pass when two threads
 *     interleaved differently every pass, and a TLB miss on most frees.) Each record also
 *     keeps the front's two words for a block: its requested size and its tag;
 *   - branches whose direction is as good as random on real logs are avoided where a select
 *     does (class_of, clearing a list's bits): a mispredicted branch costs 15-20 cycles, and
 *     mispredictions, not instructions, were the largest cost of an allocation and its free;
 *   - hbm__arena_alloc_fast, the front's fast path, counts down `room` (allocations that need
 *     no growth of the records or the index) instead of reserving both on every call. */
#include "alloc/alloc.h"

#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX
#define SL_BITS 5
#define SL_COUNT (1u << SL_BITS)
#define FL_COUNT 52 /* sizes up to 2^56 units of 256 bytes */
#define MAX_UNITS (1ull << 55)
#define UNIT HBM__MIN_BLOCK
#define FREE_BIT 1u
/* A class list longer than this is not searched to its end for the best fit: the first
 * fitting chunks found are compared (in practice lists are far shorter). */
#define SCAN_LIMIT 64
#define HOT static inline __attribute__((always_inline))
#define ROOM_MIN 64    /* allocations that refill_room makes room for, at least */
#define INDEX_SPREAD 8 /* address index slots per live block, at least (addr_index_t says why) */

/* The two link words of a chunk serve whichever state it is in: free (its class list),
 * used (the front's words: requested size, as the bytes short of the chunk's size, and
 * tag), or unused (the list of unused records). */
typedef struct chunk {
  uint64_t addr;
  uint64_t size;       /* bytes (a multiple of 256) | FREE_BIT while free; 0: a sentinel or an
                          unused record */
  uint32_t prev, next; /* address-order neighbours (the region's sentinels at its ends) */
  union {
    uint32_t free_prev; /* free: class-list link */
    uint32_t slack;     /* used: size - requested (< 256) */
  };
  union {
    uint32_t free_next; /* free: class-list link; unused: next unused record */
    uint32_t tag;       /* used: the front's tag index */
  };
} chunk_t;

typedef struct region {
  uint64_t base, size;
  uint64_t max_size;   /* what it may grow to (hbm__arena_extend_region) */
  uint32_t head, tail; /* its sentinels */
  bool live;
} region_t;

/* The address index: slot = record + 1 of a used block (0: empty), at the first free slot at
 * or after the home of its address. At most an eighth full: then a lookup almost always
 * finds its block in the home slot and an insertion or a deletion almost never has a
 * neighbour to step over — each such step is a branch the processor cannot predict (on the
 * real logs, at half full, the three probing loops were a third of the mispredictions of an
 * allocation and its free, 15-20 cycles each; a quarter full was 10-20% slower per operation
 * than an eighth, a sixteenth no faster). Four bytes a slot: 32 bytes per live block. */
typedef struct addr_index {
  uint32_t *slots;
  uint32_t mask; /* capacity - 1 (a power of two), 0 before the first insertion */
  unsigned shift;
  uint32_t count;
} addr_index_t;

struct hbm__arena {
  chunk_t *chunks;
  uint32_t n_chunks, cap_chunks;
  uint32_t unused;   /* free list of chunk records */
  uint32_t n_unused; /* its length */
  region_t *regions;
  uint32_t n_regions, cap_regions;
  uint32_t *by_base; /* live regions in address order */
  uint32_t n_live_regions;
  bool indexed; /* used blocks are in the address index */
  addr_index_t index;
  /* Allocations the arena can make before its records or its index must grow (each takes at
   * most two records and one index entry): counted down by allocations, computed again
   * (growing what must grow) at 0, and set to 0 by anything else that takes records. One
   * test on the hot path instead of two reservations. */
  uint32_t room;
  uint64_t place_high; /* requests of this size or more go to the high end of their chunk */
  uint64_t fl_bitmap;
  uint32_t sl_bitmap[FL_COUNT];
  uint32_t heads[FL_COUNT * SL_COUNT];
  uint64_t reserved;  /* bytes in live regions */
  uint64_t allocated; /* bytes in used chunks */
};

static inline uint64_t size_of(const chunk_t *c) { return c->size & ~(uint64_t)FREE_BIT; }
static inline bool is_free(const chunk_t *c) { return c->size & FREE_BIT; }

/* ---- size classes ---- */

static inline unsigned msb64(uint64_t x) { return 63u - (unsigned)__builtin_clzll(x); }

/* Without a branch or a select: from SL_COUNT units on, the class is fl * SL_COUNT + sl with
 * fl = msb - SL_BITS + 1 and sl the SL_BITS bits below the top one, which is
 * (units >> shift) + shift * SL_COUNT for shift = msb - SL_BITS (the top bit supplies the
 * SL_COUNT); below SL_COUNT units, `| SL_COUNT` makes the shift 0 and the class the size. */
static inline unsigned class_of(uint64_t units) {
  unsigned shift = msb64(units | SL_COUNT) - SL_BITS;
  return (unsigned)(units >> shift) + shift * SL_COUNT;
}

/* ---- free lists ---- */

/* Puts chunk i (its size set, not free) at the head of class list `cls`, its class. */
HOT void insert_free_in(hbm__arena_t *a, uint32_t i, unsigned cls) {
  chunk_t *c = &a->chunks[i];
  unsigned fl = cls / SL_COUNT, sl = cls % SL_COUNT;
  c->size |= FREE_BIT;
  c->free_prev = NIL;
  c->free_next = a->heads[cls];
  if (c->free_next != NIL)
    a->chunks[c->free_next].free_prev = i;
  a->heads[cls] = i;
  a->fl_bitmap |= 1ull << fl;
  a->sl_bitmap[fl] |= 1u << sl;
}

HOT void insert_free(hbm__arena_t *a, uint32_t i) {
  insert_free_in(a, i, class_of(a->chunks[i].size / UNIT));
}

/* Takes free chunk i out of class list `cls` (its class when it was inserted). */
HOT void remove_free_from(hbm__arena_t *a, uint32_t i, unsigned cls) {
  chunk_t *c = &a->chunks[i];
  if (c->free_prev != NIL) {
    a->chunks[c->free_prev].free_next = c->free_next;
  } else { /* the bits of a list left empty are cleared without a branch: unpredictable */
    unsigned fl = cls / SL_COUNT;
    uint32_t emptied = (a->heads[cls] = c->free_next) == NIL;
    uint32_t sl_map = a->sl_bitmap[fl] &= ~(emptied << (cls % SL_COUNT));
    a->fl_bitmap &= ~((uint64_t)(sl_map == 0) << fl);
  }
  if (c->free_next != NIL)
    a->chunks[c->free_next].free_prev = c->free_prev;
  c->size &= ~(uint64_t)FREE_BIT;
}

HOT void remove_free(hbm__arena_t *a, uint32_t i) {
  remove_free_from(a, i, class_of(a->chunks[i].size / UNIT));
}

/* Gives free chunk i, in class list `cls`, a new size, moving it to another class list only
 * if its class changes. */
HOT void resize_free(hbm__arena_t *a, uint32_t i, unsigned cls, uint64_t size) {
  chunk_t *c = &a->chunks[i];
  unsigned to = class_of(size / UNIT);
  if (to == cls) {
    c->size = size | FREE_BIT;
    return;
  }
  remove_free_from(a, i, cls);
  c->size = size;
  insert_free_in(a, i, to);
}

HOT unsigned class_of_chunk(const chunk_t *c) { return class_of(size_of(c) / UNIT); }

/* The first non-empty class strictly above `cls`, or -1. */
static inline int next_class_above(const hbm__arena_t *a, unsigned cls) {
  unsigned fl = cls / SL_COUNT, sl = cls % SL_COUNT;
  uint32_t sl_map = sl + 1 < SL_COUNT ? a->sl_bitmap[fl] & (~0u << (sl + 1)) : 0;
  if (!sl_map) {
    uint64_t fl_map = fl + 1 < 64 ? a->fl_bitmap & (~0ull << (fl + 1)) : 0;
    if (!fl_map)
      return -1;
    fl = (unsigned)__builtin_ctzll(fl_map);
    sl_map = a->sl_bitmap[fl];
  }
  return (int)(fl * SL_COUNT + (unsigned)__builtin_ctz(sl_map));
}

/* The smallest chunk of at least `bytes` in one class list, ties to the lowest address. */
HOT uint32_t best_in_class(const hbm__arena_t *a, unsigned cls, uint64_t bytes) {
  uint32_t head = a->heads[cls];
  const chunk_t *h = &a->chunks[head];
  if (h->free_next == NIL) /* one chunk: the common case */
    return size_of(h) >= bytes ? head : NIL;
  uint32_t best = NIL;
  uint64_t best_size = UINT64_MAX, best_addr = UINT64_MAX;
  unsigned scanned = 0;
  for (uint32_t i = head; i != NIL && scanned < SCAN_LIMIT; i = a->chunks[i].free_next) {
    const chunk_t *c = &a->chunks[i];
    uint64_t size = size_of(c);
    scanned++;
    if (size < bytes)
      continue;
    if (size < best_size || (size == best_size && c->addr < best_addr)) {
      best = i;
      best_size = size;
      best_addr = c->addr;
    }
  }
  if (best == NIL && scanned == SCAN_LIMIT) /* a long list of chunks too small: go on */
    for (uint32_t i = head; i != NIL && best == NIL; i = a->chunks[i].free_next)
      if (size_of(&a->chunks[i]) >= bytes)
        best = i;
  return best;
}

/* The best-fitting free chunk for `units`, NIL if none holds it; *cls gets the class list
 * it is in. */
HOT uint32_t find_best_fit(const hbm__arena_t *a, uint64_t units, unsigned *found_in) {
  unsigned cls = class_of(units);
  uint32_t head = a->heads[cls];
  *found_in = cls;
  if (head != NIL) {
    /* Classes below 2 * SL_COUNT units hold one size: any of their chunks is a best fit
     * (which one barely matters on the real logs, so the head, without a scan). */
    if (units < 2 * SL_COUNT)
      return head;
    const chunk_t *h = &a->chunks[head];
    uint32_t i = h->free_next == NIL ? (size_of(h) >= units * UNIT ? head : NIL)
                                     : best_in_class(a, cls, units * UNIT);
    if (i != NIL)
      return i;
  }
  int above = next_class_above(a, cls);
  if (above < 0)
    return NIL;
  *found_in = (unsigned)above;
  head = a->heads[above];
  return a->chunks[head].free_next == NIL ? head : best_in_class(a, (unsigned)above, units * UNIT);
}

/* ---- chunk records ---- */

static bool grow_records(hbm__arena_t *a, uint32_t n) {
  uint64_t cap = a->cap_chunks ? a->cap_chunks * 2ull : 64, need = (uint64_t)a->n_chunks + n;
  while (cap < need)
    cap *= 2;
  if (cap > NIL - 1)
    return false;
  chunk_t *chunks = realloc(a->chunks, (size_t)cap * sizeof *chunks);
  if (!chunks)
    return false;
  a->chunks = chunks;
  a->cap_chunks = (uint32_t)cap;
  return true;
}

/* Makes sure n records can be taken without allocating, so that an operation either fails
 * before it changes anything or succeeds. */
static inline bool reserve_records(hbm__arena_t *a, uint32_t n) {
  return HBM_LIKELY(a->n_unused + (a->cap_chunks - a->n_chunks) >= n) || grow_records(a, n);
}

static inline uint32_t take_record(hbm__arena_t *a) {
  uint32_t i = a->unused;
  if (i != NIL) {
    a->unused = a->chunks[i].free_next;
    a->n_unused--;
  } else {
    i = a->n_chunks++;
  }
  return i;
}

static inline void drop_record(hbm__arena_t *a, uint32_t i) {
  a->chunks[i].free_next = a->unused;
  a->chunks[i].size = 0;
  a->unused = i;
  a->n_unused++;
}

/* Links record j into the address order right before / after chunk i. */
static inline void link_before(hbm__arena_t *a, uint32_t j, uint32_t i) {
  chunk_t *c = &a->chunks[i], *n = &a->chunks[j];
  n->next = i;
  n->prev = c->prev;
  a->chunks[c->prev].next = j;
  c->prev = j;
}

static inline void link_after(hbm__arena_t *a, uint32_t j, uint32_t i) {
  chunk_t *c = &a->chunks[i], *n = &a->chunks[j];
  n->prev = i;
  n->next = c->next;
  a->chunks[c->next].prev = j;
  c->next = j;
}

/* Takes chunk j out of the address order (its neighbours close up) and drops its record. */
static inline void unlink_chunk(hbm__arena_t *a, uint32_t j) {
  chunk_t *c = &a->chunks[j];
  a->chunks[c->prev].next = c->next;
  a->chunks[c->next].prev = c->prev;
  drop_record(a, j);
}

/* ---- the address index ---- */

static inline uint32_t index_home(const addr_index_t *x, uint64_t addr) {
  return (uint32_t)(((addr / UNIT) * 0x9E3779B97F4A7C15ull) >> x->shift);
}

/* Grows the index to twice its capacity (256 slots at first); false: out of host memory. */
static bool index_grow(hbm__arena_t *a) {
  addr_index_t *x = &a->index;
  uint32_t cap = x->slots ? 2 * (x->mask + 1) : 256;
  uint32_t *slots = cap ? calloc(cap, sizeof *slots) : NULL;
  if (!slots)
    return false;
  addr_index_t grown = {slots, cap - 1, 64u - (unsigned)__builtin_ctz(cap), x->count};
  for (uint32_t i = 0; x->slots && i <= x->mask; i++) {
    uint32_t e = x->slots[i];
    if (!e)
      continue;
    uint32_t k = index_home(&grown, a->chunks[e - 1].addr);
    while (slots[k])
      k = (k + 1) & grown.mask;
    slots[k] = e;
  }
  free(x->slots);
  *x = grown;
  return true;
}

/* Room for n more entries (at most an eighth full); false: out of host memory. */
static bool index_reserve(hbm__arena_t *a, uint32_t n) {
  const addr_index_t *x = &a->index;
  while (!x->slots || INDEX_SPREAD * ((uint64_t)x->count + n) > (uint64_t)x->mask + 1)
    if (!index_grow(a))
      return false;
  return true;
}

/* Records that used chunk u starts a block at addr, for hbm__arena_find (room reserved). */
HOT void index_block(hbm__arena_t *a, uint32_t u, uint64_t addr) {
  if (!a->indexed)
    return;
  addr_index_t *x = &a->index;
  uint32_t k = index_home(x, addr);
  while (x->slots[k])
    k = (k + 1) & x->mask;
  x->slots[k] = u + 1;
  x->count++;
}

/* The slot holding the used block that starts at addr, or NIL. */
HOT uint32_t index_slot(const hbm__arena_t *a, uint64_t addr) {
  const addr_index_t *x = &a->index;
  if (HBM_UNLIKELY(!x->slots))
    return NIL;
  for (uint32_t k = index_home(x, addr);; k = (k + 1) & x->mask) {
    uint32_t e = x->slots[k];
    if (!e || a->chunks[e - 1].addr == addr)
      return e ? k : NIL;
  }
}

/* Empties slot k, moving back the entries after it that may not stay past a hole. */
HOT void index_erase_slot(hbm__arena_t *a, uint32_t k) {
  addr_index_t *x = &a->index;
  uint32_t hole = k;
  for (uint32_t i = (hole + 1) & x->mask; x->slots[i]; i = (i + 1) & x->mask) {
    uint32_t home = index_home(x, a->chunks[x->slots[i] - 1].addr);
    /* The entry at i stays unless the hole lies between its home and i (cyclically). */
    bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (!stays) {
      x->slots[hole] = x->slots[i];
      hole = i;
    }
  }
  x->slots[hole] = 0;
  x->count--;
}

static inline void unindex_block(hbm__arena_t *a, uint64_t addr) {
  if (!a->indexed)
    return;
  uint32_t k = index_slot(a, addr);
  if (k != NIL)
    index_erase_slot(a, k);
}

/* ---- room for allocations ---- */

/* Grows the records and the index as needed and counts the room again, at least ROOM_MIN
 * allocations of it: room is only counted down (frees give records back without counting
 * them), so a refill that left room for one or two sent every few allocations of a steady
 * workload down the slow path (6% of them on the real logs, at 5x the cost each). False:
 * out of host memory. */
static bool refill_room(hbm__arena_t *a) {
  bool ahead = reserve_records(a, 2 * ROOM_MIN) && (!a->indexed || index_reserve(a, ROOM_MIN));
  if (!ahead && (!reserve_records(a, 2) || (a->indexed && !index_reserve(a, 1))))
    return false; /* not even room for one allocation */
  uint32_t records = (a->n_unused + (a->cap_chunks - a->n_chunks)) / 2;
  uint32_t entries = a->indexed ? (a->index.mask + 1) / INDEX_SPREAD - a->index.count : UINT32_MAX;
  a->room = records < entries ? records : entries;
  return true;
}

HOT bool take_room(hbm__arena_t *a) {
  if (HBM_UNLIKELY(!a->room) && !refill_room(a))
    return false;
  a->room--;
  return true;
}

/* ---- the arena ---- */

hbm__arena_t *hbm__arena_new(bool indexed) {
  hbm__arena_t *a = calloc(1, sizeof *a);
  if (!a) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for an allocator arena");
    return NULL;
  }
  a->unused = NIL;
  a->indexed = indexed;
  a->place_high = HBM__PLACE_HIGH;
  memset(a->heads, 0xff, sizeof a->heads);
  return a;
}

void hbm__arena_delete(hbm__arena_t *a) {
  if (!a)
    return;
  free(a->index.slots);
  free(a->chunks);
  free(a->regions);
  free(a->by_base);
  free(a);
}

static bool region_is_valid(uint64_t base, uint64_t size) {
  return size && size % UNIT == 0 && base % UNIT == 0 && size / UNIT <= MAX_UNITS;
}

/* Rebuilds the address order of the live regions (on adding or dropping one: rare). */
static void sort_regions(hbm__arena_t *a) {
  uint32_t n = 0;
  for (uint32_t r = 0; r < a->n_regions; r++) {
    if (!a->regions[r].live)
      continue;
    uint32_t k = n++;
    for (; k > 0 && a->regions[a->by_base[k - 1]].base > a->regions[r].base; k--)
      a->by_base[k] = a->by_base[k - 1];
    a->by_base[k] = r;
  }
  a->n_live_regions = n;
}

/* A free region slot (reusing a dropped one), or n_regions after growing the array. */
static hbm_status_t region_slot(hbm__arena_t *a, uint32_t *out) {
  for (uint32_t i = 0; i < a->n_regions; i++)
    if (!a->regions[i].live) {
      *out = i;
      return HBM_OK;
    }
  if (a->n_regions == a->cap_regions) {
    uint32_t cap = a->cap_regions ? a->cap_regions * 2 : 8;
    region_t *grown = realloc(a->regions, cap * sizeof *grown);
    uint32_t *order = grown ? realloc(a->by_base, cap * sizeof *order) : NULL;
    if (grown)
      a->regions = grown;
    if (!order)
      return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for arena regions");
    a->by_base = order;
    a->cap_regions = cap;
  }
  *out = a->n_regions;
  return HBM_OK;
}

hbm_status_t hbm__arena_add_region(hbm__arena_t *a, uint64_t base, uint64_t size,
                                   uint64_t max_size) {
  if (max_size < size)
    max_size = size;
  if (!region_is_valid(base, max_size) || size % UNIT)
    return hbm__error(HBM_ERR_INTERNAL, "arena region %#llx+%llu is not 256-byte aligned",
                      (unsigned long long)base, (unsigned long long)size);
  uint32_t r = 0;
  hbm_status_t st = region_slot(a, &r);
  if (st != HBM_OK)
    return st;
  if (!reserve_records(a, 3))
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for arena chunks");
  region_t region = {.base = base, .size = size, .max_size = max_size, .live = true};
  if (r == a->n_regions)
    a->n_regions++;
  region.head = take_record(a);
  region.tail = take_record(a);
  uint32_t i = take_record(a);
  a->chunks[region.head] = (chunk_t){.addr = base, .size = 0, .next = i, .prev = NIL};
  a->chunks[i] = (chunk_t){.addr = base, .size = size, .prev = region.head, .next = region.tail};
  a->chunks[region.tail] = (chunk_t){.addr = base + size, .size = 0, .prev = i, .next = NIL};
  a->regions[r] = region;
  insert_free(a, i);
  a->reserved += size;
  a->room = 0; /* it took records */
  sort_regions(a);
  return HBM_OK;
}

static region_t *region_at(hbm__arena_t *a, uint64_t base) {
  for (uint32_t r = 0; r < a->n_regions; r++)
    if (a->regions[r].live && a->regions[r].base == base)
      return &a->regions[r];
  return NULL;
}

hbm_status_t hbm__arena_extend_region(hbm__arena_t *a, uint64_t base, uint64_t added) {
  region_t *region = region_at(a, base);
  if (!region || added % UNIT || added > region->max_size - region->size)
    return hbm__error(HBM_ERR_INTERNAL, "arena: no region at %#llx to extend by %llu bytes",
                      (unsigned long long)base, (unsigned long long)added);
  if (!reserve_records(a, 1))
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for arena chunks");
  uint32_t tail = region->tail, last = a->chunks[tail].prev;
  if (is_free(&a->chunks[last])) { /* the free tail grows */
    resize_free(a, last, class_of_chunk(&a->chunks[last]), size_of(&a->chunks[last]) + added);
  } else { /* a new free chunk after the used tail */
    uint32_t j = take_record(a);
    a->chunks[j].addr = region->base + region->size;
    a->chunks[j].size = added;
    link_after(a, j, last);
    insert_free(a, j);
    a->room = 0; /* it took a record */
  }
  a->chunks[tail].addr += added;
  region->size += added;
  a->reserved += added;
  return HBM_OK;
}

uint64_t hbm__arena_free_tail(hbm__arena_t *a, uint64_t base) {
  region_t *region = region_at(a, base);
  if (!region)
    return 0;
  const chunk_t *last = &a->chunks[a->chunks[region->tail].prev];
  return is_free(last) ? size_of(last) : 0;
}

/* Carves [start, start + bytes) out of free chunk i, in class list `cls`. The free remainder
 * keeps i's record (and its place in its class list while its class does not change); the
 * block gets a new one. */
HOT uint32_t carve(hbm__arena_t *a, uint32_t i, unsigned cls, uint64_t start, uint64_t bytes) {
  chunk_t *c = &a->chunks[i];
  uint64_t size = size_of(c), head = start - c->addr, tail = size - head - bytes;
  if (head == 0 && tail == 0) { /* an exact fit */
    remove_free_from(a, i, cls);
    return i;
  }
  uint32_t u = take_record(a);
  a->chunks[u].addr = start;
  if (head == 0) { /* at the low end: the free tail keeps the record */
    a->chunks[u].size = bytes;
    link_before(a, u, i);
    c->addr += bytes;
    resize_free(a, i, cls, tail);
    return u;
  }
  a->chunks[u].size = bytes;
  link_after(a, u, i); /* at the high end or inside: the free head keeps the record */
  resize_free(a, i, cls, head);
  if (tail) {
    uint32_t t = take_record(a);
    a->chunks[t].addr = start + bytes;
    a->chunks[t].size = tail;
    link_after(a, t, u);
    insert_free(a, t);
  }
  return u;
}

/* Places a block of `size` bytes (`bytes` rounded) in free chunk i of class list `cls`,
 * which holds it aligned (room taken); returns its record. */
HOT uint32_t place(hbm__arena_t *a, uint32_t i, unsigned cls, uint64_t size, uint64_t bytes,
                   uint64_t alignment) {
  const chunk_t *c = &a->chunks[i];
  uint64_t start = size >= a->place_high ? (c->addr + size_of(c) - bytes) & ~(alignment - 1)
                                         : hbm__round_up(c->addr, alignment);
  uint32_t u = carve(a, i, cls, start, bytes);
  a->chunks[u].slack = (uint32_t)(bytes - size);
  a->chunks[u].tag = 0;
  index_block(a, u, start);
  a->allocated += bytes;
  return u;
}

hbm_status_t hbm__arena_alloc(hbm__arena_t *a, uint64_t size, uint64_t alignment,
                              hbm__block_t *out) {
  if (HBM_UNLIKELY(size - 1 >= MAX_UNITS * UNIT || alignment > MAX_UNITS * UNIT))
    return HBM_ERR_NO_MEMORY; /* size 0 wraps around */
  uint64_t units = (size + UNIT - 1) / UNIT;
  uint64_t pad = alignment / UNIT - 1; /* alignment >= 256 */
  unsigned cls;
  uint32_t i = find_best_fit(a, units + pad, &cls); /* with pad, any start leaves room to align */
  if (i == NIL)
    return HBM_ERR_NO_MEMORY;
  if (HBM_UNLIKELY(!take_room(a)))
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for arena chunks");
  uint32_t u = place(a, i, cls, size, units * UNIT, alignment);
  out->addr = a->chunks[u].addr;
  out->allocated = units * UNIT;
  out->handle = u;
  return HBM_OK;
}

/* The front's fast path (front.c). Always inlined there (GCC's link-time optimization, which
 * CMakeLists.txt turns on for the allocator layer): the call and a second function frame were
 * about 15 of the 200 instructions of an allocation (BENCHMARKS.md, 2026-12-01). */
#define FRONT_INLINE __attribute__((always_inline)) inline

FRONT_INLINE bool hbm__arena_alloc_fast(hbm__arena_t *a, uint64_t size, uint64_t *addr) {
  if (HBM_UNLIKELY(size - 1 >= MAX_UNITS * UNIT || !a->room))
    return false;
  uint64_t units = (size + UNIT - 1) / UNIT;
  unsigned cls;
  uint32_t i = find_best_fit(a, units, &cls);
  if (HBM_UNLIKELY(i == NIL))
    return false;
  a->room--;
  *addr = a->chunks[place(a, i, cls, size, units * UNIT, UNIT)].addr;
  return true;
}

/* Frees used chunk i (already out of the index), coalescing with free neighbours. */
HOT void release_chunk(hbm__arena_t *a, uint32_t i) {
  chunk_t *c = &a->chunks[i];
  uint64_t size = c->size; /* used: no flag */
  a->allocated -= size;
  uint32_t prev = c->prev, next = c->next;
  chunk_t *p = &a->chunks[prev], *n = &a->chunks[next];
  if (is_free(p)) { /* the free chunk before absorbs it (and the one after) */
    if (is_free(n)) {
      size += size_of(n);
      remove_free(a, next);
      unlink_chunk(a, next);
    }
    unlink_chunk(a, i);
    resize_free(a, prev, class_of_chunk(p), size_of(p) + size);
  } else if (is_free(n)) { /* the free chunk after grows down over it */
    n->addr = c->addr;
    unlink_chunk(a, i);
    resize_free(a, next, class_of_chunk(n), size_of(n) + size);
  } else {
    insert_free(a, i);
  }
}

void hbm__arena_release(hbm__arena_t *a, const hbm__block_t *b) {
  unindex_block(a, a->chunks[b->handle].addr);
  release_chunk(a, (uint32_t)b->handle);
}

static inline uint32_t find_block(const hbm__arena_t *a, uint64_t addr) {
  uint32_t k = index_slot(a, addr);
  return k == NIL ? NIL : a->index.slots[k] - 1;
}

uint32_t hbm__arena_find(const hbm__arena_t *a, uint64_t addr) { return find_block(a, addr); }

void hbm__arena_block(const hbm__arena_t *a, uint32_t handle, hbm__block_t *out,
                      uint64_t *requested, uint32_t *tag) {
  const chunk_t *c = &a->chunks[handle];
  out->addr = c->addr;
  out->allocated = c->size;
  out->handle = handle;
  if (requested)
    *requested = c->size - c->slack;
  if (tag)
    *tag = c->tag;
}

void hbm__arena_place_high(hbm__arena_t *a, uint64_t threshold) { a->place_high = threshold; }

void hbm__arena_set_user(hbm__arena_t *a, uint32_t handle, uint64_t requested, uint32_t tag) {
  chunk_t *c = &a->chunks[handle];
  c->slack = (uint32_t)(c->size - requested);
  c->tag = tag;
}

void hbm__arena_set_tag(hbm__arena_t *a, uint32_t handle, uint32_t tag) {
  a->chunks[handle].tag = tag;
}

/* Mode learn's plan takes the free memory of its span this way (step_serve.c): every free
 * chunk's part inside [lo, hi) becomes a used block, handed to fn; a walk in address order
 * (rare: once per plan). */
hbm_status_t hbm__arena_claim_free(hbm__arena_t *a, uint64_t lo, uint64_t hi,
                                   hbm_status_t (*fn)(void *ctx, const hbm__block_t *b),
                                   void *ctx) {
  for (uint32_t k = 0; k < a->n_live_regions; k++) {
    const region_t *region = &a->regions[a->by_base[k]];
    for (uint32_t i = a->chunks[region->head].next; i != region->tail;) {
      const chunk_t *c = &a->chunks[i];
      uint64_t start = c->addr > lo ? c->addr : lo, end = c->addr + size_of(c);
      end = end < hi ? end : hi;
      if (!is_free(c) || start >= end) {
        i = c->next;
        continue;
      }
      if (!reserve_records(a, 2) || (a->indexed && !index_reserve(a, 1)))
        return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for arena chunks");
      uint32_t u = carve(a, i, class_of_chunk(c), start, end - start);
      a->chunks[u].slack = 0;
      a->chunks[u].tag = 0;
      index_block(a, u, start);
      a->allocated += end - start;
      a->room = 0; /* it took records */
      hbm__block_t b = {.addr = start, .allocated = end - start, .handle = u};
      hbm_status_t st = fn(ctx, &b);
      if (st != HBM_OK)
        return st;
      i = a->chunks[u].next;
    }
  }
  return HBM_OK;
}

hbm_status_t hbm__arena_split(hbm__arena_t *a, hbm__block_t *b, uint64_t keep, hbm__block_t *rest) {
  uint32_t i = (uint32_t)b->handle;
  if (keep == 0 || keep % UNIT || keep >= a->chunks[i].size)
    return hbm__error(HBM_ERR_INTERNAL, "arena split at %llu of a %llu-byte chunk",
                      (unsigned long long)keep, (unsigned long long)a->chunks[i].size);
  if (!reserve_records(a, 1) || (a->indexed && !index_reserve(a, 1)))
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for arena chunks");
  uint32_t j = take_record(a);
  a->chunks[j].addr = a->chunks[i].addr + keep;
  a->chunks[j].size = a->chunks[i].size - keep;
  a->chunks[i].size = keep;
  link_after(a, j, i);
  a->chunks[j].slack = 0;
  a->chunks[j].tag = 0;
  index_block(a, j, a->chunks[j].addr);
  a->room = 0; /* it took a record and an entry */
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
  for (uint32_t i = a->heads[fl * SL_COUNT + sl]; i != NIL; i = a->chunks[i].free_next)
    if (size_of(&a->chunks[i]) > largest)
      largest = size_of(&a->chunks[i]);
  return largest;
}

uint64_t hbm__arena_reserved(const hbm__arena_t *a) { return a->reserved; }
uint64_t hbm__arena_allocated(const hbm__arena_t *a) { return a->allocated; }

void hbm__arena_drop_free_regions(hbm__arena_t *a,
                                  void (*release)(void *ctx, uint64_t base, uint64_t size),
                                  void *ctx) {
  bool dropped = false;
  for (uint32_t r = 0; r < a->n_regions; r++) {
    region_t *region = &a->regions[r];
    uint32_t only = region->live ? a->chunks[region->head].next : NIL;
    if (only == NIL || !is_free(&a->chunks[only]) || a->chunks[only].next != region->tail)
      continue;
    remove_free(a, only);
    drop_record(a, only);
    drop_record(a, region->head);
    drop_record(a, region->tail);
    region->live = false;
    a->reserved -= region->size;
    dropped = true;
    release(ctx, region->base, region->size);
  }
  if (dropped)
    sort_regions(a);
}

void hbm__arena_for_each_region(const hbm__arena_t *a,
                                void (*fn)(void *ctx, uint64_t base, uint64_t size), void *ctx) {
  for (uint32_t r = 0; r < a->n_regions; r++)
    if (a->regions[r].live)
      fn(ctx, a->regions[r].base, a->regions[r].size);
}

void hbm__arena_for_each_free(const hbm__arena_t *a,
                              void (*fn)(void *ctx, uint64_t addr, uint64_t size), void *ctx) {
  for (uint32_t i = 0; i < a->n_chunks; i++)
    if (is_free(&a->chunks[i]))
      fn(ctx, a->chunks[i].addr, size_of(&a->chunks[i]));
}

hbm_status_t hbm__arena_walk(const hbm__arena_t *a, int (*fn)(const hbm__chunk_info_t *, void *),
                             void *ctx) {
  int stop = 0;
  for (uint32_t k = 0; k < a->n_live_regions && !stop; k++) {
    const region_t *region = &a->regions[a->by_base[k]];
    for (uint32_t i = a->chunks[region->head].next; i != region->tail && !stop;
         i = a->chunks[i].next) {
      const chunk_t *c = &a->chunks[i];
      hbm__chunk_info_t info = {.region_base = region->base,
                                .region_size = region->size,
                                .addr = c->addr,
                                .size = size_of(c),
                                .in_use = !is_free(c),
                                .handle = i};
      stop = fn(&info, ctx);
    }
  }
  return HBM_OK;
}

/* Inlined into the front's fast free for the same reason (FRONT_INLINE). */
FRONT_INLINE bool hbm__arena_release_at(hbm__arena_t *a, uint64_t addr, uint64_t *requested,
                                        uint32_t *tag) {
  uint32_t k = index_slot(a, addr);
  if (k == NIL)
    return false;
  uint32_t i = a->index.slots[k] - 1;
  const chunk_t *c = &a->chunks[i];
  *requested = c->size - c->slack;
  *tag = c->tag;
  index_erase_slot(a, k);
  release_chunk(a, i);
  return true;
}
