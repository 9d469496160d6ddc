/* xplane_fixtures.h — builds small XProf files in memory with protobuf-c, from the code that
 * protoc-c generates for proto/xplane.proto and proto/hlo.proto: HloProtos with a hand-written
 * buffer assignment and heap-simulator trace, and XSpaces with a /host:metadata plane and
 * allocator events. Used by tests/test_import_xplane.c, bench/bench_xplane.c and
 * fuzz/fuzz_xplane.c. Everything is allocated from an arena freed at once; capacities are
 * fixed when each message is created. */
#ifndef HBM_XPLANE_FIXTURES_H
#define HBM_XPLANE_FIXTURES_H

#include "hlo.pb-c.h"
#include "xplane.pb-c.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct xf_arena {
  void **ptrs;
  size_t n, cap;
} xf_arena_t;

static inline void *xf_new(xf_arena_t *a, size_t size) {
  if (a->n == a->cap) {
    a->cap = a->cap ? a->cap * 2 : 256;
    a->ptrs = realloc(a->ptrs, a->cap * sizeof *a->ptrs);
    if (!a->ptrs)
      abort();
  }
  void *p = calloc(1, size ? size : 1);
  if (!p)
    abort();
  return a->ptrs[a->n++] = p;
}

static inline void xf_free(xf_arena_t *a) {
  for (size_t i = 0; i < a->n; i++)
    free(a->ptrs[i]);
  free(a->ptrs);
  memset(a, 0, sizeof *a);
}

static inline char *xf_str(xf_arena_t *a, const char *s) {
  char *c = xf_new(a, strlen(s) + 1);
  memcpy(c, s, strlen(s));
  return c;
}

#define XF_NEW_ARRAY(a, type, n) ((type *)xf_new((a), sizeof(type) * (size_t)(n)))

/* ---- HloProto ---- */

typedef struct xf_module {
  xf_arena_t *a;
  HbmHlo__HloProto *proto;
  HbmHlo__HloComputationProto *comp;
  HbmHlo__BufferAssignmentProto *ba;
  HbmHlo__HeapSimulatorTrace *trace;
  size_t cap;
} xf_module_t;

static inline void xf_module_init(xf_module_t *m, xf_arena_t *a, const char *name, size_t cap) {
  m->a = a, m->cap = cap;
  m->proto = xf_new(a, sizeof *m->proto);
  hbm_hlo__hlo_proto__init(m->proto);
  HbmHlo__HloModuleProto *mod = xf_new(a, sizeof *mod);
  hbm_hlo__hlo_module_proto__init(mod);
  mod->name = xf_str(a, name);
  mod->entry_computation_name = xf_str(a, "main");
  mod->computations = XF_NEW_ARRAY(a, HbmHlo__HloComputationProto *, 1);
  m->comp = xf_new(a, sizeof *m->comp);
  hbm_hlo__hlo_computation_proto__init(m->comp);
  m->comp->name = xf_str(a, "main");
  m->comp->instructions = XF_NEW_ARRAY(a, HbmHlo__HloInstructionProto *, cap);
  mod->computations[mod->n_computations++] = m->comp;
  m->proto->hlo_module = mod;
  m->ba = xf_new(a, sizeof *m->ba);
  hbm_hlo__buffer_assignment_proto__init(m->ba);
  m->ba->logical_buffers = XF_NEW_ARRAY(a, HbmHlo__LogicalBufferProto *, cap);
  m->ba->buffer_allocations = XF_NEW_ARRAY(a, HbmHlo__BufferAllocationProto *, cap);
  m->ba->heap_simulator_traces = XF_NEW_ARRAY(a, HbmHlo__HeapSimulatorTrace *, 1);
  m->trace = xf_new(a, sizeof *m->trace);
  hbm_hlo__heap_simulator_trace__init(m->trace);
  m->trace->events = XF_NEW_ARRAY(a, HbmHlo__HeapSimulatorTrace__Event *, cap * 3);
  m->ba->heap_simulator_traces[m->ba->n_heap_simulator_traces++] = m->trace;
  m->proto->buffer_assignment = m->ba;
}

