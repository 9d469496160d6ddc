/* index_write.c — writes a profile's index (index.h; the format is in docs/trace-format.md,
 * "The profile index"): a 64-byte header that names the profile's file as it was (size, mtime,
 * inode) with the body's checksum, then sections: the strings, the profile (metadata, spaces,
 * counts), OOM events and markers, the buffers live at any space's peak, each space's stored
 * analysis with the maxima of its live bytes over blocks of 64·2^k steps, and the per-step
 * values (time, label, the op of the step, live bytes per space) in zstd blocks of 4096
 * steps. Written to a temporary file and renamed, so a reader never sees half of one. */
#include "profile/index.h"

#include "profile/trace_format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

enum { SEC_STRINGS = 1, SEC_PROFILE, SEC_EVENTS, SEC_BUFFERS, SEC_SPACE, SEC_STEPS, SEC_BLOCKS };

typedef struct out {
  uint8_t *d;
  size_t n, cap;
  bool failed;
} out_t;

typedef struct writer {
  const hbm_profile_t *p;
  out_t body, blocks, section;
  hbm_u64map_t string_ids; /* string pointer → id + 1 */
  const char **strings;
  size_t n_strings, cap_strings;
  hbm_analysis_t **analyses;
  int n_spaces;
  ZSTD_CCtx *zc;
  int64_t *step_buffer;  /* per step: the buffer it is about (runtime), else NULL */
  uint8_t *step_is_free; /* per step: that buffer was freed there */
} writer_t;

/* ---- bytes ---- */

