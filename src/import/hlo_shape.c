/* hlo_shape.c — XLA shapes from an HloProto, the way XProf's Memory Viewer shows them: the
 * unpadded size (ShapeUtil::ByteSizeOf of the shape in its default layout, tuples as a table
 * of 8-byte pointers) and the text with layout ("bf16[1024,1024]{1,0:T(8,128)(2,1)}"). */
#include "import/hlo_shape.h"

#include <stdio.h>

typedef struct type_info {
  int id;
  const char *name;
  int bytes;
} type_info_t;

/* xla.PrimitiveType numbers (xla_data.proto). Sub-byte types take one byte per element in
 * the default layout, as XLA's ByteSizeOfPrimitiveType says. */
static const type_info_t types[] = {
    {1, "pred", 1},
    {2, "s8", 1},
    {3, "s16", 2},
    {4, "s32", 4},
    {5, "s64", 8},
    {6, "u8", 1},
    {7, "u16", 2},
    {8, "u32", 4},
    {9, "u64", 8},
    {10, "f16", 2},
    {11, "f32", 4},
    {12, "f64", 8},
    {13, "tuple", 0},
    {14, "opaque", 8},
    {15, "c64", 8},
    {16, "bf16", 2},
    {17, "token", 0},
    {18, "c128", 16},
    {19, "f8e5m2", 1},
    {20, "f8e4m3fn", 1},
    {21, "s4", 1},
    {22, "u4", 1},
    {23, "f8e4m3b11fnuz", 1},
    {24, "f8e5m2fnuz", 1},
    {25, "f8e4m3fnuz", 1},
    {26, "s2", 1},
    {27, "u2", 1},
    {28, "f8e4m3", 1},
    {29, "f8e3m4", 1},
    {30, "s1", 1},
    {31, "u1", 1},
    {32, "f4e2m1fn", 1},
    {33, "f8e8m0fnu", 1},
};

static const type_info_t *type_of(int id) {
  for (size_t i = 0; i < HBM_ARRAY_LEN(types); i++)
    if (types[i].id == id)
      return &types[i];
  return NULL;
}

enum { TYPE_TUPLE = 13, TYPE_OPAQUE = 14, TYPE_TOKEN = 17, POINTER_SIZE = 8 };

uint64_t hlo_shape_unpadded_bytes(const HbmHlo__ShapeProto *s) {
  if (!s)
    return 0;
  if (s->element_type == TYPE_TUPLE)
    return POINTER_SIZE * (uint64_t)s->n_tuple_shapes;
  if (s->element_type == TYPE_TOKEN)
    return 0;
  if (s->element_type == TYPE_OPAQUE)
    return POINTER_SIZE;
  const type_info_t *t = type_of(s->element_type);
  uint64_t n = t ? (uint64_t)t->bytes : 0;
  for (size_t i = 0; i < s->n_dimensions; i++) {
    uint64_t d = s->dimensions[i] > 0 ? (uint64_t)s->dimensions[i] : 0;
    if (d && n > UINT64_MAX / d)
      return UINT64_MAX; /* a corrupt shape: say "huge" rather than wrap */
    n *= d;
  }
  return n;
}

static void append_ints(hbm_strbuf_t *sb, const int64_t *v, size_t n) {
  for (size_t i = 0; i < n; i++)
    hbm_strbuf_printf(sb, "%s%lld", i ? "," : "", (long long)v[i]);
}

static void append_layout(hbm_strbuf_t *sb, const HbmHlo__LayoutProto *l) {
  hbm_strbuf_puts(sb, "{");
  append_ints(sb, l->minor_to_major, l->n_minor_to_major);
  bool extra = l->n_tiles || l->element_size_in_bits || l->memory_space;
  if (extra)
    hbm_strbuf_puts(sb, ":");
  for (size_t i = 0; i < l->n_tiles; i++) {
    hbm_strbuf_puts(sb, "T(");
    append_ints(sb, l->tiles[i]->dimensions, l->tiles[i]->n_dimensions);
    hbm_strbuf_puts(sb, ")");
  }
  if (l->element_size_in_bits)
    hbm_strbuf_printf(sb, "E(%lld)", (long long)l->element_size_in_bits);
  if (l->memory_space)
    hbm_strbuf_printf(sb, "S(%lld)", (long long)l->memory_space);
  hbm_strbuf_puts(sb, "}");
}

void hlo_shape_text(const HbmHlo__ShapeProto *s, hbm_strbuf_t *sb, int depth) {
  if (!s || depth > 32) {
    hbm_strbuf_puts(sb, "?");
    return;
  }
  if (s->element_type == TYPE_TUPLE) {
    hbm_strbuf_puts(sb, "(");
    for (size_t i = 0; i < s->n_tuple_shapes; i++) {
      if (i)
        hbm_strbuf_puts(sb, ", ");
      hlo_shape_text(s->tuple_shapes[i], sb, depth + 1);
    }
    hbm_strbuf_puts(sb, ")");
    return;
  }
  const type_info_t *t = type_of(s->element_type);
  if (t)
    hbm_strbuf_puts(sb, t->name);
  else
    hbm_strbuf_printf(sb, "type%d", (int)s->element_type);
  if (s->element_type == TYPE_TOKEN || s->element_type == TYPE_OPAQUE)
    return;
  hbm_strbuf_puts(sb, "[");
  append_ints(sb, s->dimensions, s->n_dimensions);
  hbm_strbuf_puts(sb, "]");
  if (s->layout && s->n_dimensions)
    append_layout(sb, s->layout);
}

const HbmHlo__ShapeProto *hlo_shape_at_index(const HbmHlo__ShapeProto *s, const int64_t *index,
                                             size_t n_index) {
  /* XProf's ResolveShapeIndex: only the last index, into the top-level tuple. */
  if (!s || !n_index)
    return s;
  int64_t i = index[n_index - 1];
  if (i >= 0 && (size_t)i < s->n_tuple_shapes)
    return s->tuple_shapes[i];
  return s;
}
