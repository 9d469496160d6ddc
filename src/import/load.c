/* load.c — hbm_profile_load: recognises what a file is from its content (an .hbmtrace
 * profile, an RMM CSV log, HLO text, an XLA buffer-assignment or memory-usage-report dump, a
 * pasted out-of-memory error: src/import/oom_text*.c, a PyTorch memory snapshot pickle:
 * torch_snapshot.c, an XProf .xplane.pb / .hlo_proto.pb: xprof*.c, XProf's own memory_viewer
 * JSON: xprof_memory_viewer_json.c) and turns it into the one
 * profile model. HLO and XLA dumps are planned with default options and the caller takes the
 * plan's profile. */
#include "import/load.h"
#include "base/base.h"
#include "import/pickle.h"
#include "import/torch_snapshot.h"
#include "import/xprof.h"
#include "profile/index.h"
#include "profile/profile_build.h"
#include "profile/trace_format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

typedef enum format {
  FORMAT_UNKNOWN = 0,
  FORMAT_TRACE,
  FORMAT_RMM_CSV,
  FORMAT_HLO,
  FORMAT_BUFFER_ASSIGNMENT,
  FORMAT_MEMORY_REPORT,
  FORMAT_OOM_TEXT,
  FORMAT_TORCH_SNAPSHOT,
  FORMAT_XPROF,
  FORMAT_XPROF_MEMORY_VIEWER_JSON
} format_t;

/* The first line that is neither blank nor a '//' comment (HLO's line comments). */
static const char *first_content_line(const char *p, const char *end) {
  if (end - p >= 3 && !memcmp(p, "\xef\xbb\xbf", 3))
    p += 3;
  while (p < end) {
    const char *q = p;
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'))
      q++;
    if (q == end)
      break;
    bool comment = end - q >= 2 && q[0] == '/' && q[1] == '/';
    if (*q != '\n' && !comment)
      return q;
    const char *nl = memchr(q, '\n', (size_t)(end - q));
    if (!nl)
      break;
    p = nl + 1;
  }
  return end;
}

static bool starts_with(const char *p, const char *end, const char *prefix) {
  size_t n = strlen(prefix);
  return (size_t)(end - p) >= n && !strncmp(p, prefix, n);
}

/* A line "allocation N: size ..." anywhere: XLA's buffer assignment. */
static bool has_allocation_line(const char *p, const char *end) {
  for (const char *line = p; line < end;) {
    const char *q = line;
    while (q < end && *q == ' ')
      q++;
    if (starts_with(q, end, "allocation ")) {
      q += 11;
      const char *digits = q;
      while (q < end && *q >= '0' && *q <= '9')
        q++;
      if (q > digits && starts_with(q, end, ": size "))
        return true;
    }
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    line = nl ? nl + 1 : end;
  }
  return false;
}

/* An RMM log: its first line of content starts with its header's first word. */
static bool is_rmm_csv(const char *data, size_t len) {
  const char *end = data + len, *first = first_content_line(data, end);
  return (size_t)(end - first) >= 6 && !strncasecmp(first, "thread", 6);
}

static format_t detect(const char *path, const char *data, size_t len) {
  if (hbm__trace_is(data, len))
    return FORMAT_TRACE;
  if (hbm__xprof_is(path, (const uint8_t *)data, len))
    return FORMAT_XPROF;
  if (pk_looks_like_pickle((const uint8_t *)data, len))
    return FORMAT_TORCH_SNAPSHOT;
  if (hbm__xprof_memory_viewer_json_is(data, len))
    return FORMAT_XPROF_MEMORY_VIEWER_JSON;
  const char *end = data + len, *first = first_content_line(data, end);
  if (starts_with(first, end, "HloModule"))
    return FORMAT_HLO;
  if (is_rmm_csv(data, len))
    return FORMAT_RMM_CSV; /* its header; the parser says what is wrong if the rest is not */
  if (has_allocation_line(first, end))
    return FORMAT_BUFFER_ASSIGNMENT;
  if (strstr(first, "Memory Space:") || strstr(first, "cumulative_size"))
    return FORMAT_MEMORY_REPORT;
  if (hbm_oom_text_is(data, len)) /* a pasted OOM error: its peak buffers */
    return FORMAT_OOM_TEXT;
  return FORMAT_UNKNOWN;
}

/* ---- plans: the caller takes the plan's profile ---- */

static hbm_profile_t *load_plan(const char *path, const char *data, size_t len) {
  hbm_plan_options_t options;
  memset(&options, 0, sizeof options);
  hbm_plan_t *plan = hbm_plan_text(data, len, path, &options);
  if (!plan)
    return NULL;
  hbm_profile_t *p = hbm_plan_take_profile(plan);
  if (!p)
    hbm__error(HBM_ERR_INTERNAL, "%s: the plan has no profile", path);
  hbm_plan_free(plan);
  return p;
}

