/* test_alloc_oom.c — out of memory, told apart: each cause the diagnosis knows is produced
 * for real and recognised — a request larger than the device or the limit, in use plus
 * request over the limit, fragmentation (preallocated and growth modes), memory waiting on
 * another stream, a preallocation the device cannot give (memory held by another device of
 * this process; the host unable to map it), and a device that refuses a region. Every text
 * starts exactly as XLA's. (Other processes: test_alloc_processes.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "alloc_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* A failed test leaves its devices open: remove their ledgers anyway. */
static int remove_ledgers(void **state) {
  (void)state;
  th_sim_remove_ledgers("toom");
  return 0;
}

static hbm_device_t *open_cfg(const hbm_config_t *cfg) {
  hbm_device_t *dev = hbm_open(cfg);
  if (!dev)
    fail_msg("hbm_open: %s", hbm_last_error());
  return dev;
}

/* Allocates `size`, which must fail, and checks the text: XLA's first line exactly, the
 * diagnosis, and the expected cause. Returns the text (valid until the next error). */
static const char *expect_oom(hbm_device_t *dev, uint64_t size, const char *cause) {
  assert_null(hbm_alloc(dev, (size_t)size, 0));
  assert_int_equal(hbm_last_status(), HBM_ERR_NO_MEMORY);
  assert_string_equal(hbm_status_name(hbm_last_status()), "RESOURCE_EXHAUSTED");
  const char *text = hbm_last_error();
  char first[128];
  snprintf(first, sizeof first,
           "RESOURCE_EXHAUSTED: Out of memory while trying to allocate %llu bytes.\n",
           (unsigned long long)size);
  if (strstr(cause, "preallocation")) /* the line gives the preallocation's size instead */
    snprintf(first, sizeof first, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate ");
  if (strncmp(text, first, strlen(first)) != 0)
    fail_msg("first line should be '%s' in:\n%s", first, text);
  const char *parts[] = {
      "  device: ", "  mode: ", "  limit: ", "  in use: ", "  largest free block: "};
  for (size_t i = 0; i < HBM_ARRAY_LEN(parts); i++)
    if (!strstr(text, parts[i]))
      fail_msg("no '%s' in:\n%s", parts[i], text);
  char want[160];
  snprintf(want, sizeof want, "  cause: %s", cause);
  if (!strstr(text, want))
    fail_msg("expected cause '%s' in:\n%s", cause, text);
  const char *line = strstr(text, "  cause: ");
  if (strstr(line + 1, "  cause: "))
    fail_msg("one cause line only:\n%s", text);
  return text;
}

static void assert_contains(const char *text, const char *part) {
  if (!strstr(text, part))
    fail_msg("expected '%s' in:\n%s", part, text);
}

/* The seed's program: bf16[327680,327680] on a 16 GiB device. */
static void seed_array_is_larger_than_the_device(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("toom", HBM_MODE_BFC, 16 * GiB, 0.75);
  hbm_device_t *dev = open_cfg(&cfg);
  assert_non_null(hbm_alloc(dev, 1000, 0));
  const char *text = expect_oom(dev, 214748364800ull, "request larger than the device");
  assert_contains(text, "200.0GiB requested, but the device has 16.00GiB in total");
  assert_contains(text, "shard the array");
  assert_contains(text, "limit: 12884901888 bytes (12.00GiB) = 0.75 of the device's 16.00GiB");
  assert_contains(text, "XLA_PYTHON_CLIENT_MEM_FRACTION=0.75 (default)");
  assert_contains(text, "mode: bfc (XLA_PYTHON_CLIENT_ALLOCATOR=default (default), "
                        "XLA_PYTHON_CLIENT_PREALLOCATE=true (default))");
  assert_contains(text, "HBM_SIM_MEMORY=16GiB (default)");
  assert_contains(text, "(simulated: HBM_SIM_NAME=toom-");
  assert_contains(text, "in use: 1000 bytes");
  assert_contains(text, "largest free block: 12884900864 bytes");
  hbm_stats_t s;
  hbm_get_stats(dev, &s);
  assert_true(s.num_ooms == 1);
  hbm_close(dev);
}

static void request_larger_than_the_limit(void **state) {
  (void)state;
  const hbm_mode_t modes[] = {HBM_MODE_BFC, HBM_MODE_GROWTH, HBM_MODE_PLATFORM, HBM_MODE_ASYNC};
  for (size_t m = 0; m < HBM_ARRAY_LEN(modes); m++) {
    hbm_config_t cfg = th_sim_config("toom", modes[m], 64 * MiB, 0.5);
    hbm_config_set(&cfg, "XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5", HBM_ORIGIN_ENV);
    hbm_device_t *dev = open_cfg(&cfg);
    const char *text = expect_oom(dev, 40 * MiB, "request larger than the limit");
    assert_contains(text, "Raise XLA_PYTHON_CLIENT_MEM_FRACTION to at least 0.63");
    assert_contains(text, "set by XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 (environment)");
    hbm_close(dev);
  }
}

static void in_use_plus_request_over_the_limit(void **state) {
  (void)state;
  const hbm_mode_t modes[] = {HBM_MODE_BFC, HBM_MODE_GROWTH, HBM_MODE_PLATFORM, HBM_MODE_ASYNC};
  for (size_t m = 0; m < HBM_ARRAY_LEN(modes); m++) {
    hbm_config_t cfg = th_sim_config("toom", modes[m], 64 * MiB, 0.5);
    hbm_device_t *dev = open_cfg(&cfg);
    void *p = hbm_alloc(dev, 20 * MiB, 0);
    assert_non_null(p);
    const char *text = expect_oom(dev, 20 * MiB, "in use + request over the limit");
    assert_contains(text, "20.00MiB in use + 20.00MiB requested > limit 32.00MiB");
    assert_contains(text, "raise XLA_PYTHON_CLIENT_MEM_FRACTION from 0.5 to at least 0.63");
    /* Freeing makes room: the same request now fits. */
    hbm_free(dev, p);
    p = hbm_alloc(dev, 20 * MiB, 0);
    if (!p)
      fail_msg("mode %s: %s", hbm_mode_name(modes[m]), hbm_last_error());
    hbm_close(dev);
  }
}

/* Enough free bytes, no piece big enough. */
static void fragmentation_in_bfc_mode(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("toom", HBM_MODE_BFC, 64 * MiB, 0.5);
  hbm_device_t *dev = open_cfg(&cfg);
  void *blocks[32];
  for (int i = 0; i < 32; i++)
    assert_non_null(blocks[i] = hbm_alloc(dev, MiB, 0));
  for (int i = 0; i < 32; i += 2)
    hbm_free(dev, blocks[i]);
  const char *text = expect_oom(dev, 2 * MiB, "fragmentation");
  assert_contains(text, "16.00MiB are free within the limit but the largest contiguous free "
                        "block is 1.00MiB");
  assert_contains(text, "HBM_EXPANDABLE=1");
  hbm_stats_t s;
  hbm_get_stats(dev, &s);
  assert_true(s.fragmentation > 0.9);
  hbm_close(dev);
}

static void fragmentation_in_growth_mode(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("toom", HBM_MODE_GROWTH, 64 * MiB, 0.5);
  hbm_device_t *dev = open_cfg(&cfg);
  void *blocks[64];
  int n = 0;
  while (n < 64 && (blocks[n] = hbm_alloc(dev, MiB, 0)))
    n++;
  assert_int_equal(n, 32); /* regions 2+4+8+16, then the last 2 MiB of the limit */
  for (int i = 0; i < n; i += 2)
    hbm_free(dev, blocks[i]);
  const char *text = expect_oom(dev, 2 * MiB, "fragmentation");
  assert_contains(text, "XLA_PYTHON_CLIENT_PREALLOCATE=false is more prone to fragmentation");
  assert_contains(text, "mode: growth");
  assert_contains(text, "XLA_PYTHON_CLIENT_PREALLOCATE=false (code)");
  assert_contains(text, "may still grow by 0B");
  hbm_close(dev);
}

/* Memory freed on one stream is not the other streams' until it synchronizes. */
static void memory_waiting_on_another_stream(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("toom", HBM_MODE_ASYNC, 16 * MiB, 0.5);
  hbm_device_t *dev = open_cfg(&cfg);
  hbm_stream_t *s1 = hbm_stream_create(dev), *s2 = hbm_stream_create(dev);
  void *p = hbm_alloc_async(dev, 6 * MiB, s1);
  assert_non_null(p);
  assert_int_equal(hbm_free_async(dev, p, s1), HBM_OK);
  assert_null(hbm_alloc_async(dev, 4 * MiB, s2));
  const char *text = hbm_last_error();
  assert_contains(text, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4194304 "
                        "bytes.\n");
  assert_contains(text, "  cause: memory waiting on other streams: 6.00MiB freed on other "
                        "streams");
  assert_contains(text, "hbm_stream_synchronize");
  assert_contains(text, "freed on streams, not yet synchronized: 6.00MiB");
  assert_contains(text, "mode: async (XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async (code)");
  assert_int_equal(hbm_stream_synchronize(dev, s1), HBM_OK);
  assert_non_null(hbm_alloc_async(dev, 4 * MiB, s2));
  hbm_close(dev);
}

/* Two hbm devices in one process on one sim device (like JAX next to TensorFlow): the second
 * cannot preallocate its 75%. */
static void preallocation_blocked_by_another_device(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("toom", HBM_MODE_BFC, 64 * MiB, 0.75);
  hbm_device_t *first = open_cfg(&cfg);
  hbm_device_t *second = open_cfg(&cfg);
  assert_non_null(hbm_alloc(first, 1000, 0));
  const char *text = expect_oom(second, 1000, "preallocation failed");
  /* the preallocation (48 MiB = 50331648 bytes) is what failed, not the 1000 bytes */
  assert_contains(text, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 50331648 "
                        "bytes.\n");
  assert_contains(text, "request: the preallocation of 48.00MiB, made at this device's first "
                        "allocation (1000 bytes)");
  assert_contains(text, "the limit of 48.00MiB (XLA_PYTHON_CLIENT_MEM_FRACTION=0.75 of "
                        "64.00MiB) could not be taken from the device");
  assert_contains(text, "16.00MiB free of 64.00MiB");
  assert_contains(text, "This process already holds 48.00MiB of it through other hbm devices");
  assert_contains(text, "at most 0.25 of the total");
  assert_contains(text, "XLA_PYTHON_CLIENT_PREALLOCATE=false");
  assert_contains(text, "held by others: 48.00MiB; 48.00MiB by other hbm devices of this "
                        "process");
  /* Once the first device is gone, the second preallocates. */
  hbm_close(first);
  assert_non_null(hbm_alloc(second, 1000, 0));
  hbm_close(second);
}

/* The host cannot even map the preallocation (a sim device far larger than the address
 * space). */
static void preallocation_the_host_cannot_map(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("toom", HBM_MODE_BFC, 1ull << 50, 0.75);
  hbm_device_t *dev = open_cfg(&cfg);
  const char *text = expect_oom(dev, 1000, "preallocation failed");
  assert_contains(text, "the host could not map");
  assert_contains(text, "Lower XLA_PYTHON_CLIENT_MEM_FRACTION");
  /* Growth mode on the same huge device works: it takes only what it needs. */
  hbm_close(dev);
  cfg = th_sim_config("toom", HBM_MODE_GROWTH, 1ull << 50, 0.75);
  dev = open_cfg(&cfg);
  void *p = hbm_alloc(dev, 1000, 0);
  assert_non_null(p);
  memset(p, 1, 1000);
  hbm_close(dev);
}

/* An async pool asked to prefill more than the device has. */
static void async_preallocation_failed(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("toom", HBM_MODE_ASYNC, 64 * MiB, 0.75);
  cfg.async_prealloc = -1;
  hbm_device_t *hog = open_cfg(&cfg);
  hbm_config_t small = cfg;
  hbm_config_set_mode(&small, HBM_MODE_PLATFORM, HBM_ORIGIN_CODE);
  hbm_device_t *other = open_cfg(&small);
  assert_non_null(hbm_alloc(other, 20 * MiB, 0));
  const char *text = expect_oom(hog, 1000, "preallocation failed");
  assert_contains(text, "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC=-1 asked for 48.00MiB");
  hbm_close(other);
  hbm_close(hog);
}

/* Growth mode within its limit, but the device is held by another device of this process. */
static void device_refuses_a_region(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("toom", HBM_MODE_PLATFORM, 64 * MiB, 1.0);
  hbm_device_t *holder = open_cfg(&cfg);
  assert_non_null(hbm_alloc(holder, 50 * MiB, 0));
  hbm_config_t growth = cfg;
  growth.mem_fraction = 0.5;
  hbm_config_set_mode(&growth, HBM_MODE_GROWTH, HBM_ORIGIN_CODE);
  hbm_device_t *dev = open_cfg(&growth);
  assert_non_null(hbm_alloc(dev, 10 * MiB, 0)); /* a 16 MiB region would not fit: 10 does */
  const char *text = expect_oom(dev, 8 * MiB, "device memory exhausted");
  assert_contains(text, "This process holds 50.00MiB of the device through other hbm devices");
  hbm_close(dev);
  hbm_close(holder);
}

/* While profiling (or when asked) the text lists the 10 largest live buffers with their
 * tags, as XLA's "Peak buffers:" does. */
static void largest_live_buffers_are_listed(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("toom", HBM_MODE_BFC, 64 * MiB, 0.5);
  hbm_device_t *dev = open_cfg(&cfg);
  hbm__device_set_oom_buffers(dev, true);
  for (int i = 0; i < 12; i++) {
    char op[32], shape[32];
    snprintf(op, sizeof op, "fusion.%d", i);
    snprintf(shape, sizeof shape, "f32[%d,256]", (i + 1) * 64);
    hbm_tag_t tag = {op, shape, i % 2 ? HBM_CAT_TEMPORARY : HBM_CAT_PARAMETER,
                     i % 2 ? "activations" : "params", "model.py:7"};
    assert_non_null(hbm_alloc_tagged(dev, (size_t)(i + 1) * 64 * 256 * 4, 0, &tag));
  }
  const char *text = expect_oom(dev, 64 * MiB, "request larger than the limit");
  assert_contains(text, "at least 1.00");
  assert_contains(text, "Peak buffers: the 10 largest of 12 live buffers");
  assert_contains(text, "\tBuffer 1:\n\t\tSize: 768.0KiB (786432 bytes)\n"
                        "\t\tOperator: fusion.11\n\t\tShape: f32[768,256]\n"
                        "\t\tCategory: temporary\n\t\tGroup: activations\n"
                        "\t\tSource: model.py:7\n");
  assert_contains(text, "\tBuffer 10:\n\t\tSize: 192.0KiB (196608 bytes)\n"
                        "\t\tOperator: fusion.2\n");
  assert_contains(text, "Category: parameter");
  assert_null(strstr(text, "Buffer 11:"));
  assert_null(strstr(text, "fusion.0\n"));
  hbm__device_set_oom_buffers(dev, false);
  text = expect_oom(dev, 128 * MiB, "request larger than the device");
  if (!hbm_profiler_path())
    assert_null(strstr(text, "Peak buffers"));
  hbm_close(dev);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(seed_array_is_larger_than_the_device),
      cmocka_unit_test(request_larger_than_the_limit),
      cmocka_unit_test(in_use_plus_request_over_the_limit),
      cmocka_unit_test(fragmentation_in_bfc_mode),
      cmocka_unit_test(fragmentation_in_growth_mode),
      cmocka_unit_test(memory_waiting_on_another_stream),
      cmocka_unit_test(preallocation_blocked_by_another_device),
      cmocka_unit_test(preallocation_the_host_cannot_map),
      cmocka_unit_test(async_preallocation_failed),
      cmocka_unit_test(device_refuses_a_region),
      cmocka_unit_test(largest_live_buffers_are_listed),
  };
  return cmocka_run_group_tests(tests, NULL, remove_ledgers);
}
