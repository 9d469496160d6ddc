/* torch_sink.c — the pickle sink of the PyTorch snapshot reader (torch_internal.h). The
 * streaming pickle reader hands it every dict and list of the snapshot as it is built; a dict
 * keeps only the keys a snapshot uses (the last one wins, as in Python) and, once complete,
 * becomes what its keys say it is: a trace event (action), a frame (filename, name, line), a
 * block (state), a segment (total_size, blocks), the allocator settings or the root dict.
 * A list becomes a stack (a list of frames, interned: thousands of events share a stack), a
 * trace (a list of events: each is fed to the trace as it arrives, then forgotten), or a list
 * record of the items the snapshot needs by position (device traces, segments, blocks).
 * Scalars inside lists are counted, never kept, so memory follows what a snapshot holds, not
 * what a file can make a reader build. */
#include "import/torch_internal.h"

#include <stdlib.h>
#include <string.h>

enum key {
  K_ACTION,
  K_ADDR,
  K_SIZE,
  K_STREAM,
  K_TIME_US,
  K_FRAMES,
  K_DEVICE,
  K_ADDRESS,
  K_TOTAL_SIZE,
  K_BLOCKS,
  K_STATE,
  K_REQUESTED_SIZE,
  K_FILENAME,
  K_NAME,
  K_LINE,
  K_SEGMENTS,
  K_DEVICE_TRACES,
  K_ALLOCATOR_SETTINGS,
  K_ALLOC_CONF,
  K_HISTORY,
  K_REAL_SIZE,
  K_DEVICE_FREE,
  K_COUNT
};

static const char *const key_names[K_COUNT] = {"action",
                                               "addr",
                                               "size",
                                               "stream",
                                               "time_us",
                                               "frames",
                                               "device",
                                               "address",
                                               "total_size",
                                               "blocks",
                                               "state",
                                               "requested_size",
                                               "filename",
                                               "name",
                                               "line",
                                               "segments",
                                               "device_traces",
                                               "allocator_settings",
                                               "PYTORCH_CUDA_ALLOC_CONF",
                                               "history",
                                               "real_size",
                                               "device_free"};

typedef struct dict_state {
  struct dict_state *next_free;
  uint32_t present; /* bit per key */
  pk_ref_t v[K_COUNT];
} dict_state_t;

typedef struct list_state {
  struct list_state *next_free;
  size_t n_items;
  int64_t trace;    /* events went to this trace, -1 none */
  int64_t record;   /* list record of the items read by position, -1 none */
  uint32_t *frames; /* while every item so far is a frame */
  size_t n_frames, cap_frames;
  bool frames_only;
} list_state_t;

#define FREE_NONE SIZE_MAX

/* ---- small growable tables ---- */

static bool grow_table(void **items, size_t *cap, size_t need, size_t elem) {
  void *grown = hbm__grow_array(*items, cap, need, elem, 64);
  if (!grown)
    return false;
  *items = grown;
  return true;
}

#define TABLE_PUSH(r, field, n, cap)                                                               \
  grow_table((void **)&(r)->field, &(r)->cap, (r)->n + 1, sizeof *(r)->field)

/* ---- keys ---- */

/* A dict key as one of ours (-1: not one). Keys repeat as the same bytes of the file (memo
 * references), so a small cache by address answers most lookups without comparing. */
static int key_of(ts_reader_t *r, const pk_ref_t *k) {
  if (k->kind != PK_STR)
    return -1;
  ts_key_seen_t *c = &r->key_cache[((uintptr_t)k->as.s * 0x9e3779b97f4a7c15ull) >> 56 &
                                   (HBM_ARRAY_LEN(r->key_cache) - 1)];
  if (c->s == k->as.s && c->n == k->n)
    return c->id;
  int id = -1;
  /* strlen, no table of lengths made at the first call: two readers on two threads share
   * nothing */
  for (int i = 0; i < K_COUNT && id < 0; i++)
    if (k->n == strlen(key_names[i]) && !memcmp(k->as.s, key_names[i], k->n))
      id = i;
  *c = (ts_key_seen_t){k->as.s, k->n, id};
  return id;
}

static const pk_ref_t *field(const dict_state_t *d, int key) {
  return d->present & (1u << key) ? &d->v[key] : NULL;
}

