/* device_cuda.c — NVIDIA GPUs through the CUDA driver API, loaded at run time with
 * dlopen("libcuda.so.1"): no link-time dependency, so one hbm binary runs with or without
 * CUDA, and opening fails with HBM_ERR_UNAVAILABLE where no GPU answers.
 *
 * Regions are cuMemAlloc/cuMemFree; virtual memory is cuMemAddressReserve, cuMemCreate,
 * cuMemMap + cuMemSetAccess, cuMemUnmap, cuMemRelease; the async mode uses a cuMemPool of
 * our own with cuMemAllocFromPoolAsync/cuMemFreeAsync (cudaMallocAsync semantics), so its
 * limit and trimming touch no other pool. Each device object loads the driver for itself
 * (dlopen counts references), and makes the device's primary context current before each
 * call, since hbm may be called from any thread. */
#include "alloc/cuda_api.h"
#include "alloc/device.h"
#include "base/base.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
SAME_PROTOTYPE(cuCtxSetCurrent, CUresult (*)(CUcontext));
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
_Static_assert(sizeof(CUmemAllocationGranularity_flags) == sizeof(int), "enums are int");
#endif

typedef struct cuda_api {
  void *lib;
  hbmcu_result_t (*init)(unsigned flags);
  hbmcu_result_t (*get_error_string)(hbmcu_result_t error, const char **text);
  hbmcu_result_t (*device_get_count)(int *count);
  hbmcu_result_t (*device_get)(hbmcu_device_t *dev, int ordinal);
  hbmcu_result_t (*device_get_name)(char *name, int len, hbmcu_device_t dev);
  hbmcu_result_t (*primary_ctx_retain)(hbmcu_context_t *ctx, hbmcu_device_t dev);
  hbmcu_result_t (*primary_ctx_release)(hbmcu_device_t dev);
  hbmcu_result_t (*ctx_set_current)(hbmcu_context_t ctx);
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
    SYM(device_get_count, "cuDeviceGetCount", true),
    SYM(device_get, "cuDeviceGet", true),
    SYM(device_get_name, "cuDeviceGetName", true),
    SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain", true),
    SYM(primary_ctx_release, "cuDevicePrimaryCtxRelease_v2", true),
    SYM(ctx_set_current, "cuCtxSetCurrent", true),
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

typedef struct cuda_device {
  hbm__device_t base;
  cuda_api_t api;
  hbmcu_device_t device;
  hbmcu_context_t context;
  int ordinal;
  bool vmm; /* the virtual-memory entry points are present */
} cuda_device_t;

static cuda_device_t *cuda_of(hbm__device_t *d) { return (cuda_device_t *)d; }

static const char *cuda_error_text(const cuda_api_t *api, hbmcu_result_t r) {
  const char *text = NULL;
  if (!api->get_error_string || api->get_error_string(r, &text) != HBMCU_SUCCESS || !text)
    return "unknown CUDA error";
  return text;
}

/* A failed driver call as an hbm error: out of memory is HBM_ERR_NO_MEMORY. */
static hbm_status_t cuda_fail(cuda_device_t *c, const char *call, hbmcu_result_t r,
                              uint64_t bytes) {
  char size[32] = "";
  if (bytes)
    hbm_format_bytes(bytes, size, sizeof size);
  if (r == HBMCU_ERROR_OUT_OF_MEMORY) {
    size_t free_bytes = 0, total = 0;
    c->api.mem_get_info(&free_bytes, &total);
    char f[32], t[32];
    return hbm__error(HBM_ERR_NO_MEMORY, "%s: %s(%s): out of memory (%s free of %s)", c->base.name,
                      call, size, hbm_format_bytes(free_bytes, f, sizeof f),
                      hbm_format_bytes(total, t, sizeof t));
  }
  return hbm__error(HBM_ERR_INTERNAL, "%s: %s(%s) failed: %s (%d)", c->base.name, call, size,
                    cuda_error_text(&c->api, r), r);
}

/* Every entry point runs on whatever thread called hbm: make our context current there. */
static hbm_status_t enter(cuda_device_t *c) {
  hbmcu_result_t r = c->api.ctx_set_current(c->context);
  return r == HBMCU_SUCCESS ? HBM_OK : cuda_fail(c, "cuCtxSetCurrent", r, 0);
}

static hbm_status_t cuda_memory(hbm__device_t *d, uint64_t *total, uint64_t *free_bytes) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter(c);
  if (st != HBM_OK)
    return st;
  size_t f = 0, t = 0;
  hbmcu_result_t r = c->api.mem_get_info(&f, &t);
  if (r != HBMCU_SUCCESS)
    return cuda_fail(c, "cuMemGetInfo", r, 0);
  *total = t;
  *free_bytes = f;
  return HBM_OK;
}

