/* test_alloc_cuda.c — the CUDA backend: regions with cuMemAlloc, the virtual memory calls
 * (cuMemAddressReserve/cuMemCreate/cuMemMap), the stream-ordered pool (cuMemPool +
 * cuMemAllocFromPoolAsync), and the allocator in every mode with data copied in and read
 * back. ctest runs it on the driver double (tests/fakecuda: LD_LIBRARY_PATH points there);
 * on a GPU machine, run it without that to use the real driver. The tests of issue 15's
 * bugs need the double's knobs and hooks (FAKECUDA_*, fakecuda_*) and skip on a real
 * driver, saying so; the others skip only where no driver answers at all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "helpers.h"

#define MiB (1ull << 20)

/* The GPU, or a skip. */
static hbm__device_t *open_gpu(void) {
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  cfg.device = HBM_DEVICE_CUDA;
  hbm__device_t *d = NULL;
  hbm_status_t st = hbm__cuda_open(&cfg, &d);
  if (st == HBM_ERR_UNAVAILABLE) {
    th_skip("no GPU: %s", hbm_last_error());
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

/* A CUDA device ordinal the driver does not have is a configuration error, with the count. */
static void bad_ordinal_is_invalid(void **state) {
  (void)state;
  hbm__device_close(open_gpu());
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  cfg.device = HBM_DEVICE_CUDA;
  cfg.ordinal = 1023;
  hbm_device_t *dev = hbm_open(&cfg);
  assert_null(dev); /* no machine has 1024 GPUs */
  assert_int_equal(hbm_last_status(), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "HBM_DEVICE_ORDINAL=1023"));
}

/* ---- issue 15: the bugs, on the driver double ---- */

typedef int (*cu_ctx_fn)(void *);
typedef struct fake {
  void *lib;
  unsigned long (*misuse)(void);
  unsigned long (*live)(void);
  unsigned long (*calls)(const char *);
  void (*reload)(void);
  void (*reset)(void);
  int (*init)(unsigned);
  int (*ctx_create)(void **, unsigned, int);
  int (*ctx_destroy)(void *);
  int (*ctx_get_current)(void **);
  int (*memset_async)(unsigned long long, unsigned char, size_t, void *);
  int (*retain)(void **, int);
  int (*release)(int);
  int (*push)(void *);
  int (*pop)(void **);
} fake_t;

static fake_t fk;

static void *sym(const char *name) {
  void *p = dlsym(fk.lib, name);
  if (!p)
    fail_msg("the driver double lacks %s", name);
  return p;
}

/* The double's hooks, or a skip (a real driver, or none). */
static void need_fake(void) {
  if (!fk.lib)
    fk.lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!fk.lib || !dlsym(fk.lib, "fakecuda_misuse")) {
    th_skip("needs the driver double tests/fakecuda (LD_LIBRARY_PATH)");
  }
  *(void **)&fk.misuse = sym("fakecuda_misuse");
  *(void **)&fk.live = sym("fakecuda_live");
  *(void **)&fk.calls = sym("fakecuda_calls");
  *(void **)&fk.reload = sym("fakecuda_reload");
  *(void **)&fk.reset = sym("fakecuda_reset_counters");
  *(void **)&fk.init = sym("cuInit");
  *(void **)&fk.ctx_create = sym("cuCtxCreate_v2");
  *(void **)&fk.ctx_destroy = sym("cuCtxDestroy_v2");
  *(void **)&fk.ctx_get_current = sym("cuCtxGetCurrent");
  *(void **)&fk.memset_async = sym("cuMemsetD8Async");
  *(void **)&fk.retain = sym("cuDevicePrimaryCtxRetain");
  *(void **)&fk.release = sym("cuDevicePrimaryCtxRelease_v2");
  *(void **)&fk.push = sym("cuCtxPushCurrent_v2");
  *(void **)&fk.pop = sym("cuCtxPopCurrent_v2");
}

