/* plan.c — the public face of the planner (hbm_plan_*): reads a module (or an XLA dump),
 * plans it (alias.c → liveness.c → heap_sim.c, with remat.c when asked), and turns the
 * result into a profile of the one memory model: one space per memory colour, one step per
 * instruction of the flattened schedule (labelled with its name), one buffer per logical
 * buffer with its padded and unpadded size, heap offset, live range, category and tags.
 * Peaks and buffers at the peak are then read back through hbm_analyze, like every other
 * profile. */
#include "plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *hbm__hlo_color_name(int color, char *buf, size_t cap) {
  static const char *names[] = {"HBM", "VMEM", "SFlag", "SMEM", "CMEM", "Host", "SparseCore"};
  if (color >= 0 && (size_t)color < HBM_ARRAY_LEN(names))
    return names[color];
  snprintf(buf, cap, "S(%d)", color);
  return buf;
}

static hbm_category_t category_of(uint32_t flags) {
  if (flags & HLO_V_PARAM)
    return HBM_CAT_PARAMETER;
  if (flags & HLO_V_OUTPUT)
    return HBM_CAT_OUTPUT;
  if (flags & HLO_V_THREAD)
    return HBM_CAT_THREAD_LOCAL;
  if (flags & HLO_V_CONST)
    return HBM_CAT_CONSTANT;
  return HBM_CAT_TEMPORARY;
}

/* ---- the profile ---- */

/* The buffers in order of definition (ties: by index), by counting sort over the steps;
 * NULL when memory ran out. */
static uint32_t *definition_order(const hlo_assignment_t *as) {
  uint32_t last = 0;
  for (uint32_t i = 0; i < as->n_buffers; i++) {
    uint32_t s = as->values[as->buffers[i].value].def_step;
    last = s > last ? s : last;
  }
  uint32_t *order = malloc(((size_t)as->n_buffers + 1) * sizeof *order);
  uint32_t *at = calloc((size_t)last + 2, sizeof *at);
  if (order && at) {
    for (uint32_t i = 0; i < as->n_buffers; i++)
      at[as->values[as->buffers[i].value].def_step + 1]++;
    for (size_t s = 1; s <= (size_t)last + 1; s++)
      at[s] += at[s - 1];
    for (uint32_t i = 0; i < as->n_buffers; i++)
      order[at[as->values[as->buffers[i].value].def_step]++] = i;
  } else {
    free(order);
    order = NULL;
  }
  free(at);
  return order;
}

/* ":N" for a positive N into out (no NUL); returns its length. */
static size_t decimal(int64_t v, char out[24]) {
  char digits[20];
  size_t n = 0;
  for (uint64_t u = (uint64_t)v; u; u /= 10)
    digits[n++] = (char)('0' + u % 10);
  out[0] = ':';
  for (size_t i = 0; i < n; i++)
    out[1 + i] = digits[n - 1 - i];
  return n + 1;
}

