/* xla_dump.c — XLA's own buffer assignment, read from the files XLA_FLAGS=--xla_dump_to=DIR
 * writes, so users can view what XLA really did in the same profile model:
 *
 *  *-buffer-assignment.txt   "allocation N: size S, parameter P, ..., maybe-live-out:" blocks
 *                            with " value: <id name{index} @color> (size=S,offset=O): shape"
 *                            lines (older XLA: "  name{index}(#id @color) [O,S]: shape"),
 *                            then optionally an HloLiveRange section (InstructionSequence,
 *                            BufferLiveRange "name{index}:start-end").
 *  *-memory-usage-report.txt "Total bytes used" + allocations sorted by size with their
 *                            per-offset rows, or (newer) "Memory Space: name (color=N)"
 *                            sections of "cumulative; size; offset; n_values; shapes" rows.
 *
 * Parameters, constants, thread-local and maybe-live-out allocations become indefinite
 * buffers; temporaries become buffers at their offsets. Without a live-range section the
 * order of values is their id (XLA numbers values in definition order) and a value lives
 * until a later value is placed over its bytes. */
#include "lexer.h"
#include "namemap.h"
#include "plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dump_alloc {
  int64_t index;
  uint64_t size;
  int color;
  int64_t param;
  bool constant, thread_local, live_out, temp;
  hlo_str_t shape; /* parameter or output shape */
  uint32_t first_value, n_values;
  uint64_t base; /* temporaries: offset of this allocation in the colour's temp heap */
} dump_alloc_t;

typedef struct dump_value {
  int64_t id;
  hlo_str_t name, index, shape;
  uint64_t size, offset, unpadded;
  uint32_t alloc;
  int64_t start, end; /* [start, end) over steps, -1 unknown */
} dump_value_t;

typedef struct dump_parser {
  hlo_lexer_t lx;
  hlo_arena_t arena;
  hlo_vec_t allocs, values, steps; /* steps: hlo_str_t labels */
  hlo_namemap_t by_key;            /* "name{index}" → value + 1 */
  bool have_live_ranges;
} dump_parser_t;

/* ---- lines ---- */

static bool line_at(dump_parser_t *dp, size_t pos, hlo_str_t *line) {
  if (pos >= dp->lx.len)
    return false;
  const char *t = dp->lx.text;
  const char *nl = memchr(t + pos, '\n', dp->lx.len - pos);
  size_t end = nl ? (size_t)(nl - t) : dp->lx.len;
  line->p = t + pos;
  line->n = (uint32_t)(end - pos);
  while (line->n && (line->p[line->n - 1] == '\r'))
    line->n--;
  return true;
}

static size_t next_line(const dump_parser_t *dp, const hlo_str_t *line) {
  size_t pos = (size_t)(line->p - dp->lx.text) + line->n;
  while (pos < dp->lx.len && dp->lx.text[pos] != '\n')
    pos++;
  return pos < dp->lx.len ? pos + 1 : pos;
}

static bool starts_with(hlo_str_t s, const char *prefix) {
  size_t n = strlen(prefix);
  return s.n >= n && memcmp(s.p, prefix, n) == 0;
}

static hlo_str_t trim(hlo_str_t s) {
  while (s.n && (s.p[0] == ' ' || s.p[0] == '\t')) {
    s.p++;
    s.n--;
  }
  while (s.n && (s.p[s.n - 1] == ' ' || s.p[s.n - 1] == '\t'))
    s.n--;
  return s;
}

static const char *find_in(hlo_str_t s, const char *needle) {
  size_t n = strlen(needle);
  for (size_t i = 0; i + n <= s.n; i++)
    if (memcmp(s.p + i, needle, n) == 0)
      return s.p + i;
  return NULL;
}

static bool parse_u64(const char **p, const char *end, uint64_t *out) {
  const char *q = *p;
  uint64_t v = 0;
  if (q >= end || *q < '0' || *q > '9')
    return false;
  while (q < end && *q >= '0' && *q <= '9') {
    uint64_t d = (uint64_t)(*q - '0');
    if (v > (UINT64_MAX - d) / 10)
      return false;
    v = v * 10 + d;
    q++;
  }
  *p = q;
  *out = v;
  return true;
}

static bool error_in_line(dump_parser_t *dp, hlo_str_t line, const char *at, const char *what) {
  size_t off = (size_t)((at ? at : line.p) - dp->lx.text);
  return hbm__hlo_lex_error_at(&dp->lx, off, "expected %s", what);
}

/* Unpadded bytes of a shape text, or `fallback` if it does not parse. */
static uint64_t unpadded_of(dump_parser_t *dp, hlo_str_t shape, uint64_t fallback) {
  hlo_lexer_t lx;
  hbm__hlo_lex_init(&lx, shape.p, shape.n, dp->lx.filename);
  const hlo_shape_t *s = hbm__parse_shape(&lx, &dp->arena);
  hbm__error_clear();
  return s && !lx.failed ? s->unpadded_bytes : fallback;
}

