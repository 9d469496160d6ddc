/* real.c — the real functions behind our hooks. Because this library exports dlsym, a plain
 * dlsym call would come back to us: glibc's own is found with dlvsym (not interposed) by its
 * symbol version. The driver's entry points come from libcuda.so.1's own handle (a lookup
 * in a handle starts at that library, so it never finds our exports); the runtime's from the
 * definition dlsym handed out, the next one after us, or any loaded libcudart (frameworks
 * load it RTLD_LOCAL, out of the global scope). */
#include "preload/preload.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static const char *const fn_names[FN_COUNT] = {
    [FN_CU_MEM_ALLOC] = "cuMemAlloc_v2",
    [FN_CU_MEM_FREE] = "cuMemFree_v2",
    [FN_CU_MEM_GET_INFO] = "cuMemGetInfo_v2",
    [FN_CU_MEM_ALLOC_ASYNC] = "cuMemAllocAsync",
    [FN_CU_MEM_ALLOC_ASYNC_PTSZ] = "cuMemAllocAsync_ptsz",
    [FN_CU_MEM_FREE_ASYNC] = "cuMemFreeAsync",
    [FN_CU_MEM_FREE_ASYNC_PTSZ] = "cuMemFreeAsync_ptsz",
    [FN_CU_MEM_ALLOC_FROM_POOL_ASYNC] = "cuMemAllocFromPoolAsync",
    [FN_CU_MEM_ALLOC_FROM_POOL_ASYNC_PTSZ] = "cuMemAllocFromPoolAsync_ptsz",
    [FN_CU_GET_PROC_ADDRESS] = "cuGetProcAddress",
    [FN_CU_GET_PROC_ADDRESS_V2] = "cuGetProcAddress_v2",
    [FN_CUDA_MALLOC] = "cudaMalloc",
    [FN_CUDA_FREE] = "cudaFree",
    [FN_CUDA_MEM_GET_INFO] = "cudaMemGetInfo",
    [FN_CUDA_MALLOC_ASYNC] = "cudaMallocAsync",
    [FN_CUDA_MALLOC_ASYNC_PTSZ] = "cudaMallocAsync_ptsz",
    [FN_CUDA_FREE_ASYNC] = "cudaFreeAsync",
    [FN_CUDA_FREE_ASYNC_PTSZ] = "cudaFreeAsync_ptsz",
};

PRELOAD_UNINSTRUMENTED int preload_fn_by_name(const char *name) {
  if (!name || name[0] != 'c' || name[1] != 'u') /* most lookups end here */
    return -1;
  for (int i = 0; i < FN_COUNT; i++)
    if (!strcmp(fn_names[i], name))
      return i;
  return -1;
}

/* ---- glibc's dlsym ---- */

typedef void *(*dlsym_fn)(void *, const char *);
static _Atomic(dlsym_fn) real_dlsym;

PRELOAD_UNINSTRUMENTED void *preload_real_dlsym(void *handle, const char *name) {
  dlsym_fn f = atomic_load_explicit(&real_dlsym, memory_order_acquire);
  if (!f) {
    /* dlsym moved from libdl to libc in glibc 2.34; older ones have the first versions. */
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    for (size_t i = 0; !f && i < sizeof versions / sizeof versions[0]; i++) {
      void *p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
      memcpy(&f, &p, sizeof f);
    }
    if (!f)
      return NULL;
    atomic_store_explicit(&real_dlsym, f, memory_order_release);
  }
  return f(handle, name);
}

/* ---- this library's own addresses ---- */

typedef struct own_range {
  uintptr_t lo, hi;
} own_range_t;

static own_range_t own_ranges[8];
static size_t n_own_ranges;
static pthread_once_t own_once = PTHREAD_ONCE_INIT;

static int find_own_segments(struct dl_phdr_info *info, size_t size, void *ctx) {
  (void)size;
  uintptr_t base = (uintptr_t)ctx;
  if (info->dlpi_addr != base)
    return 0;
  for (int i = 0; i < info->dlpi_phnum && n_own_ranges < 8; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X))
      own_ranges[n_own_ranges++] =
          (own_range_t){base + ph->p_vaddr, base + ph->p_vaddr + ph->p_memsz};
  }
  return 1;
}

static void find_own_ranges(void) {
  Dl_info info;
  if (dladdr((void *)(uintptr_t)find_own_ranges, &info) && info.dli_fbase) {
    /* dlpi_addr is the load bias; dli_fbase the lowest mapped address (the same for PIC
     * shared objects, whose first segment starts at 0). */
    dl_iterate_phdr(find_own_segments, info.dli_fbase);
  }
}

