/* module.c — the module IR after parsing: freeing it, classifying computations by how they
 * are called (scheduled control flow, embedded reducers, fusion bodies) with a check that
 * the call graph has no cycles, and printing instructions back as text: labels for reports
 * ("%fusion.47 = f32[8,128]{1,0} fusion(%p0, %p1)") and whole modules after remat.c. */
#include "lexer.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

const hlo_metadata_t hbm__hlo_no_metadata = {.source_line = 0};

void hbm__hlo_free(hlo_module_t *m) {
  if (!m)
    return;
  hbm__hlo_arena_free(&m->arena);
  free(m->entry_owned);
  free(m->text);
  free(m->filename);
  free(m);
}

/* ------------------------------------------------------------------------------------------ */
/* Classification                                                                              */
/* ------------------------------------------------------------------------------------------ */

/* How an instruction of a computation of kind `caller` calls `role`. */
static hlo_comp_kind_t callee_kind(hlo_comp_kind_t caller, const hlo_instr_t *in) {
  /* XLA: a reducer called from inside a fusion is thread-local like any other (its values
   * get allocations); nested fusions stay fused. */
  if (caller == HLO_COMP_FUSED)
    return in->opcode == HLO_OP_FUSION ? HLO_COMP_FUSED : HLO_COMP_EMBEDDED;
  if (caller != HLO_COMP_SEQUENTIAL)
    return caller;
  switch ((hlo_opcode_t)in->opcode) {
  case HLO_OP_WHILE:
  case HLO_OP_CONDITIONAL:
  case HLO_OP_CALL: return HLO_COMP_SEQUENTIAL;
  case HLO_OP_FUSION:
  case HLO_OP_ASYNC_START:
  case HLO_OP_ASYNC_UPDATE:
  case HLO_OP_ASYNC_DONE: return HLO_COMP_FUSED;
  default: return HLO_COMP_EMBEDDED;
  }
}

static int kind_rank(hlo_comp_kind_t k) {
  return k == HLO_COMP_SEQUENTIAL ? 3 : k == HLO_COMP_EMBEDDED ? 2 : k == HLO_COMP_FUSED ? 1 : 0;
}

/* Depth-first over the call graph with an explicit stack: 0 unvisited, 1 on the stack,
 * 2 done. A computation met again while on the stack is a cycle. */
static bool check_acyclic(const hlo_module_t *m) {
  uint32_t n = m->n_comps;
  uint8_t *state = calloc(n + 1, 1);
  uint32_t *stack_comp = malloc((n + 1) * sizeof *stack_comp);
  uint64_t *stack_pos = malloc((n + 1) * sizeof *stack_pos); /* instr << 16 | callref */
  bool ok = state && stack_comp && stack_pos;
  if (!ok)
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  for (uint32_t root = 0; ok && root < n; root++) {
    if (state[m->comps[root]->id - 1])
      continue;
    size_t sp = 0;
    stack_comp[sp] = root;
    stack_pos[sp++] = 0;
    state[m->comps[root]->id - 1] = 1;
    while (ok && sp) {
      const hlo_comp_t *c = m->comps[stack_comp[sp - 1]];
      uint64_t pos = stack_pos[sp - 1];
      uint32_t i = (uint32_t)(pos >> 16), k = (uint32_t)(pos & 0xffff);
      if (i >= c->n_instrs) {
        state[c->id - 1] = 2;
        sp--;
        continue;
      }
      const hlo_instr_t *in = c->instrs[i];
      if (k >= in->n_called || k >= 0xffff) {
        stack_pos[sp - 1] = (uint64_t)(i + 1) << 16;
        continue;
      }
      stack_pos[sp - 1] = pos + 1;
      const hlo_comp_t *callee = in->called[k].comp;
      uint8_t st = state[callee->id - 1];
      if (st == 1) {
        hlo_lexer_t lx;
        hbm__hlo_lex_init(&lx, m->text, m->len, m->filename);
        hbm__hlo_lex_error_at(&lx, (size_t)(in->called[k].name.p - m->text),
                              "expected a call graph without cycles; computation '%.*s' calls "
                              "itself through '%.*s'",
                              (int)callee->name.n, callee->name.p, (int)in->name.n, in->name.p);
        ok = false;
      } else if (st == 0) {
        state[callee->id - 1] = 1;
        stack_comp[sp] = callee->id - 1;
        stack_pos[sp++] = 0;
      }
    }
  }
  free(state);
  free(stack_comp);
  free(stack_pos);
  return ok;
}