static hbm_status_t cuda_region_alloc(hbm__device_t *d, uint64_t size, void **out) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter(c);
  if (st != HBM_OK)
    return st;
  hbmcu_deviceptr_t ptr = 0;
  hbmcu_result_t r = c->api.mem_alloc(&ptr, (size_t)size);
  if (r != HBMCU_SUCCESS)
    return cuda_fail(c, "cuMemAlloc", r, size);
  *out = (void *)(uintptr_t)ptr;
  return HBM_OK;
}

static void cuda_region_free(hbm__device_t *d, void *ptr, uint64_t size) {
  cuda_device_t *c = cuda_of(d);
  (void)size;
  if (enter(c) == HBM_OK)
    c->api.mem_free((hbmcu_deviceptr_t)(uintptr_t)ptr);
}

static hbm_status_t need_vmm(cuda_device_t *c) {
  if (c->vmm)
    return HBM_OK;
  return hbm__error(HBM_ERR_UNAVAILABLE,
                    "%s: the CUDA driver has no virtual memory management "
                    "(cuMemCreate/cuMemMap need CUDA 10.2 or newer)",
                    c->base.name);
}

/* enter(), once the driver is known to have the calls a feature needs. */
static hbm_status_t enter_needing(cuda_device_t *c, hbm_status_t (*need)(cuda_device_t *)) {
  hbm_status_t st = need(c);
  return st == HBM_OK ? enter(c) : st;
}

static hbm_status_t cuda_va_reserve(hbm__device_t *d, uint64_t size, void **base) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter_needing(c, need_vmm);
  if (st != HBM_OK)
    return st;
  hbmcu_deviceptr_t ptr = 0;
  hbmcu_result_t r = c->api.address_reserve(&ptr, (size_t)size, (size_t)d->granularity, 0, 0);
  if (r != HBMCU_SUCCESS)
    return cuda_fail(c, "cuMemAddressReserve", r, size);
  *base = (void *)(uintptr_t)ptr;
  return HBM_OK;
}

static void cuda_va_release(hbm__device_t *d, void *base, uint64_t size) {
  cuda_device_t *c = cuda_of(d);
  if (c->vmm && enter(c) == HBM_OK)
    c->api.address_free((hbmcu_deviceptr_t)(uintptr_t)base, (size_t)size);
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
  hbm_status_t st = enter_needing(c, need_vmm);
  if (st != HBM_OK)
    return st;
  hbmcu_alloc_prop_t prop = device_alloc_prop(c);
  hbmcu_mem_handle_t handle = 0;
  hbmcu_result_t r = c->api.mem_create(&handle, (size_t)size, &prop, 0);
  if (r != HBMCU_SUCCESS)
    return cuda_fail(c, "cuMemCreate", r, size);
  *out = handle;
  return HBM_OK;
}

static void cuda_phys_release(hbm__device_t *d, hbm__phys_t phys, uint64_t size) {
  cuda_device_t *c = cuda_of(d);
  (void)size;
  if (c->vmm && enter(c) == HBM_OK)
    c->api.mem_release(phys);
}

