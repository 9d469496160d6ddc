/* xplane.c — a serialized XSpace (what jax.profiler.trace writes as <host>.xplane.pb), walked
 * in place with pb_wire.c: nothing is copied but the few strings kept. Two things are read:
 *   - the /host:metadata plane: one event-metadata entry per compiled program whose stats
 *     hold the serialized HloProto (stat "hlo_proto"); each goes to hlo_proto.c;
 *   - MemoryAllocation / MemoryDeallocation events on the /host:CPU plane (the allocators'
 *     runtime events: allocator name or TPU chip, address, requested and allocated bytes,
 *     bytes in use and reserved, op, region type, data type, shape) — XProf's Memory Profile,
 *     one space per allocator (XProf's memory id), the 256 largest at most.
 * and, for `hbm replay` (xprof_xspace_log), the program's step markers: the host's events
 * with a step_num stat (jax.profiler.StepTraceAnnotation, tf.profiler's Trace(step_num=)),
 * else the events of a device plane's "Steps" line.
 * A damaged plane or program is noted and skipped; the rest is still read. */
#include "import/pb_wire.h"
#include "import/xprof.h"

#include <stdlib.h>
#include <string.h>

#define MAX_MEMORY_EVENTS (8u << 20) /* ~1 GB of events kept at most; the rest is noted */
/* Allocator spaces shown at most (a TPU host has a few chips, a GPU host a few allocators per
 * GPU); a file naming more keeps the largest and says what it left out. */
#define MAX_ALLOCATORS 256

/* Stats hbm reads, by their metadata name. */
typedef enum stat_kind {
  STAT_OTHER = 0,
  STAT_HLO_PROTO,
  STAT_ALLOCATOR,
  STAT_ADDR,
  STAT_REQUESTED,
  STAT_ALLOCATION,
  STAT_IN_USE,
  STAT_OP,
  STAT_REGION,
  STAT_DATA_TYPE,
  STAT_SHAPE,
  STAT_RESERVED,
  STAT_MEMORY_INDEX, /* index_on_host, device_ordinal: the allocator's id on TPUs */
  STAT_STEP_NUM      /* a step marker's step number */
} stat_kind_t;

static const struct {
  const char *name;
  stat_kind_t kind;
} stat_names[] = {{"Hlo Proto", STAT_HLO_PROTO},
                  {"hlo_proto", STAT_HLO_PROTO},
                  {"allocator_name", STAT_ALLOCATOR},
                  {"addr", STAT_ADDR},
                  {"address", STAT_ADDR},
                  {"requested_bytes", STAT_REQUESTED},
                  {"allocation_bytes", STAT_ALLOCATION},
                  {"bytes_allocated", STAT_IN_USE},
                  {"tf_op", STAT_OP},
                  {"region_type", STAT_REGION},
                  {"data_type", STAT_DATA_TYPE},
                  {"tensor_shape", STAT_SHAPE},
                  {"shape", STAT_SHAPE},
                  {"bytes_reserved", STAT_RESERVED},
                  {"index_on_host", STAT_MEMORY_INDEX},
                  {"device_ordinal", STAT_MEMORY_INDEX},
                  {"step_num", STAT_STEP_NUM}};

typedef struct slice {
  const uint8_t *p;
  size_t n;
} slice_t;

typedef struct mem_event {
  int64_t time_ps;
  size_t seq;
  uint64_t addr, allocation, requested, in_use, reserved;
  const char *allocator; /* XProf's memory id: the last of the event's allocator_name,
                            index_on_host and device_ordinal stats */
  const char *op, *region, *data_type, *shape;
  bool alloc;
} mem_event_t;

typedef struct plane {
  xprof_import_t *im;
  slice_t name;
  slice_t *stat_name; /* by index; stat_ids maps id → index and kind (stat_kind) */
  hbm_u64map_t stat_ids;
  size_t n_stats, cap_stats;
  hbm_u64map_t memory_kind; /* event metadata id → 1 allocation, 2 deallocation */
  const char *recent[4];    /* the last texts of stats, interned */
  unsigned next_recent;
  const char *numbers[16]; /* allocator ids 0-15 as text, interned when first seen */
  int64_t step_stat;       /* the id of its stat "step_num" (-1: none) */
  bool steps_only;         /* a device plane: only its "Steps" line is read */
} plane_t;

/* Step markers' times (ps), in the order read. */
typedef struct step_times {
  int64_t *ps;
  size_t n, cap;
} step_times_t;

typedef struct space_reader {
  xprof_import_t *im;
  mem_event_t *events;
  size_t n_events, cap_events, dropped;
  step_times_t host_steps;   /* events with a step_num stat */
  step_times_t device_steps; /* the first device plane's "Steps" line */
  bool device_steps_read;
} space_reader_t;

