/* test_import_hlo_proto_text.c — hbm's own plan of a program read from an XProf file, beside
 * XLA's buffer assignment (src/import/hlo_proto_text.c): a hand-built HloModuleProto is
 * rendered as HLO text (compared line by line with the text written out by hand below),
 * planned, and both results land in the profile's meta; a module that cannot be rendered
 * says why without failing the load. The data test runs on ../shared/real/xprof and on the
 * JAX zoo's jax.profiler.trace logdirs when they were built (skipped when absent). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"
#include "import/hlo_proto_text.h"
#include "xplane_fixtures.h"

enum { F32 = 11, TUPLE = 13 };

/* ---- the fixture module, built field by field ---- */

typedef struct fx {
  xf_arena_t a;
  HbmHlo__HloProto *proto;
  HbmHlo__HloModuleProto *m;
} fx_t;

static HbmHlo__ShapeProto *shape(fx_t *f, int type, int64_t dim) {
  HbmHlo__ShapeProto *s = xf_new(&f->a, sizeof *s);
  hbm_hlo__shape_proto__init(s);
  s->element_type = type;
  if (dim >= 0) {
    s->dimensions = XF_NEW_ARRAY(&f->a, int64_t, 1);
    s->dimensions[s->n_dimensions++] = dim;
    HbmHlo__LayoutProto *l = xf_new(&f->a, sizeof *l);
    hbm_hlo__layout_proto__init(l);
    l->minor_to_major = XF_NEW_ARRAY(&f->a, int64_t, 1);
    l->n_minor_to_major = 1;
    s->layout = l;
  }
  return s;
}

/* (f32[256]{0}, f32[]) */
static HbmHlo__ShapeProto *pair_shape(fx_t *f) {
  HbmHlo__ShapeProto *s = shape(f, TUPLE, -1);
  s->tuple_shapes = XF_NEW_ARRAY(&f->a, HbmHlo__ShapeProto *, 2);
  s->tuple_shapes[s->n_tuple_shapes++] = shape(f, F32, 256);
  s->tuple_shapes[s->n_tuple_shapes++] = shape(f, F32, -1);
  return s;
}

static HbmHlo__HloComputationProto *computation(fx_t *f, const char *name, int64_t id,
                                                int64_t root_id) {
  HbmHlo__HloComputationProto *c = xf_new(&f->a, sizeof *c);
  hbm_hlo__hlo_computation_proto__init(c);
  c->name = xf_str(&f->a, name);
  c->id = id, c->root_id = root_id;
  c->instructions = XF_NEW_ARRAY(&f->a, HbmHlo__HloInstructionProto *, 8);
  f->m->computations[f->m->n_computations++] = c;
  return c;
}

static HbmHlo__HloInstructionProto *inst(fx_t *f, HbmHlo__HloComputationProto *c, int64_t id,
                                         const char *name, const char *opcode,
                                         HbmHlo__ShapeProto *s, const int64_t *operands,
                                         size_t n_operands) {
  HbmHlo__HloInstructionProto *in = xf_new(&f->a, sizeof *in);
  hbm_hlo__hlo_instruction_proto__init(in);
  in->id = id;
  in->name = xf_str(&f->a, name);
  in->opcode = xf_str(&f->a, opcode);
  in->shape = s;
  in->operand_ids = XF_NEW_ARRAY(&f->a, int64_t, n_operands);
  for (size_t i = 0; i < n_operands; i++)
    in->operand_ids[in->n_operand_ids++] = operands[i];
  c->instructions[c->n_instructions++] = in;
  return in;
}

static void calls(fx_t *f, HbmHlo__HloInstructionProto *in, int64_t comp_id) {
  in->called_computation_ids = XF_NEW_ARRAY(&f->a, int64_t, 1);
  in->called_computation_ids[in->n_called_computation_ids++] = comp_id;
}

