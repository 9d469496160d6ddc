/* test_hlo_parse.c — reading HLO text: the module header, computations with and without
 * signatures, instructions with metadata and called computations, tolerance for what the
 * planner does not need (unknown opcodes and attributes, stack-frame tables, comments,
 * operand shapes of older printers), and parse errors that say where and what was expected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hlo/hlo.h"

static hlo_module_t *parse(const char *text) {
  hlo_module_t *m = hbm__hlo_parse(text, strlen(text), "test.hlo");
  if (!m)
    fail_msg("parse failed: %s", hbm_last_error());
  return m;
}

static hlo_module_t *parse_file(const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/data/hlo/%s", HBM_SOURCE_DIR, name);
  char *data;
  size_t len;
  assert_int_equal(hbm__read_file(path, &data, &len), HBM_OK);
  hlo_module_t *m = hbm__hlo_parse(data, len, path);
  free(data);
  if (!m)
    fail_msg("%s: %s", name, hbm_last_error());
  return m;
}

static const hlo_instr_t *find(const hlo_comp_t *c, const char *name) {
  for (uint32_t i = 0; i < c->n_instrs; i++)
    if (hbm__hlo_str_eq(c->instrs[i]->name, name))
      return c->instrs[i];
  fail_msg("no instruction %s", name);
  return NULL;
}

static void reads_a_module(void **state) {
  (void)state;
  hlo_module_t *m = parse_file("chain.hlo");
  assert_true(hbm__hlo_str_eq(m->name, "chain"));
  assert_int_equal(m->n_comps, 2);
  assert_true(hbm__hlo_str_eq(m->entry->name, "main"));
  assert_int_equal(m->entry->kind, HLO_COMP_SEQUENTIAL);
  assert_int_equal(m->comps[0]->kind, HLO_COMP_EMBEDDED);
  assert_int_equal(m->entry->n_instrs, 9);
  assert_int_equal(m->entry->n_params, 1);
  assert_true(hbm__hlo_str_eq(m->entry->root->name, "r"));
  const hlo_instr_t *a = find(m->entry, "a");
  assert_int_equal(a->opcode, HLO_OP_BROADCAST);
  assert_true(hbm__hlo_str_eq(a->meta->op_name, "jit(f)/broadcast_in_dim"));
  assert_true(hbm__hlo_str_eq(a->meta->op_type, "BroadcastTo"));
  assert_true(hbm__hlo_str_eq(a->meta->source_file, "model.py"));
  assert_int_equal(a->meta->source_line, 7);
  assert_ptr_equal(find(m->entry, "b")->meta, &hbm__hlo_no_metadata);
  assert_true(a->shape->bytes == 4096);
  const hlo_instr_t *d = find(m->entry, "d");
  assert_int_equal(d->n_operands, 2);
  assert_ptr_equal(d->operands[0], a);
  assert_int_equal(d->n_called, 1);
  assert_ptr_equal(d->called[0].comp, m->comps[0]);
  /* the reducer uses the older "add(f32[] %x, f32[] %y)" operand form */
  const hlo_instr_t *sum = m->comps[0]->root;
  assert_int_equal(sum->n_operands, 2);
  assert_true(hbm__hlo_str_eq(sum->operands[1]->name, "y"));
  assert_true(m->n_instrs == 12);
  hbm__hlo_free(m);
}

static void header_attributes(void **state) {
  (void)state;
  hlo_module_t *m = parse(
      "HloModule m, is_scheduled=true, input_output_alias={ {0}: (1, {}, must-alias), {1, 2}: "
      "(0, {3}) }, buffer_donor={ (2, {}) }, entry_computation_layout={(f32[2]{0})->f32[2]{0}}, "
      "frontend_attributes={a=\"b\"}\n"
      "ENTRY e { ROOT p = f32[2]{0} parameter(0) }\n");
  assert_true(m->is_scheduled);
  assert_int_equal(m->n_io_alias, 2);
  assert_int_equal(m->io_alias[0].operand, 1);
  assert_int_equal(m->io_alias[0].n_out, 1);
  assert_int_equal(m->io_alias[0].out[0], 0);
  assert_int_equal(m->io_alias[0].must_alias, 1);
  assert_int_equal(m->io_alias[1].n_out, 2);
  assert_int_equal(m->io_alias[1].in[0], 3);
  assert_int_equal(m->n_donors, 1);
  assert_int_equal(m->donors[0].operand, 2);
  hbm__hlo_free(m);
}

