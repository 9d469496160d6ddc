/* parser.c — HLO text (as XLA's HloModule::ToString prints it, the grammar of XLA's
 * hlo_parser) into the planner's module IR: the HloModule header (is_scheduled,
 * input_output_alias, buffer_donor), computations, instructions with their shapes and
 * layouts, operands, called computations, metadata and output_to_operand_aliasing.
 * Attributes the planner does not need are skipped whole, so unknown attributes and
 * opcodes are tolerated; malformed text is an error "file:line:column: expected ...".
 * Recursion is bounded (nested tuple shapes) so hostile input cannot exhaust the stack. */
#include "lexer.h"
#include "namemap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SHAPE_DEPTH 64

/* ------------------------------------------------------------------------------------------ */
/* Shapes                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static bool at_layout_start(hlo_lexer_t *lx) {
  if (hbm__hlo_lex_peek(lx) != '{')
    return false;
  size_t save = lx->pos;
  lx->pos++;
  char c = hbm__hlo_lex_peek(lx);
  lx->pos = save;
  return (c >= '0' && c <= '9') || c == ':' || c == '}';
}

static bool parse_tile(hlo_lexer_t *lx, hlo_arena_t *arena, hlo_tile_t *tile) {
  int64_t dims[8];
  size_t n = 0;
  if (!hbm__hlo_lex_expect(lx, '('))
    return false;
  if (!hbm__hlo_lex_accept(lx, ')')) {
    do {
      if (n == HBM_ARRAY_LEN(dims))
        return hbm__hlo_lex_error_at(lx, lx->pos, "a tile has at most %zu dimensions",
                                     HBM_ARRAY_LEN(dims));
      int64_t d;
      if (hbm__hlo_lex_accept(lx, '*') || hbm__hlo_lex_accept(lx, '?')) {
        d = HLO_TILE_COMBINE;
      } else if (!hbm__hlo_lex_int(lx, &d) || d <= 0) {
        return hbm__hlo_lex_expected(lx, "a positive tile dimension or '*'");
      }
      dims[n++] = d;
    } while (hbm__hlo_lex_accept(lx, ','));
    if (!hbm__hlo_lex_expect(lx, ')'))
      return false;
  }
  tile->rank = (uint8_t)n;
  tile->dims = hbm__hlo_arena_alloc(arena, (n ? n : 1) * sizeof(int64_t));
  if (!tile->dims)
    return false;
  memcpy(tile->dims, dims, n * sizeof(int64_t));
  return true;
}

static bool parse_paren_int(hlo_lexer_t *lx, int64_t *out, const char *what) {
  if (!hbm__hlo_lex_expect(lx, '('))
    return false;
  if (!hbm__hlo_lex_int(lx, out) || *out < 0)
    return hbm__hlo_lex_expected(lx, what);
  return hbm__hlo_lex_expect(lx, ')');
}

/* The part after ':' in a layout: T(..)(..) L(n) E(n) S(n) and others we skip. */
static bool parse_layout_attrs(hlo_lexer_t *lx, hlo_arena_t *arena, hlo_layout_t *lay) {
  hlo_tile_t tiles[HLO_MAX_TILES];
  size_t n_tiles = 0;
  while (!lx->failed && hbm__hlo_lex_peek(lx) != '}') {
    size_t at = lx->pos;
    char tag[4] = {0};
    size_t n = 0;
    while (lx->pos < lx->len && n < 3 &&
           ((lx->text[lx->pos] >= 'A' && lx->text[lx->pos] <= 'Z') ||
            (n == 0 && (lx->text[lx->pos] == '#' || lx->text[lx->pos] == '*'))))
      tag[n++] = lx->text[lx->pos++];
    if (n == 0 || hbm__hlo_lex_peek(lx) != '(') {
      lx->pos = at;
      return hbm__hlo_lex_expected(lx, "a layout attribute such as T(8,128), E(4) or S(1)");
    }
    if (!strcmp(tag, "T")) {
      while (hbm__hlo_lex_peek(lx) == '(') {
        if (n_tiles == HLO_MAX_TILES)
          return hbm__hlo_lex_error_at(lx, lx->pos, "a layout has at most %d tiles", HLO_MAX_TILES);
        if (!parse_tile(lx, arena, &tiles[n_tiles++]))
          return false;
      }
    } else if (!strcmp(tag, "E")) {
      if (!parse_paren_int(lx, &lay->element_bits, "an element size in bits"))
        return false;
      if (lay->element_bits > 1024)
        return hbm__hlo_lex_error_at(lx, at, "element size E(%lld) is out of range",
                                     (long long)lay->element_bits);
    } else if (!strcmp(tag, "S")) {
      if (!parse_paren_int(lx, &lay->memory_space, "a memory space number"))
        return false;
    } else if (!strcmp(tag, "L")) {
      if (!parse_paren_int(lx, &lay->tail_align, "a tail padding alignment"))
        return false;
    } else { /* D(...), SC(...)(...), P(shape), M(n), #(type), *(type): not needed */
      while (hbm__hlo_lex_peek(lx) == '(')
        if (!hbm__hlo_lex_skip_group(lx))
          return false;
    }
  }
  lay->n_tiles = (uint8_t)n_tiles;
  if (n_tiles) {
    lay->tiles = hbm__hlo_arena_alloc(arena, n_tiles * sizeof *lay->tiles);
    if (!lay->tiles)
      return false;
    memcpy(lay->tiles, tiles, n_tiles * sizeof *tiles);
  }
  return !lx->failed;
}

static bool parse_layout(hlo_lexer_t *lx, hlo_arena_t *arena, hlo_shape_t *s) {
  hlo_layout_t *lay = hbm__hlo_arena_alloc(arena, sizeof *lay);
  if (!lay || !hbm__hlo_lex_expect(lx, '{'))
    return false;
  lay->tail_align = 1;
  int64_t m2m[HLO_MAX_RANK];
  size_t n = 0;
  int64_t v;
  if (hbm__hlo_lex_int(lx, &v)) {
    do {
      if (n == HLO_MAX_RANK)
        return hbm__hlo_lex_error_at(lx, lx->pos, "a layout has at most %d dimensions",
                                     HLO_MAX_RANK);
      if (n > 0 && !hbm__hlo_lex_int(lx, &v))
        return hbm__hlo_lex_expected(lx, "a dimension number");
      if (v < 0 || v >= s->rank)
        return hbm__hlo_lex_error_at(lx, lx->pos,
                                     "layout dimension %lld is out of range for a "
                                     "shape of rank %u",
                                     (long long)v, s->rank);
      m2m[n++] = v;
    } while (hbm__hlo_lex_accept(lx, ','));
  }
  if (hbm__hlo_lex_accept(lx, ':') && !parse_layout_attrs(lx, arena, lay))
    return false;
  if (!hbm__hlo_lex_expect(lx, '}'))
    return false;
  lay->n_minor_to_major = (uint16_t)n;
  lay->minor_to_major = hbm__hlo_arena_alloc(arena, (n ? n : 1) * sizeof(int64_t));
  if (!lay->minor_to_major)
    return false;
  memcpy(lay->minor_to_major, m2m, n * sizeof(int64_t));
  s->layout = lay;
  return true;
}

