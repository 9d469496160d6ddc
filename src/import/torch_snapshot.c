/* torch_snapshot.c — PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot) as
 * hbm's one profile model and as an allocation log, read in one pass.
 *
 * A snapshot is a pickled dict: `segments` (the caching allocator's reserved segments at the
 * dump, each with its blocks and their states), `device_traces` (one list of events per
 * device: alloc, free_requested, free_completed, segment_alloc / segment_free, segment_map /
 * segment_unmap, oom, snapshot, with addr, size, stream, time_us and frames) and
 * `allocator_settings`. Every key is optional: older snapshots lack some.
 *
 * The streaming pickle reader (pickle.c) hands each dict and list to the sink (torch_sink.c),
 * which feeds each trace's events to the profile as they come (torch_trace.c): buffers, one
 * step per event, reservations, OOMs, their tags from the stacks (torch_tags.c). Only when the
 * whole file is read does the snapshot say which list is which device's trace and what the
 * segments held at the dump; then, here: the state before each trace (step 0), the memory
 * spaces (one per GPU), the devices' steps merged in time order, times in nanoseconds, and the
 * metadata. Memory: the profile, plus a few tables the size of the snapshot's distinct stacks;
 * the file's pages are given back as the reader passes them. A file cut short or damaged is
 * read up to the damage and says so (meta "lost"). */
#include "import/torch_internal.h"
#include "profile/profile_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DROP_BEHIND ((size_t)8 << 20) /* the reader gives back pages this far behind it */
#define PROGRESS_BYTES ((size_t)16 << 20)
/* A snapshot this big or more is read on two threads when a CPU is idle: the pickle machine,
 * and the sink that turns its dicts and lists into events, stacks and the profile
 * (pickle_thread.c). They take about 20% more CPU in all than one thread: on a machine with
 * no CPU to spare, one thread is faster. */
#define SINK_THREAD_MIN ((size_t)1 << 20)
#define TAG_TEXT_BASE ((size_t)16 << 20)
#define TAG_TEXT_PER_BYTE 4

typedef struct snapshot {
  ts_reader_t r;
  pk_damage_t damage;
  int n_devices;
  int64_t *trace_of; /* per device: its trace */
  bool *used;        /* per device: anything recorded */
  int *space_of;     /* per device: its space in the profile, -1 none */
  int64_t trace_buffers;
  size_t trace_reserves;
} snapshot_t;

static bool snapshot_init(snapshot_t *s, const char *path, size_t len, bool log_mode) {
  memset(s, 0, sizeof *s);
  ts_reader_t *r = &s->r;
  r->name = hbm__base_name(path ? path : "snapshot");
  r->log_mode = log_mode;
  r->tag_text_budget = TAG_TEXT_BASE + (len < SIZE_MAX / 8 ? TAG_TEXT_PER_BYTE * len : len);
  hbm_u64map_init(&r->tag_index);
  hbm_u64map_init(&r->stream_ids);
  if (!(r->strings = hbm_intern_new()))
    return false;
  if (log_mode)
    return true;
  /* one space to build in (torch_snapshot fixes its device at the end), and step 0 for the
   * state before the traces */
  return (r->p = hbm_profile_new(HBM_PROFILE_RUNTIME, r->name)) != NULL &&
         hbm_profile_add_space(r->p, "HBM", "cuda:0", 0, 0) == 0 &&
         hbm_profile_add_step(r->p, 0, NULL) == 0;
}

static void snapshot_free(snapshot_t *s) {
  ts_reader_t *r = &s->r;
  for (size_t i = 0; i < r->n_traces; i++)
    ts_trace_free(&r->traces[i]);
  free(r->traces);
  free(r->runs);
  ts_sink_free(r);
  ts_tags_free(r);
  hbm_intern_free(r->strings);
  hbm_profile_free(r->p);
  free(s->trace_of);
  free(s->used);
  free(s->space_of);
}

/* ---- reading ---- */

static void drop_behind(void *ctx, size_t offset) {
  hbm__map_drop_before(ctx, offset > DROP_BEHIND ? offset - DROP_BEHIND : 0);
}

/* On the sink's thread, during the machine's run (the file is in the page cache by then: the
 * scan read it): the next PROGRESS_BYTES are mapped, so the machine takes no page faults, and
 * the pages mapped stay as many as before. */
