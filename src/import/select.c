/* select.c — which part of which profile a command is about, as `hbm diff` names it:
 * "PATH", "PATH#SPACE", "PATH@STEP", "PATH@FROM:TO" and "PATH#SPACE@STEP" (hbm.h says what
 * each means). A step window becomes a profile of its own (hbm_profile_window), so its peak is
 * the analysis's like any other: nothing here computes a peak. */
#include "base/base.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the selector ---- */

typedef struct spec_parts {
  char path[4096];
  const char *space; /* after '#', NULL when none */
  const char *step;  /* after '@', NULL when none */
  char rest[512];    /* holds space and step */
} spec_parts_t;

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* PATH is the whole spec when such a file exists; else '#' and '@' in its last component. */
static hbm_status_t split_spec(const char *spec, spec_parts_t *out) {
  memset(out, 0, sizeof *out);
  if (strlen(spec) >= sizeof out->path)
    return hbm__error(HBM_ERR_INVALID, "%.64s...: path too long", spec);
  snprintf(out->path, sizeof out->path, "%s", spec);
  if (exists(spec))
    return HBM_OK;
  const char *slash = strrchr(spec, '/');
  const char *tail = slash ? slash + 1 : spec;
  const char *hash = strchr(tail, '#'), *at = strrchr(tail, '@');
  if (at && hash && at < hash)
    at = NULL; /* an '@' in the file name, before the space */
  const char *cut = hash && (!at || hash < at) ? hash : at;
  if (!cut)
    return HBM_OK; /* the loader says the file is missing */
  snprintf(out->rest, sizeof out->rest, "%s", cut);
  out->path[cut - spec] = '\0';
  char *r = out->rest;
  char *r_at = strrchr(r, '@');
  if (r[0] == '#') {
    out->space = r + 1;
    if (r_at && r_at > r)
      *r_at = '\0', out->step = r_at + 1;
  } else {
    out->step = r + 1;
  }
  return HBM_OK;
}

static bool parse_step(const char *text, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || end == text || v < 0)
    return false;
  *out = v;
  return *end == '\0' || *end == ':';
}

static int highest_peak_space(const hbm_profile_t *p) {
  int best = 0;
  uint64_t peak = 0;
  for (int s = 0; s < hbm_profile_space_count(p); s++) {
    hbm_analysis_t *a = hbm_analyze(p, s);
    uint64_t v = a ? hbm_analysis_summary(a)->peak_bytes : 0;
    hbm_analysis_free(a);
    if (v > peak)
      peak = v, best = s;
  }
  return best;
}

static hbm_status_t no_space(const hbm_profile_t *p, const char *path, const char *want,
                             const char *why) {
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  for (int i = 0; i < hbm_profile_space_count(p); i++) {
    const hbm_space_info_t *s = hbm_profile_space(p, i);
    hbm_strbuf_printf(&sb, "%s%d: %s on %s", i ? ", " : "", i, s->name, s->device);
  }
  hbm_status_t st = hbm__error(HBM_ERR_NOT_FOUND, "%s#%s: %s (its memory spaces: %s)", path, want,
                               why, sb.len ? hbm_strbuf_str(&sb) : "none");
  hbm_strbuf_free(&sb);
  return st;
}

/* Index, device, name, then a part of the device naming one program; among several spaces of
 * one device (an XProf program's memory colours), colour 0 (HBM). */
static hbm_status_t find_space(const hbm_profile_t *p, const char *path, const char *want,
                               int *out) {
  int n = hbm_profile_space_count(p);
  char *end;
  long index = strtol(want, &end, 10);
  if (*want && !*end) {
    if (index < 0 || index >= n)
      return no_space(p, path, want, "no memory space of that index");
    *out = (int)index;
    return HBM_OK;
  }
  for (int pass = 0; pass < 3; pass++) {
    int found = -1, matches = 0;
    for (int i = 0; i < n; i++) {
      const hbm_space_info_t *s = hbm_profile_space(p, i);
      const char *dev = s->device ? s->device : "";
      bool hit = pass == 0   ? !strcmp(dev, want)
                 : pass == 1 ? !strcmp(s->name, want)
                             : strstr(dev, want) != NULL;
      if (!hit)
        continue;
      bool other_device = found >= 0 && strcmp(hbm_profile_space(p, found)->device, dev);
      matches += found < 0 || other_device;
      if (found < 0 || (s->color == 0 && hbm_profile_space(p, found)->color != 0))
        found = i;
    }
    if (matches > 1 && pass > 0)
      return no_space(p, path, want, "more than one memory space matches");
    if (found >= 0) {
      *out = found;
      return HBM_OK;
    }
  }
  return no_space(p, path, want, "no such memory space");
}

