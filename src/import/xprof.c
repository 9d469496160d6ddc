/* xprof.c — XProf's files into hbm's one profile model: an .xplane.pb (serialized XSpace) or
 * an .hlo_proto.pb (one HloProto). Every program × memory colour becomes a memory space
 * ("HBM" of device "jit_f(12)"), largest peak first, its steps the events of XLA's
 * heap-simulator trace; the programs' step ranges follow one another in the profile. The
 * allocators' runtime events become one space per allocator after them. When part of a file
 * is damaged, what was read before is kept and the profile's "lost" note says what is
 * missing; nothing read at all is an error naming the file, the byte offset and what was
 * expected. */
#include "import/xprof.h"

#include <stdlib.h>
#include <string.h>

bool xprof_import_init(xprof_import_t *im, const char *file) {
  memset(im, 0, sizeof *im);
  im->file = file;
  hbm_strbuf_init(&im->problems);
  im->strings = hbm_intern_new();
  return im->strings != NULL;
}

void xprof_import_free(xprof_import_t *im) {
  for (size_t i = 0; i < im->n_spaces; i++) {
    free(im->spaces[i].buffers);
    free(im->spaces[i].step_labels);
    free(im->spaces[i].step_times);
  }
  free(im->spaces);
  free(im->meta);
  hbm_strbuf_free(&im->problems);
  hbm_intern_free(im->strings);
}

xprof_space_t *xprof_add_space(xprof_import_t *im, const char *name, const char *device,
                               int color) {
  if (im->n_spaces == im->cap_spaces) {
    xprof_space_t *s = hbm__grow_array(im->spaces, &im->cap_spaces, im->n_spaces + 1, sizeof *s, 8);
    if (!s)
      return NULL;
    im->spaces = s;
  }
  xprof_space_t *s = &im->spaces[im->n_spaces];
  memset(s, 0, sizeof *s);
  s->name = hbm_intern(im->strings, name);
  s->device = hbm_intern(im->strings, device);
  s->color = color;
  if (!s->name || !s->device)
    return NULL;
  im->n_spaces++;
  return s;
}

xprof_buffer_t *xprof_add_buffer(xprof_space_t *s) {
  if (s->n_buffers == s->cap_buffers) {
    xprof_buffer_t *b =
        hbm__grow_array(s->buffers, &s->cap_buffers, s->n_buffers + 1, sizeof *b, 64);
    if (!b)
      return NULL;
    s->buffers = b;
  }
  xprof_buffer_t *b = &s->buffers[s->n_buffers++];
  memset(b, 0, sizeof *b);
  return b;
}

bool xprof_add_meta(xprof_import_t *im, const char *key, const char *value) {
  if (im->n_meta + 2 > im->cap_meta) {
    const char **m = hbm__grow_array(im->meta, &im->cap_meta, im->n_meta + 2, sizeof *m, 16);
    if (!m)
      return false;
    im->meta = m;
  }
  const char *k = hbm_intern(im->strings, key), *v = hbm_intern(im->strings, value);
  if (!k || !v)
    return false;
  im->meta[im->n_meta++] = k;
  im->meta[im->n_meta++] = v;
  return true;
}