static void tolerates_what_it_does_not_need(void **state) {
  (void)state;
  hlo_module_t *m = parse(
      "// a comment\n"
      "HloModule m\n"
      "/* a block\n comment */\n"
      "%r (x: f32[], y: f32[]) -> f32[] {\n"
      "  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
      "  ROOT %s = f32[] add(%x, %y)\n} , execution_thread=\"main\"\n"
      "ENTRY %e (p: f32[8]) -> f32[8] {\n"
      "  %p = f32[8]{0} parameter(0), sharding={devices=[2]0,1}\n"
      "  %q = f32[8]{0} frobnicate(%p), frob={a={b, c}, d=[1,2]}, groups=[2,2]<=[4], "
      "dim_labels=b01f_01io->b01f, padding=0_0x1_1, window={size=3x3 stride=2x2}, "
      "backend_config={\"k\": \"}\"}, note=\"a, b\", control-predecessors={%p}\n"
      "  %ar = f32[8]{0} all-reduce(%q), replica_groups={{0,1}}, to_apply=%r\n"
      "  %c = (f32[8]{0}, s32[]) custom-call(%ar), custom_call_target=\"my_kernel\", "
      "api_version=API_VERSION_TYPED_FFI, metadata={op_name=\"a\\\"b\" deduplicated_name=\"x\" "
      "stack_frame_id=3}\n"
      "  ROOT %g = f32[8]{0} get-tuple-element(%c), index=0\n"
      "}\n\n"
      "FileNames\n1 \"a.py\"\nFunctionNames\n1 \"f\"\n");
  const hlo_instr_t *q = find(m->entry, "q");
  assert_int_equal(q->opcode, HLO_OP_UNKNOWN);
  assert_int_equal(q->opcode_text.len, 10);
  assert_memory_equal(m->text + q->opcode_text.start, "frobnicate", 10);
  const hlo_instr_t *c = find(m->entry, "c");
  assert_true(hbm__hlo_str_eq(c->meta->custom_call_target, "my_kernel"));
  assert_true(hbm__hlo_str_eq(c->meta->op_name, "a\\\"b"));
  assert_int_equal(find(m->entry, "g")->index, 0);
  assert_int_equal(m->comps[0]->kind, HLO_COMP_EMBEDDED);
  hbm__hlo_free(m);
}

/* JAX 0.10's compiled.as_text() prints the stack-frame tables right after the header, their
 * rows holding `{key=value ...}` groups, and the computations after them. */
static void stack_frame_tables_before_the_computations(void **state) {
  (void)state;
  hlo_module_t *m = parse("HloModule jit_f, is_scheduled=true\n\n"
                          "FileNames\n1 \"/src/zoo.py\"\n\n"
                          "FunctionNames\n1 \"<module>\"\n2 \"f\"\n\n"
                          "FileLocations\n1 {file_name_id=1 function_name_id=1 line=280 "
                          "end_line=280 column=8 end_column=43}\n\n"
                          "StackFrames\n1 {file_location_id=1 parent_frame_id=1}\n"
                          "2 {file_location_id=1}\n\n"
                          "ENTRY %main.1 (p: f32[8]) -> f32[8] {\n"
                          "  %p = f32[8]{0} parameter(0)\n"
                          "  ROOT %n = f32[8]{0} negate(%p), metadata={stack_frame_id=2}\n"
                          "}\n");
  assert_int_equal(m->n_comps, 1);
  assert_int_equal(m->entry->n_instrs, 2);
  assert_int_equal(find(m->entry, "n")->opcode, HLO_OP_NEGATE);
  hbm__hlo_free(m);
}

/* JAX 0.10.2 prints collectives' groups as XLA's MeshAxesReplicaGroupList: the mesh, a space,
 * then the axes (replica_group.cc's ToString, mesh_and_axis.cc's Mesh::ToString and
 * AxisRef::ToString). Every form they print is read; the next attribute follows as usual. */
