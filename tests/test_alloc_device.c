/* test_alloc_device.c — the simulated device under the allocator: its memory is real host
 * memory, its ledger counts every holding (regions and physical memory) so two device
 * objects — or two processes — on one name see each other's, dead processes' holdings are
 * reclaimed, the shared-memory object disappears with its last user, and the virtual-memory
 * primitives work as on a GPU: data written through one mapping reads back through another
 * mapping of the same physical memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc/alloc.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static void sim_config(hbm_config_t *cfg, const char *tag, uint64_t memory) {
  hbm_config_default(cfg);
  cfg->device = HBM_DEVICE_SIM;
  cfg->sim_memory = memory;
  snprintf(cfg->sim_name, sizeof cfg->sim_name, "tdev-%s-%d", tag, (int)getpid());
}

static hbm__device_t *open_sim(const char *tag, uint64_t memory) {
  hbm_config_t cfg;
  sim_config(&cfg, tag, memory);
  hbm__device_t *d = NULL;
  assert_int_equal(hbm__sim_open(&cfg, &d), HBM_OK);
  return d;
}

static uint64_t free_of(hbm__device_t *d) {
  uint64_t total, free_bytes;
  assert_int_equal(hbm__device_memory(d, &total, &free_bytes), HBM_OK);
  assert_true(total == d->total);
  return free_bytes;
}

static bool ledger_exists(const char *name) {
  char shm[128], path[256];
  hbm__ledger_shm_name(name, shm, sizeof shm);
  snprintf(path, sizeof path, "/dev/shm%s", shm);
  return access(path, F_OK) == 0;
}

static void regions_are_real_memory(void **state) {
  (void)state;
  hbm__device_t *d = open_sim("regions", 16 * GiB);
  assert_true(free_of(d) == 16 * GiB);
  assert_int_equal(d->kind, HBM_DEVICE_SIM);
  void *big, *small;
  /* 12 GiB costs nothing until touched. */
  assert_int_equal(hbm__device_region_alloc(d, 12 * GiB, &big), HBM_OK);
  assert_int_equal(hbm__device_region_alloc(d, 1 * MiB, &small), HBM_OK);
  assert_true(free_of(d) == 16 * GiB - 12 * GiB - MiB);
  assert_true((uintptr_t)big % d->region_alignment == 0);
  memset(small, 0xab, MiB);
  ((char *)big)[12 * GiB - 1] = 7;
  assert_int_equal(((unsigned char *)small)[MiB - 1], 0xab);
  assert_int_equal(((char *)big)[12 * GiB - 1], 7);
  /* More than is free: refused, with what was free. */
  void *too_much;
  assert_int_equal(hbm__device_region_alloc(d, 5 * GiB, &too_much), HBM_ERR_NO_MEMORY);
  assert_non_null(strstr(hbm_last_error(), "free of 16.00GiB"));
  assert_true(atomic_load(&d->held) == 12 * GiB + MiB);
  hbm__device_region_free(d, big, 12 * GiB);
  hbm__device_region_free(d, small, MiB);
  assert_true(free_of(d) == 16 * GiB);
  assert_true(atomic_load(&d->peak_held) == 12 * GiB + MiB);
  char name[64];
  snprintf(name, sizeof name, "%.63s", d->name);
  assert_true(ledger_exists(name));
  hbm__device_close(d);
  assert_false(ledger_exists(name)); /* the last user removed it */
}

/* Two device objects on one name: each sees the other's holding; the holders list says
 * whose is whose. */
