/* test_alloc_modes.c — the allocator through its public API, mode by mode, on the sim device:
 * bfc preallocates the limit at the first allocation, growth commits memory contiguously —
 * only what a request lacks — and never gives it back, platform takes and returns exactly
 * what is asked, async follows cudaMallocAsync's stream rules and its preallocation
 * variable; every mode respects the limit, hands out memory that reads back what was
 * written, honours alignments, keeps exact statistics, walks its live blocks with their
 * tags, and refuses bad arguments. */
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
#include "alloc_helpers.h"
#include "helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static uint64_t device_free(hbm_device_t *dev) {
  uint64_t total, free_bytes;
  assert_int_equal(hbm_device_memory(dev, &total, &free_bytes), HBM_OK);
  return free_bytes;
}

static const hbm_mode_t host_modes[] = {HBM_MODE_BFC, HBM_MODE_GROWTH, HBM_MODE_PLATFORM,
                                        HBM_MODE_ASYNC};

static void bfc_preallocates_at_first_use(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("tmodes", HBM_MODE_BFC, 64 * MiB, 0.75);
  assert_int_equal(hbm_device_mode(dev), HBM_MODE_BFC);
  assert_int_equal(hbm_device_kind(dev), th_device_kind());
  assert_true(device_free(dev) == 64 * MiB); /* nothing until the first allocation */
  assert_true(th_stats(dev).bytes_reserved == 0);
  void *p = hbm_alloc(dev, 1000, 0);
  assert_non_null(p);
  hbm_stats_t s = th_stats(dev);
  assert_true(s.bytes_limit == 48 * MiB);
  assert_true(s.bytes_reserved == 48 * MiB && s.peak_bytes_reserved == 48 * MiB);
  assert_true(s.bytes_in_use == 1000 && s.peak_bytes_in_use == 1000);
  assert_true(s.largest_free_block == 48 * MiB - 1024);
  assert_true(device_free(dev) == 16 * MiB);
  assert_int_equal(hbm_free(dev, p), HBM_OK);
  s = th_stats(dev);
  assert_true(s.bytes_in_use == 0 && s.peak_bytes_in_use == 1000);
  assert_true(s.bytes_reserved == 48 * MiB); /* never given back */
  assert_true(s.largest_free_block == 48 * MiB);
  assert_int_equal(hbm_trim(dev), HBM_OK);
  assert_true(th_stats(dev).bytes_reserved == 48 * MiB);
  hbm_close(dev);
}

/* Growth commits memory at the end of one address range, exactly what a request lacks in
 * whole 2 MiB granules, so the arena stays one region whose free tail grows; nothing is ever
 * given back. */
static void growth_commits_what_is_lacking(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("tmodes", HBM_MODE_GROWTH, 64 * MiB, 0.5); /* limit 32 MiB */
  void *a = hbm_alloc(dev, 1000, 0);
  assert_non_null(a);
  assert_true(th_stats(dev).bytes_reserved == 2 * MiB);
  void *b = hbm_alloc(dev, 3 * MiB, 0); /* lacks 1 MiB + 1 KiB beyond the free tail */
  assert_non_null(b);
  assert_true(th_stats(dev).bytes_reserved == 4 * MiB);
  assert_true((char *)b == (char *)a + 1024); /* one region: right after a */
  void *c = hbm_alloc(dev, 5 * MiB, 0);       /* lacks 4 MiB + 1 KiB */
  assert_non_null(c);
  assert_true(th_stats(dev).bytes_reserved == 10 * MiB);
  assert_true((char *)c == (char *)b + 3 * MiB);
  assert_true(device_free(dev) == 54 * MiB);
  hbm_free(dev, a);
  hbm_free(dev, b);
  hbm_free(dev, c);
  assert_true(th_stats(dev).bytes_reserved == 10 * MiB); /* kept */
  assert_int_equal(hbm_trim(dev), HBM_OK);
  assert_true(th_stats(dev).bytes_reserved == 10 * MiB); /* even by a trim */
  hbm_stats_t s = th_stats(dev);
  assert_true(s.largest_free_block == 10 * MiB && s.fragmentation == 0.0); /* coalesced */
  void *d = hbm_alloc(dev, 7 * MiB, 0); /* reuses what was freed */
  assert_non_null(d);
  assert_true(th_stats(dev).bytes_reserved == 10 * MiB);
  assert_non_null(hbm_alloc(dev, 10 * MiB, 0)); /* 3 MiB free at the tail: 8 MiB more */
  assert_true(th_stats(dev).bytes_reserved == 18 * MiB);
  assert_non_null(hbm_alloc(dev, 9 * MiB, 0)); /* 1 MiB free at the tail: 8 MiB more */
  assert_true(th_stats(dev).bytes_reserved == 26 * MiB);
  assert_null(hbm_alloc(dev, 8 * MiB, 0)); /* would need 8 MiB more: over the limit */
  assert_int_equal(hbm_last_status(), HBM_ERR_NO_MEMORY);
  assert_non_null(strstr(hbm_last_error(), "may still grow by 6.00MiB"));
  assert_true(th_stats(dev).peak_bytes_reserved == 26 * MiB);
  assert_non_null(hbm_alloc(dev, 6 * MiB, 0)); /* exactly up to the limit */
  assert_true(th_stats(dev).bytes_reserved == 32 * MiB);
  hbm_free(dev, d);
  assert_true(th_stats(dev).bytes_reserved == 32 * MiB);
  hbm_close(dev);
  /* A limit that is not a whole number of granules: its last bytes come as a region. */
  dev = th_open_sim("tmodes", HBM_MODE_GROWTH, 41 * MiB, 0.5); /* limit 20.5 MiB */
  assert_non_null(hbm_alloc(dev, 20 * MiB, 0));
  assert_true(th_stats(dev).bytes_reserved == 20 * MiB);
  void *g = hbm_alloc(dev, 300 * KiB, 0);
  assert_non_null(g);
  assert_true(th_stats(dev).bytes_reserved == 20 * MiB + 300 * KiB);
  memset(g, 0x5a, 300 * KiB);
  assert_null(hbm_alloc(dev, 300 * KiB, 0));
  hbm_close(dev);
}