/* Tags of one buffer, from its defining value. */
static bool add_profile_buffer(hbm_plan_t *plan, const hlo_buffer_t *hb, int space, uint32_t start,
                               uint32_t end, hbm_strbuf_t *scratch) {
  const hlo_module_t *m = plan->module;
  const hlo_value_t *v = &plan->as.values[hb->value];
  const hlo_instr_t *in = v->instr;
  hbm_buffer_t b = {0};
  b.address = hb->indefinite ? 0 : hb->offset;
  b.size = hb->bytes;
  b.unpadded_size = hb->unpadded_bytes;
  b.start = start;
  b.end = end;
  b.space = space;
  b.category = category_of(hb->flags);
  if (hb->indefinite)
    b.flags |= HBM_BUF_INDEFINITE;
  if (hb->flags & HLO_V_OUTPUT)
    b.flags |= HBM_BUF_LIVE_OUT;
  /* Strings go into one scratch buffer, NUL-separated; the profile copies them. */
  scratch->len = 0;
  size_t op_at = scratch->len;
  const hlo_metadata_t *md = in->meta;
  if (md->op_name.n)
    hbm_strbuf_append(scratch, md->op_name.p, md->op_name.n);
  else
    hbm_strbuf_append(scratch, in->name.p, in->name.n);
  hbm_strbuf_append(scratch, "", 1);
  size_t shape_at = scratch->len;
  hbm_strbuf_append(scratch, v->shape->text.p, v->shape->text.n);
  hbm_strbuf_append(scratch, "", 1);
  size_t opcode_at = scratch->len;
  if (in->opcode == HLO_OP_UNKNOWN)
    hbm_strbuf_append(scratch, m->text + in->opcode_text.start, in->opcode_text.len);
  else
    hbm_strbuf_puts(scratch, hbm__opcode_name((hlo_opcode_t)in->opcode));
  hbm_strbuf_append(scratch, "", 1);
  size_t label_at = scratch->len;
  char label[HLO_LABEL_MAX + 1];
  hbm_strbuf_append(scratch, label, hbm__instr_label(m, in, HLO_LABEL_MAX, label));
  if (v->subshape && in->shape->etype == HLO_T_TUPLE) {
    char idx[64];
    hbm__shape_index_text(in->shape, v->subshape, idx, sizeof idx);
    hbm_strbuf_append(scratch, " @", 2);
    hbm_strbuf_puts(scratch, idx);
  }
  hbm_strbuf_append(scratch, "", 1);
  size_t source_at = SIZE_MAX;
  hlo_source_frame_t src;
  hlo_source_status_t from = hbm__hlo_instr_source(m, in, &src);
  if ((from == HLO_SOURCE_METADATA || from == HLO_SOURCE_FRAME) && src.file.n) {
    source_at = scratch->len;
    hbm_strbuf_append(scratch, src.file.p, src.file.n);
    if (src.line > 0) {
      char line[24];
      hbm_strbuf_append(scratch, line, decimal(src.line, line));
    }
    hbm_strbuf_append(scratch, "", 1);
  }
  if (scratch->failed)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory") == HBM_OK;
  const char *base = scratch->data;
  b.op = base + op_at;
  b.shape = base + shape_at;
  b.opcode = base + opcode_at;
  b.label = base + label_at;
  b.source = source_at == SIZE_MAX ? NULL : base + source_at;
  if (hb->flags & HLO_V_COPY)
    b.group = "copy";
  return hbm_profile_add_buffer(plan->profile, &b) >= 0;
}

