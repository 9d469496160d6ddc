/* api.c — the viewer's JSON API, part one: what every endpoint shares (resolving run/profile/
 * space against the logdir listing, integer arguments, JSON helpers) and the endpoints about
 * the logdir and one profile as a whole: /api/runs, /api/profiles, /api/profile,
 * /api/summary, /api/timeline. Every number comes from the profile readers and the analysis
 * (hbm_analyze); nothing here computes a peak. docs/viewer.md documents the API. */
#include "profile/index.h"
#include "viewer/viewer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ---- responses ---- */

void hbm__response_free(hbm__response_t *r) {
  if (r->owned)
    free((void *)r->body);
  memset(r, 0, sizeof *r);
}

static void respond_text(hbm__response_t *r, int status, const char *type, char *body) {
  hbm__response_free(r);
  r->status = status;
  r->content_type = type;
  r->body = body ? body : "";
  r->len = body ? strlen(body) : 0;
  r->owned = body != NULL;
}

void hbm__respond_json(hbm__response_t *r, int status, json_t *root) {
  char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  if (!text) {
    respond_text(r, 500, "application/json", strdup("{\"error\":\"out of host memory\"}"));
    return;
  }
  respond_text(r, status, "application/json", text);
}

void hbm__respond_error(hbm__response_t *r, int status, const char *fmt, ...) {
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  va_list ap;
  va_start(ap, fmt);
  hbm_strbuf_vprintf(&sb, fmt, ap);
  va_end(ap);
  json_t *root = json_pack("{s:s}", "error", hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
  hbm__respond_json(r, status, root);
}

int hbm__http_status(hbm_status_t s) {
  switch (s) {
  case HBM_ERR_NOT_FOUND: return 404;
  case HBM_ERR_INVALID: return 400;
  default: return 500;
  }
}

/* ---- JSON helpers ---- */

json_t *hbm__json_u64(uint64_t v) {
  return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
}

/* json_string refuses invalid UTF-8; profile strings come from user files, so fall back to a
 * lossy copy rather than dropping the field. */
json_t *hbm__json_text(const char *s) {
  if (!s)
    return json_null();
  json_t *j = json_string(s);
  if (j)
    return j;
  size_t n = strlen(s);
  char *copy = malloc(n + 1);
  if (!copy)
    return json_null();
  for (size_t i = 0; i <= n; i++)
    copy[i] = (unsigned char)s[i] < 0x80 ? s[i] : '?';
  j = json_string(copy);
  free(copy);
  return j ? j : json_null();
}

static void set_new(json_t *obj, const char *key, json_t *value) {
  json_object_set_new(obj, key, value ? value : json_null());
}

/* ---- arguments ---- */

bool hbm__query_int(const hbm__query_t *q, const char *key, int64_t def, int64_t min, int64_t max,
                    int64_t *out, hbm__response_t *r) {
  const char *text = hbm__query_get(q, key);
  if (!text || !*text) {
    *out = def;
    return true;
  }
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || *end || end == text) {
    hbm__respond_error(r, 400, "argument %s=%.64s is not an integer", key, text);
    return false;
  }
  *out = v < min ? min : v > max ? max : (int64_t)v;
  return true;
}

static const char *required(const hbm__query_t *q, const char *prefix, const char *name,
                            hbm__response_t *r) {
  char key[64];
  snprintf(key, sizeof key, "%s%s", prefix, name);
  const char *v = hbm__query_get(q, key);
  if (!v || !*v) {
    hbm__respond_error(r, 400, "missing argument %s", key);
    return NULL;
  }
  return v;
}

/* ---- resolving a profile ---- */

