/* device_cuda.c — NVIDIA GPUs through the CUDA driver API, loaded at run time with
 * dlopen("libcuda.so.1"): no link-time dependency, so one hbm binary runs with or without
 * CUDA. Opening fails with HBM_ERR_UNAVAILABLE only where there is no driver or no device
 * (HBM_DEVICE=auto then falls back to sim); any other failure is an error of its own.
 *
 * Regions are cuMemAlloc/cuMemFree; virtual memory is cuMemAddressReserve, cuMemCreate,
 * cuMemMap + cuMemSetAccess, cuMemUnmap, cuMemRelease; the async mode uses a cuMemPool of
 * our own with cuMemAllocFromPoolAsync/cuMemFreeAsync (cudaMallocAsync semantics), so its
 * limit and trimming touch no other pool. A GPU whose attributes say it has no VMM or no
 * pools gets neither (the strategies fall back to regions and to hbm's own pool).
 *
 * hbm may be called on any thread, where the application may have a context of its own
 * current: each call pushes the device's primary context and pops it after. Who holds the
 * device's memory comes from NVML (libnvidia-ml.so.1, optional); what nobody accounts for
 * is reported as unknown. Each device object loads the driver for itself (dlopen counts
 * references). */
#include "alloc/device/cuda_api.h"
#include "alloc/device/device.h"
#include "base/base.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HBM_HAVE_CUDA_H
#include <cuda.h>
/* Our declarations must match the real ones byte for byte. */
#define SAME_LAYOUT(ours, theirs)                                                                  \
  _Static_assert(sizeof(ours) == sizeof(theirs), #ours " has the size of " #theirs)
#define SAME_OFFSET(ours, f, theirs, g)                                                            \
  _Static_assert(offsetof(ours, f) == offsetof(theirs, g), #ours "." #f " lies where " #g " does")
SAME_LAYOUT(hbmcu_result_t, CUresult);
SAME_LAYOUT(hbmcu_device_t, CUdevice);
SAME_LAYOUT(hbmcu_deviceptr_t, CUdeviceptr);
SAME_LAYOUT(hbmcu_mem_handle_t, CUmemGenericAllocationHandle);
SAME_LAYOUT(hbmcu_context_t, CUcontext);
SAME_LAYOUT(hbmcu_stream_t, CUstream);
SAME_LAYOUT(hbmcu_mempool_t, CUmemoryPool);
SAME_LAYOUT(hbmcu_mem_location_t, CUmemLocation);
SAME_OFFSET(hbmcu_mem_location_t, id, CUmemLocation, id);
SAME_LAYOUT(hbmcu_alloc_prop_t, CUmemAllocationProp);
SAME_OFFSET(hbmcu_alloc_prop_t, requested_handle_types, CUmemAllocationProp, requestedHandleTypes);
SAME_OFFSET(hbmcu_alloc_prop_t, location, CUmemAllocationProp, location);
SAME_OFFSET(hbmcu_alloc_prop_t, alloc_flags, CUmemAllocationProp, allocFlags);
SAME_LAYOUT(hbmcu_access_desc_t, CUmemAccessDesc);
SAME_OFFSET(hbmcu_access_desc_t, flags, CUmemAccessDesc, flags);
SAME_LAYOUT(hbmcu_pool_props_t, CUmemPoolProps);
SAME_OFFSET(hbmcu_pool_props_t, location, CUmemPoolProps, location);
SAME_OFFSET(hbmcu_pool_props_t, max_size, CUmemPoolProps, maxSize);
_Static_assert((int)HBMCU_SUCCESS == (int)CUDA_SUCCESS, "constant");
_Static_assert((int)HBMCU_ERROR_OUT_OF_MEMORY == (int)CUDA_ERROR_OUT_OF_MEMORY, "constant");
_Static_assert((int)HBMCU_ERROR_NO_DEVICE == (int)CUDA_ERROR_NO_DEVICE, "constant");
_Static_assert((int)HBMCU_STREAM_NON_BLOCKING == (int)CU_STREAM_NON_BLOCKING, "constant");
_Static_assert((int)HBMCU_MEM_ALLOCATION_TYPE_PINNED == (int)CU_MEM_ALLOCATION_TYPE_PINNED,
               "constant");
_Static_assert((int)HBMCU_MEM_LOCATION_TYPE_DEVICE == (int)CU_MEM_LOCATION_TYPE_DEVICE, "constant");
_Static_assert((int)HBMCU_MEM_HANDLE_TYPE_NONE == (int)CU_MEM_HANDLE_TYPE_NONE, "constant");
_Static_assert((int)HBMCU_MEM_ACCESS_FLAGS_PROT_READWRITE ==
                   (int)CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
               "constant");
_Static_assert((int)HBMCU_MEM_ALLOC_GRANULARITY_MINIMUM == (int)CU_MEM_ALLOC_GRANULARITY_MINIMUM,
               "constant");
_Static_assert((int)HBMCU_MEMPOOL_ATTR_RELEASE_THRESHOLD == (int)CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
               "constant");
_Static_assert((int)HBMCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ==
                   (int)CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
               "constant");
_Static_assert((int)HBMCU_MEMPOOL_ATTR_USED_MEM_CURRENT == (int)CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
               "constant");
/* Each entry point has the prototype cuda_api_t below assumes (with cuda.h's own types, whose
 * sizes match ours: the enums are passed as int). */
#define SAME_PROTOTYPE(fn, type)                                                                   \
  _Static_assert(_Generic(&fn, type : 1, default : 0), #fn " has the assumed prototype")
SAME_PROTOTYPE(cuInit, CUresult (*)(unsigned));
SAME_PROTOTYPE(cuGetErrorString, CUresult (*)(CUresult, const char **));
SAME_PROTOTYPE(cuDeviceGetCount, CUresult (*)(int *));
SAME_PROTOTYPE(cuDeviceGet, CUresult (*)(CUdevice *, int));
SAME_PROTOTYPE(cuDeviceGetName, CUresult (*)(char *, int, CUdevice));
SAME_PROTOTYPE(cuDevicePrimaryCtxRetain, CUresult (*)(CUcontext *, CUdevice));
SAME_PROTOTYPE(cuDevicePrimaryCtxRelease_v2, CUresult (*)(CUdevice));
SAME_PROTOTYPE(cuGetErrorName, CUresult (*)(CUresult, const char **));
SAME_PROTOTYPE(cuDeviceGetAttribute, CUresult (*)(int *, CUdevice_attribute, CUdevice));
SAME_PROTOTYPE(cuDeviceGetPCIBusId, CUresult (*)(char *, int, CUdevice));
SAME_PROTOTYPE(cuDevicePrimaryCtxGetState, CUresult (*)(CUdevice, unsigned *, int *));
SAME_PROTOTYPE(cuCtxGetCurrent, CUresult (*)(CUcontext *));
SAME_PROTOTYPE(cuCtxPushCurrent_v2, CUresult (*)(CUcontext));
SAME_PROTOTYPE(cuCtxPopCurrent_v2, CUresult (*)(CUcontext *));
SAME_PROTOTYPE(cuCtxSynchronize, CUresult (*)(void));
SAME_PROTOTYPE(cuMemGetInfo_v2, CUresult (*)(size_t *, size_t *));
SAME_PROTOTYPE(cuMemAlloc_v2, CUresult (*)(CUdeviceptr *, size_t));
SAME_PROTOTYPE(cuMemFree_v2, CUresult (*)(CUdeviceptr));
SAME_PROTOTYPE(cuMemcpyHtoD_v2, CUresult (*)(CUdeviceptr, const void *, size_t));
SAME_PROTOTYPE(cuMemcpyDtoH_v2, CUresult (*)(void *, CUdeviceptr, size_t));
SAME_PROTOTYPE(cuStreamCreate, CUresult (*)(CUstream *, unsigned));
SAME_PROTOTYPE(cuStreamSynchronize, CUresult (*)(CUstream));
SAME_PROTOTYPE(cuStreamDestroy_v2, CUresult (*)(CUstream));
SAME_PROTOTYPE(cuMemAddressReserve,
               CUresult (*)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long));
SAME_PROTOTYPE(cuMemAddressFree, CUresult (*)(CUdeviceptr, size_t));
SAME_PROTOTYPE(cuMemCreate, CUresult (*)(CUmemGenericAllocationHandle *, size_t,
                                         const CUmemAllocationProp *, unsigned long long));
SAME_PROTOTYPE(cuMemRelease, CUresult (*)(CUmemGenericAllocationHandle));
SAME_PROTOTYPE(cuMemMap, CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                      unsigned long long));
SAME_PROTOTYPE(cuMemUnmap, CUresult (*)(CUdeviceptr, size_t));
SAME_PROTOTYPE(cuMemSetAccess, CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t));
SAME_PROTOTYPE(cuMemGetAllocationGranularity, CUresult (*)(size_t *, const CUmemAllocationProp *,
                                                           CUmemAllocationGranularity_flags));
