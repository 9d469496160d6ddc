/* test_hlo_alias.c — which instructions define buffers and which share them: bitcast,
 * get-tuple-element and tuple forwarding; while loops (in place when the initial value dies,
 * a copy when it is read later, the parameter itself when the body never writes it);
 * conditionals; calls; in-place dynamic-update-slice, in-place fusions and
 * output_to_operand_aliasing; input_output_alias; outputs that must be copies; async and
 * collective start/done pairs. */
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

/* The buffer of the value instruction `name` defines at pre-order subshape k. */
static uint32_t def_buffer(const planned_t *p, const char *name, uint32_t k) {
  for (uint32_t v = 0; v < p->as.n_values; v++) {
    const hlo_value_t *val = &p->as.values[v];
    if (val->subshape == k && hbm__hlo_str_eq(val->instr->name, name) && !(val->flags & HLO_V_COPY))
      return p->as.value_buffer[v];
  }
  fail_msg("%s{%u} defines no value", name, k);
  return UINT32_MAX;
}

/* The buffer at the top-level position of entry instruction `name` (forwarded or not). */
static uint32_t entry_buffer(const planned_t *p, const char *name) {
  const hlo_comp_t *e = p->m->entry;
  for (uint32_t i = 0; i < e->n_instrs; i++)
    if (hbm__hlo_str_eq(e->instrs[i]->name, name))
      return p->as.value_buffer[p->as.entry_value[i]];
  fail_msg("no entry instruction %s", name);
  return UINT32_MAX;
}

static bool defines_value(const planned_t *p, const char *name, uint32_t k) {
  for (uint32_t v = 0; v < p->as.n_values; v++)
    if (p->as.values[v].subshape == k && hbm__hlo_str_eq(p->as.values[v].instr->name, name))
      return true;
  return false;
}

static void forwarding_ops(void **state) {
  (void)state;
  planned_t p;
  plan_text(&p,
            "HloModule fwd\n"
            "ENTRY %e (t: (f32[8], s32[])) -> (f32[8], f32[2,4]) {\n"
            "  %t = (f32[8]{0}, s32[]) parameter(0)\n"
            "  %g = f32[8]{0} get-tuple-element(%t), index=0\n"
            "  %n = f32[8]{0} negate(%g)\n"
            "  %b = f32[2,4]{1,0} bitcast(%n)\n"
            "  %c = f32[2,4]{1,0} copy(%b)\n"
            "  ROOT %r = (f32[8]{0}, f32[2,4]{1,0}) tuple(%n, %c)\n"
            "}\n",
            "fwd");
  assert_false(defines_value(&p, "g", 0));
  assert_false(defines_value(&p, "b", 0));
  assert_int_equal(entry_buffer(&p, "g"), def_buffer(&p, "t", 1));
  assert_int_equal(entry_buffer(&p, "b"), def_buffer(&p, "n", 0));
  assert_int_not_equal(def_buffer(&p, "c", 0), def_buffer(&p, "n", 0));
  /* the tuple defines only its table; its elements are n and c */
  assert_true(p.as.buffers[def_buffer(&p, "r", 0)].bytes == 16);
  assert_false(defines_value(&p, "r", 1));
  /* the parameter tuple: its table and both leaves are parameters */
  assert_true(p.as.buffers[def_buffer(&p, "t", 0)].flags & HLO_V_PARAM);
  assert_true(p.as.buffers[def_buffer(&p, "t", 2)].flags & HLO_V_PARAM);
  assert_true(p.as.buffers[def_buffer(&p, "n", 0)].flags & HLO_V_OUTPUT);
  release(&p);
}

static void while_updates_in_place(void **state) {
  (void)state;
  planned_t p;
  plan_file(&p, "while_loop.hlo");
  uint32_t vec = def_buffer(&p, "init_v", 0);
  assert_int_equal(def_buffer(&p, "w", 2), vec);   /* the loop's vector */
  assert_int_equal(def_buffer(&p, "s.1", 2), vec); /* the body's parameter */
  assert_int_equal(def_buffer(&p, "s", 2), vec);   /* the condition's parameter */
  assert_int_equal(def_buffer(&p, "v.2", 0), vec); /* the new value */
  assert_int_equal(entry_buffer(&p, "out"), vec);
  assert_true(p.as.buffers[vec].flags & HLO_V_OUTPUT);
  assert_true(p.as.buffers[vec].flags & HLO_V_LOOP);
  /* the counter: the loop may not write the constant it starts from */
  uint32_t counter = def_buffer(&p, "w", 1);
  assert_int_not_equal(counter, def_buffer(&p, "zero", 0));
  assert_int_equal(def_buffer(&p, "i.2", 0), counter);
  assert_false(p.as.buffers[counter].indefinite);
  assert_int_equal(def_buffer(&p, "w", 0), def_buffer(&p, "init", 0));
  assert_int_equal(p.as.n_buffers, 8);
  release(&p);
}

