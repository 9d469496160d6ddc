/* index_write.c — writes a profile's index (index.h; the format is in docs/trace-format.md,
 * "The profile index"): a 64-byte header that names the profile's file as it was (size, mtime,
 * inode) with the body's checksum, then sections: the strings, the profile (metadata, spaces,
 * counts), OOM events and markers, the buffers live at any space's peak, each space's stored
 * analysis with the maxima of its live bytes over blocks of 64·2^k steps, and the per-step
 * values (time, label, the op of the step, live bytes per space) in zstd blocks of 4096
 * steps. Written to a temporary file and renamed, so a reader never sees half of one.
 *
 * hbm__index_write computes the pieces from a profile held whole (its analyses' series);
 * index_stream.c computes them in one pass; hbm__index_assemble makes the bytes for both. */
#include "profile/index_write.h"

#include "profile/trace_format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

enum { SEC_STRINGS = 1, SEC_PROFILE, SEC_EVENTS, SEC_BUFFERS, SEC_SPACE, SEC_STEPS, SEC_BLOCKS };

typedef hbm__index_out_t out_t;

typedef struct writer {
  const hbm__index_parts_t *parts;
  const hbm_profile_t *p;
  out_t body, section;
  hbm__index_strings_t *strings;
  uint64_t blocks_at; /* where the next column goes in SEC_BLOCKS */
} writer_t;

/* ---- bytes ---- */

void hbm__index_put(out_t *o, const void *p, size_t n) {
  if (o->failed || n == 0)
    return;
  if (o->n + n > o->cap) {
    size_t cap = o->cap ? o->cap : 4096;
    while (cap < o->n + n)
      cap *= 2;
    uint8_t *grown = realloc(o->d, cap);
    if (!grown) {
      o->failed = true;
      return;
    }
    o->d = grown;
    o->cap = cap;
  }
  memcpy(o->d + o->n, p, n);
  o->n += n;
}

#define put hbm__index_put

static void put_u64(out_t *o, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  put(o, b, 8);
}

static void put_u32(out_t *o, uint32_t v) {
  uint8_t b[4];
  hbm__put_le32(b, v);
  put(o, b, 4);
}

/* Varints are most of a column's bytes (a 10^8-step profile writes 3·10^8): written in
 * place once there is room for one. */
static inline void put_varint(out_t *o, uint64_t v) {
  if (__builtin_expect(o->cap - o->n < 10, 0)) {
    uint8_t b[10];
    put(o, b, hbm__put_varint(b, v));
    return;
  }
  o->n += hbm__put_varint(o->d + o->n, v);
}

uint64_t hbm__index_string_id(hbm__index_strings_t *s, const char *text) {
  uint64_t id;
  if (!text)
    return 0;
  if (hbm_u64map_get(&s->ids, (uintptr_t)text, &id))
    return id;
  const char **grown = hbm__grow_array(s->list, &s->cap, s->n + 1, sizeof *grown, 256);
  if (!grown || !hbm_u64map_put(&s->ids, (uintptr_t)text, s->n + 1)) {
    s->failed = true;
    return 0;
  }
  s->list = grown;
  s->list[s->n++] = text;
  return s->n;
}

void hbm__index_strings_free(hbm__index_strings_t *s) {
  hbm_u64map_free(&s->ids);
  free(s->list);
}

static uint64_t string_id(writer_t *w, const char *s) {
  return hbm__index_string_id(w->strings, s);
}

/* A section: type, length, bytes, zero padding to 8. */
static void end_section(writer_t *w, uint32_t type) {
  static const uint8_t zeros[8] = {0};
  put_u32(&w->body, type);
  put_u32(&w->body, 0);
  put_u64(&w->body, w->section.n);
  put(&w->body, w->section.d, w->section.n);
  put(&w->body, zeros, (8 - w->section.n % 8) % 8);
  w->body.failed |= w->section.failed;
  w->section.n = 0;
}

/* ---- columns ---- */