static void add_step_time(step_times_t *t, int64_t ps) {
  if (t->n == t->cap) {
    int64_t *grown = hbm__grow_array(t->ps, &t->cap, t->n + 1, sizeof *grown, 64);
    if (!grown)
      return; /* a marker less: the step is still found in the stream */
    t->ps = grown;
  }
  t->ps[t->n++] = ps;
}

static bool slice_is(slice_t s, const char *text) {
  size_t n = strlen(text);
  return s.n == n && !memcmp(s.p, text, n);
}

static const char *intern_slice(xprof_import_t *im, slice_t s) {
  return hbm_intern_n(im->strings, (const char *)s.p, s.n);
}

/* ---- stat metadata ---- */

/* stat_ids maps a stat's metadata id to its index << STAT_KIND_BITS | its kind: the kind is
 * found by name once per metadata entry, not for every stat of every event (comparing the
 * names took a sixth of reading a big file). */
#define STAT_KIND_BITS 5

static stat_kind_t kind_of_name(slice_t name) {
  for (size_t i = 0; i < HBM_ARRAY_LEN(stat_names); i++)
    if (slice_is(name, stat_names[i].name))
      return stat_names[i].kind;
  return STAT_OTHER;
}

static stat_kind_t stat_kind(const plane_t *pl, int64_t id) {
  uint64_t k;
  if (!hbm_u64map_get(&pl->stat_ids, (uint64_t)id, &k))
    return STAT_OTHER;
  return (stat_kind_t)(k & ((1u << STAT_KIND_BITS) - 1));
}

static slice_t stat_name_of(const plane_t *pl, uint64_t id) {
  uint64_t k;
  slice_t none = {(const uint8_t *)"", 0};
  return hbm_u64map_get(&pl->stat_ids, id, &k) ? pl->stat_name[k >> STAT_KIND_BITS] : none;
}

/* A map entry (key = 1, value = 2) of XPlane.event_metadata / stat_metadata. */
static int map_entry(pb_reader_t *r, const pb_field_t *f, const char *what, int64_t *key,
                     pb_field_t *value) {
  pb_reader_t e = pb_sub(r, f, what);
  pb_field_t g;
  int got;
  *key = 0;
  memset(value, 0, sizeof *value);
  while ((got = pb_next(&e, &g)) > 0) {
    if (g.number == 1 && pb_expect(&e, &g, PB_VARINT, "key"))
      *key = (int64_t)g.varint;
    else if (g.number == 1)
      return -1;
    else if (g.number == 2 && !pb_expect(&e, &g, PB_LEN, "value"))
      return -1;
    else if (g.number == 2)
      *value = g;
  }
  return got;
}

static bool read_stat_metadata(plane_t *pl, pb_reader_t *r, const pb_field_t *f) {
  int64_t key;
  pb_field_t v;
  if (map_entry(r, f, "XPlane.stat_metadata entry", &key, &v) < 0)
    return false;
  slice_t name = {(const uint8_t *)"", 0};
  pb_reader_t m = pb_sub(r, &v, "XStatMetadata");
  pb_field_t g;
  int got;
  while ((got = pb_next(&m, &g)) > 0)
    if (g.number == 2) {
      if (!pb_expect(&m, &g, PB_LEN, "name"))
        return false;
      name.p = g.data, name.n = g.len;
    }
  if (got < 0)
    return false;
  if (pl->n_stats == pl->cap_stats) {
    slice_t *s = hbm__grow_array(pl->stat_name, &pl->cap_stats, pl->n_stats + 1, sizeof *s, 64);
    if (!s)
      return false;
    pl->stat_name = s;
  }
  pl->stat_name[pl->n_stats] = name;
  if (slice_is(name, "step_num"))
    pl->step_stat = key;
  uint64_t entry = (uint64_t)pl->n_stats++ << STAT_KIND_BITS | kind_of_name(name);
  return hbm_u64map_put(&pl->stat_ids, (uint64_t)key, entry) ||
         (hbm__error(HBM_ERR_HOST_MEMORY, "out of memory"), false);
}

/* ---- one XStat: its metadata id and value ---- */

typedef struct stat_value {
  int64_t id;
  uint64_t u;
  slice_t s;
  bool is_string, is_ref;
} stat_value_t;

static int read_stat(pb_reader_t *r, const pb_field_t *f, stat_value_t *out) {
  pb_reader_t s = pb_sub(r, f, "XStat");
  pb_field_t g;
  int got;
  memset(out, 0, sizeof *out);
  while ((got = pb_next(&s, &g)) > 0) {
    if (g.number == 1 && g.wire == PB_VARINT)
      out->id = (int64_t)g.varint;
    else if ((g.number == 3 || g.number == 4 || g.number == 7) && g.wire == PB_VARINT)
      out->u = g.varint, out->is_ref = g.number == 7;
    else if (g.number == 2 && g.wire == PB_I64) {
      double d;
      memcpy(&d, &g.varint, sizeof d);
      out->u = d > 0 && d < 1.8e19 ? (uint64_t)d : 0; /* NaN and out-of-range: 0 */
    } else if ((g.number == 5 || g.number == 6) && g.wire == PB_LEN)
      out->s.p = g.data, out->s.n = g.len, out->is_string = true;
    else if (g.number <= 7)
      return pb_expect(&s, &g,
                       g.number == 2                    ? PB_I64
                       : g.number >= 5 && g.number <= 6 ? PB_LEN
                                                        : PB_VARINT,
                       "XStat value")
                 ? 1
                 : -1;
  }
  return got < 0 ? -1 : 1;
}

