/* test_alloc_threads.c — the per-thread caches (src/alloc/tcache.c) a device switches on once
 * a second thread uses it: blocks freed by one thread and allocated again from its cache stay
 * exact in the statistics and in walks; a thread may free blocks another thread's cache
 * handed out, and a double free is still refused; blocks held in caches are given back
 * before an allocation fails and by hbm_trim; hundreds of blocks of one size fit in a cache; a
 * thread that exits leaves its live blocks to the device; a device closed while its threads live
 * on, and threads that outlive it, leak nothing and touch nothing freed (the sanitizer builds
 * check). A profile started and stopped while six threads allocate and free records no free of a
 * block it never saw (issue 13 item 7). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "alloc_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

/* A device this thread has used (so that the next thread to use it shares it). */
static hbm_device_t *open_sim(hbm_mode_t mode, uint64_t memory) {
  hbm_config_t cfg = th_sim_config("tthr", mode, memory, 1.0); /* sim, or CUDA (helpers) */
  hbm_device_t *dev = hbm_open(&cfg);
  if (!dev)
    fail_msg("hbm_open: %s", hbm_last_error());
  assert_int_equal(hbm_free(dev, hbm_alloc(dev, 100, 0)), HBM_OK);
  return dev;
}

/* ---- helpers run on other threads ---- */

typedef struct job {
  hbm_device_t *dev;
  void **blocks;
  size_t n, size;
  int status;
} job_t;

static void *allocate_all(void *arg) {
  job_t *j = arg;
  for (size_t i = 0; i < j->n; i++)
    if (!(j->blocks[i] = hbm_alloc(j->dev, j->size + i * 512, 0)))
      j->status = 1;
  return NULL;
}

static void *free_all(void *arg) {
  job_t *j = arg;
  for (size_t i = 0; i < j->n; i++)
    if (hbm_free(j->dev, j->blocks[i]) != HBM_OK)
      j->status = 1;
  return NULL;
}

/* Allocates, frees (into its cache), allocates again (from its cache): its blocks are then
 * owned by its cache. */
static void *cycle_twice(void *arg) {
  job_t *j = arg;
  allocate_all(j);
  free_all(j);
  allocate_all(j);
  return NULL;
}

static void on_thread(void *(*fn)(void *), job_t *j) {
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fn, j), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(j->status, 0);
}

static int count(const hbm_block_info_t *b, void *ctx) {
  ((uint64_t *)ctx)[0]++;
  ((uint64_t *)ctx)[1] += b->size;
  return 0;
}

/* Blocks from a thread's cache, freed by another thread; statistics and walks stay exact. */
static void cross_thread_frees(void **state) {
  (void)state;
  hbm_device_t *dev = open_sim(HBM_MODE_BFC, 256 * MiB);
  void *blocks[64];
  job_t j = {.dev = dev, .blocks = blocks, .n = 64, .size = 3000};
  on_thread(cycle_twice, &j); /* a second thread: the device is shared from now on */
  assert_true(hbm__devlock_shared(&dev->lock));
  uint64_t want = 0;
  for (size_t i = 0; i < 64; i++)
    want += 3000 + i * 512;
  hbm_stats_t s = th_stats(dev);
  assert_true(s.bytes_in_use == want && s.num_live == 64);
  assert_true(s.num_allocs == 129 && s.num_frees == 65);
  uint64_t walked[2] = {0, 0};
  assert_int_equal(hbm_walk(dev, count, walked), HBM_OK);
  assert_true(walked[0] == 64 && walked[1] == want);
  assert_true(hbm_block_size(dev, blocks[5]) == 3000 + 5 * 512);
  for (size_t i = 0; i < 64; i++) /* this thread frees what the other's cache handed out */
    assert_int_equal(hbm_free(dev, blocks[i]), HBM_OK);
  assert_int_equal(hbm_free(dev, blocks[0]), HBM_ERR_NOT_FOUND); /* twice */
  assert_non_null(strstr(hbm_last_error(), "not a live block"));
  s = th_stats(dev);
  assert_true(s.bytes_in_use == 0 && s.num_live == 0 && s.num_frees == 129);
  assert_true(hbm_block_size(dev, blocks[5]) == 0);
  hbm_close(dev);
}

static void *same_size_twice(void *arg) {
  job_t *j = arg;
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < j->n; i++)
      if (!(j->blocks[i] = hbm_alloc(j->dev, j->size, 0)))
        j->status = 1;
    if (pass == 0)
      free_all(j);
  }
  return NULL;
}

/* Hundreds of live blocks of one size (the GPT logs keep hundreds of 4 KiB, 4 MiB and 16 MiB
 * blocks) all stay in the freeing thread's cache: 300 blocks of 4 KiB freed by a thread come
 * back from its cache, every one. Expected by hand: 300 x 4 KiB = 1.2 MiB is far under a
 * cache's budget (at least 64 MiB), so every second-pass allocation is served by the cache
 * (its allocation count 300); a bin of fixed room (32 blocks) served at most 32. */
