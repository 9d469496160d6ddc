/* remat.c — rematerialization, after XLA's HloRematerialization: while the plan does not
 * fit the memory limit, look at the buffers live across the peak that were defined by a
 * cheap instruction (element-wise, broadcast, iota, data movement, or a fusion of those)
 * and are not read at the peak; recompute the one that lowers the peak most right before
 * its first use after the peak, and let every later use read the recomputation. The copy
 * has the same opcode, shape and operands, so the program computes the same values; its
 * operands must then stay live until the copy, which counts against the gain. Side-effecting
 * or nondeterministic instructions (rng, collectives, custom calls, I/O) are never copied.
 * Only the entry computation is rematerialized. */
#include "plan_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REMAT_ITERATIONS 512

static bool fused_body_is_cheap(const hlo_comp_t *c) {
  for (uint32_t i = 0; i < c->n_instrs; i++) {
    const hlo_instr_t *in = c->instrs[i];
    unsigned fl = hbm__opcode_flags((hlo_opcode_t)in->opcode);
    if (fl & HLO_F_SIDE_EFFECT)
      return false;
    if (!(fl & (HLO_F_ELEMENTWISE | HLO_F_CHEAP)) && in->opcode != HLO_OP_PARAMETER &&
        in->opcode != HLO_OP_CONSTANT && in->opcode != HLO_OP_TUPLE &&
        in->opcode != HLO_OP_GET_TUPLE_ELEMENT)
      return false;
  }
  return true;
}

static bool is_rematerializable(const hlo_instr_t *in) {
  if (in->shape->etype == HLO_T_TUPLE || in->opcode == HLO_OP_BITCAST ||
      in->opcode == HLO_OP_UNKNOWN)
    return false;
  unsigned fl = hbm__opcode_flags((hlo_opcode_t)in->opcode);
  if (fl & HLO_F_SIDE_EFFECT)
    return false;
  if (in->opcode == HLO_OP_FUSION) {
    if (in->n_called != 1 || !in->called[0].comp)
      return false;
    return fused_body_is_cheap(in->called[0].comp);
  }
  return (fl & (HLO_F_ELEMENTWISE | HLO_F_CHEAP)) && in->n_called == 0;
}

/* Element-wise operations of one evaluation (data movement counts none). */
static uint64_t estimate_flops(const hlo_instr_t *in) {
  uint64_t elements = hbm__shape_elements(in->shape);
  if (in->opcode == HLO_OP_FUSION && in->n_called == 1) {
    uint64_t ops = 0;
    const hlo_comp_t *c = in->called[0].comp;
    for (uint32_t i = 0; i < c->n_instrs; i++)
      if (hbm__opcode_flags((hlo_opcode_t)c->instrs[i]->opcode) & HLO_F_ELEMENTWISE)
        ops += hbm__shape_elements(c->instrs[i]->shape);
    return ops;
  }
  return (hbm__opcode_flags((hlo_opcode_t)in->opcode) & HLO_F_ELEMENTWISE) ? elements : 0;
}

typedef struct remat_candidate {
  const hlo_instr_t *in;
  uint32_t insert_at; /* entry index of its first use after the peak */
  int64_t gain;       /* bytes the peak drops by */
  uint64_t bytes, flops;
} remat_candidate_t;

typedef struct remat_state {
  hbm_plan_t *plan;
  hlo_comp_t *entry;
  hlo_assignment_t as;
  uint32_t *entry_step; /* entry instruction id → step */
  int color;
} remat_state_t;

static const hlo_buffer_t *buffer_of(const remat_state_t *rs, const hlo_instr_t *in) {
  if (in->parent != rs->entry || in->id >= rs->entry->n_instrs)
    return NULL;
  uint32_t v = rs->as.entry_value[in->id];
  if (v == UINT32_MAX || rs->as.value_buffer[v] == UINT32_MAX)
    return NULL;
  return &rs->as.buffers[rs->as.value_buffer[v]];
}

/* The entry instruction running at step p (the control-flow instruction around it when p
 * is inside a loop body or branch). */
static uint32_t entry_index_at(const remat_state_t *rs, uint32_t p) {
  uint32_t best = 0;
  for (uint32_t i = 0; i < rs->entry->n_instrs; i++)
    if (rs->entry_step[i] <= p)
      best = i;
    else
      break;
  return best;
}

