/* trace_read.c — reads .hbmtrace files back into the profile model (format in
 * docs/trace-format.md). Explicit records (a saved profile) are added as they come; event
 * records (a recorded run) are replayed in time order, one step per alloc/free: as they are
 * read, through a window that puts nearby events back in order (stream_event), or — when
 * threads' blocks interleave further apart than that — collected whole, ordered by time and
 * replayed (replay_events).
 *
 * The reader trusts nothing: every length is checked against the bytes that are really there,
 * block sizes and the total decompressed size are capped, and a file cut short or damaged is
 * read up to its last good block, with profile meta "lost" saying what was lost. */
#include "profile/index.h"
#include "profile/profile_build.h"
#include "profile/trace_blocks.h"
#include "profile/trace_format.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <zstd.h>

/* An event record as read, 32 bytes (a 10^8-event run is held as 3.2 GB, not 6.4): the
 * tags of an allocation are one entry of a table of distinct tag tuples. */
typedef struct event {
  int64_t time;
  uint64_t address;
  uint64_t size; /* size / requested / reserve size; a marker's value */
  uint32_t ref;  /* EV_ALLOC: its tags (index into tags); EV_OOM, EV_MARKER: a string id */
  uint16_t space;
  uint8_t type;
  uint8_t bits; /* flags << 4 | op (category, reserve op or marker kind) */
} event_t;

typedef struct tags {
  uint32_t str[4];           /* op, shape, group, source: string ids */
  const char *in_profile[4]; /* the same strings interned in the profile, once replayed */
  bool interned;
} tags_t;

typedef struct replay {
  hbm_u64map_t *live; /* per space: address → buffer index */
  int n_spaces;
  uint64_t unmatched_frees, missing_frees;
} replay_t;

#define MERGE_RUNS_AT_ONCE 4096 /* runs merged as they are replayed; more are sorted first */
#define TAG_SEEN 64             /* tuples remembered by hash: most allocations reuse a recent one */

typedef struct reader {
  const char *name;
  hbm_profile_t *p;
  hbm_intern_t *strings;
  const char **string_of; /* id - 1 → string */
  size_t n_strings, cap_strings;
  event_t *events; /* mapped: the replay gives back what it has passed */
  size_t n_events, cap_events;
  bool in_order;  /* every event so far at or after the one before it */
  size_t *run_at; /* where each run of events in time order but the first begins ... */
  size_t n_run_at, cap_run_at;
  bool runs_unknown; /* ... unless there are too many to merge (or no memory to list them) */
  /* Replaying while reading (stream_event): events holds the window of events not replayed. */
  bool stream, stream_broken; /* ... until one came too far out of order: read again */
  bool seen_event;
  size_t window;       /* events held at most */
  replay_t rp;         /* the replay so far */
  int64_t replayed_to; /* the time of the latest event replayed (when replayed_any) */
  bool replayed_any;
  struct run_cursor *cursors; /* the window's runs, kept between its merges */
  tags_t *tags;               /* distinct tag tuples of the allocations */
  size_t n_tags, cap_tags;
  hbm_u64map_t tag_index;      /* hash of a tuple → index + 1 (probing on) */
  uint32_t tag_seen[TAG_SEEN]; /* by hash: index + 1 of the tuple last found there (0: none) */
  bool explicit_buffers;       /* BUFFER records were read (a saved profile) */
  int64_t last_time;
  bool ended;
  uint64_t block;  /* blocks read whole */
  char error[512]; /* why the current block could not be read */
} reader_t;

/* A bounded cursor over a record body. */
typedef struct cursor {
  const uint8_t *p, *end;
  bool bad;
} cursor_t;

static uint64_t get_u(cursor_t *c) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (c->p >= c->end) {
      c->bad = true;
      return 0;
    }
    uint8_t byte = *c->p++;
    v |= (uint64_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80))
      return v;
  }
  c->bad = true; /* more than 10 bytes */
  return 0;
}
static int64_t get_s(cursor_t *c) { return hbm__unzigzag(get_u(c)); }

static bool bad(reader_t *r, const char *fmt, ...) HBM_PRINTF(2, 3);
static bool bad(reader_t *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->error, sizeof r->error, fmt, ap);
  va_end(ap);
  return false;
}

/* The string of an id (NULL for 0); false when the id was never defined. */
static bool get_string(reader_t *r, cursor_t *c, const char **out) {
  uint64_t id = get_u(c);
  if (id > r->n_strings)
    return bad(r, "string id %llu used before it was defined", (unsigned long long)id);
  *out = id ? r->string_of[id - 1] : NULL;
  return true;
}

static bool add_string(reader_t *r, const uint8_t *s, size_t n) {
  if (r->n_strings == r->cap_strings) {
    const char **grown =
        hbm__grow_array(r->string_of, &r->cap_strings, r->n_strings + 1, sizeof *grown, 256);
    if (!grown)
      return bad(r, "out of host memory after %zu strings", r->n_strings);
    r->string_of = grown;
  }
  const char *copy = hbm_intern_n(r->strings, (const char *)s, n);
  if (!copy)
    return bad(r, "out of host memory after %zu strings", r->n_strings);
  r->string_of[r->n_strings++] = copy;
  return true;
}

static bool profile_failed(reader_t *r) {
  snprintf(r->error, sizeof r->error, "%s", hbm_last_error());
  return false;
}

/* ---- explicit records ---- */

