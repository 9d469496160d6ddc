/* diff.h — the internal side of diff.c and report_devices.c for the viewer's /api/compare
 * and its device summary: the diff as a jansson object, and the profiles it compares. The public
 * API (hbm_diff_*) is in hbm.h. */
#ifndef HBM_PROFILE_DIFF_H
#define HBM_PROFILE_DIFF_H

#include "profile/json_out.h"

/* The diff as hbm_diff_json writes it; top > 0 keeps that many rows per table and sums the
 * rest in "by_<table>_rest": {rows, delta}. */
json_t *hbm__diff_to_json(const hbm_diff_t *d, const char *const labels[2], size_t top);
/* The diff of the two peaks alone: the buffers live at each peak, paired as hbm_diff_new
 * pairs them, and no others (a lone one is HBM_DIFF_ONLY_AT_A_PEAK / _B_PEAK, never new, gone
 * or lived longer / shorter, which need every buffer). The rows still add up to the
 * difference of the peaks; it needs only what a profile's index keeps, so a summary profile
 * is not read whole for it (hbm report's many-device summary). */
hbm_diff_t *hbm__diff_new_peaks(const hbm_analysis_t *a, const hbm_analysis_t *b);
/* The profile of side 0 (A) or 1 (B). */
const hbm_profile_t *hbm__diff_profile(const hbm_diff_t *d, int side);

/* The many-device summary (report_devices.c) as hbm_report_devices_json writes it; NULL with
 * an error when out of memory. */
json_t *hbm__devices_json(const hbm_profile_t *const *profiles, const char *const *names, size_t n);

#endif /* HBM_PROFILE_DIFF_H */
