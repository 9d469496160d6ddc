/* value_order.c — XLA's HloValue ids, as an order over hbm's buffers. XLA's dataflow
 * analysis numbers values as it defines them: computations in post-order (callees first, as
 * the optimized module's text lists them), each computation's instructions in
 * MakeInstructionPostOrder's order, each instruction's subshapes in pre-order. The heap
 * simulator breaks ties (equal size and duration; equal start and end of events) by these
 * ids, so placing temporaries in this order puts equal ones where XLA puts them. */
#include "hlo.h"

#include <stdlib.h>
#include <string.h>

/* XLA's HloComputation::MakeInstructionPostOrder over one computation: from each
 * instruction without users (in the computation's order), a depth-first walk with an
 * explicit stack that emits an instruction once its operands are emitted, operands pushed
 * last to first (so the first is walked first); an instruction pushed again before it is
 * expanded is expanded at its latest push, as XLA's stack does. pos[id] gets the rank.
 * scratch: n_instrs + the operands of every instruction entries; state: n_instrs. */
void hbm__hlo_instruction_post_order(const hlo_comp_t *c, uint32_t *pos, uint32_t *stack,
                                     uint8_t *state, uint32_t *users) {
  enum { NEW = 0, VISITING = 1, VISITED = 2 };
  uint32_t n = c->n_instrs, next = 0;
  memset(state, 0, n);
  memset(users, 0, n * sizeof *users);
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t k = 0; k < c->instrs[i]->n_operands; k++)
      if (c->instrs[i]->operands[k]->parent == c)
        users[c->instrs[i]->operands[k]->id]++;
  for (uint32_t r = 0; r < n; r++) {
    if (users[r] != 0 || state[r] == VISITED)
      continue;
    size_t top = 0;
    stack[top++] = r;
    while (top > 0) {
      uint32_t cur = stack[top - 1];
      if (state[cur] != NEW) {
        top--;
        if (state[cur] != VISITED) {
          state[cur] = VISITED;
          pos[cur] = next++;
        }
        continue;
      }
      state[cur] = VISITING;
      const hlo_instr_t *in = c->instrs[cur];
      for (uint32_t k = in->n_operands; k-- > 0;) {
        const hlo_instr_t *op = in->operands[k];
        if (op->parent == c && state[op->id] != VISITED)
          stack[top++] = op->id;
      }
    }
  }
  for (uint32_t i = 0; i < n; i++) /* unreachable (a cycle): after everything, in order */
    if (state[i] != VISITED)
      pos[i] = next++;
}

/* Per buffer: the XLA id of its representative value (the first defined: the one XLA's heap
 * simulator allocates, the others sharing it) as a sortable key (computation, post-order
 * position, subshape), UINT64_MAX for a buffer with none; NULL when memory ran out. */
uint64_t *hbm__hlo_xla_value_keys(const hlo_assignment_t *as) {
  uint32_t n_comps = 0;
  size_t most = 1, most_scratch = 1;
  for (uint32_t v = 0; v < as->n_values; v++) {
    const hlo_comp_t *c = as->values[v].instr ? as->values[v].instr->parent : NULL;
    if (!c)
      continue;
    n_comps = c->id > n_comps ? c->id : n_comps;
    size_t ops = c->n_instrs;
    for (uint32_t i = 0; i < c->n_instrs; i++)
      ops += c->instrs[i]->n_operands;
    most = c->n_instrs > most ? c->n_instrs : most;
    most_scratch = ops > most_scratch ? ops : most_scratch;
  }
  uint64_t *key = malloc(((size_t)as->n_buffers + 1) * sizeof *key);
  uint32_t **pos = calloc((size_t)n_comps + 1, sizeof *pos);
  uint32_t *stack = malloc(most_scratch * sizeof *stack), *users = malloc(most * sizeof *users);
  uint8_t *state = malloc(most);
  bool ok = key && pos && stack && users && state;
  for (uint32_t b = 0; ok && b < as->n_buffers; b++)
    key[b] = UINT64_MAX;
  for (uint32_t v = 0; ok && v < as->n_values; v++) {
    const hlo_value_t *val = &as->values[v];
    uint32_t b = as->value_buffer[v];
    const hlo_comp_t *c = val->instr ? val->instr->parent : NULL;
    if (b >= as->n_buffers || !c || as->buffers[b].value != v)
      continue;
    if (!pos[c->id]) {
      pos[c->id] = malloc(((size_t)c->n_instrs + 1) * sizeof **pos);
      if (!(ok = pos[c->id] != NULL))
        break;
      hbm__hlo_instruction_post_order(c, pos[c->id], stack, state, users);
    }
    uint32_t sub = val->subshape < (1u << 20) ? val->subshape : (1u << 20) - 1;
    uint64_t k = ((uint64_t)c->id << 44) | ((uint64_t)pos[c->id][val->instr->id] << 20) | sub;
    key[b] = k < key[b] ? k : key[b];
  }
  for (uint32_t c = 0; pos && c <= n_comps; c++)
    free(pos[c]);
  free(pos);
  free(stack);
  free(users);
  free(state);
  if (!ok) {
    free(key);
    return NULL;
  }
  return key;
}
