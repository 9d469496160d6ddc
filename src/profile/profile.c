/* profile.c — the one memory model in the middle of hbm. Every input (a run recorded by the
 * profiler, an RMM log, a compile-time plan, an XLA dump) is built into an hbm_profile_t here,
 * and every output (terminal report, viewer, Chrome export) reads it back through the
 * functions below and the analysis in analysis.c.
 *
 * A profile is a set of buffers with live ranges [start, end) over a sequence of steps, plus
 * reservation changes, OOM events and markers, each tied to a step and a memory space. All
 * strings are interned in the profile, so tags that repeat a million times cost one copy. */
#include "profile/index.h"
#include "profile/profile_build.h"
#include "profile/profile_internal.h"

#include <stdlib.h>
#include <string.h>

/* Grows *items (of `elem` bytes each) so that it holds at least `need` items. */
static bool grow_array(void **items, size_t *cap, size_t need, size_t elem) {
  void *grown = hbm__grow_array(*items, cap, need, elem, 16);
  if (!grown)
    return false;
  *items = grown;
  return true;
}

#define GROW(p, field, count, capfield)                                                            \
  grow_array((void **)&(p)->field, &(p)->capfield, (size_t)(count) + 1, sizeof *(p)->field)

static hbm_status_t out_of_memory(const char *what) {
  return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory adding %s to a profile", what);
}

hbm_profile_t *hbm_profile_new(hbm_profile_kind_t kind, const char *name) {
  if (kind != HBM_PROFILE_RUNTIME && kind != HBM_PROFILE_PLAN) {
    hbm__error(HBM_ERR_INVALID, "unknown profile kind %d", (int)kind);
    return NULL;
  }
  hbm_profile_t *p = calloc(1, sizeof *p);
  if (!p || !(p->strings = hbm_intern_new())) {
    free(p);
    out_of_memory("the profile itself");
    return NULL;
  }
  p->kind = kind;
  p->name = hbm_intern(p->strings, name ? name : "profile");
  return p;
}

void hbm_profile_free(hbm_profile_t *p) {
  if (!p)
    return;
  for (int i = 0; i < p->n_spaces; i++)
    hbm_u64map_free(&p->open[i]);
  free(p->open);
  free(p->spaces);
  free(p->meta);
  free(p->step_time);
  free(p->step_label);
  free(p->buffers);
  free(p->reserves);
  free(p->ooms);
  free(p->markers);
  hbm_intern_free(p->strings);
  hbm__digest_free(p->digest);
  hbm__index_stream_free(p->stream);
  free(p);
}

hbm_status_t hbm_profile_set_meta(hbm_profile_t *p, const char *key, const char *value) {
  if (!key || !value)
    return hbm__error(HBM_ERR_INVALID, "profile metadata needs a key and a value");
  const char *k = hbm_intern(p->strings, key), *v = hbm_intern(p->strings, value);
  if (!k || !v)
    return out_of_memory("metadata");
  for (size_t i = 0; i < p->n_meta; i++)
    if (p->meta[i].key == k) {
      p->meta[i].value = v;
      return HBM_OK;
    }
  if (!GROW(p, meta, p->n_meta, cap_meta))
    return out_of_memory("metadata");
  p->meta[p->n_meta].key = k;
  p->meta[p->n_meta].value = v;
  p->n_meta++;
  return HBM_OK;
}

int hbm_profile_add_space(hbm_profile_t *p, const char *name, const char *device, int color,
                          uint64_t limit) {
  if (!name || !*name) {
    hbm__error(HBM_ERR_INVALID, "a memory space needs a name");
    return -1;
  }
  size_t cap = p->cap_spaces;
  if (!GROW(p, spaces, p->n_spaces, cap_spaces) ||
      !grow_array((void **)&p->open, &cap, (size_t)p->n_spaces + 1, sizeof *p->open)) {
    out_of_memory("a memory space");
    return -1;
  }
  hbm_space_info_t *s = &p->spaces[p->n_spaces];
  s->name = hbm_intern(p->strings, name);
  s->device = hbm_intern(p->strings, device ? device : "");
  s->color = color;
  s->limit = limit;
  hbm_u64map_init(&p->open[p->n_spaces]);
  if (p->stream && !hbm__index_stream_space(p->stream, p->n_spaces))
    return -1;
  return p->n_spaces++;
}

