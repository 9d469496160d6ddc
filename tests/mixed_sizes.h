/* mixed_sizes.h — the mixed-size workload shared by the allocator's stress test and
 * bench/bench_threads.c, so that the benchmark measures exactly the mix the test checks:
 * mostly small blocks, some medium, a few large, as tensors are. */
#ifndef HBM_TEST_MIXED_SIZES_H
#define HBM_TEST_MIXED_SIZES_H

#include <stddef.h>
#include <stdint.h>

/* xorshift64: fast, and the same sequence on every machine for a seed. */
static inline uint64_t mix_next_random(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* 70% of 16 B-4 KiB, 25% of 4-260 KiB, 5% of 256 KiB-4.25 MiB. */
static inline size_t mix_random_size(uint64_t *rng) {
  uint64_t r = mix_next_random(rng);
  unsigned bucket = (unsigned)(r % 100);
  r >>= 8;
  if (bucket < 70)
    return 16 + (size_t)(r % 4081);
  if (bucket < 95)
    return 4096 + (size_t)(r % (256 << 10));
  return (256 << 10) + (size_t)(r % (4 << 20));
}

#endif
