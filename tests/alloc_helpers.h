/* alloc_helpers.h — for the allocator's tests: configurations of fresh simulated devices,
 * each with a name of its own so that tests running in parallel never share a ledger.
 * HBM_TEST_DEVICE=cuda runs them on the CUDA backend instead (ctest does so against the
 * driver double, tests/fakecuda, whose memory is then set to the device's size). */
#ifndef HBM_TEST_ALLOC_HELPERS_H
#define HBM_TEST_ALLOC_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include "alloc/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int th_sim_devices; /* configurations made so far in this test program */

/* The backend the tests run on: sim, or cuda under HBM_TEST_DEVICE=cuda. */
static inline hbm_device_kind_t th_device_kind(void) {
  const char *kind = getenv("HBM_TEST_DEVICE");
  return kind && !strcmp(kind, "cuda") ? HBM_DEVICE_CUDA : HBM_DEVICE_SIM;
}

/* A sim device of `memory` bytes in `mode`, limit `fraction` of it, named
 * <prefix>-<pid>-<n>. */
static inline hbm_config_t th_sim_config(const char *prefix, hbm_mode_t mode, uint64_t memory,
                                         double fraction) {
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  cfg.device = th_device_kind();
  cfg.sim_memory = memory;
  if (cfg.device == HBM_DEVICE_CUDA) { /* the double's size, while nothing lives on it */
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)memory);
    setenv("FAKECUDA_MEMORY", bytes, 1);
  }
  cfg.mem_fraction = fraction;
  snprintf(cfg.sim_name, sizeof cfg.sim_name, "%s-%d-%d", prefix, (int)getpid(), ++th_sim_devices);
  if (hbm_config_mode(&cfg) != mode) /* the defaults' settings keep their default origin */
    hbm_config_set_mode(&cfg, mode, HBM_ORIGIN_CODE);
  return cfg;
}

/* A device for th_sim_config(prefix, ...), or the test fails. */
static inline hbm_device_t *th_open_sim(const char *prefix, hbm_mode_t mode, uint64_t memory,
                                        double fraction) {
  hbm_config_t cfg = th_sim_config(prefix, mode, memory, fraction);
  hbm_device_t *dev = hbm_open(&cfg);
  if (!dev)
    fail_msg("hbm_open(%s): %s", hbm_mode_name(mode), hbm_last_error());
  return dev;
}

static inline hbm_stats_t th_stats(hbm_device_t *dev) {
  hbm_stats_t s;
  assert_int_equal(hbm_get_stats(dev, &s), HBM_OK);
  return s;
}

/* A pattern of 32-bit words that depends on the seed and the position, to write into device
 * memory and check later. */
static inline void th_fill(void *p, size_t n, uint32_t seed) {
  uint32_t *w = p;
  for (size_t i = 0; i < n / 4; i++)
    w[i] = seed ^ (uint32_t)(i * 2654435761u);
}

static inline bool th_intact(const void *p, size_t n, uint32_t seed) {
  const uint32_t *w = p;
  for (size_t i = 0; i < n / 4; i++)
    if (w[i] != (seed ^ (uint32_t)(i * 2654435761u)))
      return false;
  return true;
}

/* A failed test leaves its devices open: remove their ledgers anyway. */
static inline void th_sim_remove_ledgers(const char *prefix) {
  for (int i = 1; i <= th_sim_devices; i++) {
    char name[64], shm[128];
    snprintf(name, sizeof name, "%s-%d-%d", prefix, (int)getpid(), i);
    hbm__ledger_shm_name(name, shm, sizeof shm);
    shm_unlink(shm);
  }
}

#endif
