/* oom_text.c — reads the text of an out-of-memory error as users paste it: a traceback or
 * a log around it, log prefixes ("2024-01-02 03:04:05.123: W external/...cc:479] ",
 * "E1125 12:00:00.123 42 file.cc:1] ", "[rank0]: ", "(Worker pid=12) "), terminal colour
 * codes, quote marks, indentation that changed, sentences wrapped over lines. The text is
 * made clean here once; oom_text_kinds.c then finds the framework's wording in it. */
#include "import/oom_text.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- clean lines ---- */

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f'; }

/* "...file.cc:479] " within the first 240 bytes: the end of a log header, or NULL. */
static const char *log_header_end(const char *p, const char *end) {
  const char *limit = end - p > 240 ? p + 240 : end;
  for (const char *q = p + 1; q + 1 < limit; q++)
    if (q[0] == ']' && isdigit((unsigned char)q[-1]) && (q[1] == ' ' || q[1] == '\t'))
      return q + 2;
  return NULL;
}

/* A line that starts like a log record: a date or time, glog's "E1125", "W " + path, or a
 * level word. */
static bool starts_log_record(const char *p, const char *end) {
  size_t n = (size_t)(end - p);
  if (n >= 2 && isdigit((unsigned char)p[0]))
    return true;
  if (n >= 2 && strchr("IWEFD", p[0]) && (isdigit((unsigned char)p[1]) || p[1] == ' '))
    return true;
  static const char *const levels[] = {"ERROR ", "WARNING ", "INFO ", "DEBUG ", "[1] "};
  for (size_t i = 0; i < HBM_ARRAY_LEN(levels); i++)
    if (n >= strlen(levels[i]) && !memcmp(p, levels[i], strlen(levels[i])))
      return true;
  return false;
}

/* Ray's "(Worker pid=489) " and torchrun's "[rank0]: ". */
static const char *worker_prefix_end(const char *p, const char *end) {
  if (*p == '(') {
    const char *close = memchr(p, ')', (size_t)(end - p) < 120 ? (size_t)(end - p) : 120);
    if (close && hbm__oom_find(p, close, "pid="))
      return close + 1;
  }
  if (end - p > 6 && !memcmp(p, "[rank", 5)) {
    const char *q = p + 5;
    while (q < end && (isdigit((unsigned char)*q) || *q == ' '))
      q++;
    if (end - q >= 2 && q[0] == ']' && q[1] == ':')
      return q + 2;
  }
  return NULL;
}

/* pytest's "E   " in front of an exception. */
static const char *pytest_prefix_end(const char *p, const char *end) {
  if (end - p >= 3 && p[0] == 'E' && p[1] == ' ' && p[2] == ' ')
    return p + 3;
  return NULL;
}

static const char *strip_prefixes(const char *p, const char *end) {
  for (int round = 0; round < 8; round++) {
    while (p < end && is_blank(*p))
      p++;
    const char *next = NULL;
    if (p < end && *p == '>')
      next = p + 1;
    else if (p < end && (next = worker_prefix_end(p, end)))
      ;
    else if (p < end && (next = pytest_prefix_end(p, end)))
      ;
    else if (p < end && starts_log_record(p, end))
      next = log_header_end(p, end);
    if (!next)
      break;
    p = next;
  }
  return p;
}

/* Copies [p, end) without terminal escape sequences ("\x1b[36m"). */
static void append_without_escapes(hbm_strbuf_t *sb, const char *p, const char *end) {
  while (p < end) {
    const char *esc = memchr(p, '\x1b', (size_t)(end - p));
    const char *stop = esc ? esc : end;
    hbm_strbuf_append(sb, p, (size_t)(stop - p));
    if (!esc)
      break;
    p = esc + 1;
    if (p < end && *p == '[') {
      p++;
      while (p < end && !isalpha((unsigned char)*p))
        p++;
      if (p < end)
        p++;
    }
  }
}

