/* oom_text_module.c — the program's compiled module beside a pasted out-of-memory error
 * (`hbm explain oom.txt --module PATH`). The texts XLA prints today carry no source line for
 * JAX 0.5+ programs: a GPU's "Peak buffers" give op_name, opcode and shape, TPU's report an
 * instruction name, the CPU only the bytes ("Out of memory allocating N bytes."); JAX writes
 * the lines into the module instead (metadata stack_frame_id and the module's stack-frame
 * index). PATH is what XLA_FLAGS=--xla_dump_to wrote (a directory of
 * module_NNNN.NAME.<platform>_after_optimizations*.txt), one of those files, or HLO text.
 *
 *  - A listed buffer without a source line gets the one of the instructions that may define
 *    it: the instruction the text names, else those with its op_name, opcode and shape (in
 *    any module of PATH). Only when all of them have the same file:line; otherwise it stays
 *    unknown and a note says why.
 *  - A text that lists no buffers but gives the bytes that failed: the one module whose
 *    buffer assignment (-buffer-assignment.txt) has an allocation of exactly that size is the
 *    program; the values XLA's dump shows live at its peak (-live-range.txt, "Live ranges at
 *    T (peak)") become the buffers, each with its instruction's source. */
#include "hlo/hlo.h"
#include "hlo/namemap.h"
#include "import/oom_text.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_MODULES 4096       /* a dump directory's modules read at most */
#define MAX_LIVE_VALUES 100000 /* buffers taken from one live-range file at most */

typedef struct dump_module {
  char *hlo_path; /* the module's HLO text */
  char *prefix;   /* hlo_path without ".txt", where XLA's dump puts the other files; or NULL */
  hlo_module_t *m;
  hlo_namemap_t by_name; /* instruction name → instruction (names are unique in a module) */
  bool tried;            /* parsing was tried (m NULL: it failed) */
} dump_module_t;

typedef struct module_set {
  const char *path; /* as the user gave it */
  dump_module_t *mods;
  size_t n, cap;
  size_t skipped; /* modules past MAX_MODULES */
  hbm_oom_text_t *t;
} module_set_t;

/* ---- finding the modules ---- */

static const char *const sibling_suffixes[] = {"-buffer-assignment-values.txt",
                                               "-buffer-assignment.txt", "-live-range.txt",
                                               "-memory-usage-report.txt"};

static bool add_module(module_set_t *s, const char *hlo_path) {
  if (s->n == MAX_MODULES) {
    s->skipped++;
    return true;
  }
  dump_module_t *grown =
      s->n == s->cap ? hbm__grow_array(s->mods, &s->cap, s->n + 1, sizeof *s->mods, 16) : s->mods;
  if (!grown)
    return false;
  s->mods = grown;
  dump_module_t *d = &s->mods[s->n];
  memset(d, 0, sizeof *d);
  d->hlo_path = hbm__strdup(hlo_path);
  if (!d->hlo_path)
    return false;
  size_t n = strlen(hlo_path);
  if (hbm__ends_with(hlo_path, ".txt") && (d->prefix = hbm__strdup(hlo_path)))
    d->prefix[n - 4] = '\0';
  hbm__hlo_namemap_init(&d->by_name);
  s->n++;
  return true;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const dump_module_t *)a)->hlo_path, ((const dump_module_t *)b)->hlo_path);
}

/* Every module XLA dumped after optimizations into dir, in file-name order. */
static hbm_status_t list_dump_dir(module_set_t *s, const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return hbm__error(HBM_ERR_IO, "%s: cannot open the directory: %s", dir, strerror(errno));
  bool ok = true;
  for (struct dirent *e; ok && (e = readdir(d));) {
    if (!hbm__ends_with(e->d_name, "after_optimizations.txt"))
      continue;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) < (int)sizeof path)
      ok = add_module(s, path);
  }
  closedir(d);
  if (!ok)
    return hbm__error(HBM_ERR_NO_MEMORY, "out of memory listing %s", dir);
  if (s->n > 1)
    qsort(s->mods, s->n, sizeof *s->mods, by_name);
  if (!s->n)
    return hbm__error(HBM_ERR_NOT_FOUND,
                      "%s: no module in it (expected XLA's "
                      "module_NNNN.NAME.<platform>_after_optimizations.txt, as "
                      "XLA_FLAGS=--xla_dump_to writes them)",
                      dir);
  return HBM_OK;
}

