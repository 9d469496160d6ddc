/* torch_alloc_hook.c — an LD_PRELOAD shim for bench/record_torch_steps.py: PyTorch's CPU
 * allocator (c10::alloc_cpu) takes every tensor storage from posix_memalign with 64-byte
 * alignment and gives it back with free; while recording is on (hbm_torch_record(1), called
 * through ctypes), each such allocation and each free is written to the file named by
 * HBM_TORCH_HOOK_LOG as "a <pointer> <size>" / "f <pointer>" lines (the script keeps the frees
 * of blocks it saw allocated). Built by the script with cc; not part of libhbm. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int (*real_memalign)(void **, size_t, size_t);
static void (*real_free)(void *);
static FILE *out;
static volatile int on;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int inside; /* the hook's own allocations (stdio) are not recorded */

void hbm_torch_record(int enable) {
  pthread_mutex_lock(&lock);
  inside = 1;
  if (!out && getenv("HBM_TORCH_HOOK_LOG"))
    out = fopen(getenv("HBM_TORCH_HOOK_LOG"), "w");
  if (out && !enable)
    fflush(out);
  on = enable && out;
  inside = 0;
  pthread_mutex_unlock(&lock);
}

static void note(char kind, void *p, size_t size) {
  pthread_mutex_lock(&lock);
  inside = 1;
  if (on)
    fprintf(out, kind == 'a' ? "a %p %zu\n" : "f %p\n", p, size);
  inside = 0;
  pthread_mutex_unlock(&lock);
}

int posix_memalign(void **p, size_t alignment, size_t size) {
  if (!real_memalign)
    real_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  int rc = real_memalign(p, alignment, size);
  if (on && !inside && rc == 0 && alignment == 64)
    note('a', *p, size);
  return rc;
}

void free(void *p) {
  if (!real_free)
    real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  if (on && !inside && p)
    note('f', p, 0);
  real_free(p);
}
