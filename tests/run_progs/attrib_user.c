/* attrib_user.c — a program whose device allocations come from its own code and from two
 * shared libraries of its own (attrib_lib.c as libattrib_a.so and libattrib_b.so), for the
 * attribution by library of `hbm run` (tests/test_run.sh).
 * Usage: attrib_user SIZE... : each SIZE as "self:N", "a:N" or "b:N" allocates N bytes from
 * the program, library a or library b; prints one line per allocation with the runtime's
 * result; everything is freed at the end, after the last allocation (all live at the peak). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cudaMalloc(void **, size_t);
int cudaFree(void *);
int attrib_a_alloc(void **, size_t);
int attrib_b_alloc(void **, size_t);

__attribute__((noinline)) static int own_alloc(void **p, size_t size) {
  int r = cudaMalloc(p, size);
  __asm__ volatile("" ::: "memory");
  return r;
}

#define MAX_BLOCKS 64

int main(int argc, char **argv) {
  void *blocks[MAX_BLOCKS] = {0};
  int failed = 0;
  for (int i = 1; i < argc; i++) {
    const char *colon = strchr(argv[i], ':');
    if (!colon)
      return fprintf(stderr, "bad argument '%s'\n", argv[i]), 2;
    size_t size = strtoull(colon + 1, NULL, 10);
    void *p = NULL;
    int r = !strncmp(argv[i], "self:", 5) ? own_alloc(&p, size)
            : !strncmp(argv[i], "a:", 2)  ? attrib_a_alloc(&p, size)
                                          : attrib_b_alloc(&p, size);
    printf("%s: %d\n", argv[i], r);
    failed |= r != 0;
    if (i < MAX_BLOCKS)
      blocks[i] = p;
  }
  for (int i = 0; i < MAX_BLOCKS; i++)
    if (blocks[i])
      cudaFree(blocks[i]);
  return failed;
}
