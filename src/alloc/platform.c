/* platform.c — the "platform" strategy (XLA_PYTHON_CLIENT_ALLOCATOR=platform): every
 * allocation is its own region taken from the device (cuMemAlloc / an mmap on sim), of
 * exactly the requested size rounded to 256 bytes, and given back the moment it is freed.
 * The only mode that returns memory to the device; slow, but the smallest footprint, and
 * so the way to debug an OOM. Stricter alignments than the device's own are met by asking
 * for the slack and remembering the offset in the block's handle. */
#include "alloc/alloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct platform {
  hbm__strategy_t base;
  hbm_u64map_t regions; /* region base → size, for walks and for close */
  uint64_t reserved;
  uint64_t peak_reserved;
} platform_t;

static platform_t *platform_of(hbm__strategy_t *s) { return (platform_t *)s; }

static hbm_status_t platform_alloc(hbm__strategy_t *s, uint64_t size, uint64_t alignment,
                                   hbm_stream_t *stream, hbm__block_t *out, hbm__failure_t *why) {
  platform_t *p = platform_of(s);
  hbm__strategy_env_t *env = &s->env;
  (void)stream;
  uint64_t device_align = env->device->region_alignment;
  uint64_t slack = alignment > device_align ? alignment - device_align : 0;
  uint64_t bytes = hbm__round_up_sat(size, HBM__MIN_BLOCK);
  if (bytes > env->limit || slack > env->limit - bytes ||
      bytes + slack > env->limit - p->reserved) {
    why->kind = HBM__FAIL_LIMIT;
    return HBM_ERR_NO_MEMORY;
  }
  bytes += slack;
  void *base;
  if (hbm__device_region_alloc(env->device, bytes, &base) != HBM_OK) {
    why->kind = HBM__FAIL_DEVICE;
    why->device_request = bytes;
    snprintf(why->detail, sizeof why->detail, "%s", hbm_last_error());
    return HBM_ERR_NO_MEMORY;
  }
  uint64_t addr = (uint64_t)(uintptr_t)base;
  if (!hbm_u64map_put(&p->regions, addr, bytes)) {
    hbm__device_region_free(env->device, base, bytes);
    why->kind = HBM__FAIL_HOST;
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the platform allocator");
  }
  p->reserved += bytes;
  if (p->reserved > p->peak_reserved)
    p->peak_reserved = p->reserved;
  if (env->on_reserve)
    env->on_reserve(env->ctx, HBM_RESERVE_GROW, addr, bytes);
  out->addr = hbm__round_up(addr, alignment);
  out->allocated = bytes;
  out->handle = out->addr - addr; /* the alignment offset */
  return HBM_OK;
}

static void release(platform_t *p, uint64_t base, uint64_t bytes) {
  hbm__strategy_env_t *env = &p->base.env;
  hbm__device_region_free(env->device, (void *)(uintptr_t)base, bytes);
  p->reserved -= bytes;
  if (env->on_reserve)
    env->on_reserve(env->ctx, HBM_RESERVE_RELEASE, base, bytes);
}

static void platform_free(hbm__strategy_t *s, const hbm__block_t *b, hbm_stream_t *stream,
                          bool ordered) {
  platform_t *p = platform_of(s);
  (void)stream, (void)ordered;
  uint64_t base = b->addr - b->handle;
  hbm_u64map_remove(&p->regions, base, NULL);
  release(p, base, b->allocated);
}

static void platform_stats(hbm__strategy_t *s, hbm__strategy_stats_t *out) {
  platform_t *p = platform_of(s);
  memset(out, 0, sizeof *out);
  out->reserved = p->reserved;
  out->peak_reserved = p->peak_reserved;
  out->allocated = p->reserved; /* nothing is ever free inside a reservation */
}

static int compare_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}

static hbm_status_t platform_walk(hbm__strategy_t *s, int (*fn)(const hbm__chunk_info_t *, void *),
                                  void *ctx) {
  platform_t *p = platform_of(s);
  uint64_t *bases = malloc((p->regions.count + 1) * sizeof *bases);
  if (!bases)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory walking the platform allocator");
  size_t n = 0;
  for (size_t i = 0; i < p->regions.cap; i++)
    if (p->regions.used[i] == 1)
      bases[n++] = p->regions.keys[i];
  qsort(bases, n, sizeof *bases, compare_u64);
  for (size_t i = 0; i < n; i++) {
    uint64_t size = 0;
    hbm_u64map_get(&p->regions, bases[i], &size);
    hbm__chunk_info_t info = {.region_base = bases[i],
                              .region_size = size,
                              .addr = bases[i],
                              .size = size,
                              .in_use = true};
    if (fn(&info, ctx))
      break;
  }
  free(bases);
  return HBM_OK;
}

static hbm_status_t platform_trim(hbm__strategy_t *s) {
  (void)s; /* everything freed was already returned */
  return HBM_OK;
}

static uint64_t platform_largest_free(hbm__strategy_t *s) {
  (void)s;
  return 0;
}

static void platform_destroy(hbm__strategy_t *s) {
  platform_t *p = platform_of(s);
  for (size_t i = 0; i < p->regions.cap; i++)
    if (p->regions.used[i] == 1)
      release(p, p->regions.keys[i], p->regions.values[i]);
  hbm_u64map_free(&p->regions);
  free(p);
}

static const hbm__strategy_ops_t platform_ops = {
    .name = "platform",
    .alloc = platform_alloc,
    .free = platform_free,
    .stats = platform_stats,
    .walk = platform_walk,
    .trim = platform_trim,
    .largest_free = platform_largest_free,
    .destroy = platform_destroy,
};

hbm_status_t hbm__platform_create(const hbm__strategy_env_t *env, hbm__strategy_t **out) {
  platform_t *p = calloc(1, sizeof *p);
  if (!p)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the platform allocator");
  p->base.ops = &platform_ops;
  p->base.env = *env;
  hbm_u64map_init(&p->regions);
  *out = &p->base;
  return HBM_OK;
}