int hbm_profile_find_space(const hbm_profile_t *p, const char *name, const char *device) {
  for (int i = 0; i < p->n_spaces; i++)
    if (!strcmp(p->spaces[i].name, name) && (!device || !strcmp(p->spaces[i].device, device)))
      return i;
  return -1;
}

int64_t hbm_profile_add_step(hbm_profile_t *p, int64_t time_ns, const char *label) {
  if (p->stream) { /* read as a summary: not kept */
    const char *l = hbm_intern(p->strings, label);
    if ((label && !l) || !hbm__index_stream_step(p->stream, time_ns, l))
      return -1;
    return p->n_steps++;
  }
  if (!GROW(p, step_time, p->n_steps, cap_steps)) {
    out_of_memory("a step");
    return -1;
  }
  const char *l = hbm_intern(p->strings, label);
  if (label && !l)
    return -1;
  if (l || p->step_label) { /* labels take memory only in profiles that have some */
    size_t had = p->cap_labels;
    if (!GROW(p, step_label, p->n_steps, cap_labels)) {
      out_of_memory("a step");
      return -1;
    }
    memset(p->step_label + had, 0, (p->cap_labels - had) * sizeof *p->step_label);
    p->step_label[p->n_steps] = l;
  }
  hbm__populate_ahead(p->step_time, (size_t)p->n_steps, sizeof *p->step_time,
                      p->cap_steps * sizeof *p->step_time);
  p->step_time[p->n_steps] = time_ns;
  return p->n_steps++;
}

static hbm_status_t check_space(const hbm_profile_t *p, int space) {
  if (space < 0 || space >= p->n_spaces)
    return hbm__error(HBM_ERR_INVALID, "memory space %d does not exist (the profile has %d)", space,
                      p->n_spaces);
  return HBM_OK;
}

/* Interns the tag strings of b in place; false if memory ran out. A profile read as a summary
 * keeps a buffer's source (often one per buffer) only while the buffer matters to it. */
static bool intern_buffer_strings(hbm_profile_t *p, hbm_buffer_t *b) {
  const char **fields[] = {&b->op,     &b->shape, &b->group, &b->source,
                           &b->opcode, &b->label, &b->stack};
  for (size_t i = 0; i < HBM_ARRAY_LEN(fields); i++) {
    if (!*fields[i])
      continue;
    bool apart = p->stream && fields[i] == &b->source;
    if (!(*fields[i] = apart ? hbm__index_stream_source(p->stream, *fields[i])
                             : hbm_intern(p->strings, *fields[i])))
      return false;
  }
  return true;
}

int64_t hbm_profile_add_buffer(hbm_profile_t *p, const hbm_buffer_t *b) {
  if (check_space(p, b->space) != HBM_OK)
    return -1;
  if (b->start < 0 || (b->end >= 0 && b->end < b->start)) {
    hbm__error(HBM_ERR_INVALID, "buffer live range [%lld, %lld) is not a range",
               (long long)b->start, (long long)b->end);
    return -1;
  }
  if ((unsigned)b->category >= HBM_CAT_COUNT) {
    hbm__error(HBM_ERR_INVALID, "unknown buffer category %d", (int)b->category);
    return -1;
  }
  if (!p->stream && !GROW(p, buffers, p->n_buffers, cap_buffers)) {
    out_of_memory("a buffer");
    return -1;
  }
  hbm_buffer_t copy = *b;
  if (!intern_buffer_strings(p, &copy)) {
    out_of_memory("a buffer's tags");
    return -1;
  }
  if (p->stream)
    return hbm__profile_add_buffer_interned(p, &copy);
  copy.id = (uint64_t)p->n_buffers;
  p->buffers[p->n_buffers] = copy;
  return p->n_buffers++;
}

