/* json_out.c — valid JSON strings from untrusted text (see json_out.h). */
#include "profile/json_out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (0 when invalid). */
static size_t utf8_sequence(const unsigned char *s) {
  if (s[0] < 0x80)
    return 1;
  size_t n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
  if (s[0] >= 0xf5)
    n = 0;
  for (size_t i = 1; i < n; i++)
    if ((s[i] & 0xc0) != 0x80)
      return 0;
  if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
      (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
    return 0; /* overlong, surrogate or beyond U+10FFFF */
  return n;
}

/* s with invalid UTF-8 replaced by U+FFFD (malloc'd). */
static char *valid_utf8(const char *s) {
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    size_t n = utf8_sequence(p);
    if (n)
      hbm_strbuf_append(&sb, (const char *)p, n);
    else
      hbm_strbuf_puts(&sb, "\xef\xbf\xbd");
    p += n ? n : 1;
  }
  if (sb.failed) {
    hbm_strbuf_free(&sb);
    return NULL;
  }
  if (!sb.data)
    return calloc(1, 1);
  return sb.data;
}

void hbm__json_quote(hbm_strbuf_t *sb, const char *s) {
  if (!s) {
    hbm_strbuf_puts(sb, "null");
    return;
  }
  hbm_strbuf_append(sb, "\"", 1);
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    size_t n = utf8_sequence(p);
    if (n == 0) {
      hbm_strbuf_puts(sb, "\\ufffd");
      p++;
    } else if (*p == '"' || *p == '\\') {
      hbm_strbuf_printf(sb, "\\%c", *p++);
    } else if (*p < 0x20) {
      static const char short_escapes[] = "btnvfr";
      if (*p >= '\b' && *p <= '\r' && *p != '\v')
        hbm_strbuf_printf(sb, "\\%c", short_escapes[*p - '\b']);
      else
        hbm_strbuf_printf(sb, "\\u%04x", *p);
      p++;
    } else {
      hbm_strbuf_append(sb, (const char *)p, n);
      p += n;
    }
  }
  hbm_strbuf_append(sb, "\"", 1);
}

json_t *hbm__json_string(const char *s) {
  if (!s)
    return json_null();
  json_t *j = json_string(s);
  if (j)
    return j;
  char *fixed = valid_utf8(s);
  j = fixed ? json_string(fixed) : NULL;
  free(fixed);
  return j ? j : json_null();
}

hbm_status_t hbm__write_out(FILE *out, const char *text, size_t len, const char *what) {
  if (len && fwrite(text, 1, len, out) != len)
    return hbm__error(HBM_ERR_IO, "cannot write the %s", what);
  return HBM_OK;
}

hbm_status_t hbm__write_json(FILE *out, json_t *root, const char *what) {
  char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(root);
  if (!text)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory writing the %s", what);
  hbm_status_t s = hbm__write_out(out, text, strlen(text), what);
  if (s == HBM_OK)
    s = hbm__write_out(out, "\n", 1, what);
  free(text);
  return s;
}