static hbm_status_t cuda_map(hbm__device_t *d, void *addr, uint64_t size, hbm__phys_t phys,
                             uint64_t offset) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter_needing(c, need_vmm);
  if (st != HBM_OK)
    return st;
  hbmcu_deviceptr_t ptr = (hbmcu_deviceptr_t)(uintptr_t)addr;
  hbmcu_result_t r = c->api.mem_map(ptr, (size_t)size, (size_t)offset, phys, 0);
  if (r != HBMCU_SUCCESS)
    return cuda_fail(c, "cuMemMap", r, size);
  hbmcu_access_desc_t access;
  memset(&access, 0, sizeof access);
  access.location.type = HBMCU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = c->device;
  access.flags = HBMCU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  r = c->api.mem_set_access(ptr, (size_t)size, &access, 1);
  if (r != HBMCU_SUCCESS) {
    c->api.mem_unmap(ptr, (size_t)size);
    return cuda_fail(c, "cuMemSetAccess", r, size);
  }
  return HBM_OK;
}

static hbm_status_t cuda_unmap(hbm__device_t *d, void *addr, uint64_t size) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter_needing(c, need_vmm);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r = c->api.mem_unmap((hbmcu_deviceptr_t)(uintptr_t)addr, (size_t)size);
  return r == HBMCU_SUCCESS ? HBM_OK : cuda_fail(c, "cuMemUnmap", r, size);
}

static hbm_status_t cuda_copy_to_device(hbm__device_t *d, void *dst, const void *src, size_t n) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter(c);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r = c->api.memcpy_htod((hbmcu_deviceptr_t)(uintptr_t)dst, src, n);
  return r == HBMCU_SUCCESS ? HBM_OK : cuda_fail(c, "cuMemcpyHtoD", r, n);
}

static hbm_status_t cuda_copy_from_device(hbm__device_t *d, void *dst, const void *src, size_t n) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter(c);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r = c->api.memcpy_dtoh(dst, (hbmcu_deviceptr_t)(uintptr_t)src, n);
  return r == HBMCU_SUCCESS ? HBM_OK : cuda_fail(c, "cuMemcpyDtoH", r, n);
}

static hbm_status_t cuda_stream_create(hbm__device_t *d, void **native) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter(c);
  if (st != HBM_OK)
    return st;
  hbmcu_stream_t s = NULL;
  hbmcu_result_t r = c->api.stream_create(&s, HBMCU_STREAM_NON_BLOCKING);
  if (r != HBMCU_SUCCESS)
    return cuda_fail(c, "cuStreamCreate", r, 0);
  *native = s;
  return HBM_OK;
}

static hbm_status_t cuda_stream_sync(hbm__device_t *d, void *native) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter(c);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r = c->api.stream_synchronize((hbmcu_stream_t)native);
  return r == HBMCU_SUCCESS ? HBM_OK : cuda_fail(c, "cuStreamSynchronize", r, 0);
}

static void cuda_stream_destroy(hbm__device_t *d, void *native) {
  cuda_device_t *c = cuda_of(d);
  if (native && enter(c) == HBM_OK)
    c->api.stream_destroy((hbmcu_stream_t)native);
}

/* The driver does not say who holds memory; what it reports used beyond what this object
 * holds belongs to other processes, other contexts or the driver itself (pid 0). */
static size_t cuda_holders(hbm__device_t *d, hbm__holder_t *out, size_t cap) {
  uint64_t total = 0, free_bytes = 0, held = atomic_load(&d->held);
  if (cuda_memory(d, &total, &free_bytes) != HBM_OK)
    return 0;
  size_t n = 0;
  if (held && n < cap)
    out[n++] = (hbm__holder_t){.pid = 0, .self = true, .bytes = held};
  uint64_t used = total - free_bytes;
  if (used > held && n < cap)
    out[n++] = (hbm__holder_t){.pid = 0, .bytes = used - held};
  return n;
}