static bool read_space(reader_t *r, cursor_t *c) {
  uint64_t index = get_u(c);
  const char *name = NULL, *device = NULL;
  if (!get_string(r, c, &name) || !get_string(r, c, &device))
    return false;
  int64_t color = get_s(c);
  uint64_t limit = get_u(c);
  if (c->bad)
    return bad(r, "a space record is cut short");
  if (index != (uint64_t)hbm_profile_space_count(r->p))
    return bad(r, "space %llu defined out of order", (unsigned long long)index);
  if (index >= HBM_TRACE_MAX_SPACES)
    return bad(r, "more than %d memory spaces", HBM_TRACE_MAX_SPACES);
  if (color < INT32_MIN || color > INT32_MAX)
    return bad(r, "space colour %lld out of range", (long long)color);
  return hbm_profile_add_space(r->p, name ? name : "", device, (int)color, limit) >= 0 ||
         profile_failed(r);
}

static bool read_step(reader_t *r, cursor_t *c) {
  r->last_time = (int64_t)((uint64_t)r->last_time + (uint64_t)get_s(c));
  const char *label = NULL;
  if (!get_string(r, c, &label))
    return false;
  if (c->bad)
    return bad(r, "a step record is cut short");
  return hbm_profile_add_step(r->p, r->last_time, label) >= 0 || profile_failed(r);
}

static bool read_buffer(reader_t *r, cursor_t *c) {
  hbm_buffer_t b = {0};
  uint64_t space = get_u(c);
  b.address = get_u(c);
  b.size = get_u(c);
  b.unpadded_size = b.size - (uint64_t)get_s(c);
  b.start = get_s(c);
  b.end = (int64_t)((uint64_t)b.start + (uint64_t)get_s(c));
  uint64_t category = get_u(c), flags = get_u(c);
  const char **strings[] = {&b.op, &b.shape, &b.group, &b.source, &b.opcode, &b.label};
  for (size_t i = 0; i < HBM_ARRAY_LEN(strings); i++)
    if (!get_string(r, c, strings[i]))
      return false;
  if (c->bad)
    return bad(r, "a buffer record is cut short");
  if (space > INT32_MAX || category >= HBM_CAT_COUNT || flags > UINT32_MAX)
    return bad(r, "a buffer record has a bad space, category or flags");
  b.space = (int)space;
  b.category = (hbm_category_t)category;
  b.flags = (uint32_t)flags;
  r->explicit_buffers = true;
  return hbm_profile_add_buffer(r->p, &b) >= 0 || profile_failed(r);
}

static bool read_reserve(reader_t *r, cursor_t *c) {
  hbm_reserve_event_t e = {.step = get_s(c)};
  uint64_t space = get_u(c), op = get_u(c);
  e.address = get_u(c);
  e.size = get_u(c);
  if (c->bad || space > INT32_MAX || op > HBM_RESERVE_RELEASE)
    return bad(r, "a reservation record is cut short or out of range (op %llu)",
               (unsigned long long)op);
  e.space = (int)space;
  e.op = (hbm_reserve_op_t)op;
  return hbm_profile_add_reserve(r->p, &e) == HBM_OK || profile_failed(r);
}

static bool read_oom(reader_t *r, cursor_t *c) {
  hbm_oom_event_t e = {.step = get_s(c)};
  uint64_t space = get_u(c);
  e.requested = get_u(c);
  if (!get_string(r, c, &e.message))
    return false;
  if (c->bad || space > INT32_MAX)
    return bad(r, "an OOM record is cut short or out of range (space %llu)",
               (unsigned long long)space);
  e.space = (int)space;
  return hbm_profile_add_oom(r->p, &e) == HBM_OK || profile_failed(r);
}

static bool read_marker(reader_t *r, cursor_t *c) {
  hbm_marker_t m = {.step = get_s(c)};
  uint64_t kind = get_u(c);
  m.value = get_s(c);
  if (!get_string(r, c, &m.text))
    return false;
  if (c->bad || kind > HBM_MARKER_STEP_END)
    return bad(r, "a marker record is cut short or of unknown kind %llu", (unsigned long long)kind);
  m.kind = (hbm_marker_kind_t)kind;
  return hbm_profile_add_marker(r->p, &m) == HBM_OK || profile_failed(r);
}

/* ---- event records: collected here, replayed once the whole file is read ---- */