static hbm_status_t add_line(oom_doc_t *doc, size_t *cap, size_t start, int64_t number) {
  if (doc->n_lines == *cap) { /* the two arrays share one capacity, *cap */
    size_t starts_cap = *cap;
    size_t *starts =
        hbm__grow_array(doc->line_start, &starts_cap, doc->n_lines + 1, sizeof *starts, 256);
    if (!starts)
      return hbm__error(HBM_ERR_NO_MEMORY, "out of memory reading the text");
    doc->line_start = starts;
    int64_t *numbers =
        hbm__grow_array(doc->line_number, cap, doc->n_lines + 1, sizeof *numbers, 256);
    if (!numbers)
      return hbm__error(HBM_ERR_NO_MEMORY, "out of memory reading the text");
    doc->line_number = numbers;
  }
  doc->line_start[doc->n_lines] = start;
  doc->line_number[doc->n_lines++] = number;
  return HBM_OK;
}

static void doc_free(oom_doc_t *doc) {
  free(doc->text);
  free(doc->line_start);
  free(doc->line_number);
  memset(doc, 0, sizeof *doc);
}

static hbm_status_t doc_build(oom_doc_t *doc, const char *data, size_t len) {
  memset(doc, 0, sizeof *doc);
  hbm_strbuf_t sb, raw;
  hbm_strbuf_init(&sb);
  hbm_strbuf_init(&raw);
  size_t cap = 0;
  int64_t number = 0;
  const char *p = data, *end = data + len;
  while (p < end && !sb.failed) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *line_end = nl ? nl : end;
    number++;
    raw.len = 0; /* colour codes first: Ray prints them before its "(pid=...)" prefix */
    append_without_escapes(&raw, p, line_end);
    hbm_strbuf_puts(&raw, "");
    const char *rb = raw.data ? raw.data : "";
    const char *b = strip_prefixes(rb, rb + raw.len), *e = rb + raw.len;
    while (e > b && is_blank(e[-1]))
      e--;
    if (raw.failed || add_line(doc, &cap, sb.len, number) != HBM_OK)
      break;
    hbm_strbuf_append(&sb, b, (size_t)(e - b));
    hbm_strbuf_puts(&sb, "\n");
    p = nl ? nl + 1 : end;
  }
  hbm_strbuf_puts(&sb, "");
  bool failed = sb.failed || raw.failed || p < end;
  hbm_strbuf_free(&raw);
  if (failed) {
    hbm_strbuf_free(&sb);
    doc_free(doc);
    return hbm__error(HBM_ERR_NO_MEMORY, "out of memory reading the text");
  }
  /* NUL bytes in the input would cut the text short: make them blanks. */
  for (size_t i = 0; i < sb.len; i++)
    if (sb.data[i] == '\0')
      sb.data[i] = ' ';
  doc->text = sb.data;
  doc->len = sb.len;
  return HBM_OK;
}

