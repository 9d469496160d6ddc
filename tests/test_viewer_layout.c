/* test_viewer_layout.c — the allocation timeline's layout (src/viewer/layout.c): every
 * allocation of a plan in its own rows, so no buffer is drawn over another, the stack as tall
 * as XLA's total; a runtime profile's never-used address gaps cut out, so a small buffer far
 * below the others does not squeeze them into the top of the panel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "helpers.h"
#include "viewer/viewer.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024ull * 1024 * 1024)
#define MIB (1024ull * 1024)

/* How many pairs of buffers of `space` overlap in both steps and rows (0: nothing hidden). */
static int64_t overlapping_pairs(const hbm_profile_t *p, int space, const uint64_t *row,
                                 char *first, size_t cap) {
  int64_t n = hbm_profile_buffer_count(p), pairs = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = i + 1; j < n; j++) {
      const hbm_buffer_t *a = hbm_profile_buffer(p, i), *b = hbm_profile_buffer(p, j);
      if (a->space != space || b->space != space || !a->size || !b->size)
        continue;
      if (a->start < b->end && b->start < a->end && row[i] < row[j] + b->size &&
          row[j] < row[i] + a->size && pairs++ == 0)
        snprintf(first, cap, "%s / %s", a->label ? a->label : "-", b->label ? b->label : "-");
    }
  return pairs;
}

/* Fails when two buffers of `space` overlap in both steps and rows: one would hide the other. */
static void assert_nothing_hidden(const hbm_profile_t *p, int space, const uint64_t *row) {
  int64_t n = hbm_profile_buffer_count(p);
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = i + 1; j < n; j++) {
      const hbm_buffer_t *a = hbm_profile_buffer(p, i), *b = hbm_profile_buffer(p, j);
      if (a->space != space || b->space != space)
        continue;
      bool steps = a->start < b->end && b->start < a->end;
      bool rows = row[i] < row[j] + b->size && row[j] < row[i] + a->size;
      if (steps && rows)
        fail_msg("buffers %lld (%s) and %lld (%s) overlap", (long long)i, a->op ? a->op : "-",
                 (long long)j, b->op ? b->op : "-");
    }
}

/* examples/seed_oom.hlo: XLA's report for it (docs in the file, README) says "Total hbm usage
 * >= 500.00G": HLO temp 300 GiB (the 200 GiB %normal_fusion at offset 0 and the 100 GiB
 * %xor_convert_fusion at 200 GiB), the 200 GiB output %dot.1 and the 1 KiB (tiled u32[2])
 * constant, each in an allocation of its own at offset 0. */
static void test_seed_plan_allocations_stacked(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(HBM_SOURCE_DIR "/examples/seed_oom.hlo");
  assert_non_null(p);
  uint64_t *row = calloc((size_t)hbm_profile_buffer_count(p), sizeof *row);
  hbm__layout_t l;
  assert_true(hbm__layout_build(p, 0, row, &l));
  assert_true(l.height == 300 * GIB + 200 * GIB + 1024);
  assert_int_equal(l.n_bands, 3); /* temp heap, outputs, constants */
  assert_string_equal(l.bands[0].kind, "heap");
  assert_true(l.bands[0].size == 300 * GIB);
  assert_true(l.bands[1].row == 300 * GIB && l.bands[1].size == 200 * GIB);
  assert_true(l.bands[2].row == 500 * GIB && l.bands[2].size == 1024);
  assert_nothing_hidden(p, 0, row);
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_true(hbm_analysis_summary(a)->peak_bytes <= l.height); /* the axis covers the peak */
  hbm_analysis_free(a);
  assert_ptr_equal(hbm__layout_band_at(&l, 0), &l.bands[0]);
  assert_ptr_equal(hbm__layout_band_at(&l, 300 * GIB), &l.bands[1]);
  assert_ptr_equal(hbm__layout_band_at(&l, 500 * GIB + 5), &l.bands[2]);
  free(l.bands);
  free(row);
  hbm_profile_free(p);
}

/* XLA's in-place all-reduce: its output shares the operand's bytes (same allocation and
 * offset) while both are live. The second is drawn apart, on top; the third value of the heap
 * stays where it is. */
static void test_plan_alias_drawn_apart(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_PLAN, "alias");
  int space = hbm_profile_add_space(p, "HBM", "gpu", 0, 0);
  for (int s = 0; s < 4; s++)
    hbm_profile_add_step(p, 0, "step");
  hbm_buffer_t b = {.address = 256,
                    .size = 25600,
                    .start = 0,
                    .end = 3,
                    .space = space,
                    .category = HBM_CAT_TEMPORARY};
  b.unpadded_size = b.size;
  assert_true(hbm_profile_add_buffer(p, &b) == 0); /* custom-call.13.0{0} */
  b.start = 1;
  b.end = 4;
  assert_true(hbm_profile_add_buffer(p, &b) == 1); /* all-reduce-start: the same bytes */
  b.address = 25856;
  b.size = b.unpadded_size = 1000;
  b.start = 0;
  assert_true(hbm_profile_add_buffer(p, &b) == 2); /* beside them */
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  uint64_t row[3];
  hbm__layout_t l;
  assert_true(hbm__layout_build(p, space, row, &l));
  assert_int_equal(l.n_bands, 2);
  assert_string_equal(l.bands[1].kind, "aliases");
  /* heap: 256 + 25600 + 1000 = 26856 rows (up to the end of the third), then the alias */
  assert_true(l.bands[0].size == 26856 && l.bands[1].row == 26856 && l.bands[1].size == 25600);
  assert_true(row[0] == 256 && row[1] == 26856 && row[2] == 25856);
  assert_nothing_hidden(p, space, row);
  free(l.bands);
  hbm_profile_free(p);
}

