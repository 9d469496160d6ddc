/* reuse.c — temporaries that XLA puts in an output's allocation instead of the temp heap.
 *
 * XLA's BufferAssigner gives every live-out buffer an allocation of its own before the
 * temporaries reach the heap simulator, then walks the remaining buffers largest first and
 * puts each in an existing allocation when it fits (MaybeAssignBuffer): same colour, no
 * larger than the allocation, and no live range meeting any value already there. Two
 * ranges that only touch (one ends where the other starts) may share when the later value
 * is computed element-wise from the earlier one, as CanShareOperandBufferWithUser allows.
 * Output allocations live from their definition to the end of the program, so a
 * temporary that dies where (or before) the output is computed lands there: the temp
 * allocation shrinks by that much, which is the whole of it on many small modules.
 *
 * The candidate allocations are tried smallest first (XLA walks its allocation list from
 * the end); a temporary tries at most MAX_TRIES of them, which only matters for modules
 * with thousands of outputs of one size. */
#include "alias_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAX_TRIES 64

/* Something already in an allocation: one of its own values, or a placed temporary. The
 * occupants of one allocation never overlap in time (at most they touch), so each
 * allocation keeps them in a treap ordered by start: a new range meets at most the
 * occupant starting last before its end and, through touching ones, a few before it. */
typedef struct occupant {
  uint32_t lo, hi; /* steps, both inclusive (XLA's live ranges include their end) */
  uint32_t who;    /* its buffer, for the element-wise sharing check */
  uint32_t seq;    /* insertion number: ties in lo */
  uint32_t left, right, prio;
} occupant_t;

#define NIL UINT32_MAX

typedef struct reuse_state {
  hlo_assignment_t *as;
  const hlo_dataflow_t *df;
  uint32_t *value_frame; /* top-level value → the frame (instance) defining it, or NIL */
  uint32_t *by_buffer;   /* CSR of values by buffer: values[by_first[b] .. by_first[b+1]) */
  uint32_t *by_first;
  uint32_t *share_first; /* CSR over buffers: share_to[share_first[a] .. share_first[a+1]) */
  uint32_t *share_to;
  uint32_t *alloc_of; /* buffer → the buffer whose allocation holds it, or UINT32_MAX */
  uint32_t *first;    /* per buffer: the root of its occupants' treap when an allocation */
  hlo_vec_t occupants;
  uint32_t rng;
} reuse_state_t;

/* The inclusive last step of a temporary. */
static uint32_t last_step(const hlo_buffer_t *b) {
  return b->end > b->start ? b->end - 1 : b->start;
}

/* May `later` (defined where `earlier` is last read) take `earlier`'s memory? Only when
 * the dataflow recorded it as an element-wise reuse (alias.c's share edges). */
static bool may_touch(const reuse_state_t *s, uint32_t earlier, uint32_t later) {
  for (uint32_t k = s->share_first[earlier]; k < s->share_first[earlier + 1]; k++)
    if (s->share_to[k] == later)
      return true;
  return false;
}

/* XLA's LiveRangeInterferes: ranges that overlap interfere, unless one ends exactly where
 * the other starts and the later may be written over the earlier. */
static bool interferes(const reuse_state_t *s, uint32_t lo, uint32_t hi, uint32_t who,
                       const occupant_t *o) {
  if (hi < o->lo || o->hi < lo)
    return false;
  if (hi == o->lo)
    return !may_touch(s, who, o->who);
  if (o->hi == lo)
    return !may_touch(s, o->who, who);
  return true;
}

static occupant_t *occ(const reuse_state_t *s, uint32_t k) {
  return &HLO_VEC_AT(&s->occupants, occupant_t, k);
}

static bool before(const occupant_t *a, uint32_t lo, uint32_t seq) {
  return a->lo < lo || (a->lo == lo && a->seq < seq);
}

/* Splits treap t into the nodes ordered before (lo, seq) and the rest. */
static void split(reuse_state_t *s, uint32_t t, uint32_t lo, uint32_t seq, uint32_t *l,
                  uint32_t *r) {
  if (t == NIL) {
    *l = *r = NIL;
    return;
  }
  occupant_t *n = occ(s, t);
  if (before(n, lo, seq)) {
    split(s, n->right, lo, seq, &occ(s, t)->right, r);
    *l = t;
  } else {
    split(s, n->left, lo, seq, l, &occ(s, t)->left);
    *r = t;
  }
}

