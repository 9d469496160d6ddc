/* shape.c — XLA element types and the byte sizes of shapes. Unpadded bytes are the elements
 * in the default layout with sub-byte types packed (what XProf calls "unpadded size"); padded
 * bytes apply the layout as XLA's TPU backend does: each tile T(a,b) pads the minor-most
 * dimensions (in minor-to-major order) up to multiples of the tile, later tiles such as the
 * packing tile (2,1) tile the previous tile's dimensions, L(n) pads the element count, E(n)
 * sets the element width. A tuple's own buffer is its table of 8-byte pointers. */
#include "hlo.h"

#include <stdio.h>
#include <string.h>

typedef struct etype_info {
  const char *name;
  int bits;
  uint8_t len;
} etype_info_t;

#define ETYPE(name, bits)                                                                          \
  { name, bits, sizeof(name) - 1 }

static const etype_info_t etype_table[HLO_T_COUNT] = {
    [HLO_T_INVALID] = ETYPE("invalid", 0),
    [HLO_T_PRED] = ETYPE("pred", 8),
    [HLO_T_S1] = ETYPE("s1", 1),
    [HLO_T_S2] = ETYPE("s2", 2),
    [HLO_T_S4] = ETYPE("s4", 4),
    [HLO_T_S8] = ETYPE("s8", 8),
    [HLO_T_S16] = ETYPE("s16", 16),
    [HLO_T_S32] = ETYPE("s32", 32),
    [HLO_T_S64] = ETYPE("s64", 64),
    [HLO_T_U1] = ETYPE("u1", 1),
    [HLO_T_U2] = ETYPE("u2", 2),
    [HLO_T_U4] = ETYPE("u4", 4),
    [HLO_T_U8] = ETYPE("u8", 8),
    [HLO_T_U16] = ETYPE("u16", 16),
    [HLO_T_U32] = ETYPE("u32", 32),
    [HLO_T_U64] = ETYPE("u64", 64),
    [HLO_T_F16] = ETYPE("f16", 16),
    [HLO_T_BF16] = ETYPE("bf16", 16),
    [HLO_T_F32] = ETYPE("f32", 32),
    [HLO_T_F64] = ETYPE("f64", 64),
    [HLO_T_C64] = ETYPE("c64", 64),
    [HLO_T_C128] = ETYPE("c128", 128),
    [HLO_T_F8E5M2] = ETYPE("f8e5m2", 8),
    [HLO_T_F8E4M3] = ETYPE("f8e4m3", 8),
    [HLO_T_F8E4M3FN] = ETYPE("f8e4m3fn", 8),
    [HLO_T_F8E4M3B11FNUZ] = ETYPE("f8e4m3b11fnuz", 8),
    [HLO_T_F8E5M2FNUZ] = ETYPE("f8e5m2fnuz", 8),
    [HLO_T_F8E4M3FNUZ] = ETYPE("f8e4m3fnuz", 8),
    [HLO_T_F8E3M4] = ETYPE("f8e3m4", 8),
    [HLO_T_F8E8M0FNU] = ETYPE("f8e8m0fnu", 8),
    [HLO_T_F4E2M1FN] = ETYPE("f4e2m1fn", 4),
    [HLO_T_TOKEN] = ETYPE("token", 0),
    [HLO_T_OPAQUE] = ETYPE("opaque", 64),
    [HLO_T_TUPLE] = ETYPE("tuple", 0),
};

hlo_etype_t hbm__etype_lookup(const char *s, size_t n) {
  /* Every type name starts with one of these letters and is at most 13 long; most are
   * 3 or 4 long (f32, bf16), so compare lengths before bytes. */
  if (n == 0 || n > 13 || !strchr("psuftbco", s[0]))
    return HLO_T_INVALID;
  for (int t = HLO_T_PRED; t < HLO_T_TUPLE; t++) {
    const char *name = etype_table[t].name;
    if (etype_table[t].len == n && name[0] == s[0] && memcmp(name, s, n) == 0)
      return (hlo_etype_t)t;
  }
  return HLO_T_INVALID;
}

const char *hbm__etype_name(hlo_etype_t t) {
  return t < HLO_T_COUNT ? etype_table[t].name : "invalid";
}

int hbm__etype_bits(hlo_etype_t t) { return t < HLO_T_COUNT ? etype_table[t].bits : 0; }

/* ceil(elements * bits / 8) without overflowing the product. */
static bool bits_to_bytes(uint64_t elements, uint64_t bits, uint64_t *out) {
  uint64_t whole;
  if (__builtin_mul_overflow(elements / 8, bits, &whole))
    return false;
  uint64_t rest = ((elements % 8) * bits + 7) / 8;
  return !__builtin_add_overflow(whole, rest, out);
}

static bool round_up(uint64_t v, uint64_t m, uint64_t *out) {
  if (m <= 1) {
    *out = v;
    return true;
  }
  uint64_t q = v / m + (v % m != 0);
  return !__builtin_mul_overflow(q, m, out);
}