static void many_blocks_of_one_size_stay_cached(void **state) {
  (void)state;
  hbm_device_t *dev = open_sim(HBM_MODE_BFC, 256 * MiB);
  void *blocks[300];
  job_t j = {.dev = dev, .blocks = blocks, .n = 300, .size = 4 * KiB};
  on_thread(same_size_twice, &j);
  hbm__tcache_totals_t t;
  hbm__tcache_totals(dev, &t);
  assert_int_equal(t.allocs, 300);
  assert_int_equal(t.live, 300);
  hbm_stats_t s = th_stats(dev);
  assert_true(s.num_live == 300 && s.bytes_in_use == 300 * 4 * KiB);
  for (size_t i = 0; i < 300; i++)
    assert_int_equal(hbm_free(dev, blocks[i]), HBM_OK);
  s = th_stats(dev);
  assert_true(s.num_live == 0 && s.bytes_in_use == 0 && s.num_ooms == 0);
  hbm_close(dev);
}

/* In a thread's cache, freed blocks still take arena space: an allocation that needs it gets
 * it (the caches are emptied first), and so does hbm_trim. */
static void caches_give_back_before_failing(void **state) {
  (void)state;
  hbm_device_t *dev = open_sim(HBM_MODE_BFC, 64 * MiB);
  void *blocks[32];
  job_t j = {.dev = dev, .blocks = blocks, .n = 32, .size = MiB};
  on_thread(allocate_all, &j);
  on_thread(free_all, &j); /* into that thread's cache */
  assert_true(th_stats(dev).bytes_in_use == 0);
  assert_true(th_stats(dev).largest_free_block < 64 * MiB);
  void *big = hbm_alloc(dev, 60 * MiB, 0); /* needs what the cache holds */
  assert_non_null(big);
  assert_int_equal(hbm_free(dev, big), HBM_OK);
  on_thread(allocate_all, &j);
  on_thread(free_all, &j);
  assert_int_equal(hbm_trim(dev), HBM_OK);
  hbm_stats_t s = th_stats(dev);
  assert_true(s.largest_free_block == 64 * MiB && s.fragmentation == 0.0);
  assert_true(s.num_ooms == 0);
  hbm_close(dev);
}

/* A thread that exits while its cache owns live blocks: they stay live, and are freed later. */
static void exited_threads_leave_blocks_to_the_device(void **state) {
  (void)state;
  hbm_device_t *dev = open_sim(HBM_MODE_GROWTH, 256 * MiB);
  void *blocks[40];
  job_t j = {.dev = dev, .blocks = blocks, .n = 40, .size = 100 * KiB};
  on_thread(cycle_twice, &j); /* its cache owns the 40 blocks, then it exits */
  for (size_t i = 0; i < 40; i++)
    memset(blocks[i], (int)i, 100 * KiB);
  assert_int_equal(hbm_trim(dev), HBM_OK); /* reaps the exited thread's cache */
  hbm_stats_t s = th_stats(dev);
  assert_true(s.num_live == 40 && s.num_allocs == 81 && s.num_frees == 41);
  for (size_t i = 0; i < 40; i++) {
    assert_true(hbm_block_size(dev, blocks[i]) == 100 * KiB + i * 512);
    assert_int_equal(hbm_free(dev, blocks[i]), HBM_OK);
  }
  s = th_stats(dev);
  assert_true(s.num_live == 0 && s.bytes_in_use == 0 && s.num_frees == 81);
  hbm_close(dev);
}

/* A device closed while a thread that used it lives on; that thread then uses a new device
 * (which may sit at the same address) and exits. */
typedef struct relay {
  hbm_device_t *dev;
  pthread_barrier_t step;
  int status;
} relay_t;

static void *outlive(void *arg) {
  relay_t *r = arg;
  void *p = hbm_alloc(r->dev, 5000, 0);
  hbm_free(r->dev, p); /* cached */
  p = hbm_alloc(r->dev, 5000, 0);
  r->status |= p == NULL;
  pthread_barrier_wait(&r->step); /* the main thread closes the device */
  pthread_barrier_wait(&r->step); /* and opens another */
  for (int i = 0; i < 100; i++) {
    void *q = hbm_alloc(r->dev, 5000 + (size_t)i, 0);
    r->status |= q == NULL;
    r->status |= hbm_free(r->dev, q) != HBM_OK;
  }
  return NULL;
}

