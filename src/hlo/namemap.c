/* namemap.c — names to IR nodes while parsing: instruction names per computation scope and
 * computation names per module. Open addressing over slices of the module text (no copies),
 * so a million instructions cost a few tens of megabytes and one hash per lookup. */
#include "namemap.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_name(uint32_t scope, const char *p, uint32_t n) {
  return hbm__hlo_hash(p, n, 1469598103934665603ull ^ ((uint64_t)scope * 0x9e3779b97f4a7c15ull));
}

void hbm__hlo_namemap_init(hlo_namemap_t *m) { memset(m, 0, sizeof *m); }

void hbm__hlo_namemap_free(hlo_namemap_t *m) {
  free(m->slots);
  memset(m, 0, sizeof *m);
}

static bool namemap_grow(hlo_namemap_t *m) {
  size_t cap = m->cap ? m->cap * 2 : 1024;
  hlo_name_slot_t *slots = calloc(cap, sizeof *slots);
  if (!slots) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (name table)");
    return false;
  }
  for (size_t i = 0; i < m->cap; i++) {
    hlo_name_slot_t *s = &m->slots[i];
    if (!s->value)
      continue;
    size_t j = (size_t)s->hash & (cap - 1);
    while (slots[j].value)
      j = (j + 1) & (cap - 1);
    slots[j] = *s;
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  return true;
}

void *hbm__hlo_namemap_get(const hlo_namemap_t *m, uint32_t scope, hlo_str_t name) {
  if (!m->cap)
    return NULL;
  uint64_t h = hash_name(scope, name.p, name.n);
  size_t j = (size_t)h & (m->cap - 1);
  while (m->slots[j].value) {
    const hlo_name_slot_t *s = &m->slots[j];
    if (s->hash == h && s->scope == scope && s->name.n == name.n &&
        memcmp(s->name.p, name.p, name.n) == 0)
      return s->value;
    j = (j + 1) & (m->cap - 1);
  }
  return NULL;
}

int hbm__hlo_namemap_put(hlo_namemap_t *m, uint32_t scope, hlo_str_t name, void *value) {
  if ((m->count + 1) * 4 > m->cap * 3 && !namemap_grow(m))
    return -1;
  uint64_t h = hash_name(scope, name.p, name.n);
  size_t j = (size_t)h & (m->cap - 1);
  while (m->slots[j].value) {
    const hlo_name_slot_t *s = &m->slots[j];
    if (s->hash == h && s->scope == scope && s->name.n == name.n &&
        memcmp(s->name.p, name.p, name.n) == 0)
      return 0;
    j = (j + 1) & (m->cap - 1);
  }
  m->slots[j] = (hlo_name_slot_t){h, name, scope, value};
  m->count++;
  return 1;
}
