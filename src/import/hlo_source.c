/* hlo_source.c — an HLO instruction's place in the user's program, as XProf's Memory Viewer
 * shows it (GetSourceInfo in xprof/utils/hlo_module_utils.cc). OpMetadata's own
 * source_file:source_line wins when set; JAX 0.5 and later write stack_frame_id instead, a
 * 1-based id into the module's StackFrameIndexProto (flat arrays of file names, file
 * locations and frames, each frame naming its location and its caller's frame). The stack is
 * the frame and its callers, innermost first, one "file:line:column" per line (a frame whose
 * location is missing prints ":-1:-1", as XProf's); the source line is the innermost frame's
 * file:line. A frame id that points nowhere, or frames that call each other in a loop, are
 * counted so the reader can warn, and give no source: never a crash or an endless walk. */
#include "import/hlo_source.h"

#include <stdlib.h>
#include <string.h>

struct hlo_frame_text {
  const char *stack, *line; /* interned; line NULL when the innermost file is unknown */
  bool done, bad;
};
typedef struct hlo_frame_text frame_text_t;

bool hlo_source_init(hlo_source_t *s, const HbmHlo__HloModuleProto *m, hbm_intern_t *strings) {
  memset(s, 0, sizeof *s);
  s->strings = strings;
  s->index = m ? m->stack_frame_index : NULL;
  s->n_frames = s->index ? s->index->n_stack_frames : 0;
  if (!s->n_frames)
    return true;
  s->texts = calloc(s->n_frames, sizeof *s->texts);
  s->visited = calloc(s->n_frames, sizeof *s->visited);
  return (s->texts && s->visited) || (hbm__error(HBM_ERR_HOST_MEMORY, "out of memory"), false);
}

void hlo_source_free(hlo_source_t *s) {
  free(s->texts);
  free(s->visited);
  s->texts = NULL, s->visited = NULL;
}

/* The file location of a 1-based frame id, NULL when the frame names none that exists. */
static const HbmHlo__StackFrameIndexProto__FileLocation *location_of(const hlo_source_t *s,
                                                                     int32_t frame_id) {
  const HbmHlo__StackFrameIndexProto__StackFrame *f = s->index->stack_frames[frame_id - 1];
  int32_t at = f->file_location_id;
  return at > 0 && (size_t)at <= s->index->n_file_locations ? s->index->file_locations[at - 1]
                                                            : NULL;
}

static const char *file_of(const hlo_source_t *s,
                           const HbmHlo__StackFrameIndexProto__FileLocation *loc) {
  int32_t at = loc ? loc->file_name_id : 0;
  return at > 0 && (size_t)at <= s->index->n_file_names ? s->index->file_names[at - 1] : "";
}

static bool in_range(const hlo_source_t *s, int32_t frame_id) {
  return frame_id > 0 && (size_t)frame_id <= s->n_frames;
}

/* Walks frame_id and its callers once, memoising the texts. */
static bool walk(hlo_source_t *s, int32_t frame_id, frame_text_t *out) {
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  int32_t id = frame_id;
  size_t depth = 0;
  bool bad = false;
  uint32_t walk_no = ++s->walks;
  while (id > 0 && depth < HLO_SOURCE_MAX_FRAMES) {
    if (!in_range(s, id) || s->visited[id - 1] == walk_no) { /* past the index, or a loop */
      bad = true;
      break;
    }
    s->visited[id - 1] = walk_no;
    const HbmHlo__StackFrameIndexProto__FileLocation *loc = location_of(s, id);
    hbm_strbuf_printf(&sb, "%s%s:%d:%d", depth ? "\n" : "", file_of(s, loc), loc ? loc->line : -1,
                      loc ? loc->column : -1);
    id = s->index->stack_frames[id - 1]->parent_frame_id;
    depth++;
  }
  if (!bad && id > 0) /* deeper than HLO_SOURCE_MAX_FRAMES: the cut is shown */
    hbm_strbuf_puts(&sb, "\n...");
  const HbmHlo__StackFrameIndexProto__FileLocation *top = location_of(s, frame_id);
  const char *file = file_of(s, top);
  bool ok = !sb.failed && (out->stack = hbm_intern(s->strings, hbm_strbuf_str(&sb))) != NULL;
  out->line = NULL;
  if (ok && *file) {
    sb.len = 0;
    hbm_strbuf_printf(&sb, "%s:%d", file, top->line);
    ok = !sb.failed && (out->line = hbm_intern(s->strings, hbm_strbuf_str(&sb))) != NULL;
  }
  hbm_strbuf_free(&sb);
  out->bad = bad;
  out->done = true;
  return ok || (hbm__error(HBM_ERR_HOST_MEMORY, "out of memory"), false);
}

bool hlo_source_of(hlo_source_t *s, const HbmHlo__OpMetadata *md, const char **source,
                   const char **stack) {
  *source = *stack = NULL;
  if (!md)
    return true;
  frame_text_t none = {0}, *t = &none;
  int32_t id = md->stack_frame_id;
  if (id && !in_range(s, id)) {
    t->bad = true;
  } else if (id) {
    t = &s->texts[id - 1];
    if (!t->done && !walk(s, id, t))
      return false;
  }
  if (t->bad && s->n_bad++ == 0)
    s->first_bad = id;
  *stack = t->bad ? NULL : t->stack;
  if (md->source_file && md->source_file[0]) { /* the metadata's own line wins */
    hbm_strbuf_t sb;
    hbm_strbuf_init(&sb);
    hbm_strbuf_printf(&sb, "%s:%d", md->source_file, (int)md->source_line);
    *source = hbm_intern(s->strings, hbm_strbuf_str(&sb));
    hbm_strbuf_free(&sb);
    return *source || (hbm__error(HBM_ERR_HOST_MEMORY, "out of memory"), false);
  }
  if (!t->bad)
    *source = t->line;
  if (!*source) /* XProf shows no stack without a source line */
    *stack = NULL;
  return true;
}
