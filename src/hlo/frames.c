/* frames.c — the module's stack-frame index (the FileNames / FunctionNames / FileLocations /
 * StackFrames tables that XLA prints after the module header, as its hlo_parser reads them)
 * and the source of an instruction: its metadata's source_file/source_line, else the frame its
 * stack_frame_id names. JAX 0.10 writes only stack_frame_id, so this is where today's source
 * lines come from. Ids are 1-based as in XLA's StackFrameIndexProto; XLA prints a frame's
 * parent as parent_frame_id + 1 (its parser subtracts 1), so a printed 1 means no parent.
 * An id that points nowhere is reported by the caller as a warning, never followed. */
#include "lexer.h"

#include <string.h>

typedef enum { T_NONE, T_FILES, T_FUNCTIONS, T_LOCATIONS, T_FRAMES } table_t;

static table_t table_at(hlo_lexer_t *lx) {
  return hbm__hlo_lex_at_word(lx, "FileNames")       ? T_FILES
         : hbm__hlo_lex_at_word(lx, "FunctionNames") ? T_FUNCTIONS
         : hbm__hlo_lex_at_word(lx, "FileLocations") ? T_LOCATIONS
         : hbm__hlo_lex_at_word(lx, "StackFrames")   ? T_FRAMES
                                                     : T_NONE;
}

bool hbm__hlo_at_frame_tables(hlo_lexer_t *lx) { return table_at(lx) != T_NONE; }

/* A row's `{key=int key=int ...}` (commas between them allowed, as XLA's sub-attributes):
 * the values of the keys named in `keys` go to vals[i]; other keys are skipped. */
static bool parse_int_fields(hlo_lexer_t *lx, const char *const *keys, int64_t *vals, size_t n) {
  if (!hbm__hlo_lex_expect(lx, '{'))
    return false;
  while (!lx->failed && !hbm__hlo_lex_accept(lx, '}')) {
    hbm__hlo_lex_accept(lx, ',');
    hlo_str_t key;
    if (!hbm__hlo_lex_ident(lx, &key))
      return hbm__hlo_lex_expected(lx, "a field such as file_name_id=1, or '}'");
    if (!hbm__hlo_lex_expect(lx, '='))
      return false;
    size_t k = 0;
    while (k < n && !hbm__hlo_str_eq(key, keys[k]))
      k++;
    if (k == n) {
      if (!hbm__hlo_lex_skip_value(lx))
        return false;
    } else if (!hbm__hlo_lex_int(lx, &vals[k])) {
      return hbm__hlo_lex_expected(lx, "an integer");
    }
  }
  return !lx->failed;
}

static bool push_string_row(hlo_lexer_t *lx, hlo_vec_t *rows) {
  hlo_str_t s;
  if (!hbm__hlo_lex_string(lx, &s))
    return hbm__hlo_lex_expected(lx, "a quoted name");
  return hbm__hlo_vec_push(rows, &s);
}

static bool push_location_row(hlo_lexer_t *lx, hlo_vec_t *rows) {
  static const char *const keys[] = {"file_name_id", "function_name_id", "line", "column"};
  int64_t v[4] = {0, 0, 0, 0};
  if (!parse_int_fields(lx, keys, v, 4))
    return false;
  hlo_file_location_t loc = {.file = v[0], .function = v[1], .line = v[2], .column = v[3]};
  return hbm__hlo_vec_push(rows, &loc);
}

static bool push_frame_row(hlo_lexer_t *lx, hlo_vec_t *rows) {
  static const char *const keys[] = {"file_location_id", "parent_frame_id"};
  int64_t v[2] = {0, 0};
  if (!parse_int_fields(lx, keys, v, 2))
    return false;
  hlo_stack_frame_t f = {.location = v[0], .parent = v[1] - 1};
  return hbm__hlo_vec_push(rows, &f);
}

static void *copy_rows(hlo_arena_t *arena, const hlo_vec_t *v, uint32_t *n) {
  *n = (uint32_t)v->len;
  void *d = hbm__hlo_arena_alloc(arena, (v->len ? v->len : 1) * v->item);
  if (d && v->len)
    memcpy(d, v->data, v->len * v->item);
  return d;
}

/* Rows of one table: `N "text"` or `N {fields}`; N is the row's id, which XLA's parser does
 * not read either (rows are numbered in order). */
static bool parse_rows(hlo_lexer_t *lx, table_t t, hlo_vec_t *rows) {
  for (;;) {
    char c = hbm__hlo_lex_peek(lx);
    if (c < '0' || c > '9')
      return !lx->failed;
    int64_t id;
    if (!hbm__hlo_lex_int(lx, &id))
      return false;
    bool ok = t == T_FILES || t == T_FUNCTIONS ? push_string_row(lx, rows)
              : t == T_LOCATIONS               ? push_location_row(lx, rows)
                                               : push_frame_row(lx, rows);
    if (!ok)
      return false;
    if ((uint64_t)rows->len > UINT32_MAX / 2)
      return hbm__hlo_lex_error_at(lx, lx->pos, "stack-frame table too long");
  }
}