static void map_ahead(void *ctx, size_t offset) {
  hbm__map_populate(ctx, offset, offset + PROGRESS_BYTES);
}

static void drop_range(void *ctx, size_t from, size_t to) { hbm__map_drop_range(ctx, from, to); }

static bool is_dict_tag(uint16_t tag) {
  return tag == OBJ_FRAME || tag == OBJ_EVENT || tag == OBJ_BLOCK || tag == OBJ_SEGMENT ||
         tag == OBJ_SETTINGS;
}

static bool read_pickle(snapshot_t *s, const uint8_t *data, size_t len, hbm__mapped_t *map) {
  pk_sink_t sink;
  ts_sink_init(&s->r, &sink);
  pk_stream_options_t opt = {.salvage = true,
                             .progress = map ? drop_behind : NULL,
                             .progress_ctx = map,
                             .drop = map ? drop_range : NULL,
                             .progress_bytes = PROGRESS_BYTES,
                             .sink_thread_min = SINK_THREAD_MIN,
                             .sink_thread_if_idle = true,
                             .ahead = map ? map_ahead : NULL};
  pk_ref_t root;
  if (pk_stream(data, len, s->r.name, &sink, &opt, &root, &s->damage) != HBM_OK)
    return false;
  if (root.kind == PK_OBJ && root.tag == OBJ_ROOT)
    return true;
  if (root.kind == PK_OBJ && is_dict_tag(root.tag))
    hbm__error(HBM_ERR_PARSE,
               "%s: a pickled dict without 'segments' or 'device_traces': not a PyTorch memory "
               "snapshot (torch.cuda.memory._dump_snapshot)%s",
               s->r.name, s->damage.damaged ? " (and the file is damaged)" : "");
  else
    hbm__error(HBM_ERR_PARSE,
               "%s: a pickle, but not a PyTorch memory snapshot: expected a dict with "
               "'segments' and 'device_traces' (torch.cuda.memory._dump_snapshot)%s",
               s->r.name, s->damage.damaged ? " (and the file is damaged)" : "");
  return false;
}

/* ---- which trace is which device ---- */

static const ts_list_t *root_list(const ts_reader_t *r, const pk_ref_t *v) {
  return v->kind == PK_OBJ && v->tag == OBJ_LIST ? &r->lists[v->as.obj] : NULL;
}

static int count_devices(const ts_reader_t *r) {
  const ts_list_t *traces = root_list(r, &r->root_traces), *segs = root_list(r, &r->root_segments);
  int64_t n = traces ? (int64_t)traces->n_items : 0;
  for (size_t i = 0; segs && i < segs->n; i++) {
    if (segs->items[i] >> 32 != OBJ_SEGMENT)
      continue;
    int64_t d = r->segments[segs->items[i] & 0xffffffffu].device;
    if (d >= 0 && d < TS_MAX_DEVICES && d + 1 > n)
      n = d + 1;
  }
  return n > TS_MAX_DEVICES ? TS_MAX_DEVICES : (int)n;
}

/* Each device's trace (an empty one where it has none), and what the dump says about it. */
static bool find_devices(snapshot_t *s) {
  ts_reader_t *r = &s->r;
  s->n_devices = count_devices(r);
  size_t n = (size_t)s->n_devices + 1;
  s->trace_of = malloc(n * sizeof *s->trace_of);
  s->used = calloc(n, sizeof *s->used);
  s->space_of = malloc(n * sizeof *s->space_of);
  bool *claimed = calloc(r->n_traces + 1, sizeof *claimed);
  bool ok = s->trace_of && s->used && s->space_of && claimed;
  for (int d = 0; ok && d < s->n_devices; d++)
    s->trace_of[d] = -1, s->space_of[d] = -1;
  const ts_list_t *traces = root_list(r, &r->root_traces);
  for (size_t i = 0; ok && traces && i < traces->n; i++) {
    size_t d = traces->positions[i];
    uint64_t t = traces->items[i] & 0xffffffffu;
    if (traces->items[i] >> 32 != OBJ_TRACE || d >= (size_t)s->n_devices)
      continue;
    if (claimed[t]) /* one list at two devices: the first has it */
      r->inconsistent_unplaced += (size_t)r->traces[t].sum.trace_events;
    else
      s->trace_of[d] = (int64_t)t, claimed[t] = true;
  }
  free(claimed);
  for (int d = 0; ok && d < s->n_devices; d++) {
    if (s->trace_of[d] < 0)
      ok = (s->trace_of[d] = ts_trace_new(r)) >= 0;
    ts_trace_t *t = ok ? &r->traces[s->trace_of[d]] : NULL;
    ok = ok && ts_trace_dump_state(r, t, d);
    if (ok)
      s->used[d] = t->sum.trace_events > 0 || t->n_before > 0 || t->sum.reserved_end > 0;
  }
  if (!ok && hbm_last_status() == HBM_OK)
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", r->name);
  return ok;
}