static bool field_u64(const dict_state_t *d, int key, uint64_t *out) {
  const pk_ref_t *v = field(d, key);
  return v && pk_ref_u64(v, out);
}

static int64_t field_i64(const dict_state_t *d, int key, int64_t fallback) {
  const pk_ref_t *v = field(d, key);
  int64_t out;
  return v && pk_ref_int(v, &out) ? out : fallback;
}

static uint32_t field_stack(const dict_state_t *d) {
  const pk_ref_t *v = field(d, K_FRAMES);
  return v && v->kind == PK_OBJ && v->tag == OBJ_STACK ? (uint32_t)v->as.obj : 0;
}

/* ---- frames and stacks ---- */

/* Whether r is a frame: its kind and tag in one compare (the flags between them masked). */
static inline bool is_frame(const pk_ref_t *r) {
  static const pk_ref_t want = {.kind = PK_OBJ, .tag = OBJ_FRAME},
                        mask = {.kind = 0xff, .tag = 0xffff};
  uint32_t head, w, k;
  memcpy(&head, r, sizeof head);
  memcpy(&w, &want, sizeof w);
  memcpy(&k, &mask, sizeof k);
  return (head & k) == w;
}

static uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

/* The interned text of a frame field ("" when absent), at most TS_MAX_FRAME_TEXT bytes. */
static const char *frame_text(ts_reader_t *r, const pk_ref_t *v, int *len) {
  *len = 0;
  if (!v || v->kind != PK_STR)
    return "";
  *len = v->n < TS_MAX_FRAME_TEXT ? (int)v->n : TS_MAX_FRAME_TEXT;
  return hbm_intern_n(r->strings, (const char *)v->as.s, (size_t)*len);
}

static bool frame_id(ts_reader_t *r, const dict_state_t *d, pk_ref_t *out) {
  ts_frame_t f;
  f.file = frame_text(r, field(d, K_FILENAME), &f.file_len);
  f.name = frame_text(r, field(d, K_NAME), &f.name_len);
  f.line = field_i64(d, K_LINE, 0);
  if (!f.file || !f.name)
    return false;
  uint64_t h = mix(mix(mix(0x51ed27, (uintptr_t)f.file), (uintptr_t)f.name), (uint64_t)f.line);
  uint64_t id;
  for (;; h++) { /* equal frames share one id; a hash taken by another frame probes on */
    if (!hbm_u64map_get(&r->frame_index, h, &id))
      break;
    const ts_frame_t *g = &r->frames[id];
    if (g->file == f.file && g->name == f.name && g->line == f.line) {
      *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_FRAME, .as.obj = id};
      return true;
    }
  }
  if (!TABLE_PUSH(r, frames, n_frames, cap_frames) ||
      !hbm_u64map_put(&r->frame_index, h, r->n_frames))
    return false;
  r->frames[r->n_frames] = f;
  *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_FRAME, .as.obj = r->n_frames++};
  return true;
}

const uint32_t *ts_stack_frames(const ts_reader_t *r, uint32_t stack, uint32_t *n) {
  if (!stack || stack >= r->n_stacks) {
    *n = 0;
    return NULL;
  }
  *n = r->stacks[stack].n;
  return r->frame_pool + r->stacks[stack].first;
}

