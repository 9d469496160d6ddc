/* oom_text_kinds.c — the wordings of the frameworks' out-of-memory errors, as they changed
 * across releases, read from the clean text of oom_text.c:
 *   XLA on CPU: "Out of memory allocating N bytes." (JAX 0.10's CPU client when the host does
 *     not give it a buffer: a process or container memory limit, or the machine's memory);
 *   XLA on GPU: "Out of memory while trying to allocate N bytes." (+ BufferAssignment stats,
 *     Peak buffers), "Failed to allocate request for X (NB) on device ordinal K" (older
 *     jaxlib), "cuMemAllocAsync failed to allocate N bytes" (cuda_malloc_async), and the BFC
 *     allocator's log ("Allocator (GPU_0_bfc) ran out of memory ...", "Stats:" rows);
 *   XLA on TPU: "Allocation (size=N) would exceed memory (size=M)", "Ran out of memory in
 *     memory space hbm. Used U of C hbm. Exceeded hbm capacity by E." with the "Total hbm
 *     usage >=" report and "Largest program allocations", "Attempting to reserve X at the
 *     bottom of memory", "Attempting to allocate X. That was not possible.";
 *   PyTorch: "CUDA out of memory. Tried to allocate X. GPU 0 has a total capacity of ..." and
 *     the older "(GPU 0; Y total capacity; A already allocated; F free; R reserved in total by
 *     PyTorch)" / "R cached)";
 *   TensorFlow: "OOM when allocating tensor with shape[...] and type T on DEVICE by allocator
 *     A" with the BFC log. */
#include "import/oom_text.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct range {
  const char *b, *e;
} range_t;

static range_t whole(const oom_doc_t *doc) { return (range_t){doc->text, doc->text + doc->len}; }

static range_t line_at(const oom_doc_t *doc, size_t i) {
  range_t r;
  hbm__oom_doc_line(doc, i, &r.b, &r.e);
  return r;
}

static bool starts(range_t r, const char *prefix) {
  size_t n = strlen(prefix);
  return (size_t)(r.e - r.b) >= n && !memcmp(r.b, prefix, n);
}

static char *dup_range(const char *b, const char *e) {
  return e > b ? hbm__oom_strndup(b, (size_t)(e - b)) : NULL;
}

/* Keeps the first value a text gives for a field (wordings may repeat it). */
static void set_str(char **field, char *value) {
  if (*field)
    free(value);
  else
    *field = value;
}

/* ---- headlines ---- */

typedef struct headline_pattern {
  hbm_oom_kind_t kind;
  const char *pattern;
} headline_pattern_t;

static const headline_pattern_t headlines[] = {
    {HBM_OOM_XLA_GPU, "Out of memory while trying to allocate"},
    {HBM_OOM_XLA_GPU, "Failed to allocate request for"},
    {HBM_OOM_XLA_GPU, "cuMemAllocAsync failed to allocate"},
    {HBM_OOM_XLA_CPU, "Out of memory allocating"},
    {HBM_OOM_XLA_TPU, "Allocation (size="},
    {HBM_OOM_XLA_TPU, "Ran out of memory in memory space"},
    {HBM_OOM_XLA_TPU, "Attempting to reserve"},
    {HBM_OOM_XLA_TPU, "Attempting to allocate"},
    {HBM_OOM_PYTORCH, "out of memory. Tried to allocate"},
    {HBM_OOM_TENSORFLOW, "OOM when allocating tensor"},
    /* pastes cut above the first line still hold TPU's report */
    {HBM_OOM_XLA_TPU, "Total hbm usage >="},
    {HBM_OOM_XLA_TPU, "Largest program allocations in hbm"},
};

/* "Attempting to allocate" is TPU's only with "That was not possible" after it. */
static bool confirm(const headline_pattern_t *hp, const char *at, const char *end) {
  if (!strcmp(hp->pattern, "Attempting to allocate") ||
      !strcmp(hp->pattern, "Attempting to reserve")) {
    const char *limit = end - at > 300 ? at + 300 : end;
    return hbm__oom_search(at, limit, NULL, "That was not possible") != NULL;
  }
  if (hp->kind == HBM_OOM_XLA_CPU) { /* "... allocating 7200000000 bytes." only */
    uint64_t n;
    return hbm__oom_scan(at, end, "Out of memory allocating #", &n) != NULL;
  }
  if (!strcmp(hp->pattern, "Allocation (size="))
    return hbm__oom_search(at, end, NULL, "Allocation (size=") &&
           hbm__oom_search(at, end - at > 200 ? at + 200 : end, NULL, "would exceed memory");
  return true;
}

/* "Allocator (GPU_0_bfc) ran out of memory trying to allocate": where it starts, or NULL. */
static const char *find_bfc_oom(const char *b, const char *e) {
  for (const char *at = hbm__oom_find(b, e, "Allocator ("); at;
       at = hbm__oom_find(at + 1, e, "Allocator (")) {
    const char *close = hbm__oom_find(at, e - at > 120 ? at + 120 : e, ")");
    if (close && hbm__oom_scan(close + 1, e, " ran out of memory trying to allocate"))
      return at;
  }
  return NULL;
}