/* ---- buffer assignment ---- */

/* The flags after an allocation's size, in either dump format: ", color N",
 * ", parameter N, shape |S| at ShapeIndex {..}", ", output shape is |S|", ", constant",
 * ", thread-local", ", maybe-live-out", ", preallocated-temp". */
static void read_allocation_flags(hlo_str_t rest, dump_alloc_t *a) {
  const char *end = rest.p + rest.n, *c;
  uint64_t n;
  if ((c = find_in(rest, ", color ")) && (c += 8, parse_u64(&c, end, &n)) && n < 256)
    a->color = (int)n;
  if ((c = find_in(rest, ", parameter ")) && (c += 12, parse_u64(&c, end, &n)))
    a->param = (int64_t)n;
  const char *bar = find_in(rest, "shape |"); /* a parameter's shape first */
  if (bar)
    bar += 7;
  else if ((bar = find_in(rest, ", output shape is |")))
    bar += 19;
  const char *close = bar ? memchr(bar, '|', (size_t)(end - bar)) : NULL;
  if (close)
    a->shape = (hlo_str_t){bar, (uint32_t)(close - bar)};
  a->constant = find_in(rest, ", constant") != NULL;
  a->thread_local = find_in(rest, ", thread-local") != NULL;
  a->live_out = find_in(rest, ", maybe-live-out") != NULL;
  a->temp = find_in(rest, ", preallocated-temp") != NULL ||
            (a->param < 0 && !a->constant && !a->thread_local && !a->live_out);
}

static bool parse_alloc_header(dump_parser_t *dp, hlo_str_t line) {
  dump_alloc_t a = {.param = -1, .first_value = (uint32_t)dp->values.len};
  const char *p = line.p + strlen("allocation "), *end = line.p + line.n;
  uint64_t idx;
  if (!parse_u64(&p, end, &idx) || p >= end || *p != ':')
    return error_in_line(dp, line, p, "'allocation N:'");
  a.index = (int64_t)idx;
  const char *size = find_in((hlo_str_t){p, (uint32_t)(end - p)}, "size ");
  if (!size)
    return error_in_line(dp, line, p, "'size N' in the allocation header");
  size += 5;
  if (!parse_u64(&size, end, &a.size))
    return error_in_line(dp, line, size, "an allocation size in bytes");
  read_allocation_flags((hlo_str_t){size, (uint32_t)(end - size)}, &a);
  return hbm__hlo_vec_push(&dp->allocs, &a);
}

/* " value: <5 Arg_0.1 @0> (size=307200000,offset=0): f32[100000,768]{1,0}" or, older,
 * "  Arg_0.1{}(#5 @0) [0,307200000]: f32[100000,768]{1,0}". */
