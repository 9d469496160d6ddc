/* test_import_oom_module.c — `hbm explain --module` (src/import/oom_text_module.c): source
 * lines for pasted OOM texts from the program's compiled module, since JAX 0.5+ writes them
 * there (stack frames) and not into XLA's error texts.
 *
 * The data is real: tests/data/explain/xla_cpu_dump/oom_cpu.py was run by JAX 0.10.2 on the
 * CPU under `ulimit -v 5000000` with XLA_FLAGS=--xla_dump_to; xla_cpu_oom.txt is what it
 * printed, xla_cpu_dump/ the dump's after-optimizations HLO, buffer assignment and live-range
 * files of its three modules. The expected source lines are read from the program itself
 * (the line that calls jnp.sort, jnp.tanh, ...), the sizes from XLA's own dump files; never
 * from hbm. The GPU and TPU texts below are written by hand in the layouts XLA prints
 * (BufferAssignment::ToVerboseString in xla/service/buffer_assignment.cc; TPU's "Largest
 * program allocations" report) with this module's names: the CPU run prints neither. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"
#include "oom_written.h"

#define DATA HBM_SOURCE_DIR "/tests/data/explain/"
#define DUMP DATA "xla_cpu_dump"
#define PROGRAM "/tmp/hbm-explain/oom_cpu.py" /* where it ran: the module's FileNames say so */
#define MODULE_F DUMP "/module_0004.jit_f.cpu_after_optimizations"

/* The 1-based line of the program that holds `code`. */
static int64_t program_line(const char *code) {
  size_t len;
  char *text = th_read(DUMP "/oom_cpu.py", &len);
  assert_non_null(text);
  int64_t line = 1, found = 0;
  for (char *p = text; *p && !found; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p)) {
    char *nl = strchr(p, '\n');
    if (nl)
      *nl = '\0';
    if (strstr(p, code))
      found = line;
    if (nl)
      *nl = '\n';
    line++;
  }
  free(text);
  assert_true(found > 0);
  return found;
}

static hbm_oom_text_t *parse_text(const char *text) {
  hbm_oom_text_t *t = hbm_oom_text_parse(text, strlen(text), "pasted");
  assert_non_null(t);
  return t;
}

static hbm_oom_text_t *parse_fixture(const char *file) {
  size_t len;
  char *data = th_read(file, &len);
  assert_non_null(data);
  hbm_oom_text_t *t = hbm_oom_text_parse(data, len, file);
  free(data);
  assert_non_null(t);
  return t;
}

static const hbm_oom_buffer_t *buffer_of(const hbm_oom_text_t *t, const char *instruction) {
  for (size_t i = 0; i < t->n_buffers; i++)
    if (t->buffers[i].instruction && !strcmp(t->buffers[i].instruction, instruction))
      return &t->buffers[i];
  fail_msg("no buffer of instruction %s", instruction);
  return NULL;
}

static void expect_source(const hbm_oom_buffer_t *b, int64_t line) {
  assert_non_null(b->source_file);
  assert_string_equal(b->source_file, PROGRAM);
  assert_int_equal(b->source_line, line);
  assert_int_equal(b->source_from_module, 1);
}

/* JAX's CPU text names only the 7200000000 bytes. The dump's jit_f has allocation 30,
 * preallocated-temp, of exactly that size (its -buffer-assignment.txt); XLA's live-range file
 * lists five values live at its peak (time 6): sort.0 3600000000, x.1 1920000, wrapped_slice
 * 120000, constant.5 4 and ynn_fusion.1 4 bytes. */