static bool parse_array_dims(hlo_lexer_t *lx, hlo_arena_t *arena, hlo_shape_t *s) {
  int64_t dims[HLO_MAX_RANK];
  size_t n = 0;
  if (!hbm__hlo_lex_expect(lx, '['))
    return false;
  if (!hbm__hlo_lex_accept(lx, ']')) {
    do {
      if (n == HLO_MAX_RANK)
        return hbm__hlo_lex_error_at(lx, lx->pos, "a shape has at most %d dimensions",
                                     HLO_MAX_RANK);
      int64_t d;
      if (hbm__hlo_lex_accept(lx, '?')) {
        d = 0; /* unbounded dynamic: no size known at compile time */
        s->is_dynamic = 1;
      } else {
        if (hbm__hlo_lex_accept2(lx, "<="))
          s->is_dynamic = 1;
        if (!hbm__hlo_lex_int(lx, &d) || d < 0)
          return hbm__hlo_lex_expected(lx, "a dimension size");
      }
      dims[n++] = d;
    } while (hbm__hlo_lex_accept(lx, ','));
    if (!hbm__hlo_lex_expect(lx, ']'))
      return false;
  }
  s->rank = (uint16_t)n;
  s->dims = hbm__hlo_arena_alloc(arena, (n ? n : 1) * sizeof(int64_t));
  if (!s->dims)
    return false;
  memcpy(s->dims, dims, n * sizeof(int64_t));
  return true;
}

static const hlo_shape_t *parse_shape_rec(hlo_lexer_t *lx, hlo_arena_t *arena, int depth);

static bool parse_tuple_shape(hlo_lexer_t *lx, hlo_arena_t *arena, hlo_shape_t *s, int depth) {
  hlo_vec_t elems;
  hbm__hlo_vec_init(&elems, sizeof(hlo_shape_t *));
  bool ok = hbm__hlo_lex_expect(lx, '(');
  if (ok && !hbm__hlo_lex_accept(lx, ')')) {
    do {
      const hlo_shape_t *e = parse_shape_rec(lx, arena, depth + 1);
      ok = e && hbm__hlo_vec_push(&elems, &e);
    } while (ok && hbm__hlo_lex_accept(lx, ','));
    ok = ok && hbm__hlo_lex_expect(lx, ')');
  }
  if (ok && elems.len > UINT16_MAX)
    ok = hbm__hlo_lex_error_at(lx, lx->pos, "a tuple has at most %u elements", UINT16_MAX);
  if (ok) {
    s->etype = HLO_T_TUPLE;
    s->rank = (uint16_t)elems.len;
    s->elems = hbm__hlo_arena_alloc(arena, (elems.len + 1) * sizeof *s->elems);
    s->elem_offsets = hbm__hlo_arena_alloc(arena, (elems.len + 1) * sizeof *s->elem_offsets);
    ok = s->elems && s->elem_offsets;
  }
  if (ok) {
    uint64_t count = 1;
    for (size_t i = 0; i < elems.len; i++) {
      s->elems[i] = HLO_VEC_AT(&elems, hlo_shape_t *, i);
      s->elem_offsets[i] = (uint32_t)count;
      count += s->elems[i]->n_subshapes;
    }
    if (count > UINT32_MAX / 2)
      ok = hbm__hlo_lex_error_at(lx, lx->pos, "tuple shape has too many subshapes");
    s->n_subshapes = (uint32_t)count;
  }
  hbm__hlo_vec_free(&elems);
  return ok;
}

/* XLA's buffer shape `b(f32[8]{0})` (ShapeUtil::MakeValidatedBufferShape): the array it
 * wraps, with the text as written; the cursor is past "b(". */
static const hlo_shape_t *parse_buffer_shape(hlo_lexer_t *lx, hlo_arena_t *arena, hlo_shape_t *s,
                                             size_t start, int depth) {
  const hlo_shape_t *inner = parse_shape_rec(lx, arena, depth + 1);
  if (!inner)
    return NULL;
  if (inner->etype == HLO_T_TUPLE) {
    hbm__hlo_lex_error_at(lx, start, "expected an array shape inside b(...), found a tuple");
    return NULL;
  }
  if (!hbm__hlo_lex_expect(lx, ')'))
    return NULL;
  *s = *inner;
  s->text.p = lx->text + start;
  s->text.n = (uint32_t)(lx->pos - start);
  return s;
}

static const hlo_shape_t *parse_shape_rec(hlo_lexer_t *lx, hlo_arena_t *arena, int depth) {
  if (depth > MAX_SHAPE_DEPTH) {
    hbm__hlo_lex_error_at(lx, lx->pos, "shape nested more than %d levels deep", MAX_SHAPE_DEPTH);
    return NULL;
  }
  hlo_shape_t *s = hbm__hlo_arena_alloc(arena, sizeof *s);
  if (!s)
    return NULL;
  char c = hbm__hlo_lex_peek(lx);
  size_t start = lx->pos;
  if (c == '(') {
    if (!parse_tuple_shape(lx, arena, s, depth))
      return NULL;
  } else {
    hlo_str_t type;
    if (!hbm__hlo_lex_ident(lx, &type)) {
      hbm__hlo_lex_expected(lx, "a shape such as f32[8,128]{1,0} or (s32[], f32[4])");
      return NULL;
    }
    if (HLO_STR_IS(type, "b") && hbm__hlo_lex_accept(lx, '('))
      return parse_buffer_shape(lx, arena, s, start, depth);
    hlo_etype_t t = hbm__etype_lookup(type.p, type.n);
    if (t == HLO_T_INVALID) {
      lx->pos = start;
      hbm__hlo_lex_expected(lx, "an element type (pred, s8, s32, bf16, f32, ..., token)");
      return NULL;
    }
    s->etype = (uint8_t)t;
    s->n_subshapes = 1;
    if (hbm__hlo_lex_peek(lx) == '[') {
      if (!parse_array_dims(lx, arena, s))
        return NULL;
    } else if (t != HLO_T_TOKEN && t != HLO_T_OPAQUE) {
      hbm__hlo_lex_expected(lx, "'[' and the dimensions of the shape");
      return NULL;
    }
    if (at_layout_start(lx) && !parse_layout(lx, arena, s))
      return NULL;
  }
  s->text.p = lx->text + start;
  s->text.n = (uint32_t)(lx->pos - start);
  if (!hbm__shape_compute_sizes(s)) {
    hbm__hlo_lex_error_at(lx, start, "shape %.*s is too large (more than 2^64 bytes)",
                          (int)(s->text.n < 80 ? s->text.n : 80), s->text.p);
    return NULL;
  }
  return s;
}

const hlo_shape_t *hbm__parse_shape(hlo_lexer_t *lx, hlo_arena_t *arena) {
  return parse_shape_rec(lx, arena, 0);
}

