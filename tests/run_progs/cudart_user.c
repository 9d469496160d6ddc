/* cudart_user.c — a program that allocates through the CUDA runtime (the test double
 * fake_cudart.c), as PyTorch does with PYTORCH_NO_CUDA_MEMORY_CACHING=1, for
 * tests/test_run.sh. WAY: "linked" (built as cudart_user_linked, linked with
 * libcudart.so.12) or "dlopen" (dlopen RTLD_LOCAL + dlsym, as a Python extension module's
 * runtime is out of the global scope).
 * Usage: cudart_user WAY COMMAND...  with commands
 *   alloc SIZE | async SIZE   cudaMalloc / cudaMallocAsync on a stream
 *   free I       cudaFree / cudaFreeAsync of the I-th allocation
 *   touch I      cudaMemcpy a pattern in and back out
 *   info         cudaMemGetInfo
 * Each command prints one line, the runtime's result last. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *stream_t;
typedef struct api {
  int (*malloc_)(void **, size_t);
  int (*free_)(void *);
  int (*info)(size_t *, size_t *);
  int (*malloc_async)(void **, size_t, stream_t);
  int (*free_async)(void *, stream_t);
  int (*stream_create)(stream_t *);
  int (*stream_sync)(stream_t);
  int (*stream_destroy)(stream_t);
  int (*memcpy_)(void *, const void *, size_t, int);
} api_t;

static const struct {
  const char *name;
  size_t offset;
} names[] = {
    {"cudaMalloc", offsetof(api_t, malloc_)},
    {"cudaFree", offsetof(api_t, free_)},
    {"cudaMemGetInfo", offsetof(api_t, info)},
    {"cudaMallocAsync", offsetof(api_t, malloc_async)},
    {"cudaFreeAsync", offsetof(api_t, free_async)},
    {"cudaStreamCreate", offsetof(api_t, stream_create)},
    {"cudaStreamSynchronize", offsetof(api_t, stream_sync)},
    {"cudaStreamDestroy", offsetof(api_t, stream_destroy)},
    {"cudaMemcpy", offsetof(api_t, memcpy_)},
};

#ifdef CUDART_USER_LINKED
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemGetInfo(size_t *, size_t *);
int cudaMallocAsync(void **, size_t, stream_t);
int cudaFreeAsync(void *, stream_t);
int cudaStreamCreate(stream_t *);
int cudaStreamSynchronize(stream_t);
int cudaStreamDestroy(stream_t);
int cudaMemcpy(void *, const void *, size_t, int);
#endif

static int load(const char *way, api_t *api) {
#ifdef CUDART_USER_LINKED
  if (!strcmp(way, "linked")) {
    *api = (api_t){cudaMalloc,    cudaFree,         cudaMemGetInfo,        cudaMallocAsync,
                   cudaFreeAsync, cudaStreamCreate, cudaStreamSynchronize, cudaStreamDestroy,
                   cudaMemcpy};
    return 0;
  }
#endif
  if (strcmp(way, "dlopen"))
    return fprintf(stderr, "unknown way '%s'\n", way), 1;
  void *lib = dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return fprintf(stderr, "dlopen: %s\n", dlerror()), 1;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    void *fn = dlsym(lib, names[i].name);
    if (!fn)
      return fprintf(stderr, "dlsym %s: %s\n", names[i].name, dlerror()), 1;
    memcpy((char *)api + names[i].offset, &fn, sizeof fn);
  }
  return 0;
}

int main(int argc, char **argv) {
  api_t api;
  stream_t stream = NULL;
  if (argc < 2 || load(argv[1], &api) || api.stream_create(&stream))
    return 1;
  void *blocks[64] = {0};
  int ordered[64] = {0}, n_blocks = 0;
  for (int i = 2; i < argc; i++) {
    const char *cmd = argv[i];
    if (!strcmp(cmd, "info")) {
      size_t free_bytes = 0, total = 0;
      int e = api.info(&free_bytes, &total);
      printf("info free=%zu total=%zu: %d\n", free_bytes, total, e);
      continue;
    }
    size_t n = i + 1 < argc ? strtoull(argv[++i], NULL, 10) : 0;
    if (!strcmp(cmd, "alloc") || !strcmp(cmd, "async")) {
      void *p = NULL;
      int e = cmd[1] == 'l' ? api.malloc_(&p, n) : api.malloc_async(&p, n, stream);
      if (!e && n_blocks < 64) {
        ordered[n_blocks] = cmd[1] != 'l';
        blocks[n_blocks++] = p;
      }
      printf("%s %zu: %d\n", cmd, n, e);
    } else if (!strcmp(cmd, "free") && n < (size_t)n_blocks && blocks[n]) {
      int e = ordered[n] ? api.free_async(blocks[n], stream) : api.free_(blocks[n]);
      blocks[n] = NULL;
      printf("free %zu: %d\n", n, e);
    } else if (!strcmp(cmd, "touch") && n < (size_t)n_blocks && blocks[n]) {
      char out[4096], in[4096];
      for (size_t k = 0; k < sizeof out; k++)
        out[k] = (char)(k * 3 + 1);
      int e = api.stream_sync(stream);
      if (!e)
        e = api.memcpy_(blocks[n], out, sizeof out, 1);
      if (!e)
        e = api.memcpy_(in, blocks[n], sizeof in, 2);
      printf("touch %zu: %d\n", n, e ? e : memcmp(in, out, sizeof in) ? -1 : 0);
    } else {
      return fprintf(stderr, "bad command '%s'\n", cmd), 1;
    }
    fflush(stdout);
  }
  for (int i = 0; i < n_blocks; i++)
    if (blocks[i])
      ordered[i] ? api.free_async(blocks[i], stream) : api.free_(blocks[i]);
  api.stream_sync(stream);
  api.stream_destroy(stream);
  return 0;
}