static void cpu_text_finds_its_module(void **state) {
  (void)state;
  hbm_oom_text_t *t = parse_fixture(DATA "xla_cpu_oom.txt");
  assert_int_equal(t->kind, HBM_OOM_XLA_CPU);
  assert_int_equal(hbm_oom_text_add_module(t, DUMP), HBM_OK);
  assert_string_equal(t->module, "jit_f");
  assert_string_equal(t->module_file, MODULE_F ".txt");
  assert_non_null(strstr(t->module_finding, "allocation 30 (preallocated-temp) of module jit_f"));
  assert_non_null(strstr(t->module_finding, "live at its peak (time 6"));
  assert_int_equal(t->n_buffers, 5);
  const hbm_oom_buffer_t *sort = &t->buffers[0];
  assert_string_equal(sort->instruction, "sort.0");
  assert_true(sort->size == 3600000000ull);
  assert_string_equal(sort->op_name, "jit(f)/jit(sort)/sort");
  assert_string_equal(sort->label, "sort");
  assert_string_equal(sort->shape, "f32[30000,30000]{1,0}");
  expect_source(sort, program_line("jnp.sort("));
  const hbm_oom_buffer_t *x = buffer_of(t, "x.1");
  assert_true(x->size == 1920000);
  assert_int_equal(x->parameter, 1);
  assert_null(x->source_file); /* the parameter has no stack frame: none is made up */
  expect_source(buffer_of(t, "wrapped_slice"), program_line("jnp.sort("));
  assert_null(buffer_of(t, "constant.5")->source_file);
  assert_true(buffer_of(t, "ynn_fusion.1")->size == 4);
  /* the explanation shows the lines and where they came from */
  char *text = written(t, hbm_oom_text_explain), want[256];
  assert_non_null(strstr(text, "XLA on CPU out-of-memory error"));
  snprintf(want, sizeof want, "(%s:%lld, from the module)", PROGRAM,
           (long long)program_line("jnp.sort("));
  assert_non_null(strstr(text, want));
  free(text);
  hbm_oom_text_free(t);
}

/* The same module given as one file: the HLO, or a dump file beside it. */
static void one_file_of_the_dump(void **state) {
  (void)state;
  const char *paths[] = {MODULE_F ".txt", MODULE_F "-buffer-assignment.txt",
                         MODULE_F "-live-range.txt"};
  for (size_t i = 0; i < 3; i++) {
    hbm_oom_text_t *t = parse_fixture(DATA "xla_cpu_oom.txt");
    assert_int_equal(hbm_oom_text_add_module(t, paths[i]), HBM_OK);
    assert_int_equal(t->n_buffers, 5);
    expect_source(&t->buffers[0], program_line("jnp.sort("));
    hbm_oom_text_free(t);
  }
}

/* A size no allocation has, and a size two modules have: nothing is chosen, a note says so. */
static void no_module_is_guessed(void **state) {
  (void)state;
  hbm_oom_text_t *t = parse_text("RESOURCE_EXHAUSTED: Out of memory allocating 12345 bytes.\n");
  assert_int_equal(hbm_oom_text_add_module(t, DUMP), HBM_OK);
  assert_int_equal(t->n_buffers, 0);
  assert_null(t->module);
  assert_non_null(strstr(t->notes, "no allocation of 12345 bytes"));
  hbm_oom_text_free(t);
  /* two copies of jit_f under other module numbers */
  char cmd[4600];
  snprintf(cmd, sizeof cmd,
           "mkdir -p %s/two && for n in 0004 0009; do for s in .txt -buffer-assignment.txt "
           "-live-range.txt; do cp '" MODULE_F "'$s %s/two/module_$n.jit_f.cpu_after_"
           "optimizations$s; done; done",
           th_dir, th_dir);
  assert_int_equal(th_run(cmd, NULL), 0);
  char two[4200];
  snprintf(two, sizeof two, "%s/two", th_dir);
  t = parse_fixture(DATA "xla_cpu_oom.txt");
  assert_int_equal(hbm_oom_text_add_module(t, two), HBM_OK);
  assert_int_equal(t->n_buffers, 0);
  assert_non_null(strstr(t->notes, "2 modules of"));
  hbm_oom_text_free(t);
}

/* XLA's GPU runtime text (BufferAssignment::ToVerboseString: Operator is OpMetadataToString,
 * which prints no stack_frame_id; XLA Label is the opcode), with jit_f's names:
 *   1. sort: one instruction, sort.0, frame 3 → the jnp.sort line;
 *   2. tanh: wrapped_tanh (a loop fusion), frame 6 → the jnp.tanh line;
 *   3. the parameter x: x.1, no frame → stays without a line;
 *   4. reduce_sum fusions: ynn_fusion.1 (frame 2) and ynn_fusion (frame 3), both on the
 *      jnp.sort line (line 4, columns 11 and 27) → that line, no one instruction;
 *   5. an op_name no instruction has → none;
 *   6. a source the text already gives → kept as the text's. */
