/* scale_xplane.h — bench_scale's big XProf profiles: a real .xplane.pb with its activity
 * repeated. A profile gets big from its device and host activity (kernels, memcpys, the
 * threads' events): every line's events are written again and again, each repetition moved on
 * in time by the line's span, until the file has the size asked for. What XProf's Memory
 * Viewer and Memory Profile read is left as it is (the compiled programs of /host:metadata,
 * and the lines of MemoryAllocation / MemoryDeallocation events), so the big file's peaks are
 * the real profile's — which tests/xprof_compare.py checks against XProf's own converter. The
 * file is written field by field (protobuf's wire format), each message's length counted
 * first, so a gigabyte is never held in memory. Header-only: part of bench_scale.c. */
#ifndef HBM_BENCH_SCALE_XPLANE_H
#define HBM_BENCH_SCALE_XPLANE_H

#include "base/base.h"
#include "xplane.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct xplane_gen {
  FILE *out;
  uint64_t written;
  int reps; /* how many times each activity line's events are written */
  bool failed;
} xplane_gen_t;

static size_t xg_varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80)
    v >>= 7, n++;
  return n;
}

static void xg_put(xplane_gen_t *g, const void *p, size_t n) {
  if (fwrite(p, 1, n, g->out) != n)
    g->failed = true;
  g->written += n;
}

