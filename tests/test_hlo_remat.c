/* test_hlo_remat.c — rematerialization: on a module built for it the peak drops and the
 * plan fits; the recomputation is the same instruction on the same operands placed before
 * the late use, and the rematerialized module parses and plans to the same numbers; when
 * nothing cheap is live across the peak it says how far off it remains; side-effecting
 * instructions are never recomputed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

static char *read_fixture(const char *dir, const char *name, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/%s", HBM_SOURCE_DIR, dir, name);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *data = malloc((size_t)n + 1);
  assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
  data[n] = '\0';
  fclose(f);
  *len = (size_t)n;
  return data;
}

static char *report(const hbm_plan_t *p) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_int_equal(hbm_plan_report_text(p, f), HBM_OK);
  fclose(f);
  return text;
}

enum { MIB = 1 << 20 };
/* remat.hlo: parameters 100 KiB, constant 4 B, output 4 KiB, reducer values 12 B */
static const uint64_t indefinite = 102400 + 4 + 4096 + 12;

static void remat_lowers_the_peak(void **state) {
  (void)state;
  size_t len;
  char *text = read_fixture("tests/data/hlo", "remat.hlo", &len);
  hbm_plan_options_t opt = {.memory = 10 * MIB};
  hbm_plan_t *before = hbm_plan_text(text, len, "remat.hlo", &opt);
  assert_int_equal(hbm_plan_get_summary(before)->fits, 0);
  /* bc (4 MiB) and big (8 MiB) live together at mid */
  assert_true(hbm_plan_get_summary(before)->peak_bytes == indefinite + 12 * MIB + 8192);
  hbm_plan_free(before);

  opt.remat = 1;
  hbm_plan_t *p = hbm_plan_text(text, len, "remat.hlo", &opt);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_int_equal(s->fits, 1);
  assert_true(s->peak_before_remat == indefinite + 12 * MIB + 8192);
  assert_true(s->peak_bytes == indefinite + 8 * MIB + 8192);
  assert_int_equal(s->n_remat, 1);
  assert_true(s->remat_extra_flops == 0);              /* a broadcast only moves data */
  assert_true(s->remat_extra_bytes == 4 * MIB + 4096); /* writes 4 MiB, reads p */
  size_t n;
  const hbm_remat_info_t *r = hbm_plan_remats(p, &n);
  assert_int_equal(n, 1);
  assert_string_equal(r[0].instruction, "bc");
  assert_string_equal(r[0].clone, "bc.remat1");
  assert_true(r[0].bytes == 4 * MIB);
  char *out = report(p);
  assert_non_null(strstr(out, "Rematerialization: 1 instruction recomputed; peak 12.11M -> 8.11M"));
  assert_non_null(strstr(out, "%bc (4.00M) recomputed as %bc.remat1"));
  assert_non_null(strstr(out, "It now fits in 10.00M."));
  free(out);

  /* The new module: the copy recomputes the same thing from the same operand, the late
   * reduce reads it, the early one still reads the original; it plans to the same peak. */
  char *mod = hbm_plan_module_text(p);
  assert_non_null(strstr(mod, "  %bc.remat1 = f32[1024,1024]{1,0} broadcast(%p), "
                              "dimensions={1}, metadata={op_name=\"jit(f)/broadcast_in_dim\"}\n"
                              "  %late = f32[1024]{0} reduce(%bc.remat1, %zero)"));
  assert_non_null(strstr(mod, "%early = f32[1024]{0} reduce(%bc, %zero)"));
  hbm_plan_options_t plain = {.memory = 10 * MIB};
  hbm_plan_t *again = hbm_plan_text(mod, strlen(mod), "remat-out.hlo", &plain);
  if (!again)
    fail_msg("%s\n%s", hbm_last_error(), mod);
  assert_true(hbm_plan_get_summary(again)->peak_bytes == s->peak_bytes);
  assert_int_equal(hbm_plan_get_summary(again)->fits, 1);
  hbm_plan_free(again);
  free(mod);
  hbm_plan_free(p);
  free(text);
}

static void remat_says_how_far_off(void **state) {
  (void)state;
  size_t len;
  char *text = read_fixture("tests/data/hlo", "remat.hlo", &len);
  hbm_plan_options_t opt = {.memory = 5 * MIB, .remat = 1};
  hbm_plan_t *p = hbm_plan_text(text, len, "remat.hlo", &opt);
  const hbm_plan_summary_t *s = hbm_plan_get_summary(p);
  assert_int_equal(s->fits, 0);
  assert_int_equal(s->n_remat, 1); /* it still takes the 4 MiB it can */
  char *out = report(p);
  /* the 8 MiB product alone is larger than 5 MiB */
  assert_non_null(strstr(out, "RESOURCE_EXHAUSTED: Allocation (size=8388608) would exceed "
                              "memory (size=5242880)"));
  assert_non_null(strstr(out, "Still 3.11M over the 5.00M limit"));
  free(out);
  hbm_plan_free(p);
  /* every buffer fits on its own, the whole does not, even after remat */
  opt.memory = 8 * MIB + 50000;
  p = hbm_plan_text(text, len, "remat.hlo", &opt);
  assert_int_equal(hbm_plan_get_summary(p)->fits, 0);
  out = report(p);
  assert_non_null(strstr(out, "Still 63.2K over the 8.05M limit"));
  assert_non_null(strstr(out, "Ran out of memory in memory space hbm. Used 8.11M of 8.05M hbm."));
  free(out);
  hbm_plan_free(p);
  free(text);

  /* The seed: the big buffers are read at the peak; nothing can be recomputed. */
  text = read_fixture("examples", "seed_oom.hlo", &len);
  opt.memory = 17179869184ull;
  p = hbm_plan_text(text, len, "seed_oom.hlo", &opt);
  assert_int_equal(hbm_plan_get_summary(p)->n_remat, 0);
  out = report(p);
  assert_non_null(strstr(out, "Rematerialization: 0 instructions recomputed"));
  assert_non_null(strstr(out, "Still 484.00G over the 16.00G limit"));
  free(out);
  hbm_plan_free(p);
  free(text);
}

static void side_effects_are_never_duplicated(void **state) {
  (void)state;
  size_t len;
  char *text = read_fixture("tests/data/hlo", "remat.hlo", &len);
  /* The broadcast becomes a random number generator: recomputing it would change the
   * program's result. */
  char *at = strstr(text, "broadcast(%p), dimensions={1}");
  assert_non_null(at);
  char *changed = malloc(len + 64);
  size_t head = (size_t)(at - text);
  memcpy(changed, text, head);
  size_t n =
      head + (size_t)sprintf(changed + head, "rng(%%zero, %%zero), distribution=rng_uniform");
  const char *tail = at + strlen("broadcast(%p), dimensions={1}");
  memcpy(changed + n, tail, strlen(tail) + 1);
  hbm_plan_options_t opt = {.memory = 10 * MIB, .remat = 1};
  hbm_plan_t *p = hbm_plan_text(changed, strlen(changed), "rng.hlo", &opt);
  assert_non_null(p);
  assert_int_equal(hbm_plan_get_summary(p)->n_remat, 0);
  assert_int_equal(hbm_plan_get_summary(p)->fits, 0);
  hbm_plan_free(p);
  free(changed);
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(remat_lowers_the_peak),
      cmocka_unit_test(remat_says_how_far_off),
      cmocka_unit_test(side_effects_are_never_duplicated),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
