/* test_profile_diff.c — hbm_diff_* on profiles made for each kind of row: a buffer that
 * grew, one that shrank, one gone, one new, one that lived longer across the peak and one
 * that no longer lives across it. Expected numbers are hand sums written beside each profile;
 * every table's rows must add up to the change of the peak. Also: buffers of one op paired by
 * size before order, profiles of different kinds (said in the notes), the JSON, and a window
 * of steps (hbm_profile_window). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

typedef struct spec {
  const char *op, *shape;
  uint64_t size;
  int64_t start, end; /* end -1: whole program (a parameter) */
} spec_t;

/* A plan of 10 steps with the buffers of `specs` (n of them). */
static hbm_profile_t *plan_of(const char *name, const spec_t *specs, size_t n) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_PLAN, name);
  assert_non_null(p);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "test", 0, 0), 0);
  for (int s = 0; s < 10; s++)
    assert_true(hbm_profile_add_step(p, s, NULL) == s);
  for (size_t i = 0; i < n; i++) {
    bool whole = specs[i].end < 0;
    hbm_buffer_t b = {.size = specs[i].size,
                      .unpadded_size = specs[i].size,
                      .start = whole ? 0 : specs[i].start,
                      .end = whole ? 10 : specs[i].end,
                      .category = whole ? HBM_CAT_PARAMETER : HBM_CAT_TEMPORARY,
                      .flags = whole ? HBM_BUF_INDEFINITE : 0,
                      .op = specs[i].op,
                      .shape = specs[i].shape,
                      .source = "model.py:7"};
    assert_true(hbm_profile_add_buffer(p, &b) >= 0);
  }
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  return p;
}

/* A: peak at step 3 = w 100 + grow 200 + shrink 400 + gone 50 + shorter 60 = 810 (step 1:
 *    w 100 + longer 500 + shorter 60 = 660).
 * B: peak at step 3 = w 100 + grow 300 + shrink 150 + new 70 + longer 500 = 1120.
 * Change +310 = grew +100, shrank -250, gone -50, new +70, lived longer +500, shorter -60. */
static const spec_t specs_a[] = {
    {"w", "f32[25]", 100, 0, -1},      {"grow", "f32[50]", 200, 2, 8},
    {"shrink", "f32[100]", 400, 2, 8}, {"gone", "f32[12]", 50, 3, 7},
    {"longer", "f32[125]", 500, 0, 2}, {"shorter", "f32[15]", 60, 1, 9},
};
static const spec_t specs_b[] = {
    {"w", "f32[25]", 100, 0, -1},      {"grow", "f32[75]", 300, 2, 8},
    {"shrink", "f32[37]", 150, 2, 8},  {"new", "f32[17]", 70, 3, 7},
    {"longer", "f32[125]", 500, 0, 9}, {"shorter", "f32[15]", 60, 0, 1},
};

typedef struct pair {
  hbm_profile_t *p[2];
  hbm_analysis_t *a[2];
  hbm_diff_t *d;
} pair_t;

static void open_pair(pair_t *t, hbm_profile_t *a, hbm_profile_t *b) {
  t->p[0] = a;
  t->p[1] = b;
  for (int s = 0; s < 2; s++)
    assert_non_null(t->a[s] = hbm_analyze(t->p[s], 0));
  assert_non_null(t->d = hbm_diff_new(t->a[0], t->a[1]));
}

static void close_pair(pair_t *t) {
  hbm_diff_free(t->d);
  for (int s = 0; s < 2; s++) {
    hbm_analysis_free(t->a[s]);
    hbm_profile_free(t->p[s]);
  }
}

static void assert_tables_add_up(const hbm_diff_t *d) {
  for (int by = 0; by < HBM_DIFF_BY_COUNT; by++) {
    size_t n;
    const hbm_diff_row_t *rows = hbm_diff_rows(d, (hbm_diff_by_t)by, &n);
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++)
      sum += rows[i].delta;
    if (sum != hbm_diff_change(d))
      fail_msg("table %s adds up to %lld, the change is %lld", hbm_diff_by_name((hbm_diff_by_t)by),
               (long long)sum, (long long)hbm_diff_change(d));
  }
}