/* ---- the profile ---- */

/* One space per device that recorded anything, in device order; the first takes the space
 * the reader built in. An empty snapshot keeps that one, cuda:0. */
static bool assign_spaces(snapshot_t *s) {
  int next = 0;
  for (int d = 0; d < s->n_devices; d++) {
    if (!s->used[d])
      continue;
    char device[32];
    snprintf(device, sizeof device, "cuda:%d", d);
    if (next == 0 ? hbm__profile_set_space(s->r.p, 0, "HBM", device) != HBM_OK
                  : hbm_profile_add_space(s->r.p, "HBM", device, 0, 0) != next)
      return false;
    s->space_of[d] = next++;
  }
  return true;
}

/* The profile step of each step as read: the devices' events merged by time (the earliest
 * next event first, ties to the lower device), those of lists that are no device's trace
 * left out (-1). NULL when the steps stay as they are (one device). */
static int64_t *merge_steps(snapshot_t *s, int64_t n_steps, bool *failed) {
  ts_reader_t *r = &s->r;
  *failed = false;
  int64_t first_trace = -1;
  bool one = true;
  for (size_t i = 0; i < r->n_runs; i++) {
    int64_t t = r->runs[i].trace;
    bool kept = r->traces[t].device >= 0 && s->space_of[r->traces[t].device] >= 0;
    one = one && kept && (first_trace < 0 || first_trace == t);
    first_trace = t;
  }
  if (one)
    return NULL;
  int64_t *new_of = malloc((size_t)n_steps * sizeof *new_of);
  size_t *cursor = calloc((size_t)s->n_devices + 1, sizeof *cursor); /* run of each device */
  int64_t *at = malloc(((size_t)s->n_devices + 1) * sizeof *at);     /* its next step */
  if (!new_of || !cursor || !at) {
    free(new_of), free(cursor), free(at);
    *failed = true;
    return NULL;
  }
  for (int64_t i = 0; i < n_steps; i++)
    new_of[i] = -1;
  new_of[0] = 0;
  int64_t *times = hbm__profile_step_times(r->p, &n_steps), next = 1;
  /* a device's steps: the runs of its trace, in order */
  for (int d = 0; d < s->n_devices; d++) {
    at[d] = -1;
    for (cursor[d] = 0; cursor[d] < r->n_runs; cursor[d]++)
      if (r->runs[cursor[d]].trace == (uint32_t)s->trace_of[d] && s->space_of[d] >= 0) {
        at[d] = r->runs[cursor[d]].step;
        break;
      }
  }
  for (;;) {
    int best = -1;
    for (int d = 0; d < s->n_devices; d++)
      if (at[d] >= 0 && (best < 0 || times[at[d]] < times[at[best]]))
        best = d;
    if (best < 0)
      break;
    new_of[at[best]] = next++;
    size_t run = cursor[best];
    int64_t end = run + 1 < r->n_runs ? r->runs[run + 1].step : n_steps;
    if (++at[best] >= end) { /* on to this trace's next run */
      at[best] = -1;
      while (++cursor[best] < r->n_runs)
        if (r->runs[cursor[best]].trace == (uint32_t)s->trace_of[best]) {
          at[best] = r->runs[cursor[best]].step;
          break;
        }
    }
  }
  free(cursor);
  free(at);
  return new_of;
}

/* Microseconds since t0 as nanoseconds, saturating (times come from the file). */
static int64_t us_to_ns(int64_t us, int64_t t0) {
  int64_t d = us >= t0 ? us - t0 : 0;
  return d > INT64_MAX / 1000 ? INT64_MAX / 1000 * 1000 : d * 1000;
}

/* The steps in their final order, times in ns since the first event (never going back: clocks
 * of several devices, or a clock step back). */