static const char *const knob_names[] = {
    "FAKECUDA_MEMORY",      "FAKECUDA_CONTEXT_OVERHEAD", "FAKECUDA_OTHER_PROCESS",
    "FAKECUDA_HOST_ACCESS", "FAKECUDA_ATTR_OFF",         "FAKECUDA_FAIL",
    "FAKECUDA_NVML",        "FAKECUDA_DEVICES",          "FAKECUDA_POOL_STREAM_REUSE"};

/* Sets the double's knobs ("NAME=VALUE" strings, NULL-terminated) on top of its defaults. */
static void knobs(const char *first, ...) {
  need_fake();
  for (size_t i = 0; i < sizeof knob_names / sizeof knob_names[0]; i++)
    unsetenv(knob_names[i]);
  va_list ap;
  va_start(ap, first);
  for (const char *kv = first; kv; kv = va_arg(ap, const char *)) {
    char name[64];
    const char *eq = strchr(kv, '=');
    snprintf(name, sizeof name, "%.*s", (int)(eq - kv), kv);
    setenv(name, eq + 1, 1);
  }
  va_end(ap);
  fk.reload();
  fk.reset();
}

static hbm_device_t *open_mode(hbm_mode_t mode, double fraction) {
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  cfg.device = HBM_DEVICE_CUDA;
  cfg.mem_fraction = fraction;
  hbm_config_set_mode(&cfg, mode, HBM_ORIGIN_CODE);
  hbm_device_t *dev = hbm_open(&cfg);
  if (!dev)
    fail_msg("hbm_open(%s): %s", hbm_mode_name(mode), hbm_last_error());
  return dev;
}

/* After a test: nothing misused, nothing left alive in the driver. */
static void clean(void) {
  assert_int_equal(fk.misuse(), 0);
  assert_int_equal(fk.live(), 0);
  knobs(NULL);
}

static void *current_context(void) {
  void *ctx = (void *)1;
  assert_int_equal(fk.ctx_get_current(&ctx), 0);
  return ctx;
}

static const hbm_mode_t all_modes[] = {HBM_MODE_BFC, HBM_MODE_GROWTH, HBM_MODE_PLATFORM,
                                       HBM_MODE_ASYNC, HBM_MODE_EXPANDABLE};

/* Bug 1: the caller's own context stays current through every hbm call. */
static void callers_context_is_kept(void **state) {
  (void)state;
  knobs(NULL);
  assert_int_equal(fk.init(0), 0);
  void *mine = NULL;
  assert_int_equal(fk.ctx_create(&mine, 0, 0), 0); /* created and made current */
  for (size_t m = 0; m < HBM_ARRAY_LEN(all_modes); m++) {
    hbm_device_t *dev = open_mode(all_modes[m], 0.2);
    assert_ptr_equal(current_context(), mine);
    hbm_stream_t *s = hbm_stream_create(dev);
    void *a = hbm_alloc(dev, 3 * MiB, 0), *b = hbm_alloc_async(dev, MiB, s);
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_equal(current_context(), mine);
    assert_int_equal(hbm_free_async(dev, b, s), HBM_OK);
    assert_int_equal(hbm_free(dev, a), HBM_OK);
    assert_int_equal(hbm_stream_destroy(dev, s), HBM_OK);
    assert_int_equal(hbm_trim(dev), HBM_OK);
    hbm_close(dev);
    assert_ptr_equal(current_context(), mine);
  }
  assert_int_equal(fk.ctx_destroy(mine), 0);
  clean();
}

/* Bug 8: a thread with no context has none after hbm_close (not a destroyed one). */
static void close_leaves_no_dead_context(void **state) {
  (void)state;
  knobs(NULL);
  assert_int_equal(fk.init(0), 0);
  assert_null(current_context());
  for (size_t m = 0; m < HBM_ARRAY_LEN(all_modes); m++) {
    hbm_device_t *dev = open_mode(all_modes[m], 0.2);
    hbm_free(dev, hbm_alloc(dev, MiB, 0));
    hbm_close(dev);
    assert_null(current_context());
  }
  clean();
}

