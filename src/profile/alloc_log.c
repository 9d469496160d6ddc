/* alloc_log.c — RMM's allocation log (CSV: Thread,Time,Action,Pointer,Size,Stream), the
 * format of the real logs in ../shared/traces. `hbm replay` feeds the events to the allocator;
 * hbm_alloc_log_to_profile turns them into the profile model for `hbm report` and the viewer.
 *
 * One pass over the bytes, no per-field allocation: the 131k-line logs parse in a few ms.
 * Each event goes to a sink as it is read: into an array for `hbm replay`, straight into the
 * profile for `hbm report` and the viewer (hbm__alloc_log_load: the file mapped and its pages
 * given back as the reader passes them, no event array), so a log's memory is its profile's.
 * Each line is checked for form (six fields, known action, hex pointer, decimal size) and for
 * sense (no free of a pointer that is not live, no second allocation of a live pointer, a
 * free's size, when given, matching its allocation). Threads and streams are numbered
 * 0, 1, ... in order of first appearance (stream 0x0, the default stream, is 0). A bad line
 * is an error for `hbm replay`. A profile keeps what was read before a line whose bytes are
 * damaged (not six good fields: a big log cut short or corrupted loses only its rest), and
 * its meta "lost" says how many bytes, from which line, and what was wrong there; a damaged
 * first event, or a well-formed line that makes no sense (a free of a pointer not live), is
 * an error there too. */
#include "base/base.h"
#include "profile/index.h"
#include "profile/profile_build.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char log_header[] = "Thread,Time,Action,Pointer,Size,Stream";

typedef struct field {
  const char *p;
  size_t n;
} field_t;

/* A live pointer's allocation: what a free of it is checked against. */
typedef struct live_alloc {
  uint64_t size;
  int64_t line; /* or, while the slot is free, the next free slot */
} live_alloc_t;

typedef struct parser parser_t;
/* Takes one event; false (and hbm's error set) stops the reading. */
typedef bool (*event_sink_t)(parser_t *ps, const hbm_log_event_t *e);

struct parser {
  const char *name;
  int lenient;
  int64_t line;
  event_sink_t sink;
  void *ctx;
  size_t skipped;
  char first_skip[512];
  hbm_u64map_t live; /* pointer → its slot in live_at */
  live_alloc_t *live_at;
  size_t n_live_at, cap_live_at;
  int64_t free_slot;    /* a free slot of live_at, chained through line; -1: none */
  hbm_u64map_t threads; /* raw thread id → number */
  hbm_u64map_t streams; /* raw stream → number */
  int64_t day_offset;   /* HH:MM:SS times that pass midnight */
  int64_t last_clock;
  char message[512];
  /* The profile path keeps what was read before a damaged line (a big log cut short or
   * corrupted loses only its rest): where the damage begins, -1 while none. */
  bool keep_before_damage;
  int64_t events_read;
  int64_t damage_offset;
  bool damage_at_end; /* the damaged line is the last and has no newline: cut short */
  bool well_formed;   /* the last line read had six good fields (its error, if any, is of sense) */
};

static bool line_error(parser_t *ps, const char *fmt, ...) HBM_PRINTF(2, 3);
static bool line_error(parser_t *ps, const char *fmt, ...) {
  int n = snprintf(ps->message, sizeof ps->message, "%s:%lld: ", ps->name, (long long)ps->line);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ps->message + n, sizeof ps->message - (size_t)n, fmt, ap);
  va_end(ap);
  return false;
}

/* Shows a field in a message: at most 40 bytes, quoted. */
static const char *shown(field_t f, char *buf, size_t cap) {
  size_t n = f.n < 40 ? f.n : 40;
  snprintf(buf, cap, "'%.*s%s'", (int)n, f.p, f.n > n ? "..." : "");
  return buf;
}

