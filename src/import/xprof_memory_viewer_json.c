/* xprof_memory_viewer_json.c — XProf's own Memory Viewer data read back as a profile: the
 * JSON its converter returns for the tool "memory_viewer" (xspace_to_tool_data(...,
 * "memory_viewer", {"module_name": M, "memory_space": C}): XProf's PreprocessResult proto
 * printed as proto3 JSON, camelCase keys, defaults left out), which users save from its page.
 * One program in one memory space becomes one space of a plan profile:
 *   - steps: the heap-simulator events (heapSizes has one point before each event and one
 *     after the last: hbm's step s is the heap after event s), labelled hloInstructionNames;
 *   - the whole-program allocations (indefiniteLifetimes; thread-local ones, which XProf
 *     leaves out of its peak, too) live at every step, each shown by its largest logical
 *     buffer, with maxHeap's details for it when the peak lists it;
 *   - the temporaries: bufferBlocks, each logical buffer's offset, size and span of events,
 *     with maxHeap's opcode and label where it has them. A buffer that XLA freed and revived
 *     (SHARE_WITH) is one block over both lives: where the heap XProf gives is lower than the
 *     blocks say by at least a block's size, that block is taken as dead there;
 *   - a TPU program's largest scoped VMEM allocation, and XLA's total allocation as the
 *     space's reservation.
 * The file does not say which memory space it is of: "HBM", or "VMEM" when it carries a
 * scoped VMEM figure. Bad input is an error naming the file and the field (jansson gives the
 * line and column of malformed JSON); nothing is guessed. */
#include "import/xprof.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BYTES ((uint64_t)1 << 48) /* beyond any device: a corrupt value, refused */
#define MAX_STEPS ((size_t)1 << 26)

typedef struct mv_reader {
  xprof_import_t *im;
  const char *path;
  json_t *root;
  json_t *by_id; /* logicalBufferId (text) → maxHeap entry */
  uint64_t indefinite;
  bool failed;
} mv_reader_t;

static bool bad(mv_reader_t *r, const char *field, const char *what) {
  if (!r->failed)
    hbm__error(HBM_ERR_PARSE, "%s: field %s: %s (an XProf memory_viewer JSON)", r->path, field,
               what);
  r->failed = true;
  return false;
}

/* A size in MiB (XProf's unit) as bytes; whole bytes are exact in a double. */
static bool mib_bytes(mv_reader_t *r, const json_t *v, const char *field, uint64_t *out) {
  *out = 0;
  if (!v)
    return true; /* proto3 JSON leaves out zeros */
  double mib = json_number_value(v);
  if (!json_is_number(v) || !isfinite(mib) || mib < 0 || mib * 1048576.0 > (double)MAX_BYTES)
    return bad(r, field, "expected a size in MiB, from 0 to 2^28");
  *out = (uint64_t)llround(mib * 1048576.0);
  return true;
}

/* A count or byte size written as a number, or (int64 in proto3 JSON) as a string. */
static bool integer(mv_reader_t *r, const json_t *v, const char *field, int64_t *out) {
  *out = 0;
  if (!v)
    return true;
  double d = json_is_number(v) ? json_number_value(v) : NAN;
  if (json_is_string(v)) {
    char *end;
    d = strtod(json_string_value(v), &end);
    if (*end || end == json_string_value(v))
      d = NAN;
  }
  if (!isfinite(d) || d < -1 || d > (double)MAX_BYTES || d != floor(d))
    return bad(r, field, "expected a whole number from -1 to 2^48");
  *out = (int64_t)d;
  return true;
}

static const char *text(mv_reader_t *r, const json_t *v) {
  const char *s = json_string_value(v);
  return s && *s ? hbm_intern(r->im->strings, s) : NULL;
}

