/* json_out.h — JSON text helpers shared by the report (report.c) and the Chrome export
 * (export_chrome.c): profiles come from files and may hold any bytes, while JSON must be
 * valid UTF-8, so every string goes through here. */
#ifndef HBM_JSON_OUT_H
#define HBM_JSON_OUT_H

#include "base/base.h"

#include <jansson.h>

/* Appends s as a quoted JSON string ("null" for NULL); invalid UTF-8 becomes U+FFFD. */
void hbm__json_quote(hbm_strbuf_t *sb, const char *s);
/* A jansson string for s (json null for NULL), with invalid UTF-8 replaced. */
json_t *hbm__json_string(const char *s);
/* A byte count as a JSON integer: at or past HBM_BYTES_MAX (a saturated total, or a size no
 * JSON integer holds) it is HBM_BYTES_MAX, never wrapped to a negative number. */
static inline json_int_t hbm__json_bytes(uint64_t v) {
  return (json_int_t)(v < HBM_BYTES_MAX ? v : HBM_BYTES_MAX);
}
/* Writes `text` to out; HBM_ERR_IO if the stream failed. */
hbm_status_t hbm__write_out(FILE *out, const char *text, size_t len, const char *what);
/* Writes root (consumed; NULL means out of memory) indented, with a final newline. */
hbm_status_t hbm__write_json(FILE *out, json_t *root, const char *what);

#endif /* HBM_JSON_OUT_H */