static bool parse_value_line(dump_parser_t *dp, hlo_str_t line) {
  if (dp->allocs.len == 0)
    return error_in_line(dp, line, NULL, "an 'allocation N:' line before its values");
  dump_value_t v = {.alloc = (uint32_t)dp->allocs.len - 1, .start = -1, .end = -1};
  hlo_str_t t = trim(line);
  const char *end = t.p + t.n;
  const char *p = t.p;
  if (starts_with(t, "value: <")) {
    p += 8;
    uint64_t id;
    if (!parse_u64(&p, end, &id) || p >= end || *p != ' ')
      return error_in_line(dp, line, p, "a value id");
    v.id = (int64_t)id;
    p++;
    const char *name = p;
    while (p < end && *p != ' ' && *p != '>' && *p != '{')
      p++;
    v.name = (hlo_str_t){name, (uint32_t)(p - name)};
    if (p < end && *p == '{') {
      const char *close = memchr(p, '}', (size_t)(end - p));
      if (!close)
        return error_in_line(dp, line, p, "'}' closing the shape index");
      v.index = (hlo_str_t){p, (uint32_t)(close + 1 - p)};
      p = close + 1;
    }
    const char *gt = memchr(p, '>', (size_t)(end - p));
    const char *sz = gt ? find_in((hlo_str_t){gt, (uint32_t)(end - gt)}, "(size=") : NULL;
    if (!sz)
      return error_in_line(dp, line, p, "'> (size=N,offset=M)'");
    p = sz + 6;
    if (!parse_u64(&p, end, &v.size) || end - p < 8 || memcmp(p, ",offset=", 8) != 0)
      return error_in_line(dp, line, p, "'size=N,offset=M'");
    p += 8;
    if (!parse_u64(&p, end, &v.offset))
      return error_in_line(dp, line, p, "an offset");
  } else {
    const char *name = p;
    while (p < end && *p != '{' && *p != '(' && *p != '[' && *p != ' ')
      p++;
    v.name = (hlo_str_t){name, (uint32_t)(p - name)};
    if (p < end && (*p == '{' || *p == '[')) {
      char close_c = *p == '{' ? '}' : ']';
      const char *close = memchr(p, close_c, (size_t)(end - p));
      if (!close)
        return error_in_line(dp, line, p, "the end of the shape index");
      v.index = (hlo_str_t){p, (uint32_t)(close + 1 - p)};
      p = close + 1;
    }
    const char *hash = find_in((hlo_str_t){p, (uint32_t)(end - p)}, "(#");
    if (hash) {
      const char *q = hash + 2;
      uint64_t id;
      if (parse_u64(&q, end, &id))
        v.id = (int64_t)id;
    }
    const char *br = find_in((hlo_str_t){p, (uint32_t)(end - p)}, " [");
    if (!br)
      return error_in_line(dp, line, p, "'[offset,size]'");
    p = br + 2;
    if (!parse_u64(&p, end, &v.offset) || p >= end || *p != ',')
      return error_in_line(dp, line, p, "'offset,size'");
    p++;
    if (!parse_u64(&p, end, &v.size))
      return error_in_line(dp, line, p, "a size");
  }
  const char *colon = find_in((hlo_str_t){p, (uint32_t)(end - p)}, ": ");
  if (colon)
    v.shape = trim((hlo_str_t){colon + 2, (uint32_t)(end - colon - 2)});
  v.unpadded = v.shape.n ? unpadded_of(dp, v.shape, v.size) : v.size;
  if (v.unpadded > v.size)
    v.unpadded = v.size;
  dump_alloc_t *a = &HLO_VEC_AT(&dp->allocs, dump_alloc_t, dp->allocs.len - 1);
  a->n_values++;
  /* Index the value by "name{index}" for the live-range section. */
  hbm_strbuf_t key;
  hbm_strbuf_init(&key);
  hbm_strbuf_append(&key, v.name.p, v.name.n);
  if (v.index.n && v.index.p[0] == '{')
    hbm_strbuf_append(&key, v.index.p, v.index.n);
  else
    hbm_strbuf_puts(&key, "{}");
  char *k = key.failed ? NULL : hbm__hlo_arena_strndup(&dp->arena, hbm_strbuf_str(&key), key.len);
  hbm_strbuf_free(&key);
  if (!k)
    return false;
  uintptr_t slot = (uintptr_t)dp->values.len + 1;
  if (hbm__hlo_namemap_put(&dp->by_key, 0, (hlo_str_t){k, (uint32_t)strlen(k)}, (void *)slot) < 0)
    return false;
  return hbm__hlo_vec_push(&dp->values, &v);
}

/* "HloLiveRange (max N):", "  InstructionSequence:", "    0:name", "  BufferLiveRange:",
 * "    name{index}:start-end", "  Live ranges at T (peak):", "    name: N bytes". */
static bool parse_live_range(dump_parser_t *dp, size_t pos) {
  hlo_str_t line;
  int section = 0;
  while (line_at(dp, pos, &line)) {
    pos = next_line(dp, &line);
    hlo_str_t t = trim(line);
    if (starts_with(t, "InstructionSequence:")) {
      section = 1;
    } else if (starts_with(t, "BufferLiveRange:")) {
      section = 2;
      dp->have_live_ranges = true;
    } else if (starts_with(t, "Live ranges at")) {
      section = 3;
    } else if (t.n && section == 1) {
      const char *colon = memchr(t.p, ':', t.n);
      if (!colon)
        return error_in_line(dp, line, t.p, "'N:instruction' in the InstructionSequence");
      hlo_str_t label = {colon + 1, (uint32_t)(t.p + t.n - colon - 1)};
      if (!hbm__hlo_vec_push(&dp->steps, &label))
        return false;
    } else if (t.n && section == 2) {
      const char *colon = NULL;
      for (const char *q = t.p + t.n; q > t.p; q--)
        if (q[-1] == ':') {
          colon = q - 1;
          break;
        }
      if (!colon)
        return error_in_line(dp, line, t.p, "'name{index}:start-end'");
      const char *q = colon + 1, *end = t.p + t.n;
      uint64_t s, e;
      if (!parse_u64(&q, end, &s) || q >= end || *q != '-' || (q++, !parse_u64(&q, end, &e)))
        return error_in_line(dp, line, colon + 1, "'start-end'");
      uintptr_t slot = (uintptr_t)hbm__hlo_namemap_get(&dp->by_key, 0,
                                                       (hlo_str_t){t.p, (uint32_t)(colon - t.p)});
      if (slot) {
        dump_value_t *v = &HLO_VEC_AT(&dp->values, dump_value_t, slot - 1);
        v->start = (int64_t)s;
        v->end = (int64_t)e + 1;
      }
    }
  }
  return true;
}

