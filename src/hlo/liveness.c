/* liveness.c — from the dataflow of alias.c to logical buffers with live ranges. Values
 * are joined into buffers in program order (union-find), each join checked against what
 * is live at that point; the entry's outputs get their own buffers (copies where an output
 * is a parameter, a constant or repeated) unless input_output_alias lets them live in a
 * donated parameter. A buffer is live over [first definition, last use], where a use is any
 * instruction reading a position that holds one of its values; parameters, constants,
 * outputs and thread-local values are "indefinite" (live for the whole program, outside the
 * temp heap, as XProf counts them). Element-wise reuse ends an operand's range at the step
 * whose result takes its memory, and puts both in one heap chunk (share group). */
#include "alias_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct union_find {
  uint32_t *parent;
  uint32_t *def;  /* min def_step of the set */
  uint32_t *last; /* max last_use of the set */
  uint32_t *flags;
  uint64_t *bytes;
} union_find_t;

static uint32_t uf_find(union_find_t *u, uint32_t x) {
  while (u->parent[x] != x) {
    u->parent[x] = u->parent[u->parent[x]];
    x = u->parent[x];
  }
  return x;
}

static uint32_t uf_union(union_find_t *u, uint32_t a, uint32_t b) {
  a = uf_find(u, a);
  b = uf_find(u, b);
  if (a == b)
    return a;
  /* Keep the earlier-defined root, so a set's root is its defining value. */
  if (u->def[b] < u->def[a] || (u->def[b] == u->def[a] && b < a)) {
    uint32_t t = a;
    a = b;
    b = t;
  }
  u->parent[b] = a;
  if (u->last[b] > u->last[a])
    u->last[a] = u->last[b];
  u->flags[a] |= u->flags[b];
  if (u->bytes[b] > u->bytes[a])
    u->bytes[a] = u->bytes[b];
  return a;
}

#define IDENTITY (HLO_V_PARAM | HLO_V_CONST | HLO_V_THREAD | HLO_V_LOOP | HLO_V_BRANCH)

/* May this set's memory be overwritten by another value? */
static bool writable(uint32_t flags) {
  if (flags & (HLO_V_CONST | HLO_V_THREAD))
    return false;
  return !(flags & HLO_V_PARAM) || (flags & HLO_V_WRITABLE);
}

/* must_alias: the module is XLA's after optimizations, where copy insertion has already
 * made every loop, branch and in-place join safe: XLA's alias analysis joins them all
 * (HloAliasAnalysis), without looking at liveness. */
static void apply_edge(union_find_t *u, const hlo_value_t *val, const hlo_edge_t *e,
                       bool must_alias) {
  uint32_t a = uf_find(u, e->a), b = uf_find(u, e->b);
  if (a == b)
    return;
  if (e->kind == HLO_EDGE_SHARE)
    return; /* a hint for the heap and for reuse.c, not a join */
  if (must_alias) {
    uf_union(u, a, b);
    return;
  }
  switch (e->kind) {
  case HLO_EDGE_FORCE: uf_union(u, a, b); break;
  case HLO_EDGE_LOOP_INIT:
    /* The body never writes this element: the loop reads the initial buffer in place. Else
     * the loop may take the initial buffer only if nothing reads it afterwards. */
    if (e->c || (u->last[a] <= e->step && writable(u->flags[a]) && u->bytes[a] == u->bytes[b]))
      uf_union(u, a, b);
    break;
  case HLO_EDGE_LOOP_BODY:
    /* The body's new value may live in the loop buffer if the old value (the body
     * parameter) is dead when it is written. */
    if (val[e->c].last_use <= val[e->a].def_step && !(u->flags[a] & IDENTITY) &&
        u->last[a] <= e->step && u->bytes[a] == u->bytes[b])
      uf_union(u, a, b);
    break;
  case HLO_EDGE_BRANCH:
    if (val[e->a].def_step >= e->step && val[e->a].def_step <= e->c && !(u->flags[a] & IDENTITY) &&
        u->last[a] <= e->c && u->bytes[a] == u->bytes[b])
      uf_union(u, a, b);
    break;
  case HLO_EDGE_INPLACE:
    if (u->last[a] <= e->step && writable(u->flags[a]) && u->bytes[a] == u->bytes[b] &&
        u->def[b] == e->step)
      uf_union(u, a, b);
    break;
  default: break;
  }
}