/* The id of a list of frames (0: empty), equal lists sharing one. */
static bool stack_id(ts_reader_t *r, const uint32_t *frames, size_t n, uint32_t *out) {
  *out = 0;
  if (!n)
    return true;
  if (n > UINT32_MAX)
    n = UINT32_MAX;
  uint64_t h = 0x5eed ^ n; /* two frame ids a multiply (the map mixes the key again) */
  size_t i = 0;
  for (; i + 2 <= n; i += 2)
    h = (h ^ ((uint64_t)frames[i] | (uint64_t)frames[i + 1] << 32)) * 0x9e3779b97f4a7c15ull;
  h = mix(h, i < n ? frames[i] : UINT64_MAX);
  uint64_t id;
  for (;; h++) {
    if (!hbm_u64map_get(&r->stack_index, h, &id))
      break;
    const ts_stack_t *s = &r->stacks[id];
    if (s->n == n && !memcmp(r->frame_pool + s->first, frames, n * sizeof *frames)) {
      *out = (uint32_t)id;
      return true;
    }
  }
  if (r->n_stacks == 0 && !TABLE_PUSH(r, stacks, n_stacks, cap_stacks))
    return false;
  if (r->n_stacks == 0)
    r->stacks[r->n_stacks++] = (ts_stack_t){0, 0}; /* id 0: no frames */
  if (r->n_stacks >= UINT32_MAX || !TABLE_PUSH(r, stacks, n_stacks, cap_stacks) ||
      !grow_table((void **)&r->frame_pool, &r->cap_pool, r->n_pool + n, sizeof *r->frame_pool) ||
      !hbm_u64map_put(&r->stack_index, h, r->n_stacks))
    return false;
  memcpy(r->frame_pool + r->n_pool, frames, n * sizeof *frames);
  r->stacks[r->n_stacks] = (ts_stack_t){r->n_pool, (uint32_t)n};
  r->n_pool += n;
  *out = (uint32_t)r->n_stacks++;
  return true;
}

/* ---- dicts as what they are ---- */

static bool action_kind_of(const pk_ref_t *action, ev_kind_t *kind) {
  static const struct {
    const char *action;
    ev_kind_t kind;
  } kinds[] = {{"alloc", EV_ALLOC},
               {"free_completed", EV_FREE},
               {"free", EV_FREE},
               {"segment_alloc", EV_RESERVE},
               {"segment_map", EV_RESERVE},
               {"segment_free", EV_RELEASE},
               {"segment_unmap", EV_RELEASE},
               {"oom", EV_OOM}};
  for (size_t i = 0; action && i < HBM_ARRAY_LEN(kinds); i++)
    if (pk_ref_is(action, kinds[i].action, strlen(kinds[i].action))) {
      *kind = kinds[i].kind;
      return true;
    }
  return false; /* free_requested (the memory is not reusable yet), snapshot, unknown */
}

static bool new_event(ts_reader_t *r, size_t *id) {
  if (r->free_event != FREE_NONE) {
    *id = r->free_event;
    r->free_event = (size_t)r->events[*id].addr;
    return true;
  }
  if (!TABLE_PUSH(r, events, n_events, cap_events))
    return false;
  *id = r->n_events++;
  return true;
}

/* The same bytes of the file (a memo reference to one action string) are the same action. */
static bool action_kind(ts_reader_t *r, const pk_ref_t *action, ev_kind_t *kind) {
  if (!action)
    return false;
  ts_action_seen_t *c =
      &r->action_cache[((uintptr_t)action->as.s >> 3) % HBM_ARRAY_LEN(r->action_cache)];
  if (action->kind == PK_STR && c->s == action->as.s && c->n == action->n) {
    *kind = (ev_kind_t)c->kind;
    return c->known;
  }
  bool known = action_kind_of(action, kind);
  if (action->kind == PK_STR)
    *c = (ts_action_seen_t){action->as.s, action->n, known, known ? (int)*kind : 0};
  return known;
}

/* An event dict: a pending event for the trace its list makes (OBJ_OTHER for actions that
 * change nothing hbm tracks). */
static bool close_event(ts_reader_t *r, const dict_state_t *d, unsigned flags, pk_ref_t *out) {
  ts_event_t e = {.stream = field_i64(d, K_STREAM, 0), .time_us = field_i64(d, K_TIME_US, -1)};
  if ((flags & PK_CLOSE_PARTIAL) || !action_kind(r, field(d, K_ACTION), &e.kind)) {
    *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_OTHER};
    return true;
  }
  e.numbers = field_u64(d, K_SIZE, &e.size) && field_u64(d, K_ADDR, &e.addr);
  if (e.kind == EV_OOM) /* the free device memory: 'device_free' (2.0 on), or addr (later) */
    e.numbers = field_u64(d, K_SIZE, &e.size) &&
                (field_u64(d, K_DEVICE_FREE, &e.addr) || field_u64(d, K_ADDR, &e.addr));
  e.stack = field_stack(d);
  e.consumed = false;
  size_t id;
  if (!new_event(r, &id))
    return false;
  r->events[id] = e;
  /* events used once are recycled as soon as their trace has them (see list_add) */
  *out = (pk_ref_t){
      .kind = PK_OBJ, .tag = OBJ_EVENT, .flags = (flags & PK_CLOSE_AGAIN) ? 1 : 0, .as.obj = id};
  return true;
}