static bool parse_buffer_assignment(dump_parser_t *dp) {
  size_t pos = 0;
  hlo_str_t line;
  bool in_values_dump = false; /* "Used values:": per-value details we do not need */
  while (line_at(dp, pos, &line)) {
    pos = next_line(dp, &line);
    hlo_str_t t = trim(line);
    if (starts_with(line, "HloLiveRange"))
      return parse_live_range(dp, pos);
    if (starts_with(line, "allocation ")) {
      in_values_dump = false;
      if (!parse_alloc_header(dp, line))
        return false;
    } else if (starts_with(line, "Used values:")) {
      in_values_dump = true;
    } else if (!in_values_dump && dp->allocs.len &&
               (starts_with(t, "value: <") ||
                (t.n && line.p[0] == ' ' && find_in(t, " [") && find_in(t, "]: ")))) {
      if (!parse_value_line(dp, line))
        return false;
    }
  }
  return !dp->lx.failed;
}

/* ---- memory usage report ---- */

/* "292.97MiB" / "1.0KiB" / "512B" → bytes (XLA prints these rounded). */
static bool parse_human_bytes(hlo_str_t s, uint64_t *out) {
  s = trim(s);
  char buf[64];
  if (s.n == 0 || s.n >= sizeof buf)
    return false;
  memcpy(buf, s.p, s.n);
  buf[s.n] = '\0';
  char *end;
  double v = strtod(buf, &end);
  if (end == buf || v < 0)
    return false;
  static const struct {
    const char *unit;
    double factor;
  } units[] = {{"B", 1.0},
               {"KiB", 1024.0},
               {"MiB", 1048576.0},
               {"GiB", 1073741824.0},
               {"TiB", 1099511627776.0},
               {"K", 1024.0},
               {"M", 1048576.0},
               {"G", 1073741824.0}};
  for (size_t i = 0; i < HBM_ARRAY_LEN(units); i++)
    if (!strcmp(end, units[i].unit)) {
      double b = v * units[i].factor;
      if (b > 1.8e19)
        return false;
      *out = (uint64_t)(b + 0.5);
      return true;
    }
  return false;
}

/* One "cumulative(pct%); size; offset; n_values; shapes" row into the last allocation. */
static bool parse_report_row(dump_parser_t *dp, hlo_str_t line) {
  hlo_str_t t = trim(line);
  hlo_str_t field[5];
  size_t n = 0;
  const char *p = t.p, *end = t.p + t.n;
  while (n < 4) {
    const char *semi = memchr(p, ';', (size_t)(end - p));
    if (!semi)
      return error_in_line(dp, line, p, "'cumulative; size; offset; values; shapes'");
    field[n++] = (hlo_str_t){p, (uint32_t)(semi - p)};
    p = semi + 1;
  }
  field[4] = trim((hlo_str_t){p, (uint32_t)(end - p)});
  dump_value_t v = {.alloc = (uint32_t)dp->allocs.len - 1, .start = -1, .end = -1};
  v.id = (int64_t)dp->values.len;
  if (!parse_human_bytes(field[1], &v.size))
    return error_in_line(dp, line, trim(field[1]).p, "a size such as 1.00MiB");
  hlo_str_t off = trim(field[2]);
  const char *q = off.p;
  if (!parse_u64(&q, off.p + off.n, &v.offset))
    return error_in_line(dp, line, off.p, "an offset in bytes");
  v.shape = field[4];
  char name[64];
  hlo_str_t count = trim(field[3]);
  snprintf(name, sizeof name, "%.*s value%s at offset %llu", (int)(count.n < 20 ? count.n : 20),
           count.p, count.n == 1 && count.p[0] == '1' ? "" : "s", (unsigned long long)v.offset);
  char *copy = hbm__hlo_arena_strndup(&dp->arena, name, strlen(name));
  if (!copy)
    return false;
  v.name = (hlo_str_t){copy, (uint32_t)strlen(copy)};
  /* The first shape of the list, for the unpadded size. */
  const char *comma = NULL;
  int depth = 0;
  for (const char *c = v.shape.p; c < v.shape.p + v.shape.n && !comma; c++) {
    if (*c == '[' || *c == '{' || *c == '(')
      depth++;
    else if (*c == ']' || *c == '}' || *c == ')')
      depth--;
    else if (*c == ',' && depth == 0)
      comma = c;
  }
  hlo_str_t first = comma ? (hlo_str_t){v.shape.p, (uint32_t)(comma - v.shape.p)} : v.shape;
  const char *times = find_in(first, "\xc3\x97"); /* "2×f32[...]" */
  if (times)
    first = (hlo_str_t){times + 2, (uint32_t)(first.p + first.n - times - 2)};
  v.unpadded = unpadded_of(dp, first, v.size);
  if (v.unpadded > v.size)
    v.unpadded = v.size;
  HLO_VEC_AT(&dp->allocs, dump_alloc_t, dp->allocs.len - 1).n_values++;
  return hbm__hlo_vec_push(&dp->values, &v);
}