/* The clean line that holds offset `at`. */
static size_t doc_line_of(const oom_doc_t *doc, size_t at) {
  size_t lo = 0, hi = doc->n_lines;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (doc->line_start[mid] <= at)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

void hbm__oom_doc_line(const oom_doc_t *doc, size_t i, const char **begin, const char **end) {
  *begin = doc->text + doc->line_start[i];
  size_t stop = i + 1 < doc->n_lines ? doc->line_start[i + 1] - 1 : doc->len;
  *end = doc->text + stop;
  if (*end > *begin && (*end)[-1] == '\n')
    (*end)--;
}

/* ---- matching ---- */

const char *hbm__oom_find(const char *p, const char *end, const char *needle) {
  size_t n = strlen(needle);
  if (!n || p >= end)
    return NULL;
  while ((size_t)(end - p) >= n) {
    const char *q = memchr(p, needle[0], (size_t)(end - p) - n + 1);
    if (!q)
      return NULL;
    if (!memcmp(q, needle, n))
      return q;
    p = q + 1;
  }
  return NULL;
}

static bool unit_is(const char *p, const char *end, const char *unit) {
  size_t n = strlen(unit);
  if ((size_t)(end - p) < n || strncmp(p, unit, n))
    return false;
  return p + n == end || !isalpha((unsigned char)p[n]);
}

/* The unit at *p (advancing past it): 1024^k, or 1000^k when *decimal ("KB" ... "YB"), k from
 * 0 (bytes, or no unit) to 8 (Y); false when there is none. */
static bool parse_unit(const char **pp, const char *end, int *k, bool *decimal) {
  static const char prefixes[] = "KMGTPEZY";
  const char *p = *pp;
  while (p < end && *p == ' ')
    p++;
  if (unit_is(p, end, "bytes") || unit_is(p, end, "B")) {
    *pp = p + (*p == 'B' ? 1 : 5);
    *k = 0, *decimal = false;
    return true;
  }
  const char *at = p < end ? strchr(prefixes, *p) : NULL;
  if (!at || !*p)
    return false;
  static const char *const forms[] = {"iB", "B", ""};
  for (int i = 0; i < 3; i++)
    if (unit_is(p + 1, end, forms[i])) {
      *pp = p + 1 + strlen(forms[i]);
      *k = (int)(at - prefixes) + 1;
      *decimal = i == 1; /* KB, MB, ...: powers of 1000 */
      return true;
    }
  return false;
}

/* The last number hbm__oom_size found but could not use: [unusable_at, +unusable_len) in
 * the text being parsed, for the note hbm__oom_set makes of it. A parse runs on one thread
 * (hbm_oom_text_parse sets and clears these). */
static _Thread_local const char *unusable_at;
static _Thread_local size_t unusable_len;

/* An exponent ("e308", "E-3", "e+9") at p: its value (clamped to +-9999) and end, or NULL. */
static const char *parse_exponent(const char *p, const char *end, int *out) {
  if (p >= end || (*p != 'e' && *p != 'E'))
    return NULL;
  const char *q = p + 1;
  bool minus = q < end && *q == '-';
  q += q < end && (*q == '-' || *q == '+');
  if (q >= end || !isdigit((unsigned char)*q))
    return NULL; /* "8.00E": the unit E (exa), not an exponent */
  int v = 0;
  for (; q < end && isdigit((unsigned char)*q); q++)
    v = v < 9999 ? v * 10 + (*q - '0') : 9999;
  *out = minus ? -v : v;
  return q;
}

/* [start, end) is a number that is no usable size: *out gets why, the note its text. */
static const char *unusable(const char *start, const char *end, uint64_t why, uint64_t *out) {
  unusable_at = start, unusable_len = (size_t)(end - start);
  *out = why;
  return end;
}

const char *hbm__oom_size(const char *p, const char *end, uint64_t *out) {
  bool negative = p < end && *p == '-';
  const char *q = p + negative, *digits = q;
  uint64_t whole = 0;
  bool wrapped = false;   /* the digits alone do not fit in 64 bits */
  long double approx = 0; /* the number as written, for the range checks */
  for (; q < end && isdigit((unsigned char)*q); q++) {
    approx = approx * 10 + (*q - '0');
    wrapped |= __builtin_mul_overflow(whole, 10, &whole) ||
               __builtin_add_overflow(whole, (uint64_t)(*q - '0'), &whole);
  }
  if (q == digits)
    return NULL;
  long double frac = 0, scale = 0.1L;
  if (q + 1 < end && *q == '.' && isdigit((unsigned char)q[1]))
    for (q++; q < end && isdigit((unsigned char)*q); q++, scale /= 10)
      frac += (*q - '0') * scale;
  int exponent = 0, k = 0;
  bool decimal = false;
  const char *after_exponent = parse_exponent(q, end, &exponent);
  if (after_exponent)
    q = after_exponent;
  parse_unit(&q, end, &k, &decimal);
  long double unit = powl(decimal ? 1000.0L : 1024.0L, k);
  /* zero is zero whatever its exponent ("0e9999": 0 × inf would be NaN) */
  long double mantissa = approx + frac;
  long double bytes = mantissa == 0 ? 0 : mantissa * unit * powl(10.0L, exponent);
  if (isnan(bytes)) /* inf × 0: thousands of digits with an exponent of -9999 */
    return unusable(p, q, HBM__OOM_TOO_LARGE, out);
  if (negative && bytes >= 0.5L)
    return unusable(p, q, HBM__OOM_NEGATIVE, out);
  if (bytes >= 18446744073709551616.0L) /* 2^64 */
    return unusable(p, q, HBM__OOM_TOO_LARGE, out);
  /* A unit of 2^64 bytes or more (YiB) with a number small enough: only the product fits. */
  bool unit_fits = unit < 18446744073709551616.0L;
  uint64_t exact, mult = unit_fits ? (uint64_t)unit : 0;
  if (after_exponent || wrapped || !unit_fits) /* as exact as it was written */
    exact = (uint64_t)roundl(bytes);
  else if (__builtin_mul_overflow(whole, mult, &exact) ||
           __builtin_add_overflow(exact, (uint64_t)roundl(frac * unit), &exact))
    return unusable(p, q, HBM__OOM_TOO_LARGE, out);
  if (!hbm__oom_usable(exact)) /* 2^64 - 2 and 2^64 - 1: the two values kept as markers */
    return unusable(p, q, HBM__OOM_TOO_LARGE, out);
  *out = exact;
  return q;
}

const char *hbm__oom_int(const char *p, const char *end, int64_t *out) {
  bool negative = p < end && *p == '-';
  const char *q = p + negative;
  int64_t v = 0;
  const char *digits = q;
  while (q < end && isdigit((unsigned char)*q)) {
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *q - '0', &v))
      return NULL;
    q++;
  }
  if (q == digits)
    return NULL;
  *out = negative ? -v : v;
  return q;
}

