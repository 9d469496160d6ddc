/* hlo_proto.c — XProf's Memory Viewer rebuilt from XLA's own buffer assignment in an HloProto
 * (what /host:metadata holds for each program, and what an .hlo_proto.pb file is). For each
 * memory colour: the heap-simulator trace of that colour is replayed (ALLOC adds the buffer,
 * FREE removes the canonical buffer when its last sharer is freed, SHARE_WITH revives a freed
 * canonical buffer), one step per event; the allocations with an indefinite lifetime
 * (parameters, outputs, constants, thread-local) are live at every step with their allocation's
 * size. The buffers at the first step reaching the maximum are XProf's "HLO Ops at Peak".
 * Colours are named as XProf names them; VMEM also shows a TPU program's largest scoped
 * allocation (hlo_vmem.c); each buffer carries its source line and stack (hlo_source.c).
 * The HloProto is unpacked with protobuf-c (proto/hlo.proto) after a walk of the bytes against
 * the same descriptors (pb_check_message) has checked the nesting depth and said where and
 * what was expected in a damaged file. */
#include "import/hlo_proto_text.h"
#include "import/hlo_shape.h"
#include "import/hlo_source.h"
#include "import/hlo_vmem.h"
#include "import/pb_wire.h"
#include "import/xprof.h"

#include <stdlib.h>
#include <string.h>

typedef struct lbuf {
  const HbmHlo__LogicalBufferProto *proto;
  const HbmHlo__BufferAllocationProto *alloc;
  size_t alloc_pos;                        /* its position in the assignment's list */
  const HbmHlo__HloInstructionProto *inst; /* NULL if the module does not define it */
  uint64_t offset;
  int64_t ref_count;
  struct lbuf *canonical; /* SHARE_WITH: the buffer whose memory this one uses */
  int64_t open;           /* index of its live interval in the space, -1 if not live */
  int64_t shown_as;       /* a buffer revived by SHARE_WITH: the interval it names, -1 none */
  const char *op, *shape, *label, *group, *source, *stack, *opcode;
  uint64_t unpadded;
} lbuf_t;

typedef struct hlo_ctx {
  xprof_import_t *im;
  const HbmHlo__HloProto *proto;
  const char *program;
  hbm_u64map_t inst_by_id; /* instruction id → index in insts */
  const HbmHlo__HloInstructionProto **insts;
  size_t n_insts;
  hbm_u64map_t lbuf_by_id; /* logical buffer id → index in lbufs */
  lbuf_t *lbufs;
  size_t n_lbufs;
  int64_t *trace_of_alloc; /* per allocation (by position): heap trace index, -1 none */
  uint64_t *alloc_base;    /* per allocation: where it starts when the colour's allocations
                              are laid end to end (so addresses span the total allocation) */
  hlo_source_t sources;    /* source lines and stacks from the module's stack-frame index */
  uint64_t scoped;         /* the largest scoped VMEM allocation (TPU), 0 none */
  const char *scoped_by;   /* the instruction that makes it */
} hlo_ctx_t;

/* XLA's memory colours, named as XProf's Memory Viewer names them (its "Memory Types"). */
static const char *color_name(int64_t color, char *buf, size_t cap) {
  static const char *const names[] = {"HBM", "VMEM", "Sflag", "CMEM", "SMEM", "Host", "SparseCore"};
  if (color >= 0 && color < (int64_t)HBM_ARRAY_LEN(names))
    return names[color];
  snprintf(buf, cap, "color %lld", (long long)color);
  return buf;
}

/* VMEM, where a TPU program's scoped allocations live (XProf shows the largest there). */
#define VMEM_COLOR 1

static HbmHlo__HloProto *unpack(xprof_import_t *im, const uint8_t *data, size_t len,
                                const uint8_t *file_start) {
  pb_reader_t r = pb_reader(data, len, file_start, im->file, "HloProto");
  if (!pb_check_message(r, &hbm_hlo__hlo_proto__descriptor, PB_MAX_DEPTH))
    return NULL; /* before protobuf-c, which recurses once per nesting level */
  HbmHlo__HloProto *hp = hbm_hlo__hlo_proto__unpack(NULL, len, data);
  if (!hp)
    hbm__error(HBM_ERR_PARSE,
               "%s: bytes %zu-%zu: an HloProto that protobuf-c could not unpack (expected "
               "xla.HloProto: hlo_module = 1, buffer_assignment = 3)",
               im->file, pb_offset(&r, data), pb_offset(&r, data + len));
  return hp;
}

