/* device.h — one interface over the physical memory of one accelerator, with two backends:
 * the simulated device (device_sim.c: host memory, a shared-memory ledger so processes see
 * each other's holdings) and NVIDIA GPUs (device_cuda.c: the driver API, dlopen'ed).
 *
 * The allocation strategies (bfc.c, platform.c, async_pool.c, expandable.c) take memory from a
 * device only through these calls, so every strategy runs on both backends. A device offers:
 *   - total/free memory of the device as a whole (other processes included);
 *   - regions: plain contiguous allocations (cuMemAlloc / an mmap);
 *   - virtual memory: reserve an address range once, create physical memory in granules and
 *     map/unmap it anywhere in the range (cuMemAddressReserve/cuMemCreate/cuMemMap; on sim a
 *     PROT_NONE mapping and pages of a memfd file mapped over it);
 *   - streams, and optionally a native stream-ordered pool (CUDA's cuMemPool).
 * Regions and physical memory count as held by this process (sim: in the ledger).
 * The calls are thread-safe; the counters in hbm__device_t are atomic. */
#ifndef HBM_ALLOC_DEVICE_H
#define HBM_ALLOC_DEVICE_H

#include "hbm.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hbm__device hbm__device_t;

/* A physical memory allocation that can be mapped into reserved virtual ranges (sim: an
 * offset in the device's memfd; CUDA: a CUmemGenericAllocationHandle). */
typedef uint64_t hbm__phys_t;

/* Someone holding memory of the device: a process (sim ledger; on CUDA, from NVML), or on
 * CUDA one of these pids: */
#define HBM__HOLDER_UNKNOWN 0    /* memory the driver reports used that nobody accounts for */
#define HBM__HOLDER_CONTEXT (-1) /* this process's CUDA context itself (same_process) */
typedef struct hbm__holder {
  int pid;
  bool self;         /* this hbm device object */
  bool same_process; /* this process, but another hbm device object */
  uint64_t bytes;
} hbm__holder_t;

typedef struct hbm__device_ops {
  void (*close)(hbm__device_t *d);
  hbm_status_t (*memory)(hbm__device_t *d, uint64_t *total, uint64_t *free_bytes);

  /* Regions. HBM_ERR_NO_MEMORY when the device has not enough free memory (the message
   * says how much was free); HBM_ERR_HOST_MEMORY/HBM_ERR_UNAVAILABLE for other failures. */
  hbm_status_t (*region_alloc)(hbm__device_t *d, uint64_t size, void **out);
  void (*region_free)(hbm__device_t *d, void *ptr, uint64_t size);

  /* Virtual memory. Sizes, addresses and offsets are multiples of d->granularity. */
  hbm_status_t (*va_reserve)(hbm__device_t *d, uint64_t size, void **base);
  void (*va_release)(hbm__device_t *d, void *base, uint64_t size);
  hbm_status_t (*phys_create)(hbm__device_t *d, uint64_t size, hbm__phys_t *out);
  void (*phys_release)(hbm__device_t *d, hbm__phys_t phys, uint64_t size);
  /* Maps [offset, offset + size) of phys at addr, readable and writable. */
  hbm_status_t (*map)(hbm__device_t *d, void *addr, uint64_t size, hbm__phys_t phys,
                      uint64_t offset);
  /* Unmaps [addr, addr + size); the physical memory stays until phys_release. */
  hbm_status_t (*unmap)(hbm__device_t *d, void *addr, uint64_t size);

  /* Copies between host memory and device memory (sim: memcpy; CUDA: cuMemcpyHtoD/DtoH).
   * For checks and tests: the allocators themselves never touch device memory. */
  hbm_status_t (*copy_to_device)(hbm__device_t *d, void *dst, const void *src, size_t n);
  hbm_status_t (*copy_from_device)(hbm__device_t *d, void *dst, const void *src, size_t n);

  /* Streams: native handles (sim: a host stream object; CUDA: CUstream). */
  hbm_status_t (*stream_create)(hbm__device_t *d, void **native);
  hbm_status_t (*stream_sync)(hbm__device_t *d, void *native);
  void (*stream_destroy)(hbm__device_t *d, void *native);

  /* Who holds this device's memory; returns the number of holders (writes at most cap). */
  size_t (*holders)(hbm__device_t *d, hbm__holder_t *out, size_t cap);

  /* Optional native stream-ordered pool (NULL on sim, where async_pool.c does it itself).
   * The pool keeps up to release_threshold bytes across synchronizations. */
  hbm_status_t (*pool_create)(hbm__device_t *d, uint64_t release_threshold, void **pool);
  void (*pool_destroy)(hbm__device_t *d, void *pool);
  hbm_status_t (*pool_alloc)(hbm__device_t *d, void *pool, uint64_t size, void *stream, void **out);
  hbm_status_t (*pool_free)(hbm__device_t *d, void *pool, void *ptr, void *stream);
  hbm_status_t (*pool_trim)(hbm__device_t *d, void *pool, uint64_t keep);
  hbm_status_t (*pool_usage)(hbm__device_t *d, void *pool, uint64_t *reserved, uint64_t *used);
} hbm__device_ops_t;

