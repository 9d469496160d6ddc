/* torch_snapshot.c — PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot, read
 * with the restricted pickle reader) as hbm's one profile model and as an allocation log.
 *
 * A snapshot is a dict: `segments` (the caching allocator's reserved segments at the moment of
 * the dump, each with its blocks and their states) and `device_traces` (one list of events
 * per device: alloc, free_requested, free_completed, segment_alloc / segment_free,
 * segment_map / segment_unmap, oom, snapshot, with addr, size, stream, time_us and frames).
 * Every key is optional: older snapshots lack some.
 *
 * The trace is a ring buffer that usually starts after the model was built, so it does not
 * say what was live before it began. That state is reconstructed from both ends: an address
 * whose first trace event is a free was allocated before the trace; a block still active at
 * the dump whose address the trace never mentions was allocated before it and never freed;
 * segments likewise for reserved memory. Those become step 0 ("before the trace"), and each
 * trace event one step after it. Buffer sizes are the sizes the trace records (the requested
 * bytes); a buffer ends at free_completed, when PyTorch can reuse the memory. */
#include "import/torch_snapshot.h"
#include "import/pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 1024
#define MAX_STACK_FRAMES 64 /* frames shown in a buffer's stack; the rest are counted */
#define CALLER_FRAMES 4     /* user frames above the op that name its group */
/* Bounds that keep every sum of a hostile file inside int64 (the analysis sums sizes):
 * no block above 1 PiB, no total above 1 EiB. Real snapshots are far below both. */
#define MAX_SIZE ((uint64_t)1 << 50)
#define MAX_TOTAL ((int64_t)1 << 60)
#define MAX_KEYS 256        /* keys of one event, block, segment or frame dict */
#define MAX_FRAME_TEXT 512  /* bytes of a frame's file or function name used */
#define MAX_STACK_TEXT 8192 /* bytes of a buffer's stack text */

typedef enum ev_kind { EV_ALLOC, EV_FREE, EV_RESERVE, EV_RELEASE, EV_OOM } ev_kind_t;

typedef struct tevent {
  ev_kind_t kind;
  bool before; /* in place before the trace began */
  uint64_t addr, size;
  uint64_t device_free; /* oom: the bytes cudaMemGetInfo said were free */
  int64_t stream, time_us;
  int64_t index; /* position in the device trace, -1 before it */
  const pk_value_t *frames;
} tevent_t;

typedef struct device {
  tevent_t *events;
  size_t n, cap;
  size_t n_before; /* events[0, n_before) are the state before the trace */
  int space;       /* in the profile */
  torch_device_summary_t sum;
} device_t;

typedef struct snapshot {
  const char *name; /* the file's base name */
  pk_doc_t *doc;
  device_t *devices;
  int n_devices;
  int64_t *seg_device; /* the device of each segment */
  /* Values visited, at most a multiple of the file's size: the memo lets a small hostile
   * file refer to one big list from everywhere, which a reader must not walk each time. */
  size_t budget;
  bool over_budget;
} snapshot_t;

#define BUDGET_PER_BYTE 32
#define BUDGET_BASE ((size_t)1 << 20)

static bool spend(snapshot_t *s, size_t n) {
  if (s->budget < n) {
    s->over_budget = true;
    return false;
  }
  s->budget -= n;
  return true;
}

/* ---- reading the pickle ---- */

/* A key of an event, block, segment or frame. These dicts have a dozen keys in PyTorch; a
 * bigger one is not PyTorch's, and since one dict may be shared by every event of a hostile
 * file, looking into it could cost (keys x events): it reads as empty instead. */
static const pk_value_t *get(const pk_value_t *dict, const char *key) {
  if (!dict || dict->kind != PK_DICT || dict->as.seq.n > 2 * MAX_KEYS)
    return NULL;
  return pk_get(dict, key);
}

static uint64_t get_u64(const pk_value_t *dict, const char *key, bool *ok) {
  int64_t v;
  if (!pk_int(get(dict, key), &v) || v < 0) {
    *ok = false;
    return 0;
  }
  return (uint64_t)v;
}

static int64_t get_i64(const pk_value_t *dict, const char *key, int64_t fallback) {
  int64_t v;
  return pk_int(get(dict, key), &v) ? v : fallback;
}

static bool push_event(device_t *d, const tevent_t *e) {
  if (d->n == d->cap) {
    tevent_t *grown = hbm__grow_array(d->events, &d->cap, d->n + 1, sizeof *grown, 256);
    if (!grown)
      return false;
    d->events = grown;
  }
  d->events[d->n++] = *e;
  return true;
}

/* The device of a segment (0 when absent: single-GPU snapshots of old releases). */
static int64_t segment_device(const pk_value_t *seg) { return get_i64(seg, "device", 0); }

static int count_devices(const pk_value_t *root) {
  size_t n_traces, n_segs;
  pk_items(pk_get(root, "device_traces"), &n_traces);
  pk_value_t *const *segs = pk_items(pk_get(root, "segments"), &n_segs);
  int64_t n = (int64_t)n_traces;
  for (size_t i = 0; i < n_segs; i++) {
    int64_t d = segment_device(segs[i]);
    if (d >= 0 && d < MAX_DEVICES && d + 1 > n)
      n = d + 1;
  }
  return n > MAX_DEVICES ? MAX_DEVICES : (int)n;
}

