/* lexer.c — the cursor that parser.c and xla_dump.c read text with. It works on characters,
 * not a token stream, because HLO attribute values come in many small grammars (windows,
 * dim labels, sharding, replica groups, JSON backend configs) that the planner never needs:
 * they are skipped whole. Errors carry the position: "file:line:column: expected ...". */
#include "lexer.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Built by hand so it stays a constant table (no start-up code). */
#define ID (HLO_C_IDSTART | HLO_C_IDCHAR)
#define DG (HLO_C_IDCHAR | HLO_C_DIGIT)
#define BL HLO_C_BLANK
const uint8_t hbm__hlo_char_class[256] = {
    [','] = HLO_C_COMMA,  ['\t'] = BL,          ['\n'] = BL,
    ['\r'] = BL,          [' '] = BL,           ['/'] = BL | HLO_C_GROUP,
    ['('] = HLO_C_GROUP,  [')'] = HLO_C_GROUP,  ['['] = HLO_C_GROUP,
    [']'] = HLO_C_GROUP,  ['{'] = HLO_C_GROUP,  ['}'] = HLO_C_GROUP,
    ['"'] = HLO_C_GROUP,  ['\''] = HLO_C_GROUP, ['-'] = HLO_C_IDCHAR,
    ['.'] = HLO_C_IDCHAR, ['_'] = ID,           ['0'] = DG,
    ['1'] = DG,           ['2'] = DG,           ['3'] = DG,
    ['4'] = DG,           ['5'] = DG,           ['6'] = DG,
    ['7'] = DG,           ['8'] = DG,           ['9'] = DG,
    ['A'] = ID,           ['B'] = ID,           ['C'] = ID,
    ['D'] = ID,           ['E'] = ID,           ['F'] = ID,
    ['G'] = ID,           ['H'] = ID,           ['I'] = ID,
    ['J'] = ID,           ['K'] = ID,           ['L'] = ID,
    ['M'] = ID,           ['N'] = ID,           ['O'] = ID,
    ['P'] = ID,           ['Q'] = ID,           ['R'] = ID,
    ['S'] = ID,           ['T'] = ID,           ['U'] = ID,
    ['V'] = ID,           ['W'] = ID,           ['X'] = ID,
    ['Y'] = ID,           ['Z'] = ID,           ['a'] = ID,
    ['b'] = ID,           ['c'] = ID,           ['d'] = ID,
    ['e'] = ID,           ['f'] = ID,           ['g'] = ID,
    ['h'] = ID,           ['i'] = ID,           ['j'] = ID,
    ['k'] = ID,           ['l'] = ID,           ['m'] = ID,
    ['n'] = ID,           ['o'] = ID,           ['p'] = ID,
    ['q'] = ID,           ['r'] = ID,           ['s'] = ID,
    ['t'] = ID,           ['u'] = ID,           ['v'] = ID,
    ['w'] = ID,           ['x'] = ID,           ['y'] = ID,
    ['z'] = ID,
};
#undef ID
#undef DG
#undef BL

void hbm__hlo_lex_init(hlo_lexer_t *lx, const char *text, size_t len, const char *filename) {
  memset(lx, 0, sizeof *lx);
  lx->text = text;
  lx->len = len;
  lx->filename = filename ? filename : "<input>";
}

void hbm__hlo_text_position(const char *text, size_t offset, int *line, int *col) {
  int l = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; i++)
    if (text[i] == '\n') {
      l++;
      line_start = i + 1;
    }
  *line = l;
  *col = (int)(offset - line_start) + 1;
}

bool hbm__hlo_lex_error_at(hlo_lexer_t *lx, size_t at, const char *fmt, ...) {
  if (lx->failed)
    return false;
  lx->failed = true;
  if (at > lx->len)
    at = lx->len;
  int line, col;
  hbm__hlo_text_position(lx->text, at, &line, &col);
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  hbm__error(HBM_ERR_PARSE, "%s:%d:%d: %s", lx->filename, line, col, msg);
  return false;
}