static bool evaluate(const remat_state_t *rs, const hlo_instr_t *in, uint32_t p, uint32_t pe,
                     remat_candidate_t *out) {
  const hlo_buffer_t *b = buffer_of(rs, in);
  if (!b || b->indefinite || b->color != rs->color || b->n_values != 1 || b->start >= p ||
      b->end <= p || b->start != rs->entry_step[in->id] || !is_rematerializable(in))
    return false;
  /* The first use after the instruction running at the peak. */
  const hlo_comp_t *e = rs->entry;
  uint32_t q = UINT32_MAX;
  for (uint32_t j = pe + 1; j < e->n_instrs && q == UINT32_MAX; j++)
    for (uint32_t o = 0; o < e->instrs[j]->n_operands; o++)
      if (e->instrs[j]->operands[o] == in) {
        q = j;
        break;
      }
  const hlo_instr_t *at_peak = e->instrs[pe];
  for (uint32_t o = 0; o < at_peak->n_operands; o++)
    if (at_peak->operands[o] == in)
      return false; /* read at the peak: recomputing would not help */
  if (q == UINT32_MAX)
    return false;
  int64_t gain = (int64_t)b->bytes;
  for (uint32_t o = 0; o < in->n_operands; o++) {
    const hlo_buffer_t *ob = buffer_of(rs, in->operands[o]);
    if (!ob || ob->indefinite)
      continue;
    bool live_at_peak = ob->start <= p && p < ob->end;
    if (!live_at_peak && ob->end <= rs->entry_step[q])
      gain -= (int64_t)ob->bytes; /* kept alive across the peak for the recomputation */
  }
  if (gain <= 0)
    return false;
  *out = (remat_candidate_t){in, q, gain, b->bytes, estimate_flops(in)};
  return true;
}

static bool best_candidate(const remat_state_t *rs, remat_candidate_t *best) {
  uint32_t p = rs->as.temp_peak_step[rs->color];
  uint32_t pe = entry_index_at(rs, p);
  bool found = false;
  for (uint32_t i = 0; i < pe && i < rs->entry->n_instrs; i++) {
    remat_candidate_t c = {0};
    if (!evaluate(rs, rs->entry->instrs[i], p, pe, &c))
      continue;
    if (!found || c.gain > best->gain || (c.gain == best->gain && c.flops < best->flops)) {
      *best = c;
      found = true;
    }
  }
  return found;
}

static bool name_taken(const hlo_comp_t *e, const char *name, size_t n) {
  for (uint32_t i = 0; i < e->n_instrs; i++)
    if (e->instrs[i]->name.n == n && memcmp(e->instrs[i]->name.p, name, n) == 0)
      return true;
  return false;
}

/* Inserts a copy of c->in before entry index c->insert_at and points every later use at it. */
static hlo_instr_t *apply(hlo_module_t *m, const remat_candidate_t *c) {
  hlo_comp_t *e = m->entry;
  if (!m->entry_owned) {
    m->entry_cap = (size_t)e->n_instrs * 2 + 16;
    m->entry_owned = malloc(m->entry_cap * sizeof *m->entry_owned);
    if (!m->entry_owned)
      return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory"), NULL;
    memcpy(m->entry_owned, e->instrs, e->n_instrs * sizeof *e->instrs);
    e->instrs = m->entry_owned;
  } else if (e->n_instrs + 1 > m->entry_cap) {
    size_t cap = m->entry_cap * 2;
    hlo_instr_t **grown = realloc(m->entry_owned, cap * sizeof *grown);
    if (!grown)
      return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory"), NULL;
    m->entry_owned = e->instrs = grown;
    m->entry_cap = cap;
  }
  const hlo_instr_t *orig = c->in;
  hlo_instr_t *clone = hbm__hlo_arena_alloc(&m->arena, sizeof *clone);
  hlo_instr_t **ops = hbm__hlo_arena_alloc(&m->arena, (orig->n_operands + 1) * sizeof *ops);
  char name[512];
  if (!clone || !ops)
    return NULL;
  *clone = *orig;
  memcpy(ops, orig->operands, orig->n_operands * sizeof *ops);
  clone->operands = ops;
  clone->is_root = 0;
  clone->remat_of = orig->remat_of ? orig->remat_of : orig;
  int n;
  do {
    n = snprintf(name, sizeof name, "%.*s.remat%u", (int)(orig->name.n < 400 ? orig->name.n : 400),
                 orig->name.p, ++m->n_remat);
  } while (name_taken(e, name, (size_t)n));
  clone->name.p = hbm__hlo_arena_strndup(&m->arena, name, (size_t)n);
  clone->name.n = (uint32_t)n;
  if (!clone->name.p)
    return NULL;
  memmove(&e->instrs[c->insert_at + 1], &e->instrs[c->insert_at],
          (e->n_instrs - c->insert_at) * sizeof *e->instrs);
  e->instrs[c->insert_at] = clone;
  e->n_instrs++;
  m->n_instrs++;
  for (uint32_t i = c->insert_at; i < e->n_instrs; i++) {
    hlo_instr_t *u = e->instrs[i];
    u->id = i;
    if (u == clone)
      continue;
    for (uint32_t o = 0; o < u->n_operands; o++)
      if (u->operands[o] == orig)
        u->operands[o] = clone;
  }
  return clone;
}