static bool same_tags(const uint32_t *a, const uint32_t *b) {
  return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

/* The index of a tag tuple, added when new; UINT32_MAX when out of memory. */
static uint32_t tags_index(reader_t *r, const uint32_t *str) {
  uint64_t h = 0x7a9c;
  for (int i = 0; i < 4; i++)
    h = (h ^ str[i]) * 0x9e3779b97f4a7c15ull, h ^= h >> 31;
  uint32_t seen = r->tag_seen[h % TAG_SEEN];
  if (seen && same_tags(r->tags[seen - 1].str, str))
    return seen - 1; /* no probing of tag_index */
  uint32_t *remember = &r->tag_seen[h % TAG_SEEN];
  uint64_t at;
  for (;; h++) {
    if (!hbm_u64map_get(&r->tag_index, h, &at))
      break;
    if (!memcmp(r->tags[at].str, str, sizeof r->tags[at].str))
      return *remember = (uint32_t)at + 1, (uint32_t)at;
  }
  tags_t *grown = hbm__grow_array(r->tags, &r->cap_tags, r->n_tags + 1, sizeof *grown, 64);
  if (!grown || r->n_tags >= UINT32_MAX || !hbm_u64map_put(&r->tag_index, h, r->n_tags))
    return UINT32_MAX;
  r->tags = grown;
  memset(&r->tags[r->n_tags], 0, sizeof r->tags[r->n_tags]);
  memcpy(r->tags[r->n_tags].str, str, sizeof r->tags[r->n_tags].str);
  *remember = (uint32_t)r->n_tags + 1;
  return (uint32_t)r->n_tags++;
}

/* Room for one more event: the array is mapped (not malloc'd), so it can grow in place and the
 * replay can give its pages back as it passes them. */
static bool room_for_event(reader_t *r) {
  if (r->n_events < r->cap_events)
    return true;
  size_t cap = r->cap_events ? r->cap_events * 2 : 4096;
  void *grown =
      hbm__map_grow(r->events, r->cap_events * sizeof *r->events, cap * sizeof *r->events);
  if (grown == MAP_FAILED)
    return bad(r, "out of host memory after %zu events (%zu bytes)", r->n_events,
               r->n_events * sizeof *r->events);
  r->events = grown;
  r->cap_events = cap;
  return true;
}

/* The next event begins a run (it is earlier than the one before): listed, so that the
 * replay need not look for the runs in 3.2 GB of events. */
static void new_run(reader_t *r) {
  r->in_order = false;
  if (r->runs_unknown || r->n_run_at + 1 >= MERGE_RUNS_AT_ONCE) {
    r->runs_unknown = true;
    return;
  }
  size_t *grown =
      hbm__grow_array(r->run_at, &r->cap_run_at, r->n_run_at + 1, sizeof *r->run_at, 64);
  if (!grown) {
    r->runs_unknown = true;
    return;
  }
  r->run_at = grown;
  r->run_at[r->n_run_at++] = r->n_events;
}

static bool stream_event(reader_t *r, const event_t *e);
static bool stream_break(reader_t *r);

static bool read_event(reader_t *r, int type, cursor_t *c) {
  event_t e = {.type = (uint8_t)type};
  r->last_time = (int64_t)((uint64_t)r->last_time + (uint64_t)get_s(c));
  e.time = r->last_time;
  uint64_t space = 0, op = 0, flags = 0;
  uint32_t str[4] = {0, 0, 0, 0};
  if (type != HBM_REC_EV_MARKER)
    space = get_u(c);
  switch (type) {
  case HBM_REC_EV_ALLOC:
    e.address = get_u(c);
    e.size = get_u(c);
    get_s(c); /* allocated - size: kept in the file, not in the profile model */
    op = get_u(c);
    flags = get_u(c);
    for (int i = 0; i < 4; i++)
      str[i] = (uint32_t)get_u(c);
    break;
  case HBM_REC_EV_FREE: e.address = get_u(c); break;
  case HBM_REC_EV_RESERVE:
    op = get_u(c);
    e.address = get_u(c);
    e.size = get_u(c);
    break;
  case HBM_REC_EV_OOM:
    e.size = get_u(c);
    str[0] = (uint32_t)get_u(c);
    break;
  case HBM_REC_EV_MARKER:
    op = get_u(c);
    e.size = (uint64_t)get_s(c);
    str[0] = (uint32_t)get_u(c);
    break;
  default: break; /* EV_CLOSE: the space only */
  }
  if (c->bad)
    return bad(r, "an event record (type 0x%x) is cut short", (unsigned)type);
  if (space >= HBM_TRACE_MAX_SPACES || op > 15)
    return bad(r, "an event record has a bad space or kind");
  for (int i = 0; i < 4; i++)
    if (str[i] > r->n_strings)
      return bad(r, "string id %u used before it was defined", (unsigned)str[i]);
  e.space = (uint16_t)space;
  e.bits = (uint8_t)((flags & HBM_EV_PREEXISTING) << 4 | op);
  e.ref = type == HBM_REC_EV_ALLOC ? tags_index(r, str) : str[0];
  if (e.ref == UINT32_MAX)
    return bad(r, "out of host memory after %zu tag sets", r->n_tags);
  r->seen_event = true;
  if (r->stream)
    return stream_event(r, &e);
  if (!room_for_event(r))
    return false;
  hbm__populate_ahead(r->events, r->n_events, sizeof *r->events, r->cap_events * sizeof *r->events);
  if (r->n_events && e.time < r->events[r->n_events - 1].time)
    new_run(r);
  r->events[r->n_events++] = e;
  return true;
}

static bool read_record(reader_t *r, int type, cursor_t *c) {
  bool explicit = type >= HBM_REC_STEP && type <= HBM_REC_MARKER;
  if (explicit && r->stream && r->seen_event) /* replayed after the events when collected */
    return stream_break(r);
  switch (type) {
  case HBM_REC_STRING: return add_string(r, c->p, (size_t)(c->end - c->p));
  case HBM_REC_SPACE: return read_space(r, c);
  case HBM_REC_STEP: return read_step(r, c);
  case HBM_REC_BUFFER: return read_buffer(r, c);
  case HBM_REC_RESERVE: return read_reserve(r, c);
  case HBM_REC_OOM: return read_oom(r, c);
  case HBM_REC_MARKER: return read_marker(r, c);
  case HBM_REC_EV_ALLOC:
  case HBM_REC_EV_FREE:
  case HBM_REC_EV_RESERVE:
  case HBM_REC_EV_OOM:
  case HBM_REC_EV_MARKER:
  case HBM_REC_EV_CLOSE: return read_event(r, type, c);
  case HBM_REC_END: r->ended = true; return true;
  default: return true; /* a record type from a newer writer: skipped */
  }
}

static bool read_records(reader_t *r, const uint8_t *data, size_t len) {
  cursor_t all = {data, data + len, false};
  r->last_time = 0;
  while (all.p < all.end) {
    size_t offset = (size_t)(all.p - data);
    int type = *all.p++;
    uint64_t n = get_u(&all);
    if (all.bad || n > (uint64_t)(all.end - all.p))
      return bad(r, "the record at offset %llu runs past the end of its block",
                 (unsigned long long)offset);
    cursor_t body = {all.p, all.p + n, false};
    all.p += n;
    if (!read_record(r, type, &body))
      return false;
  }
  return true;
}

/* ---- replaying events ---- */

/* The end of the run of events in time order that starts at `lo` (at most `n`). */
static size_t run_end(const event_t *e, size_t lo, size_t n) {
  size_t i = lo + 1;
  while (i < n && e[i].time >= e[i - 1].time)
    i++;
  return i;
}

/* A heap of runs by their next event's time (ties: the earlier run, so the merge is stable). */
typedef struct run_cursor {
  size_t at, end, run; /* next event, end, the run's number */
} run_cursor_t;

typedef struct run_heap {
  run_cursor_t *c;
  size_t n;
  size_t given;    /* events taken from the heap */
  size_t dropped;  /* the events' pages below this event are given back */
  bool keep_pages; /* not given back (a window that is filled again) */
} run_heap_t;

static bool run_before(const run_heap_t *h, const event_t *e, size_t a, size_t b) {
  int64_t x = e[h->c[a].at].time, y = e[h->c[b].at].time;
  return x != y ? x < y : h->c[a].run < h->c[b].run;
}

static void run_sift_down(run_heap_t *h, const event_t *e, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && run_before(h, e, l, m))
      m = l;
    if (r < h->n && run_before(h, e, r, m))
      m = r;
    if (m == i)
      return;
    run_cursor_t t = h->c[i];
    h->c[i] = h->c[m], h->c[m] = t;
    i = m;
  }
}