/* ---- indexes: instructions by id, logical buffers by id ---- */

static bool index_instructions(hlo_ctx_t *c) {
  const HbmHlo__HloModuleProto *m = c->proto->hlo_module;
  size_t n = 0;
  for (size_t i = 0; m && i < m->n_computations; i++)
    n += m->computations[i]->n_instructions;
  c->insts = calloc(n + 1, sizeof *c->insts);
  if (!c->insts)
    return false;
  for (size_t i = 0; m && i < m->n_computations; i++)
    for (size_t k = 0; k < m->computations[i]->n_instructions; k++) {
      const HbmHlo__HloInstructionProto *inst = m->computations[i]->instructions[k];
      if (!hbm_u64map_put(&c->inst_by_id, (uint64_t)inst->id, c->n_insts))
        return false;
      c->insts[c->n_insts++] = inst;
    }
  return true;
}

/* Old protos name the instruction instead of giving its id. */
static const HbmHlo__HloInstructionProto *find_instruction(const hlo_ctx_t *c,
                                                           const HbmHlo__LogicalBufferProto *lb) {
  const HbmHlo__LogicalBufferProto__Location *at = lb->defined_at;
  if (!at)
    return NULL;
  uint64_t k;
  if (at->instruction_id && hbm_u64map_get(&c->inst_by_id, (uint64_t)at->instruction_id, &k))
    return c->insts[k];
  for (size_t i = 0; at->instruction_name && at->instruction_name[0] && i < c->n_insts; i++)
    if (!strcmp(c->insts[i]->name, at->instruction_name))
      return c->insts[i];
  if (hbm_u64map_get(&c->inst_by_id, (uint64_t)at->instruction_id, &k))
    return c->insts[k];
  return NULL;
}

static const char *intern_sb(hlo_ctx_t *c, hbm_strbuf_t *sb) {
  const char *s = hbm_intern(c->im->strings, hbm_strbuf_str(sb));
  hbm_strbuf_free(sb);
  return s;
}

/* The strings XProf shows for a logical buffer, interned once; false when memory ran out. */
static bool describe(hlo_ctx_t *c, lbuf_t *b) {
  const HbmHlo__LogicalBufferProto__Location *at = b->proto->defined_at;
  const HbmHlo__HloInstructionProto *inst = b->inst;
  const char *iname = inst ? inst->name : (at && at->instruction_name ? at->instruction_name : "?");
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_puts(&sb, iname);
  if (at && at->n_shape_index) {
    hbm_strbuf_puts(&sb, "{");
    for (size_t i = 0; i < at->n_shape_index; i++)
      hbm_strbuf_printf(&sb, "%s%lld", i ? "," : "", (long long)at->shape_index[i]);
    hbm_strbuf_puts(&sb, "}");
  }
  b->op = intern_sb(c, &sb);
  const HbmHlo__ShapeProto *shape =
      inst
          ? hlo_shape_at_index(inst->shape, at ? at->shape_index : NULL, at ? at->n_shape_index : 0)
          : NULL;
  hbm_strbuf_init(&sb);
  if (shape)
    hlo_shape_text(shape, &sb, 0);
  b->shape = shape ? intern_sb(c, &sb) : (hbm_strbuf_free(&sb), (const char *)NULL);
  b->unpadded = shape ? hlo_shape_unpadded_bytes(shape) : (uint64_t)b->proto->size;
  const HbmHlo__OpMetadata *md = inst ? inst->metadata : NULL;
  const char *op_name = md && md->op_name && md->op_name[0] ? md->op_name : NULL;
  b->group = op_name ? hbm_intern(c->im->strings, op_name) : NULL;
  b->opcode = inst && inst->opcode[0] ? hbm_intern(c->im->strings, inst->opcode) : NULL;
  hbm_strbuf_init(&sb);
  hbm_strbuf_printf(&sb, "%s: %s # %s", iname, b->shape ? b->shape : "?", op_name ? op_name : "");
  b->label = intern_sb(c, &sb);
  return hlo_source_of(&c->sources, md, &b->source, &b->stack);
}

