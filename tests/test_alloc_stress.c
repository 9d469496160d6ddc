/* test_alloc_stress.c — a randomized stress test: four threads allocate and free blocks of
 * mixed sizes and alignments (at least 1M operations in all in the default mode), each
 * keeping a shadow of what it holds and stamping its blocks. At checkpoints the threads stop
 * and the shadow is checked against the allocator: no two live blocks overlap, every block
 * lies inside memory the allocator reserved from the device, the arena's chunks tile each
 * reservation with no two free chunks side by side, and the statistics are exact (bytes in
 * use, live blocks, allocations, frees, OOMs). Stamps are verified before every free, so a
 * block handed out twice is caught between checkpoints too. With several threads the device
 * serves most operations from per-thread caches, which the checkpoints empty (hbm_trim). The
 * growth, async, expandable and platform modes get shorter runs. HBM_STRESS_OPS overrides the
 * count; builds with a sanitizer run a fifth of it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "helpers.h"
#include "mixed_sizes.h"

#define THREADS 4
#define LIVE_PER_THREAD 256
#define PHASES 8

#define SANITIZED TH_SANITIZED

typedef struct shadow_block {
  uint8_t *ptr;
  size_t size;
  uint64_t stamp;
} shadow_block_t;

typedef struct worker {
  int id;
  struct run *run;
  hbm_stream_t *stream;
  uint64_t rng;
  shadow_block_t live[LIVE_PER_THREAD];
  uint64_t allocs, frees, ooms, failures;
  char failure[512];
} worker_t;

typedef struct run {
  hbm_device_t *dev;
  hbm_mode_t mode;
  uint64_t ops_per_phase; /* per thread */
  pthread_barrier_t phase_done, check_done;
  worker_t workers[THREADS];
} run_t;

static void stamp(shadow_block_t *b) {
  memcpy(b->ptr, &b->stamp, 8);
  memcpy(b->ptr + b->size - 8, &b->stamp, 8);
}

static bool stamp_intact(const shadow_block_t *b) {
  uint64_t head, tail;
  memcpy(&head, b->ptr, 8);
  memcpy(&tail, b->ptr + b->size - 8, 8);
  return head == b->stamp && tail == b->stamp;
}

static void note_failure(worker_t *w, const char *what, const void *ptr) {
  if (!w->failures++)
    snprintf(w->failure, sizeof w->failure, "thread %d: %s (%p)", w->id, what, ptr);
}

static void one_operation(worker_t *w) {
  run_t *run = w->run;
  shadow_block_t *b = &w->live[mix_next_random(&w->rng) % LIVE_PER_THREAD];
  if (b->ptr) {
    if (!stamp_intact(b))
      note_failure(w, "a live block was overwritten: it overlaps another", b->ptr);
    hbm_status_t st = run->mode == HBM_MODE_ASYNC ? hbm_free_async(run->dev, b->ptr, w->stream)
                                                  : hbm_free(run->dev, b->ptr);
    if (st != HBM_OK)
      note_failure(w, "free failed", b->ptr);
    b->ptr = NULL;
    w->frees++;
    return;
  }
  size_t size = mix_random_size(&w->rng);
  size_t alignment = mix_next_random(&w->rng) % 16 == 0 && run->mode != HBM_MODE_ASYNC ? 4096 : 0;
  void *p = run->mode == HBM_MODE_ASYNC ? hbm_alloc_async(run->dev, size, w->stream)
                                        : hbm_alloc(run->dev, size, alignment);
  if (!p) {
    if (hbm_last_status() != HBM_ERR_NO_MEMORY)
      note_failure(w, hbm_last_error(), NULL);
    w->ooms++;
    return;
  }
  if ((uintptr_t)p % (alignment ? alignment : 256))
    note_failure(w, "misaligned block", p);
  /* On a GPU the host may touch a stream-ordered block only once its stream has run. */
  if (run->mode == HBM_MODE_ASYNC && hbm_device_kind(run->dev) == HBM_DEVICE_CUDA)
    hbm_stream_synchronize(run->dev, w->stream);
  *b = (shadow_block_t){p, size, ((uint64_t)w->id << 56) ^ (w->allocs * 0x9e3779b97f4a7c15ull)};
  stamp(b);
  w->allocs++;
}

/* ---- the checkpoint: shadow against allocator ---- */

typedef struct region_list {
  uint64_t base[4096], size[4096];
  size_t n;
  uint64_t prev_end, prev_region;
  bool prev_free;
  size_t used_chunks, adjacent_free, gaps;
} region_list_t;