/* The steps of training step `step` between its step markers. */
static hbm_status_t marked_step(const hbm_profile_t *p, const char *path, int64_t step,
                                int64_t *from, int64_t *to) {
  int64_t begin = -1, end = -1, next = -1;
  size_t n = hbm_profile_marker_count(p);
  for (size_t i = 0; i < n; i++) {
    const hbm_marker_t *m = hbm_profile_marker(p, i);
    if (m->kind == HBM_MARKER_STEP_BEGIN && m->value == step && begin < 0)
      begin = m->step;
    else if (m->kind == HBM_MARKER_STEP_END && m->value == step && begin >= 0 && end < 0)
      end = m->step;
    else if (m->kind == HBM_MARKER_STEP_BEGIN && begin >= 0 && m->value != step && next < 0)
      next = m->step;
  }
  if (begin < 0)
    return hbm__error(HBM_ERR_NOT_FOUND,
                      "%s@%" PRId64 ": the profile marks no training step %" PRId64
                      " (hbm_profiler_step_begin); @FROM:TO selects steps FROM to TO of its "
                      "%" PRId64,
                      path, step, step, hbm_profile_step_count(p));
  *from = begin;
  *to = end >= 0 ? end : next >= 0 ? next : hbm_profile_step_count(p);
  if (*to <= *from)
    *to = *from + 1 <= hbm_profile_step_count(p) ? *from + 1 : *from;
  return HBM_OK;
}

static hbm_status_t window_of(const hbm_profile_t *p, const char *path, const char *text,
                              int64_t *from, int64_t *to, bool *marked) {
  int64_t a = 0, b = 0, n = hbm_profile_step_count(p);
  const char *colon = strchr(text, ':');
  *marked = !colon;
  if (!parse_step(text, &a) || (colon && (!parse_step(colon + 1, &b) || strchr(colon + 1, ':'))))
    return hbm__error(HBM_ERR_INVALID,
                      "%s@%s: expected @STEP (a training step) or @FROM:TO (steps), whole "
                      "numbers",
                      path, text);
  if (!colon)
    return marked_step(p, path, a, from, to);
  if (a >= b || b > n)
    return hbm__error(HBM_ERR_INVALID,
                      "%s@%s: steps FROM:TO must have FROM < TO <= %" PRId64 " (the profile's "
                      "steps)",
                      path, text, n);
  *from = a;
  *to = b;
  return HBM_OK;
}

/* A directory stands for its one profile (the newest run's), or names its profiles. */
static hbm_status_t resolve_directory(char *path, size_t cap) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return HBM_OK;
  hbm_logdir_entry_t e[8];
  size_t total = 0;
  if (hbm_logdir_list(path, e, HBM_ARRAY_LEN(e), &total) != HBM_OK)
    return hbm_last_status();
  size_t k = 0;
  while (k < total && k < HBM_ARRAY_LEN(e) && !strcmp(e[k].run, e[0].run))
    k++;
  if (total == 0)
    return hbm__error(HBM_ERR_NOT_FOUND, "%s: no profiles in this directory", path);
  if (k > 1)
    return hbm__error(HBM_ERR_INVALID,
                      "%s: its newest run has %zu profiles; name one (%s, %s, ...)", path, k,
                      e[0].path, e[1].path);
  snprintf(path, cap, "%s", e[0].path);
  return HBM_OK;
}

static void describe(hbm_selection_t *out, const hbm_profile_t *p, const char *window) {
  const hbm_space_info_t *s = hbm_profile_space(p, out->space);
  snprintf(out->what, sizeof out->what, "%s on %s%s%s", s ? s->name : "-",
           s && s->device ? s->device : "-", window[0] ? ", " : "", window);
}

hbm_status_t hbm_profile_select(const char *spec, hbm_selection_t *out) {
  spec_parts_t parts;
  memset(out, 0, sizeof *out);
  if (!spec || !*spec)
    return hbm__error(HBM_ERR_INVALID, "no profile named");
  hbm_status_t st = split_spec(spec, &parts);
  if (st == HBM_OK)
    st = resolve_directory(parts.path, sizeof parts.path);
  if (st != HBM_OK)
    return st;
  hbm_profile_t *p = hbm_profile_load(parts.path);
  if (!p)
    return hbm_last_status();
  if (hbm_profile_space_count(p) == 0) {
    hbm_profile_free(p);
    return hbm__error(HBM_ERR_INVALID, "%s: the profile has no memory space", parts.path);
  }
  int space = 0;
  st = parts.space ? find_space(p, parts.path, parts.space, &space) : HBM_OK;
  if (st == HBM_OK && !parts.space)
    space = highest_peak_space(p);
  char window[256] = "";
  if (st == HBM_OK && parts.step) {
    int64_t from = 0, to = 0;
    bool marked = false;
    st = window_of(p, parts.path, parts.step, &from, &to, &marked);
    hbm_profile_t *w = st == HBM_OK ? hbm_profile_window(p, from, to) : NULL;
    if (st == HBM_OK && !w)
      st = hbm_last_status();
    if (w) {
      hbm_profile_free(p);
      p = w;
      if (marked)
        snprintf(window, sizeof window, "training step %s = steps %" PRId64 "-%" PRId64, parts.step,
                 from, to);
      else
        snprintf(window, sizeof window, "steps %" PRId64 "-%" PRId64, from, to);
    }
  }
  if (st != HBM_OK) {
    hbm_profile_free(p);
    return st;
  }
  out->profile = p;
  out->space = space;
  describe(out, p, window);
  return HBM_OK;
}

void hbm_selection_free(hbm_selection_t *s) {
  if (!s)
    return;
  hbm_profile_free(s->profile);
  s->profile = NULL;
}
