/* e1000.c — what `hbm plan` prints: XLA's own texts first, so that users' searches find
 * them (the TPU "RESOURCE_EXHAUSTED: Allocation (size=...) would exceed memory" line for a
 * buffer larger than the device, "Ran out of memory in memory space hbm. ..." and the E1000
 * compile-time report with its largest program allocations), then hbm's diagnosis: what
 * dominates the peak and what to try. Also the JSON form of the same plan. Peaks and
 * buffers at the peak come from hbm_analyze on the plan's profile. */
#include "plan_internal.h"
#include "profile/json_out.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

char *hbm__xla_bytes(uint64_t bytes, char *buf, size_t cap) {
  static const char units[] = "KMGTPE";
  if (bytes >= HBM_BYTES_MAX) { /* a saturated total (hbm.h): never a plain number */
    snprintf(buf, cap, "≥ 8.00E (overflowed)");
    return buf;
  }
  if (bytes < 1024) {
    snprintf(buf, cap, "%lluB", (unsigned long long)bytes);
    return buf;
  }
  double v = (double)bytes / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < sizeof units - 1) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, cap, units[u] == 'K' ? "%.1f%c" : "%.2f%c", v, units[u]);
  return buf;
}

/* Lower-case space name for XLA's messages ("hbm", "host"). */
static void space_word(const hbm_plan_t *plan, char *buf, size_t cap) {
  char tmp[32];
  const char *name = hbm__hlo_color_name(plan->opt.space_color, tmp, sizeof tmp);
  size_t i = 0;
  for (; name[i] && i + 1 < cap; i++)
    buf[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]);
  buf[i] = '\0';
}

static const hlo_instr_t *buffer_instr(const hbm_plan_t *plan, int64_t idx) {
  if (!plan->module || !plan->profile_hlo || idx < 0 || idx >= (int64_t)plan->n_profile_buffers)
    return NULL;
  const hlo_buffer_t *hb = &plan->as.buffers[plan->profile_hlo[idx]];
  return plan->as.values[hb->value].instr;
}

static const char *allocation_type(hbm_category_t c) {
  switch (c) {
  case HBM_CAT_PARAMETER: return "program argument";
  case HBM_CAT_OUTPUT: return "program output";
  case HBM_CAT_THREAD_LOCAL: return "thread-local";
  case HBM_CAT_CONSTANT: return "global constant";
  default: return "HLO temp";
  }
}

/* "RESOURCE_EXHAUSTED: Allocation (size=N) would exceed memory (size=M) :: #allocationK
 * [shape = '...', space=hbm, size = 0xffffffffffffffff, tag = 'output of X@{}'] :: ..." */
static void oversized_line(const hbm_plan_t *plan, hbm_strbuf_t *sb) {
  const hbm_buffer_t *b = hbm_profile_buffer(plan->profile, plan->oversized);
  const hlo_instr_t *in = buffer_instr(plan, plan->oversized);
  uint64_t avail =
      plan->opt.memory > plan->opt.reserved ? plan->opt.memory - plan->opt.reserved : 0;
  char space[32];
  space_word(plan, space, sizeof space);
  hbm_strbuf_printf(sb,
                    "RESOURCE_EXHAUSTED: Allocation (size=%llu) would exceed memory (size=%llu) "
                    ":: #allocation%lld [shape = '%s', space=%s, size = 0xffffffffffffffff, tag = "
                    "'output of ",
                    (unsigned long long)b->size, (unsigned long long)avail,
                    (long long)plan->oversized, b->shape ? b->shape : "?", space);
  char idx[64] = "{}";
  if (in) {
    hbm_strbuf_append(sb, in->name.p, in->name.n);
    const hlo_buffer_t *hb = &plan->as.buffers[plan->profile_hlo[plan->oversized]];
    const hlo_value_t *v = &plan->as.values[hb->value];
    hbm__shape_index_text(in->shape, v->subshape, idx, sizeof idx);
  } else {
    hbm_strbuf_puts(sb, b->op ? b->op : "?");
  }
  hbm_strbuf_printf(sb, "@%s'] :: <no-hlo-instruction>\n", idx);
}

/* "     Operator: op_type=... op_name=..." from the metadata; XLA leaves the line out when
 * an instruction has none. */
