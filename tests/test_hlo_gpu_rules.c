/* test_hlo_gpu_rules.c — XLA's GPU buffer-sharing rules as `hbm plan --backend gpu` applies
 * them, on small GPU-style modules of the kinds a distributed FFT pipeline is made of
 * (cuFFT's fft, custom calls, transposes, async all-to-all), each with its sizes worked
 * out by hand beside it from XLA's code:
 *  - buffer_sharing.cc (CanShareBufferHint): custom calls never write over an operand
 *    (except cuSOLVER's Cholesky {0} and a cuBLASLt bias), unless they declare
 *    output_to_operand_aliasing, which is an in-place pair;
 *  - hlo_dataflow_analysis.cc (CanShareOperandBufferWithUser): an fft is not element-wise,
 *    so its result never takes its operand's buffer;
 *  - heap_simulator.cc (RunComputation): the heap's ShareWith only when the result reads
 *    the instruction that defines the operand's value (IsUserOf), not through a bitcast;
 *  - hlo_dataflow_analysis.cc (async-start): the operands stay in the start's tuple, so
 *    they live until the done. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

static uint64_t gpu_temp(const char *text) {
  hbm_plan_options_t opt = {.backend = HBM_PLAN_BACKEND_GPU};
  hbm_plan_t *p = hbm_plan_text(text, strlen(text), "gpu.hlo", &opt);
  if (!p)
    fail_msg("%s", hbm_last_error());
  uint64_t t = hbm_plan_get_summary(p)->temp_bytes;
  hbm_plan_free(p);
  return t;
}

/* a (f32[256], 1024 B) lives [1,2] and is last read at step 2 by the instruction r that
 * defines the output (1024 B). Element-wise r (negate) may write over a: a lives in r's
 * output allocation, temp 0. A custom call may not (the GPU hook says no for every target
 * but two): a stays in the temp allocation, 1024 (a multiple of 128: no padding). With
 * output_to_operand_aliasing {}: (0, {}) the pair is one buffer, the output's: temp 0. */
static void custom_calls_do_not_share(void **state) {
  (void)state;
  static const char *head = "HloModule cc, is_scheduled=true\n"
                            "ENTRY e {\n"
                            "  p = f32[256]{0} parameter(0)\n"
                            "  a = f32[256]{0} exponential(p)\n";
  char text[1024];
  snprintf(text, sizeof text, "%s  ROOT r = f32[256]{0} negate(a)\n}\n", head);
  assert_true(gpu_temp(text) == 0);
  snprintf(text, sizeof text,
           "%s  ROOT r = f32[256]{0} custom-call(a), custom_call_target=\"cufft_plan\"\n}\n", head);
  assert_true(gpu_temp(text) == 1024);
  snprintf(text, sizeof text,
           "%s  ROOT r = f32[256]{0} custom-call(a), custom_call_target=\"cufft_plan\", "
           "output_to_operand_aliasing={{}: (0, {})}\n}\n",
           head);
  assert_true(gpu_temp(text) == 0);
}

/* The same with an fft (c64[128], 1024 B): not element-wise and no GPU hint, so XLA's
 * generic rule refuses: a stays in the temp allocation, 1024. */
static void fft_does_not_write_over_its_operand(void **state) {
  (void)state;
  const char *m = "HloModule f, is_scheduled=true\n"
                  "ENTRY e {\n"
                  "  p = c64[128]{0} parameter(0)\n"
                  "  a = c64[128]{0} exponential(p)\n"
                  "  ROOT r = c64[128]{0} fft(a), fft_type=FFT, fft_length={128}\n"
                  "}\n";
  assert_true(gpu_temp(m) == 1024);
}

/* The output is a 4-byte reduce, so no temporary fits in an output allocation. a (1024 B)
 * lives [1,2]; c = negate(a) (1024 B) is defined at step 2 where a dies, and read by the
 * reduce at step 3. Reading a directly, c takes a's heap chunk (ShareWith): heap 1024.
 * Reading a through a bitcast, XLA's heap simulator does not share (the user must read
 * the value's defining instruction), so a and c meet at step 2: heap 2048. The reduce's
 * thread-local values have allocations of their own. */