static void devices_closed_before_their_threads(void **state) {
  (void)state;
  relay_t r = {.dev = open_sim(HBM_MODE_BFC, 64 * MiB)};
  pthread_barrier_init(&r.step, NULL, 2);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, outlive, &r), 0);
  pthread_barrier_wait(&r.step);
  hbm_close(r.dev); /* with a block the other thread's cache still owns */
  r.dev = open_sim(HBM_MODE_BFC, 64 * MiB);
  pthread_barrier_wait(&r.step);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(r.status, 0);
  hbm_stats_t s = th_stats(r.dev);
  assert_true(s.num_live == 0 && s.num_allocs == 101 && s.num_frees == 101);
  assert_true(r.dev->n_caches == 1); /* the other thread's */
  hbm_close(r.dev);
  pthread_barrier_destroy(&r.step);
}

/* One thread alone never has a cache: its frees go straight back to the arena. */
static void one_thread_has_no_cache(void **state) {
  (void)state;
  hbm_device_t *dev = open_sim(HBM_MODE_BFC, 64 * MiB);
  assert_true(th_stats(dev).num_allocs == 1);
  void *p = hbm_alloc(dev, MiB, 0);
  assert_int_equal(hbm_free(dev, p), HBM_OK);
  assert_false(hbm__devlock_shared(&dev->lock));
  assert_true(dev->n_caches == 0);
  assert_true(th_stats(dev).largest_free_block == 64 * MiB);
  hbm_close(dev);
}

/* ---- a profile started while threads allocate ---- */

#define BUSY_THREADS 6
#define BUSY_BLOCKS 64

typedef struct busy {
  hbm_device_t *dev;
  _Atomic int *stop;
  unsigned seed;
  int status;
} busy_t;

/* Keeps BUSY_BLOCKS slots, allocating or freeing one at random (sizes 256 B .. 64 KiB, so
 * the thread caches serve most of them), until told to stop; frees what it holds. */
static void *keep_busy(void *arg) {
  busy_t *b = arg;
  void *blocks[BUSY_BLOCKS] = {0};
  while (!atomic_load(b->stop)) {
    unsigned i = (b->seed = b->seed * 1103515245u + 12345u) >> 16;
    void **slot = &blocks[i % BUSY_BLOCKS];
    if (*slot) {
      b->status |= hbm_free(b->dev, *slot) != HBM_OK;
      *slot = NULL;
    } else if (!(*slot = hbm_alloc(b->dev, 256u << (i % 9), 0))) {
      b->status = 1;
    }
  }
  for (int i = 0; i < BUSY_BLOCKS; i++)
    if (blocks[i])
      b->status |= hbm_free(b->dev, blocks[i]) != HBM_OK;
  return NULL;
}

/* Captures started and stopped while six threads work: each profile must account for every
 * free (meta unmatched_frees absent: src/profile/trace_read.c sets it on any free of an
 * address with no live buffer), and every buffer it lists starts at an alloc it saw. */
static void profile_started_while_threads_allocate(void **state) {
  (void)state;
  char dir[128];
  snprintf(dir, sizeof dir, "/tmp/hbm-test-busy-%d", (int)getpid());
  hbm_device_t *dev = open_sim(HBM_MODE_BFC, 1ull << 30);
  _Atomic int stop = 0;
  busy_t b[BUSY_THREADS];
  pthread_t th[BUSY_THREADS];
  for (int i = 0; i < BUSY_THREADS; i++) {
    b[i] = (busy_t){dev, &stop, 17u + (unsigned)i, 0};
    assert_int_equal(pthread_create(&th[i], NULL, keep_busy, &b[i]), 0);
  }
  for (int round = 0; round < 8; round++) {
    usleep(2000);
    assert_int_equal(hbm_profiler_start(dir), HBM_OK);
    usleep(3000);
    char path[4096];
    snprintf(path, sizeof path, "%s", hbm_profiler_path());
    assert_int_equal(hbm_profiler_stop(), HBM_OK);
    hbm_profile_t *p = hbm_profile_load(path);
    if (!p)
      fail_msg("%s: %s", path, hbm_last_error());
    const char *unmatched = hbm_profile_meta(p, "unmatched_frees");
    if (unmatched)
      fail_msg("round %d: %s frees of blocks the profile never saw", round, unmatched);
    assert_null(hbm_profile_meta(p, "missing_frees"));
    assert_true(hbm_profile_buffer_count(p) > 0);
    hbm_profile_free(p);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < BUSY_THREADS; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(b[i].status, 0);
  }
  hbm_close(dev);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_thread_has_no_cache),
      cmocka_unit_test(cross_thread_frees),
      cmocka_unit_test(many_blocks_of_one_size_stay_cached),
      cmocka_unit_test(caches_give_back_before_failing),
      cmocka_unit_test(exited_threads_leave_blocks_to_the_device),
      cmocka_unit_test(devices_closed_before_their_threads),
      cmocka_unit_test(profile_started_while_threads_allocate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