/* The BFC allocator's log without any exception: TensorFlow's unless XLA/JAX is named. */
static bool bfc_only(const oom_doc_t *doc, oom_headline_t *out) {
  range_t all = whole(doc);
  const char *at = find_bfc_oom(all.b, all.e);
  if (!at)
    return false;
  bool xla = hbm__oom_find(all.b, all.e, "xla") || hbm__oom_find(all.b, all.e, "jax") ||
             hbm__oom_find(all.b, all.e, "XLA");
  out->kind = xla ? HBM_OOM_XLA_GPU : HBM_OOM_TENSORFLOW;
  out->at = at;
  return true;
}

bool hbm__oom_find_headline(const oom_doc_t *doc, oom_headline_t *out) {
  range_t all = whole(doc);
  out->at = NULL;
  for (size_t i = 0; i < HBM_ARRAY_LEN(headlines); i++) {
    const headline_pattern_t *hp = &headlines[i];
    const char *limit = out->at ? out->at : all.e;
    for (const char *at = hbm__oom_search(all.b, limit, NULL, hp->pattern); at;
         at = hbm__oom_search(at + 1, limit, NULL, hp->pattern))
      if (confirm(hp, at, all.e)) {
        out->kind = hp->kind;
        out->at = at;
        break;
      }
  }
  if (!out->at) {
    const char *at = hbm__oom_search(all.b, all.e, NULL, "failed to allocate memory");
    if (at && (hbm__oom_find(all.b, all.e, "ResourceExhausted") ||
               hbm__oom_find(all.b, all.e, "RESOURCE_EXHAUSTED"))) {
      out->kind = HBM_OOM_TENSORFLOW;
      out->at = at;
    }
  }
  return out->at || bfc_only(doc, out);
}

/* ---- rows: "label: value" lines ---- */

/* The size after `label` (and an optional ':') at the start of r. */
static bool row_size(range_t r, const char *label, uint64_t *v) {
  if (!starts(r, label))
    return false;
  const char *p = r.b + strlen(label);
  while (p < r.e && (*p == ' ' || *p == ':' || *p == '\t'))
    p++;
  return hbm__oom_size(p, r.e, v) != NULL;
}

typedef struct row_field {
  const char *label;
  hbm_oom_field_t field;
} row_field_t;

/* Every line that starts with one of the labels sets its field (the first time). */
static void parse_rows(const oom_doc_t *doc, hbm_oom_text_t *t, const row_field_t *rows, size_t n) {
  for (size_t i = 0; i < doc->n_lines; i++) {
    range_t r = line_at(doc, i);
    if (starts(r, "Stats:")) /* cudaMallocAsync: "Stats: Limit: 0" on one line */
      for (r.b += 6; r.b < r.e && *r.b == ' ';)
        r.b++;
    for (size_t k = 0; k < n; k++) {
      uint64_t v;
      if (!t->known[rows[k].field] && row_size(r, rows[k].label, &v))
        hbm__oom_set(t, rows[k].field, v);
    }
  }
}

static void parse_buffer_assignment_stats(const oom_doc_t *doc, hbm_oom_text_t *t) {
  static const row_field_t rows[] = {
      {"parameter allocation", HBM_OOMF_PARAMETER},
      {"constant allocation", HBM_OOMF_CONSTANT},
      {"maybe_live_out allocation", HBM_OOMF_MAYBE_LIVE_OUT},
      {"preallocated temp allocation", HBM_OOMF_PREALLOCATED_TEMP},
      {"preallocated temp fragmentation", HBM_OOMF_TEMP_FRAGMENTATION},
      {"total allocation", HBM_OOMF_TOTAL_ALLOCATION},
      {"total fragmentation", HBM_OOMF_TOTAL_FRAGMENTATION},
  };
  parse_rows(doc, t, rows, HBM_ARRAY_LEN(rows));
}

/* The BFC allocator's log: "Allocator (GPU_0_bfc) ran out of memory trying to allocate
 * 3.72GiB (rounded to 4000000000)requested by op X" and its "Stats:" rows. */
static void parse_bfc(const oom_doc_t *doc, hbm_oom_text_t *t) {
  static const row_field_t rows[] = {
      {"Limit:", HBM_OOMF_LIMIT},
      {"InUse:", HBM_OOMF_IN_USE},
      {"MaxInUse:", HBM_OOMF_MAX_IN_USE},
      {"NumAllocs:", HBM_OOMF_NUM_ALLOCS},
      {"MaxAllocSize:", HBM_OOMF_MAX_ALLOC_SIZE},
      {"Reserved:", HBM_OOMF_BFC_RESERVED},
      {"PeakReserved:", HBM_OOMF_PEAK_RESERVED},
      {"LargestFreeBlock:", HBM_OOMF_LARGEST_FREE_BLOCK},
  };
  parse_rows(doc, t, rows, HBM_ARRAY_LEN(rows));
  range_t all = whole(doc);
  const char *at = find_bfc_oom(all.b, all.e);
  if (!at)
    return;
  const char *close = hbm__oom_find(at, all.e - at > 120 ? at + 120 : all.e, ")");
  uint64_t req, rounded;
  const char *p = hbm__oom_scan(close + 1, all.e, " ran out of memory trying to allocate #", &req);
  if (!t->allocator)
    set_str(&t->allocator, dup_range(at + 11, close));
  if (!p)
    return;
  hbm__oom_set_once(t, HBM_OOMF_REQUESTED, req);
  if (hbm__oom_scan(p, all.e, " (rounded to #)", &rounded))
    hbm__oom_set_once(t, HBM_OOMF_ROUNDED, rounded);
}

