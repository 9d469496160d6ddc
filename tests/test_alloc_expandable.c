/* test_alloc_expandable.c — expandable mode (HBM_EXPANDABLE=1) on the sim device, where its
 * granules are real: pages of a memfd mapped into one reserved range. What is written into
 * blocks survives every remapping around them (other blocks freed, granules unmapped by
 * hbm_trim, new ones mapped); mapped memory follows the granules live blocks cover and goes
 * back to the device after a peak; the limit bounds mapped memory; and a request that a
 * preallocated arena refuses for fragmentation is served here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "alloc_helpers.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

/* Whether granules mapped together are unmapped only together (CUDA, and the sim device
 * under HBM_SIM_VM_GRANULES=whole): then a block's new granules are one run, given back
 * when none of them is used any more. */
static bool whole_runs(void) {
  const char *v = getenv("HBM_SIM_VM_GRANULES");
  return th_device_kind() == HBM_DEVICE_CUDA || (v && !strcmp(v, "whole"));
}

static uint64_t device_free(hbm_device_t *dev) {
  uint64_t total, free_bytes;
  assert_int_equal(hbm_device_memory(dev, &total, &free_bytes), HBM_OK);
  return free_bytes;
}

/* Mapped memory is the granules that live blocks cover; a free granule stays mapped (for
 * reuse) until hbm_trim, and is then given back to the device; with whole runs, only once
 * its run (the granules mapped with it) is free. */
static void granules_follow_blocks(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("texp", HBM_MODE_EXPANDABLE, 64 * MiB, 0.5);
  assert_true(th_stats(dev).bytes_reserved == 0);
  void *a = hbm_alloc(dev, 3 * MiB, 0); /* granules 0 and 1 */
  assert_non_null(a);
  assert_true(th_stats(dev).bytes_reserved == 4 * MiB);
  assert_true(device_free(dev) == 60 * MiB);
  void *b = hbm_alloc(dev, MiB, 0); /* right after a: granule 1 */
  assert_true((char *)b == (char *)a + 3 * MiB);
  assert_true(th_stats(dev).bytes_reserved == 4 * MiB);
  assert_int_equal(hbm_free(dev, a), HBM_OK); /* granule 0 is free, granule 1 still used */
  assert_int_equal(hbm_trim(dev), HBM_OK);
  /* whole runs: a mapped granules 0 and 1 as one run, which b still uses */
  uint64_t kept = whole_runs() ? 4 * MiB : 2 * MiB;
  assert_true(th_stats(dev).bytes_reserved == kept);
  assert_true(device_free(dev) == 64 * MiB - kept);
  assert_int_equal(hbm_free(dev, b), HBM_OK);
  assert_int_equal(hbm_trim(dev), HBM_OK);
  hbm_stats_t s = th_stats(dev);
  assert_true(s.bytes_reserved == 0 && s.peak_bytes_reserved == 4 * MiB);
  assert_true(device_free(dev) == 64 * MiB);
  hbm_close(dev);
}

/* Patterns written into blocks read back after blocks around them were freed, their granules
 * unmapped, and new blocks mapped in between, several times over. */
static void data_survives_remapping(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("texp", HBM_MODE_EXPANDABLE, 256 * MiB, 0.5);
  enum { N = 48 };
  void *blocks[N];
  size_t sizes[N];
  uint32_t seeds[N];
  for (int i = 0; i < N; i++) {
    /* small blocks sharing granules, and blocks of several granules */
    sizes[i] = i % 3 ? (size_t)(1 + i * 37 % 500) * KiB : (size_t)(1 + i % 5) * MiB + 4096;
    seeds[i] = (uint32_t)i * 7919u;
    blocks[i] = hbm_alloc(dev, sizes[i], 0);
    assert_non_null(blocks[i]);
    th_fill(blocks[i], sizes[i], seeds[i]);
  }
  for (int round = 1; round <= 4; round++) {
    for (int i = round % 2; i < N; i += 2) { /* free half, trim, allocate anew */
      assert_int_equal(hbm_free(dev, blocks[i]), HBM_OK);
      blocks[i] = NULL;
    }
    assert_int_equal(hbm_trim(dev), HBM_OK);
    for (int i = 0; i < N; i++)
      if (blocks[i] && !th_intact(blocks[i], sizes[i], seeds[i]))
        fail_msg("round %d: block %d (%zu bytes) lost its data", round, i, sizes[i]);
    for (int i = round % 2; i < N; i += 2) {
      sizes[i] = (size_t)(round * 311 + i * 1009) % (3 * MiB) + 256;
      seeds[i] = (uint32_t)(round * 100003 + i);
      blocks[i] = hbm_alloc(dev, sizes[i], 0);
      assert_non_null(blocks[i]);
      th_fill(blocks[i], sizes[i], seeds[i]);
    }
  }
  for (int i = 0; i < N; i++)
    if (!th_intact(blocks[i], sizes[i], seeds[i]))
      fail_msg("block %d (%zu bytes) lost its data", i, sizes[i]);
  hbm_close(dev);
}