/* Address states while reading a trace (values of the `seen` map). */
enum { SEEN_LIVE = 1, SEEN_FREED = 2 };

typedef struct trace_reader {
  snapshot_t *snap;
  device_t *dev;
  tevent_t *before; /* allocations and reservations before the trace, collected apart */
  size_t n_before, cap_before;
  hbm_u64map_t seen;     /* address → SEEN_* */
  hbm_u64map_t seg_seen; /* segment addresses the trace reserves or releases */
  int64_t net_reserved;  /* segment events: reserved minus released */
} trace_reader_t;

static bool add_before(trace_reader_t *tr, ev_kind_t kind, uint64_t addr, uint64_t size,
                       const pk_value_t *frames) {
  if (tr->n_before == tr->cap_before) {
    tevent_t *grown =
        hbm__grow_array(tr->before, &tr->cap_before, tr->n_before + 1, sizeof *grown, 64);
    if (!grown)
      return false;
    tr->before = grown;
  }
  tr->before[tr->n_before++] = (tevent_t){
      .kind = kind, .before = true, .addr = addr, .size = size, .index = -1, .frames = frames};
  return true;
}

/* One block or trace allocation/free, keeping `seen` consistent. false: out of memory. */
static bool read_alloc(trace_reader_t *tr, tevent_t *e) {
  uint64_t state;
  if (hbm_u64map_get(&tr->seen, e->addr, &state) && state == SEEN_LIVE) {
    /* a second allocation of a live address: the free was not recorded */
    tr->dev->sum.inconsistent++;
    tevent_t free_it = *e;
    free_it.kind = EV_FREE;
    if (!push_event(tr->dev, &free_it))
      return false;
  }
  return hbm_u64map_put(&tr->seen, e->addr, SEEN_LIVE) && push_event(tr->dev, e);
}

static bool read_free(trace_reader_t *tr, tevent_t *e) {
  uint64_t state;
  if (!hbm_u64map_get(&tr->seen, e->addr, &state)) {
    /* the first event of this address is its free: it was allocated before the trace */
    if (!add_before(tr, EV_ALLOC, e->addr, e->size, NULL))
      return false;
  } else if (state != SEEN_LIVE) {
    tr->dev->sum.inconsistent++; /* freed twice */
    return true;
  }
  return hbm_u64map_put(&tr->seen, e->addr, SEEN_FREED) && push_event(tr->dev, e);
}

static bool read_segment_event(trace_reader_t *tr, tevent_t *e) {
  bool first = !hbm_u64map_get(&tr->seg_seen, e->addr, NULL);
  if (e->kind == EV_RELEASE && first && !add_before(tr, EV_RESERVE, e->addr, e->size, NULL))
    return false;
  tr->net_reserved += e->kind == EV_RESERVE ? (int64_t)e->size : -(int64_t)e->size;
  return hbm_u64map_put(&tr->seg_seen, e->addr, 1) && push_event(tr->dev, e);
}

/* The event kind of an action; false for actions that change nothing hbm tracks. */
static bool action_kind(const char *action, ev_kind_t *kind) {
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
    if (!strcmp(action, kinds[i].action)) {
      *kind = kinds[i].kind;
      return true;
    }
  return false; /* free_requested (the memory is not reusable yet), snapshot, unknown */
}

static bool read_trace_event(trace_reader_t *tr, const pk_value_t *ev, size_t index) {
  tevent_t e = {.index = (int64_t)index};
  if (!action_kind(pk_str(get(ev, "action")), &e.kind))
    return true;
  bool ok = true;
  e.size = get_u64(ev, "size", &ok);
  uint64_t addr = get_u64(ev, "addr", &ok);
  if (!ok) { /* an event without its numbers says nothing hbm can place */
    tr->dev->sum.inconsistent++;
    return true;
  }
  e.stream = get_i64(ev, "stream", 0);
  e.time_us = get_i64(ev, "time_us", -1);
  e.frames = get(ev, "frames");
  tr->dev->sum.trace_events++;
  if (e.kind == EV_OOM) {
    e.device_free = addr; /* PyTorch records the free device memory in addr */
    return push_event(tr->dev, &e);
  }
  e.addr = addr;
  if (e.kind == EV_ALLOC)
    return read_alloc(tr, &e);
  if (e.kind == EV_FREE)
    return read_free(tr, &e);
  return read_segment_event(tr, &e);
}

/* Blocks active at the dump whose address the trace never mentions were allocated before it
 * and are live throughout. */
static bool read_blocks(trace_reader_t *tr, const pk_value_t *seg) {
  size_t n;
  pk_value_t *const *blocks = pk_items(get(seg, "blocks"), &n);
  if (!spend(tr->snap, n))
    return false;
  for (size_t i = 0; i < n; i++) {
    const char *state = pk_str(get(blocks[i], "state"));
    if (!state || (strcmp(state, "active_allocated") && strcmp(state, "active_pending_free")))
      continue;
    bool ok = true;
    uint64_t addr = get_u64(blocks[i], "address", &ok), size = get_u64(blocks[i], "size", &ok);
    if (!ok)
      continue;
    tr->dev->sum.allocated_end += size;
    uint64_t requested = get_u64(blocks[i], "requested_size", &ok);
    if (hbm_u64map_get(&tr->seen, addr, NULL))
      continue;
    if (!add_before(tr, EV_ALLOC, addr, ok && requested ? requested : size,
                    get(blocks[i], "frames")) ||
        !hbm_u64map_put(&tr->seen, addr, SEEN_LIVE))
      return false;
  }
  return true;
}