bool hbm__index_column_add(hbm__index_column_t *c, ZSTD_CCtx *zc, out_t *raw) {
  size_t bound = ZSTD_compressBound(raw->n);
  uint32_t *grown =
      hbm__grow_array(c->lens, &c->cap_blocks, 2 * (c->n_blocks + 1), sizeof *grown, 64);
  if (raw->failed || !grown)
    return false;
  c->lens = grown;
  if (c->data.cap - c->data.n < bound) {
    size_t need = c->data.n + bound;
    uint8_t *more = realloc(c->data.d, need * 2);
    if (!more)
      return false;
    c->data.d = more;
    c->data.cap = need * 2;
  }
  size_t n = ZSTD_compressCCtx(zc, c->data.d + c->data.n, bound, raw->d, raw->n, 1);
  if (ZSTD_isError(n))
    return false;
  c->data.n += n;
  c->lens[2 * c->n_blocks] = (uint32_t)n;
  c->lens[2 * c->n_blocks + 1] = (uint32_t)raw->n;
  c->n_blocks++;
  raw->n = 0;
  return true;
}

void hbm__index_column_free(hbm__index_column_t *c) {
  free(c->data.d);
  free(c->lens);
}

void hbm__index_live_block(out_t *raw, const uint64_t *live, const uint64_t *unpadded, size_t n) {
  uint64_t last = 0; /* each block on its own: zigzag deltas from 0 */
  for (size_t s = 0; s < n; last = live[s++])
    put_varint(raw, hbm__zigzag((int64_t)(live[s] - last)));
  for (size_t s = 0; unpadded && s < n; s++)
    put_varint(raw, hbm__zigzag((int64_t)(live[s] - unpadded[s])));
}

/* Per step: time (delta), label, and the op of the buffer the step is about (id * 4 + 1 for
 * an allocation, + 2 for a free). */
void hbm__index_step_block(out_t *raw, hbm__index_strings_t *strings, const int64_t *time,
                           const char *const *label, const hbm__index_step_op_t *op, size_t n) {
  int64_t last = 0; /* each block on its own */
  for (size_t s = 0; s < n; last = time[s++])
    put_varint(raw, hbm__zigzag(time[s] - last));
  for (size_t s = 0; s < n; s++) /* (runtime profiles have no labels) */
    put_varint(raw, label[s] ? hbm__index_string_id(strings, label[s]) : 0);
  for (size_t s = 0; s < n; s++)
    put_varint(raw, !op[s].event ? 0
                    : op[s].op   ? hbm__index_string_id(strings, op[s].op) * 4 + op[s].event
                                 : op[s].event);
}

/* A column's table: its blocks' count, then where each is in SEC_BLOCKS and its lengths. */
static void write_table(writer_t *w, out_t *o, const hbm__index_column_t *c) {
  put_u64(o, c->n_blocks);
  for (size_t b = 0; b < c->n_blocks; b++) {
    put_u64(o, w->blocks_at);
    put_u32(o, c->lens[2 * b]);
    put_u32(o, c->lens[2 * b + 1]);
    w->blocks_at += c->lens[2 * b];
  }
}

/* ---- sections ---- */

static void write_profile(writer_t *w) {
  const hbm_profile_t *p = w->p;
  out_t *o = &w->section;
  put_u64(o, (uint64_t)hbm_profile_kind(p));
  put_u64(o, (uint64_t)hbm_profile_step_count(p));
  put_u64(o, (uint64_t)hbm_profile_buffer_count(p));
  put_u64(o, string_id(w, hbm_profile_name(p)));
  put_u64(o, hbm_profile_meta_count(p));
  for (size_t i = 0; i < hbm_profile_meta_count(p); i++) {
    const char *k = hbm_profile_meta_key(p, i);
    put_u64(o, string_id(w, k));
    put_u64(o, string_id(w, hbm_profile_meta(p, k)));
  }
  put_u64(o, (uint64_t)hbm_profile_space_count(p));
  for (int i = 0; i < hbm_profile_space_count(p); i++) {
    const hbm_space_info_t *s = hbm_profile_space(p, i);
    put_u64(o, string_id(w, s->name));
    put_u64(o, string_id(w, s->device));
    put_u64(o, (uint64_t)(int64_t)s->color);
    put_u64(o, s->limit);
  }
  end_section(w, SEC_PROFILE);
}

