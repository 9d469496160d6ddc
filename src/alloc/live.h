/* live.h — the table of live blocks (hbm__live_table_t, declared in alloc.h): address →
 * record, for the front's hot path. Header-only so that lookups inline into hbm_alloc and
 * hbm_free: a free is one hash and, almost always, one cache line.
 *
 * Open addressing with linear probing on a multiplicative hash of address / 256 (blocks are
 * 256-byte aligned, so the low bits carry nothing); deletion shifts the following records of
 * the probe run back instead of leaving tombstones, so the table never needs cleaning and
 * lookups stay short under any mix of allocations and frees. Kept at most half full. Not
 * locked: the caller holds the lock of the table's owner. */
#ifndef HBM_ALLOC_LIVE_H
#define HBM_ALLOC_LIVE_H

#include "alloc/alloc.h"

#include <stdlib.h>

static inline uint64_t hbm__live_home(const hbm__live_table_t *t, uint64_t addr) {
  return ((addr >> 8) * 0x9E3779B97F4A7C15ull) >> t->shift;
}

/* The record of `addr`, NULL if it is not live. */
static inline hbm__record_t *hbm__live_find(const hbm__live_table_t *t, uint64_t addr) {
  if (HBM_UNLIKELY(!t->slots || !addr))
    return NULL;
  for (uint64_t i = hbm__live_home(t, addr);; i = (i + 1) & t->mask) {
    hbm__record_t *r = &t->slots[i];
    if (r->block.addr == addr)
      return r;
    if (!r->block.addr)
      return NULL;
  }
}

static inline void hbm__live_place(hbm__live_table_t *t, const hbm__record_t *r) {
  uint64_t i = hbm__live_home(t, r->block.addr);
  while (t->slots[i].block.addr)
    i = (i + 1) & t->mask;
  t->slots[i] = *r;
}

/* Doubles the capacity (at least 64 slots); false when host memory ran out. */
static inline bool hbm__live_grow(hbm__live_table_t *t) {
  uint64_t cap = t->slots ? (t->mask + 1) * 2 : 64;
  hbm__record_t *slots = calloc(cap, sizeof *slots);
  if (!slots)
    return false;
  hbm__live_table_t grown = {.slots = slots,
                             .mask = cap - 1,
                             .shift = 64u - (unsigned)__builtin_ctzll(cap),
                             .count = t->count};
  for (uint64_t i = 0; t->slots && i <= t->mask; i++)
    if (t->slots[i].block.addr)
      hbm__live_place(&grown, &t->slots[i]);
  free(t->slots);
  *t = grown;
  return true;
}

/* Adds a record (its address must not be live); false when host memory ran out. */
static inline bool hbm__live_insert(hbm__live_table_t *t, const hbm__record_t *r) {
  if (HBM_UNLIKELY(!t->slots || 2 * (t->count + 1) > t->mask + 1) && !hbm__live_grow(t))
    return false;
  hbm__live_place(t, r);
  t->count++;
  return true;
}

/* Removes the record at `r` (a pointer into the table), moving later records of its probe
 * run back so that every record stays reachable from its home slot. */
static inline void hbm__live_erase(hbm__live_table_t *t, hbm__record_t *r) {
  uint64_t hole = (uint64_t)(r - t->slots);
  for (uint64_t i = (hole + 1) & t->mask; t->slots[i].block.addr; i = (i + 1) & t->mask) {
    uint64_t home = hbm__live_home(t, t->slots[i].block.addr);
    /* The record at i may fill the hole unless its home lies cyclically in (hole, i]. */
    bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (!stays) {
      t->slots[hole] = t->slots[i];
      hole = i;
    }
  }
  t->slots[hole].block.addr = 0;
  t->count--;
}

static inline void hbm__live_free(hbm__live_table_t *t) {
  free(t->slots);
  t->slots = NULL;
  t->mask = 0;
  t->count = 0;
}

#endif /* HBM_ALLOC_LIVE_H */