static bool parse_decimal(field_t f, uint64_t *out) {
  if (f.n == 0 || f.n > 20)
    return false;
  uint64_t v = 0;
  for (size_t i = 0; i < f.n; i++) {
    unsigned d = (unsigned)(f.p[i] - '0');
    if (d > 9 || v > (UINT64_MAX - d) / 10)
      return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

static bool parse_hex(field_t f, uint64_t *out) {
  if (f.n >= 2 && f.p[0] == '0' && (f.p[1] == 'x' || f.p[1] == 'X'))
    f.p += 2, f.n -= 2;
  if (f.n == 0 || f.n > 16)
    return false;
  uint64_t v = 0;
  for (size_t i = 0; i < f.n; i++) {
    char c = f.p[i];
    unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                 : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                        : 16u;
    if (d > 15)
      return false;
    v = v << 4 | d;
  }
  *out = v;
  return true;
}

/* Digits after a decimal point as nanoseconds (at most 9 are used; more must be digits). */
static bool parse_fraction_ns(const char *p, size_t n, int64_t *ns) {
  int64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned d = (unsigned)(p[i] - '0');
    if (d > 9)
      return false;
    if (i < 9)
      v = v * 10 + d;
  }
  for (size_t i = n; i < 9; i++)
    v *= 10;
  *ns = v;
  return true;
}

/* "12.5" (seconds) or "HH:MM:SS.micro" (a clock time) as nanoseconds. */
static bool parse_time(parser_t *ps, field_t f, int64_t *out) {
  const char *dot = memchr(f.p, '.', f.n);
  size_t whole = dot ? (size_t)(dot - f.p) : f.n;
  int64_t frac = 0;
  if (dot && !parse_fraction_ns(dot + 1, f.n - whole - 1, &frac))
    return false;
  if (!memchr(f.p, ':', whole)) {
    uint64_t s;
    if (!parse_decimal((field_t){f.p, whole}, &s) || s > 9000000000ull)
      return false;
    *out = (int64_t)s * 1000000000 + frac;
    return true;
  }
  uint64_t h, m, s;
  if (whole != 8 || f.p[2] != ':' || f.p[5] != ':' || !parse_decimal((field_t){f.p, 2}, &h) ||
      !parse_decimal((field_t){f.p + 3, 2}, &m) || !parse_decimal((field_t){f.p + 6, 2}, &s) ||
      h > 23 || m > 59 || s > 60)
    return false;
  int64_t clock = ((int64_t)(h * 3600 + m * 60 + s)) * 1000000000 + frac;
  if (ps->last_clock - clock > 12ll * 3600 * 1000000000) /* went past midnight */
    ps->day_offset += 24ll * 3600 * 1000000000;
  ps->last_clock = clock;
  *out = clock + ps->day_offset;
  return true;
}

/* A dense number for a raw id (threads, streams), in order of first appearance. */
static bool number_of(hbm_u64map_t *m, uint64_t raw, uint32_t *out) {
  uint64_t v;
  if (hbm_u64map_get(m, raw, &v)) {
    *out = (uint32_t)v;
    return true;
  }
  *out = (uint32_t)m->count;
  return hbm_u64map_put(m, raw, m->count);
}

static bool parse_action(field_t f, hbm_log_action_t *out) {
  static const struct {
    const char *text;
    hbm_log_action_t action;
  } actions[] = {{"allocate", HBM_LOG_ALLOCATE},
                 {"free", HBM_LOG_FREE},
                 {"deallocate", HBM_LOG_FREE},
                 {"allocate failure", HBM_LOG_ALLOCATE_FAILURE}};
  for (size_t i = 0; i < HBM_ARRAY_LEN(actions); i++)
    if (f.n == strlen(actions[i].text) && !memcmp(f.p, actions[i].text, f.n)) {
      *out = actions[i].action;
      return true;
    }
  return false;
}

/* Splits a line into its fields; false (with the message) unless there are six. */
static bool split_fields(parser_t *ps, const char *p, const char *end, field_t f[6]) {
  int k = 0;
  const char *start = p;
  for (; p <= end; p++) {
    if (p < end && *p != ',')
      continue;
    if (k == 6)
      return line_error(ps, "expected 6 fields (Thread,Time,Action,Pointer,Size,Stream), "
                            "found more");
    f[k++] = (field_t){start, (size_t)(p - start)};
    start = p + 1;
  }
  if (k != 6)
    return line_error(ps,
                      "expected 6 fields (Thread,Time,Action,Pointer,Size,Stream), "
                      "found %d",
                      k);
  return true;
}

/* Checks an event against the pointers live so far and updates them. */
static bool check_sense(parser_t *ps, const hbm_log_event_t *e) {
  uint64_t at;
  if (e->action == HBM_LOG_ALLOCATE) {
    if (hbm_u64map_get(&ps->live, e->pointer, &at))
      return line_error(ps,
                        "allocation of 0x%llx, which is still live (allocated on line %lld "
                        "and not freed); expected a free of it first",
                        (unsigned long long)e->pointer, (long long)ps->live_at[at].line);
    if (ps->free_slot >= 0) {
      at = (uint64_t)ps->free_slot;
      ps->free_slot = ps->live_at[at].line;
    } else {
      live_alloc_t *grown = hbm__grow_array(ps->live_at, &ps->cap_live_at, ps->n_live_at + 1,
                                            sizeof *ps->live_at, 64);
      if (!grown)
        return line_error(ps, "out of host memory");
      ps->live_at = grown;
      at = ps->n_live_at++;
    }
    ps->live_at[at] = (live_alloc_t){e->size, e->line};
    if (!hbm_u64map_put(&ps->live, e->pointer, at))
      return line_error(ps, "out of host memory");
  } else if (e->action == HBM_LOG_FREE) {
    if (!hbm_u64map_get(&ps->live, e->pointer, &at))
      return line_error(ps,
                        "free of 0x%llx, which is not allocated (expected a pointer from an "
                        "earlier 'allocate' line)",
                        (unsigned long long)e->pointer);
    if (e->size && e->size != ps->live_at[at].size)
      return line_error(ps,
                        "free of 0x%llx with size %llu, but it was allocated with size %llu "
                        "on line %lld",
                        (unsigned long long)e->pointer, (unsigned long long)e->size,
                        (unsigned long long)ps->live_at[at].size, (long long)ps->live_at[at].line);
    hbm_u64map_remove(&ps->live, e->pointer, NULL);
    ps->live_at[at].line = ps->free_slot;
    ps->free_slot = (int64_t)at;
  }
  return true;
}

static bool parse_line(parser_t *ps, const char *p, const char *end, hbm_log_event_t *e) {
  field_t f[6];
  char buf[64];
  uint64_t thread, stream;
  if (!split_fields(ps, p, end, f))
    return false;
  if (!parse_decimal(f[0], &thread))
    return line_error(ps, "field 1 (Thread): expected a decimal thread id, got %s",
                      shown(f[0], buf, sizeof buf));
  if (!parse_time(ps, f[1], &e->time_ns))
    return line_error(ps, "field 2 (Time): expected seconds (12.345678) or HH:MM:SS.micro, got %s",
                      shown(f[1], buf, sizeof buf));
  if (!parse_action(f[2], &e->action))
    return line_error(ps, "field 3 (Action): expected allocate, free or allocate failure, got %s",
                      shown(f[2], buf, sizeof buf));
  if (!parse_hex(f[3], &e->pointer))
    return line_error(ps, "field 4 (Pointer): expected a hex pointer like 0x7f3a00000000, got %s",
                      shown(f[3], buf, sizeof buf));
  if (!parse_decimal(f[4], &e->size))
    return line_error(ps, "field 5 (Size): expected a decimal byte count, got %s",
                      shown(f[4], buf, sizeof buf));
  if (!parse_hex(f[5], &stream))
    return line_error(ps, "field 6 (Stream): expected a hex stream like 0x0, got %s",
                      shown(f[5], buf, sizeof buf));
  if (e->action == HBM_LOG_ALLOCATE && e->size == 0)
    return line_error(ps, "allocation of 0 bytes (expected a size of at least 1)");
  if (!number_of(&ps->threads, thread, &e->thread) || !number_of(&ps->streams, stream, &e->stream))
    return line_error(ps, "out of host memory");
  e->line = ps->line;
  ps->well_formed = true;
  return check_sense(ps, e);
}

static bool is_blank(const char *p, const char *end) {
  for (; p < end; p++)
    if (*p != ' ' && *p != '\t')
      return false;
  return true;
}

/* The header, with or without a UTF-8 byte order mark; spaces and case do not matter. */
static bool check_header(const char *p, const char *end) {
  if (end - p >= 3 && !memcmp(p, "\xef\xbb\xbf", 3))
    p += 3;
  const char *h = log_header;
  for (; p < end; p++) {
    if (*p == ' ' || *p == '\t')
      continue;
    if (!*h || (*p | 0x20) != (*h | 0x20))
      return false;
    h++;
  }
  return *h == '\0';
}

static void skip_line(parser_t *ps) {
  if (ps->skipped++ == 0)
    snprintf(ps->first_skip, sizeof ps->first_skip, "%s", ps->message);
}

static hbm_status_t parse_lines(parser_t *ps, const char *data, size_t len) {
  const char *p = data, *end = data + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *eol = nl ? nl : end;
    const char *stop = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
    ps->line++;
    if (ps->line == 1) {
      if (!check_header(p, stop)) {
        line_error(ps, "expected the RMM log header '%s'", log_header);
        return hbm__error_text(HBM_ERR_PARSE, ps->message);
      }
    } else if (!is_blank(p, stop)) {
      hbm_log_event_t e;
      memset(&e, 0, sizeof e);
      ps->well_formed = false;
      if (parse_line(ps, p, stop, &e)) {
        if (!ps->sink(ps, &e))
          return hbm_last_status();
        ps->events_read++;
      } else if (ps->lenient) {
        skip_line(ps);
      } else if (ps->keep_before_damage && ps->events_read > 0 && !ps->well_formed) {
        ps->damage_offset = p - data;
        ps->damage_at_end = !nl;
        return HBM_OK;
      } else {
        return hbm__error_text(HBM_ERR_PARSE, ps->message);
      }
    }
    p = nl ? nl + 1 : end;
  }
  if (ps->line == 0) {
    ps->line = 1;
    line_error(ps, "empty file; expected the RMM log header '%s'", log_header);
    return hbm__error_text(HBM_ERR_PARSE, ps->message);
  }
  return HBM_OK;
}