/* ---- /host:metadata: programs ---- */

static void read_program(plane_t *pl, pb_reader_t *r, const pb_field_t *f) {
  int64_t key;
  pb_field_t v;
  if (map_entry(r, f, "XPlane.event_metadata entry", &key, &v) < 0) {
    xprof_note_problem(pl->im);
    return;
  }
  pb_reader_t m = pb_sub(r, &v, "XEventMetadata");
  pb_field_t g;
  slice_t name = {(const uint8_t *)"", 0};
  pb_field_t hlo = {0};
  int got;
  while ((got = pb_next(&m, &g)) > 0) {
    if (g.number == 2 && g.wire == PB_LEN)
      name.p = g.data, name.n = g.len;
    if (g.number != 5 || !pb_expect(&m, &g, PB_LEN, "stats"))
      continue;
    stat_value_t sv;
    if (read_stat(&m, &g, &sv) < 0) {
      xprof_note_problem(pl->im);
      return;
    }
    if (stat_kind(pl, sv.id) == STAT_HLO_PROTO && sv.is_string) {
      hlo = g;
      hlo.data = sv.s.p, hlo.len = sv.s.n;
    }
  }
  if (got < 0) {
    xprof_note_problem(pl->im);
    return;
  }
  if (!hlo.data)
    return; /* metadata of something else */
  char id[32];
  snprintf(id, sizeof id, "program %lld", (long long)key);
  const char *program = name.n ? intern_slice(pl->im, name) : id;
  if (xprof_read_hlo_proto(pl->im, hlo.data, hlo.len, r->file_start, program) != HBM_OK)
    xprof_note_problem(pl->im);
}

/* ---- other planes: the allocators' events ---- */

static void note_memory_kind(plane_t *pl, pb_reader_t *r, const pb_field_t *f) {
  int64_t key;
  pb_field_t v;
  if (map_entry(r, f, "XPlane.event_metadata entry", &key, &v) < 0) {
    xprof_note_problem(pl->im);
    return;
  }
  pb_reader_t m = pb_sub(r, &v, "XEventMetadata");
  pb_field_t g;
  int got;
  while ((got = pb_next(&m, &g)) > 0)
    if (g.number == 2 && g.wire == PB_LEN) {
      slice_t name = {g.data, g.len};
      int kind = slice_is(name, "MemoryAllocation")     ? 1
                 : slice_is(name, "MemoryDeallocation") ? 2
                                                        : 0;
      if (kind)
        hbm_u64map_put(&pl->memory_kind, (uint64_t)key, (uint64_t)kind);
    }
  if (got < 0)
    xprof_note_problem(pl->im);
}

/* A text stat (a string, or a reference to a stat name); NULL for numbers. Consecutive
 * events mostly repeat their allocator and op: the last few texts are kept to skip the
 * string table for them. */
static const char *stat_text(plane_t *pl, const stat_value_t *sv) {
  if (sv->is_string && sv->s.n) {
    for (int i = 0; i < 4; i++)
      if (pl->recent[i] && !strncmp(pl->recent[i], (const char *)sv->s.p, sv->s.n) &&
          !pl->recent[i][sv->s.n])
        return pl->recent[i];
    const char *t = intern_slice(pl->im, sv->s);
    pl->recent[pl->next_recent++ & 3] = t;
    return t;
  }
  if (sv->is_ref)
    return intern_slice(pl->im, stat_name_of(pl, sv->u));
  return NULL;
}

/* An allocator's number as its name ("0" for index_on_host 0), as XProf's memory ids. */
static const char *number_text(plane_t *pl, uint64_t v) {
  if (v < HBM_ARRAY_LEN(pl->numbers) && pl->numbers[v])
    return pl->numbers[v];
  char buf[24];
  snprintf(buf, sizeof buf, "%lld", (long long)v);
  const char *t = hbm_intern(pl->im->strings, buf);
  if (v < HBM_ARRAY_LEN(pl->numbers))
    pl->numbers[v] = t;
  return t;
}