SAME_PROTOTYPE(cuMemPoolCreate, CUresult (*)(CUmemoryPool *, const CUmemPoolProps *));
SAME_PROTOTYPE(cuMemPoolDestroy, CUresult (*)(CUmemoryPool));
SAME_PROTOTYPE(cuMemPoolSetAttribute, CUresult (*)(CUmemoryPool, CUmemPool_attribute, void *));
SAME_PROTOTYPE(cuMemPoolGetAttribute, CUresult (*)(CUmemoryPool, CUmemPool_attribute, void *));
SAME_PROTOTYPE(cuMemPoolTrimTo, CUresult (*)(CUmemoryPool, size_t));
SAME_PROTOTYPE(cuMemAllocFromPoolAsync,
               CUresult (*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream));
SAME_PROTOTYPE(cuMemFreeAsync, CUresult (*)(CUdeviceptr, CUstream));
_Static_assert(sizeof(CUmemPool_attribute) == sizeof(int), "enums are passed as int");
_Static_assert(sizeof(CUdevice_attribute) == sizeof(int), "enums are passed as int");
_Static_assert((int)HBMCU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ==
                   (int)CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
               "constant");
_Static_assert((int)HBMCU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED ==
                   (int)CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
               "constant");
_Static_assert(sizeof(CUmemAllocationGranularity_flags) == sizeof(int), "enums are int");
#endif

