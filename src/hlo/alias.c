/* alias.c — which instructions define buffers and which alias them, over the flattened
 * schedule. It plays the part of XLA's HloDataflowAnalysis + HloAliasAnalysis + the copies
 * CopyInsertion would add, in one pass over the program:
 *
 *  - The schedule is the entry computation's printed order with the computations of while,
 *    conditional and call expanded at their call site (the control-flow instruction's own
 *    step comes first, where it takes its operands). Fusion and async bodies are opaque;
 *    to_apply reducers and the like are thread-local.
 *  - Every instruction instance maps each subshape of its shape (pre-order) to a value.
 *    bitcast, get-tuple-element, tuple elements, parameters of called computations, call
 *    results, async/collective start-done pairs forward values; everything else defines them.
 *  - Values that must share memory are joined (union-find): a while's result, its body and
 *    condition parameters, the loop's initial value when nothing reads it later, the body's
 *    new value when the old one is dead by then; a conditional's result and each branch's
 *    root; in-place updates (dynamic-update-slice, scatter, in-place fusions,
 *    output_to_operand_aliasing) when the operand dies there; outputs aliased to donated
 *    parameters (input_output_alias). Where a join would be wrong (the operand is still
 *    read later, or is a read-only parameter or constant) the value keeps its own buffer,
 *    as the copy XLA would insert.
 *  - Element-wise ops may write over an operand that dies at them (XLA's ShareWith):
 *    recorded as share candidates for liveness.c, which trims the operand's live range.
 */
#include "alias_internal.h"

#include <stdlib.h>
#include <string.h>

#define LIVE_OUT_STEP HLO_LIVE_OUT_STEP

/* ---- small helpers ---- */

static bool pool_reserve(hlo_dataflow_t *df, size_t extra) {
  if (df->pool_len + extra <= df->pool_cap)
    return true;
  uint32_t *p = hbm__grow_array(df->pool, &df->pool_cap, df->pool_len + extra, sizeof *p, 4096);
  if (!p)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (planner)") == HBM_OK;
  df->pool = p;
  return true;
}

/* Reserves n value slots for an instruction instance; returns the offset. */
static bool alloc_positions(hlo_dataflow_t *df, uint32_t n, uint32_t *off) {
  if (!pool_reserve(df, n))
    return false;
  if (df->pool_len + n > UINT32_MAX - 4)
    return hbm__error(HBM_ERR_INVALID, "module too large for the planner") == HBM_OK;
  *off = (uint32_t)df->pool_len;
  df->pool_len += n;
  return true;
}

static bool new_value(hlo_dataflow_t *df, const hlo_instr_t *in, const hlo_shape_t *sub, uint32_t k,
                      uint32_t step, uint32_t flags, uint32_t *id) {
  if (df->values.len >= UINT32_MAX - 4)
    return hbm__error(HBM_ERR_INVALID, "module too large for the planner") == HBM_OK;
  hlo_value_t v = {.instr = in,
                   .shape = sub,
                   .subshape = k,
                   .def_step = step,
                   .last_use = step,
                   .split_use = UINT32_MAX,
                   .split_def = UINT32_MAX,
                   .flags = flags,
                   .bytes = sub->bytes,
                   .unpadded_bytes = sub->unpadded_bytes,
                   .color = hbm__shape_color(sub)};
  *id = (uint32_t)df->values.len;
  return hbm__hlo_vec_push(&df->values, &v);
}

/* Visits the subshapes of s in pre-order without recursion. */
typedef struct subshape_iter {
  const hlo_shape_t *stack[66];
  uint32_t next[66];
  int sp;
  uint32_t k;
} subshape_iter_t;

static void subshapes_begin(subshape_iter_t *it, const hlo_shape_t *s) {
  it->sp = 0;
  it->k = 0;
  it->stack[0] = s;
  it->next[0] = 0;
}

/* Returns the next subshape (and its pre-order index in *k), NULL at the end. */
static const hlo_shape_t *subshapes_next(subshape_iter_t *it, uint32_t *k) {
  while (it->sp >= 0) {
    const hlo_shape_t *s = it->stack[it->sp];
    if (it->next[it->sp] == 0) {
      it->next[it->sp] = 1;
      *k = it->k++;
      return s;
    }
    uint32_t child = it->next[it->sp] - 1;
    if (s->etype == HLO_T_TUPLE && child < s->rank && it->sp + 1 < 66) {
      it->next[it->sp]++;
      it->sp++;
      it->stack[it->sp] = s->elems[child];
      it->next[it->sp] = 0;
      continue;
    }
    it->sp--;
  }
  return NULL;
}

/* Defines a value for every subshape of in->shape from position k0 on (k0 = 1: all but the
 * top-level tuple table). */
static bool define_values(hlo_dataflow_t *df, const hlo_instr_t *in, uint32_t off, uint32_t step,
                          uint32_t flags, uint32_t k0) {
  subshape_iter_t it;
  subshapes_begin(&it, in->shape);
  const hlo_shape_t *sub;
  uint32_t k;
  while ((sub = subshapes_next(&it, &k)))
    if (k >= k0 && !new_value(df, in, sub, k, step, flags, &df->pool[off + k]))
      return false;
  return true;
}

static bool same_tree(const hlo_shape_t *a, const hlo_shape_t *b) {
  return a && b && a->n_subshapes == b->n_subshapes;
}

static void mark_use(hlo_dataflow_t *df, uint32_t v, uint32_t step) {
  hlo_value_t *val = &HLO_VEC_AT(&df->values, hlo_value_t, v);
  if (val->last_use != LIVE_OUT_STEP && val->last_use < step)
    val->last_use = step;
}

static bool push_edge(hlo_dataflow_t *df, uint8_t kind, uint32_t a, uint32_t b, uint32_t c,
                      uint32_t step) {
  hlo_edge_t e = {kind, a, b, c, step};
  return hbm__hlo_vec_push(&df->edges, &e);
}

/* ---- frames: one instance of a sequential computation ---- */

