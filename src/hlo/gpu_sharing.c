/* gpu_sharing.c — XLA's GPU hook for buffer sharing (xla/service/gpu/buffer_sharing.cc,
 * CanShareBufferHint), which decides on the GPU whether a result may be written over an
 * operand that dies at it (the heap's ShareWith, and the buffer assigner's reuse of an
 * output allocation by a temporary that ends where the output begins):
 *
 * - a synchronous all-reduce: yes (NCCL reduces in place), for its only operand or the
 *   operand feeding that result element;
 * - custom calls: no, except cuSOLVER's Cholesky (result {0}) and a cuBLASLt matmul's bias
 *   (operand 2, when beta is not 0); cuBLASLt's workspace {1} never;
 * - fusions (FusionCanShareBufferHint): the same number of elements of the same width, and
 *   every instruction reached from the fused parameter element-wise on it (not a copy), a
 *   bitcast or a tuple — with the exceptions for a dynamic-update-slice root (its update
 *   operand, a dynamic-slice of the same slice), a scatter root (its inputs) and a
 *   reduction's hero (which the reduction emitter reads first) — on a path that reaches
 *   the result.
 * Anything else: no hint (XLA's generic rule applies). */
#include "alias_internal.h"

#include <stdlib.h>
#include <string.h>

/* The instructions of a fusion body that read each one: a CSR over the body's indices. */
typedef struct users {
  uint32_t *first, *list;
} users_t;

static bool build_users(const hlo_comp_t *body, users_t *u) {
  uint32_t n = body->n_instrs, total = 0;
  for (uint32_t j = 0; j < n; j++)
    total += body->instrs[j]->n_operands;
  u->first = calloc((size_t)n + 2, sizeof *u->first);
  u->list = malloc(((size_t)total + 1) * sizeof *u->list);
  if (!u->first || !u->list)
    return false;
  for (uint32_t j = 0; j < n; j++)
    for (uint32_t o = 0; o < body->instrs[j]->n_operands; o++)
      u->first[body->instrs[j]->operands[o]->id + 2]++;
  for (uint32_t j = 0; j < n; j++)
    u->first[j + 2] += u->first[j + 1];
  for (uint32_t j = 0; j < n; j++) /* a user reading twice is listed twice: checked twice */
    for (uint32_t o = 0; o < body->instrs[j]->n_operands; o++)
      u->list[u->first[body->instrs[j]->operands[o]->id + 1]++] = j;
  return true;
}

static uint32_t operand_index(const hlo_instr_t *user, const hlo_instr_t *operand) {
  for (uint32_t o = 0; o < user->n_operands; o++)
    if (user->operands[o] == operand)
      return o;
  return UINT32_MAX;
}

static bool elementwise_on(const hlo_instr_t *user, uint32_t o) {
  if (user->opcode == HLO_OP_DYNAMIC_UPDATE_SLICE)
    return o == 0;
  return (hbm__opcode_flags((hlo_opcode_t)user->opcode) & HLO_F_ELEMENTWISE) != 0;
}

static bool effective_scalar(const hlo_shape_t *s) {
  return s->etype != HLO_T_TUPLE && hbm__shape_elements(s) == 1;
}

/* A dynamic-slice reading exactly the slice the dynamic-update-slice root writes (or both
 * single elements) does not stop the sharing. */
static bool same_slice(const hlo_instr_t *ds, const hlo_instr_t *dus) {
  if (effective_scalar(ds->shape) && effective_scalar(dus->operands[1]->shape))
    return true;
  for (uint32_t i = 1; i < ds->n_operands; i++)
    if (i + 1 >= dus->n_operands || ds->operands[i] != dus->operands[i + 1])
      return false;
  return true;
}

/* May user u, reached from h, be on the path of a shared buffer? */
static bool user_allows(const hlo_instr_t *u, const hlo_instr_t *h, const hlo_instr_t *root,
                        const hlo_instr_t *hero) {
  uint32_t o = operand_index(u, h);
  if (u == root && u->opcode == HLO_OP_SCATTER) {
    uint32_t inputs = u->shape->etype == HLO_T_TUPLE ? u->shape->rank : 1;
    uint32_t times = 0;
    for (uint32_t k = 0; k < u->n_operands; k++)
      times += u->operands[k] == h;
    if (o < inputs && times == 1)
      return true;
  }
  if (root->opcode == HLO_OP_DYNAMIC_UPDATE_SLICE && u->opcode == HLO_OP_DYNAMIC_SLICE &&
      root->n_operands >= 2 && u->n_operands >= 1 && root->operands[0] == u->operands[0] &&
      hbm__shape_elements(u->shape) == hbm__shape_elements(root->operands[1]->shape))
    return same_slice(u, root);
  if ((!elementwise_on(u, o) || u->opcode == HLO_OP_COPY) && u->opcode != HLO_OP_BITCAST &&
      u->opcode != HLO_OP_TUPLE && u != hero)
    return u == root && u->opcode == HLO_OP_DYNAMIC_UPDATE_SLICE && o == 1;
  return true;
}