static void schedule(fx_t *f, int64_t comp_id, const int64_t *ids, size_t n) {
  HbmHlo__HloScheduleProto *s = f->m->schedule;
  HbmHlo__HloScheduleProto__SequencesEntry *e = xf_new(&f->a, sizeof *e);
  hbm_hlo__hlo_schedule_proto__sequences_entry__init(e);
  e->key = comp_id;
  e->value = xf_new(&f->a, sizeof *e->value);
  hbm_hlo__hlo_schedule_proto__instruction_sequence__init(e->value);
  e->value->instruction_ids = XF_NEW_ARRAY(&f->a, int64_t, n);
  memcpy(e->value->instruction_ids, ids, n * sizeof *ids);
  e->value->n_instruction_ids = n;
  s->sequences[s->n_sequences++] = e;
}

static void allocation(fx_t *f, int64_t size, int flags) {
  HbmHlo__BufferAssignmentProto *ba = f->proto->buffer_assignment;
  HbmHlo__BufferAllocationProto *al = xf_new(&f->a, sizeof *al);
  hbm_hlo__buffer_allocation_proto__init(al);
  al->index = (int64_t)ba->n_buffer_allocations;
  al->size = size;
  al->is_entry_computation_parameter = (flags & XF_PARAM) != 0;
  al->maybe_live_out = (flags & XF_LIVE_OUT) != 0;
  al->is_constant = (flags & XF_CONSTANT) != 0;
  ba->buffer_allocations[ba->n_buffer_allocations++] = al;
}

/* The module (ids in brackets; the entry's schedule puts the constant first):
 *
 *   %add (1):     x [10], y [11] f32[] parameters; ROOT s [12] = add(x, y)
 *   %fused (2):   p [20] f32[256] parameter; ROOT n [21] = negate(p)
 *   ENTRY %main (3), scheduled c, a, e, f, r, t:
 *     a [30] = f32[256]{0} parameter(0)
 *     e [35] = f32[256]{0} exponential(a)
 *     f [31] = f32[256]{0} fusion(e), kind=kLoop, calls=%fused
 *     c [32] = f32[] constant
 *     r [33] = f32[] reduce(f, c), to_apply=%add
 *     ROOT t [34] = (f32[256]{0}, f32[]) tuple(f, r)
 *
 * A buffer assignment written by hand in XLA's terms: a (1024 B, parameter), e (1024 B: the
 * only temporary), the outputs f (1024 B), r (4 B) and t's pointer table (2 × 8 = 16 B),
 * and the constant c (4 B). So XLA's temp is 1024 B, its
 * arguments 1024 B, its outputs 1024 + 4 + 16 = 1044 B. */
