/* plan_values.c — every value's placement in a plan from HLO (`hbm plan --json --values`):
 * the instruction and shape index naming it (as XLA's *-buffer-assignment.txt does), the
 * kind of allocation holding it, which allocation, its offset there and its size. This is
 * what lets a plan be checked against XLA's assignment value by value, not only in totals. */
#include "plan_internal.h"
#include "profile/json_out.h"

#include <stdio.h>

/* XLA's ShapeIndex of the subshape at pre-order index k of s: "{}", "{1}", "{0,2}". */
static void shape_index_text(const hlo_shape_t *s, uint32_t k, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "{");
  bool first = true;
  while (k > 0 && s && s->elems) {
    uint16_t i = 0;
    while (i + 1 < s->rank && s->elem_offsets[i + 1] <= k)
      i++;
    if (n < cap)
      n += (size_t)snprintf(buf + n, cap - n, first ? "%u" : ",%u", (unsigned)i);
    first = false;
    k -= s->elem_offsets[i];
    s = s->elems[i];
  }
  if (n < cap)
    snprintf(buf + n, cap - n, "}");
}

/* XLA's allocation kinds, in the order its dump names them (a parameter that is also an
 * output is a parameter allocation). */
static const char *kind_of(const hlo_buffer_t *b) {
  if (!b->indefinite)
    return "temp";
  if (b->flags & HLO_V_PARAM)
    return "parameter";
  if (b->flags & HLO_V_CONST)
    return "constant";
  if (b->flags & HLO_V_OUTPUT)
    return "output";
  if (b->flags & HLO_V_THREAD)
    return "thread-local";
  return "other";
}

json_t *hbm__plan_values_json(const hbm_plan_t *plan) {
  json_t *list = json_array();
  const hlo_assignment_t *as = &plan->as;
  if (!plan->module || !list)
    return list;
  for (uint32_t v = 0; v < as->n_values; v++) {
    const hlo_value_t *val = &as->values[v];
    uint32_t bi = as->value_buffer ? as->value_buffer[v] : UINT32_MAX;
    if (bi >= as->n_buffers || !val->instr)
      continue;
    const hlo_buffer_t *b = &as->buffers[bi];
    char index[128], alloc[64];
    shape_index_text(val->instr->shape, val->subshape, index, sizeof index);
    /* Temporaries share one allocation per colour (XLA's combined temp allocation);
     * every other buffer is an allocation of its own. */
    if (b->indefinite)
      snprintf(alloc, sizeof alloc, "buffer %u", bi);
    else
      snprintf(alloc, sizeof alloc, "temp %d", b->color);
    json_t *o = json_object();
    json_object_set_new(o, "instruction", json_stringn(val->instr->name.p, val->instr->name.n));
    json_object_set_new(o, "index", json_string(index));
    json_object_set_new(o, "kind", json_string(kind_of(b)));
    json_object_set_new(o, "allocation", json_string(alloc));
    json_object_set_new(o, "offset", json_integer((json_int_t)(b->indefinite ? 0 : b->offset)));
    json_object_set_new(o, "size", json_integer(hbm__json_bytes(val->bytes)));
    json_object_set_new(o, "color", json_integer(b->color));
    json_array_append_new(list, o);
  }
  return list;
}