static void platform_is_exact_and_returns(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("tmodes", HBM_MODE_PLATFORM, 64 * MiB, 0.5);
  void *p = hbm_alloc(dev, 1000, 0);
  assert_non_null(p);
  assert_true(th_stats(dev).bytes_reserved == 1024);
  assert_true(device_free(dev) == 64 * MiB - 1024);
  void *q = hbm_alloc(dev, 10 * MiB, 0);
  assert_true(th_stats(dev).bytes_reserved == 10 * MiB + 1024);
  hbm_free(dev, p);
  assert_true(th_stats(dev).bytes_reserved == 10 * MiB);
  assert_true(device_free(dev) == 54 * MiB);
  hbm_free(dev, q);
  hbm_stats_t s = th_stats(dev);
  assert_true(s.bytes_reserved == 0 && s.peak_bytes_reserved == 10 * MiB + 1024);
  assert_true(device_free(dev) == 64 * MiB);
  /* The limit holds: 32 MiB of a 64 MiB device. */
  void *big = hbm_alloc(dev, 30 * MiB, 0);
  assert_non_null(big);
  assert_null(hbm_alloc(dev, 3 * MiB, 0));
  hbm_close(dev);
}

/* cudaMallocAsync's rules: a block freed on a stream is reused at once by that stream,
 * by others only after it synchronized. */
static void async_follows_stream_order(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("tmodes", HBM_MODE_ASYNC, 64 * MiB, 0.5);
  /* On CUDA the driver's pool decides sizes and addresses (it promises none): there, what
   * hbm's own pool does exactly is not checked, only what any pool must do. */
  bool own_pool = th_device_kind() == HBM_DEVICE_SIM;
  hbm_stream_t *s1 = hbm_stream_create(dev), *s2 = hbm_stream_create(dev);
  assert_non_null(s1);
  assert_non_null(s2);
  void *a = hbm_alloc_async(dev, MiB, s1);
  assert_non_null(a);
  if (own_pool)
    assert_true(th_stats(dev).bytes_reserved == 2 * MiB); /* the pool grew by a segment */
  assert_int_equal(hbm_free_async(dev, a, s1), HBM_OK);
  void *b = hbm_alloc_async(dev, MiB, s1);
  if (own_pool)
    assert_ptr_equal(b, a); /* same stream: reused at once */
  assert_int_equal(hbm_free_async(dev, b, s1), HBM_OK);
  assert_true(th_stats(dev).bytes_in_use == 0);
  void *c = hbm_alloc_async(dev, MiB, s2);
  assert_non_null(c);
  assert_ptr_not_equal(c, b); /* other stream: not before s1 synchronizes */
  void *c2 = hbm_alloc_async(dev, MiB, s2);
  assert_non_null(c2);
  if (own_pool)
    if (own_pool)
      assert_true(th_stats(dev).bytes_reserved == 6 * MiB); /* so the pool had to grow */
  assert_int_equal(hbm_stream_synchronize(dev, s1), HBM_OK);
  void *d = hbm_alloc_async(dev, MiB, s2);
  if (own_pool)
    assert_ptr_equal(d, b); /* now it may */
  if (own_pool)
    assert_true(th_stats(dev).bytes_reserved == 6 * MiB);
  /* A stream reuses part of a bigger block it freed; the rest stays its own. */
  assert_int_equal(hbm_free_async(dev, c2, s2), HBM_OK);
  void *e = hbm_alloc_async(dev, 256 * KiB, s2);
  if (own_pool)
    assert_ptr_equal(e, c2);
  void *f = hbm_alloc_async(dev, 512 * KiB, s2);
  if (own_pool)
    assert_ptr_equal(f, (char *)c2 + 256 * KiB);
  /* A plain hbm_free is synchronous: reusable by every stream. */
  assert_int_equal(hbm_free(dev, c), HBM_OK);
  void *g = hbm_alloc_async(dev, MiB, s1);
  if (own_pool)
    assert_ptr_equal(g, c);
  /* Destroying a stream releases what waited on it. */
  assert_int_equal(hbm_free_async(dev, g, s1), HBM_OK);
  assert_true(th_stats(dev).bytes_in_use == 256 * KiB + 512 * KiB + MiB);
  assert_int_equal(hbm_stream_destroy(dev, s1), HBM_OK);
  void *h = hbm_alloc_async(dev, MiB, s2);
  if (own_pool)
    assert_ptr_equal(h, g);
  /* The default stream (NULL) is a stream too. */
  void *i = hbm_alloc_async(dev, 100, NULL);
  assert_non_null(i);
  assert_int_equal(hbm_free_async(dev, i, NULL), HBM_OK);
  assert_int_equal(hbm_stream_synchronize(dev, NULL), HBM_OK);
  /* A stream of another device is refused. */
  hbm_device_t *other = th_open_sim("tmodes", HBM_MODE_ASYNC, 64 * MiB, 0.5);
  assert_null(hbm_alloc_async(other, 100, s2));
  assert_int_equal(hbm_last_status(), HBM_ERR_INVALID);
  assert_int_equal(hbm_free_async(other, h, s2), HBM_ERR_INVALID);
  hbm_close(other);
  hbm_close(dev); /* destroys s2 */
}

