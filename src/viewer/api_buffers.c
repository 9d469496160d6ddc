/* api_buffers.c — the viewer's JSON API, part two: buffers. /api/buffers_at_peak (the three
 * orders of XProf's "HLO Ops at Peak Memory Allocation", straight from the analysis),
 * /api/buffers_at (the same at any step), /api/buffer (the card of one buffer),
 * /api/allocations (the rectangles of the allocation timeline for a window of steps and
 * addresses, capped to the largest with an overview raster of all, so a 1M-event profile stays
 * fast; search by op name) and /api/oom (OOM events with their diagnosis, and the profile's
 * markers). */
#include "viewer/viewer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void set_new(json_t *obj, const char *key, json_t *value) {
  json_object_set_new(obj, key, value ? value : json_null());
}

static json_t *json_hex(uint64_t v) {
  char buf[32];
  snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return json_string(buf);
}

/* ---- the buffer card ---- */

/* The time of a step, null past the last one (a live-out buffer ends at n_steps). */
static json_t *json_step_time(const hbm_profile_t *p, int64_t step) {
  if (step < 0 || step >= hbm_profile_step_count(p))
    return json_null();
  return json_integer(hbm_profile_step_time(p, step));
}

static json_t *json_step_label(const hbm_profile_t *p, int64_t step) {
  if (step < 0 || step >= hbm_profile_step_count(p))
    return json_null();
  return hbm__json_text(hbm_profile_step_label(p, step));
}

json_t *hbm__json_buffer(const hbm__target_t *t, int64_t index) {
  const hbm_profile_t *p = t->profile;
  const hbm_buffer_t *b = hbm_profile_buffer(p, index);
  if (!b)
    return NULL;
  const hbm__layout_t *layout = hbm__loaded_layout(t->entry, b->space);
  const hbm__band_t *band = layout ? hbm__layout_band_at(layout, t->entry->rows[index]) : NULL;
  const hbm_space_info_t *space = hbm_profile_space(p, b->space);
  json_t *o = json_object();
  set_new(o, "id", json_integer(index));
  set_new(o, "alloc_id", hbm__json_u64(b->id));
  set_new(o, "op", hbm__json_text(b->op));
  set_new(o, "shape", hbm__json_text(b->shape));
  set_new(o, "size", hbm__json_u64(b->size));
  set_new(o, "unpadded_size", hbm__json_u64(b->unpadded_size));
  uint64_t padding = b->size > b->unpadded_size ? b->size - b->unpadded_size : 0;
  set_new(o, "padding", hbm__json_u64(padding));
  set_new(o, "expansion",
          b->unpadded_size ? json_real((double)b->size / (double)b->unpadded_size) : json_null());
  set_new(o, "category", json_string(hbm_category_name(b->category)));
  set_new(o, "group", hbm__json_text(b->group));
  set_new(o, "source", hbm__json_text(b->source));
  set_new(o, "stack", hbm__json_text(b->stack));
  set_new(o, "opcode", hbm__json_text(b->opcode));
  set_new(o, "label", hbm__json_text(b->label));
  int64_t end = hbm_buffer_span_end(b); /* its value's span; its bytes may stay to b->end */
  set_new(o, "start", json_integer(b->start));
  set_new(o, "end", json_integer(end));
  set_new(o, "start_time_ns", json_step_time(p, b->start));
  set_new(o, "end_time_ns", json_step_time(p, end));
  set_new(o, "start_label", json_step_label(p, b->start));
  set_new(o, "end_label", json_step_label(p, end));
  set_new(o, "bytes_end", json_integer(b->end)); /* the step its bytes leave the heap */
  set_new(o, "address", json_hex(b->address));
  /* plan: the offset in its allocation (the temp heap or its own); runtime: in its range */
  set_new(o, "offset",
          hbm__json_u64(band && b->address >= band->base ? b->address - band->base : b->address));
  set_new(o, "row", hbm__json_u64(layout ? t->entry->rows[index] : 0));
  set_new(o, "band", band ? hbm__json_text(band->label) : json_null());
  set_new(o, "indefinite", json_boolean(b->flags & HBM_BUF_INDEFINITE));
  set_new(o, "live_out", json_boolean(b->flags & HBM_BUF_LIVE_OUT));
  set_new(o, "space", json_integer(b->space));
  set_new(o, "space_name", hbm__json_text(space ? space->name : NULL));
  return o;
}

