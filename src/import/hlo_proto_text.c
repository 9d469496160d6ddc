/* hlo_proto_text.c — hbm's own plan of a program read from an XProf file, beside XLA's. The
 * optimized HloModuleProto is written out as HLO text with only what src/hlo/parser.c reads
 * (the module header with is_scheduled and input_output_alias; each instruction's shape with
 * layout, opcode, operands, tuple index, called computations, fusion kind, custom-call target
 * and output_to_operand_aliasing; computations in schedule order), planned with the file's
 * backend, and the two results are set side by side in the profile's meta. Constants are
 * written without their literal: the planner only needs their shape. */
#include "import/hlo_proto_text.h"
#include "import/hlo_shape.h"

#include <stdlib.h>
#include <string.h>

typedef struct render {
  const HbmHlo__HloModuleProto *m;
  hbm_u64map_t inst_by_id; /* instruction id → (computation << 32) | index */
  hbm_u64map_t comp_by_id; /* computation id → index */
  hbm_strbuf_t *out, *why;
} render_t;

static const HbmHlo__HloInstructionProto *inst_of(const render_t *r, int64_t id) {
  uint64_t v;
  if (!hbm_u64map_get(&r->inst_by_id, (uint64_t)id, &v))
    return NULL;
  return r->m->computations[v >> 32]->instructions[v & 0xffffffffu];
}

static const HbmHlo__HloComputationProto *comp_of(const render_t *r, int64_t id) {
  uint64_t v;
  return hbm_u64map_get(&r->comp_by_id, (uint64_t)id, &v) ? r->m->computations[v] : NULL;
}

static bool build_indexes(render_t *r) {
  for (size_t c = 0; c < r->m->n_computations; c++) {
    const HbmHlo__HloComputationProto *comp = r->m->computations[c];
    if (!hbm_u64map_put(&r->comp_by_id, (uint64_t)comp->id, c))
      return false;
    for (size_t i = 0; i < comp->n_instructions && i <= 0xffffffffu; i++)
      if (!hbm_u64map_put(&r->inst_by_id, (uint64_t)comp->instructions[i]->id,
                          ((uint64_t)c << 32) | i))
        return false;
  }
  return true;
}

/* XLA's names are [A-Za-z0-9_.-]; anything else would not lex as one name. */
static void put_bare_name(hbm_strbuf_t *out, const char *name) {
  for (const char *p = name && name[0] ? name : "unnamed"; *p; p++) {
    char ch = *p;
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-';
    hbm_strbuf_append(out, ok ? &ch : "_", 1);
  }
}

static void put_name(hbm_strbuf_t *out, const char *name) {
  hbm_strbuf_puts(out, "%");
  put_bare_name(out, name);
}

static void put_index(hbm_strbuf_t *out, const int64_t *v, size_t n) {
  hbm_strbuf_puts(out, "{");
  for (size_t i = 0; i < n; i++)
    hbm_strbuf_printf(out, "%s%lld", i ? "," : "", (long long)v[i]);
  hbm_strbuf_puts(out, "}");
}

static void put_string(hbm_strbuf_t *out, const char *s) {
  hbm_strbuf_puts(out, "\"");
  for (; *s; s++)
    if (*s == '"' || *s == '\\')
      hbm_strbuf_printf(out, "\\%c", *s);
    else if ((unsigned char)*s >= 0x20)
      hbm_strbuf_append(out, s, 1);
  hbm_strbuf_puts(out, "\"");
}

/* ---- called computations: the attribute name XLA prints for each opcode ---- */

static bool put_computation(render_t *r, int64_t id) {
  const HbmHlo__HloComputationProto *c = comp_of(r, id);
  if (!c)
    return hbm_strbuf_printf(r->why, "called computation id %lld is not in the module",
                             (long long)id),
           false;
  put_name(r->out, c->name);
  return true;
}

static bool put_computation_list(render_t *r, const char *attr, const int64_t *ids, size_t n) {
  hbm_strbuf_printf(r->out, ", %s={", attr);
  for (size_t i = 0; i < n; i++) {
    if (i)
      hbm_strbuf_puts(r->out, ", ");
    if (!put_computation(r, ids[i]))
      return false;
  }
  hbm_strbuf_puts(r->out, "}");
  return true;
}