/* ---- peak buffers / largest program allocations ---- */

/* The value of key="..." (or key=N) in r, malloc'd; NULL when absent. */
static char *attr(range_t r, const char *key) {
  size_t n = strlen(key);
  for (const char *p = hbm__oom_find(r.b, r.e, key); p; p = hbm__oom_find(p + 1, r.e, key)) {
    if (p > r.b && p[-1] != ' ' && p[-1] != ':')
      continue;
    const char *v = p + n;
    if (v >= r.e || *v != '=')
      continue;
    v++;
    if (v < r.e && *v == '"') {
      const char *q = ++v;
      while (q < r.e && !(*q == '"' && q[-1] != '\\'))
        q++;
      return dup_range(v, q);
    }
    const char *q = v;
    while (q < r.e && *q != ' ')
      q++;
    return dup_range(v, q);
  }
  return NULL;
}

static void parse_operator(range_t r, hbm_oom_buffer_t *b) {
  free(b->op_name);
  free(b->op_type);
  free(b->source_file);
  b->op_name = attr(r, "op_name");
  b->op_type = attr(r, "op_type");
  b->source_file = attr(r, "source_file");
  char *line = attr(r, "source_line");
  int64_t v = 0;
  if (line && hbm__oom_int(line, line + strlen(line), &v))
    b->source_line = v;
  free(line);
  if (!b->op_name && !b->op_type && !hbm__oom_find(r.b, r.e, "=")) /* hbm's own: a bare name */
    b->op_name = dup_range(r.b + strlen("Operator:"), r.e);
}

/* hbm's own "Source: model.py:12". */
static void parse_source(range_t r, hbm_oom_buffer_t *b) {
  const char *colon = r.e;
  while (colon > r.b && *colon != ':')
    colon--;
  int64_t line;
  const char *b0 = r.b + strlen("Source:");
  if (colon > b0 && hbm__oom_int(colon + 1, r.e, &line) == r.e) {
    free(b->source_file);
    b->source_file = dup_range(b0, colon);
    b->source_line = line;
  }
}

static void set_text(char **field, range_t r, const char *label) {
  free(*field);
  *field = dup_range(r.b + strlen(label), r.e);
}

static bool is_parameter_type(const char *type) {
  return type && (strcasestr(type, "parameter") || strcasestr(type, "argument"));
}

/* One line inside a buffer entry; false when the line is none of a buffer's fields. */
static bool buffer_field(range_t r, hbm_oom_buffer_t *b) {
  uint64_t v;
  if (row_size(r, "Size:", &v))
    b->size = v;
  else if (row_size(r, "Unpadded size:", &v))
    b->unpadded_size = v;
  else if (starts(r, "Operator:"))
    parse_operator(r, b);
  else if (starts(r, "XLA Label:") || starts(r, "XLA label:"))
    set_text(&b->label, r, "XLA Label:");
  else if (starts(r, "Shape:"))
    set_text(&b->shape, r, "Shape:");
  else if (starts(r, "Entry Parameter Subshape:")) {
    set_text(&b->shape, r, "Entry Parameter Subshape:");
    free(b->allocation_type);
    b->allocation_type = hbm__strdup("Entry Parameter");
    b->parameter = 1;
  } else if (starts(r, "Allocation type:")) {
    set_text(&b->allocation_type, r, "Allocation type:");
    b->parameter = is_parameter_type(b->allocation_type);
  } else if (starts(r, "Category:")) { /* hbm's own diagnosis */
    set_text(&b->allocation_type, r, "Category:");
    b->parameter = is_parameter_type(b->allocation_type);
  } else if (starts(r, "Source:")) {
    parse_source(r, b);
  } else if (!starts(r, "Extra memory due to padding:"))
    return false;
  return true;
}

/* "Buffer 3:" (GPU) or "3. Size: 8.77G" (TPU): a new entry starts. */
static bool entry_start(range_t r, hbm_oom_text_t *t, hbm_oom_buffer_t **cur) {
  int64_t n;
  uint64_t size;
  const char *p;
  if ((p = hbm__oom_scan(r.b, r.e, "Buffer %:", &n)) && p == r.e)
    *cur = hbm__oom_add_buffer(t);
  else if (hbm__oom_scan(r.b, r.e, "%. Size: #", &n, &size)) {
    *cur = hbm__oom_add_buffer(t);
    if (*cur)
      (*cur)->size = size;
  } else
    return false;
  return true;
}

static size_t find_line(const oom_doc_t *doc, const char *prefix) {
  for (size_t i = 0; i < doc->n_lines; i++) {
    range_t r = line_at(doc, i);
    if (starts(r, prefix) || (prefix[0] == '*' && hbm__oom_find(r.b, r.e, prefix + 1)))
      return i;
  }
  return doc->n_lines;
}

static void parse_buffers(const oom_doc_t *doc, hbm_oom_text_t *t) {
  size_t i = find_line(doc, "Peak buffers:");
  if (i == doc->n_lines)
    i = find_line(doc, "*Largest program allocations in");
  hbm_oom_buffer_t *cur = NULL;
  bool closed = false;
  for (i++; i < doc->n_lines; i++) {
    range_t r = line_at(doc, i);
    if (r.b == r.e)
      continue;
    if (entry_start(r, t, &cur)) {
      closed = false;
      if (!cur)
        return; /* out of memory: keep what was read */
    } else if (starts(r, "====")) {
      closed = true;
    } else if (!cur || closed || !buffer_field(r, cur)) {
      if (!cur || closed)
        break; /* the list ended */
    }
  }
  for (size_t k = 0; k < t->n_buffers; k++) {
    hbm_oom_buffer_t *b = &t->buffers[k];
    b->group = hbm__oom_group(b->op_name, b->parameter);
    if (b->label && b->label[0] == '%') /* TPU: "%fusion.77 = f32[...] fusion(...)" */
      b->instruction = dup_range(b->label + 1, b->label + strcspn(b->label, " ="));
  }
}