bool hbm__hlo_lex_expected(hlo_lexer_t *lx, const char *what) {
  hbm__hlo_lex_skip_ws(lx);
  if (lx->pos >= lx->len)
    return hbm__hlo_lex_error_at(lx, lx->pos, "expected %s, found the end of the input", what);
  /* Show the token (or character) found, printable characters only. */
  char found[40];
  size_t n = 0, p = lx->pos;
  if (hbm__hlo_is_ident_char(lx->text[p]) || lx->text[p] == '%') {
    while (p < lx->len && n + 1 < sizeof found &&
           (hbm__hlo_is_ident_char(lx->text[p]) || (p == lx->pos && lx->text[p] == '%')))
      found[n++] = lx->text[p++];
  } else {
    unsigned char c = (unsigned char)lx->text[p];
    if (c >= 0x20 && c < 0x7f)
      found[n++] = (char)c;
  }
  found[n] = '\0';
  if (n == 0)
    return hbm__hlo_lex_error_at(lx, lx->pos, "expected %s, found byte 0x%02x", what,
                                 (unsigned char)lx->text[lx->pos]);
  /* What is missing at the end of a line (a ')') is reported there, not at the next line's
   * first token. */
  size_t end = lx->pos;
  bool next_line = false;
  while (end > 0 && lx->text[end - 1] && strchr(" \t\r\n", lx->text[end - 1]))
    next_line |= lx->text[--end] == '\n';
  if (next_line)
    return hbm__hlo_lex_error_at(lx, end,
                                 "expected %s at the end of the line, found '%s' on "
                                 "the next line",
                                 what, found);
  return hbm__hlo_lex_error_at(lx, lx->pos, "expected %s, found '%s'", what, found);
}

void hbm__hlo_lex_skip_ws_slow(hlo_lexer_t *lx) {
  const char *t = lx->text;
  size_t p = lx->pos, n = lx->len;
  while (p < n) {
    char c = t[p];
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      p++;
    } else if (c == '/' && p + 1 < n && t[p + 1] == '*') {
      const char *close = NULL;
      for (size_t q = p + 2; q + 1 < n; q++)
        if (t[q] == '*' && t[q + 1] == '/') {
          close = t + q;
          break;
        }
      if (!close) {
        lx->pos = p;
        hbm__hlo_lex_error_at(lx, p, "unterminated comment: expected '*/'");
        lx->pos = n;
        return;
      }
      p = (size_t)(close - t) + 2;
    } else if (c == '/' && p + 1 < n && t[p + 1] == '/') {
      while (p < n && t[p] != '\n')
        p++;
    } else {
      break;
    }
  }
  lx->pos = p;
}

bool hbm__hlo_lex_at_end(hlo_lexer_t *lx) {
  hbm__hlo_lex_skip_ws(lx);
  return lx->failed || lx->pos >= lx->len;
}

bool hbm__hlo_lex_expect(hlo_lexer_t *lx, char c) {
  if (hbm__hlo_lex_accept(lx, c))
    return true;
  char what[8] = {'\'', c, '\'', '\0'};
  return hbm__hlo_lex_expected(lx, what);
}

bool hbm__hlo_lex_accept2(hlo_lexer_t *lx, const char *two) {
  hbm__hlo_lex_skip_ws(lx);
  if (lx->failed || lx->pos + 1 >= lx->len || lx->text[lx->pos] != two[0] ||
      lx->text[lx->pos + 1] != two[1])
    return false;
  lx->pos += 2;
  return true;
}

bool hbm__hlo_lex_at_word(hlo_lexer_t *lx, const char *word) {
  hbm__hlo_lex_skip_ws(lx);
  size_t n = strlen(word);
  if (lx->failed || lx->pos + n > lx->len || memcmp(lx->text + lx->pos, word, n) != 0)
    return false;
  return lx->pos + n == lx->len || !hbm__hlo_is_ident_char(lx->text[lx->pos + n]);
}

bool hbm__hlo_lex_accept_word(hlo_lexer_t *lx, const char *word) {
  if (!hbm__hlo_lex_at_word(lx, word))
    return false;
  lx->pos += strlen(word);
  return true;
}

bool hbm__hlo_lex_int(hlo_lexer_t *lx, int64_t *out) {
  hbm__hlo_lex_skip_ws(lx);
  if (lx->failed)
    return false;
  const char *t = lx->text;
  size_t p = lx->pos, n = lx->len;
  bool neg = false;
  if (p < n && t[p] == '-') {
    neg = true;
    p++;
  }
  if (p >= n || !HLO_CLASS(t[p], HLO_C_DIGIT))
    return false;
  uint64_t v = 0;
  size_t first = p;
  while (p < n && HLO_CLASS(t[p], HLO_C_DIGIT)) {
    uint64_t d = (uint64_t)(t[p] - '0');
    /* 18 digits always fit; past them, check each step */
    if (p - first >= 18 &&
        (v > (UINT64_MAX - d) / 10 || v * 10 + d > (uint64_t)INT64_MAX + (neg ? 1u : 0u)))
      return hbm__hlo_lex_error_at(lx, lx->pos, "integer out of range");
    v = v * 10 + d;
    p++;
  }
  lx->pos = p;
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return true;
}

