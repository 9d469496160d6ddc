/* diff.h — the internal side of diff.c for the viewer's /api/compare and the many-device
 * summary (report.c): the diff as a jansson object, and the profiles it compares. The public
 * API (hbm_diff_*) is in hbm.h. */
#ifndef HBM_PROFILE_DIFF_H
#define HBM_PROFILE_DIFF_H

#include "profile/json_out.h"

/* The diff as hbm_diff_json writes it; top > 0 keeps that many rows per table and sums the
 * rest in "by_<table>_rest": {rows, delta}. */
json_t *hbm__diff_to_json(const hbm_diff_t *d, const char *const labels[2], size_t top);
/* The profile of side 0 (A) or 1 (B). */
const hbm_profile_t *hbm__diff_profile(const hbm_diff_t *d, int side);

#endif /* HBM_PROFILE_DIFF_H */