/* After a peak, what was mapped goes back: beyond a small cache (32 MiB) once the freed
 * granules are no longer recent (65536 operations later: src/alloc/expandable.c's
 * RECENT_OPS), all of it on trim; and the cache never holds more than the peak had. */
static void memory_goes_back_after_a_peak(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("texp", HBM_MODE_EXPANDABLE, 512 * MiB, 0.5);
  void *blocks[20];
  for (int i = 0; i < 20; i++) {
    blocks[i] = hbm_alloc(dev, 10 * MiB, 0);
    assert_non_null(blocks[i]);
    memset(blocks[i], i, 10 * MiB);
  }
  hbm_stats_t s = th_stats(dev);
  assert_true(s.bytes_in_use == 200 * MiB);
  assert_true(s.bytes_reserved >= 200 * MiB && s.bytes_reserved <= 204 * MiB);
  for (int i = 0; i < 20; i++)
    hbm_free(dev, blocks[i]);
  s = th_stats(dev);
  assert_true(s.peak_bytes_reserved >= 200 * MiB && s.peak_bytes_reserved <= 204 * MiB);
  assert_true(s.bytes_reserved <= s.peak_bytes_reserved); /* recently freed: still mapped */
  for (int i = 0; i < 65536 / 2; i++)                     /* 65536 operations later */
    assert_int_equal(hbm_free(dev, hbm_alloc(dev, 256, 0)), HBM_OK);
  s = th_stats(dev);
  assert_true(s.bytes_reserved <= 32 * MiB); /* only the cache of free granules */
  assert_true(device_free(dev) >= 480 * MiB);
  assert_int_equal(hbm_trim(dev), HBM_OK);
  assert_true(th_stats(dev).bytes_reserved == 0);
  assert_true(device_free(dev) == 512 * MiB);
  hbm_close(dev);
}

/* The cache of freed granules may keep mapped memory a little above the peak of granules in
 * use (src/alloc/expandable.c's OVER_PEAK: 48 MiB, at most an eighth of that peak); when it
 * must give granules back for new ones it gives back 16 MiB more than needed (EVICT_EXTRA),
 * oldest freed first. All sizes are whole 2 MiB granules, placed back to back downwards
 * from the top of the range (the arena's order, asserted). */
static void cache_stays_near_the_peak(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("texp", HBM_MODE_EXPANDABLE, 1024 * MiB, 0.5);
  void *a = hbm_alloc(dev, 128 * MiB, 0), *b = hbm_alloc(dev, 8 * MiB, 0);
  void *c = hbm_alloc(dev, 120 * MiB, 0);
  assert_true(a && b && c);
  assert_true((char *)b == (char *)a - 8 * MiB && (char *)c == (char *)b - 120 * MiB);
  hbm_free(dev, a); /* freed first: the oldest in the cache */
  hbm_free(dev, c);
  hbm_stats_t s = th_stats(dev);
  assert_true(s.bytes_reserved == 256 * MiB && s.peak_bytes_reserved == 256 * MiB);
  /* 160 MiB: a's hole (128) is too small, so d goes where c was, on c's 120 MiB of cached
   * granules plus 40 new ones below them. Peak in use 256 MiB, so the cache may reach 256 + min(48,
   * 256 / 8 = 32) = 288 MiB; 256 mapped + 40 new = 296 is 8 over, so it gives back 8 + 16 =
   * 24 MiB of a's granules: 256 - 24 + 40 = 272 MiB mapped, the new mapped peak. With whole
   * runs, a's 128 MiB were mapped as one run and go whole: 256 - 128 + 40 = 168 MiB mapped,
   * the peak staying 256. */
  void *d = hbm_alloc(dev, 160 * MiB, 0);
  assert_true((char *)d == (char *)b - 160 * MiB);
  memset(d, 0x5a, 160 * MiB);
  s = th_stats(dev);
  if (whole_runs())
    assert_true(s.bytes_reserved == 168 * MiB && s.peak_bytes_reserved == 256 * MiB);
  else
    assert_true(s.bytes_reserved == 272 * MiB && s.peak_bytes_reserved == 272 * MiB);
  hbm_free(dev, d);
  hbm_free(dev, b);
  assert_int_equal(hbm_trim(dev), HBM_OK);
  assert_true(th_stats(dev).bytes_reserved == 0);
  hbm_close(dev);
}