/* Strings are most of the bytes of a module with metadata: the closing quote is found with
 * memchr, and the backslashes before it (escapes, rare) with another. */
bool hbm__hlo_lex_string(hlo_lexer_t *lx, hlo_str_t *out) {
  char q = hbm__hlo_lex_peek(lx);
  if (q != '"' && q != '\'')
    return false;
  size_t start = lx->pos;
  const char *t = lx->text, *end = t + lx->len, *p = t + start + 1;
  for (;;) {
    const char *close = memchr(p, q, (size_t)(end - p));
    if (!close) {
      lx->pos = lx->len;
      return hbm__hlo_lex_error_at(lx, start, "unterminated string: expected a closing %c", q);
    }
    const char *escape = memchr(p, '\\', (size_t)(close - p));
    if (!escape) {
      out->p = t + start + 1;
      out->n = (uint32_t)(close - t - start - 1);
      lx->pos = (size_t)(close - t) + 1;
      return true;
    }
    /* The escaped character, whatever it is, does not close the string; the quote found
     * may have been it, so look again after it. */
    p = escape + 2;
  }
}

/* Skips from an opening bracket to its match, over nested groups and strings. Depth is a
 * counter, not recursion, so deeply nested input cannot exhaust the stack; the opening and
 * closing kinds are only checked for the outermost pair. */
bool hbm__hlo_lex_skip_group(hlo_lexer_t *lx) {
  hbm__hlo_lex_skip_ws(lx);
  if (lx->failed || lx->pos >= lx->len)
    return hbm__hlo_lex_expected(lx, "'{', '[' or '('");
  size_t start = lx->pos;
  const char *t = lx->text;
  char open = t[start];
  char close = open == '{' ? '}' : open == '[' ? ']' : open == '(' ? ')' : 0;
  if (!close)
    return hbm__hlo_lex_expected(lx, "'{', '[' or '('");
  size_t depth = 0;
  size_t p = start;
  while (p < lx->len) {
    char c = t[p];
    if (!HLO_CLASS(c, HLO_C_GROUP)) { /* most bytes: no bracket, quote or comment */
      p++;
      continue;
    }
    if (c == '"' || c == '\'') {
      lx->pos = p;
      hlo_str_t s;
      if (!hbm__hlo_lex_string(lx, &s))
        return false;
      p = lx->pos;
      continue;
    }
    if (c == '/' && p + 1 < lx->len && (t[p + 1] == '*' || t[p + 1] == '/')) {
      lx->pos = p;
      hbm__hlo_lex_skip_ws(lx);
      if (lx->failed)
        return false;
      p = lx->pos;
      continue;
    }
    if (c == '{' || c == '[' || c == '(') {
      depth++;
    } else if (c == '}' || c == ']' || c == ')') {
      depth--;
      if (depth == 0) {
        if (c != close)
          return hbm__hlo_lex_error_at(lx, p, "expected '%c' to close the '%c' at offset %zu",
                                       close, open, start);
        lx->pos = p + 1;
        return true;
      }
    }
    p++;
  }
  return hbm__hlo_lex_error_at(lx, start, "expected '%c' to close this '%c'", close, open);
}

bool hbm__hlo_lex_skip_value(hlo_lexer_t *lx) {
  hbm__hlo_lex_skip_ws(lx);
  if (lx->failed)
    return false;
  size_t start = lx->pos;
  const char *t = lx->text;
  while (lx->pos < lx->len) {
    size_t p = lx->pos; /* plain characters of the value, to the next one that matters */
    while (p < lx->len && !HLO_CLASS(t[p], HLO_C_GROUP | HLO_C_BLANK | HLO_C_COMMA))
      p++;
    lx->pos = p;
    if (p >= lx->len)
      break;
    char c = t[p];
    if (c == '{' || c == '[' || c == '(') {
      if (!hbm__hlo_lex_skip_group(lx))
        return false;
    } else if (c == '"' || c == '\'') {
      hlo_str_t s;
      if (!hbm__hlo_lex_string(lx, &s))
        return false;
    } else if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '}' ||
               c == ']' || c == ')') {
      break;
    } else if (c == '/' && p + 1 < lx->len && (t[p + 1] == '*' || t[p + 1] == '/')) {
      break;
    } else {
      lx->pos++;
    }
  }
  if (lx->pos == start)
    return hbm__hlo_lex_expected(lx, "an attribute value");
  return true;
}