static void one_name_one_ledger(void **state) {
  (void)state;
  hbm__device_t *a = open_sim("shared", 1 * GiB);
  hbm__device_t *b = open_sim("shared", 1 * GiB);
  void *pa, *pb;
  assert_int_equal(hbm__device_region_alloc(a, 600 * MiB, &pa), HBM_OK);
  assert_true(free_of(b) == 424 * MiB);
  assert_int_equal(hbm__device_region_alloc(b, 600 * MiB, &pb), HBM_ERR_NO_MEMORY);
  assert_int_equal(hbm__device_region_alloc(b, 400 * MiB, &pb), HBM_OK);
  hbm__holder_t h[8];
  size_t n = hbm__device_holders(b, h, 8);
  assert_int_equal(n, 2);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(h[i].pid, getpid());
    assert_true(h[i].self ? h[i].bytes == 400 * MiB : h[i].bytes == 600 * MiB);
    assert_true(h[i].same_process == !h[i].self);
  }
  uint64_t others, other_processes;
  hbm__device_others(b, &others, &other_processes);
  assert_true(others == 600 * MiB && other_processes == 0);
  /* A third user with another capacity is refused while these live. */
  hbm_config_t cfg;
  sim_config(&cfg, "shared", 2 * GiB);
  hbm__device_t *c = NULL;
  assert_int_equal(hbm__sim_open(&cfg, &c), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "HBM_SIM_MEMORY"));
  assert_non_null(strstr(hbm_last_error(), "already in use"));
  hbm__device_region_free(a, pa, 600 * MiB);
  hbm__device_region_free(b, pb, 400 * MiB);
  hbm__device_close(a);
  hbm__device_close(b);
  /* Once everyone left, a new capacity is fine. */
  assert_int_equal(hbm__sim_open(&cfg, &c), HBM_OK);
  assert_true(free_of(c) == 2 * GiB);
  hbm__device_close(c);
}

/* A process killed with SIGKILL while holding memory: its holding is reclaimed. */
static void dead_holders_are_reclaimed(void **state) {
  (void)state;
  hbm__device_t *d = open_sim("reclaim", 1 * GiB);
  int ready[2];
  assert_int_equal(pipe(ready), 0);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    hbm_config_t cfg;
    sim_config(&cfg, "reclaim", 1 * GiB);
    snprintf(cfg.sim_name, sizeof cfg.sim_name, "%.63s", d->name); /* the parent's device */
    hbm__device_t *cd = NULL;
    void *p;
    char ok =
        hbm__sim_open(&cfg, &cd) == HBM_OK && hbm__device_region_alloc(cd, 700 * MiB, &p) == HBM_OK;
    if (write(ready[1], &ok, 1) != 1)
      _exit(2);
    pause();
    _exit(0);
  }
  char ok = 0;
  assert_int_equal(read(ready[0], &ok, 1), 1);
  assert_int_equal(ok, 1);
  assert_true(free_of(d) == 324 * MiB);
  hbm__holder_t h[4];
  assert_int_equal(hbm__device_holders(d, h, 4), 1);
  assert_int_equal(h[0].pid, child);
  assert_false(h[0].same_process);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  assert_true(free_of(d) == 1 * GiB);
  void *p;
  assert_int_equal(hbm__device_region_alloc(d, 1 * GiB, &p), HBM_OK);
  hbm__device_region_free(d, p, 1 * GiB);
  close(ready[0]);
  close(ready[1]);
  char name[64];
  snprintf(name, sizeof name, "%.63s", d->name);
  hbm__device_close(d);
  assert_false(ledger_exists(name));
}

static void fill(void *p, size_t n, unsigned seed) {
  uint32_t *w = p;
  for (size_t i = 0; i < n / 4; i += 1024)
    w[i] = seed * 2654435761u + (uint32_t)i;
}

static bool check(const void *p, size_t n, unsigned seed) {
  const uint32_t *w = p;
  for (size_t i = 0; i < n / 4; i += 1024)
    if (w[i] != seed * 2654435761u + (uint32_t)i)
      return false;
  return true;
}

/* Reserve a range, create physical memory, map it, write, unmap, map it elsewhere: the data
 * is there. Physical memory counts in the ledger; the range does not. */