static bool read_segments(trace_reader_t *tr, const pk_value_t *root, int device) {
  size_t n;
  pk_value_t *const *segs = pk_items(pk_get(root, "segments"), &n);
  for (size_t i = 0; i < n; i++) {
    if (tr->snap->seg_device[i] != device)
      continue;
    if (!spend(tr->snap, 1))
      return false;
    bool ok = true;
    uint64_t addr = get_u64(segs[i], "address", &ok), size = get_u64(segs[i], "total_size", &ok);
    if (ok) {
      tr->dev->sum.reserved_end += size;
      if (!hbm_u64map_get(&tr->seg_seen, addr, NULL) &&
          !add_before(tr, EV_RESERVE, addr, size, NULL))
        return false;
    }
    if (!read_blocks(tr, segs[i]))
      return false;
  }
  return true;
}

/* Makes the reservations before the trace add up to what the segments at the dump need
 * (they differ when expandable segments map pages inside a segment the trace never saw). */
static bool balance_reserved(trace_reader_t *tr) {
  int64_t before = 0;
  for (size_t i = 0; i < tr->n_before; i++)
    if (tr->before[i].kind == EV_RESERVE)
      before += (int64_t)tr->before[i].size;
  int64_t want = (int64_t)tr->dev->sum.reserved_end - tr->net_reserved;
  if (want < 0)
    want = 0; /* the trace releases more than it could have held: nothing to add */
  if (want == before)
    return true;
  /* one reservation (or release) at address 0 absorbs the difference */
  ev_kind_t kind = want > before ? EV_RESERVE : EV_RELEASE;
  uint64_t size = (uint64_t)(want > before ? want - before : before - want);
  return add_before(tr, kind, 0, size, NULL);
}

/* Moves the state before the trace in front of the trace's events. */
static bool prepend_before(trace_reader_t *tr) {
  device_t *d = tr->dev;
  size_t n = d->n + tr->n_before;
  tevent_t *all = malloc((n + 1) * sizeof *all);
  if (!all)
    return false;
  if (tr->n_before)
    memcpy(all, tr->before, tr->n_before * sizeof *all);
  if (d->n)
    memcpy(all + tr->n_before, d->events, d->n * sizeof *all);
  free(d->events);
  d->events = all;
  d->n = d->cap = n;
  d->n_before = tr->n_before;
  d->sum.before_trace = 0;
  for (size_t i = 0; i < tr->n_before; i++)
    d->sum.before_trace += tr->before[i].kind == EV_ALLOC;
  return true;
}

/* Drops the events that would take the bytes allocated or reserved outside
 * [-MAX_TOTAL, MAX_TOTAL] (and the frees of allocations dropped), counting them. */
static bool bound_totals(device_t *d) {
  hbm_u64map_t dropped, sizes; /* allocations dropped; sizes of those kept and live */
  hbm_u64map_init(&dropped);
  hbm_u64map_init(&sizes);
  int64_t live = 0, reserved = 0;
  size_t kept = 0;
  bool ok = true;
  for (size_t i = 0; i < d->n && ok; i++) {
    tevent_t *e = &d->events[i];
    int64_t size = (int64_t)e->size;
    bool keep = e->size <= MAX_SIZE;
    uint64_t was = 0;
    if (e->kind == EV_ALLOC && (!keep || live + size > MAX_TOTAL)) {
      keep = false;
      ok = hbm_u64map_put(&dropped, e->addr, 1);
    } else if (e->kind == EV_ALLOC) {
      ok = hbm_u64map_put(&sizes, e->addr, e->size);
      live += size;
    } else if (e->kind == EV_FREE) {
      /* the profile ends the allocation with its own size, whatever the free says */
      keep = !hbm_u64map_remove(&dropped, e->addr, NULL);
      if (keep && hbm_u64map_remove(&sizes, e->addr, &was))
        live -= (int64_t)was;
    } else if (e->kind == EV_RESERVE || e->kind == EV_RELEASE) {
      int64_t next = reserved + (e->kind == EV_RESERVE ? size : -size);
      keep = keep && next <= MAX_TOTAL && next >= -MAX_TOTAL;
      if (keep)
        reserved = next;
    }
    if (!keep) {
      d->sum.inconsistent++;
      if (i < d->n_before)
        d->n_before--;
      continue;
    }
    d->events[kept++] = *e;
  }
  d->n = kept;
  hbm_u64map_free(&dropped);
  hbm_u64map_free(&sizes);
  return ok;
}

/* Reserved bytes over the trace: the most at any event. */
static void compute_peak_reserved(device_t *d) {
  int64_t reserved = 0, peak = 0;
  for (size_t i = 0; i < d->n; i++) {
    const tevent_t *e = &d->events[i];
    if (e->kind == EV_RESERVE)
      reserved += (int64_t)e->size;
    else if (e->kind == EV_RELEASE)
      reserved -= (int64_t)e->size;
    if (reserved > peak)
      peak = reserved;
  }
  d->sum.peak_reserved = (uint64_t)peak;
}