static hbm_status_t build_profile(hbm_plan_t *plan) {
  const hlo_module_t *m = plan->module;
  hlo_assignment_t *as = &plan->as;
  plan->profile = hbm_profile_new(HBM_PROFILE_PLAN, plan->name);
  if (!plan->profile)
    return hbm_last_status();
  hbm_profile_t *p = plan->profile;
  hbm_profile_set_meta(p, "module", plan->name);
  hbm_profile_set_meta(p, "source_path", plan->path);
  hbm_profile_set_meta(p, "planner", "hbm plan (XLA GlobalDecreasingSizeBestFitHeap)");
  hbm_profile_set_meta(p, "scheduled", m->is_scheduled ? "true" : "false (printed order)");
  /* Spaces: the planned colour first, then every other colour with buffers. */
  int *space_of = calloc((size_t)as->n_colors + 1, sizeof *space_of);
  uint8_t *used = calloc((size_t)as->n_colors + 1, 1);
  if (!space_of || !used) {
    free(space_of);
    free(used);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  }
  for (uint32_t i = 0; i < as->n_buffers; i++)
    used[as->buffers[i].color] = 1;
  int planned = plan->opt.space_color;
  char cbuf[32];
  plan->space = hbm_profile_add_space(p, hbm__hlo_color_name(planned, cbuf, sizeof cbuf), "hlo",
                                      planned, plan->opt.memory);
  for (int c = 0; c < as->n_colors; c++) {
    if (c == planned)
      space_of[c] = plan->space;
    else if (used[c])
      space_of[c] =
          hbm_profile_add_space(p, hbm__hlo_color_name(c, cbuf, sizeof cbuf), "hlo", c, 0);
  }
  free(used);
  hbm_status_t st = plan->space < 0 ? hbm_last_status() : HBM_OK;
  for (uint32_t s = 0; st == HBM_OK && s < as->n_steps; s++) {
    const hlo_instr_t *in = as->steps[s].instr;
    char name[256];
    size_t n = in->name.n < sizeof name - 1 ? in->name.n : sizeof name - 1;
    memcpy(name, in->name.p, n);
    name[n] = '\0';
    if (hbm_profile_add_step(p, (int64_t)s, name) < 0)
      st = hbm_last_status();
  }
  uint32_t *order = st == HBM_OK ? definition_order(as) : NULL;
  /* A buffer whose memory is free between its values (heap_sim.c's segments) is one
   * profile buffer per segment: the memory map then shows what XLA's heap reuses. */
  size_t n_profile = as->n_buffers;
  for (uint32_t i = 0; i < as->n_buffers; i++)
    n_profile += as->buffers[i].n_segs ? as->buffers[i].n_segs - 1 : 0;
  plan->buffer_index = malloc(((size_t)as->n_buffers + 1) * sizeof *plan->buffer_index);
  plan->profile_hlo = malloc((n_profile + 1) * sizeof *plan->profile_hlo);
  plan->n_profile_buffers = n_profile;
  if (st == HBM_OK && (!order || !plan->buffer_index || !plan->profile_hlo))
    st = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  if (st == HBM_OK) {
    hbm_strbuf_t scratch;
    hbm_strbuf_init(&scratch);
    uint32_t at = 0;
    for (uint32_t k = 0; st == HBM_OK && k < as->n_buffers; k++) {
      const hlo_buffer_t *hb = &as->buffers[order[k]];
      plan->buffer_index[order[k]] = at;
      uint32_t n = hb->n_segs ? hb->n_segs : 1;
      for (uint32_t j = 0; st == HBM_OK && j < n; j++) {
        const uint32_t *seg = hb->n_segs ? &as->segs[2 * (hb->seg_at + j)] : NULL;
        plan->profile_hlo[at++] = order[k];
        if (!add_profile_buffer(plan, hb, space_of[hb->color], seg ? seg[0] : hb->start,
                                seg ? seg[1] : hb->end, &scratch))
          st = hbm_last_status();
      }
    }
    hbm_strbuf_free(&scratch);
  }
  free(order);
  free(space_of);
  if (st == HBM_OK)
    st = hbm_profile_finish(p);
  return st;
}

/* ---- summary ---- */