typedef struct cuda_api {
  void *lib;
  hbmcu_result_t (*init)(unsigned flags);
  hbmcu_result_t (*get_error_string)(hbmcu_result_t error, const char **text);
  hbmcu_result_t (*get_error_name)(hbmcu_result_t error, const char **name);
  hbmcu_result_t (*device_get_count)(int *count);
  hbmcu_result_t (*device_get)(hbmcu_device_t *dev, int ordinal);
  hbmcu_result_t (*device_get_name)(char *name, int len, hbmcu_device_t dev);
  hbmcu_result_t (*device_get_attribute)(int *value, int attribute, hbmcu_device_t dev);
  hbmcu_result_t (*device_get_pci_bus_id)(char *bus, int len, hbmcu_device_t dev);
  hbmcu_result_t (*primary_ctx_retain)(hbmcu_context_t *ctx, hbmcu_device_t dev);
  hbmcu_result_t (*primary_ctx_release)(hbmcu_device_t dev);
  hbmcu_result_t (*primary_ctx_get_state)(hbmcu_device_t dev, unsigned *flags, int *active);
  hbmcu_result_t (*ctx_get_current)(hbmcu_context_t *ctx);
  hbmcu_result_t (*ctx_push_current)(hbmcu_context_t ctx);
  hbmcu_result_t (*ctx_pop_current)(hbmcu_context_t *ctx);
  hbmcu_result_t (*ctx_synchronize)(void);
  hbmcu_result_t (*mem_get_info)(size_t *free_bytes, size_t *total);
  hbmcu_result_t (*mem_alloc)(hbmcu_deviceptr_t *ptr, size_t size);
  hbmcu_result_t (*mem_free)(hbmcu_deviceptr_t ptr);
  hbmcu_result_t (*memcpy_htod)(hbmcu_deviceptr_t dst, const void *src, size_t n);
  hbmcu_result_t (*memcpy_dtoh)(void *dst, hbmcu_deviceptr_t src, size_t n);
  hbmcu_result_t (*stream_create)(hbmcu_stream_t *stream, unsigned flags);
  hbmcu_result_t (*stream_synchronize)(hbmcu_stream_t stream);
  hbmcu_result_t (*stream_destroy)(hbmcu_stream_t stream);
  /* Virtual memory (CUDA 10.2+) and pools (11.2+): optional. */
  hbmcu_result_t (*address_reserve)(hbmcu_deviceptr_t *ptr, size_t size, size_t alignment,
                                    hbmcu_deviceptr_t addr, unsigned long long flags);
  hbmcu_result_t (*address_free)(hbmcu_deviceptr_t ptr, size_t size);
  hbmcu_result_t (*mem_create)(hbmcu_mem_handle_t *handle, size_t size,
                               const hbmcu_alloc_prop_t *prop, unsigned long long flags);
  hbmcu_result_t (*mem_release)(hbmcu_mem_handle_t handle);
  hbmcu_result_t (*mem_map)(hbmcu_deviceptr_t ptr, size_t size, size_t offset,
                            hbmcu_mem_handle_t handle, unsigned long long flags);
  hbmcu_result_t (*mem_unmap)(hbmcu_deviceptr_t ptr, size_t size);
  hbmcu_result_t (*mem_set_access)(hbmcu_deviceptr_t ptr, size_t size,
                                   const hbmcu_access_desc_t *desc, size_t count);
  hbmcu_result_t (*mem_get_allocation_granularity)(size_t *granularity,
                                                   const hbmcu_alloc_prop_t *prop, int option);
  hbmcu_result_t (*mem_pool_create)(hbmcu_mempool_t *pool, const hbmcu_pool_props_t *props);
  hbmcu_result_t (*mem_pool_destroy)(hbmcu_mempool_t pool);
  hbmcu_result_t (*mem_pool_set_attribute)(hbmcu_mempool_t pool, int attr, void *value);
  hbmcu_result_t (*mem_pool_get_attribute)(hbmcu_mempool_t pool, int attr, void *value);
  hbmcu_result_t (*mem_pool_trim_to)(hbmcu_mempool_t pool, size_t keep);
  hbmcu_result_t (*mem_alloc_from_pool_async)(hbmcu_deviceptr_t *ptr, size_t size,
                                              hbmcu_mempool_t pool, hbmcu_stream_t stream);
  hbmcu_result_t (*mem_free_async)(hbmcu_deviceptr_t ptr, hbmcu_stream_t stream);
} cuda_api_t;

typedef struct cuda_symbol {
  const char *name; /* the versioned export that cuda.h's macros resolve to */
  size_t offset;
  bool required;
} cuda_symbol_t;

#define SYM(field, name, required)                                                                 \
  { name, offsetof(cuda_api_t, field), required }