static bool read_device(snapshot_t *s, const pk_value_t *root, int device) {
  device_t *d = &s->devices[device];
  d->sum.device = device;
  trace_reader_t tr = {.snap = s, .dev = d};
  hbm_u64map_init(&tr.seen);
  hbm_u64map_init(&tr.seg_seen);
  size_t n_traces, n;
  pk_value_t *const *traces = pk_items(pk_get(root, "device_traces"), &n_traces);
  pk_value_t *const *events = (size_t)device < n_traces ? pk_items(traces[device], &n) : NULL;
  bool ok = true;
  for (size_t i = 0; events && i < n && ok; i++)
    ok = spend(s, 1) && read_trace_event(&tr, events[i], i);
  ok = ok && read_segments(&tr, root, device) && balance_reserved(&tr) && prepend_before(&tr) &&
       bound_totals(d);
  if (ok)
    compute_peak_reserved(d);
  free(tr.before);
  hbm_u64map_free(&tr.seen);
  hbm_u64map_free(&tr.seg_seen);
  if (!ok && s->over_budget)
    hbm__error(HBM_ERR_PARSE,
               "%s: the snapshot refers to the same data more often than a file of its size "
               "can (memo references from everywhere): refused as hostile",
               s->name);
  else if (!ok)
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory reading device %d", s->name, device);
  return ok;
}

static void snapshot_free(snapshot_t *s) {
  for (int i = 0; i < s->n_devices; i++)
    free(s->devices[i].events);
  free(s->devices);
  free(s->seg_device);
  pk_free(s->doc);
}

static bool snapshot_read(snapshot_t *s, const uint8_t *data, size_t len, const char *path) {
  memset(s, 0, sizeof *s);
  s->name = hbm__base_name(path ? path : "snapshot");
  if (!(s->doc = pk_parse(data, len, s->name, NULL)))
    return false;
  const pk_value_t *root = pk_root(s->doc);
  if (root->kind != PK_DICT) {
    hbm__error(HBM_ERR_PARSE,
               "%s: a pickle, but not a PyTorch memory snapshot: expected a dict with "
               "'segments' and 'device_traces' (torch.cuda.memory._dump_snapshot)",
               s->name);
    return false;
  }
  if (!pk_get(root, "segments") && !pk_get(root, "device_traces")) {
    hbm__error(HBM_ERR_PARSE,
               "%s: a pickled dict without 'segments' or 'device_traces': not a PyTorch memory "
               "snapshot (torch.cuda.memory._dump_snapshot)",
               s->name);
    return false;
  }
  s->budget = BUDGET_PER_BYTE * len + BUDGET_BASE;
  s->n_devices = count_devices(root);
  size_t n_segs;
  pk_value_t *const *segs = pk_items(pk_get(root, "segments"), &n_segs);
  s->devices = calloc((size_t)s->n_devices + 1, sizeof *s->devices);
  s->seg_device = malloc((n_segs + 1) * sizeof *s->seg_device);
  for (size_t i = 0; s->seg_device && i < n_segs; i++)
    s->seg_device[i] = segment_device(segs[i]);
  if (!s->devices || !s->seg_device) {
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", s->name);
    return false;
  }
  for (int d = 0; d < s->n_devices; d++)
    if (!read_device(s, root, d))
      return false;
  return true;
}

/* A device with nothing recorded gets no memory space. */
static bool device_used(const device_t *d) { return d->n > 0 || d->sum.reserved_end > 0; }

/* ---- tags: the innermost frame of the user's own code ---- */

typedef struct frame {
  const char *file, *name; /* not NUL-terminated: file_len, name_len bytes */
  int file_len, name_len;  /* at most MAX_FRAME_TEXT */
  int64_t line;
} frame_t;

/* A string field of a frame, at most MAX_FRAME_TEXT bytes of it ("" when absent). */
static const char *frame_text(const pk_value_t *frame, const char *key, int *len) {
  const pk_value_t *v = get(frame, key);
  if (!v || v->kind != PK_STR) {
    *len = 0;
    return "";
  }
  *len = v->as.str.n < MAX_FRAME_TEXT ? (int)v->as.str.n : MAX_FRAME_TEXT;
  return v->as.str.s;
}

static bool frame_at(const pk_value_t *frames, size_t i, frame_t *f) {
  size_t n;
  pk_value_t *const *items = pk_items(frames, &n);
  if (i >= n || items[i]->kind != PK_DICT)
    return false;
  f->file = frame_text(items[i], "filename", &f->file_len);
  f->name = frame_text(items[i], "name", &f->name_len);
  f->line = get_i64(items[i], "line", 0);
  return true;
}

static bool ends_with(const char *s, size_t n, const char *suffix) {
  size_t k = strlen(suffix);
  return n >= k && !memcmp(s + n - k, suffix, k);
}

/* Frames of PyTorch, installed packages, the Python standard library and C++ are not the
 * user's own code. */