/* The heap of the runs of e[0..n), which begin at 0 and at[0..n_at) (at NULL: found here);
 * false when there are more than `most` (h->n is then 0) or no memory (h->c is then NULL). */
static bool run_heap_init(run_heap_t *h, const event_t *e, size_t n, size_t most, const size_t *at,
                          size_t n_at) {
  h->n = h->given = h->dropped = 0;
  if (!h->c && !(h->c = malloc((most + 1) * sizeof *h->c)))
    return false;
  for (size_t lo = 0; lo < n; h->n++) {
    if (h->n == most) {
      h->n = 0;
      return false;
    }
    size_t end = !at ? run_end(e, lo, n) : h->n < n_at ? at[h->n] : n;
    h->c[h->n] = (run_cursor_t){lo, end, h->n};
    lo = end;
  }
  for (size_t i = h->n; i-- > 0;)
    run_sift_down(h, e, i);
  return true;
}

/* Gives back the pages of the events every run has passed (below the lowest next event of
 * the runs not yet done), when that is 32 MiB more than before. */
static void run_drop_passed(run_heap_t *h, const event_t *e) {
  size_t low = SIZE_MAX;
  for (size_t i = 0; i < h->n; i++)
    low = h->c[i].at < low ? h->c[i].at : low;
  uintptr_t page = 4096, from = (uintptr_t)&e[h->dropped] / page * page;
  uintptr_t to = low == SIZE_MAX ? from : (uintptr_t)&e[low] / page * page;
  if (to >= from + ((uintptr_t)32 << 20)) {
    madvise((void *)from, to - from, MADV_DONTNEED);
    h->dropped = low;
  }
}

/* The next event in time order (NULL after the last): the heap's first run's, which then
 * moves on. */
static const event_t *run_heap_next(run_heap_t *h, const event_t *e) {
  if (h->n == 0)
    return NULL;
  if (++h->given % (1u << 20) == 0 && !h->keep_pages)
    run_drop_passed(h, e);
  const event_t *next = &e[h->c[0].at++];
  if (h->c[0].at == h->c[0].end)
    h->c[0] = h->c[--h->n];
  run_sift_down(h, e, 0);
  return next;
}

/* Events by time, ties in file order (stable) — needed only when threads' blocks interleave.
 * The runs already in order (a thread's, between markers) are merged as they are replayed
 * when they are few (run_heap: no sorted copy of 3.2 GB for 10^8 events); many runs are
 * merged here two by two, pass after pass, with a buffer as big as the events. */

static bool sort_events(reader_t *r) {
  size_t n = r->n_events;
  event_t *tmp =
      mmap(NULL, n * sizeof *tmp, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (tmp == MAP_FAILED)
    return false;
  event_t *from = r->events, *to = tmp;
  for (;;) {
    size_t runs = 0;
    for (size_t lo = 0; lo < n;) {
      size_t mid = run_end(from, lo, n), hi = mid < n ? run_end(from, mid, n) : n;
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi)
        to[k++] = from[j].time < from[i].time ? from[j++] : from[i++];
      memcpy(to + k, from + i, (mid - i) * sizeof *from);
      k += mid - i;
      memcpy(to + k, from + j, (hi - j) * sizeof *from);
      runs++;
      lo = hi;
    }
    event_t *t = from;
    from = to, to = t;
    if (runs == 1)
      break;
  }
  if (from != r->events) { /* the sorted copy becomes the events */
    munmap(r->events, r->cap_events * sizeof *r->events);
    r->events = from;
    r->cap_events = n;
  } else {
    munmap(tmp, n * sizeof *tmp);
  }
  return true;
}