hbm_status_t hbm__plan_finish(hbm_plan_t *plan) {
  hbm_plan_summary_t *sum = &plan->summary;
  const hbm_profile_t *p = plan->profile;
  int64_t nb = hbm_profile_buffer_count(p);
  sum->argument_bytes = sum->output_bytes = sum->alias_bytes = 0;
  plan->constant_bytes = plan->thread_local_bytes = 0;
  for (int64_t i = 0; i < nb; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    if (b->space != plan->space)
      continue;
    switch (b->category) { /* totals saturate at HBM_BYTES_MAX, never wrap */
    case HBM_CAT_PARAMETER:
      sum->argument_bytes = hbm__bytes_add(sum->argument_bytes, b->size);
      if (b->flags & HBM_BUF_LIVE_OUT) { /* an output living in a donated parameter */
        sum->output_bytes = hbm__bytes_add(sum->output_bytes, b->size);
        sum->alias_bytes = hbm__bytes_add(sum->alias_bytes, b->size);
      }
      break;
    case HBM_CAT_OUTPUT: sum->output_bytes = hbm__bytes_add(sum->output_bytes, b->size); break;
    case HBM_CAT_CONSTANT:
      plan->constant_bytes = hbm__bytes_add(plan->constant_bytes, b->size);
      break;
    case HBM_CAT_THREAD_LOCAL:
      plan->thread_local_bytes = hbm__bytes_add(plan->thread_local_bytes, b->size);
      break;
    default: break;
    }
  }
  plan->indefinite_bytes = hbm__bytes_add(
      hbm__bytes_add(sum->argument_bytes, hbm__bytes_sub(sum->output_bytes, sum->alias_bytes)),
      hbm__bytes_add(plan->constant_bytes, plan->thread_local_bytes));
  hbm_analysis_free(plan->analysis);
  plan->analysis = hbm_analyze(p, plan->space);
  if (!plan->analysis)
    return hbm_last_status();
  const hbm_summary_t *as = hbm_analysis_summary(plan->analysis);
  sum->peak_bytes = as->peak_bytes;
  sum->peak_step = as->peak_step;
  plan->temp_peak = hbm__bytes_sub(as->peak_bytes, plan->indefinite_bytes);
  /* Unpadded bytes of the temporaries at the peak. */
  uint64_t unpadded_indefinite = 0;
  size_t n_at;
  const int64_t *at = hbm_analysis_buffers_at_peak(plan->analysis, &n_at);
  uint64_t temp_unpadded = 0;
  for (size_t k = 0; k < n_at; k++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, at[k]);
    if (b->flags & HBM_BUF_INDEFINITE)
      unpadded_indefinite = hbm__bytes_add(unpadded_indefinite, b->unpadded_size);
    else
      temp_unpadded = hbm__bytes_add(temp_unpadded, b->unpadded_size);
  }
  (void)unpadded_indefinite;
  sum->temp_unpadded_bytes = temp_unpadded;
  if (plan->heap_bytes < plan->temp_peak) /* dumps print rounded sizes */
    plan->heap_bytes = plan->temp_peak;
  sum->temp_bytes = plan->heap_bytes;
  sum->fragmentation_bytes = hbm__bytes_sub(plan->heap_bytes, plan->temp_peak);
  free(plan->peak_instruction);
  plan->peak_instruction = NULL;
  if (sum->peak_step >= 0) {
    const char *label = hbm_profile_step_label(p, sum->peak_step);
    plan->peak_instruction = hbm__strdup(label ? label : "");
  }
  sum->peak_instruction = plan->peak_instruction;
  sum->n_buffers = (size_t)nb;
  plan->used_bytes =
      hbm__bytes_add(hbm__bytes_add(plan->opt.reserved, plan->indefinite_bytes), plan->heap_bytes);
  sum->fits = plan->opt.memory == 0 || plan->used_bytes <= plan->opt.memory;
  sum->n_remat = plan->n_remats;
  sum->remat_extra_bytes = plan->remat_extra_bytes;
  /* The first buffer (in program order) that no arrangement could fit. */
  plan->oversized = -1;
  uint64_t avail =
      plan->opt.memory > plan->opt.reserved ? plan->opt.memory - plan->opt.reserved : 0;
  if (plan->opt.memory)
    for (int64_t i = 0; i < nb && plan->oversized < 0; i++) {
      const hbm_buffer_t *b = hbm_profile_buffer(p, i);
      if (b->space == plan->space && b->size > avail)
        plan->oversized = i;
    }
  return HBM_OK;
}

/* ---- backend and warnings ---- */

const char *hbm__plan_backend_name(int backend) {
  switch (backend) {
  case HBM_PLAN_BACKEND_GPU: return "gpu";
  case HBM_PLAN_BACKEND_CPU: return "cpu";
  case HBM_PLAN_BACKEND_TPU: return "tpu";
  default: return "unknown";
  }
}

static bool text_has(const hlo_module_t *m, const char *needle) {
  size_t n = strlen(needle);
  for (const char *p = m->text; (p = memchr(p, needle[0], m->len - (size_t)(p - m->text))); p++)
    if ((size_t)(m->text + m->len - p) >= n && !memcmp(p, needle, n))
      return true;
  return false;
}

