/* test_alloc_cuda.c — the CUDA backend on a real GPU: regions with cuMemAlloc, the virtual
 * memory calls (cuMemAddressReserve/cuMemCreate/cuMemMap), the stream-ordered pool
 * (cuMemPool + cuMemAllocFromPoolAsync), and the allocator in every mode with data copied
 * in and read back. Every test skips cleanly where no GPU answers (no libcuda.so.1, no
 * device), which is where it says why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"

#define MiB (1ull << 20)

/* The GPU, or a skip. */
static hbm__device_t *open_gpu(void) {
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  cfg.device = HBM_DEVICE_CUDA;
  hbm__device_t *d = NULL;
  hbm_status_t st = hbm__cuda_open(&cfg, &d);
  if (st == HBM_ERR_UNAVAILABLE) {
    print_message("no GPU: %s\n", hbm_last_error());
    skip();
  }
  assert_int_equal(st, HBM_OK);
  return d;
}

static void fill_pattern(uint32_t *host, size_t words, uint32_t seed) {
  for (size_t i = 0; i < words; i++)
    host[i] = seed * 2654435761u + (uint32_t)i;
}

/* Copies a pattern to device memory and back. */
static void round_trip(hbm__device_t *d, void *device_ptr, size_t bytes, uint32_t seed) {
  size_t words = bytes / 4;
  uint32_t *out = malloc(bytes), *in = malloc(bytes);
  assert_non_null(out);
  assert_non_null(in);
  fill_pattern(out, words, seed);
  assert_int_equal(d->ops->copy_to_device(d, device_ptr, out, bytes), HBM_OK);
  memset(in, 0, bytes);
  assert_int_equal(d->ops->copy_from_device(d, in, device_ptr, bytes), HBM_OK);
  assert_memory_equal(in, out, bytes);
  free(out);
  free(in);
}

static void regions_with_cuMemAlloc(void **state) {
  (void)state;
  hbm__device_t *d = open_gpu();
  assert_int_equal(d->kind, HBM_DEVICE_CUDA);
  assert_true(strncmp(d->name, "cuda:0 (", 8) == 0);
  uint64_t total, before, after;
  assert_int_equal(hbm__device_memory(d, &total, &before), HBM_OK);
  assert_true(total == d->total && before <= total);
  void *p;
  assert_int_equal(hbm__device_region_alloc(d, 256 * MiB, &p), HBM_OK);
  assert_int_equal(hbm__device_memory(d, &total, &after), HBM_OK);
  assert_true(after + 250 * MiB <= before);
  round_trip(d, p, 4 * MiB, 7);
  hbm__holder_t h[4];
  size_t n = hbm__device_holders(d, h, 4);
  assert_true(n >= 1 && h[0].self && h[0].bytes == 256 * MiB);
  hbm__device_region_free(d, p, 256 * MiB);
  /* More than the GPU has: refused as out of memory, with what was free. */
  assert_int_equal(hbm__device_region_alloc(d, total * 2, &p), HBM_ERR_NO_MEMORY);
  assert_non_null(strstr(hbm_last_error(), "out of memory"));
  hbm__device_close(d);
}

static void virtual_memory_on_the_gpu(void **state) {
  (void)state;
  hbm__device_t *d = open_gpu();
  uint64_t g = d->granularity;
  assert_true(g >= 2 * MiB && g % (2 * MiB) == 0);
  char *base;
  assert_int_equal(hbm__device_va_reserve(d, 32 * g, (void **)&base), HBM_OK);
  hbm__phys_t phys;
  assert_int_equal(hbm__device_phys_create(d, 2 * g, &phys), HBM_OK);
  assert_int_equal(hbm__device_map(d, base, 2 * g, phys, 0), HBM_OK);
  uint32_t *pattern = malloc(g), *back = malloc(g);
  fill_pattern(pattern, g / 4, 11);
  assert_int_equal(d->ops->copy_to_device(d, base + g, pattern, g), HBM_OK);
  assert_int_equal(hbm__device_unmap(d, base, 2 * g), HBM_OK);
  /* The same physical memory elsewhere in the range keeps what was written. */
  assert_int_equal(hbm__device_map(d, base + 8 * g, 2 * g, phys, 0), HBM_OK);
  assert_int_equal(d->ops->copy_from_device(d, back, base + 9 * g, g), HBM_OK);
  assert_memory_equal(back, pattern, g);
  assert_int_equal(hbm__device_unmap(d, base + 8 * g, 2 * g), HBM_OK);
  hbm__device_phys_release(d, phys, 2 * g);
  hbm__device_va_release(d, base, 32 * g);
  assert_true(atomic_load(&d->held) == 0);
  free(pattern);
  free(back);
  hbm__device_close(d);
}

