/* driver.c — the driver API entry points frameworks allocate with, served by hbm: the
 * device is the one of the calling thread's current context (as the driver does), errors
 * are the driver's (CUDA_ERROR_INVALID_CONTEXT without a context, CUDA_ERROR_OUT_OF_MEMORY
 * when hbm cannot serve, with its diagnosis on stderr). Pointers hbm did not hand out (made
 * before hbm was loaded, or by other calls) go to the driver, as does everything when hbm
 * cannot open the device. cuGetProcAddress hands out ours for the driver's own entry points,
 * which is how the CUDA runtime reaches the driver. */
#include "preload/hooks.h"

#include <string.h>

#define REAL(fn, type, ...)                                                                        \
  PRELOAD_RETURN_REAL(preload_real_driver, PRELOAD_CU_ERROR_NOT_INITIALIZED, fn, type, __VA_ARGS__)

typedef preload_cu_t (*alloc_fn)(preload_devptr_t *, size_t);
typedef preload_cu_t (*free_fn)(preload_devptr_t);
typedef preload_cu_t (*info_fn)(size_t *, size_t *);
typedef preload_cu_t (*alloc_async_fn)(preload_devptr_t *, size_t, void *);
typedef preload_cu_t (*free_async_fn)(preload_devptr_t, void *);
typedef preload_cu_t (*alloc_pool_fn)(preload_devptr_t *, size_t, void *, void *);
typedef preload_cu_t (*proc_fn)(const char *, void **, int, unsigned long long);
typedef preload_cu_t (*proc_v2_fn)(const char *, void **, int, unsigned long long, int *);

/* The hbm device for the calling thread's context: *dev NULL (and success) when hbm does not
 * serve it and the call goes to the driver. */
static preload_cu_t device_for_call(hbm_device_t **dev) {
  *dev = NULL;
  if (preload_inside)
    return PRELOAD_CU_SUCCESS;
  int ordinal = 0;
  preload_cu_t r = preload_current_ordinal(&ordinal);
  if (r == PRELOAD_CU_SUCCESS)
    *dev = preload_device(ordinal);
  return r;
}

static preload_cu_t result_of(hbm_status_t st) {
  switch (st) {
  case HBM_OK: return PRELOAD_CU_SUCCESS;
  case HBM_ERR_NO_MEMORY:
  case HBM_ERR_HOST_MEMORY: return PRELOAD_CU_ERROR_OUT_OF_MEMORY;
  case HBM_ERR_INVALID: return PRELOAD_CU_ERROR_INVALID_VALUE;
  default: return PRELOAD_CU_ERROR_UNKNOWN;
  }
}

/* One allocation by hbm; *served false when the driver is to do it (NULL and size 0 too: the
 * driver gives its own answer). A served call's result is the one returned. */
static preload_cu_t serve_alloc(preload_devptr_t *dptr, size_t size, const preload_call_t *call,
                                bool *served) {
  hbm_device_t *dev;
  *served = false;
  if (!dptr || !size)
    return PRELOAD_CU_SUCCESS;
  preload_cu_t r = device_for_call(&dev);
  if (r != PRELOAD_CU_SUCCESS || !dev) {
    *served = r != PRELOAD_CU_SUCCESS; /* no context: the driver's error, from here */
    return r;
  }
  *served = true;
  void *p = NULL;
  hbm_status_t st = preload_alloc(dev, size, call, &p);
  if (st == HBM_OK)
    *dptr = (preload_devptr_t)(uintptr_t)p;
  return result_of(st);
}

/* One free by hbm; false when the block is not hbm's. */
static bool serve_free(preload_devptr_t dptr, const preload_call_t *call, preload_cu_t *r) {
  if (preload_inside || !dptr)
    return false;
  void *ptr = (void *)(uintptr_t)dptr;
  hbm_device_t *dev = preload_owner(ptr);
  if (!dev)
    return false;
  *r = result_of(preload_free(dev, ptr, call));
  return true;
}

PRELOAD_EXPORT preload_cu_t cuMemAlloc_v2(preload_devptr_t *dptr, size_t size) {
  preload_call_t call = {.entry = "cuMemAlloc_v2", .caller = __builtin_return_address(0)};
  bool served;
  preload_cu_t r = serve_alloc(dptr, size, &call, &served);
  if (!served)
    REAL(FN_CU_MEM_ALLOC, alloc_fn, dptr, size);
  return r;
}

PRELOAD_EXPORT preload_cu_t cuMemFree_v2(preload_devptr_t dptr) {
  preload_call_t call = {.entry = "cuMemFree_v2", .caller = __builtin_return_address(0)};
  preload_cu_t r;
  if (!serve_free(dptr, &call, &r))
    REAL(FN_CU_MEM_FREE, free_fn, dptr);
  return r;
}

PRELOAD_EXPORT preload_cu_t cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
  hbm_device_t *dev;
  preload_cu_t r = device_for_call(&dev);
  if (r != PRELOAD_CU_SUCCESS)
    return r;
  if (!dev)
    REAL(FN_CU_MEM_GET_INFO, info_fn, free_bytes, total);
  if (!free_bytes || !total)
    return PRELOAD_CU_ERROR_INVALID_VALUE;
  return result_of(preload_mem_info(dev, free_bytes, total));
}