hbm_status_t hbm_profile_end_buffer(hbm_profile_t *p, int64_t idx, int64_t end) {
  if (p->stream && idx >= 0 && idx < p->n_buffers)
    return hbm__index_stream_end(p->stream, idx, end);
  if (idx < 0 || idx >= p->n_buffers)
    return hbm__error(HBM_ERR_NOT_FOUND, "buffer %lld does not exist", (long long)idx);
  if (end < p->buffers[idx].start)
    return hbm__error(HBM_ERR_INVALID,
                      "buffer %lld would end at step %lld before it starts "
                      "at %lld",
                      (long long)idx, (long long)end, (long long)p->buffers[idx].start);
  p->buffers[idx].end = end;
  return HBM_OK;
}

int64_t hbm_profile_alloc_at(hbm_profile_t *p, int64_t step, int space, uint64_t address,
                             uint64_t size, const hbm_tag_t *tag) {
  if (check_space(p, space) != HBM_OK)
    return -1;
  if (hbm_u64map_get(&p->open[space], address, NULL)) {
    hbm__error(HBM_ERR_INVALID, "address 0x%llx in space %s is allocated again while live",
               (unsigned long long)address, p->spaces[space].name);
    return -1;
  }
  hbm_buffer_t b = {.address = address,
                    .size = size,
                    .unpadded_size = size,
                    .start = step,
                    .end = -1,
                    .space = space};
  if (tag) {
    b.op = tag->op;
    b.shape = tag->shape;
    b.category = tag->category;
    b.group = tag->group;
    b.source = tag->source;
  }
  int64_t idx = hbm_profile_add_buffer(p, &b);
  if (idx < 0)
    return -1;
  if (!hbm_u64map_put(&p->open[space], address, (uint64_t)idx)) {
    p->n_buffers--;
    out_of_memory("an address");
    return -1;
  }
  return idx;
}

hbm_status_t hbm_profile_free_at(hbm_profile_t *p, int64_t step, int space, uint64_t address) {
  hbm_status_t s = check_space(p, space);
  if (s != HBM_OK)
    return s;
  uint64_t idx;
  if (!hbm_u64map_remove(&p->open[space], address, &idx))
    return hbm__error(HBM_ERR_NOT_FOUND, "free of 0x%llx in space %s: no live buffer there",
                      (unsigned long long)address, p->spaces[space].name);
  return hbm_profile_end_buffer(p, (int64_t)idx, step);
}

hbm_status_t hbm_profile_add_reserve(hbm_profile_t *p, const hbm_reserve_event_t *e) {
  hbm_status_t s = check_space(p, e->space);
  if (s != HBM_OK)
    return s;
  if ((unsigned)e->op > HBM_RESERVE_RELEASE)
    return hbm__error(HBM_ERR_INVALID, "unknown reservation change %d", (int)e->op);
  if (!GROW(p, reserves, p->n_reserves, cap_reserves))
    return out_of_memory("a reservation change");
  p->reserves[p->n_reserves++] = *e;
  return HBM_OK;
}

hbm_status_t hbm_profile_add_oom(hbm_profile_t *p, const hbm_oom_event_t *e) {
  hbm_status_t s = check_space(p, e->space);
  if (s != HBM_OK)
    return s;
  if (!GROW(p, ooms, p->n_ooms, cap_ooms))
    return out_of_memory("an OOM event");
  hbm_oom_event_t copy = *e;
  copy.message = hbm_intern(p->strings, e->message ? e->message : "");
  if (!copy.message)
    return out_of_memory("an OOM message");
  p->ooms[p->n_ooms++] = copy;
  return HBM_OK;
}

