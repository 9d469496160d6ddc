/* api_compare.c — /api/compare: "Compare with…", the difference between two profiles at their
 * peaks (two runs of a program, two plans of a module, before and after a change). The same
 * diff as `hbm diff` (src/profile/diff.c: both peaks from the analysis, the change attributed
 * by op, source, category, shape, group and reason, every table adding up to it), the two
 * summaries side by side, and both timelines for the page to draw over each other.
 * /api/devices: the many-device summary of a run (as `hbm report RUN` prints first). */
#include "profile/diff.h"
#include "viewer/viewer.h"

#include <stdlib.h>
#include <string.h>

#define COMPARE_TOP_ROWS 50
#define COMPARE_TIMELINE_POINTS 600
#define DEVICES_MAX_PROFILES 64

static void set_new(json_t *obj, const char *key, json_t *value) {
  json_object_set_new(obj, key, value ? value : json_null());
}

/* The second profile's space: b_space= when given, else the space with the first one's name
 * and device, else with its name, else 0. */
static int second_space(const hbm__query_t *q, const hbm__target_t *a, const hbm__target_t *b,
                        hbm__response_t *r) {
  int64_t space = 0;
  if (hbm__query_get(q, "b_space"))
    return hbm__query_int(q, "b_space", 0, 0, INT32_MAX, &space, r) ? (int)space : -1;
  const hbm_space_info_t *want = hbm_profile_space(a->profile, a->space);
  int by_name = -1;
  for (int i = 0; want && want->name && i < hbm_profile_space_count(b->profile); i++) {
    const hbm_space_info_t *s = hbm_profile_space(b->profile, i);
    if (!s || !s->name || strcmp(s->name, want->name))
      continue;
    if (want->device && s->device && !strcmp(s->device, want->device))
      return i;
    if (by_name < 0)
      by_name = i;
  }
  return by_name >= 0 ? by_name : 0;
}

static bool open_second(hbm__viewer_t *v, const hbm__query_t *q, const hbm__target_t *a,
                        hbm__target_t *b, hbm__response_t *r) {
  if (!hbm__target_open(v, q, "b_", false, b, r))
    return false;
  int space = second_space(q, a, b, r);
  b->analysis = space >= 0 ? hbm__loaded_analysis(b->entry, space) : NULL;
  if (!b->analysis) {
    if (space >= 0)
      hbm__respond_error(r, hbm__http_status(hbm_last_status()), "%s", hbm_last_error());
    hbm__target_close(v, b);
    return false;
  }
  b->space = space;
  b->summary = hbm_analysis_summary(b->analysis);
  return true;
}

static json_t *json_delta(uint64_t a, uint64_t b) {
  return json_integer(b >= a ? (json_int_t)(b - a) : -(json_int_t)(a - b));
}