static const cuda_symbol_t cuda_symbols[] = {
    SYM(init, "cuInit", true),
    SYM(get_error_string, "cuGetErrorString", true),
    SYM(get_error_name, "cuGetErrorName", true),
    SYM(device_get_count, "cuDeviceGetCount", true),
    SYM(device_get, "cuDeviceGet", true),
    SYM(device_get_name, "cuDeviceGetName", true),
    SYM(device_get_attribute, "cuDeviceGetAttribute", true),
    SYM(device_get_pci_bus_id, "cuDeviceGetPCIBusId", false),
    SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain", true),
    SYM(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2", true),
    SYM(primary_ctx_get_state, "cuDevicePrimaryCtxGetState", false),
    SYM(ctx_get_current, "cuCtxGetCurrent", true),
    SYM(ctx_push_current, "cuCtxPushCurrent_v2", true),
    SYM(ctx_pop_current, "cuCtxPopCurrent_v2", true),
    SYM(ctx_synchronize, "cuCtxSynchronize", true),
    SYM(mem_get_info, "cuMemGetInfo_v2", true),
    SYM(mem_alloc, "cuMemAlloc_v2", true),
    SYM(mem_free, "cuMemFree_v2", true),
    SYM(memcpy_htod, "cuMemcpyHtoD_v2", true),
    SYM(memcpy_dtoh, "cuMemcpyDtoH_v2", true),
    SYM(stream_create, "cuStreamCreate", true),
    SYM(stream_synchronize, "cuStreamSynchronize", true),
    SYM(stream_destroy, "cuStreamDestroy_v2", true),
    SYM(address_reserve, "cuMemAddressReserve", false),
    SYM(address_free, "cuMemAddressFree", false),
    SYM(mem_create, "cuMemCreate", false),
    SYM(mem_release, "cuMemRelease", false),
    SYM(mem_map, "cuMemMap", false),
    SYM(mem_unmap, "cuMemUnmap", false),
    SYM(mem_set_access, "cuMemSetAccess", false),
    SYM(mem_get_allocation_granularity, "cuMemGetAllocationGranularity", false),
    SYM(mem_pool_create, "cuMemPoolCreate", false),
    SYM(mem_pool_destroy, "cuMemPoolDestroy", false),
    SYM(mem_pool_set_attribute, "cuMemPoolSetAttribute", false),
    SYM(mem_pool_get_attribute, "cuMemPoolGetAttribute", false),
    SYM(mem_pool_trim_to, "cuMemPoolTrimTo", false),
    SYM(mem_alloc_from_pool_async, "cuMemAllocFromPoolAsync", false),
    SYM(mem_free_async, "cuMemFreeAsync", false),
};
#undef SYM

/* NVML, when present: who holds the GPU's memory. */
typedef struct nvml_api {
  void *lib;
  hbmnv_return_t (*shutdown)(void);
  hbmnv_return_t (*memory)(hbmnv_device_t dev, hbmnv_memory_t *out);
  hbmnv_return_t (*processes)(hbmnv_device_t dev, unsigned *count, hbmnv_process_t *out);
  hbmnv_device_t device;
} nvml_api_t;

#define MAX_POOLS 4

typedef struct cuda_device {
  hbm__device_t base;
  hbm__device_ops_t ops; /* cuda_ops, less what this GPU does not support */
  cuda_api_t api;
  nvml_api_t nvml;
  hbmcu_device_t device;
  hbmcu_context_t context;
  /* hbm's NULL stream in the pool: plain allocations and frees, ordered with nothing else */
  hbmcu_stream_t plain;
  int ordinal;
  bool vmm, pools;
  uint64_t context_overhead;            /* measured when the context was created here; 0: unknown */
  hbmcu_mempool_t pool_list[MAX_POOLS]; /* its memory is this object's too */
} cuda_device_t;

static cuda_device_t *cuda_of(hbm__device_t *d) { return (cuda_device_t *)d; }

/* "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory" */
static const char *cuda_error_text(const cuda_api_t *api, hbmcu_result_t r, char *buf, size_t cap) {
  const char *name = NULL, *text = NULL;
  if (!api->get_error_name || api->get_error_name(r, &name) != HBMCU_SUCCESS)
    name = NULL;
  if (!api->get_error_string || api->get_error_string(r, &text) != HBMCU_SUCCESS)
    text = NULL;
  snprintf(buf, cap, "%s (%d): %s", name ? name : "an unknown CUDA error", r,
           text ? text : "the driver has no description of it");
  return buf;
}

/* A failed driver call as an hbm error: out of memory is HBM_ERR_NO_MEMORY. */
static hbm_status_t cuda_fail(cuda_device_t *c, const char *call, hbmcu_result_t r,
                              uint64_t bytes) {
  char size[32] = "", why[200];
  if (bytes)
    hbm_format_bytes(bytes, size, sizeof size);
  cuda_error_text(&c->api, r, why, sizeof why);
  if (r == HBMCU_ERROR_OUT_OF_MEMORY) {
    size_t free_bytes = 0, total = 0;
    c->api.mem_get_info(&free_bytes, &total);
    char f[32], t[32];
    return hbm__error(HBM_ERR_NO_MEMORY, "%s: %s(%s): %s (%s free of %s)", c->base.name, call, size,
                      why, hbm_format_bytes(free_bytes, f, sizeof f),
                      hbm_format_bytes(total, t, sizeof t));
  }
  return hbm__error(HBM_ERR_INTERNAL, "%s: %s(%s) failed: %s", c->base.name, call, size, why);
}

/* A release the driver refused (the memory may still be held): the device interface cannot
 * return it, so it becomes the last error and a line on stderr rather than nothing. */
static hbm_status_t release_failed(cuda_device_t *c, const char *call, hbmcu_result_t r,
                                   uint64_t bytes) {
  hbm_status_t st = cuda_fail(c, call, r, bytes);
  fprintf(stderr, "hbm: %s\n", hbm_last_error());
  return st;
}

/* Makes the device's context current for one call: pushed unless it already is, so that
 * leave() gives the thread back the context it had (the application's own, or none). */
static hbm_status_t enter(cuda_device_t *c, bool *pushed) {
  *pushed = false;
  hbmcu_context_t current = NULL;
  if (c->api.ctx_get_current(&current) == HBMCU_SUCCESS && current == c->context)
    return HBM_OK;
  hbmcu_result_t r = c->api.ctx_push_current(c->context);
  if (r != HBMCU_SUCCESS)
    return cuda_fail(c, "cuCtxPushCurrent_v2", r, 0);
  *pushed = true;
  return HBM_OK;
}

static void leave(cuda_device_t *c, bool pushed) {
  hbmcu_context_t popped;
  if (pushed)
    c->api.ctx_pop_current(&popped);
}

/* st, or the failure of `call` when r is not success; then leave(). */
static hbm_status_t done(cuda_device_t *c, bool pushed, const char *call, hbmcu_result_t r,
                         uint64_t bytes) {
  hbm_status_t st = r == HBMCU_SUCCESS ? HBM_OK : cuda_fail(c, call, r, bytes);
  leave(c, pushed);
  return st;
}

static hbm_status_t cuda_memory(hbm__device_t *d, uint64_t *total, uint64_t *free_bytes) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  size_t f = 0, t = 0;
  hbmcu_result_t r = c->api.mem_get_info(&f, &t);
  *total = t;
  *free_bytes = f;
  return done(c, pushed, "cuMemGetInfo_v2", r, 0);
}

static hbm_status_t cuda_region_alloc(hbm__device_t *d, uint64_t size, void **out) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_deviceptr_t ptr = 0;
  hbmcu_result_t r = c->api.mem_alloc(&ptr, (size_t)size);
  *out = (void *)(uintptr_t)ptr;
  return done(c, pushed, "cuMemAlloc_v2", r, size);
}

static void cuda_region_free(hbm__device_t *d, void *ptr, uint64_t size) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  if (enter(c, &pushed) != HBM_OK) {
    fprintf(stderr, "hbm: cannot free %p: %s\n", ptr, hbm_last_error());
    return;
  }
  hbmcu_result_t r = c->api.mem_free((hbmcu_deviceptr_t)(uintptr_t)ptr);
  if (r != HBMCU_SUCCESS)
    release_failed(c, "cuMemFree_v2", r, size);
  leave(c, pushed);
}

static void cuda_va_release(hbm__device_t *d, void *base, uint64_t size) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  if (enter(c, &pushed) != HBM_OK)
    return;
  hbmcu_result_t r = c->api.address_free((hbmcu_deviceptr_t)(uintptr_t)base, (size_t)size);
  if (r != HBMCU_SUCCESS)
    release_failed(c, "cuMemAddressFree", r, size);
  leave(c, pushed);
}

static hbm_status_t cuda_va_reserve(hbm__device_t *d, uint64_t size, void **base) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_deviceptr_t ptr = 0;
  hbmcu_result_t r = c->api.address_reserve(&ptr, (size_t)size, (size_t)d->granularity, 0, 0);
  *base = (void *)(uintptr_t)ptr;
  return done(c, pushed, "cuMemAddressReserve", r, size);
}

static hbmcu_alloc_prop_t device_alloc_prop(const cuda_device_t *c) {
  hbmcu_alloc_prop_t prop;
  memset(&prop, 0, sizeof prop);
  prop.type = HBMCU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requested_handle_types = HBMCU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = HBMCU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = c->device;
  return prop;
}