bool hbm__parse_shape_index(hlo_lexer_t *lx, hlo_arena_t *arena, int64_t **idx, uint8_t *n) {
  int64_t v[64];
  size_t k = 0;
  if (!hbm__hlo_lex_expect(lx, '{'))
    return false;
  if (!hbm__hlo_lex_accept(lx, '}')) {
    do {
      if (k == HBM_ARRAY_LEN(v))
        return hbm__hlo_lex_error_at(lx, lx->pos, "shape index deeper than 64");
      if (!hbm__hlo_lex_int(lx, &v[k]) || v[k] < 0)
        return hbm__hlo_lex_expected(lx, "a tuple index");
      k++;
    } while (hbm__hlo_lex_accept(lx, ','));
    if (!hbm__hlo_lex_expect(lx, '}'))
      return false;
  }
  *idx = hbm__hlo_arena_alloc(arena, (k ? k : 1) * sizeof(int64_t));
  if (!*idx)
    return false;
  memcpy(*idx, v, k * sizeof(int64_t));
  *n = (uint8_t)k;
  return true;
}

/* ------------------------------------------------------------------------------------------ */
/* Module, computations, instructions                                                          */
/* ------------------------------------------------------------------------------------------ */

/* Instruction names of the computation being read: a slot is (hash << 32 | index + 1) into
 * the parser's instruction list. Eight-byte slots keep a million names in 16 MB, mostly in
 * cache; names are compared only when hashes match. */
typedef struct instr_table {
  uint64_t *slots;
  size_t cap, count;
} instr_table_t;

typedef struct parser {
  hlo_lexer_t lx;
  hlo_module_t *m;
  instr_table_t instr_names;
  hlo_namemap_t shapes;         /* shape text → the shape parsed from it first */
  const hlo_shape_t *recent[4]; /* shapes met last (ending in '}' or ')'), tried first */
  unsigned next_recent;
  hlo_namemap_t comp_names; /* scope 0 */
  hlo_namemap_t opcodes;    /* opcode text → hlo_opcode_t + 1, the ones met so far */
  hlo_vec_t comps;          /* hlo_comp_t * */
  hlo_vec_t instrs;         /* hlo_instr_t *, of the computation being read */
  hlo_vec_t operands;       /* hlo_instr_t * */
  hlo_vec_t spans;          /* hlo_span_t */
  hlo_vec_t calls;          /* hlo_callref_t */
  hlo_vec_t pairs;          /* hlo_alias_pair_t */
} parser_t;

static uint32_t hash32(hlo_str_t name) {
  return (uint32_t)hbm__hlo_hash(name.p, name.n, 2166136261u);
}

/* Empties the table for a new computation, keeping a small allocation. */
static bool instr_table_reset(instr_table_t *t) {
  if (!t->slots || t->cap > 1024) {
    free(t->slots);
    t->cap = 256;
    t->slots = calloc(t->cap, sizeof *t->slots);
  } else {
    memset(t->slots, 0, t->cap * sizeof *t->slots);
  }
  t->count = 0;
  if (!t->slots)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (name table)") == HBM_OK;
  return true;
}

static hlo_instr_t *instr_lookup(const parser_t *ps, hlo_str_t name) {
  const instr_table_t *t = &ps->instr_names;
  uint32_t h = hash32(name);
  size_t mask = t->cap - 1;
  for (size_t j = h & mask; t->slots[j]; j = (j + 1) & mask) {
    uint64_t slot = t->slots[j];
    if ((uint32_t)(slot >> 32) != h)
      continue;
    hlo_instr_t *in = HLO_VEC_AT(&ps->instrs, hlo_instr_t *, (uint32_t)slot - 1);
    if (in->name.n == name.n && memcmp(in->name.p, name.p, name.n) == 0)
      return in;
  }
  return NULL;
}

/* Adds the instruction at `idx` of ps->instrs; false if its name is taken (with *dup set)
 * or memory ran out. */