static void stream_ordered_pool(void **state) {
  (void)state;
  hbm__device_t *d = open_gpu();
  void *pool = NULL, *stream = NULL;
  assert_int_equal(d->ops->pool_create(d, 64 * MiB, &pool), HBM_OK);
  assert_int_equal(d->ops->stream_create(d, &stream), HBM_OK);
  void *a, *b;
  assert_int_equal(d->ops->pool_alloc(d, pool, 8 * MiB, stream, &a), HBM_OK);
  assert_int_equal(d->ops->pool_free(d, pool, a, stream), HBM_OK);
  /* Freed on this stream: the driver may hand the same memory back to it at once, or not
   * (CUDA promises no address), so only that b is usable once the stream has run. */
  assert_int_equal(d->ops->pool_alloc(d, pool, 8 * MiB, stream, &b), HBM_OK);
  assert_int_equal(d->ops->stream_sync(d, stream), HBM_OK);
  round_trip(d, b, MiB, 3);
  uint64_t reserved, used;
  assert_int_equal(d->ops->pool_usage(d, pool, &reserved, &used), HBM_OK);
  assert_true(reserved >= 8 * MiB && used >= 8 * MiB);
  assert_int_equal(d->ops->pool_free(d, pool, b, stream), HBM_OK);
  assert_int_equal(d->ops->stream_sync(d, stream), HBM_OK);
  assert_int_equal(d->ops->pool_trim(d, pool, 0), HBM_OK);
  assert_int_equal(d->ops->pool_usage(d, pool, &reserved, &used), HBM_OK);
  assert_true(used == 0 && reserved == 0);
  d->ops->stream_destroy(d, stream);
  d->ops->pool_destroy(d, pool);
  hbm__device_close(d);
}

/* The allocator in every mode on the GPU: blocks are device memory that holds data. */
static void every_mode_on_the_gpu(void **state) {
  (void)state;
  hbm__device_close(open_gpu());
  const hbm_mode_t modes[] = {HBM_MODE_BFC, HBM_MODE_GROWTH, HBM_MODE_PLATFORM, HBM_MODE_ASYNC,
                              HBM_MODE_EXPANDABLE};
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    hbm_config_t cfg;
    hbm_config_default(&cfg);
    cfg.device = HBM_DEVICE_CUDA;
    cfg.mem_fraction = 0.1; /* share the GPU politely */
    hbm_config_set_mode(&cfg, modes[m], HBM_ORIGIN_CODE);
    hbm_device_t *dev = hbm_open(&cfg);
    if (!dev)
      fail_msg("%s: %s", hbm_mode_name(modes[m]), hbm_last_error());
    assert_int_equal(hbm_device_kind(dev), HBM_DEVICE_CUDA);
    hbm_stream_t *s = hbm_stream_create(dev);
    assert_non_null(s);
    void *blocks[8];
    for (int i = 0; i < 8; i++) {
      blocks[i] = hbm_alloc_async(dev, (size_t)(i + 1) * MiB + 100, s);
      assert_non_null(blocks[i]);
    }
    assert_int_equal(hbm_stream_synchronize(dev, s), HBM_OK);
    for (int i = 0; i < 8; i++)
      round_trip(dev->phys, blocks[i], (size_t)(i + 1) * MiB, (uint32_t)i);
    hbm_stats_t st;
    assert_int_equal(hbm_get_stats(dev, &st), HBM_OK);
    assert_true(st.num_live == 8 && st.bytes_reserved >= st.bytes_in_use);
    for (int i = 0; i < 8; i++)
      assert_int_equal(hbm_free_async(dev, blocks[i], s), HBM_OK);
    /* Larger than the whole GPU: the diagnosis says so. */
    assert_null(hbm_alloc(dev, (size_t)dev->phys->total * 2, 0));
    assert_non_null(strstr(hbm_last_error(), "cause: request larger than the device"));
    assert_int_equal(hbm_trim(dev), HBM_OK);
    hbm_close(dev);
  }
}

/* HBM_DEVICE=auto takes the GPU when one answers. */
static void auto_prefers_the_gpu(void **state) {
  (void)state;
  hbm__device_close(open_gpu());
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  hbm_config_set_mode(&cfg, HBM_MODE_PLATFORM, HBM_ORIGIN_CODE);
  hbm_device_t *dev = hbm_open(&cfg);
  assert_non_null(dev);
  assert_int_equal(hbm_device_kind(dev), HBM_DEVICE_CUDA);
  assert_non_null(strstr(hbm_device_note(dev), "a GPU answered"));
  hbm_close(dev);
}

/* Where there is no GPU, asking for one explicitly fails cleanly. */
static void explicit_cuda_without_gpu_is_unavailable(void **state) {
  (void)state;
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  cfg.device = HBM_DEVICE_CUDA;
  cfg.ordinal = 1023;
  hbm_device_t *dev = hbm_open(&cfg);
  assert_null(dev); /* no machine has 1024 GPUs */
  assert_int_equal(hbm_last_status(), HBM_ERR_UNAVAILABLE);
  assert_true(strlen(hbm_last_error()) > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(regions_with_cuMemAlloc),
      cmocka_unit_test(virtual_memory_on_the_gpu),
      cmocka_unit_test(stream_ordered_pool),
      cmocka_unit_test(every_mode_on_the_gpu),
      cmocka_unit_test(auto_prefers_the_gpu),
      cmocka_unit_test(explicit_cuda_without_gpu_is_unavailable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
