/* test_hlo_shape.c — byte sizes of HLO shapes: every element type, sub-byte packing, tiled
 * TPU layouts (padding of the minor dimensions, packing sub-tiles, scalars in tiles),
 * element sizes, memory spaces, dynamic dimensions, tuples and their subshape indices, and
 * the errors for malformed shapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "hlo/lexer.h"

typedef struct shape_case {
  const char *text;
  uint64_t unpadded, padded;
} shape_case_t;

static const hlo_shape_t *parse(hlo_arena_t *arena, const char *text) {
  hlo_lexer_t lx;
  hbm__hlo_lex_init(&lx, text, strlen(text), "shape");
  const hlo_shape_t *s = hbm__parse_shape(&lx, arena);
  if (s)
    assert_int_equal(hbm__hlo_lex_at_end(&lx), 1);
  return s;
}

static void check_cases(const shape_case_t *cases, size_t n) {
  hlo_arena_t arena;
  hbm__hlo_arena_init(&arena);
  for (size_t i = 0; i < n; i++) {
    const hlo_shape_t *s = parse(&arena, cases[i].text);
    if (!s)
      fail_msg("%s: %s", cases[i].text, hbm_last_error());
    if (s->unpadded_bytes != cases[i].unpadded || s->bytes != cases[i].padded)
      fail_msg("%s: unpadded %llu padded %llu, expected %llu %llu", cases[i].text,
               (unsigned long long)s->unpadded_bytes, (unsigned long long)s->bytes,
               (unsigned long long)cases[i].unpadded, (unsigned long long)cases[i].padded);
  }
  hbm__hlo_arena_free(&arena);
}

static void every_element_type(void **state) {
  (void)state;
  static const shape_case_t cases[] = {
      {"pred[10]", 10, 10},
      {"s1[16]", 2, 2},
      {"s2[10]", 3, 3},
      {"s4[3]", 2, 2},
      {"s8[7]", 7, 7},
      {"s16[3]", 6, 6},
      {"s32[3]", 12, 12},
      {"s64[3]", 24, 24},
      {"u1[9]", 2, 2},
      {"u2[4]", 1, 1},
      {"u4[5]", 3, 3},
      {"u8[5]", 5, 5},
      {"u16[5]", 10, 10},
      {"u32[5]", 20, 20},
      {"u64[5]", 40, 40},
      {"f16[5]", 10, 10},
      {"bf16[5]", 10, 10},
      {"f32[5]", 20, 20},
      {"f64[5]", 40, 40},
      {"c64[5]", 40, 40},
      {"c128[5]", 80, 80},
      {"f8e5m2[5]", 5, 5},
      {"f8e4m3[5]", 5, 5},
      {"f8e4m3fn[5]", 5, 5},
      {"f8e4m3b11fnuz[5]", 5, 5},
      {"f8e5m2fnuz[5]", 5, 5},
      {"f8e4m3fnuz[5]", 5, 5},
      {"f8e3m4[5]", 5, 5},
      {"f8e8m0fnu[5]", 5, 5},
      {"f4e2m1fn[5]", 3, 3},
      {"token[]", 0, 0},
      {"opaque[]", 8, 8},
      {"f32[]", 4, 4},
      {"f32[0,7]", 0, 0},
      {"f32[2,3]", 24, 24},
      {"f32[2,3]{0,1}", 24, 24},
  };
  check_cases(cases, sizeof cases / sizeof cases[0]);
}

static void tiled_layouts_pad(void **state) {
  (void)state;
  static const shape_case_t cases[] = {
      /* (8,128) tiles pad the two minor dimensions */
      {"f32[3,100]{1,0:T(8,128)}", 1200, 8 * 128 * 4},
      {"f32[16,256]{1,0:T(8,128)}", 16384, 16384},
      {"f32[2,128]{1,0:T(2,128)}", 1024, 1024},
      /* minor-to-major {0,2,1}: the minor dimension is dimension 0 */
      {"f32[128,2,64]{0,2,1:T(8,128)}", 65536, 65536},
      {"f32[2,2,64]{2,1,0:T(2,128)}", 1024, 2048},
      /* the (2,1) and (4,1) packing sub-tiles add nothing when the tile is full */
      {"bf16[3,128]{1,0:T(8,128)(2,1)}", 768, 2048},
      {"bf16[16,128]{1,0:T(8,128)(2,1)}", 4096, 4096},
      {"u8[327680,327680]{1,0:T(8,128)(4,1)}", 107374182400ull, 107374182400ull},
      {"bf16[327680,327680]{1,0:T(8,128)(2,1)}", 214748364800ull, 214748364800ull},
      /* a scalar in a tile is a whole tile; a vector tile on a matrix tiles the minor dim */
      {"s32[]{:T(128)}", 4, 512},
      {"s64[]{:T(128)}", 8, 1024},
      {"f32[128]{0:T(128)}", 512, 512},
      {"f32[200]{0:T(256)}", 800, 1024},
      {"f32[5,3]{1,0:T(4)}", 60, 80},
      /* a '*' dimension is not tiled */
      {"f32[5,3]{1,0:T(*,4)}", 60, 80},
      /* element size, tail padding, memory space, other attributes skipped */
      {"s4[1000]{0:E(4)}", 500, 500},
      {"s4[1000]{0:E(8)}", 500, 1000},
      {"f32[3]{0:L(1024)}", 12, 4096},
      {"f32[4]{0:S(1)}", 16, 16},
      {"f32[8,128]{1,0:T(8,128)S(5)}", 4096, 4096},
      {"f32[4]{0:#(s32)*(u64)M(8)}", 16, 16},
      {"f32[4,4]{1,0:D(D,D)T(2,2)}", 64, 64},
      /* dynamic dimensions take their bound; an unbounded one has no static size */
      {"f32[<=16,100]{1,0}", 6400, 6400},
      {"f32[?,100]", 0, 0},
  };
  check_cases(cases, sizeof cases / sizeof cases[0]);
}