static void operator_text(const hbm_plan_t *plan, int64_t idx, const hbm_buffer_t *b,
                          hbm_strbuf_t *sb) {
  const hlo_instr_t *in = buffer_instr(plan, idx);
  const hlo_metadata_t *md = in ? in->meta : NULL;
  if (!md || (!md->op_type.n && !md->op_name.n))
    return; /* XLA's dumps carry no metadata either */
  hbm_strbuf_puts(sb, "     Operator: ");
  {
    if (md->op_type.n)
      hbm_strbuf_printf(sb, "op_type=\"%.*s\"%s", (int)md->op_type.n, md->op_type.p,
                        md->op_name.n ? " " : "");
    if (md->op_name.n)
      hbm_strbuf_printf(sb, "op_name=\"%.*s\"", (int)md->op_name.n, md->op_name.p);
    hlo_source_frame_t src;
    hlo_source_status_t from = hbm__hlo_instr_source(plan->module, in, &src);
    if ((from == HLO_SOURCE_METADATA || from == HLO_SOURCE_FRAME) && src.file.n)
      hbm_strbuf_printf(sb, " source_file=\"%.*s\" source_line=%lld", (int)src.file.n, src.file.p,
                        (long long)src.line);
  }
  (void)b;
  hbm_strbuf_puts(sb, "\n");
}

static void largest_allocations(const hbm_plan_t *plan, hbm_strbuf_t *sb) {
  size_t n;
  const int64_t *by_size = hbm_analysis_buffers_at_peak_by_size(plan->analysis, &n);
  size_t top = plan->opt.top > 0 ? (size_t)plan->opt.top : 10;
  char space[32], b1[32], b2[32];
  space_word(plan, space, sizeof space);
  hbm_strbuf_printf(sb, "  Largest program allocations in %s:\n\n", space);
  for (size_t k = 0; k < n && k < top; k++) {
    const hbm_buffer_t *b = hbm_profile_buffer(plan->profile, by_size[k]);
    uint64_t pad = b->size > b->unpadded_size ? b->size - b->unpadded_size : 0;
    hbm_strbuf_printf(sb, "  %zu. Size: %s\n", k + 1, hbm__xla_bytes(b->size, b1, sizeof b1));
    operator_text(plan, by_size[k], b, sb);
    hbm_strbuf_printf(sb, "     Shape: %s\n", b->shape ? b->shape : "");
    hbm_strbuf_printf(sb, "     Unpadded size: %s\n",
                      hbm__xla_bytes(b->unpadded_size, b1, sizeof b1));
    if (pad)
      hbm_strbuf_printf(sb, "     Extra memory due to padding: %s (%.1fx expansion)\n",
                        hbm__xla_bytes(pad, b2, sizeof b2),
                        b->unpadded_size ? (double)b->size / (double)b->unpadded_size : 0.0);
    hbm_strbuf_printf(sb, "     XLA label: %s\n", b->label ? b->label : (b->op ? b->op : ""));
    hbm_strbuf_printf(sb, "     Allocation type: %s\n", allocation_type(b->category));
    hbm_strbuf_puts(sb, "     ==========================\n\n");
  }
}

