/* test_base_units.c — sizes in and out, the error buffer, the u64 map, the interner, growing
 * arrays and file names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the headers above first: keep it in its own include block. */
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static void parse_size_accepts_units(void **state) {
  (void)state;
  uint64_t v = 0;
  assert_int_equal(hbm_parse_size("16GiB", "HBM_SIM_MEMORY", &v), HBM_OK);
  assert_true(v == 17179869184ull);
  assert_int_equal(hbm_parse_size("80GB", "x", &v), HBM_OK);
  assert_true(v == 80000000000ull);
  assert_int_equal(hbm_parse_size("1073741824", "x", &v), HBM_OK);
  assert_true(v == 1073741824ull);
  assert_int_equal(hbm_parse_size("1.5KiB", "x", &v), HBM_OK);
  assert_true(v == 1536);
  assert_int_equal(hbm_parse_size("512 mib", "x", &v), HBM_OK);
  assert_true(v == 512ull << 20);
}

static void parse_size_refuses_garbage(void **state) {
  (void)state;
  uint64_t v = 7;
  const char *bad[] = {"", "abc", "-1", "12XB", "1.5", "1e30", "GiB", "0x10"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(hbm_parse_size(bad[i], "HBM_SIM_MEMORY", &v), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(), "HBM_SIM_MEMORY"));
  }
  assert_true(v == 7);
}

static void format_bytes_is_readable(void **state) {
  (void)state;
  char buf[32];
  assert_string_equal(hbm_format_bytes(123, buf, sizeof buf), "123B");
  assert_string_equal(hbm_format_bytes(16ull << 30, buf, sizeof buf), "16.00GiB");
  assert_string_equal(hbm_format_bytes(200ull << 30, buf, sizeof buf), "200.0GiB");
}

static void long_errors_are_kept_whole(void **state) {
  (void)state;
  char big[5000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  assert_int_equal(hbm__error(HBM_ERR_IO, "%s!", big), HBM_ERR_IO);
  assert_int_equal(strlen(hbm_last_error()), sizeof big);
  assert_int_equal(hbm_last_status(), HBM_ERR_IO);
}

static void u64map_survives_churn(void **state) {
  (void)state;
  hbm_u64map_t m;
  hbm_u64map_init(&m);
  for (uint64_t i = 0; i < 100000; i++)
    assert_true(hbm_u64map_put(&m, i * 256, i));
  for (uint64_t i = 0; i < 100000; i += 2)
    assert_true(hbm_u64map_remove(&m, i * 256, NULL));
  uint64_t v;
  for (uint64_t i = 0; i < 100000; i++) {
    bool found = hbm_u64map_get(&m, i * 256, &v);
    assert_true(found == (i % 2 == 1));
    if (found)
      assert_true(v == i);
  }
  assert_int_equal(m.count, 50000);
  hbm_u64map_free(&m);
}

static void intern_shares_copies(void **state) {
  (void)state;
  hbm_intern_t *in = hbm_intern_new();
  char a[] = "dot.3", b[] = "dot.3";
  const char *x = hbm_intern(in, a), *y = hbm_intern(in, b);
  assert_ptr_equal(x, y);
  assert_ptr_not_equal(x, a);
  assert_ptr_equal(hbm_intern_n(in, "dot.35", 5), x);
  assert_null(hbm_intern(in, NULL));
  hbm_intern_free(in);
}

/* Capacities by hand: from 0 the first capacity (8), then doubling until `need` fits: 8 -> 16
 * for 9 items, 16 -> 128 for 100. A size past SIZE_MAX is refused with the array and its
 * capacity untouched. */
static void grow_array_doubles_and_refuses_overflow(void **state) {
  (void)state;
  size_t cap = 0;
  int *a = hbm__grow_array(NULL, &cap, 1, sizeof *a, 8);
  assert_non_null(a);
  assert_int_equal(cap, 8);
  assert_ptr_equal(hbm__grow_array(a, &cap, 8, sizeof *a, 8), a); /* fits: unchanged */
  assert_int_equal(cap, 8);
  a = hbm__grow_array(a, &cap, 9, sizeof *a, 8);
  assert_non_null(a);
  assert_int_equal(cap, 16);
  a[15] = 7;
  a = hbm__grow_array(a, &cap, 100, sizeof *a, 8);
  assert_non_null(a);
  assert_int_equal(cap, 128);
  assert_int_equal(a[15], 7);
  assert_null(hbm__grow_array(a, &cap, SIZE_MAX / 2, sizeof *a, 8));
  assert_int_equal(hbm_last_status(), HBM_ERR_HOST_MEMORY);
  assert_int_equal(cap, 128);
  free(a);
}

static void file_names(void **state) {
  (void)state;
  assert_string_equal(hbm__base_name("/tmp/run/host.123.hbmtrace"), "host.123.hbmtrace");
  assert_string_equal(hbm__base_name("plain.pb"), "plain.pb");
  assert_true(hbm__ends_with("x.xplane.pb", ".xplane.pb"));
  assert_false(hbm__ends_with("pb", ".pb"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(parse_size_accepts_units),
      cmocka_unit_test(parse_size_refuses_garbage),
      cmocka_unit_test(format_bytes_is_readable),
      cmocka_unit_test(long_errors_are_kept_whole),
      cmocka_unit_test(u64map_survives_churn),
      cmocka_unit_test(intern_shares_copies),
      cmocka_unit_test(grow_array_doubles_and_refuses_overflow),
      cmocka_unit_test(file_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
