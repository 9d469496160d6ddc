/* test_profile_model.c — the profile model and its analysis, on small profiles whose
 * answers are worked out by hand in the comments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the headers above first: keep it in its own include block. */
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "hbm.h"

/* Runtime profile, one step per event:
 *   step 0: alloc A 100 @0x1000 (op "a", group "params")
 *   step 1: alloc B 300 @0x2000 (op "b")
 *   step 2: alloc C 50  @0x3000 (op "c", category temporary)
 *   step 3: free B
 *   step 4: alloc D 350 @0x4000 (op "d")   -> live 100+50+350 = 500
 *   step 5: free D
 * live: 100, 400, 450, 150, 500, 150. Peak 500 at step 4, buffers A, C, D. */
static hbm_profile_t *runtime_profile(void) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "runtime");
  assert_non_null(p);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "sim0", 0, 1000), 0);
  for (int i = 0; i < 6; i++)
    assert_int_equal(hbm_profile_add_step(p, i * 10, NULL), i);
  hbm_tag_t a = {.op = "a", .group = "params", .category = HBM_CAT_PARAMETER};
  hbm_tag_t b = {.op = "b", .shape = "f32[75]"};
  hbm_tag_t c = {.op = "c", .category = HBM_CAT_TEMPORARY};
  hbm_tag_t d = {.op = "d", .category = HBM_CAT_TEMPORARY};
  assert_int_equal(hbm_profile_alloc_at(p, 0, 0, 0x1000, 100, &a), 0);
  assert_int_equal(hbm_profile_alloc_at(p, 1, 0, 0x2000, 300, &b), 1);
  assert_int_equal(hbm_profile_alloc_at(p, 2, 0, 0x3000, 50, &c), 2);
  assert_int_equal(hbm_profile_free_at(p, 3, 0, 0x2000), HBM_OK);
  assert_int_equal(hbm_profile_alloc_at(p, 4, 0, 0x4000, 350, &d), 3);
  assert_int_equal(hbm_profile_free_at(p, 5, 0, 0x4000), HBM_OK);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  return p;
}

static void runtime_peak_and_buffers(void **state) {
  (void)state;
  hbm_profile_t *p = runtime_profile();
  hbm_analysis_t *an = hbm_analyze(p, 0);
  assert_non_null(an);
  const hbm_summary_t *s = hbm_analysis_summary(an);
  assert_int_equal(s->peak_bytes, 500);
  assert_int_equal(s->peak_step, 4);
  assert_int_equal(s->peak_time_ns, 40);
  assert_int_equal(s->limit_bytes, 1000);
  assert_int_equal(s->n_buffers_at_peak, 3);
  assert_int_equal(s->argument_bytes, 100);
  assert_int_equal(s->category_bytes[HBM_CAT_TEMPORARY], 400);
  assert_int_equal(s->temporary_bytes, 400); /* the parameter A is not a temporary */
  assert_true(s->fragmentation_at_peak < 0); /* no reservation data */
  uint64_t expect[] = {100, 400, 450, 150, 500, 150};
  for (int i = 0; i < 6; i++)
    assert_int_equal(hbm_analysis_bytes_at(an, i), expect[i]);

  size_t n;
  const int64_t *order = hbm_analysis_buffers_at_peak(an, &n);
  assert_int_equal(n, 3);
  assert_int_equal(order[0], 0);
  assert_int_equal(order[1], 2);
  assert_int_equal(order[2], 3);
  const int64_t *by_size = hbm_analysis_buffers_at_peak_by_size(an, &n);
  assert_string_equal(hbm_profile_buffer(p, by_size[0])->op, "d");
  assert_string_equal(hbm_profile_buffer(p, by_size[2])->op, "c");

  const hbm_group_total_t *g = hbm_analysis_groups(an, &n);
  assert_int_equal(n, 2); /* "temporary" (c, d) and "params" (a) */
  assert_string_equal(g[0].name, "temporary");
  assert_int_equal(g[0].bytes, 400);
  assert_int_equal(g[0].count, 2);
  assert_string_equal(g[1].name, "params");

  /* b is freed at step 3: its range is [1, 3); d's is [4, 5). */
  const hbm_buffer_t *b = hbm_profile_buffer(p, 1);
  assert_int_equal(b->start, 1);
  assert_int_equal(b->end, 3);
  assert_string_equal(b->shape, "f32[75]");
  /* a and c are never freed: live out. */
  assert_true(hbm_profile_buffer(p, 0)->flags & HBM_BUF_LIVE_OUT);
  assert_int_equal(hbm_profile_buffer(p, 0)->end, 6);

  int64_t window[8];
  assert_int_equal(hbm_analysis_buffers_in_window(an, 3, 4, window, 8), 2); /* a, c */
  assert_int_equal(hbm_analysis_buffers_in_window(an, 0, 6, window, 1), 4);
  assert_int_equal(window[0], 0);
  hbm_analysis_free(an);
  hbm_profile_free(p);
}