/* Reads the log, each event to ps's sink. */
static hbm_status_t read_log(parser_t *ps, const char *data, size_t len) {
  ps->free_slot = -1;
  hbm_u64map_init(&ps->live);
  hbm_u64map_init(&ps->threads);
  hbm_u64map_init(&ps->streams);
  hbm_status_t s = hbm_u64map_put(&ps->streams, 0, 0) /* the default stream is stream 0 */
                       ? parse_lines(ps, data ? data : "", len)
                       : hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", ps->name);
  hbm_u64map_free(&ps->live);
  hbm_u64map_free(&ps->threads);
  hbm_u64map_free(&ps->streams);
  free(ps->live_at);
  return s;
}

static bool to_array(parser_t *ps, const hbm_log_event_t *e) {
  hbm_alloc_log_t *out = ps->ctx;
  out->events[out->n_events++] = *e;
  return true;
}

hbm_status_t hbm_alloc_log_parse(const char *data, size_t len, const char *name, int lenient,
                                 hbm_alloc_log_t *out) {
  if (!out || (!data && len))
    return hbm__error(HBM_ERR_INVALID, "hbm_alloc_log_parse: NULL argument");
  memset(out, 0, sizeof *out);
  parser_t ps = {.name = name ? name : "log", .lenient = lenient, .sink = to_array, .ctx = out};
  /* One event per line at most: one allocation up front. */
  size_t lines = 1;
  for (const char *p = data, *end = data + len; p && p < end; p++) {
    p = memchr(p, '\n', (size_t)(end - p));
    if (!p)
      break;
    lines++;
  }
  out->events = malloc(lines * sizeof *out->events);
  if (!out->events)
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory for %zu events", ps.name, lines);
  hbm_status_t s = read_log(&ps, data, len);
  out->skipped = ps.skipped;
  snprintf(out->first_skip, sizeof out->first_skip, "%s", ps.first_skip);
  if (s != HBM_OK)
    hbm_alloc_log_free(out);
  return s;
}

