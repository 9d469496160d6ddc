/* load.c — hbm_profile_load: recognises what a file is (an .hbmtrace profile, an RMM CSV log,
 * HLO text, an XLA buffer-assignment or memory-usage-report dump) and turns it into the one
 * profile model. Placeholder until the importers land. */
#include "base/base.h"

hbm_profile_t *hbm_profile_load(const char *path) {
  hbm__error(HBM_ERR_UNAVAILABLE, "%s: loading profiles is not built yet", path);
  return NULL;
}
