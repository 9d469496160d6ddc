/* preload.h — internal header of libhbm_preload.so, the library `hbm run` puts under an
 * unmodified program with LD_PRELOAD (docs/run.md).
 *
 * How the library fits together:
 *   real.c      the real dlsym, the real driver and runtime entry points (never our own),
 *               and whether an address lies inside this library
 *   core.c      one hbm device per GPU ordinal, opened at the first call with the settings
 *               `hbm run` passes (HBM_RUN_*), allocation and free on it, the caller's tags,
 *               the OOM diagnosis on stderr
 *   driver.c    the driver's cuMemAlloc_v2, cuMemFree_v2, cuMemGetInfo_v2, the stream-ordered
 *               calls, and cuGetProcAddress (v1, v2), which hands out our versions
 *   runtime.c   the runtime's cudaMalloc, cudaFree, cudaMemGetInfo, cudaMallocAsync,
 *               cudaFreeAsync
 *   dlsym.c     dlsym: our versions for the names above (XLA's dlopen + dlsym, the runtime's
 *               lookup of cuGetProcAddress)
 *   torch.c     hbm_torch_malloc / hbm_torch_free for torch's CUDAPluggableAllocator
 *   holders.c   the other processes holding a GPU's memory (NVML), as profile markers
 * Everything but the interposed names is hidden (exports.map). */
#ifndef HBM_PRELOAD_H
#define HBM_PRELOAD_H

#include "hbm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* For what runs inside dlsym: a sanitizer's runtime looks its interceptors up with dlsym
 * before it has set itself up, so that path must not be instrumented. */
#define PRELOAD_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined", "thread")))

/* The few driver/runtime results the hooks return (the values of cuda.h / driver_types.h). */
enum {
  PRELOAD_CU_SUCCESS = 0,
  PRELOAD_CU_ERROR_INVALID_VALUE = 1,
  PRELOAD_CU_ERROR_OUT_OF_MEMORY = 2,
  PRELOAD_CU_ERROR_NOT_INITIALIZED = 3,
  PRELOAD_CU_ERROR_NOT_FOUND = 500,
  PRELOAD_CU_ERROR_UNKNOWN = 999,
  PRELOAD_CUDART_SUCCESS = 0,
  PRELOAD_CUDART_INVALID_VALUE = 1,
  PRELOAD_CUDART_MEMORY_ALLOCATION = 2,
  PRELOAD_CUDART_UNKNOWN = 999,
};
/* CU_STREAM_PER_THREAD / cudaStreamPerThread: what the null stream means to *_ptsz calls. */
#define PRELOAD_STREAM_PER_THREAD ((void *)(uintptr_t)0x2)

typedef int preload_cu_t;     /* CUresult */
typedef int preload_cudart_t; /* cudaError_t */

/* The entry points we interpose, driver ones first. The order is the order of the tables in
 * real.c (names) and driver.c / runtime.c (our versions). */
typedef enum preload_fn {
  FN_CU_MEM_ALLOC,
  FN_CU_MEM_FREE,
  FN_CU_MEM_GET_INFO,
  FN_CU_MEM_ALLOC_ASYNC,
  FN_CU_MEM_ALLOC_ASYNC_PTSZ,
  FN_CU_MEM_FREE_ASYNC,
  FN_CU_MEM_FREE_ASYNC_PTSZ,
  FN_CU_MEM_ALLOC_FROM_POOL_ASYNC,
  FN_CU_MEM_ALLOC_FROM_POOL_ASYNC_PTSZ,
  FN_CU_GET_PROC_ADDRESS,
  FN_CU_GET_PROC_ADDRESS_V2,
  FN_DRIVER_COUNT,
  FN_CUDA_MALLOC = FN_DRIVER_COUNT,
  FN_CUDA_FREE,
  FN_CUDA_MEM_GET_INFO,
  FN_CUDA_MALLOC_ASYNC,
  FN_CUDA_MALLOC_ASYNC_PTSZ,
  FN_CUDA_FREE_ASYNC,
  FN_CUDA_FREE_ASYNC_PTSZ,
  FN_COUNT
} preload_fn_t;