/* XLA_FLAGS=--xla_dump_to names files `module_N.name.<platform>_after_optimizations.txt`;
 * without such a name, what only one backend writes into its modules. */
static int detect_backend(const hbm_plan_t *plan) {
  const char *base = hbm__base_name(plan->path);
  if (strstr(base, "gpu_after_optimizations"))
    return HBM_PLAN_BACKEND_GPU;
  if (strstr(base, "cpu_after_optimizations"))
    return HBM_PLAN_BACKEND_CPU;
  if (strstr(base, "tpu_after_optimizations"))
    return HBM_PLAN_BACKEND_TPU;
  const hlo_module_t *m = plan->module;
  if (text_has(m, "scheduling_name=") || text_has(m, "__cublas") ||
      text_has(m, "operation_queue_id") || text_has(m, "__cusolver") || text_has(m, "kind=kInput"))
    return HBM_PLAN_BACKEND_GPU;
  if (text_has(m, "outer_dimension_partitions") || text_has(m, "__xla_cpu_runtime"))
    return HBM_PLAN_BACKEND_CPU;
  if (text_has(m, ":T("))
    return HBM_PLAN_BACKEND_TPU;
  return HBM_PLAN_BACKEND_NONE;
}

/* XLA's heap alignment per backend (GPU kXlaAllocatedBufferAlignBytes, CPU's minimum
 * alignment, as the dumps' offsets show). */
static uint64_t backend_alignment(int backend) {
  switch (backend) {
  case HBM_PLAN_BACKEND_GPU: return 128;
  case HBM_PLAN_BACKEND_CPU: return 64;
  default: return 1;
  }
}

static void add_warning(hbm_plan_t *plan, const char *text) {
  if (plan->n_warnings < HBM_PLAN_MAX_WARNINGS) {
    char *w = hbm__strdup(text);
    if (w)
      plan->warnings[plan->n_warnings++] = w;
  }
}

/* Instructions whose stack_frame_id the module's frame index does not have: shown without
 * a source line (and said so), never followed. */
static void frame_warning(hbm_plan_t *plan) {
  const hlo_module_t *m = plan->module;
  size_t bad = 0;
  const hlo_instr_t *first = NULL;
  for (uint32_t c = 0; c < m->n_comps; c++)
    for (uint32_t i = 0; i < m->comps[c]->n_instrs; i++) {
      const hlo_instr_t *in = m->comps[c]->instrs[i];
      hlo_source_frame_t src;
      if (in->meta->stack_frame_id && hbm__hlo_instr_source(m, in, &src) == HLO_SOURCE_BAD_FRAME &&
          !bad++)
        first = in;
    }
  if (!bad)
    return;
  char buf[320];
  snprintf(buf, sizeof buf,
           "%zu instruction%s name%s a stack frame the module's stack-frame index does not "
           "have (the first: %.*s, stack_frame_id=%lld, of %u frames): shown without a "
           "source line",
           bad, bad == 1 ? "" : "s", bad == 1 ? "s" : "",
           (int)(first->name.n < 80 ? first->name.n : 80), first->name.p,
           (long long)first->meta->stack_frame_id, m->frames.n_frames);
  add_warning(plan, buf);
}

/* What makes XLA's numbers for this module differ from ours by construction. */
static void module_warnings(hbm_plan_t *plan) {
  const hlo_module_t *m = plan->module;
  frame_warning(plan);
  if (!m->is_scheduled)
    add_warning(plan, "the module is not scheduled (no is_scheduled=true): HLO before XLA's "
                      "optimizations, planned in printed order without fusion; XLA's own "
                      "numbers come from the *_after_optimizations.txt module it dumps");
  const hlo_str_t *en = &m->entry->name;
  bool spmd = false;
  for (size_t i = 0; i + 4 <= en->n && !spmd; i++)
    spmd = !memcmp(en->p + i, "spmd", 4);
  if (m->num_partitions > 1 && !spmd) {
    char buf[256];
    snprintf(buf, sizeof buf,
             "num_partitions=%lld but SPMD partitioning has not been applied: the sizes are "
             "global, not per device",
             (long long)m->num_partitions);
    add_warning(plan, buf);
  }
}