/* Reserved region [0x0, 0x1000) preallocated at step 0. At the peak (step 2) buffers sit at
 * [0x000,0x100), [0x300,0x400), [0x800,0x900): gaps 0x200, 0x400, 0x700 -> free 0xd00,
 * largest 0x700, fragmentation 1 - 0x700/0xd00. */
static void runtime_fragmentation_from_reservations(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "frag");
  int sp = hbm_profile_add_space(p, "HBM", "sim0", 0, 0x1000);
  for (int i = 0; i < 4; i++)
    hbm_profile_add_step(p, i, NULL);
  hbm_reserve_event_t r = {
      .step = 0, .space = sp, .op = HBM_RESERVE_PREALLOCATE, .address = 0, .size = 0x1000};
  assert_int_equal(hbm_profile_add_reserve(p, &r), HBM_OK);
  hbm_profile_alloc_at(p, 0, sp, 0x000, 0x100, NULL);
  hbm_profile_alloc_at(p, 1, sp, 0x300, 0x100, NULL);
  hbm_profile_alloc_at(p, 2, sp, 0x800, 0x100, NULL);
  hbm_profile_free_at(p, 3, sp, 0x300);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  hbm_analysis_t *an = hbm_analyze(p, sp);
  const hbm_summary_t *s = hbm_analysis_summary(an);
  assert_int_equal(s->peak_step, 2);
  assert_int_equal(s->peak_reserved_bytes, 0x1000);
  assert_int_equal(s->reserved_at_peak, 0x1000);
  assert_int_equal(s->largest_free_at_peak, 0x700);
  assert_float_equal(s->fragmentation_at_peak, 1.0 - 7.0 / 13.0, 1e-12);
  hbm_analysis_free(an);
  hbm_profile_free(p);
}

/* Map/unmap granules: two maps then an unmap of the first one leaves the second. */
static void runtime_reserved_follows_map_and_unmap(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "maps");
  int sp = hbm_profile_add_space(p, "HBM", "sim0", 0, 0);
  for (int i = 0; i < 3; i++)
    hbm_profile_add_step(p, i, NULL);
  hbm_reserve_event_t e[] = {{0, sp, HBM_RESERVE_MAP, 0, 200},
                             {1, sp, HBM_RESERVE_MAP, 200, 200},
                             {2, sp, HBM_RESERVE_UNMAP, 0, 200}};
  for (int i = 0; i < 3; i++)
    assert_int_equal(hbm_profile_add_reserve(p, &e[i]), HBM_OK);
  hbm_profile_alloc_at(p, 1, sp, 250, 100, NULL);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  hbm_analysis_t *an = hbm_analyze(p, sp);
  hbm_timeline_point_t pts[3];
  assert_int_equal(hbm_analysis_timeline(an, 0, 3, 3, pts), 3);
  assert_int_equal(pts[0].reserved, 200);
  assert_int_equal(pts[1].reserved, 400);
  assert_int_equal(pts[2].reserved, 200);
  const hbm_summary_t *s = hbm_analysis_summary(an);
  assert_int_equal(s->peak_step, 1); /* first step reaching 100 */
  /* At step 1, [0,400) is mapped and [250,350) used: gaps 250 and 50. */
  assert_int_equal(s->largest_free_at_peak, 250);
  hbm_analysis_free(an);
  hbm_profile_free(p);
}

