/* api_compare.c — /api/compare: the difference between two profiles at their peaks (two runs
 * of a program, two plans of a module, before and after a change). Both peaks come from the
 * analysis; this only lines up the two summaries and the buffers live at each peak, summed by
 * op name, so a user sees which ops grew. */
#include "viewer/viewer.h"

#include <stdlib.h>
#include <string.h>

#define COMPARE_TOP_OPS 50

static void set_new(json_t *obj, const char *key, json_t *value) {
  json_object_set_new(obj, key, value ? value : json_null());
}

/* The second profile's space: b_space= when given, else the space with the first one's name,
 * else 0. */
static bool open_second(hbm__viewer_t *v, const hbm__query_t *q, const hbm__target_t *a,
                        hbm__target_t *b, hbm__response_t *r) {
  if (!hbm__target_open(v, q, "b_", false, b, r))
    return false;
  int64_t space = 0;
  if (hbm__query_get(q, "b_space")) {
    if (!hbm__query_int(q, "b_space", 0, -1, INT32_MAX, &space, r)) {
      hbm__target_close(v, b);
      return false;
    }
  } else {
    const hbm_space_info_t *want = hbm_profile_space(a->profile, a->space);
    for (int i = 0; want && want->name && i < hbm_profile_space_count(b->profile); i++) {
      const hbm_space_info_t *s = hbm_profile_space(b->profile, i);
      if (s && s->name && !strcmp(s->name, want->name)) {
        space = i;
        break;
      }
    }
  }
  b->analysis = hbm__loaded_analysis(b->entry, (int)space);
  if (!b->analysis) {
    hbm__respond_error(r, hbm__http_status(hbm_last_status()), "%s", hbm_last_error());
    hbm__target_close(v, b);
    return false;
  }
  b->space = (int)space;
  b->summary = hbm_analysis_summary(b->analysis);
  return true;
}

typedef struct op_bytes {
  const char *op;
  uint64_t bytes[2];
  size_t count[2];
} op_bytes_t;

static int cmp_op(const void *x, const void *y) {
  return strcmp(((const op_bytes_t *)x)->op, ((const op_bytes_t *)y)->op);
}

static uint64_t abs_delta(const op_bytes_t *o) {
  return o->bytes[1] > o->bytes[0] ? o->bytes[1] - o->bytes[0] : o->bytes[0] - o->bytes[1];
}

static int cmp_delta_desc(const void *x, const void *y) {
  uint64_t dx = abs_delta(x), dy = abs_delta(y);
  return dx != dy ? (dx > dy ? -1 : 1) : cmp_op(x, y);
}

/* Sums the buffers live at each side's peak by op; rows with the same op merge. */
static op_bytes_t *ops_at_peaks(const hbm__target_t *side[2], size_t *n_out) {
  size_t n[2], total = 0;
  const int64_t *idx[2];
  for (int s = 0; s < 2; s++) {
    idx[s] = hbm_analysis_buffers_at_peak(side[s]->analysis, &n[s]);
    total += idx[s] ? n[s] : 0;
  }
  op_bytes_t *rows = calloc(total ? total : 1, sizeof *rows);
  if (!rows)
    return NULL;
  size_t k = 0;
  for (int s = 0; s < 2; s++)
    for (size_t i = 0; idx[s] && i < n[s]; i++) {
      const hbm_buffer_t *b = hbm_profile_buffer(side[s]->profile, idx[s][i]);
      rows[k].op = b && b->op ? b->op : "(untagged)";
      rows[k].bytes[s] = b ? b->size : 0;
      rows[k].count[s] = 1;
      k++;
    }
  qsort(rows, k, sizeof *rows, cmp_op);
  size_t m = 0;
  for (size_t i = 0; i < k; i++) {
    if (m > 0 && !strcmp(rows[m - 1].op, rows[i].op)) {
      for (int s = 0; s < 2; s++) {
        rows[m - 1].bytes[s] = hbm__bytes_add(rows[m - 1].bytes[s], rows[i].bytes[s]);
        rows[m - 1].count[s] += rows[i].count[s];
      }
    } else {
      rows[m++] = rows[i];
    }
  }
  qsort(rows, m, sizeof *rows, cmp_delta_desc);
  *n_out = m;
  return rows;
}

static json_t *json_delta(uint64_t a, uint64_t b) {
  return json_integer(b >= a ? (json_int_t)(b - a) : -(json_int_t)(a - b));
}

static json_t *json_ops(const op_bytes_t *rows, size_t n) {
  json_t *ops = json_array();
  for (size_t i = 0; i < n && i < COMPARE_TOP_OPS; i++) {
    json_t *o = json_object();
    set_new(o, "op", hbm__json_text(rows[i].op));
    set_new(o, "a_bytes", hbm__json_u64(rows[i].bytes[0]));
    set_new(o, "b_bytes", hbm__json_u64(rows[i].bytes[1]));
    set_new(o, "a_count", json_integer((json_int_t)rows[i].count[0]));
    set_new(o, "b_count", json_integer((json_int_t)rows[i].count[1]));
    set_new(o, "delta", json_delta(rows[i].bytes[0], rows[i].bytes[1]));
    json_array_append_new(ops, o);
  }
  return ops;
}

static json_t *json_side(const hbm__target_t *t) {
  json_t *o = hbm__json_summary(t);
  set_new(o, "run", hbm__json_text(t->entry->run));
  set_new(o, "profile", hbm__json_text(t->entry->file));
  return o;
}

static json_t *json_metric_deltas(const hbm_summary_t *a, const hbm_summary_t *b) {
  json_t *d = json_object();
  set_new(d, "peak_bytes", json_delta(a->peak_bytes, b->peak_bytes));
  set_new(d, "peak_unpadded_bytes", json_delta(a->peak_unpadded_bytes, b->peak_unpadded_bytes));
  set_new(d, "padding_bytes", json_delta(a->padding_bytes, b->padding_bytes));
  set_new(d, "argument_bytes", json_delta(a->argument_bytes, b->argument_bytes));
  set_new(d, "output_bytes", json_delta(a->output_bytes, b->output_bytes));
  set_new(d, "temporary_bytes", json_delta(a->temporary_bytes, b->temporary_bytes));
  set_new(d, "heap_bytes", json_delta(a->heap_bytes, b->heap_bytes));
  set_new(d, "peak_reserved_bytes",
          a->peak_reserved_bytes && b->peak_reserved_bytes
              ? json_delta(a->peak_reserved_bytes, b->peak_reserved_bytes)
              : NULL); /* unknown on one side */
  set_new(d, "n_buffers_at_peak", json_delta(a->n_buffers_at_peak, b->n_buffers_at_peak));
  return d;
}

void hbm__api_compare(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm__target_t a, b;
  if (!hbm__target_open(v, q, "", true, &a, r))
    return;
  if (!open_second(v, q, &a, &b, r)) {
    hbm__target_close(v, &a);
    return;
  }
  const hbm__target_t *sides[2] = {&a, &b};
  size_t n = 0;
  op_bytes_t *rows = ops_at_peaks(sides, &n);
  if (!rows) {
    hbm__respond_error(r, 500, "out of host memory");
  } else {
    json_t *root = json_object();
    set_new(root, "a", json_side(&a));
    set_new(root, "b", json_side(&b));
    set_new(root, "delta", json_metric_deltas(a.summary, b.summary));
    set_new(root, "ops", json_ops(rows, n));
    set_new(root, "n_ops", json_integer((json_int_t)n));
    hbm__respond_json(r, 200, root);
  }
  free(rows);
  hbm__target_close(v, &b);
  hbm__target_close(v, &a);
}