bool hbm__hlo_parse_frame_tables(hlo_lexer_t *lx, hlo_arena_t *arena, hlo_frame_index_t *fx) {
  hlo_vec_t rows[4];
  static const size_t item[4] = {sizeof(hlo_str_t), sizeof(hlo_str_t), sizeof(hlo_file_location_t),
                                 sizeof(hlo_stack_frame_t)};
  for (int i = 0; i < 4; i++)
    hbm__hlo_vec_init(&rows[i], item[i]);
  bool ok = true;
  table_t t;
  while (ok && (t = table_at(lx)) != T_NONE) {
    hlo_str_t title;
    hbm__hlo_lex_ident(lx, &title);
    ok = parse_rows(lx, t, &rows[t - T_FILES]);
  }
  /* Tables may come in more than one place (before and after the computations): rows add. */
  const hlo_vec_t old[4] = {
      {fx->files, fx->n_files, 0, sizeof(hlo_str_t)},
      {fx->functions, fx->n_functions, 0, sizeof(hlo_str_t)},
      {fx->locations, fx->n_locations, 0, sizeof(hlo_file_location_t)},
      {fx->frames, fx->n_frames, 0, sizeof(hlo_stack_frame_t)},
  };
  void *out[4] = {0};
  uint32_t n[4] = {0};
  for (int i = 0; ok && i < 4; i++) {
    if (!rows[i].len) {
      out[i] = old[i].data;
      n[i] = (uint32_t)old[i].len;
      continue;
    }
    hlo_vec_t all;
    hbm__hlo_vec_init(&all, item[i]);
    ok = hbm__hlo_vec_reserve(&all, old[i].len + rows[i].len);
    if (ok) {
      if (old[i].len)
        memcpy(all.data, old[i].data, old[i].len * item[i]);
      memcpy((char *)all.data + old[i].len * item[i], rows[i].data, rows[i].len * item[i]);
      all.len = old[i].len + rows[i].len;
      ok = (out[i] = copy_rows(arena, &all, &n[i])) != NULL;
    }
    hbm__hlo_vec_free(&all);
  }
  if (ok) {
    fx->files = out[0], fx->n_files = n[0];
    fx->functions = out[1], fx->n_functions = n[1];
    fx->locations = out[2], fx->n_locations = n[2];
    fx->frames = out[3], fx->n_frames = n[3];
  }
  for (int i = 0; i < 4; i++)
    hbm__hlo_vec_free(&rows[i]);
  return ok && !lx->failed;
}

/* One frame, resolved; false when the frame or what it names is not in the index. */
static bool resolve_frame(const hlo_frame_index_t *fx, int64_t id, hlo_source_frame_t *out,
                          int64_t *parent) {
  if (id < 1 || id > fx->n_frames)
    return false;
  const hlo_stack_frame_t *f = &fx->frames[id - 1];
  if (f->location < 1 || f->location > fx->n_locations)
    return false;
  const hlo_file_location_t *loc = &fx->locations[f->location - 1];
  if (loc->file < 1 || loc->file > fx->n_files)
    return false;
  out->file = fx->files[loc->file - 1];
  out->function = loc->function >= 1 && loc->function <= fx->n_functions
                      ? fx->functions[loc->function - 1]
                      : (hlo_str_t){"", 0};
  out->line = loc->line;
  out->column = loc->column;
  *parent = f->parent;
  return true;
}

int hbm__hlo_frame_stack(const hlo_frame_index_t *fx, int64_t id, hlo_source_frame_t *out,
                         int cap) {
  int n = 0;
  /* A parent chain longer than the table has a cycle: stop there. */
  for (uint32_t walked = 0; id >= 1 && walked <= fx->n_frames; walked++) {
    hlo_source_frame_t f;
    int64_t parent;
    if (!resolve_frame(fx, id, &f, &parent))
      return n == 0 ? -1 : n;
    if (n < cap)
      out[n] = f;
    n++;
    id = parent;
  }
  return n < cap ? n : cap;
}

hlo_source_status_t hbm__hlo_instr_source(const hlo_module_t *m, const hlo_instr_t *in,
                                          hlo_source_frame_t *out) {
  const hlo_metadata_t *md = in->meta;
  if (md->source_file.n) {
    *out = (hlo_source_frame_t){.file = md->source_file, .line = md->source_line};
    return HLO_SOURCE_METADATA;
  }
  if (md->stack_frame_id <= 0)
    return HLO_SOURCE_NONE;
  return hbm__hlo_frame_stack(&m->frames, md->stack_frame_id, out, 1) == 1 ? HLO_SOURCE_FRAME
                                                                           : HLO_SOURCE_BAD_FRAME;
}