static bool instr_insert(parser_t *ps, uint32_t idx, bool *dup) {
  instr_table_t *t = &ps->instr_names;
  *dup = false;
  if ((t->count + 1) * 2 > t->cap) {
    size_t cap = t->cap * 2;
    uint64_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
      return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (name table)") == HBM_OK;
    for (size_t i = 0; i < t->cap; i++) {
      if (!t->slots[i])
        continue;
      size_t j = (size_t)(t->slots[i] >> 32) & (cap - 1);
      while (slots[j])
        j = (j + 1) & (cap - 1);
      slots[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = slots;
    t->cap = cap;
  }
  const hlo_instr_t *in = HLO_VEC_AT(&ps->instrs, hlo_instr_t *, idx);
  uint32_t h = hash32(in->name);
  size_t j = h & (t->cap - 1);
  for (; t->slots[j]; j = (j + 1) & (t->cap - 1)) {
    if ((uint32_t)(t->slots[j] >> 32) != h)
      continue;
    const hlo_instr_t *other = HLO_VEC_AT(&ps->instrs, hlo_instr_t *, (uint32_t)t->slots[j] - 1);
    if (other->name.n == in->name.n && !memcmp(other->name.p, in->name.p, in->name.n)) {
      *dup = true;
      return false;
    }
  }
  t->slots[j] = ((uint64_t)h << 32) | (idx + 1u);
  t->count++;
  return true;
}

static void *copy_vec(parser_t *ps, const hlo_vec_t *v) {
  void *d = hbm__hlo_arena_alloc(&ps->m->arena, (v->len ? v->len : 1) * v->item);
  if (d && v->len)
    memcpy(d, v->data, v->len * v->item);
  return d;
}

/* ---- shapes, interned: a module repeats a few shapes many times ---- */

/* Past whitespace and comments, without reporting anything. */
static size_t skip_blank(const char *t, size_t p, size_t len) {
  for (;;) {
    while (p < len && (t[p] == ' ' || t[p] == '\n' || t[p] == '\t' || t[p] == '\r'))
      p++;
    if (p + 1 < len && t[p] == '/' && t[p + 1] == '*') {
      const char *close = NULL;
      for (size_t q = p + 2; q + 1 < len; q++)
        if (t[q] == '*' && t[q + 1] == '/') {
          close = t + q;
          break;
        }
      if (!close)
        return SIZE_MAX;
      p = (size_t)(close - t) + 2;
    } else {
      return p;
    }
  }
}

/* Past the bracket group opening at t[p], or SIZE_MAX. */
static size_t scan_group(const char *t, size_t p, size_t len) {
  size_t depth = 0;
  while (p < len) {
    char c = t[p];
    if (!HLO_CLASS(c, HLO_C_GROUP)) {
      p++;
      continue;
    }
    if (c == '/' && p + 1 < len && t[p + 1] == '*') {
      p = skip_blank(t, p, len);
      if (p == SIZE_MAX)
        return SIZE_MAX;
      continue;
    }
    if (c == '(' || c == '[' || c == '{')
      depth++;
    else if ((c == ')' || c == ']' || c == '}') && --depth == 0)
      return p + 1;
    else if (c == '"' || c == '\'')
      return SIZE_MAX; /* shapes hold no strings */
    p++;
  }
  return SIZE_MAX;
}

/* Where the shape under the cursor ends, as parse_shape_rec would read it; SIZE_MAX if it
 * does not look like one (the real parser then says what is wrong). */
static size_t shape_extent(const char *t, size_t p, size_t len) {
  if (p >= len)
    return SIZE_MAX;
  if (t[p] == '(')
    return scan_group(t, p, len);
  while (p < len && ((t[p] >= 'a' && t[p] <= 'z') || (t[p] >= '0' && t[p] <= '9')))
    p++;
  if (p >= len || t[p] != '[')
    return SIZE_MAX;
  size_t end = scan_group(t, p, len);
  if (end == SIZE_MAX)
    return SIZE_MAX;
  size_t q = skip_blank(t, end, len);
  if (q == SIZE_MAX || q >= len || t[q] != '{')
    return end;
  size_t r = skip_blank(t, q + 1, len);
  if (r == SIZE_MAX || r >= len || !((t[r] >= '0' && t[r] <= '9') || t[r] == ':' || t[r] == '}'))
    return end;
  return scan_group(t, q, len);
}

/* Remembers s among the recent shapes if nothing can follow its text and make it another
 * shape: a layout's '}' or a tuple's ')' ends it, a ']' may be followed by a layout. */
static void remember_shape(parser_t *ps, const hlo_shape_t *s) {
  char last = s->text.n ? s->text.p[s->text.n - 1] : '\0';
  if (last != '}' && last != ')')
    return;
  ps->recent[ps->next_recent++ % HBM_ARRAY_LEN(ps->recent)] = s;
}

static const hlo_shape_t *parse_shape_interned(parser_t *ps) {
  hlo_lexer_t *lx = &ps->lx;
  hbm__hlo_lex_skip_ws(lx);
  size_t start = lx->pos;
  const char *at = lx->text + start;
  for (size_t k = 0; k < HBM_ARRAY_LEN(ps->recent) && !lx->failed; k++) {
    const hlo_shape_t *r = ps->recent[k]; /* the same text: the same shape, unscanned */
    if (r && r->text.n <= lx->len - start && r->text.p[0] == at[0] &&
        memcmp(r->text.p, at, r->text.n) == 0) {
      lx->pos = start + r->text.n;
      return r;
    }
  }
  size_t end = lx->failed ? SIZE_MAX : shape_extent(lx->text, start, lx->len);
  hlo_str_t key = {at, (uint32_t)(end == SIZE_MAX ? 0 : end - start)};
  if (end != SIZE_MAX) {
    const hlo_shape_t *known = hbm__hlo_namemap_get(&ps->shapes, 0, key);
    if (known) {
      lx->pos = end;
      remember_shape(ps, known);
      return known;
    }
  }
  const hlo_shape_t *s = hbm__parse_shape(lx, &ps->m->arena);
  if (s && end == lx->pos) {
    if (hbm__hlo_namemap_put(&ps->shapes, 0, key, (void *)s) < 0)
      return NULL;
    remember_shape(ps, s);
  }
  return s;
}

/* "{out}: (operand, {in}[, may-alias|must-alias])" lists, used by input_output_alias and
 * output_to_operand_aliasing. With donor = true: "(param, {index})" (buffer_donor). */
static bool parse_alias_list(parser_t *ps, bool donor, hlo_alias_pair_t **out, uint32_t *n) {
  hlo_lexer_t *lx = &ps->lx;
  ps->pairs.len = 0;
  if (!hbm__hlo_lex_expect(lx, '{'))
    return false;
  while (!lx->failed && !hbm__hlo_lex_accept(lx, '}')) {
    hlo_alias_pair_t p = {0};
    if (!donor) {
      if (!hbm__parse_shape_index(lx, &ps->m->arena, &p.out, &p.n_out) ||
          !hbm__hlo_lex_expect(lx, ':'))
        return false;
    }
    if (!hbm__hlo_lex_expect(lx, '('))
      return false;
    if (!hbm__hlo_lex_int(lx, &p.operand) || p.operand < 0)
      return hbm__hlo_lex_expected(lx, "a parameter or operand number");
    if (!hbm__hlo_lex_expect(lx, ',') || !hbm__parse_shape_index(lx, &ps->m->arena, &p.in, &p.n_in))
      return false;
    if (hbm__hlo_lex_accept(lx, ',')) {
      hlo_str_t kind;
      if (!hbm__hlo_lex_ident(lx, &kind))
        return hbm__hlo_lex_expected(lx, "may-alias or must-alias");
      p.must_alias = HLO_STR_IS(kind, "must-alias");
    }
    if (!hbm__hlo_lex_expect(lx, ')') || !hbm__hlo_vec_push(&ps->pairs, &p))
      return false;
    if (!hbm__hlo_lex_accept(lx, ',') && hbm__hlo_lex_peek(lx) != '}')
      return hbm__hlo_lex_expected(lx, "',' or '}'");
  }
  if (lx->failed)
    return false;
  *n = (uint32_t)ps->pairs.len;
  *out = copy_vec(ps, &ps->pairs);
  return *out != NULL;
}

static bool parse_module_header(parser_t *ps) {
  hlo_lexer_t *lx = &ps->lx;
  hlo_module_t *m = ps->m;
  if (!hbm__hlo_lex_accept_word(lx, "HloModule")) {
    /* XLA also reads bare computations; the module is then named after the entry. */
    return true;
  }
  if (!hbm__hlo_lex_name(lx, &m->name))
    return hbm__hlo_lex_expected(lx, "the module name after 'HloModule'");
  while (hbm__hlo_lex_accept(lx, ',')) {
    hlo_str_t key;
    if (!hbm__hlo_lex_ident(lx, &key))
      return hbm__hlo_lex_expected(lx, "a module attribute name");
    if (!hbm__hlo_lex_expect(lx, '='))
      return false;
    if (HLO_STR_IS(key, "is_scheduled")) {
      hlo_str_t v;
      if (!hbm__hlo_lex_ident(lx, &v))
        return hbm__hlo_lex_expected(lx, "true or false");
      m->is_scheduled = HLO_STR_IS(v, "true");
    } else if (HLO_STR_IS(key, "num_partitions")) {
      if (!hbm__hlo_lex_int(lx, &m->num_partitions))
        return hbm__hlo_lex_expected(lx, "the number of partitions");
    } else if (HLO_STR_IS(key, "input_output_alias")) {
      if (!parse_alias_list(ps, false, &m->io_alias, &m->n_io_alias))
        return false;
    } else if (HLO_STR_IS(key, "buffer_donor")) {
      if (!parse_alias_list(ps, true, &m->donors, &m->n_donors))
        return false;
    } else if (!hbm__hlo_lex_skip_value(lx)) {
      return false;
    }
  }
  return !lx->failed;
}

static bool push_callref(parser_t *ps, hlo_call_role_t role) {
  hlo_callref_t c = {.role = (uint8_t)role};
  if (!hbm__hlo_lex_name(&ps->lx, &c.name))
    return hbm__hlo_lex_expected(&ps->lx, "a computation name");
  return hbm__hlo_vec_push(&ps->calls, &c);
}

static bool parse_callref_list(parser_t *ps, hlo_call_role_t role) {
  hlo_lexer_t *lx = &ps->lx;
  if (!hbm__hlo_lex_accept(lx, '{'))
    return push_callref(ps, role);
  if (hbm__hlo_lex_accept(lx, '}'))
    return true;
  do {
    if (!push_callref(ps, role))
      return false;
  } while (hbm__hlo_lex_accept(lx, ','));
  return hbm__hlo_lex_expect(lx, '}');
}

/* The instruction's own metadata, allocated when it first has some. */
static hlo_metadata_t *own_metadata(parser_t *ps, hlo_instr_t *in) {
  if (in->meta != &hbm__hlo_no_metadata)
    return (hlo_metadata_t *)in->meta;
  hlo_metadata_t *md = hbm__hlo_arena_alloc(&ps->m->arena, sizeof *md);
  if (md)
    in->meta = md;
  return md;
}

/* metadata={op_type="..." op_name="..." source_file="..." source_line=N stack_frame_id=N ...}
 * (XLA's ParseMetadata; its other fields, such as scheduling_name, are skipped) */
static bool parse_metadata(parser_t *ps, hlo_instr_t *in) {
  hlo_lexer_t *lx = &ps->lx;
  hlo_metadata_t *md = own_metadata(ps, in);
  if (!md || !hbm__hlo_lex_expect(lx, '{'))
    return false;
  while (!lx->failed && !hbm__hlo_lex_accept(lx, '}')) {
    hlo_str_t key;
    if (!hbm__hlo_lex_ident(lx, &key))
      return hbm__hlo_lex_expected(lx, "a metadata field such as op_name=\"...\"");
    if (!hbm__hlo_lex_expect(lx, '='))
      return false;
    hlo_str_t *dst = HLO_STR_IS(key, "op_name")       ? &md->op_name
                     : HLO_STR_IS(key, "op_type")     ? &md->op_type
                     : HLO_STR_IS(key, "source_file") ? &md->source_file
                                                      : NULL;
    if (dst) {
      if (!hbm__hlo_lex_string(lx, dst))
        return hbm__hlo_lex_expected(lx, "a quoted string");
    } else if (HLO_STR_IS(key, "source_line")) {
      if (!hbm__hlo_lex_int(lx, &md->source_line))
        return hbm__hlo_lex_expected(lx, "a line number");
    } else if (HLO_STR_IS(key, "stack_frame_id")) {
      if (!hbm__hlo_lex_int(lx, &md->stack_frame_id))
        return hbm__hlo_lex_expected(lx, "a stack frame id");
    } else if (!hbm__hlo_lex_skip_value(lx)) {
      return false;
    }
    hbm__hlo_lex_accept(lx, ','); /* older printers separate fields with commas */
  }
  return !lx->failed;
}

/* A mesh axis as XLA's printer names it: a quoted or plain name, or an index. */
static bool skip_mesh_axis_name(hlo_lexer_t *lx) {
  hlo_str_t name;
  int64_t index;
  char c = hbm__hlo_lex_peek(lx);
  if (c == '"' || c == '\'')
    return hbm__hlo_lex_string(lx, &name);
  if (hbm__hlo_lex_ident(lx, &name) || hbm__hlo_lex_int(lx, &index))
    return true;
  return hbm__hlo_lex_expected(lx, "a mesh axis name such as 'x'");
}

/* The mesh: `mesh[name=size,...]`, then `, device_ids=(...)` when the devices are not in
 * order, or `maximal_mesh[device_id=N]` (XLA's Mesh::ToString). */
static bool skip_mesh(hlo_lexer_t *lx) {
  hlo_str_t kind = {NULL, 0};
  int64_t v;
  hbm__hlo_lex_ident(lx, &kind);
  if (!hbm__hlo_lex_expect(lx, '['))
    return false;
  if (HLO_STR_IS(kind, "maximal_mesh")) {
    if (!hbm__hlo_lex_accept_word(lx, "device_id") || !hbm__hlo_lex_expect(lx, '='))
      return lx->failed ? false : hbm__hlo_lex_expected(lx, "device_id=");
    if (!hbm__hlo_lex_int(lx, &v))
      return hbm__hlo_lex_expected(lx, "a device id");
    return hbm__hlo_lex_expect(lx, ']');
  }
  if (!hbm__hlo_lex_accept(lx, ']')) {
    do {
      if (!skip_mesh_axis_name(lx) || !hbm__hlo_lex_expect(lx, '='))
        return false;
      hbm__hlo_lex_skip_ws(lx);
      size_t at = lx->pos;
      if (!hbm__hlo_lex_int(lx, &v) || v <= 0) {
        lx->pos = at;
        return hbm__hlo_lex_expected(lx, "a positive mesh axis size");
      }
    } while (hbm__hlo_lex_accept(lx, ','));
    if (!hbm__hlo_lex_expect(lx, ']'))
      return false;
  }
  size_t save = lx->pos;
  if (hbm__hlo_lex_accept(lx, ',')) {
    if (!hbm__hlo_lex_accept_word(lx, "device_ids")) {
      lx->pos = save; /* the ',' of the next attribute */
      return !lx->failed;
    }
    if (!hbm__hlo_lex_expect(lx, '=') || hbm__hlo_lex_peek(lx) != '(')
      return lx->failed ? false : hbm__hlo_lex_expected(lx, "'(' and the device ids");
    return hbm__hlo_lex_skip_group(lx);
  }
  return !lx->failed;
}

/* replica_groups=mesh['x'=4,'y'=2] {'x'}: XLA's MeshAxesReplicaGroupList as printed (the
 * mesh, a space, then the axes the groups span, each maybe a sub-axis `'x':(1)2`). The
 * groups decide no buffer, so they are checked and skipped. */
static bool skip_mesh_device_list(hlo_lexer_t *lx) {
  if (!skip_mesh(lx))
    return false;
  if (!hbm__hlo_lex_expect(lx, '{'))
    return false;
  if (hbm__hlo_lex_accept(lx, '}'))
    return true;
  do {
    int64_t pre, size;
    if (!skip_mesh_axis_name(lx))
      return false;
    if (hbm__hlo_lex_accept(lx, ':')) {
      if (!hbm__hlo_lex_expect(lx, '(') || !hbm__hlo_lex_int(lx, &pre) ||
          !hbm__hlo_lex_expect(lx, ')') || !hbm__hlo_lex_int(lx, &size))
        return lx->failed ? false : hbm__hlo_lex_expected(lx, "a sub-axis such as :(1)2");
    }
  } while (hbm__hlo_lex_accept(lx, ','));
  return hbm__hlo_lex_expect(lx, '}');
}

/* True at `mesh[` or `maximal_mesh[` (a value in the mesh form). */
static bool at_mesh_value(hlo_lexer_t *lx) {
  char c = hbm__hlo_lex_peek(lx);
  if (c != 'm')
    return false;
  const char *t = lx->text + lx->pos;
  size_t left = lx->len - lx->pos;
  return (left > 5 && !memcmp(t, "mesh[", 5)) || (left > 13 && !memcmp(t, "maximal_mesh[", 13));
}

static bool parse_attribute(parser_t *ps, hlo_instr_t *in, hlo_str_t *name) {
  hlo_lexer_t *lx = &ps->lx;
  hlo_str_t key;
  if (!hbm__hlo_lex_ident(lx, &key))
    return hbm__hlo_lex_expected(lx, "an attribute name");
  *name = key;
  if (!hbm__hlo_lex_expect(lx, '='))
    return false;
  if (HLO_STR_IS(key, "metadata")) /* the most common by far */
    return parse_metadata(ps, in);
#define CALL_ATTR(lit, role)                                                                       \
  { lit, sizeof(lit) - 1, role }
  static const struct {
    const char *name;
    uint32_t len;
    hlo_call_role_t role;
  } call_attrs[] = {
      CALL_ATTR("to_apply", HLO_CALL_TO_APPLY),
      CALL_ATTR("calls", HLO_CALL_CALLS),
      CALL_ATTR("condition", HLO_CALL_CONDITION),
      CALL_ATTR("body", HLO_CALL_BODY),
      CALL_ATTR("select", HLO_CALL_SELECT),
      CALL_ATTR("scatter", HLO_CALL_SCATTER),
      CALL_ATTR("called_computations", HLO_CALL_CALLED),
      CALL_ATTR("branch_computations", HLO_CALL_BRANCH),
      CALL_ATTR("true_computation", HLO_CALL_BRANCH),
      CALL_ATTR("false_computation", HLO_CALL_BRANCH),
  };
#undef CALL_ATTR
  for (size_t i = 0; i < HBM_ARRAY_LEN(call_attrs); i++)
    if (key.n == call_attrs[i].len && !memcmp(key.p, call_attrs[i].name, key.n))
      return parse_callref_list(ps, call_attrs[i].role);
  if (HLO_STR_IS(key, "index") || HLO_STR_IS(key, "tuple_index")) {
    if (!hbm__hlo_lex_int(lx, &in->index) || in->index < 0)
      return hbm__hlo_lex_expected(lx, "a tuple index");
    return true;
  }
  if (HLO_STR_IS(key, "output_to_operand_aliasing"))
    return parse_alias_list(ps, false, &in->aliasing, &in->n_aliasing);
  if (HLO_STR_IS(key, "custom_call_target")) {
    hlo_metadata_t *md = own_metadata(ps, in);
    return (md && hbm__hlo_lex_string(lx, &md->custom_call_target)) ||
           hbm__hlo_lex_expected(lx, "a quoted custom-call target");
  }
  if (HLO_STR_IS(key, "kind")) {
    hlo_str_t kind;
    if (!hbm__hlo_lex_ident(lx, &kind))
      return hbm__hlo_lex_expected(lx, "a fusion kind such as kLoop");
    in->fusion_kind = kind.n > 1 && kind.p[0] == 'k' ? (uint8_t)kind.p[1] : 0;
    return true;
  }
  if (at_mesh_value(lx))
    return skip_mesh_device_list(lx);
  return hbm__hlo_lex_skip_value(lx);
}

/* After the attributes, the next instruction starts on a new line (or the computation ends).
 * Anything else on the line is a value whose form the attribute loop does not know: say
 * which attribute it follows, rather than "expected an instruction name". */
static bool check_instruction_end(hlo_lexer_t *lx, size_t end, hlo_str_t last_attr) {
  size_t at = lx->pos;
  char c = hbm__hlo_lex_peek(lx);
  if (lx->failed || c == '\0' || c == '}' || c == '%' || hbm__hlo_is_ident_start(c) ||
      memchr(lx->text + end, '\n', lx->pos - end))
    return !lx->failed;
  lx->pos = at;
  if (!last_attr.n)
    return hbm__hlo_lex_expected(lx, "',' and an attribute, or the end of the instruction");
  char what[160];
  snprintf(what, sizeof what,
           "',' or the end of the instruction after the value of attribute '%.*s' (a form "
           "of it hbm does not read)",
           (int)(last_attr.n < 60 ? last_attr.n : 60), last_attr.p);
  return hbm__hlo_lex_expected(lx, what);
}

/* One operand: its name, after the shape older printers write before it ("add(f32[] %x,
 * f32[] %y)"). A name without '%' is read once: it is a shape only if it names an element
 * type and a '[' follows. 1: *name read; 0: no name there; -1: a bad shape (error set). */
static int parse_operand(parser_t *ps, hlo_str_t *name, size_t *at) {
  hlo_lexer_t *lx = &ps->lx;
  char c = hbm__hlo_lex_peek(lx);
  const char *t = lx->text;
  if (c == '(' && !parse_shape_interned(ps))
    return -1;
  if (c != '(' && c != '%' && hbm__hlo_is_ident_start(c)) {
    size_t start = lx->pos, q = start + 1;
    while (q < lx->len && hbm__hlo_is_ident_char(t[q]))
      q++;
    if (q >= lx->len || t[q] != '[' || hbm__etype_lookup(t + start, q - start) == HLO_T_INVALID) {
      *at = start;
      *name = (hlo_str_t){t + start, (uint32_t)(q - start)};
      lx->pos = q;
      return 1;
    }
    if (!parse_shape_interned(ps))
      return -1;
  }
  hbm__hlo_lex_skip_ws(lx);
  *at = lx->pos;
  return hbm__hlo_lex_name(lx, name) ? 1 : 0;
}

static bool parse_operands(parser_t *ps, hlo_comp_t *comp, hlo_instr_t *in) {
  hlo_lexer_t *lx = &ps->lx;
  ps->operands.len = ps->spans.len = 0;
  if (!hbm__hlo_lex_expect(lx, '('))
    return false;
  if (hbm__hlo_lex_accept(lx, ')'))
    return true;
  do {
    size_t at;
    hlo_str_t name;
    int got = parse_operand(ps, &name, &at);
    if (got < 0)
      return false;
    if (!got)
      return hbm__hlo_lex_expected(lx, "an operand name");
    hlo_instr_t *op = instr_lookup(ps, name);
    if (!op)
      return hbm__hlo_lex_error_at(lx, at,
                                   "expected an instruction defined earlier in "
                                   "computation '%.*s'; '%.*s' is not",
                                   (int)comp->name.n, comp->name.p, (int)name.n, name.p);
    hlo_span_t span = {(uint32_t)at, (uint32_t)(lx->pos - at)};
    if (!hbm__hlo_vec_push(&ps->operands, &op) || !hbm__hlo_vec_push(&ps->spans, &span))
      return false;
  } while (hbm__hlo_lex_accept(lx, ','));
  if (!hbm__hlo_lex_expect(lx, ')'))
    return false;
  in->n_operands = (uint32_t)ps->operands.len;
  in->operands = copy_vec(ps, &ps->operands);
  in->operand_spans = copy_vec(ps, &ps->spans);
  return in->operands && in->operand_spans;
}

/* A module uses a few dozen opcodes thousands of times: they are looked up once each. */
static hlo_opcode_t lookup_opcode(parser_t *ps, hlo_str_t text) {
  void *known = hbm__hlo_namemap_get(&ps->opcodes, 0, text);
  if (known)
    return (hlo_opcode_t)((uintptr_t)known - 1);
  hlo_opcode_t op = hbm__opcode_lookup(text.p, text.n);
  /* Out of memory here only costs the next lookup its shortcut. */
  hbm__hlo_namemap_put(&ps->opcodes, 0, text, (void *)((uintptr_t)op + 1));
  return op;
}

/* True (and past it) when the next word is ROOT: checked for every instruction. */
static bool accept_root(hlo_lexer_t *lx) {
  hbm__hlo_lex_skip_ws(lx);
  const char *t = lx->text + lx->pos;
  if (lx->failed || lx->len - lx->pos < 4 || t[0] != 'R' || memcmp(t, "ROOT", 4) != 0 ||
      (lx->len - lx->pos > 4 && hbm__hlo_is_ident_char(t[4])))
    return false;
  lx->pos += 4;
  return true;
}

static hlo_instr_t *parse_instruction(parser_t *ps, hlo_comp_t *comp, bool *is_root) {
  hlo_lexer_t *lx = &ps->lx;
  hlo_module_t *m = ps->m;
  *is_root = accept_root(lx);
  hbm__hlo_lex_skip_ws(lx);
  size_t start = lx->pos;
  hlo_instr_t *in = hbm__hlo_arena_alloc(&m->arena, sizeof *in);
  if (!in)
    return NULL;
  in->index = -1;
  in->parent = comp;
  in->meta = &hbm__hlo_no_metadata;
  if (!hbm__hlo_lex_name(lx, &in->name)) {
    hbm__hlo_lex_expected(lx, "an instruction name, ROOT or '}'");
    return NULL;
  }
  /* Fetch the name's slot in the table now; it is written when the instruction is done. */
  const instr_table_t *t = &ps->instr_names;
  __builtin_prefetch(&t->slots[hash32(in->name) & (t->cap - 1)], 1);
  if (!hbm__hlo_lex_expect(lx, '=') || !(in->shape = parse_shape_interned(ps)))
    return NULL;
  hlo_str_t opcode;
  if (!hbm__hlo_lex_ident(lx, &opcode)) {
    hbm__hlo_lex_expected(lx, "an opcode such as add, fusion or custom-call");
    return NULL;
  }
  in->opcode_text = (hlo_span_t){(uint32_t)(opcode.p - lx->text), opcode.n};
  in->opcode = (uint16_t)lookup_opcode(ps, opcode);
  if (hbm__hlo_lex_peek(lx) != '(') {
    hbm__hlo_lex_expected(lx, "'(' and the operands");
    return NULL;
  }
  if (in->opcode == HLO_OP_CONSTANT) {
    if (!hbm__hlo_lex_skip_group(lx)) /* the literal */
      return NULL;
  } else if (in->opcode == HLO_OP_PARAMETER) {
    lx->pos++;
    if (!hbm__hlo_lex_int(lx, &in->index) || in->index < 0) {
      hbm__hlo_lex_expected(lx, "a parameter number");
      return NULL;
    }
    if (!hbm__hlo_lex_expect(lx, ')'))
      return NULL;
  } else if (!parse_operands(ps, comp, in)) {
    return NULL;
  }
  in->operands_end = (uint32_t)lx->pos;
  size_t end = lx->pos; /* the text ends after the last attribute, not at the next line */
  ps->calls.len = 0;
  hlo_str_t last_attr = {NULL, 0};
  while (hbm__hlo_lex_accept(lx, ',')) {
    if (!parse_attribute(ps, in, &last_attr))
      return NULL;
    end = lx->pos;
  }
  if (lx->failed || !check_instruction_end(lx, end, last_attr))
    return NULL;
  if (ps->calls.len) {
    in->n_called = (uint32_t)ps->calls.len;
    if (!(in->called = copy_vec(ps, &ps->calls)))
      return NULL;
  }
  in->text = (hlo_span_t){(uint32_t)start, (uint32_t)(end - start)};
  return in;
}

static bool finish_parameters(parser_t *ps, hlo_comp_t *c) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < c->n_instrs; i++)
    n += c->instrs[i]->opcode == HLO_OP_PARAMETER;
  c->n_params = n;
  c->params = hbm__hlo_arena_alloc(&ps->m->arena, (n ? n : 1) * sizeof *c->params);
  if (!c->params)
    return false;
  for (uint32_t i = 0; i < c->n_instrs; i++) {
    hlo_instr_t *in = c->instrs[i];
    if (in->opcode != HLO_OP_PARAMETER)
      continue;
    if (in->index >= (int64_t)n || c->params[in->index])
      return hbm__hlo_lex_error_at(&ps->lx, in->text.start,
                                   "expected parameter numbers 0..%u "
                                   "once each in computation '%.*s'; parameter(%lld) is not",
                                   n ? n - 1 : 0, (int)c->name.n, c->name.p, (long long)in->index);
    c->params[in->index] = in;
  }
  return true;
}