/* XProf keeps only the logical buffers some allocation holds. */
static bool index_logical_buffers(hlo_ctx_t *c) {
  const HbmHlo__BufferAssignmentProto *ba = c->proto->buffer_assignment;
  hbm_u64map_t proto_by_id;
  hbm_u64map_init(&proto_by_id);
  size_t n_assigned = 0;
  for (size_t i = 0; i < ba->n_logical_buffers; i++)
    if (!hbm_u64map_put(&proto_by_id, (uint64_t)ba->logical_buffers[i]->id, i))
      return hbm_u64map_free(&proto_by_id), false;
  for (size_t a = 0; a < ba->n_buffer_allocations; a++)
    n_assigned += ba->buffer_allocations[a]->n_assigned;
  c->lbufs = calloc(n_assigned + 1, sizeof *c->lbufs);
  if (!c->lbufs)
    return hbm_u64map_free(&proto_by_id), false;
  for (size_t a = 0; a < ba->n_buffer_allocations; a++) {
    const HbmHlo__BufferAllocationProto *alloc = ba->buffer_allocations[a];
    for (size_t k = 0; k < alloc->n_assigned; k++) {
      uint64_t id = (uint64_t)alloc->assigned[k]->logical_buffer_id, at, existing;
      if (!hbm_u64map_get(&proto_by_id, id, &at))
        continue; /* XProf skips an assignment of an unknown buffer too */
      lbuf_t *b = &c->lbufs[c->n_lbufs];
      b->proto = ba->logical_buffers[at];
      b->alloc = alloc;
      b->alloc_pos = a;
      b->inst = find_instruction(c, b->proto);
      b->offset = (uint64_t)alloc->assigned[k]->offset;
      b->open = -1;
      if (!describe(c, b))
        return hbm_u64map_free(&proto_by_id), false;
      if (hbm_u64map_get(&c->lbuf_by_id, id, &existing))
        c->lbufs[existing] = *b; /* the last assignment wins, as in XProf's map */
      else if (!hbm_u64map_put(&c->lbuf_by_id, id, c->n_lbufs++))
        return hbm_u64map_free(&proto_by_id), false;
    }
  }
  hbm_u64map_free(&proto_by_id);
  return true;
}

static lbuf_t *lbuf(const hlo_ctx_t *c, int64_t id) {
  uint64_t k;
  return hbm_u64map_get(&c->lbuf_by_id, (uint64_t)id, &k) ? &c->lbufs[k] : NULL;
}

static bool is_indefinite(const HbmHlo__BufferAllocationProto *a) {
  return a->is_thread_local || a->is_entry_computation_parameter || a->is_constant ||
         a->maybe_live_out;
}

/* Thread-local allocations hold the scalars of computations run inside one thread (a
 * reduction's combiner): registers or stack, not device memory. XProf 2.24 leaves them out
 * of the Memory Viewer (docs/viewer.md), and so does hbm. */
static bool in_device_memory(const HbmHlo__BufferAllocationProto *a) { return !a->is_thread_local; }

/* Whether an allocation is shown in its colour's space: XLA places no whole-program buffer
 * in VMEM (XProf: "they never actually consume memory" there). */
static bool shown_in(const HbmHlo__BufferAllocationProto *a, int64_t color) {
  return a->color == color && in_device_memory(a) && !(color == VMEM_COLOR && is_indefinite(a));
}

/* XProf's category precedence: Parameter > Output > Thread-local > Constant > Temporary. */
static hbm_category_t category_of(const HbmHlo__BufferAllocationProto *a) {
  if (a->is_entry_computation_parameter)
    return HBM_CAT_PARAMETER;
  if (a->maybe_live_out)
    return HBM_CAT_OUTPUT;
  if (a->is_thread_local)
    return HBM_CAT_THREAD_LOCAL;
  if (a->is_constant)
    return HBM_CAT_CONSTANT;
  return HBM_CAT_TEMPORARY;
}

/* ---- which heap-simulator trace belongs to a colour (XProf's two rules) ---- */