static bool parse_memory_report(dump_parser_t *dp) {
  size_t pos = 0;
  hlo_str_t line;
  int section = 0; /* old: 1 sorted list (skipped), 2 with values; new: 3 in a memory space */
  while (line_at(dp, pos, &line)) {
    pos = next_line(dp, &line);
    hlo_str_t t = trim(line);
    if (starts_with(t, "Allocations sorted by size with their values")) {
      section = 2;
    } else if (starts_with(t, "Allocations sorted by size")) {
      section = 1;
    } else if (starts_with(t, "Memory Space:")) {
      section = 3;
      dump_alloc_t a = {.param = -1, .temp = true, .first_value = (uint32_t)dp->values.len};
      a.index = (int64_t)dp->allocs.len;
      const char *c = find_in(t, "(color=");
      if (c) {
        const char *q = c + 7;
        uint64_t col;
        if (parse_u64(&q, t.p + t.n, &col) && col < 256)
          a.color = (int)col;
      }
      if (!hbm__hlo_vec_push(&dp->allocs, &a))
        return false;
    } else if (section == 3 && starts_with(t, "Total bytes:")) {
      const char *q = t.p + 12;
      while (q < t.p + t.n && *q == ' ')
        q++;
      uint64_t total;
      if (parse_u64(&q, t.p + t.n, &total))
        HLO_VEC_AT(&dp->allocs, dump_alloc_t, dp->allocs.len - 1).size = total;
    } else if (section == 2 && starts_with(line, "allocation ")) {
      /* Sizes here are rounded ("size 1.00MiB"): read them through parse_alloc_header's
       * flags, then the size from the human-readable text. */
      const char *sz = find_in(line, "size ");
      const char *comma = sz ? memchr(sz, ',', (size_t)(line.p + line.n - sz)) : NULL;
      const char *colon = sz ? memchr(sz, ':', (size_t)(line.p + line.n - sz)) : NULL;
      const char *stop = comma && (!colon || comma < colon) ? comma : colon;
      uint64_t bytes = 0;
      if (!sz || !stop ||
          !parse_human_bytes((hlo_str_t){sz + 5, (uint32_t)(stop - sz - 5)}, &bytes))
        return error_in_line(dp, line, sz, "'size N' with a unit");
      dump_alloc_t a = {.param = -1, .first_value = (uint32_t)dp->values.len, .size = bytes};
      hlo_str_t rest = {stop, (uint32_t)(line.p + line.n - stop)};
      const char *q = line.p + 11;
      uint64_t idx;
      if (parse_u64(&q, line.p + line.n, &idx))
        a.index = (int64_t)idx;
      read_allocation_flags(rest, &a);
      if (!hbm__hlo_vec_push(&dp->allocs, &a))
        return false;
    } else if ((section == 2 || section == 3) && dp->allocs.len && memchr(t.p, ';', t.n) &&
               !starts_with(t, "cumulative_size")) {
      if (!parse_report_row(dp, line))
        return false;
    }
  }
  return !dp->lx.failed;
}

/* ---- to a profile ---- */

typedef struct active_chunk {
  uint64_t begin, end;
  uint32_t value;
} active_chunk_t;

/* Without live ranges: values in id order, each living until a later value is placed over
 * its bytes in the same allocation. */
static bool reconstruct_ranges(dump_parser_t *dp, uint32_t *order, uint32_t n) {
  active_chunk_t *active = malloc(((size_t)n + 1) * sizeof *active);
  if (!active)
    return false;
  size_t n_active = 0;
  uint32_t current_alloc = UINT32_MAX;
  for (uint32_t r = 0; r < n; r++) {
    dump_value_t *v = &HLO_VEC_AT(&dp->values, dump_value_t, order[r]);
    v->start = r;
    v->end = n;
    if (v->alloc != current_alloc) { /* chunks of another allocation never collide */
      n_active = 0;
      current_alloc = v->alloc;
    }
    uint64_t b = v->offset, e = v->offset + (v->size ? v->size : 1);
    size_t keep = 0;
    for (size_t i = 0; i < n_active; i++) {
      if (active[i].begin < e && b < active[i].end)
        HLO_VEC_AT(&dp->values, dump_value_t, active[i].value).end = r;
      else
        active[keep++] = active[i];
    }
    n_active = keep;
    active[n_active++] = (active_chunk_t){b, e, order[r]};
  }
  free(active);
  return true;
}

static int value_id_order(const void *x, const void *y, void *ctx) {
  const dump_parser_t *dp = ctx;
  const dump_value_t *a = &HLO_VEC_AT(&dp->values, dump_value_t, *(const uint32_t *)x);
  const dump_value_t *b = &HLO_VEC_AT(&dp->values, dump_value_t, *(const uint32_t *)y);
  if (a->alloc != b->alloc && dp->have_live_ranges)
    return a->alloc < b->alloc ? -1 : 1;
  if (a->id != b->id)
    return a->id < b->id ? -1 : 1;
  return a->offset < b->offset ? -1 : a->offset > b->offset;
}

static hbm_category_t alloc_category(const dump_alloc_t *a) {
  if (a->param >= 0)
    return HBM_CAT_PARAMETER;
  if (a->live_out)
    return HBM_CAT_OUTPUT;
  if (a->thread_local)
    return HBM_CAT_THREAD_LOCAL;
  if (a->constant)
    return HBM_CAT_CONSTANT;
  return HBM_CAT_TEMPORARY;
}