/* The reduction emitter's hero: the first reduce among the fusion's results. */
static const hlo_instr_t *reduction_hero(const hlo_instr_t *fused_root) {
  uint32_t n = fused_root->opcode == HLO_OP_TUPLE ? fused_root->n_operands : 1;
  for (uint32_t e = 0; e < n; e++) {
    const hlo_instr_t *r =
        fused_root->opcode == HLO_OP_TUPLE ? fused_root->operands[e] : fused_root;
    if (r->opcode == HLO_OP_BITCAST && r->n_operands == 1)
      r = r->operands[0];
    if (r->opcode == HLO_OP_REDUCE)
      return r;
  }
  return NULL;
}

static bool same_size_elements(const hlo_shape_t *a, const hlo_shape_t *b) {
  if (a->etype == HLO_T_TUPLE || b->etype == HLO_T_TUPLE)
    return false;
  return hbm__shape_elements(a) == hbm__shape_elements(b) &&
         hbm__etype_bits((hlo_etype_t)a->etype) == hbm__etype_bits((hlo_etype_t)b->etype);
}

/* FusionCanShareBufferHint for fused parameter i and result element e (0 for an array). */
static int fusion_hint(const hlo_instr_t *fusion, const hlo_comp_t *body, uint32_t i, uint32_t e) {
  const hlo_instr_t *froot = body->root;
  const hlo_instr_t *output = froot;
  if (froot->opcode == HLO_OP_TUPLE) {
    if (e >= froot->n_operands)
      return 0;
    output = froot->operands[e];
  }
  if (!same_size_elements(fusion->operands[i]->shape, output->shape))
    return 0;
  const hlo_instr_t *root = output;
  if (root->opcode == HLO_OP_BITCAST && root->n_operands == 1)
    root = root->operands[0];
  const hlo_instr_t *hero = reduction_hero(froot);
  users_t u = {0};
  uint8_t *seen = calloc((size_t)body->n_instrs + 1, 1);
  uint32_t *queue = malloc(((size_t)body->n_instrs + 1) * sizeof *queue);
  int result = -1;
  if (!seen || !queue || !build_users(body, &u))
    goto done;
  uint32_t head = 0, tail = 0;
  queue[tail++] = body->params[i]->id;
  seen[body->params[i]->id] = 1;
  bool found = false;
  result = 0;
  while (head < tail) {
    const hlo_instr_t *h = body->instrs[queue[head++]];
    found |= h == output;
    if (h == hero)
      continue;
    for (uint32_t q = u.first[h->id]; q < u.first[h->id + 1]; q++) {
      const hlo_instr_t *user = body->instrs[u.list[q]];
      if (!seen[user->id]) {
        seen[user->id] = 1;
        queue[tail++] = user->id;
      }
      if (!user_allows(user, h, root, hero))
        goto done;
    }
  }
  /* a multi-output fusion whose result is not element-wise: no other result reached */
  if (froot->opcode == HLO_OP_TUPLE &&
      !(hbm__opcode_flags((hlo_opcode_t)root->opcode) & HLO_F_ELEMENTWISE))
    for (uint32_t k = 0; k < froot->n_operands; k++)
      if (froot->operands[k] != output && seen[froot->operands[k]->id])
        goto done;
  result = found;
done:
  free(u.first);
  free(u.list);
  free(seen);
  free(queue);
  return result;
}

/* A number after "key": in a JSON backend config, 0 when absent. */
static double json_number(const hlo_module_t *m, const hlo_instr_t *in, const char *key) {
  const char *t = m->text + in->text.start, *end = t + in->text.len;
  size_t k = strlen(key);
  for (const char *p = t; p + k < end; p++)
    if (!memcmp(p, key, k))
      return strtod(p + k, NULL);
  return 0;
}

int hbm__gpu_can_share(const hlo_module_t *m, const hlo_instr_t *user, uint32_t i, uint32_t e) {
  switch ((hlo_opcode_t)user->opcode) {
  case HLO_OP_ALL_REDUCE:
    return user->n_operands == 1 || (user->shape->etype == HLO_T_TUPLE && e == i);
  case HLO_OP_CUSTOM_CALL: {
    hlo_str_t target = user->meta->custom_call_target;
    if (HLO_STR_IS(target, "__cusolver$cholesky"))
      return e == 0 && user->shape->etype == HLO_T_TUPLE;
    if (HLO_STR_IS(target, "__cublas$lt$matmul") || HLO_STR_IS(target, "__cublas$lt$matmul$f8"))
      return i == 2 && e == 0 && json_number(m, user, "\"beta\":") != 0;
    return 0;
  }
  case HLO_OP_FUSION: {
    const hlo_comp_t *body = NULL;
    for (uint32_t k = 0; k < user->n_called && !body; k++)
      if (user->called[k].role == HLO_CALL_CALLS)
        body = user->called[k].comp;
    if (!body || i >= body->n_params || !body->params[i])
      return 0;
    return fusion_hint(user, body, i, e);
  }
  default: return -1;
  }
}
