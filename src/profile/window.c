/* window.c — steps [from, to) of a profile as a profile of their own (`hbm diff PATH@STEP`,
 * hbm_profile_window): buffers live in the window clipped to it, reserved memory from before it
 * carried in at its first step, so the window's peak is the analysis's like any other. */
#include "base/base.h"
#include "profile/index.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static bool copy_head(const hbm_profile_t *p, hbm_profile_t *w, int64_t from, int64_t to) {
  bool ok = true;
  for (size_t i = 0; i < hbm_profile_meta_count(p) && ok; i++) {
    const char *k = hbm_profile_meta_key(p, i);
    if (strcmp(k, "space_steps")) /* the spaces' step ranges no longer hold */
      ok = hbm_profile_set_meta(w, k, hbm_profile_meta(p, k)) == HBM_OK;
  }
  char range[96];
  snprintf(range, sizeof range, "steps %" PRId64 "-%" PRId64 " of %" PRId64, from, to,
           hbm_profile_step_count(p));
  ok = ok && hbm_profile_set_meta(w, "window", range) == HBM_OK;
  for (int i = 0; i < hbm_profile_space_count(p) && ok; i++) {
    const hbm_space_info_t *s = hbm_profile_space(p, i);
    ok = hbm_profile_add_space(w, s->name, s->device, s->color, s->limit) == i;
  }
  for (int64_t s = from; s < to && ok; s++)
    ok = hbm_profile_add_step(w, hbm_profile_step_time(p, s), hbm_profile_step_label(p, s)) >= 0;
  return ok;
}

/* Buffers live in the window, clipped to it; whole-program ones stay whole-program. */
static bool copy_buffers(const hbm_profile_t *p, hbm_profile_t *w, int64_t from, int64_t to) {
  for (int64_t i = 0; i < hbm_profile_buffer_count(p); i++) {
    hbm_buffer_t b = *hbm_profile_buffer(p, i);
    bool whole = b.flags & HBM_BUF_INDEFINITE;
    if (!whole && (b.start >= to || b.end <= from || b.start == b.end))
      continue;
    b.start = whole || b.start < from ? 0 : b.start - from;
    b.end = whole ? to - from : (b.end > to ? to : b.end) - from;
    if (hbm_profile_add_buffer(w, &b) < 0)
      return false;
  }
  return true;
}

/* Reservations before the window count from its first step; OOMs and markers in it move. */
static bool copy_events(const hbm_profile_t *p, hbm_profile_t *w, int64_t from, int64_t to) {
  for (size_t i = 0; i < hbm_profile_reserve_count(p); i++) {
    hbm_reserve_event_t e = *hbm_profile_reserve(p, i);
    if (e.step >= to)
      continue;
    e.step = e.step < from ? 0 : e.step - from;
    if (hbm_profile_add_reserve(w, &e) != HBM_OK)
      return false;
  }
  for (size_t i = 0; i < hbm_profile_oom_count(p); i++) {
    hbm_oom_event_t e = *hbm_profile_oom(p, i);
    if (e.step < from || e.step >= to)
      continue;
    e.step -= from;
    if (hbm_profile_add_oom(w, &e) != HBM_OK)
      return false;
  }
  for (size_t i = 0; i < hbm_profile_marker_count(p); i++) {
    hbm_marker_t m = *hbm_profile_marker(p, i);
    if (m.step < from || m.step > to)
      continue;
    m.step -= from;
    if (hbm_profile_add_marker(w, &m) != HBM_OK)
      return false;
  }
  return true;
}

hbm_profile_t *hbm_profile_window(const hbm_profile_t *p, int64_t from, int64_t to) {
  if (p && hbm__need_whole(p, "a window of steps") != HBM_OK)
    return NULL;
  int64_t n = p ? hbm_profile_step_count(p) : 0;
  if (!p || from < 0 || to > n || from >= to) {
    hbm__error(HBM_ERR_INVALID,
               "steps %" PRId64 "-%" PRId64 " are not a window of the %" PRId64
               " steps of the profile",
               from, to, n);
    return NULL;
  }
  hbm_profile_t *w = hbm_profile_new(hbm_profile_kind(p), hbm_profile_name(p));
  if (w && copy_head(p, w, from, to) && copy_buffers(p, w, from, to) &&
      copy_events(p, w, from, to) && hbm_profile_finish(w) == HBM_OK)
    return w;
  hbm_profile_free(w);
  return NULL;
}