bool hbm__target_open(hbm__viewer_t *v, const hbm__query_t *q, const char *prefix, bool with_space,
                      hbm__target_t *t, hbm__response_t *r) {
  memset(t, 0, sizeof *t);
  t->space = -1;
  const char *run = required(q, prefix, "run", r);
  const char *file = run ? required(q, prefix, "profile", r) : NULL;
  if (!file)
    return false;
  t->entry = hbm__cache_get(&v->cache, run, file);
  if (!t->entry) {
    hbm__respond_error(r, hbm__http_status(hbm_last_status()), "%s", hbm_last_error());
    return false;
  }
  if (!t->entry->profile) {
    hbm__respond_error(r, 500, "cannot load %s/%s: %s", t->entry->run, t->entry->file,
                       t->entry->error ? t->entry->error : "unknown error");
    hbm__target_close(v, t);
    return false;
  }
  t->profile = t->entry->profile;
  if (!with_space)
    return true;
  char key[64];
  snprintf(key, sizeof key, "%sspace", prefix);
  int64_t space;
  if (!hbm__query_int(q, key, 0, -1, INT32_MAX, &space, r)) {
    hbm__target_close(v, t);
    return false;
  }
  t->analysis = hbm__loaded_analysis(t->entry, (int)space);
  if (!t->analysis) {
    hbm__respond_error(r, hbm__http_status(hbm_last_status()), "%s", hbm_last_error());
    hbm__target_close(v, t);
    return false;
  }
  t->space = (int)space;
  t->summary = hbm_analysis_summary(t->analysis);
  return true;
}

bool hbm__target_full(hbm__viewer_t *v, const hbm__query_t *q, bool with_space, hbm__target_t *t,
                      hbm__response_t *r) {
  for (int tries = 0; tries < 4; tries++) { /* a summary first: its file is being read */
    if (!hbm__target_open(v, q, "", with_space, t, r))
      return false;
    if (!t->entry->summary_only)
      return true;
    hbm__loaded_t *full = hbm__cache_get_full(&v->cache, t->entry);
    t->entry = NULL;
    hbm__target_close(v, t);
    if (!full) {
      hbm__respond_error(r, 500, "%s", hbm_last_error());
      return false;
    }
    hbm__cache_release(&v->cache, full); /* opened again below, as any request would */
  }
  hbm__respond_error(r, 503, "the profile keeps changing while it is read: try again");
  return false;
}

void hbm__target_close(hbm__viewer_t *v, hbm__target_t *t) {
  hbm__cache_release(&v->cache, t->entry);
  memset(t, 0, sizeof *t);
  t->space = -1;
}

/* ---- /api/runs ---- */

/* What the listing left out (links leading out of the logdir, links to nothing), each path
 * relative to the logdir, with the reason. */
static json_t *skipped_json(const hbm__viewer_t *v, const hbm_logdir_skip_t *skipped, size_t n) {
  json_t *list = json_array();
  size_t len = strlen(v->cache.logdir);
  for (size_t i = 0; i < n && i < HBM_LOGDIR_SKIPS_KEPT; i++) {
    const char *path = skipped[i].path;
    if (!strncmp(path, v->cache.logdir, len) && path[len] == '/')
      path += len + 1;
    json_t *item = json_object();
    set_new(item, "path", hbm__json_text(path));
    set_new(item, "why", hbm__json_text(skipped[i].why));
    json_array_append_new(list, item);
  }
  return list;
}

