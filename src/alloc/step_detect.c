/* step_detect.c — mode learn's first part: finding the step. Users do not annotate their
 * code, so the step is found in the stream itself: every operation while learning is kept
 * (an allocation's size, a free's pairing with its allocation), and the last W operations are
 * hashed; when that hash was seen before, the distance to it is a candidate period, checked
 * backwards operation by operation (sizes and order of allocations, frees where frees were).
 * A period followed for CONFIRM operations in a row is a step found: the operations one period
 * back are its template, and step_serve.c tries to plan it.
 *
 * A period inside a step (the layers of a network repeat too) is told apart by its
 * lifetimes: the template's blocks must end within a period (a forward pass keeps its
 * activations for the backward one; those periods plan almost nothing and are dropped). */
#include "alloc/step.h"

#include <stdlib.h>
#include <string.h>

#define GRAM 8             /* operations hashed together to propose a period */
#define CONFIRM 64         /* operations that must repeat before a period is a step */
#define MIN_PERIOD 8       /* shorter repetitions are not steps */
#define CANDIDATES 16      /* earlier occurrences of the hash tried per operation */
#define BACK_LIMIT 1024    /* how far back a candidate is compared */
#define MAX_OPS (1u << 26) /* history kept at most; learning starts again past it */

static const uint64_t gram_mult = 0x9E3779B97F4A7C15ull;

void hbm__step_history_free(hbm__step_history_t *h) {
  free(h->size);
  free(h->addr);
  free(h->reserved);
  free(h->pair);
  free(h->gram_prev);
  free(h->table);
  hbm_u64map_free(&h->live);
  memset(h, 0, sizeof *h);
}

void hbm__step_history_clear(hbm__step_history_t *h) {
  h->n = 0;
  h->period = h->matched = h->tried = h->tries = 0;
  h->marks[0] = h->marks[1] = h->marks[2] = HBM__STEP_NONE;
  h->gram = 0;
  h->bytes_min = h->bytes_max = h->bytes;
  hbm_u64map_free(&h->live);
  hbm_u64map_init(&h->live);
  if (h->table)
    memset(h->table, 0xff, ((size_t)h->table_mask + 1) * sizeof *h->table);
}

/* The key two operations must share to repeat: the size of an allocation, 0 for a free. */
static inline uint64_t key(const hbm__step_history_t *h, uint32_t i) { return h->size[i]; }

/* The hash of the W operations ending at i, from the one ending at i - 1. */
static uint64_t roll(const hbm__step_history_t *h, uint64_t gram, uint32_t i) {
  gram = gram * 31 + key(h, i) + 1;
  if (i >= GRAM)                                      /* the operation leaving the window */
    gram -= (key(h, i - GRAM) + 1) * 852891037441ull; /* 31^GRAM */
  return gram;
}

static uint32_t *slot_of(hbm__step_history_t *h, uint64_t gram) {
  return &h->table[(uint32_t)((gram * gram_mult) >> 32) & h->table_mask];
}

/* A larger hash table holds every window of the history again, chains included. */
static void rehash(hbm__step_history_t *h) {
  uint64_t gram = 0;
  for (uint32_t i = 0; i < h->n; i++) {
    gram = roll(h, gram, i);
    h->gram_prev[i] = HBM__STEP_NONE;
    if (i + 1 < GRAM)
      continue;
    uint32_t *slot = slot_of(h, gram);
    h->gram_prev[i] = *slot;
    *slot = i;
  }
}

/* *p resized to cap elements; false (and *p as it was) when host memory ran out. */
static bool resize(void **p, uint32_t cap, size_t elem) {
  void *grown = realloc(*p, cap * elem);
  if (grown)
    *p = grown;
  return grown != NULL;
}