/* Bug 2: a plain hbm_alloc in async mode is usable at once on an hbm stream (the driver
 * double fails a use not ordered after the allocation), and plain frees do not stall. */
static void async_plain_blocks_are_ordered(void **state) {
  (void)state;
  knobs(NULL);
  hbm_device_t *dev = open_mode(HBM_MODE_ASYNC, 0.2);
  hbm_stream_t *s = hbm_stream_create(dev);
  void *ctx, *popped, *blocks[16];
  assert_int_equal(fk.retain(&ctx, 0), 0); /* the application's work on hbm's stream */
  assert_int_equal(fk.push(ctx), 0);
  for (int i = 0; i < 16; i++) {
    blocks[i] = hbm_alloc(dev, MiB, 0);
    assert_non_null(blocks[i]);
    assert_int_equal(fk.memset_async((uintptr_t)blocks[i], 7, MiB, hbm__stream_native(s)), 0);
  }
  assert_int_equal(hbm_stream_synchronize(dev, s), HBM_OK);
  assert_int_equal(fk.pop(&popped), 0);
  assert_int_equal(fk.release(0), 0);
  unsigned long syncs = fk.calls("cuStreamSynchronize") + fk.calls("cuCtxSynchronize");
  for (int i = 0; i < 16; i++)
    assert_int_equal(hbm_free(dev, blocks[i]), HBM_OK);
  /* 16 frees, no synchronization among them */
  assert_int_equal(fk.calls("cuStreamSynchronize") + fk.calls("cuCtxSynchronize"), syncs);
  assert_int_equal(hbm_stream_destroy(dev, s), HBM_OK);
  hbm_close(dev);
  clean();
}

/* Bug 9: hbm_trim gives back memory freed on a stream that was not synchronized yet. */
static void trim_releases_stream_frees(void **state) {
  (void)state;
  knobs(NULL);
  hbm_device_t *dev = open_mode(HBM_MODE_ASYNC, 0.2);
  hbm_stream_t *s = hbm_stream_create(dev);
  void *p = hbm_alloc_async(dev, 8 * MiB, s);
  assert_non_null(p);
  assert_int_equal(hbm_free_async(dev, p, s), HBM_OK);
  hbm_stats_t st;
  assert_int_equal(hbm_get_stats(dev, &st), HBM_OK);
  assert_true(st.bytes_reserved >= 8 * MiB); /* the pool keeps it (threshold = limit) */
  assert_int_equal(hbm_trim(dev), HBM_OK);
  assert_int_equal(hbm_get_stats(dev, &st), HBM_OK);
  assert_int_equal(st.bytes_reserved, 0);
  assert_int_equal(hbm_stream_destroy(dev, s), HBM_OK);
  hbm_close(dev);
  clean();
}

static void expect_in(const char *text, const char *part) {
  if (!strstr(text, part))
    fail_msg("expected '%s' in:\n%s", part, text);
}

static void expect_not_in(const char *text, const char *part) {
  if (strstr(text, part))
    fail_msg("did not expect '%s' in:\n%s", part, text);
}

/* Bug 3: who holds the device. A 1 GiB device; this process's context takes 64 MiB, pid
 * 4242 holds 256 MiB; hbm holds 600 MiB (a region, or the async pool's memory). Free:
 * 1024 - 64 - 256 - 600 = 104 MiB, so 200 MiB more is refused by the device, and the
 * diagnosis names pid 4242's 256 MiB and the context's 64 MiB, and nothing unknown. */