/* A plan: parameter P (indefinite, 1000 bytes, unpadded 600), temps T1 [0,2) at offset 0
 * size 100, T2 [1,3) at offset 100 size 200, T3 [2,3) at offset 0 size 50.
 * live: 1100, 1300, 1250. Peak step 1. heap = 1000 + 300. */
static void plan_indefinite_and_heap(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_PLAN, "module");
  int sp = hbm_profile_add_space(p, "HBM", "tpu", 0, 16ull << 30);
  const char *labels[] = {"p0", "t1", "t2"};
  for (int i = 0; i < 3; i++)
    hbm_profile_add_step(p, i, labels[i]);
  hbm_buffer_t param = {.size = 1000,
                        .unpadded_size = 600,
                        .start = 0,
                        .end = 1,
                        .space = sp,
                        .category = HBM_CAT_PARAMETER,
                        .flags = HBM_BUF_INDEFINITE,
                        .op = "p0",
                        .opcode = "parameter"};
  hbm_buffer_t t1 = {.address = 0,
                     .size = 100,
                     .unpadded_size = 100,
                     .start = 0,
                     .end = 2,
                     .space = sp,
                     .category = HBM_CAT_TEMPORARY,
                     .op = "t1"};
  hbm_buffer_t t2 = {.address = 100,
                     .size = 200,
                     .unpadded_size = 150,
                     .start = 1,
                     .end = 3,
                     .space = sp,
                     .category = HBM_CAT_TEMPORARY,
                     .op = "t2"};
  hbm_buffer_t t3 = {.address = 0,
                     .size = 50,
                     .unpadded_size = 50,
                     .start = 2,
                     .end = 3,
                     .space = sp,
                     .category = HBM_CAT_TEMPORARY,
                     .op = "t3"};
  assert_int_equal(hbm_profile_add_buffer(p, &param), 0);
  assert_int_equal(hbm_profile_add_buffer(p, &t1), 1);
  assert_int_equal(hbm_profile_add_buffer(p, &t2), 2);
  assert_int_equal(hbm_profile_add_buffer(p, &t3), 3);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  assert_int_equal(hbm_profile_buffer(p, 0)->end, 3); /* indefinite: whole program */

  hbm_analysis_t *an = hbm_analyze(p, sp);
  const hbm_summary_t *s = hbm_analysis_summary(an);
  assert_int_equal(s->peak_bytes, 1300);
  assert_int_equal(s->peak_step, 1);
  assert_int_equal(s->peak_unpadded_bytes, 600 + 100 + 150);
  assert_int_equal(s->padding_bytes, 1300 - 850);
  assert_int_equal(s->indefinite_bytes, 1000);
  assert_int_equal(s->temporary_bytes, 300);
  assert_int_equal(s->argument_bytes, 1000);
  assert_int_equal(s->heap_bytes, 1300);
  assert_float_equal(s->fragmentation_at_peak, 0.0, 1e-12);
  size_t n;
  const int64_t *by_pad = hbm_analysis_buffers_at_peak_by_padding(an, &n);
  assert_int_equal(n, 3);
  assert_string_equal(hbm_profile_buffer(p, by_pad[0])->op, "p0"); /* 400 padding */
  assert_string_equal(hbm_profile_buffer(p, by_pad[1])->op, "t2"); /* 50 */
  assert_string_equal(hbm_profile_step_label(p, 1), "t1");
  hbm_analysis_free(an);
  hbm_profile_free(p);
}