static const char gpu_text[] =
    "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
    "7200000000 bytes.\n"
    "BufferAssignment OOM Debugging.\n"
    "BufferAssignment stats:\n"
    "             parameter allocation:    1.83MiB\n"
    "              constant allocation:         4B\n"
    "        maybe_live_out allocation:         4B\n"
    "     preallocated temp allocation:    6.71GiB\n"
    "                 total allocation:    6.71GiB\n"
    "Peak buffers:\n"
    "\tBuffer 1:\n\t\tSize: 3.35GiB\n\t\tOperator: op_name=\"jit(f)/jit(sort)/sort\"\n"
    "\t\tXLA Label: sort\n\t\tShape: f32[30000,30000]\n\t\t==========================\n\n"
    "\tBuffer 2:\n\t\tSize: 3.35GiB\n\t\tOperator: op_name=\"jit(f)/tanh\"\n"
    "\t\tXLA Label: fusion\n\t\tShape: f32[30000,30000]\n\t\t==========================\n\n"
    "\tBuffer 3:\n\t\tSize: 1.83MiB\n\t\tOperator: op_name=\"x\"\n"
    "\t\tEntry Parameter Subshape: f32[30000,16]\n\t\t==========================\n\n"
    "\tBuffer 4:\n\t\tSize: 4B\n\t\tOperator: op_name=\"jit(f)/reduce_sum\"\n"
    "\t\tXLA Label: fusion\n\t\tShape: f32[]\n\t\t==========================\n\n"
    "\tBuffer 5:\n\t\tSize: 4B\n\t\tOperator: op_name=\"jit(f)/gather\"\n"
    "\t\tXLA Label: fusion\n\t\tShape: f32[]\n\t\t==========================\n\n"
    "\tBuffer 6:\n\t\tSize: 4B\n\t\tOperator: op_name=\"jit(f)/add\" source_file=\"given.py\" "
    "source_line=9\n\t\tXLA Label: fusion\n\t\tShape: f32[]\n\t\t==========================\n";

static void gpu_peak_buffers_by_op_name(void **state) {
  (void)state;
  hbm_oom_text_t *t = parse_text(gpu_text);
  assert_int_equal(t->kind, HBM_OOM_XLA_GPU);
  assert_int_equal(t->n_buffers, 6);
  assert_int_equal(hbm_oom_text_add_module(t, DUMP), HBM_OK);
  expect_source(&t->buffers[0], program_line("jnp.sort("));
  assert_string_equal(t->buffers[0].instruction, "sort.0");
  expect_source(&t->buffers[1], program_line("jnp.tanh("));
  assert_string_equal(t->buffers[1].instruction, "wrapped_tanh");
  assert_null(t->buffers[2].source_file);
  expect_source(&t->buffers[3], program_line("jnp.sort("));
  assert_null(t->buffers[3].instruction); /* two fusions: which one is not told */
  assert_null(t->buffers[4].source_file);
  assert_string_equal(t->buffers[5].source_file, "given.py");
  assert_int_equal(t->buffers[5].source_from_module, 0);
  assert_string_equal(t->module, "jit_f");
  assert_non_null(strstr(t->module_finding, "source lines of 3 of the 6 buffers listed"));
  assert_non_null(strstr(t->notes, "1 buffer match no instruction"));
  assert_non_null(strstr(t->notes, "1 buffer match instructions with different source lines"));
  /* JSON says where each line came from */
  char *json = written(t, hbm_oom_text_json);
  assert_non_null(strstr(json, "\"source_from\": \"module\""));
  assert_non_null(strstr(json, "\"source_from\": \"text\""));
  assert_non_null(strstr(json, "\"instruction\": \"sort.0\""));
  free(json);
  hbm_oom_text_free(t);
}

/* TPU's report names the instruction in its XLA label; the allocation line names one after
 * its last " :: ". An instruction the module does not have gets no line. */