static hlo_comp_t *parse_computation(parser_t *ps) {
  hlo_lexer_t *lx = &ps->lx;
  hlo_module_t *m = ps->m;
  hlo_comp_t *c = hbm__hlo_arena_alloc(&m->arena, sizeof *c);
  if (!c)
    return NULL;
  c->id = (uint32_t)ps->comps.len + 1;
  c->is_entry = hbm__hlo_lex_accept_word(lx, "ENTRY");
  hbm__hlo_lex_skip_ws(lx);
  size_t at = lx->pos;
  if (!hbm__hlo_lex_name(lx, &c->name)) {
    hbm__hlo_lex_expected(lx, "a computation name or ENTRY");
    return NULL;
  }
  int put = hbm__hlo_namemap_put(&ps->comp_names, 0, c->name, c);
  if (put <= 0) {
    if (put == 0)
      hbm__hlo_lex_error_at(lx, at, "computation '%.*s' is defined twice", (int)c->name.n,
                            c->name.p);
    return NULL;
  }
  if (hbm__hlo_lex_peek(lx) == '(' && !hbm__hlo_lex_skip_group(lx)) /* parameters, repeated below */
    return NULL;
  if (hbm__hlo_lex_accept2(lx, "->") && !parse_shape_interned(ps))
    return NULL;
  if (!hbm__hlo_lex_expect(lx, '{'))
    return NULL;
  c->body.start = (uint32_t)lx->pos;
  ps->instrs.len = 0;
  if (!instr_table_reset(&ps->instr_names))
    return NULL;
  hlo_instr_t *root = NULL;
  while (!lx->failed && hbm__hlo_lex_peek(lx) != '}') {
    if (hbm__hlo_lex_at_end(lx)) {
      hbm__hlo_lex_expected(lx, "'}' to close the computation");
      return NULL;
    }
    bool is_root;
    hlo_instr_t *in = parse_instruction(ps, c, &is_root);
    if (!in)
      return NULL;
    in->id = (uint32_t)ps->instrs.len;
    if (!hbm__hlo_vec_push(&ps->instrs, &in))
      return NULL;
    bool dup;
    if (!instr_insert(ps, in->id, &dup)) {
      if (dup)
        hbm__hlo_lex_error_at(lx, in->text.start, "instruction '%.*s' is defined twice",
                              (int)in->name.n, in->name.p);
      return NULL;
    }
    if (is_root) {
      if (root) {
        hbm__hlo_lex_error_at(lx, in->text.start, "computation '%.*s' has two ROOTs",
                              (int)c->name.n, c->name.p);
        return NULL;
      }
      root = in;
    }
  }
  if (lx->failed)
    return NULL;
  c->body.len = (uint32_t)(lx->pos - c->body.start);
  lx->pos++; /* '}' */
  if (ps->instrs.len == 0) {
    hbm__hlo_lex_error_at(lx, at, "computation '%.*s' has no instructions", (int)c->name.n,
                          c->name.p);
    return NULL;
  }
  c->n_instrs = (uint32_t)ps->instrs.len;
  if (!(c->instrs = copy_vec(ps, &ps->instrs)))
    return NULL;
  c->root = root ? root : c->instrs[c->n_instrs - 1];
  c->root->is_root = 1;
  m->n_instrs += c->n_instrs;
  /* ", execution_thread=..." after the closing brace */
  while (hbm__hlo_lex_accept(lx, ',')) {
    hlo_str_t key;
    if (!hbm__hlo_lex_ident(lx, &key) || !hbm__hlo_lex_expect(lx, '=') ||
        !hbm__hlo_lex_skip_value(lx)) {
      if (!lx->failed)
        hbm__hlo_lex_expected(lx, "a computation attribute");
      return NULL;
    }
  }
  return finish_parameters(ps, c) ? c : NULL;
}

