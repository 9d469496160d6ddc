/* trace_write.c — writes .hbmtrace files (docs/trace-format.md): the header, then records
 * gathered into blocks that are compressed with zstd, checksummed and appended. The recorder
 * (recorder.c) uses it from its writer thread for event records; hbm_profile_save uses it to
 * store any profile (runtime or plan) in its explicit form so that loading gives it back
 * exactly. A writer is not thread-safe: its users serialise access. */
#include "profile/trace_format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define MAX_STRING (1u << 20) /* longer strings are cut: no tag or message needs more */
#define MAX_FIELDS_BYTES 192  /* the fixed fields of any record, varint-encoded */

struct hbm_trace_writer {
  int fd;
  char *path;
  int level;
  hbm_status_t status; /* first error, kept until close */
  char error[512];
  uint8_t *raw; /* records of the block being gathered */
  size_t len, cap;
  int64_t last_time; /* delta base for times; reset at every block */
  hbm_intern_t *strings;
  hbm_u64map_t string_ids; /* interned pointer → id */
  hbm_u64map_t stable_ids; /* caller's stable pointer → id (hbm__tw_ev_alloc_stable) */
  uint64_t n_strings;
  uint64_t n_events;
  uint64_t file_bytes;
  ZSTD_CCtx *cctx;
  uint8_t *zbuf;
  size_t zcap;
};

/* ---- CRC-32 ---- */

/* zlib's (the format names it: docs/trace-format.md), for blocks of any size. */
uint32_t hbm__crc32(uint32_t crc, const void *data, size_t n) {
  /* zlib answers a NULL buffer with its initial value, not `crc`: an empty piece (which may
   * have no buffer at all) leaves the running sum as it is */
  return n ? (uint32_t)crc32_z(crc, data, n) : crc;
}

/* ---- errors and raw output ---- */

static void fail(hbm_trace_writer_t *w, hbm_status_t status, const char *fmt, const char *detail) {
  if (w->status != HBM_OK)
    return;
  w->status = status;
  snprintf(w->error, sizeof w->error, fmt, w->path, detail);
}

static bool write_all(hbm_trace_writer_t *w, const uint8_t *data, size_t n) {
  while (n > 0) {
    ssize_t k = write(w->fd, data, n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      fail(w, HBM_ERR_IO, "%s: cannot write: %s", strerror(k < 0 ? errno : EIO));
      return false;
    }
    data += k;
    n -= (size_t)k;
    w->file_bytes += (uint64_t)k;
  }
  return true;
}

static bool reserve_raw(hbm_trace_writer_t *w, size_t extra) {
  if (w->status != HBM_OK)
    return false;
  if (w->len + extra <= w->cap)
    return true;
  size_t cap = w->cap ? w->cap : HBM_TRACE_BLOCK_TARGET + 4096;
  while (cap < w->len + extra)
    cap *= 2;
  uint8_t *grown = realloc(w->raw, cap);
  if (!grown) {
    fail(w, HBM_ERR_HOST_MEMORY, "%s: out of host memory %s", "gathering a block");
    return false;
  }
  w->raw = grown;
  w->cap = cap;
  return true;
}

static void put_record(hbm_trace_writer_t *w, int type, const uint8_t *body, size_t n) {
  if (!reserve_raw(w, n + 11))
    return;
  w->raw[w->len++] = (uint8_t)type;
  w->len += hbm__put_varint(w->raw + w->len, n);
  memcpy(w->raw + w->len, body, n);
  w->len += n;
}

/* The id of s in this file, writing its STRING record the first time (0 for NULL). */
static uint64_t string_id(hbm_trace_writer_t *w, const char *s) {
  if (!s || w->status != HBM_OK)
    return 0;
  size_t n = strnlen(s, MAX_STRING);
  const char *key = hbm_intern_n(w->strings, s, n);
  uint64_t id;
  if (!key) {
    fail(w, HBM_ERR_HOST_MEMORY, "%s: out of host memory %s", "interning a string");
    return 0;
  }
  if (hbm_u64map_get(&w->string_ids, (uint64_t)(uintptr_t)key, &id))
    return id;
  id = ++w->n_strings;
  if (!hbm_u64map_put(&w->string_ids, (uint64_t)(uintptr_t)key, id)) {
    fail(w, HBM_ERR_HOST_MEMORY, "%s: out of host memory %s", "numbering a string");
    return 0;
  }
  put_record(w, HBM_REC_STRING, (const uint8_t *)key, n);
  return id;
}

/* A record body under construction: fixed fields only (strings are ids). Declared without
 * an initializer: zeroing its bytes for every record cost more than encoding it. */