struct hbm__device {
  const hbm__device_ops_t *ops;
  hbm_device_kind_t kind; /* HBM_DEVICE_SIM or HBM_DEVICE_CUDA */
  char name[160];         /* "sim0", "cuda:0 (NVIDIA H100 80GB HBM3)" */
  uint64_t total;         /* bytes */
  uint64_t granularity;   /* virtual-memory granule (2 MiB) */
  /* Physical memory of n granules is n granules: granule i of `phys` is phys + i ×
   * granularity, and any run of them can be mapped, unmapped or released on its own (sim: an
   * offset in its memory file). CUDA's handles are whole: false (a mapping is unmapped only
   * whole, a handle released only whole); so is the sim device under HBM_SIM_VM_GRANULES=whole. */
  bool vm_granules_divisible;
  uint64_t region_alignment; /* regions are at least this aligned (sim: page; CUDA: 256) */
  _Atomic uint64_t held;     /* regions + physical memory held through this object */
  _Atomic uint64_t peak_held;
  /* Virtual-memory calls made through this object, counted as the CUDA driver calls they
   * are (phys_create: cuMemCreate; map: cuMemMap + cuMemSetAccess; unmap: cuMemUnmap;
   * phys_release: cuMemRelease) on either backend: what benchmarks report per operation. */
  _Atomic uint64_t vm_calls;
  /* What the backend lacks and does instead ("no memory pools (...): hbm's own pool"). */
  char note[256];
};

/* Opens the device cfg asks for. HBM_DEVICE_AUTO: CUDA when a GPU answers, sim where there
 * is no driver or no device, an error otherwise (*why_auto, when not NULL, gets a sentence
 * saying why that one was chosen, and the device's note). */
hbm_status_t hbm__device_open(const hbm_config_t *cfg, hbm__device_t **out, char *why_auto,
                              size_t why_cap);
void hbm__device_close(hbm__device_t *d);

/* The backends' constructors (device_sim.c, device_cuda.c). */
hbm_status_t hbm__sim_open(const hbm_config_t *cfg, hbm__device_t **out);
/* The default sim device (HBM_SIM_NAME not set): private to the process; a named one is shared
 * with every process that uses the name. */
bool hbm__sim_is_private(const hbm_config_t *cfg);
hbm_status_t hbm__cuda_open(const hbm_config_t *cfg, hbm__device_t **out);

/* Wrappers that keep d->held exact; strategies call these, not d->ops directly. */
hbm_status_t hbm__device_region_alloc(hbm__device_t *d, uint64_t size, void **out);
void hbm__device_region_free(hbm__device_t *d, void *ptr, uint64_t size);
hbm_status_t hbm__device_va_reserve(hbm__device_t *d, uint64_t size, void **base);
void hbm__device_va_release(hbm__device_t *d, void *base, uint64_t size);
hbm_status_t hbm__device_phys_create(hbm__device_t *d, uint64_t size, hbm__phys_t *out);
void hbm__device_phys_release(hbm__device_t *d, hbm__phys_t phys, uint64_t size);
hbm_status_t hbm__device_map(hbm__device_t *d, void *addr, uint64_t size, hbm__phys_t phys,
                             uint64_t offset);
hbm_status_t hbm__device_unmap(hbm__device_t *d, void *addr, uint64_t size);
hbm_status_t hbm__device_memory(hbm__device_t *d, uint64_t *total, uint64_t *free_bytes);
size_t hbm__device_holders(hbm__device_t *d, hbm__holder_t *out, size_t cap);
/* Bytes held by others than this object (other processes and other hbm devices), and the
 * part of it held by other processes. */
void hbm__device_others(hbm__device_t *d, uint64_t *others, uint64_t *other_processes);

/* ---- the sim device's ledger (sim_ledger.c) ---- */

typedef struct hbm__ledger hbm__ledger_t;
/* Opens (creating if needed) the ledger of sim device `name` with `capacity` bytes and takes
 * a slot in it for this device object. A live device of the same name with a different
 * capacity is an error. */
hbm_status_t hbm__ledger_open(const char *name, uint64_t capacity, hbm__ledger_t **out);
/* Gives the slot back; the last user removes the shared-memory object. */
void hbm__ledger_close(hbm__ledger_t *l);
/* Takes bytes for this slot if the device has them free (dead processes' holdings are
 * reclaimed first); HBM_ERR_NO_MEMORY with "N free of M" otherwise. */
hbm_status_t hbm__ledger_take(hbm__ledger_t *l, uint64_t bytes);
void hbm__ledger_give(hbm__ledger_t *l, uint64_t bytes);
/* Bytes held by all live slots. */
hbm_status_t hbm__ledger_used(hbm__ledger_t *l, uint64_t *used);
size_t hbm__ledger_holders(hbm__ledger_t *l, hbm__holder_t *out, size_t cap);
/* The POSIX shared-memory name used for sim device `name` ("/hbm-sim.<uid>.<name>"). */
void hbm__ledger_shm_name(const char *name, char *buf, size_t cap);

#endif /* HBM_ALLOC_DEVICE_H */