static bool uf_init(union_find_t *u, const hlo_value_t *val, uint32_t n) {
  u->parent = malloc((n + 1) * sizeof *u->parent);
  u->def = malloc((n + 1) * sizeof *u->def);
  u->last = malloc((n + 1) * sizeof *u->last);
  u->flags = malloc((n + 1) * sizeof *u->flags);
  u->bytes = malloc((n + 1) * sizeof *u->bytes);
  if (!u->parent || !u->def || !u->last || !u->flags || !u->bytes)
    return false;
  for (uint32_t i = 0; i < n; i++) {
    u->parent[i] = i;
    u->def[i] = val[i].def_step;
    u->last[i] = val[i].last_use;
    u->flags[i] = val[i].flags;
    u->bytes[i] = val[i].bytes;
  }
  return true;
}

static void uf_free(union_find_t *u) {
  free(u->parent);
  free(u->def);
  free(u->last);
  free(u->flags);
  free(u->bytes);
}

/* The entry parameter value at (parameter p, subshape k), or UINT32_MAX. */
static uint32_t entry_param_value(const hlo_dataflow_t *df, int64_t p, uint32_t k) {
  const hlo_comp_t *e = df->m->entry;
  if (p < 0 || (uint64_t)p >= e->n_params || !e->params[p])
    return UINT32_MAX;
  const hlo_instr_t *param = e->params[p];
  if (k >= param->shape->n_subshapes)
    return UINT32_MAX;
  /* The entry frame is frame 0: its positions start at frame_pos[0]. */
  uint32_t off = HLO_VEC_AT(&df->frame_pos, uint32_t, param->id);
  return off == UINT32_MAX ? UINT32_MAX : df->pool[off + k];
}

typedef struct outputs_ctx {
  hlo_dataflow_t *df;
  union_find_t *u;
  uint8_t *claimed; /* per value (set root): already an output slot */
} outputs_ctx_t;

/* A new value: the copy XLA's copy insertion makes for an output that cannot be the
 * buffer it comes from. */
static bool add_output_copy(outputs_ctx_t *c, uint32_t v, uint32_t root_step) {
  hlo_dataflow_t *df = c->df;
  hlo_value_t copy = HLO_VEC_AT(&df->values, hlo_value_t, v);
  copy.def_step = root_step;
  copy.last_use = HLO_LIVE_OUT_STEP;
  copy.flags = HLO_V_OUTPUT | HLO_V_COPY;
  copy.instr = df->m->entry->root;
  return hbm__hlo_vec_push(&df->values, &copy);
}

/* realloc that keeps the old block (and clears *ok) when memory runs out. */
static void *resize_or_keep(void *items, size_t bytes, bool *ok) {
  void *grown = realloc(items, bytes);
  if (!grown)
    *ok = false;
  return grown ? grown : items;
}