static hbm_status_t cuda_phys_create(hbm__device_t *d, uint64_t size, hbm__phys_t *out) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_alloc_prop_t prop = device_alloc_prop(c);
  hbmcu_mem_handle_t handle = 0;
  hbmcu_result_t r = c->api.mem_create(&handle, (size_t)size, &prop, 0);
  *out = handle;
  return done(c, pushed, "cuMemCreate", r, size);
}

static void cuda_phys_release(hbm__device_t *d, hbm__phys_t phys, uint64_t size) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  if (enter(c, &pushed) != HBM_OK)
    return;
  hbmcu_result_t r = c->api.mem_release(phys);
  if (r != HBMCU_SUCCESS)
    release_failed(c, "cuMemRelease", r, size);
  leave(c, pushed);
}

static hbm_status_t cuda_map(hbm__device_t *d, void *addr, uint64_t size, hbm__phys_t phys,
                             uint64_t offset) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_deviceptr_t ptr = (hbmcu_deviceptr_t)(uintptr_t)addr;
  hbmcu_result_t r = c->api.mem_map(ptr, (size_t)size, (size_t)offset, phys, 0);
  if (r != HBMCU_SUCCESS)
    return done(c, pushed, "cuMemMap", r, size);
  hbmcu_access_desc_t access;
  memset(&access, 0, sizeof access);
  access.location.type = HBMCU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = c->device;
  access.flags = HBMCU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = c->api.mem_set_access(ptr, (size_t)size, &access, 1);
  if (r != HBMCU_SUCCESS) {
    st = cuda_fail(c, "cuMemSetAccess", r, size);
    hbmcu_result_t undo = c->api.mem_unmap(ptr, (size_t)size); /* the map did succeed */
    if (undo != HBMCU_SUCCESS)
      release_failed(c, "cuMemUnmap", undo, size);
    leave(c, pushed);
    return st;
  }
  leave(c, pushed);
  return HBM_OK;
}

static hbm_status_t cuda_unmap(hbm__device_t *d, void *addr, uint64_t size) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r = c->api.mem_unmap((hbmcu_deviceptr_t)(uintptr_t)addr, (size_t)size);
  if (r != HBMCU_SUCCESS) /* callers releasing memory may not look: say it */
    st = release_failed(c, "cuMemUnmap", r, size);
  leave(c, pushed);
  return st;
}

static hbm_status_t cuda_copy_to_device(hbm__device_t *d, void *dst, const void *src, size_t n) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r = c->api.memcpy_htod((hbmcu_deviceptr_t)(uintptr_t)dst, src, n);
  return done(c, pushed, "cuMemcpyHtoD_v2", r, n);
}

static hbm_status_t cuda_copy_from_device(hbm__device_t *d, void *dst, const void *src, size_t n) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r = c->api.memcpy_dtoh(dst, (hbmcu_deviceptr_t)(uintptr_t)src, n);
  return done(c, pushed, "cuMemcpyDtoH_v2", r, n);
}

static hbm_status_t cuda_stream_create(hbm__device_t *d, void **native) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_stream_t s = NULL;
  hbmcu_result_t r = c->api.stream_create(&s, HBMCU_STREAM_NON_BLOCKING);
  *native = s;
  return done(c, pushed, "cuStreamCreate", r, 0);
}

/* hbm's NULL stream: in the pool, the stream of plain allocations and frees. */
static hbmcu_stream_t native_stream(cuda_device_t *c, void *stream) {
  return stream ? (hbmcu_stream_t)stream : c->plain;
}

static hbm_status_t cuda_stream_sync(hbm__device_t *d, void *native) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r = c->api.stream_synchronize(native_stream(c, native));
  return done(c, pushed, "cuStreamSynchronize", r, 0);
}

static void cuda_stream_destroy(hbm__device_t *d, void *native) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  if (!native || enter(c, &pushed) != HBM_OK)
    return;
  hbmcu_result_t r = c->api.stream_destroy((hbmcu_stream_t)native);
  if (r != HBMCU_SUCCESS)
    release_failed(c, "cuStreamDestroy_v2", r, 0);
  leave(c, pushed);
}

/* ---- who holds the memory ---- */

/* What this object holds: regions and physical memory (counted by device.c) and its pools. */
static uint64_t own_bytes(cuda_device_t *c) {
  uint64_t held = atomic_load(&c->base.held);
  for (size_t i = 0; i < MAX_POOLS; i++) {
    unsigned long long reserved = 0;
    if (c->pool_list[i] &&
        c->api.mem_pool_get_attribute(c->pool_list[i], HBMCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                                      &reserved) == HBMCU_SUCCESS)
      held += reserved;
  }
  return held;
}

static void add_holder(hbm__holder_t *out, size_t cap, size_t *n, hbm__holder_t h) {
  if (h.bytes && *n < cap)
    out[*n] = h;
  *n += h.bytes != 0;
}

/* The processes NVML lists: this one (what it holds beyond this object and the context's
 * overhead) and the others; *accounted gets what they hold. */
static void nvml_holders(cuda_device_t *c, uint64_t own, hbm__holder_t *out, size_t cap, size_t *n,
                         uint64_t *accounted) {
  hbmnv_process_t procs[64];
  unsigned count = HBM_ARRAY_LEN(procs);
  if (!c->nvml.processes || c->nvml.processes(c->nvml.device, &count, procs) != HBMNV_SUCCESS)
    return;
  for (unsigned i = 0; i < count && i < HBM_ARRAY_LEN(procs); i++) {
    uint64_t bytes = procs[i].used_gpu_memory;
    if (bytes == HBMNV_VALUE_NOT_AVAILABLE) /* NVML may not say (containers): unknown */
      continue;
    bool self = procs[i].pid == (unsigned)getpid();
    uint64_t known = own + c->context_overhead;
    if (self)
      bytes = bytes > known ? bytes - known : 0;
    add_holder(out, cap, n,
               (hbm__holder_t){.pid = (int)procs[i].pid, .same_process = self, .bytes = bytes});
    *accounted += bytes;
  }
}

/* This object, this process's context, the processes NVML names, and what is left of the
 * driver's "used": unknown (pid HBM__HOLDER_UNKNOWN), not blamed on anyone. */
