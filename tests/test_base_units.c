/* test_base_units.c — sizes in and out, the error buffer, the u64 map and the interner. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka needs the headers above first: keep it in its own include block. */
#include <cmocka.h>

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(parse_size_accepts_units), cmocka_unit_test(parse_size_refuses_garbage),
      cmocka_unit_test(format_bytes_is_readable), cmocka_unit_test(long_errors_are_kept_whole),
      cmocka_unit_test(u64map_survives_churn),    cmocka_unit_test(intern_shares_copies),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