static void mesh_replica_groups(void **state) {
  (void)state;
  hlo_module_t *m = parse(
      "HloModule m, num_partitions=8\n"
      "%r (x: f32[], y: f32[]) -> f32[] {\n"
      "  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
      "  ROOT %s = f32[] add(%x, %y)\n}\n"
      "ENTRY %e (p: f32[32,256]) -> f32[128,256] {\n"
      "  %p = f32[32,256]{1,0} parameter(0)\n"
      "  %ag = f32[128,256]{1,0} all-gather(%p), channel_id=1, "
      "replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}, dimensions={0}, "
      "use_global_device_ids=true\n"
      "  %ar = f32[128,256]{1,0} all-reduce(%ag), channel_id=2, "
      "replica_groups=mesh['a'=2,'b'=4], device_ids=(0,2,4,6,1,3,5,7) {'a','b':(1)2}, "
      "to_apply=%r\n"
      "  %rs = f32[64,256]{1,0} reduce-scatter(%ar), replica_groups=mesh[x=8] {x:(2)2}, "
      "dimensions={0}, to_apply=%r\n"
      "  %one = f32[64,256]{1,0} all-reduce(%rs), replica_groups=maximal_mesh[device_id=3] {}, "
      "to_apply=%r, sharding={mesh['a'=2,'b'=4], [{'a'}, {}]}\n"
      "  %noaxes = f32[64,256]{1,0} all-reduce(%one), replica_groups=mesh[] {}, to_apply=%r\n"
      "  %buf = b(f32[64,256]{1,0}) custom-call(%noaxes), custom_call_target=\"x\"\n"
      "  ROOT %t = (f32[128,256]{1,0}, b(f32[64,256]{1,0})) tuple(%ag, %buf)\n"
      "}\n");
  assert_int_equal(m->entry->n_instrs, 8);
  const hlo_instr_t *ar = find(m->entry, "ar");
  assert_int_equal(ar->n_called, 1); /* to_apply after the device_ids and the axes */
  assert_int_equal(find(m->entry, "one")->n_called, 1);
  /* a buffer shape is the array it wraps: 64 * 256 * 4 bytes */
  assert_true(find(m->entry, "buf")->shape->bytes == 65536);
  assert_true(m->entry->root->shape->elems[1]->bytes == 65536);
  hbm__hlo_free(m);
}

/* metadata={... stack_frame_id=N} resolves through the module's tables: file names,
 * function names, file locations and frames are 1-based, and a frame's parent is printed as
 * parent + 1 (XLA's ParseStackFramesList subtracts 1), so parent_frame_id=1 is "none". */
static void stack_frames_give_source_lines(void **state) {
  (void)state;
  hlo_module_t *m = parse("HloModule jit_f, is_scheduled=true\n\n"
                          "FileNames\n1 \"<stdin>\"\n2 \"/src/model.py\"\n\n"
                          "FunctionNames\n1 \"<module>\"\n2 \"f\"\n\n"
                          "FileLocations\n"
                          "1 {file_name_id=1 function_name_id=1 line=5 end_line=5 column=6 "
                          "end_column=56}\n"
                          "2 {file_name_id=2 function_name_id=2 line=3 end_line=3 column=17 "
                          "end_column=22}\n\n"
                          "StackFrames\n1 {file_location_id=1 parent_frame_id=1}\n"
                          "2 {file_location_id=2 parent_frame_id=2}\n"
                          "3 {file_location_id=9 parent_frame_id=1}\n"
                          "4 {file_location_id=2 parent_frame_id=5}\n\n\n"
                          "ENTRY %main.1 (p: f32[8]) -> f32[8] {\n"
                          "  %p = f32[8]{0} parameter(0), metadata={op_name=\"p\"}\n"
                          "  %a = f32[8]{0} negate(%p), metadata={op_name=\"jit(f)/neg\" "
                          "stack_frame_id=2 scheduling_name=\"a\"}\n"
                          "  %b = f32[8]{0} abs(%a), metadata={stack_frame_id=7}\n"
                          "  %c = f32[8]{0} exp(%b), metadata={stack_frame_id=3}\n"
                          "  %d = f32[8]{0} sine(%c), metadata={stack_frame_id=4}\n"
                          "  ROOT %e = f32[8]{0} tanh(%d), metadata={source_file=\"old.py\" "
                          "source_line=9 stack_frame_id=2}\n"
                          "}\n");
  assert_int_equal(m->frames.n_files, 2);
  assert_int_equal(m->frames.n_frames, 4);
  hlo_source_frame_t src, stack[8];
  assert_int_equal(hbm__hlo_instr_source(m, find(m->entry, "p"), &src), HLO_SOURCE_NONE);
  assert_int_equal(hbm__hlo_instr_source(m, find(m->entry, "a"), &src), HLO_SOURCE_FRAME);
  assert_true(hbm__hlo_str_eq(src.file, "/src/model.py"));
  assert_int_equal(src.line, 3);
  assert_int_equal(hbm__hlo_frame_stack(&m->frames, 2, stack, 8), 2);
  assert_true(hbm__hlo_str_eq(stack[0].function, "f"));
  assert_int_equal(stack[0].column, 17);
  assert_true(hbm__hlo_str_eq(stack[1].file, "<stdin>"));
  assert_true(hbm__hlo_str_eq(stack[1].function, "<module>"));
  assert_int_equal(stack[1].line, 5);
  /* a frame id past the table, a frame naming a location that is not there */
  assert_int_equal(hbm__hlo_instr_source(m, find(m->entry, "b"), &src), HLO_SOURCE_BAD_FRAME);
  assert_int_equal(hbm__hlo_instr_source(m, find(m->entry, "c"), &src), HLO_SOURCE_BAD_FRAME);
  assert_int_equal(hbm__hlo_frame_stack(&m->frames, 3, stack, 8), -1);
  /* frame 4's parent (printed 5) is frame 4 itself: the walk stops */
  assert_int_equal(hbm__hlo_frame_stack(&m->frames, 4, stack, 8), 5);
  /* metadata's own source_file wins */
  assert_int_equal(hbm__hlo_instr_source(m, find(m->entry, "e"), &src), HLO_SOURCE_METADATA);
  assert_true(hbm__hlo_str_eq(src.file, "old.py"));
  hbm__hlo_free(m);
}

