/* index_stream.c — a profile's index built while the profile is read, in step order, without
 * holding its buffers or steps (a 10^8-event capture's are 7 GB): a profile in this mode
 * (hbm__profile_stream) passes each step, buffer and end of a buffer here, and keeps only its
 * metadata, spaces and events. What is kept: the live buffers, each space's live bytes, the
 * per-step values of the current block of HBM_INDEX_BLOCK_STEPS steps (compressed when it
 * completes), the maxima over blocks of HBM_INDEX_LEVEL0 steps, the totals by group, and the
 * buffers live at each space's peak so far. At the end, hbm__index_stream_bytes makes the
 * index hbm__index_write would make of the whole profile (index_write.c assembles both; the
 * numbers derived from the buffers at the peak come from analysis.c), byte for byte.
 *
 * The peak is the first step reaching the most live bytes. The buffers live there are kept in
 * one pass: when a step reaches a new maximum, the buffers live then are those at the peak
 * and the list of those freed since is emptied; a buffer freed later that started at or before
 * the peak goes to that list. At the end, the list and the buffers still live that started at
 * or before the peak are the buffers at the peak.
 *
 * Only what comes in step order is taken: a buffer that does not start at the current step or
 * whose end is given with it, ends before the current step, is padded or indefinite, or whose
 * sizes could add up past HBM_BYTES_MAX is refused with an error (the caller reads the file
 * whole instead), never counted wrong. */
#include "profile/index_write.h"
#include "profile/profile_build.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK HBM_INDEX_BLOCK_STEPS
#define RING 65536 /* live buffers found by index without hashing: most live briefly */

typedef struct buffer_list {
  hbm_buffer_t *items;
  size_t n, cap;
} buffer_list_t;

typedef struct stream_space {
  uint64_t live;   /* bytes live now */
  uint64_t total;  /* the sizes' (saturated) sum: the whole analysis' narrow case */
  uint64_t *block; /* live bytes of the current block's steps */
  hbm__index_column_t column;
  uint64_t *level0_max; /* per HBM_INDEX_LEVEL0 steps: the most, and the first step there */
  int64_t *level0_at;
  size_t n_level0, cap_level0, cap_level0_at;
  hbm__streamed_peak_t peak; /* step -1 until a step is done */
  buffer_list_t freed;       /* live at the peak, freed since */
  hbm__run_groups_t run;
} stream_space_t;

/* The step being read: which buffer it is about (index, -1: none). */
typedef struct step_about {
  int64_t born, freed;
  const char *born_op, *freed_op;
} step_about_t;

struct hbm__index_stream {
  hbm_profile_t *p; /* the profile being read: metadata, spaces, events */
  stream_space_t *spaces;
  int n_spaces;
  int64_t n_steps;    /* added */
  int64_t done;       /* steps whose values are final */
  int64_t first_time; /* step 0's */
  /* The live buffers, in `slots`: found by index in a ring of RING cells (index mod RING),
   * or in `older` once a newer buffer took their cell (a map that only long-lived buffers
   * enter: indexes never come back, so a map of them all would fill with deleted cells). */
  struct ring_cell {
    int64_t idx; /* -1: empty */
    uint64_t slot;
  } * ring;
  hbm_u64map_t older; /* buffer index → slot */
  size_t n_live;
  /* The buffers' sources when they are one per buffer (an RMM log's FILE:LINE): kept apart
   * from the profile's strings, in a table made again with only the live ones' now and then,
   * so that 10^7 allocations do not keep 10^7 strings. */
  hbm_intern_t *sources;
  size_t sources_added;
  hbm_buffer_t *slots;
  size_t n_slots, cap_slots;
  uint64_t *free_slots;
  size_t n_free_slots, cap_free_slots;
  /* the current block of steps */
  int64_t time[BLOCK];
  const char *label[BLOCK];
  hbm__index_step_op_t op[BLOCK];
  step_about_t now, next; /* the current step; frees dated the step after it */
  hbm__index_column_t steps;
  hbm__index_strings_t strings; /* the steps' strings, numbered as their blocks complete */
  hbm__index_out_t raw;
  ZSTD_CCtx *zc;
  bool finished;
  bool failed; /* a call refused or out of memory: the reader's error handling may go on */
};