void hbm__api_buffer(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm__target_t t;
  if (!hbm__target_full(v, q, false, &t, r)) /* its row and band: the whole layout */
    return;
  int64_t id;
  if (!hbm__query_get(q, "id")) {
    hbm__respond_error(r, 400, "missing argument id");
  } else if (hbm__query_int(q, "id", -1, -1, INT64_MAX, &id, r)) {
    json_t *card =
        id >= 0 && id < hbm_profile_buffer_count(t.profile) ? hbm__json_buffer(&t, id) : NULL;
    if (card)
      hbm__respond_json(r, 200, card);
    else
      hbm__respond_error(r, 404, "no buffer %" PRId64 " in %s/%s", id, t.entry->run, t.entry->file);
  }
  hbm__target_close(v, &t);
}

/* ---- /api/buffers_at_peak ---- */

static json_t *json_bar(const hbm_profile_t *p, int64_t index) {
  const hbm_buffer_t *b = hbm_profile_buffer(p, index);
  if (!b)
    return NULL;
  json_t *o = json_object();
  set_new(o, "id", json_integer(index));
  set_new(o, "size", hbm__json_u64(b->size));
  set_new(o, "unpadded", hbm__json_u64(b->unpadded_size));
  set_new(o, "category", json_string(hbm_category_name(b->category)));
  set_new(o, "group", hbm__json_text(b->group));
  set_new(o, "op", hbm__json_text(b->op));
  set_new(o, "shape", hbm__json_text(b->shape));
  set_new(o, "source", hbm__json_text(b->source));
  return o;
}

static bool text_has(const char *text, const char *q) { return text && strcasestr(text, q); }

/* The buffers of idx[0..n) whose op, shape or group holds q (any case), in a new array. */
static int64_t *matching(const hbm_profile_t *p, const int64_t *idx, size_t *n, const char *q) {
  int64_t *out = malloc((*n ? *n : 1) * sizeof *out);
  size_t k = 0;
  for (size_t i = 0; out && i < *n; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, idx[i]);
    if (b && (text_has(b->op, q) || text_has(b->shape, q) || text_has(b->group, q)))
      out[k++] = idx[i];
  }
  *n = k;
  return out;
}

/* The bars of a list of buffers (with q, those whose op, shape or group holds it): `limit`
 * (0: all) one by one from `offset` (a page of a list of any length), the ones after them
 * summed in "rest" (a peak of 50k live buffers stays a small answer; the page draws the rest
 * as one bar, as XProf does with its small buffers). */
static void set_bars(json_t *root, const hbm_profile_t *p, const int64_t *idx, size_t n,
                     const hbm__query_t *q, int64_t offset, int64_t limit) {
  const char *text = hbm__query_get(q, "q");
  int64_t *found = text && *text && idx ? matching(p, idx, &n, text) : NULL;
  if (found)
    idx = found;
  set_new(root, "q", found ? hbm__json_text(text) : json_null());
  size_t first = (uint64_t)offset < n ? (size_t)offset : n;
  size_t shown = limit > 0 && (size_t)limit < n - first ? first + (size_t)limit : n;
  json_t *bars = json_array();
  for (size_t i = first; idx && i < shown; i++)
    json_array_append_new(bars, json_bar(p, idx[i]));
  uint64_t size = 0, unpadded = 0;
  for (size_t i = shown; idx && i < n; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, idx[i]);
    size = hbm__bytes_add(size, b->size); /* saturated at HBM_BYTES_MAX, never wrapped */
    unpadded = hbm__bytes_add(unpadded, b->unpadded_size);
  }
  json_t *rest = json_null();
  if (shown < n) {
    rest = json_object();
    set_new(rest, "count", json_integer((json_int_t)(n - shown)));
    set_new(rest, "size", hbm__json_u64(size));
    set_new(rest, "unpadded", hbm__json_u64(unpadded));
  }
  set_new(root, "count", json_integer((json_int_t)n));
  set_new(root, "offset", json_integer((json_int_t)first));
  set_new(root, "buffers", bars);
  set_new(root, "rest", rest);
  free(found);
}