typedef struct body {
  uint8_t bytes[MAX_FIELDS_BYTES];
  size_t n;
} body_t;

static void put_u(body_t *b, uint64_t v) { b->n += hbm__put_varint(b->bytes + b->n, v); }
static void put_s(body_t *b, int64_t v) { put_u(b, hbm__zigzag(v)); }

/* Starts a record: a full block is flushed first, so a record and its strings share a block. */
static void begin_record(hbm_trace_writer_t *w) {
  if (hbm__tw_block_full(w))
    hbm__tw_flush(w);
}

static void put_time(hbm_trace_writer_t *w, body_t *b, int64_t time_ns) {
  put_s(b, (int64_t)((uint64_t)time_ns - (uint64_t)w->last_time));
  w->last_time = time_ns;
}

/* ---- the writer ---- */

static bool write_header(hbm_trace_writer_t *w, hbm_profile_kind_t kind, const char *name,
                         const char *const (*meta)[2], size_t n_meta) {
  hbm_strbuf_t body;
  hbm_strbuf_init(&body);
  uint8_t v[10];
  name = name ? name : "";
  hbm_strbuf_append(&body, (const char *)v, hbm__put_varint(v, strlen(name)));
  hbm_strbuf_puts(&body, name);
  hbm_strbuf_append(&body, (const char *)v, hbm__put_varint(v, n_meta));
  for (size_t i = 0; i < n_meta; i++)
    for (int k = 0; k < 2; k++) {
      const char *s = meta[i][k] ? meta[i][k] : "";
      hbm_strbuf_append(&body, (const char *)v, hbm__put_varint(v, strlen(s)));
      hbm_strbuf_puts(&body, s);
    }
  if (body.failed || body.len > HBM_TRACE_HEADER_MAX) {
    hbm_strbuf_free(&body);
    fail(w, HBM_ERR_INVALID, "%s: %s", "the header (name and metadata) is too large");
    return false;
  }
  uint8_t fixed[HBM_TRACE_HEADER_FIXED];
  memcpy(fixed, HBM_TRACE_MAGIC, HBM_TRACE_MAGIC_LEN);
  fixed[8] = HBM_TRACE_VERSION, fixed[9] = 0;
  fixed[10] = (uint8_t)kind, fixed[11] = 0;
  hbm__put_le32(fixed + 12, (uint32_t)body.len);
  hbm__put_le32(fixed + 16, hbm__crc32(0, body.data, body.len));
  bool ok = write_all(w, fixed, sizeof fixed) &&
            write_all(w, (const uint8_t *)hbm_strbuf_str(&body), body.len);
  hbm_strbuf_free(&body);
  return ok;
}

static void writer_free(hbm_trace_writer_t *w) {
  if (w->fd >= 0)
    close(w->fd);
  free(w->path);
  free(w->raw);
  free(w->zbuf);
  ZSTD_freeCCtx(w->cctx);
  hbm_intern_free(w->strings);
  hbm_u64map_free(&w->string_ids);
  hbm_u64map_free(&w->stable_ids);
  free(w);
}

hbm_trace_writer_t *hbm__tw_create(const char *path, bool exclusive, hbm_profile_kind_t kind,
                                   const char *name, const char *const (*meta)[2], size_t n_meta,
                                   int level) {
  hbm_trace_writer_t *w = calloc(1, sizeof *w);
  if (!w) {
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory opening a profile", path);
    return NULL;
  }
  w->fd = -1;
  w->level = level;
  hbm_u64map_init(&w->string_ids);
  hbm_u64map_init(&w->stable_ids);
  w->path = hbm__strdup(path);
  w->strings = hbm_intern_new();
  w->cctx = ZSTD_createCCtx();
  if (!w->path || !w->strings || !w->cctx) {
    writer_free(w);
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory opening a profile", path);
    return NULL;
  }
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC);
  w->fd = open(path, flags, 0644);
  if (w->fd < 0) {
    hbm__error(HBM_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    writer_free(w);
    return NULL;
  }
  if (!write_header(w, kind, name, meta, n_meta)) {
    hbm__error_text(w->status, w->error);
    writer_free(w);
    return NULL;
  }
  return w;
}

bool hbm__tw_block_full(const hbm_trace_writer_t *w) { return w->len >= HBM_TRACE_BLOCK_TARGET; }

uint64_t hbm__tw_file_bytes(const hbm_trace_writer_t *w) { return w->file_bytes; }