/* ---- XLA on GPU ---- */

/* hbm's own diagnosis (src/alloc/oom.c) after XLA's line: "hbm diagnosis:" then "device:
 * ..., 16.00GiB total, 4.00GiB free now", "limit: N bytes", "in use: N bytes", "largest free
 * block: N bytes". */
static void parse_hbm_diagnosis(const oom_doc_t *doc, hbm_oom_text_t *t) {
  size_t first = find_line(doc, "hbm diagnosis:");
  for (size_t i = first + 1; i < doc->n_lines && i < first + 12; i++) {
    range_t r = line_at(doc, i);
    uint64_t v, total, free_b;
    if (row_size(r, "limit:", &v))
      hbm__oom_set_once(t, HBM_OOMF_LIMIT, v);
    else if (row_size(r, "in use:", &v))
      hbm__oom_set_once(t, HBM_OOMF_IN_USE, v);
    else if (row_size(r, "largest free block:", &v))
      hbm__oom_set_once(t, HBM_OOMF_LARGEST_FREE_BLOCK, v);
    else if (starts(r, "device:")) {
      const char *e;
      if (hbm__oom_search(r.b, r.e, &e, ", # total", &total))
        hbm__oom_set_once(t, HBM_OOMF_CAPACITY, total);
      if (hbm__oom_search(r.b, r.e, NULL, ", # free now", &free_b))
        hbm__oom_set_once(t, HBM_OOMF_FREE, free_b);
    }
  }
}

static void parse_xla_gpu(const oom_doc_t *doc, const oom_headline_t *h, hbm_oom_text_t *t) {
  range_t all = whole(doc);
  uint64_t req, bytes, free_b, total;
  int64_t ordinal;
  const char *p;
  if (hbm__oom_scan(h->at, all.e, "Out of memory while trying to allocate #", &req))
    hbm__oom_set(t, HBM_OOMF_REQUESTED, req);
  else if (hbm__oom_scan(h->at, all.e, "Failed to allocate request for # (#) on device ordinal %",
                         &req, &bytes, &ordinal)) {
    hbm__oom_set(t, HBM_OOMF_REQUESTED, bytes);
    char dev[32];
    snprintf(dev, sizeof dev, "GPU %lld", (long long)ordinal);
    set_str(&t->device, hbm__strdup(dev));
  } else if ((p = hbm__oom_scan(h->at, all.e, "cuMemAllocAsync failed to allocate #", &req))) {
    hbm__oom_set(t, HBM_OOMF_REQUESTED, req);
    const char *name = h->at;
    while (name > all.b && name[-1] == ' ')
      name--;
    const char *word = name;
    while (word > all.b && !isspace((unsigned char)word[-1]))
      word--;
    set_str(&t->allocator, dup_range(word, name));
    if (hbm__oom_search(p, all.e, NULL, "Free memory/Total memory: #/#", &free_b, &total)) {
      hbm__oom_set(t, HBM_OOMF_FREE, free_b);
      hbm__oom_set(t, HBM_OOMF_CAPACITY, total);
    }
  }
  parse_buffer_assignment_stats(doc, t);
  parse_bfc(doc, t);
  parse_hbm_diagnosis(doc, t);
  parse_buffers(doc, t);
}

/* ---- XLA on CPU ---- */

static void parse_xla_cpu(const oom_doc_t *doc, const oom_headline_t *h, hbm_oom_text_t *t) {
  uint64_t req;
  if (hbm__oom_scan(h->at, doc->text + doc->len, "Out of memory allocating #", &req))
    hbm__oom_set(t, HBM_OOMF_REQUESTED, req);
  set_str(&t->device, hbm__strdup("CPU (host memory)"));
}

/* ---- XLA on TPU ---- */

/* "shape = 'u8[...]'" inside the #allocation brackets. */
static char *quoted_after(const char *p, const char *end, const char *key) {
  const char *k = hbm__oom_find(p, end, key);
  if (!k)
    return NULL;
  const char *v = memchr(k, '\'', (size_t)(end - k));
  if (!v)
    return NULL;
  const char *q = memchr(v + 1, '\'', (size_t)(end - v - 1));
  return q ? dup_range(v + 1, q) : NULL;
}

/* The instruction a TPU allocation belongs to: the name after its last " :: " (XLA writes
 * "<no-hlo-instruction>" when there is none), else the one its tag names ("output of X@{}",
 * "scoped memory for X"). NULL when neither says. */
