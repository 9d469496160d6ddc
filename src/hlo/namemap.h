/* namemap.h — a hash table from (scope, name slice) to a pointer, for the parser. */
#ifndef HBM_HLO_NAMEMAP_H
#define HBM_HLO_NAMEMAP_H

#include "hlo.h"

#include <string.h>

typedef struct hlo_name_slot {
  uint64_t hash;
  hlo_str_t name;
  uint32_t scope;
  void *value; /* NULL: empty slot */
} hlo_name_slot_t;

typedef struct hlo_namemap {
  hlo_name_slot_t *slots;
  size_t cap, count;
} hlo_namemap_t;

/* A hash of n bytes, eight at a time (names and shapes are 5 to 40 bytes long). */
static inline uint64_t hbm__hlo_hash(const char *p, size_t n, uint64_t seed) {
  uint64_t h = seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ull);
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0; /* the last 1 to 7 bytes, read as two overlapping halves */
  if (n >= 4) {
    uint32_t a, b;
    memcpy(&a, p, 4);
    memcpy(&b, p + n - 4, 4);
    tail = a | (uint64_t)b << 32;
  } else if (n) {
    tail = (uint64_t)(unsigned char)p[0] | (uint64_t)(unsigned char)p[n / 2] << 8 |
           (uint64_t)(unsigned char)p[n - 1] << 16;
  }
  h = (h ^ tail) * 0x94d049bb133111ebull; /* then every bit into the low ones (tables mask) */
  h ^= h >> 32;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

void hbm__hlo_namemap_init(hlo_namemap_t *m);
void hbm__hlo_namemap_free(hlo_namemap_t *m);
void *hbm__hlo_namemap_get(const hlo_namemap_t *m, uint32_t scope, hlo_str_t name);
/* 1 inserted, 0 already present (not replaced), -1 out of memory. */
int hbm__hlo_namemap_put(hlo_namemap_t *m, uint32_t scope, hlo_str_t name, void *value);

#endif /* HBM_HLO_NAMEMAP_H */