hbm_status_t hbm_alloc_log_read(const char *path, int lenient, hbm_alloc_log_t *out) {
  char *data;
  size_t len;
  if (out)
    memset(out, 0, sizeof *out);
  hbm_status_t s = hbm__read_file(path, &data, &len);
  if (s != HBM_OK)
    return s;
  s = hbm_alloc_log_parse(data, len, path, lenient, out);
  free(data);
  return s;
}

void hbm_alloc_log_free(hbm_alloc_log_t *log) {
  if (!log)
    return;
  free(log->events);
  free(log->step_begins);
  log->events = NULL;
  log->step_begins = NULL;
  log->n_events = log->n_step_begins = 0;
}

/* ---- as a profile ---- */

static hbm_status_t add_event(hbm_profile_t *p, const hbm_log_event_t *e, int64_t t0,
                              const char *file) {
  int64_t step = hbm_profile_add_step(p, e->time_ns - t0, NULL);
  if (step < 0)
    return hbm_last_status();
  char where[300];
  snprintf(where, sizeof where, "%s:%lld", file, (long long)e->line);
  if (e->action == HBM_LOG_ALLOCATE) {
    hbm_tag_t tag = {.source = where};
    return hbm_profile_alloc_at(p, step, 0, e->pointer, e->size, &tag) < 0 ? hbm_last_status()
                                                                           : HBM_OK;
  }
  if (e->action == HBM_LOG_FREE)
    return hbm_profile_free_at(p, step, 0, e->pointer);
  char message[600];
  snprintf(message, sizeof message,
           "RESOURCE_EXHAUSTED: Out of memory while trying to allocate %llu bytes.\n"
           "The log records an 'allocate failure' at %s (thread %u, stream %u).",
           (unsigned long long)e->size, where, e->thread, e->stream);
  hbm_oom_event_t oom = {.step = step, .space = 0, .requested = e->size, .message = message};
  return hbm_profile_add_oom(p, &oom);
}