/* The temp allocation (of the planned colour) when no temporary goes into an output
 * allocation: the most XLA's can be whichever temporaries it picks for them. 0 when it
 * cannot be computed (out of memory). */
static uint64_t temp_without_reuse(const hbm_plan_t *plan, const hlo_plan_opts_t *opt) {
  hlo_plan_opts_t o = *opt;
  o.xla_allocations |= HLO_XLA_NO_REUSE;
  hlo_assignment_t *kept = plan->as.without_reuse; /* liveness.c kept it: no second dataflow */
  if (kept) {
    uint64_t bytes = 0;
    if (hbm__hlo_simulate_heap(kept, &o) == HBM_OK && plan->opt.space_color < kept->n_colors)
      bytes = kept->heap_bytes[plan->opt.space_color];
    return bytes;
  }
  hlo_assignment_t as;
  uint64_t bytes = 0;
  if (hbm__hlo_assign_opts(plan->module, &as, &o) != HBM_OK)
    return 0;
  if (hbm__hlo_simulate_heap(&as, &o) == HBM_OK && plan->opt.space_color < as.n_colors)
    bytes = as.heap_bytes[plan->opt.space_color];
  hbm__hlo_assignment_free(&as);
  return bytes;
}

/* Where hbm's choice between temporaries competing for one output allocation may differ
 * from XLA's, its temp allocation may be smaller than XLA's: say so, and by how much at
 * most — the temp allocation with none of the temporaries in output allocations, which
 * bounds every choice XLA can make (the contended bytes alone do not: a temporary that
 * took an allocation in hbm's order may be the one XLA leaves out, and it is at least as
 * large). Added once (re-planning after remat would repeat it). */
static void contention_warning(hbm_plan_t *plan, const hlo_plan_opts_t *opt) {
  if (!plan->as.contended)
    return;
  for (size_t i = 0; i < plan->n_warnings; i++)
    if (strstr(plan->warnings[i], "competing for"))
      return;
  uint64_t worst = temp_without_reuse(plan, opt);
  uint64_t more = worst > plan->heap_bytes ? worst - plan->heap_bytes : 0;
  /* the heap simulator is not monotone: never claim less than the contended bytes */
  if (more < plan->as.contended_bytes)
    more = plan->as.contended_bytes;
  char buf[400], a[32], b[32];
  bool one = plan->as.contended == 1;
  snprintf(buf, sizeof buf,
           "%u %s (%s) %s left in the temp allocation because others competing for the same "
           "output allocations came first; XLA picks among them by its post-order, which hbm "
           "approximates, so XLA's temp allocation may be larger, by at most %s (its size "
           "with no temporary in an output allocation)",
           plan->as.contended, one ? "temporary" : "temporaries",
           hbm__xla_bytes(plan->as.contended_bytes, a, sizeof a), one ? "was" : "were",
           hbm__xla_bytes(more, b, sizeof b));
  add_warning(plan, buf);
}

/* ---- planning ---- */

static uint64_t plan_alignment(const hbm_plan_t *plan) {
  return plan->opt.alignment ? plan->opt.alignment : backend_alignment(plan->backend);
}

/* GPU and CPU use BufferAssigner's reuse of output allocations. TPU does not: the seed's
 * real TPU error (examples/seed_oom.hlo) counts its temporaries apart from the outputs; NONE
 * is the plain planner (XLA's dataflow and heap only). */
static hlo_plan_opts_t plan_opts(const hbm_plan_t *plan) {
  uint8_t xla = plan->backend == HBM_PLAN_BACKEND_GPU   ? HLO_XLA_GPU
                : plan->backend == HBM_PLAN_BACKEND_CPU ? HLO_XLA_CPU
                                                        : 0;
  return (hlo_plan_opts_t){plan_alignment(plan), xla};
}