static const char *str_of(const reader_t *r, uint32_t id) {
  return id ? r->string_of[id - 1] : NULL;
}

static hbm_status_t replay_alloc(reader_t *r, replay_t *rp, const event_t *e) {
  hbm_u64map_t *live = &rp->live[e->space];
  uint64_t old;
  if (hbm_u64map_get(live, e->address, &old)) {
    if ((e->bits >> 4) & HBM_EV_PREEXISTING)
      return HBM_OK; /* recorded after the capture began and listed again by describe */
    rp->missing_frees++;
    hbm_u64map_remove(live, e->address, NULL);
    if (hbm_profile_end_buffer(r->p, (int64_t)old, hbm_profile_step_count(r->p)) != HBM_OK)
      return hbm_last_status();
  }
  int64_t step = hbm_profile_add_step(r->p, e->time, NULL);
  tags_t *t = &r->tags[e->ref];
  if (!t->interned) { /* each distinct tag set's strings go into the profile once */
    for (int i = 0; i < 4; i++) {
      const char *text = str_of(r, t->str[i]);
      if (text && !(t->in_profile[i] = hbm_intern(hbm__profile_strings(r->p), text)))
        return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory replaying a profile");
    }
    t->interned = true;
  }
  unsigned category = e->bits & 15;
  hbm_buffer_t b = {.address = e->address,
                    .size = e->size,
                    .unpadded_size = e->size,
                    .start = step,
                    .end = -1,
                    .space = e->space,
                    .category =
                        category < HBM_CAT_COUNT ? (hbm_category_t)category : HBM_CAT_UNKNOWN,
                    .op = t->in_profile[0],
                    .shape = t->in_profile[1],
                    .group = t->in_profile[2],
                    .source = t->in_profile[3]};
  int64_t idx = step < 0 ? -1 : hbm__profile_add_buffer_interned(r->p, &b);
  if (idx < 0)
    return hbm_last_status();
  if (!hbm_u64map_put(live, e->address, (uint64_t)idx))
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory replaying a profile");
  return HBM_OK;
}

static hbm_status_t replay_free(reader_t *r, replay_t *rp, const event_t *e) {
  uint64_t idx;
  if (!hbm_u64map_remove(&rp->live[e->space], e->address, &idx)) {
    rp->unmatched_frees++; /* freed before describe listed it, or its alloc was lost */
    return HBM_OK;
  }
  int64_t step = hbm_profile_add_step(r->p, e->time, NULL);
  if (step < 0)
    return hbm_last_status();
  return hbm_profile_end_buffer(r->p, (int64_t)idx, step);
}

/* A device closed: whatever it still held is released with it. */
static hbm_status_t replay_close(reader_t *r, replay_t *rp, const event_t *e) {
  hbm_u64map_t *live = &rp->live[e->space];
  if (live->count == 0)
    return HBM_OK;
  int64_t step = hbm_profile_add_step(r->p, e->time, NULL);
  if (step < 0)
    return hbm_last_status();
  for (size_t i = 0; i < live->cap; i++)
    if (live->used[i] == 1 && hbm_profile_end_buffer(r->p, (int64_t)live->values[i], step))
      return hbm_last_status();
  hbm_u64map_free(live);
  hbm_u64map_init(live);
  return HBM_OK;
}

static hbm_status_t replay_event(reader_t *r, replay_t *rp, const event_t *e) {
  int64_t next_step = hbm_profile_step_count(r->p);
  switch (e->type) {
  case HBM_REC_EV_ALLOC: return replay_alloc(r, rp, e);
  case HBM_REC_EV_FREE: return replay_free(r, rp, e);
  case HBM_REC_EV_CLOSE: return replay_close(r, rp, e);
  case HBM_REC_EV_RESERVE: {
    /* Reserved memory changes before the next event (the alloc that needed it). */
    hbm_reserve_event_t re = {next_step, e->space, (hbm_reserve_op_t)(e->bits & 15), e->address,
                              e->size};
    return hbm_profile_add_reserve(r->p, &re);
  }
  case HBM_REC_EV_OOM: {
    /* The failure happened with the memory of the last event in use. */
    hbm_oom_event_t oe = {next_step > 0 ? next_step - 1 : 0, e->space, e->size, str_of(r, e->ref)};
    return hbm_profile_add_oom(r->p, &oe);
  }
  default: {
    hbm_marker_t m = {next_step, (hbm_marker_kind_t)(e->bits & 15), (int64_t)e->size,
                      str_of(r, e->ref)};
    return hbm_profile_add_marker(r->p, &m);
  }
  }
}

/* The buffers still live after the last event live out, as hbm_profile_finish would say. */
static void close_live(reader_t *r, replay_t *rp) {
  int64_t n_buffers, n_steps = hbm_profile_step_count(r->p);
  hbm_buffer_t *buffers = hbm__profile_buffers(r->p, &n_buffers);
  for (int i = 0; buffers && i < rp->n_spaces; i++) /* none: read as a summary, which closes */
    for (size_t k = 0; k < rp->live[i].cap; k++)
      if (rp->live[i].used[k] == 1) {
        hbm_buffer_t *b = &buffers[rp->live[i].values[k]];
        b->end = n_steps;
        b->flags |= HBM_BUF_LIVE_OUT;
      }
}

/* The events in time order: merged as they are replayed, or sorted first when their runs are
 * many. */