static void e1000_report(const hbm_plan_t *plan, hbm_strbuf_t *sb) {
  const hbm_plan_summary_t *s = &plan->summary;
  char space[32], a[32], b[32], c[32];
  space_word(plan, space, sizeof space);
  uint64_t outputs = hbm__bytes_sub(s->output_bytes, s->alias_bytes);
  uint64_t global = hbm__bytes_add(plan->constant_bytes, plan->thread_local_bytes);
  uint64_t program = hbm__bytes_add(hbm__bytes_add(outputs, global), plan->heap_bytes);
  if (!s->fits && plan->oversized < 0) {
    uint64_t over = hbm__bytes_sub(plan->used_bytes, plan->opt.memory);
    hbm_strbuf_printf(sb, "Ran out of memory in memory space %s. Used %s of %s %s. ", space,
                      hbm__xla_bytes(plan->used_bytes, a, sizeof a),
                      hbm__xla_bytes(plan->opt.memory, b, sizeof b), space);
    hbm_strbuf_printf(sb, "Exceeded %s capacity by %s.\n\n", space,
                      hbm__xla_bytes(over, c, sizeof c));
  }
  hbm_strbuf_printf(sb, "Total %s usage %s%s:\n", space,
                    plan->used_bytes >= HBM_BYTES_MAX ? "" : ">= ", /* the text says "≥" */
                    hbm__xla_bytes(plan->used_bytes, a, sizeof a));
  hbm_strbuf_printf(sb, "    %-9s%14s\n", "reserved",
                    hbm__xla_bytes(plan->opt.reserved, a, sizeof a));
  hbm_strbuf_printf(sb, "    %-9s%14s\n", "program", hbm__xla_bytes(program, a, sizeof a));
  hbm_strbuf_printf(sb, "    %-9s%14s\n\n", "arguments",
                    hbm__xla_bytes(s->argument_bytes, a, sizeof a));
  hbm_strbuf_printf(sb, "Output size %s; shares %s with arguments.\n\n",
                    hbm__xla_bytes(s->output_bytes, a, sizeof a),
                    hbm__xla_bytes(s->alias_bytes, b, sizeof b));
  hbm_strbuf_printf(sb, "Program %s requirement %s:\n", space,
                    hbm__xla_bytes(program, a, sizeof a));
  hbm_strbuf_printf(sb, "    %-9s%14s\n", "global", hbm__xla_bytes(global, a, sizeof a));
  if (outputs)
    hbm_strbuf_printf(sb, "    %-9s%14s\n", "output", hbm__xla_bytes(outputs, a, sizeof a));
  double util =
      plan->heap_bytes ? 100.0 * (double)s->temp_unpadded_bytes / (double)plan->heap_bytes : 0.0;
  double frag =
      plan->heap_bytes ? 100.0 * (double)s->fragmentation_bytes / (double)plan->heap_bytes : 0.0;
  hbm_strbuf_printf(sb, "    %-9s%14s (%.1f%% utilization: Unpadded (%s) Padded (%s), ", "HLO temp",
                    hbm__xla_bytes(plan->heap_bytes, a, sizeof a), util,
                    hbm__xla_bytes(s->temp_unpadded_bytes, b, sizeof b),
                    hbm__xla_bytes(plan->heap_bytes, c, sizeof c));
  hbm_strbuf_printf(sb, "%.1f%% fragmentation (%s))\n\n", frag,
                    hbm__xla_bytes(s->fragmentation_bytes, a, sizeof a));
  largest_allocations(plan, sb);
}

/* ---- hbm's diagnosis ---- */