static void oom_names_the_holders(void **state) {
  (void)state;
  const hbm_mode_t modes[] = {HBM_MODE_PLATFORM, HBM_MODE_ASYNC};
  for (size_t m = 0; m < HBM_ARRAY_LEN(modes); m++) {
    knobs("FAKECUDA_MEMORY=1G", "FAKECUDA_CONTEXT_OVERHEAD=64M", "FAKECUDA_OTHER_PROCESS=4242:256M",
          NULL);
    hbm_device_t *dev = open_mode(modes[m], 1.0);
    void *a = hbm_alloc(dev, 600 * MiB, 0);
    assert_non_null(a);
    assert_null(hbm_alloc(dev, 200 * MiB, 0));
    const char *text = hbm_last_error();
    expect_in(text, "RESOURCE_EXHAUSTED");
    expect_in(text, "pid 4242 holds 256.0MiB");
    expect_in(text, "this process's CUDA context holds 64.00MiB");
    expect_in(text, "cause: other processes hold the device's memory");
    expect_not_in(text, "unknown");
    expect_not_in(text, "pid 0");
    assert_int_equal(hbm_free(dev, a), HBM_OK);
    hbm_close(dev);
    clean();
  }
  /* Without NVML nobody can say who holds the 256 + 64 = 320 MiB: "unknown", and not
   * blamed on other processes. */
  knobs("FAKECUDA_MEMORY=1G", "FAKECUDA_CONTEXT_OVERHEAD=64M", "FAKECUDA_OTHER_PROCESS=4242:256M",
        "FAKECUDA_NVML=0", NULL);
  hbm_device_t *dev = open_mode(HBM_MODE_PLATFORM, 1.0);
  void *a = hbm_alloc(dev, 600 * MiB, 0);
  assert_non_null(a);
  assert_null(hbm_alloc(dev, 200 * MiB, 0));
  expect_in(hbm_last_error(), "320.0MiB held by unknown holders");
  expect_not_in(hbm_last_error(), "pid ");
  expect_not_in(hbm_last_error(), "cause: other processes");
  assert_int_equal(hbm_free(dev, a), HBM_OK);
  hbm_close(dev);
  clean();
}

/* Bug 4: a device without memory pools or without VMM (attributes 0, symbols present):
 * async and expandable modes still work, on hbm's own pool and on plain regions. */
static void features_from_device_attributes(void **state) {
  (void)state;
  const char *off[] = {"FAKECUDA_ATTR_OFF=POOLS", "FAKECUDA_ATTR_OFF=VMM"};
  for (size_t k = 0; k < HBM_ARRAY_LEN(off); k++) {
    for (size_t m = 0; m < HBM_ARRAY_LEN(all_modes); m++) {
      knobs(off[k], NULL);
      hbm_device_t *dev = open_mode(all_modes[m], 0.2);
      expect_in(hbm_device_note(dev), k == 0 ? "no memory pools" : "no virtual memory");
      hbm_stream_t *s = hbm_stream_create(dev);
      void *p = hbm_alloc_async(dev, 5 * MiB, s);
      if (!p)
        fail_msg("%s, %s: %s", off[k], hbm_mode_name(all_modes[m]), hbm_last_error());
      assert_int_equal(hbm_stream_synchronize(dev, s), HBM_OK);
      round_trip(dev->phys, p, MiB, 5);
      assert_int_equal(hbm_free_async(dev, p, s), HBM_OK);
      assert_int_equal(hbm_stream_destroy(dev, s), HBM_OK);
      hbm_close(dev);
      clean();
    }
  }
}

/* Bug 5: HBM_DEVICE=auto falls back to sim only when there is no device, and says so;
 * a driver that fails otherwise is an error. */