static bool put_called(render_t *r, const HbmHlo__HloInstructionProto *in) {
  const int64_t *ids = in->called_computation_ids;
  size_t n = in->n_called_computation_ids;
  if (!n)
    return true;
  const char *op = in->opcode;
  if (!strcmp(op, "while") && n == 2) /* HloWhileInstruction appends the body, then the condition */
    return hbm_strbuf_puts(r->out, ", condition="),
           put_computation(r, ids[1]) &&
               (hbm_strbuf_puts(r->out, ", body="), put_computation(r, ids[0]));
  if (!strcmp(op, "select-and-scatter") && n == 2)
    return hbm_strbuf_puts(r->out, ", select="),
           put_computation(r, ids[0]) &&
               (hbm_strbuf_puts(r->out, ", scatter="), put_computation(r, ids[1]));
  if (!strcmp(op, "conditional"))
    return put_computation_list(r, "branch_computations", ids, n);
  if (!strcmp(op, "custom-call") || n > 1)
    return put_computation_list(r, "called_computations", ids, n);
  bool calls = !strcmp(op, "fusion") || !strncmp(op, "async-", 6);
  hbm_strbuf_puts(r->out, calls ? ", calls=" : ", to_apply=");
  return put_computation(r, ids[0]);
}

/* ---- one instruction ---- */

static bool put_operands(render_t *r, const HbmHlo__HloInstructionProto *in) {
  hbm_strbuf_puts(r->out, "(");
  if (!strcmp(in->opcode, "parameter"))
    hbm_strbuf_printf(r->out, "%lld", (long long)in->parameter_number);
  else if (!strcmp(in->opcode, "constant"))
    hbm_strbuf_puts(r->out, "0"); /* the literal: not needed to plan */
  for (size_t i = 0; i < in->n_operand_ids; i++) {
    const HbmHlo__HloInstructionProto *op = inst_of(r, in->operand_ids[i]);
    if (!op)
      return hbm_strbuf_printf(r->why, "instruction %s: operand id %lld is not in the module",
                               in->name, (long long)in->operand_ids[i]),
             false;
    if (i)
      hbm_strbuf_puts(r->out, ", ");
    put_name(r->out, op->name);
  }
  hbm_strbuf_puts(r->out, ")");
  return true;
}

static void put_aliasing(render_t *r, const HbmHlo__HloInstructionProto *in) {
  if (!in->n_output_operand_aliasing)
    return;
  hbm_strbuf_puts(r->out, ", output_to_operand_aliasing={");
  for (size_t i = 0; i < in->n_output_operand_aliasing; i++) {
    const HbmHlo__OutputOperandAliasing *a = in->output_operand_aliasing[i];
    if (i)
      hbm_strbuf_puts(r->out, ", ");
    put_index(r->out, a->output_shape_index, a->n_output_shape_index);
    hbm_strbuf_printf(r->out, ": (%lld, ", (long long)a->operand_index);
    put_index(r->out, a->operand_shape_index, a->n_operand_shape_index);
    hbm_strbuf_puts(r->out, ")");
  }
  hbm_strbuf_puts(r->out, "}");
}

static bool put_instruction(render_t *r, const HbmHlo__HloInstructionProto *in, bool root) {
  hbm_strbuf_puts(r->out, root ? "  ROOT " : "  ");
  put_name(r->out, in->name);
  hbm_strbuf_puts(r->out, " = ");
  if (!in->shape)
    return hbm_strbuf_printf(r->why, "instruction %s has no shape", in->name), false;
  hlo_shape_text(in->shape, r->out, 0);
  hbm_strbuf_printf(r->out, " %s", in->opcode[0] ? in->opcode : "unknown-opcode");
  if (!put_operands(r, in))
    return false;
  if (!strcmp(in->opcode, "get-tuple-element"))
    hbm_strbuf_printf(r->out, ", index=%lld", (long long)in->tuple_index);
  if (in->fusion_kind && in->fusion_kind[0])
    hbm_strbuf_printf(r->out, ", kind=%s", in->fusion_kind);
  if (!put_called(r, in))
    return false;
  if (in->custom_call_target && in->custom_call_target[0]) {
    hbm_strbuf_puts(r->out, ", custom_call_target=");
    put_string(r->out, in->custom_call_target);
  }
  put_aliasing(r, in);
  hbm_strbuf_puts(r->out, "\n");
  return true;
}

/* ---- computations ---- */

static const HbmHlo__HloScheduleProto__InstructionSequence *
sequence_of(const HbmHlo__HloModuleProto *m, int64_t comp_id) {
  for (size_t i = 0; m->schedule && i < m->schedule->n_sequences; i++)
    if (m->schedule->sequences[i]->key == comp_id)
      return m->schedule->sequences[i]->value;
  return NULL;
}

static bool is_entry(const HbmHlo__HloModuleProto *m, const HbmHlo__HloComputationProto *c) {
  if (m->entry_computation_id)
    return c->id == m->entry_computation_id;
  return m->entry_computation_name && !strcmp(c->name, m->entry_computation_name);
}