static void bare_computations_and_names_without_percent(void **state) {
  (void)state;
  /* No HloModule header; no signatures; the last computation is the entry. */
  hlo_module_t *m = parse("add.1 {\n x = f32[] parameter(0)\n y = f32[] parameter(1)\n"
                          " ROOT s = f32[] add(x, y)\n}\n"
                          "main {\n p = f32[4] parameter(0)\n z = f32[] constant(0)\n"
                          " ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add.1\n}\n");
  assert_true(hbm__hlo_str_eq(m->entry->name, "main"));
  assert_true(hbm__hlo_str_eq(m->name, "main"));
  assert_int_equal(m->entry->root->opcode, HLO_OP_REDUCE);
  hbm__hlo_free(m);
}

static void control_flow_kinds(void **state) {
  (void)state;
  hlo_module_t *m = parse_file("while_loop.hlo");
  for (uint32_t i = 0; i < m->n_comps; i++)
    assert_int_equal(m->comps[i]->kind, HLO_COMP_SEQUENTIAL);
  hbm__hlo_free(m);
  m = parse_file("fusion_inplace.hlo");
  assert_int_equal(m->comps[0]->kind, HLO_COMP_FUSED);
  assert_int_equal(find(m->entry, "scaled")->fusion_kind, 'L');
  hbm__hlo_free(m);
  m = parse_file("inplace.hlo");
  const hlo_instr_t *cc = find(m->entry, "cc");
  assert_int_equal(cc->n_aliasing, 1);
  assert_int_equal(cc->aliasing[0].n_out, 0);
  assert_int_equal(cc->aliasing[0].operand, 0);
  hbm__hlo_free(m);
}

static void labels_and_printing(void **state) {
  (void)state;
  hlo_module_t *m = parse_file("chain.hlo");
  char label[201];
  assert_int_equal(hbm__instr_label(m, find(m->entry, "c"), 200, label), 40);
  assert_string_equal(label, "%c = f32[32,64]{1,0} concatenate(%b, %b)");
  assert_int_equal(hbm__instr_label(m, find(m->entry, "c"), 20, label), 20);
  assert_string_equal(label, "%c = f32[32,64]{1...");
  assert_int_equal(hbm__instr_label(m, find(m->entry, "c"), 40, label), 40); /* just fits */
  assert_string_equal(label, "%c = f32[32,64]{1,0} concatenate(%b, %b)");
  assert_int_equal(hbm__instr_label(m, find(m->entry, "c"), 39, label), 39);
  assert_string_equal(label, "%c = f32[32,64]{1,0} concatenate(%b,...");
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm__hlo_print(m, &sb);
  assert_true(sb.len == m->len && memcmp(sb.data, m->text, m->len) == 0);
  hbm_strbuf_free(&sb);
  hbm__hlo_free(m);
}

typedef struct error_case {
  const char *text;
  const char *expect; /* a part of the message, position included */
} error_case_t;