static void apply_stat(plane_t *pl, mem_event_t *e, const stat_value_t *sv) {
  switch (stat_kind(pl, sv->id)) {
  case STAT_ALLOCATOR: e->allocator = stat_text(pl, sv); break;
  case STAT_MEMORY_INDEX:
    e->allocator = sv->is_string ? stat_text(pl, sv) : number_text(pl, sv->u);
    break;
  case STAT_RESERVED: e->reserved = sv->u; break;
  case STAT_ADDR: e->addr = sv->u; break;
  case STAT_REQUESTED: e->requested = sv->u; break;
  case STAT_ALLOCATION: e->allocation = sv->u; break;
  case STAT_IN_USE: e->in_use = sv->u; break;
  case STAT_OP: e->op = stat_text(pl, sv); break;
  case STAT_REGION: e->region = stat_text(pl, sv); break;
  case STAT_DATA_TYPE: e->data_type = stat_text(pl, sv); break;
  case STAT_SHAPE: e->shape = stat_text(pl, sv); break;
  default: break;
  }
}

static mem_event_t *new_event(space_reader_t *sr) {
  if (sr->n_events >= MAX_MEMORY_EVENTS) {
    sr->dropped++;
    return NULL;
  }
  if (sr->n_events == sr->cap_events) {
    mem_event_t *e =
        hbm__grow_array(sr->events, &sr->cap_events, sr->n_events + 1, sizeof *e, 1024);
    if (!e) {
      sr->dropped++;
      return NULL;
    }
    sr->events = e;
  }
  mem_event_t *e = &sr->events[sr->n_events];
  memset(e, 0, sizeof *e);
  e->seq = sr->n_events++;
  return e;
}

/* One XEvent: kept when it is an allocator event (or, steps, a step marker: every event of
 * a "Steps" line, or one with a step_num stat). -1 when malformed. */
static int read_event(plane_t *pl, space_reader_t *sr, pb_reader_t *r, const pb_field_t *f,
                      int64_t line_ps, step_times_t *steps) {
  pb_reader_t ev = pb_sub(r, f, "XEvent");
  pb_field_t g;
  int got, kind = 0;
  bool step = steps == &sr->device_steps;
  mem_event_t e = {0};
  int64_t offset_ps = 0;
  while ((got = pb_next(&ev, &g)) > 0) {
    if (g.number == 1) {
      uint64_t k = 0;
      if (!pb_expect(&ev, &g, PB_VARINT, "metadata_id"))
        return -1;
      if (!hbm_u64map_get(&pl->memory_kind, g.varint, &k) && pl->step_stat < 0 && !step)
        return 1; /* neither an allocator event nor a step marker: skip the rest of it */
      kind = (int)k;
    } else if (g.number == 2 && g.wire == PB_VARINT)
      offset_ps = (int64_t)g.varint;
    else if (g.number == 4 && (kind || pl->step_stat >= 0)) {
      stat_value_t sv;
      if (!pb_expect(&ev, &g, PB_LEN, "stats") || read_stat(&ev, &g, &sv) < 0)
        return -1;
      if (kind)
        apply_stat(pl, &e, &sv);
      step = step || sv.id == pl->step_stat;
    }
  }
  if (got < 0)
    return -1;
  if (step && !kind)
    add_step_time(steps, (int64_t)((uint64_t)line_ps + (uint64_t)offset_ps));
  if (!kind)
    return 1;
  mem_event_t *slot = new_event(sr);
  if (slot) {
    size_t seq = slot->seq;
    *slot = e;
    slot->seq = seq;
    slot->alloc = kind == 1;
    slot->time_ps = (int64_t)((uint64_t)line_ps + (uint64_t)offset_ps);
  }
  return 1;
}

static bool read_line(plane_t *pl, space_reader_t *sr, pb_reader_t *r, const pb_field_t *f) {
  pb_reader_t line = pb_sub(r, f, "XLine");
  pb_field_t g;
  int got;
  int64_t line_ps = 0;
  bool steps_line = false;
  /* timestamp_ns (3) comes before the events (4) in files XProf writes; a file that puts it
   * later gets it on a second pass. */
  pb_reader_t first = line;
  while ((got = pb_next(&first, &g)) > 0)
    if (g.number == 3 && g.wire == PB_VARINT) /* unsigned: a corrupt time wraps, no UB */
      line_ps = (int64_t)(g.varint * 1000u);
    else if (g.number == 2 && g.wire == PB_LEN)
      steps_line = slice_is((slice_t){g.data, g.len}, "Steps");
  if (got < 0)
    return false;
  if (pl->steps_only && (!steps_line || sr->device_steps_read))
    return true;
  step_times_t *steps = steps_line ? &sr->device_steps : &sr->host_steps;
  while ((got = pb_next(&line, &g)) > 0)
    if (g.number == 4) {
      if (!pb_expect(&line, &g, PB_LEN, "events") ||
          read_event(pl, sr, &line, &g, line_ps, steps) < 0)
        return false;
    }
  sr->device_steps_read = sr->device_steps_read || (steps_line && sr->device_steps.n);
  return got == 0;
}

/* ---- a plane: three passes over its fields (stat names, event metadata, lines) ---- */

