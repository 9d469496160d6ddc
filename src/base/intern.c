/* intern.c — a string interner: one copy of each distinct string, stored in large arena
 * chunks and freed all at once. Profiles hold millions of tags that repeat ("dot.3",
 * "temporary"); interning keeps them cheap and lets equal tags compare by pointer. */
#include "base.h"

#include <stdlib.h>
#include <string.h>

typedef struct intern_chunk {
  struct intern_chunk *next;
  size_t used, cap;
  char data[];
} intern_chunk_t;

/* A slot keeps the hash and length beside the string, so a probe compares two integers
 * before it touches the bytes and growing never re-hashes. */
typedef struct intern_slot {
  const char *str; /* NULL: empty */
  uint64_t hash;
  size_t len;
} intern_slot_t;

struct hbm_intern {
  intern_slot_t *slots; /* open-addressing set of interned strings */
  size_t cap, count;
  intern_chunk_t *chunks;
};

/* Eight bytes a step: labels of HLO instructions run to hundreds of bytes. */
static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 0x243f6a8885a308d3ull ^ n;
  for (; n >= 8; s += 8, n -= 8) {
    uint64_t w;
    memcpy(&w, s, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  memcpy(&tail, s, n);
  h = (h ^ tail) * 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

hbm_intern_t *hbm_intern_new(void) {
  hbm_intern_t *in = calloc(1, sizeof *in);
  if (!in)
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory creating a string table");
  return in;
}

void hbm_intern_free(hbm_intern_t *in) {
  if (!in)
    return;
  for (intern_chunk_t *c = in->chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(in->slots);
  free(in);
}

static char *intern_store(hbm_intern_t *in, const char *s, size_t n) {
  intern_chunk_t *c = in->chunks;
  if (!c || c->cap - c->used < n + 1) {
    size_t cap = n + 1 > 64 * 1024 ? n + 1 : 64 * 1024;
    c = malloc(sizeof *c + cap);
    if (!c)
      return NULL;
    c->used = 0;
    c->cap = cap;
    c->next = in->chunks;
    in->chunks = c;
  }
  char *copy = c->data + c->used;
  memcpy(copy, s, n);
  copy[n] = '\0';
  c->used += n + 1;
  return copy;
}

static bool intern_grow(hbm_intern_t *in) {
  size_t cap = in->cap ? in->cap * 2 : 256;
  intern_slot_t *slots = calloc(cap, sizeof *slots);
  if (!slots)
    return false;
  for (size_t i = 0; i < in->cap; i++) {
    if (!in->slots[i].str)
      continue;
    size_t j = in->slots[i].hash & (cap - 1);
    while (slots[j].str)
      j = (j + 1) & (cap - 1);
    slots[j] = in->slots[i];
  }
  free(in->slots);
  in->slots = slots;
  in->cap = cap;
  return true;
}

const char *hbm_intern_n(hbm_intern_t *in, const char *s, size_t n) {
  if (!s)
    return NULL;
  if ((in->count + 1) * 2 > in->cap && !intern_grow(in)) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory interning a string");
    return NULL;
  }
  uint64_t hash = hash_bytes(s, n);
  size_t mask = in->cap - 1, i = hash & mask;
  for (; in->slots[i].str; i = (i + 1) & mask) {
    const intern_slot_t *slot = &in->slots[i];
    if (slot->hash == hash && slot->len == n && memcmp(slot->str, s, n) == 0)
      return slot->str;
  }
  char *copy = intern_store(in, s, n);
  if (!copy) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory interning a string");
    return NULL;
  }
  in->slots[i] = (intern_slot_t){copy, hash, n};
  in->count++;
  return copy;
}

const char *hbm_intern(hbm_intern_t *in, const char *s) {
  return s ? hbm_intern_n(in, s, strlen(s)) : NULL;
}