/* The first entry of a block's 'history' list (PyTorch 2.0), NULL when it has none. */
static const ts_history_t *first_history(const ts_reader_t *r, const pk_ref_t *v) {
  if (!v || v->kind != PK_OBJ || v->tag != OBJ_LIST)
    return NULL;
  const ts_list_t *l = &r->lists[v->as.obj];
  if (!l->n || l->positions[0] != 0 || l->items[0] >> 32 != OBJ_HISTORY)
    return NULL;
  return &r->histories[l->items[0] & 0xffffffffu];
}

static bool close_block(ts_reader_t *r, const dict_state_t *d, pk_ref_t *out) {
  const pk_ref_t *state = field(d, K_STATE);
  ts_block_t b = {.pending = state && pk_ref_is(state, "active_pending_free", 19),
                  .has_frames = field(d, K_FRAMES) != NULL,
                  .stack = field_stack(d)};
  b.live = b.pending || (state && pk_ref_is(state, "active_allocated", 16));
  b.has_address = field_u64(d, K_ADDRESS, &b.address);
  b.has_size = field_u64(d, K_SIZE, &b.size);
  b.has_requested = field_u64(d, K_REQUESTED_SIZE, &b.requested);
  const ts_history_t *h = first_history(r, field(d, K_HISTORY));
  if (h && h->has_real_size) {
    b.has_history = true;
    b.history_size = h->real_size;
    if (!b.stack)
      b.stack = h->stack;
  }
  if (!TABLE_PUSH(r, blocks, n_blocks, cap_blocks))
    return false;
  r->blocks[r->n_blocks] = b;
  *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_BLOCK, .as.obj = r->n_blocks++};
  return true;
}

static bool close_history(ts_reader_t *r, const dict_state_t *d, pk_ref_t *out) {
  ts_history_t h = {.stack = field_stack(d)};
  h.has_real_size = field_u64(d, K_REAL_SIZE, &h.real_size);
  if (!TABLE_PUSH(r, histories, n_histories, cap_histories))
    return false;
  r->histories[r->n_histories] = h;
  *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_HISTORY, .as.obj = r->n_histories++};
  return true;
}

static int64_t list_record_of(const pk_ref_t *v) {
  return v && v->kind == PK_OBJ && v->tag == OBJ_LIST ? (int64_t)v->as.obj : -1;
}

static bool close_segment(ts_reader_t *r, const dict_state_t *d, pk_ref_t *out) {
  /* no 'device': no device's (memory_viz compares it with each device and draws it nowhere) */
  ts_segment_t s = {.device = field_i64(d, K_DEVICE, -1),
                    .blocks = list_record_of(field(d, K_BLOCKS))};
  s.numbers = field_u64(d, K_ADDRESS, &s.address) && field_u64(d, K_TOTAL_SIZE, &s.total_size);
  if (!TABLE_PUSH(r, segments, n_segments, cap_segments))
    return false;
  r->segments[r->n_segments] = s;
  *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_SEGMENT, .as.obj = r->n_segments++};
  return true;
}

static bool close_dict(ts_reader_t *r, const dict_state_t *d, unsigned flags, pk_ref_t *out) {
  if (field(d, K_ACTION))
    return close_event(r, d, flags, out);
  if (field(d, K_SEGMENTS) || field(d, K_DEVICE_TRACES)) {
    static const pk_ref_t none = {.kind = PK_NONE};
    const pk_ref_t *segs = field(d, K_SEGMENTS), *traces = field(d, K_DEVICE_TRACES);
    const pk_ref_t *settings = field(d, K_ALLOCATOR_SETTINGS);
    r->have_root = true;
    r->root_segments = segs ? *segs : none;
    r->root_traces = traces ? *traces : none;
    r->alloc_conf = settings && settings->kind == PK_OBJ && settings->tag == OBJ_SETTINGS
                        ? (const char *)(uintptr_t)settings->as.obj
                        : NULL;
    *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_ROOT};
    return true;
  }
  if (field(d, K_TOTAL_SIZE) || field(d, K_BLOCKS))
    return close_segment(r, d, out);
  if (field(d, K_STATE))
    return close_block(r, d, out);
  if (field(d, K_REAL_SIZE))
    return close_history(r, d, out);
  if (field(d, K_ALLOC_CONF)) {
    const pk_ref_t *conf = field(d, K_ALLOC_CONF);
    const char *text =
        conf->kind == PK_STR ? hbm_intern_n(r->strings, (const char *)conf->as.s, conf->n) : NULL;
    *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_SETTINGS, .as.obj = (uintptr_t)text};
    return !(conf->kind == PK_STR && !text);
  }
  return frame_id(r, d, out); /* any other dict in a frames list is a frame, as before */
}