static char *tpu_allocation_instruction(const char *p, const char *end, const char *tag) {
  const char *last = NULL;
  for (const char *q = hbm__oom_find(p, end, " :: "); q; q = hbm__oom_find(q + 1, end, " :: "))
    last = q + 4;
  if (last && *last != '<' && *last != '#') {
    const char *q = last;
    while (q < end && !isspace((unsigned char)*q))
      q++;
    return dup_range(last, q);
  }
  static const char *const prefixes[] = {"output of ", "scoped memory for "};
  for (size_t i = 0; tag && i < HBM_ARRAY_LEN(prefixes); i++)
    if (!strncmp(tag, prefixes[i], strlen(prefixes[i]))) {
      const char *name = tag + strlen(prefixes[i]);
      return dup_range(name, name + strcspn(name, "@ "));
    }
  return NULL;
}

static void parse_tpu_allocation(const oom_doc_t *doc, hbm_oom_text_t *t) {
  range_t all = whole(doc);
  uint64_t size, memory;
  const char *e;
  const char *at = hbm__oom_search(
      all.b, all.e, &e, "Allocation (size=#) would exceed memory (size=#)", &size, &memory);
  if (!at)
    return;
  hbm__oom_set_once(t, HBM_OOMF_REQUESTED, size);
  hbm__oom_set_once(t, HBM_OOMF_CAPACITY, memory);
  const char *line_end = memchr(e, '\n', (size_t)(all.e - e));
  line_end = line_end ? line_end : all.e;
  if (t->n_buffers)
    return;
  hbm_oom_buffer_t *b = hbm__oom_add_buffer(t);
  if (!b)
    return;
  b->size = size;
  b->shape = quoted_after(e, line_end, "shape =");
  b->label = quoted_after(e, line_end, "tag =");
  b->instruction = tpu_allocation_instruction(e, line_end, b->label);
  b->group = hbm__oom_group(NULL, 0);
  const char *space = hbm__oom_find(e, line_end, "space=");
  if (space && !t->device) {
    const char *q = space + 6;
    while (q < line_end && isalnum((unsigned char)*q))
      q++;
    set_str(&t->device, dup_range(space + 6, q));
  }
}

static void parse_tpu_ran_out(const oom_doc_t *doc, hbm_oom_text_t *t) {
  range_t all = whole(doc);
  const char *e;
  const char *at = hbm__oom_search(all.b, all.e, &e, "Ran out of memory in memory space ");
  if (!at)
    return;
  const char *w = e;
  while (w < all.e && isalnum((unsigned char)*w))
    w++;
  if (!t->device)
    set_str(&t->device, dup_range(e, w));
  uint64_t used, cap, exceeded;
  const char *p = hbm__oom_scan(w, all.e, ". Used # of #", &used, &cap);
  if (!p)
    return;
  hbm__oom_set(t, HBM_OOMF_USED, used);
  hbm__oom_set_once(t, HBM_OOMF_CAPACITY, cap);
  if (hbm__oom_search(p, all.e - p > 200 ? p + 200 : all.e, NULL, "capacity by #", &exceeded))
    hbm__oom_set(t, HBM_OOMF_EXCEEDED, exceeded);
}

/* "Currently allocated:    6.08G (   6,532,939,776 bytes)": the exact bytes when given. */
static bool exact_or_size(range_t r, const char *label, uint64_t *v) {
  if (!row_size(r, label, v))
    return false;
  const char *open = hbm__oom_find(r.b, r.e, "(");
  if (!open)
    return true;
  uint64_t exact = 0;
  bool digits = false;
  for (const char *p = open + 1; p < r.e && *p != ')' && *p != 'b'; p++) {
    if (isdigit((unsigned char)*p)) {
      if (__builtin_mul_overflow(exact, 10, &exact) ||
          __builtin_add_overflow(exact, (uint64_t)(*p - '0'), &exact))
        return true;
      digits = true;
    } else if (*p != ',' && *p != ' ')
      return true;
  }
  if (digits)
    *v = exact;
  return true;
}

static void parse_tpu_reserve(const oom_doc_t *doc, hbm_oom_text_t *t) {
  range_t all = whole(doc);
  uint64_t req, free_b, reserved, reservable;
  const char *e;
  if (hbm__oom_search(all.b, all.e, &e, "Attempting to reserve # at the bottom of memory", &req)) {
    hbm__oom_set_once(t, HBM_OOMF_REQUESTED, req);
    if (hbm__oom_search(e, all.e, NULL, "There are # free, # reserved, and # reservable", &free_b,
                        &reserved, &reservable))
      hbm__oom_set_once(t, HBM_OOMF_FREE, free_b);
  } else if (hbm__oom_search(all.b, all.e, &e, "Attempting to allocate #. That was not possible",
                             &req)) {
    hbm__oom_set_once(t, HBM_OOMF_REQUESTED, req);
    if (hbm__oom_scan(e, all.e, ". There are # free", &free_b))
      hbm__oom_set_once(t, HBM_OOMF_FREE, free_b);
  }
  for (size_t i = 0; i < doc->n_lines; i++) {
    range_t r = line_at(doc, i);
    uint64_t v;
    if (row_size(r, "HBM capacity", &v))
      hbm__oom_set_once(t, HBM_OOMF_CAPACITY, v);
    else if (exact_or_size(r, "Top-of-Memory reserved:", &v))
      hbm__oom_set_once(t, HBM_OOMF_TPU_RESERVED, v);
    else if (exact_or_size(r, "Currently allocated:", &v))
      hbm__oom_set_once(t, HBM_OOMF_ALLOCATED, v);
    else if (exact_or_size(r, "Program requirement:", &v))
      hbm__oom_set_once(t, HBM_OOMF_PROGRAM, v);
  }
}