static uint32_t merge(reuse_state_t *s, uint32_t l, uint32_t r) {
  if (l == NIL || r == NIL)
    return l == NIL ? r : l;
  if (occ(s, l)->prio > occ(s, r)->prio) {
    occ(s, l)->right = merge(s, occ(s, l)->right, r);
    return l;
  }
  occ(s, r)->left = merge(s, l, occ(s, r)->left);
  return r;
}

static bool add_occupant(reuse_state_t *s, uint32_t alloc, uint32_t lo, uint32_t hi, uint32_t who) {
  s->rng ^= s->rng << 13;
  s->rng ^= s->rng >> 17;
  s->rng ^= s->rng << 5;
  uint32_t k = (uint32_t)s->occupants.len;
  occupant_t o = {lo, hi, who, k, NIL, NIL, s->rng};
  if (!hbm__hlo_vec_push(&s->occupants, &o))
    return false;
  uint32_t l, r;
  split(s, s->first[alloc], lo, k, &l, &r);
  s->first[alloc] = merge(s, merge(s, l, k), r);
  return true;
}

/* The occupant ordered last before (lo, seq), or NIL. */
static uint32_t predecessor(const reuse_state_t *s, uint32_t t, uint32_t lo, uint32_t seq) {
  uint32_t best = NIL;
  while (t != NIL) {
    const occupant_t *n = occ(s, t);
    if (before(n, lo, seq)) {
      best = t;
      t = n->right;
    } else {
      t = n->left;
    }
  }
  return best;
}

/* Can temporary t live in allocation o? *by_temp: it cannot only because of a temporary
 * placed there before it (where XLA's order of candidates decides). */
static bool fits_in(const reuse_state_t *s, uint32_t t, uint32_t o, bool *by_temp) {
  const hlo_buffer_t *tb = &s->as->buffers[t], *ob = &s->as->buffers[o];
  if (tb->bytes > ob->bytes || tb->color != ob->color)
    return false;
  uint32_t lo = tb->start, hi = last_step(tb);
  /* occupants starting at or before hi, latest first, while they still reach lo */
  for (uint32_t k = predecessor(s, s->first[o], hi, UINT32_MAX); k != NIL;) {
    const occupant_t *oc = occ(s, k);
    if (oc->hi < lo)
      break;
    if (interferes(s, lo, hi, t, oc)) {
      *by_temp = oc->who != o;
      return false;
    }
    k = predecessor(s, s->first[o], oc->lo, oc->seq);
  }
  return true;
}

/* Allocations XLA may put other buffers in: outputs, and parameters aliased with an output
 * (input_output_alias), which XLA keeps in its list of reusable allocations — except
 * tuple tables: BufferAllocation::is_reusable() is false for an is_tuple allocation, so a
 * scalar that dies before the output tuple is built still goes to the temp allocation. */
static bool is_reusable_allocation(const hlo_assignment_t *as, const hlo_buffer_t *b) {
  if (!b->indefinite || !(b->flags & HLO_V_OUTPUT) || (b->flags & (HLO_V_CONST | HLO_V_THREAD)))
    return false;
  if (as->values[b->value].shape->etype == HLO_T_TUPLE)
    return false;
  return !(b->flags & HLO_V_PARAM) || (b->flags & HLO_V_ALIASED);
}

static bool is_temporary(const hlo_buffer_t *b) {
  return !b->indefinite && !b->separate && b->bytes > 0;
}

/* XLA gives every tuple-shaped buffer an allocation of its own before anything else. */
static void mark_separate(hlo_assignment_t *as) {
  for (uint32_t i = 0; i < as->n_buffers; i++) {
    hlo_buffer_t *b = &as->buffers[i];
    b->separate = !b->indefinite && as->values[b->value].shape->etype == HLO_T_TUPLE;
  }
}

static const hlo_buffer_t *cmp_buffers;
static const uint64_t *cmp_post; /* per buffer: XLA's post-order position of its value */