static void async_preallocation_and_trim(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("tmodes", HBM_MODE_ASYNC, 64 * MiB, 0.5);
  cfg.async_prealloc = 8 * MiB;
  bool own_pool = th_device_kind() == HBM_DEVICE_SIM; /* as above */
  hbm_device_t *dev = hbm_open(&cfg);
  assert_non_null(dev);
  assert_true(th_stats(dev).bytes_reserved == 0);
  void *p = hbm_alloc(dev, 1000, 0);
  if (own_pool)
    if (own_pool)
      assert_true(th_stats(dev).bytes_reserved == 8 * MiB);
  void *q = hbm_alloc(dev, 7 * MiB, 0); /* still inside the preallocation */
  if (own_pool)
    if (own_pool)
      assert_true(th_stats(dev).bytes_reserved == 8 * MiB);
  void *r = hbm_alloc(dev, 3 * MiB, 0); /* grows */
  assert_true(th_stats(dev).bytes_reserved > 8 * MiB);
  hbm_free(dev, p);
  hbm_free(dev, q);
  hbm_free(dev, r);
  assert_true(device_free(dev) < 64 * MiB); /* the pool keeps what it grew to */
  assert_int_equal(hbm_trim(dev), HBM_OK);
  assert_true(th_stats(dev).bytes_reserved == 0);
  assert_true(device_free(dev) == 64 * MiB);
  hbm_close(dev);
  /* -1: the default amount, which is the limit. */
  cfg = th_sim_config("tmodes", HBM_MODE_ASYNC, 64 * MiB, 0.5);
  cfg.async_prealloc = -1;
  dev = hbm_open(&cfg);
  assert_non_null(hbm_alloc(dev, 1000, 0));
  assert_true(th_stats(dev).bytes_reserved == 32 * MiB);
  assert_true(device_free(dev) == 32 * MiB);
  hbm_close(dev);
  /* More than the limit is capped at the limit. */
  cfg = th_sim_config("tmodes", HBM_MODE_ASYNC, 64 * MiB, 0.5);
  cfg.async_prealloc = 1ll << 40;
  dev = hbm_open(&cfg);
  assert_non_null(hbm_alloc(dev, 1000, 0));
  assert_true(th_stats(dev).bytes_reserved == 32 * MiB);
  hbm_close(dev);
}

static void expandable_mode_is_reached(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("tmodes", HBM_MODE_EXPANDABLE, 64 * MiB, 0.5);
  hbm_device_t *dev = hbm_open(&cfg);
  if (!dev) { /* until src/alloc/expandable.c is built */
    assert_int_equal(hbm_last_status(), HBM_ERR_UNAVAILABLE);
    assert_non_null(strstr(hbm_last_error(), "expandable mode is not built yet"));
    return;
  }
  assert_int_equal(hbm_device_mode(dev), HBM_MODE_EXPANDABLE);
  void *p = hbm_alloc(dev, 5 * MiB, 0);
  assert_non_null(p);
  memset(p, 1, 5 * MiB);
  hbm_free(dev, p);
  hbm_close(dev);
}

