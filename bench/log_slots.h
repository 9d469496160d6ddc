/* log_slots.h — an allocation log with its pointers resolved to slots, for the benchmarks
 * that replay a log through something other than hbm_replay_run (bench_threads' threads,
 * bench_replay --ns-arena's bare arena): the timed loop then does nothing but the
 * allocator's calls and a store. A slot is reused once its block is freed, so there are as
 * many as the most blocks live at once; failed allocations in the log, and frees of
 * pointers it never allocated, are skipped. Header-only: each bench_*.c is its own program. */
#ifndef HBM_BENCH_LOG_SLOTS_H
#define HBM_BENCH_LOG_SLOTS_H

#include "hbm.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

/* An allocation of `size` bytes into slot, or (size 0) a free of the block in it. */
typedef struct slot_op {
  uint64_t size;
  uint32_t slot;
} slot_op_t;

/* The log's operations in a malloc'd array (*n_ops of them, *n_slots slots); false when host
 * memory ran out. */
static bool resolve_slots(const hbm_alloc_log_t *log, slot_op_t **ops, size_t *n_ops,
                          uint32_t *n_slots) {
  size_t cap = 1;
  while (cap < 2 * log->n_events + 2)
    cap *= 2;
  uint64_t *keys = calloc(cap, sizeof *keys); /* pointer + 1 (0: empty) → values[] */
  uint32_t *values = calloc(cap, sizeof *values), *free_slots = calloc(log->n_events + 1, 4);
  *ops = calloc(log->n_events + 1, sizeof **ops);
  *n_ops = 0, *n_slots = 0;
  bool ok = keys && values && free_slots && *ops;
  size_t n_free = 0;
  for (size_t i = 0; ok && i < log->n_events; i++) {
    const hbm_log_event_t *e = &log->events[i];
    if (e->action == HBM_LOG_ALLOCATE_FAILURE)
      continue;
    size_t h = (size_t)(e->pointer * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
    while (keys[h] && keys[h] != e->pointer + 1)
      h = (h + 1) & (cap - 1);
    if (e->action == HBM_LOG_ALLOCATE) {
      keys[h] = e->pointer + 1;
      values[h] = n_free ? free_slots[--n_free] : (*n_slots)++;
      (*ops)[(*n_ops)++] = (slot_op_t){e->size, values[h]};
    } else if (keys[h]) { /* the key stays, as a tombstone the next allocation may reuse */
      free_slots[n_free++] = values[h];
      (*ops)[(*n_ops)++] = (slot_op_t){0, values[h]};
    }
  }
  free(keys);
  free(values);
  free(free_slots);
  return ok;
}

#endif /* HBM_BENCH_LOG_SLOTS_H */
