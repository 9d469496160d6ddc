/* cuda_user.c — a program that allocates device memory through the CUDA driver, reaching it
 * the three ways frameworks do, for tests/test_run.sh (`hbm run` on the driver double):
 *   linked    calls the driver's exported symbols (built as cuda_user_linked, linked with
 *             libcuda.so.1)
 *   dlsym     dlopen("libcuda.so.1") + dlsym, as XLA does
 *   procaddr  dlsym("cuGetProcAddress_v2") once, then cuGetProcAddress for every entry
 *             point, as the CUDA runtime does
 * Usage: cuda_user WAY COMMAND...  with commands
 *   alloc SIZE | async SIZE | pool SIZE   cuMemAlloc_v2 / cuMemAllocAsync / cuMemAllocFromPoolAsync
 *   free I       frees the I-th allocation (stream-ordered ones with cuMemFreeAsync)
 *   touch I      writes a pattern into the I-th allocation with the driver and reads it back
 *   info         cuMemGetInfo_v2
 *   sleep MS     waits (two processes at once)
 *   nocontext 0  makes no context current (the driver's calls then fail)
 *   device N     makes device N's primary context current (later commands use it)
 *   cxx 0        loads the C++ runtime into the global scope (as any C++ framework has it)
 *   threads N    N threads at once, each 200 cuMemAlloc_v2 + cuMemFree_v2 of sizes 1..64 KiB
 *   exit N       exits with status N after freeing everything
 * Each command prints one line ("alloc 1048576: 0"), the driver's result last. */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUstream, *CUmemoryPool;

typedef struct api {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(int *, int);
  CUresult (*retain)(CUcontext *, int);
  CUresult (*release)(int);
  CUresult (*set_current)(CUcontext);
  CUresult (*stream_create)(CUstream *, unsigned);
  CUresult (*stream_sync)(CUstream);
  CUresult (*stream_destroy)(CUstream);
  CUresult (*default_pool)(CUmemoryPool *, int);
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*free_)(CUdeviceptr);
  CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
  CUresult (*alloc_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
  CUresult (*free_async)(CUdeviceptr, CUstream);
  CUresult (*info)(size_t *, size_t *);
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
} api_t;

/* name as dlsym knows it; base as cuGetProcAddress does. */
typedef struct entry {
  const char *name, *base;
  size_t offset;
} entry_t;

#define E(field, name, base)                                                                       \
  { name, base, offsetof(api_t, field) }
static const entry_t entries[] = {
    E(init, "cuInit", "cuInit"),
    E(device_get, "cuDeviceGet", "cuDeviceGet"),
    E(retain, "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain"),
    E(release, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
    E(set_current, "cuCtxSetCurrent", "cuCtxSetCurrent"),
    E(stream_create, "cuStreamCreate", "cuStreamCreate"),
    E(stream_sync, "cuStreamSynchronize", "cuStreamSynchronize"),
    E(stream_destroy, "cuStreamDestroy_v2", "cuStreamDestroy"),
    E(default_pool, "cuDeviceGetDefaultMemPool", "cuDeviceGetDefaultMemPool"),
    E(alloc, "cuMemAlloc_v2", "cuMemAlloc"),
    E(free_, "cuMemFree_v2", "cuMemFree"),
    E(alloc_async, "cuMemAllocAsync", "cuMemAllocAsync"),
    E(alloc_pool, "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync"),
    E(free_async, "cuMemFreeAsync", "cuMemFreeAsync"),
    E(info, "cuMemGetInfo_v2", "cuMemGetInfo"),
    E(htod, "cuMemcpyHtoD_v2", "cuMemcpyHtoD"),
    E(dtoh, "cuMemcpyDtoH_v2", "cuMemcpyDtoH"),
};

static void set_entry(api_t *api, const entry_t *e, void *fn) {
  memcpy((char *)api + e->offset, &fn, sizeof fn);
}

#ifdef CUDA_USER_LINKED
CUresult cuInit(unsigned);
CUresult cuDeviceGet(int *, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext *, int);
CUresult cuDevicePrimaryCtxRelease_v2(int);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuStreamCreate(CUstream *, unsigned);
CUresult cuStreamSynchronize(CUstream);
CUresult cuStreamDestroy_v2(CUstream);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *, int);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemAllocAsync(CUdeviceptr *, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemGetInfo_v2(size_t *, size_t *);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void *, size_t);
CUresult cuMemcpyDtoH_v2(void *, CUdeviceptr, size_t);