static void write_events(writer_t *w) {
  const hbm_profile_t *p = w->p;
  out_t *o = &w->section;
  put_u64(o, hbm_profile_oom_count(p));
  for (size_t i = 0; i < hbm_profile_oom_count(p); i++) {
    const hbm_oom_event_t *e = hbm_profile_oom(p, i);
    put_u64(o, (uint64_t)e->step);
    put_u64(o, (uint64_t)(int64_t)e->space);
    put_u64(o, e->requested);
    put_u64(o, string_id(w, e->message));
  }
  put_u64(o, hbm_profile_marker_count(p));
  for (size_t i = 0; i < hbm_profile_marker_count(p); i++) {
    const hbm_marker_t *m = hbm_profile_marker(p, i);
    put_u64(o, (uint64_t)m->step);
    put_u64(o, (uint64_t)m->kind);
    put_u64(o, (uint64_t)m->value);
    put_u64(o, string_id(w, m->text));
  }
  end_section(w, SEC_EVENTS);
}

static int by_index(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Every buffer live at some space's peak, by index. */
static void write_buffers(writer_t *w) {
  int n_spaces = hbm_profile_space_count(w->p);
  size_t total = 0, n;
  for (int s = 0; s < n_spaces; s++) {
    hbm_analysis_buffers_at_peak(w->parts->spaces[s].a, &n);
    total += n;
  }
  int64_t *idx = malloc((total + 1) * sizeof *idx);
  if (!idx) {
    w->body.failed = true;
    return;
  }
  size_t k = 0;
  for (int s = 0; s < n_spaces; s++) {
    const int64_t *at = hbm_analysis_buffers_at_peak(w->parts->spaces[s].a, &n);
    memcpy(idx + k, at, n * sizeof *idx);
    k += n;
  }
  qsort(idx, total, sizeof *idx, by_index);
  out_t *o = &w->section;
  put_u64(o, total);
  for (size_t i = 0; i < total; i++) {
    const hbm_buffer_t *b = w->parts->lookup(w->parts->lookup_ctx, idx[i]);
    const uint64_t fields[] = {(uint64_t)idx[i],
                               b->id,
                               b->address,
                               b->size,
                               b->unpadded_size,
                               (uint64_t)b->start,
                               (uint64_t)b->end,
                               (uint64_t)(int64_t)b->space,
                               (uint64_t)b->category,
                               b->flags,
                               string_id(w, b->op),
                               string_id(w, b->shape),
                               string_id(w, b->group),
                               string_id(w, b->source),
                               string_id(w, b->opcode),
                               string_id(w, b->label),
                               string_id(w, b->stack),
                               (uint64_t)b->span_end};
    for (size_t f = 0; f < HBM_ARRAY_LEN(fields); f++)
      put_u64(o, fields[f]);
  }
  free(idx);
  end_section(w, SEC_BUFFERS);
}

static uint64_t double_bits(double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  return bits;
}

static void write_summary(out_t *o, const hbm_summary_t *s) {
  const uint64_t fields[] = {(uint64_t)s->n_steps,
                             (uint64_t)s->n_buffers,
                             s->peak_bytes,
                             (uint64_t)s->peak_step,
                             (uint64_t)s->peak_time_ns,
                             s->peak_unpadded_bytes,
                             s->padding_bytes,
                             s->indefinite_bytes,
                             s->argument_bytes,
                             s->output_bytes,
                             s->temporary_bytes,
                             s->heap_bytes,
                             s->peak_reserved_bytes,
                             s->reserved_at_peak,
                             s->limit_bytes,
                             double_bits(s->fragmentation_at_peak),
                             s->largest_free_at_peak,
                             s->n_buffers_at_peak,
                             s->n_oom};
  for (size_t i = 0; i < HBM_ARRAY_LEN(fields); i++)
    put_u64(o, fields[i]);
  for (int c = 0; c < HBM_CAT_COUNT; c++)
    put_u64(o, s->category_bytes[c]);
}

/* The maxima of live bytes over blocks of 64·2^k steps (the first step reaching each), each
 * level from the one below (level 0 given), until one block holds them all. */
static void write_levels(out_t *o, const uint64_t *max0, const int64_t *at0, int64_t n) {
  size_t levels = 1;
  for (int64_t size = HBM_INDEX_LEVEL0; size < n; size *= 2)
    levels++;
  uint64_t count = n > 0 ? ((uint64_t)n + HBM_INDEX_LEVEL0 - 1) / HBM_INDEX_LEVEL0 : 0;
  uint64_t *max = malloc((count + 1) * sizeof *max);
  int64_t *at = malloc((count + 1) * sizeof *at);
  if (!max || !at) {
    free(max), free(at);
    o->failed = true;
    return;
  }
  if (count) { /* (none for a profile of no steps) */
    memcpy(max, max0, count * sizeof *max);
    memcpy(at, at0, count * sizeof *at);
  }
  put_u64(o, levels);
  for (size_t lv = 0; lv < levels; lv++) {
    put_u64(o, count);
    for (uint64_t b = 0; b < count; b++) {
      put_u64(o, max[b]);
      put_u64(o, (uint64_t)at[b]);
    }
    uint64_t half = (count + 1) / 2; /* the next level: pairs, the earlier step on ties */
    for (uint64_t b = 0; b < half; b++) {
      uint64_t l = 2 * b, r = l + 1 < count ? l + 1 : l;
      uint64_t pick = max[r] > max[l] ? r : l;
      max[b] = max[pick];
      at[b] = at[pick];
    }
    count = half;
  }
  free(max);
  free(at);
}

/* Group totals: the count, then (name, bytes, buffers) each. */
static void write_groups(writer_t *w, const hbm_group_total_t *g, size_t n) {
  put_u64(&w->section, n);
  for (size_t i = 0; i < n; i++) {
    put_u64(&w->section, string_id(w, g[i].name));
    put_u64(&w->section, g[i].bytes);
    put_u64(&w->section, g[i].count);
  }
}

static void write_space(writer_t *w, int space) {
  const hbm__index_space_t *sp = &w->parts->spaces[space];
  const hbm_analysis_t *a = sp->a;
  out_t *o = &w->section;
  put_u64(o, (uint64_t)space);
  write_summary(o, hbm_analysis_summary(a));
  size_t n;
  const int64_t *lists[3] = {hbm_analysis_buffers_at_peak(a, &n),
                             hbm_analysis_buffers_at_peak_by_size(a, &n),
                             hbm_analysis_buffers_at_peak_by_padding(a, &n)};
  put_u64(o, n);
  for (int l = 0; l < 3; l++)
    for (size_t i = 0; i < n; i++)
      put_u64(o, (uint64_t)lists[l][i]);
  const hbm_group_total_t *at_peak = hbm_analysis_groups(a, &n);
  write_groups(w, at_peak, n);
  hbm_group_total_t *run = hbm__analysis_run_groups(a, &n);
  if (!run)
    w->body.failed = true;
  write_groups(w, run, run ? n : 0);
  free(run);
  put_u64(o, sp->reserved ? 1 : 0); /* reserved bytes where they change */
  put_u64(o, sp->n_reserved);
  for (size_t i = 0; i < sp->n_reserved; i++) {
    put_u64(o, (uint64_t)sp->reserved[i].step);
    put_u64(o, sp->reserved[i].bytes);
  }
  put_u64(o, sp->padded);
  write_levels(o, sp->level0_max, sp->level0_at, hbm_profile_step_count(w->p));
  write_table(w, o, sp->live);
  end_section(w, SEC_SPACE);
}

/* Strings, each NUL-terminated, after a table of their offsets. */
static void write_strings(const hbm__index_strings_t *s, out_t *o) {
  put_u64(o, s->n);
  uint64_t at = 0;
  for (size_t i = 0; i < s->n; i++) {
    put_u64(o, at);
    at += strlen(s->list[i]) + 1;
  }
  for (size_t i = 0; i < s->n; i++)
    put(o, s->list[i], strlen(s->list[i]) + 1);
}

static void make_header(uint8_t *h, const struct stat *st, uint64_t body_len, uint32_t crc) {
  memset(h, 0, HBM_INDEX_HEADER);
  memcpy(h, HBM_INDEX_MAGIC, 8);
  hbm__put_le32(h + 8, HBM_INDEX_VERSION);
  hbm__put_le32(h + 12, HBM_TRACE_VERSION);
  uint64_t fields[] = {(uint64_t)st->st_size,
                       (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec,
                       (uint64_t)st->st_ino, body_len};
  for (int f = 0; f < 4; f++)
    for (int i = 0; i < 8; i++)
      h[16 + 8 * f + i] = (uint8_t)(fields[f] >> (8 * i));
  hbm__put_le32(h + 48, crc);
  hbm__put_le32(h + 52, hbm__crc32(0, h, 52));
}

/* The header, then the pieces one after another, into one anonymous mapping. */
static uint8_t *concatenate(const struct stat *st, const out_t *pieces, size_t n, size_t *len) {
  size_t total = HBM_INDEX_HEADER;
  uint32_t crc = 0;
  for (size_t i = 0; i < n; i++) {
    total += pieces[i].n;
    crc = hbm__crc32(crc, pieces[i].d, pieces[i].n); /* an empty piece may have no data */
  }
  uint8_t *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return NULL;
  make_header(m, st, total - HBM_INDEX_HEADER, crc);
  size_t at = HBM_INDEX_HEADER;
  for (size_t i = 0; i < n; i++) {
    if (pieces[i].n)
      memcpy(m + at, pieces[i].d, pieces[i].n);
    at += pieces[i].n;
  }
  *len = total;
  return m;
}

uint8_t *hbm__index_assemble(const hbm__index_parts_t *parts, const struct stat *st, size_t *len) {
  writer_t w = {.parts = parts, .p = parts->p, .strings = parts->strings};
  int n_spaces = hbm_profile_space_count(w.p);
  write_profile(&w);
  write_events(&w);
  write_buffers(&w);
  for (int s = 0; s < n_spaces; s++)
    write_space(&w, s);
  write_table(&w, &w.section, parts->steps);
  end_section(&w, SEC_STEPS);
  out_t strings = {0}, head = {0};
  write_strings(w.strings, &strings);
  put_u32(&head, SEC_STRINGS); /* the strings first: readers resolve ids as they go */
  put_u32(&head, 0);
  put_u64(&head, strings.n);
  put(&head, strings.d, strings.n);
  put(&head, (const uint8_t[8]){0}, (8 - strings.n % 8) % 8);
  put_u32(&w.body, SEC_BLOCKS);
  put_u32(&w.body, 0);
  put_u64(&w.body, w.blocks_at);
  uint8_t *bytes = NULL;
  size_t n_pieces = 0;
  out_t *pieces = malloc((size_t)(n_spaces + 3) * sizeof *pieces);
  if (pieces && !head.failed && !w.body.failed && !strings.failed && !w.strings->failed) {
    pieces[n_pieces++] = head;
    pieces[n_pieces++] = w.body;
    for (int s = 0; s < n_spaces; s++)
      pieces[n_pieces++] = parts->spaces[s].live->data;
    pieces[n_pieces++] = parts->steps->data;
    bytes = concatenate(st, pieces, n_pieces, len);
  }
  free(pieces);
  free(strings.d);
  free(head.d);
  free(w.body.d);
  free(w.section.d);
  return bytes;
}

/* ---- the file ---- */

hbm_status_t hbm__index_store(const char *path, const uint8_t *bytes, size_t len) {
  char target[4200], tmp[4300];
  if (!hbm__index_path(path, true, target, sizeof target))
    return hbm__error(HBM_ERR_IO, "%s: no writable place for its index", path);
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", target, (long)getpid()) >= (int)sizeof tmp)
    return hbm__error(HBM_ERR_IO, "%s: its index's path is too long", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  bool ok = fd >= 0;
  for (size_t done = 0; ok && done < len;) {
    ssize_t k = write(fd, bytes + done, len - done);
    ok = k > 0 || (k < 0 && errno == EINTR);
    done += k > 0 ? (size_t)k : 0;
  }
  ok = fd >= 0 && close(fd) == 0 && ok;
  if (ok && rename(tmp, target) != 0)
    ok = false;
  if (!ok && fd >= 0)
    unlink(tmp);
  return ok ? HBM_OK : hbm__error(HBM_ERR_IO, "%s: cannot write its index %s", path, target);
}

/* ---- the pieces of a profile held whole ---- */

/* Level 0 of a series: its most in each block of HBM_INDEX_LEVEL0 steps, the first step. */
static bool level0_of(const uint64_t *live, int64_t n, uint64_t **max_out, int64_t **at_out) {
  uint64_t count = n > 0 ? ((uint64_t)n + HBM_INDEX_LEVEL0 - 1) / HBM_INDEX_LEVEL0 : 0;
  uint64_t *max = *max_out = malloc((count + 1) * sizeof *max);
  int64_t *at = *at_out = malloc((count + 1) * sizeof *at);
  if (!max || !at)
    return false;
  for (uint64_t b = 0; b < count; b++) {
    int64_t best = (int64_t)b * HBM_INDEX_LEVEL0, end = best + HBM_INDEX_LEVEL0;
    for (int64_t s = best + 1; s < end && s < n; s++)
      if (live[s] > live[best])
        best = s;
    max[b] = live[best];
    at[b] = best;
  }
  return true;
}

/* Reserved bytes where they change, from a series. */
static hbm__reserved_change_t *changes_of(const uint64_t *reserved, int64_t n, size_t *count) {
  *count = 0;
  hbm__reserved_change_t *c = malloc(sizeof *c);
  for (int64_t s = 0; c && s < n; s++)
    if (s == 0 || reserved[s] != reserved[s - 1]) {
      hbm__reserved_change_t *grown = realloc(c, (*count + 1) * sizeof *c);
      if (!grown) {
        free(c);
        return NULL;
      }
      c = grown;
      c[(*count)++] = (hbm__reserved_change_t){s, reserved[s]};
    }
  return c;
}

/* A space's live column, block by block. */
static bool live_column(hbm__index_column_t *c, ZSTD_CCtx *zc, const uint64_t *live,
                        const uint64_t *unpadded, int64_t n) {
  out_t raw = {0};
  bool ok = true;
  for (int64_t from = 0; ok && from < n; from += HBM_INDEX_BLOCK_STEPS) {
    size_t k = (size_t)(n - from < HBM_INDEX_BLOCK_STEPS ? n - from : HBM_INDEX_BLOCK_STEPS);
    hbm__index_live_block(&raw, live + from, unpadded != live ? unpadded + from : NULL, k);
    ok = hbm__index_column_add(c, zc, &raw);
  }
  free(raw.d);
  return ok;
}

/* Which buffer each step is about: the first born there, else the first freed there. */
static int64_t *step_buffers(const hbm_profile_t *p, uint8_t **is_free) {
  int64_t n = hbm_profile_step_count(p), count = hbm_profile_buffer_count(p);
  int64_t *at = malloc(((size_t)n + 1) * sizeof *at);
  *is_free = calloc((size_t)n + 1, 1);
  if (!at || !*is_free) {
    free(at);
    free(*is_free);
    return NULL;
  }
  for (int64_t s = 0; s < n; s++)
    at[s] = -1;
  for (int64_t i = 0; i < count; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    if (b->start >= 0 && b->start < n && at[b->start] < 0)
      at[b->start] = i;
  }
  for (int64_t i = 0; i < count; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    if (b->end >= 0 && b->end < n && at[b->end] < 0)
      at[b->end] = i, (*is_free)[b->end] = 1;
  }
  return at;
}

/* The steps' column, block by block; its strings numbered first. */
static bool step_column(hbm__index_column_t *c, ZSTD_CCtx *zc, const hbm_profile_t *p,
                        hbm__index_strings_t *strings) {
  int64_t n = hbm_profile_step_count(p);
  uint8_t *is_free = NULL;
  int64_t *about = NULL;
  if (hbm_profile_kind(p) == HBM_PROFILE_RUNTIME && !(about = step_buffers(p, &is_free)))
    return false;
  int64_t time[HBM_INDEX_BLOCK_STEPS];
  const char *label[HBM_INDEX_BLOCK_STEPS];
  hbm__index_step_op_t op[HBM_INDEX_BLOCK_STEPS];
  out_t raw = {0};
  bool ok = true;
  for (int64_t from = 0; ok && from < n; from += HBM_INDEX_BLOCK_STEPS) {
    size_t k = (size_t)(n - from < HBM_INDEX_BLOCK_STEPS ? n - from : HBM_INDEX_BLOCK_STEPS);
    for (size_t i = 0; i < k; i++) {
      int64_t s = from + (int64_t)i, b = about ? about[s] : -1;
      time[i] = hbm_profile_step_time(p, s);
      label[i] = hbm_profile_step_label(p, s);
      op[i] = b < 0 ? (hbm__index_step_op_t){NULL, 0}
                    : (hbm__index_step_op_t){hbm_profile_buffer(p, b)->op, is_free[s] ? 2 : 1};
    }
    hbm__index_step_block(&raw, strings, time, label, op, k);
    ok = hbm__index_column_add(c, zc, &raw);
  }
  free(raw.d);
  free(about);
  free(is_free);
  return ok;
}

static const hbm_buffer_t *whole_buffer(const void *p, int64_t i) {
  return hbm_profile_buffer(p, i);
}

/* A space's pieces from its analysis' series (what it holds: freed with space_free). */
static bool space_pieces(hbm__index_space_t *sp, ZSTD_CCtx *zc, const hbm_profile_t *p,
                         hbm__index_column_t *column) {
  const uint64_t *live = hbm__analysis_series(sp->a, 0), *unpadded = hbm__analysis_series(sp->a, 1),
                 *reserved = hbm__analysis_series(sp->a, 2);
  int64_t n = hbm_profile_step_count(p);
  uint64_t *max;
  int64_t *at;
  bool ok = level0_of(live, n, &max, &at);
  sp->level0_max = max;
  sp->level0_at = at;
  sp->padded = unpadded != live;
  sp->live = column;
  if (ok && reserved)
    ok = (sp->reserved = changes_of(reserved, n, &sp->n_reserved)) != NULL;
  return ok && live_column(column, zc, live, unpadded, n);
}

static void space_free(hbm__index_space_t *sp) {
  hbm_analysis_free((hbm_analysis_t *)sp->a);
  free((void *)sp->reserved);
  free((void *)sp->level0_max);
  free((void *)sp->level0_at);
}

hbm_status_t hbm__index_write(const hbm_profile_t *p, const char *path) {
  struct stat st;
  if (stat(path, &st) != 0)
    return hbm__error(HBM_ERR_IO, "%s: cannot index: %s", path, strerror(errno));
  if (hbm__profile_is_summary(p))
    return HBM_OK; /* read from its index already */
  int n_spaces = hbm_profile_space_count(p);
  hbm__index_space_t *spaces = calloc((size_t)n_spaces + 1, sizeof *spaces);
  hbm__index_column_t *columns = calloc((size_t)n_spaces + 1, sizeof *columns), steps = {0};
  hbm__index_strings_t strings = {0};
  hbm_u64map_init(&strings.ids);
  ZSTD_CCtx *zc = ZSTD_createCCtx();
  bool ok = spaces && columns && zc && step_column(&steps, zc, p, &strings);
  for (int s = 0; ok && s < n_spaces; s++)
    ok = (spaces[s].a = hbm_analyze(p, s)) != NULL && space_pieces(&spaces[s], zc, p, &columns[s]);
  uint8_t *bytes = NULL;
  size_t len = 0;
  if (ok) {
    hbm__index_parts_t parts = {p, whole_buffer, p, spaces, &steps, &strings};
    ok = (bytes = hbm__index_assemble(&parts, &st, &len)) != NULL;
  }
  hbm_status_t status =
      ok ? hbm__index_store(path, bytes, len)
         : hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory indexing it", path);
  if (bytes)
    munmap(bytes, len);
  for (int s = 0; spaces && columns && s < n_spaces; s++) {
    space_free(&spaces[s]);
    hbm__index_column_free(&columns[s]);
  }
  free(spaces);
  free(columns);
  hbm__index_column_free(&steps);
  hbm__index_strings_free(&strings);
  ZSTD_freeCCtx(zc);
  return status;
}