static uint32_t *frame_pos(hlo_dataflow_t *df, uint32_t f) {
  return &HLO_VEC_AT(&df->frame_pos, uint32_t, HLO_VEC_AT(&df->frames, hlo_frame_t, f).pos);
}

static hlo_frame_t *frame_at(hlo_dataflow_t *df, uint32_t f) {
  return &HLO_VEC_AT(&df->frames, hlo_frame_t, f);
}

/* Position offset of operand i of in, in frame f. */
static uint32_t operand_off(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t i) {
  return frame_pos(df, f)[in->operands[i]->id];
}

static bool new_frame(hlo_dataflow_t *df, const hlo_comp_t *c, uint32_t n_params, uint32_t *id) {
  hlo_frame_t fr = {.comp = c, .pos = (uint32_t)df->frame_pos.len};
  fr.params = (uint32_t)df->frame_params.len;
  uint32_t none = UINT32_MAX;
  for (uint32_t i = 0; i < c->n_instrs; i++)
    if (!hbm__hlo_vec_push(&df->frame_pos, &none))
      return false;
  hlo_param_src_t src = {HLO_PARAM_DEFINE, 0};
  for (uint32_t i = 0; i < n_params; i++)
    if (!hbm__hlo_vec_push(&df->frame_params, &src))
      return false;
  fr.n_params = n_params;
  *id = (uint32_t)df->frames.len;
  return hbm__hlo_vec_push(&df->frames, &fr);
}

static void set_param_src(hlo_dataflow_t *df, uint32_t f, uint32_t i, uint8_t mode, uint32_t off) {
  hlo_frame_t *fr = frame_at(df, f);
  if (i < fr->n_params)
    HLO_VEC_AT(&df->frame_params, hlo_param_src_t, fr->params + i) = (hlo_param_src_t){mode, off};
}

static bool push_task(hlo_dataflow_t *df, uint32_t frame) {
  if (df->stack.len > 1u << 20)
    return hbm__error(HBM_ERR_INVALID, "computations nested too deeply") == HBM_OK;
  return hbm__hlo_vec_push(&df->stack, &frame);
}

/* ---- instructions ---- */

static bool new_step(hlo_dataflow_t *df, const hlo_instr_t *in, uint32_t *step) {
  if (df->steps.len >= df->max_steps)
    return hbm__error(HBM_ERR_INVALID,
                      "the module's call graph expands to more than %zu scheduled "
                      "instructions; the planner expects each control-flow computation to be "
                      "called from few places",
                      df->max_steps) == HBM_OK;
  hlo_step_t s = {in};
  *step = (uint32_t)df->steps.len;
  return hbm__hlo_vec_push(&df->steps, &s);
}

static void use_operands(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t step) {
  for (uint32_t i = 0; i < in->n_operands; i++) {
    uint32_t off = operand_off(df, f, in, i);
    uint32_t n = in->opcode == HLO_OP_GET_TUPLE_ELEMENT ? 1 : in->operands[i]->shape->n_subshapes;
    for (uint32_t k = 0; k < n; k++)
      mark_use(df, df->pool[off + k], step);
  }
}

/* Copies the values of subtree `src_k` of the operand into subtree `dst_k` of in. */
static void forward_subtree(hlo_dataflow_t *df, uint32_t dst_off, uint32_t dst_k, uint32_t src_off,
                            uint32_t src_k, uint32_t n) {
  if (n == 1) /* an array: the common case */
    df->pool[dst_off + dst_k] = df->pool[src_off + src_k];
  else
    memmove(&df->pool[dst_off + dst_k], &df->pool[src_off + src_k], n * sizeof(uint32_t));
}

static bool is_entry_param_writable(const hlo_module_t *m, const hlo_instr_t *in, uint32_t k) {
  for (uint32_t i = 0; i < m->n_io_alias; i++) {
    const hlo_alias_pair_t *p = &m->io_alias[i];
    if (p->operand == in->index && hbm__shape_index_offset(in->shape, p->in, p->n_in) == k)
      return true;
  }
  for (uint32_t i = 0; i < m->n_donors; i++) {
    const hlo_alias_pair_t *p = &m->donors[i];
    if (p->operand == in->index && hbm__shape_index_offset(in->shape, p->in, p->n_in) == k)
      return true;
  }
  return false;
}

static bool do_parameter(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t off,
                         uint32_t step) {
  hlo_frame_t *fr = frame_at(df, f);
  if (fr->comp == df->m->entry) {
    if (!define_values(df, in, off, step, HLO_V_PARAM, 0))
      return false;
    if (df->m->n_io_alias || df->m->n_donors)
      for (uint32_t k = 0; k < in->shape->n_subshapes; k++)
        if (is_entry_param_writable(df->m, in, k))
          HLO_VEC_AT(&df->values, hlo_value_t, df->pool[off + k]).flags |= HLO_V_WRITABLE;
    return true;
  }
  hlo_param_src_t src = {HLO_PARAM_DEFINE, 0};
  if (in->index >= 0 && (uint64_t)in->index < fr->n_params)
    src = HLO_VEC_AT(&df->frame_params, hlo_param_src_t, fr->params + in->index);
  if (src.mode == HLO_PARAM_FORWARD) {
    forward_subtree(df, off, 0, src.off, 0, in->shape->n_subshapes);
    return true;
  }
  if (!define_values(df, in, off, step, 0, 0))
    return false;
  if (src.mode == HLO_PARAM_LINK) /* a loop parameter: the loop's buffer itself */
    for (uint32_t k = 0; k < in->shape->n_subshapes; k++)
      if (!push_edge(df, HLO_EDGE_FORCE, df->pool[off + k], df->pool[src.off + k], 0, step))
        return false;
  return true;
}