static void auto_falls_back_only_without_a_device(void **state) {
  (void)state;
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  cfg.device = HBM_DEVICE_AUTO;
  snprintf(cfg.sim_name, sizeof cfg.sim_name, "tcuda-auto-%d", (int)getpid());
  hbm_config_set_mode(&cfg, HBM_MODE_PLATFORM, HBM_ORIGIN_CODE);
  knobs("FAKECUDA_DEVICES=0", NULL);
  hbm_device_t *dev = hbm_open(&cfg);
  assert_non_null(dev);
  assert_int_equal(hbm_device_kind(dev), HBM_DEVICE_SIM);
  expect_in(hbm_device_note(dev), "CUDA_ERROR_NO_DEVICE");
  hbm_close(dev);
  knobs("FAKECUDA_FAIL=cuDevicePrimaryCtxRetain:1:999", NULL);
  assert_null(hbm_open(&cfg));
  expect_in(hbm_last_error(), "cuDevicePrimaryCtxRetain");
  cfg.ordinal = 7;
  knobs(NULL);
  assert_null(hbm_open(&cfg));
  expect_in(hbm_last_error(), "HBM_DEVICE_ORDINAL=7");
  clean();
}

/* Bug 6: driver errors carry their code and name. */
static void errors_name_the_code(void **state) {
  (void)state;
  knobs("FAKECUDA_FAIL=cuMemAlloc_v2:1:999", NULL);
  hbm_device_t *dev = open_mode(HBM_MODE_PLATFORM, 0.2);
  assert_null(hbm_alloc(dev, MiB, 0));
  expect_in(hbm_last_error(), "cuMemAlloc_v2");
  expect_in(hbm_last_error(), "CUDA_ERROR_UNKNOWN (999)");
  hbm_close(dev);
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  cfg.device = HBM_DEVICE_CUDA;
  knobs("FAKECUDA_FAIL=cuInit:1:3", NULL);
  assert_null(hbm_open(&cfg));
  expect_in(hbm_last_error(), "cuInit: CUDA_ERROR_NOT_INITIALIZED (3): initialization error");
  clean();
}

/* Bug 10: a growth range whose cuMemMap fails is not unmapped (the double counts that as a
 * misuse), and a failed cuMemFree / cuMemUnmap / cuMemRelease is reported, not ignored. */
static void failed_calls_are_handled(void **state) {
  (void)state;
  knobs("FAKECUDA_FAIL=cuMemMap:2", NULL);
  hbm_device_t *dev = open_mode(HBM_MODE_GROWTH, 0.5);
  void *a = hbm_alloc(dev, 3 * MiB, 0);
  assert_non_null(a);
  assert_null(hbm_alloc(dev, 64 * MiB, 0)); /* the second commit: its map fails */
  assert_int_equal(fk.misuse(), 0);
  assert_int_equal(hbm_free(dev, a), HBM_OK);
  hbm_close(dev);
  clean();
  knobs("FAKECUDA_FAIL=cuMemFree_v2:1", NULL);
  dev = open_mode(HBM_MODE_PLATFORM, 0.2);
  a = hbm_alloc(dev, MiB, 0);
  assert_non_null(a);
  hbm_free(dev, a);
  expect_in(hbm_last_error(), "cuMemFree_v2");
  hbm_close(dev); /* the context's end takes the region back */
  clean();
}

/* ---- issue 16: expandable mode maps a block's new granules as one run ---- */

static hbm_stats_t stats_of(hbm_device_t *dev) {
  hbm_stats_t st;
  assert_int_equal(hbm_get_stats(dev, &st), HBM_OK);
  return st;
}

/* The driver calls of expandable mode's granules since the double's last reset. */
static void expect_vm_calls(unsigned long create, unsigned long map, unsigned long unmap,
                            unsigned long release) {
  assert_int_equal(fk.calls("cuMemCreate"), create);
  assert_int_equal(fk.calls("cuMemMap"), map);
  assert_int_equal(fk.calls("cuMemSetAccess"), map);
  assert_int_equal(fk.calls("cuMemUnmap"), unmap);
  assert_int_equal(fk.calls("cuMemRelease"), release);
}

/* A block over six granules: one cuMemCreate of all six, one cuMemMap, one cuMemSetAccess;
 * freed, it stays mapped (the cache) until hbm_trim unmaps and releases it, one call each. */
