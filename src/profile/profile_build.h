/* profile_build.h — for readers that build a big profile in one pass (the PyTorch snapshot
 * and .hbmtrace readers): the arrays being built, to fill and fix up in place before
 * hbm_profile_finish, and buffers whose tag strings are already interned in the profile (a
 * million allocations that share a thousand stacks then cost no hashing). Nothing here checks
 * what the public building functions check: the caller keeps the profile consistent. */
#ifndef HBM_PROFILE_BUILD_H
#define HBM_PROFILE_BUILD_H

#include "base/base.h"

/* The profile's string table: strings interned here may be stored in its buffers as they are. */
hbm_intern_t *hbm__profile_strings(hbm_profile_t *p);
/* hbm_profile_add_buffer for a buffer whose strings come from hbm__profile_strings(p). */
int64_t hbm__profile_add_buffer_interned(hbm_profile_t *p, const hbm_buffer_t *b);
/* Room for this many more buffers and steps at once (a reader that knows its counts). */
hbm_status_t hbm__profile_reserve(hbm_profile_t *p, size_t buffers, size_t steps);

/* hbm_profile_finish for a builder that closed every buffer itself (end set, LIVE_OUT where
 * it is live at the end), none indefinite, every range within the steps: the buffers are not
 * walked again (5x10^7 of them are 6 GB). */
hbm_status_t hbm__profile_finish_closed(hbm_profile_t *p);

/* The arrays as built so far, writable, and their lengths. */
hbm_buffer_t *hbm__profile_buffers(hbm_profile_t *p, int64_t *n);
int64_t *hbm__profile_step_times(hbm_profile_t *p, int64_t *n);
hbm_reserve_event_t *hbm__profile_reserves(hbm_profile_t *p, size_t *n);
hbm_oom_event_t *hbm__profile_ooms(hbm_profile_t *p, size_t *n);
/* Shortens the arrays to the given lengths (after moving what stays to the front). */
void hbm__profile_truncate(hbm_profile_t *p, int64_t n_buffers, int64_t n_steps, size_t n_reserves);
/* For an array of `elem`-byte items at `base` with room for cap_bytes, about to hold item n:
 * when item n begins a new 32 MiB, the pages of the 32 MiB after it are mapped in one call
 * (a page fault for each 4 KiB page of 10 GB cost more than a second of system time). */
void hbm__populate_ahead(void *base, size_t n, size_t elem, size_t cap_bytes);
/* About the bytes p's arrays take (not its strings): what a cache of profiles counts. */
size_t hbm__profile_memory(const hbm_profile_t *p);
/* Renames space i. */
hbm_status_t hbm__profile_set_space(hbm_profile_t *p, int i, const char *name, const char *device);

/* An RMM CSV log (data, len: the whole file, not NUL-terminated) read straight into a profile,
 * each event as it is parsed (alloc_log.c): no array of events. */
hbm_profile_t *hbm__alloc_log_load(const char *data, size_t len, const char *name);
/* The same read as a summary (hbm__profile_stream): its index stream holds what it has. */
hbm_profile_t *hbm__alloc_log_load_summary(const char *data, size_t len, const char *name);

#endif /* HBM_PROFILE_BUILD_H */