/* Largest first; ties: XLA's post-order position (computations callers first, then the
 * instruction's place in its computation), then the lower index (a stable order). */
static int by_size_desc(const void *pa, const void *pb) {
  uint32_t ia = *(const uint32_t *)pa, ib = *(const uint32_t *)pb;
  const hlo_buffer_t *a = &cmp_buffers[ia], *b = &cmp_buffers[ib];
  if (a->bytes != b->bytes)
    return a->bytes > b->bytes ? -1 : 1;
  if (cmp_post[ia] != cmp_post[ib])
    return cmp_post[ia] < cmp_post[ib] ? -1 : 1;
  return ia < ib ? -1 : ia > ib;
}

/* XLA orders buffers of one size by the smallest post-order position among their values,
 * with the computations taken callers first (the entry, then what it calls, breadth first
 * here) and each computation's instructions in MakeInstructionPostOrder's order. NULL when
 * memory ran out. */
static uint64_t *post_positions(const hlo_module_t *m, const hlo_assignment_t *as) {
  uint32_t n = m->n_comps;
  size_t most = 1, most_scratch = 1;
  for (uint32_t c = 0; c < n; c++) {
    size_t ops = m->comps[c]->n_instrs;
    for (uint32_t i = 0; i < m->comps[c]->n_instrs; i++)
      ops += m->comps[c]->instrs[i]->n_operands;
    most = m->comps[c]->n_instrs > most ? m->comps[c]->n_instrs : most;
    most_scratch = ops > most_scratch ? ops : most_scratch;
  }
  uint32_t *rank = malloc(((size_t)n + 1) * sizeof *rank);
  uint32_t *queue = malloc(((size_t)n + 1) * sizeof *queue);
  uint64_t *post = malloc(((size_t)as->n_buffers + 1) * sizeof *post);
  uint32_t **order = calloc((size_t)n + 1, sizeof *order);
  uint32_t *stack = malloc(most_scratch * sizeof *stack), *users = malloc(most * sizeof *users);
  uint8_t *state = malloc(most);
  bool ok = rank && queue && post && order && stack && users && state;
  for (uint32_t c = 0; ok && c < n; c++) {
    order[c] = malloc(((size_t)m->comps[c]->n_instrs + 1) * sizeof **order);
    ok = order[c] != NULL;
    if (ok)
      hbm__hlo_instruction_post_order(m->comps[c], order[c], stack, state, users);
  }
  if (ok) {
    for (uint32_t c = 0; c < n; c++)
      rank[c] = UINT32_MAX;
    uint32_t head = 0, tail = 0, next = 0;
    queue[tail++] = m->entry->id - 1;
    rank[m->entry->id - 1] = next++;
    while (head < tail) {
      const hlo_comp_t *c = m->comps[queue[head++]];
      for (uint32_t i = 0; i < c->n_instrs; i++)
        for (uint32_t k = 0; k < c->instrs[i]->n_called; k++) {
          const hlo_comp_t *callee = c->instrs[i]->called[k].comp;
          if (callee && rank[callee->id - 1] == UINT32_MAX) {
            rank[callee->id - 1] = next++;
            queue[tail++] = callee->id - 1;
          }
        }
    }
    for (uint32_t b = 0; b < as->n_buffers; b++)
      post[b] = UINT64_MAX;
    for (uint32_t v = 0; v < as->n_values; v++) {
      uint32_t b = as->value_buffer[v];
      const hlo_instr_t *in = as->values[v].instr;
      if (b == UINT32_MAX || !in->parent)
        continue;
      uint32_t c = in->parent->id - 1;
      uint64_t key = ((uint64_t)rank[c] << 32) | order[c][in->id];
      post[b] = key < post[b] ? key : post[b];
    }
  }
  for (uint32_t c = 0; order && c < n; c++)
    free(order[c]);
  free(order);
  free(stack);
  free(users);
  free(state);
  free(rank);
  free(queue);
  if (!ok) {
    free(post);
    return NULL;
  }
  return post;
}