static void while_copies_what_is_read_later(void **state) {
  (void)state;
  planned_t p;
  plan_file(&p, "while_copy.hlo");
  uint32_t acc = def_buffer(&p, "loop", 2);
  assert_int_not_equal(acc, def_buffer(&p, "start", 0));
  assert_int_equal(def_buffer(&p, "acc.2", 0), acc);
  /* the weights pass through unchanged: the loop reads the parameter */
  uint32_t w = def_buffer(&p, "weights", 0);
  assert_int_equal(def_buffer(&p, "loop", 3), w);
  assert_true(p.as.buffers[w].flags & HLO_V_PARAM);
  release(&p);
}

static void conditional_branches_write_the_result(void **state) {
  (void)state;
  planned_t p;
  plan_file(&p, "conditional.hlo");
  uint32_t c = def_buffer(&p, "c", 0);
  assert_int_equal(def_buffer(&p, "neg", 0), c);
  assert_int_equal(def_buffer(&p, "ex", 0), c);
  assert_int_equal(p.as.buffers[c].n_values, 3);
  /* the branch parameters are the operand x itself */
  assert_false(defines_value(&p, "tp", 0));
  release(&p);
}

static void call_forwards(void **state) {
  (void)state;
  planned_t p;
  plan_file(&p, "call.hlo");
  assert_false(defines_value(&p, "a", 0));
  assert_false(defines_value(&p, "z", 0));
  assert_int_equal(entry_buffer(&p, "z"), def_buffer(&p, "m", 0));
  /* y dies at the multiply, which writes over it (element-wise reuse) */
  const hlo_buffer_t *y = &p.as.buffers[def_buffer(&p, "y", 0)];
  const hlo_buffer_t *m = &p.as.buffers[def_buffer(&p, "m", 0)];
  assert_int_equal(y->share_group, m->share_group);
  assert_int_equal(y->end, m->start);
  assert_true(y->offset == m->offset);
  release(&p);
}

static void in_place_updates(void **state) {
  (void)state;
  planned_t p;
  plan_file(&p, "inplace.hlo");
  uint32_t buf = def_buffer(&p, "buf", 0);
  assert_int_equal(def_buffer(&p, "upd", 0), buf);
  assert_int_equal(def_buffer(&p, "cc", 0), buf); /* output_to_operand_aliasing */
  assert_int_equal(p.as.buffers[buf].n_values, 3);
  /* buf2 is read after its update: the update needs its own buffer */
  assert_int_not_equal(def_buffer(&p, "upd2", 0), def_buffer(&p, "buf2", 0));
  release(&p);
  plan_file(&p, "fusion_inplace.hlo");
  assert_int_equal(def_buffer(&p, "updated", 0), def_buffer(&p, "scaled", 0));
  assert_int_not_equal(def_buffer(&p, "final", 0), def_buffer(&p, "updated", 0));
  release(&p);
}

static void input_output_alias_and_copies(void **state) {
  (void)state;
  planned_t p;
  plan_file(&p, "io_alias.hlo");
  uint32_t st = def_buffer(&p, "state", 0);
  assert_int_equal(def_buffer(&p, "next", 0), st); /* written into the donated parameter */
  assert_true(p.as.buffers[st].flags & HLO_V_ALIASED);
  assert_true(p.as.buffers[st].flags & HLO_V_OUTPUT);
  /* output {1} is parameter 1, not aliased: a copy */
  uint32_t copies = 0;
  for (uint32_t b = 0; b < p.as.n_buffers; b++)
    if (p.as.buffers[b].flags & HLO_V_COPY) {
      copies++;
      assert_true(p.as.buffers[b].bytes == 2048);
      assert_true(p.as.buffers[b].flags & HLO_V_OUTPUT);
    }
  assert_int_equal(copies, 1);
  assert_false(p.as.buffers[def_buffer(&p, "other", 0)].flags & HLO_V_OUTPUT);
  release(&p);
}

static void async_pairs(void **state) {
  (void)state;
  planned_t p;
  plan_file(&p, "async.hlo");
  /* all-gather-start {0} is the operand; {1} the gathered result, returned by done */
  assert_false(defines_value(&p, "ags", 1));
  assert_int_equal(entry_buffer(&p, "agd"), def_buffer(&p, "ags", 2));
  /* async-start {0,0} is the operand x, which stays live until async-done */
  assert_false(defines_value(&p, "as", 2));
  const hlo_buffer_t *x = &p.as.buffers[def_buffer(&p, "x", 0)];
  assert_int_equal(x->end, 5); /* async-done is step 4 */
  assert_int_equal(entry_buffer(&p, "ad"), def_buffer(&p, "as", 3));
  /* copy-start {0} is the destination (memory space 1), copy-done returns it */
  uint32_t dest = def_buffer(&p, "cs", 1);
  assert_int_equal(entry_buffer(&p, "cd"), dest);
  assert_int_equal(p.as.buffers[dest].color, 1);
  assert_false(defines_value(&p, "cs", 2));
  release(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(forwarding_ops),
      cmocka_unit_test(while_updates_in_place),
      cmocka_unit_test(while_copies_what_is_read_later),
      cmocka_unit_test(conditional_branches_write_the_result),
      cmocka_unit_test(call_forwards),
      cmocka_unit_test(in_place_updates),
      cmocka_unit_test(input_output_alias_and_copies),
      cmocka_unit_test(async_pairs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