static bool plane_pass(plane_t *pl, space_reader_t *sr, pb_reader_t r, int pass, bool metadata) {
  pb_field_t f;
  int got;
  while ((got = pb_next(&r, &f)) > 0) {
    if (pass == 0 && f.number == 2 && pb_expect(&r, &f, PB_LEN, "name"))
      pl->name.p = f.data, pl->name.n = f.len;
    else if (pass == 0 && f.number == 5) {
      if (!pb_expect(&r, &f, PB_LEN, "stat_metadata") || !read_stat_metadata(pl, &r, &f))
        return false;
    } else if (pass == 1 && f.number == 4) {
      if (!pb_expect(&r, &f, PB_LEN, "event_metadata"))
        return false;
      if (metadata)
        read_program(pl, &r, &f);
      else
        note_memory_kind(pl, &r, &f);
    } else if (pass == 2 && f.number == 3) {
      if (!pb_expect(&r, &f, PB_LEN, "lines") || !read_line(pl, sr, &r, &f))
        return false;
    }
  }
  return got == 0;
}

static void read_plane(space_reader_t *sr, pb_reader_t *r, const pb_field_t *f) {
  plane_t pl = {.im = sr->im, .step_stat = -1};
  hbm_u64map_init(&pl.stat_ids);
  hbm_u64map_init(&pl.memory_kind);
  pb_reader_t body = pb_sub(r, f, "XPlane");
  bool ok = plane_pass(&pl, sr, body, 0, false);
  bool metadata = slice_is(pl.name, "/host:metadata");
  /* XProf's Memory Profile reads the allocators' events of the host threads' plane only. */
  bool host = slice_is(pl.name, "/host:CPU");
  if (ok && (metadata || host))
    ok = plane_pass(&pl, sr, body, 1, metadata);
  pl.steps_only = !host && !metadata;
  if (ok && ((host && (pl.memory_kind.count || pl.step_stat >= 0)) ||
             (pl.steps_only && !sr->device_steps_read)))
    ok = plane_pass(&pl, sr, body, 2, false);
  if (!ok)
    xprof_note_problem(sr->im);
  free(pl.stat_name);
  hbm_u64map_free(&pl.stat_ids);
  hbm_u64map_free(&pl.memory_kind);
}

/* ---- allocator events → one space per allocator ---- */

