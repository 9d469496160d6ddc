/* profile_internal.h — the layout of hbm_profile_t, shared by profile.c (building and
 * reading) and analysis.c. Other layers use the public functions in hbm.h. */
#ifndef HBM_PROFILE_INTERNAL_H
#define HBM_PROFILE_INTERNAL_H

#include "base/base.h"

typedef struct profile_meta {
  const char *key;
  const char *value;
} profile_meta_t;

struct hbm_profile {
  hbm_profile_kind_t kind;
  const char *name;
  hbm_intern_t *strings; /* every string of the profile, interned */

  profile_meta_t *meta;
  size_t n_meta, cap_meta;

  hbm_space_info_t *spaces;
  hbm_u64map_t *open; /* per space: address → index of the buffer live there (building) */
  int n_spaces;
  size_t cap_spaces;

  int64_t *step_time;
  const char **step_label; /* NULL until a step has a label (runtime profiles never do) */
  int64_t n_steps;
  size_t cap_steps, cap_labels;

  hbm_buffer_t *buffers;
  int64_t n_buffers;
  size_t cap_buffers;

  hbm_reserve_event_t *reserves;
  size_t n_reserves, cap_reserves;
  hbm_oom_event_t *ooms;
  size_t n_ooms, cap_ooms;
  hbm_marker_t *markers;
  size_t n_markers, cap_markers;

  struct hbm__digest *digest;       /* a summary profile read from its index (index.h), else NULL */
  struct hbm__index_stream *stream; /* read as a summary: steps and buffers go there (index.h) */
};

#endif /* HBM_PROFILE_INTERNAL_H */