static char *cstr(dump_parser_t *dp, hlo_str_t s) {
  return hbm__hlo_arena_strndup(&dp->arena, s.p ? s.p : "", s.n);
}

static hbm_status_t build_dump_profile(hbm_plan_t *plan, dump_parser_t *dp) {
  size_t nv = dp->values.len, na = dp->allocs.len;
  plan->profile = hbm_profile_new(HBM_PROFILE_PLAN, plan->name);
  if (!plan->profile)
    return hbm_last_status();
  hbm_profile_t *p = plan->profile;
  hbm_profile_set_meta(p, "module", plan->name);
  hbm_profile_set_meta(p, "source_path", plan->path);
  hbm_profile_set_meta(p, "planner",
                       plan->source == PLAN_FROM_BUFFER_ASSIGNMENT
                           ? "XLA buffer assignment (dump)"
                           : "XLA memory usage report (dump)");
  /* Temporary values in step order. */
  uint32_t *order = malloc((nv + 1) * sizeof *order);
  if (!order)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  uint32_t n_temp = 0;
  for (uint32_t i = 0; i < nv; i++)
    if (HLO_VEC_AT(&dp->allocs, dump_alloc_t, HLO_VEC_AT(&dp->values, dump_value_t, i).alloc).temp)
      order[n_temp++] = i;
  qsort_r(order, n_temp, sizeof *order, value_id_order, dp);
  int64_t n_steps;
  hbm_status_t st = HBM_OK;
  if (dp->have_live_ranges && dp->steps.len) {
    n_steps = (int64_t)dp->steps.len;
    for (size_t s = 0; s < dp->steps.len && st == HBM_OK; s++)
      if (hbm_profile_add_step(p, (int64_t)s, cstr(dp, HLO_VEC_AT(&dp->steps, hlo_str_t, s))) < 0)
        st = hbm_last_status();
    hbm_profile_set_meta(p, "live_ranges", "from XLA's HloLiveRange");
  } else {
    if (plan->source == PLAN_FROM_BUFFER_ASSIGNMENT) {
      if (!reconstruct_ranges(dp, order, n_temp))
        st = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
      n_steps = n_temp ? n_temp : 1;
      for (uint32_t r = 0; r < n_temp && st == HBM_OK; r++) {
        const dump_value_t *v = &HLO_VEC_AT(&dp->values, dump_value_t, order[r]);
        if (hbm_profile_add_step(p, r, cstr(dp, v->name)) < 0)
          st = hbm_last_status();
      }
      hbm_profile_set_meta(
          p, "live_ranges",
          "reconstructed: values in id order, each live until its bytes are reused");
    } else {
      n_steps = 1;
      if (hbm_profile_add_step(p, 0, "program") < 0)
        st = hbm_last_status();
      for (uint32_t i = 0; i < nv; i++) {
        HLO_VEC_AT(&dp->values, dump_value_t, i).start = 0;
        HLO_VEC_AT(&dp->values, dump_value_t, i).end = 1;
      }
      hbm_profile_set_meta(p, "live_ranges", "none: a memory usage report has no order");
    }
    if (n_temp == 0 && plan->source == PLAN_FROM_BUFFER_ASSIGNMENT && st == HBM_OK &&
        hbm_profile_add_step(p, 0, "program") < 0)
      st = hbm_last_status();
  }
  /* Spaces by colour, the planned one first. */
  int space_of[256];
  for (int c = 0; c < 256; c++)
    space_of[c] = -1;
  char cbuf[32];
  int planned = plan->opt.space_color;
  plan->space = hbm_profile_add_space(p, hbm__hlo_color_name(planned, cbuf, sizeof cbuf), "xla",
                                      planned, plan->opt.memory);
  space_of[planned] = plan->space;
  /* Temporaries of several allocations of one colour are laid end to end. */
  uint64_t heap_top[256] = {0};
  for (size_t i = 0; i < na && st == HBM_OK; i++) {
    dump_alloc_t *a = &HLO_VEC_AT(&dp->allocs, dump_alloc_t, i);
    if (space_of[a->color] < 0)
      space_of[a->color] = hbm_profile_add_space(
          p, hbm__hlo_color_name(a->color, cbuf, sizeof cbuf), "xla", a->color, 0);
    if (a->temp) {
      a->base = heap_top[a->color];
      heap_top[a->color] += a->size;
    }
  }
  plan->heap_bytes = heap_top[planned];
  for (size_t i = 0; i < na && st == HBM_OK; i++) {
    const dump_alloc_t *a = &HLO_VEC_AT(&dp->allocs, dump_alloc_t, i);
    if (a->temp && a->n_values)
      continue; /* its values follow, at their offsets */
    const dump_value_t *v =
        a->n_values ? &HLO_VEC_AT(&dp->values, dump_value_t, a->first_value) : NULL;
    char label[64];
    snprintf(label, sizeof label, "allocation %lld", (long long)a->index);
    hbm_buffer_t b = {0};
    b.size = a->size;
    b.unpadded_size = v && v->unpadded < a->size ? v->unpadded : a->size;
    b.start = 0;
    b.end = n_steps;
    b.space = space_of[a->color];
    b.category = alloc_category(a);
    b.flags = a->temp ? 0 : HBM_BUF_INDEFINITE | (a->live_out ? HBM_BUF_LIVE_OUT : 0);
    b.address = a->temp ? a->base : 0;
    b.op = v ? cstr(dp, v->name) : label;
    b.shape = v && v->shape.n ? cstr(dp, v->shape) : (a->shape.n ? cstr(dp, a->shape) : NULL);
    b.label = label;
    if (hbm_profile_add_buffer(p, &b) < 0)
      st = hbm_last_status();
  }
  for (uint32_t r = 0; r < n_temp && st == HBM_OK; r++) {
    const dump_value_t *v = &HLO_VEC_AT(&dp->values, dump_value_t, order[r]);
    const dump_alloc_t *a = &HLO_VEC_AT(&dp->allocs, dump_alloc_t, v->alloc);
    char label[96];
    snprintf(label, sizeof label, "allocation %lld, offset %llu", (long long)a->index,
             (unsigned long long)v->offset);
    hbm_buffer_t b = {0};
    b.address = a->base + v->offset;
    b.size = v->size;
    b.unpadded_size = v->unpadded;
    b.start = v->start < 0 ? 0 : v->start;
    b.end = v->end < 0 ? n_steps : (v->end > n_steps ? n_steps : v->end);
    if (b.end < b.start)
      b.end = b.start;
    b.space = space_of[a->color];
    b.category = HBM_CAT_TEMPORARY;
    b.op = cstr(dp, v->name);
    b.shape = v->shape.n ? cstr(dp, v->shape) : NULL;
    b.label = label;
    if (!b.op || hbm_profile_add_buffer(p, &b) < 0)
      st = hbm_last_status();
  }
  free(order);
  if (st == HBM_OK)
    st = hbm_profile_finish(p);
  return st;
}