bool xprof_add_scoped(xprof_import_t *im, xprof_space_t *s, uint64_t bytes, const char *by) {
  xprof_buffer_t *b = xprof_add_buffer(s);
  if (!b)
    return false;
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_printf(&sb,
                    "largest scoped VMEM allocation, of %s (its backend_config's "
                    "used_scoped_memory_configs)",
                    by ? by : "?");
  b->label = hbm_intern(im->strings, hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
  b->op = hbm_intern(im->strings, by ? by : "scoped VMEM");
  b->group = hbm_intern(im->strings, "scoped VMEM");
  b->size = b->unpadded = bytes;
  b->offset = s->reserved;
  b->start = 0, b->end = -1;
  b->category = HBM_CAT_TEMPORARY;
  s->reserved = hbm__bytes_add(s->reserved, b->size);
  s->peak = hbm__bytes_add(s->peak, b->size);
  return b->op && b->label && b->group;
}

void xprof_note_problem(xprof_import_t *im) {
  if (im->n_problems++ < 8)
    hbm_strbuf_printf(&im->problems, "%s%s", im->n_problems > 1 ? "; " : "", hbm_last_error());
}

/* ---- into one profile ---- */

static int by_peak(const void *a, const void *b) {
  const xprof_space_t *x = *(xprof_space_t *const *)a, *y = *(xprof_space_t *const *)b;
  if (x->runtime != y->runtime)
    return x->runtime ? 1 : -1;
  if (x->peak != y->peak)
    return x->peak > y->peak ? -1 : 1;
  return x < y ? -1 : x > y; /* stable: the file's order */
}

/* Sizes come from the file: the analysis's sums saturate at HBM_BYTES_MAX (hbm.h), and so
 * does a size, so a corrupt file's absurd one reads as "at least 8 EiB", never as less. */
static uint64_t bounded(uint64_t v) { return v < HBM_BYTES_MAX ? v : HBM_BYTES_MAX; }

/* A program's allocations, reserved from its first step to its last. */
static bool reserve_steps(hbm_profile_t *p, int space, int64_t base, int64_t n, uint64_t size) {
  hbm_reserve_event_t e = {
      .step = base, .space = space, .op = HBM_RESERVE_PREALLOCATE, .size = size};
  if (hbm_profile_add_reserve(p, &e) != HBM_OK)
    return false;
  e.step = base + n, e.op = HBM_RESERVE_RELEASE;
  return hbm_profile_add_reserve(p, &e) == HBM_OK;
}

static bool add_space_to(hbm_profile_t *p, const xprof_space_t *s) {
  int space = hbm_profile_add_space(p, s->name, s->device, s->color, 0);
  if (space < 0)
    return false;
  int64_t base = hbm_profile_step_count(p);
  for (int64_t i = 0; i < s->n_steps; i++)
    if (hbm_profile_add_step(p, s->step_times ? s->step_times[i] : 0,
                             s->step_labels ? s->step_labels[i] : NULL) < 0)
      return false;
  if (s->reserved && !reserve_steps(p, space, base, s->n_steps, bounded(s->reserved)))
    return false;
  for (size_t i = 0; i < s->n_buffers; i++) {
    const xprof_buffer_t *x = &s->buffers[i];
    int64_t end = x->end < 0 || x->end > s->n_steps ? s->n_steps : x->end;
    bool own_end = x->span_end > x->start && x->span_end < end;
    hbm_buffer_t b = {.address = x->offset,
                      .size = bounded(x->size),
                      .unpadded_size = bounded(x->unpadded),
                      .start = base + x->start,
                      .end = base + end,
                      .span_end = own_end ? base + x->span_end : 0,
                      .space = space,
                      .category = x->category,
                      .flags = x->flags | (x->end < 0 && s->runtime ? HBM_BUF_LIVE_OUT : 0u),
                      .op = x->op,
                      .shape = x->shape,
                      .group = x->group,
                      .source = x->source,
                      .opcode = x->opcode,
                      .label = x->label,
                      .stack = x->stack};
    if (hbm_profile_add_buffer(p, &b) < 0)
      return false;
  }
  return true;
}

static void set_meta(hbm_profile_t *p, const char *key, size_t value) {
  char buf[32];
  snprintf(buf, sizeof buf, "%zu", value);
  hbm_profile_set_meta(p, key, buf);
}

/* One profile of everything read: programs largest peak first, then allocator timelines. */
hbm_profile_t *xprof_to_profile(xprof_import_t *im, const char *name, const char *format) {
  xprof_space_t **order = malloc((im->n_spaces + 1) * sizeof *order);
  hbm_profile_t *p = order ? hbm_profile_new(HBM_PROFILE_PLAN, name) : NULL;
  if (!p) {
    free(order);
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of memory", im->file);
    return NULL;
  }
  for (size_t i = 0; i < im->n_spaces; i++)
    order[i] = &im->spaces[i];
  qsort(order, im->n_spaces, sizeof *order, by_peak);
  hbm_profile_set_meta(p, "source_path", im->file);
  hbm_profile_set_meta(p, "format", format);
  hbm_profile_set_meta(p, "planner", "XLA's buffer assignment (heap-simulator trace, as XProf)");
  set_meta(p, "programs", im->n_programs);
  if (im->n_problems)
    hbm_profile_set_meta(p, "lost", hbm_strbuf_str(&im->problems));
  for (size_t i = 0; i + 1 < im->n_meta; i += 2)
    hbm_profile_set_meta(p, im->meta[i], im->meta[i + 1]);
  bool ok = true;
  hbm_strbuf_t ranges; /* "from-to" of each space's steps, for the viewer's first zoom */
  hbm_strbuf_init(&ranges);
  for (size_t i = 0; i < im->n_spaces && ok; i++) {
    int64_t from = hbm_profile_step_count(p);
    ok = add_space_to(p, order[i]);
    hbm_strbuf_printf(&ranges, "%s%lld-%lld", i ? "," : "", (long long)from,
                      (long long)hbm_profile_step_count(p));
  }
  if (ok && im->n_spaces > 1)
    hbm_profile_set_meta(p, "space_steps", hbm_strbuf_str(&ranges));
  hbm_strbuf_free(&ranges);
  free(order);
  if (!ok || hbm_profile_finish(p) != HBM_OK) {
    hbm_profile_free(p);
    return NULL;
  }
  return p;
}

/* ---- recognising the files ---- */

static bool is_gzip(const uint8_t *d, size_t len) {
  return len >= 2 && d[0] == 0x1f && d[1] == 0x8b;
}

/* The first field of both messages is length-delimited field 1 (XSpace.planes,
 * HloProto.hlo_module); inside, an XPlane starts with its id (1, varint) or name (2), a
 * module with its name (1, length-delimited). */
static int first_inner_tag(const uint8_t *d, size_t len) {
  if (len < 2 || d[0] != 0x0a)
    return -1;
  size_t i = 1, n = 0;
  for (int shift = 0; i < len && shift < 64; shift += 7) {
    n |= (size_t)(d[i] & 0x7f) << shift;
    if (!(d[i++] & 0x80))
      break;
  }
  if (i >= len || n == 0 || n > len - i)
    return -1;
  return d[i];
}

bool hbm__xprof_is(const char *path, const uint8_t *data, size_t len) {
  if (is_gzip(data, len) && path && strstr(path, ".pb"))
    return true;
  if (path && (hbm__ends_with(path, ".xplane.pb") || hbm__ends_with(path, ".hlo_proto.pb") ||
               hbm__ends_with(path, ".pb.gz") || hbm__ends_with(path, ".pb")))
    return true;
  int tag = first_inner_tag(data, len);
  if (tag != 0x08 && tag != 0x12 && tag != 0x0a)
    return false;
  for (size_t i = 0; i < len && i < 64; i++)
    if (data[i] < 0x09) /* binary, not a text file that starts with a blank line */
      return true;
  return false;
}

/* A gzip'd or empty file: the error says so (false); else true. */
static bool readable(const char *path, const uint8_t *data, size_t len) {
  if (is_gzip(data, len)) {
    hbm__error(HBM_ERR_PARSE,
               "%s: byte 0: a gzip-compressed file (magic 1f 8b); expected an "
               "uncompressed serialized XSpace (.xplane.pb) or HloProto (.hlo_proto.pb): gunzip "
               "it first",
               path);
    return false;
  }
  if (!len) {
    hbm__error(HBM_ERR_PARSE,
               "%s: byte 0: an empty file; expected a serialized XSpace or "
               "HloProto",
               path);
    return false;
  }
  return true;
}

hbm_status_t hbm__xprof_log(const char *path, const uint8_t *data, size_t len, hbm_alloc_log_t *out,
                            char *name, size_t cap) {
  memset(out, 0, sizeof *out);
  xprof_import_t im;
  if (!readable(path, data, len))
    return hbm_last_status();
  if (!xprof_import_init(&im, path))
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of memory", path);
  const char *allocator = NULL;
  hbm_status_t st = xprof_xspace_log(&im, data, len, out, &allocator);
  if (st == HBM_OK && !allocator)
    st = hbm__error(HBM_ERR_PARSE,
                    "%s: no allocator events: expected MemoryAllocation / MemoryDeallocation "
                    "events on the /host:CPU plane%s%s",
                    path, im.n_problems ? "; " : "", hbm_strbuf_str(&im.problems));
  if (st == HBM_OK)
    snprintf(name, cap, "%s", allocator);
  else
    hbm_alloc_log_free(out);
  xprof_import_free(&im);
  return st;
}

hbm_profile_t *hbm__xprof_load(const char *path, const uint8_t *data, size_t len) {
  if (!readable(path, data, len))
    return NULL;
  xprof_import_t im;
  if (!xprof_import_init(&im, path)) {
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of memory", path);
    return NULL;
  }
  bool hlo = hbm__ends_with(path, ".hlo_proto.pb") ||
             (!hbm__ends_with(path, ".xplane.pb") && first_inner_tag(data, len) == 0x0a);
  hbm_status_t st =
      hlo ? xprof_read_hlo_proto(&im, data, len, data, NULL) : xprof_read_xspace(&im, data, len);
  hbm_profile_t *p = NULL;
  if (st == HBM_OK && im.n_spaces == 0)
    hbm__error(HBM_ERR_PARSE,
               "%s: no programs and no allocator events: expected a /host:metadata "
               "plane with HloProtos or MemoryAllocation events%s%s",
               path, im.n_problems ? "; " : "", hbm_strbuf_str(&im.problems));
  else if (st == HBM_OK || im.n_spaces > 0) {
    if (st != HBM_OK)
      xprof_note_problem(&im);
    p = xprof_to_profile(&im, hbm__base_name(path), "xprof");
  }
  xprof_import_free(&im);
  return p;
}