static hbm_status_t order_events(reader_t *r, run_heap_t *h) {
  size_t most = r->in_order ? 1 : MERGE_RUNS_AT_ONCE;
  const size_t *at = r->runs_unknown ? NULL : r->run_at;
  if (run_heap_init(h, r->events, r->n_events, most, at, r->n_run_at))
    return HBM_OK;
  if (h->c && sort_events(r) && run_heap_init(h, r->events, r->n_events, most, NULL, 0))
    return HBM_OK;
  return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory ordering %zu events", r->name,
                    r->n_events);
}

/* After the last event (s: how the replay went): what is still live lives out; the replay's
 * state is freed and its counts of unpaired events become metadata. */
static hbm_status_t replay_done(reader_t *r, replay_t *rp, hbm_status_t s) {
  if (s == HBM_OK)
    close_live(r, rp);
  for (int i = 0; rp->live && i < rp->n_spaces; i++)
    hbm_u64map_free(&rp->live[i]);
  free(rp->live);
  rp->live = NULL;
  char num[32];
  if (s == HBM_OK && rp->unmatched_frees) {
    snprintf(num, sizeof num, "%llu", (unsigned long long)rp->unmatched_frees);
    s = hbm_profile_set_meta(r->p, "unmatched_frees", num);
  }
  if (s == HBM_OK && rp->missing_frees) {
    snprintf(num, sizeof num, "%llu", (unsigned long long)rp->missing_frees);
    s = hbm_profile_set_meta(r->p, "missing_frees", num);
  }
  return s;
}

static hbm_status_t replay_events(reader_t *r) {
  if (r->n_events == 0)
    return HBM_OK;
  run_heap_t order = {0};
  hbm_status_t s = order_events(r, &order);
  if (s != HBM_OK) {
    free(order.c);
    return s;
  }
  replay_t rp = {.n_spaces = hbm_profile_space_count(r->p)};
  rp.live = calloc((size_t)rp.n_spaces + 1, sizeof *rp.live);
  if (!rp.live) {
    free(order.c);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory replaying a profile");
  }
  const event_t *e;
  for (size_t i = 0; s == HBM_OK && (e = run_heap_next(&order, r->events)) != NULL; i++) {
    if (e->type != HBM_REC_EV_MARKER && e->space >= rp.n_spaces)
      s = hbm__error(HBM_ERR_PARSE,
                     "%s: event %zu refers to memory space %d, which the file "
                     "never defines",
                     r->name, i, (int)e->space);
    else
      s = replay_event(r, &rp, e);
  }
  free(order.c);
  return replay_done(r, &rp, s);
}

/* ---- replaying events while they are read ----
 * A recording is nearly in time order: the recorder's markers (and a device's close or OOM)
 * are written ahead of the events its threads still have queued. So events are replayed as
 * they are read, through a window of the latest r->window: when it is full, all but its latest
 * quarter in time order (ties in file order) is replayed. That is the order the whole file sorted
 * would give as long as no event read later is earlier than one replayed; when one is (or
 * the window holds more runs than MERGE_RUNS_AT_ONCE, or the file mixes events with a saved
 * profile's records), the file is read again with its events collected and sorted whole.
 * A 10^8-event capture then never holds its 3.2 GB of events. */

size_t hbm__trace_window = (size_t)1 << 21; /* 2M events, 64 MiB */
/* Files read again (hbm__trace_rereads); atomic: the viewer reads files in threads. */
static uint64_t rereads;

uint64_t hbm__trace_rereads(void) { return __atomic_load_n(&rereads, __ATOMIC_RELAXED); }

static bool stream_break(reader_t *r) {
  r->stream_broken = true;
  return bad(r, "events too far out of time order to be replayed as they are read");
}

static int by_run(const void *x, const void *y) {
  const run_cursor_t *a = x, *b = y;
  return a->run < b->run ? -1 : a->run > b->run;
}

/* Replays the window's events but the latest `keep` (in time order), then moves what is
 * left of each run to the front, runs in file order. */
static bool stream_replay(reader_t *r, size_t keep) {
  run_heap_t h = {.c = r->cursors, .keep_pages = true};
  const size_t *at = r->runs_unknown ? NULL : r->run_at;
  bool ok = run_heap_init(&h, r->events, r->n_events, MERGE_RUNS_AT_ONCE, at, r->n_run_at);
  r->cursors = h.c;
  if (!ok || r->runs_unknown)
    return stream_break(r);
  for (size_t i = keep; i < r->n_events; i++) {
    const event_t *e = run_heap_next(&h, r->events);
    if (e->type != HBM_REC_EV_MARKER && e->space >= hbm_profile_space_count(r->p))
      return stream_break(r); /* a space defined later in the file, or never */
    if (replay_event(r, &r->rp, e) != HBM_OK)
      return stream_break(r); /* said as a whole replay says it */
    r->replayed_to = e->time;
    r->replayed_any = true;
  }
  qsort(h.c, h.n, sizeof *h.c, by_run);
  size_t n = 0;
  r->n_run_at = 0;
  for (size_t k = 0; k < h.n; k++) {
    if (k > 0)
      r->run_at[r->n_run_at++] = n;
    memmove(&r->events[n], &r->events[h.c[k].at], (h.c[k].end - h.c[k].at) * sizeof *r->events);
    n += h.c[k].end - h.c[k].at;
  }
  r->n_events = n;
  return true;
}

static bool stream_event(reader_t *r, const event_t *e) {
  if (r->replayed_any && e->time < r->replayed_to)
    return stream_break(r);
  if (r->n_events >= r->window && !stream_replay(r, r->window / 4))
    return false;
  if (!room_for_event(r))
    return false;
  if (r->n_events && e->time < r->events[r->n_events - 1].time)
    new_run(r);
  if (r->runs_unknown)
    return stream_break(r);
  r->events[r->n_events++] = *e;
  return true;
}