/* The root: root_id, else (old protos) the last instruction. */
static bool is_root(const HbmHlo__HloComputationProto *c, const HbmHlo__HloInstructionProto *in) {
  if (c->root_id)
    return in->id == c->root_id;
  return c->n_instructions && in == c->instructions[c->n_instructions - 1];
}

static bool put_computation_body(render_t *r, const HbmHlo__HloComputationProto *c) {
  const HbmHlo__HloScheduleProto__InstructionSequence *seq = sequence_of(r->m, c->id);
  /* A schedule lists every instruction of the computation; one that does not is ignored. */
  if (seq && seq->n_instruction_ids == c->n_instructions) {
    for (size_t i = 0; i < seq->n_instruction_ids; i++) {
      const HbmHlo__HloInstructionProto *in = inst_of(r, seq->instruction_ids[i]);
      if (!in)
        return hbm_strbuf_printf(r->why,
                                 "computation %s: scheduled instruction id %lld is not "
                                 "in the module",
                                 c->name, (long long)seq->instruction_ids[i]),
               false;
      if (!put_instruction(r, in, is_root(c, in)))
        return false;
    }
    return true;
  }
  for (size_t i = 0; i < c->n_instructions; i++)
    if (!put_instruction(r, c->instructions[i], is_root(c, c->instructions[i])))
      return false;
  return true;
}

static void put_header(render_t *r) {
  const HbmHlo__HloModuleProto *m = r->m;
  hbm_strbuf_puts(r->out, "HloModule ");
  put_bare_name(r->out, m->name);
  if (m->schedule)
    hbm_strbuf_puts(r->out, ", is_scheduled=true");
  const HbmHlo__HloInputOutputAliasProto *io = m->input_output_alias;
  if (io && io->n_entries) {
    hbm_strbuf_puts(r->out, ", input_output_alias={ ");
    for (size_t i = 0; i < io->n_entries; i++) {
      const HbmHlo__HloInputOutputAliasProto__AliasEntryProto *e = io->entries[i];
      if (i)
        hbm_strbuf_puts(r->out, ", ");
      put_index(r->out, e->output_shape_index, e->n_output_shape_index);
      hbm_strbuf_printf(r->out, ": (%lld, ", (long long)e->parameter_number);
      put_index(r->out, e->parameter_shape_index, e->n_parameter_shape_index);
      hbm_strbuf_puts(r->out, e->kind == 2 ? ", must-alias)" : ", may-alias)");
    }
    hbm_strbuf_puts(r->out, " }");
  }
  hbm_strbuf_puts(r->out, "\n\n");
}

bool hlo_proto_text(const HbmHlo__HloModuleProto *m, hbm_strbuf_t *out, hbm_strbuf_t *why) {
  if (!m || !m->n_computations)
    return hbm_strbuf_puts(why, "the HloProto has no module computations"), false;
  render_t r = {.m = m, .out = out, .why = why};
  hbm_u64map_init(&r.inst_by_id);
  hbm_u64map_init(&r.comp_by_id);
  bool ok = build_indexes(&r);
  if (!ok)
    hbm_strbuf_puts(why, "out of memory");
  if (ok)
    put_header(&r);
  for (size_t c = 0; ok && c < m->n_computations; c++) {
    const HbmHlo__HloComputationProto *comp = m->computations[c];
    if (!comp->n_instructions)
      continue; /* the parser refuses an empty computation; nothing to plan in one */
    hbm_strbuf_puts(out, is_entry(m, comp) ? "ENTRY " : "");
    put_name(out, comp->name);
    hbm_strbuf_puts(out, " {\n");
    ok = put_computation_body(&r, comp);
    hbm_strbuf_puts(out, "}\n\n");
  }
  hbm_u64map_free(&r.inst_by_id);
  hbm_u64map_free(&r.comp_by_id);
  if (ok && out->failed)
    return hbm_strbuf_puts(why, "out of memory"), false;
  return ok;
}

/* ---- XLA's numbers and hbm's ---- */

/* Host memory (pinned_host): compiled.memory_analysis() counts it apart, as host_*. */
#define HOST_COLOR 5

xla_sizes_t hlo_proto_xla_sizes(const HbmHlo__BufferAssignmentProto *ba) {
  xla_sizes_t s = {0};
  for (size_t i = 0; ba && i < ba->n_buffer_allocations; i++) {
    const HbmHlo__BufferAllocationProto *a = ba->buffer_allocations[i];
    uint64_t size = a->size > 0 ? (uint64_t)a->size : 0; /* totals saturate, never wrap */
    if (a->color == HOST_COLOR)
      continue;
    if (a->is_entry_computation_parameter)
      s.argument_bytes = hbm__bytes_add(s.argument_bytes, size);
    if (a->maybe_live_out)
      s.output_bytes = hbm__bytes_add(s.output_bytes, size);
    if (!a->is_entry_computation_parameter && !a->maybe_live_out && !a->is_thread_local &&
        !a->is_constant)
      s.temp_bytes = hbm__bytes_add(s.temp_bytes, size);
  }
  return s;
}