static double percent(uint64_t part, uint64_t whole) {
  return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

static void diagnose_peak(const hbm_plan_t *plan, hbm_strbuf_t *sb) {
  const hbm_plan_summary_t *s = &plan->summary;
  const hbm_summary_t *as = hbm_analysis_summary(plan->analysis);
  char a[32], b[32], c[32];
  hbm_strbuf_printf(sb,
                    "  - The peak, %s, is at %s (step %lld of %lld): arguments %s, "
                    "temporaries %s in %zu live buffers.\n",
                    hbm__xla_bytes(s->peak_bytes, a, sizeof a),
                    s->peak_instruction ? s->peak_instruction : "?", (long long)s->peak_step,
                    (long long)as->n_steps, hbm__xla_bytes(s->argument_bytes, b, sizeof b),
                    hbm__xla_bytes(plan->temp_peak, c, sizeof c), as->n_buffers_at_peak);
  size_t n;
  const int64_t *by_size = hbm_analysis_buffers_at_peak_by_size(plan->analysis, &n);
  if (n) {
    hbm_strbuf_puts(sb, "  - What dominates it:\n");
    for (size_t k = 0; k < n && k < 3; k++) {
      const hbm_buffer_t *buf = hbm_profile_buffer(plan->profile, by_size[k]);
      hbm_strbuf_printf(sb, "      %s (%.0f%%) %s %s [%s]\n",
                        hbm__xla_bytes(buf->size, a, sizeof a), percent(buf->size, s->peak_bytes),
                        buf->label ? buf->label : buf->op,
                        buf->op && buf->label && strstr(buf->label, buf->op) ? "" : buf->op,
                        hbm_category_name(buf->category));
    }
  }
  const int64_t *by_pad = hbm_analysis_buffers_at_peak_by_padding(plan->analysis, &n);
  if (as->padding_bytes && percent(as->padding_bytes, s->peak_bytes) >= 5.0 && n) {
    const hbm_buffer_t *buf = hbm_profile_buffer(plan->profile, by_pad[0]);
    hbm_strbuf_printf(sb,
                      "  - Padding: %s of the peak (%.0f%%) is tile padding. The worst is %s "
                      "(%s, %.1fx its %s of data): choose dimensions that are multiples "
                      "of the tile (8x128 for 32-bit types on TPU) or another layout.\n",
                      hbm__xla_bytes(as->padding_bytes, a, sizeof a),
                      percent(as->padding_bytes, s->peak_bytes), buf->shape ? buf->shape : "?",
                      buf->op ? buf->op : "",
                      buf->unpadded_size ? (double)buf->size / (double)buf->unpadded_size : 0.0,
                      hbm__xla_bytes(buf->unpadded_size, b, sizeof b));
  }
}

/* Every buffer larger than the whole device, largest first (XLA names only the first it
 * refused, plan->oversized); false when there is only that one. */
static bool diagnose_oversized(const hbm_plan_t *plan, hbm_strbuf_t *sb) {
  char a[32], b[32];
  int64_t n = hbm_profile_buffer_count(plan->profile), count = 0;
  for (int64_t i = 0; i < n; i++)
    count += hbm_profile_buffer(plan->profile, i)->size > plan->opt.memory;
  if (count < 2)
    return false;
  hbm_strbuf_printf(sb,
                    "  - %lld buffers are each larger than the whole device of %s: no schedule, "
                    "rematerialization or defragmentation can fit them. Shard them across "
                    "devices, or make them smaller (a smaller batch, sequence or model "
                    "dimension; a narrower type):\n",
                    (long long)count, hbm__xla_bytes(plan->opt.memory, a, sizeof a));
  uint64_t below = UINT64_MAX; /* list by size, largest first, in profile order within a size */
  for (int64_t listed = 0; listed < count;) {
    uint64_t size = 0;
    for (int64_t i = 0; i < n; i++) {
      uint64_t z = hbm_profile_buffer(plan->profile, i)->size;
      if (z > plan->opt.memory && z < below && z > size)
        size = z;
    }
    for (int64_t i = 0; i < n; i++) {
      const hbm_buffer_t *buf = hbm_profile_buffer(plan->profile, i);
      if (buf->size != size)
        continue;
      hbm_strbuf_printf(sb, "      %s %s\n", hbm__xla_bytes(buf->size, b, sizeof b),
                        buf->label ? buf->label : (buf->op ? buf->op : "?"));
      listed++;
    }
    below = size;
  }
  return true;
}

static void diagnose_fit(const hbm_plan_t *plan, hbm_strbuf_t *sb) {
  const hbm_plan_summary_t *s = &plan->summary;
  char a[32], b[32], c[32];
  if (plan->oversized >= 0 && diagnose_oversized(plan, sb))
    return;
  if (plan->oversized >= 0) {
    const hbm_buffer_t *buf = hbm_profile_buffer(plan->profile, plan->oversized);
    hbm_strbuf_printf(sb,
                      "  - One buffer, %s (%s, %s), is larger than the whole %s of %s: no "
                      "schedule, rematerialization or defragmentation can fit it. Shard it "
                      "across devices, or make it smaller (a smaller batch, sequence or "
                      "model dimension; a narrower type).\n",
                      buf->label ? buf->label : buf->op, buf->shape ? buf->shape : "?",
                      hbm__xla_bytes(buf->size, a, sizeof a), "device",
                      hbm__xla_bytes(plan->opt.memory, b, sizeof b));
    return;
  }
  uint64_t over = hbm__bytes_sub(plan->used_bytes, plan->opt.memory);
  hbm_strbuf_printf(sb, "  - It needs %s but the device has %s: %s too much.\n",
                    hbm__xla_bytes(plan->used_bytes, a, sizeof a),
                    hbm__xla_bytes(plan->opt.memory, b, sizeof b),
                    hbm__xla_bytes(over, c, sizeof c));
  if (s->argument_bytes >= plan->opt.memory)
    hbm_strbuf_puts(sb, "  - The arguments alone do not fit: shard the parameters and optimizer "
                        "state across devices, or keep some on the host.\n");
  if (s->fragmentation_bytes >= over)
    hbm_strbuf_printf(sb,
                      "  - The heap loses %s to fragmentation, more than the excess: a "
                      "different schedule could fit.\n",
                      hbm__xla_bytes(s->fragmentation_bytes, a, sizeof a));
  if (!plan->remat_ran && plan->temp_peak)
    hbm_strbuf_puts(sb, "  - Try rematerialization (hbm plan --remat, or jax.checkpoint / "
                        "enable_remat_opt_pass): recompute cheap values next to their later uses "
                        "instead of keeping them live across the peak.\n");
  size_t n;
  const int64_t *by_size = hbm_analysis_buffers_at_peak_by_size(plan->analysis, &n);
  for (size_t k = 0; k < n; k++) {
    const hbm_buffer_t *buf = hbm_profile_buffer(plan->profile, by_size[k]);
    if (buf->category != HBM_CAT_TEMPORARY || !buf->shape)
      continue;
    const char *open = strchr(buf->shape, '[');
    if (open && open[1] >= '1' && open[1] <= '9')
      hbm_strbuf_printf(sb,
                        "  - A smaller batch: the largest temporary at the peak, %s, has "
                        "leading dimension %.*s; temporaries scale with it, so halving the "
                        "batch saves about %s.\n",
                        buf->shape, (int)strcspn(open + 1, ",]"), open + 1,
                        hbm__xla_bytes(plan->temp_peak / 2, a, sizeof a));
    break;
  }
}

static void remat_report(const hbm_plan_t *plan, hbm_strbuf_t *sb) {
  const hbm_plan_summary_t *s = &plan->summary;
  char a[32], b[32], c[32];
  hbm_strbuf_printf(
      sb,
      "Rematerialization: %zu instruction%s recomputed; peak %s -> %s (the buffers live at "
      "once; the total usage below adds the heap's fragmentation and reserved memory); extra "
      "work about %llu element-wise operations and %s read and written.\n",
      plan->n_remats, plan->n_remats == 1 ? "" : "s",
      hbm__xla_bytes(s->peak_before_remat, a, sizeof a), hbm__xla_bytes(s->peak_bytes, b, sizeof b),
      (unsigned long long)s->remat_extra_flops, hbm__xla_bytes(s->remat_extra_bytes, c, sizeof c));
  for (size_t i = 0; i < plan->n_remats && i < 20; i++)
    hbm_strbuf_printf(sb, "  %%%s (%s) recomputed as %%%s\n", plan->remats[i].instruction,
                      hbm__xla_bytes(plan->remats[i].bytes, a, sizeof a), plan->remats[i].clone);
  if (plan->n_remats > 20)
    hbm_strbuf_printf(sb, "  ... and %zu more\n", plan->n_remats - 20);
  if (plan->remat_short_by)
    hbm_strbuf_printf(sb,
                      "  Still %s over the %s limit: nothing else live at the peak can be "
                      "recomputed cheaply.\n",
                      hbm__xla_bytes(plan->remat_short_by, a, sizeof a),
                      hbm__xla_bytes(plan->opt.memory, b, sizeof b));
  else
    hbm_strbuf_printf(sb, "  It now fits in %s.\n", hbm__xla_bytes(plan->opt.memory, a, sizeof a));
  hbm_strbuf_puts(sb, "\n");
}

static hbm_status_t write_out(hbm_strbuf_t *sb, FILE *out) {
  if (sb->failed) {
    hbm_strbuf_free(sb);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  }
  size_t n = sb->len;
  bool ok = n == 0 || fwrite(sb->data, 1, n, out) == n;
  hbm_strbuf_free(sb);
  return ok ? HBM_OK : hbm__error(HBM_ERR_IO, "could not write the report");
}

hbm_status_t hbm_plan_report_text(const hbm_plan_t *plan, FILE *out) {
  if (!plan || !out || !plan->analysis)
    return hbm__error(HBM_ERR_INVALID, "hbm_plan_report_text: no plan");
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  if (plan->oversized >= 0) {
    oversized_line(plan, &sb);
    hbm_strbuf_puts(&sb, "\n");
  }
  if (plan->remat_ran)
    remat_report(plan, &sb);
  e1000_report(plan, &sb);
  hbm_strbuf_printf(&sb, "hbm's diagnosis (%s, %zu instructions, %zu buffers):\n",
                    plan->name ? plan->name : "module", plan->summary.n_instructions,
                    plan->summary.n_buffers);
  diagnose_peak(plan, &sb);
  if (!plan->summary.fits)
    diagnose_fit(plan, &sb);
  for (size_t i = 0; i < plan->n_warnings; i++)
    hbm_strbuf_printf(&sb, "  - Warning: %s.\n", plan->warnings[i]);
  return write_out(&sb, out);
}

/* ---- JSON ---- */

/* The instruction's source stack, innermost frame first: every frame of its stack_frame_id
 * (metadata without one has at most "source"); NULL when it has none. */
static json_t *stack_json(const hlo_module_t *m, const hlo_instr_t *in) {
  hlo_source_frame_t frames[64];
  int n = in->meta->stack_frame_id > 0
              ? hbm__hlo_frame_stack(&m->frames, in->meta->stack_frame_id, frames, 64)
              : 0;
  if (n <= 0)
    return NULL;
  json_t *list = json_array();
  for (int i = 0; i < n; i++) {
    json_t *f = json_object();
    json_object_set_new(f, "file", json_stringn(frames[i].file.p, frames[i].file.n));
    json_object_set_new(f, "line", json_integer(frames[i].line));
    if (frames[i].function.n) {
      json_object_set_new(f, "function", json_stringn(frames[i].function.p, frames[i].function.n));
      json_object_set_new(f, "column", json_integer(frames[i].column));
    }
    json_array_append_new(list, f);
  }
  return list;
}

static json_t *buffer_json(const hbm_plan_t *plan, int64_t idx) {
  const hbm_buffer_t *b = hbm_profile_buffer(plan->profile, idx);
  json_t *o = json_object();
  json_object_set_new(o, "index", json_integer(idx));
  json_object_set_new(o, "size", json_integer(hbm__json_bytes(b->size)));
  json_object_set_new(o, "unpadded_size", json_integer(hbm__json_bytes(b->unpadded_size)));
  json_object_set_new(
      o, "padding",
      json_integer((json_int_t)(b->size > b->unpadded_size ? b->size - b->unpadded_size : 0)));
  json_object_set_new(o, "offset", json_integer((json_int_t)b->address));
  json_object_set_new(o, "start", json_integer(b->start));
  json_object_set_new(o, "end", json_integer(b->end));
  json_object_set_new(o, "category", json_string(hbm_category_name(b->category)));
  json_object_set_new(o, "op", b->op ? json_string(b->op) : json_null());
  json_object_set_new(o, "shape", b->shape ? json_string(b->shape) : json_null());
  json_object_set_new(o, "opcode", b->opcode ? json_string(b->opcode) : json_null());
  json_object_set_new(o, "label", b->label ? json_string(b->label) : json_null());
  json_object_set_new(o, "source", b->source ? json_string(b->source) : json_null());
  const hlo_instr_t *in = buffer_instr(plan, idx);
  if (in) {
    json_object_set_new(o, "instruction", json_stringn(in->name.p, in->name.n));
    json_t *stack = stack_json(plan->module, in);
    if (stack)
      json_object_set_new(o, "stack", stack);
  }
  return o;
}

hbm_status_t hbm_plan_report_json(const hbm_plan_t *plan, FILE *out) {
  if (!plan || !out || !plan->analysis)
    return hbm__error(HBM_ERR_INVALID, "hbm_plan_report_json: no plan");
  const hbm_plan_summary_t *s = &plan->summary;
  json_t *root = json_object();
  json_object_set_new(root, "module", json_string(plan->name ? plan->name : ""));
  json_object_set_new(root, "argument_bytes", json_integer(hbm__json_bytes(s->argument_bytes)));
  json_object_set_new(root, "output_bytes", json_integer(hbm__json_bytes(s->output_bytes)));
  json_object_set_new(root, "alias_bytes", json_integer(hbm__json_bytes(s->alias_bytes)));
  json_object_set_new(root, "temp_bytes", json_integer(hbm__json_bytes(s->temp_bytes)));
  json_object_set_new(root, "temp_unpadded_bytes",
                      json_integer(hbm__json_bytes(s->temp_unpadded_bytes)));
  json_object_set_new(root, "temp_peak_bytes", json_integer(hbm__json_bytes(plan->temp_peak)));
  json_object_set_new(root, "constant_bytes", json_integer(hbm__json_bytes(plan->constant_bytes)));
  json_object_set_new(root, "thread_local_bytes",
                      json_integer(hbm__json_bytes(plan->thread_local_bytes)));
  json_object_set_new(root, "fragmentation_bytes",
                      json_integer(hbm__json_bytes(s->fragmentation_bytes)));
  json_object_set_new(root, "peak_bytes", json_integer(hbm__json_bytes(s->peak_bytes)));
  json_object_set_new(root, "peak_step", json_integer(s->peak_step));
  json_object_set_new(root, "peak_instruction",
                      s->peak_instruction ? json_string(s->peak_instruction) : json_null());
  json_object_set_new(root, "used_bytes", json_integer(hbm__json_bytes(plan->used_bytes)));
  json_object_set_new(root, "memory_bytes", json_integer(hbm__json_bytes(plan->opt.memory)));
  json_object_set_new(root, "reserved_bytes", json_integer(hbm__json_bytes(plan->opt.reserved)));
  json_object_set_new(root, "fits", json_boolean(s->fits));
  json_object_set_new(root, "n_instructions", json_integer((json_int_t)s->n_instructions));
  json_object_set_new(root, "n_buffers", json_integer((json_int_t)s->n_buffers));
  json_object_set_new(root, "n_steps", json_integer(hbm_profile_step_count(plan->profile)));
  /* XLA's "Total bytes used": every allocation once (the device's share of the program). */
  json_object_set_new(
      root, "total_bytes",
      json_integer(hbm__json_bytes(hbm__bytes_sub(plan->used_bytes, plan->opt.reserved))));
  static const char *sources[] = {"hlo", "buffer-assignment", "memory-usage-report"};
  json_object_set_new(root, "source", json_string(sources[plan->source]));
  json_object_set_new(root, "backend", json_string(hbm__plan_backend_name(plan->backend)));
  json_t *warnings = json_array();
  for (size_t i = 0; i < plan->n_warnings; i++)
    json_array_append_new(warnings, json_string(plan->warnings[i]));
  json_object_set_new(root, "warnings", warnings);
  json_t *peak = json_array();
  size_t n;
  const int64_t *at = hbm_analysis_buffers_at_peak_by_size(plan->analysis, &n);
  for (size_t k = 0; k < n; k++)
    json_array_append_new(peak, buffer_json(plan, at[k]));
  json_object_set_new(root, "buffers_at_peak", peak);
  if (plan->opt.values)
    json_object_set_new(root, "values", hbm__plan_values_json(plan));
  if (plan->oversized >= 0)
    json_object_set_new(root, "oversized_buffer", buffer_json(plan, plan->oversized));
  if (plan->remat_ran) {
    json_t *r = json_object();
    json_object_set_new(r, "peak_before_bytes", json_integer((json_int_t)s->peak_before_remat));
    json_object_set_new(r, "peak_after_bytes", json_integer(hbm__json_bytes(s->peak_bytes)));
    json_object_set_new(r, "extra_flops", json_integer((json_int_t)s->remat_extra_flops));
    json_object_set_new(r, "extra_bytes", json_integer(hbm__json_bytes(s->remat_extra_bytes)));
    json_object_set_new(r, "short_by_bytes", json_integer(hbm__json_bytes(plan->remat_short_by)));
    json_t *list = json_array();
    for (size_t i = 0; i < plan->n_remats; i++) {
      json_t *e = json_object();
      json_object_set_new(e, "instruction", json_string(plan->remats[i].instruction));
      json_object_set_new(e, "clone", json_string(plan->remats[i].clone));
      json_object_set_new(e, "bytes", json_integer(hbm__json_bytes(plan->remats[i].bytes)));
      json_object_set_new(e, "flops", json_integer((json_int_t)plan->remats[i].flops));
      json_array_append_new(list, e);
    }
    json_object_set_new(r, "rematerialized", list);
    json_object_set_new(root, "remat", r);
  }
  int rc = json_dumpf(root, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  fputc('\n', out);
  return rc == 0 ? HBM_OK : hbm__error(HBM_ERR_IO, "could not write the JSON report");
}