static const char *vscan(const char *p, const char *end, const char *pattern, va_list ap) {
  for (const char *c = pattern; *c; c++) {
    if (*c == ' ') {
      while (p < end && (is_blank(*p) || *p == '\n'))
        p++;
    } else if (*c == '#') {
      if (!(p = hbm__oom_size(p, end, va_arg(ap, uint64_t *))))
        return NULL;
    } else if (*c == '%') {
      if (!(p = hbm__oom_int(p, end, va_arg(ap, int64_t *))))
        return NULL;
    } else {
      if (p >= end || *p != *c)
        return NULL;
      p++;
    }
  }
  return p;
}

const char *hbm__oom_scan(const char *p, const char *end, const char *pattern, ...) {
  va_list ap;
  va_start(ap, pattern);
  const char *r = vscan(p, end, pattern, ap);
  va_end(ap);
  return r;
}

const char *hbm__oom_search(const char *p, const char *end, const char **match_end,
                            const char *pattern, ...) {
  for (; p && p < end; p++) {
    p = memchr(p, pattern[0], (size_t)(end - p));
    if (!p)
      return NULL;
    va_list ap;
    va_start(ap, pattern);
    const char *r = vscan(p, end, pattern, ap);
    va_end(ap);
    if (r) {
      if (match_end)
        *match_end = r;
      return p;
    }
  }
  return NULL;
}

char *hbm__oom_strndup(const char *p, size_t n) {
  while (n && (is_blank(*p) || *p == '\n'))
    p++, n--;
  while (n && (is_blank(p[n - 1]) || p[n - 1] == '\n'))
    n--;
  char *s = malloc(n + 1);
  if (!s)
    return NULL;
  memcpy(s, p, n);
  s[n] = '\0';
  return s;
}

/* ---- the result ---- */

void hbm__oom_note(hbm_oom_text_t *t, const char *fmt, ...) {
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  if (t->notes)
    hbm_strbuf_printf(&sb, "%s\n", t->notes);
  va_list ap;
  va_start(ap, fmt);
  hbm_strbuf_vprintf(&sb, fmt, ap);
  va_end(ap);
  if (!sb.failed) {
    free(t->notes);
    t->notes = sb.data;
  } else {
    hbm_strbuf_free(&sb);
  }
}