hbm_status_t hbm__tw_flush(hbm_trace_writer_t *w) {
  if (w->status == HBM_OK && w->len > 0) {
    size_t bound = ZSTD_compressBound(w->len) + HBM_TRACE_BLOCK_HEAD;
    if (bound > w->zcap) {
      uint8_t *grown = realloc(w->zbuf, bound);
      if (!grown)
        fail(w, HBM_ERR_HOST_MEMORY, "%s: out of host memory %s", "compressing a block");
      else
        w->zbuf = grown, w->zcap = bound;
    }
    if (w->status == HBM_OK) {
      size_t c = ZSTD_compressCCtx(w->cctx, w->zbuf + HBM_TRACE_BLOCK_HEAD,
                                   w->zcap - HBM_TRACE_BLOCK_HEAD, w->raw, w->len, w->level);
      if (ZSTD_isError(c)) {
        fail(w, HBM_ERR_INTERNAL, "%s: zstd: %s", ZSTD_getErrorName(c));
      } else {
        memcpy(w->zbuf, HBM_TRACE_BLOCK_MAGIC, 4);
        hbm__put_le32(w->zbuf + 4, (uint32_t)c);
        hbm__put_le32(w->zbuf + 8, (uint32_t)w->len);
        hbm__put_le32(w->zbuf + 12, hbm__crc32(0, w->zbuf + HBM_TRACE_BLOCK_HEAD, c));
        write_all(w, w->zbuf, c + HBM_TRACE_BLOCK_HEAD);
      }
    }
    w->len = 0;
    w->last_time = 0;
  }
  if (w->status != HBM_OK)
    return hbm__error_text(w->status, w->error);
  return HBM_OK;
}

hbm_status_t hbm__tw_close(hbm_trace_writer_t *w, bool clean) {
  if (!w)
    return HBM_OK;
  if (clean) {
    body_t b;
    b.n = 0;
    put_u(&b, w->n_events);
    put_record(w, HBM_REC_END, b.bytes, b.n);
  }
  hbm__tw_flush(w);
  if (w->fd >= 0 && close(w->fd) != 0)
    fail(w, HBM_ERR_IO, "%s: cannot close: %s", strerror(errno));
  w->fd = -1;
  hbm_status_t s = w->status;
  if (s != HBM_OK)
    hbm__error_text(s, w->error);
  writer_free(w);
  return s;
}

/* ---- explicit records ---- */

void hbm__tw_space(hbm_trace_writer_t *w, int index, const char *name, const char *device,
                   int color, uint64_t limit) {
  begin_record(w);
  uint64_t name_id = string_id(w, name), device_id = string_id(w, device);
  body_t b;
  b.n = 0;
  put_u(&b, (uint64_t)index);
  put_u(&b, name_id);
  put_u(&b, device_id);
  put_s(&b, color);
  put_u(&b, limit);
  put_record(w, HBM_REC_SPACE, b.bytes, b.n);
}

void hbm__tw_step(hbm_trace_writer_t *w, int64_t time_ns, const char *label) {
  begin_record(w);
  uint64_t label_id = string_id(w, label);
  body_t b;
  b.n = 0;
  put_time(w, &b, time_ns);
  put_u(&b, label_id);
  put_record(w, HBM_REC_STEP, b.bytes, b.n);
}

void hbm__tw_buffer(hbm_trace_writer_t *w, const hbm_buffer_t *buf) {
  begin_record(w);
  const char *strings[] = {buf->op, buf->shape, buf->group, buf->source, buf->opcode, buf->label};
  uint64_t ids[HBM_ARRAY_LEN(strings)];
  for (size_t i = 0; i < HBM_ARRAY_LEN(strings); i++)
    ids[i] = string_id(w, strings[i]);
  body_t b;
  b.n = 0;
  put_u(&b, (uint64_t)buf->space);
  put_u(&b, buf->address);
  put_u(&b, buf->size);
  put_s(&b, (int64_t)(buf->size - buf->unpadded_size));
  put_s(&b, buf->start);
  put_s(&b, (int64_t)((uint64_t)buf->end - (uint64_t)buf->start));
  put_u(&b, (uint64_t)buf->category);
  put_u(&b, buf->flags);
  for (size_t i = 0; i < HBM_ARRAY_LEN(ids); i++)
    put_u(&b, ids[i]);
  put_record(w, HBM_REC_BUFFER, b.bytes, b.n);
}