/* Memory handed out is real: what is written reads back, through other allocations and
 * frees around it, in every mode. */
static void data_reads_back(void **state) {
  (void)state;
  for (size_t m = 0; m < HBM_ARRAY_LEN(host_modes); m++) {
    hbm_device_t *dev = th_open_sim("tmodes", host_modes[m], 256 * MiB, 0.75);
    enum { N = 64 };
    void *blocks[N];
    size_t sizes[N];
    for (int i = 0; i < N; i++) {
      sizes[i] = (size_t)(1 + (i * 7919) % 200) * 1024 + (size_t)i * 4;
      blocks[i] = hbm_alloc(dev, sizes[i], 0);
      assert_non_null(blocks[i]);
      th_fill(blocks[i], sizes[i], (uint32_t)i);
    }
    for (int i = 0; i < N; i += 2) {
      hbm_free(dev, blocks[i]);
      blocks[i] = hbm_alloc(dev, sizes[i] / 2 + 256, 0);
      sizes[i] = sizes[i] / 2 + 256;
      th_fill(blocks[i], sizes[i], (uint32_t)i + 1000);
    }
    for (int i = 0; i < N; i++)
      if (!th_intact(blocks[i], sizes[i], (uint32_t)i + (i % 2 ? 0 : 1000)))
        fail_msg("mode %s: block %d lost its data", hbm_mode_name(host_modes[m]), i);
    hbm_close(dev);
  }
}

static void alignment_is_honoured(void **state) {
  (void)state;
  size_t alignments[] = {0, 1, 64, 256, 512, 4096, 65536, MiB, 4 * MiB};
  for (size_t m = 0; m < HBM_ARRAY_LEN(host_modes); m++) {
    hbm_device_t *dev = th_open_sim("tmodes", host_modes[m], 256 * MiB, 0.75);
    for (size_t i = 0; i < HBM_ARRAY_LEN(alignments); i++) {
      void *filler = hbm_alloc(dev, 300, 0); /* so the next block does not start aligned */
      void *p = hbm_alloc(dev, 1000, alignments[i]);
      assert_non_null(p);
      size_t want = alignments[i] < 256 ? 256 : alignments[i];
      if ((uintptr_t)p % want)
        fail_msg("mode %s: %p not aligned to %zu", hbm_mode_name(host_modes[m]), p, want);
      memset(p, 0x3c, 1000);
      assert_true(hbm_block_size(dev, p) == 1000);
      hbm_free(dev, filler);
    }
    assert_null(hbm_alloc(dev, 1000, 3000));
    assert_int_equal(hbm_last_status(), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(), "power of two"));
    assert_null(hbm_alloc(dev, 1000, 3)); /* below 256: the fast path must refuse it too */
    assert_int_equal(hbm_last_status(), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(), "power of two"));
    assert_null(hbm_alloc(dev, 1000, 2ull << 30));
    assert_int_equal(hbm_last_status(), HBM_ERR_INVALID);
    hbm_close(dev);
  }
}

static void bad_arguments_are_refused(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("tmodes", HBM_MODE_BFC, 64 * MiB, 0.75);
  assert_null(hbm_alloc(dev, 0, 0));
  assert_int_equal(hbm_last_status(), HBM_ERR_INVALID);
  assert_null(hbm_alloc(NULL, 10, 0));
  assert_int_equal(hbm_free(dev, NULL), HBM_OK);
  int on_stack;
  assert_int_equal(hbm_free(dev, &on_stack), HBM_ERR_NOT_FOUND);
  assert_non_null(strstr(hbm_last_error(), "not a live block"));
  void *p = hbm_alloc(dev, 10, 0);
  assert_true(hbm_block_size(dev, p) == 10);
  assert_int_equal(hbm_free(dev, p), HBM_OK);
  assert_int_equal(hbm_free(dev, p), HBM_ERR_NOT_FOUND); /* double free */
  assert_true(hbm_block_size(dev, p) == 0);
  assert_true(hbm_block_size(dev, NULL) == 0);
  assert_int_equal(hbm_get_stats(dev, NULL), HBM_ERR_INVALID);
  assert_int_equal(hbm_walk(dev, NULL, NULL), HBM_ERR_INVALID);
  /* An absurd size is an OOM, not a crash. */
  assert_null(hbm_alloc(dev, SIZE_MAX, 0));
  assert_int_equal(hbm_last_status(), HBM_ERR_NO_MEMORY);
  assert_null(hbm_alloc(dev, SIZE_MAX - 100, 4096));
  assert_int_equal(hbm_last_status(), HBM_ERR_NO_MEMORY);
  hbm_stats_t s = th_stats(dev);
  assert_true(s.num_ooms == 2 && s.num_allocs == 1 && s.num_frees == 1 && s.num_live == 0);
  hbm_close(dev);
  hbm_close(NULL);
}