static bool map_traces_to_allocations(hlo_ctx_t *c) {
  const HbmHlo__BufferAssignmentProto *ba = c->proto->buffer_assignment;
  c->trace_of_alloc = malloc((ba->n_buffer_allocations + 1) * sizeof *c->trace_of_alloc);
  c->alloc_base = calloc(ba->n_buffer_allocations + 1, sizeof *c->alloc_base);
  if (!c->trace_of_alloc || !c->alloc_base)
    return false;
  for (size_t i = 0; i < ba->n_buffer_allocations; i++)
    c->trace_of_alloc[i] = -1;
  /* The trace's own buffer_allocation_index is not trusted: the allocation of its first
   * event's buffer is. */
  for (size_t t = 0; t < ba->n_heap_simulator_traces; t++) {
    const HbmHlo__HeapSimulatorTrace *tr = ba->heap_simulator_traces[t];
    const lbuf_t *b = tr->n_events ? lbuf(c, tr->events[0]->buffer_id) : NULL;
    if (b)
      c->trace_of_alloc[b->alloc_pos] = (int64_t)t;
  }
  return true;
}

static int64_t trace_for_color(const hlo_ctx_t *c, int64_t color) {
  const HbmHlo__BufferAssignmentProto *ba = c->proto->buffer_assignment;
  for (size_t i = 0; i < ba->n_buffer_allocations; i++) {
    const HbmHlo__BufferAllocationProto *a = ba->buffer_allocations[i];
    if (a->color == color && !is_indefinite(a) && c->trace_of_alloc[i] >= 0)
      return c->trace_of_alloc[i];
  }
  int64_t best = -1;
  size_t best_count = 0;
  for (size_t t = 0; t < ba->n_heap_simulator_traces; t++) {
    const HbmHlo__HeapSimulatorTrace *tr = ba->heap_simulator_traces[t];
    size_t count = 0;
    for (size_t e = 0; e < tr->n_events; e++) {
      const lbuf_t *b = lbuf(c, tr->events[e]->buffer_id);
      count += b && b->proto->color == color;
    }
    if (count > best_count)
      best = (int64_t)t, best_count = count;
  }
  return best;
}

/* ---- the replay ---- */

/* The heap while events are replayed: exact, whatever a hostile file's sizes (each below 2^63,
 * fewer than 2^64 of them: a 128-bit sum never wraps); the peak saturates at HBM_BYTES_MAX
 * only when it is read out. */
typedef unsigned __int128 heap_bytes_t;

static bool open_interval(const hlo_ctx_t *c, xprof_space_t *s, lbuf_t *b, int64_t step,
                          uint64_t size, hbm_category_t category, uint32_t flags) {
  xprof_buffer_t *x = xprof_add_buffer(s);
  if (!x)
    return false;
  x->op = b->op, x->shape = b->shape, x->opcode = b->opcode, x->label = b->label;
  x->group = b->group, x->source = b->source, x->stack = b->stack;
  x->size = size;
  x->unpadded = b->unpadded;
  x->offset = hbm__end_of(b->alloc ? c->alloc_base[b->alloc_pos] : 0, b->offset);
  x->start = step;
  x->end = -1;
  x->category = category;
  x->flags = flags;
  b->open = (int64_t)s->n_buffers - 1;
  return true;
}

/* Allocations live for the whole program, each shown by its largest logical buffer. */
static bool add_indefinite(hlo_ctx_t *c, xprof_space_t *s, int64_t color, uint64_t *total) {
  const HbmHlo__BufferAssignmentProto *ba = c->proto->buffer_assignment;
  for (size_t i = 0; i < ba->n_buffer_allocations; i++) {
    const HbmHlo__BufferAllocationProto *a = ba->buffer_allocations[i];
    if (!shown_in(a, color) || !is_indefinite(a))
      continue;
    lbuf_t *best = NULL;
    for (size_t k = 0; k < a->n_assigned; k++) {
      lbuf_t *b = lbuf(c, a->assigned[k]->logical_buffer_id);
      if (b && b->proto->size > (best ? best->proto->size : 0))
        best = b;
    }
    uint64_t size = a->size > 0 ? (uint64_t)a->size : 0; /* a corrupt file's negative size */
    *total = hbm__bytes_add(*total, size);
    lbuf_t none = {0};
    char name[48];
    if (!best) {
      snprintf(name, sizeof name, "allocation %lld", (long long)a->index);
      none.op = none.label = hbm_intern(c->im->strings, name);
      none.unpadded = size;
      none.alloc = a, none.alloc_pos = i;
      best = &none;
    }
    uint32_t flags = a->maybe_live_out ? HBM_BUF_LIVE_OUT : 0;
    if (!open_interval(c, s, best, 0, size, category_of(a), flags))
      return false;
    best->open = -1;
  }
  return true;
}