/* Computation ids are 1..n in text order, and comps[id - 1] is that computation. */
hbm_status_t hbm__hlo_classify(hlo_module_t *m) {
  if (!check_acyclic(m))
    return hbm_last_status();
  for (uint32_t c = 0; c < m->n_comps; c++)
    m->comps[c]->kind = HLO_COMP_UNREACHABLE;
  m->entry->kind = HLO_COMP_SEQUENTIAL;
  /* Callers before callees: repeat until stable. The graph is acyclic, so kinds only rise
   * and a pass over a topological order would do; a worklist keeps it linear. */
  uint32_t *work = malloc((m->n_comps + 1) * sizeof *work);
  uint8_t *queued = calloc(m->n_comps + 1, 1);
  if (!work || !queued) {
    free(work);
    free(queued);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  }
  size_t head = 0, tail = 0, cap = m->n_comps + 1;
  work[tail++ % cap] = m->entry->id - 1;
  queued[m->entry->id - 1] = 1;
  while (head != tail) {
    hlo_comp_t *c = m->comps[work[head++ % cap]];
    queued[c->id - 1] = 0;
    for (uint32_t i = 0; i < c->n_instrs; i++) {
      const hlo_instr_t *in = c->instrs[i];
      for (uint32_t k = 0; k < in->n_called; k++) {
        hlo_comp_t *callee = in->called[k].comp;
        hlo_comp_kind_t want = callee_kind((hlo_comp_kind_t)c->kind, in);
        if (kind_rank(want) > kind_rank((hlo_comp_kind_t)callee->kind)) {
          callee->kind = (uint8_t)want;
          if (!queued[callee->id - 1]) {
            queued[callee->id - 1] = 1;
            work[tail++ % cap] = callee->id - 1;
          }
        }
      }
    }
  }
  free(work);
  free(queued);
  return HBM_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* Printing                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* The instruction's text from its name up to `end` (an offset in the module text), with the
 * name and operand names as they are now (remat.c renames and rewires). */
static void print_span(const hlo_module_t *m, const hlo_instr_t *in, size_t end, hbm_strbuf_t *sb) {
  hbm_strbuf_puts(sb, "%");
  hbm_strbuf_append(sb, in->name.p, in->name.n);
  /* Past the name token in the text (a copy made by remat.c has its original's text). */
  size_t cursor = in->text.start;
  if (cursor < m->len && m->text[cursor] == '%')
    cursor++;
  while (cursor < end && (isalnum((unsigned char)m->text[cursor]) || m->text[cursor] == '_' ||
                          m->text[cursor] == '.' || m->text[cursor] == '-'))
    cursor++;
  for (uint32_t i = 0; i < in->n_operands; i++) {
    const hlo_span_t *sp = &in->operand_spans[i];
    if (sp->start < cursor || sp->start + sp->len > end)
      continue;
    hbm_strbuf_append(sb, m->text + cursor, sp->start - cursor);
    hbm_strbuf_puts(sb, "%");
    hbm_strbuf_append(sb, in->operands[i]->name.p, in->operands[i]->name.n);
    cursor = sp->start + sp->len;
  }
  if (end > cursor)
    hbm_strbuf_append(sb, m->text + cursor, end - cursor);
}

void hbm__instr_print(const hlo_module_t *m, const hlo_instr_t *in, hbm_strbuf_t *sb) {
  print_span(m, in, (size_t)in->text.start + in->text.len, sb);
}

/* Writes into a fixed buffer, keeping the first `cap` bytes and counting them all. */
typedef struct bounded {
  char *p;
  size_t cap, len;
} bounded_t;

static void bounded_put(bounded_t *b, const char *s, size_t n) {
  if (b->len < b->cap)
    memcpy(b->p + b->len, s, n < b->cap - b->len ? n : b->cap - b->len);
  b->len += n;
}

size_t hbm__instr_label(const hlo_module_t *m, const hlo_instr_t *in, size_t max_len, char *out) {
  /* As print_span, but only the first max_len bytes are ever copied. */
  if (max_len < 4)
    max_len = 4;
  bounded_t b = {out, max_len, 0};
  size_t end = in->operands_end;
  bounded_put(&b, "%", 1);
  bounded_put(&b, in->name.p, in->name.n);
  size_t cursor = in->text.start;
  if (cursor < m->len && m->text[cursor] == '%')
    cursor++;
  while (cursor < end && (isalnum((unsigned char)m->text[cursor]) || m->text[cursor] == '_' ||
                          m->text[cursor] == '.' || m->text[cursor] == '-'))
    cursor++;
  for (uint32_t i = 0; i < in->n_operands && b.len <= b.cap; i++) {
    const hlo_span_t *sp = &in->operand_spans[i];
    if (sp->start < cursor || sp->start + sp->len > end)
      continue;
    bounded_put(&b, m->text + cursor, sp->start - cursor);
    bounded_put(&b, "%", 1);
    bounded_put(&b, in->operands[i]->name.p, in->operands[i]->name.n);
    cursor = sp->start + sp->len;
  }
  if (end > cursor)
    bounded_put(&b, m->text + cursor, end - cursor);
  size_t n = b.len > max_len ? max_len - 3 : b.len;
  /* XLA labels are one line: fold any line breaks. Eight bytes at a time, the rare words with
   * a control character (a byte below 0x20) are looked at byte by byte. */
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    size_t k = n - i < 8 ? n - i : 8;
    memcpy(&w, out + i, k);
    if (k == 8 && !((w - 0x2020202020202020ull) & ~w & 0x8080808080808080ull))
      continue;
    for (size_t j = i; j < i + k; j++)
      if (out[j] == '\n' || out[j] == '\r' || out[j] == '\t')
        out[j] = ' ';
  }
  if (b.len > max_len) {
    memcpy(out + n, "...", 3);
    n += 3;
  }
  out[n] = '\0';
  return n;
}

void hbm__hlo_print(const hlo_module_t *m, hbm_strbuf_t *sb) {
  if (m->n_remat == 0) {
    hbm_strbuf_append(sb, m->text, m->len);
    return;
  }
  /* Only the entry computation changes: print it from the IR, the rest verbatim. */
  const hlo_comp_t *e = m->entry;
  hbm_strbuf_append(sb, m->text, e->body.start);
  hbm_strbuf_puts(sb, "\n");
  for (uint32_t i = 0; i < e->n_instrs; i++) {
    hbm_strbuf_puts(sb, e->instrs[i] == e->root ? "  ROOT " : "  ");
    hbm__instr_print(m, e->instrs[i], sb);
    hbm_strbuf_puts(sb, "\n");
  }
  size_t tail = (size_t)e->body.start + e->body.len;
  hbm_strbuf_append(sb, m->text + tail, m->len - tail);
}
