/* report.c — `hbm report`: what a profile says about memory, in the terminal (text with a
 * Unicode timeline chart) or as JSON. Every number comes from hbm_analyze (analysis.c), the
 * one module that computes peaks, so the report, the viewer and the export always agree.
 *
 * For each memory space: the peak in use and when, reserved memory, the limit, fragmentation
 * at the peak, a timeline chart, the buffers live at the peak (largest first, with tags),
 * totals by category and group, and every OOM event with its diagnosis. */
#include "profile/index.h"
#include "profile/json_out.h"
#include "profile/report_step.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHART_ROWS 8
#define TEXT_BUFFERS 20   /* buffers listed in the text report */
#define JSON_TIMELINE 200 /* timeline points in the JSON report */

/* ---- small formatting helpers ---- */

static const char *bytes_text(uint64_t bytes, char *buf, size_t cap) {
  return hbm_format_bytes(bytes, buf, cap);
}

static const char *time_text(int64_t ns, char *buf, size_t cap) {
  double v = (double)ns;
  if (ns < 0)
    v = -v;
  if (v < 1e3)
    snprintf(buf, cap, "%lld ns", (long long)ns);
  else if (v < 1e6)
    snprintf(buf, cap, "%.2f us", (double)ns / 1e3);
  else if (v < 1e9)
    snprintf(buf, cap, "%.2f ms", (double)ns / 1e6);
  else
    snprintf(buf, cap, "%.3f s", (double)ns / 1e9);
  return buf;
}

/* "at step 12 (t = 1.23 ms)" for runtime profiles, "at step 12 (fusion.3)" for plans. */
static const char *when_text(const hbm_profile_t *p, int64_t step, char *buf, size_t cap) {
  char t[32];
  const char *label = hbm_profile_step_label(p, step);
  if (hbm_profile_kind(p) == HBM_PROFILE_PLAN)
    snprintf(buf, cap, "step %lld%s%s%s", (long long)step, label ? " (" : "", label ? label : "",
             label ? ")" : "");
  else
    snprintf(buf, cap, "step %lld (t = %s)", (long long)step,
             time_text(hbm_profile_step_time(p, step), t, sizeof t));
  return buf;
}

static double percent(uint64_t part, uint64_t whole) {
  return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* Copies s cut to `width` display columns (counting UTF-8 characters), "-" for NULL. */
static const char *cell(const char *s, int width, char *buf, size_t cap) {
  if (!s || !*s)
    s = "-";
  size_t out = 0;
  int cols = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && out + 5 < cap; p++) {
    if ((*p & 0xc0) != 0x80 && ++cols > width) {
      if (out >= 3 && width > 1) { /* mark the cut */
        while (out > 0 && ((unsigned char)buf[out - 1] & 0xc0) == 0x80)
          out--;
        out--;
        memcpy(buf + out, "\xe2\x80\xa6", 3); /* … */
        out += 3;
      }
      break;
    }
    buf[out++] = (char)*p;
  }
  buf[out] = '\0';
  return buf;
}

/* The last `width` columns of s, the cut marked at the front: a source path keeps its file
 * name and line number. */
static const char *cell_tail(const char *s, int width, char *buf, size_t cap) {
  if (!s || !*s)
    return cell(s, width, buf, cap);
  const unsigned char *p = (const unsigned char *)s + strlen(s);
  int cols = 0;
  while (p > (const unsigned char *)s && cols < width)
    if ((*--p & 0xc0) != 0x80)
      cols++;
  if (p == (const unsigned char *)s)
    return cell(s, width, buf, cap);
  while (*p && (*p & 0xc0) == 0x80) /* drop the first kept character for the mark */
    p++;
  p += *p ? 1 : 0;
  while (*p && (*p & 0xc0) == 0x80)
    p++;
  snprintf(buf, cap, "\xe2\x80\xa6%s", (const char *)p);
  return buf;
}

/* ---- the timeline chart ---- */

typedef struct chart {
  hbm_timeline_point_t *points;
  size_t n;
  int cols;
  uint64_t top;
  bool reserved;
} chart_t;

