/* strbuf.c — a growable string for building long messages (OOM diagnoses, reports).
 * An allocation failure marks the builder failed instead of aborting; callers check
 * sb->failed once at the end. */
#include "base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hbm_strbuf_init(hbm_strbuf_t *sb) { memset(sb, 0, sizeof *sb); }

void hbm_strbuf_free(hbm_strbuf_t *sb) {
  free(sb->data);
  memset(sb, 0, sizeof *sb);
}

static bool strbuf_reserve(hbm_strbuf_t *sb, size_t extra) {
  if (sb->failed)
    return false;
  size_t need = sb->len + extra + 1;
  if (need <= sb->cap)
    return true;
  size_t cap = sb->cap ? sb->cap : 128;
  while (cap < need)
    cap *= 2;
  char *grown = realloc(sb->data, cap);
  if (!grown) {
    sb->failed = true;
    return false;
  }
  sb->data = grown;
  sb->cap = cap;
  return true;
}

void hbm_strbuf_append(hbm_strbuf_t *sb, const char *s, size_t n) {
  if (!strbuf_reserve(sb, n))
    return;
  memcpy(sb->data + sb->len, s, n);
  sb->len += n;
  sb->data[sb->len] = '\0';
}

void hbm_strbuf_puts(hbm_strbuf_t *sb, const char *s) { hbm_strbuf_append(sb, s, strlen(s)); }

void hbm_strbuf_vprintf(hbm_strbuf_t *sb, const char *fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  int n = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  if (n < 0 || !strbuf_reserve(sb, (size_t)n))
    return;
  vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
  sb->len += (size_t)n;
}

void hbm_strbuf_printf(hbm_strbuf_t *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  hbm_strbuf_vprintf(sb, fmt, ap);
  va_end(ap);
}

const char *hbm_strbuf_str(const hbm_strbuf_t *sb) { return sb->data ? sb->data : ""; }