static bool assign_outputs(hlo_dataflow_t *df, union_find_t *u, uint8_t **claimed_out,
                           uint32_t *n_values, bool must_alias) {
  const hlo_instr_t *root = df->m->entry->root;
  uint32_t n_out = (uint32_t)df->outputs.len;
  uint32_t root_step = (uint32_t)df->steps.len - 1;
  uint32_t n = *n_values;
  uint8_t *claimed = calloc(n + n_out + 1, 1);
  if (!claimed)
    return false;
  /* Copies are added at the end: grow the union-find arrays for them first. */
  size_t cap = n + n_out + 1;
  bool grown = true;
  u->parent = resize_or_keep(u->parent, cap * sizeof *u->parent, &grown);
  u->def = resize_or_keep(u->def, cap * sizeof *u->def, &grown);
  u->last = resize_or_keep(u->last, cap * sizeof *u->last, &grown);
  u->flags = resize_or_keep(u->flags, cap * sizeof *u->flags, &grown);
  u->bytes = resize_or_keep(u->bytes, cap * sizeof *u->bytes, &grown);
  if (!grown) {
    free(claimed);
    return false;
  }
  outputs_ctx_t c = {df, u, claimed};
  for (uint32_t k = 0; k < n_out; k++) {
    uint32_t v = HLO_VEC_AT(&df->outputs, uint32_t, k);
    uint32_t r = uf_find(u, v);
    /* input_output_alias: this output lives in a donated parameter's buffer. */
    uint32_t pv = UINT32_MAX;
    for (uint32_t a = 0; a < df->m->n_io_alias && pv == UINT32_MAX; a++) {
      const hlo_alias_pair_t *pair = &df->m->io_alias[a];
      if (hbm__shape_index_offset(root->shape, pair->out, pair->n_out) == k) {
        const hlo_instr_t *param =
            pair->operand >= 0 && (uint64_t)pair->operand < df->m->entry->n_params
                ? df->m->entry->params[pair->operand]
                : NULL;
        uint32_t in_k =
            param ? hbm__shape_index_offset(param->shape, pair->in, pair->n_in) : UINT32_MAX;
        pv = in_k == UINT32_MAX ? UINT32_MAX : entry_param_value(df, pair->operand, in_k);
      }
    }
    if (pv != UINT32_MAX) {
      uint32_t pr = uf_find(u, pv);
      if (pr != r && !claimed[r] && u->bytes[r] == u->bytes[pr]) {
        /* Written in place if the parameter is dead by then; else copied in at the end. In
         * XLA's optimized modules the alias is one buffer (HloAliasAnalysis), copies
         * already inserted, whatever computes the output (a loop, a conditional). */
        const hlo_value_t *pval = &HLO_VEC_AT(&df->values, hlo_value_t, pv);
        if (must_alias || (!(u->flags[r] & IDENTITY) && pval->last_use <= u->def[r]))
          pr = uf_union(u, pr, r);
      }
      u->flags[pr] |= HLO_V_OUTPUT | HLO_V_ALIASED;
      claimed[pr] = 1;
      continue;
    }
    if ((u->flags[r] & (HLO_V_PARAM | HLO_V_CONST | HLO_V_THREAD)) || claimed[r]) {
      if (!add_output_copy(&c, v, root_step))
        break;
      uint32_t id = n++;
      const hlo_value_t *cv = &HLO_VEC_AT(&df->values, hlo_value_t, id);
      u->parent[id] = id;
      u->def[id] = cv->def_step;
      u->last[id] = cv->last_use;
      u->flags[id] = cv->flags;
      u->bytes[id] = cv->bytes;
      claimed[id] = 1;
      continue;
    }
    u->flags[r] |= HLO_V_OUTPUT;
    claimed[r] = 1;
  }
  *claimed_out = claimed;
  *n_values = n;
  return n == df->values.len;
}

static bool build_buffers(hlo_dataflow_t *df, union_find_t *u, hlo_assignment_t *as) {
  uint32_t n = as->n_values;
  uint32_t n_steps = as->n_steps;
  as->value_buffer = malloc((n + 1) * sizeof *as->value_buffer);
  uint32_t *root_buffer = malloc((n + 1) * sizeof *root_buffer);
  as->buffers = calloc(n + 1, sizeof *as->buffers);
  if (!as->value_buffer || !root_buffer || !as->buffers) {
    free(root_buffer);
    return false;
  }
  for (uint32_t i = 0; i < n; i++)
    root_buffer[i] = UINT32_MAX;
  uint32_t nb = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t r = uf_find(u, i);
    if (u->bytes[r] == 0) {
      as->value_buffer[i] = UINT32_MAX;
      continue;
    }
    if (root_buffer[r] == UINT32_MAX) {
      hlo_buffer_t *b = &as->buffers[nb];
      const hlo_value_t *rv = &as->values[r];
      b->value = r;
      b->flags = u->flags[r];
      b->bytes = u->bytes[r];
      b->color = rv->color;
      b->indefinite = (b->flags & (HLO_V_PARAM | HLO_V_CONST | HLO_V_OUTPUT | HLO_V_THREAD)) != 0;
      if (b->indefinite) {
        b->start = 0;
        b->end = n_steps;
      } else {
        b->start = u->def[r];
        b->end = u->last[r] >= n_steps ? n_steps : u->last[r] + 1;
      }
      b->share_group = nb;
      b->first_def = u->def[r];
      root_buffer[r] = nb++;
    }
    hlo_buffer_t *b = &as->buffers[root_buffer[r]];
    b->n_values++;
    if (as->values[i].unpadded_bytes > b->unpadded_bytes)
      b->unpadded_bytes = as->values[i].unpadded_bytes;
    as->value_buffer[i] = root_buffer[r];
  }
  as->n_buffers = nb;
  free(root_buffer);
  return true;
}