/* An instruction of shape type[dims] with the default layout; returns its id. */
static inline int64_t xf_instruction(xf_module_t *m, const char *name, const char *opcode,
                                     int element_type, const int64_t *dims, size_t n_dims,
                                     const char *op_name) {
  xf_arena_t *a = m->a;
  HbmHlo__HloInstructionProto *in = xf_new(a, sizeof *in);
  hbm_hlo__hlo_instruction_proto__init(in);
  in->name = xf_str(a, name);
  in->opcode = xf_str(a, opcode);
  in->id = (int64_t)m->comp->n_instructions + 100;
  HbmHlo__ShapeProto *s = xf_new(a, sizeof *s);
  hbm_hlo__shape_proto__init(s);
  s->element_type = element_type;
  s->dimensions = XF_NEW_ARRAY(a, int64_t, n_dims);
  if (n_dims)
    memcpy(s->dimensions, dims, n_dims * sizeof *dims);
  s->n_dimensions = n_dims;
  HbmHlo__LayoutProto *l = xf_new(a, sizeof *l);
  hbm_hlo__layout_proto__init(l);
  l->minor_to_major = XF_NEW_ARRAY(a, int64_t, n_dims);
  for (size_t i = 0; i < n_dims; i++)
    l->minor_to_major[i] = (int64_t)(n_dims - 1 - i);
  l->n_minor_to_major = n_dims;
  s->layout = l;
  in->shape = s;
  if (op_name) {
    HbmHlo__OpMetadata *md = xf_new(a, sizeof *md);
    hbm_hlo__op_metadata__init(md);
    md->op_name = xf_str(a, op_name);
    md->source_file = xf_str(a, "model.py");
    md->source_line = 7;
    in->metadata = md;
  }
  m->comp->instructions[m->comp->n_instructions++] = in;
  return in->id;
}

static inline void xf_logical_buffer(xf_module_t *m, int64_t id, int64_t inst_id, int64_t size,
                                     int64_t color) {
  HbmHlo__LogicalBufferProto *lb = xf_new(m->a, sizeof *lb);
  hbm_hlo__logical_buffer_proto__init(lb);
  lb->id = id, lb->size = size, lb->color = color;
  lb->defined_at = xf_new(m->a, sizeof *lb->defined_at);
  hbm_hlo__logical_buffer_proto__location__init(lb->defined_at);
  lb->defined_at->instruction_id = inst_id;
  m->ba->logical_buffers[m->ba->n_logical_buffers++] = lb;
}

enum { XF_PARAM = 1, XF_LIVE_OUT = 2, XF_THREAD_LOCAL = 4, XF_CONSTANT = 8 };

/* An allocation holding the logical buffers ids[0..n) at offsets 0, size each. */
static inline HbmHlo__BufferAllocationProto *xf_allocation(xf_module_t *m, int64_t size,
                                                           int64_t color, unsigned flags,
                                                           const int64_t *ids,
                                                           const int64_t *offsets, size_t n) {
  HbmHlo__BufferAllocationProto *al = xf_new(m->a, sizeof *al);
  hbm_hlo__buffer_allocation_proto__init(al);
  al->index = (int64_t)m->ba->n_buffer_allocations;
  al->size = size, al->color = color;
  al->is_entry_computation_parameter = (flags & XF_PARAM) != 0;
  al->maybe_live_out = (flags & XF_LIVE_OUT) != 0;
  al->is_thread_local = (flags & XF_THREAD_LOCAL) != 0;
  al->is_constant = (flags & XF_CONSTANT) != 0;
  al->assigned = XF_NEW_ARRAY(m->a, HbmHlo__BufferAllocationProto__Assigned *, n);
  for (size_t i = 0; i < n; i++) {
    HbmHlo__BufferAllocationProto__Assigned *as = xf_new(m->a, sizeof *as);
    hbm_hlo__buffer_allocation_proto__assigned__init(as);
    as->logical_buffer_id = ids[i];
    as->offset = offsets ? offsets[i] : 0;
    al->assigned[al->n_assigned++] = as;
  }
  m->ba->buffer_allocations[m->ba->n_buffer_allocations++] = al;
  return al;
}

/* Starts another heap-simulator trace: the events that follow go to it (at most `cap`). */
static inline void xf_new_trace(xf_module_t *m, size_t cap) {
  HbmHlo__HeapSimulatorTrace **grown =
      XF_NEW_ARRAY(m->a, HbmHlo__HeapSimulatorTrace *, m->ba->n_heap_simulator_traces + 1);
  memcpy(grown, m->ba->heap_simulator_traces, m->ba->n_heap_simulator_traces * sizeof *grown);
  m->ba->heap_simulator_traces = grown;
  m->trace = xf_new(m->a, sizeof *m->trace);
  hbm_hlo__heap_simulator_trace__init(m->trace);
  m->trace->events = XF_NEW_ARRAY(m->a, HbmHlo__HeapSimulatorTrace__Event *, cap);
  m->ba->heap_simulator_traces[m->ba->n_heap_simulator_traces++] = m->trace;
}