void hbm__tw_reserve(hbm_trace_writer_t *w, const hbm_reserve_event_t *e) {
  begin_record(w);
  body_t b;
  b.n = 0;
  put_s(&b, e->step);
  put_u(&b, (uint64_t)e->space);
  put_u(&b, (uint64_t)e->op);
  put_u(&b, e->address);
  put_u(&b, e->size);
  put_record(w, HBM_REC_RESERVE, b.bytes, b.n);
}

void hbm__tw_oom(hbm_trace_writer_t *w, const hbm_oom_event_t *e) {
  begin_record(w);
  uint64_t message_id = string_id(w, e->message);
  body_t b;
  b.n = 0;
  put_s(&b, e->step);
  put_u(&b, (uint64_t)e->space);
  put_u(&b, e->requested);
  put_u(&b, message_id);
  put_record(w, HBM_REC_OOM, b.bytes, b.n);
}

void hbm__tw_marker(hbm_trace_writer_t *w, const hbm_marker_t *m) {
  begin_record(w);
  uint64_t text_id = string_id(w, m->text);
  body_t b;
  b.n = 0;
  put_s(&b, m->step);
  put_u(&b, (uint64_t)m->kind);
  put_s(&b, m->value);
  put_u(&b, text_id);
  put_record(w, HBM_REC_MARKER, b.bytes, b.n);
}

/* ---- event records ---- */

static void ev_alloc_ids(hbm_trace_writer_t *w, int64_t time_ns, int space, uint64_t address,
                         uint64_t size, uint64_t allocated, hbm_category_t category, unsigned flags,
                         const uint64_t ids[4]) {
  begin_record(w);
  body_t b;
  b.n = 0;
  put_time(w, &b, time_ns);
  put_u(&b, (uint64_t)space);
  put_u(&b, address);
  put_u(&b, size);
  put_s(&b, (int64_t)(allocated - size));
  put_u(&b, (uint64_t)category);
  put_u(&b, flags);
  for (int i = 0; i < 4; i++)
    put_u(&b, ids[i]);
  put_record(w, HBM_REC_EV_ALLOC, b.bytes, b.n);
  w->n_events++;
}

void hbm__tw_ev_alloc(hbm_trace_writer_t *w, int64_t time_ns, int space, uint64_t address,
                      uint64_t size, uint64_t allocated, const hbm_tag_t *tag, unsigned flags) {
  hbm_tag_t none = {0};
  const hbm_tag_t *t = tag ? tag : &none;
  uint64_t ids[4] = {string_id(w, t->op), string_id(w, t->shape), string_id(w, t->group),
                     string_id(w, t->source)};
  ev_alloc_ids(w, time_ns, space, address, size, allocated, t->category, flags, ids);
}

/* The id of a string that stays valid and unchanged until hbm__tw_forget_stable: found by
 * its address, so a tag seen a million times is hashed once. */
static uint64_t stable_string_id(hbm_trace_writer_t *w, const char *s) {
  uint64_t id = 0;
  if (!s || hbm_u64map_get(&w->stable_ids, (uint64_t)(uintptr_t)s, &id))
    return id;
  id = string_id(w, s);
  if (id && !hbm_u64map_put(&w->stable_ids, (uint64_t)(uintptr_t)s, id))
    fail(w, HBM_ERR_HOST_MEMORY, "%s: out of host memory %s", "numbering a string");
  return id;
}

void hbm__tw_ev_alloc_stable(hbm_trace_writer_t *w, int64_t time_ns, int space, uint64_t address,
                             uint64_t size, uint64_t allocated, const hbm_tag_t *tag,
                             unsigned flags) {
  uint64_t ids[4] = {stable_string_id(w, tag->op), stable_string_id(w, tag->shape),
                     stable_string_id(w, tag->group), stable_string_id(w, tag->source)};
  ev_alloc_ids(w, time_ns, space, address, size, allocated, tag->category, flags, ids);
}

void hbm__tw_forget_stable(hbm_trace_writer_t *w) {
  hbm_u64map_free(&w->stable_ids);
  hbm_u64map_init(&w->stable_ids);
}

void hbm__tw_ev_free(hbm_trace_writer_t *w, int64_t time_ns, int space, uint64_t address) {
  begin_record(w);
  body_t b;
  b.n = 0;
  put_time(w, &b, time_ns);
  put_u(&b, (uint64_t)space);
  put_u(&b, address);
  put_record(w, HBM_REC_EV_FREE, b.bytes, b.n);
  w->n_events++;
}

