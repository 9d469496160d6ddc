/* u64map.c — an open-addressing hash map from u64 to u64 with linear probing. Used wherever
 * pointers or addresses must be found fast: the profile builder (address → open buffer), the
 * log reader (pointer → live allocation) and replay. */
#include "base.h"

#include <stdlib.h>
#include <string.h>

enum { SLOT_EMPTY = 0, SLOT_USED = 1, SLOT_DELETED = 2 };

static inline size_t hash_u64(uint64_t k) {
  /* Pointers are aligned: mix the high bits down (splitmix64 finalizer). */
  k ^= k >> 30;
  k *= 0xbf58476d1ce4e5b9ull;
  k ^= k >> 27;
  k *= 0x94d049bb133111ebull;
  k ^= k >> 31;
  return (size_t)k;
}

void hbm_u64map_init(hbm_u64map_t *m) { memset(m, 0, sizeof *m); }

void hbm_u64map_free(hbm_u64map_t *m) {
  free(m->keys);
  free(m->values);
  free(m->used);
  memset(m, 0, sizeof *m);
}

static bool u64map_rehash(hbm_u64map_t *m, size_t cap) {
  uint64_t *keys = malloc(cap * sizeof *keys);
  uint64_t *values = malloc(cap * sizeof *values);
  uint8_t *used = calloc(cap, 1);
  if (!keys || !values || !used) {
    free(keys);
    free(values);
    free(used);
    return false;
  }
  for (size_t i = 0; i < m->cap; i++) {
    if (m->used[i] != SLOT_USED)
      continue;
    size_t j = hash_u64(m->keys[i]) & (cap - 1);
    while (used[j])
      j = (j + 1) & (cap - 1);
    keys[j] = m->keys[i];
    values[j] = m->values[i];
    used[j] = SLOT_USED;
  }
  free(m->keys);
  free(m->values);
  free(m->used);
  m->keys = keys;
  m->values = values;
  m->used = used;
  m->cap = cap;
  m->tombstones = 0;
  return true;
}

bool hbm_u64map_put(hbm_u64map_t *m, uint64_t key, uint64_t value) {
  if ((m->count + m->tombstones + 1) * 4 > m->cap * 3) {
    size_t cap = m->cap ? m->cap : 16;
    while ((m->count + 1) * 2 > cap)
      cap *= 2;
    if (!u64map_rehash(m, cap))
      return false;
  }
  size_t mask = m->cap - 1, i = hash_u64(key) & mask;
  size_t first_deleted = SIZE_MAX;
  while (m->used[i] != SLOT_EMPTY) {
    if (m->used[i] == SLOT_USED && m->keys[i] == key) {
      m->values[i] = value;
      return true;
    }
    if (m->used[i] == SLOT_DELETED && first_deleted == SIZE_MAX)
      first_deleted = i;
    i = (i + 1) & mask;
  }
  if (first_deleted != SIZE_MAX) {
    i = first_deleted;
    m->tombstones--;
  }
  m->keys[i] = key;
  m->values[i] = value;
  m->used[i] = SLOT_USED;
  m->count++;
  return true;
}

static size_t u64map_find(const hbm_u64map_t *m, uint64_t key) {
  if (!m->cap)
    return SIZE_MAX;
  size_t mask = m->cap - 1, i = hash_u64(key) & mask;
  while (m->used[i] != SLOT_EMPTY) {
    if (m->used[i] == SLOT_USED && m->keys[i] == key)
      return i;
    i = (i + 1) & mask;
  }
  return SIZE_MAX;
}

bool hbm_u64map_get(const hbm_u64map_t *m, uint64_t key, uint64_t *value) {
  size_t i = u64map_find(m, key);
  if (i == SIZE_MAX)
    return false;
  if (value)
    *value = m->values[i];
  return true;
}

bool hbm_u64map_remove(hbm_u64map_t *m, uint64_t key, uint64_t *value) {
  size_t i = u64map_find(m, key);
  if (i == SIZE_MAX)
    return false;
  if (value)
    *value = m->values[i];
  m->used[i] = SLOT_DELETED;
  m->count--;
  m->tombstones++;
  return true;
}