static uint8_t *fixture_with(size_t *len, int64_t xla_temp, int64_t bad_operand,
                             bool other_colors) {
  fx_t f = {0};
  f.proto = xf_new(&f.a, sizeof *f.proto);
  hbm_hlo__hlo_proto__init(f.proto);
  f.m = xf_new(&f.a, sizeof *f.m);
  hbm_hlo__hlo_module_proto__init(f.m);
  f.proto->hlo_module = f.m;
  f.m->name = xf_str(&f.a, "jit_f");
  f.m->entry_computation_id = 3;
  f.m->computations = XF_NEW_ARRAY(&f.a, HbmHlo__HloComputationProto *, 3);
  f.m->schedule = xf_new(&f.a, sizeof *f.m->schedule);
  hbm_hlo__hlo_schedule_proto__init(f.m->schedule);
  f.m->schedule->sequences = XF_NEW_ARRAY(&f.a, HbmHlo__HloScheduleProto__SequencesEntry *, 2);

  HbmHlo__HloComputationProto *add = computation(&f, "add", 1, 12);
  HbmHlo__HloInstructionProto *x = inst(&f, add, 10, "x", "parameter", shape(&f, F32, -1), 0, 0);
  HbmHlo__HloInstructionProto *y = inst(&f, add, 11, "y", "parameter", shape(&f, F32, -1), 0, 0);
  y->parameter_number = 1;
  (void)x;
  inst(&f, add, 12, "s", "add", shape(&f, F32, -1), (int64_t[]){10, 11}, 2);
  HbmHlo__HloComputationProto *fused = computation(&f, "fused", 2, 21);
  inst(&f, fused, 20, "p", "parameter", shape(&f, F32, 256), 0, 0);
  inst(&f, fused, 21, "n", "negate", shape(&f, F32, 256), (int64_t[]){20}, 1);
  HbmHlo__HloComputationProto *main = computation(&f, "main", 3, 34);
  inst(&f, main, 30, "a", "parameter", shape(&f, F32, 256), 0, 0);
  inst(&f, main, 35, "e", "exponential", shape(&f, F32, 256), (int64_t[]){30}, 1);
  HbmHlo__HloInstructionProto *fu =
      inst(&f, main, 31, "f", "fusion", shape(&f, F32, 256), (int64_t[]){bad_operand}, 1);
  fu->fusion_kind = xf_str(&f.a, "kLoop");
  calls(&f, fu, 2);
  inst(&f, main, 32, "c", "constant", shape(&f, F32, -1), 0, 0);
  calls(&f, inst(&f, main, 33, "r", "reduce", shape(&f, F32, -1), (int64_t[]){31, 32}, 2), 1);
  inst(&f, main, 34, "t", "tuple", pair_shape(&f), (int64_t[]){31, 33}, 2);
  schedule(&f, 1, (int64_t[]){10, 11, 12}, 3);
  schedule(&f, 3, (int64_t[]){32, 30, 35, 31, 33, 34}, 6);

  f.proto->buffer_assignment = xf_new(&f.a, sizeof *f.proto->buffer_assignment);
  hbm_hlo__buffer_assignment_proto__init(f.proto->buffer_assignment);
  f.proto->buffer_assignment->buffer_allocations =
      XF_NEW_ARRAY(&f.a, HbmHlo__BufferAllocationProto *, 8);
  allocation(&f, 1024, XF_PARAM);
  allocation(&f, xla_temp, 0);
  allocation(&f, 1024, XF_LIVE_OUT);
  allocation(&f, 4, XF_LIVE_OUT);
  allocation(&f, 16, XF_LIVE_OUT);
  allocation(&f, 4, XF_CONSTANT);
  if (other_colors) { /* a device temporary in colour 2, a host one in colour 5 */
    allocation(&f, 512, 0);
    allocation(&f, 256, 0);
    HbmHlo__BufferAssignmentProto *ba = f.proto->buffer_assignment;
    ba->buffer_allocations[6]->color = 2, ba->buffer_allocations[7]->color = 5;
  }
  *len = hbm_hlo__hlo_proto__get_packed_size(f.proto);
  uint8_t *out = malloc(*len);
  assert_non_null(out);
  hbm_hlo__hlo_proto__pack(f.proto, out);
  xf_free(&f.a);
  return out;
}

static uint8_t *fixture(size_t *len, int64_t xla_temp, int64_t bad_operand) {
  return fixture_with(len, xla_temp, bad_operand, false);
}

/* The text hbm's planner is given, written out by hand from the module above: computations
 * in the proto's order, the entry's instructions in its schedule, constants without their
 * literal (the planner needs only the shape). */
static const char expected_text[] = "HloModule jit_f, is_scheduled=true\n"
                                    "\n"
                                    "%add {\n"
                                    "  %x = f32[] parameter(0)\n"
                                    "  %y = f32[] parameter(1)\n"
                                    "  ROOT %s = f32[] add(%x, %y)\n"
                                    "}\n"
                                    "\n"
                                    "%fused {\n"
                                    "  %p = f32[256]{0} parameter(0)\n"
                                    "  ROOT %n = f32[256]{0} negate(%p)\n"
                                    "}\n"
                                    "\n"
                                    "ENTRY %main {\n"
                                    "  %c = f32[] constant(0)\n"
                                    "  %a = f32[256]{0} parameter(0)\n"
                                    "  %e = f32[256]{0} exponential(%a)\n"
                                    "  %f = f32[256]{0} fusion(%e), kind=kLoop, calls=%fused\n"
                                    "  %r = f32[] reduce(%f, %c), to_apply=%add\n"
                                    "  ROOT %t = (f32[256]{0}, f32[]) tuple(%f, %r)\n"
                                    "}\n"
                                    "\n";