static void virtual_memory_primitives(void **state) {
  (void)state;
  hbm__device_t *d = open_sim("vmm", 1 * GiB);
  uint64_t g = d->granularity;
  assert_true(g == 2 * MiB);
  char *base;
  assert_int_equal(hbm__device_va_reserve(d, 64 * g, (void **)&base), HBM_OK);
  assert_true((uintptr_t)base % g == 0);
  assert_true(free_of(d) == 1 * GiB); /* address space is free */
  hbm__phys_t phys, other;
  assert_int_equal(hbm__device_phys_create(d, 2 * g, &phys), HBM_OK);
  assert_int_equal(hbm__device_phys_create(d, g, &other), HBM_OK);
  assert_true(free_of(d) == 1 * GiB - 3 * g);
  assert_int_equal(hbm__device_map(d, base, 2 * g, phys, 0), HBM_OK);
  assert_int_equal(hbm__device_map(d, base + 2 * g, g, other, 0), HBM_OK);
  fill(base, 2 * g, 1);
  fill(base + 2 * g, g, 2);
  assert_int_equal(hbm__device_unmap(d, base, 3 * g), HBM_OK);
  /* The same physical memory at another place in the range, and half of it alone. */
  assert_int_equal(hbm__device_map(d, base + 10 * g, 2 * g, phys, 0), HBM_OK);
  assert_int_equal(hbm__device_map(d, base + 20 * g, g, phys, g), HBM_OK);
  assert_int_equal(hbm__device_map(d, base, g, other, 0), HBM_OK);
  assert_true(check(base + 10 * g, 2 * g, 1));
  assert_true(check(base, g, 2));
  assert_true(memcmp(base + 20 * g, base + 11 * g, g) == 0); /* two views of one granule */
  base[20 * g] = 42;
  assert_int_equal(base[11 * g], 42);
  assert_int_equal(hbm__device_unmap(d, base, 64 * g), HBM_OK);
  hbm__device_phys_release(d, phys, 2 * g);
  hbm__device_phys_release(d, other, g);
  assert_true(free_of(d) == 1 * GiB);
  /* Released memory is gone: new physical memory reads as zeros. */
  hbm__phys_t fresh;
  assert_int_equal(hbm__device_phys_create(d, g, &fresh), HBM_OK);
  assert_int_equal(hbm__device_map(d, base, g, fresh, 0), HBM_OK);
  for (uint64_t i = 0; i < g; i += 4096)
    assert_int_equal(base[i], 0);
  assert_int_equal(hbm__device_unmap(d, base, g), HBM_OK);
  hbm__device_phys_release(d, fresh, g);
  /* Misaligned requests are refused, not crashed on. */
  assert_int_equal(hbm__device_map(d, base + 4096, g, fresh, 0), HBM_ERR_INVALID);
  assert_int_equal(hbm__device_unmap(d, base, 4096), HBM_ERR_INVALID);
  assert_int_equal(hbm__device_phys_create(d, g + 1, &fresh), HBM_ERR_INVALID);
  void *r;
  assert_int_equal(hbm__device_va_reserve(d, g / 2, &r), HBM_ERR_INVALID);
  /* Physical memory is limited by the device like regions are. */
  assert_int_equal(hbm__device_phys_create(d, 2 * GiB, &fresh), HBM_ERR_NO_MEMORY);
  hbm__device_va_release(d, base, 64 * g);
  hbm__device_close(d);
}

/* HBM_SIM_VM_GRANULES=whole: the sim device follows CUDA's rules (cuMemUnmap of exactly one
 * earlier mapping, cuMemRelease of a whole handle, cuMemMap inside one handle) and refuses
 * the rest, so a strategy relying on more fails here as on a GPU. Every call is counted as
 * the driver calls it would be (a map is cuMemMap + cuMemSetAccess). */