static const hbm_diff_row_t *row_for(const hbm_diff_t *d, hbm_diff_by_t by, const char *key,
                                     hbm_diff_reason_t reason) {
  size_t n;
  const hbm_diff_row_t *rows = hbm_diff_rows(d, by, &n);
  for (size_t i = 0; i < n; i++)
    if (!strcmp(rows[i].key, key) && rows[i].reason == reason)
      return &rows[i];
  fail_msg("no %s row '%s' (%s)", hbm_diff_by_name(by), key, hbm_diff_reason_name(reason));
  return NULL;
}

static void test_each_reason(void **state) {
  (void)state;
  pair_t t;
  open_pair(&t, plan_of("A", specs_a, 6), plan_of("B", specs_b, 6));
  assert_int_equal(hbm_diff_summary(t.d, 0)->peak_bytes, 810);
  assert_int_equal(hbm_diff_summary(t.d, 1)->peak_bytes, 1120);
  assert_int_equal(hbm_diff_change(t.d), 310);
  struct {
    const char *op;
    hbm_diff_reason_t reason;
    int64_t delta;
    uint64_t a, b;
  } want[] = {
      {"grow", HBM_DIFF_GREW, 100, 200, 300},
      {"shrink", HBM_DIFF_SHRANK, -250, 400, 150},
      {"gone", HBM_DIFF_GONE, -50, 50, 0},
      {"new", HBM_DIFF_NEW, 70, 0, 70},
      {"longer", HBM_DIFF_LIVED_LONGER, 500, 0, 500},
      {"shorter", HBM_DIFF_LIVED_SHORTER, -60, 60, 0},
  };
  size_t n;
  hbm_diff_rows(t.d, HBM_DIFF_BY_OP, &n);
  assert_int_equal(n, 6); /* w is unchanged: in no row */
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    const hbm_diff_row_t *r = row_for(t.d, HBM_DIFF_BY_OP, want[i].op, want[i].reason);
    assert_int_equal(r->delta, want[i].delta);
    assert_int_equal(r->a_bytes, want[i].a);
    assert_int_equal(r->b_bytes, want[i].b);
  }
  uint64_t unchanged_bytes;
  assert_int_equal(hbm_diff_unchanged(t.d, &unchanged_bytes), 1);
  assert_int_equal(unchanged_bytes, 100);
  /* The largest change first: lived longer +500. */
  const hbm_diff_row_t *rows = hbm_diff_rows(t.d, HBM_DIFF_BY_OP, &n);
  assert_string_equal(rows[0].key, "longer");
  /* By shape: the grown buffer's shapes both named. */
  assert_int_equal(row_for(t.d, HBM_DIFF_BY_SHAPE, "f32[50] -> f32[75]", HBM_DIFF_GREW)->delta,
                   100);
  /* By category: everything but w is a temporary; by source all one line. */
  assert_int_equal(row_for(t.d, HBM_DIFF_BY_SOURCE, "model.py:7", HBM_DIFF_LIVED_LONGER)->delta,
                   500);
  assert_int_equal(row_for(t.d, HBM_DIFF_BY_REASON, "gone", HBM_DIFF_GONE)->delta, -50);
  /* By buffer: the pair's indices and sizes. */
  const hbm_diff_row_t *grow = row_for(t.d, HBM_DIFF_BY_BUFFER, "grow", HBM_DIFF_GREW);
  assert_int_equal(grow->a_index, 1);
  assert_int_equal(grow->b_index, 1);
  assert_int_equal(grow->a_size, 200);
  assert_int_equal(grow->b_size, 300);
  const hbm_diff_row_t *longer = row_for(t.d, HBM_DIFF_BY_BUFFER, "longer", HBM_DIFF_LIVED_LONGER);
  assert_int_equal(longer->a_size, 500); /* in A, but not at its peak */
  assert_int_equal(longer->a_bytes, 0);
  assert_tables_add_up(t.d);
  size_t n_notes;
  hbm_diff_notes(t.d, &n_notes);
  assert_int_equal(n_notes, 0);
  close_pair(&t);
}