static void xg_varint(xplane_gen_t *g, uint64_t v) {
  uint8_t b[10];
  size_t n = 0;
  while (v >= 0x80) {
    b[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  b[n++] = (uint8_t)v;
  xg_put(g, b, n);
}

/* A length-delimited field: tag, length, then the caller writes `len` bytes. */
static void xg_field(xplane_gen_t *g, int field, uint64_t len) {
  xg_varint(g, (uint64_t)field << 3 | 2);
  xg_varint(g, len);
}

static size_t xg_field_len(int field, uint64_t len) {
  return xg_varint_len((uint64_t)field << 3 | 2) + xg_varint_len(len) + len;
}

static void xg_message(xplane_gen_t *g, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n + 1);
  if (!buf) {
    g->failed = true;
    return;
  }
  protobuf_c_message_pack(m, buf);
  xg_put(g, buf, n);
  free(buf);
}

/* Whether a line is the allocator's (its events are MemoryAllocation / MemoryDeallocation). */
static bool xg_memory_line(const HbmXplane__XPlane *p, const HbmXplane__XLine *l) {
  for (size_t e = 0; e < l->n_events; e++)
    for (size_t m = 0; m < p->n_event_metadata; m++)
      if (p->event_metadata[m]->key == l->events[e]->metadata_id && p->event_metadata[m]->value &&
          p->event_metadata[m]->value->name && strstr(p->event_metadata[m]->value->name, "Memory"))
        return true;
  return false;
}

/* The picoseconds a line's events span (one more than the last end). */
static int64_t xg_span(const HbmXplane__XLine *l) {
  int64_t end = 0;
  for (size_t e = 0; e < l->n_events; e++)
    if (l->events[e]->data_case == HBM_XPLANE__XEVENT__DATA_OFFSET_PS &&
        l->events[e]->offset_ps + l->events[e]->duration_ps > end)
      end = l->events[e]->offset_ps + l->events[e]->duration_ps;
  return end + 1;
}

/* Event e moved by `shift` picoseconds: its packed size, and (when g) written. */
static size_t xg_event(xplane_gen_t *g, HbmXplane__XEvent *e, int64_t shift) {
  int64_t was = e->offset_ps;
  if (e->data_case == HBM_XPLANE__XEVENT__DATA_OFFSET_PS)
    e->offset_ps += shift;
  size_t n = protobuf_c_message_get_packed_size(&e->base);
  if (g) {
    xg_field(g, 4, n);
    xg_message(g, &e->base);
  }
  e->offset_ps = was;
  return xg_field_len(4, n);
}

/* A line: its own fields, then its events `reps` times (the allocator's once, unless
 * `memory`: then the allocator's events too, as a longer run would have them: each repetition
 * the same allocations and frees, with the same bytes in use after each, later). */
static size_t xg_line(xplane_gen_t *g, const HbmXplane__XPlane *p, HbmXplane__XLine *l, int reps,
                      bool memory) {
  if (!memory && xg_memory_line(p, l))
    reps = 1;
  int64_t span = xg_span(l);
  size_t n_events = l->n_events;
  HbmXplane__XEvent **events = l->events;
  l->n_events = 0;
  size_t head = protobuf_c_message_get_packed_size(&l->base), body = 0;
  l->n_events = n_events;
  for (int k = 0; k < reps; k++)
    for (size_t e = 0; e < n_events; e++)
      body += xg_event(NULL, events[e], k * span);
  if (g) {
    xg_field(g, 3, head + body);
    l->n_events = 0;
    xg_message(g, &l->base);
    l->n_events = n_events;
    for (int k = 0; k < reps; k++)
      for (size_t e = 0; e < n_events; e++)
        xg_event(g, events[e], k * span);
  }
  return xg_field_len(3, head + body);
}

static size_t xg_plane(xplane_gen_t *g, HbmXplane__XPlane *p, int reps, bool memory) {
  size_t n_lines = p->n_lines, body = 0;
  HbmXplane__XLine **lines = p->lines;
  p->n_lines = 0;
  size_t head = protobuf_c_message_get_packed_size(&p->base);
  p->n_lines = n_lines;
  for (size_t i = 0; i < n_lines; i++)
    body += xg_line(NULL, p, lines[i], reps, memory);
  if (g) {
    xg_field(g, 1, head + body);
    p->n_lines = 0;
    xg_message(g, &p->base);
    p->n_lines = n_lines;
    for (size_t i = 0; i < n_lines; i++)
      xg_line(g, p, lines[i], reps, memory);
  }
  return xg_field_len(1, head + body);
}

/* Writes `out`: the XSpace of `src` with its activity (and with `memory` its allocator's
 * events) repeated until about `target` bytes. */
static hbm_status_t write_xplane(const char *src, const char *out, uint64_t target, bool memory,
                                 int *reps) {
  char *data;
  size_t len;
  hbm_status_t st = hbm__read_file(src, &data, &len);
  if (st != HBM_OK)
    return st;
  HbmXplane__XSpace *s = hbm_xplane__xspace__unpack(NULL, len, (const uint8_t *)data);
  free(data);
  if (!s)
    return hbm__error(HBM_ERR_PARSE, "%s: not an XSpace", src);
  size_t once = 0, twice = 0;
  for (size_t i = 0; i < s->n_planes; i++) {
    once += xg_plane(NULL, s->planes[i], 1, memory);
    twice += xg_plane(NULL, s->planes[i], 2, memory);
  }
  size_t per_rep = twice - once; /* what one more repetition adds */
  *reps = per_rep && target > once ? (int)((target - once + per_rep - 1) / per_rep) + 1 : 1;
  xplane_gen_t g = {.out = fopen(out, "wb"), .reps = *reps};
  if (!g.out) {
    hbm_xplane__xspace__free_unpacked(s, NULL);
    return hbm__error(HBM_ERR_IO, "%s: cannot write", out);
  }
  HbmXplane__XSpace rest = *s; /* the space's other fields: errors, hostnames */
  rest.n_planes = 0;
  for (size_t i = 0; i < s->n_planes && !g.failed; i++)
    xg_plane(&g, s->planes[i], *reps, memory);
  xg_message(&g, &rest.base);
  if (fclose(g.out) != 0)
    g.failed = true;
  hbm_xplane__xspace__free_unpacked(s, NULL);
  return g.failed ? hbm__error(HBM_ERR_IO, "%s: cannot write", out) : HBM_OK;
}

#endif /* HBM_BENCH_SCALE_XPLANE_H */
