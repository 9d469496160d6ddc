/* recorder.h — the profiler's recording interface, called by the allocator front (src/alloc)
 * on every event. The recorder is process-global: devices register when opened, and while a
 * profile is being captured (hbm_profiler_start / HBM_PROFILE_DIR) every event of every
 * registered device is appended to <logdir>/plugins/profile/<run>/<host>.<pid>.hbmtrace.
 *
 * Cost contract: when no profile is being captured every hook is one relaxed atomic load
 * (hbm__rec_active) and a branch; while capturing, recording an event costs <= 15 ns. Hooks
 * never fail the allocation they describe: a recording error is counted and reported by
 * hbm_profiler_stop(). All hooks are thread-safe. */
#ifndef HBM_RECORDER_H
#define HBM_RECORDER_H

#include "hbm.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Memory: besides its fixed state, the strings it has interned and one block being gathered
 * (HBM_TRACE_BLOCK_TARGET), the recorder holds at most this many bytes of events waiting for
 * the writer thread — past it the recording threads write for it (backpressure) — and 2 MiB
 * of chunks kept ready. So a capture of any length records in constant memory. */
#define HBM__REC_QUEUE_BOUND ((uint64_t)16 << 20)
#define HBM__REC_READY_BYTES ((uint64_t)2 << 20)

/* While a profile is being captured: the capture's number (1, 2, ... one per
 * hbm_profiler_start); 0 otherwise. The load is an acquire (a plain load on x86 and ARMv8's
 * LDAR): a hook that sees a capture running also sees how it was set up. */
extern atomic_uint hbm__rec_capturing;
static inline bool hbm__rec_active(void) {
  return atomic_load_explicit(&hbm__rec_capturing, memory_order_acquire) != 0;
}
static inline unsigned hbm__rec_capture(void) {
  return atomic_load_explicit(&hbm__rec_capturing, memory_order_acquire);
}

/* hbm_profiler_step_begin calls so far, captured or not: mode learn (src/alloc/step_serve.c)
 * takes them as the program's own step boundaries. */
extern atomic_uint_fast64_t hbm__rec_step_marks;

/* Registers a device (called by hbm_open); returns an id for the other hooks (>= 0), or -1.
 * name: "sim0", "cuda:0"; mode: hbm_mode_name(); limit: the allocator's limit in bytes.
 * describe() lets the recorder, when a capture starts later, list the device's live blocks
 * (so a profile started mid-run knows what was already live): it must call
 * hbm__rec_alloc(id, ...) for each live block, under the device's own lock (and may call
 * hbm__rec_reserve for the memory it holds, so reserved bytes are known too). A capture
 * starts on a device at its describe(): a device whose events other threads may cause
 * meanwhile must, under the same lock, note hbm__rec_capture() there and record events only
 * while it still equals hbm__rec_capture() — then every free the profile sees is of a block
 * it saw allocated or listed (src/alloc/front.c does so). When a device is opened during a
 * capture, describe() is called from hbm__rec_device_open (with nothing live to list).
 * Ordering: call the alloc/free/reserve/oom hooks while holding the device's lock, so that
 * the order of a device's events in the profile is the order of its state changes. Call
 * hbm__rec_device_open/close without holding it (close may wait for a capture starting on
 * another thread, which takes the device's lock to describe it). Blocks still live at close
 * are taken as released by the close. */
int hbm__rec_device_open(const char *name, const char *mode, uint64_t limit,
                         void (*describe)(void *dev), void *dev);
void hbm__rec_device_close(int id);

/* One event each. `tag` may be NULL; its strings are copied (interned) by the recorder.
 * size = requested bytes, allocated = after rounding. */
void hbm__rec_alloc(int id, uint64_t address, uint64_t size, uint64_t allocated,
                    const hbm_tag_t *tag);
/* The same for a tag whose strings stay valid and unchanged until hbm__rec_device_close(id)
 * returns (the allocator's interned copies): the recorder keeps the pointers, not copies of
 * the strings, so a tagged event costs about what an untagged one does. */
void hbm__rec_alloc_stable(int id, uint64_t address, uint64_t size, uint64_t allocated,
                           const hbm_tag_t *tag);
void hbm__rec_free(int id, uint64_t address);
void hbm__rec_reserve(int id, hbm_reserve_op_t op, uint64_t address, uint64_t size);
/* A failed allocation with its full diagnosis text; flushes the profile to disk. */
void hbm__rec_oom(int id, uint64_t requested, const char *message);

#endif /* HBM_RECORDER_H */