void hbm__api_runs(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm_logdir_entry_t *list;
  hbm_logdir_skip_t *skipped;
  size_t n, n_skipped;
  if (hbm__cache_listing(&v->cache, &list, &n, &skipped, &n_skipped) != HBM_OK) {
    hbm__respond_error(r, 500, "%s", hbm_last_error());
    return;
  }
  /* first[k]: the listing entry that opened run k (the profiles of one run need not be
   * listed together; runs keep the listing's order, newest first) */
  size_t *first = malloc((n ? n : 1) * sizeof *first), n_runs = 0;
  json_t *runs = json_array();
  for (size_t i = 0; first && i < n; i++) {
    size_t k = 0;
    while (k < n_runs && strcmp(list[first[k]].run, list[i].run))
      k++;
    if (k == n_runs) {
      first[n_runs++] = i;
      json_t *run = json_object();
      set_new(run, "run", hbm__json_text(list[i].run));
      set_new(run, "profiles", json_integer(0));
      set_new(run, "bytes", json_integer(0));
      set_new(run, "mtime", json_integer(list[i].mtime));
      json_array_append_new(runs, run);
    }
    json_t *run = json_array_get(runs, k);
    json_int_t mtime = json_integer_value(json_object_get(run, "mtime"));
    set_new(run, "profiles",
            json_integer(json_integer_value(json_object_get(run, "profiles")) + 1));
    set_new(run, "bytes",
            json_integer(json_integer_value(json_object_get(run, "bytes")) +
                         (json_int_t)list[i].bytes));
    set_new(run, "mtime", json_integer(list[i].mtime > mtime ? list[i].mtime : mtime));
  }
  free(first);
  free(list);
  json_t *root = json_object();
  set_new(root, "logdir", hbm__json_text(v->cache.logdir));
  set_new(root, "runs", runs);
  set_new(root, "skipped", skipped_json(v, skipped, n_skipped));
  set_new(root, "skipped_count", json_integer((json_int_t)n_skipped));
  set_new(root, "follow_links", json_boolean(v->cache.flags & HBM_LOGDIR_FOLLOW_LINKS));
  free(skipped);
  hbm__respond_json(r, 200, root);
}

/* ---- /api/profiles ---- */

/* The module or host a profile stands for, when the cache already knows it (the listing
 * never loads a profile just to name it). */
static void describe_if_loaded(hbm__viewer_t *v, const char *path, json_t *item) {
  pthread_mutex_lock(&v->cache.lock);
  for (hbm__loaded_t *e = v->cache.entries; e; e = e->next) {
    if (strcmp(e->path, path) || e->loading)
      continue;
    if (e->profile) {
      set_new(item, "kind",
              json_string(hbm_profile_kind(e->profile) == HBM_PROFILE_PLAN ? "plan" : "runtime"));
      set_new(item, "name", hbm__json_text(hbm_profile_name(e->profile)));
    } else {
      set_new(item, "error", hbm__json_text(e->error));
    }
    break;
  }
  pthread_mutex_unlock(&v->cache.lock);
}

void hbm__api_profiles(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  const char *run = required(q, "", "run", r);
  if (!run)
    return;
  hbm_logdir_entry_t *list;
  size_t n;
  if (hbm__cache_listing(&v->cache, &list, &n, NULL, NULL) != HBM_OK) {
    hbm__respond_error(r, 500, "%s", hbm_last_error());
    return;
  }
  json_t *profiles = json_array();
  const char *largest = NULL;
  uint64_t largest_bytes = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(list[i].run, run))
      continue;
    json_t *item = json_object();
    set_new(item, "file", hbm__json_text(list[i].file));
    set_new(item, "bytes", hbm__json_u64(list[i].bytes));
    set_new(item, "mtime", json_integer(list[i].mtime));
    describe_if_loaded(v, list[i].path, item);
    json_array_append_new(profiles, item);
    if (!largest || list[i].bytes > largest_bytes) {
      largest = list[i].file;
      largest_bytes = list[i].bytes;
    }
  }
  if (json_array_size(profiles) == 0) {
    json_decref(profiles);
    free(list);
    hbm__respond_error(r, 404, "no run '%s' in the logdir", run);
    return;
  }
  /* Several modules in one run: default to the largest, list them all (XProf's users see
   * the wrong module picked when it takes the first). */
  json_t *root = json_object();
  set_new(root, "run", hbm__json_text(run));
  set_new(root, "profiles", profiles);
  set_new(root, "default", hbm__json_text(largest));
  free(list);
  hbm__respond_json(r, 200, root);
}

/* ---- /api/profile ---- */