/* The size that ends the row ("reserved(Infeed/Outfeed/Continuations) 529.00M"). */
static bool last_size(range_t r, uint64_t *v) {
  const char *p = r.e;
  while (p > r.b && p[-1] != ' ')
    p--;
  return p > r.b && hbm__oom_size(p, r.e, v) == r.e;
}

/* "Total hbm usage >= 11.47G:" and its rows, "Output size", "HLO temp". */
static void parse_tpu_usage(const oom_doc_t *doc, hbm_oom_text_t *t) {
  for (size_t i = 0; i < doc->n_lines; i++) {
    range_t r = line_at(doc, i);
    uint64_t v, shared;
    const char *p;
    if (starts(r, "Total ") && (p = hbm__oom_find(r.b, r.e, "usage >=")) &&
        hbm__oom_size(p + 9, r.e, &v) && !t->known[HBM_OOMF_TOTAL_USAGE]) {
      hbm__oom_set(t, HBM_OOMF_TOTAL_USAGE, v);
      for (size_t k = i + 1; k < doc->n_lines && k < i + 8; k++) {
        range_t row = line_at(doc, k);
        if (row.b == row.e || !last_size(row, &v))
          break;
        if (starts(row, "reserved"))
          hbm__oom_set_once(t, HBM_OOMF_TPU_RESERVED, v);
        else if (starts(row, "program"))
          hbm__oom_set_once(t, HBM_OOMF_PROGRAM, v);
        else if (starts(row, "arguments"))
          hbm__oom_set_once(t, HBM_OOMF_ARGUMENTS, v);
        else if (starts(row, "heap allocations"))
          hbm__oom_set_once(t, HBM_OOMF_ALLOCATED, v);
      }
    } else if (hbm__oom_scan(r.b, r.e, "Output size #; shares #", &v, &shared)) {
      hbm__oom_set_once(t, HBM_OOMF_OUTPUT, v);
    } else if (row_size(r, "HLO temp", &v)) {
      hbm__oom_set_once(t, HBM_OOMF_HLO_TEMP, v);
    } else if ((p = hbm__oom_scan(r.b, r.e, "Program ")) &&
               hbm__oom_find(r.b, r.e, "requirement") &&
               last_size((range_t){r.b, r.e > r.b && r.e[-1] == ':' ? r.e - 1 : r.e}, &v)) {
      hbm__oom_set_once(t, HBM_OOMF_PROGRAM, v);
    }
  }
}

static void parse_xla_tpu(const oom_doc_t *doc, hbm_oom_text_t *t) {
  parse_tpu_ran_out(doc, t);
  parse_tpu_reserve(doc, t);
  parse_tpu_usage(doc, t);
  parse_buffers(doc, t);
  parse_tpu_allocation(doc, t); /* after the list: its buffer only when there is none */
}

/* ---- PyTorch ---- */

static range_t sentence_window(const oom_doc_t *doc, const char *at) {
  range_t all = whole(doc);
  const char *b = at;
  while (b > all.b && b[-1] != '\n')
    b--;
  const char *e = hbm__oom_find(at, all.e, "\n\n");
  if (!e || e - at > 4000)
    e = all.e - at > 4000 ? at + 4000 : all.e;
  return (range_t){b, e};
}

/* "(GPU 0; 15.78 GiB total capacity; 14.21 GiB already allocated; 19.88 MiB free; 14.48 GiB
 * reserved in total by PyTorch)" and the older "...; 4.68 MiB cached)". */
static void parse_torch_old(range_t w, hbm_oom_text_t *t) {
  static const row_field_t items[] = {
      {"total capacity", HBM_OOMF_CAPACITY},
      {"already allocated", HBM_OOMF_ALLOCATED},
      {"free", HBM_OOMF_FREE},
      {"allowed", HBM_OOMF_LIMIT},
      {"max allowed", HBM_OOMF_LIMIT},
      {"reserved in total by PyTorch", HBM_OOMF_RESERVED},
      {"cached", HBM_OOMF_RESERVED},
  };
  int64_t gpu;
  const char *e, *p = hbm__oom_search(w.b, w.e, &e, "(GPU %;", &gpu);
  if (!p)
    return;
  char dev[32];
  snprintf(dev, sizeof dev, "GPU %lld", (long long)gpu);
  set_str(&t->device, hbm__strdup(dev));
  for (p = e; p && p < w.e && *p != ')';) {
    uint64_t v;
    while (p < w.e && isspace((unsigned char)*p))
      p++;
    const char *label = hbm__oom_size(p, w.e, &v);
    if (!label)
      return;
    while (label < w.e && isspace((unsigned char)*label))
      label++;
    const char *stop = label;
    while (stop < w.e && *stop != ';' && *stop != ')')
      stop++;
    for (size_t k = 0; k < HBM_ARRAY_LEN(items); k++)
      if ((size_t)(stop - label) == strlen(items[k].label) &&
          !memcmp(label, items[k].label, (size_t)(stop - label)))
        hbm__oom_set_once(t, items[k].field, v);
    p = stop < w.e && *stop == ';' ? stop + 1 : stop;
  }
  if (t->known[HBM_OOMF_RESERVED] && t->known[HBM_OOMF_ALLOCATED] &&
      t->value[HBM_OOMF_RESERVED] >= t->value[HBM_OOMF_ALLOCATED])
    hbm__oom_set(t, HBM_OOMF_RESERVED_UNALLOCATED,
                 t->value[HBM_OOMF_RESERVED] - t->value[HBM_OOMF_ALLOCATED]);
}