static hbm_status_t plan_once(remat_state_t *rs, const hlo_plan_opts_t *opt, uint64_t *used) {
  hbm__hlo_assignment_free(&rs->as);
  free(rs->entry_step);
  rs->entry_step = NULL;
  hbm_status_t st = hbm__hlo_assign_opts(rs->plan->module, &rs->as, opt);
  if (st == HBM_OK)
    st = hbm__hlo_simulate_heap(&rs->as, opt);
  if (st != HBM_OK)
    return st;
  rs->entry_step = malloc(((size_t)rs->entry->n_instrs + 1) * sizeof *rs->entry_step);
  if (!rs->entry_step)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  for (uint32_t s = 0; s < rs->as.n_steps; s++) {
    const hlo_instr_t *in = rs->as.steps[s].instr;
    if (in->parent == rs->entry)
      rs->entry_step[in->id] = s;
  }
  uint64_t indefinite = 0;
  for (uint32_t i = 0; i < rs->as.n_buffers; i++)
    if (rs->as.buffers[i].indefinite && rs->as.buffers[i].color == rs->color)
      indefinite += rs->as.buffers[i].bytes;
  uint64_t heap = rs->color < rs->as.n_colors ? rs->as.heap_bytes[rs->color] : 0;
  *used = rs->plan->opt.reserved + indefinite + heap;
  return HBM_OK;
}

hbm_status_t hbm__plan_remat(hbm_plan_t *plan, const hlo_plan_opts_t *opt) {
  remat_state_t rs = {.plan = plan, .entry = plan->module->entry, .color = plan->opt.space_color};
  hlo_vec_t done;
  hbm__hlo_vec_init(&done, sizeof(hbm_remat_info_t));
  hbm_status_t st = HBM_OK;
  uint64_t extra_bytes = 0;
  for (int iter = 0; iter < MAX_REMAT_ITERATIONS; iter++) {
    uint64_t used = 0;
    if ((st = plan_once(&rs, opt, &used)) != HBM_OK)
      break;
    if (used <= plan->opt.memory)
      break;
    remat_candidate_t c = {0};
    if (!best_candidate(&rs, &c))
      break;
    hlo_instr_t *clone = apply(plan->module, &c);
    if (!clone) {
      st = hbm_last_status();
      break;
    }
    hbm_remat_info_t info = {
        hbm__hlo_arena_strndup(&plan->module->arena, c.in->name.p, c.in->name.n), clone->name.p,
        c.bytes, c.flops};
    uint64_t moved = c.bytes;
    for (uint32_t o = 0; o < c.in->n_operands; o++)
      moved += c.in->operands[o]->shape->bytes;
    extra_bytes += moved;
    if (!info.instruction || !hbm__hlo_vec_push(&done, &info)) {
      st = hbm_last_status();
      break;
    }
  }
  hbm__hlo_assignment_free(&rs.as);
  free(rs.entry_step);
  free(plan->remats);
  plan->remats = done.data;
  plan->n_remats = done.len;
  plan->remat_extra_bytes = extra_bytes;
  uint64_t flops = 0;
  for (size_t i = 0; i < done.len; i++)
    flops += plan->remats[i].flops;
  plan->summary.remat_extra_flops = flops;
  return st;
}