/* What this pass does not take, said (the caller then reads the file whole). */
static hbm_status_t refusal(hbm__index_stream_t *s, const char *why, long long a, long long b) {
  s->failed = true;
  return hbm__error(HBM_ERR_INVALID, "not indexed in one pass: %s (%lld, %lld)", why, a, b);
}

static bool refuse(hbm__index_stream_t *s, const char *why, long long a, long long b) {
  refusal(s, why, a, b);
  return false;
}

static hbm_status_t no_memory(hbm__index_stream_t *s) {
  s->failed = true;
  return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory indexing a profile as it is read");
}

static bool out_of_memory(hbm__index_stream_t *s) {
  no_memory(s);
  return false;
}

bool hbm__index_stream_failed(const hbm__index_stream_t *s) { return s->failed; }

static const step_about_t no_buffer = {-1, -1, NULL, NULL};

hbm__index_stream_t *hbm__index_stream_new(hbm_profile_t *p) {
  hbm__index_stream_t *s = calloc(1, sizeof *s);
  if (!s || !(s->zc = ZSTD_createCCtx())) {
    free(s);
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory indexing a profile as it is read");
    return NULL;
  }
  s->p = p;
  s->now = s->next = no_buffer;
  hbm_u64map_init(&s->older);
  if (!(s->ring = malloc(RING * sizeof *s->ring))) {
    hbm__index_stream_free(s);
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory indexing a profile as it is read");
    return NULL;
  }
  for (size_t i = 0; i < RING; i++)
    s->ring[i].idx = -1;
  hbm_u64map_init(&s->strings.ids);
  return s;
}

static void space_free(stream_space_t *sp) {
  free(sp->block);
  hbm__index_column_free(&sp->column);
  free(sp->level0_max);
  free(sp->level0_at);
  free(sp->freed.items);
  free(sp->run.rows);
}

void hbm__index_stream_free(hbm__index_stream_t *s) {
  if (!s)
    return;
  for (int i = 0; i < s->n_spaces; i++)
    space_free(&s->spaces[i]);
  free(s->spaces);
  hbm_u64map_free(&s->older);
  free(s->ring);
  hbm_intern_free(s->sources);
  free(s->slots);
  free(s->free_slots);
  hbm__index_column_free(&s->steps);
  hbm__index_strings_free(&s->strings);
  free(s->raw.d);
  ZSTD_freeCCtx(s->zc);
  free(s);
}

static bool push_buffer(buffer_list_t *l, const hbm_buffer_t *b) {
  hbm_buffer_t *grown = hbm__grow_array(l->items, &l->cap, l->n + 1, sizeof *grown, 16);
  if (!grown)
    return false;
  l->items = grown;
  l->items[l->n++] = *b;
  return true;
}

/* ---- the live buffers ---- */

static bool live_put(hbm__index_stream_t *s, int64_t idx, uint64_t slot) {
  struct ring_cell *c = &s->ring[(uint64_t)idx % RING];
  if (c->idx >= 0 && !hbm_u64map_put(&s->older, (uint64_t)c->idx, c->slot))
    return false;
  *c = (struct ring_cell){idx, slot};
  s->n_live++;
  return true;
}

/* Finds and removes buffer idx; false when it is not live. */
static bool live_take(hbm__index_stream_t *s, int64_t idx, uint64_t *slot) {
  struct ring_cell *c = &s->ring[(uint64_t)idx % RING];
  if (c->idx == idx) {
    *slot = c->slot;
    c->idx = -1;
  } else if (!hbm_u64map_remove(&s->older, (uint64_t)idx, slot)) {
    return false;
  }
  s->n_live--;
  return true;
}

/* The live buffers' indexes and slots (room for s->n_live each); how many. */
static size_t live_list(const hbm__index_stream_t *s, int64_t *idx, uint64_t *slot) {
  size_t n = 0;
  for (size_t i = 0; i < RING; i++)
    if (s->ring[i].idx >= 0)
      idx[n] = s->ring[i].idx, slot[n++] = s->ring[i].slot;
  for (size_t i = 0; i < s->older.cap; i++)
    if (s->older.used[i] == 1)
      idx[n] = (int64_t)s->older.keys[i], slot[n++] = s->older.values[i];
  return n;
}

