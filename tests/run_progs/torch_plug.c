/* torch_plug.c — loads libhbm_preload.so as torch.cuda.memory.CUDAPluggableAllocator does
 * (ctypes: dlopen RTLD_NOW | RTLD_LOCAL, then the two functions by name) and calls them as
 * PyTorch's caching allocator would, for tests/test_run.sh.
 * Usage: torch_plug LIBRARY SIZE...  allocates each SIZE on device 0 (printing
 * "malloc SIZE: ok" or "malloc SIZE: null"), then frees them all. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

int main(int argc, char **argv) {
  void *lib = argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!lib)
    return fprintf(stderr, "dlopen: %s\n", argc > 1 ? dlerror() : "no library given"), 1;
  void *(*torch_malloc)(ssize_t, int, void *);
  void (*torch_free)(void *, ssize_t, int, void *);
  void *m = dlsym(lib, "hbm_torch_malloc"), *f = dlsym(lib, "hbm_torch_free");
  if (!m || !f)
    return fprintf(stderr, "dlsym: %s\n", dlerror()), 1;
  memcpy(&torch_malloc, &m, sizeof m);
  memcpy(&torch_free, &f, sizeof f);
  void *blocks[64] = {0};
  ssize_t sizes[64] = {0};
  int n = 0;
  for (int i = 2; i < argc && n < 64; i++) {
    sizes[n] = (ssize_t)strtoll(argv[i], NULL, 10);
    blocks[n] = torch_malloc(sizes[n], 0, NULL);
    printf("malloc %zd: %s\n", sizes[n], blocks[n] ? "ok" : "null");
    n++;
  }
  for (int i = 0; i < n; i++)
    if (blocks[i])
      torch_free(blocks[i], sizes[i], 0, NULL);
  return 0;
}