/* One file: HLO text, or a dump file whose module's HLO is beside it. */
static hbm_status_t add_file(module_set_t *s, const char *path) {
  for (size_t i = 0; i < HBM_ARRAY_LEN(sibling_suffixes); i++) {
    if (!hbm__ends_with(path, sibling_suffixes[i]))
      continue;
    size_t n = strlen(path) - strlen(sibling_suffixes[i]);
    char hlo[4096];
    struct stat st;
    if (n >= sizeof hlo - 4)
      return hbm__error(HBM_ERR_INVALID, "%s: path too long", path);
    snprintf(hlo, sizeof hlo, "%.*s.txt", (int)n, path);
    if (stat(hlo, &st) != 0)
      return hbm__error(HBM_ERR_NOT_FOUND,
                        "%s: its module's HLO is not beside it (expected %s, which "
                        "XLA_FLAGS=--xla_dump_to writes with it)",
                        path, hlo);
    return add_module(s, hlo) ? HBM_OK : hbm__error(HBM_ERR_NO_MEMORY, "out of memory");
  }
  return add_module(s, path) ? HBM_OK : hbm__error(HBM_ERR_NO_MEMORY, "out of memory");
}

/* The module's HLO, parsed once; NULL (with a note) when it does not parse. */
static hlo_module_t *module_of(module_set_t *s, dump_module_t *d) {
  if (d->tried)
    return d->m;
  d->tried = true;
  char *text = NULL;
  size_t len = 0;
  if (hbm__read_file(d->hlo_path, &text, &len) == HBM_OK)
    d->m = hbm__hlo_parse(text, len, d->hlo_path);
  free(text);
  if (!d->m) {
    hbm__oom_note(s->t, "module not read: %s", hbm_last_error());
    return NULL;
  }
  for (uint32_t c = 0; c < d->m->n_comps; c++)
    for (uint32_t i = 0; i < d->m->comps[c]->n_instrs; i++) {
      hlo_instr_t *in = d->m->comps[c]->instrs[i];
      if (hbm__hlo_namemap_put(&d->by_name, 0, in->name, in) < 0) {
        hbm__hlo_free(d->m);
        d->m = NULL;
        hbm__oom_note(s->t, "%s: out of memory indexing the module", d->hlo_path);
        return NULL;
      }
    }
  return d->m;
}

static void free_set(module_set_t *s) {
  for (size_t i = 0; i < s->n; i++) {
    hbm__hlo_free(s->mods[i].m);
    hbm__hlo_namemap_free(&s->mods[i].by_name);
    free(s->mods[i].hlo_path);
    free(s->mods[i].prefix);
  }
  free(s->mods);
}

/* ---- shapes as the texts print them ---- */

/* s without layouts ("f32[8,128]{1,0:T(8,128)}" → "f32[8,128]") and blanks, into out;
 * false when it does not fit (such a shape is compared with nothing). */
static bool strip_layouts(const char *s, size_t n, char *out, size_t cap) {
  size_t o = 0;
  int depth = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (depth == 0 && c == '{' && i > 0 && s[i - 1] == ']')
      depth = 1;
    else if (depth > 0 && c == '{')
      depth++;
    else if (depth > 0 && c == '}')
      depth--;
    else if (depth == 0 && c != ' ') {
      if (o + 1 >= cap)
        return false;
      out[o++] = c;
    }
  }
  out[o] = '\0';
  return true;
}

/* Whether the text's shape is the instruction's, or one element of its tuple (a value of a
 * tuple-shaped instruction is printed with its own subshape). */
static bool shape_matches(const hlo_shape_t *shape, const char *wanted) {
  char want[1024], have[1024];
  if (!strip_layouts(wanted, strlen(wanted), want, sizeof want))
    return false;
  if (strip_layouts(shape->text.p, shape->text.n, have, sizeof have) && !strcmp(want, have))
    return true;
  for (uint16_t i = 0; !shape->dims && i < shape->rank && shape->elems; i++)
    if (shape_matches(shape->elems[i], wanted))
      return true;
  return false;
}

static bool str_is(hlo_str_t s, const char *c) {
  return c && s.n == strlen(c) && !memcmp(s.p, c, s.n);
}

static char *slice_dup(hlo_str_t s) { return hbm__oom_strndup(s.p, s.n); }

/* The opcode as the module writes it ("fusion", "custom-call"). */
static hlo_str_t opcode_of(const hlo_module_t *m, const hlo_instr_t *in) {
  return (hlo_str_t){m->text + in->opcode_text.start, in->opcode_text.len};
}