/* Points b's source into `to` (false when out of memory). */
static bool move_source(hbm_buffer_t *b, hbm_intern_t *to) {
  return !b->source || (b->source = hbm_intern(to, b->source)) != NULL;
}

/* The sources' table made again with those of the buffers live or kept at a peak. */
static bool sources_again(hbm__index_stream_t *s) {
  hbm_intern_t *fresh = hbm_intern_new();
  bool ok = fresh != NULL;
  for (size_t i = 0; ok && i < RING; i++)
    ok = s->ring[i].idx < 0 || move_source(&s->slots[s->ring[i].slot], fresh);
  for (size_t i = 0; ok && i < s->older.cap; i++)
    ok = s->older.used[i] != 1 || move_source(&s->slots[s->older.values[i]], fresh);
  for (int k = 0; ok && k < s->n_spaces; k++)
    for (size_t i = 0; ok && i < s->spaces[k].freed.n; i++)
      ok = move_source(&s->spaces[k].freed.items[i], fresh);
  if (!ok) {
    hbm_intern_free(fresh);
    return out_of_memory(s);
  }
  hbm_intern_free(s->sources);
  s->sources = fresh;
  s->sources_added = 0;
  return true;
}

const char *hbm__index_stream_source(hbm__index_stream_t *s, const char *text) {
  size_t kept = s->n_live;
  for (int k = 0; k < s->n_spaces; k++)
    kept += s->spaces[k].freed.n;
  if ((!s->sources || s->sources_added++ > 4 * kept + 65536) && !sources_again(s))
    return NULL;
  const char *copy = hbm_intern(s->sources, text);
  if (text && !copy)
    out_of_memory(s);
  return copy;
}

/* ---- steps ---- */

static bool add_level0(stream_space_t *sp, uint64_t bytes, int64_t step) {
  uint64_t *max =
      hbm__grow_array(sp->level0_max, &sp->cap_level0, sp->n_level0 + 1, sizeof *max, 1024);
  if (max)
    sp->level0_max = max;
  int64_t *at =
      hbm__grow_array(sp->level0_at, &sp->cap_level0_at, sp->n_level0 + 1, sizeof *at, 1024);
  if (at)
    sp->level0_at = at;
  if (!max || !at)
    return false;
  sp->level0_max[sp->n_level0] = bytes;
  sp->level0_at[sp->n_level0++] = step;
  return true;
}

/* A space's value at step `step` (the next to be final), and what it makes of the maxima. */
static bool space_step_done(hbm__index_stream_t *s, stream_space_t *sp, int64_t step) {
  uint64_t v = sp->live;
  sp->block[step % BLOCK] = v;
  if (step % HBM_INDEX_LEVEL0 == 0) {
    if (!add_level0(sp, v, step))
      return false;
  } else if (v > sp->level0_max[sp->n_level0 - 1]) {
    sp->level0_max[sp->n_level0 - 1] = v;
    sp->level0_at[sp->n_level0 - 1] = step;
  }
  if (sp->peak.step < 0 || v > sp->peak.bytes) { /* a new peak: the buffers live now */
    sp->peak.step = step;
    sp->peak.bytes = sp->peak.unpadded = v;
    sp->peak.time_ns = s->time[step % BLOCK];
    sp->freed.n = 0;
  }
  if ((step + 1) % BLOCK == 0) {
    hbm__index_live_block(&s->raw, sp->block, NULL, BLOCK);
    return hbm__index_column_add(&sp->column, s->zc, &s->raw);
  }
  return true;
}

/* The steps' block of n steps, compressed. */
static bool steps_block(hbm__index_stream_t *s, size_t n) {
  hbm__index_step_block(&s->raw, &s->strings, s->time, s->label, s->op, n);
  return !s->strings.failed && hbm__index_column_add(&s->steps, s->zc, &s->raw);
}