static bool is_user_frame(const frame_t *f) {
  static const char *const library_parts[] = {
      "site-packages", "dist-packages", "/torch/", "\\torch\\",     "/lib/python",
      "\\Lib\\",       "<frozen",       "??",      "/usr/include/", "<built-in"};
  static const char *const native_suffixes[] = {".cpp", ".cc", ".cu", ".h", ".hpp", ".c"};
  char file[MAX_FRAME_TEXT + 1];
  memcpy(file, f->file, (size_t)f->file_len);
  file[f->file_len] = '\0';
  if (!file[0])
    return false;
  for (size_t i = 0; i < HBM_ARRAY_LEN(library_parts); i++)
    if (strstr(file, library_parts[i]))
      return false;
  for (size_t i = 0; i < HBM_ARRAY_LEN(native_suffixes); i++)
    if (ends_with(file, strlen(file), native_suffixes[i]))
      return false;
  return true;
}

/* The file name without its directories (either separator: snapshots come from Windows too). */
static const char *short_file(const frame_t *f, int *len) {
  int cut = f->file_len;
  while (cut > 0 && f->file[cut - 1] != '/' && f->file[cut - 1] != '\\')
    cut--;
  *len = f->file_len - cut;
  return f->file + cut;
}

/* The index of the innermost user frame; else the innermost frame at all (-1: none). Only the
 * first MAX_STACK_FRAMES count, so a hostile stack costs little. */
static int64_t user_frame(const pk_value_t *frames) {
  frame_t f;
  int64_t first = -1;
  for (size_t i = 0; i < MAX_STACK_FRAMES && frame_at(frames, i, &f); i++) {
    if (first < 0)
      first = (int64_t)i;
    if (is_user_frame(&f))
      return (int64_t)i;
  }
  return first;
}

/* group: the user frames that called the op, outermost first ("train.py:40 / model.py:253"),
 * which tells apart the layers that share the op's line. */
static void append_callers(hbm_strbuf_t *sb, const pk_value_t *frames, int64_t op_index) {
  int64_t callers[CALLER_FRAMES];
  int n = 0, len;
  frame_t f;
  for (size_t i = (size_t)op_index + 1; i < MAX_STACK_FRAMES && n < CALLER_FRAMES; i++) {
    if (!frame_at(frames, i, &f))
      break;
    if (is_user_frame(&f))
      callers[n++] = (int64_t)i;
  }
  for (int k = n - 1; k >= 0; k--) {
    frame_at(frames, (size_t)callers[k], &f);
    const char *file = short_file(&f, &len);
    hbm_strbuf_printf(sb, "%s%.*s:%lld", k == n - 1 ? "" : " / ", len, file, (long long)f.line);
  }
}

/* The stack for the buffer's card, innermost frame first, at most MAX_STACK_TEXT bytes. */
static void append_stack(hbm_strbuf_t *sb, const pk_value_t *frames) {
  size_t n;
  pk_items(frames, &n);
  frame_t f;
  size_t i = 0;
  for (; i < n && i < MAX_STACK_FRAMES && sb->len < MAX_STACK_TEXT; i++)
    if (frame_at(frames, i, &f))
      hbm_strbuf_printf(sb, "\n%.*s:%lld %.*s", f.file_len, f.file, (long long)f.line, f.name_len,
                        f.name);
  if (i < n)
    hbm_strbuf_printf(sb, "\n... %zu more frames", n - i);
}

typedef struct tag_text {
  hbm_strbuf_t op, group, source, stack;
} tag_text_t;

static void tag_text_free(tag_text_t *t) {
  hbm_strbuf_free(&t->op);
  hbm_strbuf_free(&t->group);
  hbm_strbuf_free(&t->source);
  hbm_strbuf_free(&t->stack);
}

/* The tags of an allocation. The stack text names the stream but not the event, so equal
 * stacks share one interned copy in the profile. */
static void describe(const tevent_t *e, tag_text_t *t) {
  hbm_strbuf_init(&t->op);
  hbm_strbuf_init(&t->group);
  hbm_strbuf_init(&t->source);
  hbm_strbuf_init(&t->stack);
  if (e->before)
    hbm_strbuf_puts(&t->stack, "allocated before the trace began");
  else
    hbm_strbuf_printf(&t->stack, "stream %lld", (long long)e->stream);
  append_stack(&t->stack, e->frames);
  frame_t f;
  int len;
  int64_t at = user_frame(e->frames);
  if (at < 0 || !frame_at(e->frames, (size_t)at, &f)) {
    const char *what = e->before ? "(allocated before the trace)" : "(no stack recorded)";
    hbm_strbuf_puts(&t->op, what);
    hbm_strbuf_puts(&t->group, what);
    return;
  }
  const char *file = short_file(&f, &len);
  hbm_strbuf_printf(&t->op, "%.*s:%lld %.*s", len, file, (long long)f.line, f.name_len, f.name);
  hbm_strbuf_printf(&t->source, "%.*s:%lld", f.file_len, f.file, (long long)f.line);
  append_callers(&t->group, e->frames, at);
  if (!t->group.len)
    hbm_strbuf_printf(&t->group, "%.*s", len, file);
}

/* ---- as a profile ---- */

