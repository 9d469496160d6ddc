/* recorder.c — the profiler's event recorder (see recorder.h). This first version keeps the
 * device registry only; capturing to a trace file is added with the trace format. */
#include "profile/recorder.h"

#include "base/base.h"

atomic_int hbm__rec_capturing;
static atomic_int next_device_id;

int hbm__rec_device_open(const char *name, const char *mode, uint64_t limit,
                         void (*describe)(void *dev), void *dev) {
  (void)name, (void)mode, (void)limit, (void)describe, (void)dev;
  return atomic_fetch_add(&next_device_id, 1);
}
void hbm__rec_device_close(int id) { (void)id; }
void hbm__rec_alloc(int id, uint64_t address, uint64_t size, uint64_t allocated,
                    const hbm_tag_t *tag) {
  (void)id, (void)address, (void)size, (void)allocated, (void)tag;
}
void hbm__rec_free(int id, uint64_t address) { (void)id, (void)address; }
void hbm__rec_reserve(int id, hbm_reserve_op_t op, uint64_t address, uint64_t size) {
  (void)id, (void)op, (void)address, (void)size;
}
void hbm__rec_oom(int id, uint64_t requested, const char *message) {
  (void)id, (void)requested, (void)message;
}
hbm_status_t hbm_profiler_start(const char *logdir) {
  return hbm__error(HBM_ERR_UNAVAILABLE, "%s: profiling is not built yet", logdir);
}
hbm_status_t hbm_profiler_stop(void) { return HBM_OK; }
const char *hbm_profiler_path(void) { return NULL; }
hbm_status_t hbm_profiler_marker(const char *text) { (void)text; return HBM_OK; }
hbm_status_t hbm_profiler_step_begin(int64_t step) { (void)step; return HBM_OK; }
hbm_status_t hbm_profiler_step_end(int64_t step) { (void)step; return HBM_OK; }
hbm_status_t hbm_profiler_flush(void) { return HBM_OK; }