static json_t *json_meta(const hbm_profile_t *p) {
  json_t *meta = json_object();
  for (size_t i = 0; i < hbm_profile_meta_count(p); i++) {
    const char *key = hbm_profile_meta_key(p, i);
    const char *value = key ? hbm_profile_meta(p, key) : NULL;
    if (value) /* a key that is not UTF-8 is refused by jansson and skipped */
      set_new(meta, key, hbm__json_text(value));
  }
  return meta;
}

static json_t *json_spaces(const hbm_profile_t *p) {
  json_t *spaces = json_array();
  for (int i = 0; i < hbm_profile_space_count(p); i++) {
    const hbm_space_info_t *s = hbm_profile_space(p, i);
    json_t *item = json_object();
    set_new(item, "index", json_integer(i));
    set_new(item, "name", hbm__json_text(s ? s->name : NULL));
    set_new(item, "device", hbm__json_text(s ? s->device : NULL));
    set_new(item, "color", json_integer(s ? s->color : 0));
    set_new(item, "limit", hbm__json_u64(s ? s->limit : 0));
    json_array_append_new(spaces, item);
  }
  return spaces;
}

static json_t *json_profile_info(const hbm__target_t *t) {
  const hbm_profile_t *p = t->profile;
  json_t *o = json_object();
  set_new(o, "run", hbm__json_text(t->entry->run));
  set_new(o, "profile", hbm__json_text(t->entry->file));
  set_new(o, "name", hbm__json_text(hbm_profile_name(p)));
  set_new(o, "kind", json_string(hbm_profile_kind(p) == HBM_PROFILE_PLAN ? "plan" : "runtime"));
  set_new(o, "meta", json_meta(p));
  set_new(o, "spaces", json_spaces(p));
  set_new(o, "n_steps", json_integer(hbm_profile_step_count(p)));
  set_new(o, "n_buffers", json_integer(hbm_profile_buffer_count(p)));
  set_new(o, "n_oom", json_integer((json_int_t)hbm_profile_oom_count(p)));
  set_new(o, "n_markers", json_integer((json_int_t)hbm_profile_marker_count(p)));
  set_new(o, "bytes", hbm__json_u64(t->entry->bytes));
  set_new(o, "load_ms", json_real(t->entry->load_ms));
  /* the first view from the profile's index, while the whole file is read behind it */
  set_new(o, "from_index", json_boolean(t->entry->summary_only));
  const char *lost = hbm_profile_meta(p, "lost");
  set_new(o, "warning",
          lost ? hbm__json_text(lost) : json_null()); /* a truncated trace: what was lost */
  const char *notes = hbm_profile_meta(p, "notes");   /* e.g. a log whose times go backwards */
  set_new(o, "notes", notes ? hbm__json_text(notes) : json_null());
  return o;
}

void hbm__api_profile(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm__target_t t;
  if (!hbm__target_open(v, q, "", false, &t, r))
    return;
  hbm__respond_json(r, 200, json_profile_info(&t));
  hbm__target_close(v, &t);
}

/* ---- /api/summary ---- */

static json_t *json_groups(const hbm_analysis_t *a) {
  size_t n = 0;
  const hbm_group_total_t *g = hbm_analysis_groups(a, &n);
  json_t *groups = json_array();
  for (size_t i = 0; g && i < n; i++) {
    json_t *item = json_object();
    set_new(item, "name", hbm__json_text(g[i].name));
    set_new(item, "bytes", hbm__json_u64(g[i].bytes));
    set_new(item, "count", json_integer((json_int_t)g[i].count));
    json_array_append_new(groups, item);
  }
  return groups;
}