static bool do_tuple(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t off,
                     uint32_t step) {
  const hlo_shape_t *s = in->shape;
  if (s->etype != HLO_T_TUPLE || s->rank != in->n_operands)
    return define_values(df, in, off, step, 0, 0);
  if (!new_value(df, in, s, 0, step, 0, &df->pool[off]))
    return false;
  for (uint32_t i = 0; i < in->n_operands; i++) {
    const hlo_shape_t *e = s->elems[i];
    uint32_t k = s->elem_offsets[i];
    if (same_tree(e, in->operands[i]->shape)) {
      forward_subtree(df, off, k, operand_off(df, f, in, i), 0, e->n_subshapes);
    } else {
      subshape_iter_t it;
      subshapes_begin(&it, e);
      const hlo_shape_t *sub;
      uint32_t j;
      while ((sub = subshapes_next(&it, &j)))
        if (!new_value(df, in, sub, k + j, step, 0, &df->pool[off + k + j]))
          return false;
    }
  }
  return true;
}

/* Forwards subtree `elem` of operand 0 (a tuple) as the whole of in; defines values when the
 * shapes disagree. */
static bool forward_element(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t off,
                            uint32_t step, int64_t elem) {
  if (in->n_operands >= 1) {
    const hlo_shape_t *os = in->operands[0]->shape;
    uint32_t k = hbm__shape_elem_offset(os, elem);
    if (k != UINT32_MAX && same_tree(os->elems[elem], in->shape)) {
      forward_subtree(df, off, 0, operand_off(df, f, in, 0), k, in->shape->n_subshapes);
      return true;
    }
  }
  return define_values(df, in, off, step, 0, 0);
}

static bool forward_operand(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t off,
                            uint32_t step) {
  if (in->n_operands >= 1 && same_tree(in->operands[0]->shape, in->shape)) {
    forward_subtree(df, off, 0, operand_off(df, f, in, 0), 0, in->shape->n_subshapes);
    return true;
  }
  return define_values(df, in, off, step, 0, 0);
}

/* Defines values for the subshapes of `in` that were not forwarded (still UINT32_MAX). */
static bool define_missing(hlo_dataflow_t *df, const hlo_instr_t *in, uint32_t off, uint32_t step) {
  subshape_iter_t it;
  subshapes_begin(&it, in->shape);
  const hlo_shape_t *sub;
  uint32_t k;
  while ((sub = subshapes_next(&it, &k)))
    if (df->pool[off + k] == UINT32_MAX && !new_value(df, in, sub, k, step, 0, &df->pool[off + k]))
      return false;
  return true;
}

/* Start ops whose result holds the operand at {operand_elem} (async-start: {0, i} = operand
 * i; copy-start: {1} = the source); the rest of the tuple is new. */
static bool do_start(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t off,
                     uint32_t step, uint32_t operand_elem) {
  const hlo_shape_t *s = in->shape;
  if (s->etype == HLO_T_TUPLE && s->rank > operand_elem && in->n_operands > 0) {
    const hlo_shape_t *e = s->elems[operand_elem];
    uint32_t k = s->elem_offsets[operand_elem];
    if (in->n_operands == 1 && same_tree(e, in->operands[0]->shape)) {
      forward_subtree(df, off, k, operand_off(df, f, in, 0), 0, e->n_subshapes);
    } else if (e->etype == HLO_T_TUPLE && e->rank == in->n_operands) {
      for (uint32_t i = 0; i < in->n_operands; i++)
        if (same_tree(e->elems[i], in->operands[i]->shape))
          forward_subtree(df, off, k + e->elem_offsets[i], operand_off(df, f, in, i), 0,
                          e->elems[i]->n_subshapes);
    }
  }
  return define_missing(df, in, off, step);
}

/* Done ops: the result is element `elem` of the start's tuple, or the start itself. */
static bool do_done(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t off,
                    uint32_t step, int64_t elem) {
  if (in->n_operands >= 1 && in->operands[0]->shape->etype == HLO_T_TUPLE &&
      in->operands[0]->shape->rank > elem)
    return forward_element(df, f, in, off, step, elem);
  return forward_operand(df, f, in, off, step);
}

/* An in-place pair: output subshape out_k may take operand i's subshape in_k. */
static bool inplace_edge(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t off,
                         uint32_t step, uint32_t out_k, uint32_t i, uint32_t in_k) {
  if (i >= in->n_operands || out_k >= in->shape->n_subshapes ||
      in_k >= in->operands[i]->shape->n_subshapes)
    return true;
  uint32_t x = df->pool[operand_off(df, f, in, i) + in_k];
  return push_edge(df, HLO_EDGE_INPLACE, x, df->pool[off + out_k], 0, step);
}

/* The parameter number a fused value comes from through bitcasts, or -1. */
static int64_t fused_param_of(const hlo_instr_t *v) {
  for (int hops = 0; v && hops < 16; hops++) {
    if (v->opcode == HLO_OP_PARAMETER)
      return v->index;
    if (v->opcode != HLO_OP_BITCAST || v->n_operands != 1)
      return -1;
    v = v->operands[0];
  }
  return -1;
}

static const hlo_comp_t *called_comp(const hlo_instr_t *in, hlo_call_role_t role, uint32_t nth) {
  for (uint32_t k = 0; k < in->n_called; k++)
    if (in->called[k].role == role && nth-- == 0)
      return in->called[k].comp;
  return NULL;
}

/* In-place fusions (XLA: a fusion whose root updates a fused parameter in place). */
static bool fusion_inplace(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t off,
                           uint32_t step) {
  const hlo_comp_t *body = called_comp(in, HLO_CALL_CALLS, 0);
  if (!body)
    return true;
  const hlo_instr_t *root = body->root;
  uint32_t n = root->opcode == HLO_OP_TUPLE ? root->n_operands : 1;
  for (uint32_t e = 0; e < n; e++) {
    const hlo_instr_t *r = root->opcode == HLO_OP_TUPLE ? root->operands[e] : root;
    if ((r->opcode != HLO_OP_DYNAMIC_UPDATE_SLICE && r->opcode != HLO_OP_SCATTER) ||
        r->n_operands == 0)
      continue;
    int64_t p = fused_param_of(r->operands[0]);
    uint32_t out_k = root->opcode == HLO_OP_TUPLE ? hbm__shape_elem_offset(in->shape, e) : 0;
    if (p >= 0 && out_k != UINT32_MAX && !inplace_edge(df, f, in, off, step, out_k, (uint32_t)p, 0))
      return false;
  }
  return true;
}