static bool order_steps(snapshot_t *s, const int64_t *new_of, int64_t *n_kept) {
  int64_t n;
  int64_t *times = hbm__profile_step_times(s->r.p, &n);
  *n_kept = n;
  if (new_of) {
    int64_t *moved = malloc((size_t)n * sizeof *moved);
    if (!moved)
      return false;
    *n_kept = 0;
    for (int64_t i = 0; i < n; i++)
      if (new_of[i] >= 0) {
        moved[new_of[i]] = times[i];
        (*n_kept)++;
      }
    memcpy(times, moved, (size_t)*n_kept * sizeof *times);
    free(moved);
  }
  int64_t t0 = -1, last = 0;
  for (int64_t i = 1; i < *n_kept; i++)
    if (times[i] >= 0 && (t0 < 0 || times[i] < t0))
      t0 = times[i];
  times[0] = 0;
  for (int64_t i = 1; i < *n_kept; i++) {
    int64_t ns = times[i] >= 0 ? us_to_ns(times[i], t0 < 0 ? 0 : t0) : last;
    times[i] = last = ns < last ? last : ns;
  }
  return true;
}

static int64_t remap(const int64_t *new_of, int64_t step) {
  return new_of && step >= 0 ? new_of[step] : step;
}

/* The run (and so the trace) of item i, where runs[].first says where each run's items start. */
static size_t run_of(const ts_reader_t *r, size_t *ri, int64_t i, bool buffers) {
  while (*ri + 1 < r->n_runs &&
         (buffers ? r->runs[*ri + 1].buffer <= i : (int64_t)r->runs[*ri + 1].reserve <= i))
    (*ri)++;
  return *ri;
}

static int space_of_trace(const snapshot_t *s, uint32_t t) {
  int d = s->r.traces[t].device;
  return d >= 0 ? s->space_of[d] : -1;
}