static void close_interval(xprof_space_t *s, lbuf_t *b, int64_t step, heap_bytes_t *heap) {
  if (b->open < 0)
    return;
  s->buffers[b->open].end = step;
  *heap -= s->buffers[b->open].size;
  b->open = -1;
}

/* Memory `holder` (a canonical buffer) comes to life, shown as buffer b: the one allocated,
 * or the one whose SHARE_WITH revived a freed canonical buffer (as XProf 2.24 names it). */
static uint64_t size_of(const lbuf_t *b) {
  return b->proto->size > 0 ? (uint64_t)b->proto->size : 0; /* a corrupt file's negative size */
}

static bool increase(const hlo_ctx_t *c, xprof_space_t *s, lbuf_t *b, lbuf_t *holder, int64_t step,
                     heap_bytes_t *heap) {
  if (holder->open >= 0)
    return true;
  uint64_t size = size_of(b);
  *heap += size;
  if (!open_interval(c, s, b, step, size, category_of(b->alloc), 0))
    return false;
  holder->open = b->open;
  if (b != holder)
    b->shown_as = b->open, b->open = -1;
  return true;
}

static lbuf_t *root_of(lbuf_t *b) {
  for (int guard = 0; b->canonical && guard < 1 << 20; guard++)
    b = b->canonical;
  return b;
}

static void problem(hlo_ctx_t *c, size_t event, const char *what) {
  hbm__error(HBM_ERR_PARSE, "%s: program %s: heap-simulator event %zu: %s", c->im->file, c->program,
             event, what);
  xprof_note_problem(c->im);
}

static bool replay_event(hlo_ctx_t *c, xprof_space_t *s, const HbmHlo__HeapSimulatorTrace__Event *e,
                         int64_t step, heap_bytes_t *heap) {
  lbuf_t *b = lbuf(c, e->buffer_id);
  if (!b)
    return true;
  switch (e->kind) {
  case HBM_HLO__HEAP_SIMULATOR_TRACE__EVENT__KIND__ALLOC:
    root_of(b)->ref_count++;
    return increase(c, s, b, root_of(b), step, heap);
  case HBM_HLO__HEAP_SIMULATOR_TRACE__EVENT__KIND__FREE: {
    lbuf_t *root = root_of(b);
    if (--root->ref_count < 0)
      problem(c, (size_t)step,
              "a buffer freed more often than allocated (XProf refuses this "
              "program; hbm goes on)");
    else if (root->ref_count == 0)
      close_interval(s, root, step, heap);
    if (b->shown_as >= 0) /* its own value ends here, whoever still holds the bytes */
      s->buffers[b->shown_as].span_end = step;
    return true;
  }
  case HBM_HLO__HEAP_SIMULATOR_TRACE__EVENT__KIND__SHARE_WITH: {
    lbuf_t *canon = lbuf(c, e->share_with_canonical_id);
    if (!canon || root_of(canon) == b)
      return true; /* sharing with itself would make a cycle */
    b->canonical = canon;
    if (++root_of(canon)->ref_count == 1) /* the canonical buffer comes back to life */
      return increase(c, s, b, root_of(canon), step, heap);
    return true;
  }
  default:
    problem(c, (size_t)step, "an event kind other than ALLOC, FREE, SHARE_WITH");
    return true;
  }
}

static uint64_t alloc_size(const HbmHlo__BufferAllocationProto *a) {
  return a->size > 0 ? (uint64_t)a->size : 0;
}

/* Whether an allocation's buffers are laid out by a heap-simulator trace: XProf's
 * bufferBlocks lay these allocations end to end and give each buffer its allocation's start
 * plus its offset in it. */