/* Free memory in pieces: a preallocated arena refuses a larger request (fragmentation);
 * expandable mode maps fresh granules for it once the free ones are given back. */
static void no_physical_fragmentation(void **state) {
  (void)state;
  const hbm_mode_t modes[] = {HBM_MODE_BFC, HBM_MODE_EXPANDABLE};
  for (int m = 0; m < 2; m++) {
    hbm_device_t *dev = th_open_sim("texp", modes[m], 32 * MiB, 0.5); /* limit 16 MiB */
    void *blocks[8];
    for (int i = 0; i < 8; i++) {
      blocks[i] = hbm_alloc(dev, 2 * MiB, 0);
      assert_non_null(blocks[i]);
      memset(blocks[i], 0x11 * i, 2 * MiB);
    }
    for (int i = 0; i < 8; i += 2)
      hbm_free(dev, blocks[i]);
    void *big = hbm_alloc(dev, 6 * MiB, 0);
    if (modes[m] == HBM_MODE_BFC) {
      assert_null(big);
      assert_non_null(strstr(hbm_last_error(), "cause: fragmentation"));
    } else {
      assert_non_null(big);
      memset(big, 0x77, 6 * MiB);
      /* 8 live + 6 new, and of the 8 freed at most what fits under the 16 MiB limit (the
       * cache could keep 2 MiB over the 16 MiB peak in use, but giving back 16 MiB extra
       * when it must empties it: 14 MiB by hand) */
      uint64_t reserved = th_stats(dev).bytes_reserved;
      assert_true(reserved >= 14 * MiB && reserved <= 16 * MiB);
      for (int i = 1; i < 8; i += 2)
        assert_true(((unsigned char *)blocks[i])[2 * MiB - 1] == 0x11 * i);
    }
    hbm_close(dev);
  }
}

/* The limit bounds mapped memory; over it, the diagnosis says so. */
static void limit_bounds_mapped_memory(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("texp", HBM_MODE_EXPANDABLE, 32 * MiB, 0.5);
  void *a = hbm_alloc(dev, 10 * MiB, 0);
  assert_non_null(a);
  assert_null(hbm_alloc(dev, 7 * MiB, 0));
  assert_int_equal(hbm_last_status(), HBM_ERR_NO_MEMORY);
  assert_non_null(strstr(hbm_last_error(), "RESOURCE_EXHAUSTED: Out of memory while trying to "
                                           "allocate 7340032 bytes."));
  assert_non_null(strstr(hbm_last_error(), "cause: in use + request over the limit"));
  assert_non_null(strstr(hbm_last_error(), "mode: expandable (HBM_EXPANDABLE=true"));
  hbm_stats_t s = th_stats(dev);
  assert_true(s.bytes_reserved == 10 * MiB && s.num_ooms == 1);
  assert_non_null(hbm_alloc(dev, 6 * MiB, 0)); /* exactly up to the limit */
  assert_true(th_stats(dev).bytes_reserved == 16 * MiB);
  assert_null(hbm_alloc(dev, 17 * MiB, 0));
  assert_non_null(strstr(hbm_last_error(), "request larger than the limit"));
  hbm_close(dev);
}

/* Walks see one reservation (the range) tiled by chunks; hbm_walk lists the live blocks. */
static int count_live(const hbm_block_info_t *b, void *ctx) {
  (void)b;
  ++*(int *)ctx;
  return 0;
}

static void walks_and_alignment(void **state) {
  (void)state;
  hbm_device_t *dev = th_open_sim("texp", HBM_MODE_EXPANDABLE, 64 * MiB, 0.5);
  void *small = hbm_alloc(dev, 300, 0);
  void *aligned = hbm_alloc(dev, 5000, 4 * MiB);
  assert_non_null(small);
  assert_non_null(aligned);
  assert_true((uintptr_t)aligned % (4 * MiB) == 0);
  memset(aligned, 1, 5000);
  int live = 0;
  assert_int_equal(hbm_walk(dev, count_live, &live), HBM_OK);
  assert_int_equal(live, 2);
  assert_true(hbm_block_size(dev, aligned) == 5000);
  hbm_close(dev);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(granules_follow_blocks),        cmocka_unit_test(data_survives_remapping),
      cmocka_unit_test(memory_goes_back_after_a_peak), cmocka_unit_test(no_physical_fragmentation),
      cmocka_unit_test(limit_bounds_mapped_memory),    cmocka_unit_test(walks_and_alignment),
      cmocka_unit_test(cache_stays_near_the_peak),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
