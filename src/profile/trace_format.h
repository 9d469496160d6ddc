/* trace_format.h — the .hbmtrace file format (docs/trace-format.md describes it byte by byte)
 * and the internal interfaces of its writer (trace_write.c) and reader (trace_read.c).
 *
 * A file is a fixed header (magic, version, kind, name, metadata) followed by self-delimiting
 * blocks: "HBMB", compressed length, raw length, CRC-32 of the compressed bytes, then one zstd
 * frame holding records. A record is a type byte, a varint body length and the body, so a
 * reader can skip types it does not know. Strings are defined once per file (STRING records)
 * and referred to by id. The recorder writes event records (EV_*: alloc/free/... with a time);
 * hbm_profile_save writes a profile's explicit form (STEP, BUFFER, ... records). */
#ifndef HBM_TRACE_FORMAT_H
#define HBM_TRACE_FORMAT_H

#include "base/base.h"

#include <stdbool.h>
#include <stdint.h>

#define HBM_TRACE_MAGIC "HBMTRACE"
#define HBM_TRACE_MAGIC_LEN 8
#define HBM_TRACE_VERSION 1
#define HBM_TRACE_HEADER_FIXED 20       /* magic, version, kind, body length, body CRC */
#define HBM_TRACE_HEADER_MAX (1u << 20) /* largest header body a reader accepts */
#define HBM_TRACE_BLOCK_MAGIC "HBMB"
#define HBM_TRACE_BLOCK_HEAD 16             /* magic, compressed length, raw length, CRC */
#define HBM_TRACE_BLOCK_RAW_MAX (16u << 20) /* largest raw block a reader accepts */
#define HBM_TRACE_BLOCK_TARGET (256u << 10) /* writers start a new block past this */
#define HBM_TRACE_MAX_META 4096             /* metadata entries a reader accepts */
#define HBM_TRACE_MAX_SPACES 4096           /* memory spaces a reader accepts */
#define HBM_TRACE_RAW_PER_BYTE 64           /* decompressed record bytes per file byte ... */
#define HBM_TRACE_RAW_BASE (1ull << 20)     /* ... plus this, at most (docs/limits.md) */

/* Record types. */
enum {
  HBM_REC_STRING = 0x01,     /* bytes; id = 1 + number of earlier STRING records (0 = none) */
  HBM_REC_SPACE = 0x02,      /* index, name, device, color (zz), limit */
  HBM_REC_STEP = 0x03,       /* time delta (zz), label */
  HBM_REC_BUFFER = 0x04,     /* space, address, size, size-unpadded (zz), start (zz),
                                end-start (zz), category, flags, op, shape, group, source,
                                opcode, label */
  HBM_REC_RESERVE = 0x05,    /* step (zz), space, op, address, size */
  HBM_REC_OOM = 0x06,        /* step (zz), space, requested, message */
  HBM_REC_MARKER = 0x07,     /* step (zz), kind, value (zz), text */
  HBM_REC_EV_ALLOC = 0x10,   /* time delta (zz), space, address, size, allocated-size (zz),
                                category, flags, op, shape, group, source */
  HBM_REC_EV_FREE = 0x11,    /* time delta (zz), space, address */
  HBM_REC_EV_RESERVE = 0x12, /* time delta (zz), space, op, address, size */
  HBM_REC_EV_OOM = 0x13,     /* time delta (zz), space, requested, message */
  HBM_REC_EV_MARKER = 0x14,  /* time delta (zz), kind, value (zz), text */
  HBM_REC_EV_CLOSE = 0x15,   /* time delta (zz), space: the device was closed */
  HBM_REC_END = 0x7e         /* event count: the file was closed cleanly */
};

/* EV_ALLOC flags */
#define HBM_EV_PREEXISTING 1u /* live before the capture began (listed by describe) */

/* ---- little-endian and varint helpers ---- */

static inline void hbm__put_le32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}
static inline uint32_t hbm__get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t hbm__zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t hbm__unzigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }
/* Writes v as LEB128 into p (room for 10 bytes); returns the bytes written. */
static inline size_t hbm__put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

/* CRC-32 (IEEE 802.3, as zlib's crc32) of n bytes, continuing from crc (0 to start). */
uint32_t hbm__crc32(uint32_t crc, const void *data, size_t n);

/* ---- writer (trace_write.c) ---- */

typedef struct hbm_trace_writer hbm_trace_writer_t;