void hbm__api_buffers_at_peak(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm__target_t t;
  if (!hbm__target_open(v, q, "", true, &t, r))
    return;
  const char *order = hbm__query_get(q, "order");
  size_t n = 0;
  const int64_t *idx;
  if (!order || !*order || !strcmp(order, "program")) {
    order = "program";
    idx = hbm_analysis_buffers_at_peak(t.analysis, &n);
  } else if (!strcmp(order, "size")) {
    idx = hbm_analysis_buffers_at_peak_by_size(t.analysis, &n);
  } else if (!strcmp(order, "padding")) {
    idx = hbm_analysis_buffers_at_peak_by_padding(t.analysis, &n);
  } else {
    hbm__respond_error(r, 400, "order must be program, size or padding (not '%.32s')", order);
    hbm__target_close(v, &t);
    return;
  }
  int64_t limit, offset;
  if (hbm__query_int(q, "limit", 0, 0, INT64_MAX, &limit, r) &&
      hbm__query_int(q, "offset", 0, 0, INT64_MAX, &offset, r)) {
    json_t *root = json_object();
    set_new(root, "order", json_string(order));
    set_new(root, "peak_step", json_integer(t.summary->peak_step));
    set_new(root, "peak_bytes", hbm__json_u64(t.summary->peak_bytes));
    set_bars(root, t.profile, idx, n, q, offset, limit);
    hbm__respond_json(r, 200, root);
  }
  hbm__target_close(v, &t);
}

/* ---- /api/buffers_at ---- */

static int cmp_size_desc(const void *a, const void *b, void *ctx) {
  const hbm_buffer_t *x = hbm_profile_buffer(ctx, *(const int64_t *)a);
  const hbm_buffer_t *y = hbm_profile_buffer(ctx, *(const int64_t *)b);
  if (x->size != y->size)
    return x->size > y->size ? -1 : 1;
  return *(const int64_t *)a < *(const int64_t *)b ? -1 : 1;
}

static uint64_t padding_of(const hbm_buffer_t *b) {
  return b->size > b->unpadded_size ? b->size - b->unpadded_size : 0;
}

static int cmp_padding_desc(const void *a, const void *b, void *ctx) {
  const hbm_buffer_t *x = hbm_profile_buffer(ctx, *(const int64_t *)a);
  const hbm_buffer_t *y = hbm_profile_buffer(ctx, *(const int64_t *)b);
  if (padding_of(x) != padding_of(y))
    return padding_of(x) > padding_of(y) ? -1 : 1;
  return cmp_size_desc(a, b, ctx);
}

/* The buffers live at any step (the analysis's window of one step), in the orders of the
 * buffers at the peak: to look at the moment before an OOM, or anywhere on the timeline. */
void hbm__api_buffers_at(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm__target_t t;
  if (!hbm__target_full(v, q, true, &t, r))
    return;
  int64_t step, limit, offset;
  const char *order = hbm__query_get(q, "order");
  int (*cmp)(const void *, const void *, void *) = NULL;
  if (!order || !*order || !strcmp(order, "program"))
    order = "program";
  else if (!strcmp(order, "size"))
    cmp = cmp_size_desc;
  else if (!strcmp(order, "padding"))
    cmp = cmp_padding_desc;
  else
    order = NULL;
  if (!order) {
    hbm__respond_error(r, 400, "order must be program, size or padding");
  } else if (!hbm__query_get(q, "step")) {
    hbm__respond_error(r, 400, "missing argument step");
  } else if (hbm__query_int(q, "step", 0, 0, t.summary->n_steps > 0 ? t.summary->n_steps - 1 : 0,
                            &step, r) &&
             hbm__query_int(q, "limit", 0, 0, INT64_MAX, &limit, r) &&
             hbm__query_int(q, "offset", 0, 0, INT64_MAX, &offset, r)) {
    int64_t one;
    size_t n = hbm_analysis_buffers_in_window(t.analysis, step, step + 1, &one, 0);
    int64_t *idx = malloc((n ? n : 1) * sizeof *idx);
    if (!idx) {
      hbm__respond_error(r, 500, "out of host memory");
    } else {
      n = hbm_analysis_buffers_in_window(t.analysis, step, step + 1, idx, n);
      if (cmp)
        qsort_r(idx, n, sizeof *idx, cmp, (void *)t.profile);
      json_t *root = json_object();
      set_new(root, "order", json_string(order));
      set_new(root, "step", json_integer(step));
      set_new(root, "label", hbm__json_text(hbm_profile_step_label(t.profile, step)));
      set_new(root, "bytes", hbm__json_u64(hbm_analysis_bytes_at(t.analysis, step)));
      set_bars(root, t.profile, idx, n, q, offset, limit);
      hbm__respond_json(r, 200, root);
      free(idx);
    }
  }
  hbm__target_close(v, &t);
}