typedef struct builder {
  hbm_profile_t *p;
  snapshot_t *s;
  hbm_u64map_t *open;  /* per device: address → buffer index */
  int64_t *live;       /* per device: bytes allocated now */
  int64_t *reserved;   /* per device: bytes reserved now */
  int64_t t0, last_ns; /* the first trace time (us); the last step's time */
} builder_t;

static hbm_status_t add_allocation(builder_t *bl, int dev, const tevent_t *e, int64_t step) {
  size_t n_frames;
  pk_items(e->frames, &n_frames);
  /* describe() looks at each of the first MAX_STACK_FRAMES frames at most three times */
  if (!spend(bl->s, 3 * (n_frames < MAX_STACK_FRAMES ? n_frames : MAX_STACK_FRAMES) + 1))
    return hbm__error(HBM_ERR_PARSE,
                      "%s: the snapshot refers to the same stacks more often than a file of its "
                      "size can: refused as hostile",
                      bl->s->name);
  tag_text_t t;
  describe(e, &t);
  hbm_status_t s = HBM_OK;
  if (t.op.failed || t.group.failed || t.source.failed || t.stack.failed) {
    s = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory describing an allocation");
  } else {
    hbm_buffer_t b = {.address = e->addr,
                      .size = e->size,
                      .unpadded_size = e->size,
                      .start = step,
                      .end = -1,
                      .space = bl->s->devices[dev].space,
                      .op = hbm_strbuf_str(&t.op),
                      .group = t.group.len ? hbm_strbuf_str(&t.group) : NULL,
                      .source = t.source.len ? hbm_strbuf_str(&t.source) : NULL,
                      .label = hbm_strbuf_str(&t.stack)}; /* the stack, for the card */
    int64_t idx = hbm_profile_add_buffer(bl->p, &b);
    if (idx < 0)
      s = hbm_last_status();
    else if (!hbm_u64map_put(&bl->open[dev], e->addr, (uint64_t)idx))
      s = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    else
      bl->live[dev] += (int64_t)e->size;
  }
  tag_text_free(&t);
  return s;
}

static hbm_status_t end_allocation(builder_t *bl, int dev, const tevent_t *e, int64_t step) {
  uint64_t idx;
  if (!hbm_u64map_remove(&bl->open[dev], e->addr, &idx))
    return HBM_OK; /* cannot happen: the reader keeps allocations and frees paired */
  bl->live[dev] -= (int64_t)hbm_profile_buffer(bl->p, (int64_t)idx)->size;
  return hbm_profile_end_buffer(bl->p, (int64_t)idx, step);
}

static hbm_status_t add_oom(builder_t *bl, int dev, const tevent_t *e, int64_t step) {
  char req[32], freeb[32], alloc[32], res[32], unalloc[32];
  int64_t unallocated = bl->reserved[dev] - bl->live[dev];
  char message[1024];
  snprintf(
      message, sizeof message,
      "CUDA out of memory (recorded in the PyTorch snapshot, trace event %lld): tried to "
      "allocate %s (%llu bytes) on cuda:%d, stream %lld. The device had %s free. PyTorch "
      "had %s allocated and %s reserved, %s of it reserved but unallocated.%s",
      (long long)e->index, hbm_format_bytes(e->size, req, sizeof req), (unsigned long long)e->size,
      dev, (long long)e->stream, hbm_format_bytes(e->device_free, freeb, sizeof freeb),
      hbm_format_bytes((uint64_t)(bl->live[dev] > 0 ? bl->live[dev] : 0), alloc, sizeof alloc),
      hbm_format_bytes((uint64_t)(bl->reserved[dev] > 0 ? bl->reserved[dev] : 0), res, sizeof res),
      hbm_format_bytes((uint64_t)(unallocated > 0 ? unallocated : 0), unalloc, sizeof unalloc),
      unallocated > 0 && (uint64_t)unallocated >= e->size
          ? " Reserved but unallocated memory could have held the request: fragmentation; "
            "try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
          : "");
  hbm_oom_event_t oom = {
      .step = step, .space = bl->s->devices[dev].space, .requested = e->size, .message = message};
  return hbm_profile_add_oom(bl->p, &oom);
}

static hbm_status_t apply(builder_t *bl, int dev, const tevent_t *e, int64_t step) {
  switch (e->kind) {
  case EV_ALLOC: return add_allocation(bl, dev, e, step);
  case EV_FREE: return end_allocation(bl, dev, e, step);
  case EV_OOM: return add_oom(bl, dev, e, step);
  case EV_RESERVE:
  case EV_RELEASE: break;
  }
  hbm_reserve_event_t r = {.step = step,
                           .space = bl->s->devices[dev].space,
                           .op = e->kind == EV_RESERVE ? HBM_RESERVE_GROW : HBM_RESERVE_RELEASE,
                           .address = e->addr,
                           .size = e->size};
  bl->reserved[dev] += e->kind == EV_RESERVE ? (int64_t)e->size : -(int64_t)e->size;
  return hbm_profile_add_reserve(bl->p, &r);
}

/* Microseconds since t0 as nanoseconds, saturating (times come from the file). */
static int64_t us_to_ns(int64_t us, int64_t t0) {
  int64_t d = us >= t0 ? us - t0 : 0;
  return d > INT64_MAX / 1000 ? INT64_MAX / 1000 * 1000 : d * 1000;
}