static void put(out_t *o, const void *p, size_t n) {
  if (o->failed)
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

static void put_varint(out_t *o, uint64_t v) {
  uint8_t b[10];
  put(o, b, hbm__put_varint(b, v));
}

/* The id of a string (0: none), numbered as first met. */
static uint64_t string_id(writer_t *w, const char *s) {
  uint64_t id;
  if (!s)
    return 0;
  if (hbm_u64map_get(&w->string_ids, (uintptr_t)s, &id))
    return id;
  const char **grown =
      hbm__grow_array(w->strings, &w->cap_strings, w->n_strings + 1, sizeof *grown, 256);
  if (!grown || !hbm_u64map_put(&w->string_ids, (uintptr_t)s, w->n_strings + 1)) {
    w->body.failed = true;
    return 0;
  }
  w->strings = grown;
  w->strings[w->n_strings++] = s;
  return w->n_strings;
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
  size_t total = 0, n;
  for (int s = 0; s < w->n_spaces; s++) {
    hbm_analysis_buffers_at_peak(w->analyses[s], &n);
    total += n;
  }
  int64_t *idx = malloc((total + 1) * sizeof *idx);
  if (!idx) {
    w->body.failed = true;
    return;
  }
  size_t k = 0;
  for (int s = 0; s < w->n_spaces; s++) {
    const int64_t *at = hbm_analysis_buffers_at_peak(w->analyses[s], &n);
    memcpy(idx + k, at, n * sizeof *idx);
    k += n;
  }
  qsort(idx, total, sizeof *idx, by_index);
  out_t *o = &w->section;
  put_u64(o, total);
  for (size_t i = 0; i < total; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(w->p, idx[i]);
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
                               string_id(w, b->stack)};
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
 * level from the one below, until one block holds them all. */
static void write_levels(out_t *o, const uint64_t *live, int64_t n) {
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
  for (uint64_t b = 0; b < count; b++) {
    int64_t best = (int64_t)b * HBM_INDEX_LEVEL0, end = best + HBM_INDEX_LEVEL0;
    for (int64_t s = best + 1; s < end && s < n; s++)
      if (live[s] > live[best])
        best = s;
    max[b] = live[best];
    at[b] = best;
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

/* Compressed blocks of per-step varints; the table says where each is in SEC_BLOCKS. */
typedef void (*column_fn)(writer_t *w, out_t *raw, int64_t from, int64_t to, int space);

static void write_blocks(writer_t *w, out_t *table, int64_t n, column_fn fn, int space) {
  out_t raw = {0};
  uint64_t count = n > 0 ? ((uint64_t)n + HBM_INDEX_BLOCK_STEPS - 1) / HBM_INDEX_BLOCK_STEPS : 0;
  put_u64(table, count);
  for (uint64_t b = 0; b < count; b++) {
    int64_t from = (int64_t)b * HBM_INDEX_BLOCK_STEPS;
    int64_t to = from + HBM_INDEX_BLOCK_STEPS > n ? n : from + HBM_INDEX_BLOCK_STEPS;
    raw.n = 0;
    fn(w, &raw, from, to, space);
    size_t bound = ZSTD_compressBound(raw.n), at = w->blocks.n;
    if (raw.failed || w->blocks.failed) {
      w->body.failed = true;
      break;
    }
    if (w->blocks.cap - w->blocks.n < bound) {
      size_t need = w->blocks.n + bound;
      uint8_t *grown = realloc(w->blocks.d, need * 2);
      if (!grown) {
        w->body.failed = true;
        break;
      }
      w->blocks.d = grown;
      w->blocks.cap = need * 2;
    }
    size_t c = ZSTD_compressCCtx(w->zc, w->blocks.d + at, bound, raw.d, raw.n, 1);
    if (ZSTD_isError(c)) {
      w->body.failed = true;
      break;
    }
    w->blocks.n += c;
    put_u64(table, at);
    put_u32(table, (uint32_t)c);
    put_u32(table, (uint32_t)raw.n);
  }
  free(raw.d);
}

/* A space's live bytes (and unpadded, when they differ), as zigzag deltas. */
static void live_column(writer_t *w, out_t *raw, int64_t from, int64_t to, int space) {
  const uint64_t *live = hbm__analysis_series(w->analyses[space], 0);
  const uint64_t *unpadded = hbm__analysis_series(w->analyses[space], 1);
  uint64_t last = 0;
  for (int64_t s = from; s < to; s++, last = live[s - 1])
    put_varint(raw, hbm__zigzag((int64_t)(live[s] - last)));
  if (unpadded != live)
    for (int64_t s = from; s < to; s++)
      put_varint(raw, hbm__zigzag((int64_t)(live[s] - unpadded[s])));
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
  const hbm_analysis_t *a = w->analyses[space];
  const hbm_summary_t *sum = hbm_analysis_summary(a);
  out_t *o = &w->section;
  put_u64(o, (uint64_t)space);
  write_summary(o, sum);
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
  /* reserved bytes where they change */
  const uint64_t *reserved = hbm__analysis_series(a, 2);
  int64_t steps = hbm_profile_step_count(w->p), changes = 0;
  for (int64_t s = 0; reserved && s < steps; s++)
    changes += s == 0 || reserved[s] != reserved[s - 1];
  put_u64(o, reserved ? 1 : 0);
  put_u64(o, (uint64_t)changes);
  for (int64_t s = 0; reserved && s < steps; s++)
    if (s == 0 || reserved[s] != reserved[s - 1]) {
      put_u64(o, (uint64_t)s);
      put_u64(o, reserved[s]);
    }
  const uint64_t *live = hbm__analysis_series(a, 0);
  put_u64(o, hbm__analysis_series(a, 1) != live);
  write_levels(o, live, steps);
  write_blocks(w, o, steps, live_column, space);
  end_section(w, SEC_SPACE);
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

/* Per step: time (delta), label, and the op of the buffer the step is about (id * 4 + 1 for
 * an allocation, + 2 for a free). */
static void step_column(writer_t *w, out_t *raw, int64_t from, int64_t to, int space) {
  (void)space;
  int64_t last = 0; /* each block on its own */
  for (int64_t s = from; s < to; s++) {
    int64_t t = hbm_profile_step_time(w->p, s);
    put_varint(raw, hbm__zigzag(t - last));
    last = t;
  }
  for (int64_t s = from; s < to; s++)
    put_varint(raw, string_id(w, hbm_profile_step_label(w->p, s)));
  for (int64_t s = from; s < to; s++) {
    int64_t b = w->step_buffer ? w->step_buffer[s] : -1;
    const hbm_buffer_t *buf = b >= 0 ? hbm_profile_buffer(w->p, b) : NULL;
    put_varint(raw, buf ? string_id(w, buf->op) * 4 + (w->step_is_free[s] ? 2 : 1) : 0);
  }
}

static void write_steps(writer_t *w) {
  if (hbm_profile_kind(w->p) == HBM_PROFILE_RUNTIME &&
      !(w->step_buffer = step_buffers(w->p, &w->step_is_free)))
    w->body.failed = true;
  write_blocks(w, &w->section, hbm_profile_step_count(w->p), step_column, 0);
  free(w->step_buffer);
  free(w->step_is_free);
  w->step_buffer = NULL;
  w->step_is_free = NULL;
  end_section(w, SEC_STEPS);
}

/* Strings, each NUL-terminated, after a table of their offsets. */
static void write_strings(writer_t *w, out_t *o) {
  put_u64(o, w->n_strings);
  uint64_t at = 0;
  for (size_t i = 0; i < w->n_strings; i++) {
    put_u64(o, at);
    at += strlen(w->strings[i]) + 1;
  }
  for (size_t i = 0; i < w->n_strings; i++)
    put(o, w->strings[i], strlen(w->strings[i]) + 1);
}

/* ---- the file ---- */

static bool write_file(const char *target, const uint8_t *header, const out_t *parts,
                       size_t n_parts) {
  char tmp[4300];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", target, (long)getpid()) >= (int)sizeof tmp)
    return false;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return false;
  bool ok = write(fd, header, HBM_INDEX_HEADER) == HBM_INDEX_HEADER;
  for (size_t i = 0; ok && i < n_parts; i++)
    for (size_t done = 0; ok && done < parts[i].n;) {
      ssize_t k = write(fd, parts[i].d + done, parts[i].n - done);
      ok = k > 0 || (k < 0 && errno == EINTR);
      done += k > 0 ? (size_t)k : 0;
    }
  ok = close(fd) == 0 && ok;
  if (ok && rename(tmp, target) != 0)
    ok = false;
  if (!ok)
    unlink(tmp);
  return ok;
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

hbm_status_t hbm__index_write(const hbm_profile_t *p, const char *path) {
  struct stat st;
  char target[4200];
  if (stat(path, &st) != 0)
    return hbm__error(HBM_ERR_IO, "%s: cannot index: %s", path, strerror(errno));
  if (hbm__profile_is_summary(p))
    return HBM_OK; /* read from its index already */
  if (!hbm__index_path(path, true, target, sizeof target))
    return hbm__error(HBM_ERR_IO, "%s: no writable place for its index", path);
  writer_t w = {.p = p, .n_spaces = hbm_profile_space_count(p), .zc = ZSTD_createCCtx()};
  hbm_u64map_init(&w.string_ids);
  w.analyses = calloc((size_t)w.n_spaces + 1, sizeof *w.analyses);
  bool ok = w.analyses && w.zc;
  for (int s = 0; ok && s < w.n_spaces; s++)
    ok = (w.analyses[s] = hbm_analyze(p, s)) != NULL;
  if (ok) {
    write_profile(&w);
    write_events(&w);
    write_buffers(&w);
    for (int s = 0; s < w.n_spaces; s++)
      write_space(&w, s);
    write_steps(&w);
    out_t strings = {0};
    write_strings(&w, &strings);
    /* the strings first: readers resolve ids as they go */
    out_t head = {0};
    put_u32(&head, SEC_STRINGS);
    put_u32(&head, 0);
    put_u64(&head, strings.n);
    put(&head, strings.d, strings.n);
    put(&head, (const uint8_t[8]){0}, (8 - strings.n % 8) % 8);
    put_u32(&w.body, SEC_BLOCKS);
    put_u32(&w.body, 0);
    put_u64(&w.body, w.blocks.n);
    ok = !head.failed && !w.body.failed && !strings.failed && !w.blocks.failed;
    out_t parts[3] = {head, w.body, w.blocks};
    uint32_t crc = 0;
    for (int i = 0; ok && i < 3; i++)
      crc = hbm__crc32(crc, parts[i].d, parts[i].n);
    uint8_t header[HBM_INDEX_HEADER];
    make_header(header, &st, head.n + w.body.n + w.blocks.n, crc);
    ok = ok && write_file(target, header, parts, 3);
    free(strings.d);
    free(head.d);
  }
  for (int s = 0; w.analyses && s < w.n_spaces; s++)
    hbm_analysis_free(w.analyses[s]);
  free(w.analyses);
  free(w.body.d);
  free(w.blocks.d);
  free(w.section.d);
  free(w.strings);
  hbm_u64map_free(&w.string_ids);
  ZSTD_freeCCtx(w.zc);
  return ok ? HBM_OK : hbm__error(HBM_ERR_IO, "%s: cannot write its index %s", path, target);
}