/* The heap simulator places buffers at 64-bit offsets and sums their sizes: a module whose
 * buffers of one colour (each with its alignment) add up past HBM_BYTES_MAX (8 EiB, far beyond
 * any device) is refused with the total, not planned with sums and offsets that wrap. */
static hbm_status_t check_total_bytes(const hbm_plan_t *plan, uint64_t alignment) {
  int n_colors = 1;
  for (uint32_t i = 0; i < plan->as.n_buffers; i++)
    if (plan->as.buffers[i].color >= n_colors)
      n_colors = plan->as.buffers[i].color + 1;
  uint64_t *total = calloc((size_t)n_colors, sizeof *total);
  if (!total)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (planner)");
  int over = -1;
  for (uint32_t i = 0; i < plan->as.n_buffers && over < 0; i++) {
    const hlo_buffer_t *b = &plan->as.buffers[i];
    if (b->color < 0)
      continue;
    total[b->color] = hbm__bytes_add(total[b->color], hbm__bytes_add(b->bytes, alignment));
    over = total[b->color] >= HBM_BYTES_MAX ? b->color : -1;
  }
  free(total);
  if (over < 0)
    return HBM_OK;
  char name[32];
  return hbm__error(HBM_ERR_INVALID,
                    "%s: the buffers of memory space %s add up to more than %llu bytes (2^63 - 1, "
                    "8 EiB: the most hbm sums exactly, millions of times any device's memory): "
                    "refused",
                    plan->path, hbm__hlo_color_name(over, name, sizeof name),
                    (unsigned long long)HBM_BYTES_MAX);
}

static hbm_status_t plan_module(hbm_plan_t *plan) {
  hlo_plan_opts_t o = plan_opts(plan);
  hbm__hlo_assignment_free(&plan->as);
  free(plan->buffer_index);
  free(plan->profile_hlo);
  plan->buffer_index = plan->profile_hlo = NULL;
  hbm_profile_free(plan->profile);
  plan->profile = NULL;
  hbm_status_t st = hbm__hlo_assign_opts(plan->module, &plan->as, &o);
  if (st == HBM_OK)
    st = check_total_bytes(plan, o.alignment);
  if (st == HBM_OK)
    st = hbm__hlo_simulate_heap(&plan->as, &o);
  if (st != HBM_OK)
    return st;
  int c = plan->opt.space_color;
  plan->heap_bytes = c < plan->as.n_colors ? plan->as.heap_bytes[c] : 0;
  contention_warning(plan, &o);
  st = build_profile(plan);
  return st == HBM_OK ? hbm__plan_finish(plan) : st;
}

static hbm_plan_t *plan_new(const char *name, const hbm_plan_options_t *opt) {
  hbm_plan_t *plan = calloc(1, sizeof *plan);
  if (!plan) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  if (opt)
    plan->opt = *opt;
  if (plan->opt.space_color < 0 || plan->opt.space_color > 255)
    plan->opt.space_color = 0;
  plan->path = hbm__strdup(name ? name : "<input>");
  plan->oversized = -1;
  if (!plan->path) {
    free(plan);
    return NULL;
  }
  return plan;
}