static void expandable_block_is_one_mapping(void **state) {
  (void)state;
  knobs(NULL);
  hbm_device_t *dev = open_mode(HBM_MODE_EXPANDABLE, 0.5);
  fk.reset();
  /* 10 MiB + 100 B from a granule boundary (the range's first block): 5 granules and a bit */
  void *a = hbm_alloc(dev, 10 * MiB + 100, 0);
  assert_non_null(a);
  assert_true(stats_of(dev).bytes_reserved == 12 * MiB);
  expect_vm_calls(1, 1, 0, 0);
  round_trip(dev->phys, a, 10 * MiB, 21);
  assert_int_equal(hbm_free(dev, a), HBM_OK);
  expect_vm_calls(1, 1, 0, 0);
  assert_int_equal(hbm_trim(dev), HBM_OK);
  expect_vm_calls(1, 1, 1, 1);
  assert_true(stats_of(dev).bytes_reserved == 0);
  hbm_close(dev);
  clean();
}

/* A run is unmapped only whole: while a neighbour still uses one of its granules, freeing
 * and trimming give nothing back (cuMemUnmap of part of it would be refused); once the
 * neighbour is gone, trim gives back the whole run. */
static void expandable_run_waits_for_its_neighbour(void **state) {
  (void)state;
  knobs(NULL);
  hbm_device_t *dev = open_mode(HBM_MODE_EXPANDABLE, 0.5);
  fk.reset();
  void *a = hbm_alloc(dev, 3 * MiB, 0); /* granules 0 and 1: one run */
  void *b = hbm_alloc(dev, MiB, 0);     /* right after a: in granule 1 */
  assert_true(a && b && (char *)b == (char *)a + 3 * MiB);
  expect_vm_calls(1, 1, 0, 0);
  round_trip(dev->phys, b, MiB, 22);
  assert_int_equal(hbm_free(dev, a), HBM_OK);
  assert_int_equal(hbm_trim(dev), HBM_OK);
  expect_vm_calls(1, 1, 0, 0);
  assert_true(stats_of(dev).bytes_reserved == 4 * MiB);
  round_trip(dev->phys, b, MiB, 23);
  assert_int_equal(hbm_free(dev, b), HBM_OK);
  assert_int_equal(hbm_trim(dev), HBM_OK);
  expect_vm_calls(1, 1, 1, 1);
  assert_true(stats_of(dev).bytes_reserved == 0);
  hbm_close(dev);
  clean();
}

/* The limit bounds mapped memory, runs pinned by a neighbour included. Blocks of 4 MiB or
 * more go to the high end of the free space (src/alloc/arena.c), so from the range's top: a
 * (15 MiB) over granules top-8..top-1, one run; b (5 MiB) right below, over top-10..top-8,
 * its own run of two new granules and a's lowest. 20 MiB mapped. With a freed, b pins a's
 * run: a 20 MiB block, too big for a's hole, needs 10 new granules, 20 + 20 > 32 MiB (the
 * limit): refused (on a divisible device a's 7 free granules would have gone first). Once
 * b is freed too, both runs are free and the block fits. */