/* The current step's values are final. */
static bool step_done(hbm__index_stream_t *s) {
  int64_t step = s->done++;
  hbm__index_step_op_t *op = &s->op[step % BLOCK];
  if (s->now.born >= 0)
    *op = (hbm__index_step_op_t){s->now.born_op, 1};
  else if (s->now.freed >= 0)
    *op = (hbm__index_step_op_t){s->now.freed_op, 2};
  else
    *op = (hbm__index_step_op_t){NULL, 0};
  for (int i = 0; i < s->n_spaces; i++)
    if (!space_step_done(s, &s->spaces[i], step))
      return out_of_memory(s);
  if ((step + 1) % BLOCK == 0 && !steps_block(s, BLOCK))
    return out_of_memory(s);
  return true;
}

bool hbm__index_stream_step(hbm__index_stream_t *s, int64_t time_ns, const char *label) {
  if (s->done < s->n_steps && !step_done(s))
    return false;
  int64_t step = s->n_steps++;
  if (step == 0)
    s->first_time = time_ns;
  s->time[step % BLOCK] = time_ns;
  s->label[step % BLOCK] = label;
  s->now = s->next;
  s->next = no_buffer;
  return true;
}

/* ---- spaces ---- */

/* A space defined after `done` steps: its bytes were 0 there. */
static bool space_catch_up(hbm__index_stream_t *s, stream_space_t *sp) {
  for (int64_t from = 0; from + BLOCK <= s->done; from += BLOCK) {
    uint8_t zeros[BLOCK] = {0}; /* a zigzag varint 0 per step */
    hbm__index_put(&s->raw, zeros, BLOCK);
    if (!hbm__index_column_add(&sp->column, s->zc, &s->raw))
      return false;
  }
  for (int64_t from = 0; from < s->done; from += HBM_INDEX_LEVEL0)
    if (!add_level0(sp, 0, from))
      return false;
  if (s->done > 0) /* the first step reaching 0 bytes */
    sp->peak = (hbm__streamed_peak_t){0, 0, 0, 0, s->first_time};
  return true;
}

bool hbm__index_stream_space(hbm__index_stream_t *s, int space) {
  if (space != s->n_spaces)
    return refuse(s, "spaces out of order", space, s->n_spaces);
  stream_space_t *grown = realloc(s->spaces, (size_t)(space + 1) * sizeof *grown);
  if (!grown)
    return out_of_memory(s);
  s->spaces = grown;
  stream_space_t *sp = &s->spaces[s->n_spaces++];
  *sp = (stream_space_t){.peak = {.step = -1}};
  if (!(sp->block = calloc(BLOCK, sizeof *sp->block)) || !space_catch_up(s, sp))
    return out_of_memory(s);
  return true;
}

/* ---- buffers ---- */

bool hbm__index_stream_buffer(hbm__index_stream_t *s, int64_t idx, const hbm_buffer_t *b) {
  if (b->start != s->n_steps - 1 || s->done != s->n_steps - 1 || b->end >= 0)
    return refuse(s, "a buffer that does not start at the step being read", (long long)b->start,
                  (long long)s->n_steps - 1);
  if (b->unpadded_size != b->size || (b->flags & HBM_BUF_INDEFINITE))
    return refuse(s, "a padded or indefinite buffer", (long long)idx, (long long)b->flags);
  stream_space_t *sp = &s->spaces[b->space];
  sp->total = hbm__bytes_add(sp->total, b->size);
  if (sp->total == HBM_BYTES_MAX)
    return refuse(s, "sizes adding up past HBM_BYTES_MAX", (long long)idx, b->space);
  uint64_t slot;
  if (s->n_free_slots) {
    slot = s->free_slots[--s->n_free_slots];
  } else {
    hbm_buffer_t *slots =
        hbm__grow_array(s->slots, &s->cap_slots, s->n_slots + 1, sizeof *slots, 1024);
    if (!slots)
      return out_of_memory(s);
    s->slots = slots;
    slot = s->n_slots++;
  }
  s->slots[slot] = *b;
  s->slots[slot].id = (uint64_t)idx;
  if (!live_put(s, idx, slot) || !hbm__run_groups_add(&sp->run, b))
    return out_of_memory(s);
  sp->live += b->size;
  sp->peak.n_buffers++;
  if (s->now.born < 0) /* the step is about the first buffer it allocated */
    s->now.born = idx, s->now.born_op = b->op;
  return true;
}