/* hbm demo's shape: a 16 KiB bias 11 GiB below two 125 MiB buffers (another part of the
 * allocator's pool). Used bytes: 16 KiB + 250 MiB; the 11 GiB gap is cut out. */
static void test_runtime_gap_cut_out(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "gap");
  int space = hbm_profile_add_space(p, "HBM", "sim0", 0, 12 * GIB);
  uint64_t low = 0x7f0000000000ull, high = low + 11 * GIB;
  int64_t s0 = hbm_profile_add_step(p, 0, NULL);
  hbm_profile_alloc_at(p, s0, space, low, 16384, NULL);
  int64_t s1 = hbm_profile_add_step(p, 10, NULL);
  hbm_profile_alloc_at(p, s1, space, high, 125 * MIB, NULL);
  int64_t s2 = hbm_profile_add_step(p, 20, NULL);
  hbm_profile_alloc_at(p, s2, space, high + 125 * MIB, 125 * MIB, NULL);
  int64_t s3 = hbm_profile_add_step(p, 30, NULL);
  assert_int_equal(hbm_profile_free_at(p, s3, space, high), HBM_OK);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  uint64_t row[3];
  hbm__layout_t l;
  assert_true(hbm__layout_build(p, space, row, &l));
  assert_int_equal(l.n_bands, 2);
  assert_true(l.height == 16384 + 250 * MIB);
  assert_true(row[0] == 0 && row[1] == 16384 && row[2] == 16384 + 125 * MIB);
  /* the big buffers fill all but 16 KiB of the height: far from the top 5% */
  assert_true((double)(row[2] + 125 * MIB - row[1]) / (double)l.height > 0.99);
  assert_nothing_hidden(p, space, row);
  free(l.bands);
  hbm_profile_free(p);
}

/* A gap smaller than 1 MiB (and than 1/32 of what is used) is fragmentation, and stays. */
static void test_runtime_small_gap_kept(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "small-gap");
  int space = hbm_profile_add_space(p, "HBM", "sim0", 0, 0);
  int64_t s0 = hbm_profile_add_step(p, 0, NULL);
  hbm_profile_alloc_at(p, s0, space, 4096, 1000, NULL);
  hbm_profile_alloc_at(p, s0, space, 4096 + 65536, 1000, NULL);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  uint64_t row[2];
  hbm__layout_t l;
  assert_true(hbm__layout_build(p, space, row, &l));
  assert_int_equal(l.n_bands, 1);
  assert_true(row[0] == 0 && row[1] == 65536 && l.height == 65536 + 1000);
  free(l.bands);
  hbm_profile_free(p);
}

/* Every real XLA module in ../shared (JAX on an A100): its optimized HLO planned by hbm, and
 * XLA's own buffer assignment, laid out: no buffer is drawn over another and the stack covers
 * the peak. */
static void test_real_modules_nothing_hidden(void **state) {
  (void)state;
  const char *dir = HBM_SHARED_DIR "/real/xla";
  th_need_shared();
  DIR *d = opendir(dir);
  if (!d)
    th_skip("cannot open %s", dir);
  int modules = 0;
  for (struct dirent *e; (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    bool hlo = len > 24 && !strcmp(e->d_name + len - 24, "_after_optimizations.txt");
    bool dump = len > 22 && !strcmp(e->d_name + len - 22, "-buffer-assignment.txt");
    if (!hlo && !dump) /* optimized HLO (planned by hbm) and XLA's own buffer assignment */
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    hbm_profile_t *p = hbm_profile_load(path);
    if (!p)
      fail_msg("%s: %s", e->d_name, hbm_last_error());
    uint64_t *row = calloc((size_t)hbm_profile_buffer_count(p) + 1, sizeof *row);
    for (int space = 0; space < hbm_profile_space_count(p); space++) {
      hbm__layout_t l;
      assert_true(hbm__layout_build(p, space, row, &l));
      char first[512] = "";
      int64_t pairs = overlapping_pairs(p, space, row, first, sizeof first);
      if (pairs)
        fail_msg("%s: %lld pairs overlap, first %s", e->d_name, (long long)pairs, first);
      hbm_analysis_t *a = hbm_analyze(p, space);
      assert_non_null(a);
      if (hbm_analysis_summary(a)->peak_bytes > l.height)
        fail_msg("%s: peak %llu above the layout's height %llu", e->d_name,
                 (unsigned long long)hbm_analysis_summary(a)->peak_bytes,
                 (unsigned long long)l.height);
      hbm_analysis_free(a);
      free(l.bands);
    }
    free(row);
    hbm_profile_free(p);
    modules++;
  }
  closedir(d);
  print_message("%d real modules laid out, nothing hidden\n", modules);
  assert_true(modules > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_seed_plan_allocations_stacked),
      cmocka_unit_test(test_plan_alias_drawn_apart),
      cmocka_unit_test(test_runtime_gap_cut_out),
      cmocka_unit_test(test_runtime_small_gap_kept),
      cmocka_unit_test(test_real_modules_nothing_hidden),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