static const char *write_bytes(const char *name, const void *data, size_t len) {
  static char path[4200];
  snprintf(path, sizeof path, "%s/%s", th_dir, name);
  assert_int_equal(th_write(path, data, len), 0);
  return path;
}

static void renders_the_text_by_hand(void **state) {
  (void)state;
  size_t len;
  uint8_t *bytes = fixture(&len, 1024, 35);
  HbmHlo__HloProto *hp = hbm_hlo__hlo_proto__unpack(NULL, len, bytes);
  assert_non_null(hp);
  hbm_strbuf_t text, why;
  hbm_strbuf_init(&text);
  hbm_strbuf_init(&why);
  assert_true(hlo_proto_text(hp->hlo_module, &text, &why));
  assert_string_equal(hbm_strbuf_str(&text), expected_text);
  /* XLA's numbers from its buffer assignment (see the fixture's comment) */
  xla_sizes_t x = hlo_proto_xla_sizes(hp->buffer_assignment);
  assert_true(x.argument_bytes == 1024 && x.output_bytes == 1044 && x.temp_bytes == 1024);
  hbm_strbuf_free(&text);
  hbm_strbuf_free(&why);
  hbm_hlo__hlo_proto__free_unpacked(hp, NULL);
  free(bytes);
}

/* Module header: input_output_alias entries as XLA prints them; a while's called
 * computations are (body, condition) in the proto, printed condition=, body=. */
static void header_alias_and_while(void **state) {
  (void)state;
  xf_arena_t a = {0};
  HbmHlo__HloModuleProto m;
  hbm_hlo__hlo_module_proto__init(&m);
  m.name = "jit_g";
  HbmHlo__HloInputOutputAliasProto io;
  hbm_hlo__hlo_input_output_alias_proto__init(&io);
  HbmHlo__HloInputOutputAliasProto__AliasEntryProto e;
  hbm_hlo__hlo_input_output_alias_proto__alias_entry_proto__init(&e);
  int64_t out_index[] = {1};
  e.output_shape_index = out_index, e.n_output_shape_index = 1;
  e.parameter_number = 2, e.kind = 2;
  HbmHlo__HloInputOutputAliasProto__AliasEntryProto *entries[] = {&e};
  io.entries = entries, io.n_entries = 1;
  m.input_output_alias = &io;
  fx_t f = {.m = &m};
  m.computations = XF_NEW_ARRAY(&f.a, HbmHlo__HloComputationProto *, 3);
  HbmHlo__HloComputationProto *body = computation(&f, "body", 1, 0);
  inst(&f, body, 10, "b", "parameter", shape(&f, F32, -1), 0, 0);
  HbmHlo__HloComputationProto *cond = computation(&f, "cond", 2, 0);
  inst(&f, cond, 20, "k", "parameter", shape(&f, F32, -1), 0, 0);
  HbmHlo__HloComputationProto *main = computation(&f, "main", 3, 0);
  inst(&f, main, 30, "i", "parameter", shape(&f, F32, -1), 0, 0);
  HbmHlo__HloInstructionProto *w =
      inst(&f, main, 31, "w", "while", shape(&f, F32, -1), (int64_t[]){30}, 1);
  w->called_computation_ids = (int64_t[]){1, 2};
  w->n_called_computation_ids = 2;
  hbm_strbuf_t text, why;
  hbm_strbuf_init(&text);
  hbm_strbuf_init(&why);
  assert_true(hlo_proto_text(&m, &text, &why));
  /* no entry id or name: none is marked ENTRY (the parser takes the last computation) */
  assert_non_null(strstr(hbm_strbuf_str(&text),
                         "HloModule jit_g, input_output_alias={ {1}: (2, {}, "
                         "must-alias) }\n"));
  assert_non_null(
      strstr(hbm_strbuf_str(&text), "  ROOT %w = f32[] while(%i), condition=%cond, body=%body\n"));
  hbm_strbuf_free(&text);
  hbm_strbuf_free(&why);
  xf_free(&f.a);
  (void)a;
}