static void expandable_limit_counts_whole_runs(void **state) {
  (void)state;
  knobs("FAKECUDA_MEMORY=256M", "FAKECUDA_CONTEXT_OVERHEAD=0", NULL);
  hbm_device_t *dev = open_mode(HBM_MODE_EXPANDABLE, 0.125); /* limit 32 MiB */
  void *a = hbm_alloc(dev, 15 * MiB, 0), *b = hbm_alloc(dev, 5 * MiB, 0);
  assert_true(a && b && (char *)b + 5 * MiB == (char *)a);
  assert_true(stats_of(dev).bytes_reserved == 20 * MiB);
  assert_int_equal(hbm_free(dev, a), HBM_OK);
  fk.reset();
  assert_null(hbm_alloc(dev, 20 * MiB, 0));
  expect_in(hbm_last_error(), "in use + request over the limit: 20.00MiB in use");
  /* of a's 8 granules, 7 are free but pinned by b */
  expect_in(hbm_last_error(), "14.00MiB are free granules that stay mapped");
  expect_vm_calls(0, 0, 0, 0);
  assert_true(stats_of(dev).bytes_reserved == 20 * MiB);
  assert_int_equal(hbm_free(dev, b), HBM_OK);
  void *c = hbm_alloc(dev, 20 * MiB, 0);
  assert_non_null(c);
  round_trip(dev->phys, c, 20 * MiB, 24);
  hbm_stats_t st = stats_of(dev);
  assert_true(st.bytes_reserved <= 32 * MiB && st.peak_bytes_reserved <= 32 * MiB);
  assert_int_equal(hbm_free(dev, c), HBM_OK);
  assert_int_equal(hbm_trim(dev), HBM_OK);
  assert_true(stats_of(dev).bytes_reserved == 0);
  hbm_close(dev);
  clean();
}

/* A refused cuMemUnmap leaves the run mapped and counted, its handle unreleased (the
 * memory is still mapped); the device's close gives it back. */
static void expandable_failed_unmap_keeps_the_run(void **state) {
  (void)state;
  knobs("FAKECUDA_FAIL=cuMemUnmap:1:999", NULL);
  hbm_device_t *dev = open_mode(HBM_MODE_EXPANDABLE, 0.5);
  void *a = hbm_alloc(dev, 6 * MiB, 0);
  assert_non_null(a);
  assert_int_equal(hbm_free(dev, a), HBM_OK);
  assert_int_equal(hbm_trim(dev), HBM_OK);
  expect_in(hbm_last_error(), "cuMemUnmap");
  assert_int_equal(fk.calls("cuMemRelease"), 0);
  assert_true(stats_of(dev).bytes_reserved == 6 * MiB);
  hbm_close(dev);
  assert_int_equal(fk.calls("cuMemRelease"), 1);
  clean();
}

/* Every mode on a GPU whose memory the host cannot touch at all (a discrete GPU). */
static void every_mode_on_a_discrete_gpu(void **state) {
  (void)state;
  knobs("FAKECUDA_HOST_ACCESS=0", NULL);
  every_mode_on_the_gpu(state);
  clean();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(regions_with_cuMemAlloc),
      cmocka_unit_test(virtual_memory_on_the_gpu),
      cmocka_unit_test(stream_ordered_pool),
      cmocka_unit_test(every_mode_on_the_gpu),
      cmocka_unit_test(auto_prefers_the_gpu),
      cmocka_unit_test(bad_ordinal_is_invalid),
      cmocka_unit_test(callers_context_is_kept),
      cmocka_unit_test(close_leaves_no_dead_context),
      cmocka_unit_test(async_plain_blocks_are_ordered),
      cmocka_unit_test(trim_releases_stream_frees),
      cmocka_unit_test(oom_names_the_holders),
      cmocka_unit_test(features_from_device_attributes),
      cmocka_unit_test(auto_falls_back_only_without_a_device),
      cmocka_unit_test(errors_name_the_code),
      cmocka_unit_test(failed_calls_are_handled),
      cmocka_unit_test(every_mode_on_a_discrete_gpu),
      cmocka_unit_test(expandable_block_is_one_mapping),
      cmocka_unit_test(expandable_run_waits_for_its_neighbour),
      cmocka_unit_test(expandable_limit_counts_whole_runs),
      cmocka_unit_test(expandable_failed_unmap_keeps_the_run),
  };
  if (getenv("TEST_FILTER")) /* one test alone: TEST_FILTER=callers_context_is_kept */
    cmocka_set_test_filter(getenv("TEST_FILTER"));
  return cmocka_run_group_tests(tests, NULL, NULL);
}