/* Driver calls the hooks need but do not interpose. */
typedef struct preload_driver {
  preload_cu_t (*ctx_get_device)(int *device);
  preload_cu_t (*device_get)(int *device, int ordinal);
  preload_cu_t (*device_get_count)(int *count);
  preload_cu_t (*ctx_synchronize)(void);
  preload_cu_t (*stream_synchronize)(void *stream);
} preload_driver_t;

/* ---- real.c ---- */

/* Which of our hooks an interposed name ("cuMemAlloc_v2") is; -1 when not ours. */
int preload_fn_by_name(const char *name);
/* glibc's dlsym (never ours), found once. */
void *preload_real_dlsym(void *handle, const char *name);
/* The driver's own entry point for fn (a driver fn), NULL when there is no driver; loads
 * libcuda.so.1 the first time. */
void *preload_real_driver(preload_fn_t fn);
/* The driver calls above; NULL when there is no driver. */
const preload_driver_t *preload_driver(void);
/* The runtime's own entry point for fn (a runtime fn): the one dlsym handed out first, else
 * the next definition after this library, else one in any loaded libcudart. */
void *preload_real_runtime(preload_fn_t fn);
/* dlsym saw the runtime's definition of fn: remember it as the real one (first wins). */
void preload_note_runtime(preload_fn_t fn, void *real);
/* Runtime calls the hooks need but do not interpose: cudaGetDevice(int *),
 * cudaDeviceSynchronize(void); NULL when no runtime is loaded. */
typedef enum preload_rt_helper {
  RT_GET_DEVICE,
  RT_DEVICE_SYNCHRONIZE,
  RT_HELPER_COUNT
} preload_rt_helper_t;
void *preload_runtime_helper(preload_rt_helper_t which);
/* True when addr lies in this library (its own calls reach the real functions). */
bool preload_is_own_address(const void *addr);

/* ---- core.c ---- */

/* One allocation or free as the program made it. */
typedef struct preload_call {
  const char *entry;  /* "cuMemAlloc_v2" */
  const void *caller; /* the return address into the program */
  void *stream;       /* the stream of stream-ordered calls, NULL otherwise */
  bool ordered;       /* a stream-ordered call */
  bool synced;        /* a free: the caller already waited for the device */
} preload_call_t;

/* Set while this thread is inside hbm: the hooks then go straight to the real driver (the
 * driver's own calls into its exports, if any, must not come back to hbm). */
extern _Thread_local int preload_inside;

/* hbm's device for a GPU ordinal, opened at the first call; NULL when hbm cannot serve it
 * (then the hooks pass calls to the driver; the reason was printed once). */
hbm_device_t *preload_device(int ordinal);
/* The ordinal of the device of the calling thread's current context; a driver error
 * (CUDA_ERROR_INVALID_CONTEXT with no context current) otherwise. */
preload_cu_t preload_current_ordinal(int *ordinal);
/* Allocates on dev for the program. HBM_ERR_NO_MEMORY: the diagnosis was printed. */
hbm_status_t preload_alloc(hbm_device_t *dev, size_t size, const preload_call_t *call, void **out);
/* The device holding ptr as one of hbm's blocks, NULL when the block is not hbm's. */
hbm_device_t *preload_owner(const void *ptr);
/* Frees one of hbm's blocks once the work that may use it is done: a plain free waits for
 * the context (as cuMemFree does), a stream-ordered one for its stream. */
hbm_status_t preload_free(hbm_device_t *dev, void *ptr, const preload_call_t *call);
/* What the program is told by cuMemGetInfo/cudaMemGetInfo: hbm's limit as the total, and
 * what it could still allocate as free. */
hbm_status_t preload_mem_info(hbm_device_t *dev, size_t *free_bytes, size_t *total);

/* ---- holders.c ---- */

/* The start of the profile markers that name the other processes holding a GPU's memory (the
 * summary of `hbm run` looks for it). */
#define PRELOAD_HOLDERS_MARK "hbm run:"
/* Records who else holds dev's GPU memory (NVML's processes by pid, and what nobody accounts
 * for) as a profile marker; `when` says at what point ("start", "exit"). Nothing when no one
 * else holds any. */
void preload_note_holders(hbm_device_t *dev, const char *when);

#endif /* HBM_PRELOAD_H */