/* ---- which instructions may define a listed buffer ---- */

typedef struct candidates {
  size_t n, without_source;
  hlo_source_frame_t first;   /* the first candidate's source */
  bool differ;                /* two candidates have different sources */
  const hlo_instr_t *instr;   /* the first candidate */
  const dump_module_t *where; /* its module */
} candidates_t;

static void consider(candidates_t *c, const dump_module_t *d, const hlo_instr_t *in) {
  hlo_source_frame_t f;
  hlo_source_status_t st = hbm__hlo_instr_source(d->m, in, &f);
  bool has = st == HLO_SOURCE_METADATA || st == HLO_SOURCE_FRAME;
  if (!has)
    c->without_source++;
  else if (c->n == c->without_source)
    c->first = f;
  else if (c->first.line != f.line || c->first.file.n != f.file.n ||
           memcmp(c->first.file.p, f.file.p, f.file.n))
    c->differ = true;
  if (!c->n++) {
    c->instr = in;
    c->where = d;
  }
}

/* The text's XLA label is an opcode ("fusion") on GPUs; TPU's whole instruction is taken
 * apart into b->instruction by the parser. */
static bool label_is_opcode(const char *label) { return label && !strpbrk(label, " =%'"); }

static bool may_define(const hlo_module_t *m, const hbm_oom_buffer_t *b, const hlo_instr_t *in) {
  if (b->op_name && !str_is(in->meta->op_name, b->op_name))
    return false;
  if (label_is_opcode(b->label) && !str_is(opcode_of(m, in), b->label))
    return false;
  if (b->parameter && (in->opcode != HLO_OP_PARAMETER || !in->parent->is_entry))
    return false;
  return !b->shape || shape_matches(in->shape, b->shape);
}

static void find_candidates(module_set_t *s, const hbm_oom_buffer_t *b, candidates_t *c) {
  memset(c, 0, sizeof *c);
  for (size_t k = 0; k < s->n; k++) {
    dump_module_t *d = &s->mods[k];
    hlo_module_t *m = module_of(s, d);
    if (!m)
      continue;
    if (b->instruction) {
      hlo_str_t name = {b->instruction, (uint32_t)strlen(b->instruction)};
      const hlo_instr_t *in = hbm__hlo_namemap_get(&d->by_name, 0, name);
      if (in && (!b->op_name || str_is(in->meta->op_name, b->op_name)) &&
          (!b->shape || shape_matches(in->shape, b->shape)))
        consider(c, d, in);
      continue;
    }
    for (uint32_t ci = 0; ci < m->n_comps; ci++) {
      const hlo_comp_t *comp = m->comps[ci];
      if (comp->kind == HLO_COMP_FUSED || comp->kind == HLO_COMP_EMBEDDED)
        continue; /* their values live in their callers' buffers, or in registers */
      for (uint32_t i = 0; i < comp->n_instrs; i++)
        if (may_define(m, b, comp->instrs[i]))
          consider(c, d, comp->instrs[i]);
    }
  }
}

static void set_source(hbm_oom_buffer_t *b, const hlo_source_frame_t *f) {
  free(b->source_file);
  b->source_file = slice_dup(f->file);
  b->source_line = f->line;
  b->source_from_module = b->source_file != NULL;
}

typedef struct match_counts {
  size_t given, found, unmatched, ambiguous, no_key;
  const dump_module_t *only; /* the one module every source came from, NULL if several */
  bool several;
} match_counts_t;

static void match_buffer(module_set_t *s, hbm_oom_buffer_t *b, match_counts_t *mc) {
  if (b->source_file) {
    mc->given++;
    return;
  }
  if (!b->instruction && !b->op_name && !b->parameter) {
    mc->no_key++;
    return;
  }
  candidates_t c;
  find_candidates(s, b, &c);
  if (!c.n) {
    mc->unmatched++;
    return;
  }
  if (c.differ || c.without_source) {
    mc->ambiguous++;
    return;
  }
  set_source(b, &c.first);
  if (c.n == 1 && !b->instruction)
    b->instruction = slice_dup(c.instr->name);
  mc->found++;
  mc->several |= mc->only && mc->only != c.where;
  mc->only = c.where;
}