/* ---- /api/allocations ---- */

#define RECTS_DEFAULT 4000
#define RECTS_MAX 50000

/* A min-heap keeps the `cap` largest buffers seen so far, in a total order (by size, then the
 * lower index first), so that pages of the same list never overlap or skip one. */
typedef struct rect_heap {
  int64_t *idx;
  uint64_t *size;
  size_t n, cap;
} rect_heap_t;

static void heap_swap(rect_heap_t *h, size_t a, size_t b) {
  int64_t i = h->idx[a];
  uint64_t s = h->size[a];
  h->idx[a] = h->idx[b];
  h->size[a] = h->size[b];
  h->idx[b] = i;
  h->size[b] = s;
}

/* Whether entry a comes after entry b in the list (smaller, or as large and later). */
static bool heap_less(const rect_heap_t *h, size_t a, size_t b) {
  return h->size[a] != h->size[b] ? h->size[a] < h->size[b] : h->idx[a] > h->idx[b];
}

static void heap_sift_down(rect_heap_t *h, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && heap_less(h, l, m))
      m = l;
    if (r < h->n && heap_less(h, r, m))
      m = r;
    if (m == i)
      return;
    heap_swap(h, i, m);
    i = m;
  }
}

static void heap_offer(rect_heap_t *h, int64_t idx, uint64_t size) {
  if (h->n < h->cap) {
    size_t i = h->n++;
    h->idx[i] = idx;
    h->size[i] = size;
    while (i > 0 && heap_less(h, i, (i - 1) / 2)) {
      heap_swap(h, i, (i - 1) / 2);
      i = (i - 1) / 2;
    }
  } else if (h->cap > 0 && (size > h->size[0] || (size == h->size[0] && idx < h->idx[0]))) {
    h->idx[0] = idx;
    h->size[0] = size;
    heap_sift_down(h, 0);
  }
}

typedef struct alloc_args {
  hbm__window_t w;
  const uint64_t *row;               /* each buffer's row in the layout */
  int64_t limit, offset, cols, rows; /* the rectangles: the limit largest after the offset */
  const char *q;                     /* op substring (case-insensitive), NULL for all */
} alloc_args_t;

static bool op_matches(const char *op, const char *q, hbm_u64map_t *seen) {
  uint64_t match;
  if (!op)
    return false;
  if (!hbm_u64map_get(seen, (uint64_t)(uintptr_t)op, &match)) {
    match = strcasestr(op, q) != NULL;
    hbm_u64map_put(seen, (uint64_t)(uintptr_t)op, match);
  }
  return match != 0;
}

static bool rect_passes(const hbm_buffer_t *b, int64_t index, const alloc_args_t *a,
                        hbm_u64map_t *seen) {
  uint64_t off = a->row[index];
  if (off + b->size <= a->w.lo || off >= a->w.hi)
    return false;
  return !a->q || op_matches(b->op, a->q, seen);
}

void hbm__classes_of(const hbm__target_t *t, hbm__classes_t *c) {
  memset(c, 0, sizeof *c);
  const hbm_summary_t *s = t->summary;
  size_t n_groups = 0;
  const hbm_group_total_t *g = hbm_analysis_groups(t->analysis, &n_groups);
  c->by_group =
      s->peak_bytes > 0 && s->category_bytes[HBM_CAT_UNKNOWN] == s->peak_bytes && n_groups > 1;
  if (!c->by_group) {
    c->n = HBM_CAT_COUNT;
    return;
  }
  for (size_t i = 0; i < n_groups && c->n < HBM__CLASSES_MAX - 1; i++)
    c->names[c->n++] = g[i].name;
  c->names[c->n++] = "other";
}

