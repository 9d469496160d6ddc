/* density.c — the allocation timeline's overview raster. When a window holds far more buffers
 * than can be drawn one by one (a million events: most buffers narrower than a pixel), the
 * page draws this instead underneath the largest rectangles: a grid of cells over
 * [from, to) × [lo, hi), each with the fraction of its area that buffers cover and the
 * category that covers most of it. Exact fractional coverage in O(buffers + cells): each
 * rectangle is split into at most 3×3 blocks of constant weight (whole cells inside, partial
 * cells at its edges), added to per-category 2-D difference arrays, then prefix-summed. */
#include "viewer/viewer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct grid {
  int cols, rows, n_classes;
  float *diff[HBM__CLASSES_MAX]; /* (cols + 1) × (rows + 1) each, per colour class */
} grid_t;

/* Adds w to every cell in columns [c0, c1] × rows [r0, r1] of category `cat`. */
static void add_block(grid_t *g, int cat, int c0, int c1, int r0, int r1, float w) {
  if (c0 > c1 || r0 > r1 || w <= 0)
    return;
  float *d = g->diff[cat];
  int stride = g->cols + 1;
  d[r0 * stride + c0] += w;
  d[r0 * stride + c1 + 1] -= w;
  d[(r1 + 1) * stride + c0] -= w;
  d[(r1 + 1) * stride + c1 + 1] += w;
}

/* The cells [first, last] that [a, b) (in cell units, clipped to [0, n)) touches, and the
 * share of the first and last cell it covers. */
typedef struct span {
  int first, last;
  float w_first, w_last; /* equal when first == last */
} span_t;

static bool cell_span(double a, double b, int n, span_t *s) {
  if (a < 0)
    a = 0;
  if (b > n)
    b = n;
  if (b <= a)
    return false;
  s->first = (int)floor(a);
  s->last = (int)ceil(b) - 1;
  if (s->last >= n)
    s->last = n - 1;
  if (s->first == s->last) {
    s->w_first = s->w_last = (float)(b - a);
  } else {
    s->w_first = (float)(s->first + 1 - a);
    s->w_last = (float)(b - s->last);
  }
  return true;
}

/* A span as up to three constant-weight segments: partial first cell, whole cells, partial
 * last cell. Returns how many. */
static int segments(const span_t *s, int lo[3], int hi[3], float w[3]) {
  if (s->first == s->last) {
    lo[0] = hi[0] = s->first;
    w[0] = s->w_first;
    return 1;
  }
  int n = 0;
  lo[n] = hi[n] = s->first;
  w[n++] = s->w_first;
  if (s->first + 1 <= s->last - 1) {
    lo[n] = s->first + 1;
    hi[n] = s->last - 1;
    w[n++] = 1.0f;
  }
  lo[n] = hi[n] = s->last;
  w[n++] = s->w_last;
  return n;
}

/* Adds one rectangle, whose weight is separable: wx(col) × wy(row). */
static void add_rect(grid_t *g, int cat, const span_t *x, const span_t *y) {
  int xl[3], xh[3], yl[3], yh[3];
  float xw[3], yw[3];
  int nx = segments(x, xl, xh, xw), ny = segments(y, yl, yh, yw);
  for (int i = 0; i < nx; i++)
    for (int j = 0; j < ny; j++)
      add_block(g, cat, xl[i], xh[i], yl[j], yh[j], xw[i] * yw[j]);
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const unsigned char *data, size_t n) {
  char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
  if (!out)
    return NULL;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)data[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t)data[i + 1] << 8;
    if (i + 2 < n)
      v |= data[i + 2];
    *o++ = b64[(v >> 18) & 63];
    *o++ = b64[(v >> 12) & 63];
    *o++ = i + 1 < n ? b64[(v >> 6) & 63] : '=';
    *o++ = i + 2 < n ? b64[v & 63] : '=';
  }
  *o = '\0';
  return out;
}

/* Each cell as one byte: its main class * levels + coverage in 0..levels-1. */
static unsigned char *encode_cells(grid_t *g, int levels) {
  int stride = g->cols + 1;
  unsigned char *cells = calloc((size_t)g->cols * (size_t)g->rows, 1);
  if (!cells)
    return NULL;
  for (int c = 0; c < g->n_classes; c++) { /* 2-D prefix sums turn differences into values */
    float *d = g->diff[c];
    for (int r = 0; r <= g->rows; r++)
      for (int k = 1; k <= g->cols; k++)
        d[r * stride + k] += d[r * stride + k - 1];
    for (int r = 1; r <= g->rows; r++)
      for (int k = 0; k <= g->cols; k++)
        d[r * stride + k] += d[(r - 1) * stride + k];
  }
  for (int r = 0; r < g->rows; r++)
    for (int k = 0; k < g->cols; k++) {
      float total = 0, best = 0;
      int best_class = 0;
      for (int c = 0; c < g->n_classes; c++) {
        float v = g->diff[c][r * stride + k];
        total += v;
        if (v > best) {
          best = v;
          best_class = c;
        }
      }
      int top = levels - 1;
      int cov = total <= 0.001f ? 0 : total >= 1.0f ? top : 1 + (int)(total * (float)(top - 1));
      cells[(size_t)r * (size_t)g->cols + (size_t)k] = (unsigned char)(best_class * levels + cov);
    }
  return cells;
}

json_t *hbm__json_density(const hbm_profile_t *p, const uint64_t *row, const int64_t *idx, size_t n,
                          const hbm__window_t *w, int cols, int rows,
                          const hbm__classes_t *classes) {
  if (cols <= 0 || rows <= 0 || w->to <= w->from || w->hi <= w->lo)
    return json_null();
  int n_classes = classes->n > 0 && classes->n <= HBM__CLASSES_MAX ? classes->n : 1;
  int levels = 252 / n_classes > 42 ? 42 : 252 / n_classes;
  grid_t g = {cols, rows, n_classes, {0}};
  size_t cells = (size_t)(cols + 1) * (size_t)(rows + 1);
  json_t *out = NULL;
  for (int c = 0; c < n_classes; c++)
    if (!(g.diff[c] = calloc(cells, sizeof(float))))
      goto done;
  double sx = cols / (double)(w->to - w->from), sy = rows / (double)(w->hi - w->lo);
  for (size_t i = 0; i < n; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, idx[i]);
    span_t x, y;
    double off = (double)row[idx[i]];
    /* rows count up from the lowest address, as the canvas draws them */
    if (!cell_span((double)(b->start - w->from) * sx, (double)(b->end - w->from) * sx, cols, &x) ||
        !cell_span((off - (double)w->lo) * sy, (off + (double)b->size - (double)w->lo) * sy, rows,
                   &y))
      continue;
    int c = hbm__class_of(classes, b);
    add_rect(&g, c >= 0 && c < n_classes ? c : 0, &x, &y);
  }
  unsigned char *bytes = encode_cells(&g, levels);
  char *text = bytes ? base64(bytes, (size_t)cols * (size_t)rows) : NULL;
  if (text) {
    out = json_object();
    json_object_set_new(out, "cols", json_integer(cols));
    json_object_set_new(out, "rows", json_integer(rows));
    json_object_set_new(out, "levels", json_integer(levels));
    json_object_set_new(out, "cells", json_string(text));
    if (classes->by_group) {
      json_t *names = json_array();
      for (int c = 0; c < classes->n; c++)
        json_array_append_new(names, hbm__json_text(classes->names[c]));
      json_object_set_new(out, "classes", names);
    }
  }
  free(bytes);
  free(text);
done:
  for (int c = 0; c < n_classes; c++)
    free(g.diff[c]);
  return out ? out : json_null();
}