static bool grow(hbm__step_history_t *h) {
  if (h->n < h->cap)
    return true;
  if (h->cap >= MAX_OPS)
    return false;
  uint32_t cap = h->cap ? 2 * h->cap : 4096;
  if (!resize((void **)&h->size, cap, sizeof *h->size) ||
      !resize((void **)&h->addr, cap, sizeof *h->addr) ||
      !resize((void **)&h->reserved, cap, sizeof *h->reserved) ||
      !resize((void **)&h->pair, cap, sizeof *h->pair) ||
      !resize((void **)&h->gram_prev, cap, sizeof *h->gram_prev))
    return false; /* the arrays already resized keep their contents: cap is not raised */
  h->cap = cap;
  /* the hash table: at most half full of the operations kept */
  if ((uint64_t)h->table_mask + 1 >= 2ull * cap)
    return true;
  free(h->table);
  h->table_mask = 2 * cap - 1;
  h->table = malloc(2ull * cap * sizeof *h->table);
  if (!h->table)
    return false;
  memset(h->table, 0xff, 2ull * cap * sizeof *h->table);
  rehash(h);
  return true;
}

/* How many operations back from i repeat those a period before (at most `limit`). */
static uint32_t repeats_back(const hbm__step_history_t *h, uint32_t i, uint32_t period,
                             uint32_t limit) {
  uint32_t k = 0;
  while (k < limit && i >= period + k && key(h, i - k) == key(h, i - k - period))
    k++;
  return k;
}

/* Follows, of the earlier occurrences of the last W operations' hash, the period that repeats
 * farthest back (the longer on a tie: a step holds repeating layers, whose periods repeat
 * as far back as the step's own while the step is young). */
static void propose(hbm__step_history_t *h, uint32_t i) {
  uint32_t *slot = slot_of(h, h->gram);
  uint32_t j = *slot, best = 0, best_back = GRAM - 1;
  h->gram_prev[i] = j;
  *slot = i;
  for (int c = 0; c < CANDIDATES && j != HBM__STEP_NONE && j < i; c++, j = h->gram_prev[j]) {
    uint32_t period = i - j;
    if (period < MIN_PERIOD)
      continue;
    uint32_t back = repeats_back(h, i, period, period < BACK_LIMIT ? period : BACK_LIMIT);
    if (back >= best_back) {
      best = period;
      best_back = back;
    }
  }
  if (best) {
    h->period = best;
    h->matched = best_back;
    h->tried = 0;
  }
}

/* Called after each operation appended. */
static void follow(hbm__step_history_t *h) {
  uint32_t i = h->n - 1;
  h->gram = roll(h, h->gram, i);
  if (h->period) {
    if (i >= h->period && key(h, i) == key(h, i - h->period)) {
      h->matched++;
      return;
    }
    h->period = h->matched = h->tried = 0;
  }
  if (i + 1 >= GRAM)
    propose(h, i);
}

bool hbm__step_history_alloc(hbm__step_history_t *h, uint64_t addr, uint64_t size,
                             uint64_t reserved) {
  if (!grow(h) || !hbm_u64map_put(&h->live, addr, h->n))
    return false;
  uint32_t i = h->n++;
  h->bytes += (int64_t)hbm__round_up(size, HBM__MIN_BLOCK);
  h->bytes_max = h->bytes > h->bytes_max ? h->bytes : h->bytes_max;
  h->size[i] = size ? size : 1;
  h->addr[i] = addr;
  h->reserved[i] = reserved;
  h->pair[i] = HBM__STEP_NONE;
  follow(h);
  return true;
}

bool hbm__step_history_free_op(hbm__step_history_t *h, uint64_t addr, uint64_t bytes,
                               uint64_t reserved) {
  if (!grow(h))
    return false;
  h->bytes -= (int64_t)bytes;
  h->bytes_min = h->bytes < h->bytes_min ? h->bytes : h->bytes_min;
  uint64_t a;
  uint32_t i = h->n++;
  h->size[i] = 0;
  h->addr[i] = addr;
  h->reserved[i] = reserved;
  h->pair[i] = HBM__STEP_NONE;
  if (hbm_u64map_remove(&h->live, addr, &a)) {
    h->pair[i] = (uint32_t)a;
    h->pair[a] = i;
  }
  follow(h);
  return true;
}

void hbm__step_history_mark(hbm__step_history_t *h) {
  h->marks[0] = h->marks[1];
  h->marks[1] = h->marks[2];
  h->marks[2] = h->n ? h->n - 1 : HBM__STEP_NONE;
}

/* The program's own step boundaries: when its last two marked steps were alike operation for
 * operation (the operation that began the third too), the step is found at once, from the
 * third step's first operation on, without waiting for the stream to repeat 64 of them. */