static size_t cuda_holders(hbm__device_t *d, hbm__holder_t *out, size_t cap) {
  cuda_device_t *c = cuda_of(d);
  uint64_t total = 0, free_bytes = 0;
  if (cuda_memory(d, &total, &free_bytes) != HBM_OK)
    return 0;
  bool pushed;
  if (enter(c, &pushed) != HBM_OK)
    return 0;
  uint64_t own = own_bytes(c);
  leave(c, pushed);
  size_t n = 0;
  add_holder(out, cap, &n, (hbm__holder_t){.pid = (int)getpid(), .self = true, .bytes = own});
  add_holder(out, cap, &n,
             (hbm__holder_t){
                 .pid = HBM__HOLDER_CONTEXT, .same_process = true, .bytes = c->context_overhead});
  uint64_t accounted = own + c->context_overhead;
  nvml_holders(c, own, out, cap, &n, &accounted);
  uint64_t used = total > free_bytes ? total - free_bytes : 0;
  if (used > accounted)
    add_holder(out, cap, &n,
               (hbm__holder_t){.pid = HBM__HOLDER_UNKNOWN, .bytes = used - accounted});
  return n;
}

/* ---- the stream-ordered pool ---- */

static hbm_status_t cuda_pool_create(hbm__device_t *d, uint64_t release_threshold, void **pool) {
  cuda_device_t *c = cuda_of(d);
  size_t slot = 0;
  while (slot < MAX_POOLS && c->pool_list[slot])
    slot++;
  if (slot == MAX_POOLS)
    return hbm__error(HBM_ERR_UNAVAILABLE, "%s: more than %d pools on one device object", d->name,
                      MAX_POOLS);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_pool_props_t props;
  memset(&props, 0, sizeof props);
  props.alloc_type = HBMCU_MEM_ALLOCATION_TYPE_PINNED;
  props.handle_types = HBMCU_MEM_HANDLE_TYPE_NONE;
  props.location.type = HBMCU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = c->device;
  hbmcu_mempool_t p = NULL;
  hbmcu_result_t r = c->api.mem_pool_create(&p, &props);
  if (r != HBMCU_SUCCESS)
    return done(c, pushed, "cuMemPoolCreate", r, 0);
  /* Keep what the pool grew to across synchronizations, as TensorFlow does. */
  unsigned long long threshold = release_threshold;
  r = c->api.mem_pool_set_attribute(p, HBMCU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
  if (r != HBMCU_SUCCESS) {
    st = cuda_fail(c, "cuMemPoolSetAttribute", r, 0);
    c->api.mem_pool_destroy(p);
    leave(c, pushed);
    return st;
  }
  leave(c, pushed);
  c->pool_list[slot] = p;
  *pool = p;
  return HBM_OK;
}

static void cuda_pool_destroy(hbm__device_t *d, void *pool) {
  cuda_device_t *c = cuda_of(d);
  for (size_t i = 0; i < MAX_POOLS; i++)
    if (c->pool_list[i] == pool)
      c->pool_list[i] = NULL;
  bool pushed;
  if (enter(c, &pushed) != HBM_OK)
    return;
  hbmcu_result_t r = c->api.mem_pool_destroy((hbmcu_mempool_t)pool);
  if (r != HBMCU_SUCCESS)
    release_failed(c, "cuMemPoolDestroy", r, 0);
  leave(c, pushed);
}

/* On an hbm stream the block is ordered on it; a plain one (stream NULL) is allocated on the
 * device's own stream and waited for, so that any stream and the host may use it at once. */
static hbm_status_t cuda_pool_alloc(hbm__device_t *d, void *pool, uint64_t size, void *stream,
                                    void **out) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_deviceptr_t ptr = 0;
  hbmcu_result_t r = c->api.mem_alloc_from_pool_async(&ptr, (size_t)size, (hbmcu_mempool_t)pool,
                                                      native_stream(c, stream));
  if (r != HBMCU_SUCCESS)
    return done(c, pushed, "cuMemAllocFromPoolAsync", r, size);
  *out = (void *)(uintptr_t)ptr;
  if (stream)
    return done(c, pushed, "cuMemAllocFromPoolAsync", r, size);
  r = c->api.stream_synchronize(c->plain); /* only this allocation is on it */
  if (r != HBMCU_SUCCESS)
    c->api.mem_free_async(ptr, c->plain);
  return done(c, pushed, "cuStreamSynchronize", r, 0);
}

/* A plain free goes on the device's own stream: nothing waits for it, and other streams
 * reuse the memory once the driver has run it. */
static hbm_status_t cuda_pool_free(hbm__device_t *d, void *pool, void *ptr, void *stream) {
  cuda_device_t *c = cuda_of(d);
  (void)pool;
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r =
      c->api.mem_free_async((hbmcu_deviceptr_t)(uintptr_t)ptr, native_stream(c, stream));
  if (r != HBMCU_SUCCESS)
    release_failed(c, "cuMemFreeAsync", r, 0);
  return done(c, pushed, "cuMemFreeAsync", r, 0);
}

/* Memory freed on a stream returns to the pool only when that stream has run: wait for all
 * of this context's streams first, or the trim would release nothing of it. */
static hbm_status_t cuda_pool_trim(hbm__device_t *d, void *pool, uint64_t keep) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r = c->api.stream_synchronize(c->plain);
  if (r != HBMCU_SUCCESS)
    return done(c, pushed, "cuStreamSynchronize", r, 0);
  if ((r = c->api.ctx_synchronize()) != HBMCU_SUCCESS)
    return done(c, pushed, "cuCtxSynchronize", r, 0);
  r = c->api.mem_pool_trim_to((hbmcu_mempool_t)pool, (size_t)keep);
  return done(c, pushed, "cuMemPoolTrimTo", r, 0);
}

static hbm_status_t cuda_pool_usage(hbm__device_t *d, void *pool, uint64_t *reserved,
                                    uint64_t *used) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  hbm_status_t st = enter(c, &pushed);
  if (st != HBM_OK)
    return st;
  unsigned long long r_bytes = 0, u_bytes = 0;
  hbmcu_result_t r = c->api.mem_pool_get_attribute(
      (hbmcu_mempool_t)pool, HBMCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r_bytes);
  if (r == HBMCU_SUCCESS)
    r = c->api.mem_pool_get_attribute((hbmcu_mempool_t)pool, HBMCU_MEMPOOL_ATTR_USED_MEM_CURRENT,
                                      &u_bytes);
  *reserved = r_bytes;
  *used = u_bytes;
  return done(c, pushed, "cuMemPoolGetAttribute", r, 0);
}