/* Share edges as a CSR from the operand's buffer to the result's. */
static bool build_shares(const hlo_dataflow_t *df, reuse_state_t *s) {
  const hlo_assignment_t *as = s->as;
  s->share_first = calloc((size_t)as->n_buffers + 2, sizeof *s->share_first);
  s->share_to = malloc((df->edges.len + 1) * sizeof *s->share_to);
  if (!s->share_first || !s->share_to)
    return false;
  for (size_t i = 0; i < df->edges.len; i++) {
    const hlo_edge_t *e = &HLO_VEC_AT(&df->edges, hlo_edge_t, i);
    uint32_t a = e->kind == HLO_EDGE_SHARE ? as->value_buffer[e->a] : UINT32_MAX;
    if (a != UINT32_MAX && as->value_buffer[e->b] != UINT32_MAX)
      s->share_first[a + 2]++;
  }
  for (uint32_t b = 0; b < as->n_buffers; b++)
    s->share_first[b + 2] += s->share_first[b + 1];
  for (size_t i = 0; i < df->edges.len; i++) {
    const hlo_edge_t *e = &HLO_VEC_AT(&df->edges, hlo_edge_t, i);
    uint32_t a = e->kind == HLO_EDGE_SHARE ? as->value_buffer[e->a] : UINT32_MAX;
    uint32_t b = a != UINT32_MAX ? as->value_buffer[e->b] : UINT32_MAX;
    if (b != UINT32_MAX)
      s->share_to[s->share_first[a + 1]++] = b;
  }
  return true;
}

/* Moves every value of a reused temporary into its allocation's buffer and drops the
 * temporaries from the buffer list (indices shift down). */
static bool compact(reuse_state_t *s) {
  hlo_assignment_t *as = s->as;
  uint32_t *new_index = malloc(((size_t)as->n_buffers + 1) * sizeof *new_index);
  if (!new_index)
    return false;
  uint32_t nb = 0;
  for (uint32_t i = 0; i < as->n_buffers; i++) {
    if (s->alloc_of[i] != UINT32_MAX) {
      as->buffers[s->alloc_of[i]].n_values += as->buffers[i].n_values;
      new_index[i] = UINT32_MAX;
      continue;
    }
    new_index[i] = nb;
    as->buffers[nb] = as->buffers[i];
    as->buffers[nb].share_group = nb;
    nb++;
  }
  for (uint32_t v = 0; v < as->n_values; v++) {
    uint32_t b = as->value_buffer[v];
    if (b == UINT32_MAX)
      continue;
    as->value_buffer[v] = new_index[s->alloc_of[b] != UINT32_MAX ? s->alloc_of[b] : b];
  }
  as->n_buffers = nb;
  free(new_index);
  return true;
}

/* Allocations sorted smallest first, ties: the later definition first. */
static int by_size_asc(const void *pa, const void *pb) { return -by_size_desc(pa, pb); }

/* Each allocation starts with its own values, over their own live ranges. */
/* Is c the condition of a while loop of m? */
static bool is_while_condition(const hlo_module_t *m, const hlo_comp_t *c) {
  for (uint32_t k = 0; k < m->n_comps; k++)
    for (uint32_t i = 0; i < m->comps[k]->n_instrs; i++) {
      const hlo_instr_t *in = m->comps[k]->instrs[i];
      for (uint32_t j = 0; j < in->n_called; j++)
        if (in->called[j].comp == c && in->called[j].role == HLO_CALL_CONDITION)
          return true;
    }
  return false;
}

/* The last step of a value: a while condition's parameter (the loop state, which the body
 * reads next) lives through the whole condition in XLA's HloLiveRange, so the condition's
 * predicate never shares its allocation. */
static uint32_t occupant_end(const reuse_state_t *s, const hlo_value_t *val) {
  const hlo_assignment_t *as = s->as;
  uint32_t hi = val->last_use >= as->n_steps ? UINT32_MAX : val->last_use;
  const hlo_comp_t *c = val->instr->parent;
  if (hi == UINT32_MAX || val->instr->opcode != HLO_OP_PARAMETER || !c || c->is_entry ||
      !is_while_condition(s->df->m, c))
    return hi;
  for (uint32_t t = val->def_step; t < as->n_steps; t++)
    if (as->steps[t].instr == c->root)
      return t > hi ? t : hi;
  return hi;
}