int hbm__class_of(const hbm__classes_t *c, const hbm_buffer_t *b) {
  if (!c->by_group)
    return (unsigned)b->category < HBM_CAT_COUNT ? (int)b->category : 0;
  const char *name = b->group ? b->group : hbm_category_name(b->category);
  for (int i = 0; i < c->n - 1; i++) /* group names are interned: most match by address */
    if (c->names[i] == name || !strcmp(c->names[i], name))
      return i;
  return c->n - 1;
}

/* Rectangles columns, with op names given once in "ops" and referred to by index; by group,
 * each rectangle's colour class too. */
static json_t *json_rects(const hbm_profile_t *p, const int64_t *idx, size_t n, const uint64_t *row,
                          const hbm__classes_t *classes) {
  json_t *ids = json_array(), *offs = json_array(), *sizes = json_array();
  json_t *starts = json_array(), *ends = json_array(), *cats = json_array();
  json_t *opi = json_array(), *ops = json_array(), *cls = json_array();
  hbm_u64map_t seen;
  hbm_u64map_init(&seen);
  for (size_t i = 0; i < n; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, idx[i]);
    uint64_t k;
    if (!b->op) {
      k = UINT64_MAX;
    } else if (!hbm_u64map_get(&seen, (uint64_t)(uintptr_t)b->op, &k)) {
      k = json_array_size(ops);
      json_array_append_new(ops, hbm__json_text(b->op));
      hbm_u64map_put(&seen, (uint64_t)(uintptr_t)b->op, k);
    }
    json_array_append_new(ids, json_integer(idx[i]));
    json_array_append_new(offs, hbm__json_u64(row[idx[i]]));
    json_array_append_new(sizes, hbm__json_u64(b->size));
    json_array_append_new(starts, json_integer(b->start));
    json_array_append_new(ends, json_integer(b->end));
    json_array_append_new(cats, json_integer(b->category));
    json_array_append_new(opi, k == UINT64_MAX ? json_integer(-1) : json_integer((json_int_t)k));
    if (classes->by_group)
      json_array_append_new(cls, json_integer(hbm__class_of(classes, b)));
  }
  hbm_u64map_free(&seen);
  json_t *o = json_object();
  set_new(o, "id", ids);
  set_new(o, "offset", offs);
  set_new(o, "size", sizes);
  set_new(o, "start", starts);
  set_new(o, "end", ends);
  set_new(o, "category", cats);
  set_new(o, "op", opi);
  set_new(o, "ops", ops);
  if (classes->by_group) {
    json_t *names = json_array();
    for (int c = 0; c < classes->n; c++)
      json_array_append_new(names, hbm__json_text(classes->names[c]));
    set_new(o, "class", cls);
    set_new(o, "classes", names);
  } else {
    json_decref(cls);
  }
  return o;
}

static int cmp_by_size_desc(const void *a, const void *b, void *ctx) {
  const hbm_profile_t *p = ctx;
  uint64_t sa = hbm_profile_buffer(p, *(const int64_t *)a)->size;
  uint64_t sb = hbm_profile_buffer(p, *(const int64_t *)b)->size;
  if (sa != sb)
    return sa > sb ? -1 : 1;
  return *(const int64_t *)a < *(const int64_t *)b ? -1 : 1;
}

#define DENSITY_MAX_COLS 2048
#define DENSITY_MAX_ROWS 1024