/* The profile a log's events go into. */
static hbm_profile_t *new_log_profile(const char *name) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, hbm__base_name(name ? name : "log"));
  if (!p)
    return NULL;
  hbm_status_t s = hbm_profile_set_meta(p, "format", "RMM allocation log (CSV)");
  if (s == HBM_OK && name)
    s = hbm_profile_set_meta(p, "source_path", name);
  /* The CSV does not say which memory it logged (RMM logs device memory, but logs of CPU
   * allocators are written in the same format): the memory type is "unknown", not "HBM". */
  if (s == HBM_OK && hbm_profile_add_space(p, "unknown", "log", 0, 0) < 0)
    s = hbm_last_status();
  if (s != HBM_OK) {
    hbm_profile_free(p);
    return NULL;
  }
  return p;
}

typedef struct log_builder {
  hbm_profile_t *p;
  const char *file;
  int64_t t0;
  bool started;
  int64_t last_time, last_line; /* the event before */
  size_t backwards;             /* times earlier than the event before's */
  int64_t back_time, back_line, before_time, before_line; /* the first of them */
} log_builder_t;

/* RMM writes events in the order they happened, so a time earlier than the line before's
 * means a damaged or merged log: the events keep the log's order (steps), and the profile's
 * notes say where time first went back and how often. */
static void watch_time(log_builder_t *b, const hbm_log_event_t *e) {
  if (b->started && e->time_ns < b->last_time && !b->backwards++) {
    b->back_time = e->time_ns, b->back_line = e->line;
    b->before_time = b->last_time, b->before_line = b->last_line;
  }
  b->last_time = e->time_ns, b->last_line = e->line;
}