static void tpu_labels_by_instruction(void **state) {
  (void)state;
  hbm_oom_text_t *t = parse_text(
      "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space "
      "hbm. Used 20.00G of 15.48G hbm. Exceeded hbm capacity by 4.52G.\n\n"
      "  Largest program allocations in hbm:\n\n"
      "  1. Size: 3.35G\n"
      "     Operator: op_name=\"jit(f)/jit(sort)/sort\"\n"
      "     Shape: f32[30000,30000]{1,0:T(8,128)}\n"
      "     Unpadded size: 3.35G\n"
      "     XLA label: %sort.0 = f32[30000,30000]{1,0:T(8,128)} sort(%wrapped_tanh), "
      "dimensions={0}\n"
      "     Allocation type: HLO temp\n"
      "     ==========================\n\n"
      "  2. Size: 1.00G\n"
      "     Operator: op_name=\"jit(f)/mul\"\n"
      "     Shape: f32[512,512,1024]{1,2,0:T(8,128)}\n"
      "     XLA label: %fusion.77 = f32[512,512,1024]{1,2,0:T(8,128)} fusion(%p0), kind=kLoop\n"
      "     Allocation type: HLO temp\n"
      "     ==========================\n");
  assert_int_equal(t->n_buffers, 2);
  assert_string_equal(t->buffers[0].instruction, "sort.0");
  assert_string_equal(t->buffers[1].instruction, "fusion.77");
  assert_int_equal(hbm_oom_text_add_module(t, MODULE_F ".txt"), HBM_OK);
  expect_source(&t->buffers[0], program_line("jnp.sort("));
  assert_null(t->buffers[1].source_file);
  hbm_oom_text_free(t);
  t = parse_text("RESOURCE_EXHAUSTED: Allocation (size=3600000000) would exceed memory "
                 "(size=17179869184) :: #allocation7 [shape = 'f32[30000,30000]{1,0}', "
                 "space=hbm, size = 0xd693a400, tag = 'output of wrapped_tanh@{}'] :: "
                 "<no-hlo-instruction>\n");
  assert_int_equal(t->n_buffers, 1);
  assert_string_equal(t->buffers[0].instruction, "wrapped_tanh");
  assert_int_equal(hbm_oom_text_add_module(t, DUMP), HBM_OK);
  expect_source(&t->buffers[0], program_line("jnp.tanh("));
  hbm_oom_text_free(t);
}

/* Paths that hold no module are refused with the path and what was expected. */
static void bad_paths(void **state) {
  (void)state;
  hbm_oom_text_t *t = parse_fixture(DATA "xla_cpu_oom.txt");
  assert_int_equal(hbm_oom_text_add_module(t, th_dir), HBM_ERR_NOT_FOUND);
  assert_non_null(strstr(hbm_last_error(), "no module in it (expected XLA's"));
  assert_int_equal(hbm_oom_text_add_module(t, DATA "no-such-dir"), HBM_ERR_IO);
  char lonely[4200];
  snprintf(lonely, sizeof lonely, "%s/m-live-range.txt", th_dir);
  assert_int_equal(th_write(lonely, "HloLiveRange (max 1):\n", 22), 0);
  assert_int_equal(hbm_oom_text_add_module(t, lonely), HBM_ERR_NOT_FOUND);
  assert_non_null(strstr(hbm_last_error(), "its module's HLO is not beside it"));
  /* no buffer-assignment file beside it: the failed bytes are looked up nowhere */
  assert_int_equal(hbm_oom_text_add_module(t, DATA "xla_gpu_bare.txt"), HBM_OK);
  assert_non_null(strstr(t->notes, "no allocation of 7200000000 bytes"));
  assert_int_equal(t->n_buffers, 0);
  hbm_oom_text_free(t);
  /* a file that is no HLO, for buffers to look up: said so with where it stopped reading */
  t = parse_text(gpu_text);
  assert_int_equal(hbm_oom_text_add_module(t, DATA "xla_gpu_bare.txt"), HBM_OK);
  assert_non_null(strstr(t->notes, "module not read: " DATA "xla_gpu_bare.txt:1:"));
  for (size_t i = 0; i < 5; i++)
    assert_null(t->buffers[i].source_file);
  hbm_oom_text_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cpu_text_finds_its_module), cmocka_unit_test(one_file_of_the_dump),
      cmocka_unit_test(no_module_is_guessed),      cmocka_unit_test(gpu_peak_buffers_by_op_name),
      cmocka_unit_test(tpu_labels_by_instruction), cmocka_unit_test(bad_paths),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