static int level_of(uint64_t v, uint64_t top) {
  if (!top || !v)
    return 0;
  double x = (double)v / (double)top * (CHART_ROWS * 8);
  return x >= CHART_ROWS * 8 ? CHART_ROWS * 8 : (int)(x + 0.999); /* reserved may lie far above */
}

static const hbm_timeline_point_t *point_of_column(const chart_t *c, int col) {
  return &c->points[(size_t)col * c->n / (size_t)c->cols];
}

static void draw_row(FILE *out, const chart_t *c, int row) {
  static const char *const eighths[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  int lo = row * 8, hi = lo + 8;
  for (int col = 0; col < c->cols; col++) {
    const hbm_timeline_point_t *pt = point_of_column(c, col);
    int used = level_of(pt->bytes, c->top), reserved = level_of(pt->reserved, c->top);
    if (used >= hi)
      fputs(eighths[8], out);
    else if (used > lo)
      fputs(eighths[used - lo], out);
    else if (c->reserved && reserved > lo && reserved <= hi)
      fputs("·", out);
    else
      fputc(' ', out);
  }
  fputc('\n', out);
}

static void draw_axis(FILE *out, const hbm_profile_t *p, const chart_t *c, const hbm_summary_t *s) {
  fprintf(out, "  %10s └", "");
  for (int col = 0; col < c->cols; col++)
    fputs("─", out);
  fprintf(out, "\n  %10s  ", "");
  int peak_col = -1;
  for (int col = 0; col < c->cols && peak_col < 0; col++)
    if (point_of_column(c, col)->step == s->peak_step)
      peak_col = col;
  for (int col = 0; col < c->cols; col++)
    fputs(col == peak_col ? "▲" : " ", out);
  char end[64], t[32];
  if (hbm_profile_kind(p) == HBM_PROFILE_RUNTIME)
    snprintf(end, sizeof end, "step %lld, %s", (long long)s->n_steps,
             time_text(hbm_profile_step_time(p, s->n_steps - 1), t, sizeof t));
  else
    snprintf(end, sizeof end, "step %lld", (long long)s->n_steps);
  fprintf(out, "\n  %10s  step 0%*s\n", "", c->cols - 6 > 0 ? c->cols - 6 : 0, end);
}

static void draw_chart(FILE *out, const hbm_profile_t *p, const hbm_analysis_t *a, int width) {
  const hbm_summary_t *s = hbm_analysis_summary(a);
  chart_t c = {.cols = (width > 0 ? width : 100) - 16};
  c.cols = c.cols < 20 ? 20 : c.cols > 1000 ? 1000 : c.cols;
  if (s->n_steps == 0 || !(c.points = malloc((size_t)c.cols * sizeof *c.points)))
    return;
  c.n = hbm_analysis_timeline(a, 0, s->n_steps, (size_t)c.cols, c.points);
  /* Scaled to what is in use; reserved memory far above it (a preallocated pool) would
   * flatten the chart, so it is then only named. */
  c.reserved = s->peak_reserved_bytes > 0;
  c.top = s->peak_bytes;
  bool reserved_above = (double)s->peak_reserved_bytes > 1.5 * (double)s->peak_bytes;
  if (c.reserved && !reserved_above && s->peak_reserved_bytes > c.top)
    c.top = s->peak_reserved_bytes;
  if (c.top == 0)
    c.top = s->peak_reserved_bytes;
  if (c.n == 0 || c.top == 0) {
    free(c.points);
    return;
  }
  char reserved[32];
  fprintf(out, "\n  memory in use (█)%s over %lld steps", c.reserved ? " and reserved (·)" : "",
          (long long)s->n_steps);
  if (c.reserved && reserved_above)
    fprintf(out, "; reserved memory (up to %s) lies above the chart",
            bytes_text(s->peak_reserved_bytes, reserved, sizeof reserved));
  fputc('\n', out);
  char label[32];
  for (int row = CHART_ROWS - 1; row >= 0; row--) {
    label[0] = '\0';
    if (row == CHART_ROWS - 1)
      bytes_text(c.top, label, sizeof label);
    else if (row == CHART_ROWS / 2 - 1)
      bytes_text(c.top / 2, label, sizeof label);
    fprintf(out, "  %10s %s", label,
            row == CHART_ROWS - 1 || row == CHART_ROWS / 2 - 1 ? "┤" : "│");
    draw_row(out, &c, row);
  }
  draw_axis(out, p, &c, s);
  free(c.points);
}

/* ---- text sections ---- */

/* A long run's profile says which of its training steps it holds (the step markers of
 * hbm_profiler_step_begin/end): the first and last, and whether any between is missing. */
static void write_steps_held(FILE *out, const hbm_profile_t *p) {
  int64_t first = 0, last = 0, count = 0;
  for (size_t i = 0; i < hbm_profile_marker_count(p); i++) {
    const hbm_marker_t *m = hbm_profile_marker(p, i);
    if (m->kind != HBM_MARKER_STEP_BEGIN)
      continue;
    if (!count || m->value < first)
      first = m->value;
    if (!count || m->value > last)
      last = m->value;
    count++;
  }
  if (!count)
    return;
  if (count == last - first + 1)
    fprintf(out, "  %-12s %lld to %lld, all %lld recorded\n", "steps", (long long)first,
            (long long)last, (long long)count);
  else
    fprintf(out, "  %-12s %lld to %lld, %lld of them recorded (the others are missing)\n", "steps",
            (long long)first, (long long)last, (long long)count);
}

static void write_header(FILE *out, const hbm_profile_t *p) {
  int64_t n = hbm_profile_step_count(p);
  int spaces = hbm_profile_space_count(p);
  fprintf(out, "profile: %s (%s, %lld steps, %lld buffers, %d memory space%s)\n",
          hbm_profile_name(p), hbm_profile_kind(p) == HBM_PROFILE_PLAN ? "plan" : "runtime",
          (long long)n, (long long)hbm_profile_buffer_count(p), spaces, spaces == 1 ? "" : "s");
  static const char *const shown_meta[] = {"source_path", "format",  "module",  "host",
                                           "pid",         "started", "command", "devices"};
  for (size_t i = 0; i < HBM_ARRAY_LEN(shown_meta); i++) {
    const char *v = hbm_profile_meta(p, shown_meta[i]);
    if (v && *v)
      fprintf(out, "  %-12s %s\n", shown_meta[i], v);
  }
  write_steps_held(out, p);
  const char *notes[] = {"lost", "unmatched_frees", "missing_frees", "notes"};
  const char *what[] = {"", " frees of blocks the profile never saw allocated",
                        " blocks allocated again without a recorded free", ""};
  for (size_t i = 0; i < HBM_ARRAY_LEN(notes); i++) {
    const char *v = hbm_profile_meta(p, notes[i]);
    if (v)
      fprintf(out, "note: %s%s\n", v, what[i]);
  }
}

static void write_numbers(FILE *out, const hbm_profile_t *p, const hbm_summary_t *s) {
  char a[32], b[32], when[320];
  fprintf(out, "  peak in use      %s at %s\n", bytes_text(s->peak_bytes, a, sizeof a),
          s->peak_step >= 0 ? when_text(p, s->peak_step, when, sizeof when) : "-");
  if (s->padding_bytes)
    fprintf(out, "                   %s unpadded, %s padding\n",
            bytes_text(s->peak_unpadded_bytes, a, sizeof a),
            bytes_text(s->padding_bytes, b, sizeof b));
  if (s->peak_reserved_bytes)
    fprintf(out, "  peak reserved    %s (%s at the peak)\n",
            bytes_text(s->peak_reserved_bytes, a, sizeof a),
            bytes_text(s->reserved_at_peak, b, sizeof b));
  else
    fprintf(out, "  peak reserved    unknown (no reservation events)\n");
  if (s->limit_bytes)
    fprintf(out, "  limit            %s (the peak uses %.1f%%)\n",
            bytes_text(s->limit_bytes, a, sizeof a), percent(s->peak_bytes, s->limit_bytes));
  else
    fprintf(out, "  limit            unknown\n");
  if (s->fragmentation_at_peak < 0)
    fprintf(out, "  fragmentation    unknown (no reserved memory recorded)\n");
  else if (s->reserved_at_peak > s->peak_bytes)
    fprintf(out, "  fragmentation    %.1f%% at the peak (largest free block %s of %s free)\n",
            100.0 * s->fragmentation_at_peak, bytes_text(s->largest_free_at_peak, a, sizeof a),
            bytes_text(s->reserved_at_peak - s->peak_bytes, b, sizeof b));
  else
    fprintf(out, "  fragmentation    none at the peak (nothing free in reserved memory)\n");
  fprintf(out, "  buffers          %lld in this space, %zu live at the peak\n",
          (long long)s->n_buffers, s->n_buffers_at_peak);
}

static void write_buffer_row(FILE *out, const hbm_buffer_t *b, bool plan) {
  char size[32], unpadded[32], c[5][160];
  fprintf(out, "  %10s ", bytes_text(b->size, size, sizeof size));
  if (plan)
    fprintf(out, "%10s ", bytes_text(b->unpadded_size, unpadded, sizeof unpadded));
  fprintf(out, "%-12s %-28s %-22s %-16s %s\n", hbm_category_name(b->category),
          cell(b->op ? b->op : b->label, 28, c[0], sizeof c[0]),
          cell(b->shape, 22, c[1], sizeof c[1]), cell(b->group, 16, c[2], sizeof c[2]),
          cell_tail(b->source, 40, c[3], sizeof c[3]));
}

static void write_buffers(FILE *out, const hbm_profile_t *p, const hbm_analysis_t *a) {
  size_t n;
  const int64_t *idx = hbm_analysis_buffers_at_peak_by_size(a, &n);
  if (n == 0)
    return;
  bool plan = hbm_profile_kind(p) == HBM_PROFILE_PLAN;
  size_t shown = n < TEXT_BUFFERS ? n : TEXT_BUFFERS;
  fprintf(out, "\n  buffers live at the peak, largest first (%zu%s)\n", n,
          shown < n ? ", the largest 20 shown" : "");
  fprintf(out, "  %10s ", "size");
  if (plan)
    fprintf(out, "%10s ", "unpadded");
  fprintf(out, "%-12s %-28s %-22s %-16s %s\n", "category", "op", "shape", "group", "source");
  for (size_t i = 0; i < shown; i++)
    write_buffer_row(out, hbm_profile_buffer(p, idx[i]), plan);
  if (shown < n) {
    uint64_t rest = 0;
    for (size_t i = shown; i < n; i++)
      rest = hbm__bytes_add(rest, hbm_profile_buffer(p, idx[i])->size);
    char b[32];
    fprintf(out, "  ... and %zu more, %s in total\n", n - shown, bytes_text(rest, b, sizeof b));
  }
}

static bool is_category_name(const char *name) {
  for (int c = 0; c < HBM_CAT_COUNT; c++)
    if (!strcmp(name, hbm_category_name((hbm_category_t)c)))
      return true;
  return false;
}

/* One group's totals: live at the peak (the analysis's) and allocated over the whole profile. */
typedef struct group_row {
  const char *name;
  uint64_t peak_bytes, all_bytes;
  size_t peak_count, all_count;
} group_row_t;

static int group_row_desc(const void *x, const void *y) {
  const group_row_t *a = x, *b = y;
  if (a->peak_bytes != b->peak_bytes)
    return a->peak_bytes > b->peak_bytes ? -1 : 1;
  if (a->all_bytes != b->all_bytes)
    return a->all_bytes > b->all_bytes ? -1 : 1;
  return strcmp(a->name, b->name);
}

/* The analysis's groups at the peak, with what each allocated over the profile; *n rows. */
static group_row_t *group_rows(const hbm_analysis_t *a, size_t *n) {
  size_t n_peak, n_run;
  const hbm_group_total_t *g = hbm_analysis_groups(a, &n_peak);
  hbm_group_total_t *run = hbm__analysis_run_groups(a, &n_run);
  group_row_t *r = run ? malloc((n_peak + n_run + 1) * sizeof *r) : NULL;
  size_t rows = 0;
  for (size_t i = 0; r && i < n_peak; i++)
    r[rows++] = (group_row_t){g[i].name, g[i].bytes, 0, g[i].count, 0};
  for (size_t i = 0; r && i < n_run; i++) { /* every buffer is in one of these */
    size_t k = 0;
    while (k < rows && strcmp(r[k].name, run[i].name))
      k++;
    if (k == rows)
      r[rows++] = (group_row_t){.name = run[i].name};
    r[k].all_bytes = run[i].bytes;
    r[k].all_count = run[i].count;
  }
  free(run);
  if (r)
    qsort(r, rows, sizeof *r, group_row_desc);
  *n = rows;
  return r;
}

/* The group table of an analysis already made (the report's own: a big profile is not
 * analysed twice). */
static hbm_status_t write_group_rows(const hbm_analysis_t *a, const char *indent, FILE *out) {
  size_t n = 0;
  group_row_t *r = group_rows(a, &n);
  uint64_t peak = hbm_analysis_summary(a)->peak_bytes;
  if (!r)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory totalling groups");
  fprintf(out, "%s%-28s %29s  %s\n", indent, "", "live at the peak", "allocated over the run");
  for (size_t i = 0; i < n; i++) {
    char pb[32], ab[32];
    fprintf(out, "%s%-28s %10s %5.1f%% %3zu buffer%s %10s (%" PRIu64 " bytes) in %zu\n", indent,
            r[i].name, bytes_text(r[i].peak_bytes, pb, sizeof pb), percent(r[i].peak_bytes, peak),
            r[i].peak_count, r[i].peak_count == 1 ? " " : "s",
            bytes_text(r[i].all_bytes, ab, sizeof ab), r[i].all_bytes, r[i].all_count);
  }
  free(r);
  return ferror(out) ? hbm__error(HBM_ERR_IO, "cannot write the groups") : HBM_OK;
}

hbm_status_t hbm_report_groups_text(const hbm_profile_t *p, int space, const char *indent,
                                    FILE *out) {
  hbm_analysis_t *a = hbm_analyze(p, space);
  if (!a)
    return hbm_last_status();
  hbm_status_t s = write_group_rows(a, indent, out);
  hbm_analysis_free(a);
  return s;
}

static void write_totals(FILE *out, const hbm_profile_t *p, const hbm_analysis_t *a) {
  const hbm_summary_t *s = hbm_analysis_summary(a);
  char b[32];
  if (s->peak_bytes == 0)
    return;
  fprintf(out, "\n  at the peak by category\n");
  for (int c = 0; c < HBM_CAT_COUNT; c++)
    if (s->category_bytes[c])
      fprintf(out, "    %-14s %10s  %5.1f%%\n", hbm_category_name((hbm_category_t)c),
              bytes_text(s->category_bytes[c], b, sizeof b),
              percent(s->category_bytes[c], s->peak_bytes));
  size_t n;
  const hbm_group_total_t *g = hbm_analysis_groups(a, &n);
  bool tagged = false;
  for (size_t i = 0; i < n; i++)
    tagged |= !is_category_name(g[i].name);
  if (!tagged)
    return;
  if (hbm_profile_kind(p) == HBM_PROFILE_RUNTIME) { /* under hbm run: the calling libraries */
    fprintf(out, "\n  at the peak by group, and allocated over the run\n");
    write_group_rows(a, "    ", out);
    return;
  }
  fprintf(out, "\n  at the peak by group\n");
  for (size_t i = 0; i < n; i++)
    fprintf(out, "    %-24s %10s  %5.1f%%  (%zu buffers)\n", g[i].name,
            bytes_text(g[i].bytes, b, sizeof b), percent(g[i].bytes, s->peak_bytes), g[i].count);
}

static void write_indented(FILE *out, const char *text, const char *indent) {
  fputs(indent, out);
  for (const char *c = text; *c; c++) {
    fputc(*c, out);
    if (*c == '\n' && c[1])
      fputs(indent, out);
  }
  fputc('\n', out);
}

static void write_ooms(FILE *out, const hbm_profile_t *p, int space) {
  size_t n = 0;
  for (size_t i = 0; i < hbm_profile_oom_count(p); i++)
    n += hbm_profile_oom(p, i)->space == space;
  if (n == 0)
    return;
  fprintf(out, "\n  OOM events (%zu)\n", n);
  for (size_t i = 0; i < hbm_profile_oom_count(p); i++) {
    const hbm_oom_event_t *e = hbm_profile_oom(p, i);
    if (e->space != space)
      continue;
    char req[32], when[320];
    fprintf(out, "  - at %s: %s requested\n", when_text(p, e->step, when, sizeof when),
            e->requested ? bytes_text(e->requested, req, sizeof req) : "an unknown size");
    write_indented(out, e->message ? e->message : "", "      ");
  }
}

static void write_markers(FILE *out, const hbm_profile_t *p) {
  size_t n = hbm_profile_marker_count(p);
  if (n == 0)
    return;
  fprintf(out, "\nmarkers (%zu%s)\n", n, n > 20 ? ", the first 20 shown" : "");
  for (size_t i = 0; i < n && i < 20; i++) {
    const hbm_marker_t *m = hbm_profile_marker(p, i);
    fprintf(out, "  step %-8lld %s\n", (long long)m->step, m->text ? m->text : "");
  }
}

static hbm_status_t write_space_text(FILE *out, const hbm_profile_t *p, int space, int width) {
  hbm_analysis_t *a = hbm_analyze(p, space);
  if (!a)
    return hbm_last_status();
  const hbm_space_info_t *info = hbm_profile_space(p, space);
  fprintf(out, "\n== %s on %s ==\n",
          strcmp(info->name, "unknown") ? info->name : "memory of unknown type",
          info->device && *info->device ? info->device : "-");
  char key[512]; /* an XProf program: hbm's own plan of it beside XLA's (hlo_proto_text.c) */
  snprintf(key, sizeof key, "hbm_plan:%s", info->device ? info->device : "");
  const char *plan = info->color == 0 ? hbm_profile_meta(p, key) : NULL;
  if (plan)
    fprintf(out, "  %s\n", plan);
  write_numbers(out, p, hbm_analysis_summary(a));
  draw_chart(out, p, a, width);
  write_buffers(out, p, a);
  write_totals(out, p, a);
  write_ooms(out, p, space);
  hbm_analysis_free(a);
  return HBM_OK;
}

/* Spaces worth showing when the caller asked for all: those with buffers or OOMs. */
static bool space_has_content(const hbm_profile_t *p, int space) {
  if (hbm__space_holds_buffers(p, space))
    return true;
  for (size_t i = 0; i < hbm_profile_oom_count(p); i++)
    if (hbm_profile_oom(p, i)->space == space)
      return true;
  return false;
}

static hbm_status_t check_args(const hbm_profile_t *p, int space, FILE *out) {
  if (!p || !out)
    return hbm__error(HBM_ERR_INVALID, "report: NULL profile or stream");
  if (space < -1 || space >= hbm_profile_space_count(p))
    return hbm__error(HBM_ERR_INVALID, "memory space %d does not exist (the profile has %d)", space,
                      hbm_profile_space_count(p));
  return HBM_OK;
}

hbm_status_t hbm_report_text(const hbm_profile_t *p, int space, int width, FILE *out) {
  hbm_status_t s = check_args(p, space, out);
  if (s != HBM_OK)
    return s;
  write_header(out, p);
  int shown = 0;
  for (int i = 0; i < hbm_profile_space_count(p) && s == HBM_OK; i++)
    if (space == i || (space < 0 && space_has_content(p, i))) {
      s = write_space_text(out, p, i, width);
      shown++;
    }
  if (s == HBM_OK && shown == 0)
    fprintf(out, "\nno buffers: nothing was allocated in this profile\n");
  if (s == HBM_OK)
    hbm__step_plan_text(out, p); /* mode learn's plan, when the profile holds one */
  if (s == HBM_OK)
    write_markers(out, p);
  if (s == HBM_OK && ferror(out))
    s = hbm__error(HBM_ERR_IO, "cannot write the report");
  return s;
}

/* ---- JSON ---- */

static json_t *buffer_json(const hbm_profile_t *p, int64_t idx) {
  const hbm_buffer_t *b = hbm_profile_buffer(p, idx);
  return json_pack("{s:I, s:I, s:I, s:I, s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:I, s:I, s:o}",
                   "index", (json_int_t)idx, "size", hbm__json_bytes(b->size), "unpadded_size",
                   hbm__json_bytes(b->unpadded_size), "address", (json_int_t)b->address, "op",
                   hbm__json_string(b->op), "shape", hbm__json_string(b->shape), "category",
                   hbm_category_name(b->category), "group", hbm__json_string(b->group), "source",
                   hbm__json_string(b->source), "opcode", hbm__json_string(b->opcode), "label",
                   hbm__json_string(b->label), "start", (json_int_t)b->start, "end",
                   (json_int_t)hbm_buffer_span_end(b), "stack", hbm__json_string(b->stack));
}

static json_t *oom_json(const hbm_profile_t *p, const hbm_oom_event_t *e) {
  const hbm_space_info_t *info = hbm_profile_space(p, e->space);
  return json_pack("{s:I, s:I, s:o, s:o, s:I, s:o}", "step", (json_int_t)e->step, "time_ns",
                   (json_int_t)hbm_profile_step_time(p, e->step), "space",
                   hbm__json_string(info ? info->name : NULL), "device",
                   hbm__json_string(info ? info->device : NULL), "requested",
                   hbm__json_bytes(e->requested), "message", hbm__json_string(e->message));
}

static json_t *timeline_json(const hbm_analysis_t *a, int64_t n_steps) {
  json_t *arr = json_array();
  hbm_timeline_point_t pts[JSON_TIMELINE];
  size_t n = hbm_analysis_timeline(a, 0, n_steps, JSON_TIMELINE, pts);
  for (size_t i = 0; i < n; i++)
    json_array_append_new(arr, json_pack("{s:I, s:I, s:I, s:I}", "step", (json_int_t)pts[i].step,
                                         "bytes", hbm__json_bytes(pts[i].bytes), "unpadded",
                                         hbm__json_bytes(pts[i].unpadded), "reserved",
                                         hbm__json_bytes(pts[i].reserved)));
  return arr;
}

static json_t *groups_json(const hbm_analysis_t *a) {
  json_t *categories = json_object(), *groups = json_array();
  const hbm_summary_t *s = hbm_analysis_summary(a);
  for (int c = 0; c < HBM_CAT_COUNT; c++)
    json_object_set_new(categories, hbm_category_name((hbm_category_t)c),
                        json_integer(hbm__json_bytes(s->category_bytes[c])));
  size_t n;
  const hbm_group_total_t *g = hbm_analysis_groups(a, &n);
  for (size_t i = 0; i < n; i++)
    json_array_append_new(groups,
                          json_pack("{s:o, s:I, s:I}", "name", hbm__json_string(g[i].name), "bytes",
                                    hbm__json_bytes(g[i].bytes), "count", (json_int_t)g[i].count));
  return json_pack("{s:o, s:o}", "categories", categories, "groups", groups);
}

/* The numbers of one space; NULL (error set) when it cannot be analysed. */
static json_t *space_json(const hbm_profile_t *p, int space) {
  hbm_analysis_t *a = hbm_analyze(p, space);
  if (!a)
    return NULL;
  const hbm_summary_t *s = hbm_analysis_summary(a);
  const hbm_space_info_t *info = hbm_profile_space(p, space);
  json_t *o = json_pack(
      "{s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:I}",
      "space", hbm__json_string(info->name), "device", hbm__json_string(info->device), "peak_bytes",
      hbm__json_bytes(s->peak_bytes), "peak_step", (json_int_t)s->peak_step, "peak_time_ns",
      (json_int_t)s->peak_time_ns, "peak_unpadded_bytes", hbm__json_bytes(s->peak_unpadded_bytes),
      "padding_bytes", hbm__json_bytes(s->padding_bytes), "peak_reserved_bytes",
      hbm__json_bytes(s->peak_reserved_bytes), "reserved_at_peak",
      hbm__json_bytes(s->reserved_at_peak), "limit_bytes", hbm__json_bytes(s->limit_bytes),
      "largest_free_at_peak", hbm__json_bytes(s->largest_free_at_peak), "fragmentation_at_peak",
      isfinite(s->fragmentation_at_peak) ? s->fragmentation_at_peak : 0.0, "indefinite_bytes",
      hbm__json_bytes(s->indefinite_bytes), "argument_bytes", hbm__json_bytes(s->argument_bytes),
      "output_bytes", hbm__json_bytes(s->output_bytes), "temporary_bytes",
      hbm__json_bytes(s->temporary_bytes), "heap_bytes", hbm__json_bytes(s->heap_bytes),
      "n_buffers", (json_int_t)s->n_buffers);
  if (o && !s->peak_reserved_bytes) { /* no reservation events: unknown, as the text says */
    json_object_set_new(o, "peak_reserved_bytes", json_null());
    json_object_set_new(o, "reserved_at_peak", json_null());
  }
  size_t n;
  const int64_t *idx = hbm_analysis_buffers_at_peak_by_size(a, &n);
  json_t *buffers = json_array(), *ooms = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(buffers, buffer_json(p, idx[i]));
  for (size_t i = 0; i < hbm_profile_oom_count(p); i++)
    if (hbm_profile_oom(p, i)->space == space)
      json_array_append_new(ooms, oom_json(p, hbm_profile_oom(p, i)));
  json_object_set_new(o, "overflowed", json_boolean(s->overflowed));
  json_object_set_new(o, "buffers_at_peak", buffers);
  json_object_set_new(o, "oom_events", ooms);
  json_object_set_new(o, "timeline", timeline_json(a, s->n_steps));
  json_object_update_new(o, groups_json(a));
  hbm_analysis_free(a);
  return o;
}

static json_t *profile_json(const hbm_profile_t *p) {
  json_t *meta = json_object(), *markers = json_array();
  for (size_t i = 0; i < hbm_profile_meta_count(p); i++) {
    const char *k = hbm_profile_meta_key(p, i);
    json_object_set_new(meta, k, hbm__json_string(hbm_profile_meta(p, k)));
  }
  for (size_t i = 0; i < hbm_profile_marker_count(p); i++) {
    const hbm_marker_t *m = hbm_profile_marker(p, i);
    static const char *const kinds[] = {"text", "step_begin", "step_end"};
    json_array_append_new(markers, json_pack("{s:I, s:s, s:I, s:o}", "step", (json_int_t)m->step,
                                             "kind", kinds[m->kind], "value", (json_int_t)m->value,
                                             "text", hbm__json_string(m->text)));
  }
  return json_pack(
      "{s:o, s:s, s:I, s:I, s:o, s:o, s:o}", "profile", hbm__json_string(hbm_profile_name(p)),
      "kind", hbm_profile_kind(p) == HBM_PROFILE_PLAN ? "plan" : "runtime", "steps",
      (json_int_t)hbm_profile_step_count(p), "buffers", (json_int_t)hbm_profile_buffer_count(p),
      "lost", hbm__json_string(hbm_profile_meta(p, "lost")), "meta", meta, "markers", markers);
}

hbm_status_t hbm_report_json(const hbm_profile_t *p, int space, FILE *out) {
  hbm_status_t s = check_args(p, space, out);
  if (s != HBM_OK)
    return s;
  json_t *root = profile_json(p), *spaces = json_array();
  json_t *primary = NULL;
  uint64_t best = 0;
  for (int i = 0; i < hbm_profile_space_count(p) && s == HBM_OK; i++) {
    if (space >= 0 && i != space)
      continue;
    json_t *o = space_json(p, i);
    if (!o) {
      s = hbm_last_status() != HBM_OK ? hbm_last_status()
                                      : hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
      break;
    }
    uint64_t peak = (uint64_t)json_integer_value(json_object_get(o, "peak_bytes"));
    if (!primary || peak > best)
      primary = o, best = peak;
    json_array_append_new(spaces, o);
  }
  /* The top level repeats the space with the highest peak (or the one asked for). */
  if (primary)
    json_object_update(root, primary);
  else /* no memory space at all: the keys are still there */
    json_object_update_new(root, json_pack("{s:I, s:I, s:n, s:I, s:[], s:[]}", "peak_bytes",
                                           (json_int_t)0, "peak_step", (json_int_t)-1,
                                           "peak_reserved_bytes", "limit_bytes", (json_int_t)0,
                                           "buffers_at_peak", "oom_events"));
  json_object_set_new(root, "spaces", spaces);
  json_object_set_new(root, "step_plan", hbm__step_plan_json(p)); /* mode learn's, or null */
  if (s != HBM_OK) {
    json_decref(root);
    return s;
  }
  return hbm__write_json(out, root, "JSON report");
}
