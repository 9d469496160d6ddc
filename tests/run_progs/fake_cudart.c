/* fake_cudart.c — a small CUDA runtime double (libcudart.so.12) for tests/test_run.sh: the few
 * runtime calls PyTorch allocates with, built the way the real runtime reaches the driver —
 * dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"), then cuGetProcAddress for every
 * driver entry point — on the driver double. The current device is per thread (0 at first);
 * the first call that needs the device makes its primary context current, as the runtime
 * does. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUstream;

static struct driver {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(int *, int);
  CUresult (*retain)(CUcontext *, int);
  CUresult (*set_current)(CUcontext);
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*free_)(CUdeviceptr);
  CUresult (*info)(size_t *, size_t *);
  CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
  CUresult (*free_async)(CUdeviceptr, CUstream);
  CUresult (*synchronize)(void);
  CUresult (*stream_create)(CUstream *, unsigned);
  CUresult (*stream_sync)(CUstream);
  CUresult (*stream_destroy)(CUstream);
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
} drv;

static const struct {
  const char *name;
  size_t offset;
} names[] = {
    {"cuInit", offsetof(struct driver, init)},
    {"cuDeviceGet", offsetof(struct driver, device_get)},
    {"cuDevicePrimaryCtxRetain", offsetof(struct driver, retain)},
    {"cuCtxSetCurrent", offsetof(struct driver, set_current)},
    {"cuMemAlloc", offsetof(struct driver, alloc)},
    {"cuMemFree", offsetof(struct driver, free_)},
    {"cuMemGetInfo", offsetof(struct driver, info)},
    {"cuMemAllocAsync", offsetof(struct driver, alloc_async)},
    {"cuMemFreeAsync", offsetof(struct driver, free_async)},
    {"cuCtxSynchronize", offsetof(struct driver, synchronize)},
    {"cuStreamCreate", offsetof(struct driver, stream_create)},
    {"cuStreamSynchronize", offsetof(struct driver, stream_sync)},
    {"cuStreamDestroy", offsetof(struct driver, stream_destroy)},
    {"cuMemcpyHtoD", offsetof(struct driver, htod)},
    {"cuMemcpyDtoH", offsetof(struct driver, dtoh)},
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded; /* 0: not yet, 1: loaded, -1: failed */
static CUcontext contexts[8];
static _Thread_local int current_device;
static _Thread_local int thread_ready = -1; /* the device whose context this thread has */

static void load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void *p = lib ? dlsym(lib, "cuGetProcAddress_v2") : NULL;
  CUresult (*gpa)(const char *, void **, int, unsigned long long, int *);
  loaded = -1;
  if (!p)
    return;
  memcpy(&gpa, &p, sizeof p);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *fn = NULL;
    int status;
    if (gpa(names[i].name, &fn, 12000, 0, &status) || !fn)
      return;
    memcpy((char *)&drv + names[i].offset, &fn, sizeof fn);
  }
  loaded = drv.init(0) == 0 ? 1 : -1;
}

/* cudaError_t: 0 success, 2 cudaErrorMemoryAllocation, 3 cudaErrorInitializationError,
 * 101 cudaErrorInvalidDevice, 999 cudaErrorUnknown. */
static int result(CUresult r) { return r == 0 ? 0 : r == 2 ? 2 : r == 1 ? 1 : 999; }

static int ready(void) {
  pthread_once(&once, load);
  if (loaded < 0)
    return 3;
  if (thread_ready == current_device)
    return 0;
  int dev = 0;
  CUresult r = drv.device_get(&dev, current_device);
  if (!r && !contexts[current_device])
    r = drv.retain(&contexts[current_device], dev);
  if (!r)
    r = drv.set_current(contexts[current_device]);
  if (!r)
    thread_ready = current_device;
  return result(r);
}

EXPORT int cudaGetDevice(int *device) {
  *device = current_device;
  return 0;
}

EXPORT int cudaSetDevice(int device) {
  if (device < 0 || device >= 8)
    return 101;
  current_device = device;
  return 0;
}

EXPORT int cudaMalloc(void **ptr, size_t size) {
  int e = ready();
  CUdeviceptr p = 0;
  if (e || !size)
    return *ptr = NULL, e;
  e = result(drv.alloc(&p, size));
  *ptr = e ? NULL : (void *)(size_t)p;
  return e;
}

/* A runtime call that allocates on its caller's behalf through the driver (the runtime's
 * internal path, which hbm run sees at the driver with the runtime as the caller). Rows of
 * `width` bytes, padded to 512. */
EXPORT int cudaMallocPitch(void **ptr, size_t *pitch, size_t width, size_t height) {
  int e = ready();
  CUdeviceptr p = 0;
  if (e)
    return *ptr = NULL, e;
  *pitch = (width + 511) / 512 * 512;
  e = result(drv.alloc(&p, *pitch * height));
  *ptr = e ? NULL : (void *)(size_t)p;
  return e;
}

EXPORT int cudaFree(void *ptr) {
  int e = ready();
  return e || !ptr ? e : result(drv.free_((CUdeviceptr)(size_t)ptr));
}

EXPORT int cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  int e = ready();
  return e ? e : result(drv.info(free_bytes, total));
}

EXPORT int cudaMallocAsync(void **ptr, size_t size, CUstream stream) {
  int e = ready();
  CUdeviceptr p = 0;
  if (e)
    return e;
  e = result(drv.alloc_async(&p, size, stream));
  *ptr = e ? NULL : (void *)(size_t)p;
  return e;
}

EXPORT int cudaFreeAsync(void *ptr, CUstream stream) {
  int e = ready();
  return e ? e : result(drv.free_async((CUdeviceptr)(size_t)ptr, stream));
}

EXPORT int cudaDeviceSynchronize(void) {
  int e = ready();
  return e ? e : result(drv.synchronize());
}

EXPORT int cudaStreamCreate(CUstream *stream) {
  int e = ready();
  return e ? e : result(drv.stream_create(stream, 0));
}

EXPORT int cudaStreamSynchronize(CUstream stream) {
  int e = ready();
  return e ? e : result(drv.stream_sync(stream));
}

EXPORT int cudaStreamDestroy(CUstream stream) {
  int e = ready();
  return e ? e : result(drv.stream_destroy(stream));
}

/* kind: 1 host to device, 2 device to host (cudaMemcpyKind). */
EXPORT int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
  int e = ready();
  if (e)
    return e;
  if (kind == 1)
    return result(drv.htod((CUdeviceptr)(size_t)dst, src, n));
  if (kind == 2)
    return result(drv.dtoh(dst, (CUdeviceptr)(size_t)src, n));
  return 1;
}