/* The device whose next trace event comes first (events without a time go at once). */
static int next_device(const snapshot_t *s, const size_t *cursor) {
  int best = -1;
  for (int d = 0; d < s->n_devices; d++) {
    if (cursor[d] >= s->devices[d].n)
      continue;
    int64_t t = s->devices[d].events[cursor[d]].time_us;
    if (best < 0 || t < s->devices[best].events[cursor[best]].time_us)
      best = d;
  }
  return best;
}

static int64_t first_time_us(const snapshot_t *s) {
  int64_t t0 = -1;
  for (int d = 0; d < s->n_devices; d++)
    for (size_t i = s->devices[d].n_before; i < s->devices[d].n; i++)
      if (s->devices[d].events[i].time_us >= 0 && (t0 < 0 || s->devices[d].events[i].time_us < t0))
        t0 = s->devices[d].events[i].time_us;
  return t0 < 0 ? 0 : t0;
}

/* Step 0 holds what was there before the traces; then one step per event, in time order. */
static hbm_status_t add_events(builder_t *bl) {
  snapshot_t *s = bl->s;
  size_t *cursor = calloc((size_t)s->n_devices + 1, sizeof *cursor);
  if (!cursor)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  hbm_status_t st = hbm_profile_add_step(bl->p, 0, NULL) < 0 ? hbm_last_status() : HBM_OK;
  for (int d = 0; d < s->n_devices && st == HBM_OK; d++)
    for (; cursor[d] < s->devices[d].n_before && st == HBM_OK; cursor[d]++)
      st = apply(bl, d, &s->devices[d].events[cursor[d]], 0);
  bl->t0 = first_time_us(s);
  for (int d; st == HBM_OK && (d = next_device(s, cursor)) >= 0; cursor[d]++) {
    const tevent_t *e = &s->devices[d].events[cursor[d]];
    int64_t ns = e->time_us >= 0 ? us_to_ns(e->time_us, bl->t0) : bl->last_ns;
    if (ns < bl->last_ns)
      ns = bl->last_ns; /* clocks of several devices, or a clock step back */
    bl->last_ns = ns;
    int64_t step = hbm_profile_add_step(bl->p, ns, NULL);
    st = step < 0 ? hbm_last_status() : apply(bl, d, e, step);
  }
  free(cursor);
  return st;
}

static hbm_status_t add_meta(hbm_profile_t *p, const snapshot_t *s, const char *path) {
  uint64_t reserved = 0, allocated = 0;
  size_t events = 0, before = 0, inconsistent = 0;
  for (int d = 0; d < s->n_devices; d++) {
    reserved += s->devices[d].sum.reserved_end;
    allocated += s->devices[d].sum.allocated_end;
    events += s->devices[d].sum.trace_events;
    before += s->devices[d].sum.before_trace;
    inconsistent += s->devices[d].sum.inconsistent;
  }
  char buf[4][32];
  snprintf(buf[0], sizeof buf[0], "%llu", (unsigned long long)reserved);
  snprintf(buf[1], sizeof buf[1], "%llu", (unsigned long long)allocated);
  snprintf(buf[2], sizeof buf[2], "%zu", events);
  snprintf(buf[3], sizeof buf[3], "%zu", before);
  const pk_value_t *settings = pk_get(pk_root(s->doc), "allocator_settings");
  const char *conf = pk_str(pk_get(settings, "PYTORCH_CUDA_ALLOC_CONF"));
  hbm_status_t st = hbm_profile_set_meta(p, "format", "PyTorch memory snapshot (pickle)");
  if (st == HBM_OK && path)
    st = hbm_profile_set_meta(p, "source_path", path);
  if (st == HBM_OK)
    st = hbm_profile_set_meta(p, "pytorch_reserved_bytes", buf[0]);
  if (st == HBM_OK)
    st = hbm_profile_set_meta(p, "pytorch_allocated_bytes", buf[1]);
  if (st == HBM_OK)
    st = hbm_profile_set_meta(p, "trace_events", buf[2]);
  if (st == HBM_OK)
    st = hbm_profile_set_meta(p, "allocations_before_trace", buf[3]);
  if (st == HBM_OK && conf && *conf)
    st = hbm_profile_set_meta(p, "PYTORCH_CUDA_ALLOC_CONF", conf);
  if (st == HBM_OK && inconsistent) {
    snprintf(buf[0], sizeof buf[0], "%zu", inconsistent);
    st = hbm_profile_set_meta(p, "inconsistent_trace_events", buf[0]);
  }
  return st;
}

static hbm_status_t add_spaces(hbm_profile_t *p, snapshot_t *s) {
  int used = 0;
  for (int d = 0; d < s->n_devices; d++)
    used += device_used(&s->devices[d]);
  for (int d = 0; d < s->n_devices; d++) {
    s->devices[d].space = -1;
    if (!device_used(&s->devices[d]) && (used || d > 0))
      continue; /* an empty snapshot still gets one space, cuda:0 */
    char device[32];
    snprintf(device, sizeof device, "cuda:%d", d);
    if ((s->devices[d].space = hbm_profile_add_space(p, "HBM", device, 0, 0)) < 0)
      return hbm_last_status();
  }
  if (s->n_devices == 0 && hbm_profile_add_space(p, "HBM", "cuda:0", 0, 0) < 0)
    return hbm_last_status();
  return HBM_OK;
}