/* Statistics are exact: sums of requested sizes; fragmentation = 1 - largest / free. */
static void statistics_are_exact(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("tmodes", HBM_MODE_BFC, 16 * MiB, 1.0);
  void *blocks[16];
  for (int i = 0; i < 16; i++)
    blocks[i] = hbm_alloc(dev, MiB - 100 * (uint64_t)i, 0);
  hbm_stats_t s = th_stats(dev);
  uint64_t sum = 0;
  for (int i = 0; i < 16; i++)
    sum += MiB - 100 * (uint64_t)i;
  assert_true(s.bytes_in_use == sum && s.peak_bytes_in_use == sum);
  assert_true(s.num_allocs == 16 && s.num_live == 16);
  for (int i = 0; i < 16; i += 2)
    hbm_free(dev, blocks[i]);
  s = th_stats(dev);
  assert_true(s.num_frees == 8 && s.num_live == 8 && s.peak_bytes_in_use == sum);
  uint64_t live = 0;
  for (int i = 1; i < 16; i += 2)
    live += MiB - 100 * (uint64_t)i;
  assert_true(s.bytes_in_use == live);
  /* Eight holes of about 1 MiB each plus the tail: far from one block. */
  assert_true(s.largest_free_block < 2 * MiB);
  uint64_t free_bytes = s.bytes_reserved - 0;
  for (int i = 1; i < 16; i += 2)
    free_bytes -= hbm__round_up(MiB - 100 * (uint64_t)i, 256);
  double expect = 1.0 - (double)s.largest_free_block / (double)free_bytes;
  assert_true(s.fragmentation > expect - 1e-9 && s.fragmentation < expect + 1e-9);
  assert_true(s.fragmentation > 0.8);
  for (int i = 1; i < 16; i += 2)
    hbm_free(dev, blocks[i]);
  s = th_stats(dev);
  assert_true(s.fragmentation == 0.0 && s.largest_free_block == 16 * MiB);
  hbm_close(dev);
}

typedef struct walked {
  const void *ptr[8];
  size_t size[8];
  const char *op[8];
  int category[8];
  int n;
  int stop_after;
} walked_t;

static int collect(const hbm_block_info_t *b, void *ctx) {
  walked_t *w = ctx;
  w->ptr[w->n] = b->ptr;
  w->size[w->n] = b->size;
  w->op[w->n] = b->op;
  w->category[w->n] = b->category;
  w->n++;
  return w->n == w->stop_after;
}

static void walk_lists_live_blocks_with_tags(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("tmodes", HBM_MODE_BFC, 64 * MiB, 0.75);
  char op[32];
  snprintf(op, sizeof op, "dot.3");
  hbm_tag_t tag = {op, "f32[64,64]", HBM_CAT_PARAMETER, "params", "model.c:1"};
  void *a = hbm_alloc_tagged(dev, 16384, 0, &tag);
  op[0] = 'X'; /* the device keeps its own copy */
  void *b = hbm_alloc(dev, 5000, 0);
  void *c = hbm_alloc(dev, 700, 0);
  hbm_free(dev, b);
  walked_t w = {.stop_after = 8};
  assert_int_equal(hbm_walk(dev, collect, &w), HBM_OK);
  assert_int_equal(w.n, 2);
  assert_true(w.ptr[0] < w.ptr[1]); /* address order */
  const int ia = w.ptr[0] == a ? 0 : 1;
  assert_ptr_equal(w.ptr[1 - ia], c);
  assert_string_equal(w.op[ia], "dot.3");
  assert_int_equal(w.category[ia], HBM_CAT_PARAMETER);
  assert_null(w.op[1 - ia]);
  assert_true(w.size[1 - ia] == 700);
  walked_t first = {.stop_after = 1};
  assert_int_equal(hbm_walk(dev, collect, &first), HBM_OK);
  assert_int_equal(first.n, 1);
  hbm_close(dev);
}

typedef struct one_tag {
  const char *op, *shape, *group, *source;
  int category;
} one_tag_t;

static int take_tag(const hbm_block_info_t *b, void *ctx) {
  one_tag_t *t = ctx;
  *t = (one_tag_t){b->op, b->shape, b->group, b->source, b->category};
  return 1;
}

static one_tag_t tag_of(hbm_device_t *dev, void *p) {
  (void)p;
  one_tag_t t = {0};
  assert_int_equal(hbm_walk(dev, take_tag, &t), HBM_OK);
  hbm_free(dev, p);
  return t;
}

static void *thread_allocates(void *arg) { return hbm_alloc((hbm_device_t *)arg, 1000, 0); }

/* Annotation scopes tag what this thread allocates; inner scopes and explicit tags win
 * field by field; other threads are not affected. */