static json_t *json_side(const hbm__target_t *t) {
  json_t *o = hbm__json_summary(t);
  set_new(o, "run", hbm__json_text(t->entry->run));
  set_new(o, "profile", hbm__json_text(t->entry->file));
  set_new(o, "kind",
          json_string(hbm_profile_kind(t->profile) == HBM_PROFILE_PLAN ? "plan" : "runtime"));
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

/* One side's memory over its steps (the analysis's timeline, bucket maxima), for the page to
 * draw both on one axis of the fraction of each program or run. */
static json_t *json_timeline(const hbm__target_t *t) {
  hbm_timeline_point_t pts[COMPARE_TIMELINE_POINTS];
  size_t n =
      hbm_analysis_timeline(t->analysis, 0, t->summary->n_steps, COMPARE_TIMELINE_POINTS, pts);
  json_t *steps = json_array(), *bytes = json_array();
  for (size_t i = 0; i < n; i++) {
    json_array_append_new(steps, json_integer(pts[i].step));
    json_array_append_new(bytes, hbm__json_u64(pts[i].bytes));
  }
  return json_pack("{s:o, s:o, s:I}", "steps", steps, "bytes", bytes, "n_steps",
                   (json_int_t)t->summary->n_steps);
}

static void answer_compare(const hbm__target_t *a, const hbm__target_t *b, hbm__response_t *r) {
  hbm_diff_t *d = hbm_diff_new(a->analysis, b->analysis);
  if (!d) {
    hbm__respond_error(r, 500, "%s", hbm_last_error());
    return;
  }
  char la[600], lb[600];
  snprintf(la, sizeof la, "%s/%s", a->entry->run, a->entry->file);
  snprintf(lb, sizeof lb, "%s/%s", b->entry->run, b->entry->file);
  const char *labels[2] = {la, lb};
  json_t *root = json_object();
  set_new(root, "a", json_side(a));
  set_new(root, "b", json_side(b));
  set_new(root, "delta", json_metric_deltas(a->summary, b->summary));
  set_new(root, "diff", hbm__diff_to_json(d, labels, COMPARE_TOP_ROWS));
  set_new(root, "timeline_a", json_timeline(a));
  set_new(root, "timeline_b", json_timeline(b));
  hbm_diff_free(d);
  hbm__respond_json(r, 200, root);
}

void hbm__api_compare(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm__target_t a, b;
  if (!hbm__target_open(v, q, "", true, &a, r))
    return;
  if (!open_second(v, q, &a, &b, r)) {
    hbm__target_close(v, &a);
    return;
  }
  answer_compare(&a, &b, r);
  hbm__target_close(v, &b);
  hbm__target_close(v, &a);
}

/* ---- /api/devices?run=R ---- */

/* The run's profiles, loaded through the cache (held until released); the files that do not
 * load are named in not_loaded. */
static size_t hold_run(hbm__viewer_t *v, const char *run, hbm__loaded_t **held, json_t *not_loaded,
                       hbm__response_t *r) {
  hbm_logdir_entry_t *list = NULL;
  size_t n_list = 0, n = 0;
  if (hbm__cache_listing(&v->cache, &list, &n_list, NULL, NULL) != HBM_OK) {
    hbm__respond_error(r, 500, "%s", hbm_last_error());
    return 0;
  }
  for (size_t i = 0; i < n_list && n < DEVICES_MAX_PROFILES; i++) {
    if (strcmp(list[i].run, run))
      continue;
    hbm__loaded_t *e = hbm__cache_get(&v->cache, run, list[i].file);
    if (e && e->profile) {
      held[n++] = e;
    } else {
      json_array_append_new(not_loaded, hbm__json_text(list[i].file));
      hbm__cache_release(&v->cache, e);
    }
  }
  free(list);
  if (n == 0)
    hbm__respond_error(r, 404, "run '%s': no profile that loads", run);
  return n;
}

void hbm__api_devices(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  const char *run = hbm__query_get(q, "run");
  if (!run) {
    hbm__respond_error(r, 400, "missing argument: run");
    return;
  }
  hbm__loaded_t *held[DEVICES_MAX_PROFILES];
  json_t *not_loaded = json_array();
  size_t n = hold_run(v, run, held, not_loaded, r);
  if (n == 0) {
    json_decref(not_loaded);
    return;
  }
  const hbm_profile_t *profiles[DEVICES_MAX_PROFILES];
  const char *names[DEVICES_MAX_PROFILES];
  for (size_t i = 0; i < n; i++) {
    profiles[i] = held[i]->profile;
    names[i] = held[i]->file;
  }
  json_t *root = hbm__devices_json(profiles, names, n);
  if (!root) {
    json_decref(not_loaded);
    hbm__respond_error(r, 500, "%s", hbm_last_error());
  } else {
    set_new(root, "not_loaded", not_loaded);
    hbm__respond_json(r, 200, root);
  }
  for (size_t i = 0; i < n; i++)
    hbm__cache_release(&v->cache, held[i]);
}