/* XLA lets an element-wise op (or a loop fusion reading an operand element-wise) write its
 * result over an operand that dies there. */
static bool reads_elementwise(const hlo_instr_t *in, uint32_t i) {
  unsigned fl = hbm__opcode_flags((hlo_opcode_t)in->opcode);
  /* all-reduce-start declares its operand an in-place pair (GetInPlaceInputOutputPairs);
   * a synchronous all-reduce does not and is not element-wise in XLA's sense, so its
   * result never takes its operand's buffer (the CPU zoo's psum keeps its operand in the
   * temp allocation) */
  if ((fl & HLO_F_ELEMENTWISE) || in->opcode == HLO_OP_ALL_REDUCE_START)
    return true;
  if (in->opcode != HLO_OP_FUSION || in->fusion_kind != 'L')
    return false;
  const hlo_comp_t *body = called_comp(in, HLO_CALL_CALLS, 0);
  if (!body || i >= body->n_params || !body->params[i])
    return false;
  const hlo_instr_t *p = body->params[i];
  for (uint32_t j = 0; j < body->n_instrs; j++) {
    const hlo_instr_t *u = body->instrs[j];
    for (uint32_t o = 0; o < u->n_operands; o++)
      if (u->operands[o] == p &&
          (!(hbm__opcode_flags((hlo_opcode_t)u->opcode) & HLO_F_ELEMENTWISE) ||
           hbm__shape_elements(u->shape) != hbm__shape_elements(p->shape)))
        return false;
  }
  return true;
}

/* ShapeUtil::Equal for arrays: element type, dimensions and layout (a missing layout is
 * the default major-to-minor one). */
static bool same_layout(const hlo_shape_t *a, const hlo_shape_t *b) {
  const hlo_layout_t *la = a->layout, *lb = b->layout;
  for (uint16_t k = 0; k < a->rank; k++) {
    int64_t ma = la && k < la->n_minor_to_major ? la->minor_to_major[k] : a->rank - 1 - k;
    int64_t mb = lb && k < lb->n_minor_to_major ? lb->minor_to_major[k] : b->rank - 1 - k;
    if (ma != mb)
      return false;
  }
  if (!la || !lb)
    return (!la || (la->n_tiles == 0 && la->element_bits == 0 && la->memory_space == 0)) &&
           (!lb || (lb->n_tiles == 0 && lb->element_bits == 0 && lb->memory_space == 0));
  if (la->n_tiles != lb->n_tiles || la->element_bits != lb->element_bits ||
      la->memory_space != lb->memory_space)
    return false;
  for (uint8_t t = 0; t < la->n_tiles; t++) {
    if (la->tiles[t].rank != lb->tiles[t].rank)
      return false;
    for (uint8_t d = 0; d < la->tiles[t].rank; d++)
      if (la->tiles[t].dims[d] != lb->tiles[t].dims[d])
        return false;
  }
  return true;
}

static bool shapes_equal(const hlo_shape_t *a, const hlo_shape_t *b) {
  if (a->etype != b->etype || a->rank != b->rank || a->etype == HLO_T_TUPLE)
    return false;
  for (uint16_t k = 0; k < a->rank; k++)
    if (a->dims[k] != b->dims[k])
      return false;
  return same_layout(a, b);
}

/* XLA's AreTransitiveUsesElementwiseOrTuple: every instruction of the fusion body reached
 * from parameter i (through any chain of uses) is element-wise on what it reads, or a
 * tuple. The body is in program order, so one pass marks the reached instructions. */
static bool transitive_uses_elementwise(const hlo_instr_t *in, uint32_t i) {
  const hlo_comp_t *body = called_comp(in, HLO_CALL_CALLS, 0);
  if (!body || i >= body->n_params || !body->params[i])
    return false;
  uint8_t *reached = calloc((size_t)body->n_instrs + 1, 1);
  if (!reached)
    return false;
  bool ok = true;
  for (uint32_t j = 0; j < body->n_instrs; j++)
    reached[j] = body->instrs[j] == body->params[i];
  for (uint32_t j = 0; ok && j < body->n_instrs; j++) {
    const hlo_instr_t *u = body->instrs[j];
    for (uint32_t o = 0; o < u->n_operands && !reached[j]; o++) {
      uint32_t k = u->operands[o]->id; /* its index in the body */
      reached[j] = k < j && body->instrs[k] == u->operands[o] && reached[k];
    }
    if (reached[j] && u != body->params[i] && u->opcode != HLO_OP_TUPLE &&
        !(hbm__opcode_flags((hlo_opcode_t)u->opcode) & HLO_F_ELEMENTWISE))
      ok = false;
  }
  free(reached);
  return ok;
}

/* CanShareOperandBufferWithUser without a backend hook (the CPU's), for the element-wise
 * cases: equal shapes, and for loop and input fusions element-wise transitive uses. */
static bool exact_share(const hlo_instr_t *in, uint32_t i) {
  if (!shapes_equal(in->operands[i]->shape, in->shape))
    return false;
  if (in->opcode == HLO_OP_FUSION)
    return (in->fusion_kind == 'L' || in->fusion_kind == 'I') && transitive_uses_elementwise(in, i);
  unsigned fl = hbm__opcode_flags((hlo_opcode_t)in->opcode);
  return (fl & HLO_F_ELEMENTWISE) || in->opcode == HLO_OP_ALL_REDUCE_START;
}

/* 1 when operand i of `in` is the instruction that defines value x: XLA's heap simulator
 * shares a buffer with an operand only then (HloInstruction::IsUserOf on the defining
 * instruction), not through a bitcast, get-tuple-element or an async done. */
static uint32_t share_direct(const hlo_dataflow_t *df, uint32_t x, const hlo_instr_t *in,
                             uint32_t i) {
  return x != UINT32_MAX && HLO_VEC_AT(&df->values, hlo_value_t, x).instr == in->operands[i];
}