/* Reversed, every reason turns into its opposite and the change into -310. */
static void test_reversed(void **state) {
  (void)state;
  pair_t t;
  open_pair(&t, plan_of("B", specs_b, 6), plan_of("A", specs_a, 6));
  assert_int_equal(hbm_diff_change(t.d), -310);
  assert_int_equal(row_for(t.d, HBM_DIFF_BY_OP, "new", HBM_DIFF_GONE)->delta, -70);
  assert_int_equal(row_for(t.d, HBM_DIFF_BY_OP, "gone", HBM_DIFF_NEW)->delta, 50);
  assert_int_equal(row_for(t.d, HBM_DIFF_BY_OP, "longer", HBM_DIFF_LIVED_SHORTER)->delta, -500);
  assert_int_equal(row_for(t.d, HBM_DIFF_BY_OP, "shorter", HBM_DIFF_LIVED_LONGER)->delta, 60);
  assert_int_equal(row_for(t.d, HBM_DIFF_BY_OP, "grow", HBM_DIFF_SHRANK)->delta, -100);
  assert_tables_add_up(t.d);
  close_pair(&t);
}

/* Buffers of one op at both peaks: equal sizes pair first (10 and 20 in another order are
 * unchanged), the rest in allocation order (10 -> 30 and 20 -> 40 grew by 20 each). */
static void test_pairing_order(void **state) {
  (void)state;
  const spec_t a1[] = {{"act", NULL, 10, 2, 8}, {"act", NULL, 20, 2, 8}};
  const spec_t b1[] = {{"act", NULL, 20, 2, 8}, {"act", NULL, 10, 2, 8}};
  pair_t t;
  open_pair(&t, plan_of("A", a1, 2), plan_of("B", b1, 2));
  size_t n;
  hbm_diff_rows(t.d, HBM_DIFF_BY_BUFFER, &n);
  assert_int_equal(n, 0);
  assert_int_equal(hbm_diff_unchanged(t.d, NULL), 2);
  close_pair(&t);
  const spec_t b2[] = {{"act", NULL, 30, 2, 8}, {"act", NULL, 40, 2, 8}};
  open_pair(&t, plan_of("A", a1, 2), plan_of("B", b2, 2));
  const hbm_diff_row_t *rows = hbm_diff_rows(t.d, HBM_DIFF_BY_BUFFER, &n);
  assert_int_equal(n, 2);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(rows[i].reason, HBM_DIFF_GREW);
    assert_int_equal(rows[i].delta, 20);
    assert_int_equal(rows[i].b_size, rows[i].a_size + 20);
  }
  assert_int_equal(row_for(t.d, HBM_DIFF_BY_OP, "act", HBM_DIFF_GREW)->delta, 40);
  assert_tables_add_up(t.d);
  close_pair(&t);
}

/* A runtime profile against a plan: still compared, and the notes say what is not. The
 * runtime side: alloc 1000 (op "x"), alloc 3000 (op "y"), free the first: peak 4000. */
static void test_different_kinds(void **state) {
  (void)state;
  hbm_profile_t *r = hbm_profile_new(HBM_PROFILE_RUNTIME, "run");
  assert_int_equal(hbm_profile_add_space(r, "HBM", "cuda:0", 0, 0), 0);
  hbm_tag_t x = {.op = "x"}, y = {.op = "y"};
  assert_true(hbm_profile_alloc_at(r, hbm_profile_add_step(r, 10, NULL), 0, 0x100, 1000, &x) >= 0);
  assert_true(hbm_profile_alloc_at(r, hbm_profile_add_step(r, 20, NULL), 0, 0x900, 3000, &y) >= 0);
  assert_int_equal(hbm_profile_free_at(r, hbm_profile_add_step(r, 30, NULL), 0, 0x100), HBM_OK);
  assert_int_equal(hbm_profile_finish(r), HBM_OK);
  hbm_reserve_event_t grow = {.step = 0, .space = 0, .op = HBM_RESERVE_GROW, .size = 8192};
  assert_int_equal(hbm_profile_add_reserve(r, &grow), HBM_OK);
  pair_t t;
  open_pair(&t, r, plan_of("B", specs_b, 6));
  assert_int_equal(hbm_diff_summary(t.d, 0)->peak_bytes, 4000);
  assert_int_equal(hbm_diff_change(t.d), 1120 - 4000);
  assert_int_equal(row_for(t.d, HBM_DIFF_BY_REASON, "gone", HBM_DIFF_GONE)->delta, -4000);
  assert_int_equal(row_for(t.d, HBM_DIFF_BY_REASON, "new", HBM_DIFF_NEW)->delta, 1120);
  assert_tables_add_up(t.d);
  size_t n;
  const char *const *notes = hbm_diff_notes(t.d, &n);
  assert_int_equal(n, 2);
  assert_non_null(strstr(notes[0], "A is a runtime profile"));
  assert_non_null(strstr(notes[0], "B is a compile-time plan"));
  assert_non_null(strstr(notes[1], "no buffer of A has a counterpart in B"));
  close_pair(&t);
}

