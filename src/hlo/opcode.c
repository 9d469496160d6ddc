/* opcode.c — HLO opcode names and properties (from opcodes.def): which ops are element-wise
 * (may reuse an operand's buffer in place, cheap to recompute), which only move data, which
 * have side effects and must never be duplicated by rematerialization. */
#include "hlo.h"

#include <string.h>

typedef struct opcode_info {
  const char *name;
  unsigned flags;
  uint8_t len;
} opcode_info_t;

static const opcode_info_t opcode_table[HLO_OP_COUNT] = {
#define HLO_OP(id, name, flags) {name, flags, sizeof(name) - 1},
#include "opcodes.def"
#undef HLO_OP
};

static int compare_name(const char *s, size_t n, const char *name, size_t m) {
  if (s[0] != name[0]) /* settles most steps of the search without a call */
    return (unsigned char)s[0] < (unsigned char)name[0] ? -1 : 1;
  int c = memcmp(s, name, n < m ? n : m);
  if (c != 0)
    return c;
  return n < m ? -1 : n > m;
}

hlo_opcode_t hbm__opcode_lookup(const char *s, size_t n) {
  if (n == 0)
    return HLO_OP_UNKNOWN;
  size_t lo = 1, hi = HLO_OP_COUNT; /* entry 0 is UNKNOWN */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = compare_name(s, n, opcode_table[mid].name, opcode_table[mid].len);
    if (c == 0)
      return (hlo_opcode_t)mid;
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return HLO_OP_UNKNOWN;
}

const char *hbm__opcode_name(hlo_opcode_t op) {
  return op < HLO_OP_COUNT && op != HLO_OP_UNKNOWN ? opcode_table[op].name : "unknown";
}

unsigned hbm__opcode_flags(hlo_opcode_t op) {
  return op < HLO_OP_COUNT ? opcode_table[op].flags : 0;
}