static bool seed_occupants(reuse_state_t *s, const uint8_t *is_alloc) {
  const hlo_assignment_t *as = s->as;
  for (uint32_t v = 0; v < as->n_values; v++) {
    uint32_t b = as->value_buffer[v];
    if (b == UINT32_MAX || !is_alloc[b])
      continue;
    const hlo_value_t *val = &as->values[v];
    uint32_t hi = occupant_end(s, val);
    uint32_t lo = (val->flags & HLO_V_PARAM) ? 0 : val->def_step;
    if (!add_occupant(s, b, lo, hi, b))
      return false;
  }
  return true;
}

/* The allocation holding buffer b so far: its own when it is a reusable allocation, the one a
 * temporary was put in, else NIL (parameters, constants, temporaries left for the heap). */
static uint32_t allocation_of(const reuse_state_t *s, const uint8_t *is_alloc, uint32_t b) {
  if (b == UINT32_MAX)
    return NIL;
  return is_alloc[b] ? b : s->alloc_of[b];
}

/* XLA's AssignSingleHloBuffer tries, before the list of reusable allocations, the
 * allocations of the operands of each top-level array value of the buffer (GetAllSlices of
 * the operand's top-level position). Returns the first that takes t, or NIL. */
static uint32_t operand_allocation(const reuse_state_t *s, const uint8_t *is_alloc, uint32_t t) {
  const hlo_assignment_t *as = s->as;
  for (uint32_t k = s->by_first[t]; k < s->by_first[t + 1]; k++) {
    uint32_t v = s->by_buffer[k];
    const hlo_value_t *val = &as->values[v];
    uint32_t f = s->value_frame[v];
    if (f == NIL || val->subshape != 0 || val->shape->etype == HLO_T_TUPLE)
      continue;
    const hlo_frame_t *fr = &HLO_VEC_AT(&s->df->frames, hlo_frame_t, f);
    const uint32_t *pos = &HLO_VEC_AT(&s->df->frame_pos, uint32_t, fr->pos);
    for (uint32_t i = 0; i < val->instr->n_operands; i++) {
      const hlo_instr_t *op = val->instr->operands[i];
      uint32_t off = op->parent == fr->comp ? pos[op->id] : UINT32_MAX;
      if (off == UINT32_MAX)
        continue;
      uint32_t o = allocation_of(s, is_alloc, as->value_buffer[s->df->pool[off]]);
      bool by_temp = false;
      if (o != NIL && fits_in(s, t, o, &by_temp))
        return o;
    }
  }
  return NIL;
}

static bool place_temporaries(reuse_state_t *s, const uint32_t *temps, size_t nt,
                              const uint32_t *outs, size_t no, const uint8_t *is_alloc, bool *any) {
  const hlo_buffer_t *bufs = s->as->buffers;
  for (size_t i = 0; i < nt; i++) {
    uint32_t t = temps[i];
    uint32_t chosen = operand_allocation(s, is_alloc, t);
    /* else the first allocation at least as large (outs ascending by size) */
    size_t lo = 0, hi = no;
    while (chosen == NIL && lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (bufs[outs[mid]].bytes < bufs[t].bytes)
        lo = mid + 1;
      else
        hi = mid;
    }
    bool contended = false;
    for (size_t k = lo, tries = 0; chosen == NIL && k < no && tries < MAX_TRIES; k++, tries++) {
      bool by_temp = false;
      if (fits_in(s, t, outs[k], &by_temp))
        chosen = outs[k];
      else
        contended |= by_temp;
    }
    if (chosen != NIL) {
      s->alloc_of[t] = chosen;
      if (!add_occupant(s, chosen, bufs[t].start, last_step(&bufs[t]), t))
        return false;
      *any = true;
    } else if (contended) { /* left in the heap only because another temporary came first */
      s->as->contended++;
      s->as->contended_bytes += bufs[t].bytes;
    }
  }
  return true;
}