/* Downsampling 1000 steps to 7 points keeps the single spike at step 613. */
static void timeline_downsampling_keeps_the_peak(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "spike");
  int sp = hbm_profile_add_space(p, "HBM", "sim0", 0, 0);
  for (int i = 0; i < 1000; i++)
    hbm_profile_add_step(p, i, NULL);
  for (int i = 0; i < 1000; i++) {
    hbm_buffer_t b = {
        .size = (uint64_t)(i == 613 ? 99999 : i % 17), .start = i, .end = i + 1, .space = sp};
    b.unpadded_size = b.size;
    assert_true(hbm_profile_add_buffer(p, &b) >= 0);
  }
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  hbm_analysis_t *an = hbm_analyze(p, sp);
  hbm_timeline_point_t pts[7];
  assert_int_equal(hbm_analysis_timeline(an, 0, 1000, 7, pts), 7);
  int found = 0;
  for (int i = 0; i < 7; i++) {
    found |= pts[i].step == 613 && pts[i].bytes == 99999;
    if (i)
      assert_true(pts[i].step > pts[i - 1].step);
  }
  assert_true(found);
  assert_int_equal(hbm_analysis_summary(an)->peak_step, 613);
  /* A window: steps [600, 610) fit in 10 points exactly. */
  hbm_timeline_point_t w[10];
  assert_int_equal(hbm_analysis_timeline(an, 600, 610, 10, w), 10);
  assert_int_equal(w[3].step, 603);
  assert_int_equal(w[3].bytes, 603 % 17);
  hbm_analysis_free(an);
  hbm_profile_free(p);
}

static void spaces_are_analysed_apart(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "two");
  int hbm = hbm_profile_add_space(p, "HBM", "sim0", 0, 0);
  int host = hbm_profile_add_space(p, "Host", "sim0", 5, 0);
  assert_int_equal(hbm_profile_find_space(p, "Host", NULL), host);
  assert_int_equal(hbm_profile_find_space(p, "HBM", "sim0"), hbm);
  assert_int_equal(hbm_profile_find_space(p, "HBM", "other"), -1);
  hbm_profile_add_step(p, 0, NULL);
  hbm_profile_add_step(p, 1, NULL);
  hbm_profile_alloc_at(p, 0, hbm, 0x10, 10, NULL);
  /* The same address in another space is another buffer. */
  assert_true(hbm_profile_alloc_at(p, 1, host, 0x10, 70, NULL) >= 0);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  hbm_analysis_t *a = hbm_analyze(p, hbm), *b = hbm_analyze(p, host);
  assert_int_equal(hbm_analysis_summary(a)->peak_bytes, 10);
  assert_int_equal(hbm_analysis_summary(b)->peak_bytes, 70);
  assert_int_equal(hbm_analysis_summary(b)->peak_step, 1);
  assert_null(hbm_analyze(p, 2));
  hbm_analysis_free(a);
  hbm_analysis_free(b);
  hbm_profile_free(p);
}

static void bad_building_is_refused(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "bad");
  assert_int_equal(hbm_profile_add_space(p, "", "x", 0, 0), -1);
  int sp = hbm_profile_add_space(p, "HBM", "sim0", 0, 0);
  hbm_profile_add_step(p, 0, NULL);
  assert_int_equal(hbm_profile_alloc_at(p, 0, 7, 0x10, 1, NULL), -1);
  assert_non_null(strstr(hbm_last_error(), "space 7"));
  assert_true(hbm_profile_alloc_at(p, 0, sp, 0x10, 1, NULL) >= 0);
  assert_int_equal(hbm_profile_alloc_at(p, 0, sp, 0x10, 1, NULL), -1);
  assert_non_null(strstr(hbm_last_error(), "0x10"));
  assert_int_equal(hbm_profile_free_at(p, 0, sp, 0x20), HBM_ERR_NOT_FOUND);
  hbm_buffer_t backwards = {.start = 5, .end = 2, .space = sp};
  assert_int_equal(hbm_profile_add_buffer(p, &backwards), -1);
  hbm_buffer_t beyond = {.start = 0, .end = 9, .space = sp};
  assert_true(hbm_profile_add_buffer(p, &beyond) >= 0);
  assert_int_equal(hbm_profile_finish(p), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "1 steps"));
  assert_int_equal(hbm_profile_set_meta(p, "host", "a"), HBM_OK);
  assert_int_equal(hbm_profile_set_meta(p, "host", "b"), HBM_OK);
  assert_string_equal(hbm_profile_meta(p, "host"), "b");
  assert_int_equal(hbm_profile_meta_count(p), 1);
  assert_null(hbm_profile_meta(p, "nope"));
  hbm_profile_free(p);
}