static bool heap_simulated(const hlo_ctx_t *c, size_t i) {
  const HbmHlo__BufferAllocationProto *a = c->proto->buffer_assignment->buffer_allocations[i];
  return !is_indefinite(a) && c->trace_of_alloc[i] >= 0;
}

/* The colour's allocations laid end to end (each buffer's address is its allocation's start
 * plus its offset in it): first the heap-simulated ones, in the assignment's order, so that a
 * temporary's address is XProf's offset (bufferBlocks; with the one temp allocation a colour
 * has, its offset in the temp heap), then the others. Returns their total, XProf's "total
 * buffer allocation" (XProf 2.24 leaves the thread-local ones out of it, as hbm does). */
static uint64_t lay_out_allocations(hlo_ctx_t *c, int64_t color) {
  const HbmHlo__BufferAssignmentProto *ba = c->proto->buffer_assignment;
  uint64_t end = 0;
  for (int simulated = 1; simulated >= 0; simulated--)
    for (size_t i = 0; i < ba->n_buffer_allocations; i++) {
      const HbmHlo__BufferAllocationProto *a = ba->buffer_allocations[i];
      if (!shown_in(a, color) || heap_simulated(c, i) != (bool)simulated)
        continue;
      c->alloc_base[i] = end;
      end = hbm__bytes_add(end, alloc_size(a));
    }
  return end;
}

static bool replay_color(hlo_ctx_t *c, int64_t color) {
  char buf[32];
  xprof_space_t *s =
      xprof_add_space(c->im, color_name(color, buf, sizeof buf), c->program, (int)color);
  if (!s)
    return false;
  for (size_t i = 0; i < c->n_lbufs; i++)
    c->lbufs[i].ref_count = 0, c->lbufs[i].canonical = NULL, c->lbufs[i].open = -1,
    c->lbufs[i].shown_as = -1;
  int64_t t = trace_for_color(c, color);
  const HbmHlo__BufferAssignmentProto *ba = c->proto->buffer_assignment;
  const HbmHlo__HeapSimulatorTrace *tr = t >= 0 ? ba->heap_simulator_traces[t] : NULL;
  s->reserved = lay_out_allocations(c, color);
  uint64_t indefinite = 0;
  if (!add_indefinite(c, s, color, &indefinite))
    return false;
  size_t n = tr ? tr->n_events : 0;
  s->step_labels = calloc(n + 1, sizeof *s->step_labels);
  if (!s->step_labels)
    return false;
  heap_bytes_t heap = 0, peak = 0;
  for (size_t e = 0; e < n; e++) {
    const char *name = tr->events[e]->instruction_name;
    s->step_labels[e] = hbm_intern(c->im->strings, name ? name : "");
    if (!replay_event(c, s, tr->events[e], (int64_t)e, &heap))
      return false;
    peak = heap > peak ? heap : peak;
  }
  if (!n) /* a label like an instruction's: the report and the page put it in brackets */
    s->step_labels[0] = hbm_intern(c->im->strings, "no heap-simulator trace");
  s->n_steps = n ? (int64_t)n : 1;
  s->peak = hbm__bytes_add(peak < HBM_BYTES_MAX ? (uint64_t)peak : HBM_BYTES_MAX, indefinite);
  return color != VMEM_COLOR || !c->scoped || xprof_add_scoped(c->im, s, c->scoped, c->scoped_by);
}

/* Colours of the allocations, in the order they first appear. */
static size_t colors_of(const hlo_ctx_t *c, int64_t *out, size_t cap) {
  const HbmHlo__BufferAssignmentProto *ba = c->proto->buffer_assignment;
  size_t n = 0;
  if (c->scoped) /* VMEM is shown for its scoped allocations even with no buffer there */
    out[n++] = VMEM_COLOR;
  for (size_t i = 0; i < ba->n_buffer_allocations; i++) {
    int64_t color = ba->buffer_allocations[i]->color;
    bool seen = false;
    for (size_t k = 0; k < n && !seen; k++)
      seen = out[k] == color;
    if (!seen && n < cap)
      out[n++] = color;
  }
  /* HBM first, then the others in number order. */
  for (size_t i = 1; i < n; i++)
    for (size_t k = i; k > 0 && out[k] < out[k - 1]; k--) {
      int64_t tmp = out[k];
      out[k] = out[k - 1], out[k - 1] = tmp;
    }
  return n;
}