static int collect_chunk(const hbm__chunk_info_t *c, void *ctx) {
  region_list_t *r = ctx;
  if (r->n == 0 || r->base[r->n - 1] != c->region_base) {
    if (r->n && r->prev_end != r->base[r->n - 1] + r->size[r->n - 1])
      r->gaps++;
    if (r->n < 4096) {
      r->base[r->n] = c->region_base;
      r->size[r->n] = c->region_size;
      r->n++;
    }
    if (c->addr != c->region_base)
      r->gaps++;
    r->prev_free = false;
  } else {
    if (c->addr != r->prev_end)
      r->gaps++; /* chunks must tile their region */
    if (r->prev_free && !c->in_use)
      r->adjacent_free++; /* coalescing must have merged them */
  }
  r->prev_end = c->addr + c->size;
  r->prev_free = !c->in_use;
  r->used_chunks += c->in_use;
  return 0;
}

typedef struct walk_sum {
  uint64_t bytes, count;
  const void *last;
  uint64_t last_end;
  bool overlap, unordered;
} walk_sum_t;

static int sum_walk(const hbm_block_info_t *b, void *ctx) {
  walk_sum_t *s = ctx;
  if (s->last && (uintptr_t)b->ptr < s->last_end)
    s->overlap = true;
  if (s->last && b->ptr <= s->last)
    s->unordered = true;
  s->last = b->ptr;
  s->last_end = (uintptr_t)b->ptr + b->allocated;
  s->bytes += b->size;
  s->count++;
  return 0;
}

static int by_address(const void *x, const void *y) {
  const shadow_block_t *a = *(shadow_block_t *const *)x, *b = *(shadow_block_t *const *)y;
  return a->ptr < b->ptr ? -1 : a->ptr > b->ptr;
}

static bool inside_reservation(const region_list_t *r, const shadow_block_t *b) {
  uint64_t start = (uintptr_t)b->ptr, end = start + b->size;
  for (size_t i = 0; i < r->n; i++)
    if (start >= r->base[i] && end <= r->base[i] + r->size[i])
      return true;
  return false;
}

static void check_against_shadow(run_t *run) {
  static shadow_block_t *all[THREADS * LIVE_PER_THREAD];
  size_t n = 0;
  uint64_t bytes = 0, allocs = 0, frees = 0, ooms = 0;
  for (int t = 0; t < THREADS; t++) {
    worker_t *w = &run->workers[t];
    if (w->failures)
      fail_msg("%s", w->failure);
    allocs += w->allocs, frees += w->frees, ooms += w->ooms;
    for (int i = 0; i < LIVE_PER_THREAD; i++) {
      if (w->live[i].ptr) {
        all[n++] = &w->live[i];
        bytes += w->live[i].size;
      }
    }
  }
  qsort(all, n, sizeof *all, by_address);
  for (size_t i = 1; i < n; i++)
    if (all[i - 1]->ptr + all[i - 1]->size > all[i]->ptr)
      fail_msg("blocks %p+%zu and %p overlap", (void *)all[i - 1]->ptr, all[i - 1]->size,
               (void *)all[i]->ptr);
  /* The threads' caches hold freed blocks as used chunks of the arena: give them back first,
   * so that the arena's used chunks are exactly the live blocks. */
  assert_int_equal(hbm_trim(run->dev), HBM_OK);
  static region_list_t regions;
  memset(&regions, 0, sizeof regions);
  hbm__strategy_t *s = hbm__device_strategy(run->dev);
  assert_int_equal(s->ops->walk(s, collect_chunk, &regions), HBM_OK);
  for (size_t i = 0; i < n; i++)
    if (!inside_reservation(&regions, all[i]))
      fail_msg("block %p+%zu lies outside every reservation", (void *)all[i]->ptr, all[i]->size);
  if (run->mode != HBM_MODE_PLATFORM) {
    assert_int_equal(regions.gaps, 0);
    assert_int_equal(regions.adjacent_free, 0);
  }
  hbm_stats_t st;
  assert_int_equal(hbm_get_stats(run->dev, &st), HBM_OK);
  assert_true(st.bytes_in_use == bytes);
  assert_true(st.num_live == n);
  assert_true(st.num_allocs == allocs);
  assert_true(st.num_frees == frees);
  assert_true(st.num_ooms == ooms);
  assert_true(st.peak_bytes_in_use >= bytes && st.peak_bytes_in_use <= st.bytes_limit);
  assert_true(st.bytes_reserved <= st.bytes_limit);
  if (run->mode != HBM_MODE_ASYNC) /* the async pool also holds blocks awaiting a sync */
    assert_int_equal(regions.used_chunks, n);
  walk_sum_t ws = {0};
  assert_int_equal(hbm_walk(run->dev, sum_walk, &ws), HBM_OK);
  assert_false(ws.overlap);
  assert_false(ws.unordered);
  assert_true(ws.bytes == bytes && ws.count == n);
  for (size_t i = 0; i < n; i++)
    assert_true(hbm_block_size(run->dev, all[i]->ptr) == all[i]->size);
}

static void *work(void *arg) {
  worker_t *w = arg;
  run_t *run = w->run;
  for (int phase = 0; phase < PHASES; phase++) {
    for (uint64_t i = 0; i < run->ops_per_phase; i++)
      one_operation(w);
    if (w->stream && phase % 2)
      hbm_stream_synchronize(run->dev, w->stream);
    pthread_barrier_wait(&run->phase_done);
    pthread_barrier_wait(&run->check_done); /* the main thread checks in between */
  }
  return NULL;
}