bool preload_is_own_address(const void *addr) {
  pthread_once(&own_once, find_own_ranges);
  uintptr_t a = (uintptr_t)addr;
  for (size_t i = 0; i < n_own_ranges; i++)
    if (a >= own_ranges[i].lo && a < own_ranges[i].hi)
      return true;
  return false;
}

/* ---- the driver ---- */

static void *driver_fns[FN_DRIVER_COUNT];
static preload_driver_t driver;
static bool have_driver;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

static void *driver_symbol(void *lib, const char *name) { return preload_real_dlsym(lib, name); }

static void load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!lib)
    lib = dlopen("libcuda.so.1", RTLD_LAZY);
  if (!lib)
    return;
  for (int i = 0; i < FN_DRIVER_COUNT; i++)
    driver_fns[i] = driver_symbol(lib, fn_names[i]);
  void *p;
#define DRIVER_CALL(field, name)                                                                   \
  p = driver_symbol(lib, name);                                                                    \
  memcpy(&driver.field, &p, sizeof p)
  DRIVER_CALL(ctx_get_device, "cuCtxGetDevice");
  DRIVER_CALL(device_get, "cuDeviceGet");
  DRIVER_CALL(device_get_count, "cuDeviceGetCount");
  DRIVER_CALL(ctx_synchronize, "cuCtxSynchronize");
  DRIVER_CALL(stream_synchronize, "cuStreamSynchronize");
#undef DRIVER_CALL
  have_driver = driver.ctx_get_device && driver.device_get && driver.device_get_count;
}

void *preload_real_driver(preload_fn_t fn) {
  pthread_once(&driver_once, load_driver);
  return (unsigned)fn < FN_DRIVER_COUNT ? driver_fns[fn] : NULL;
}

const preload_driver_t *preload_driver(void) {
  pthread_once(&driver_once, load_driver);
  return have_driver ? &driver : NULL;
}

/* ---- the runtime ---- */

static _Atomic(void *) runtime_fns[FN_COUNT];

void preload_note_runtime(preload_fn_t fn, void *real) {
  void *expected = NULL;
  /* A lookup in the global scope finds our own export first: that is not the runtime. */
  if (fn >= FN_DRIVER_COUNT && fn < FN_COUNT && real && !preload_is_own_address(real))
    atomic_compare_exchange_strong(&runtime_fns[fn], &expected, real);
}

/* The loaded libcudart*.so* (their paths), collected first: dlopen is not called while
 * dl_iterate_phdr holds the loader's list. */
typedef struct runtime_libs {
  char paths[4][512];
  int n;
} runtime_libs_t;

static int collect_runtimes(struct dl_phdr_info *info, size_t size, void *ctx) {
  (void)size;
  runtime_libs_t *libs = ctx;
  const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  const char *base = slash ? slash + 1 : info->dlpi_name;
  if (base && !strncmp(base, "libcudart", 9) && libs->n < 4 &&
      strlen(info->dlpi_name) < sizeof libs->paths[0])
    strcpy(libs->paths[libs->n++], info->dlpi_name);
  return 0;
}

static void *find_runtime_symbol(const char *name) {
  void *p = preload_real_dlsym(RTLD_NEXT, name);
  if (p && !preload_is_own_address(p))
    return p;
  runtime_libs_t libs = {.n = 0};
  dl_iterate_phdr(collect_runtimes, &libs);
  p = NULL;
  for (int i = 0; i < libs.n && !p; i++) {
    void *lib = dlopen(libs.paths[i], RTLD_LAZY | RTLD_NOLOAD);
    if (lib) {
      p = preload_real_dlsym(lib, name);
      dlclose(lib);
    }
  }
  return p && !preload_is_own_address(p) ? p : NULL;
}

void *preload_real_runtime(preload_fn_t fn) {
  if (fn < FN_DRIVER_COUNT || fn >= FN_COUNT)
    return NULL;
  void *p = atomic_load(&runtime_fns[fn]);
  if (!p) {
    p = find_runtime_symbol(fn_names[fn]);
    preload_note_runtime(fn, p);
  }
  return p;
}

void *preload_runtime_helper(preload_rt_helper_t which) {
  static const char *const names[RT_HELPER_COUNT] = {
      [RT_GET_DEVICE] = "cudaGetDevice",
      [RT_DEVICE_SYNCHRONIZE] = "cudaDeviceSynchronize",
  };
  static _Atomic(void *) helpers[RT_HELPER_COUNT];
  if ((unsigned)which >= RT_HELPER_COUNT)
    return NULL;
  void *p = atomic_load(&helpers[which]);
  if (!p) {
    p = find_runtime_symbol(names[which]);
    atomic_store(&helpers[which], p);
  }
  return p;
}