static void errors_say_where(void **state) {
  (void)state;
  static const error_case_t cases[] = {
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT q f32[2] negate(p)\n}\n",
       "test.hlo:4:10: expected '='"},
      {"HloModule m\nENTRY e {\n  ROOT q = f32[2] negate(p)\n}\n",
       "test.hlo:3:26: expected an instruction defined earlier"},
      {"HloModule m\nENTRY e {\n  p = f32[2 parameter(0)\n}\n", "test.hlo:3:13: expected ']'"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n", "expected '}' to close"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(x)\n}\n",
       "test.hlo:3:24: expected a parameter number"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  p = f32[2] negate(p)\n}\n",
       "test.hlo:4:3: instruction 'p' is defined twice"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  q = f32[2] negate(p), "
       "to_apply=%nowhere\n}\n",
       "test.hlo:4:35: expected the name of a computation"},
      {"HloModule m\n/* open comment\nENTRY e {}\n", "test.hlo:2:1: unterminated comment"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0), note=\"abc\n}\n", "unterminated string"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0), frob={a\n}\n", "expected '}' to close"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(1)\n}\n", "expected parameter numbers 0..0"},
      {"HloModule m\na {\n  ROOT x = f32[] call(), to_apply=b\n}\nb {\n  ROOT y = f32[] call(), "
       "to_apply=a\n}\n",
       "expected a call graph without cycles"},
      {"HloModule m\nENTRY e {\n}\n", "computation 'e' has no instructions"},
      {"HloModule m\nENTRY a {\n ROOT x = f32[] constant(1)\n}\nENTRY b {\n ROOT y = f32[] "
       "constant(1)\n}\n",
       "a second one"},
      {"HloModule", "expected the module name"},
      {"HloModule m\n", "expected a computation"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  q = f32[2] negate p\n}\n",
       "test.hlo:4:21: expected '(' and the operands"},
      {"HloModule m\nENTRY e {\n  \x01 = f32[2] parameter(0)\n}\n", "found byte 0x01"},
      /* an attribute value with a space in a form hbm does not know: named, with its place */
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0), groups=ring[4] {1,2}\n}\n",
       "test.hlo:3:43: expected ',' or the end of the instruction after the value of attribute "
       "'groups'"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0) [1]\n}\n",
       "test.hlo:3:27: expected ',' and an attribute, or the end of the instruction"},
      /* the mesh form, broken */
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0), replica_groups=mesh['x'=0] {'x'}\n}\n",
       "test.hlo:3:52: expected a positive mesh axis size"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0), replica_groups=mesh['x'=2]\n}\n",
       "test.hlo:3:54: expected '{' at the end of the line"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0), replica_groups=mesh['x'=2] "
       "{'x':(1}\n}\n",
       "test.hlo:3:62: expected ')', found '}'"},
      {"HloModule m\nENTRY e {\n  p = f32[2] parameter(0), replica_groups=maximal_mesh[dev=1] "
       "{}\n}\n",
       "test.hlo:3:56: expected device_id="},
      {"HloModule m\nENTRY e {\n  p = b((f32[2])) parameter(0)\n}\n",
       "test.hlo:3:7: expected an array shape inside b(...)"},
      /* stack-frame tables, broken */
      {"HloModule m\nFileNames\n1 model.py\nENTRY e {\n  p = f32[2] parameter(0)\n}\n",
       "test.hlo:3:3: expected a quoted name"},
      {"HloModule m\nStackFrames\n1 {file_location_id=x}\nENTRY e {\n  p = f32[2] "
       "parameter(0)\n}\n",
       "test.hlo:3:21: expected an integer"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    hlo_module_t *m = hbm__hlo_parse(cases[i].text, strlen(cases[i].text), "test.hlo");
    if (m)
      fail_msg("case %zu parsed but should not", i);
    if (!strstr(hbm_last_error(), cases[i].expect))
      fail_msg("case %zu: got '%s', expected '%s'", i, hbm_last_error(), cases[i].expect);
    assert_int_equal(hbm_last_status(), HBM_ERR_PARSE);
  }
}

static void truncations_never_crash(void **state) {
  (void)state;
  /* Every prefix of a real module is either a module or an error with a position. */
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/data/hlo/while_copy.hlo", HBM_SOURCE_DIR);
  char *data;
  size_t len;
  assert_int_equal(hbm__read_file(path, &data, &len), HBM_OK);
  for (size_t n = 0; n < len; n += 7) {
    hlo_module_t *m = hbm__hlo_parse(data, n, "cut.hlo");
    if (!m)
      assert_non_null(strstr(hbm_last_error(), "cut.hlo:"));
    hbm__hlo_free(m);
  }
  free(data);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(reads_a_module),
      cmocka_unit_test(header_attributes),
      cmocka_unit_test(tolerates_what_it_does_not_need),
      cmocka_unit_test(stack_frame_tables_before_the_computations),
      cmocka_unit_test(mesh_replica_groups),
      cmocka_unit_test(stack_frames_give_source_lines),
      cmocka_unit_test(bare_computations_and_names_without_percent),
      cmocka_unit_test(control_flow_kinds),
      cmocka_unit_test(labels_and_printing),
      cmocka_unit_test(errors_say_where),
      cmocka_unit_test(truncations_never_crash),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