json_t *hbm__json_summary(const hbm__target_t *t) {
  const hbm_summary_t *s = t->summary;
  const hbm_space_info_t *space = hbm_profile_space(t->profile, t->space);
  json_t *o = json_object();
  set_new(o, "space", json_integer(t->space));
  set_new(o, "space_name", hbm__json_text(space ? space->name : NULL));
  set_new(o, "device", hbm__json_text(space ? space->device : NULL));
  set_new(o, "n_steps", json_integer(s->n_steps));
  set_new(o, "n_buffers", json_integer(s->n_buffers));
  set_new(o, "peak_bytes", hbm__json_u64(s->peak_bytes));
  set_new(o, "peak_step", json_integer(s->peak_step));
  set_new(o, "peak_time_ns", json_integer(s->peak_time_ns));
  set_new(o, "peak_unpadded_bytes", hbm__json_u64(s->peak_unpadded_bytes));
  set_new(o, "padding_bytes", hbm__json_u64(s->padding_bytes));
  set_new(o, "indefinite_bytes", hbm__json_u64(s->indefinite_bytes));
  set_new(o, "argument_bytes", hbm__json_u64(s->argument_bytes));
  set_new(o, "output_bytes", hbm__json_u64(s->output_bytes));
  set_new(o, "temporary_bytes", hbm__json_u64(s->temporary_bytes));
  set_new(o, "heap_bytes", hbm__json_u64(s->heap_bytes));
  /* A profile without reservation events (an RMM log, a plan) does not know its reserved
   * memory: null, as `hbm report` says "unknown", never 0. */
  bool reserved_known = s->peak_reserved_bytes > 0;
  set_new(o, "reserved_known", json_boolean(reserved_known));
  set_new(o, "peak_reserved_bytes", reserved_known ? hbm__json_u64(s->peak_reserved_bytes) : NULL);
  set_new(o, "reserved_at_peak", reserved_known ? hbm__json_u64(s->reserved_at_peak) : NULL);
  set_new(o, "limit_bytes", hbm__json_u64(s->limit_bytes));
  set_new(o, "fragmentation_at_peak", json_real(s->fragmentation_at_peak));
  set_new(o, "largest_free_at_peak", hbm__json_u64(s->largest_free_at_peak));
  set_new(o, "n_buffers_at_peak", json_integer((json_int_t)s->n_buffers_at_peak));
  set_new(o, "n_oom", json_integer((json_int_t)s->n_oom));
  set_new(o, "overflowed", json_boolean(s->overflowed)); /* a total saturated at 8 EiB */
  json_t *cats = json_object();
  for (int c = 0; c < HBM_CAT_COUNT; c++)
    if (s->category_bytes[c])
      set_new(cats, hbm_category_name((hbm_category_t)c), hbm__json_u64(s->category_bytes[c]));
  set_new(o, "category_bytes", cats);
  set_new(o, "groups", json_groups(t->analysis));
  const char *label = s->peak_step >= 0 ? hbm_profile_step_label(t->profile, s->peak_step) : NULL;
  set_new(o, "peak_label", hbm__json_text(label));
  return o;
}

void hbm__api_summary(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm__target_t t;
  if (!hbm__target_open(v, q, "", true, &t, r))
    return;
  json_t *root = hbm__json_summary(&t);
  set_new(root, "profile", json_profile_info(&t));
  hbm__respond_json(r, 200, root);
  hbm__target_close(v, &t);
}

/* ---- /api/timeline ---- */

#define TIMELINE_DEFAULT_POINTS 1000
#define TIMELINE_MAX_POINTS 20000

/* The op shown at a point: the step's label (plans: the instruction), else the op of the
 * buffer the step allocated or freed (runtime). */
static const char *step_op(hbm__target_t *t, int64_t step, int *event) {
  *event = 0;
  const char *label = hbm_profile_step_label(t->profile, step);
  if (label)
    return label;
  if (hbm__profile_is_summary(t->profile)) /* read from its index, which keeps the step's op */
    return hbm__profile_step_op(t->profile, step, event);
  bool is_free;
  int64_t idx = hbm__loaded_step_buffer(t->entry, step, &is_free);
  if (idx < 0)
    return NULL;
  const hbm_buffer_t *b = hbm_profile_buffer(t->profile, idx);
  *event = is_free ? 2 : 1;
  return b ? b->op : NULL;
}

/* The index of s in the table `ops` (added when new; profile strings are interned, so the
 * pointer identifies the text); -1 for none. */
