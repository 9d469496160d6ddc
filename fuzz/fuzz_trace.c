/* fuzz_trace.c — the .hbmtrace reader (src/profile/trace_read.c) on any bytes: it must give a
 * profile or a message, never crash, and never decompress more than the limit it is given.
 * Random bytes rarely survive the checksums and zstd, so the input takes one of two forms:
 *   'R' kind records...  raw records, wrapped here into a valid file (blocks of up to 1 KiB)
 *                        so mutations reach the record parser and the event replay;
 *   anything else        a file, whose header and block checksums are recomputed first.
 * A profile it accepts is analysed and reported (text, JSON, Chrome trace) to /dev/null, so
 * odd but valid profiles exercise the analysis and the reports too. Each file is read twice,
 * its blocks unpacked in turn and on the thread ahead (trace_blocks.c): the two readings must
 * agree on the profile's size, its loss and any refusal. */
#include "hbm.h"
#include "profile/trace_blocks.h"
#include "profile/trace_format.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define MAX_RAW (4u << 20)
#define PIECE 1024

static size_t put_header(uint8_t *out, int kind) {
  static const uint8_t body[2] = {0, 0}; /* no name, no metadata */
  memcpy(out, HBM_TRACE_MAGIC, HBM_TRACE_MAGIC_LEN);
  out[8] = HBM_TRACE_VERSION, out[9] = 0, out[10] = (uint8_t)kind, out[11] = 0;
  hbm__put_le32(out + 12, sizeof body);
  hbm__put_le32(out + 16, hbm__crc32(0, body, sizeof body));
  memcpy(out + HBM_TRACE_HEADER_FIXED, body, sizeof body);
  return HBM_TRACE_HEADER_FIXED + sizeof body;
}

/* Raw records → a valid file, one block per PIECE bytes. NULL if out of memory. */
static uint8_t *wrap_records(const uint8_t *raw, size_t n, int kind, size_t *len) {
  size_t pieces = n / PIECE + 1;
  size_t cap =
      HBM_TRACE_HEADER_FIXED + 2 + pieces * (HBM_TRACE_BLOCK_HEAD + ZSTD_compressBound(PIECE));
  uint8_t *out = malloc(cap);
  if (!out)
    return NULL;
  size_t at = put_header(out, kind);
  for (size_t off = 0; off < n; off += PIECE) {
    size_t k = n - off < PIECE ? n - off : PIECE;
    size_t c = ZSTD_compress(out + at + HBM_TRACE_BLOCK_HEAD, cap - at - HBM_TRACE_BLOCK_HEAD,
                             raw + off, k, 1);
    if (ZSTD_isError(c))
      break;
    memcpy(out + at, HBM_TRACE_BLOCK_MAGIC, 4);
    hbm__put_le32(out + at + 4, (uint32_t)c);
    hbm__put_le32(out + at + 8, (uint32_t)k);
    hbm__put_le32(out + at + 12, hbm__crc32(0, out + at + HBM_TRACE_BLOCK_HEAD, c));
    at += HBM_TRACE_BLOCK_HEAD + c;
  }
  *len = at;
  return out;
}

/* Recomputes the header and block checksums of a file in place. */
static void fix_checksums(uint8_t *d, size_t len) {
  if (len < HBM_TRACE_HEADER_FIXED || !hbm__trace_is(d, len))
    return;
  uint32_t body = hbm__get_le32(d + 12);
  if (body > len - HBM_TRACE_HEADER_FIXED)
    return;
  hbm__put_le32(d + 16, hbm__crc32(0, d + HBM_TRACE_HEADER_FIXED, body));
  size_t at = HBM_TRACE_HEADER_FIXED + body;
  while (len - at >= HBM_TRACE_BLOCK_HEAD && !memcmp(d + at, HBM_TRACE_BLOCK_MAGIC, 4)) {
    uint32_t c = hbm__get_le32(d + at + 4);
    if (c > len - at - HBM_TRACE_BLOCK_HEAD)
      return;
    hbm__put_le32(d + at + 12, hbm__crc32(0, d + at + HBM_TRACE_BLOCK_HEAD, c));
    at += HBM_TRACE_BLOCK_HEAD + c;
  }
}

static bool same_text(const char *a, const char *b) {
  return (!a && !b) || (a && b && !strcmp(a, b));
}

/* The file read with its blocks unpacked ahead must be the one read in turn. */
static void check_ahead(const uint8_t *file, size_t len, const hbm_profile_t *p, const char *err) {
  size_t had = hbm__trace_ahead_min;
  hbm__trace_ahead_min = 0;
  hbm_profile_t *q = hbm__trace_parse(file, len, "fuzz.hbmtrace", MAX_RAW);
  hbm__trace_ahead_min = had;
  if (!p != !q || (!q && strcmp(err, hbm_last_error())))
    abort();
  if (q && (hbm_profile_buffer_count(p) != hbm_profile_buffer_count(q) ||
            hbm_profile_step_count(p) != hbm_profile_step_count(q) ||
            !same_text(hbm_profile_meta(p, "lost"), hbm_profile_meta(q, "lost"))))
    abort();
  hbm_profile_free(q);
}

static void exercise(const uint8_t *file, size_t len) {
  static FILE *sink;
  if (!sink && !(sink = fopen("/dev/null", "w")))
    return;
  hbm__trace_ahead_min = (size_t)-1;
  hbm_profile_t *p = hbm__trace_parse(file, len, "fuzz.hbmtrace", MAX_RAW);
  char err[1024];
  snprintf(err, sizeof err, "%s", p ? "" : hbm_last_error());
  check_ahead(file, len, p, err);
  if (!p) {
    if (!err[0])
      abort(); /* a refusal must say why */
    return;
  }
  hbm_report_text(p, -1, 80, sink);
  hbm_report_json(p, -1, sink);
  hbm_export_chrome(p, sink);
  hbm_profile_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *file;
  size_t len = size;
  if (size >= 2 && data[0] == 'R')
    file = wrap_records(data + 2, size - 2, data[1] & 1, &len);
  else if ((file = malloc(size ? size : 1)) != NULL) {
    memcpy(file, data, size);
    fix_checksums(file, size);
  }
  if (file)
    exercise(file, len);
  free(file);
  return 0;
}