/* XLA names its dumps module_NNNN.<module>.<platform>_after_optimizations-<what>.txt: the
 * module name is what lies between, or else the file name. */
static char *dump_module_name(const char *path) {
  const char *base = hbm__base_name(path);
  const char *start = base, *end = base + strlen(base);
  const char *mod = strstr(base, "module_"); /* also behind a prefix (hash__module_N...) */
  if (mod && strchr(mod, '.'))
    start = strchr(mod, '.') + 1;
  const char *suffixes[] = {"-buffer-assignment", "-memory-usage-report"};
  for (size_t i = 0; i < 2; i++) {
    const char *at = strstr(start, suffixes[i]);
    if (at && at < end)
      end = at;
  }
  const char *phases[] = {"_after_optimizations", "_before_optimizations"};
  for (size_t i = 0; i < 2; i++) {
    size_t n = strlen(phases[i]);
    if ((size_t)(end - start) > n && !strncmp(end - n, phases[i], n)) {
      const char *dot = end - n;
      while (dot > start && dot[-1] != '.')
        dot--;
      /* a GPU platform has a dot of its own: ".sm_8.0_gpu" */
      for (const char *sm = start; (sm = strstr(sm, ".sm_")) && sm < dot; sm++)
        dot = sm + 1;
      if (dot > start + 1)
        end = dot - 1; /* drop ".<platform>_after_optimizations" */
    }
  }
  size_t n = (size_t)(end - start);
  char *name = malloc(n + 1);
  if (!name) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  memcpy(name, start, n);
  name[n] = '\0';
  return name;
}

bool hbm__xla_dump_kind(const char *text, size_t len, plan_source_t *kind) {
  size_t i = 0;
  while (i < len && (text[i] == ' ' || text[i] == '\n' || text[i] == '\r' || text[i] == '\t'))
    i++;
  const char *s = text + i;
  size_t n = len - i;
#define STARTS(lit) (n >= sizeof(lit) - 1 && memcmp(s, lit, sizeof(lit) - 1) == 0)
  if (STARTS("BufferAssignment:") || STARTS("allocation 0:")) {
    *kind = PLAN_FROM_BUFFER_ASSIGNMENT;
    return true;
  }
  if (STARTS("Memory Space:") || STARTS("Total bytes used:")) {
    *kind = PLAN_FROM_MEMORY_REPORT;
    return true;
  }
#undef STARTS
  return false;
}

/* The first "Total bytes used: N" line: XLA's exact total (both dump kinds print it). */
static bool dump_total(const char *text, size_t len, uint64_t *total) {
  static const char key[] = "Total bytes used: ";
  for (const char *p = text; p && p < text + len;) {
    size_t left = (size_t)(text + len - p);
    if (left > sizeof key - 1 && !memcmp(p, key, sizeof key - 1)) {
      const char *q = p + sizeof key - 1;
      return parse_u64(&q, text + len, total);
    }
    p = memchr(p, '\n', left);
    p = p ? p + 1 : NULL;
  }
  return false;
}

