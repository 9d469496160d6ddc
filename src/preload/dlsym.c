/* dlsym.c — XLA opens the driver with dlopen("libcuda.so.1") and looks up its entry points
 * with dlsym; the CUDA runtime looks up cuGetProcAddress the same way. A lookup in a
 * library's handle bypasses LD_PRELOAD, so dlsym itself is interposed: for the names we
 * serve it hands out ours. Lookups from inside this library (hbm's own CUDA backend loading
 * the driver) get the real thing, and RTLD_NEXT lookups are passed on as a tail call so
 * that glibc still sees who asked (docs/run.md). */
#include "preload/hooks.h"

#include <dlfcn.h>
#include <string.h>

typedef void (*any_fn)(void);

static const any_fn hooks[FN_COUNT] = {
    [FN_CU_MEM_ALLOC] = (any_fn)cuMemAlloc_v2,
    [FN_CU_MEM_FREE] = (any_fn)cuMemFree_v2,
    [FN_CU_MEM_GET_INFO] = (any_fn)cuMemGetInfo_v2,
    [FN_CU_MEM_ALLOC_ASYNC] = (any_fn)cuMemAllocAsync,
    [FN_CU_MEM_ALLOC_ASYNC_PTSZ] = (any_fn)cuMemAllocAsync_ptsz,
    [FN_CU_MEM_FREE_ASYNC] = (any_fn)cuMemFreeAsync,
    [FN_CU_MEM_FREE_ASYNC_PTSZ] = (any_fn)cuMemFreeAsync_ptsz,
    [FN_CU_MEM_ALLOC_FROM_POOL_ASYNC] = (any_fn)cuMemAllocFromPoolAsync,
    [FN_CU_MEM_ALLOC_FROM_POOL_ASYNC_PTSZ] = (any_fn)cuMemAllocFromPoolAsync_ptsz,
    [FN_CU_GET_PROC_ADDRESS] = (any_fn)cuGetProcAddress,
    [FN_CU_GET_PROC_ADDRESS_V2] = (any_fn)cuGetProcAddress_v2,
    [FN_CUDA_MALLOC] = (any_fn)cudaMalloc,
    [FN_CUDA_FREE] = (any_fn)cudaFree,
    [FN_CUDA_MEM_GET_INFO] = (any_fn)cudaMemGetInfo,
    [FN_CUDA_MALLOC_ASYNC] = (any_fn)cudaMallocAsync,
    [FN_CUDA_MALLOC_ASYNC_PTSZ] = (any_fn)cudaMallocAsync_ptsz,
    [FN_CUDA_FREE_ASYNC] = (any_fn)cudaFreeAsync,
    [FN_CUDA_FREE_ASYNC_PTSZ] = (any_fn)cudaFreeAsync_ptsz,
};

void *preload_hook(preload_fn_t fn) {
  void *p = NULL;
  if ((unsigned)fn < FN_COUNT)
    memcpy(&p, &hooks[fn], sizeof p);
  return p;
}

void *preload_substitute_driver(void *p) {
  if (!p)
    return p;
  for (int i = 0; i < FN_DRIVER_COUNT; i++)
    if (preload_real_driver((preload_fn_t)i) == p)
      return preload_hook((preload_fn_t)i);
  return p;
}

PRELOAD_EXPORT PRELOAD_UNINSTRUMENTED void *dlsym(void *handle, const char *name) {
  if (handle == RTLD_NEXT) /* a tail call: glibc finds "next" from the caller's address */
    return preload_real_dlsym(handle, name);
  void *p = preload_real_dlsym(handle, name);
  int fn = p ? preload_fn_by_name(name) : -1;
  if (fn < 0 || preload_is_own_address(__builtin_return_address(0)))
    return p;
  if (fn >= FN_DRIVER_COUNT)
    preload_note_runtime((preload_fn_t)fn, p);
  return preload_hook((preload_fn_t)fn);
}