static void note_matches(module_set_t *s, const match_counts_t *mc) {
  hbm_oom_text_t *t = s->t;
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_printf(&sb, "source lines of %zu of the %zu buffers listed from ", mc->found,
                    t->n_buffers);
  if (mc->only && !mc->several)
    hbm_strbuf_printf(&sb, "module %.*s (%s)", (int)mc->only->m->name.n, mc->only->m->name.p,
                      mc->only->hlo_path);
  else
    hbm_strbuf_printf(&sb, "the %zu modules of %s", s->n, s->path);
  if (mc->given)
    hbm_strbuf_printf(&sb, "; %zu had one in the text", mc->given);
  t->module_finding = sb.failed ? NULL : hbm__strdup(hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
  if (mc->only && !mc->several) {
    t->module = slice_dup(mc->only->m->name);
    t->module_file = hbm__strdup(mc->only->hlo_path);
  }
  if (mc->unmatched)
    hbm__oom_note(t,
                  "%zu buffer%s match no instruction of the module (by name, else op_name, "
                  "opcode and shape): left without a source line",
                  mc->unmatched, mc->unmatched == 1 ? "" : "s");
  if (mc->ambiguous)
    hbm__oom_note(t,
                  "%zu buffer%s match instructions with different source lines (or none): "
                  "left without one",
                  mc->ambiguous, mc->ambiguous == 1 ? "" : "s");
  if (mc->no_key)
    hbm__oom_note(t, "%zu buffer%s name neither an instruction nor an op_name to look up",
                  mc->no_key, mc->no_key == 1 ? "" : "s");
}

/* ---- a text without buffers: the allocation that failed, found by its size ---- */

/* Reads the dump file prefix + suffix (malloc'd; NULL when absent). */
static char *read_sibling(const dump_module_t *d, const char *suffix, size_t *len) {
  if (!d->prefix)
    return NULL;
  char path[4200];
  if (snprintf(path, sizeof path, "%s%s", d->prefix, suffix) >= (int)sizeof path)
    return NULL;
  char *text = NULL;
  return hbm__read_file(path, &text, len) == HBM_OK ? text : NULL;
}

typedef struct found_alloc {
  long long index;
  char kind[64]; /* "preallocated-temp", "parameter 0", ... */
} found_alloc_t;

/* The first "allocation K: size N, ..." line of the module's buffer assignment with size N. */
static bool allocation_of_size(const dump_module_t *d, uint64_t size, found_alloc_t *out) {
  size_t len;
  char *text = read_sibling(d, "-buffer-assignment.txt", &len);
  bool found = false;
  for (char *line = text; line && *line && !found;) {
    char *nl = strchr(line, '\n');
    if (nl)
      *nl = '\0';
    long long index;
    unsigned long long n;
    int used = 0;
    if (sscanf(line, "allocation %lld: size %llu%n", &index, &n, &used) == 2 && n == size) {
      const char *rest = line + used;
      rest += strspn(rest, ", ");
      size_t k = strcspn(rest, ":,");
      snprintf(out->kind, sizeof out->kind, "%.*s", (int)k, rest);
      out->index = index;
      found = true;
    }
    line = nl ? nl + 1 : NULL;
  }
  free(text);
  return found;
}

/* One "    name{index}: N bytes (cumulative: C bytes)" line of XLA's live-range dump as a
 * buffer with its instruction's op_name, opcode, shape and source. */
static bool add_live_value(module_set_t *s, dump_module_t *d, const char *line) {
  const char *brace = strchr(line, '{');
  const char *close = brace ? strstr(brace, "}: ") : NULL;
  unsigned long long bytes;
  if (!brace || !close || sscanf(close + 3, "%llu bytes", &bytes) != 1)
    return false;
  hbm_oom_buffer_t *b = hbm__oom_add_buffer(s->t);
  if (!b)
    return false;
  b->size = bytes;
  b->instruction = hbm__oom_strndup(line, (size_t)(brace - line));
  const hlo_instr_t *in = NULL;
  if (b->instruction) {
    hlo_str_t name = {b->instruction, (uint32_t)strlen(b->instruction)};
    in = hbm__hlo_namemap_get(&d->by_name, 0, name);
  }
  if (in) {
    b->op_name = in->meta->op_name.n ? slice_dup(in->meta->op_name) : NULL;
    b->label = slice_dup(opcode_of(d->m, in));
    b->parameter = in->opcode == HLO_OP_PARAMETER && in->parent->is_entry;
    if (close == brace + 1) /* index {}: the whole shape */
      b->shape = slice_dup(in->shape->text);
    if (b->parameter)
      b->allocation_type = hbm__strdup("Entry Parameter");
    hlo_source_frame_t f;
    hlo_source_status_t st = hbm__hlo_instr_source(d->m, in, &f);
    if (st == HLO_SOURCE_METADATA || st == HLO_SOURCE_FRAME)
      set_source(b, &f);
  }
  b->group = hbm__oom_group(b->op_name, b->parameter);
  return true;
}

/* XLA's "Live ranges at T (peak):" list of the module; the number of buffers added. */
static size_t add_live_at_peak(module_set_t *s, dump_module_t *d, long long *time) {
  size_t len, added = 0;
  char *text = read_sibling(d, "-live-range.txt", &len);
  char *at = text ? strstr(text, "Live ranges at ") : NULL;
  if (!at || sscanf(at, "Live ranges at %lld", time) != 1) {
    free(text);
    return 0;
  }
  char *line = strchr(at, '\n');
  while (line && added < MAX_LIVE_VALUES) {
    line++;
    char *nl = strchr(line, '\n');
    if (nl)
      *nl = '\0';
    const char *p = line + strspn(line, " ");
    if (!*p || !strstr(p, " bytes (cumulative:") || !add_live_value(s, d, p))
      break;
    added++;
    line = nl;
  }
  free(text);
  return added;
}

static void explain_failed_allocation(module_set_t *s, uint64_t requested) {
  hbm_oom_text_t *t = s->t;
  dump_module_t *hit = NULL;
  found_alloc_t a = {0}, other = {0};
  size_t n_hits = 0;
  for (size_t k = 0; k < s->n; k++)
    if (allocation_of_size(&s->mods[k], requested, n_hits ? &other : &a) && !n_hits++)
      hit = &s->mods[k];
  if (!n_hits) {
    hbm__oom_note(t,
                  "no allocation of %llu bytes in the buffer assignments of %s (XLA writes "
                  "them with --xla_dump_to): which module failed is not told",
                  (unsigned long long)requested, s->path);
    return;
  }
  if (n_hits > 1) {
    hbm__oom_note(t,
                  "%zu modules of %s have an allocation of %llu bytes: which one failed is "
                  "not told",
                  n_hits, s->path, (unsigned long long)requested);
    return;
  }
  hlo_module_t *m = module_of(s, hit);
  if (!m)
    return;
  long long time = 0;
  size_t added = add_live_at_peak(s, hit, &time);
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_printf(&sb, "the %llu bytes are allocation %lld (%s) of module %.*s (%s)",
                    (unsigned long long)requested, a.index, a.kind, (int)m->name.n, m->name.p,
                    hit->hlo_path);
  if (added)
    hbm_strbuf_printf(&sb,
                      "; the %zu buffers below are those XLA's dump shows live at its peak "
                      "(time %lld, %s-live-range.txt)",
                      added, time, hit->prefix);
  else
    hbm_strbuf_puts(&sb, "; its live ranges are not in the dump (no -live-range.txt beside it)");
  t->module_finding = sb.failed ? NULL : hbm__strdup(hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
  t->module = slice_dup(m->name);
  t->module_file = hbm__strdup(hit->hlo_path);
}

/* ---- entry ---- */

hbm_status_t hbm_oom_text_add_module(hbm_oom_text_t *t, const char *path) {
  if (!t || !path)
    return hbm__error(HBM_ERR_INVALID, "hbm_oom_text_add_module: no text or path");
  struct stat st;
  if (stat(path, &st) != 0)
    return hbm__error(HBM_ERR_IO, "%s: %s", path, strerror(errno));
  module_set_t s = {.path = path, .t = t};
  hbm_status_t rc = S_ISDIR(st.st_mode) ? list_dump_dir(&s, path) : add_file(&s, path);
  if (rc == HBM_OK && s.skipped)
    hbm__oom_note(t, "%s holds more than %d modules: %zu were not read", path, MAX_MODULES,
                  s.skipped);
  if (rc == HBM_OK && t->n_buffers) {
    match_counts_t mc = {0};
    for (size_t i = 0; i < t->n_buffers; i++)
      match_buffer(&s, &t->buffers[i], &mc);
    note_matches(&s, &mc);
  } else if (rc == HBM_OK && t->known[HBM_OOMF_REQUESTED]) {
    explain_failed_allocation(&s, t->value[HBM_OOMF_REQUESTED]);
  } else if (rc == HBM_OK) {
    hbm__oom_note(t, "the text lists no buffers and no size: nothing to look up in %s", path);
  }
  free_set(&s);
  return rc;
}