static hbm_status_t note_times_backwards(const log_builder_t *b) {
  if (!b->backwards)
    return HBM_OK;
  char note[512];
  snprintf(note, sizeof note,
           "the log's times go backwards %zu time%s, first at %s:%lld (%.6f s, after %.6f s on "
           "line %lld): events are kept in the log's order, the times as written",
           b->backwards, b->backwards == 1 ? "" : "s", b->file, (long long)b->back_line,
           (double)b->back_time / 1e9, (double)b->before_time / 1e9, (long long)b->before_line);
  return hbm_profile_set_meta(b->p, "notes", note);
}

static hbm_status_t build_event(log_builder_t *b, const hbm_log_event_t *e) {
  watch_time(b, e);
  if (!b->started) {
    b->t0 = e->time_ns;
    b->started = true;
  }
  hbm_status_t s = add_event(b->p, e, b->t0, b->file);
  if (s != HBM_OK) {
    char *why = hbm__strdup(hbm_last_error());
    hbm__error(s, "%s:%lld: %s", b->file, (long long)e->line, why ? why : "");
    free(why);
  }
  return s;
}

/* Finishes b's profile, or frees it when reading failed (s). */
static hbm_profile_t *finish_log_profile(log_builder_t *b, hbm_status_t s) {
  if (s == HBM_OK)
    s = note_times_backwards(b);
  if (s == HBM_OK)
    s = hbm_profile_finish(b->p);
  if (s != HBM_OK) {
    hbm_profile_free(b->p);
    return NULL;
  }
  return b->p;
}

hbm_profile_t *hbm_alloc_log_to_profile(const hbm_alloc_log_t *log, const char *name) {
  if (!log) {
    hbm__error(HBM_ERR_INVALID, "hbm_alloc_log_to_profile: NULL log");
    return NULL;
  }
  log_builder_t b = {.p = new_log_profile(name), .file = hbm__base_name(name ? name : "log")};
  if (!b.p)
    return NULL;
  hbm_status_t s = HBM_OK;
  for (size_t i = 0; i < log->n_events && s == HBM_OK; i++)
    s = build_event(&b, &log->events[i]);
  return finish_log_profile(&b, s);
}

static bool to_profile(parser_t *ps, const hbm_log_event_t *e) {
  return build_event(ps->ctx, e) == HBM_OK;
}

/* Profile meta "lost": the bytes from the damaged line to the end, and what was wrong there. */
static hbm_status_t note_damage(const parser_t *ps, hbm_profile_t *p, size_t len) {
  if (ps->damage_offset < 0)
    return HBM_OK;
  char note[800];
  snprintf(note, sizeof note, "lost %zu bytes from line %lld to the end (%s: %s)",
           len - (size_t)ps->damage_offset, (long long)ps->line,
           ps->damage_at_end ? "file truncated" : "damaged", ps->message);
  return hbm_profile_set_meta(p, "lost", note);
}

static hbm_profile_t *load_log(const char *data, size_t len, const char *name, bool summary) {
  log_builder_t b = {.p = new_log_profile(name), .file = hbm__base_name(name ? name : "log")};
  if (!b.p)
    return NULL;
  parser_t ps = {.name = name ? name : "log",
                 .sink = to_profile,
                 .ctx = &b,
                 .keep_before_damage = true,
                 .damage_offset = -1};
  hbm_status_t s = summary ? hbm__profile_stream(b.p) : HBM_OK;
  if (s == HBM_OK)
    s = read_log(&ps, data, len);
  if (s == HBM_OK)
    s = note_damage(&ps, b.p, len);
  return finish_log_profile(&b, s);
}

hbm_profile_t *hbm__alloc_log_load(const char *data, size_t len, const char *name) {
  return load_log(data, len, name, false);
}

hbm_profile_t *hbm__alloc_log_load_summary(const char *data, size_t len, const char *name) {
  return load_log(data, len, name, true);
}
