/* attrib_lib.c — a shared library of a test program's own that allocates device memory, built
 * twice for tests/test_run.sh: libattrib_a.so asks the CUDA runtime with cudaMalloc (which
 * `hbm run` serves at the runtime), libattrib_b.so with cudaMallocPitch (which the runtime
 * passes to the driver: `hbm run` sees it there, with the runtime as the caller, and must still
 * name this library). */
#include <stddef.h>

int cudaMalloc(void **, size_t);
int cudaMallocPitch(void **, size_t *, size_t, size_t);

__attribute__((visibility("default"), noinline)) int ATTRIB_FN(void **p, size_t size) {
#ifdef ATTRIB_PITCH
  size_t pitch = 0;
  int r = cudaMallocPitch(p, &pitch, 512, size / 512); /* size: a multiple of 512 */
#else
  int r = cudaMalloc(p, size);
#endif
  __asm__ volatile("" ::: "memory"); /* a call, not a tail jump: this frame stays */
  return r;
}