static uint32_t group_find(hlo_buffer_t *b, uint32_t x) {
  while (b[x].share_group != x) {
    b[x].share_group = b[b[x].share_group].share_group;
    x = b[x].share_group;
  }
  return x;
}

/* XLA's ShareWith: an element-wise result takes the memory of an operand that dies at it.
 * XLA's heap simulator does it only between buffers of one value each ("we don't support
 * sharing an aliased buffer with its operand") and when the result's instruction reads the
 * instruction defining the operand's value: single_values asks for those rules. */
static void apply_shares(const hlo_dataflow_t *df, hlo_assignment_t *as, bool single_values) {
  uint8_t *taken = calloc(as->n_buffers + 1, 1); /* 1: gave its memory, 2: took one */
  if (!taken)
    return; /* sharing only lowers the estimate; without memory for it we plan without */
  for (size_t i = 0; i < df->edges.len; i++) {
    const hlo_edge_t *e = &HLO_VEC_AT(&df->edges, hlo_edge_t, i);
    if (e->kind != HLO_EDGE_SHARE)
      continue;
    uint32_t bx = as->value_buffer[e->a], by = as->value_buffer[e->b];
    if (bx == UINT32_MAX || by == UINT32_MAX || bx == by)
      continue;
    hlo_buffer_t *x = &as->buffers[bx], *y = &as->buffers[by];
    if (x->indefinite || y->indefinite || (taken[bx] & 1) || (taken[by] & 2) ||
        x->end != e->step + 1 || y->start != e->step || x->bytes != y->bytes ||
        x->color != y->color || (single_values && (x->n_values > 1 || y->n_values > 1 || !e->c)))
      continue;
    x->end = e->step; /* its memory holds the result from this step on */
    x->gives = 1;
    y->takes = 1;
    taken[bx] |= 1;
    taken[by] |= 2;
    uint32_t gx = group_find(as->buffers, bx), gy = group_find(as->buffers, by);
    if (gx != gy)
      as->buffers[gy].share_group = gx;
  }
  for (uint32_t i = 0; i < as->n_buffers; i++)
    as->buffers[i].share_group = group_find(as->buffers, i);
  free(taken);
}

/* A copy of an assignment's steps, values and buffers (before reuse.c joins temporaries to
 * output allocations), to be finished without that reuse; NULL when memory ran out (the
 * caller then plans the bound again from the module). */
static hlo_assignment_t *copy_buffers(const hlo_assignment_t *as) {
  hlo_assignment_t *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->n_steps = as->n_steps;
  c->n_values = as->n_values;
  c->n_buffers = as->n_buffers;
  c->steps = malloc(((size_t)as->n_steps + 1) * sizeof *c->steps);
  c->values = malloc(((size_t)as->n_values + 1) * sizeof *c->values);
  c->value_buffer = malloc(((size_t)as->n_values + 1) * sizeof *c->value_buffer);
  c->buffers = malloc(((size_t)as->n_buffers + 1) * sizeof *c->buffers);
  if (!c->steps || !c->values || !c->value_buffer || !c->buffers) {
    hbm__hlo_assignment_free(c);
    free(c);
    return NULL;
  }
  memcpy(c->steps, as->steps, as->n_steps * sizeof *c->steps);
  memcpy(c->values, as->values, as->n_values * sizeof *c->values);
  memcpy(c->value_buffer, as->value_buffer, as->n_values * sizeof *c->value_buffer);
  memcpy(c->buffers, as->buffers, as->n_buffers * sizeof *c->buffers);
  return c;
}