/* A stack_frame_id past the module's stack-frame index (or frames calling each other in a
 * loop): those buffers are shown without a source line, and the profile says so. */
static void warn_bad_frames(hlo_ctx_t *c) {
  if (!c->sources.n_bad)
    return;
  hbm__error(HBM_ERR_PARSE,
             "%s: program %s: %zu buffers' instructions have a stack_frame_id that points "
             "nowhere in the module's stack-frame index of %zu frames (first: %lld) or frames "
             "that loop: shown without a source line",
             c->im->file, c->program, c->sources.n_bad, c->sources.n_frames,
             (long long)c->sources.first_bad);
  xprof_note_problem(c->im);
}

static hbm_status_t convert(hlo_ctx_t *c) {
  if (!c->proto->buffer_assignment) {
    hbm__error(HBM_ERR_PARSE,
               "%s: program %s: the HloProto has no buffer assignment (XLA "
               "writes one for compiled programs; nothing to show)",
               c->im->file, c->program);
    return HBM_ERR_PARSE;
  }
  if (!hlo_source_init(&c->sources, c->proto->hlo_module, c->im->strings) ||
      !index_instructions(c) || !index_logical_buffers(c) || !map_traces_to_allocations(c))
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: program %s: out of memory", c->im->file,
                      c->program);
  warn_bad_frames(c);
  c->scoped = hlo_max_scoped_bytes(c->proto->hlo_module, VMEM_COLOR, &c->scoped_by);
  int64_t colors[16];
  size_t n = colors_of(c, colors, HBM_ARRAY_LEN(colors));
  for (size_t i = 0; i < n; i++)
    if (!replay_color(c, colors[i]))
      return hbm__error(HBM_ERR_HOST_MEMORY, "%s: program %s: out of memory", c->im->file,
                        c->program);
  c->im->n_programs++;
  return HBM_OK;
}

/* The devices the program runs on, as meta "devices:<program>" = "0,1,2,3" (the many-device
 * summary of `hbm report`). */
static void record_devices(xprof_import_t *im, const HbmHlo__HloProto *hp, const char *program) {
  const HbmHlo__DeviceAssignmentProto *da =
      hp->hlo_module ? hp->hlo_module->device_assignment : NULL;
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  for (size_t i = 0; da && i < da->n_computation_devices; i++)
    for (size_t k = 0; k < da->computation_devices[i]->n_replica_device_ids; k++)
      hbm_strbuf_printf(&sb, "%s%lld", sb.len ? "," : "",
                        (long long)da->computation_devices[i]->replica_device_ids[k]);
  char key[512];
  snprintf(key, sizeof key, "devices:%s", program);
  if (sb.len && !sb.failed)
    xprof_add_meta(im, key, hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
}

hbm_status_t xprof_read_hlo_proto(xprof_import_t *im, const uint8_t *data, size_t len,
                                  const uint8_t *file_start, const char *program) {
  HbmHlo__HloProto *hp = unpack(im, data, len, file_start);
  if (!hp)
    return HBM_ERR_PARSE;
  hlo_ctx_t c = {.im = im, .proto = hp};
  const char *module = hp->hlo_module && hp->hlo_module->name[0] ? hp->hlo_module->name : NULL;
  c.program = hbm_intern(im->strings, program ? program : module ? module : "program");
  hbm_u64map_init(&c.inst_by_id);
  hbm_u64map_init(&c.lbuf_by_id);
  hbm_status_t st = c.program ? convert(&c) : HBM_ERR_HOST_MEMORY;
  if (st == HBM_OK) /* hbm's own plan of the module, beside XLA's */
    hlo_proto_plan(im, hp, c.program);
  if (st == HBM_OK)
    record_devices(im, hp, c.program);
  hbm_u64map_free(&c.inst_by_id);
  hbm_u64map_free(&c.lbuf_by_id);
  free(c.insts);
  free(c.lbufs);
  free(c.trace_of_alloc);
  free(c.alloc_base);
  hlo_source_free(&c.sources);
  hbm_hlo__hlo_proto__free_unpacked(hp, NULL);
  return st;
}