/* XLA's numbers as it wrote them, never re-packed: allocation sizes by kind (exact in a
 * buffer assignment, rounded to 0.01 MiB in a report, where only the total is exact) and
 * "Total bytes used". The temp allocation is what the total leaves. */
static void take_xla_totals(hbm_plan_t *plan, const dump_parser_t *dp, const char *text,
                            size_t len) {
  hbm_plan_summary_t *s = &plan->summary;
  uint64_t args = 0, outs = 0, alias = 0, consts = 0, tl = 0, temp = 0, total = 0;
  for (size_t i = 0; i < dp->allocs.len; i++) {
    const dump_alloc_t *a = &HLO_VEC_AT(&dp->allocs, dump_alloc_t, i);
    if (a->color != plan->opt.space_color)
      continue;
    args += a->param >= 0 ? a->size : 0;
    outs += a->live_out ? a->size : 0;
    alias += a->param >= 0 && a->live_out ? a->size : 0;
    consts += a->constant ? a->size : 0;
    tl += a->thread_local ? a->size : 0;
    temp += a->temp ? a->size : 0;
  }
  uint64_t indefinite = args + outs - alias + consts + tl;
  if (dump_total(text, len, &total) && plan->opt.space_color == 0 && total >= indefinite)
    temp = total - indefinite;
  s->argument_bytes = args;
  s->output_bytes = outs;
  s->alias_bytes = alias;
  plan->constant_bytes = consts;
  plan->thread_local_bytes = tl;
  plan->indefinite_bytes = indefinite;
  plan->heap_bytes = s->temp_bytes = temp;
  plan->used_bytes = plan->opt.reserved + indefinite + temp;
  s->fits = plan->opt.memory == 0 || plan->used_bytes <= plan->opt.memory;
}

/* The profile adds sizes up in signed 64-bit: refuse dumps whose allocations and values
 * together exceed 2^61 bytes (no device has an exabyte; a corrupt number does). */
static bool sizes_plausible(dump_parser_t *dp) {
  const uint64_t limit = 1ull << 61;
  uint64_t sum = 0;
  for (size_t i = 0; i < dp->allocs.len; i++) {
    uint64_t s = HLO_VEC_AT(&dp->allocs, dump_alloc_t, i).size;
    sum = s >= limit || sum + s >= limit ? limit : sum + s;
  }
  for (size_t i = 0; i < dp->values.len; i++) {
    const dump_value_t *v = &HLO_VEC_AT(&dp->values, dump_value_t, i);
    uint64_t s = v->size > v->unpadded ? v->size : v->unpadded;
    uint64_t end = v->offset + s;
    if (s >= limit || v->offset >= limit || end >= limit)
      sum = limit;
    else
      sum = sum + s >= limit ? limit : sum + s;
  }
  if (sum < limit)
    return true;
  return hbm__hlo_lex_error_at(&dp->lx, 0,
                               "expected allocation sizes a device can hold; these add up to "
                               "more than 2^61 bytes");
}

hbm_status_t hbm__plan_from_dump(hbm_plan_t *plan, const char *text, size_t len,
                                 plan_source_t kind) {
  dump_parser_t dp = {0};
  hbm__hlo_lex_init(&dp.lx, text, len, plan->path);
  hbm__hlo_arena_init(&dp.arena);
  hbm__hlo_vec_init(&dp.allocs, sizeof(dump_alloc_t));
  hbm__hlo_vec_init(&dp.values, sizeof(dump_value_t));
  hbm__hlo_vec_init(&dp.steps, sizeof(hlo_str_t));
  hbm__hlo_namemap_init(&dp.by_key);
  plan->name = dump_module_name(plan->path);
  bool ok = plan->name && (kind == PLAN_FROM_BUFFER_ASSIGNMENT ? parse_buffer_assignment(&dp)
                                                               : parse_memory_report(&dp));
  if (ok && dp.allocs.len == 0)
    ok = hbm__hlo_lex_error_at(&dp.lx, 0, "expected an allocation ('allocation N: size S, ...')");
  ok = ok && sizes_plausible(&dp);
  hbm_status_t st = ok ? build_dump_profile(plan, &dp) : hbm_last_status();
  if (st == HBM_OK)
    st = hbm__plan_finish(plan);
  if (st == HBM_OK)
    take_xla_totals(plan, &dp, text, len);
  hbm__hlo_namemap_free(&dp.by_key);
  hbm__hlo_vec_free(&dp.allocs);
  hbm__hlo_vec_free(&dp.values);
  hbm__hlo_vec_free(&dp.steps);
  hbm__hlo_arena_free(&dp.arena);
  return st == HBM_OK ? HBM_OK : (hbm_last_status() != HBM_OK ? hbm_last_status() : st);
}