hbm_status_t hbm__hlo_assign(const hlo_module_t *m, hlo_assignment_t *as) {
  return hbm__hlo_assign_opts(m, as, NULL);
}

hbm_status_t hbm__hlo_assign_opts(const hlo_module_t *m, hlo_assignment_t *as,
                                  const hlo_plan_opts_t *opt) {
  memset(as, 0, sizeof *as);
  hlo_dataflow_t df;
  hbm_status_t st =
      hbm__dataflow_run(m, &df, opt ? (int)(opt->xla_allocations & HLO_XLA_BACKEND) : 0);
  if (st != HBM_OK)
    return st;
  uint32_t n = (uint32_t)df.values.len;
  union_find_t u = {0};
  uint8_t *claimed = NULL;
  bool ok = uf_init(&u, (const hlo_value_t *)df.values.data, n);
  for (size_t i = 0; ok && i < df.edges.len; i++)
    apply_edge(&u, (const hlo_value_t *)df.values.data, &HLO_VEC_AT(&df.edges, hlo_edge_t, i),
               opt && opt->xla_allocations && m->is_scheduled);
  as->n_steps = (uint32_t)df.steps.len;
  ok = ok && assign_outputs(&df, &u, &claimed, &n, opt && opt->xla_allocations && m->is_scheduled);
  if (ok) {
    /* Hand the arrays over to the assignment. */
    as->values = df.values.data;
    as->n_values = n;
    df.values.data = NULL;
    as->steps = df.steps.data;
    df.steps.data = NULL;
    ok = build_buffers(&df, &u, as);
  }
  bool reuse = ok && opt && opt->xla_allocations && !(opt->xla_allocations & HLO_XLA_NO_REUSE);
  hlo_assignment_t *before = reuse ? copy_buffers(as) : NULL;
  if (ok && opt && opt->xla_allocations)
    ok = hbm__reuse_output_allocations(&df, as, reuse);
  if (ok)
    apply_shares(&df, as, opt && opt->xla_allocations);
  if (ok && before && as->contended) { /* finished as with HLO_XLA_NO_REUSE */
    ok = hbm__reuse_output_allocations(&df, before, false);
    apply_shares(&df, before, true);
    as->without_reuse = before;
    before = NULL;
  }
  hbm__hlo_assignment_free(before);
  free(before);
  if (ok) {
    /* The entry frame (frame 0) keeps its positions: remat.c reads them. */
    const hlo_comp_t *e = m->entry;
    as->entry_value = malloc(((size_t)e->n_instrs + 1) * sizeof *as->entry_value);
    ok = as->entry_value != NULL;
    for (uint32_t i = 0; ok && i < e->n_instrs; i++) {
      uint32_t off = HLO_VEC_AT(&df.frame_pos, uint32_t, i);
      as->entry_value[i] = off == UINT32_MAX ? UINT32_MAX : df.pool[off];
    }
  }
  free(claimed);
  uf_free(&u);
  hbm__dataflow_free(&df);
  if (!ok) {
    hbm__hlo_assignment_free(as);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (planner)");
  }
  return HBM_OK;
}

void hbm__hlo_assignment_free(hlo_assignment_t *as) {
  if (!as)
    return;
  if (as->without_reuse) {
    hbm__hlo_assignment_free(as->without_reuse);
    free(as->without_reuse);
  }
  free(as->steps);
  free(as->values);
  free(as->value_buffer);
  free(as->entry_value);
  free(as->buffers);
  free(as->heap_bytes);
  free(as->temp_peak);
  free(as->temp_peak_step);
  free(as->segs);
  memset(as, 0, sizeof *as);
}
