/* export_chrome.c — `hbm export --format chrome`: a profile as Chrome trace / Perfetto JSON
 * (the "Trace Event Format"), so a timeline opens in ui.perfetto.dev or chrome://tracing.
 *
 * One process per memory space: a counter track with bytes in use (and reserved, when
 * known) at every step, one async slice per buffer from its first to its last live step
 * (named by its op, with size, shape and category as arguments), instant events for OOMs
 * and markers. Timestamps are microseconds: the step times of a runtime profile, the step
 * index of a plan. The values come from hbm_analyze, like every other view. Written as a
 * stream, so a profile of millions of events needs no document tree in memory. */
#include "profile/index.h"
#include "profile/json_out.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLUSH_AT (64u << 10)

typedef struct exporter {
  const hbm_profile_t *p;
  FILE *out;
  hbm_strbuf_t sb;
  bool first; /* no event written yet */
  hbm_status_t status;
} exporter_t;

static void flush_out(exporter_t *x, bool force) {
  if (x->sb.failed && x->status == HBM_OK)
    x->status = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory exporting a profile");
  if (x->status == HBM_OK && (force || x->sb.len >= FLUSH_AT)) {
    x->status = hbm__write_out(x->out, hbm_strbuf_str(&x->sb), x->sb.len, "Chrome trace");
    x->sb.len = 0;
    if (x->sb.data)
      x->sb.data[0] = '\0';
  }
}

/* Starts the next event object (the comma between events). */
static void begin_event(exporter_t *x) {
  flush_out(x, false);
  hbm_strbuf_puts(&x->sb, x->first ? "\n" : ",\n");
  x->first = false;
}

/* Microseconds of a step; one past the last step lies just after it. */
static void put_ts(exporter_t *x, int64_t step) {
  const hbm_profile_t *p = x->p;
  int64_t n = hbm_profile_step_count(p);
  if (hbm_profile_kind(p) == HBM_PROFILE_PLAN) {
    hbm_strbuf_printf(&x->sb, "\"ts\":%lld", (long long)step);
    return;
  }
  int64_t ns =
      step < n ? hbm_profile_step_time(p, step) : (n ? hbm_profile_step_time(p, n - 1) + 1000 : 0);
  hbm_strbuf_printf(&x->sb, "\"ts\":%lld.%03lld", (long long)(ns / 1000),
                    (long long)((ns % 1000 + 1000) % 1000));
}

static void write_process_name(exporter_t *x, int space) {
  const hbm_space_info_t *info = hbm_profile_space(x->p, space);
  hbm_strbuf_t name;
  hbm_strbuf_init(&name);
  hbm_strbuf_printf(&name, "%s on %s", info->name,
                    info->device && *info->device ? info->device : "-");
  for (int tid = 0; tid <= 1; tid++) {
    begin_event(x);
    hbm_strbuf_printf(&x->sb,
                      "{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":",
                      tid ? "thread_name" : "process_name", space + 1, tid);
    hbm__json_quote(&x->sb, tid ? "buffers" : hbm_strbuf_str(&name));
    hbm_strbuf_puts(&x->sb, "}}");
  }
  hbm_strbuf_free(&name);
}

static void write_counters(exporter_t *x, const hbm_analysis_t *a, int space) {
  const hbm_summary_t *s = hbm_analysis_summary(a);
  if (s->n_steps == 0)
    return;
  hbm_timeline_point_t *pts = malloc((size_t)s->n_steps * sizeof *pts);
  if (!pts) {
    x->sb.failed = true;
    return;
  }
  size_t n = hbm_analysis_timeline(a, 0, s->n_steps, (size_t)s->n_steps, pts);
  bool reserved = s->peak_reserved_bytes > 0;
  for (size_t i = 0; i < n; i++) {
    if (i > 0 && i + 1 < n && pts[i].bytes == pts[i - 1].bytes &&
        pts[i].reserved == pts[i - 1].reserved)
      continue; /* a counter holds its value until the next sample */
    begin_event(x);
    hbm_strbuf_printf(&x->sb, "{\"name\":\"memory\",\"ph\":\"C\",\"pid\":%d,\"tid\":0,", space + 1);
    put_ts(x, pts[i].step);
    hbm_strbuf_printf(&x->sb, ",\"args\":{\"in use\":%" PRIu64, pts[i].bytes);
    if (reserved)
      hbm_strbuf_printf(&x->sb, ",\"reserved\":%" PRIu64, pts[i].reserved);
    hbm_strbuf_puts(&x->sb, "}}");
  }
  free(pts);
}

static const char *buffer_name(const hbm_buffer_t *b) {
  if (b->op)
    return b->op;
  if (b->label)
    return b->label;
  return b->category != HBM_CAT_UNKNOWN ? hbm_category_name(b->category) : "buffer";
}