/* ---- list records ---- */

static bool record_item(ts_reader_t *r, list_state_t *l, const pk_ref_t *item, size_t position) {
  if (l->record < 0) {
    if (!TABLE_PUSH(r, lists, n_lists, cap_lists))
      return false;
    r->lists[r->n_lists] = (ts_list_t){0};
    l->record = (int64_t)r->n_lists++;
  }
  ts_list_t *rec = &r->lists[l->record];
  size_t cap = rec->cap;
  if (!grow_table((void **)&rec->items, &cap, rec->n + 1, sizeof *rec->items) ||
      !grow_table((void **)&rec->positions, &rec->cap, rec->n + 1, sizeof *rec->positions))
    return false;
  rec->items[rec->n] = (uint64_t)item->tag << 32 | (item->as.obj & 0xffffffffu);
  rec->positions[rec->n++] = position;
  return true;
}

/* One item into a list: events feed its trace, frames its stack, the rest its record. */
static bool list_add_one(ts_reader_t *r, list_state_t *l, const pk_ref_t *item) {
  size_t position = l->n_items++;
  bool frame = is_frame(item);
  if (!frame)
    l->frames_only = false;
  if (frame && l->frames_only) {
    if (l->n_frames == l->cap_frames &&
        !grow_table((void **)&l->frames, &l->cap_frames, l->n_frames + 1, sizeof *l->frames))
      return false;
    l->frames[l->n_frames++] = (uint32_t)item->as.obj;
    return true;
  }
  if (item->kind != PK_OBJ)
    return true;
  switch (item->tag) {
  case OBJ_EVENT: {
    if (l->trace < 0 && (l->trace = ts_trace_new(r)) < 0)
      return false;
    ts_event_t *e = &r->events[item->as.obj];
    ts_trace_t *t = &r->traces[l->trace];
    t->index = (int64_t)position;
    bool ok = e->consumed ? (t->sum.inconsistent++, true) /* the same event dict again */
                          : ts_trace_feed(r, (uint32_t)l->trace, e);
    e->consumed = true;
    if (!(item->flags & 1)) { /* used once: recycled */
      e->addr = r->free_event;
      r->free_event = item->as.obj;
    }
    return ok;
  }
  case OBJ_TRACE:
  case OBJ_BLOCK:
  case OBJ_HISTORY:
  case OBJ_SEGMENT:
  case OBJ_LIST:
  case OBJ_STACK: return record_item(r, l, item, position);
  default: return true;
  }
}

/* ---- the sink ---- */

static bool sink_open(void *ctx, pk_kind_t kind, uint64_t *state) {
  ts_reader_t *r = ctx;
  if (kind == PK_DICT) {
    dict_state_t *d = r->free_dicts;
    if (d)
      r->free_dicts = d->next_free;
    else if (!(d = malloc(sizeof *d)))
      return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", r->name), false;
    d->present = 0;
    *state = (uintptr_t)d;
    return true;
  }
  list_state_t *l = r->free_lists;
  if (l)
    r->free_lists = l->next_free;
  else if (!(l = calloc(1, sizeof *l)))
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", r->name), false;
  l->n_items = 0;
  l->trace = l->record = -1;
  l->n_frames = 0;
  l->frames_only = true;
  *state = (uintptr_t)l;
  return true;
}