static hbm_status_t need_pools(cuda_device_t *c) {
  if (c->api.mem_pool_create && c->api.mem_alloc_from_pool_async && c->api.mem_free_async &&
      c->api.mem_pool_set_attribute && c->api.mem_pool_get_attribute && c->api.mem_pool_trim_to &&
      c->api.mem_pool_destroy)
    return HBM_OK;
  return hbm__error(HBM_ERR_UNAVAILABLE,
                    "%s: the CUDA driver has no memory pools "
                    "(cuMemAllocAsync needs CUDA 11.2 or newer)",
                    c->base.name);
}

static hbm_status_t cuda_pool_create(hbm__device_t *d, uint64_t release_threshold, void **pool) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter_needing(c, need_pools);
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
    return cuda_fail(c, "cuMemPoolCreate", r, 0);
  /* Keep what the pool grew to across synchronizations, as TensorFlow does. */
  unsigned long long threshold = release_threshold;
  r = c->api.mem_pool_set_attribute(p, HBMCU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
  if (r != HBMCU_SUCCESS) {
    c->api.mem_pool_destroy(p);
    return cuda_fail(c, "cuMemPoolSetAttribute", r, 0);
  }
  *pool = p;
  return HBM_OK;
}

static void cuda_pool_destroy(hbm__device_t *d, void *pool) {
  cuda_device_t *c = cuda_of(d);
  if (enter(c) == HBM_OK)
    c->api.mem_pool_destroy((hbmcu_mempool_t)pool);
}

static hbm_status_t cuda_pool_alloc(hbm__device_t *d, void *pool, uint64_t size, void *stream,
                                    void **out) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter(c);
  if (st != HBM_OK)
    return st;
  hbmcu_deviceptr_t ptr = 0;
  hbmcu_result_t r = c->api.mem_alloc_from_pool_async(&ptr, (size_t)size, (hbmcu_mempool_t)pool,
                                                      (hbmcu_stream_t)stream);
  if (r != HBMCU_SUCCESS)
    return cuda_fail(c, "cuMemAllocFromPoolAsync", r, size);
  *out = (void *)(uintptr_t)ptr;
  return HBM_OK;
}

static hbm_status_t cuda_pool_free(hbm__device_t *d, void *pool, void *ptr, void *stream) {
  cuda_device_t *c = cuda_of(d);
  (void)pool;
  hbm_status_t st = enter(c);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r =
      c->api.mem_free_async((hbmcu_deviceptr_t)(uintptr_t)ptr, (hbmcu_stream_t)stream);
  return r == HBMCU_SUCCESS ? HBM_OK : cuda_fail(c, "cuMemFreeAsync", r, 0);
}

static hbm_status_t cuda_pool_trim(hbm__device_t *d, void *pool, uint64_t keep) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter(c);
  if (st != HBM_OK)
    return st;
  hbmcu_result_t r = c->api.mem_pool_trim_to((hbmcu_mempool_t)pool, (size_t)keep);
  return r == HBMCU_SUCCESS ? HBM_OK : cuda_fail(c, "cuMemPoolTrimTo", r, 0);
}

static hbm_status_t cuda_pool_usage(hbm__device_t *d, void *pool, uint64_t *reserved,
                                    uint64_t *used) {
  cuda_device_t *c = cuda_of(d);
  hbm_status_t st = enter(c);
  if (st != HBM_OK)
    return st;
  unsigned long long r_bytes = 0, u_bytes = 0;
  hbmcu_result_t r = c->api.mem_pool_get_attribute(
      (hbmcu_mempool_t)pool, HBMCU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r_bytes);
  if (r == HBMCU_SUCCESS)
    r = c->api.mem_pool_get_attribute((hbmcu_mempool_t)pool, HBMCU_MEMPOOL_ATTR_USED_MEM_CURRENT,
                                      &u_bytes);
  if (r != HBMCU_SUCCESS)
    return cuda_fail(c, "cuMemPoolGetAttribute", r, 0);
  *reserved = r_bytes;
  *used = u_bytes;
  return HBM_OK;
}

