/* hlo_vmem.c — a TPU program's largest scoped VMEM allocation, as XProf's Memory Viewer shows
 * it for memory space 1 (ComputeMaxScopedAllocationBytes in XProf's
 * hlo_proto_to_memory_visualization_utils.cc): scoped allocations are not in XLA's buffer
 * assignment but in each instruction's backend_config, a JSON object whose
 * "used_scoped_memory_configs" lists {memory_space, offset, size} (int64s written as
 * strings by proto3's JSON, or as numbers). The largest size in the colour asked for wins,
 * the first instruction reaching it naming it. */
#include "import/hlo_vmem.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char KEY[] = "used_scoped_memory_configs";

/* An int64 written as a JSON number or a string of digits; 0 otherwise (as XProf). */
static int64_t int_of(const json_t *v) {
  if (json_is_integer(v))
    return (int64_t)json_integer_value(v);
  if (!json_is_string(v))
    return 0;
  const char *s = json_string_value(v);
  char *end;
  long long n = strtoll(s, &end, 10);
  return *s && !*end ? (int64_t)n : 0;
}

/* The largest scoped size of colour `color` in one backend_config; 0 when none. */
static int64_t largest_in(const ProtobufCBinaryData *config, int64_t color) {
  if (!config->len || config->data[0] != '{' ||
      !memmem(config->data, config->len, KEY, sizeof KEY - 1))
    return 0; /* most instructions: no JSON to parse */
  json_t *root = json_loadb((const char *)config->data, config->len, 0, NULL);
  json_t *list = json_object_get(root, KEY);
  int64_t best = 0;
  size_t i;
  json_t *entry;
  json_array_foreach(list, i, entry) {
    int64_t size = int_of(json_object_get(entry, "size"));
    if (int_of(json_object_get(entry, "memory_space")) == color && size > best)
      best = size;
  }
  json_decref(root);
  return best;
}

uint64_t hlo_max_scoped_bytes(const HbmHlo__HloModuleProto *m, int64_t color,
                              const char **instruction) {
  int64_t best = 0;
  *instruction = NULL;
  for (size_t c = 0; m && c < m->n_computations; c++)
    for (size_t k = 0; k < m->computations[c]->n_instructions; k++) {
      const HbmHlo__HloInstructionProto *in = m->computations[c]->instructions[k];
      int64_t size = largest_in(&in->backend_config, color);
      if (size > best)
        best = size, *instruction = in->name;
    }
  return (uint64_t)best;
}
