/* query.c — the query arguments of a viewer request: a small bounded list of key/value copies,
 * filled either by the HTTP server (which decodes them itself) or, in tests and the fuzzer,
 * by parsing a raw query string here. */
#include "viewer/viewer.h"

#include <stdlib.h>
#include <string.h>

void hbm__query_init(hbm__query_t *q) { memset(q, 0, sizeof *q); }

void hbm__query_free(hbm__query_t *q) {
  for (size_t i = 0; i < q->n; i++) {
    free(q->key[i]);
    free(q->value[i]);
  }
  hbm__query_init(q);
}

bool hbm__query_add(hbm__query_t *q, const char *key, const char *value) {
  if (!key || q->n >= HBM__QUERY_MAX)
    return false;
  if (hbm__query_get(q, key))
    return true; /* the first value wins, as in most servers */
  char *k = strdup(key);
  char *v = strdup(value ? value : "");
  if (!k || !v) {
    free(k);
    free(v);
    return false;
  }
  q->key[q->n] = k;
  q->value[q->n] = v;
  q->n++;
  return true;
}

const char *hbm__query_get(const hbm__query_t *q, const char *key) {
  for (size_t i = 0; i < q->n; i++)
    if (!strcmp(q->key[i], key))
      return q->value[i];
  return NULL;
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

size_t hbm__url_decode(char *s, bool plus_is_space) {
  char *out = s;
  for (const char *in = s; *in; in++) {
    int hi, lo;
    if (*in == '%' && (hi = hex_value(in[1])) >= 0 && (lo = hex_value(in[2])) >= 0) {
      char c = (char)(hi * 16 + lo);
      if (c == '\0')
        break;
      *out++ = c;
      in += 2;
    } else if (*in == '+' && plus_is_space) {
      *out++ = ' ';
    } else {
      *out++ = *in;
    }
  }
  *out = '\0';
  return (size_t)(out - s);
}

/* Adds one "key=value" (or "key") piece of a raw query string. */
static void add_piece(hbm__query_t *q, const char *piece, size_t len) {
  if (len == 0)
    return;
  char *copy = malloc(len + 1);
  if (!copy)
    return;
  memcpy(copy, piece, len);
  copy[len] = '\0';
  char *eq = strchr(copy, '=');
  char *value = NULL;
  if (eq) {
    *eq = '\0';
    value = eq + 1;
    hbm__url_decode(value, true);
  }
  hbm__url_decode(copy, true);
  hbm__query_add(q, copy, value);
  free(copy);
}

void hbm__query_parse(hbm__query_t *q, const char *raw, size_t len) {
  size_t start = 0;
  for (size_t i = 0; i <= len; i++) {
    if (i == len || raw[i] == '&' || raw[i] == '\0') {
      add_piece(q, raw + start, i - start);
      if (i < len && raw[i] == '\0')
        return;
      start = i + 1;
    }
  }
}