static void annotations_scope_tags(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("tmodes", HBM_MODE_BFC, 64 * MiB, 0.75);
  char group[32] = "activations";
  hbm_tag_t outer = {
      .op = "forward", .category = HBM_CAT_TEMPORARY, .group = group, .source = "model.c:10"};
  assert_int_equal(hbm_annotate_push(&outer), HBM_OK);
  strcpy(group, "overwritten"); /* strings were copied */
  one_tag_t t = tag_of(dev, hbm_alloc(dev, 100, 0));
  assert_string_equal(t.op, "forward");
  assert_string_equal(t.group, "activations");
  assert_int_equal(t.category, HBM_CAT_TEMPORARY);
  hbm_tag_t inner = {.op = "forward/dense_1", .shape = "bf16[8,8]"};
  assert_int_equal(hbm_annotate_push(&inner), HBM_OK);
  t = tag_of(dev, hbm_alloc(dev, 100, 0));
  assert_string_equal(t.op, "forward/dense_1");
  assert_string_equal(t.shape, "bf16[8,8]");
  assert_string_equal(t.group, "activations"); /* inherited */
  assert_string_equal(t.source, "model.c:10");
  hbm_tag_t explicit_tag = {.shape = "f32[2]", .category = HBM_CAT_OUTPUT};
  t = tag_of(dev, hbm_alloc_tagged(dev, 100, 0, &explicit_tag));
  assert_string_equal(t.op, "forward/dense_1");
  assert_string_equal(t.shape, "f32[2]");
  assert_int_equal(t.category, HBM_CAT_OUTPUT);
  /* Another thread has no scope. */
  pthread_t th;
  void *from_thread = NULL;
  pthread_create(&th, NULL, thread_allocates, dev);
  pthread_join(th, &from_thread);
  t = tag_of(dev, from_thread);
  assert_null(t.op);
  assert_int_equal(t.category, HBM_CAT_UNKNOWN);
  hbm_annotate_pop();
  t = tag_of(dev, hbm_alloc(dev, 100, 0));
  assert_string_equal(t.op, "forward");
  assert_null(t.shape);
  hbm_annotate_pop();
  hbm_annotate_pop(); /* one too many: ignored */
  t = tag_of(dev, hbm_alloc(dev, 100, 0));
  assert_null(t.op);
  hbm_tag_t bad = {.category = (hbm_category_t)99};
  assert_int_equal(hbm_annotate_push(&bad), HBM_ERR_INVALID);
  assert_null(hbm_alloc_tagged(dev, 100, 0, &bad));
  assert_int_equal(hbm_annotate_push(NULL), HBM_ERR_INVALID);
  hbm_close(dev);
}

/* Every mode stays within its limit, whatever is asked. */
static void every_mode_respects_the_limit(void **state) {
  (void)state;
  for (size_t m = 0; m < HBM_ARRAY_LEN(host_modes); m++) {
    hbm_device_t *dev = th_open_sim("tmodes", host_modes[m], 64 * MiB, 0.25);
    uint64_t got = 0;
    void *blocks[256];
    int n = 0;
    while (n < 256) {
      void *p = hbm_alloc(dev, 700 * KiB, 0);
      if (!p)
        break;
      blocks[n++] = p;
      got += 700 * KiB;
    }
    assert_int_equal(hbm_last_status(), HBM_ERR_NO_MEMORY);
    hbm_stats_t s = th_stats(dev);
    assert_true(s.bytes_in_use == got);
    assert_true(s.bytes_reserved <= 16 * MiB && s.peak_bytes_reserved <= 16 * MiB);
    assert_true(got > 12 * MiB); /* and it used most of it */
    assert_true(device_free(dev) >= 48 * MiB);
    (void)blocks;
    hbm_close(dev);
  }
}

/* Closing a device with live blocks gives everything back and removes the ledger. */
static void close_releases_everything(void **state) {
  (void)state;
  for (size_t m = 0; m < HBM_ARRAY_LEN(host_modes); m++) {
    hbm_config_t cfg = th_sim_config("tmodes", host_modes[m], 64 * MiB, 0.5);
    hbm_device_t *dev = hbm_open(&cfg);
    hbm_device_t *watcher = hbm_open(&cfg);
    for (int i = 0; i < 10; i++)
      assert_non_null(hbm_alloc(dev, 100 * KiB, 0));
    assert_true(device_free(watcher) < 64 * MiB);
    hbm_close(dev);
    assert_true(device_free(watcher) == 64 * MiB);
    hbm_close(watcher);
    char shm[128], path[256];
    hbm__ledger_shm_name(cfg.sim_name, shm, sizeof shm);
    snprintf(path, sizeof path, "/dev/shm%s", shm);
    assert_int_not_equal(access(path, F_OK), 0);
  }
}