/* May result element e (0: the array result) of `in` take operand i's memory when the
 * operand dies there? With the GPU's hook, its answer where it gives one (gpu_sharing.c),
 * else XLA's rule: equal shapes and an element-wise use; the CPU has no hook; the plain
 * planner keeps its element-wise rule. */
static bool may_share(const hlo_dataflow_t *df, const hlo_instr_t *in, uint32_t i, uint32_t e) {
  if (df->gpu) {
    int hint = hbm__gpu_can_share(df->m, in, i, e);
    if (hint >= 0)
      return hint;
    const hlo_shape_t *es = in->shape->etype == HLO_T_TUPLE ? NULL : in->shape;
    return es && shapes_equal(in->operands[i]->shape, es) &&
           (hbm__opcode_flags((hlo_opcode_t)in->opcode) & HLO_F_ELEMENTWISE);
  }
  if (in->shape->etype == HLO_T_TUPLE)
    return false;
  return df->exact_shape_sharing ? exact_share(in, i) : reads_elementwise(in, i);
}

static bool share_edges(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t off,
                        uint32_t step) {
  const hlo_shape_t *s = in->shape;
  bool tuple = s->etype == HLO_T_TUPLE;
  if (tuple && !(df->gpu && in->opcode == HLO_OP_FUSION))
    return true;
  uint32_t n_results = tuple ? s->rank : 1;
  for (uint32_t e = 0; e < n_results; e++) {
    const hlo_shape_t *es = tuple ? s->elems[e] : s;
    uint32_t out_k = tuple ? s->elem_offsets[e] : 0;
    if (es->etype == HLO_T_TUPLE)
      continue;
    for (uint32_t i = 0; i < in->n_operands; i++) {
      const hlo_shape_t *os = in->operands[i]->shape;
      if (os->etype == HLO_T_TUPLE || os->bytes != es->bytes || !may_share(df, in, i, e))
        continue;
      uint32_t x = df->pool[operand_off(df, f, in, i)];
      if (!push_edge(df, HLO_EDGE_SHARE, x, df->pool[off + out_k], share_direct(df, x, in, i),
                     step))
        return false;
    }
  }
  return true;
}

/* XLA lets a sort write each sorted array over its operand (CanShareOperandBufferWithUser's
 * sort case): operand i with result element i (or the whole result for one operand). */
static bool sort_share_edges(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in, uint32_t off,
                             uint32_t step) {
  const hlo_shape_t *s = in->shape;
  for (uint32_t i = 0; i < in->n_operands; i++) {
    const hlo_shape_t *os = in->operands[i]->shape;
    uint32_t out_k = s->etype == HLO_T_TUPLE ? (i < s->rank ? s->elem_offsets[i] : UINT32_MAX)
                                             : (i == 0 ? 0 : UINT32_MAX);
    const hlo_shape_t *es = s->etype == HLO_T_TUPLE && i < s->rank ? s->elems[i] : s;
    if (out_k == UINT32_MAX || os->etype == HLO_T_TUPLE || os->bytes != es->bytes)
      continue;
    uint32_t x = df->pool[operand_off(df, f, in, i)];
    if (!push_edge(df, HLO_EDGE_SHARE, x, df->pool[off + out_k], share_direct(df, x, in, i), step))
      return false;
  }
  return true;
}

/* all-reduce-start writes its result over its operands: XLA lists them as in-place pairs
 * (AliasInfo::GetInPlaceInputOutputPairs, operand i with result {i}, or {} for one), so
 * its alias analysis makes each pair one buffer. */
static bool all_reduce_start_inplace(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in,
                                     uint32_t off, uint32_t step) {
  const hlo_shape_t *s = in->shape;
  for (uint32_t i = 0; i < in->n_operands; i++) {
    uint32_t out_k = s->etype != HLO_T_TUPLE ? (i == 0 ? 0 : UINT32_MAX)
                     : i < s->rank           ? s->elem_offsets[i]
                                             : UINT32_MAX;
    if (out_k != UINT32_MAX && !inplace_edge(df, f, in, off, step, out_k, i, 0))
      return false;
  }
  return true;
}

static bool define_with_aliasing(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in,
                                 uint32_t off, uint32_t step) {
  if (!define_values(df, in, off, step, 0, 0))
    return false;
  for (uint32_t a = 0; a < in->n_aliasing; a++) {
    const hlo_alias_pair_t *p = &in->aliasing[a];
    if (p->operand < 0 || (uint64_t)p->operand >= in->n_operands)
      continue;
    uint32_t out_k = hbm__shape_index_offset(in->shape, p->out, p->n_out);
    uint32_t in_k = hbm__shape_index_offset(in->operands[p->operand]->shape, p->in, p->n_in);
    if (out_k != UINT32_MAX && in_k != UINT32_MAX &&
        !inplace_edge(df, f, in, off, step, out_k, (uint32_t)p->operand, in_k))
      return false;
  }
  if (in->n_aliasing)
    return true;
  switch ((hlo_opcode_t)in->opcode) {
  case HLO_OP_DYNAMIC_UPDATE_SLICE: return inplace_edge(df, f, in, off, step, 0, 0, 0);
  case HLO_OP_SCATTER: {
    uint32_t n = in->n_operands >= 3 ? (in->n_operands - 1) / 2 : 0;
    if (in->shape->etype != HLO_T_TUPLE)
      return n == 0 || inplace_edge(df, f, in, off, step, 0, 0, 0);
    for (uint32_t i = 0; i < n && i < in->shape->rank; i++)
      if (!inplace_edge(df, f, in, off, step, in->shape->elem_offsets[i], i, 0))
        return false;
    return true;
  }
  case HLO_OP_FUSION:
    return fusion_inplace(df, f, in, off, step) && share_edges(df, f, in, off, step);
  case HLO_OP_ALL_REDUCE_START: return all_reduce_start_inplace(df, f, in, off, step);
  case HLO_OP_SORT: return sort_share_edges(df, f, in, off, step);
  case HLO_OP_ALL_REDUCE:
  case HLO_OP_CUSTOM_CALL: return !df->gpu || share_edges(df, f, in, off, step);
  default:
    if (hbm__opcode_flags((hlo_opcode_t)in->opcode) & HLO_F_ELEMENTWISE)
      return share_edges(df, f, in, off, step);
    return true;
  }
}

