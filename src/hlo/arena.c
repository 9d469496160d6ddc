/* arena.c — the planner's memory: a bump allocator that holds every node of a module (shapes,
 * instructions, computations) and is freed in one go, plus a small growable array used
 * while building. Blocks grow geometrically, so memory stays proportional to the input. */
#include "hlo.h"

#include <stdlib.h>
#include <string.h>

struct hlo_arena_block {
  hlo_arena_block_t *next;
  size_t size;
  /* data follows, 8-aligned */
};

#define ARENA_MIN_BLOCK (64u * 1024u)
#define ARENA_HEADER ((sizeof(hlo_arena_block_t) + 15u) & ~(size_t)15u)

void hbm__hlo_arena_init(hlo_arena_t *a) { memset(a, 0, sizeof *a); }

void hbm__hlo_arena_free(hlo_arena_t *a) {
  hlo_arena_block_t *b = a->head;
  while (b) {
    hlo_arena_block_t *next = b->next;
    free(b);
    b = next;
  }
  memset(a, 0, sizeof *a);
}

static bool arena_grow(hlo_arena_t *a, size_t need) {
  /* Grow with the total so far: a module of N bytes needs O(log N) blocks. */
  size_t size = a->total / 2;
  if (size < ARENA_MIN_BLOCK)
    size = ARENA_MIN_BLOCK;
  if (size < need)
    size = need;
  hlo_arena_block_t *b = malloc(ARENA_HEADER + size);
  if (!b) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (planner arena, %zu bytes)", size);
    return false;
  }
  b->next = a->head;
  b->size = size;
  a->head = b;
  a->cur = (char *)b + ARENA_HEADER;
  a->end = a->cur + size;
  a->total += size;
  return true;
}

void *hbm__hlo_arena_alloc(hlo_arena_t *a, size_t n) {
  if (n == 0)
    n = 1;
  if (n > SIZE_MAX - 16) {
    hbm__error(HBM_ERR_HOST_MEMORY, "planner arena: request too large");
    return NULL;
  }
  n = (n + 7u) & ~(size_t)7u;
  if ((size_t)(a->end - a->cur) < n && !arena_grow(a, n))
    return NULL;
  void *p = a->cur;
  a->cur += n;
  memset(p, 0, n);
  return p;
}

char *hbm__hlo_arena_strndup(hlo_arena_t *a, const char *s, size_t n) {
  char *d = hbm__hlo_arena_alloc(a, n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

void hbm__hlo_vec_init(hlo_vec_t *v, size_t item_size) {
  memset(v, 0, sizeof *v);
  v->item = item_size;
}

void hbm__hlo_vec_free(hlo_vec_t *v) {
  free(v->data);
  v->data = NULL;
  v->len = v->cap = 0;
}

bool hbm__hlo_vec_reserve(hlo_vec_t *v, size_t n) {
  if (n <= v->cap)
    return true;
  void *d = realloc(v->data, n * v->item);
  if (!d) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (planner)");
    return false;
  }
  v->data = d;
  v->cap = n;
  return true;
}

bool hbm__hlo_vec_push(hlo_vec_t *v, const void *item) {
  if (v->len == v->cap) {
    void *d = hbm__grow_array(v->data, &v->cap, v->len + 1, v->item, 16);
    if (!d) {
      hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (planner)");
      return false;
    }
    v->data = d;
  }
  char *slot = (char *)v->data + v->len * v->item;
  if (v->item == sizeof(void *)) /* most vectors hold pointers: a move, not a call */
    memcpy(slot, item, sizeof(void *));
  else
    memcpy(slot, item, v->item);
  v->len++;
  return true;
}

bool hbm__hlo_str_eq(hlo_str_t s, const char *lit) {
  size_t n = strlen(lit);
  return s.n == n && memcmp(s.p, lit, n) == 0;
}
