/* fuzz_alloc_log.c — the RMM CSV reader (src/profile/alloc_log.c) on any bytes, strict and
 * lenient: an accepted log must hold only consistent events (no free of a pointer that is
 * not live) and become a profile; a refused one must say where ("fuzz.csv:LINE: ..."). The
 * profile path (`hbm report`'s) reads up to a damaged line: it must accept exactly what the
 * strict reader accepts, plus logs damaged after their first event, and those with a "lost"
 * note that names the line. */
#include "hbm.h"
#include "profile/profile_build.h"

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

static void check_profile_path(const uint8_t *data, size_t size) {
  hbm_alloc_log_t log;
  bool strict_ok = hbm_alloc_log_parse((const char *)data, size, "fuzz.csv", 0, &log) == HBM_OK;
  if (strict_ok)
    hbm_alloc_log_free(&log);
  hbm_profile_t *p = hbm__alloc_log_load((const char *)data, size, "fuzz.csv");
  if (!p) {
    if (strict_ok || !strstr(hbm_last_error(), "fuzz.csv:"))
      abort(); /* refused only what the strict reader refuses, saying where */
    return;
  }
  const char *lost = hbm_profile_meta(p, "lost");
  if (strict_ok ? lost != NULL : !lost || !strstr(lost, "fuzz.csv:"))
    abort(); /* a note exactly when something was lost, naming the line */
  hbm_profile_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check_profile_path(data, size);
  check(data, size, 0);
  check(data, size, 1);
  return 0;
}