/* ---- control flow ---- */

/* Starts a frame for callee c: 1 started, 0 not a scheduled computation, -1 error. Frames
 * may move in memory: callers re-read their frame pointer afterwards. */
static int start_child(hlo_dataflow_t *df, uint32_t f, const hlo_comp_t *c, uint32_t *child) {
  if (!c || c->kind != HLO_COMP_SEQUENTIAL)
    return 0;
  if (!new_frame(df, c, c->n_params, child))
    return -1;
  frame_at(df, f)->child = *child;
  return push_task(df, *child) ? 1 : -1;
}

/* XLA's loop buffer holds several values (HloDataflowAnalysis's phis): the condition's and
 * body's parameters, defined where they start and dead after their last read, and the
 * while's result, defined after the body (HloLiveRange flattens the body before the while).
 * The planner has one value for them: it records where the reads inside the loop end and
 * where the result begins, so the heap may use the gap in between, as XLA's does. */
static void split_loop_values(hlo_dataflow_t *df, const hlo_instr_t *in, uint32_t off,
                              uint32_t last) {
  for (uint32_t k = 0; k < in->shape->n_subshapes; k++) {
    uint32_t v = df->pool[off + k];
    hlo_value_t *val = v == UINT32_MAX ? NULL : &HLO_VEC_AT(&df->values, hlo_value_t, v);
    if (val && val->instr == in && val->last_use != LIVE_OUT_STEP && val->last_use < last) {
      val->split_use = val->last_use;
      val->split_def = last;
    }
  }
}

/* The loop buffer of a while: the instruction's own values (defined at its step); the
 * condition's and body's parameters link to them. */
static bool while_step(hlo_dataflow_t *df, uint32_t f) {
  hlo_frame_t *fr = frame_at(df, f);
  const hlo_instr_t *in = fr->pending;
  uint32_t off = frame_pos(df, f)[in->id];
  const hlo_comp_t *cond = called_comp(in, HLO_CALL_CONDITION, 0);
  const hlo_comp_t *body = called_comp(in, HLO_CALL_BODY, 0);
  uint32_t phase = fr->phase++;
  uint32_t child;
  int started;
  if (phase == 0) {
    if (!cond || cond->n_params != 1 || !same_tree(cond->params[0]->shape, in->shape))
      return true;
    if ((started = start_child(df, f, cond, &child)) > 0)
      set_param_src(df, child, 0, HLO_PARAM_LINK, off);
    return started >= 0;
  }
  if (phase == 1) {
    fr->body_first = (uint32_t)df->steps.len;
    if (!body || body->n_params != 1 || !same_tree(body->params[0]->shape, in->shape))
      return true;
    if ((started = start_child(df, f, body, &child)) > 0) {
      set_param_src(df, child, 0, HLO_PARAM_LINK, off);
      fr = frame_at(df, f);
      fr->body_frame = child;
      fr->have_body = 1;
    }
    return started >= 0;
  }
  fr->pending = NULL;
  if (in->n_operands != 1 || !same_tree(in->operands[0]->shape, in->shape))
    return true;
  uint32_t init = operand_off(df, f, in, 0);
  uint32_t n = in->shape->n_subshapes;
  if (!fr->have_body || !same_tree(body->root->shape, in->shape)) {
    for (uint32_t k = 0; k < n; k++)
      if (!push_edge(df, HLO_EDGE_LOOP_INIT, df->pool[init + k], df->pool[off + k], 0, fr->step))
        return false;
    return true;
  }
  uint32_t *bpos = frame_pos(df, fr->body_frame);
  uint32_t root_off = bpos[body->root->id];
  uint32_t param_off = bpos[body->params[0]->id];
  uint32_t while_step_index = fr->step;
  uint32_t last = (uint32_t)df->steps.len - 1;
  if (df->xla_order)
    split_loop_values(df, in, off, last);
  for (uint32_t k = 0; k < n; k++) {
    uint32_t r = df->pool[root_off + k], p = df->pool[param_off + k];
    bool invariant = r == p;
    if (!push_edge(df, HLO_EDGE_LOOP_INIT, df->pool[init + k], df->pool[off + k], invariant,
                   while_step_index))
      return false;
    if (!invariant && !push_edge(df, HLO_EDGE_LOOP_BODY, r, df->pool[off + k], p, last))
      return false;
  }
  return true;
}

/* XLA's flattened schedule (HloLiveRange::FlattenSchedule) puts a conditional after its
 * branches: its operands are read, and its own values (the phis) defined, when the last
 * branch has run. The planner's step for it comes first, where the branches take their
 * operands; with the XLA backends the operands stay live to the end of the last branch and
 * the result is defined there, so a temporary of a branch may share memory with it (the
 * branches' values are defined before the phi, HloOrdering::IsDefinedBefore). A `call` is
 * left as it is: on the GPU set, its operands die at their last use inside the callee. */
static void finish_conditional(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in,
                               uint32_t off) {
  uint32_t last = (uint32_t)df->steps.len - 1;
  use_operands(df, f, in, last);
  for (uint32_t k = 0; k < in->shape->n_subshapes; k++) {
    uint32_t v = df->pool[off + k];
    hlo_value_t *val = v == UINT32_MAX ? NULL : &HLO_VEC_AT(&df->values, hlo_value_t, v);
    if (val && val->instr == in && val->def_step < last) {
      val->def_step = last;
      if (val->last_use != LIVE_OUT_STEP && val->last_use < last)
        val->last_use = last;
    }
  }
}

