/* torch_tags.c — a PyTorch allocation's tags from its stack (torch_internal.h): the op is the
 * innermost frame of the user's own code ("model.py:54 forward"), the group the user frames
 * that called it ("train.py:40 / model.py:253", which tells apart layers that share the op's
 * line), the source its file and line, and the label the stack itself for the buffer's card.
 * A snapshot has thousands of stacks for millions of allocations, so each (stack, stream,
 * before-the-trace) is described once and its strings interned in the profile. The stack
 * texts of a hostile file cannot add up to more than a budget that scales with its size. */
#include "import/torch_internal.h"
#include "profile/profile_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool ends_with(const char *s, size_t n, const char *suffix) {
  size_t k = strlen(suffix);
  return n >= k && !memcmp(s + n - k, suffix, k);
}

/* Frames of PyTorch, installed packages, the Python standard library and C++ are not the
 * user's own code. */
static bool is_user_frame(const ts_frame_t *f) {
  static const char *const library_parts[] = {
      "site-packages", "dist-packages", "/torch/", "\\torch\\",     "/lib/python",
      "\\Lib\\",       "<frozen",       "??",      "/usr/include/", "<built-in"};
  static const char *const native_suffixes[] = {".cpp", ".cc", ".cu", ".h", ".hpp", ".c"};
  size_t len = strlen(f->file); /* up to a NUL inside the name, as C sees it */
  if (!len)
    return false;
  for (size_t i = 0; i < HBM_ARRAY_LEN(library_parts); i++)
    if (strstr(f->file, library_parts[i]))
      return false;
  for (size_t i = 0; i < HBM_ARRAY_LEN(native_suffixes); i++)
    if (ends_with(f->file, len, native_suffixes[i]))
      return false;
  return true;
}

/* The file name without its directories (either separator: snapshots come from Windows too). */
static const char *short_file(const ts_frame_t *f, int *len) {
  int cut = f->file_len;
  while (cut > 0 && f->file[cut - 1] != '/' && f->file[cut - 1] != '\\')
    cut--;
  *len = f->file_len - cut;
  return f->file + cut;
}

/* Frames memory_viz leaves out of a stack (its frameFilter): the unwinder's own, CPython's
 * interpreter loop, PyTorch's dispatcher boilerplate. */
static bool is_plumbing(const ts_frame_t *f) {
  static const char *const names[] = {"unwind::unwind",    "CapturedTraceback::gather",
                                      "gather_with_cpp",   "_start",
                                      "__libc_start_main", "PyEval_",
                                      "PyObject_",         "PyFunction_"};
  static const char *const files[] = {"core/boxing",
                                      "/Register",
                                      "/Redispatch",
                                      "pythonrun.c",
                                      "Modules/main.c",
                                      "Objects/call.c",
                                      "Objects/methodobject.c",
                                      "pycore_ceval.h",
                                      "ceval.c",
                                      "cpython/abstract.h"};
  for (size_t i = 0; i < HBM_ARRAY_LEN(names); i++)
    if (strstr(f->name, names[i]))
      return true;
  for (size_t i = 0; i < HBM_ARRAY_LEN(files); i++)
    if (strstr(f->file, files[i]))
      return true;
  return false;
}

/* The index of the innermost user frame; else the innermost frame that is not plumbing, else
 * the innermost at all (-1: none). Only the first TS_MAX_STACK_FRAMES count. */
static int64_t user_frame(const ts_reader_t *r, const uint32_t *ids, uint32_t n) {
  int64_t other = -1;
  for (uint32_t i = 0; i < n && i < TS_MAX_STACK_FRAMES; i++) {
    if (is_user_frame(&r->frames[ids[i]]))
      return i;
    if (other < 0 && !is_plumbing(&r->frames[ids[i]]))
      other = i;
  }
  return other >= 0 ? other : n ? 0 : -1;
}

/* group: the user frames that called the op, outermost first. */
static void append_callers(hbm_strbuf_t *sb, const ts_reader_t *r, const uint32_t *ids, uint32_t n,
                           int64_t op_index) {
  int64_t callers[TS_CALLER_FRAMES];
  int found = 0, len;
  for (uint32_t i = (uint32_t)op_index + 1;
       i < n && i < TS_MAX_STACK_FRAMES && found < TS_CALLER_FRAMES; i++)
    if (is_user_frame(&r->frames[ids[i]]))
      callers[found++] = i;
  for (int k = found - 1; k >= 0; k--) {
    const ts_frame_t *f = &r->frames[ids[callers[k]]];
    const char *file = short_file(f, &len);
    hbm_strbuf_printf(sb, "%s%.*s:%lld", k == found - 1 ? "" : " / ", len, file,
                      (long long)f->line);
  }
}

/* The stack for the buffer's card, innermost frame first, at most TS_MAX_STACK_TEXT bytes. */
static void append_stack(hbm_strbuf_t *sb, const ts_reader_t *r, const uint32_t *ids, uint32_t n) {
  uint32_t i = 0;
  for (; i < n && i < TS_MAX_STACK_FRAMES && sb->len < TS_MAX_STACK_TEXT; i++) {
    const ts_frame_t *f = &r->frames[ids[i]];
    hbm_strbuf_printf(sb, "\n%.*s:%lld %.*s", f->file_len, f->file, (long long)f->line, f->name_len,
                      f->name);
  }
  if (i < n)
    hbm_strbuf_printf(sb, "\n... %u more frames", n - i);
}