hbm_status_t hbm_profile_add_marker(hbm_profile_t *p, const hbm_marker_t *m) {
  if ((unsigned)m->kind > HBM_MARKER_STEP_END)
    return hbm__error(HBM_ERR_INVALID, "unknown marker kind %d", (int)m->kind);
  if (!GROW(p, markers, p->n_markers, cap_markers))
    return out_of_memory("a marker");
  hbm_marker_t copy = *m;
  copy.text = hbm_intern(p->strings, m->text ? m->text : "");
  if (!copy.text)
    return out_of_memory("a marker's text");
  p->markers[p->n_markers++] = copy;
  return HBM_OK;
}

/* Checks that every step reference lies inside the profile. */
/* The events other than buffers inside the profile's steps. */
static hbm_status_t check_event_steps(const hbm_profile_t *p) {
  for (size_t i = 0; i < p->n_reserves; i++)
    if (p->reserves[i].step < 0 || p->reserves[i].step > p->n_steps)
      return hbm__error(HBM_ERR_INVALID,
                        "reservation change %zu at step %lld is outside the "
                        "profile's %lld steps",
                        i, (long long)p->reserves[i].step, (long long)p->n_steps);
  for (size_t i = 0; i < p->n_ooms; i++)
    if (p->ooms[i].step < 0 || p->ooms[i].step > p->n_steps)
      return hbm__error(HBM_ERR_INVALID,
                        "OOM event %zu at step %lld is outside the profile's "
                        "%lld steps",
                        i, (long long)p->ooms[i].step, (long long)p->n_steps);
  return HBM_OK;
}

/* Closes the open ranges and checks every buffer's in one pass (10^8 events: 5x10^7 buffers,
 * 6 GB, read once). */
hbm_status_t hbm_profile_finish(hbm_profile_t *p) {
  if (p->stream) /* it closes what is still live */
    return hbm__profile_finish_closed(p);
  for (int64_t i = 0; i < p->n_buffers; i++) {
    hbm_buffer_t *b = &p->buffers[i];
    if (b->end < 0) {
      b->end = p->n_steps;
      b->flags |= HBM_BUF_LIVE_OUT;
    }
    if (b->flags & HBM_BUF_INDEFINITE) {
      b->start = 0;
      b->end = p->n_steps;
    }
    if (b->start > p->n_steps || b->end > p->n_steps)
      return hbm__error(HBM_ERR_INVALID,
                        "buffer %lld lives over [%lld, %lld) but the "
                        "profile has %lld steps",
                        (long long)i, (long long)b->start, (long long)b->end,
                        (long long)p->n_steps);
  }
  for (int i = 0; i < p->n_spaces; i++) {
    hbm_u64map_free(&p->open[i]);
    hbm_u64map_init(&p->open[i]);
  }
  return check_event_steps(p);
}

hbm_status_t hbm__profile_finish_closed(hbm_profile_t *p) {
  hbm_status_t s = p->stream ? hbm__index_stream_finish(p->stream) : HBM_OK;
  if (s != HBM_OK)
    return s;
  for (int i = 0; i < p->n_spaces; i++) {
    hbm_u64map_free(&p->open[i]);
    hbm_u64map_init(&p->open[i]);
  }
  return check_event_steps(p);
}

/* ---- reading ---- */

hbm_profile_kind_t hbm_profile_kind(const hbm_profile_t *p) { return p->kind; }
const char *hbm_profile_name(const hbm_profile_t *p) { return p->name; }

const char *hbm_profile_meta(const hbm_profile_t *p, const char *key) {
  for (size_t i = 0; i < p->n_meta; i++)
    if (!strcmp(p->meta[i].key, key))
      return p->meta[i].value;
  return NULL;
}

size_t hbm_profile_meta_count(const hbm_profile_t *p) { return p->n_meta; }