void hbm__tw_ev_reserve(hbm_trace_writer_t *w, int64_t time_ns, int space, hbm_reserve_op_t op,
                        uint64_t address, uint64_t size) {
  begin_record(w);
  body_t b;
  b.n = 0;
  put_time(w, &b, time_ns);
  put_u(&b, (uint64_t)space);
  put_u(&b, (uint64_t)op);
  put_u(&b, address);
  put_u(&b, size);
  put_record(w, HBM_REC_EV_RESERVE, b.bytes, b.n);
  w->n_events++;
}

void hbm__tw_ev_oom(hbm_trace_writer_t *w, int64_t time_ns, int space, uint64_t requested,
                    const char *message) {
  begin_record(w);
  uint64_t message_id = string_id(w, message);
  body_t b;
  b.n = 0;
  put_time(w, &b, time_ns);
  put_u(&b, (uint64_t)space);
  put_u(&b, requested);
  put_u(&b, message_id);
  put_record(w, HBM_REC_EV_OOM, b.bytes, b.n);
  w->n_events++;
}

void hbm__tw_ev_marker(hbm_trace_writer_t *w, int64_t time_ns, hbm_marker_kind_t kind,
                       int64_t value, const char *text) {
  begin_record(w);
  uint64_t text_id = string_id(w, text);
  body_t b;
  b.n = 0;
  put_time(w, &b, time_ns);
  put_u(&b, (uint64_t)kind);
  put_s(&b, value);
  put_u(&b, text_id);
  put_record(w, HBM_REC_EV_MARKER, b.bytes, b.n);
  w->n_events++;
}

void hbm__tw_ev_close(hbm_trace_writer_t *w, int64_t time_ns, int space) {
  begin_record(w);
  body_t b;
  b.n = 0;
  put_time(w, &b, time_ns);
  put_u(&b, (uint64_t)space);
  put_record(w, HBM_REC_EV_CLOSE, b.bytes, b.n);
  w->n_events++;
}

/* ---- hbm_profile_save ---- */

static void save_records(hbm_trace_writer_t *w, const hbm_profile_t *p) {
  for (int i = 0; i < hbm_profile_space_count(p); i++) {
    const hbm_space_info_t *s = hbm_profile_space(p, i);
    hbm__tw_space(w, i, s->name, s->device, s->color, s->limit);
  }
  for (int64_t i = 0; i < hbm_profile_step_count(p); i++)
    hbm__tw_step(w, hbm_profile_step_time(p, i), hbm_profile_step_label(p, i));
  for (int64_t i = 0; i < hbm_profile_buffer_count(p); i++)
    hbm__tw_buffer(w, hbm_profile_buffer(p, i));
  for (size_t i = 0; i < hbm_profile_reserve_count(p); i++)
    hbm__tw_reserve(w, hbm_profile_reserve(p, i));
  for (size_t i = 0; i < hbm_profile_oom_count(p); i++)
    hbm__tw_oom(w, hbm_profile_oom(p, i));
  for (size_t i = 0; i < hbm_profile_marker_count(p); i++)
    hbm__tw_marker(w, hbm_profile_marker(p, i));
}

hbm_status_t hbm_profile_save(const hbm_profile_t *p, const char *path) {
  if (!p || !path)
    return hbm__error(HBM_ERR_INVALID, "hbm_profile_save needs a profile and a path");
  size_t n_meta = hbm_profile_meta_count(p);
  const char *(*meta)[2] = calloc(n_meta + 1, sizeof *meta);
  if (!meta)
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory saving a profile", path);
  for (size_t i = 0; i < n_meta; i++) {
    meta[i][0] = hbm_profile_meta_key(p, i);
    meta[i][1] = hbm_profile_meta(p, meta[i][0]);
  }
  /* Written beside the target and renamed, so a reader never sees half a profile. */
  hbm_strbuf_t tmp;
  hbm_strbuf_init(&tmp);
  hbm_strbuf_printf(&tmp, "%s.tmp%ld", path, (long)getpid());
  if (tmp.failed) {
    free(meta);
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory saving a profile", path);
  }
  hbm_trace_writer_t *w = hbm__tw_create(tmp.data, false, hbm_profile_kind(p), hbm_profile_name(p),
                                         (const char *const(*)[2])meta, n_meta, 3);
  free(meta);
  if (!w) {
    hbm_strbuf_free(&tmp);
    return hbm_last_status();
  }
  save_records(w, p);
  hbm_status_t s = hbm__tw_close(w, true);
  if (s == HBM_OK && rename(tmp.data, path) != 0)
    s = hbm__error(HBM_ERR_IO, "%s: cannot rename %s into place: %s", path, tmp.data,
                   strerror(errno));
  if (s != HBM_OK)
    unlink(tmp.data);
  hbm_strbuf_free(&tmp);
  return s;
}