hbm_plan_t *hbm_plan_text(const char *text, size_t len, const char *name,
                          const hbm_plan_options_t *opt) {
  if (!text) {
    hbm__error(HBM_ERR_INVALID, "hbm_plan_text: no text");
    return NULL;
  }
  hbm_plan_t *plan = plan_new(name, opt);
  if (!plan)
    return NULL;
  hbm_status_t st;
  plan_source_t kind;
  if (hbm__xla_dump_kind(text, len, &kind)) {
    plan->source = kind;
    st = hbm__plan_from_dump(plan, text, len, kind);
  } else {
    plan->source = PLAN_FROM_HLO;
    plan->module = hbm__hlo_parse(text, len, plan->path);
    st = plan->module ? HBM_OK : hbm_last_status();
    if (st == HBM_OK) {
      plan->name = malloc(plan->module->name.n + 1u);
      if (plan->name) {
        memcpy(plan->name, plan->module->name.p, plan->module->name.n);
        plan->name[plan->module->name.n] = '\0';
      } else {
        hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
      }
      plan->backend = plan->opt.backend ? plan->opt.backend : detect_backend(plan);
      module_warnings(plan);
      st = plan->name ? plan_module(plan) : hbm_last_status();
    }
    plan->summary.peak_before_remat = plan->summary.peak_bytes;
    if (st == HBM_OK && plan->opt.remat && plan->opt.memory && !plan->summary.fits) {
      hlo_plan_opts_t o = plan_opts(plan);
      uint64_t before = plan->summary.peak_bytes;
      st = hbm__plan_remat(plan, &o);
      if (st == HBM_OK)
        st = plan_module(plan);
      plan->summary.peak_before_remat = before;
      plan->remat_ran = true;
      plan->remat_short_by = plan->summary.fits || plan->used_bytes <= plan->opt.memory
                                 ? 0
                                 : plan->used_bytes - plan->opt.memory;
    }
    if (plan->module)
      plan->summary.n_instructions = plan->module->n_instrs;
  }
  if (st != HBM_OK) {
    hbm_status_t keep = hbm_last_status();
    char *msg = hbm__strdup(hbm_last_error());
    hbm_plan_free(plan);
    if (msg) {
      hbm__error_text(keep != HBM_OK ? keep : st, msg);
      free(msg);
    }
    return NULL;
  }
  return plan;
}

hbm_plan_t *hbm_plan_file(const char *path, const hbm_plan_options_t *opt) {
  char *data;
  size_t len;
  if (!path)
    return hbm__error(HBM_ERR_INVALID, "hbm_plan_file: no path"), NULL;
  if (hbm__read_file(path, &data, &len) != HBM_OK)
    return NULL;
  hbm_plan_t *plan = hbm_plan_text(data, len, path, opt);
  free(data);
  return plan;
}

void hbm_plan_free(hbm_plan_t *plan) {
  if (!plan)
    return;
  hbm_analysis_free(plan->analysis);
  hbm_profile_free(plan->profile);
  hbm__hlo_assignment_free(&plan->as);
  hbm__hlo_free(plan->module);
  free(plan->buffer_index);
  free(plan->profile_hlo);
  free(plan->peak_instruction);
  free(plan->remats);
  for (size_t i = 0; i < plan->n_warnings; i++)
    free(plan->warnings[i]);
  free(plan->name);
  free(plan->path);
  free(plan);
}

const hbm_plan_summary_t *hbm_plan_get_summary(const hbm_plan_t *plan) {
  return plan ? &plan->summary : NULL;
}

const hbm_profile_t *hbm_plan_profile(const hbm_plan_t *plan) {
  return plan ? plan->profile : NULL;
}

hbm_profile_t *hbm_plan_take_profile(hbm_plan_t *plan) {
  if (!plan || !plan->profile)
    return NULL;
  hbm_analysis_free(plan->analysis);
  plan->analysis = NULL;
  hbm_profile_t *p = plan->profile;
  plan->profile = NULL;
  return p;
}

const char *const *hbm_plan_warnings(const hbm_plan_t *plan, size_t *n) {
  *n = plan ? plan->n_warnings : 0;
  return plan ? (const char *const *)plan->warnings : NULL;
}

const hbm_remat_info_t *hbm_plan_remats(const hbm_plan_t *plan, size_t *n) {
  *n = plan ? plan->n_remats : 0;
  return plan ? plan->remats : NULL;
}

char *hbm_plan_module_text(const hbm_plan_t *plan) {
  if (!plan || !plan->module) {
    hbm__error(HBM_ERR_INVALID, "this plan was not made from HLO text");
    return NULL;
  }
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm__hlo_print(plan->module, &sb);
  if (sb.failed) {
    hbm_strbuf_free(&sb);
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  if (!sb.data)
    return hbm__strdup("");
  return sb.data;
}