static json_t *json_of(const hbm_diff_t *d) {
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  const char *labels[2] = {"before", "after"};
  assert_int_equal(hbm_diff_json(d, labels, mem), HBM_OK);
  fclose(mem);
  json_error_t err;
  json_t *j = json_loadb(text, len, 0, &err);
  free(text);
  if (!j)
    fail_msg("JSON: %s", err.text);
  return j;
}

static void test_json_and_text(void **state) {
  (void)state;
  pair_t t;
  open_pair(&t, plan_of("A", specs_a, 6), plan_of("B", specs_b, 6));
  json_t *j = json_of(t.d);
  assert_int_equal(json_integer_value(json_object_get(j, "change")), 310);
  assert_string_equal(json_string_value(json_object_get(json_object_get(j, "a"), "label")),
                      "before");
  assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "b"), "peak_bytes")),
                   1120);
  static const char *const tables[] = {"by_buffer", "by_op",    "by_source", "by_category",
                                       "by_shape",  "by_group", "by_reason"};
  for (size_t k = 0; k < 7; k++) {
    json_t *rows = json_object_get(j, tables[k]);
    assert_true(json_is_array(rows));
    json_int_t sum = 0;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row) sum += json_integer_value(json_object_get(row, "delta"));
    assert_int_equal(sum, 310);
  }
  json_decref(j);
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  assert_int_equal(hbm_diff_text(t.d, NULL, 0, mem), HBM_OK);
  fclose(mem);
  assert_non_null(strstr(text, "change of the peak: +310B"));
  assert_non_null(strstr(text, "lived longer across the peak"));
  assert_non_null(strstr(text, "f32[50] -> f32[75]"));
  free(text);
  close_pair(&t);
}

/* Steps 2-4 of A as a profile of 3 steps, buffers clipped to them: its peak (step 3 of A = step 1
 * of the window) is still 810; steps 0-2 of A: peak at step 1 = 660. */
static void test_window(void **state) {
  (void)state;
  hbm_profile_t *a = plan_of("A", specs_a, 6);
  hbm_profile_t *w = hbm_profile_window(a, 2, 5);
  assert_non_null(w);
  assert_int_equal(hbm_profile_step_count(w), 3);
  hbm_analysis_t *an = hbm_analyze(w, 0);
  assert_int_equal(hbm_analysis_summary(an)->peak_bytes, 810);
  assert_int_equal(hbm_analysis_summary(an)->peak_step, 1);
  hbm_analysis_free(an);
  hbm_profile_free(w);
  w = hbm_profile_window(a, 0, 2);
  an = hbm_analyze(w, 0);
  assert_int_equal(hbm_analysis_summary(an)->peak_bytes, 660);
  hbm_analysis_free(an);
  hbm_profile_free(w);
  assert_null(hbm_profile_window(a, 5, 5));
  assert_non_null(strstr(hbm_last_error(), "not a window"));
  assert_null(hbm_profile_window(a, 0, 11));
  hbm_profile_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_each_reason),   cmocka_unit_test(test_reversed),
      cmocka_unit_test(test_pairing_order), cmocka_unit_test(test_different_kinds),
      cmocka_unit_test(test_json_and_text), cmocka_unit_test(test_window),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