static json_t *op_index(hbm_u64map_t *seen, json_t *ops, const char *s) {
  uint64_t k;
  if (!s)
    return json_integer(-1);
  if (!hbm_u64map_get(seen, (uint64_t)(uintptr_t)s, &k)) {
    k = json_array_size(ops);
    json_array_append_new(ops, hbm__json_text(s));
    hbm_u64map_put(seen, (uint64_t)(uintptr_t)s, k);
  }
  return json_integer((json_int_t)k);
}

static json_t *timeline_json(hbm__target_t *t, const hbm_timeline_point_t *pts, size_t n,
                             int64_t from, int64_t to) {
  bool runtime = hbm_profile_kind(t->profile) == HBM_PROFILE_RUNTIME;
  bool reserved_known = t->summary->peak_reserved_bytes > 0; /* else "reserved": null */
  json_t *steps = json_array(), *bytes = json_array(), *unpadded = json_array();
  json_t *reserved = json_array(), *times = json_array(), *opi = json_array();
  json_t *ops = json_array(), *events = json_array();
  hbm_u64map_t seen;
  hbm_u64map_init(&seen);
  for (size_t i = 0; i < n; i++) {
    json_array_append_new(steps, json_integer(pts[i].step));
    json_array_append_new(bytes, hbm__json_u64(pts[i].bytes));
    json_array_append_new(unpadded, hbm__json_u64(pts[i].unpadded));
    if (reserved_known)
      json_array_append_new(reserved, hbm__json_u64(pts[i].reserved));
    json_array_append_new(times, json_integer(hbm_profile_step_time(t->profile, pts[i].step)));
    int event;
    json_array_append_new(opi, op_index(&seen, ops, step_op(t, pts[i].step, &event)));
    json_array_append_new(events, json_integer(event));
  }
  hbm_u64map_free(&seen);
  json_t *o = json_object();
  set_new(o, "from", json_integer(from));
  set_new(o, "to", json_integer(to));
  set_new(o, "n_steps", json_integer(t->summary->n_steps));
  set_new(o, "peak_step", json_integer(t->summary->peak_step));
  set_new(o, "peak_bytes", hbm__json_u64(t->summary->peak_bytes));
  set_new(o, "kind", json_string(runtime ? "runtime" : "plan"));
  set_new(o, "step", steps);
  set_new(o, "bytes", bytes);
  set_new(o, "unpadded", unpadded);
  if (!reserved_known) {
    json_decref(reserved);
    reserved = NULL;
  }
  set_new(o, "reserved", reserved);
  set_new(o, "time_ns", times);
  set_new(o, "op", opi);
  set_new(o, "ops", ops);
  set_new(o, "event", events);
  return o;
}

void hbm__api_timeline(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm__target_t t;
  if (!hbm__target_open(v, q, "", true, &t, r))
    return;
  int64_t n_steps = t.summary->n_steps, from, to, points;
  if (!hbm__query_int(q, "from", 0, 0, n_steps, &from, r) ||
      !hbm__query_int(q, "to", n_steps, 0, n_steps, &to, r) ||
      !hbm__query_int(q, "points", TIMELINE_DEFAULT_POINTS, 1, TIMELINE_MAX_POINTS, &points, r)) {
    hbm__target_close(v, &t);
    return;
  }
  if (from > to) {
    hbm__respond_error(r, 400, "from=%" PRId64 " is after to=%" PRId64, from, to);
    hbm__target_close(v, &t);
    return;
  }
  hbm_timeline_point_t *pts = malloc((size_t)points * sizeof *pts);
  if (!pts) {
    hbm__respond_error(r, 500, "out of host memory");
    hbm__target_close(v, &t);
    return;
  }
  size_t n = from < to ? hbm_analysis_timeline(t.analysis, from, to, (size_t)points, pts) : 0;
  hbm__respond_json(r, 200, timeline_json(&t, pts, n, from, to));
  free(pts);
  hbm__target_close(v, &t);
}
