/* profile_build.c — the direct access of profile_build.h to a profile under construction. */
#include "profile/profile_build.h"
#include "profile/index.h"
#include "profile/profile_internal.h"

#include <stdlib.h>
#include <sys/mman.h>

hbm_intern_t *hbm__profile_strings(hbm_profile_t *p) { return p->strings; }

int64_t hbm__profile_add_buffer_interned(hbm_profile_t *p, const hbm_buffer_t *b) {
  if (p->stream) /* read as a summary: not kept (the stream numbers it) */
    return hbm__index_stream_buffer(p->stream, p->n_buffers, b) ? p->n_buffers++ : -1;
  if (p->n_buffers == (int64_t)p->cap_buffers) {
    hbm_buffer_t *grown =
        hbm__grow_array(p->buffers, &p->cap_buffers, (size_t)p->n_buffers + 1, sizeof *grown, 64);
    if (!grown)
      return -1;
    p->buffers = grown;
  }
  hbm__populate_ahead(p->buffers, (size_t)p->n_buffers, sizeof *p->buffers,
                      p->cap_buffers * sizeof *p->buffers);
  hbm_buffer_t *slot = &p->buffers[p->n_buffers];
  *slot = *b;
  slot->id = (uint64_t)p->n_buffers;
  return p->n_buffers++;
}

hbm_status_t hbm__profile_reserve(hbm_profile_t *p, size_t buffers, size_t steps) {
  if (p->stream)
    return HBM_OK; /* nothing kept */
  size_t need_b = (size_t)p->n_buffers + buffers, need_s = (size_t)p->n_steps + steps;
  hbm_buffer_t *b = hbm__grow_array(p->buffers, &p->cap_buffers, need_b, sizeof *b, 64);
  if (!b)
    return hbm_last_status();
  p->buffers = b;
  size_t cap = p->cap_steps;
  int64_t *t = hbm__grow_array(p->step_time, &cap, need_s, sizeof *t, 64);
  if (!t)
    return hbm_last_status();
  p->step_time = t;
  p->cap_steps = cap;
  return HBM_OK;
}

hbm_buffer_t *hbm__profile_buffers(hbm_profile_t *p, int64_t *n) {
  *n = p->n_buffers;
  return p->buffers;
}

int64_t *hbm__profile_step_times(hbm_profile_t *p, int64_t *n) {
  *n = p->n_steps;
  return p->step_time;
}

hbm_reserve_event_t *hbm__profile_reserves(hbm_profile_t *p, size_t *n) {
  *n = p->n_reserves;
  return p->reserves;
}

hbm_oom_event_t *hbm__profile_ooms(hbm_profile_t *p, size_t *n) {
  *n = p->n_ooms;
  return p->ooms;
}

void hbm__profile_truncate(hbm_profile_t *p, int64_t n_buffers, int64_t n_steps,
                           size_t n_reserves) {
  if (n_buffers >= 0 && n_buffers < p->n_buffers)
    p->n_buffers = n_buffers;
  if (n_steps >= 0 && n_steps < p->n_steps)
    p->n_steps = n_steps;
  if (n_reserves < p->n_reserves)
    p->n_reserves = n_reserves;
}

hbm_status_t hbm__profile_set_space(hbm_profile_t *p, int i, const char *name, const char *device) {
  if (i < 0 || i >= p->n_spaces)
    return hbm__error(HBM_ERR_INVALID, "memory space %d does not exist", i);
  const char *n = hbm_intern(p->strings, name), *d = hbm_intern(p->strings, device);
  if (!n || !d)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory naming a memory space");
  p->spaces[i].name = n;
  p->spaces[i].device = d;
  return HBM_OK;
}

size_t hbm__profile_memory(const hbm_profile_t *p) {
  return p->cap_buffers * sizeof *p->buffers + p->cap_steps * sizeof *p->step_time +
         p->cap_labels * sizeof *p->step_label + p->cap_reserves * sizeof *p->reserves +
         p->cap_ooms * sizeof *p->ooms + p->cap_markers * sizeof *p->markers;
}

#define POPULATE_SHIFT 25 /* 32 MiB */

void hbm__populate_ahead(void *base, size_t n, size_t elem, size_t cap_bytes) {
#ifdef MADV_POPULATE_WRITE
  size_t at = n * elem;
  if (n && (at - elem) >> POPULATE_SHIFT == at >> POPULATE_SHIFT)
    return;
  uintptr_t page = 4096, from = ((uintptr_t)base + at + page - 1) / page * page;
  uintptr_t end = (uintptr_t)base + cap_bytes, to = from + ((uintptr_t)1 << POPULATE_SHIFT);
  to = (to < end ? to : end) / page * page;
  if (to > from)
    madvise((void *)from, to - from, MADV_POPULATE_WRITE); /* a hint: faults do it otherwise */
#else
  (void)base, (void)n, (void)elem, (void)cap_bytes;
#endif
}

hbm_status_t hbm__profile_stream(hbm_profile_t *p) {
  if (p->kind != HBM_PROFILE_RUNTIME || p->n_steps || p->n_buffers || p->stream)
    return hbm__error(HBM_ERR_INVALID, "only a runtime profile not begun is read as a summary");
  if (!(p->stream = hbm__index_stream_new(p)))
    return hbm_last_status();
  for (int i = 0; i < p->n_spaces; i++)
    if (!hbm__index_stream_space(p->stream, i))
      return hbm_last_status();
  return HBM_OK;
}

hbm__index_stream_t *hbm__profile_stream_of(const hbm_profile_t *p) { return p->stream; }