/* Newer XLA prints its stack-frame tables between the module header and the computations
 * (hbm also takes them after). */
static bool parse_frame_tables(parser_t *ps) {
  return !hbm__hlo_at_frame_tables(&ps->lx) ||
         hbm__hlo_parse_frame_tables(&ps->lx, &ps->m->arena, &ps->m->frames);
}

static bool resolve_calls(parser_t *ps) {
  hlo_module_t *m = ps->m;
  for (uint32_t c = 0; c < m->n_comps; c++)
    for (uint32_t i = 0; i < m->comps[c]->n_instrs; i++) {
      hlo_instr_t *in = m->comps[c]->instrs[i];
      for (uint32_t k = 0; k < in->n_called; k++) {
        hlo_callref_t *ref = &in->called[k];
        ref->comp = hbm__hlo_namemap_get(&ps->comp_names, 0, ref->name);
        if (!ref->comp)
          return hbm__hlo_lex_error_at(&ps->lx, (size_t)(ref->name.p - m->text),
                                       "expected the name of a computation of this module; "
                                       "'%.*s' is not one",
                                       (int)ref->name.n, ref->name.p);
      }
    }
  return true;
}

static bool parse_module(parser_t *ps) {
  hlo_lexer_t *lx = &ps->lx;
  hlo_module_t *m = ps->m;
  if (!parse_module_header(ps))
    return false;
  for (;;) {
    if (!parse_frame_tables(ps))
      return false;
    if (hbm__hlo_lex_at_end(lx))
      break;
    hlo_comp_t *c = parse_computation(ps);
    if (!c || !hbm__hlo_vec_push(&ps->comps, &c))
      return false;
    if (c->is_entry) {
      if (m->entry)
        return hbm__hlo_lex_error_at(lx, (size_t)(c->name.p - m->text),
                                     "a module has one ENTRY computation; '%.*s' is a second one",
                                     (int)c->name.n, c->name.p);
      m->entry = c;
    }
  }
  if (lx->failed)
    return false;
  if (ps->comps.len == 0)
    return hbm__hlo_lex_expected(lx, "a computation");
  m->n_comps = (uint32_t)ps->comps.len;
  if (!(m->comps = copy_vec(ps, &ps->comps)))
    return false;
  if (!m->entry) { /* XLA: the last computation is the entry */
    m->entry = m->comps[m->n_comps - 1];
    m->entry->is_entry = 1;
  }
  if (!m->name.n)
    m->name = m->entry->name;
  return resolve_calls(ps);
}