static inline void xf_event(xf_module_t *m, int kind, int64_t buffer_id, const char *inst,
                            int64_t canonical) {
  HbmHlo__HeapSimulatorTrace__Event *e = xf_new(m->a, sizeof *e);
  hbm_hlo__heap_simulator_trace__event__init(e);
  e->kind = (HbmHlo__HeapSimulatorTrace__Event__Kind)kind;
  e->buffer_id = buffer_id;
  e->instruction_name = xf_str(m->a, inst);
  e->share_with_canonical_id = canonical;
  m->trace->events[m->trace->n_events++] = e;
}

static inline uint8_t *xf_pack_hlo(const xf_module_t *m, size_t *len) {
  *len = hbm_hlo__hlo_proto__get_packed_size(m->proto);
  uint8_t *out = malloc(*len ? *len : 1);
  if (out)
    hbm_hlo__hlo_proto__pack(m->proto, out);
  return out;
}

/* An HloProto whose one instruction's shape nests `tuples` tuple_shapes in one another (the
 * audit's crash: protobuf-c recursed once per level). Written by hand, from the innermost
 * shape outwards, because protobuf-c's pack recurses as deep as its unpack. Levels count from
 * the HloProto (0): hlo_module 1, computation 2, instruction 3, its shape 4, the k-th nested
 * tuple shape 4 + k. at_level (NULL, or tuples + 5 entries): [L] = the byte offset of the tag
 * of the field that opens level L. */
static inline void xf_wrap(uint8_t *buf, size_t *start, size_t end, uint32_t field) {
  uint8_t head[11];
  size_t n = 0;
  head[n++] = (uint8_t)(field << 3 | 2); /* length-delimited; fields here are < 16 */
  uint64_t len = end - *start;
  do {
    head[n] = (uint8_t)(len & 0x7f);
    len >>= 7;
    head[n++] |= len ? 0x80 : 0;
  } while (len);
  *start -= n;
  memcpy(buf + *start, head, n);
}

static inline uint8_t *xf_deep_hlo_proto(int tuples, size_t *len, size_t *at_level) {
  size_t cap = 16 * (size_t)tuples + 64, start = cap, end = cap;
  uint8_t *buf = malloc(cap);
  size_t *from_end = calloc((size_t)tuples + 5, sizeof *from_end);
  if (!buf || !from_end)
    abort();
  for (int level = tuples + 4; level >= 5; level--) { /* ShapeProto.tuple_shapes = 4 */
    xf_wrap(buf, &start, end, 4);
    from_end[level] = end - start;
  }
  xf_wrap(buf, &start, end, 3); /* HloInstructionProto.shape = 3, after its name (1) */
  from_end[4] = end - start;
  memcpy(buf + (start -= 3), "\x0a\x01x", 3);
  const uint32_t outer[] = {1, 3, 2}; /* hlo_module, module.computations, .instructions */
  for (int level = 3; level >= 1; level--) {
    xf_wrap(buf, &start, end, outer[level - 1]);
    from_end[level] = end - start;
  }
  *len = end - start;
  for (int level = 1; at_level && level <= tuples + 4; level++)
    at_level[level] = *len - from_end[level];
  memmove(buf, buf + start, *len);
  free(from_end);
  return buf;
}

/* ---- XSpace ---- */

static inline HbmXplane__XSpace *xf_space(xf_arena_t *a, size_t cap_planes) {
  HbmXplane__XSpace *s = xf_new(a, sizeof *s);
  hbm_xplane__xspace__init(s);
  s->planes = XF_NEW_ARRAY(a, HbmXplane__XPlane *, cap_planes);
  return s;
}

static inline HbmXplane__XPlane *xf_plane(xf_arena_t *a, HbmXplane__XSpace *s, const char *name,
                                          size_t cap_lines, size_t cap_meta) {
  HbmXplane__XPlane *p = xf_new(a, sizeof *p);
  hbm_xplane__xplane__init(p);
  p->id = (int64_t)s->n_planes;
  p->name = xf_str(a, name);
  p->lines = XF_NEW_ARRAY(a, HbmXplane__XLine *, cap_lines);
  p->event_metadata = XF_NEW_ARRAY(a, HbmXplane__XPlane__EventMetadataEntry *, cap_meta);
  p->stat_metadata = XF_NEW_ARRAY(a, HbmXplane__XPlane__StatMetadataEntry *, cap_meta);
  s->planes[s->n_planes++] = p;
  return p;
}