static hbm_status_t build_profile(hbm_profile_t *p, snapshot_t *s, const char *path) {
  int n = s->n_devices;
  builder_t bl = {.p = p, .s = s};
  bl.open = calloc((size_t)n + 1, sizeof *bl.open);
  bl.live = calloc((size_t)n + 1, sizeof *bl.live);
  bl.reserved = calloc((size_t)n + 1, sizeof *bl.reserved);
  hbm_status_t st = bl.open && bl.live && bl.reserved
                        ? HBM_OK
                        : hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  for (int d = 0; st == HBM_OK && d < n; d++)
    hbm_u64map_init(&bl.open[d]);
  if (st == HBM_OK)
    st = add_meta(p, s, path);
  if (st == HBM_OK)
    st = add_spaces(p, s);
  if (st == HBM_OK)
    st = add_events(&bl);
  if (st == HBM_OK)
    st = hbm_profile_finish(p);
  for (int d = 0; bl.open && d < n; d++)
    hbm_u64map_free(&bl.open[d]);
  free(bl.open);
  free(bl.live);
  free(bl.reserved);
  return st;
}

hbm_profile_t *hbm__torch_snapshot_load(const uint8_t *data, size_t len, const char *path) {
  snapshot_t s;
  hbm_profile_t *p = NULL;
  if (snapshot_read(&s, data, len, path) &&
      (p = hbm_profile_new(HBM_PROFILE_RUNTIME, s.name)) != NULL &&
      build_profile(p, &s, path) != HBM_OK) {
    hbm_profile_free(p);
    p = NULL;
  }
  snapshot_free(&s);
  return p;
}

/* ---- as an allocation log ---- */

static int busiest_device(const snapshot_t *s) {
  int best = -1;
  for (int d = 0; d < s->n_devices; d++)
    if (device_used(&s->devices[d]) &&
        (best < 0 || s->devices[d].sum.trace_events > s->devices[best].sum.trace_events))
      best = d;
  return best;
}

/* Allocations of 0 bytes (and their frees) are left out: allocators refuse them. */
static bool to_log_event(const tevent_t *e, hbm_u64map_t *streams, hbm_u64map_t *live,
                         hbm_log_event_t *out) {
  memset(out, 0, sizeof *out);
  out->pointer = e->addr;
  out->size = e->size;
  out->line = e->index + 1; /* the event's position in the trace, 1-based; 0 before it */
  out->time_ns = e->time_us > 0 ? us_to_ns(e->time_us, 0) : 0;
  uint64_t stream;
  if (!hbm_u64map_get(streams, (uint64_t)e->stream, &stream)) {
    stream = streams->count;
    hbm_u64map_put(streams, (uint64_t)e->stream, stream);
  }
  out->stream = (uint32_t)stream;
  if (e->kind == EV_ALLOC) {
    out->action = HBM_LOG_ALLOCATE;
    return e->size > 0 && hbm_u64map_put(live, e->addr, 1);
  }
  if (e->kind == EV_FREE) {
    out->action = HBM_LOG_FREE;
    return hbm_u64map_remove(live, e->addr, NULL);
  }
  out->action = HBM_LOG_ALLOCATE_FAILURE;
  return e->kind == EV_OOM;
}

static hbm_status_t device_log(const device_t *d, hbm_alloc_log_t *out) {
  memset(out, 0, sizeof *out);
  out->events = malloc((d->n + 1) * sizeof *out->events);
  if (!out->events)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  hbm_u64map_t streams, live;
  hbm_u64map_init(&streams);
  hbm_u64map_init(&live);
  hbm_u64map_put(&streams, 0, 0); /* the default stream is stream 0, as in RMM logs */
  for (size_t i = 0; i < d->n; i++)
    if (to_log_event(&d->events[i], &streams, &live, &out->events[out->n_events]))
      out->n_events++;
  hbm_u64map_free(&streams);
  hbm_u64map_free(&live);
  return HBM_OK;
}

hbm_status_t hbm__torch_snapshot_log(const uint8_t *data, size_t len, const char *path, int device,
                                     hbm_alloc_log_t *out, torch_device_summary_t *summary) {
  snapshot_t s;
  memset(out, 0, sizeof *out);
  hbm_status_t st = HBM_OK;
  if (!snapshot_read(&s, data, len, path)) {
    st = hbm_last_status();
  } else {
    int d = device >= 0 ? device : busiest_device(&s);
    if (d < 0 || d >= s.n_devices || !device_used(&s.devices[d])) {
      st = device >= 0
               ? hbm__error(HBM_ERR_NOT_FOUND, "%s: no device %d in the snapshot (it has %d)",
                            s.name, device, s.n_devices)
               : hbm__error(HBM_ERR_NOT_FOUND, "%s: the snapshot records no device", s.name);
    } else {
      st = device_log(&s.devices[d], out);
      if (summary) {
        *summary = s.devices[d].sum;
        summary->n_devices = 0;
        for (int k = 0; k < s.n_devices; k++)
          summary->n_devices += device_used(&s.devices[k]);
      }
    }
  }
  snapshot_free(&s);
  return st;
}