/* Elements of the array as laid out with the layout's tiles (XLA TPU tiling). */
static bool tiled_elements(const hlo_shape_t *s, uint64_t *out) {
  const hlo_layout_t *lay = s->layout;
  uint64_t cur[HLO_MAX_RANK + HLO_MAX_TILES * 8 * 2];
  size_t n = 0;
  /* Physical order, major to minor: the reverse of minor_to_major. */
  bool m2m_ok = lay->n_minor_to_major == s->rank;
  for (size_t i = 0; i < s->rank; i++) {
    int64_t dim = m2m_ok ? lay->minor_to_major[s->rank - 1 - i] : (int64_t)i;
    if (dim < 0 || dim >= s->rank)
      dim = (int64_t)i;
    cur[n++] = (uint64_t)s->dims[dim];
  }
  for (size_t t = 0; t < lay->n_tiles; t++) {
    const hlo_tile_t *tile = &lay->tiles[t];
    size_t k = tile->rank;
    if (n + 2 * k > HBM_ARRAY_LEN(cur))
      return false;
    if (k > n) { /* a tile of more dimensions than the shape: leading dims of 1 */
      memmove(cur + (k - n), cur, n * sizeof *cur);
      for (size_t i = 0; i < k - n; i++)
        cur[i] = 1;
      n = k;
    }
    uint64_t inner[HLO_MAX_RANK];
    for (size_t j = 0; j < k; j++) {
      uint64_t d = cur[n - k + j];
      int64_t td = tile->dims[j];
      if (td == HLO_TILE_COMBINE || td <= 0) { /* not tiled along this dimension */
        inner[j] = d;
        cur[n - k + j] = 1;
      } else {
        inner[j] = (uint64_t)td;
        cur[n - k + j] = d / (uint64_t)td + (d % (uint64_t)td != 0);
      }
    }
    for (size_t j = 0; j < k; j++)
      cur[n++] = inner[j];
  }
  uint64_t e = 1;
  for (size_t i = 0; i < n; i++)
    if (__builtin_mul_overflow(e, cur[i], &e))
      return false;
  *out = e;
  return true;
}

bool hbm__shape_compute_sizes(hlo_shape_t *s) {
  if (s->etype == HLO_T_TUPLE) {
    s->bytes = s->unpadded_bytes = 8u * s->rank;
    return true;
  }
  uint64_t elements = 1;
  for (size_t i = 0; i < s->rank; i++)
    if (__builtin_mul_overflow(elements, (uint64_t)s->dims[i], &elements))
      return false;
  int type_bits = hbm__etype_bits((hlo_etype_t)s->etype);
  if (!bits_to_bytes(elements, (uint64_t)type_bits, &s->unpadded_bytes))
    return false;
  const hlo_layout_t *lay = s->layout;
  if (!lay) {
    s->bytes = s->unpadded_bytes;
    return true;
  }
  uint64_t laid_out = elements;
  if (lay->n_tiles && !tiled_elements(s, &laid_out))
    return false;
  if (lay->tail_align > 1 && !round_up(laid_out, (uint64_t)lay->tail_align, &laid_out))
    return false;
  uint64_t bits = lay->element_bits > 0 ? (uint64_t)lay->element_bits : (uint64_t)type_bits;
  if (elements == 0)
    laid_out = 0; /* an empty array takes no memory whatever its tiles */
  return bits_to_bytes(laid_out, bits, &s->bytes);
}

const hlo_shape_t *hbm__shape_subshape(const hlo_shape_t *s, uint32_t k) {
  while (s) {
    if (k == 0)
      return s;
    if (s->etype != HLO_T_TUPLE || k >= s->n_subshapes)
      return NULL;
    /* Find the element whose pre-order range holds k. */
    uint32_t lo = 0, hi = s->rank;
    while (hi - lo > 1) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (s->elem_offsets[mid] <= k)
        lo = mid;
      else
        hi = mid;
    }
    k -= s->elem_offsets[lo];
    s = s->elems[lo];
  }
  return NULL;
}

uint32_t hbm__shape_elem_offset(const hlo_shape_t *s, int64_t i) {
  if (!s || s->etype != HLO_T_TUPLE || i < 0 || i >= s->rank)
    return UINT32_MAX;
  return s->elem_offsets[i];
}

uint32_t hbm__shape_index_offset(const hlo_shape_t *s, const int64_t *idx, size_t n) {
  uint32_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t off = hbm__shape_elem_offset(s, idx[i]);
    if (off == UINT32_MAX)
      return UINT32_MAX;
    k += off;
    s = s->elems[idx[i]];
  }
  return k;
}

void hbm__shape_index_text(const hlo_shape_t *s, uint32_t k, char *buf, size_t cap) {
  if (cap < 3) {
    if (cap)
      buf[0] = '\0';
    return;
  }
  size_t len = 0;
  buf[len++] = '{';
  bool first = true;
  while (s && k > 0 && s->etype == HLO_T_TUPLE && k < s->n_subshapes) {
    uint32_t lo = 0, hi = s->rank;
    while (hi - lo > 1) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (s->elem_offsets[mid] <= k)
        lo = mid;
      else
        hi = mid;
    }
    int w = snprintf(buf + len, len < cap ? cap - len : 0, "%s%u", first ? "" : ",", lo);
    if (w > 0)
      len += (size_t)w;
    first = false;
    k -= s->elem_offsets[lo];
    s = s->elems[lo];
  }
  if (len + 2 <= cap) {
    buf[len++] = '}';
    buf[len] = '\0';
  } else {
    buf[cap - 1] = '\0';
  }
}

uint64_t hbm__shape_elements(const hlo_shape_t *s) {
  if (s->etype == HLO_T_TUPLE)
    return 0;
  uint64_t e = 1;
  for (size_t i = 0; i < s->rank; i++)
    if (__builtin_mul_overflow(e, (uint64_t)s->dims[i], &e))
      return UINT64_MAX;
  return e;
}

int hbm__shape_color(const hlo_shape_t *s) {
  if (!s || s->etype == HLO_T_TUPLE || !s->layout)
    return 0;
  int64_t c = s->layout->memory_space;
  return c >= 0 && c < 256 ? (int)c : 0;
}