typedef struct tag_text {
  hbm_strbuf_t op, group, source, stack;
} tag_text_t;

static void describe(ts_reader_t *r, uint32_t stack, int64_t stream, bool before, tag_text_t *t) {
  uint32_t n;
  const uint32_t *ids = ts_stack_frames(r, stack, &n);
  if (before)
    hbm_strbuf_puts(&t->stack, "allocated before the trace began");
  else
    hbm_strbuf_printf(&t->stack, "stream %lld", (long long)stream);
  if (r->tag_text_budget > TS_MAX_STACK_TEXT + 64)
    append_stack(&t->stack, r, ids, n);
  else if (n)
    hbm_strbuf_printf(&t->stack,
                      "\n(%u frames, not shown: the file's stacks add up to more "
                      "text than a file of its size can hold)",
                      n);
  r->tag_text_budget -= t->stack.len < r->tag_text_budget ? t->stack.len : r->tag_text_budget;
  int64_t at = user_frame(r, ids, n);
  if (at < 0) {
    const char *what = before ? "(allocated before the trace)" : "(no stack recorded)";
    hbm_strbuf_puts(&t->op, what);
    hbm_strbuf_puts(&t->group, what);
    return;
  }
  const ts_frame_t *f = &r->frames[ids[at]];
  int len;
  const char *file = short_file(f, &len);
  hbm_strbuf_printf(&t->op, "%.*s:%lld %.*s", len, file, (long long)f->line, f->name_len, f->name);
  hbm_strbuf_printf(&t->source, "%.*s:%lld", f->file_len, f->file, (long long)f->line);
  /* grouped (and coloured) by the top user frame, as memory_viz does; the callers, which tell
   * apart the layers that share its line, head the card's stack */
  hbm_strbuf_puts(&t->group, hbm_strbuf_str(&t->op));
  hbm_strbuf_t callers;
  hbm_strbuf_init(&callers);
  append_callers(&callers, r, ids, n, at);
  if (callers.len) {
    hbm_strbuf_t frames = t->stack;
    hbm_strbuf_init(&t->stack);
    hbm_strbuf_printf(&t->stack, "called from %s\n%s", hbm_strbuf_str(&callers),
                      hbm_strbuf_str(&frames));
    hbm_strbuf_free(&frames);
  }
  hbm_strbuf_free(&callers);
}

/* A stream as a small number (streams are few), so a key holds stack, stream and before. */
static bool stream_number(ts_reader_t *r, int64_t stream, uint64_t *out) {
  if (hbm_u64map_get(&r->stream_ids, (uint64_t)stream, out))
    return true;
  *out = r->stream_ids.count;
  return hbm_u64map_put(&r->stream_ids, (uint64_t)stream, *out);
}

static const char *intern_text(ts_reader_t *r, const hbm_strbuf_t *sb) {
  return sb->len ? hbm_intern_n(hbm__profile_strings(r->p), sb->data, sb->len) : NULL;
}

const ts_tags_t *ts_tags_of(ts_reader_t *r, uint32_t stack, int64_t stream, bool before) {
  uint64_t s, found;
  if (!stream_number(r, before ? 0 : stream, &s))
    return NULL;
  uint64_t key = (uint64_t)stack << 32 | (s & 0x7fffffff) << 1 | (before ? 1 : 0);
  if (hbm_u64map_get(&r->tag_index, key, &found))
    return &r->tags[found];
  ts_tags_t *grown = hbm__grow_array(r->tags, &r->cap_tags, r->n_tags + 1, sizeof *grown, 64);
  if (!grown)
    return NULL;
  r->tags = grown;
  tag_text_t t;
  hbm_strbuf_init(&t.op);
  hbm_strbuf_init(&t.group);
  hbm_strbuf_init(&t.source);
  hbm_strbuf_init(&t.stack);
  describe(r, stack, stream, before, &t);
  ts_tags_t tags = {intern_text(r, &t.op), intern_text(r, &t.group), intern_text(r, &t.source),
                    intern_text(r, &t.stack)};
  bool ok = !t.op.failed && !t.group.failed && !t.source.failed && !t.stack.failed && tags.op &&
            tags.label && (tags.group || !t.group.len) && (tags.source || !t.source.len) &&
            hbm_u64map_put(&r->tag_index, key, r->n_tags);
  hbm_strbuf_free(&t.op);
  hbm_strbuf_free(&t.group);
  hbm_strbuf_free(&t.source);
  hbm_strbuf_free(&t.stack);
  if (!ok)
    return NULL;
  r->tags[r->n_tags] = tags;
  return &r->tags[r->n_tags++];
}

void ts_tags_free(ts_reader_t *r) {
  free(r->tags);
  hbm_u64map_free(&r->tag_index);
  hbm_u64map_free(&r->stream_ids);
}
