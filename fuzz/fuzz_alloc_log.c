/* fuzz_alloc_log.c — the RMM CSV reader (src/profile/alloc_log.c) on any bytes, strict and
 * lenient: an accepted log must hold only consistent events (no free of a pointer that is
 * not live) and become a profile; a refused one must say where ("fuzz.csv:LINE: ..."). */
#include "hbm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(const uint8_t *data, size_t size, int lenient) {
  hbm_alloc_log_t log;
  if (hbm_alloc_log_parse((const char *)data, size, "fuzz.csv", lenient, &log) != HBM_OK) {
    if (!strstr(hbm_last_error(), "fuzz.csv:"))
      abort(); /* every refusal names the line */
    return;
  }
  if (log.skipped && !strstr(log.first_skip, "fuzz.csv:"))
    abort();
  hbm_profile_t *p = hbm_alloc_log_to_profile(&log, "fuzz.csv");
  if (!p)
    abort(); /* a log the reader accepted is always a valid profile */
  if (hbm_profile_space_count(p) == 1) {
    hbm_analysis_t *a = hbm_analyze(p, 0);
    hbm_analysis_free(a);
  }
  hbm_profile_free(p);
  hbm_alloc_log_free(&log);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check(data, size, 0);
  check(data, size, 1);
  return 0;
}
