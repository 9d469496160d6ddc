/* hooks.h — the functions libhbm_preload.so exports, with the driver's and runtime's
 * prototypes (CUdeviceptr is an unsigned long long, streams, pools and CUresult/cudaError_t
 * as the ABI passes them), and the table that maps an interposed name to ours. */
#ifndef HBM_PRELOAD_HOOKS_H
#define HBM_PRELOAD_HOOKS_H

#include "preload/preload.h"

#include <string.h>
#include <sys/types.h>

#define PRELOAD_EXPORT __attribute__((visibility("default")))

/* Returns what the real fn (found by `lookup`; `missing` when there is none) returns for the
 * arguments. memcpy, not a cast: ISO C has no conversion from void * to a function pointer. */
#define PRELOAD_RETURN_REAL(lookup, missing, fn, type, ...)                                        \
  do {                                                                                             \
    void *real_ = lookup(fn);                                                                      \
    type f_;                                                                                       \
    if (!real_)                                                                                    \
      return missing;                                                                              \
    memcpy(&f_, &real_, sizeof f_);                                                                \
    return f_(__VA_ARGS__);                                                                        \
  } while (0)

typedef unsigned long long preload_devptr_t; /* CUdeviceptr */

/* driver.c */
PRELOAD_EXPORT preload_cu_t cuMemAlloc_v2(preload_devptr_t *dptr, size_t size);
PRELOAD_EXPORT preload_cu_t cuMemFree_v2(preload_devptr_t dptr);
PRELOAD_EXPORT preload_cu_t cuMemGetInfo_v2(size_t *free_bytes, size_t *total);
PRELOAD_EXPORT preload_cu_t cuMemAllocAsync(preload_devptr_t *dptr, size_t size, void *stream);
PRELOAD_EXPORT preload_cu_t cuMemAllocAsync_ptsz(preload_devptr_t *dptr, size_t size, void *stream);
PRELOAD_EXPORT preload_cu_t cuMemFreeAsync(preload_devptr_t dptr, void *stream);
PRELOAD_EXPORT preload_cu_t cuMemFreeAsync_ptsz(preload_devptr_t dptr, void *stream);
PRELOAD_EXPORT preload_cu_t cuMemAllocFromPoolAsync(preload_devptr_t *dptr, size_t size, void *pool,
                                                    void *stream);
PRELOAD_EXPORT preload_cu_t cuMemAllocFromPoolAsync_ptsz(preload_devptr_t *dptr, size_t size,
                                                         void *pool, void *stream);
PRELOAD_EXPORT preload_cu_t cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                                             unsigned long long flags);
PRELOAD_EXPORT preload_cu_t cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                                                unsigned long long flags, int *symbol_status);

/* runtime.c */
PRELOAD_EXPORT preload_cudart_t cudaMalloc(void **ptr, size_t size);
PRELOAD_EXPORT preload_cudart_t cudaFree(void *ptr);
PRELOAD_EXPORT preload_cudart_t cudaMemGetInfo(size_t *free_bytes, size_t *total);
PRELOAD_EXPORT preload_cudart_t cudaMallocAsync(void **ptr, size_t size, void *stream);
PRELOAD_EXPORT preload_cudart_t cudaMallocAsync_ptsz(void **ptr, size_t size, void *stream);
PRELOAD_EXPORT preload_cudart_t cudaFreeAsync(void *ptr, void *stream);
PRELOAD_EXPORT preload_cudart_t cudaFreeAsync_ptsz(void *ptr, void *stream);

/* dlsym.c (which also defines dlsym itself, declared by <dlfcn.h>) */
/* Our version of fn. */
void *preload_hook(preload_fn_t fn);
/* Ours when p is the driver's own entry point for one of the interposed names, else p. */
void *preload_substitute_driver(void *p);

/* torch.c */
PRELOAD_EXPORT void *hbm_torch_malloc(ssize_t size, int device, void *stream);
PRELOAD_EXPORT void hbm_torch_free(void *ptr, ssize_t size, int device, void *stream);

#endif /* HBM_PRELOAD_HOOKS_H */