static void add_process(hbm_oom_text_t *t, int64_t pid, uint64_t bytes) {
  hbm_oom_process_t *p = realloc(t->processes, (t->n_processes + 1) * sizeof *p);
  if (!p)
    return;
  t->processes = p;
  p[t->n_processes++] = (hbm_oom_process_t){pid, bytes};
}

/* Without "this process has ...", PyTorch could not match its own pid (containers): the
 * smallest listed process holding at least what PyTorch reserved is taken to be this one. */
static void assign_processes(hbm_oom_text_t *t) {
  if (!t->known[HBM_OOMF_IN_USE] && t->known[HBM_OOMF_RESERVED]) {
    size_t self = t->n_processes;
    for (size_t i = 0; i < t->n_processes; i++)
      if (t->processes[i].bytes >= t->value[HBM_OOMF_RESERVED] &&
          (self == t->n_processes || t->processes[i].bytes < t->processes[self].bytes))
        self = i;
    if (self < t->n_processes) {
      hbm_oom_process_t p = t->processes[self];
      memmove(t->processes + 1, t->processes, self * sizeof p);
      t->processes[0] = p;
      t->this_process_listed = 1;
      hbm__oom_set(t, HBM_OOMF_IN_USE, p.bytes);
    }
  }
  uint64_t others = 0;
  for (size_t i = (size_t)t->this_process_listed; i < t->n_processes; i++)
    others = hbm__oom_add(others, t->processes[i].bytes);
  if (t->n_processes > (size_t)t->this_process_listed)
    hbm__oom_set(t, HBM_OOMF_OTHER_PROCESSES, others);
}

static void parse_torch_new(range_t w, hbm_oom_text_t *t) {
  uint64_t cap, free_b, v, u;
  int64_t gpu, pid;
  const char *e;
  if (hbm__oom_search(w.b, w.e, &e, "GPU % has a total capac", &gpu)) {
    char dev[32];
    snprintf(dev, sizeof dev, "GPU %lld", (long long)gpu);
    set_str(&t->device, hbm__strdup(dev));
    const char *of = hbm__oom_find(e, w.e, "of ");
    if (of && hbm__oom_scan(of, w.e, "of # of which # is free", &cap, &free_b)) {
      hbm__oom_set(t, HBM_OOMF_CAPACITY, cap);
      hbm__oom_set(t, HBM_OOMF_FREE, free_b);
    }
  }
  if (hbm__oom_search(w.b, w.e, NULL, "this process has # memory in use", &v))
    hbm__oom_set(t, HBM_OOMF_IN_USE, v);
  for (const char *p = w.b;
       (p = hbm__oom_search(p, w.e, &e, "Process % has # memory in use", &pid, &v)); p = e)
    add_process(t, pid, v);
  if (hbm__oom_search(w.b, w.e, &e, "Of the allocated memory # is allocated by PyTorch", &v)) {
    hbm__oom_set(t, HBM_OOMF_ALLOCATED, v);
    if (hbm__oom_scan(e, w.e, ", and # is reserved by PyTorch but unallocated", &u)) {
      hbm__oom_set(t, HBM_OOMF_RESERVED_UNALLOCATED, u);
      hbm__oom_set(t, HBM_OOMF_RESERVED, hbm__oom_add(v, u));
    }
  }
}

static void parse_pytorch(const oom_doc_t *doc, const oom_headline_t *h, hbm_oom_text_t *t) {
  range_t w = sentence_window(doc, h->at);
  uint64_t req;
  if (hbm__oom_scan(h->at, w.e, "out of memory. Tried to allocate #", &req))
    hbm__oom_set(t, HBM_OOMF_REQUESTED, req);
  parse_torch_new(w, t);
  parse_torch_old(w, t);
  assign_processes(t);
}

/* ---- TensorFlow ---- */

static uint64_t dtype_bytes(const char *type) {
  static const struct {
    const char *name;
    uint64_t bytes;
  } types[] = {{"float", 4},   {"double", 8},  {"half", 2},   {"bfloat16", 2},  {"int8", 1},
               {"uint8", 1},   {"int16", 2},   {"uint16", 2}, {"int32", 4},     {"uint32", 4},
               {"int64", 8},   {"uint64", 8},  {"bool", 1},   {"complex64", 8}, {"complex128", 16},
               {"float16", 2}, {"float32", 4}, {"float64", 8}};
  for (size_t i = 0; i < HBM_ARRAY_LEN(types); i++)
    if (!strcmp(type, types[i].name))
      return types[i].bytes;
  return 0;
}

/* "[16,112,112,147]" times the element size; 0 when unknown or too large. */
static uint64_t tensor_bytes(const char *shape, const char *type) {
  uint64_t n = dtype_bytes(type);
  const char *p = shape + 1, *end = shape + strlen(shape);
  while (n && p < end && *p != ']') {
    int64_t d;
    const char *q = hbm__oom_int(p, end, &d);
    if (!q || d < 0 || __builtin_mul_overflow(n, (uint64_t)d, &n))
      return 0;
    p = q < end && *q == ',' ? q + 1 : q;
    if (q < end && *q != ',' && *q != ']')
      return 0;
  }
  return n;
}

static char *word_after(const char *p, const char *end, const char *stops) {
  const char *q = p;
  while (q < end && !strchr(stops, *q) && !isspace((unsigned char)*q))
    q++;
  return dup_range(p, q);
}