const char *hbm_profile_meta_key(const hbm_profile_t *p, size_t i) {
  return i < p->n_meta ? p->meta[i].key : NULL;
}

int hbm_profile_space_count(const hbm_profile_t *p) { return p->n_spaces; }

const hbm_space_info_t *hbm_profile_space(const hbm_profile_t *p, int i) {
  return i >= 0 && i < p->n_spaces ? &p->spaces[i] : NULL;
}

/* A summary profile (read from its index) answers from the index: index_read.c. */

int64_t hbm_profile_step_count(const hbm_profile_t *p) {
  return p->digest ? hbm__digest_step_count(p->digest) : p->n_steps;
}

int64_t hbm_profile_step_time(const hbm_profile_t *p, int64_t step) {
  if (p->digest)
    return hbm__digest_step_time(p->digest, step);
  return step >= 0 && step < p->n_steps && p->step_time ? p->step_time[step] : 0;
}

const char *hbm_profile_step_label(const hbm_profile_t *p, int64_t step) {
  if (p->digest)
    return hbm__digest_step_label(p->digest, step);
  return step >= 0 && step < p->n_steps && p->step_label ? p->step_label[step] : NULL;
}

int64_t hbm_profile_buffer_count(const hbm_profile_t *p) {
  return p->digest ? hbm__digest_buffer_count(p->digest) : p->n_buffers;
}

const hbm_buffer_t *hbm_profile_buffer(const hbm_profile_t *p, int64_t i) {
  if (p->digest)
    return hbm__digest_buffer(p->digest, i);
  return i >= 0 && i < p->n_buffers && p->buffers ? &p->buffers[i] : NULL;
}

size_t hbm_profile_reserve_count(const hbm_profile_t *p) { return p->n_reserves; }

const hbm_reserve_event_t *hbm_profile_reserve(const hbm_profile_t *p, size_t i) {
  return i < p->n_reserves ? &p->reserves[i] : NULL;
}

size_t hbm_profile_oom_count(const hbm_profile_t *p) { return p->n_ooms; }

const hbm_oom_event_t *hbm_profile_oom(const hbm_profile_t *p, size_t i) {
  return i < p->n_ooms ? &p->ooms[i] : NULL;
}

size_t hbm_profile_marker_count(const hbm_profile_t *p) { return p->n_markers; }

const hbm_marker_t *hbm_profile_marker(const hbm_profile_t *p, size_t i) {
  return i < p->n_markers ? &p->markers[i] : NULL;
}

/* ---- names ---- */

static const char *const category_names[HBM_CAT_COUNT] = {"unknown",      "parameter", "output",
                                                          "thread-local", "constant",  "temporary"};

const char *hbm_category_name(hbm_category_t c) {
  return (unsigned)c < HBM_CAT_COUNT ? category_names[c] : "unknown";
}

hbm_status_t hbm_category_parse(const char *name, hbm_category_t *out) {
  static const struct {
    const char *alias;
    hbm_category_t category;
  } aliases[] = {{"input", HBM_CAT_PARAMETER},          {"argument", HBM_CAT_PARAMETER},
                 {"program input", HBM_CAT_PARAMETER},  {"temp", HBM_CAT_TEMPORARY},
                 {"threadlocal", HBM_CAT_THREAD_LOCAL}, {"thread_local", HBM_CAT_THREAD_LOCAL}};
  for (int c = 0; c < HBM_CAT_COUNT; c++)
    if (name && !strcmp(name, category_names[c])) {
      *out = (hbm_category_t)c;
      return HBM_OK;
    }
  for (size_t i = 0; name && i < HBM_ARRAY_LEN(aliases); i++)
    if (!strcmp(name, aliases[i].alias)) {
      *out = aliases[i].category;
      return HBM_OK;
    }
  return hbm__error(HBM_ERR_INVALID,
                    "unknown category '%s'; expected parameter, output, "
                    "thread-local, constant or temporary",
                    name ? name : "");
}