/* Planned by hand, for a module with no backend marks (alignment 1): the arguments are a
 * (1024 B); the outputs f (1024 B), r (4 B) and t's table of two 8-byte pointers (16 B):
 * 1044 B; the only temporary is e (1024 B), live from its definition to f. */
static void plan_beside_xla(void **state) {
  (void)state;
  size_t len;
  uint8_t *bytes = fixture(&len, 1024, 35);
  hbm_profile_t *p = hbm_profile_load(write_bytes("jit_f.hlo_proto.pb", bytes, len));
  free(bytes);
  assert_non_null(p);
  assert_string_equal(hbm_profile_meta(p, "hbm_plan_temp_bytes:jit_f"), "1024");
  assert_string_equal(hbm_profile_meta(p, "xla_temp_bytes:jit_f"), "1024");
  assert_string_equal(hbm_profile_meta(p, "hbm_plan_differs:jit_f"), "0");
  assert_string_equal(hbm_profile_meta(p, "hbm_plan:jit_f"),
                      "hbm's planner: temp 1.00KiB, arguments 1.00KiB, outputs 1.02KiB — XLA: "
                      "temp 1.00KiB, arguments 1.00KiB, outputs 1.02KiB (same)");
  hbm_profile_free(p);

  /* XLA's temporaries twice as large: hbm's 1024 B are 1024 B (50%) fewer */
  bytes = fixture(&len, 2048, 35);
  p = hbm_profile_load(write_bytes("jit_f.hlo_proto.pb", bytes, len));
  free(bytes);
  assert_non_null(p);
  assert_string_equal(hbm_profile_meta(p, "hbm_plan_differs:jit_f"), "1");
  assert_string_equal(hbm_profile_meta(p, "xla_temp_bytes:jit_f"), "2048");
  assert_non_null(
      strstr(hbm_profile_meta(p, "hbm_plan:jit_f"), "(temp differs by -1.00KiB, -50.0%)"));
  hbm_profile_free(p);
}

/* An operand id the module does not have: the program is shown from XLA's buffer
 * assignment, and its plan line says why hbm could not plan it. */
static void unrenderable_module_says_why(void **state) {
  (void)state;
  size_t len;
  uint8_t *bytes = fixture(&len, 1024, 99);
  hbm_profile_t *p = hbm_profile_load(write_bytes("jit_f.hlo_proto.pb", bytes, len));
  free(bytes);
  assert_non_null(p);
  assert_true(hbm_profile_space_count(p) >= 1);
  assert_string_equal(hbm_profile_meta(p, "hbm_plan:jit_f"),
                      "hbm's planner: not planned: instruction f: operand id 99 is not in the "
                      "module — XLA: temp 1.00KiB, arguments 1.00KiB, outputs 1.02KiB");
  assert_null(hbm_profile_meta(p, "hbm_plan_temp_bytes:jit_f"));
  assert_string_equal(hbm_profile_meta(p, "xla_temp_bytes:jit_f"), "1024"); /* XLA's still */
  hbm_profile_free(p);
}

/* XLA's totals as compiled.memory_analysis() counts them: every memory colour but host
 * memory (5) is device memory. The fixture plus a 512 B temporary in colour 2 and a 256 B
 * one in host memory: XLA's device temp is 1024 + 512 = 1536 B. */
static void xla_totals_count_every_device_colour(void **state) {
  (void)state;
  size_t len;
  uint8_t *bytes = fixture_with(&len, 1024, 35, true);
  hbm_profile_t *p = hbm_profile_load(write_bytes("jit_f.hlo_proto.pb", bytes, len));
  free(bytes);
  assert_non_null(p);
  assert_string_equal(hbm_profile_meta(p, "xla_temp_bytes:jit_f"), "1536");
  hbm_profile_free(p);
}

/* ---- the real files ---- */