static void memory_space_is_the_colour(void **state) {
  (void)state;
  hlo_arena_t arena;
  hbm__hlo_arena_init(&arena);
  assert_int_equal(hbm__shape_color(parse(&arena, "f32[4]{0:S(1)}")), 1);
  assert_int_equal(hbm__shape_color(parse(&arena, "f32[4]{0:T(4)S(5)}")), 5);
  assert_int_equal(hbm__shape_color(parse(&arena, "f32[4]")), 0);
  const hlo_shape_t *s = parse(&arena, "f32[<=4,?]");
  assert_true(s->is_dynamic);
  hbm__hlo_arena_free(&arena);
}

static void tuples_and_indices(void **state) {
  (void)state;
  hlo_arena_t arena;
  hbm__hlo_arena_init(&arena);
  const hlo_shape_t *s =
      parse(&arena, "(f32[2]{0}, (s32[], bf16[4,4]{1,0}), /*index=2*/token[], ())");
  assert_non_null(s);
  assert_int_equal(s->etype, HLO_T_TUPLE);
  assert_int_equal(s->rank, 4);
  assert_true(s->bytes == 32); /* the table of four pointers */
  assert_int_equal(s->n_subshapes, 7);
  /* pre-order: 0 (), 1 f32, 2 (s32,bf16), 3 s32, 4 bf16, 5 token, 6 () */
  assert_int_equal(hbm__shape_elem_offset(s, 1), 2);
  assert_int_equal(hbm__shape_elem_offset(s, 3), 6);
  assert_int_equal(hbm__shape_elem_offset(s, 4), UINT32_MAX);
  int64_t path[] = {1, 1};
  assert_int_equal(hbm__shape_index_offset(s, path, 2), 4);
  assert_true(hbm__shape_subshape(s, 4)->bytes == 32);
  assert_int_equal(hbm__shape_subshape(s, 3)->etype, HLO_T_S32);
  char buf[32];
  hbm__shape_index_text(s, 4, buf, sizeof buf);
  assert_string_equal(buf, "{1,1}");
  hbm__shape_index_text(s, 0, buf, sizeof buf);
  assert_string_equal(buf, "{}");
  assert_true(hbm__shape_subshape(s, 6)->bytes == 0);
  assert_null(hbm__shape_subshape(s, 7));
  hbm__hlo_arena_free(&arena);
}

static void type_names_round_trip(void **state) {
  (void)state;
  for (int t = HLO_T_PRED; t < HLO_T_TUPLE; t++) {
    const char *name = hbm__etype_name((hlo_etype_t)t);
    assert_int_equal(hbm__etype_lookup(name, strlen(name)), t);
  }
  assert_int_equal(hbm__etype_lookup("tuple", 5), HLO_T_INVALID);
  assert_int_equal(hbm__etype_lookup("f33", 3), HLO_T_INVALID);
}

static void bad_shapes_are_errors(void **state) {
  (void)state;
  static const struct {
    const char *text, *expect;
  } cases[] = {
      {"f33[2]", "1:1: expected an element type"},
      {"f32[2,", "expected a dimension size"},
      {"f32[-1]", "expected a dimension size"},
      {"f32[2]{5}", "layout dimension 5 is out of range"},
      {"f32[2]{0:Q}", "expected a layout attribute"},
      {"f32[2]{0:T(0)}", "expected a positive tile dimension"},
      {"f32[9223372036854775807,9223372036854775807]", "is too large"},
      {"f32[99999999999999999999]", "integer out of range"},
      {"(f32[2], s32[]", "expected ')'"},
      {"f32", "expected '['"},
      {"", "expected a shape"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hlo_arena_t arena;
    hbm__hlo_arena_init(&arena);
    hlo_lexer_t lx;
    hbm__hlo_lex_init(&lx, cases[i].text, strlen(cases[i].text), "shape");
    assert_null(hbm__parse_shape(&lx, &arena));
    if (!strstr(hbm_last_error(), cases[i].expect))
      fail_msg("'%s': got '%s', expected '%s'", cases[i].text, hbm_last_error(), cases[i].expect);
    assert_int_equal(hbm_last_status(), HBM_ERR_PARSE);
    hbm__hlo_arena_free(&arena);
  }
}

static void deep_tuples_are_refused(void **state) {
  (void)state;
  char text[4096];
  size_t n = 0;
  for (int i = 0; i < 1000; i++)
    text[n++] = '(';
  text[n] = '\0';
  hlo_arena_t arena;
  hbm__hlo_arena_init(&arena);
  hlo_lexer_t lx;
  hbm__hlo_lex_init(&lx, text, n, "deep");
  assert_null(hbm__parse_shape(&lx, &arena));
  assert_non_null(strstr(hbm_last_error(), "nested more than"));
  hbm__hlo_arena_free(&arena);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_element_type),         cmocka_unit_test(tiled_layouts_pad),
      cmocka_unit_test(memory_space_is_the_colour), cmocka_unit_test(tuples_and_indices),
      cmocka_unit_test(type_names_round_trip),      cmocka_unit_test(bad_shapes_are_errors),
      cmocka_unit_test(deep_tuples_are_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