/* What a number that is no usable size is, for the notes. */
static const char *why_unusable(uint64_t v) {
  return v == HBM__OOM_NEGATIVE ? "negative, not a size"
                                : "16 EiB or more (2^64 - 2 bytes and up), beyond any memory";
}

void hbm__oom_set(hbm_oom_text_t *t, hbm_oom_field_t f, uint64_t v) {
  if (hbm__oom_usable(v)) {
    t->value[f] = v;
    t->known[f] = 1;
    return;
  }
  t->unreadable[f] = 1;
  if (unusable_at)
    hbm__oom_note(t, "%s: the text says '%.*s', which is %s: not used", hbm_oom_field_name(f),
                  (int)(unusable_len < 80 ? unusable_len : 80), unusable_at, why_unusable(v));
  else
    hbm__oom_note(t, "%s: the text's numbers add up to %s: not used", hbm_oom_field_name(f),
                  why_unusable(v));
}

void hbm__oom_set_once(hbm_oom_text_t *t, hbm_oom_field_t f, uint64_t v) {
  if (!t->known[f] && !t->unreadable[f])
    hbm__oom_set(t, f, v);
}

hbm_oom_buffer_t *hbm__oom_add_buffer(hbm_oom_text_t *t) {
  hbm_oom_buffer_t *b = realloc(t->buffers, (t->n_buffers + 1) * sizeof *b);
  if (!b)
    return NULL;
  t->buffers = b;
  b = &t->buffers[t->n_buffers++];
  memset(b, 0, sizeof *b);
  return b;
}

static const char *const kind_names[HBM_OOM_KIND_COUNT] = {"XLA on GPU", "XLA on TPU", "PyTorch",
                                                           "TensorFlow", "XLA on CPU"};

const char *hbm_oom_kind_name(hbm_oom_kind_t kind) {
  return (unsigned)kind < HBM_OOM_KIND_COUNT ? kind_names[kind] : "unknown";
}

static const char *const field_names[HBM_OOMF_COUNT] = {"requested",
                                                        "rounded",
                                                        "capacity",
                                                        "free",
                                                        "limit",
                                                        "in_use",
                                                        "allocated",
                                                        "reserved",
                                                        "reserved_unallocated",
                                                        "other_processes",
                                                        "max_in_use",
                                                        "num_allocs",
                                                        "max_alloc_size",
                                                        "bfc_reserved",
                                                        "peak_reserved",
                                                        "largest_free_block",
                                                        "parameter",
                                                        "constant",
                                                        "maybe_live_out",
                                                        "preallocated_temp",
                                                        "temp_fragmentation",
                                                        "total_allocation",
                                                        "total_fragmentation",
                                                        "used",
                                                        "exceeded",
                                                        "total_usage",
                                                        "tpu_reserved",
                                                        "program",
                                                        "arguments",
                                                        "output",
                                                        "hlo_temp"};

const char *hbm_oom_field_name(hbm_oom_field_t field) {
  return (unsigned)field < HBM_OOMF_COUNT ? field_names[field] : "unknown";
}

static void free_buffer(hbm_oom_buffer_t *b) {
  free(b->op_name);
  free(b->op_type);
  free(b->source_file);
  free(b->label);
  free(b->shape);
  free(b->allocation_type);
  free(b->group);
  free(b->instruction);
}

void hbm_oom_text_free(hbm_oom_text_t *t) {
  if (!t)
    return;
  for (size_t i = 0; i < t->n_buffers; i++)
    free_buffer(&t->buffers[i]);
  free(t->buffers);
  free(t->processes);
  free(t->headline);
  free(t->device);
  free(t->allocator);
  free(t->tensor_shape);
  free(t->tensor_type);
  free(t->op);
  free(t->notes);
  free(t->module);
  free(t->module_file);
  free(t->module_finding);
  free(t);
}

/* Buffers and processes the text gives no usable size for are left out, each with a note
 * (their fields are filled straight from the text, not through hbm__oom_set). */