static bool marked_step(hbm__step_history_t *h, hbm__step_found_t *out) {
  uint32_t m0 = h->marks[0], m1 = h->marks[1], m2 = h->marks[2];
  if (m0 == HBM__STEP_NONE || m1 == HBM__STEP_NONE || m2 != h->n - 1 || m1 <= m0 ||
      m2 - m1 != m1 - m0 || m1 - m0 < MIN_PERIOD || h->tried)
    return false;
  uint32_t p = m1 - m0;
  if (repeats_back(h, m2, p, p + 1) != p + 1)
    return false;
  h->period = p;
  h->matched = h->n - m1;
  out->period = p;
  out->boundary = m1;
  return true;
}

bool hbm__step_detect(hbm__step_history_t *h, hbm__step_found_t *out) {
  if (marked_step(h, out))
    return true;
  uint32_t p = h->period;
  uint32_t confirm = p < CONFIRM ? 2 * p : CONFIRM;
  /* after a failed try, the next waits a period, then two, four... (a plan costs a solve) */
  uint64_t wait = (uint64_t)p << (h->tries < 16 ? h->tries : 16);
  if (!p || h->matched < confirm || h->n < p || (h->tried && h->matched < h->tried + wait))
    return false;
  out->period = p;
  out->boundary = h->n - (h->matched < h->n - p ? h->matched : h->n - p);
  return true;
}

void hbm__step_detect_defer(hbm__step_history_t *h) {
  h->tried = h->matched;
  h->tries++;
}

/* ---- the template ---- */

/* The allocations among operations [from, from + x) of the step beginning at `from`, for x in
 * [0, 2 * period]: counted once, the step repeating past its end. */
typedef struct ordinals {
  uint32_t *before; /* before[x]: allocations among the first x operations of the step */
  uint32_t n;       /* allocations in the step */
} ordinals_t;

static uint32_t ordinal_at(const ordinals_t *o, uint32_t x, uint32_t period) {
  return x <= period ? o->before[x] : o->n + o->before[x - period];
}

/* The end of an item allocated at operation `a` of the history, in allocations of the step
 * beginning at `from`: from its own free when it came, else from the block allocated a
 * period earlier. False: not known (or longer than a step). */
static bool item_end(const hbm__step_history_t *h, const ordinals_t *o, uint32_t from,
                     uint32_t period, uint32_t a, uint32_t *end) {
  uint32_t f = h->pair[a];
  if (f == HBM__STEP_NONE) { /* still live: as the one a period before, if it repeats */
    if (a < period)
      return false;
    uint32_t before = a - period, f0 = h->pair[before];
    if (h->size[before] != h->size[a] || f0 == HBM__STEP_NONE || f0 - before >= period)
      return false;
    f = f0 + period; /* where it is due, in the future */
    if (f < h->n)
      return false; /* it should have been freed by now */
  }
  uint32_t x = f - from + 1; /* operations of the step up to the free, inclusive */
  if (x > 2 * period)
    return false;
  *end = ordinal_at(o, x, period);
  return true;
}

hbm_status_t hbm__step_template(const hbm__step_history_t *h, uint32_t period,
                                hbm__step_item_t **items, uint32_t *n_items) {
  uint32_t from = h->n - period;
  ordinals_t o = {.before = malloc(((size_t)period + 1) * sizeof *o.before)};
  if (!o.before)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory learning the step");
  for (uint32_t x = 0; x < period; x++) {
    o.before[x] = o.n;
    o.n += h->size[from + x] != 0;
  }
  o.before[period] = o.n;
  hbm__step_item_t *out = calloc(o.n + 1, sizeof *out);
  if (!out) {
    free(o.before);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory learning the step");
  }
  uint32_t k = 0;
  for (uint32_t x = 0; x < period; x++) {
    uint32_t a = from + x;
    if (!h->size[a])
      continue;
    hbm__step_item_t *it = &out[k];
    it->size = h->size[a];
    it->bytes = hbm__round_up(it->size, HBM__MIN_BLOCK);
    it->start = k;
    it->addr = h->addr[a];
    it->live_now = h->pair[a] == HBM__STEP_NONE;
    it->planned = item_end(h, &o, from, period, a, &it->end) && it->end > it->start &&
                  it->end - it->start <= o.n;
    k++;
  }
  free(o.before);
  *items = out;
  *n_items = o.n;
  return HBM_OK;
}