/* Creates path (exclusive: fail if it exists) and writes the header. meta holds n_meta
 * key/value pairs. level: zstd compression level. */
hbm_trace_writer_t *hbm__tw_create(const char *path, bool exclusive, hbm_profile_kind_t kind,
                                   const char *name, const char *const (*meta)[2], size_t n_meta,
                                   int level);
/* Compresses the records gathered so far into a block and appends it to the file. */
hbm_status_t hbm__tw_flush(hbm_trace_writer_t *w);
/* True once the current block is big enough to be flushed. */
bool hbm__tw_block_full(const hbm_trace_writer_t *w);
/* Writes an END record (when clean), flushes, closes the file and frees w. Returns the first
 * error met while writing, if any. */
hbm_status_t hbm__tw_close(hbm_trace_writer_t *w, bool clean);
/* Bytes written to the file so far and the number of event records. */
uint64_t hbm__tw_file_bytes(const hbm_trace_writer_t *w);

/* Explicit records (a profile as it is). Errors are kept and returned by flush/close. */
void hbm__tw_space(hbm_trace_writer_t *w, int index, const char *name, const char *device,
                   int color, uint64_t limit);
void hbm__tw_step(hbm_trace_writer_t *w, int64_t time_ns, const char *label);
void hbm__tw_buffer(hbm_trace_writer_t *w, const hbm_buffer_t *b);
void hbm__tw_reserve(hbm_trace_writer_t *w, const hbm_reserve_event_t *e);
void hbm__tw_oom(hbm_trace_writer_t *w, const hbm_oom_event_t *e);
void hbm__tw_marker(hbm_trace_writer_t *w, const hbm_marker_t *m);

/* Event records (the recorder): time in ns since the capture began. */
void hbm__tw_ev_alloc(hbm_trace_writer_t *w, int64_t time_ns, int space, uint64_t address,
                      uint64_t size, uint64_t allocated, const hbm_tag_t *tag, unsigned flags);
/* The same for a tag (not NULL) whose strings stay valid and unchanged until the next
 * hbm__tw_forget_stable: they are found by address instead of by content. */
void hbm__tw_ev_alloc_stable(hbm_trace_writer_t *w, int64_t time_ns, int space, uint64_t address,
                             uint64_t size, uint64_t allocated, const hbm_tag_t *tag,
                             unsigned flags);
void hbm__tw_forget_stable(hbm_trace_writer_t *w);
void hbm__tw_ev_free(hbm_trace_writer_t *w, int64_t time_ns, int space, uint64_t address);
void hbm__tw_ev_reserve(hbm_trace_writer_t *w, int64_t time_ns, int space, hbm_reserve_op_t op,
                        uint64_t address, uint64_t size);
void hbm__tw_ev_oom(hbm_trace_writer_t *w, int64_t time_ns, int space, uint64_t requested,
                    const char *message);
void hbm__tw_ev_marker(hbm_trace_writer_t *w, int64_t time_ns, hbm_marker_kind_t kind,
                       int64_t value, const char *text);
void hbm__tw_ev_close(hbm_trace_writer_t *w, int64_t time_ns, int space);

/* ---- reader (trace_read.c) ---- */

/* The raw (decompressed) bytes the file's block headers announce, without reading the blocks:
 * what a reader would decode (to tell a file too big for memory before reading it). */
uint64_t hbm__trace_raw_bytes(const uint8_t *data, size_t len);
/* True when data starts with the .hbmtrace magic. */
bool hbm__trace_is(const void *data, size_t len);
/* Events are replayed as they are read through a window of this many (trace_read.c says
 * how); a file whose events come further out of time order is read again, sorted whole. Tests
 * make it small. */
extern size_t hbm__trace_window;
/* How many files were read again so (since the process began; for tests). */
uint64_t hbm__trace_rereads(void);
/* Builds a profile from a whole .hbmtrace file in memory. name is used in messages.
 * max_raw_bytes bounds the total decompressed size (0: a default that scales with len), so a
 * small hostile file cannot make the reader allocate gigabytes. */
hbm_profile_t *hbm__trace_parse(const uint8_t *data, size_t len, const char *name,
                                uint64_t max_raw_bytes);
/* The same read as a summary (hbm__profile_stream): its index stream holds what it has. */
hbm_profile_t *hbm__trace_parse_summary(const uint8_t *data, size_t len, const char *name);

#endif /* HBM_TRACE_FORMAT_H */