static hbm_profile_t *load_oom_text(const char *path, const char *data, size_t len) {
  hbm_oom_text_t *t = hbm_oom_text_parse(data, len, path);
  hbm_profile_t *p = t ? hbm_oom_text_to_profile(t, path) : NULL;
  hbm_oom_text_free(t);
  return p;
}

/* Text formats, from the file's bytes in memory (NUL-terminated: their parsers want that). */
static hbm_profile_t *load_text(const char *path, const char *data, size_t len) {
  hbm_profile_t *p = NULL;
  switch (detect(path, data, len)) {
  case FORMAT_HLO:
  case FORMAT_BUFFER_ASSIGNMENT:
  case FORMAT_MEMORY_REPORT: p = load_plan(path, data, len); break;
  case FORMAT_OOM_TEXT: p = load_oom_text(path, data, len); break;
  case FORMAT_XPROF_MEMORY_VIEWER_JSON:
    p = hbm__xprof_memory_viewer_json_load(path, data, len);
    break;
  case FORMAT_RMM_CSV: p = hbm__alloc_log_load(data, len, path); break;
  default:
    hbm__error(HBM_ERR_PARSE,
               "%s: not a profile hbm can read: expected an .hbmtrace file (magic '%s'), an RMM "
               "CSV log (header Thread,Time,Action,Pointer,Size,Stream), HLO text (starting with "
               "'HloModule'), a PyTorch memory snapshot (a pickle from "
               "torch.cuda.memory._dump_snapshot), an XProf .xplane.pb or .hlo_proto.pb or its "
               "memory_viewer JSON, an XLA "
               "dump (*-buffer-assignment.txt with 'allocation N: size' lines, "
               "*-memory-usage-report.txt), or a pasted out-of-memory error",
               path, HBM_TRACE_MAGIC);
    break;
  }
  return p;
}

/* About how much memory reading a file of this format takes, per its size (measured in
 * BENCHMARKS.md, "Big captures"; docs/limits.md): a snapshot's profile is about 0.8 of the
 * file, an XProf file's a fraction (most of it is device activity, not memory), an .hbmtrace
 * profile's about 8 bytes per byte of its records once decompressed. */
static uint64_t memory_needed(format_t format, const uint8_t *data, size_t len) {
  switch (format) {
  case FORMAT_TORCH_SNAPSHOT: return len;
  case FORMAT_XPROF: return len / 4;
  case FORMAT_TRACE: return 8 * hbm__trace_raw_bytes(data, len);
  default: return len;
  }
}

/* A file larger than memory allows is refused before it is read, saying so in bytes. */
static hbm_status_t check_memory(const char *path, format_t format, const uint8_t *data,
                                 size_t len) {
  uint64_t need = memory_needed(format, data, len), avail = hbm__memory_available();
  if (!avail || need <= avail)
    return HBM_OK;
  char a[32], b[32], c[32];
  return hbm__error(HBM_ERR_HOST_MEMORY,
                    "%s: a file of %s (%zu bytes); reading it takes about %s of memory and this "
                    "process has %s available now: refused before starting (docs/limits.md)",
                    path, hbm_format_bytes(len, a, sizeof a), len,
                    hbm_format_bytes(need, b, sizeof b), hbm_format_bytes(avail, c, sizeof c));
}

/* The format of a mapped file when it is one read from the mapping (binary formats and RMM
 * logs), else FORMAT_UNKNOWN: a text format, read from a copy. */
static format_t mapped_format(const char *path, const hbm__mapped_t *in) {
  if (hbm__trace_is(in->data, in->len))
    return FORMAT_TRACE;
  if (hbm__xprof_is(path, in->data, in->len))
    return FORMAT_XPROF;
  if (pk_looks_like_pickle(in->data, in->len))
    return FORMAT_TORCH_SNAPSHOT;
  if (is_rmm_csv((const char *)in->data, in->len))
    return FORMAT_RMM_CSV;
  return FORMAT_UNKNOWN;
}

/* A mapped file's profile; unmaps it. fd (or -1: path) is read again for a text format. Binary
 * formats and RMM logs are read from the mapping, whose pages go back as the reader passes
 * them; other text formats from a copy in memory. */