/* ---- opening and closing ---- */

/* The context is released while it is not current here (enter/leave pushed and popped it),
 * so no thread of ours is left with a destroyed context. */
static void cuda_close(hbm__device_t *d) {
  cuda_device_t *c = cuda_of(d);
  bool pushed;
  if (c->plain && enter(c, &pushed) == HBM_OK) {
    hbmcu_result_t r = c->api.stream_synchronize(c->plain);
    if (r == HBMCU_SUCCESS)
      r = c->api.stream_destroy(c->plain);
    if (r != HBMCU_SUCCESS)
      release_failed(c, "cuStreamDestroy_v2", r, 0);
    leave(c, pushed);
  }
  if (c->context) {
    hbmcu_result_t r = c->api.primary_ctx_release(c->device);
    if (r != HBMCU_SUCCESS)
      release_failed(c, "cuDevicePrimaryCtxRelease_v2", r, 0);
  }
  if (c->nvml.lib) {
    c->nvml.shutdown();
    dlclose(c->nvml.lib);
  }
  if (c->api.lib)
    dlclose(c->api.lib);
  free(c);
}

static const hbm__device_ops_t cuda_ops = {
    .close = cuda_close,
    .memory = cuda_memory,
    .region_alloc = cuda_region_alloc,
    .region_free = cuda_region_free,
    .va_reserve = cuda_va_reserve,
    .va_release = cuda_va_release,
    .phys_create = cuda_phys_create,
    .phys_release = cuda_phys_release,
    .map = cuda_map,
    .unmap = cuda_unmap,
    .copy_to_device = cuda_copy_to_device,
    .copy_from_device = cuda_copy_from_device,
    .stream_create = cuda_stream_create,
    .stream_sync = cuda_stream_sync,
    .stream_destroy = cuda_stream_destroy,
    .holders = cuda_holders,
    .pool_create = cuda_pool_create,
    .pool_destroy = cuda_pool_destroy,
    .pool_alloc = cuda_pool_alloc,
    .pool_free = cuda_pool_free,
    .pool_trim = cuda_pool_trim,
    .pool_usage = cuda_pool_usage,
};

/* No driver: HBM_ERR_UNAVAILABLE. A driver too old for hbm is an error of its own. */
static hbm_status_t load_driver(cuda_api_t *api) {
  api->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib)
    return hbm__error(HBM_ERR_UNAVAILABLE, "cannot load the CUDA driver: %s", dlerror());
  for (size_t i = 0; i < HBM_ARRAY_LEN(cuda_symbols); i++) {
    void *sym = dlsym(api->lib, cuda_symbols[i].name);
    if (!sym && cuda_symbols[i].required)
      return hbm__error(HBM_ERR_INTERNAL, "the CUDA driver lacks %s (too old?)",
                        cuda_symbols[i].name);
    /* POSIX guarantees a function pointer fits in and round-trips through a void *. */
    memcpy((char *)api + cuda_symbols[i].offset, &sym, sizeof sym);
  }
  return HBM_OK;
}

/* NVML for the GPU with this PCI bus id (or ordinal), if NVML is there at all. */
static void load_nvml(cuda_device_t *c) {
  nvml_api_t *n = &c->nvml;
  n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n->lib)
    return;
  hbmnv_return_t (*init)(void);
  hbmnv_return_t (*by_bus)(const char *, hbmnv_device_t *);
  hbmnv_return_t (*by_index)(unsigned, hbmnv_device_t *);
  *(void **)&init = dlsym(n->lib, "nvmlInit_v2");
  *(void **)&by_bus = dlsym(n->lib, "nvmlDeviceGetHandleByPciBusId_v2");
  *(void **)&by_index = dlsym(n->lib, "nvmlDeviceGetHandleByIndex_v2");
  *(void **)&n->shutdown = dlsym(n->lib, "nvmlShutdown");
  *(void **)&n->memory = dlsym(n->lib, "nvmlDeviceGetMemoryInfo");
  *(void **)&n->processes = dlsym(n->lib, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (!n->processes)
    *(void **)&n->processes = dlsym(n->lib, "nvmlDeviceGetComputeRunningProcesses_v2");
  char bus[64] = "";
  bool found = init && n->shutdown && n->memory && n->processes && init() == HBMNV_SUCCESS;
  if (found && !(by_bus && c->api.device_get_pci_bus_id &&
                 c->api.device_get_pci_bus_id(bus, sizeof bus, c->device) == HBMCU_SUCCESS &&
                 by_bus(bus, &n->device) == HBMNV_SUCCESS)) {
    /* without a bus id, the ordinal (right unless CUDA_VISIBLE_DEVICES reorders) */
    found = !getenv("CUDA_VISIBLE_DEVICES") && by_index &&
            by_index((unsigned)c->ordinal, &n->device) == HBMNV_SUCCESS;
    if (!found)
      n->shutdown();
  }
  if (!found) {
    dlclose(n->lib);
    memset(n, 0, sizeof *n);
  }
}

/* NVML's "used" of the whole device, 0 without NVML. */
static uint64_t nvml_used(cuda_device_t *c) {
  hbmnv_memory_t m;
  return c->nvml.memory && c->nvml.memory(c->nvml.device, &m) == HBMNV_SUCCESS ? m.used : 0;
}

/* Retains the primary context; where it did not exist before, what the device's use grew
 * by is the context's own memory. */
static hbm_status_t retain_context(cuda_device_t *c) {
  unsigned flags = 0;
  int active = 1;
  if (c->api.primary_ctx_get_state)
    c->api.primary_ctx_get_state(c->device, &flags, &active);
  uint64_t before = nvml_used(c);
  hbmcu_result_t r = c->api.primary_ctx_retain(&c->context, c->device);
  if (r != HBMCU_SUCCESS) {
    c->context = NULL;
    char why[200];
    return hbm__error(r == HBMCU_ERROR_OUT_OF_MEMORY ? HBM_ERR_NO_MEMORY : HBM_ERR_INTERNAL,
                      "CUDA device %d: cuDevicePrimaryCtxRetain: %s", c->ordinal,
                      cuda_error_text(&c->api, r, why, sizeof why));
  }
  uint64_t after = nvml_used(c);
  if (!active && before && after > before)
    c->context_overhead = after - before;
  return HBM_OK;
}