/* The file read: the rest of the window replayed, then the replay closed. */
static hbm_status_t stream_done(reader_t *r) {
  if (!stream_replay(r, 0))
    return HBM_ERR_PARSE;
  return replay_done(r, &r->rp, HBM_OK);
}

/* ---- the file: header, then blocks ---- */

static hbm_status_t read_header(reader_t *r, const uint8_t *data, size_t len, size_t *offset) {
  if (len < HBM_TRACE_HEADER_FIXED || !hbm__trace_is(data, len))
    return hbm__error(HBM_ERR_PARSE,
                      "%s: not an .hbmtrace file (expected the magic '%s' and a "
                      "%d-byte header)",
                      r->name, HBM_TRACE_MAGIC, HBM_TRACE_HEADER_FIXED);
  unsigned version = data[8] | (unsigned)data[9] << 8, kind = data[10] | (unsigned)data[11] << 8;
  uint32_t body_len = hbm__get_le32(data + 12);
  if (version != HBM_TRACE_VERSION)
    return hbm__error(HBM_ERR_PARSE, "%s: format version %u; this hbm reads version %d", r->name,
                      version, HBM_TRACE_VERSION);
  if (kind > HBM_PROFILE_PLAN)
    return hbm__error(HBM_ERR_PARSE, "%s: unknown profile kind %u (expected 0 runtime, 1 plan)",
                      r->name, kind);
  if (body_len > HBM_TRACE_HEADER_MAX || body_len > len - HBM_TRACE_HEADER_FIXED)
    return hbm__error(HBM_ERR_PARSE, "%s: the header is cut short (%u bytes announced, %zu there)",
                      r->name, body_len, len - HBM_TRACE_HEADER_FIXED);
  const uint8_t *body = data + HBM_TRACE_HEADER_FIXED;
  if (hbm__crc32(0, body, body_len) != hbm__get_le32(data + 16))
    return hbm__error(HBM_ERR_PARSE, "%s: the header is damaged (checksum mismatch)", r->name);
  cursor_t c = {body, body + body_len, false};
  uint64_t name_len = get_u(&c);
  if (c.bad || name_len > (uint64_t)(c.end - c.p))
    return hbm__error(HBM_ERR_PARSE, "%s: the header's name runs past its end", r->name);
  char *name = strndup((const char *)c.p, (size_t)name_len);
  c.p += name_len;
  r->p = name ? hbm_profile_new((hbm_profile_kind_t)kind, name) : NULL;
  free(name);
  if (!r->p)
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory reading the header", r->name);
  uint64_t n_meta = get_u(&c);
  if (n_meta > HBM_TRACE_MAX_META)
    return hbm__error(HBM_ERR_PARSE, "%s: the header announces %llu metadata entries (at most %d)",
                      r->name, (unsigned long long)n_meta, HBM_TRACE_MAX_META);
  for (uint64_t i = 0; i < n_meta && !c.bad; i++) {
    char *kv[2] = {NULL, NULL};
    for (int k = 0; k < 2 && !c.bad; k++) {
      uint64_t n = get_u(&c);
      if (c.bad || n > (uint64_t)(c.end - c.p))
        c.bad = true;
      else if ((kv[k] = strndup((const char *)c.p, (size_t)n)) != NULL)
        c.p += n;
    }
    hbm_status_t s =
        c.bad || !kv[0] || !kv[1] ? HBM_ERR_PARSE : hbm_profile_set_meta(r->p, kv[0], kv[1]);
    free(kv[0]);
    free(kv[1]);
    if (s != HBM_OK)
      return hbm__error(HBM_ERR_PARSE, "%s: the header's metadata entry %llu is malformed", r->name,
                        (unsigned long long)i);
  }
  if (c.bad)
    return hbm__error(HBM_ERR_PARSE, "%s: the header is malformed", r->name);
  *offset = HBM_TRACE_HEADER_FIXED + body_len;
  return HBM_OK;
}

/* Describes in profile meta "lost" what could not be read from `offset` on. */
static hbm_status_t note_loss(reader_t *r, size_t len, size_t offset, const char *why) {
  char where[64], text[768];
  if (r->block)
    snprintf(where, sizeof where, "after block %llu", (unsigned long long)r->block);
  else
    snprintf(where, sizeof where, "after the header");
  snprintf(text, sizeof text, "lost %zu bytes %s (%s)", len - offset, where, why);
  return hbm_profile_set_meta(r->p, "lost", text);
}

/* Reads the blocks from offset on; sets "lost" when the file ends badly. */
static hbm_status_t read_blocks(reader_t *r, const uint8_t *data, size_t len, size_t offset,
                                uint64_t max_raw) {
  char why[700];
  why[0] = '\0';
  hbm__trace_blocks_t *blocks = hbm__trace_blocks_open(data, len, offset, max_raw);
  for (int got = blocks ? 1 : -2; got > 0;) {
    hbm__trace_block_t b;
    got = hbm__trace_blocks_next(blocks, &b, why, sizeof why);
    if (got == -2) {
      hbm__trace_blocks_close(blocks);
      return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory reading block %llu", r->name,
                        (unsigned long long)r->block + 1);
    }
    if (got != 0)
      offset = b.offset;
    if (got == 1 && !read_records(r, b.raw, b.len)) {
      snprintf(why, sizeof why, "block %llu is damaged: %s", (unsigned long long)r->block + 1,
               r->error);
      break;
    }
    if (got == 1)
      r->block++, offset = b.next;
  }
  hbm__trace_blocks_close(blocks);
  if (why[0])
    return note_loss(r, len, offset, why);
  if (!r->ended && hbm_profile_kind(r->p) == HBM_PROFILE_RUNTIME) {
    char text[256];
    snprintf(text, sizeof text,
             "the profile was not closed: events after block %llu (its last flush) are missing "
             "(still being written, or its process died before hbm_profiler_stop)",
             (unsigned long long)r->block);
    return hbm_profile_set_meta(r->p, "lost", text);
  }
  return HBM_OK;
}

