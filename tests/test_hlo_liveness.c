/* test_hlo_liveness.c — live ranges over the flattened schedule: the printed order of the
 * entry with while/conditional/call bodies expanded after their instruction; a buffer is
 * live from its definition through its last use; parameters, constants, outputs and
 * thread-local values live throughout; element-wise ops take over an operand that dies at
 * them; loop state stays live for the whole loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo/hlo.h"
#include "hlo_helpers.h"

static const hlo_buffer_t *buffer(const planned_t *p, const char *name) {
  for (uint32_t v = 0; v < p->as.n_values; v++)
    if (p->as.values[v].subshape == 0 && hbm__hlo_str_eq(p->as.values[v].instr->name, name))
      return &p->as.buffers[p->as.value_buffer[v]];
  fail_msg("no value for %s", name);
  return NULL;
}

static void expect_range(const planned_t *p, const char *name, uint32_t start, uint32_t end) {
  const hlo_buffer_t *b = buffer(p, name);
  if (b->start != start || b->end != end)
    fail_msg("%s: [%u, %u), expected [%u, %u)", name, b->start, b->end, start, end);
}

static void chain_ranges(void **state) {
  (void)state;
  planned_t p;
  plan_file(&p, "chain.hlo");
  static const char *order[] = {"p", "zero", "a", "b", "c", "d", "e", "f", "r"};
  assert_int_equal(p.as.n_steps, 9);
  for (uint32_t s = 0; s < 9; s++)
    assert_true(hbm__hlo_str_eq(p.as.steps[s].instr->name, order[s]));
  expect_range(&p, "a", 2, 6); /* last read by d at step 5 */
  expect_range(&p, "b", 3, 5);
  expect_range(&p, "c", 4, 7);
  expect_range(&p, "d", 5, 9);
  expect_range(&p, "e", 6, 8);
  expect_range(&p, "f", 7, 9);
  /* indefinite: parameter, constant, output, and the reducer's thread-local values */
  const char *whole[] = {"p", "zero", "r", "x", "y", "sum"};
  for (size_t i = 0; i < 6; i++) {
    assert_true(buffer(&p, whole[i])->indefinite);
    expect_range(&p, whole[i], 0, 9);
  }
  assert_true(buffer(&p, "x")->flags & HLO_V_THREAD);
  assert_true(p.as.temp_peak[0] == 16384);
  assert_int_equal(p.as.temp_peak_step[0], 4);
  assert_true(p.as.heap_bytes[0] == 16384);
  release(&p);
}

static void bodies_follow_their_instruction(void **state) {
  (void)state;
  planned_t p;
  plan_file(&p, "while_loop.hlo");
  static const char *order[] = {"p",   "zero", "init", "init", "w", "s",   "i", "n",  "lt",
                                "s.1", "i.1",  "one",  "i.2",  "v", "v.2", "t", "out"};
  order[2] = "init_v";
  assert_int_equal(p.as.n_steps, 17);
  for (uint32_t s = 0; s < 17; s++)
    if (!hbm__hlo_str_eq(p.as.steps[s].instr->name, order[s]))
      fail_msg("step %u is %.*s, expected %s", s, (int)p.as.steps[s].instr->name.n,
               p.as.steps[s].instr->name.p, order[s]);
  /* the counter lives from the while through the body's last use */
  const hlo_buffer_t *counter = &p.as.buffers[p.as.value_buffer[0]];
  for (uint32_t v = 0; v < p.as.n_values; v++)
    if (hbm__hlo_str_eq(p.as.values[v].instr->name, "w") && p.as.values[v].subshape == 1)
      counter = &p.as.buffers[p.as.value_buffer[v]];
  assert_int_equal(counter->start, 4);
  assert_int_equal(counter->end, 16);
  expect_range(&p, "lt", 8, 9);
  release(&p);
}

static void elementwise_reuse(void **state) {
  (void)state;
  planned_t p;
  plan_text(&p,
            "HloModule ew\n"
            "ENTRY %e (p: f32[256]) -> f32[256] {\n"
            "  %p = f32[256]{0} parameter(0)\n"
            "  %x = f32[256]{0} exponential(%p)\n" /* 1 */
            "  %y = f32[256]{0} log(%x)\n"         /* 2: x dies here, y takes it */
            "  %z = f32[256]{0} tanh(%y)\n"        /* 3: y dies here, z takes it */
            "  %w = f32[256]{0} sine(%z)\n"        /* 4: z is read again at 5 */
            "  %v = f32[256]{0} add(%z, %w)\n"     /* 5: takes z (its first operand) */
            "  %c = s32[256]{0} convert(%v)\n"     /* 6: same size, element-wise */
            "  %h = f16[256]{0} convert(%c)\n"     /* 7: smaller: no reuse */
            "  ROOT %o = f16[256]{0} negate(%h)\n" /* output: never reuses */
            "}\n",
            "ew");
  expect_range(&p, "x", 1, 2);
  expect_range(&p, "y", 2, 3);
  expect_range(&p, "z", 3, 5);
  expect_range(&p, "w", 4, 6);
  expect_range(&p, "v", 5, 6);
  expect_range(&p, "c", 6, 8);
  expect_range(&p, "h", 7, 9);
  uint32_t chain = buffer(&p, "x")->share_group;
  const char *in_chain[] = {"y", "z", "v", "c"};
  for (size_t i = 0; i < 4; i++)
    assert_int_equal(buffer(&p, in_chain[i])->share_group, chain);
  assert_int_not_equal(buffer(&p, "w")->share_group, chain);
  assert_int_not_equal(buffer(&p, "h")->share_group, chain);
  /* reuse keeps the peak to what is really live: z and w, then v and w */
  assert_true(p.as.temp_peak[0] == 2048);
  assert_true(p.as.heap_bytes[0] == 2048);
  release(&p);
}

static void unused_values_live_one_step(void **state) {
  (void)state;
  planned_t p;
  plan_text(&p,
            "HloModule u\n"
            "ENTRY %e (p: f32[8]) -> f32[8] {\n"
            "  %p = f32[8]{0} parameter(0)\n"
            "  %dead = f32[1000]{0} broadcast(%p), dimensions={}\n"
            "  ROOT %r = f32[8]{0} negate(%p)\n"
            "}\n",
            "test");
  expect_range(&p, "dead", 1, 2);
  assert_true(p.as.temp_peak[0] == 4000);
  release(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chain_ranges),
      cmocka_unit_test(bodies_follow_their_instruction),
      cmocka_unit_test(elementwise_reuse),
      cmocka_unit_test(unused_values_live_one_step),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