static int load_linked(api_t *api) {
  *api = (api_t){cuInit,
                 cuDeviceGet,
                 cuDevicePrimaryCtxRetain,
                 cuDevicePrimaryCtxRelease_v2,
                 cuCtxSetCurrent,
                 cuStreamCreate,
                 cuStreamSynchronize,
                 cuStreamDestroy_v2,
                 cuDeviceGetDefaultMemPool,
                 cuMemAlloc_v2,
                 cuMemFree_v2,
                 cuMemAllocAsync,
                 cuMemAllocFromPoolAsync,
                 cuMemFreeAsync,
                 cuMemGetInfo_v2,
                 cuMemcpyHtoD_v2,
                 cuMemcpyDtoH_v2};
  return 0;
}
#endif

static int load_dlsym(api_t *api, void *lib) {
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    void *fn = dlsym(lib, entries[i].name);
    if (!fn)
      return fprintf(stderr, "dlsym %s: %s\n", entries[i].name, dlerror()), 1;
    set_entry(api, &entries[i], fn);
  }
  return 0;
}

static int load_procaddr(api_t *api, void *lib) {
  CUresult (*gpa)(const char *, void **, int, unsigned long long, int *);
  void *p = dlsym(lib, "cuGetProcAddress_v2");
  if (!p)
    return fprintf(stderr, "dlsym cuGetProcAddress_v2: %s\n", dlerror()), 1;
  memcpy(&gpa, &p, sizeof p);
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    void *fn = NULL;
    int status = -1;
    CUresult r = gpa(entries[i].base, &fn, 12000, 0, &status);
    if (r || !fn)
      return fprintf(stderr, "cuGetProcAddress %s: %d\n", entries[i].base, r), 1;
    set_entry(api, &entries[i], fn);
  }
  return 0;
}

static int load(const char *way, api_t *api) {
#ifdef CUDA_USER_LINKED
  if (!strcmp(way, "linked"))
    return load_linked(api);
#endif
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror()), 1;
  if (!strcmp(way, "dlsym"))
    return load_dlsym(api, lib);
  if (!strcmp(way, "procaddr"))
    return load_procaddr(api, lib);
  return fprintf(stderr, "unknown way '%s'\n", way), 1;
}

#define MAX_BLOCKS 64
static CUdeviceptr blocks[MAX_BLOCKS];
static int ordered[MAX_BLOCKS];
static int n_blocks;

/* cuMemAlloc_v2 called from a function with a C++ name, model::train_step() (exported:
 * the program is linked with -rdynamic), so the profile can name the caller. */
__attribute__((noinline, visibility("default"))) CUresult
train_step(const api_t *api, CUdeviceptr *p, size_t n) __asm__("_ZN5model10train_stepEv");
__attribute__((noinline, visibility("default"))) CUresult train_step(const api_t *api,
                                                                     CUdeviceptr *p, size_t n) {
  CUresult r = api->alloc(p, n);
  __asm__ volatile("" ::: "memory"); /* keeps the call a call, not a tail jump */
  return r;
}

static int touch(const api_t *api, CUdeviceptr p, CUstream stream) {
  unsigned char out[4096], in[4096];
  for (size_t i = 0; i < sizeof out; i++)
    out[i] = (unsigned char)(i * 7 + 1);
  CUresult r = api->stream_sync(stream); /* stream-ordered blocks: ready once it is */
  if (!r)
    r = api->htod(p, out, sizeof out);
  if (!r)
    r = api->dtoh(in, p, sizeof in);
  return r ? r : memcmp(in, out, sizeof in) != 0 ? -1 : 0;
}

typedef struct worker {
  const api_t *api;
  CUcontext ctx;
  int seed;
  CUresult result;
} worker_t;

/* One thread's allocations, each written and read back, freed in a shuffled order. */
static void *work(void *arg) {
  worker_t *w = arg;
  CUdeviceptr held[8] = {0};
  CUresult r = w->api->set_current(w->ctx);
  unsigned x = (unsigned)w->seed * 2654435761u + 1;
  for (int i = 0; i < 200 && !r; i++) {
    x = x * 1103515245u + 12345u;
    int slot = (int)(x >> 16) % 8;
    if (held[slot]) {
      r = w->api->free_(held[slot]);
      held[slot] = 0;
    } else {
      size_t size = 1 + (x >> 8) % 65536;
      r = w->api->alloc(&held[slot], size);
      unsigned char byte = (unsigned char)x, back = 0;
      if (!r)
        r = w->api->htod(held[slot], &byte, 1);
      if (!r)
        r = w->api->dtoh(&back, held[slot], 1);
      if (!r && back != byte)
        r = -1;
    }
  }
  for (int i = 0; i < 8; i++)
    if (held[i] && w->api->free_(held[i]) && !r)
      r = -2;
  w->result = r;
  return NULL;
}