hlo_module_t *hbm__hlo_parse(const char *text, size_t len, const char *name) {
  if (len >= UINT32_MAX) {
    hbm__error(HBM_ERR_INVALID, "%s: HLO text larger than 4 GiB is not supported",
               name ? name : "<input>");
    return NULL;
  }
  hlo_module_t *m = calloc(1, sizeof *m);
  if (!m) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  hbm__hlo_arena_init(&m->arena);
  m->num_partitions = 1;
  m->text = malloc(len + 1);
  m->filename = hbm__strdup(name ? name : "<input>");
  if (!m->text || !m->filename) {
    hbm__hlo_free(m);
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  memcpy(m->text, text, len);
  m->text[len] = '\0';
  m->len = len;
  parser_t ps = {.m = m};
  hbm__hlo_lex_init(&ps.lx, m->text, len, m->filename);
  hbm__hlo_namemap_init(&ps.shapes);
  hbm__hlo_namemap_init(&ps.comp_names);
  hbm__hlo_namemap_init(&ps.opcodes);
  hbm__hlo_vec_init(&ps.comps, sizeof(hlo_comp_t *));
  hbm__hlo_vec_init(&ps.instrs, sizeof(hlo_instr_t *));
  hbm__hlo_vec_init(&ps.operands, sizeof(hlo_instr_t *));
  hbm__hlo_vec_init(&ps.spans, sizeof(hlo_span_t));
  hbm__hlo_vec_init(&ps.calls, sizeof(hlo_callref_t));
  hbm__hlo_vec_init(&ps.pairs, sizeof(hlo_alias_pair_t));
  /* XLA's lexer refuses NUL bytes anywhere, comments included; so do we (the text is also
   * printed back as a C string after remat). */
  const char *nul = memchr(m->text, '\0', len);
  bool ok = nul ? hbm__hlo_lex_error_at(&ps.lx, (size_t)(nul - m->text),
                                        "expected text, found a NUL byte")
                : parse_module(&ps);
  if (!ok && !ps.lx.failed && hbm_last_status() != HBM_ERR_HOST_MEMORY)
    hbm__hlo_lex_error_at(&ps.lx, ps.lx.pos, "could not parse the module");
  ok = ok && hbm__hlo_classify(m) == HBM_OK;
  free(ps.instr_names.slots);
  hbm__hlo_namemap_free(&ps.shapes);
  hbm__hlo_namemap_free(&ps.comp_names);
  hbm__hlo_namemap_free(&ps.opcodes);
  hbm__hlo_vec_free(&ps.comps);
  hbm__hlo_vec_free(&ps.instrs);
  hbm__hlo_vec_free(&ps.operands);
  hbm__hlo_vec_free(&ps.spans);
  hbm__hlo_vec_free(&ps.calls);
  hbm__hlo_vec_free(&ps.pairs);
  if (!ok) {
    hbm__hlo_free(m);
    return NULL;
  }
  return m;
}