/* The variables choose the mode and the limit for hbm_open(NULL). */
static void environment_picks_mode_and_limit(void **state) {
  (void)state;
  struct {
    const char *var, *value;
    hbm_mode_t mode;
  } cases[] = {{"XLA_PYTHON_CLIENT_PREALLOCATE", "true", HBM_MODE_BFC},
               {"XLA_PYTHON_CLIENT_PREALLOCATE", "false", HBM_MODE_GROWTH},
               {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform", HBM_MODE_PLATFORM},
               {"XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async", HBM_MODE_ASYNC},
               {"TF_GPU_ALLOCATOR", "cuda_malloc_async", HBM_MODE_ASYNC}};
  char name[64];
  snprintf(name, sizeof name, "tmodes-env-%d", (int)getpid());
  setenv("HBM_DEVICE", "sim", 1);
  setenv("HBM_SIM_NAME", name, 1);
  setenv("HBM_SIM_MEMORY", "128MiB", 1);
  setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", ".5", 1);
  for (size_t i = 0; i < HBM_ARRAY_LEN(cases); i++) {
    setenv(cases[i].var, cases[i].value, 1);
    hbm_device_t *dev = hbm_open(NULL);
    assert_non_null(dev);
    assert_int_equal(hbm_device_mode(dev), cases[i].mode);
    assert_true(th_stats(dev).bytes_limit == 64 * MiB);
    assert_string_equal(hbm_device_name(dev), name);
    assert_string_equal(hbm_device_note(dev), "");
    void *p = hbm_alloc(dev, 1000, 0);
    assert_non_null(p);
    assert_true(th_stats(dev).bytes_reserved == (cases[i].mode == HBM_MODE_BFC        ? 64 * MiB
                                                 : cases[i].mode == HBM_MODE_PLATFORM ? 1024
                                                                                      : 2 * MiB));
    hbm_close(dev);
    unsetenv(cases[i].var);
  }
  setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async", 1);
  setenv("TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", "16MiB", 1);
  hbm_device_t *dev = hbm_open(NULL);
  assert_non_null(hbm_alloc(dev, 1000, 0));
  assert_true(th_stats(dev).bytes_reserved == 16 * MiB);
  assert_string_equal(hbm_device_config(dev)->sim_name, name);
  hbm_close(dev);
  const char *vars[] = {"HBM_DEVICE",       "HBM_SIM_NAME",
                        "HBM_SIM_MEMORY",   "XLA_PYTHON_CLIENT_MEM_FRACTION",
                        "TF_GPU_ALLOCATOR", "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC"};
  for (size_t i = 0; i < HBM_ARRAY_LEN(vars); i++)
    unsetenv(vars[i]);
}

/* ---- the async strategy over a device with a native pool (as on CUDA), mocked ---- */

typedef struct mock_pool {
  uint64_t reserved, used, threshold;
  int allocs, frees, trims;
  hbm_u64map_t sizes;
} mock_pool_t;

static hbm_status_t mock_pool_create(hbm__device_t *d, uint64_t threshold, void **pool) {
  (void)d;
  mock_pool_t *p = calloc(1, sizeof *p);
  p->threshold = threshold;
  hbm_u64map_init(&p->sizes);
  *pool = p;
  return HBM_OK;
}

static void mock_pool_destroy(hbm__device_t *d, void *pool) {
  (void)d;
  mock_pool_t *p = pool;
  assert_true(p->used == 0); /* everything was freed first */
  hbm_u64map_free(&p->sizes);
  free(p);
}

static hbm_status_t mock_pool_alloc(hbm__device_t *d, void *pool, uint64_t size, void *stream,
                                    void **out) {
  (void)d, (void)stream;
  mock_pool_t *p = pool;
  if (p->used + size > 8 * MiB)
    return hbm__error(HBM_ERR_NO_MEMORY, "mock pool: out of memory");
  void *mem = aligned_alloc(256, (size_t)size);
  hbm_u64map_put(&p->sizes, (uint64_t)(uintptr_t)mem, size);
  p->used += size;
  if (p->used > p->reserved)
    p->reserved = p->used;
  p->allocs++;
  *out = mem;
  return HBM_OK;
}

static hbm_status_t mock_pool_free(hbm__device_t *d, void *pool, void *ptr, void *stream) {
  (void)d, (void)stream;
  mock_pool_t *p = pool;
  uint64_t size;
  assert_true(hbm_u64map_remove(&p->sizes, (uint64_t)(uintptr_t)ptr, &size));
  p->used -= size;
  p->frees++;
  free(ptr);
  return HBM_OK;
}

static hbm_status_t mock_pool_trim(hbm__device_t *d, void *pool, uint64_t keep) {
  (void)d;
  mock_pool_t *p = pool;
  p->reserved = p->used > keep ? p->used : keep;
  p->trims++;
  return HBM_OK;
}

static hbm_status_t mock_pool_usage(hbm__device_t *d, void *pool, uint64_t *reserved,
                                    uint64_t *used) {
  (void)d;
  *reserved = ((mock_pool_t *)pool)->reserved;
  *used = ((mock_pool_t *)pool)->used;
  return HBM_OK;
}

static void async_over_a_native_pool(void **state) {
  (void)state;
  hbm_config_t cfg = th_sim_config("tmodes", HBM_MODE_ASYNC, 64 * MiB, 0.5);
  hbm__device_t *sim = NULL;
  assert_int_equal(hbm__sim_open(&cfg, &sim), HBM_OK);
  hbm__device_ops_t ops = *sim->ops;
  ops.pool_create = mock_pool_create;
  ops.pool_destroy = mock_pool_destroy;
  ops.pool_alloc = mock_pool_alloc;
  ops.pool_free = mock_pool_free;
  ops.pool_trim = mock_pool_trim;
  ops.pool_usage = mock_pool_usage;
  const hbm__device_ops_t *sim_ops = sim->ops;
  sim->ops = &ops;
  cfg.async_prealloc = 2 * MiB;
  hbm__strategy_env_t env = {.device = sim, .cfg = &cfg, .limit = 4 * MiB};
  hbm__strategy_t *s = NULL;
  assert_int_equal(hbm__async_create(&env, &s), HBM_OK);
  hbm__block_t a, b;
  hbm__failure_t why = {0};
  assert_int_equal(s->ops->alloc(s, 1000, 256, NULL, &a, &why), HBM_OK);
  assert_true(a.allocated == 1024 && a.addr % 256 == 0);
  assert_int_equal(s->ops->alloc(s, 1000, 65536, NULL, &b, &why), HBM_OK);
  assert_true(b.addr % 65536 == 0); /* alignment beyond the driver's, by slack */
  memset((void *)(uintptr_t)b.addr, 1, 1000);
  hbm__strategy_stats_t st;
  s->ops->stats(s, &st);
  assert_true(st.allocated == a.allocated + b.allocated);
  assert_true(st.reserved >= 2 * MiB); /* the preallocation went through the pool */
  /* The limit is ours to keep, not the pool's. */
  hbm__block_t c;
  assert_int_equal(s->ops->alloc(s, 4 * MiB, 256, NULL, &c, &why), HBM_ERR_NO_MEMORY);
  assert_int_equal(why.kind, HBM__FAIL_LIMIT);
  s->ops->free(s, &b, NULL, true);
  s->ops->free(s, &a, NULL, false);
  assert_int_equal(s->ops->trim(s), HBM_OK);
  assert_int_equal(s->ops->alloc(s, 3000, 256, NULL, &c, &why), HBM_OK);
  s->ops->destroy(s); /* frees c through the pool, then destroys it */
  sim->ops = sim_ops;
  hbm__device_close(sim);
}

/* HBM_PROFILE_DIR starts a capture when the device opens (when the profiler is built). */
static void profile_dir_starts_a_capture(void **state) {
  (void)state;
  char *dir = th_mkdtemp("alloc-profile");
  hbm_config_t cfg = th_sim_config("tmodes", HBM_MODE_BFC, 64 * MiB, 0.5);
  snprintf(cfg.profile_dir, sizeof cfg.profile_dir, "%s", dir);
  hbm_device_t *dev = hbm_open(&cfg);
  assert_non_null(dev);
  const char *path = hbm_profiler_path();
  assert_non_null(path); /* the profile directory in the config starts the profiler */
  assert_true(strncmp(path, dir, strlen(dir)) == 0);
  hbm_free(dev, hbm_alloc(dev, 1000, 0));
  hbm_close(dev);
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  th_rmtree(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bfc_preallocates_at_first_use),
      cmocka_unit_test(growth_commits_what_is_lacking),
      cmocka_unit_test(platform_is_exact_and_returns),
      cmocka_unit_test(async_follows_stream_order),
      cmocka_unit_test(async_preallocation_and_trim),
      cmocka_unit_test(expandable_mode_is_reached),
      cmocka_unit_test(data_reads_back),
      cmocka_unit_test(alignment_is_honoured),
      cmocka_unit_test(bad_arguments_are_refused),
      cmocka_unit_test(statistics_are_exact),
      cmocka_unit_test(walk_lists_live_blocks_with_tags),
      cmocka_unit_test(annotations_scope_tags),
      cmocka_unit_test(every_mode_respects_the_limit),
      cmocka_unit_test(close_releases_everything),
      cmocka_unit_test(environment_picks_mode_and_limit),
      cmocka_unit_test(async_over_a_native_pool),
      cmocka_unit_test(profile_dir_starts_a_capture),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
