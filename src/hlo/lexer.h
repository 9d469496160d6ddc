/* lexer.h — character-level scanning of HLO text and XLA dumps, shared by parser.c and
 * xla_dump.c. A lexer is a cursor over the text; every function skips leading whitespace
 * and comments (XLA's  / * ... * /  and  //  forms). The first error is kept with its position
 * ("file:line:column: expected ..."); after it every call fails quickly. */
#ifndef HBM_HLO_LEXER_H
#define HBM_HLO_LEXER_H

#include "hlo.h"

typedef struct hlo_lexer {
  const char *text;
  size_t len;
  size_t pos;
  const char *filename;
  bool failed;
} hlo_lexer_t;

void hbm__hlo_lex_init(hlo_lexer_t *lx, const char *text, size_t len, const char *filename);
/* Records an error at offset `at` (the first one wins); always returns false. */
bool hbm__hlo_lex_error_at(hlo_lexer_t *lx, size_t at, const char *fmt, ...) HBM_PRINTF(3, 4);
/* "expected X" at the current token, showing what is there instead. */
bool hbm__hlo_lex_expected(hlo_lexer_t *lx, const char *what);
void hbm__hlo_lex_skip_ws_slow(hlo_lexer_t *lx);

/* Character classes (lexer.c), so the scanning loops test one table entry per byte. */
extern const uint8_t hbm__hlo_char_class[256];
#define HLO_C_IDSTART 0x01u /* [A-Za-z_] */
#define HLO_C_IDCHAR 0x02u  /* [A-Za-z0-9_.-] */
#define HLO_C_BLANK 0x04u   /* space, tab, CR, LF, and '/' (which may open a comment) */
#define HLO_C_DIGIT 0x08u
#define HLO_C_GROUP 0x10u /* ( ) [ ] { } " ' / : what bracket scans stop at */
#define HLO_C_COMMA 0x20u
#define HLO_CLASS(c, k) ((hbm__hlo_char_class[(unsigned char)(c)] & (k)) != 0)

/* Skips whitespace and comments. Inline: most calls find a token right there. */
static inline void hbm__hlo_lex_skip_ws(hlo_lexer_t *lx) {
  size_t p = lx->pos;
  if (p < lx->len && !HLO_CLASS(lx->text[p], HLO_C_BLANK))
    return;
  if (p + 1 < lx->len && lx->text[p] == ' ' && !HLO_CLASS(lx->text[p + 1], HLO_C_BLANK)) {
    lx->pos = p + 1; /* one space between tokens: most of the blanks of HLO text */
    return;
  }
  hbm__hlo_lex_skip_ws_slow(lx);
}

/* The next significant character ('\0' at the end). */
static inline char hbm__hlo_lex_peek(hlo_lexer_t *lx) {
  hbm__hlo_lex_skip_ws(lx);
  return lx->failed || lx->pos >= lx->len ? '\0' : lx->text[lx->pos];
}

static inline bool hbm__hlo_lex_accept(hlo_lexer_t *lx, char c) {
  if (c == '\0' || hbm__hlo_lex_peek(lx) != c)
    return false;
  lx->pos++;
  return true;
}
bool hbm__hlo_lex_expect(hlo_lexer_t *lx, char c);
/* Accepts a two-character punctuation ("->", "<="). */
bool hbm__hlo_lex_accept2(hlo_lexer_t *lx, const char *two);
static inline bool hbm__hlo_is_ident_start(char c) { return HLO_CLASS(c, HLO_C_IDSTART); }

static inline bool hbm__hlo_is_ident_char(char c) { return HLO_CLASS(c, HLO_C_IDCHAR); }

/* [A-Za-z_][A-Za-z0-9_.-]* */
static inline bool hbm__hlo_lex_ident(hlo_lexer_t *lx, hlo_str_t *out) {
  hbm__hlo_lex_skip_ws(lx);
  if (lx->failed || lx->pos >= lx->len || !hbm__hlo_is_ident_start(lx->text[lx->pos]))
    return false;
  const char *t = lx->text;
  size_t start = lx->pos, p = start + 1, n = lx->len;
  while (p < n && hbm__hlo_is_ident_char(t[p]))
    p++;
  lx->pos = p;
  out->p = t + start;
  out->n = (uint32_t)(p - start);
  return true;
}
/* An identifier with an optional '%' in front (the '%' is not part of *out). Inline: every
 * instruction and operand has one. */
static inline bool hbm__hlo_lex_name(hlo_lexer_t *lx, hlo_str_t *out) {
  hbm__hlo_lex_skip_ws(lx);
  if (lx->failed)
    return false;
  const char *t = lx->text;
  size_t n = lx->len, p = lx->pos;
  if (p < n && t[p] == '%')
    p++;
  if (p >= n || !hbm__hlo_is_ident_start(t[p]))
    return false;
  size_t start = p++;
  while (p < n && hbm__hlo_is_ident_char(t[p]))
    p++;
  lx->pos = p;
  out->p = t + start;
  out->n = (uint32_t)(p - start);
  return true;
}
/* True when the next token is the identifier `word` (not consumed). */
bool hbm__hlo_lex_at_word(hlo_lexer_t *lx, const char *word);
bool hbm__hlo_lex_accept_word(hlo_lexer_t *lx, const char *word);
/* A decimal integer, optionally negative. */
bool hbm__hlo_lex_int(hlo_lexer_t *lx, int64_t *out);
/* A double- or single-quoted string; *out is the raw text between the quotes. */
bool hbm__hlo_lex_string(hlo_lexer_t *lx, hlo_str_t *out);
/* Skips one attribute value: a run of characters without top-level whitespace, where
 * bracket groups ({...}, [...], (...)) and strings are taken whole. */
bool hbm__hlo_lex_skip_value(hlo_lexer_t *lx);
/* Skips a balanced group starting at the opening bracket under the cursor. */
bool hbm__hlo_lex_skip_group(hlo_lexer_t *lx);
bool hbm__hlo_lex_at_end(hlo_lexer_t *lx);

/* Shapes (parser.c): parses one shape into the arena. */
const hlo_shape_t *hbm__parse_shape(hlo_lexer_t *lx, hlo_arena_t *arena);
/* A ShapeIndex "{0,1}" into the arena. */
bool hbm__parse_shape_index(hlo_lexer_t *lx, hlo_arena_t *arena, int64_t **idx, uint8_t *n);

/* Stack-frame tables (frames.c): true at the title of one; reads every table from there
 * into fx (rows add to those read before), in the arena. */
bool hbm__hlo_at_frame_tables(hlo_lexer_t *lx);
bool hbm__hlo_parse_frame_tables(hlo_lexer_t *lx, hlo_arena_t *arena, hlo_frame_index_t *fx);

#endif /* HBM_HLO_LEXER_H */
