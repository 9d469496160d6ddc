/* runtime.c — the CUDA runtime's allocation calls (PyTorch with
 * PYTORCH_NO_CUDA_MEMORY_CACHING=1 calls cudaMalloc/cudaFree for every tensor), served by
 * hbm on the runtime's current device (cudaGetDevice). Failures are the runtime's
 * cudaErrorMemoryAllocation, with hbm's diagnosis on stderr. Anything hbm does not serve
 * goes to the runtime itself. */
#include "preload/hooks.h"

#include <string.h>

#define REAL(fn, type, ...)                                                                        \
  PRELOAD_RETURN_REAL(preload_real_runtime, PRELOAD_CUDART_UNKNOWN, fn, type, __VA_ARGS__)

typedef preload_cudart_t (*malloc_fn)(void **, size_t);
typedef preload_cudart_t (*free_fn)(void *);
typedef preload_cudart_t (*info_fn)(size_t *, size_t *);
typedef preload_cudart_t (*malloc_async_fn)(void **, size_t, void *);
typedef preload_cudart_t (*free_async_fn)(void *, void *);
typedef preload_cudart_t (*get_device_fn)(int *);
typedef preload_cudart_t (*synchronize_fn)(void);

/* The hbm device of the runtime's current device; NULL when hbm does not serve it. */
static hbm_device_t *runtime_device(void) {
  if (preload_inside)
    return NULL;
  void *p = preload_runtime_helper(RT_GET_DEVICE);
  get_device_fn get_device;
  int ordinal = 0;
  if (!p)
    return NULL;
  memcpy(&get_device, &p, sizeof get_device);
  if (get_device(&ordinal) != PRELOAD_CUDART_SUCCESS)
    return NULL;
  return preload_device(ordinal);
}

static preload_cudart_t result_of(hbm_status_t st) {
  switch (st) {
  case HBM_OK: return PRELOAD_CUDART_SUCCESS;
  case HBM_ERR_NO_MEMORY:
  case HBM_ERR_HOST_MEMORY: return PRELOAD_CUDART_MEMORY_ALLOCATION;
  case HBM_ERR_INVALID: return PRELOAD_CUDART_INVALID_VALUE;
  default: return PRELOAD_CUDART_UNKNOWN;
  }
}

/* An allocation by hbm; false when the runtime is to do it (size 0 included: the runtime
 * hands out NULL). */
static bool serve_alloc(void **ptr, size_t size, const preload_call_t *call, preload_cudart_t *r) {
  hbm_device_t *dev = ptr && size ? runtime_device() : NULL;
  if (!dev)
    return false;
  void *p = NULL;
  hbm_status_t st = preload_alloc(dev, size, call, &p);
  if (st == HBM_OK)
    *ptr = p;
  *r = result_of(st);
  return true;
}

/* A free by hbm; false when the block is not hbm's. A plain free waits for the device
 * first, as cudaFree does. */
static bool serve_free(void *ptr, preload_call_t *call, preload_cudart_t *r) {
  hbm_device_t *dev = preload_inside ? NULL : preload_owner(ptr);
  if (!dev)
    return false;
  if (!call->ordered) {
    void *p = preload_runtime_helper(RT_DEVICE_SYNCHRONIZE);
    synchronize_fn sync;
    memcpy(&sync, &p, sizeof sync);
    call->synced = p && sync() == PRELOAD_CUDART_SUCCESS;
  }
  *r = result_of(preload_free(dev, ptr, call));
  return true;
}

PRELOAD_EXPORT preload_cudart_t cudaMalloc(void **ptr, size_t size) {
  preload_call_t call = {.entry = "cudaMalloc", .caller = __builtin_return_address(0)};
  preload_cudart_t r;
  if (!serve_alloc(ptr, size, &call, &r))
    REAL(FN_CUDA_MALLOC, malloc_fn, ptr, size);
  return r;
}

PRELOAD_EXPORT preload_cudart_t cudaFree(void *ptr) {
  preload_call_t call = {.entry = "cudaFree", .caller = __builtin_return_address(0)};
  preload_cudart_t r;
  if (!serve_free(ptr, &call, &r))
    REAL(FN_CUDA_FREE, free_fn, ptr);
  return r;
}

PRELOAD_EXPORT preload_cudart_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  hbm_device_t *dev = free_bytes && total ? runtime_device() : NULL;
  if (!dev)
    REAL(FN_CUDA_MEM_GET_INFO, info_fn, free_bytes, total);
  return result_of(preload_mem_info(dev, free_bytes, total));
}

PRELOAD_EXPORT preload_cudart_t cudaMallocAsync(void **ptr, size_t size, void *stream) {
  preload_call_t call = {.entry = "cudaMallocAsync",
                         .caller = __builtin_return_address(0),
                         .stream = stream,
                         .ordered = true};
  preload_cudart_t r;
  if (!serve_alloc(ptr, size, &call, &r))
    REAL(FN_CUDA_MALLOC_ASYNC, malloc_async_fn, ptr, size, stream);
  return r;
}

PRELOAD_EXPORT preload_cudart_t cudaMallocAsync_ptsz(void **ptr, size_t size, void *stream) {
  preload_call_t call = {.entry = "cudaMallocAsync_ptsz",
                         .caller = __builtin_return_address(0),
                         .stream = stream ? stream : PRELOAD_STREAM_PER_THREAD,
                         .ordered = true};
  preload_cudart_t r;
  if (!serve_alloc(ptr, size, &call, &r))
    REAL(FN_CUDA_MALLOC_ASYNC_PTSZ, malloc_async_fn, ptr, size, stream);
  return r;
}

PRELOAD_EXPORT preload_cudart_t cudaFreeAsync(void *ptr, void *stream) {
  preload_call_t call = {.entry = "cudaFreeAsync",
                         .caller = __builtin_return_address(0),
                         .stream = stream,
                         .ordered = true};
  preload_cudart_t r;
  if (!serve_free(ptr, &call, &r))
    REAL(FN_CUDA_FREE_ASYNC, free_async_fn, ptr, stream);
  return r;
}

PRELOAD_EXPORT preload_cudart_t cudaFreeAsync_ptsz(void *ptr, void *stream) {
  preload_call_t call = {.entry = "cudaFreeAsync_ptsz",
                         .caller = __builtin_return_address(0),
                         .stream = stream ? stream : PRELOAD_STREAM_PER_THREAD,
                         .ordered = true};
  preload_cudart_t r;
  if (!serve_free(ptr, &call, &r))
    REAL(FN_CUDA_FREE_ASYNC_PTSZ, free_async_fn, ptr, stream);
  return r;
}