static void heap_shares_only_a_direct_operand(void **state) {
  (void)state;
  static const char *reducer = "HloModule s, is_scheduled=true\n"
                               "%add (x: f32[], y: f32[]) -> f32[] {\n"
                               "  x = f32[] parameter(0)\n"
                               "  y = f32[] parameter(1)\n"
                               "  ROOT s = f32[] add(x, y)\n"
                               "}\n";
  char text[2048];
  snprintf(text, sizeof text,
           "%sENTRY e {\n"
           "  p = f32[16,16]{1,0} parameter(0)\n"
           "  a = f32[16,16]{1,0} exponential(p)\n"
           "  c = f32[16,16]{1,0} negate(a)\n"
           "  z = f32[] constant(0)\n"
           "  ROOT r = f32[] reduce(c, z), dimensions={0,1}, to_apply=%%add\n"
           "}\n",
           reducer);
  assert_true(gpu_temp(text) == 1024);
  snprintf(text, sizeof text,
           "%sENTRY e {\n"
           "  p = f32[256]{0} parameter(0)\n"
           "  a = f32[256]{0} exponential(p)\n"
           "  b = f32[16,16]{1,0} bitcast(a)\n"
           "  c = f32[16,16]{1,0} negate(b)\n"
           "  z = f32[] constant(0)\n"
           "  ROOT r = f32[] reduce(c, z), dimensions={0,1}, to_apply=%%add\n"
           "}\n",
           reducer);
  assert_true(gpu_temp(text) == 2048);
}

/* An all-to-all run asynchronously: its operand a (1024 B, step 1) stays in the start's
 * tuple {0} until the done (step 4); the done's result d is the start's {1} (1024 B,
 * defined at step 2, read at step 5); b (step 3) is read at step 5. The output is a
 * 4-byte reduce. a, d and b are all live at step 3: the heap is 3072. The start's two
 * tuple tables (8 B for {0}, 16 B for the top level) are tuple-shaped temporaries with
 * allocations of their own; CombineTempAllocations lays the heap and them end to end at
 * multiples of 128: 3072, then 128 for the 8-byte table, then the 16-byte table last:
 * temp 3216 (3208 had the tables come the other way round). Were a dead after the start,
 * b could take its chunk: heap 2048. */
static void async_all_to_all_keeps_its_operand(void **state) {
  (void)state;
  const char *m = "HloModule a2a, is_scheduled=true\n"
                  "%add (x: f32[], y: f32[]) -> f32[] {\n"
                  "  x = f32[] parameter(0)\n"
                  "  y = f32[] parameter(1)\n"
                  "  ROOT s = f32[] add(x, y)\n"
                  "}\n"
                  "%ac (q: f32[256]) -> f32[256] {\n"
                  "  q = f32[256]{0} parameter(0)\n"
                  "  ROOT t = f32[256]{0} all-to-all(q), dimensions={0}, "
                  "replica_groups=mesh['x'=2] {'x'}\n"
                  "}\n"
                  "ENTRY e {\n"
                  "  p = f32[256]{0} parameter(0)\n"
                  "  a = f32[256]{0} exponential(p)\n"
                  "  s = ((f32[256]{0}), f32[256]{0}) async-start(a), calls=%ac\n"
                  "  b = f32[256]{0} negate(p)\n"
                  "  d = f32[256]{0} async-done(s), calls=%ac\n"
                  "  c = f32[256]{0} add(d, b)\n"
                  "  z = f32[] constant(0)\n"
                  "  ROOT r = f32[] reduce(c, z), dimensions={0}, to_apply=%add\n"
                  "}\n";
  assert_true(gpu_temp(m) == 3216);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(custom_calls_do_not_share),
      cmocka_unit_test(fft_does_not_write_over_its_operand),
      cmocka_unit_test(heap_shares_only_a_direct_operand),
      cmocka_unit_test(async_all_to_all_keeps_its_operand),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