static bool read_alloc_args(const hbm__query_t *q, hbm__target_t *t, alloc_args_t *a,
                            hbm__response_t *r) {
  int64_t n_steps = t->summary->n_steps, lo, hi;
  const hbm__layout_t *layout = hbm__loaded_layout(t->entry, t->space);
  memset(a, 0, sizeof *a);
  if (!layout) {
    hbm__respond_error(r, 500, "out of host memory");
    return false;
  }
  uint64_t extent = layout->height;
  if (!hbm__query_int(q, "from", 0, 0, n_steps, &a->w.from, r) ||
      !hbm__query_int(q, "to", n_steps, 0, n_steps, &a->w.to, r) ||
      !hbm__query_int(q, "limit", RECTS_DEFAULT, 0, RECTS_MAX, &a->limit, r) ||
      !hbm__query_int(q, "offset", 0, 0, INT32_MAX, &a->offset, r) ||
      !hbm__query_int(q, "lo", 0, 0, INT64_MAX, &lo, r) ||
      !hbm__query_int(q, "hi", (int64_t)(extent > INT64_MAX ? INT64_MAX : extent), 0, INT64_MAX,
                      &hi, r) ||
      !hbm__query_int(q, "cols", 0, 0, DENSITY_MAX_COLS, &a->cols, r) ||
      !hbm__query_int(q, "rows", 0, 0, DENSITY_MAX_ROWS, &a->rows, r))
    return false;
  if (a->w.from > a->w.to || lo > hi) {
    hbm__respond_error(r, 400, "empty window: from must not pass to, lo must not pass hi");
    return false;
  }
  a->w.lo = (uint64_t)lo;
  a->w.hi = (uint64_t)hi;
  a->row = t->entry->rows;
  const char *text = hbm__query_get(q, "q");
  a->q = text && *text ? text : NULL;
  return true;
}

static json_t *allocations_json(hbm__target_t *t, const alloc_args_t *a, int64_t *passed,
                                size_t n_passed, size_t in_window, rect_heap_t *heap) {
  uint64_t bytes = 0;
  for (size_t i = 0; i < n_passed; i++)
    bytes = hbm__bytes_add(bytes, hbm_profile_buffer(t->profile, passed[i])->size);
  qsort_r(heap->idx, heap->n, sizeof *heap->idx, cmp_by_size_desc, (void *)t->profile);
  const hbm__layout_t *layout = hbm__loaded_layout(t->entry, t->space);
  json_t *root = json_object();
  set_new(root, "from", json_integer(a->w.from));
  set_new(root, "to", json_integer(a->w.to));
  set_new(root, "lo", hbm__json_u64(a->w.lo));
  set_new(root, "hi", hbm__json_u64(a->w.hi));
  set_new(root, "n_steps", json_integer(t->summary->n_steps));
  set_new(root, "extent", hbm__json_u64(layout->height));
  set_new(root, "bands", hbm__json_bands(layout));
  set_new(root, "in_window", json_integer((json_int_t)in_window));
  set_new(root, "matched", json_integer((json_int_t)n_passed));
  set_new(root, "matched_bytes", hbm__json_u64(bytes));
  size_t first = (size_t)a->offset < heap->n ? (size_t)a->offset : heap->n;
  set_new(root, "offset", json_integer((json_int_t)first));
  set_new(root, "shown", json_integer((json_int_t)(heap->n - first)));
  set_new(root, "q", a->q ? hbm__json_text(a->q) : json_null());
  hbm__classes_t classes; /* by group when nothing has a category (PyTorch snapshots) */
  hbm__classes_of(t, &classes);
  set_new(root, "color_by", json_string(classes.by_group ? "group" : "category"));
  set_new(root, "rects",
          json_rects(t->profile, heap->idx + first, heap->n - first, a->row, &classes));
  set_new(root, "density",
          a->cols && a->rows && n_passed > heap->n - first
              ? hbm__json_density(t->profile, a->row, passed, n_passed, &a->w, (int)a->cols,
                                  (int)a->rows, &classes)
              : json_null());
  return root;
}