static const char *bytes(uint64_t v, char *buf, size_t cap) {
  return hbm_format_bytes(v, buf, cap);
}

static void set_number(xprof_import_t *im, const char *key, const char *program, uint64_t v) {
  char k[512], value[32];
  snprintf(k, sizeof k, "%s:%s", key, program);
  snprintf(value, sizeof value, "%llu", (unsigned long long)v);
  xprof_add_meta(im, k, value);
}

/* XLA's totals, as memory_analysis() gives them: shown whether or not hbm could plan. */
static void put_xla(hbm_strbuf_t *sb, const xla_sizes_t *x) {
  char d[32], e[32], f[32];
  hbm_strbuf_printf(sb, " — XLA: temp %s, arguments %s, outputs %s",
                    bytes(x->temp_bytes, d, sizeof d), bytes(x->argument_bytes, e, sizeof e),
                    bytes(x->output_bytes, f, sizeof f));
}

static void record(xprof_import_t *im, const char *program, const hbm_plan_summary_t *h,
                   const xla_sizes_t *x) {
  char a[32], b[32], c[32], g[32], key[512];
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_printf(&sb, "hbm's planner: temp %s, arguments %s, outputs %s",
                    bytes(h->temp_bytes, a, sizeof a), bytes(h->argument_bytes, b, sizeof b),
                    bytes(h->output_bytes, c, sizeof c));
  put_xla(&sb, x);
  bool differs = h->temp_bytes != x->temp_bytes || h->argument_bytes != x->argument_bytes ||
                 h->output_bytes != x->output_bytes;
  if (h->temp_bytes != x->temp_bytes) {
    uint64_t diff = h->temp_bytes > x->temp_bytes ? h->temp_bytes - x->temp_bytes
                                                  : x->temp_bytes - h->temp_bytes;
    hbm_strbuf_printf(&sb, " (temp differs by %s%s", h->temp_bytes > x->temp_bytes ? "+" : "-",
                      bytes(diff, g, sizeof g));
    if (x->temp_bytes)
      hbm_strbuf_printf(&sb, ", %+.1f%%",
                        100.0 * ((double)h->temp_bytes - (double)x->temp_bytes) /
                            (double)x->temp_bytes);
    hbm_strbuf_puts(&sb, ")");
  } else if (differs) {
    hbm_strbuf_puts(&sb, " (arguments or outputs differ)");
  } else {
    hbm_strbuf_puts(&sb, " (same)");
  }
  snprintf(key, sizeof key, "hbm_plan:%s", program);
  xprof_add_meta(im, key, hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
  set_number(im, "hbm_plan_temp_bytes", program, h->temp_bytes);
  set_number(im, "xla_temp_bytes", program, x->temp_bytes);
  set_number(im, "hbm_plan_differs", program, differs);
}

static void record_failure(xprof_import_t *im, const char *program, const char *why,
                           const xla_sizes_t *x) {
  char key[512];
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_printf(&sb, "hbm's planner: not planned: %s", why);
  put_xla(&sb, x);
  snprintf(key, sizeof key, "hbm_plan:%s", program);
  xprof_add_meta(im, key, hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
  set_number(im, "xla_temp_bytes", program, x->temp_bytes);
}

void hlo_proto_plan(xprof_import_t *im, const HbmHlo__HloProto *hp, const char *program) {
  hbm_strbuf_t text, why;
  hbm_strbuf_init(&text);
  hbm_strbuf_init(&why);
  xla_sizes_t x = hlo_proto_xla_sizes(hp->buffer_assignment);
  if (!hlo_proto_text(hp->hlo_module, &text, &why)) {
    record_failure(im, program, hbm_strbuf_str(&why), &x);
  } else {
    hbm_plan_options_t opt = {.backend = im->backend};
    hbm_status_t saved_status = hbm_last_status();
    char *saved = strdup(hbm_last_error()); /* a failed plan must not replace the load's error */
    hbm_plan_t *plan = hbm_plan_text(hbm_strbuf_str(&text), text.len, program, &opt);
    if (plan) {
      record(im, program, hbm_plan_get_summary(plan), &x);
      hbm_plan_free(plan);
    } else {
      record_failure(im, program, hbm_last_error(), &x);
    }
    if (saved)
      hbm__error_text(saved_status, saved);
    free(saved);
  }
  hbm_strbuf_free(&text);
  hbm_strbuf_free(&why);
}