static inline void xf_stat_meta(xf_arena_t *a, HbmXplane__XPlane *p, int64_t id, const char *name) {
  HbmXplane__XPlane__StatMetadataEntry *e = xf_new(a, sizeof *e);
  hbm_xplane__xplane__stat_metadata_entry__init(e);
  e->key = id;
  e->value = xf_new(a, sizeof *e->value);
  hbm_xplane__xstat_metadata__init(e->value);
  e->value->id = id;
  e->value->name = xf_str(a, name);
  p->stat_metadata[p->n_stat_metadata++] = e;
}

static inline HbmXplane__XEventMetadata *
xf_event_meta(xf_arena_t *a, HbmXplane__XPlane *p, int64_t id, const char *name, size_t cap_stats) {
  HbmXplane__XPlane__EventMetadataEntry *e = xf_new(a, sizeof *e);
  hbm_xplane__xplane__event_metadata_entry__init(e);
  e->key = id;
  e->value = xf_new(a, sizeof *e->value);
  hbm_xplane__xevent_metadata__init(e->value);
  e->value->id = id;
  e->value->name = xf_str(a, name);
  e->value->stats = XF_NEW_ARRAY(a, HbmXplane__XStat *, cap_stats);
  p->event_metadata[p->n_event_metadata++] = e;
  return e->value;
}

static inline HbmXplane__XStat *xf_stat(xf_arena_t *a, int64_t id) {
  HbmXplane__XStat *st = xf_new(a, sizeof *st);
  hbm_xplane__xstat__init(st);
  st->metadata_id = id;
  return st;
}

static inline void xf_meta_bytes(xf_arena_t *a, HbmXplane__XEventMetadata *m, int64_t id,
                                 const uint8_t *data, size_t len) {
  HbmXplane__XStat *st = xf_stat(a, id);
  st->value_case = HBM_XPLANE__XSTAT__VALUE_BYTES_VALUE;
  st->bytes_value.data = xf_new(a, len);
  memcpy(st->bytes_value.data, data, len);
  st->bytes_value.len = len;
  m->stats[m->n_stats++] = st;
}

static inline HbmXplane__XLine *xf_line(xf_arena_t *a, HbmXplane__XPlane *p, int64_t ts_ns,
                                        size_t cap_events) {
  HbmXplane__XLine *l = xf_new(a, sizeof *l);
  hbm_xplane__xline__init(l);
  l->id = (int64_t)p->n_lines;
  l->name = xf_str(a, "line");
  l->timestamp_ns = ts_ns;
  l->events = XF_NEW_ARRAY(a, HbmXplane__XEvent *, cap_events);
  p->lines[p->n_lines++] = l;
  return l;
}

static inline HbmXplane__XEvent *xf_xevent(xf_arena_t *a, HbmXplane__XLine *l, int64_t meta_id,
                                           int64_t offset_ps, size_t cap_stats) {
  HbmXplane__XEvent *e = xf_new(a, sizeof *e);
  hbm_xplane__xevent__init(e);
  e->metadata_id = meta_id;
  e->data_case = HBM_XPLANE__XEVENT__DATA_OFFSET_PS;
  e->offset_ps = offset_ps;
  e->stats = XF_NEW_ARRAY(a, HbmXplane__XStat *, cap_stats);
  l->events[l->n_events++] = e;
  return e;
}

static inline void xf_event_u64(xf_arena_t *a, HbmXplane__XEvent *e, int64_t id, uint64_t v) {
  HbmXplane__XStat *st = xf_stat(a, id);
  st->value_case = HBM_XPLANE__XSTAT__VALUE_UINT64_VALUE;
  st->uint64_value = v;
  e->stats[e->n_stats++] = st;
}

static inline void xf_event_i64(xf_arena_t *a, HbmXplane__XEvent *e, int64_t id, int64_t v) {
  HbmXplane__XStat *st = xf_stat(a, id);
  st->value_case = HBM_XPLANE__XSTAT__VALUE_INT64_VALUE;
  st->int64_value = v;
  e->stats[e->n_stats++] = st;
}

static inline void xf_event_str(xf_arena_t *a, HbmXplane__XEvent *e, int64_t id, const char *v) {
  HbmXplane__XStat *st = xf_stat(a, id);
  st->value_case = HBM_XPLANE__XSTAT__VALUE_STR_VALUE;
  st->str_value = xf_str(a, v);
  e->stats[e->n_stats++] = st;
}

static inline uint8_t *xf_pack_space(const HbmXplane__XSpace *s, size_t *len) {
  *len = hbm_xplane__xspace__get_packed_size(s);
  uint8_t *out = malloc(*len ? *len : 1);
  if (out)
    hbm_xplane__xspace__pack(s, out);
  return out;
}

#endif /* HBM_XPLANE_FIXTURES_H */