/* Puts "name: " before the last error message (the profile model's messages lack the file). */
static void prefix_error(hbm_status_t s, const char *name) {
  char *message = hbm__strdup(hbm_last_error());
  if (message)
    hbm__error(s, "%s: %s", name, message);
  free(message);
}

/* The replay closed the buffers it made; BUFFER records' ranges are checked by the profile. */
static hbm_status_t finish(reader_t *r) {
  return r->explicit_buffers ? hbm_profile_finish(r->p) : hbm__profile_finish_closed(r->p);
}

uint64_t hbm__trace_raw_bytes(const uint8_t *data, size_t len) {
  if (len < HBM_TRACE_HEADER_FIXED)
    return 0;
  uint64_t total = 0;
  size_t offset = HBM_TRACE_HEADER_FIXED + hbm__get_le32(data + 12);
  while (offset <= len && len - offset >= HBM_TRACE_BLOCK_HEAD &&
         !memcmp(data + offset, HBM_TRACE_BLOCK_MAGIC, 4)) {
    uint32_t clen = hbm__get_le32(data + offset + 4);
    total += hbm__get_le32(data + offset + 8);
    if (clen > len - offset - HBM_TRACE_BLOCK_HEAD)
      break;
    offset += HBM_TRACE_BLOCK_HEAD + clen;
  }
  return total;
}

bool hbm__trace_is(const void *data, size_t len) {
  return len >= HBM_TRACE_MAGIC_LEN && memcmp(data, HBM_TRACE_MAGIC, HBM_TRACE_MAGIC_LEN) == 0;
}

/* One reading of the file: its events replayed as they are read (stream) or collected and
 * sorted first. *broken: the stream met events too far out of order (nothing returned). */
static hbm_profile_t *parse(const uint8_t *data, size_t len, const char *name,
                            uint64_t max_raw_bytes, bool stream, bool summary, bool *broken) {
  reader_t r = {.name = name ? name : "profile", .in_order = true, .stream = stream};
  r.window = hbm__trace_window > 2 ? hbm__trace_window : 2;
  hbm_u64map_init(&r.tag_index);
  size_t offset = 0;
  hbm_status_t s = HBM_ERR_HOST_MEMORY;
  r.rp.n_spaces = HBM_TRACE_MAX_SPACES; /* stream: spaces may be defined after their events */
  if (!(r.strings = hbm_intern_new()) ||
      (stream && !(r.rp.live = calloc(HBM_TRACE_MAX_SPACES, sizeof *r.rp.live))))
    goto done;
  s = read_header(&r, data, len, &offset);
  if (s == HBM_OK && summary)
    s = hbm__profile_stream(r.p);
  if (s == HBM_OK)
    s = read_blocks(&r, data, len, offset, max_raw_bytes);
  if (s == HBM_OK && !r.stream_broken) {
    s = stream ? stream_done(&r) : replay_events(&r);
    if (s == HBM_OK && !r.stream_broken)
      s = finish(&r);
    if (s != HBM_OK && !r.stream_broken)
      prefix_error(s, r.name);
  }
done:
  *broken = r.stream_broken;
  if (r.rp.live)
    replay_done(&r, &r.rp, HBM_ERR_PARSE); /* frees what a broken stream left */
  hbm_intern_free(r.strings);
  free(r.string_of);
  if (r.events)
    munmap(r.events, r.cap_events * sizeof *r.events);
  free(r.tags);
  free(r.run_at);
  free(r.cursors);
  hbm_u64map_free(&r.tag_index);
  if (s != HBM_OK || r.stream_broken) {
    hbm_profile_free(r.p);
    return NULL;
  }
  return r.p;
}

/* The file read, as a stream of events when they come in order, else again, collected. */
static hbm_profile_t *parse_twice(const uint8_t *data, size_t len, const char *name,
                                  uint64_t max_raw_bytes, bool summary) {
  if (!max_raw_bytes) /* records at most 64 times the file, whatever zstd makes of them */
    max_raw_bytes = HBM_TRACE_RAW_BASE + HBM_TRACE_RAW_PER_BYTE * (uint64_t)len;
  bool broken = false;
  hbm_profile_t *p = parse(data, len, name, max_raw_bytes, true, summary, &broken);
  if (broken) { /* read again, every event collected before any is replayed */
    __atomic_fetch_add(&rereads, 1, __ATOMIC_RELAXED);
    p = parse(data, len, name, max_raw_bytes, false, summary, &broken);
  }
  return p;
}

hbm_profile_t *hbm__trace_parse(const uint8_t *data, size_t len, const char *name,
                                uint64_t max_raw_bytes) {
  return parse_twice(data, len, name, max_raw_bytes, false);
}

hbm_profile_t *hbm__trace_parse_summary(const uint8_t *data, size_t len, const char *name) {
  return parse_twice(data, len, name, 0, true);
}