static void cuda_close(hbm__device_t *d) {
  cuda_device_t *c = cuda_of(d);
  if (c->context)
    c->api.primary_ctx_release(c->device);
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

static hbm_status_t load_driver(cuda_api_t *api) {
  api->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib)
    return hbm__error(HBM_ERR_UNAVAILABLE, "cannot load the CUDA driver: %s", dlerror());
  for (size_t i = 0; i < HBM_ARRAY_LEN(cuda_symbols); i++) {
    void *sym = dlsym(api->lib, cuda_symbols[i].name);
    if (!sym && cuda_symbols[i].required)
      return hbm__error(HBM_ERR_UNAVAILABLE, "the CUDA driver lacks %s (too old?)",
                        cuda_symbols[i].name);
    /* POSIX guarantees a function pointer fits in and round-trips through a void *. */
    memcpy((char *)api + cuda_symbols[i].offset, &sym, sizeof sym);
  }
  return HBM_OK;
}

/* Finds the GPU, retains its primary context and reads its name, size and granularity. */
static hbm_status_t attach_device(cuda_device_t *c, int ordinal) {
  cuda_api_t *api = &c->api;
  hbmcu_result_t r = api->init(0);
  if (r != HBMCU_SUCCESS)
    return hbm__error(HBM_ERR_UNAVAILABLE, "cuInit: %s", cuda_error_text(api, r));
  int count = 0;
  r = api->device_get_count(&count);
  if (r != HBMCU_SUCCESS || count == 0)
    return hbm__error(HBM_ERR_UNAVAILABLE, "no CUDA device: %s",
                      r != HBMCU_SUCCESS ? cuda_error_text(api, r) : "the driver found none");
  if (ordinal >= count)
    return hbm__error(HBM_ERR_UNAVAILABLE,
                      "HBM_DEVICE_ORDINAL=%d, but there are %d CUDA "
                      "device(s)",
                      ordinal, count);
  char gpu[100] = "";
  if ((r = api->device_get(&c->device, ordinal)) != HBMCU_SUCCESS ||
      (r = api->device_get_name(gpu, (int)sizeof gpu - 1, c->device)) != HBMCU_SUCCESS ||
      (r = api->primary_ctx_retain(&c->context, c->device)) != HBMCU_SUCCESS)
    return hbm__error(HBM_ERR_UNAVAILABLE, "CUDA device %d: %s", ordinal, cuda_error_text(api, r));
  c->ordinal = ordinal;
  snprintf(c->base.name, sizeof c->base.name, "cuda:%d (%s)", ordinal, gpu);
  uint64_t total = 0, free_bytes = 0;
  hbm_status_t st = cuda_memory(&c->base, &total, &free_bytes);
  if (st != HBM_OK)
    return st;
  c->base.total = total;
  c->base.granularity = 2ull << 20;
  c->vmm = api->address_reserve && api->address_free && api->mem_create && api->mem_release &&
           api->mem_map && api->mem_unmap && api->mem_set_access &&
           api->mem_get_allocation_granularity;
  if (c->vmm) {
    hbmcu_alloc_prop_t prop = device_alloc_prop(c);
    size_t gran = 0;
    if (api->mem_get_allocation_granularity(&gran, &prop, HBMCU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
            HBMCU_SUCCESS &&
        gran)
      c->base.granularity = ((2ull << 20) + gran - 1) / gran * gran; /* >= 2 MiB */
  }
  return HBM_OK;
}

hbm_status_t hbm__cuda_open(const hbm_config_t *cfg, hbm__device_t **out) {
  cuda_device_t *c = calloc(1, sizeof *c);
  if (!c)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory opening a CUDA device");
  c->base.ops = &cuda_ops;
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
