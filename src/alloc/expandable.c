/* expandable.c — the "expandable" strategy (HBM_EXPANDABLE=1): one large virtual range
 * reserved once, backed by physical granules mapped on demand and unmapped when free.
 * Not built yet: the engineer of issue 3 replaces this file with the strategy, built on the
 * virtual-memory calls of device.h and the strategy interface of alloc.h. Until then,
 * opening a device in this mode fails cleanly. */
#include "alloc/alloc.h"

hbm_status_t hbm__expandable_create(const hbm__strategy_env_t *env, hbm__strategy_t **out) {
  (void)env;
  *out = NULL;
  return hbm__error(HBM_ERR_UNAVAILABLE, "expandable mode is not built yet");
}
