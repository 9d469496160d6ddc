/* namemap.h — a hash table from (scope, name slice) to a pointer, for the parser. */
#ifndef HBM_HLO_NAMEMAP_H
#define HBM_HLO_NAMEMAP_H

#include "hlo.h"

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

void hbm__hlo_namemap_init(hlo_namemap_t *m);
void hbm__hlo_namemap_free(hlo_namemap_t *m);
void *hbm__hlo_namemap_get(const hlo_namemap_t *m, uint32_t scope, hlo_str_t name);
/* 1 inserted, 0 already present (not replaced), -1 out of memory. */
int hbm__hlo_namemap_put(hlo_namemap_t *m, uint32_t scope, hlo_str_t name, void *value);

#endif /* HBM_HLO_NAMEMAP_H */