static void parse_tf_tensor(const oom_doc_t *doc, const oom_headline_t *h, hbm_oom_text_t *t) {
  range_t all = whole(doc);
  const char *p = hbm__oom_scan(h->at, all.e, "OOM when allocating tensor ");
  if (!p)
    return;
  const char *open = hbm__oom_find(p, all.e - p > 40 ? p + 40 : all.e, "[");
  const char *close = open ? hbm__oom_find(open, all.e, "]") : NULL;
  if (!close)
    return;
  set_str(&t->tensor_shape, dup_range(open, close + 1));
  const char *e = hbm__oom_scan(close + 1, all.e, " and type ");
  if (e)
    set_str(&t->tensor_type, word_after(e, all.e, ""));
  const char *on =
      hbm__oom_scan(e ? e + (t->tensor_type ? strlen(t->tensor_type) : 0) : close, all.e, " on ");
  if (on)
    set_str(&t->device, word_after(on, all.e, ""));
  const char *by =
      hbm__oom_search(close, all.e - close > 300 ? close + 300 : all.e, &e, "by allocator ");
  if (by && !t->allocator)
    set_str(&t->allocator, word_after(e, all.e, ""));
  uint64_t bytes =
      t->tensor_type && t->tensor_shape ? tensor_bytes(t->tensor_shape, t->tensor_type) : 0;
  if (bytes)
    hbm__oom_set(t, HBM_OOMF_REQUESTED, bytes);
}

/* The op: "[[{{node X}}]]", "[[Node: X = ...", "[Op:MatMul]", or BFC's "requested by op X". */
static void parse_tf_op(const oom_doc_t *doc, hbm_oom_text_t *t) {
  range_t all = whole(doc);
  const char *e;
  if (hbm__oom_search(all.b, all.e, &e, "{{node ") ||
      hbm__oom_search(all.b, all.e, &e, "[[Node: ") || hbm__oom_search(all.b, all.e, &e, "[Op:") ||
      hbm__oom_search(all.b, all.e, &e, "requested by op "))
    set_str(&t->op, word_after(e, all.e, "}]"));
  if (t->op && !t->op[0]) {
    free(t->op);
    t->op = NULL;
  }
}

static void parse_tensorflow(const oom_doc_t *doc, const oom_headline_t *h, hbm_oom_text_t *t) {
  parse_tf_tensor(doc, h, t);
  parse_bfc(doc, t);
  parse_tf_op(doc, t);
}

void hbm__oom_parse_kind(const oom_doc_t *doc, const oom_headline_t *h, hbm_oom_text_t *t) {
  switch (h->kind) {
  case HBM_OOM_XLA_GPU: parse_xla_gpu(doc, h, t); break;
  case HBM_OOM_XLA_TPU: parse_xla_tpu(doc, t); break;
  case HBM_OOM_PYTORCH: parse_pytorch(doc, h, t); break;
  case HBM_OOM_XLA_CPU: parse_xla_cpu(doc, h, t); break;
  default: parse_tensorflow(doc, h, t); break;
  }
}

/* ---- operator paths ---- */

/* The end of the path component at p: the next '/' outside brackets and parentheses. */
static const char *component_end(const char *p) {
  int depth = 0;
  for (; *p; p++) {
    if (*p == '[' || *p == '(')
      depth++;
    else if ((*p == ']' || *p == ')') && depth > 0)
      depth--;
    else if (*p == '/' && depth == 0)
      break;
  }
  return p;
}

static bool is_wrapper(const char *c, size_t n, const char *name) {
  size_t k = strlen(name);
  return n > k + 1 && !strncmp(c, name, k) && c[k] == '(' && c[n - 1] == ')';
}

/* Appends component c (n bytes) to sb unless it is a transformation's wrapper: jit(f),
 * pjit(f), jvp(Module), transpose(jvp(Module)), vmap(...) name no layer (the next component
 * names the module again). */
static void add_component(hbm_strbuf_t *sb, const char *c, size_t n) {
  static const char *const wrappers[] = {
      "jit", "pjit",      "pmap", "xmap",  "shard_map",  "parallelize",     "named_call",
      "jvp", "transpose", "vmap", "remat", "checkpoint", "custom_jvp_call", "custom_vjp_call"};
  for (size_t i = 0; i < HBM_ARRAY_LEN(wrappers); i++)
    if (is_wrapper(c, n, wrappers[i]))
      return;
  if (!n)
    return;
  if (sb->len)
    hbm_strbuf_puts(sb, "/");
  hbm_strbuf_append(sb, c, n);
}

char *hbm__oom_group(const char *op_name, int parameter) {
  if (!op_name || !*op_name)
    return hbm__strdup(parameter ? "(entry parameters)" : "(no operator)");
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  const char *last = op_name;
  for (const char *p = op_name;;) {
    const char *e = component_end(p);
    if (!*e) {
      last = p;
      break;
    }
    add_component(&sb, p, (size_t)(e - p));
    p = e + 1;
  }
  if (!sb.len) { /* only wrappers: the primitive, without its parameters */
    const char *bracket = strchr(last, '[');
    hbm_strbuf_append(&sb, last, bracket ? (size_t)(bracket - last) : strlen(last));
  }
  char *s = sb.failed ? NULL : hbm__strdup(hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
  return s;
}