static hbm_profile_t *load_mapped(const char *path, hbm__mapped_t *in, int fd) {
  format_t format = mapped_format(path, in);
  if (format == FORMAT_UNKNOWN) {
    hbm__unmap(in);
    char *data;
    size_t len;
    hbm_status_t s =
        fd >= 0 ? hbm__read_fd(fd, path, &data, &len) : hbm__read_file(path, &data, &len);
    if (s != HBM_OK)
      return NULL;
    hbm_profile_t *p = load_text(path, data, len);
    free(data);
    return p;
  }
  if (check_memory(path, format, in->data, in->len) != HBM_OK) {
    hbm__unmap(in);
    return NULL;
  }
  hbm_profile_t *p = NULL;
  switch (format) {
  case FORMAT_TRACE: { /* blocks front to back: their pages go back as the reader passes */
    hbm__pager_t *pager = hbm__pager_start(in, 50);
    p = hbm__trace_parse(in->data, in->len, path, 0);
    hbm__pager_stop(pager);
    break;
  }
  case FORMAT_XPROF: { /* its walker goes back and forth: its pages go back every 50 ms */
    hbm__pager_t *pager = hbm__pager_start(in, 50);
    p = hbm__xprof_load(path, in->data, in->len);
    hbm__pager_stop(pager);
    break;
  }
  case FORMAT_TORCH_SNAPSHOT: p = hbm__torch_snapshot_load(in->data, in->len, path, in); break;
  case FORMAT_RMM_CSV: { /* line by line, front to back */
    hbm__pager_t *pager = hbm__pager_start(in, 50);
    p = hbm__alloc_log_load((const char *)in->data, in->len, path);
    hbm__pager_stop(pager);
    break;
  }
  default: break;
  }
  hbm__unmap(in);
  return p;
}

hbm_profile_t *hbm_profile_load(const char *path) {
  if (!path) {
    hbm__error(HBM_ERR_INVALID, "hbm_profile_load: no path");
    return NULL;
  }
  hbm__mapped_t in;
  return hbm__map_file(path, &in) == HBM_OK ? load_mapped(path, &in, -1) : NULL;
}

hbm_profile_t *hbm__profile_load_fd(int fd, const char *path) {
  hbm__mapped_t in;
  return hbm__map_fd(fd, path, &in) == HBM_OK ? load_mapped(path, &in, fd) : NULL;
}

/* The summary of a profile read in one pass: its index stream's bytes, stored as its index
 * when one is wanted, read back as from an index. */
static hbm_profile_t *summary_of(hbm_profile_t *read, const char *path, const struct stat *st,
                                 int64_t t0) {
  hbm__index_stream_t *stream = read ? hbm__profile_stream_of(read) : NULL;
  size_t len = 0;
  uint8_t *bytes = stream ? hbm__index_stream_bytes(stream, st, &len) : NULL;
  hbm_profile_free(read);
  if (!bytes)
    return NULL;
  if (hbm__index_wanted(path, hbm__now_ns() - t0))
    hbm__index_store(path, bytes, len); /* best effort: the next open is then milliseconds */
  return hbm__index_open_bytes(bytes, len, st, path, hbm_profile_load);
}

/* The one-pass summary of a mapped file (unmapped here) whose stat is st. */
static hbm_profile_t *summary_mapped(const char *path, hbm__mapped_t *in, const struct stat *st,
                                     int64_t t0) {
  format_t format = mapped_format(path, in);
  hbm_profile_t *read = NULL;
  if (format == FORMAT_TRACE || format == FORMAT_RMM_CSV) { /* front to back, pages given back */
    hbm__pager_t *pager = hbm__pager_start(in, 50);
    read = format == FORMAT_TRACE
               ? hbm__trace_parse_summary(in->data, in->len, path)
               : hbm__alloc_log_load_summary((const char *)in->data, in->len, path);
    hbm__pager_stop(pager);
  } else {
    hbm__error(HBM_ERR_INVALID, "%s: not a format read as a summary", path);
  }
  hbm__unmap(in);
  return summary_of(read, path, st, t0);
}

hbm_profile_t *hbm__profile_load_summary(const char *path) {
  struct stat st;
  hbm__mapped_t in;
  int64_t t0 = hbm__now_ns();
  if (stat(path, &st) != 0) {
    hbm__error(HBM_ERR_IO, "%s: %s", path, strerror(errno));
    return NULL;
  }
  return hbm__map_file(path, &in) == HBM_OK ? summary_mapped(path, &in, &st, t0) : NULL;
}

/* The same from the open file fd (left open). */
static hbm_profile_t *load_summary_fd(int fd, const char *path) {
  struct stat st;
  hbm__mapped_t in;
  int64_t t0 = hbm__now_ns();
  if (fstat(fd, &st) != 0) {
    hbm__error(HBM_ERR_IO, "%s: %s", path, strerror(errno));
    return NULL;
  }
  return hbm__map_fd(fd, path, &in) == HBM_OK ? summary_mapped(path, &in, &st, t0) : NULL;
}

hbm_profile_t *hbm__profile_load_first(const char *path, int fd) {
  hbm_profile_t *p = hbm__index_allowed() ? hbm__index_open(path, hbm_profile_load) : NULL;
  if (p || !hbm__summary_wanted(path))
    return p;
  return fd >= 0 ? load_summary_fd(fd, path) : hbm__profile_load_summary(path);
}