static void drop_unusable(hbm_oom_text_t *t) {
  size_t kept = 0;
  for (size_t i = 0; i < t->n_buffers; i++) {
    hbm_oom_buffer_t *b = &t->buffers[i];
    uint64_t bad = !hbm__oom_usable(b->size) ? b->size : b->unpadded_size;
    if (hbm__oom_usable(b->size) && hbm__oom_usable(b->unpadded_size)) {
      t->buffers[kept++] = *b;
      continue;
    }
    const char *name = b->label ? b->label : b->op_name ? b->op_name : b->shape;
    hbm__oom_note(t, "buffer %zu (%s): its size in the text is %s: left out", i + 1,
                  name ? name : "unnamed", why_unusable(bad));
    free_buffer(b);
  }
  t->n_buffers = kept;
  kept = 0;
  for (size_t i = 0; i < t->n_processes; i++) {
    if (hbm__oom_usable(t->processes[i].bytes)) {
      t->processes[kept++] = t->processes[i];
      continue;
    }
    hbm__oom_note(t, "process %lld: the memory the text says it holds is %s: left out",
                  (long long)t->processes[i].pid, why_unusable(t->processes[i].bytes));
    t->this_process_listed &= i != 0;
  }
  t->n_processes = kept;
}

int hbm_oom_text_is(const char *data, size_t len) {
  oom_doc_t doc;
  if (!data || doc_build(&doc, data, len) != HBM_OK)
    return 0;
  oom_headline_t h;
  bool found = hbm__oom_find_headline(&doc, &h);
  doc_free(&doc);
  return found;
}

/* The headline: its line, and the lines after it while they go on with the sentence (a
 * paste wrapped at a word boundary continues with a lower-case word or a number). */
static char *headline_text(const oom_doc_t *doc, size_t line) {
  const char *b, *e;
  hbm__oom_doc_line(doc, line, &b, &e);
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_append(&sb, b, (size_t)(e - b));
  for (size_t i = line + 1; i < doc->n_lines && i < line + 3; i++) {
    if (e > b && strchr(".:)>", e[-1]))
      break; /* the sentence ended on this line */
    hbm__oom_doc_line(doc, i, &b, &e);
    if (b == e || !(islower((unsigned char)*b) || isdigit((unsigned char)*b)))
      break;
    hbm_strbuf_puts(&sb, " ");
    hbm_strbuf_append(&sb, b, (size_t)(e - b));
  }
  char *s = sb.failed ? NULL : hbm__strdup(hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
  return s;
}

hbm_oom_text_t *hbm_oom_text_parse(const char *data, size_t len, const char *name) {
  if (!name)
    name = "<text>";
  if (!data && len) {
    hbm__error(HBM_ERR_INVALID, "%s: no text", name);
    return NULL;
  }
  oom_doc_t doc;
  if (doc_build(&doc, data ? data : "", len) != HBM_OK)
    return NULL;
  oom_headline_t h;
  if (!hbm__oom_find_headline(&doc, &h)) {
    doc_free(&doc);
    hbm__error(HBM_ERR_NOT_FOUND,
               "%s: no out-of-memory error found (expected XLA's 'RESOURCE_EXHAUSTED: Out of "
               "memory while trying to allocate' (CPU: 'Out of memory allocating'), "
               "'Allocation (size=...) would exceed memory' "
               "or 'Ran out of memory in memory space', PyTorch's 'CUDA out of memory. Tried "
               "to allocate', or TensorFlow's 'OOM when allocating tensor')",
               name);
    return NULL;
  }
  hbm_oom_text_t *t = calloc(1, sizeof *t);
  if (!t) {
    doc_free(&doc);
    hbm__error(HBM_ERR_NO_MEMORY, "%s: out of memory", name);
    return NULL;
  }
  t->kind = h.kind;
  size_t line = doc_line_of(&doc, (size_t)(h.at - doc.text));
  t->line = doc.line_number[line];
  t->headline = headline_text(&doc, line);
  unusable_at = NULL;
  hbm__oom_parse_kind(&doc, &h, t);
  unusable_at = NULL; /* it pointed into doc */
  drop_unusable(t);
  doc_free(&doc);
  return t;
}
