/* oom_text.h — internals shared by the reader of pasted out-of-memory errors: the text made
 * clean (oom_text.c), the four frameworks' wordings (oom_text_kinds.c) and the diagnosis
 * (oom_text_explain.c). */
#ifndef HBM_IMPORT_OOM_TEXT_H
#define HBM_IMPORT_OOM_TEXT_H

#include "base/base.h"

/* The pasted text with log prefixes, escape sequences, quote marks and indentation taken off
 * every line, joined with '\n' so that wrapped sentences can be matched across lines. */
typedef struct oom_doc {
  char *text;           /* the clean lines, '\n'-separated, NUL-terminated */
  size_t len;           /* strlen(text) */
  size_t *line_start;   /* offset in text of each clean line */
  int64_t *line_number; /* its 1-based line in the input */
  size_t n_lines;
} oom_doc_t;

/* Line i as [*begin, *end) in doc->text. */
void hbm__oom_doc_line(const oom_doc_t *doc, size_t i, const char **begin, const char **end);

/* ---- matching ---- */

/* The first `needle` in [p, end), or NULL. */
const char *hbm__oom_find(const char *p, const char *end, const char *needle);
/* A size at p ("6291456", "6.00MiB", "1.70 GiB", "21.95G", "0 bytes", "4.0K", "2.5e9 bytes"):
 * K/M/G/T/P/E and KiB/MiB/GiB/TiB/PiB/EiB are powers of 1024 (XLA, PyTorch and TensorFlow all
 * count that way), KB/MB/GB/TB/PB/EB powers of 1000. Returns the end of it, or NULL. A number
 * that is there but is no usable size gives HBM__OOM_TOO_LARGE (2^64 - 2 bytes or more, in any
 * notation: "1e308 GiB", "99999999999999.99E", a ZiB) or HBM__OOM_NEGATIVE ("-5 bytes"),
 * and is remembered for the note hbm__oom_set makes of it: callers pass it on like any size,
 * it never becomes a value. */
const char *hbm__oom_size(const char *p, const char *end, uint64_t *out);
#define HBM__OOM_TOO_LARGE UINT64_MAX
#define HBM__OOM_NEGATIVE (UINT64_MAX - 1)
/* Whether v is a size (not one of the two above). */
static inline bool hbm__oom_usable(uint64_t v) { return v < HBM__OOM_NEGATIVE; }
/* A decimal integer (optional '-'), or NULL. */
const char *hbm__oom_int(const char *p, const char *end, int64_t *out);
/* Matches `pattern` at p: ' ' matches any run of blanks and newlines (or none), '#' a size
 * (the next uint64_t *), '%' an integer (the next int64_t *); other characters match
 * themselves. Returns the end of the match, or NULL. */
const char *hbm__oom_scan(const char *p, const char *end, const char *pattern, ...);
/* The first place in [p, end) where hbm__oom_scan(pattern) matches; *match_end gets the end
 * of the match (may be NULL). The pattern must start with a literal character. */
const char *hbm__oom_search(const char *p, const char *end, const char **match_end,
                            const char *pattern, ...);
/* malloc'd copy of [p, p + n), blanks trimmed at both ends. */
char *hbm__oom_strndup(const char *p, size_t n);

/* ---- the result ---- */

/* a + b, or UINT64_MAX when that overflows (pasted numbers can be anything). */
static inline uint64_t hbm__oom_add(uint64_t a, uint64_t b) {
  return a + b < a ? UINT64_MAX : a + b;
}

/* Sets field f; a number that is no usable size marks it unreadable, with a note. */
void hbm__oom_set(hbm_oom_text_t *t, hbm_oom_field_t f, uint64_t v);
/* Appends a line to t->notes. */
void hbm__oom_note(hbm_oom_text_t *t, const char *fmt, ...) HBM_PRINTF(2, 3);
/* Sets f only when the text has not given it yet. */
void hbm__oom_set_once(hbm_oom_text_t *t, hbm_oom_field_t f, uint64_t v);
/* Appends an empty buffer; NULL when out of memory. */
hbm_oom_buffer_t *hbm__oom_add_buffer(hbm_oom_text_t *t);
/* The operator path a buffer is grouped under (malloc'd): op_name without its primitive and
 * without the jit/pjit/pmap wrappers, with jvp(X)/transpose(X)/vmap(X) unwrapped to X. */
char *hbm__oom_group(const char *op_name, int parameter);

/* ---- the four wordings (oom_text_kinds.c) ---- */

/* Where the first OOM headline of each kind starts in doc->text (NULL when absent). */
typedef struct oom_headline {
  hbm_oom_kind_t kind;
  const char *at;
} oom_headline_t;

bool hbm__oom_find_headline(const oom_doc_t *doc, oom_headline_t *out);
/* Fills t from the whole document, for the kind found. */
void hbm__oom_parse_kind(const oom_doc_t *doc, const oom_headline_t *h, hbm_oom_text_t *t);

#endif /* HBM_IMPORT_OOM_TEXT_H */