static bool sink_add(void *ctx, pk_kind_t kind, uint64_t *state, const pk_ref_t *items, size_t n) {
  ts_reader_t *r = ctx;
  bool ok = true;
  if (kind == PK_DICT) {
    dict_state_t *d = (dict_state_t *)(uintptr_t)*state;
    for (size_t i = 0; i + 1 < n; i += 2) {
      int k = key_of(r, &items[i]);
      if (k >= 0) {
        d->v[k] = items[i + 1];
        d->present |= 1u << k;
      }
    }
  } else {
    list_state_t *l = (list_state_t *)(uintptr_t)*state;
    size_t i = 0;
    if (l->frames_only) { /* a stack: frames, and frames only, by the thousand */
      if (l->n_frames + n > l->cap_frames &&
          !grow_table((void **)&l->frames, &l->cap_frames, l->n_frames + n, sizeof *l->frames))
        return false;
      uint32_t *frames = l->frames + l->n_frames; /* locals: the loop stays in registers */
      for (; i < n && is_frame(&items[i]); i++)
        frames[i] = (uint32_t)items[i].as.obj;
      l->n_frames += i;
      l->n_items += i;
    }
    for (; i < n && ok; i++)
      ok = list_add_one(r, l, &items[i]);
  }
  if (!ok && hbm_last_status() == HBM_OK)
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", r->name);
  return ok;
}

static void recycle(ts_reader_t *r, pk_kind_t kind, uint64_t state) {
  if (kind == PK_DICT) {
    dict_state_t *d = (dict_state_t *)(uintptr_t)state;
    d->next_free = r->free_dicts;
    r->free_dicts = d;
  } else {
    list_state_t *l = (list_state_t *)(uintptr_t)state;
    l->next_free = r->free_lists;
    r->free_lists = l;
  }
}

static bool close_list(ts_reader_t *r, list_state_t *l, pk_ref_t *out) {
  if (l->trace >= 0) {
    r->traces[l->trace].length = (int64_t)l->n_items;
    *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_TRACE, .as.obj = (uint64_t)l->trace};
    return true;
  }
  if (l->frames_only) {
    uint32_t id;
    if (!stack_id(r, l->frames, l->n_frames, &id))
      return false;
    *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_STACK, .as.obj = id};
    return true;
  }
  if (l->record < 0) { /* scalars only: nothing a snapshot needs */
    *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_OTHER};
    return true;
  }
  r->lists[l->record].n_items = l->n_items;
  *out = (pk_ref_t){.kind = PK_OBJ, .tag = OBJ_LIST, .as.obj = (uint64_t)l->record};
  return true;
}

static bool sink_close(void *ctx, pk_kind_t kind, uint64_t state, unsigned flags, pk_ref_t *out) {
  ts_reader_t *r = ctx;
  bool ok = kind == PK_DICT ? close_dict(r, (dict_state_t *)(uintptr_t)state, flags, out)
                            : close_list(r, (list_state_t *)(uintptr_t)state, out);
  recycle(r, kind, state);
  if (!ok && hbm_last_status() == HBM_OK)
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", r->name);
  return ok;
}

static void sink_discard(void *ctx, pk_kind_t kind, uint64_t state) { recycle(ctx, kind, state); }

void ts_sink_init(ts_reader_t *r, pk_sink_t *sink) {
  *sink = (pk_sink_t){r, sink_open, sink_add, sink_close, sink_discard};
  r->free_event = FREE_NONE;
  hbm_u64map_init(&r->frame_index);
  hbm_u64map_init(&r->stack_index);
}

void ts_sink_free(ts_reader_t *r) {
  for (dict_state_t *d = r->free_dicts, *next; d; d = next) {
    next = d->next_free;
    free(d);
  }
  for (list_state_t *l = r->free_lists, *next; l; l = next) {
    next = l->next_free;
    free(l->frames);
    free(l);
  }
  for (size_t i = 0; i < r->n_lists; i++) {
    free(r->lists[i].items);
    free(r->lists[i].positions);
  }
  free(r->lists);
  free(r->frames);
  free(r->frame_pool);
  free(r->stacks);
  free(r->events);
  free(r->blocks);
  free(r->histories);
  free(r->segments);
  free(r->seg_read);
  free(r->block_read);
  hbm_u64map_free(&r->frame_index);
  hbm_u64map_free(&r->stack_index);
}