static uint64_t total_ops(uint64_t default_ops) {
  const char *env = getenv("HBM_STRESS_OPS");
  if (env && *env)
    return strtoull(env, NULL, 10);
  return SANITIZED ? default_ops / 5 : default_ops;
}

/* memory: the sim device's size; the limit is half of it. Tight limits make OOMs happen
 * under concurrency too. */
static void stress(hbm_mode_t mode, uint64_t ops, uint64_t memory) {
  static run_t run;
  memset(&run, 0, sizeof run);
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  cfg.device = HBM_DEVICE_SIM;
  cfg.sim_memory = memory;
  cfg.mem_fraction = 0.5;
  const char *kind = getenv("HBM_TEST_DEVICE"); /* as alloc_helpers.h: CUDA on the double */
  if (kind && !strcmp(kind, "cuda")) {
    char bytes[32];
    snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)memory);
    setenv("FAKECUDA_MEMORY", bytes, 1);
    cfg.device = HBM_DEVICE_CUDA;
  }
  snprintf(cfg.sim_name, sizeof cfg.sim_name, "tstress-%d-%d", (int)getpid(), (int)mode);
  hbm_config_set_mode(&cfg, mode, HBM_ORIGIN_CODE);
  run.dev = hbm_open(&cfg);
  assert_non_null(run.dev);
  run.mode = mode;
  run.ops_per_phase = ops / THREADS / PHASES;
  pthread_barrier_init(&run.phase_done, NULL, THREADS + 1);
  pthread_barrier_init(&run.check_done, NULL, THREADS + 1);
  pthread_t threads[THREADS];
  for (int t = 0; t < THREADS; t++) {
    worker_t *w = &run.workers[t];
    w->id = t;
    w->run = &run;
    w->rng = 0x853c49e6748fea9bull * (uint64_t)(t + 1) + (uint64_t)mode;
    if (mode == HBM_MODE_ASYNC)
      w->stream = hbm_stream_create(run.dev);
    pthread_create(&threads[t], NULL, work, w);
  }
  for (int phase = 0; phase < PHASES; phase++) {
    pthread_barrier_wait(&run.phase_done);
    check_against_shadow(&run);
    pthread_barrier_wait(&run.check_done);
  }
  uint64_t done = 0, ooms = 0;
  for (int t = 0; t < THREADS; t++) {
    pthread_join(threads[t], NULL);
    done += run.workers[t].allocs + run.workers[t].frees + run.workers[t].ooms;
    ooms += run.workers[t].ooms;
  }
  assert_true(done == run.ops_per_phase * THREADS * PHASES);
  hbm_stats_t end;
  hbm_get_stats(run.dev, &end);
  print_message("%s: %llu operations from %d threads, %llu OOMs, peak %llu bytes in use, "
                "peak %llu reserved\n",
                hbm_mode_name(mode), (unsigned long long)done, THREADS, (unsigned long long)ooms,
                (unsigned long long)end.peak_bytes_in_use,
                (unsigned long long)end.peak_bytes_reserved);
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < LIVE_PER_THREAD; i++)
      if (run.workers[t].live[i].ptr) {
        assert_true(stamp_intact(&run.workers[t].live[i]));
        assert_int_equal(hbm_free(run.dev, run.workers[t].live[i].ptr), HBM_OK);
      }
  hbm_stats_t st;
  hbm_get_stats(run.dev, &st);
  assert_true(st.bytes_in_use == 0 && st.num_live == 0);
  pthread_barrier_destroy(&run.phase_done);
  pthread_barrier_destroy(&run.check_done);
  hbm_close(run.dev);
}

static void bfc_million_operations(void **state) {
  (void)state;
  uint64_t ops = total_ops(1000000);
  if (!SANITIZED && !getenv("HBM_STRESS_OPS"))
    assert_true(ops >= 1000000);
  stress(HBM_MODE_BFC, ops, 280ull << 20);
}

static void growth_operations(void **state) {
  (void)state;
  stress(HBM_MODE_GROWTH, total_ops(200000), 260ull << 20);
}

static void async_operations(void **state) {
  (void)state;
  stress(HBM_MODE_ASYNC, total_ops(200000), 1ull << 30);
}

static void expandable_operations(void **state) {
  (void)state;
  stress(HBM_MODE_EXPANDABLE, total_ops(100000), 260ull << 20);
}

static void platform_operations(void **state) {
  (void)state;
  stress(HBM_MODE_PLATFORM, total_ops(20000), 200ull << 20);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bfc_million_operations), cmocka_unit_test(growth_operations),
      cmocka_unit_test(async_operations),       cmocka_unit_test(expandable_operations),
      cmocka_unit_test(platform_operations),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