static bool conditional_step(hlo_dataflow_t *df, uint32_t f) {
  hlo_frame_t *fr = frame_at(df, f);
  const hlo_instr_t *in = fr->pending;
  uint32_t off = frame_pos(df, f)[in->id];
  uint32_t branch = fr->phase;
  /* Join the branch that just ran (phase - 1) with the result. */
  if (branch > 0 && fr->have_body) {
    const hlo_comp_t *done = called_comp(in, HLO_CALL_BRANCH, branch - 1);
    uint32_t root_off = frame_pos(df, fr->body_frame)[done->root->id];
    uint32_t last = (uint32_t)df->steps.len - 1;
    for (uint32_t k = 0; k < in->shape->n_subshapes; k++)
      if (!push_edge(df, HLO_EDGE_BRANCH, df->pool[root_off + k], df->pool[off + k], last,
                     fr->body_first))
        return false;
    fr = frame_at(df, f);
  }
  fr->have_body = 0;
  const hlo_comp_t *c = called_comp(in, HLO_CALL_BRANCH, branch);
  fr->phase++;
  if (!c) {
    fr->pending = NULL;
    if (df->xla_order)
      finish_conditional(df, f, in, off);
    return true;
  }
  if (!same_tree(c->root->shape, in->shape))
    return true; /* a malformed branch: its values stay its own */
  fr->body_first = (uint32_t)df->steps.len;
  uint32_t child;
  int started = start_child(df, f, c, &child);
  if (started <= 0)
    return started == 0;
  if (c->n_params >= 1 && c->params[0] && branch + 1 < in->n_operands &&
      same_tree(c->params[0]->shape, in->operands[branch + 1]->shape))
    set_param_src(df, child, 0, HLO_PARAM_FORWARD, operand_off(df, f, in, branch + 1));
  fr = frame_at(df, f);
  fr->body_frame = child;
  fr->have_body = 1;
  return true;
}

static bool call_step(hlo_dataflow_t *df, uint32_t f) {
  hlo_frame_t *fr = frame_at(df, f);
  const hlo_instr_t *in = fr->pending;
  uint32_t off = frame_pos(df, f)[in->id];
  const hlo_comp_t *c = called_comp(in, HLO_CALL_TO_APPLY, 0);
  if (fr->phase++ == 0) {
    uint32_t child;
    int started = 0;
    if (c && same_tree(c->root->shape, in->shape))
      started = start_child(df, f, c, &child);
    if (started < 0)
      return false;
    if (started == 0) {
      fr = frame_at(df, f);
      fr->pending = NULL;
      return define_values(df, in, off, fr->step, 0, 0);
    }
    for (uint32_t i = 0; i < in->n_operands && i < c->n_params; i++)
      if (c->params[i] && same_tree(c->params[i]->shape, in->operands[i]->shape))
        set_param_src(df, child, i, HLO_PARAM_FORWARD, operand_off(df, f, in, i));
    frame_at(df, f)->body_frame = child;
    return true;
  }
  fr->pending = NULL;
  uint32_t root_off = frame_pos(df, fr->body_frame)[c->root->id];
  forward_subtree(df, off, 0, root_off, 0, in->shape->n_subshapes);
  return true;
}

static bool control_flow_step(hlo_dataflow_t *df, uint32_t f) {
  switch ((hlo_opcode_t)frame_at(df, f)->pending->opcode) {
  case HLO_OP_WHILE: return while_step(df, f);
  case HLO_OP_CONDITIONAL: return conditional_step(df, f);
  default: return call_step(df, f);
  }
}

static bool do_instruction(hlo_dataflow_t *df, uint32_t f, const hlo_instr_t *in) {
  uint32_t step = 0, off = 0;
  if (!new_step(df, in, &step) || !alloc_positions(df, in->shape->n_subshapes, &off))
    return false;
  frame_pos(df, f)[in->id] = off;
  for (uint32_t k = 0; k < in->shape->n_subshapes; k++)
    df->pool[off + k] = UINT32_MAX;
  use_operands(df, f, in, step);
  switch ((hlo_opcode_t)in->opcode) {
  case HLO_OP_PARAMETER: return do_parameter(df, f, in, off, step);
  case HLO_OP_CONSTANT: return define_values(df, in, off, step, HLO_V_CONST, 0);
  case HLO_OP_GET_TUPLE_ELEMENT: return forward_element(df, f, in, off, step, in->index);
  case HLO_OP_TUPLE: return do_tuple(df, f, in, off, step);
  case HLO_OP_BITCAST:
  case HLO_OP_OPTIMIZATION_BARRIER:
  case HLO_OP_DOMAIN:
  case HLO_OP_ADD_DEPENDENCY:
  case HLO_OP_ASYNC_UPDATE:
  case HLO_OP_ALL_REDUCE_DONE: return forward_operand(df, f, in, off, step);
  case HLO_OP_COPY: /* a shallow copy: a new top-level buffer, nested ones shared */
    if (in->n_operands == 1 && same_tree(in->operands[0]->shape, in->shape))
      forward_subtree(df, off, 0, operand_off(df, f, in, 0), 0, in->shape->n_subshapes);
    return new_value(df, in, in->shape, 0, step, 0, &df->pool[off]);
  case HLO_OP_ASYNC_START:
  case HLO_OP_ALL_GATHER_START:
  case HLO_OP_COLLECTIVE_PERMUTE_START:
  case HLO_OP_SEND: return do_start(df, f, in, off, step, 0);
  case HLO_OP_COPY_START: return do_start(df, f, in, off, step, 1);
  case HLO_OP_ASYNC_DONE:
  case HLO_OP_ALL_GATHER_DONE:
  case HLO_OP_COLLECTIVE_PERMUTE_DONE: return do_done(df, f, in, off, step, 1);
  case HLO_OP_COPY_DONE: return do_done(df, f, in, off, step, 0);
  case HLO_OP_RECV_DONE:
    /* (buffer, token): the buffer is recv's {0}, the rest is new */
    if (in->shape->etype == HLO_T_TUPLE && in->shape->rank >= 1 && in->n_operands == 1 &&
        in->operands[0]->shape->etype == HLO_T_TUPLE && in->operands[0]->shape->rank >= 1 &&
        same_tree(in->shape->elems[0], in->operands[0]->shape->elems[0]))
      forward_subtree(df, off, 1, operand_off(df, f, in, 0), 1, in->shape->elems[0]->n_subshapes);
    return define_missing(df, in, off, step);
  case HLO_OP_WHILE:
  case HLO_OP_CONDITIONAL:
  case HLO_OP_CALL: {
    hlo_frame_t *fr = frame_at(df, f);
    fr->pending = in;
    fr->phase = 0;
    fr->step = step;
    fr->have_body = 0;
    if (in->opcode == HLO_OP_CALL)
      return true; /* the result is the callee's, known when it has run */
    return define_values(df, in, off, step, in->opcode == HLO_OP_WHILE ? HLO_V_LOOP : HLO_V_BRANCH,
                         0);
  }
  default: return define_with_aliasing(df, f, in, off, step);
  }
}

