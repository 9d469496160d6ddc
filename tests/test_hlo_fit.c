/* test_hlo_fit.c — hbm_fit on a module family made here: for batch N the module is
 *   p = f32[N,256] parameter(0); t = exponential(p); ROOT r = add(t, p)
 * and its plan holds the parameter, the temporary t and the output, 1024 N bytes each (alignment
 * 1): 3072 N bytes. So the largest N that fits M bytes is floor(M / 3072), by hand; the search
 * must find it, with the plans at it and at the next value, whatever the range, the multiple
 * or the list of values; a smallest value that does not fit is a result with its plan; a plan
 * that cannot be made is an error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

typedef struct family {
  int calls;
  int64_t fail_at; /* the callback fails for this value (0: never) */
} family_t;

static hbm_plan_t *plan_batch(int64_t n, const hbm_plan_options_t *opt, void *ctx) {
  family_t *f = ctx;
  f->calls++;
  if (n == f->fail_at)
    return NULL;
  char text[512];
  snprintf(text, sizeof text,
           "HloModule fam_%lld, is_scheduled=true\n\nENTRY main {\n"
           "  p = f32[%lld,256]{1,0} parameter(0)\n"
           "  t = f32[%lld,256]{1,0} exponential(p)\n"
           "  ROOT r = f32[%lld,256]{1,0} add(t, p)\n}\n",
           (long long)n, (long long)n, (long long)n, (long long)n);
  hbm_plan_options_t o = *opt;
  o.backend = HBM_PLAN_BACKEND_NONE; /* alignment 1: exactly 3072 N bytes */
  return hbm_plan_text(text, strlen(text), "fam", &o);
}

static void check_found(const hbm_fit_result_t *r, int64_t value, int64_t next) {
  assert_true(r->found);
  assert_int_equal(r->value, value);
  assert_true(r->has_next);
  assert_int_equal(r->next, next);
  assert_true(hbm_plan_get_summary(r->plan)->fits);
  assert_false(hbm_plan_get_summary(r->next_plan)->fits);
  /* The plans are those of the values: 1024 N bytes of arguments. */
  assert_int_equal(hbm_plan_get_summary(r->plan)->argument_bytes, 1024 * value);
  assert_int_equal(hbm_plan_get_summary(r->next_plan)->argument_bytes, 1024 * next);
}

static void largest_batch(void **state) {
  (void)state;
  family_t f = {0};
  hbm_fit_options_t opt = {.plan.memory = 1 << 20};
  hbm_fit_result_t r;
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_OK);
  check_found(&r, 341, 342); /* 1048576 / 3072 = 341.3 */
  assert_int_equal(r.tried[0].value, 1);
  assert_int_equal(r.tried[0].used_bytes, 3072);
  assert_int_equal((size_t)f.calls, r.n_tried);
  assert_true(r.n_tried <= 20); /* doubling to 512, then bisection over 256 values */
  hbm_fit_result_free(&r);
  /* Exactly on the boundary: 341 * 3072 bytes fits, one byte less does not. */
  opt.plan.memory = 341 * 3072;
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_OK);
  check_found(&r, 341, 342);
  hbm_fit_result_free(&r);
  opt.plan.memory = 341 * 3072 - 1;
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_OK);
  check_found(&r, 340, 341);
  hbm_fit_result_free(&r);
}

static void multiples_and_ranges(void **state) {
  (void)state;
  family_t f = {0};
  hbm_fit_result_t r;
  /* Multiples of 8 from 8: 336 * 3072 = 1032192 fits 1 MiB, 344 * 3072 = 1056768 does not. */
  hbm_fit_options_t opt = {.plan.memory = 1 << 20, .lo = 8, .multiple = 8};
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_OK);
  check_found(&r, 336, 344);
  for (size_t i = 0; i < r.n_tried; i++)
    assert_int_equal(r.tried[i].value % 8, 0);
  hbm_fit_result_free(&r);
  /* Everything up to hi fits: hi is the answer, with no next value. */
  opt = (hbm_fit_options_t){.plan.memory = 1 << 30, .lo = 10, .hi = 1000};
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_OK);
  assert_true(r.found);
  assert_false(r.has_next);
  assert_int_equal(r.value, 1000);
  assert_null(r.next_plan);
  hbm_fit_result_free(&r);
  /* A list of values (files of a family): the largest of them that fits. */
  int64_t values[] = {1, 2, 4, 100, 200, 300, 400};
  opt = (hbm_fit_options_t){.plan.memory = 1 << 20, .values = values, .n_values = 7};
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_OK);
  check_found(&r, 300, 400);
  hbm_fit_result_free(&r);
}