void hbm__api_allocations(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm__target_t t;
  if (!hbm__target_full(v, q, true, &t, r))
    return;
  alloc_args_t a;
  if (!read_alloc_args(q, &t, &a, r)) {
    hbm__target_close(v, &t);
    return;
  }
  /* Room for every buffer of the space, so the window is listed in one pass. */
  size_t cap = t.summary->n_buffers > 0 ? (size_t)t.summary->n_buffers : 1;
  int64_t *all = malloc(cap * sizeof *all);
  size_t total = all ? hbm_analysis_buffers_in_window(t.analysis, a.w.from, a.w.to, all, cap) : 0;
  if (all && total > cap) {
    free(all);
    cap = total;
    all = malloc(cap * sizeof *all);
    total = all ? hbm_analysis_buffers_in_window(t.analysis, a.w.from, a.w.to, all, cap) : 0;
  }
  /* the heap holds the page and the pages before it, at most every buffer of the window */
  size_t keep = (size_t)a.offset + (size_t)a.limit;
  keep = keep < total ? keep : total;
  rect_heap_t heap = {malloc((keep + 1) * sizeof(int64_t)), malloc((keep + 1) * sizeof(uint64_t)),
                      0, keep};
  hbm_u64map_t op_matches; /* op strings are interned: each distinct op is searched once */
  hbm_u64map_init(&op_matches);
  if (!all || !heap.idx || !heap.size) {
    hbm__respond_error(r, 500, "out of host memory");
  } else {
    size_t passed = 0; /* the buffers that pass move to the front of `all` */
    for (size_t i = 0; i < total; i++) {
      const hbm_buffer_t *b = hbm_profile_buffer(t.profile, all[i]);
      if (!b || !rect_passes(b, all[i], &a, &op_matches))
        continue;
      all[passed++] = all[i];
      heap_offer(&heap, all[i], b->size);
    }
    hbm__respond_json(r, 200, allocations_json(&t, &a, all, passed, total, &heap));
  }
  hbm_u64map_free(&op_matches);
  free(all);
  free(heap.idx);
  free(heap.size);
  hbm__target_close(v, &t);
}

/* ---- /api/oom ---- */

static const char *marker_kind_name(hbm_marker_kind_t k) {
  switch (k) {
  case HBM_MARKER_STEP_BEGIN: return "step_begin";
  case HBM_MARKER_STEP_END: return "step_end";
  default: return "text";
  }
}

#define MARKERS_MAX 2000

/* Markers for the timelines, step ends included (`hbm report` lists them, and the page names
 * "end of step 1" where it begins the next): at most MARKERS_MAX (a long run has two per
 * training step). */
static json_t *json_markers(const hbm_profile_t *p) {
  json_t *markers = json_array();
  for (size_t i = 0; i < hbm_profile_marker_count(p) && json_array_size(markers) < MARKERS_MAX;
       i++) {
    const hbm_marker_t *m = hbm_profile_marker(p, i);
    json_t *o = json_object();
    set_new(o, "step", json_integer(m->step));
    set_new(o, "kind", json_string(marker_kind_name(m->kind)));
    set_new(o, "value", json_integer(m->value));
    set_new(o, "text", hbm__json_text(m->text));
    json_array_append_new(markers, o);
  }
  return markers;
}

void hbm__api_oom(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm__target_t t;
  if (!hbm__target_open(v, q, "", true, &t, r))
    return;
  json_t *events = json_array();
  for (size_t i = 0; i < hbm_profile_oom_count(t.profile); i++) {
    const hbm_oom_event_t *e = hbm_profile_oom(t.profile, i);
    if (!e || e->space != t.space)
      continue;
    json_t *o = json_object();
    set_new(o, "step", json_integer(e->step));
    set_new(o, "time_ns", json_step_time(t.profile, e->step));
    set_new(o, "requested", hbm__json_u64(e->requested));
    set_new(o, "bytes_in_use", hbm__json_u64(hbm_analysis_bytes_at(t.analysis, e->step)));
    set_new(o, "message", hbm__json_text(e->message));
    json_array_append_new(events, o);
  }
  json_t *root = json_object();
  set_new(root, "space", json_integer(t.space));
  set_new(root, "limit_bytes", hbm__json_u64(t.summary->limit_bytes));
  set_new(root, "events", events);
  int64_t with_markers;
  if (!hbm__query_int(q, "markers", 0, 0, 1, &with_markers, r)) {
    json_decref(root);
    hbm__target_close(v, &t);
    return;
  }
  /* markers are asked for separately: a long run has thousands the page need not parse */
  set_new(root, "markers", with_markers ? json_markers(t.profile) : json_array());
  set_new(root, "n_markers", json_integer((json_int_t)hbm_profile_marker_count(t.profile)));
  hbm__respond_json(r, 200, root);
  hbm__target_close(v, &t);
}