static void add_note(cuda_device_t *c, const char *note) {
  size_t len = strlen(c->base.note);
  snprintf(c->base.note + len, sizeof c->base.note - len, "%s%s", len ? "; " : "", note);
}

/* What the GPU supports, from its attributes (a symbol alone says only that the driver
 * knows the call): without VMM or pools, their device ops are left out, and the strategies
 * fall back to plain regions and to hbm's own stream-ordered pool. */
static void check_features(cuda_device_t *c) {
  cuda_api_t *api = &c->api;
  int vmm = 0, pools = 0;
  api->device_get_attribute(&vmm, HBMCU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                            c->device);
  api->device_get_attribute(&pools, HBMCU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, c->device);
  c->vmm = vmm && api->address_reserve && api->address_free && api->mem_create &&
           api->mem_release && api->mem_map && api->mem_unmap && api->mem_set_access &&
           api->mem_get_allocation_granularity;
  c->pools = pools && api->mem_pool_create && api->mem_alloc_from_pool_async &&
             api->mem_free_async && api->mem_pool_set_attribute && api->mem_pool_get_attribute &&
             api->mem_pool_trim_to && api->mem_pool_destroy;
  c->ops = cuda_ops;
  if (!c->vmm) {
    c->ops.va_reserve = NULL;
    c->ops.va_release = NULL;
    c->ops.phys_create = NULL;
    c->ops.phys_release = NULL;
    c->ops.map = NULL;
    c->ops.unmap = NULL;
    add_note(c, vmm ? "no virtual memory management (the driver lacks cuMemMap): plain regions"
                    : "no virtual memory management (device attribute 0): plain regions");
  }
  if (!c->pools) {
    c->ops.pool_create = NULL;
    c->ops.pool_destroy = NULL;
    c->ops.pool_alloc = NULL;
    c->ops.pool_free = NULL;
    c->ops.pool_trim = NULL;
    c->ops.pool_usage = NULL;
    add_note(c, pools ? "no memory pools (the driver lacks cuMemPoolCreate): hbm's own pool"
                      : "no memory pools (device attribute 0): hbm's own pool");
  }
  c->base.ops = &c->ops;
}

static void read_granularity(cuda_device_t *c) {
  c->base.granularity = 2ull << 20;
  hbmcu_alloc_prop_t prop = device_alloc_prop(c);
  size_t gran = 0;
  if (c->vmm &&
      c->api.mem_get_allocation_granularity(&gran, &prop, HBMCU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
          HBMCU_SUCCESS &&
      gran)
    c->base.granularity = ((2ull << 20) + gran - 1) / gran * gran; /* >= 2 MiB */
}

/* The device's own stream for plain pool operations. */
static hbm_status_t create_plain_stream(cuda_device_t *c) {
  if (!c->pools)
    return HBM_OK;
  void *s = NULL;
  hbm_status_t st = cuda_stream_create(&c->base, &s);
  c->plain = s;
  return st;
}

/* Finds the GPU, retains its primary context and reads its name, size and features. No
 * device at all is HBM_ERR_UNAVAILABLE; a bad ordinal HBM_ERR_INVALID; the rest errors. */
static hbm_status_t attach_device(cuda_device_t *c, int ordinal) {
  cuda_api_t *api = &c->api;
  char why[200];
  hbmcu_result_t r = api->init(0);
  if (r != HBMCU_SUCCESS)
    return hbm__error(r == HBMCU_ERROR_NO_DEVICE ? HBM_ERR_UNAVAILABLE : HBM_ERR_INTERNAL,
                      "cuInit: %s", cuda_error_text(api, r, why, sizeof why));
  int count = 0;
  if ((r = api->device_get_count(&count)) != HBMCU_SUCCESS)
    return hbm__error(HBM_ERR_INTERNAL, "cuDeviceGetCount: %s",
                      cuda_error_text(api, r, why, sizeof why));
  if (count == 0)
    return hbm__error(HBM_ERR_UNAVAILABLE, "the CUDA driver found no device");
  if (ordinal < 0 || ordinal >= count)
    return hbm__error(HBM_ERR_INVALID, "HBM_DEVICE_ORDINAL=%d, but there are %d CUDA device(s)",
                      ordinal, count);
  c->ordinal = ordinal;
  char gpu[100] = "";
  const char *call = "cuDeviceGet";
  if ((r = api->device_get(&c->device, ordinal)) != HBMCU_SUCCESS ||
      (call = "cuDeviceGetName", r = api->device_get_name(gpu, (int)sizeof gpu - 1, c->device)) !=
          HBMCU_SUCCESS)
    return hbm__error(HBM_ERR_INTERNAL, "CUDA device %d: %s: %s", ordinal, call,
                      cuda_error_text(api, r, why, sizeof why));
  snprintf(c->base.name, sizeof c->base.name, "cuda:%d (%s)", ordinal, gpu);
  load_nvml(c);
  hbm_status_t st = retain_context(c);
  if (st != HBM_OK)
    return st;
  check_features(c);
  read_granularity(c);
  uint64_t total = 0, free_bytes = 0;
  st = cuda_memory(&c->base, &total, &free_bytes);
  c->base.total = total;
  return st == HBM_OK ? create_plain_stream(c) : st;
}

hbm_status_t hbm__cuda_open(const hbm_config_t *cfg, hbm__device_t **out) {
  cuda_device_t *c = calloc(1, sizeof *c);
  if (!c)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory opening a CUDA device");
  c->ops = cuda_ops;
  c->base.ops = &c->ops;
  c->base.kind = HBM_DEVICE_CUDA;
  c->base.region_alignment = 256;
  hbm_status_t st = load_driver(&c->api);
  if (st == HBM_OK)
    st = attach_device(c, cfg->ordinal);
  if (st != HBM_OK) {
    cuda_close(&c->base);
    return st;
  }
  *out = &c->base;
  return HBM_OK;
}