static CUresult run_threads(const api_t *api, CUcontext ctx, int n) {
  pthread_t threads[16];
  worker_t workers[16];
  if (n > 16)
    n = 16;
  for (int i = 0; i < n; i++) {
    workers[i] = (worker_t){api, ctx, i, 0};
    pthread_create(&threads[i], NULL, work, &workers[i]);
  }
  CUresult r = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(threads[i], NULL);
    if (workers[i].result && !r)
      r = workers[i].result;
  }
  return r;
}

static void free_all(const api_t *api, CUstream stream) {
  for (int i = 0; i < n_blocks; i++) {
    if (!blocks[i])
      continue;
    if (ordered[i])
      api->free_async(blocks[i], stream);
    else
      api->free_(blocks[i]);
    blocks[i] = 0;
  }
  api->stream_sync(stream);
}

int main(int argc, char **argv) {
  api_t api;
  if (argc < 2 || load(argv[1], &api))
    return 1;
  CUcontext ctx = NULL;
  CUstream stream = NULL;
  CUmemoryPool pool = NULL;
  int dev = 0;
  CUresult r;
  if ((r = api.init(0)) || (r = api.device_get(&dev, 0)) || (r = api.retain(&ctx, dev)) ||
      (r = api.set_current(ctx)) || (r = api.stream_create(&stream, 0)) ||
      (r = api.default_pool(&pool, dev)))
    return fprintf(stderr, "setup: CUDA error %d\n", r), 1;
  int status = 0;
  for (int i = 2; i < argc; i++) {
    const char *cmd = argv[i];
    const char *arg = i + 1 < argc ? argv[i + 1] : "0";
    if (!strcmp(cmd, "info")) {
      size_t free_bytes = 0, total = 0;
      r = api.info(&free_bytes, &total);
      printf("info free=%zu total=%zu: %d\n", free_bytes, total, r);
      continue;
    }
    i++;
    size_t n = strtoull(arg, NULL, 10);
    if (!strcmp(cmd, "alloc") || !strcmp(cmd, "async") || !strcmp(cmd, "pool")) {
      CUdeviceptr p = 0;
      r = !strcmp(cmd, "alloc")   ? train_step(&api, &p, n)
          : !strcmp(cmd, "async") ? api.alloc_async(&p, n, stream)
                                  : api.alloc_pool(&p, n, pool, stream);
      if (!r && n_blocks < MAX_BLOCKS) {
        ordered[n_blocks] = strcmp(cmd, "alloc") != 0;
        blocks[n_blocks++] = p;
      }
      printf("%s %zu: %d\n", cmd, n, r);
    } else if (!strcmp(cmd, "free") && n < (size_t)n_blocks && blocks[n]) {
      r = ordered[n] ? api.free_async(blocks[n], stream) : api.free_(blocks[n]);
      blocks[n] = 0;
      printf("free %zu: %d\n", n, r);
    } else if (!strcmp(cmd, "touch") && n < (size_t)n_blocks && blocks[n]) {
      printf("touch %zu: %d\n", n, touch(&api, blocks[n], stream));
    } else if (!strcmp(cmd, "nocontext")) {
      printf("nocontext: %d\n", api.set_current(NULL));
    } else if (!strcmp(cmd, "device")) {
      CUcontext other = NULL;
      int d = 0;
      r = api.device_get(&d, (int)n);
      if (!r)
        r = api.retain(&other, d);
      if (!r)
        r = api.set_current(other);
      printf("device %zu: %d\n", n, r);
    } else if (!strcmp(cmd, "cxx")) {
      printf("cxx: %d\n", dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL) ? 0 : 1);
    } else if (!strcmp(cmd, "threads")) {
      printf("threads %zu: %d\n", n, run_threads(&api, ctx, (int)n));
    } else if (!strcmp(cmd, "sleep")) {
      usleep((useconds_t)n * 1000);
    } else if (!strcmp(cmd, "exit")) {
      status = (int)n;
    } else {
      return fprintf(stderr, "bad command '%s %s'\n", cmd, arg), 1;
    }
    fflush(stdout);
  }
  free_all(&api, stream);
  api.stream_destroy(stream);
  api.release(dev);
  return status;
}