/* Every program of every real XProf file gets a plan line, and none is refused. */
static void real_xprof_files_planned(void **state) {
  (void)state;
  const char *dir = HBM_SHARED_DIR "/real/xprof";
  DIR *d = opendir(dir);
  if (!d)
    th_skip("no real XProf files (%s)", dir);
  struct dirent *de;
  size_t files = 0, programs = 0;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.' || !strstr(de->d_name, ".pb")) /* not an index beside one */
      continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    hbm_profile_t *p = hbm_profile_load(path);
    assert_non_null(p);
    for (size_t i = 0; i < hbm_profile_meta_count(p); i++) {
      const char *k = hbm_profile_meta_key(p, i);
      if (strncmp(k, "hbm_plan:", 9))
        continue;
      programs++;
      if (strstr(hbm_profile_meta(p, k), "not planned"))
        fail_msg("%s: %s", path, hbm_profile_meta(p, k));
    }
    hbm_profile_free(p);
    files++;
  }
  closedir(d);
  if (!files)
    th_skip("no .pb file in %s", dir);
  /* 31 + 16 + 8 programs in the AMD xplanes, 4 bare HloProtos (the TF file has none) */
  assert_true(programs >= 59);
}

static uint64_t json_number(const char *text, const char *key) {
  const char *at = strstr(text, key);
  at = at ? strchr(at + strlen(key), ':') : NULL;
  return at ? strtoull(at + 1, NULL, 10) : UINT64_MAX;
}

/* The JAX zoo (tests/python/zoo.py, built under the build directory): XLA's temp read from
 * the trace's buffer assignment equals what JAX's compiled.memory_analysis() said for the
 * same program. */
static void jax_zoo_traces(void **state) {
  (void)state;
  const char *zoo = getenv("HBM_JAX_ZOO") ? getenv("HBM_JAX_ZOO") : "../jax_zoo";
  DIR *d = opendir(zoo);
  if (!d) /* scripts/test.sh runs ctest before the Python tests that build the zoo */
    th_skip("the JAX zoo is not built (%s: tests/python/zoo.py builds it)", zoo);
  struct dirent *de;
  int checked = 0;
  while ((de = readdir(d)) != NULL) {
    char path[4400], cmd[9000];
    snprintf(path, sizeof path, "%s/%s/memory_analysis.json", zoo, de->d_name);
    size_t len;
    char *json = th_read(path, &len);
    if (!json)
      continue;
    uint64_t xla_temp = json_number(json, "\"temp_size_in_bytes\"");
    free(json);
    snprintf(cmd, sizeof cmd, "find %s/%s/trace -name '*.xplane.pb' | head -1", zoo, de->d_name);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char trace[4400] = "";
    char *got = fgets(trace, sizeof trace, f);
    pclose(f);
    if (!got || !trace[0])
      continue;
    trace[strcspn(trace, "\n")] = 0;
    hbm_profile_t *p = hbm_profile_load(trace);
    assert_non_null(p);
    bool found = false; /* the program measured is one of the trace's programs */
    for (size_t i = 0; i < hbm_profile_meta_count(p); i++) {
      const char *k = hbm_profile_meta_key(p, i);
      if (!strncmp(k, "xla_temp_bytes:", 15) &&
          strtoull(hbm_profile_meta(p, k), NULL, 10) == xla_temp && xla_temp > 0)
        found = true;
      if (!strncmp(k, "hbm_plan:", 9) && strstr(hbm_profile_meta(p, k), "not planned"))
        fail_msg("%s: %s", trace, hbm_profile_meta(p, k));
    }
    if (xla_temp > 0 && !found)
      fail_msg("%s: no program with XLA temp %llu", trace, (unsigned long long)xla_temp);
    hbm_profile_free(p);
    checked++;
  }
  closedir(d);
  if (!checked)
    th_skip("the JAX zoo %s holds no program with a trace", zoo);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(renders_the_text_by_hand),
      cmocka_unit_test(header_alias_and_while),
      cmocka_unit_test(plan_beside_xla),
      cmocka_unit_test(unrenderable_module_says_why),
      cmocka_unit_test(xla_totals_count_every_device_colour),
      cmocka_unit_test(real_xprof_files_planned),
      cmocka_unit_test(jax_zoo_traces),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