static void whole_granules_follow_cuda(void **state) {
  (void)state;
  setenv("HBM_SIM_VM_GRANULES", "whole", 1);
  hbm__device_t *d = open_sim("whole", 1 * GiB);
  uint64_t g = d->granularity;
  assert_false(d->vm_granules_divisible);
  char *base;
  assert_int_equal(hbm__device_va_reserve(d, 16 * g, (void **)&base), HBM_OK);
  hbm__phys_t run, one;
  assert_int_equal(hbm__device_phys_create(d, 3 * g, &run), HBM_OK);
  assert_int_equal(hbm__device_phys_create(d, g, &one), HBM_OK);
  assert_int_equal(hbm__device_map(d, base, 3 * g, run, 0), HBM_OK);
  assert_int_equal(hbm__device_map(d, base + 3 * g, g, one, 0), HBM_OK);
  assert_int_equal(atomic_load(&d->vm_calls), 2 + 2 * 2);
  fill(base, 4 * g, 3);
  /* a part of a mapping, and two mappings at once: refused, nothing unmapped */
  assert_int_equal(hbm__device_unmap(d, base + g, g), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "is not one whole mapping"));
  assert_int_equal(hbm__device_unmap(d, base, 4 * g), HBM_ERR_INVALID);
  assert_true(check(base, 4 * g, 3));
  /* beyond its physical allocation: refused */
  assert_int_equal(hbm__device_map(d, base + 8 * g, 2 * g, one, 0), HBM_ERR_INVALID);
  assert_int_equal(hbm__device_unmap(d, base, 3 * g), HBM_OK);
  assert_int_equal(hbm__device_unmap(d, base + 3 * g, g), HBM_OK);
  /* a part of a physical allocation: refused, the memory stays held */
  hbm__device_phys_release(d, run, g);
  assert_non_null(strstr(hbm_last_error(), "is not one whole allocation"));
  assert_true(free_of(d) == 1 * GiB - 4 * g);
  hbm__device_phys_release(d, run, 3 * g);
  hbm__device_phys_release(d, one, g);
  assert_true(free_of(d) == 1 * GiB);
  hbm__device_va_release(d, base, 16 * g);
  hbm__device_close(d);
  /* any other value is refused, naming the variable */
  setenv("HBM_SIM_VM_GRANULES", "partly", 1);
  hbm_config_t cfg;
  sim_config(&cfg, "whole", GiB);
  assert_int_equal(hbm__sim_open(&cfg, &d), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "HBM_SIM_VM_GRANULES=partly: invalid value"));
  unsetenv("HBM_SIM_VM_GRANULES");
}

static void sim_streams(void **state) {
  (void)state;
  hbm__device_t *d = open_sim("streams", 64 * MiB);
  void *s = NULL;
  assert_int_equal(d->ops->stream_create(d, &s), HBM_OK);
  assert_non_null(s);
  assert_int_equal(d->ops->stream_sync(d, s), HBM_OK);
  assert_int_equal(d->ops->stream_sync(d, NULL), HBM_OK);
  d->ops->stream_destroy(d, s);
  assert_null(d->ops->pool_create); /* the async pool is built by hbm on sim */
  hbm__device_close(d);
}

/* HBM_DEVICE=auto falls back to sim when no GPU answers, and says why. */
static void auto_falls_back_to_sim(void **state) {
  (void)state;
  hbm_config_t cfg;
  sim_config(&cfg, "auto", 64 * MiB);
  cfg.device = HBM_DEVICE_AUTO;
  hbm__device_t *d = NULL;
  char why[512];
  assert_int_equal(hbm__device_open(&cfg, &d, why, sizeof why), HBM_OK);
  if (d->kind == HBM_DEVICE_CUDA) {
    assert_non_null(strstr(why, "a GPU answered"));
  } else {
    assert_non_null(strstr(why, "no GPU answered"));
    assert_string_equal(d->name, cfg.sim_name);
  }
  hbm__device_close(d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(regions_are_real_memory),    cmocka_unit_test(one_name_one_ledger),
      cmocka_unit_test(dead_holders_are_reclaimed), cmocka_unit_test(virtual_memory_primitives),
      cmocka_unit_test(whole_granules_follow_cuda), cmocka_unit_test(sim_streams),
      cmocka_unit_test(auto_falls_back_to_sim),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