static void write_buffer(exporter_t *x, int64_t idx) {
  const hbm_buffer_t *b = hbm_profile_buffer(x->p, idx);
  for (int edge = 0; edge < 2; edge++) {
    begin_event(x);
    hbm_strbuf_puts(&x->sb, "{\"name\":");
    hbm__json_quote(&x->sb, buffer_name(b));
    hbm_strbuf_printf(&x->sb, ",\"cat\":\"buffer\",\"ph\":\"%s\",\"id\":%lld,\"pid\":%d,\"tid\":1,",
                      edge ? "e" : "b", (long long)idx, b->space + 1);
    put_ts(x, edge ? b->end : b->start);
    if (edge) {
      hbm_strbuf_puts(&x->sb, "}");
      continue;
    }
    hbm_strbuf_printf(&x->sb,
                      ",\"args\":{\"size\":%" PRIu64 ",\"unpadded_size\":%" PRIu64
                      ",\"address\":\"0x%" PRIx64 "\",\"category\":\"%s\"",
                      b->size, b->unpadded_size, b->address, hbm_category_name(b->category));
    const char *keys[] = {"shape", "group", "source", "opcode"};
    const char *values[] = {b->shape, b->group, b->source, b->opcode};
    for (size_t i = 0; i < HBM_ARRAY_LEN(keys); i++)
      if (values[i]) {
        hbm_strbuf_printf(&x->sb, ",\"%s\":", keys[i]);
        hbm__json_quote(&x->sb, values[i]);
      }
    hbm_strbuf_puts(&x->sb, "}}");
  }
}

static void write_instants(exporter_t *x) {
  for (size_t i = 0; i < hbm_profile_oom_count(x->p); i++) {
    const hbm_oom_event_t *e = hbm_profile_oom(x->p, i);
    char req[32];
    begin_event(x);
    hbm_strbuf_printf(&x->sb,
                      "{\"name\":\"OOM: %s requested\",\"ph\":\"i\",\"s\":\"p\",\"pid\":%d,"
                      "\"tid\":0,",
                      hbm_format_bytes(e->requested, req, sizeof req), e->space + 1);
    put_ts(x, e->step);
    hbm_strbuf_printf(&x->sb, ",\"args\":{\"requested\":%" PRIu64 ",\"message\":", e->requested);
    hbm__json_quote(&x->sb, e->message);
    hbm_strbuf_puts(&x->sb, "}}");
  }
  for (size_t i = 0; i < hbm_profile_marker_count(x->p); i++) {
    const hbm_marker_t *m = hbm_profile_marker(x->p, i);
    begin_event(x);
    hbm_strbuf_puts(&x->sb, "{\"name\":");
    hbm__json_quote(&x->sb, m->text && *m->text ? m->text : "marker");
    hbm_strbuf_puts(&x->sb, ",\"ph\":\"i\",\"s\":\"g\",\"pid\":1,\"tid\":0,");
    put_ts(x, m->step);
    hbm_strbuf_puts(&x->sb, "}");
  }
}

static hbm_status_t write_space(exporter_t *x, int space) {
  hbm_analysis_t *a = hbm_analyze(x->p, space);
  if (!a)
    return hbm_last_status();
  write_process_name(x, space);
  write_counters(x, a, space);
  hbm_analysis_free(a);
  for (int64_t i = 0; i < hbm_profile_buffer_count(x->p) && x->status == HBM_OK; i++)
    if (hbm_profile_buffer(x->p, i)->space == space &&
        hbm_profile_buffer(x->p, i)->end > hbm_profile_buffer(x->p, i)->start)
      write_buffer(x, i);
  return x->status;
}

hbm_status_t hbm_export_chrome(const hbm_profile_t *p, FILE *out) {
  if (!p || !out)
    return hbm__error(HBM_ERR_INVALID, "hbm_export_chrome: NULL profile or stream");
  if (hbm__need_whole(p, "the Chrome trace export") != HBM_OK)
    return hbm_last_status();
  exporter_t x = {.p = p, .out = out, .first = true};
  hbm_strbuf_init(&x.sb);
  hbm_strbuf_puts(&x.sb, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"profile\":");
  hbm__json_quote(&x.sb, hbm_profile_name(p));
  hbm_strbuf_printf(&x.sb, ",\"kind\":\"%s\",\"time\":\"%s\"},\"traceEvents\":[",
                    hbm_profile_kind(p) == HBM_PROFILE_PLAN ? "plan" : "runtime",
                    hbm_profile_kind(p) == HBM_PROFILE_PLAN ? "1 us = 1 step (program order)"
                                                            : "microseconds since the start");
  hbm_status_t s = HBM_OK;
  for (int i = 0; i < hbm_profile_space_count(p) && s == HBM_OK; i++)
    s = write_space(&x, i);
  if (s == HBM_OK)
    write_instants(&x);
  hbm_strbuf_puts(&x.sb, "\n]}\n");
  if (s == HBM_OK) {
    flush_out(&x, true);
    s = x.status;
  }
  hbm_strbuf_free(&x.sb);
  if (s == HBM_OK && (fflush(out) != 0 || ferror(out)))
    s = hbm__error(HBM_ERR_IO, "cannot write the Chrome trace");
  return s;
}
