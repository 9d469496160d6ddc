/* device.c — choosing a device backend (HBM_DEVICE=auto|sim|cuda) and the thin wrappers the
 * strategies call, which keep count of what this device object holds. See device.h. */
#include "alloc/device/device.h"
#include "base/base.h"

#include <stdio.h>
#include <string.h>

/* HBM_DEVICE=auto: the GPU, or sim where there is no driver or no device (said on stderr
 * once, and in the note). A driver that fails otherwise is an error, not a reason to run on
 * a simulated device. */
static hbm_status_t open_auto(const hbm_config_t *cfg, hbm__device_t **out, char *why_auto,
                              size_t why_cap) {
  hbm_status_t st = hbm__cuda_open(cfg, out);
  if (st == HBM_OK && why_auto)
    snprintf(why_auto, why_cap, "HBM_DEVICE=auto: a GPU answered");
  if (st != HBM_ERR_UNAVAILABLE)
    return st;
  char why[320];
  snprintf(why, sizeof why, "HBM_DEVICE=auto: no GPU answered (%s); using the simulated device",
           hbm_last_error());
  static atomic_flag told = ATOMIC_FLAG_INIT;
  if (!atomic_flag_test_and_set(&told))
    fprintf(stderr, "hbm: %s\n", why);
  if (why_auto)
    snprintf(why_auto, why_cap, "%s", why);
  hbm__error_clear();
  return hbm__sim_open(cfg, out);
}

hbm_status_t hbm__device_open(const hbm_config_t *cfg, hbm__device_t **out, char *why_auto,
                              size_t why_cap) {
  if (why_auto && why_cap)
    why_auto[0] = '\0';
  hbm_status_t st = HBM_ERR_INVALID;
  switch (cfg->device) {
  case HBM_DEVICE_SIM: st = hbm__sim_open(cfg, out); break;
  case HBM_DEVICE_CUDA: st = hbm__cuda_open(cfg, out); break;
  case HBM_DEVICE_AUTO: st = open_auto(cfg, out, why_auto, why_cap); break;
  }
  if (st == HBM_OK && why_auto && (*out)->note[0]) { /* what the device lacks, too */
    size_t len = strlen(why_auto);
    snprintf(why_auto + len, why_cap - len, "%s%s", len ? "; " : "", (*out)->note);
  }
  return st;
}

void hbm__device_close(hbm__device_t *d) {
  if (d)
    d->ops->close(d);
}

static void count_taken(hbm__device_t *d, uint64_t size) {
  uint64_t held = atomic_fetch_add(&d->held, size) + size;
  uint64_t peak = atomic_load(&d->peak_held);
  while (held > peak && !atomic_compare_exchange_weak(&d->peak_held, &peak, held)) {
  }
}

static void count_given(hbm__device_t *d, uint64_t size) { atomic_fetch_sub(&d->held, size); }

hbm_status_t hbm__device_region_alloc(hbm__device_t *d, uint64_t size, void **out) {
  hbm_status_t st = d->ops->region_alloc(d, size, out);
  if (st == HBM_OK)
    count_taken(d, size);
  return st;
}

void hbm__device_region_free(hbm__device_t *d, void *ptr, uint64_t size) {
  d->ops->region_free(d, ptr, size);
  count_given(d, size);
}

hbm_status_t hbm__device_va_reserve(hbm__device_t *d, uint64_t size, void **base) {
  if (!d->ops->va_reserve) /* a GPU without VMM */
    return hbm__error(HBM_ERR_UNAVAILABLE, "%s has no virtual memory management", d->name);
  return d->ops->va_reserve(d, size, base);
}

void hbm__device_va_release(hbm__device_t *d, void *base, uint64_t size) {
  d->ops->va_release(d, base, size);
}

/* Counted relaxed: a statistic, never a synchronization. */
static void count_vm_calls(hbm__device_t *d, uint64_t n) {
  atomic_fetch_add_explicit(&d->vm_calls, n, memory_order_relaxed);
}

hbm_status_t hbm__device_phys_create(hbm__device_t *d, uint64_t size, hbm__phys_t *out) {
  count_vm_calls(d, 1);
  hbm_status_t st = d->ops->phys_create(d, size, out);
  if (st == HBM_OK)
    count_taken(d, size);
  return st;
}

void hbm__device_phys_release(hbm__device_t *d, hbm__phys_t phys, uint64_t size) {
  count_vm_calls(d, 1);
  d->ops->phys_release(d, phys, size);
  count_given(d, size);
}

hbm_status_t hbm__device_map(hbm__device_t *d, void *addr, uint64_t size, hbm__phys_t phys,
                             uint64_t offset) {
  count_vm_calls(d, 2);
  return d->ops->map(d, addr, size, phys, offset);
}

hbm_status_t hbm__device_unmap(hbm__device_t *d, void *addr, uint64_t size) {
  count_vm_calls(d, 1);
  return d->ops->unmap(d, addr, size);
}

hbm_status_t hbm__device_memory(hbm__device_t *d, uint64_t *total, uint64_t *free_bytes) {
  return d->ops->memory(d, total, free_bytes);
}

size_t hbm__device_holders(hbm__device_t *d, hbm__holder_t *out, size_t cap) {
  return d->ops->holders(d, out, cap);
}

void hbm__device_others(hbm__device_t *d, uint64_t *others, uint64_t *other_processes) {
  hbm__holder_t holders[64];
  size_t n = hbm__device_holders(d, holders, HBM_ARRAY_LEN(holders));
  *others = *other_processes = 0;
  for (size_t i = 0; i < n && i < HBM_ARRAY_LEN(holders); i++) {
    if (holders[i].self)
      continue;
    *others += holders[i].bytes;
    if (!holders[i].same_process)
      *other_processes += holders[i].bytes;
  }
}