static hbm_category_t category_of(const char *group) {
  static const struct {
    const char *name;
    hbm_category_t cat;
  } names[] = {{"Parameter", HBM_CAT_PARAMETER},
               {"Output", HBM_CAT_OUTPUT},
               {"Thread-local", HBM_CAT_THREAD_LOCAL},
               {"Constant", HBM_CAT_CONSTANT},
               {"Temporary", HBM_CAT_TEMPORARY}};
  for (size_t i = 0; group && i < HBM_ARRAY_LEN(names); i++)
    if (!strcmp(group, names[i].name))
      return names[i].cat;
  return HBM_CAT_UNKNOWN;
}

/* sourceInfo {fileName, lineNumber, stackFrame} → "file:line" and the stack. */
static void source_of(mv_reader_t *r, const json_t *info, xprof_buffer_t *b) {
  const char *file = json_string_value(json_object_get(info, "fileName"));
  if (!file || !*file)
    return;
  json_int_t line = json_integer_value(json_object_get(info, "lineNumber"));
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_printf(&sb, "%s:%lld", file, (long long)line);
  b->source = hbm_intern(r->im->strings, hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
  b->stack = text(r, json_object_get(info, "stackFrame"));
}

/* maxHeap's entry for a logical buffer id, or NULL. */
static const json_t *heap_object(mv_reader_t *r, const json_t *id) {
  char key[32];
  if (!id) /* proto3 JSON leaves out an id of 0 */
    snprintf(key, sizeof key, "0");
  else if (json_is_integer(id))
    snprintf(key, sizeof key, "%lld", (long long)json_integer_value(id));
  else
    snprintf(key, sizeof key, "%s", json_is_string(id) ? json_string_value(id) : "");
  return json_object_get(r->by_id, key);
}

/* maxHeap's details (the instruction with shape index, shape, framework op, opcode, label,
 * source) on a buffer. */
static const char *either(const char *a, const char *b) { return a ? a : b; }

static void describe(mv_reader_t *r, const json_t *o, xprof_buffer_t *b) {
  if (!o)
    return;
  b->op = either(text(r, json_object_get(o, "instructionName")), b->op);
  b->shape = either(text(r, json_object_get(o, "shapeString")), b->shape);
  b->group = either(text(r, json_object_get(o, "tfOpName")), b->group);
  b->opcode = text(r, json_object_get(o, "opCode"));
  b->label = text(r, json_object_get(o, "label"));
  uint64_t unpadded;
  if (json_object_get(o, "unpaddedShapeMib") &&
      mib_bytes(r, json_object_get(o, "unpaddedShapeMib"), "maxHeap[].unpaddedShapeMib", &unpadded))
    b->unpadded = unpadded;
  if (!b->source)
    source_of(r, json_object_get(o, "sourceInfo"), b);
}

static bool index_max_heap(mv_reader_t *r) {
  json_t *heap = json_object_get(r->root, "maxHeap");
  if (heap && !json_is_array(heap))
    return bad(r, "maxHeap", "expected an array");
  r->by_id = json_object();
  size_t i;
  json_t *o;
  json_array_foreach(heap, i, o) {
    const json_t *id = json_object_get(o, "logicalBufferId");
    char key[32];
    snprintf(key, sizeof key, "%lld",
             json_is_integer(id)  ? (long long)json_integer_value(id)
             : json_is_string(id) ? atoll(json_string_value(id))
                                  : 0LL);
    if (json_is_object(o) && strcmp(key, "-1") && json_object_set(r->by_id, key, o))
      return bad(r, "maxHeap", "out of memory");
  }
  return r->by_id != NULL || bad(r, "maxHeap", "out of memory");
}

/* ---- the heap timeline ---- */

static bool read_steps(mv_reader_t *r, xprof_space_t *s, uint64_t **target) {
  const json_t *sizes = json_object_get(r->root, "heapSizes");
  const json_t *names = json_object_get(r->root, "hloInstructionNames");
  if (sizes && !json_is_array(sizes))
    return bad(r, "heapSizes", "expected an array of sizes in MiB");
  size_t points = json_array_size(sizes);
  if (points > MAX_STEPS)
    return bad(r, "heapSizes", "more than 2^26 points");
  size_t n = points > 1 ? points - 1 : 0;
  s->step_labels = calloc(n + 1, sizeof *s->step_labels);
  *target = calloc(points + 2, sizeof **target); /* a step needs the points around it */
  if (!s->step_labels || !*target)
    return bad(r, "heapSizes", "out of memory");
  for (size_t i = 0; i < points; i++)
    if (!mib_bytes(r, json_array_get(sizes, i), "heapSizes[]", &(*target)[i]))
      return false;
  r->indefinite = points ? (*target)[0] : 0; /* before the first event: whole-program only */
  if (!n) /* no event: the one step keeps the heap as it starts */
    (*target)[1] = (*target)[0];
  for (size_t i = 0; i < n; i++) {
    const char *label = json_string_value(json_array_get(names, i));
    s->step_labels[i] = hbm_intern(r->im->strings, label ? label : "");
  }
  if (!n)
    s->step_labels[0] = hbm_intern(r->im->strings, "no heap-simulator trace");
  s->n_steps = n ? (int64_t)n : 1;
  return true;
}

/* ---- whole-program allocations ---- */

static bool has_attribute(const json_t *alloc, const char *name) {
  size_t i;
  json_t *a;
  json_array_foreach(json_object_get(alloc, "attributes"), i,
                     a) if (json_is_string(a) && !strcmp(json_string_value(a), name)) return true;
  return false;
}

static bool add_indefinite(mv_reader_t *r, xprof_space_t *s, const json_t *alloc,
                           uint64_t *offset) {
  bool param = has_attribute(alloc, "entry computation parameter");
  bool out = has_attribute(alloc, "may-be live out");
  if (!param && !out && !has_attribute(alloc, "reusable"))
    return true; /* thread-local: registers, not device memory (XProf leaves it out too) */
  uint64_t size, best_size = 0;
  if (!mib_bytes(r, json_object_get(alloc, "sizeMib"), "indefiniteLifetimes[].sizeMib", &size))
    return false;
  const json_t *best = NULL, *lb;
  size_t i;
  json_array_foreach(json_object_get(alloc, "logicalBuffers"), i, lb) {
    uint64_t bytes;
    if (!mib_bytes(r, json_object_get(lb, "sizeMib"), "logicalBuffers[].sizeMib", &bytes))
      return false;
    if (!best || bytes > best_size)
      best = lb, best_size = bytes;
  }
  xprof_buffer_t *b = xprof_add_buffer(s);
  if (!b)
    return bad(r, "indefiniteLifetimes", "out of memory");
  b->size = b->unpadded = size;
  b->start = 0, b->end = -1;
  b->offset = *offset;
  *offset += size;
  b->category = param ? HBM_CAT_PARAMETER : out ? HBM_CAT_OUTPUT : HBM_CAT_CONSTANT;
  b->flags = out ? HBM_BUF_LIVE_OUT : 0;
  b->op = text(r, json_object_get(best, "hloName"));
  b->shape = text(r, json_object_get(best, "shape"));
  const json_t *o = best ? heap_object(r, json_object_get(best, "id")) : NULL;
  describe(r, o, b);
  if (o) /* a constant or thread-local one: maxHeap says which */
    b->category = param || out ? b->category
                               : category_of(json_string_value(json_object_get(o, "groupName")));
  if (!b->op)
    b->op = hbm_intern(r->im->strings, "allocation");
  return true;
}

/* ---- temporaries ---- */

static bool add_block(mv_reader_t *r, xprof_space_t *s, const json_t *blk) {
  int64_t id, start, end, size, unpadded, offset;
  if (!integer(r, json_object_get(blk, "logicalBufferId"), "bufferBlocks[].logicalBufferId", &id) ||
      !integer(r, json_object_get(blk, "startStep"), "bufferBlocks[].startStep", &start) ||
      !integer(r, json_object_get(blk, "endStep"), "bufferBlocks[].endStep", &end) ||
      !integer(r, json_object_get(blk, "size"), "bufferBlocks[].size", &size) ||
      !integer(r, json_object_get(blk, "unpaddedSize"), "bufferBlocks[].unpaddedSize", &unpadded) ||
      !integer(r, json_object_get(blk, "offset"), "bufferBlocks[].offset", &offset))
    return false;
  if (id < 0)
    return true; /* an allocation's frame, not a buffer */
  if (start < 0 || end < start || start >= s->n_steps || size < 0 || offset < 0)
    return bad(r, "bufferBlocks[]",
               "a span of events outside the heap timeline, or a negative "
               "size or offset");
  xprof_buffer_t *b = xprof_add_buffer(s);
  if (!b)
    return bad(r, "bufferBlocks", "out of memory");
  b->size = (uint64_t)size;
  b->unpadded = unpadded > 0 ? (uint64_t)unpadded : (uint64_t)size;
  b->offset = (uint64_t)offset;
  b->start = start;
  b->end = end > s->n_steps ? s->n_steps : end;
  b->op = text(r, json_object_get(blk, "name"));
  b->shape = text(r, json_object_get(blk, "shapeString"));
  b->group = text(r, json_object_get(blk, "tfOpName"));
  b->category = category_of(json_string_value(json_object_get(blk, "category")));
  source_of(r, json_object_get(blk, "sourceInfo"), b);
  describe(r, heap_object(r, json_object_get(blk, "logicalBufferId")), b);
  return true;
}

/* ---- the buffers' lives, replayed against XProf's heap ----
 * bufferBlocks give each buffer's first allocation and a span XProf ends where its own
 * replay last freed the buffer's memory, which is not always when it was freed: memory
 * shared by several buffers (SHARE_WITH: while loops' carried values, in-place updates) can
 * outlive the span, and a buffer freed and revived has one block over both lives. So each
 * event's change of XProf's heap decides: a block starting there comes to life; a rise
 * without one revives a dead block of that size whose span covers the event; a fall ends
 * the live block of that size whose span ends nearest the event. */

typedef struct lives {
  xprof_buffer_t *tmpl; /* the blocks, by first allocation */
  size_t n;
  int64_t *open; /* per block: its live segment in the space, -1 when dead */
  bool *seen;
  size_t *by_size;    /* block indexes by size, then first allocation */
  hbm_u64map_t first; /* size → where its blocks start in by_size */
} lives_t;

static const xprof_buffer_t *sort_tmpl; /* by_size's sort key (one reader at a time) */

static int by_size_then_start(const void *a, const void *b) {
  size_t x = *(const size_t *)a, y = *(const size_t *)b;
  if (sort_tmpl[x].size != sort_tmpl[y].size)
    return sort_tmpl[x].size < sort_tmpl[y].size ? -1 : 1;
  return x < y ? -1 : x > y;
}

static bool index_sizes(lives_t *l) {
  for (size_t k = 0; k < l->n; k++)
    l->by_size[k] = k;
  sort_tmpl = l->tmpl;
  qsort(l->by_size, l->n, sizeof *l->by_size, by_size_then_start);
  for (size_t i = 0; i < l->n; i++)
    if ((i == 0 || l->tmpl[l->by_size[i - 1]].size != l->tmpl[l->by_size[i]].size) &&
        !hbm_u64map_put(&l->first, l->tmpl[l->by_size[i]].size, i))
      return false;
  return true;
}

static bool start_life(xprof_space_t *s, lives_t *l, size_t k, int64_t step) {
  xprof_buffer_t *b = xprof_add_buffer(s);
  if (!b)
    return false;
  *b = l->tmpl[k];
  b->start = step, b->end = -1;
  l->open[k] = (int64_t)s->n_buffers - 1;
  l->seen[k] = true;
  return true;
}

/* A block's bytes leave at `step`. XProf's span of a buffer revived by SHARE_WITH ends at its
 * own FREE, before its bytes leave when a later sharer holds them: that span is shown. */
static void end_life(xprof_space_t *s, lives_t *l, size_t k, int64_t step) {
  xprof_buffer_t *b = &s->buffers[l->open[k]];
  const xprof_buffer_t *t = &l->tmpl[k];
  b->end = step;
  if (b->start == t->start && t->end > b->start && t->end < step)
    b->span_end = t->end;
  l->open[k] = -1;
}

/* The block of `size` to end (live) or revive (dead) at `step`: the one whose XProf span
 * ends nearest it (revived: whose span covers it); to end, one whose span ended before its
 * bytes leave (a revived buffer a later sharer holds) before one whose span goes on.
 * SIZE_MAX when none. */
static size_t pick(const lives_t *l, uint64_t size, int64_t step, bool live) {
  size_t best = SIZE_MAX;
  int64_t best_d = INT64_MAX;
  uint64_t at;
  if (!hbm_u64map_get(&l->first, size, &at))
    return SIZE_MAX;
  for (size_t i = (size_t)at; i < l->n && l->tmpl[l->by_size[i]].size == size; i++) {
    size_t k = l->by_size[i];
    const xprof_buffer_t *t = &l->tmpl[k];
    if (t->start > step)
      break; /* by first allocation: none later has lived yet */
    if (!l->seen[k] || (l->open[k] >= 0) != live)
      continue;
    if (!live && (step < t->start || step >= t->end))
      continue;
    int64_t d = t->end > step ? t->end - step : step - t->end;
    if (live && t->end > step) /* a span never ends after its bytes leave: the last choice */
      d = d < INT64_MAX / 2 ? d + INT64_MAX / 2 : INT64_MAX - 1;
    if (d < best_d)
      best = k, best_d = d;
  }
  return best;
}

static bool replay_heap(mv_reader_t *r, xprof_space_t *s, const uint64_t *target, size_t first) {
  lives_t l = {.n = s->n_buffers - first};
  hbm_u64map_init(&l.first);
  l.tmpl = malloc((l.n + 1) * sizeof *l.tmpl);
  l.open = malloc((l.n + 1) * sizeof *l.open);
  l.seen = calloc(l.n + 1, sizeof *l.seen);
  l.by_size = malloc((l.n + 1) * sizeof *l.by_size);
  bool ok = l.tmpl && l.open && l.seen && l.by_size;
  if (ok && l.n)
    memcpy(l.tmpl, s->buffers + first, l.n * sizeof *l.tmpl);
  ok = ok && index_sizes(&l);
  s->n_buffers = first;
  size_t next = 0, off = 0;
  uint64_t before = r->indefinite;
  for (size_t k = 0; ok && k < l.n; k++)
    l.open[k] = -1;
  for (int64_t step = 0; ok && step < s->n_steps; step++) {
    int64_t change = (int64_t)target[step + 1] - (int64_t)before;
    before = target[step + 1];
    for (; ok && next < l.n && l.tmpl[next].start == step; next++) {
      ok = start_life(s, &l, next, step);
      change -= (int64_t)l.tmpl[next].size;
    }
    size_t k =
        change ? pick(&l, (uint64_t)(change > 0 ? change : -change), step, change < 0) : SIZE_MAX;
    if (k != SIZE_MAX && change > 0)
      ok = start_life(s, &l, k, step);
    else if (k != SIZE_MAX)
      end_life(s, &l, k, step);
    off += change && k == SIZE_MAX;
  }
  free(l.tmpl), free(l.open), free(l.seen), free(l.by_size);
  hbm_u64map_free(&l.first);
  if (!ok)
    return bad(r, "bufferBlocks", "out of memory");
  if (off) {
    hbm__error(HBM_ERR_PARSE,
               "%s: the buffers of bufferBlocks do not make XProf's heapSizes at %zu of %lld "
               "events",
               r->path, off, (long long)s->n_steps);
    xprof_note_problem(r->im);
  }
  return true;
}

static int by_start(const void *a, const void *b) {
  const xprof_buffer_t *x = a, *y = b;
  if (x->start != y->start)
    return x->start < y->start ? -1 : 1;
  /* each event allocates one buffer, so starts differ; offsets decide the rare ties */
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static bool read_program(mv_reader_t *r) {
  uint64_t scoped, total, *target = NULL;
  if (!mib_bytes(r, json_object_get(r->root, "maxScopedVmemAllocationMib"),
                 "maxScopedVmemAllocationMib", &scoped) ||
      !mib_bytes(r, json_object_get(r->root, "totalBufferAllocationMib"),
                 "totalBufferAllocationMib", &total) ||
      !index_max_heap(r))
    return false;
  const char *module = text(r, json_object_get(r->root, "moduleName"));
  xprof_space_t *s =
      xprof_add_space(r->im, scoped ? "VMEM" : "HBM", module ? module : "program", scoped ? 1 : 0);
  if (!s || !read_steps(r, s, &target))
    return free(target), s ? false : bad(r, "moduleName", "out of memory");
  const json_t *allocs = json_object_get(r->root, "indefiniteLifetimes"), *o;
  size_t i;
  uint64_t offset = 0;
  json_array_foreach(allocs, i, o) if (!add_indefinite(r, s, o, &offset)) return free(target),
      false;
  if (json_array_size(json_object_get(r->root, "heapSizes")) && offset != r->indefinite) {
    hbm__error(HBM_ERR_PARSE,
               "%s: the whole-program allocations of indefiniteLifetimes hold %llu B where "
               "XProf's heapSizes start at %llu B: the timeline is off by the difference",
               r->path, (unsigned long long)offset, (unsigned long long)r->indefinite);
    xprof_note_problem(r->im);
  }
  size_t first_block = s->n_buffers;
  const json_t *blocks = json_object_get(r->root, "bufferBlocks");
  if (blocks && !json_is_array(blocks))
    return free(target), bad(r, "bufferBlocks", "expected an array");
  json_array_foreach(blocks, i, o) if (!add_block(r, s, o)) return free(target), false;
  /* in the order the trace allocated them (XProf's order at the peak), not the allocations' */
  if (s->n_buffers > first_block)
    qsort(s->buffers + first_block, s->n_buffers - first_block, sizeof *s->buffers, by_start);
  bool ok = replay_heap(r, s, target, first_block);
  free(target);
  if (!ok)
    return false;
  s->reserved = total > offset ? total : offset;
  r->im->n_programs++;
  return !scoped ||
         xprof_add_scoped(r->im, s, scoped,
                          text(r, json_object_get(r->root, "maxScopedVmemInstructionName"))) ||
         bad(r, "maxScopedVmemAllocationMib", "out of memory");
}

hbm_profile_t *hbm__xprof_memory_viewer_json_load(const char *path, const char *data, size_t len) {
  json_error_t err;
  json_t *root = json_loadb(data, len, 0, &err);
  if (!root) {
    hbm__error(HBM_ERR_PARSE, "%s: line %d, column %d: %s (expected XProf's memory_viewer JSON)",
               path, err.line, err.column, err.text);
    return NULL;
  }
  xprof_import_t im;
  if (!xprof_import_init(&im, path)) {
    json_decref(root);
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of memory", path);
    return NULL;
  }
  mv_reader_t r = {.im = &im, .path = path, .root = root};
  hbm_profile_t *p = NULL;
  if (!json_is_object(root))
    bad(&r, "(top level)", "expected an object");
  else if (read_program(&r))
    p = xprof_to_profile(&im, hbm__base_name(path), "xprof-memory-viewer-json");
  json_decref(r.by_id);
  json_decref(root);
  xprof_import_free(&im);
  return p;
}

bool hbm__xprof_memory_viewer_json_is(const char *data, size_t len) {
  static const char *const keys[] = {"\"maxHeap\"", "\"heapSizes\"", "\"peakHeapMib\"",
                                     "\"indefiniteLifetimes\"", "\"bufferBlocks\""};
  size_t i = 0;
  while (i < len && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t'))
    i++;
  if (i >= len || data[i] != '{')
    return false;
  size_t window = len - i < 4096 ? len - i : 4096; /* the first keys say what it is */
  for (size_t k = 0; k < HBM_ARRAY_LEN(keys); k++)
    if (memmem(data + i, window, keys[k], strlen(keys[k])))
      return true;
  return false;
}