/* Runs the frames on the task stack until it is empty. */
static bool run_frames(hlo_dataflow_t *df) {
  while (df->stack.len) {
    uint32_t f = HLO_VEC_AT(&df->stack, uint32_t, df->stack.len - 1);
    hlo_frame_t *fr = frame_at(df, f);
    if (fr->pending) {
      if (!control_flow_step(df, f))
        return false;
      continue;
    }
    if (fr->pc == fr->comp->n_instrs) {
      df->stack.len--;
      continue;
    }
    const hlo_instr_t *in = fr->comp->instrs[fr->pc++];
    if (!do_instruction(df, f, in))
      return false;
  }
  return true;
}

/* Values of computations called as reducers/comparators: thread-local, one set per
 * computation, outside the schedule. */
static bool thread_local_values(hlo_dataflow_t *df) {
  const hlo_module_t *m = df->m;
  for (uint32_t c = 0; c < m->n_comps; c++) {
    const hlo_comp_t *comp = m->comps[c];
    if (comp->kind != HLO_COMP_EMBEDDED)
      continue;
    for (uint32_t i = 0; i < comp->n_instrs; i++) {
      const hlo_instr_t *in = comp->instrs[i];
      if (in->opcode == HLO_OP_GET_TUPLE_ELEMENT || in->opcode == HLO_OP_BITCAST)
        continue;
      subshape_iter_t it;
      subshapes_begin(&it, in->shape);
      const hlo_shape_t *sub;
      uint32_t k, id;
      /* XLA allocates a reducer's constants as constants, the rest as thread-local */
      uint32_t flags = in->opcode == HLO_OP_CONSTANT ? HLO_V_CONST : HLO_V_THREAD;
      /* a tuple (or a copy of one) defines its table only; its elements are its operands'
       * (HloDataflowAnalysis: kTuple and kCopy define their top-level value) */
      bool table_only = in->opcode == HLO_OP_TUPLE || in->opcode == HLO_OP_COPY;
      while ((sub = subshapes_next(&it, &k)))
        if ((k == 0 || !table_only) && !new_value(df, in, sub, k, 0, flags, &id))
          return false;
    }
  }
  return true;
}

void hbm__dataflow_free(hlo_dataflow_t *df) {
  free(df->pool);
  hbm__hlo_vec_free(&df->values);
  hbm__hlo_vec_free(&df->steps);
  hbm__hlo_vec_free(&df->edges);
  hbm__hlo_vec_free(&df->frames);
  hbm__hlo_vec_free(&df->frame_pos);
  hbm__hlo_vec_free(&df->frame_params);
  hbm__hlo_vec_free(&df->stack);
  hbm__hlo_vec_free(&df->outputs);
  memset(df, 0, sizeof *df);
}

hbm_status_t hbm__dataflow_run(const hlo_module_t *m, hlo_dataflow_t *df, int xla_backend) {
  memset(df, 0, sizeof *df);
  df->m = m;
  df->exact_shape_sharing = xla_backend == HLO_XLA_CPU;
  df->gpu = xla_backend == HLO_XLA_GPU;
  df->xla_order = xla_backend != 0;
  df->max_steps = 16 * m->n_instrs + 4096;
  hbm__hlo_vec_init(&df->values, sizeof(hlo_value_t));
  hbm__hlo_vec_init(&df->steps, sizeof(hlo_step_t));
  hbm__hlo_vec_init(&df->edges, sizeof(hlo_edge_t));
  hbm__hlo_vec_init(&df->frames, sizeof(hlo_frame_t));
  hbm__hlo_vec_init(&df->frame_pos, sizeof(uint32_t));
  hbm__hlo_vec_init(&df->frame_params, sizeof(hlo_param_src_t));
  hbm__hlo_vec_init(&df->stack, sizeof(uint32_t));
  hbm__hlo_vec_init(&df->outputs, sizeof(uint32_t));
  hbm__error_clear();
  /* Sized for a module without much control flow: one step and a value or so per
   * instruction, an edge per element-wise op. */
  size_t n = m->n_instrs + 16;
  hbm__hlo_vec_reserve(&df->values, n);
  hbm__hlo_vec_reserve(&df->steps, n);
  hbm__hlo_vec_reserve(&df->edges, n);
  hbm__hlo_vec_reserve(&df->frame_pos, n);
  pool_reserve(df, n);
  uint32_t entry;
  bool ok = new_frame(df, m->entry, m->entry->n_params, &entry) && push_task(df, entry) &&
            run_frames(df) && thread_local_values(df);
  if (ok) {
    /* The entry's result lives out: remember its values in order of output index. */
    const hlo_comp_t *e = m->entry;
    uint32_t off = frame_pos(df, entry)[e->root->id];
    for (uint32_t k = 0; ok && k < e->root->shape->n_subshapes; k++) {
      uint32_t v = df->pool[off + k];
      ok = hbm__hlo_vec_push(&df->outputs, &v);
      HLO_VEC_AT(&df->values, hlo_value_t, v).last_use = LIVE_OUT_STEP;
    }
    df->entry_root_off = off;
  }
  if (!ok) {
    hbm_status_t st = hbm_last_status();
    hbm__dataflow_free(df);
    return st != HBM_OK ? st : hbm__error(HBM_ERR_INTERNAL, "planner dataflow failed");
  }
  return HBM_OK;
}