/* A freed buffer: the first freed at its step (by index) is what the step is about. */
static void note_freed(step_about_t *about, int64_t idx, const char *op) {
  if (about->freed < 0 || idx < about->freed)
    about->freed = idx, about->freed_op = op;
}

hbm_status_t hbm__index_stream_end(hbm__index_stream_t *s, int64_t idx, int64_t end) {
  uint64_t slot;
  if (!live_take(s, idx, &slot))
    return refusal(s, "the end of a buffer not live", (long long)idx, (long long)end);
  hbm_buffer_t *b = &s->slots[slot];
  if (end < s->done || end > s->n_steps || end < b->start) /* (the stream is not used again) */
    return refusal(s, "a buffer ending before the step being read", (long long)end,
                   (long long)s->done);
  if (end == s->n_steps && s->done < s->n_steps && !step_done(s)) /* it ends after this step */
    return hbm_last_status();
  b->end = end;
  stream_space_t *sp = &s->spaces[b->space];
  sp->live -= b->size;
  if (b->start <= sp->peak.step && !push_buffer(&sp->freed, b)) /* it was live at the peak */
    return no_memory(s);
  note_freed(end == s->n_steps ? &s->next : &s->now, idx, b->op);
  if (s->n_free_slots == s->cap_free_slots) {
    uint64_t *grown = hbm__grow_array(s->free_slots, &s->cap_free_slots, s->n_free_slots + 1,
                                      sizeof *grown, 1024);
    if (!grown)
      return no_memory(s);
    s->free_slots = grown;
  }
  s->free_slots[s->n_free_slots++] = slot;
  return HBM_OK;
}

/* ---- the end ---- */

hbm_status_t hbm__index_stream_finish(hbm__index_stream_t *s) {
  if (s->finished)
    return HBM_OK;
  if (s->done < s->n_steps && !step_done(s))
    return hbm_last_status();
  size_t rest = (size_t)(s->n_steps % BLOCK);
  for (int i = 0; rest && i < s->n_spaces; i++) {
    hbm__index_live_block(&s->raw, s->spaces[i].block, NULL, rest);
    if (!hbm__index_column_add(&s->spaces[i].column, s->zc, &s->raw))
      return no_memory(s);
  }
  if (rest && !steps_block(s, rest))
    return no_memory(s);
  int64_t *idx = malloc((s->n_live + 1) * sizeof *idx);
  uint64_t *slot = malloc((s->n_live + 1) * sizeof *slot);
  if (!idx || !slot) {
    free(idx), free(slot);
    return no_memory(s);
  }
  size_t n = live_list(s, idx, slot);
  for (size_t k = 0; k < n; k++) { /* what is still live lives out */
    s->slots[slot[k]].end = s->n_steps;
    s->slots[slot[k]].flags |= HBM_BUF_LIVE_OUT;
  }
  free(idx), free(slot);
  s->finished = true;
  return HBM_OK;
}

/* The buffers at the peaks, by index, for analysis.c and the index. */
typedef struct kept {
  hbm_buffer_t *items;
  int64_t *idx;
  size_t n;
} kept_t;