/* The buffers live in a window, for a runtime profile of thousands of buffers (its starts in
 * order: whole blocks that ended before the window are skipped): the same as asking each. */
static void window_of_many_buffers(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "many");
  assert_true(hbm_profile_add_space(p, "HBM", "sim0", 0, 0) >= 0);
  uint64_t x = 12345;
  int64_t live[64] = {0};
  for (int i = 0; i < 20000; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    int slot = (int)(x >> 58);
    int64_t step = hbm_profile_add_step(p, i, NULL);
    if (live[slot] > 0)
      assert_int_equal(hbm_profile_free_at(p, step, 0, 0x1000 * (uint64_t)slot), HBM_OK);
    /* every 97th buffer is long-lived: its slot is never reused */
    live[slot] = hbm_profile_alloc_at(p, step, 0, 0x1000 * (uint64_t)slot, 64, NULL) + 1;
    if (i % 97 == 0) {
      hbm_profile_alloc_at(p, step, 0, 0x100000 + 0x1000 * (uint64_t)i, 8, NULL);
    }
  }
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_non_null(a);
  int64_t n_steps = hbm_profile_step_count(p), n_buffers = hbm_profile_buffer_count(p);
  int64_t *got = malloc((size_t)n_buffers * sizeof *got);
  for (int w = 0; w < 200; w++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    int64_t from = (int64_t)(x >> 33) % n_steps, to = from + 1 + (int64_t)(x >> 50) % 3000;
    size_t n = hbm_analysis_buffers_in_window(a, from, to, got, (size_t)n_buffers);
    size_t k = 0;
    for (int64_t i = 0; i < n_buffers; i++) {
      const hbm_buffer_t *b = hbm_profile_buffer(p, i);
      if (b->start < to && b->end > from && b->start != b->end) {
        assert_true(k < n);
        assert_int_equal(got[k++], i);
      }
    }
    assert_int_equal(k, n);
  }
  free(got);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

static void empty_profile_has_no_peak(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, NULL);
  int sp = hbm_profile_add_space(p, "HBM", "sim0", 0, 0);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  hbm_analysis_t *a = hbm_analyze(p, sp);
  assert_non_null(a);
  assert_int_equal(hbm_analysis_summary(a)->peak_step, -1);
  assert_int_equal(hbm_analysis_summary(a)->peak_bytes, 0);
  hbm_timeline_point_t pt;
  assert_int_equal(hbm_analysis_timeline(a, 0, 10, 1, &pt), 0);
  size_t n = 9;
  hbm_analysis_buffers_at_peak(a, &n);
  assert_int_equal(n, 0);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(runtime_peak_and_buffers),
      cmocka_unit_test(runtime_fragmentation_from_reservations),
      cmocka_unit_test(runtime_reserved_follows_map_and_unmap),
      cmocka_unit_test(plan_indefinite_and_heap),
      cmocka_unit_test(timeline_downsampling_keeps_the_peak),
      cmocka_unit_test(spaces_are_analysed_apart),
      cmocka_unit_test(bad_building_is_refused),
      cmocka_unit_test(empty_profile_has_no_peak),
      cmocka_unit_test(window_of_many_buffers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