/* The stream-ordered allocations: hbm's block is ready at once, which is ordered before
 * anything the stream does next. */
static preload_cu_t alloc_ordered(const char *entry, const void *caller, preload_devptr_t *dptr,
                                  size_t size, void *stream, bool *served) {
  preload_call_t call = {.entry = entry, .caller = caller, .stream = stream, .ordered = true};
  return serve_alloc(dptr, size, &call, served);
}

PRELOAD_EXPORT preload_cu_t cuMemAllocAsync(preload_devptr_t *dptr, size_t size, void *stream) {
  bool served;
  preload_cu_t r =
      alloc_ordered("cuMemAllocAsync", __builtin_return_address(0), dptr, size, stream, &served);
  if (!served)
    REAL(FN_CU_MEM_ALLOC_ASYNC, alloc_async_fn, dptr, size, stream);
  return r;
}

PRELOAD_EXPORT preload_cu_t cuMemAllocAsync_ptsz(preload_devptr_t *dptr, size_t size,
                                                 void *stream) {
  bool served;
  preload_cu_t r = alloc_ordered("cuMemAllocAsync_ptsz", __builtin_return_address(0), dptr, size,
                                 stream ? stream : PRELOAD_STREAM_PER_THREAD, &served);
  if (!served)
    REAL(FN_CU_MEM_ALLOC_ASYNC_PTSZ, alloc_async_fn, dptr, size, stream);
  return r;
}

/* The caller's pool is not used: hbm's mode places the block (docs/run.md). */
PRELOAD_EXPORT preload_cu_t cuMemAllocFromPoolAsync(preload_devptr_t *dptr, size_t size, void *pool,
                                                    void *stream) {
  bool served;
  preload_cu_t r = alloc_ordered("cuMemAllocFromPoolAsync", __builtin_return_address(0), dptr, size,
                                 stream, &served);
  if (!served)
    REAL(FN_CU_MEM_ALLOC_FROM_POOL_ASYNC, alloc_pool_fn, dptr, size, pool, stream);
  return r;
}

PRELOAD_EXPORT preload_cu_t cuMemAllocFromPoolAsync_ptsz(preload_devptr_t *dptr, size_t size,
                                                         void *pool, void *stream) {
  bool served;
  preload_cu_t r = alloc_ordered("cuMemAllocFromPoolAsync_ptsz", __builtin_return_address(0), dptr,
                                 size, stream ? stream : PRELOAD_STREAM_PER_THREAD, &served);
  if (!served)
    REAL(FN_CU_MEM_ALLOC_FROM_POOL_ASYNC_PTSZ, alloc_pool_fn, dptr, size, pool, stream);
  return r;
}

PRELOAD_EXPORT preload_cu_t cuMemFreeAsync(preload_devptr_t dptr, void *stream) {
  preload_call_t call = {.entry = "cuMemFreeAsync",
                         .caller = __builtin_return_address(0),
                         .stream = stream,
                         .ordered = true};
  preload_cu_t r;
  if (!serve_free(dptr, &call, &r))
    REAL(FN_CU_MEM_FREE_ASYNC, free_async_fn, dptr, stream);
  return r;
}

PRELOAD_EXPORT preload_cu_t cuMemFreeAsync_ptsz(preload_devptr_t dptr, void *stream) {
  preload_call_t call = {.entry = "cuMemFreeAsync_ptsz",
                         .caller = __builtin_return_address(0),
                         .stream = stream ? stream : PRELOAD_STREAM_PER_THREAD,
                         .ordered = true};
  preload_cu_t r;
  if (!serve_free(dptr, &call, &r))
    REAL(FN_CU_MEM_FREE_ASYNC_PTSZ, free_async_fn, dptr, stream);
  return r;
}

/* ---- cuGetProcAddress: the runtime's (and anyone's) way to the driver ---- */

PRELOAD_EXPORT preload_cu_t cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                                             unsigned long long flags) {
  void *real = preload_real_driver(FN_CU_GET_PROC_ADDRESS);
  if (!real)
    return PRELOAD_CU_ERROR_NOT_INITIALIZED;
  proc_fn f;
  memcpy(&f, &real, sizeof f);
  preload_cu_t r = f(symbol, pfn, cuda_version, flags);
  if (r == PRELOAD_CU_SUCCESS && pfn && !preload_inside)
    *pfn = preload_substitute_driver(*pfn);
  return r;
}

PRELOAD_EXPORT preload_cu_t cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                                                unsigned long long flags, int *symbol_status) {
  void *real = preload_real_driver(FN_CU_GET_PROC_ADDRESS_V2);
  if (!real)
    return PRELOAD_CU_ERROR_NOT_INITIALIZED;
  proc_v2_fn f;
  memcpy(&f, &real, sizeof f);
  preload_cu_t r = f(symbol, pfn, cuda_version, flags, symbol_status);
  if (r == PRELOAD_CU_SUCCESS && pfn && !preload_inside)
    *pfn = preload_substitute_driver(*pfn);
  return r;
}