static const hbm_buffer_t *kept_buffer(const void *ctx, int64_t i) {
  const kept_t *k = ctx;
  size_t lo = 0, hi = k->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (k->idx[mid] < i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < k->n && k->idx[lo] == i ? &k->items[lo] : NULL;
}

typedef struct kept_entry {
  int64_t idx;
  const hbm_buffer_t *b;
} kept_entry_t;

static int entry_by_index(const void *x, const void *y) {
  const kept_entry_t *a = x, *b = y;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Every space's buffers at its peak, sorted by index into k. */
static bool keep_peak_buffers(hbm__index_stream_t *s, kept_t *k) {
  size_t n = 0;
  for (int i = 0; i < s->n_spaces; i++)
    n += s->spaces[i].freed.n;
  kept_entry_t *e = malloc((n + s->n_live + 1) * sizeof *e);
  int64_t *live_idx = malloc((s->n_live + 1) * sizeof *live_idx);
  uint64_t *live_slot = malloc((s->n_live + 1) * sizeof *live_slot);
  if (!e || !live_idx || !live_slot) {
    free(e), free(live_idx), free(live_slot);
    return false;
  }
  n = 0;
  for (int i = 0; i < s->n_spaces; i++)
    for (size_t j = 0; j < s->spaces[i].freed.n; j++)
      e[n++] =
          (kept_entry_t){(int64_t)s->spaces[i].freed.items[j].id, &s->spaces[i].freed.items[j]};
  size_t n_live = live_list(s, live_idx, live_slot);
  for (size_t j = 0; j < n_live; j++) {
    const hbm_buffer_t *b = &s->slots[live_slot[j]];
    if (b->start <= s->spaces[b->space].peak.step)
      e[n++] = (kept_entry_t){live_idx[j], b};
  }
  free(live_idx), free(live_slot);
  qsort(e, n, sizeof *e, entry_by_index);
  k->items = malloc((n + 1) * sizeof *k->items);
  k->idx = malloc((n + 1) * sizeof *k->idx);
  bool ok = k->items && k->idx;
  for (size_t j = 0; ok && j < n; j++) {
    k->items[j] = *e[j].b;
    k->idx[j] = e[j].idx; /* its source the profile's string, as read whole */
    ok = move_source(&k->items[j], hbm__profile_strings(s->p));
  }
  k->n = n;
  free(e);
  return ok;
}

/* Space i's analysis from what the pass kept. */
static hbm_analysis_t *space_analysis(hbm__index_stream_t *s, int i, const kept_t *k) {
  stream_space_t *sp = &s->spaces[i];
  int64_t *at = malloc((k->n + 1) * sizeof *at);
  hbm_group_total_t *run = malloc((sp->run.n + 1) * sizeof *run);
  if (!at || !run) {
    free(at), free(run);
    out_of_memory(s);
    return NULL;
  }
  size_t n = 0;
  for (size_t j = 0; j < k->n; j++)
    if (k->items[j].space == i)
      at[n++] = k->idx[j];
  if (sp->run.n)
    memcpy(run, sp->run.rows, sp->run.n * sizeof *run);
  return hbm__analysis_streamed(s->p, i, &sp->peak, kept_buffer, k, at, n, run, sp->run.n);
}

uint8_t *hbm__index_stream_bytes(hbm__index_stream_t *s, const struct stat *st, size_t *len) {
  if (s->failed || hbm__index_stream_finish(s) != HBM_OK)
    return NULL;
  kept_t k = {0};
  hbm__index_space_t *spaces = calloc((size_t)s->n_spaces + 1, sizeof *spaces);
  hbm__reserved_change_t **changes = calloc((size_t)s->n_spaces + 1, sizeof *changes);
  bool ok = spaces && changes && keep_peak_buffers(s, &k);
  for (int i = 0; ok && i < s->n_spaces; i++) {
    stream_space_t *sp = &s->spaces[i];
    spaces[i] = (hbm__index_space_t){
        .level0_max = sp->level0_max, .level0_at = sp->level0_at, .live = &sp->column};
    ok = (spaces[i].a = space_analysis(s, i, &k)) != NULL &&
         hbm__analysis_reserved_changes(s->p, i, &changes[i], &spaces[i].n_reserved);
    spaces[i].reserved = changes ? changes[i] : NULL;
  }
  uint8_t *bytes = NULL;
  if (ok) {
    hbm__index_parts_t parts = {s->p, kept_buffer, &k, spaces, &s->steps, &s->strings};
    bytes = hbm__index_assemble(&parts, st, len);
  }
  if (!bytes)
    out_of_memory(s);
  for (int i = 0; spaces && i < s->n_spaces; i++) {
    hbm_analysis_free((hbm_analysis_t *)spaces[i].a);
    free(changes ? changes[i] : NULL);
  }
  free(spaces);
  free(changes);
  free(k.items);
  free(k.idx);
  return bytes;
}