static void smallest_does_not_fit(void **state) {
  (void)state;
  family_t f = {0};
  hbm_fit_options_t opt = {.plan.memory = 3000, .lo = 1};
  hbm_fit_result_t r;
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_OK);
  assert_false(r.found);
  assert_null(r.plan);
  assert_true(r.has_next);
  assert_int_equal(r.next, 1);
  assert_non_null(r.next_plan); /* its plan says what is at the peak */
  assert_int_equal(r.n_tried, 1);
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  assert_int_equal(hbm_fit_report_text(&r, "batch", out), HBM_OK);
  fclose(out);
  assert_non_null(strstr(text, "hbm fit: even the smallest batch, 1, does not fit in 2.93KiB"));
  assert_non_null(strstr(text, "batch 1: 3.00KiB (3072 bytes) used of 2.93KiB: does not fit"));
  assert_non_null(strstr(text, "Largest program allocations"));
  free(text);
  hbm_fit_result_free(&r);
}

static void reports(void **state) {
  (void)state;
  family_t f = {0};
  hbm_fit_options_t opt = {.plan.memory = 1 << 20};
  hbm_fit_result_t r;
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_OK);
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  assert_int_equal(hbm_fit_report_text(&r, "batch", out), HBM_OK);
  fclose(out);
  assert_non_null(strstr(text, "hbm fit: the largest batch that fits in 1.00MiB is 341\n"));
  assert_non_null(strstr(text, "batch 341: 1023.0KiB (1047552 bytes) used of 1.00MiB: fits, "
                               "1.00KiB to spare"));
  assert_non_null(strstr(text, "batch 342: 1.00MiB (1050624 bytes) used of 1.00MiB: does not "
                               "fit, over by 2.00KiB"));
  assert_non_null(strstr(text, "what is at the peak at batch 342"));
  assert_non_null(strstr(text, "XLA label: %t = f32[342,256]{1,0} exponential(%p)"));
  free(text);
  out = open_memstream(&text, &len);
  assert_int_equal(hbm_fit_report_json(&r, out), HBM_OK);
  fclose(out);
  assert_non_null(strstr(text, "\"value\": 341"));
  assert_non_null(strstr(text, "\"next\": 342"));
  assert_non_null(strstr(text, "\"used_bytes\": 1047552"));
  free(text);
  hbm_fit_result_free(&r);
}

static void errors(void **state) {
  (void)state;
  family_t f = {.fail_at = 4};
  hbm_fit_options_t opt = {.plan.memory = 1 << 20};
  hbm_fit_result_t r;
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "the plan for 4 could not be made"));
  assert_null(r.plan);
  opt.plan.memory = 0;
  f.fail_at = 0;
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "no memory to fit in"));
  int64_t values[] = {4, 2};
  opt = (hbm_fit_options_t){.plan.memory = 1 << 20, .values = values, .n_values = 2};
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "ascending"));
  opt = (hbm_fit_options_t){.plan.memory = 1 << 20, .lo = 5, .hi = 7, .multiple = 8};
  assert_int_equal(hbm_fit(plan_batch, &f, &opt, &r), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "no multiple of 8 between 5 and 7"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(largest_batch),
      cmocka_unit_test(multiples_and_ranges),
      cmocka_unit_test(smallest_does_not_fit),
      cmocka_unit_test(reports),
      cmocka_unit_test(errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