static int by_start(const void *a, const void *b) {
  const hbm_buffer_t *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

static int reserve_by_step(const void *a, const void *b) {
  const hbm_reserve_event_t *x = a, *y = b;
  return x->step < y->step ? -1 : x->step > y->step;
}

static int oom_by_step(const void *a, const void *b) {
  const hbm_oom_event_t *x = a, *y = b;
  return x->step < y->step ? -1 : x->step > y->step;
}

/* Buffers: those of the state before the traces (made last) first, then the traces' in
 * order, with their spaces and final steps; those of lists no device claims dropped. With
 * several devices, in the order of their steps (each trace buffer starts at its own step). */
static bool fix_buffers(snapshot_t *s, const int64_t *new_of) {
  ts_reader_t *r = &s->r;
  int64_t n;
  hbm_buffer_t *b = hbm__profile_buffers(r->p, &n);
  if (!n)
    return true;
  int64_t k = n - s->trace_buffers, w = 0;
  hbm_buffer_t *before = malloc(((size_t)k + 1) * sizeof *before);
  if (!before)
    return false;
  memcpy(before, b + s->trace_buffers, (size_t)k * sizeof *b);
  size_t ri = 0;
  for (int64_t i = 0; i < s->trace_buffers; i++) {
    int space = space_of_trace(s, r->runs[run_of(r, &ri, i, true)].trace);
    if (space < 0)
      continue;
    hbm_buffer_t *to = &b[w];
    *to = b[i];
    to->space = space;
    to->start = remap(new_of, to->start);
    to->end = remap(new_of, to->end);
    to->id = (uint64_t)(k + w++);
  }
  if (new_of)
    qsort(b, (size_t)w, sizeof *b, by_start);
  for (int64_t i = 0; new_of && i < w; i++)
    b[i].id = (uint64_t)(k + i);
  memmove(b + k, b, (size_t)w * sizeof *b);
  for (int64_t i = 0; i < k; i++) {
    b[i] = before[i];
    b[i].id = (uint64_t)i;
    b[i].end = remap(new_of, b[i].end);
  }
  free(before);
  hbm__profile_truncate(r->p, k + w, -1, SIZE_MAX);
  return true;
}

/* OOM events: their steps remapped, in step order. */
static bool fix_ooms(snapshot_t *s, const int64_t *new_of) {
  size_t n_ooms;
  hbm_oom_event_t *ooms = hbm__profile_ooms(s->r.p, &n_ooms);
  for (size_t i = 0; i < n_ooms; i++)
    ooms[i].step = remap(new_of, ooms[i].step);
  if (new_of && n_ooms)
    qsort(ooms, n_ooms, sizeof *ooms, oom_by_step);
  return true;
}

/* Reservation changes likewise. */
static bool fix_reserves(snapshot_t *s, const int64_t *new_of) {
  ts_reader_t *r = &s->r;
  size_t n, w = 0;
  hbm_reserve_event_t *e = hbm__profile_reserves(r->p, &n);
  if (!n)
    return fix_ooms(s, new_of);
  size_t k = n - s->trace_reserves;
  hbm_reserve_event_t *before = malloc((k + 1) * sizeof *before);
  if (!before)
    return false;
  memcpy(before, e + s->trace_reserves, k * sizeof *e);
  size_t ri = 0;
  for (size_t i = 0; i < s->trace_reserves; i++) {
    int space = space_of_trace(s, r->runs[run_of(r, &ri, (int64_t)i, false)].trace);
    if (space < 0)
      continue;
    e[w] = e[i];
    e[w].space = space;
    e[w++].step = remap(new_of, e[i].step);
  }
  if (new_of)
    qsort(e, w, sizeof *e, reserve_by_step);
  memmove(e + k, e, w * sizeof *e);
  memcpy(e, before, k * sizeof *e);
  free(before);
  hbm__profile_truncate(r->p, -1, -1, k + w);
  return fix_ooms(s, new_of);
}

static hbm_status_t fix_up(snapshot_t *s) {
  int64_t n_steps, kept;
  hbm__profile_step_times(s->r.p, &n_steps);
  bool failed;
  int64_t *new_of = merge_steps(s, n_steps, &failed);
  bool ok =
      !failed && fix_buffers(s, new_of) && fix_reserves(s, new_of) && order_steps(s, new_of, &kept);
  free(new_of);
  if (!ok)
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", s->r.name);
  hbm__profile_truncate(s->r.p, -1, kept, SIZE_MAX);
  return HBM_OK;
}

static hbm_status_t set_number(hbm_profile_t *p, const char *key, uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
  return hbm_profile_set_meta(p, key, buf);
}

/* What a damaged file lost, in bytes. */
static void describe_loss(const snapshot_t *s, size_t len, char *out, size_t cap) {
  const pk_damage_t *d = &s->damage;
  snprintf(out, cap,
           "lost %zu bytes after byte %zu of %zu (%s: %s); the profile holds what came before",
           len - d->used, d->used, len, d->truncated ? "file truncated" : "damaged", d->why);
}

/* The device memory_viz opens a snapshot on (its newest MemoryViz.js): of the devices with a
 * trace or a segment, the one with the longest trace, the first of equals; -1 none. (Its
 * earlier versions opened device 0 when listed, else the first listed; 2.0's
 * _memory_viz.trace_plot wanted the only device with a trace.) */
static int memory_viz_device(const snapshot_t *s) {
  int best = -1;
  for (int d = 0; d < s->n_devices; d++)
    if (s->used[d] &&
        (best < 0 || s->r.traces[s->trace_of[d]].length > s->r.traces[s->trace_of[best]].length))
      best = d;
  return best;
}

static hbm_status_t add_meta(snapshot_t *s, const char *path, size_t len) {
  ts_reader_t *r = &s->r;
  uint64_t reserved = 0, allocated = 0, events = 0, before = 0, inconsistent = 0;
  for (int d = 0; d < s->n_devices; d++) {
    const torch_device_summary_t *sum = &r->traces[s->trace_of[d]].sum;
    reserved = hbm__bytes_add(reserved, sum->reserved_end);
    allocated = hbm__bytes_add(allocated, sum->allocated_end);
    events += sum->trace_events;
    before += sum->before_trace;
    inconsistent += sum->inconsistent;
  }
  hbm_profile_t *p = r->p;
  hbm_status_t st = hbm_profile_set_meta(p, "format", "PyTorch memory snapshot (pickle)");
  if (st == HBM_OK && path)
    st = hbm_profile_set_meta(p, "source_path", path);
  if (st == HBM_OK)
    st = set_number(p, "pytorch_reserved_bytes", reserved);
  if (st == HBM_OK)
    st = set_number(p, "pytorch_allocated_bytes", allocated);
  if (st == HBM_OK)
    st = set_number(p, "trace_events", events);
  if (st == HBM_OK)
    st = set_number(p, "allocations_before_trace", before);
  if (st == HBM_OK && r->alloc_conf && *r->alloc_conf)
    st = hbm_profile_set_meta(p, "PYTORCH_CUDA_ALLOC_CONF", r->alloc_conf);
  int shown = memory_viz_device(s);
  if (st == HBM_OK && shown >= 0) {
    char device[32];
    snprintf(device, sizeof device, "cuda:%d", shown);
    st = hbm_profile_set_meta(p, "memory_viz_device", device);
  }
  if (st == HBM_OK && inconsistent)
    st = set_number(p, "inconsistent_trace_events", inconsistent);
  if (st == HBM_OK && r->repeated)
    st = set_number(p, "repeated_objects_read_once", r->repeated);
  if (st == HBM_OK && r->inconsistent_unplaced)
    st = set_number(p, "events_of_no_device", r->inconsistent_unplaced);
  if (st == HBM_OK && s->damage.damaged) {
    char lost[768];
    describe_loss(s, len, lost, sizeof lost);
    st = hbm_profile_set_meta(p, "lost", lost);
  }
  return st;
}

static hbm_status_t build_profile(snapshot_t *s, const char *path, size_t len) {
  ts_reader_t *r = &s->r;
  hbm__profile_buffers(r->p, &s->trace_buffers);
  hbm__profile_reserves(r->p, &s->trace_reserves);
  if (!assign_spaces(s))
    return hbm_last_status();
  for (int d = 0; d < s->n_devices; d++)
    if (s->space_of[d] >= 0 && !ts_trace_emit_before(r, &r->traces[s->trace_of[d]], s->space_of[d]))
      return hbm_last_status();
  hbm_status_t st = fix_up(s);
  if (st == HBM_OK)
    st = add_meta(s, path, len);
  if (st == HBM_OK)
    st = hbm_profile_finish(r->p);
  return st;
}

hbm_profile_t *hbm__torch_snapshot_load(const uint8_t *data, size_t len, const char *path,
                                        hbm__mapped_t *map) {
  snapshot_t s;
  hbm_profile_t *p = NULL;
  if (!snapshot_init(&s, path, len, false)) {
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", s.r.name);
  } else if (read_pickle(&s, data, len, map) && find_devices(&s) &&
             build_profile(&s, path, len) == HBM_OK) {
    p = s.r.p;
    s.r.p = NULL;
  }
  snapshot_free(&s);
  return p;
}

/* ---- as an allocation log ---- */

static int busiest_device(const snapshot_t *s) {
  int best = -1;
  for (int d = 0; d < s->n_devices; d++)
    if (s->used[d] && (best < 0 || s->r.traces[s->trace_of[d]].sum.trace_events >
                                       s->r.traces[s->trace_of[best]].sum.trace_events))
      best = d;
  return best;
}

hbm_status_t hbm__torch_snapshot_log(const uint8_t *data, size_t len, const char *path, int device,
                                     hbm_alloc_log_t *out, torch_device_summary_t *summary,
                                     hbm__mapped_t *map) {
  snapshot_t s;
  memset(out, 0, sizeof *out);
  hbm_status_t st = HBM_OK;
  if (!snapshot_init(&s, path, len, true)) {
    st = hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", s.r.name);
  } else if (!read_pickle(&s, data, len, map) || !find_devices(&s)) {
    st = hbm_last_status();
  } else {
    int d = device >= 0 ? device : busiest_device(&s);
    if (d < 0 || d >= s.n_devices || !s.used[d]) {
      st = device >= 0
               ? hbm__error(HBM_ERR_NOT_FOUND, "%s: no device %d in the snapshot (it has %d)",
                            s.r.name, device, s.n_devices)
               : hbm__error(HBM_ERR_NOT_FOUND, "%s: the snapshot records no device", s.r.name);
    } else {
      ts_trace_t *t = &s.r.traces[s.trace_of[d]];
      if (!ts_trace_emit_before(&s.r, t, -1)) {
        st = hbm_last_status();
      } else {
        out->events = t->log; /* the log moves to the caller */
        out->n_events = t->n_log;
        t->log = NULL;
        if (!out->events && !(out->events = malloc(sizeof *out->events)))
          st = hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", s.r.name);
      }
      if (summary) {
        *summary = t->sum;
        summary->n_devices = 0;
        for (int k = 0; k < s.n_devices; k++)
          summary->n_devices += s.used[k];
      }
    }
  }
  snapshot_free(&s);
  return st;
}