/* value_frame (the frame defining each top-level value) and the values of each buffer. */
static bool index_values(const hlo_dataflow_t *df, reuse_state_t *s) {
  const hlo_assignment_t *as = s->as;
  s->value_frame = malloc(((size_t)as->n_values + 1) * sizeof *s->value_frame);
  s->by_first = calloc((size_t)as->n_buffers + 2, sizeof *s->by_first);
  s->by_buffer = malloc(((size_t)as->n_values + 1) * sizeof *s->by_buffer);
  if (!s->value_frame || !s->by_first || !s->by_buffer)
    return false;
  for (uint32_t v = 0; v < as->n_values; v++)
    s->value_frame[v] = NIL;
  for (uint32_t f = 0; f < df->frames.len; f++) {
    const hlo_frame_t *fr = &HLO_VEC_AT(&df->frames, hlo_frame_t, f);
    const uint32_t *pos = &HLO_VEC_AT(&df->frame_pos, uint32_t, fr->pos);
    for (uint32_t i = 0; i < fr->comp->n_instrs; i++) {
      uint32_t v = pos[i] == UINT32_MAX ? UINT32_MAX : df->pool[pos[i]];
      if (v < as->n_values && as->values[v].instr == fr->comp->instrs[i] &&
          s->value_frame[v] == NIL)
        s->value_frame[v] = f;
    }
  }
  for (uint32_t v = 0; v < as->n_values; v++)
    if (as->value_buffer[v] != UINT32_MAX)
      s->by_first[as->value_buffer[v] + 2]++;
  for (uint32_t b = 0; b < as->n_buffers; b++)
    s->by_first[b + 2] += s->by_first[b + 1];
  for (uint32_t v = 0; v < as->n_values; v++)
    if (as->value_buffer[v] != UINT32_MAX)
      s->by_buffer[s->by_first[as->value_buffer[v] + 1]++] = v;
  return true;
}

bool hbm__reuse_output_allocations(const hlo_dataflow_t *df, hlo_assignment_t *as, bool place) {
  mark_separate(as);
  if (!place)
    return true;
  uint32_t nb = as->n_buffers;
  size_t nt = 0, no = 0;
  for (uint32_t i = 0; i < nb; i++) {
    no += is_reusable_allocation(as, &as->buffers[i]);
    nt += is_temporary(&as->buffers[i]);
  }
  if (no == 0 || nt == 0)
    return true;
  reuse_state_t s = {.as = as, .df = df, .rng = 2463534242u};
  hbm__hlo_vec_init(&s.occupants, sizeof(occupant_t));
  uint32_t *temps = malloc(nt * sizeof *temps), *outs = malloc(no * sizeof *outs);
  uint8_t *is_alloc = calloc((size_t)nb + 1, 1);
  s.alloc_of = malloc(((size_t)nb + 1) * sizeof *s.alloc_of);
  s.first = malloc(((size_t)nb + 1) * sizeof *s.first);
  bool ok = temps && outs && is_alloc && s.alloc_of && s.first && build_shares(df, &s) &&
            index_values(df, &s);
  bool any = false;
  uint64_t *post = NULL;
  if (ok) {
    nt = no = 0;
    for (uint32_t i = 0; i < nb; i++) {
      s.alloc_of[i] = s.first[i] = NIL;
      if (is_reusable_allocation(as, &as->buffers[i])) {
        outs[no++] = i;
        is_alloc[i] = 1;
      } else if (is_temporary(&as->buffers[i])) {
        temps[nt++] = i;
      }
    }
    cmp_buffers = as->buffers;
    cmp_post = post = post_positions(df->m, as);
    ok = post != NULL;
  }
  if (ok) {
    qsort(temps, nt, sizeof *temps, by_size_desc);
    qsort(outs, no, sizeof *outs, by_size_asc);
    ok = seed_occupants(&s, is_alloc) && place_temporaries(&s, temps, nt, outs, no, is_alloc, &any);
  }
  if (ok && any)
    ok = compact(&s);
  free(post);
  free(temps);
  free(outs);
  free(is_alloc);
  free(s.alloc_of);
  free(s.first);
  free(s.share_first);
  free(s.share_to);
  free(s.value_frame);
  free(s.by_first);
  free(s.by_buffer);
  hbm__hlo_vec_free(&s.occupants);
  return ok;
}
