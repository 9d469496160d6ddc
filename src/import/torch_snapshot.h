/* torch_snapshot.h — PyTorch CUDA memory snapshots (torch.cuda.memory._dump_snapshot) as an
 * hbm profile (report, view, export) and as an allocation log (`hbm replay`). */
#ifndef HBM_IMPORT_TORCH_SNAPSHOT_H
#define HBM_IMPORT_TORCH_SNAPSHOT_H

#include "base/base.h"

/* What PyTorch itself recorded about one device, beside hbm's own numbers. */
typedef struct torch_device_summary {
  int device;             /* the device (-1 when the snapshot has none) */
  int n_devices;          /* devices with segments or trace events */
  uint64_t reserved_end;  /* sum of its segments' total_size: PyTorch's reserved bytes */
  uint64_t peak_reserved; /* the most reserved over its trace (segment events) */
  uint64_t allocated_end; /* sum of its active blocks' sizes at the snapshot */
  size_t trace_events;    /* events in its device trace */
  size_t before_trace;    /* allocations already live when its trace began */
  size_t inconsistent;    /* trace events that contradict the others (skipped) */
} torch_device_summary_t;

/* A snapshot (the bytes of the .pickle file) as a runtime profile: one memory space per
 * device, one step per trace event after a first step that stands for the state before the
 * trace began. Read in one pass, never holding the pickle's tree (torch_internal.h). A file
 * cut short or damaged is read up to the damage; profile meta "lost" then says how much was
 * not. `map`, when the bytes are a mapped file (may be NULL): its pages are given back as the
 * reader passes them. NULL with hbm_last_error() set on bad input. */
hbm_profile_t *hbm__torch_snapshot_load(const uint8_t *data, size_t len, const char *path,
                                        hbm__mapped_t *map);

/* One device's trace as an allocation log for hbm_replay_run (device -1: the device with the
 * most trace events). Allocations live before the trace began come first. */
hbm_status_t hbm__torch_snapshot_log(const uint8_t *data, size_t len, const char *path, int device,
                                     hbm_alloc_log_t *out, torch_device_summary_t *summary,
                                     hbm__mapped_t *map);

#endif /* HBM_IMPORT_TORCH_SNAPSHOT_H */