static int by_time(const void *a, const void *b) {
  const mem_event_t *x = a, *y = b;
  if (x->time_ps != y->time_ps)
    return x->time_ps < y->time_ps ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static hbm_category_t region_category(const char *region) {
  if (region && !strcmp(region, "output"))
    return HBM_CAT_OUTPUT;
  if (region && !strcmp(region, "temp"))
    return HBM_CAT_TEMPORARY;
  return HBM_CAT_UNKNOWN;
}

/* One allocator's replay: the buffers open by address, the bytes they hold, the memory in
 * use that the trace never saw allocated (allocated before it began), and the stack the
 * runtime reserves (TPUs' bytes_reserved). */
typedef struct allocator_state {
  xprof_import_t *im;
  xprof_space_t *s;
  hbm_u64map_t open;
  unsigned __int128 live; /* exact: sizes from the file near 2^64 must not wrap it */
  int64_t baseline;       /* index of the "before the trace" buffer, -1 none */
  uint64_t baseline_bytes;
  int64_t stack; /* index of the stack-reserved buffer, -1 none */
  uint64_t stack_bytes;
} allocator_state_t;

static xprof_buffer_t *open_buffer(allocator_state_t *st, int64_t step, uint64_t size) {
  xprof_buffer_t *b = xprof_add_buffer(st->s);
  if (b)
    b->size = b->unpadded = size, b->start = step, b->end = -1;
  return b;
}

/* A buffer standing for bytes the allocator reports but the trace shows no allocation of:
 * when the amount changes, the old one ends and one of the new size begins. */
static bool track_amount(allocator_state_t *st, int64_t *index, uint64_t *bytes, uint64_t now,
                         int64_t step, const char *op) {
  if (*index >= 0)
    st->s->buffers[*index].end = step;
  *index = -1;
  *bytes = now;
  if (!now)
    return true;
  xprof_buffer_t *b = open_buffer(st, step, now);
  if (!b)
    return false;
  b->op = hbm_intern(st->im->strings, op);
  *index = (int64_t)st->s->n_buffers - 1;
  return b->op != NULL;
}

/* The allocator's own "bytes in use" after the event says how much the trace did not see:
 * shown as one buffer, which shrinks as such memory is freed, so hbm's in-use curve is the
 * allocator's whenever the two can agree; the stack it reserves is another (XProf counts
 * both in an allocator's bytes in use). */
static bool track_unseen(allocator_state_t *st, const mem_event_t *e, int64_t step) {
  uint64_t unseen = e->in_use > st->live ? e->in_use - (uint64_t)st->live : 0;
  if ((step == 0 || unseen < st->baseline_bytes) &&
      !track_amount(st, &st->baseline, &st->baseline_bytes, unseen, step,
                    "(in use before the trace began)"))
    return false;
  if (e->reserved != st->stack_bytes &&
      !track_amount(st, &st->stack, &st->stack_bytes, e->reserved, step, "(stack reserved)"))
    return false;
  return true;
}

static bool allocator_step(allocator_state_t *st, const mem_event_t *e, int64_t t0_ps) {
  xprof_space_t *s = st->s;
  int64_t step = s->n_steps++;
  s->step_times[step] = (int64_t)(((uint64_t)e->time_ps - (uint64_t)t0_ps) / 1000u);
  s->step_labels[step] = e->op;
  uint64_t at;
  if (hbm_u64map_remove(&st->open, e->addr, &at)) { /* a free, or the address used again */
    s->buffers[at].end = step;
    st->live -= s->buffers[at].size;
  }
  if (e->alloc) {
    xprof_buffer_t *b = open_buffer(st, step, e->allocation ? e->allocation : e->requested);
    if (!b)
      return false;
    b->unpadded = e->requested ? e->requested : b->size;
    b->offset = e->addr;
    b->op = e->op, b->shape = e->shape, b->group = e->region, b->label = e->data_type;
    b->category = region_category(e->region);
    st->live += b->size;
    if (!hbm_u64map_put(&st->open, e->addr, s->n_buffers - 1))
      return false;
  }
  return track_unseen(st, e, step);
}

/* Offsets from the allocator's lowest address, so the span of the addresses is the memory
 * it spans rather than the address itself. */
static void rebase_addresses(xprof_space_t *s) {
  uint64_t low = UINT64_MAX;
  for (size_t i = 0; i < s->n_buffers; i++)
    if (s->buffers[i].offset && s->buffers[i].offset < low)
      low = s->buffers[i].offset;
  for (size_t i = 0; i < s->n_buffers && low != UINT64_MAX; i++)
    s->buffers[i].offset = s->buffers[i].offset >= low ? s->buffers[i].offset - low : 0;
}

/* One allocator's events (indexes into ev, in time order) → its space. */
static bool build_allocator(xprof_import_t *im, const mem_event_t *ev, const size_t *mine,
                            size_t count, const char *allocator, int64_t t0_ps) {
  xprof_space_t *s = xprof_add_space(im, allocator ? allocator : "allocator", "allocator", 0);
  if (!s)
    return false;
  s->runtime = true;
  s->step_labels = calloc(count + 1, sizeof *s->step_labels);
  s->step_times = calloc(count + 1, sizeof *s->step_times);
  allocator_state_t st = {.im = im, .s = s, .baseline = -1, .stack = -1};
  hbm_u64map_init(&st.open);
  bool ok = s->step_labels && s->step_times;
  for (size_t i = 0; i < count && ok; i++)
    ok = allocator_step(&st, &ev[mine[i]], t0_ps);
  hbm_u64map_free(&st.open);
  rebase_addresses(s);
  return ok;
}

/* The allocators of a file, in the order they first appear, with XProf's peak of each (the
 * most bytes allocated plus reserved any event reports) to keep the largest when a file
 * names more than MAX_ALLOCATORS. */
typedef struct allocator_group {
  const char *name;
  size_t count, first, at; /* events; index of its first; where its events start in the list */
  uint64_t peak;
  bool kept;
} allocator_group_t;

static int by_peak_desc(const void *a, const void *b) {
  const allocator_group_t *x = *(allocator_group_t *const *)a, *y = *(allocator_group_t *const *)b;
  if (x->peak != y->peak)
    return x->peak > y->peak ? -1 : 1;
  return x->first < y->first ? -1 : x->first > y->first;
}

/* Groups the (time-sorted) events by allocator in one pass; NULL when memory ran out. */
static allocator_group_t *group_events(const space_reader_t *sr, size_t *n_groups, size_t **order) {
  hbm_u64map_t index;
  hbm_u64map_init(&index);
  allocator_group_t *g = NULL;
  size_t n = 0, cap = 0;
  size_t *group_of = malloc(sr->n_events * sizeof *group_of);
  bool ok = group_of != NULL;
  for (size_t i = 0; i < sr->n_events && ok; i++) {
    const mem_event_t *e = &sr->events[i];
    uint64_t key = (uint64_t)(uintptr_t)e->allocator, k; /* interned: one pointer per name */
    if (!hbm_u64map_get(&index, key, &k)) {
      allocator_group_t *grown = n == cap ? hbm__grow_array(g, &cap, n + 1, sizeof *g, 16) : g;
      ok = grown && hbm_u64map_put(&index, key, n);
      if (!ok)
        break;
      g = grown;
      g[n] = (allocator_group_t){.name = e->allocator, .first = i};
      k = n++;
    }
    group_of[i] = (size_t)k;
    g[k].count++;
    uint64_t in_use = hbm__bytes_add(e->in_use, e->reserved);
    g[k].peak = in_use > g[k].peak ? in_use : g[k].peak;
  }
  hbm_u64map_free(&index);
  *order = ok ? malloc((sr->n_events + 1) * sizeof **order) : NULL;
  if (!*order) {
    free(group_of), free(g);
    return NULL;
  }
  for (size_t k = 0, at = 0; k < n; at += g[k++].count)
    g[k].at = at;
  size_t *fill = calloc(n + 1, sizeof *fill);
  for (size_t i = 0; fill && i < sr->n_events; i++) /* counting sort: time order kept */
    (*order)[g[group_of[i]].at + fill[group_of[i]]++] = i;
  free(group_of);
  if (!fill) {
    free(*order), free(g);
    return NULL;
  }
  free(fill);
  *n_groups = n;
  return g;
}

/* Keeps the MAX_ALLOCATORS with the highest peaks; says how many were left out. */
static bool keep_largest(xprof_import_t *im, allocator_group_t *g, size_t n) {
  allocator_group_t **rank = malloc((n + 1) * sizeof *rank);
  if (!rank)
    return false;
  for (size_t k = 0; k < n; k++)
    rank[k] = &g[k];
  qsort(rank, n, sizeof *rank, by_peak_desc);
  size_t dropped_events = 0;
  for (size_t k = 0; k < n; k++) {
    rank[k]->kept = k < MAX_ALLOCATORS;
    dropped_events += rank[k]->kept ? 0 : rank[k]->count;
  }
  free(rank);
  if (n > MAX_ALLOCATORS) {
    hbm__error(HBM_ERR_PARSE,
               "%s: %zu allocators (allocator_name / index_on_host / device_ordinal): the %d "
               "with the highest peaks are shown, the other %zu and their %zu events are not",
               im->file, n, MAX_ALLOCATORS, n - MAX_ALLOCATORS, dropped_events);
    xprof_note_problem(im);
  }
  return true;
}

static bool build_allocators(space_reader_t *sr) {
  if (!sr->n_events)
    return true;
  qsort(sr->events, sr->n_events, sizeof *sr->events, by_time);
  int64_t t0 = sr->events[0].time_ps;
  size_t n = 0, *order = NULL;
  allocator_group_t *g = group_events(sr, &n, &order);
  bool ok = g && keep_largest(sr->im, g, n);
  for (size_t k = 0; k < n && ok; k++)
    if (g[k].kept)
      ok = build_allocator(sr->im, sr->events, order + g[k].at, g[k].count, g[k].name, t0);
  free(g);
  free(order);
  return ok;
}

/* A plane's backend from its name (field 2): "/device:TPU:0", "/device:GPU:0"; else 0. */
static int plane_backend(pb_reader_t p) {
  pb_field_t g;
  while (pb_next(&p, &g) > 0)
    if (g.number == 2 && g.wire == PB_LEN) {
      bool device = g.len > 11 && !memcmp(g.data, "/device:", 8);
      if (device && !memcmp(g.data + 8, "TPU", 3))
        return HBM_PLAN_BACKEND_TPU;
      if (device && !memcmp(g.data + 8, "GPU", 3))
        return HBM_PLAN_BACKEND_GPU;
      return 0;
    }
  return 0;
}

/* The backend whose buffer assignment hbm's planner reproduces: a "/device:GPU:n" or
 * "/device:TPU:n" plane names it; a trace with neither ran on the host's CPU. */
static int backend_of(const xprof_import_t *im, const uint8_t *data, size_t len) {
  pb_reader_t r = pb_reader(data, len, data, im->file, "XSpace");
  pb_field_t f;
  while (pb_next(&r, &f) > 0) {
    int backend = f.number == 1 && f.wire == PB_LEN ? plane_backend(pb_sub(&r, &f, "XPlane")) : 0;
    if (backend)
      return backend;
  }
  return HBM_PLAN_BACKEND_CPU;
}

/* Every plane into sr: HBM_OK, or HBM_ERR_PARSE when the damage came before any plane (later
 * damage is noted, and what was read kept). */
static hbm_status_t read_space(space_reader_t *sr, const uint8_t *data, size_t len) {
  xprof_import_t *im = sr->im;
  pb_reader_t r = pb_reader(data, len, data, im->file, "XSpace");
  pb_field_t f;
  int got;
  size_t planes = 0;
  while ((got = pb_next(&r, &f)) > 0) {
    if (f.number != 1)
      continue;
    if (!pb_expect(&r, &f, PB_LEN, "planes")) {
      got = -1;
      break;
    }
    planes++;
    read_plane(sr, &r, &f);
  }
  hbm_status_t st = got < 0 ? HBM_ERR_PARSE : HBM_OK;
  if (st != HBM_OK && planes)
    xprof_note_problem(im), st = HBM_OK; /* keep the planes read before the damage */
  if (sr->dropped) {
    hbm__error(HBM_ERR_PARSE, "%s: %zu allocator events beyond the first %u were not read",
               im->file, sr->dropped, MAX_MEMORY_EVENTS);
    xprof_note_problem(im);
  }
  return st;
}

static void reader_free(space_reader_t *sr) {
  free(sr->events);
  free(sr->host_steps.ps);
  free(sr->device_steps.ps);
}

hbm_status_t xprof_read_xspace(xprof_import_t *im, const uint8_t *data, size_t len) {
  space_reader_t sr = {.im = im};
  im->backend = backend_of(im, data, len);
  hbm_status_t st = read_space(&sr, data, len);
  if (!build_allocators(&sr))
    st = hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of memory for the allocator events", im->file);
  reader_free(&sr);
  return st;
}

/* ---- the busiest allocator as an allocation log (hbm replay) ---- */

static int compare_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* An allocator event as log events (a second allocation of a live address first frees it:
 * the trace lost that free); a free of a block allocated before the trace is left out. How
 * many it wrote. */
static size_t log_events(const mem_event_t *e, int64_t t0_ps, hbm_u64map_t *live,
                         hbm_log_event_t *out) {
  hbm_log_event_t ev = {
      .pointer = e->addr, .time_ns = (e->time_ps - t0_ps) / 1000, .line = (int64_t)e->seq + 1};
  size_t n = 0;
  if (!e->alloc) {
    ev.action = HBM_LOG_FREE;
    return hbm_u64map_remove(live, e->addr, NULL) ? (out[0] = ev, 1) : 0;
  }
  if (hbm_u64map_get(live, e->addr, NULL)) {
    ev.action = HBM_LOG_FREE;
    out[n++] = ev;
  }
  ev.action = HBM_LOG_ALLOCATE;
  ev.size = e->requested ? e->requested : e->allocation;
  if (!ev.size || !hbm_u64map_put(live, e->addr, 1))
    return n;
  out[n++] = ev;
  return n;
}

/* The step markers (the host's; without them, a device's Steps line) as the log's events
 * before which a step began. */
static bool log_steps(space_reader_t *sr, const mem_event_t *ev, const size_t *mine, size_t n,
                      const size_t *first_of, hbm_alloc_log_t *out) {
  step_times_t *t = sr->host_steps.n ? &sr->host_steps : &sr->device_steps;
  out->step_begins = malloc((t->n + 1) * sizeof *out->step_begins);
  if (!out->step_begins)
    return false;
  if (t->n) /* (t->ps may be NULL: qsort must not get it) */
    qsort(t->ps, t->n, sizeof *t->ps, compare_i64);
  size_t k = 0;
  for (size_t i = 0; i < t->n; i++) {
    while (k < n && ev[mine[k]].time_ps < t->ps[i])
      k++;
    size_t at = k < n ? first_of[k] : out->n_events;
    if (at < out->n_events &&
        (!out->n_step_begins || out->step_begins[out->n_step_begins - 1] != at))
      out->step_begins[out->n_step_begins++] = at;
  }
  return true;
}

hbm_status_t xprof_xspace_log(xprof_import_t *im, const uint8_t *data, size_t len,
                              hbm_alloc_log_t *out, const char **allocator) {
  space_reader_t sr = {.im = im};
  memset(out, 0, sizeof *out);
  hbm_status_t st = read_space(&sr, data, len);
  size_t n = 0, *order = NULL, busiest = 0;
  allocator_group_t *g = NULL;
  if (st == HBM_OK && sr.n_events) {
    qsort(sr.events, sr.n_events, sizeof *sr.events, by_time);
    if (!(g = group_events(&sr, &n, &order)))
      st = hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of memory", im->file);
  }
  for (size_t k = 1; k < n; k++)
    busiest = g[k].count > g[busiest].count ? k : busiest;
  size_t *mine = n ? order + g[busiest].at : NULL, count = n ? g[busiest].count : 0;
  size_t *first_of = malloc((count + 1) * sizeof *first_of);
  out->events = malloc((2 * count + 1) * sizeof *out->events);
  hbm_u64map_t live;
  hbm_u64map_init(&live);
  if (st == HBM_OK && (!first_of || !out->events))
    st = hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of memory", im->file);
  for (size_t i = 0; st == HBM_OK && i < count; i++) {
    first_of[i] = out->n_events;
    out->n_events += log_events(&sr.events[mine[i]], sr.events[mine[0]].time_ps, &live,
                                out->events + out->n_events);
  }
  if (st == HBM_OK && !log_steps(&sr, sr.events, mine, count, first_of, out))
    st = hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of memory", im->file);
  if (allocator)
    *allocator = n ? g[busiest].name : NULL;
  hbm_u64map_free(&live);
  free(first_of);
  free(g);
  free(order);
  reader_free(&sr);
  if (st != HBM_OK)
    hbm_alloc_log_free(out);
  return st;
}
