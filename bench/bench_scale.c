/* bench_scale.c — big captures (issue 24): writes its own big inputs in each format, made by
 * repeating real ones by their formats' rules, and measures what a user waits for and the
 * memory it takes, beside the published figures of the tools users have today.
 *
 * Inputs (each in a logdir of its own under --dir):
 *   torch   a PyTorch memory snapshot: a real one's trace repeated (scale_torch.h), pickled
 *           as Python pickles _dump_snapshot's dict; its expected peak is memory_viz's
 *           Active Memory Timeline maximum, computed as memory_viz computes it;
 *   xplane  an XProf .xplane.pb: a real one's lines repeated, the allocator's too, its
 *           programs as they are (scale_xplane.h): its peaks are the real file's;
 *           xplane-activity (not in the default list) repeats only the activity lines;
 *   rmm     an RMM allocation log: a real one's balanced pointers repeated (scale_rmm.h);
 *   trace   hbm's own capture, recorded by hbm's recorder in a child process (--events
 *           allocations and frees, a step marker every 100k), its resident memory sampled
 *           while it records: it stays constant.
 * Measured, each hbm command a child process (wall time, CPU time = user + system, peak
 * resident memory from wait4), the file's pages dropped from the page cache first where
 * "cold" is said (posix_fadvise; what the kernel keeps anyway is not in our hands):
 *   report cold       `hbm report FILE` with no index (HBM_INDEX=never), the file read from
 *                     the disk; again with the file in the page cache;
 *   report + index    the same writing the index (HBM_INDEX=always);
 *   report indexed    `hbm report FILE` reading the index; its output must equal the cold one;
 *   view cold         the viewer's first view without an index: runs, profiles, profile,
 *                     summary (the load) — the time to the first summary;
 *   view indexed      the same with the index; then a timeline zoomed to 1/1000 of the steps,
 *                     the time until the whole file is read (the first request that needs
 *                     every buffer waits for it), the allocation view zoomed to 1/1000 with
 *                     its raster, and a search over every buffer;
 *   peaks             `hbm report --json` peaks against the expected ones: exact or FAIL.
 * The exit status is 1 when an input could not be made, a command failed, an indexed report
 * differed from the cold one or a peak was not exact; timing targets are reported, not
 * enforced (a shared machine's load moves them).
 *
 * Usage: bench_scale [--size MiB] [--formats torch,xplane,xplane-activity,rmm,trace] [--events N]
 * [--dir DIR]
 *                    [--keep] [--hbm PATH] [--torch-src F] [--xplane-src F] [--rmm-src F]
 *   --size     each generated file's size (default 1024); --events the recorder's events
 *              (default 100000 per MiB of --size: 10^8 for 1 GiB, whose file is smaller)
 *   --dir      where the inputs go (default a new /tmp/hbm-bench-scale-*, removed after
 *              unless --keep)
 *   --hbm      the hbm binary (default ../hbm beside this program's directory)
 * BENCHMARKS.md ("Big captures") quotes its output. */
#include "hbm.h"
#include "machine.h"
#include "profile/index.h"
#include "profile/recorder.h"
#include "scale_rmm.h"
#include "scale_torch.h"
#include "scale_xplane.h"
#ifdef HBM_BENCH_VIEWER
#include "viewer/viewer.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN "2026_01_01_00_00_00"
#define REAL_TORCH                                                                                 \
  "/../shared/real/torch/"                                                                         \
  "Wedsonlin_assignment2-systems__results_medium_128_training_memory_snapshot_"                    \
  "_0db7d8c.pickle"
#define REAL_XPLANE                                                                                \
  "/../shared/real/xprof/tensorflow_profiler__GPU-multi-worker__34.83.195.179_6003.xplane.pb"
#define REAL_RMM "/../shared/traces/gpt-medium-ctx128-train-gpu.csv"

typedef struct options {
  uint64_t size;   /* bytes per generated file */
  uint64_t events; /* the recorder's */
  const char *dir, *hbm, *formats;
  const char *torch_src, *xplane_src, *rmm_src;
  bool keep;
} options_t;

typedef struct measured {
  double wall_s, cpu_s;
  long rss_kb;
  int status;
} measured_t;

static int failures;

static void fail(const char *fmt, ...) HBM_PRINTF(1, 2);
static void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("  FAIL: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  failures++;
}

static double now_s(void) { return (double)hbm__now_ns() / 1e9; }

static void measured_from(measured_t *m, const struct rusage *ru, double t0, int status) {
  m->wall_s = now_s() - t0;
  m->cpu_s = (double)ru->ru_utime.tv_sec + (double)ru->ru_utime.tv_usec / 1e6 +
             (double)ru->ru_stime.tv_sec + (double)ru->ru_stime.tv_usec / 1e6;
  m->rss_kb = ru->ru_maxrss;
  m->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Runs `hbm ARGS...` with HBM_INDEX=index_mode, its output into out_path. */
static measured_t run_hbm(const options_t *o, const char *index_mode, const char *out_path,
                          const char *a1, const char *a2, const char *a3) {
  measured_t m = {0};
  double t0 = now_s();
  pid_t pid = fork();
  if (pid == 0) {
    setenv("HBM_INDEX", index_mode, 1);
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
      _exit(126);
    execl(o->hbm, "hbm", a1, a2, a3, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  if (pid < 0 || wait4(pid, &status, 0, &ru) != pid) {
    m.status = -1;
    return m;
  }
  measured_from(&m, &ru, t0, status);
  return m;
}

/* Drops the file's pages from the page cache (written back first), so a read is cold. */
static void evict(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0)
    return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

static void remove_index(const char *path) {
  char index[4200];
  for (int writable = 0; writable < 2; writable++)
    if (hbm__index_path(path, writable, index, sizeof index))
      unlink(index);
}

static char *slurp(const char *path) {
  char *data = NULL;
  size_t len = 0;
  return hbm__read_file(path, &data, &len) == HBM_OK ? data : NULL;
}

static double mb(long kb) { return (double)kb / 1024.0; }

static void print_run(const char *what, const measured_t *m, uint64_t file, const char *target) {
  printf("  %-30s %8.2f s wall %8.2f s CPU %9.0f MB  %5.2fx the file   %s\n", what, m->wall_s,
         m->cpu_s, mb(m->rss_kb), (double)m->rss_kb * 1024.0 / (double)(file ? file : 1), target);
}

/* The "peak_bytes" values of a JSON report, in order. */
static size_t json_peaks(const char *text, uint64_t *out, size_t cap) {
  size_t n = 0;
  for (const char *p = text; p && (p = strstr(p, "\"peak_bytes\":")); p++)
    if (n < cap)
      out[n++] = strtoull(p + 13 + strspn(p + 13, " "), NULL, 10);
  return n;
}

/* ---- one format ---- */

typedef struct input {
  const char *format, *what;
  char path[4600], logdir[4200], run[256], file[256];
  uint64_t size, events;
  uint64_t expected[64];
  size_t n_expected;
  const char *anchor; /* the published figure */
} input_t;

/* ---- the viewer, in a child process ---- */

typedef struct view_times {
  double first_summary_ms, zoom_timeline_ms, full_ms, zoom_alloc_ms, search_ms;
  bool from_index, ok;
  char error[256];
} view_times_t;

#ifdef HBM_BENCH_VIEWER
static bool request(hbm__viewer_t *v, const char *url, double *ms, char **body, char *error,
                    size_t cap) {
  hbm__response_t r;
  double t0 = now_s();
  hbm__viewer_handle_url(v, "GET", url, &r);
  if (ms)
    *ms = (now_s() - t0) * 1000.0;
  bool ok = r.status == 200;
  if (!ok)
    snprintf(error, cap, "%s answered %d: %.120s", url, r.status, r.body ? r.body : "");
  if (body)
    *body = ok ? strndup(r.body, r.len) : NULL;
  hbm__response_free(&r);
  return ok;
}

static int64_t json_int_after(const char *body, const char *key) {
  const char *p = body ? strstr(body, key) : NULL;
  return p ? strtoll(p + strlen(key) + strspn(p + strlen(key), " "), NULL, 10) : -1;
}

static void view_child(const char *logdir, const char *run, const char *file, view_times_t *t) {
  hbm__viewer_t *v = hbm__viewer_new(logdir);
  if (!v) {
    snprintf(t->error, sizeof t->error, "viewer: %s", hbm_last_error());
    return;
  }
  char q[600], url[1400];
  snprintf(q, sizeof q, "run=%s&profile=%s", run, file);
  double t0 = now_s();
  char *body = NULL;
  snprintf(url, sizeof url, "/api/profiles?run=%s", run);
  bool ok = request(v, "/api/runs", NULL, NULL, t->error, sizeof t->error) &&
            request(v, url, NULL, NULL, t->error, sizeof t->error);
  snprintf(url, sizeof url, "/api/profile?%s", q);
  ok = ok && request(v, url, NULL, &body, t->error, sizeof t->error);
  t->from_index = body && strstr(body, "\"from_index\": true");
  free(body);
  body = NULL;
  snprintf(url, sizeof url, "/api/summary?%s", q);
  ok = ok && request(v, url, NULL, &body, t->error, sizeof t->error);
  t->first_summary_ms = (now_s() - t0) * 1000.0;
  int64_t steps = json_int_after(body, "\"n_steps\":");
  free(body);
  int64_t from = steps / 2, to = steps / 2 + (steps / 1000 > 2 ? steps / 1000 : 2);
  snprintf(url, sizeof url, "/api/timeline?%s&from=%lld&to=%lld&points=1300", q, (long long)from,
           (long long)to);
  ok = ok && request(v, url, &t->zoom_timeline_ms, NULL, t->error, sizeof t->error);
  snprintf(url, sizeof url, "/api/allocations?%s&limit=1", q); /* waits for the whole file */
  ok = ok && request(v, url, NULL, NULL, t->error, sizeof t->error);
  t->full_ms = (now_s() - t0) * 1000.0;
  snprintf(url, sizeof url, "/api/allocations?%s&from=%lld&to=%lld&limit=4000&cols=620&rows=170", q,
           (long long)from, (long long)to);
  ok = ok && request(v, url, &t->zoom_alloc_ms, NULL, t->error, sizeof t->error);
  snprintf(url, sizeof url, "/api/allocations?%s&q=a&limit=3000&cols=620&rows=170", q);
  ok = ok && request(v, url, &t->search_ms, NULL, t->error, sizeof t->error);
  t->ok = ok;
  hbm__viewer_free(v);
}
#endif

/* Runs the viewer on logdir in a child process: its times, and its peak memory in *m. */
static view_times_t run_view(const input_t *in, const char *index_mode, measured_t *m) {
  view_times_t t = {0};
#ifdef HBM_BENCH_VIEWER
  int fds[2];
  if (pipe(fds) != 0)
    return t;
  double t0 = now_s();
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    setenv("HBM_INDEX", index_mode, 1);
    view_times_t c = {0};
    view_child(in->logdir, in->run, in->file, &c);
    ssize_t w = write(fds[1], &c, sizeof c);
    _exit(w == (ssize_t)sizeof c ? 0 : 1);
  }
  close(fds[1]);
  if (pid < 0 || read(fds[0], &t, sizeof t) != (ssize_t)sizeof t)
    snprintf(t.error, sizeof t.error, "the viewer's process ended without an answer");
  close(fds[0]);
  int status = 0;
  struct rusage ru;
  if (pid > 0 && wait4(pid, &status, 0, &ru) == pid)
    measured_from(m, &ru, t0, status);
#else
  (void)in, (void)index_mode, (void)m;
  snprintf(t.error, sizeof t.error, "built without the viewer");
#endif
  return t;
}

static void measure(const options_t *o, input_t *in) {
  char out[4300], out2[4300];
  snprintf(out, sizeof out, "%s.report-cold.txt", in->logdir);
  snprintf(out2, sizeof out2, "%s.report-indexed.txt", in->logdir);
  remove_index(in->path);
  evict(in->path);
  measured_t cold = run_hbm(o, "never", out, "report", in->path, NULL);
  if (cold.status != 0) {
    char *text = slurp(out);
    fail("hbm report %s: exit %d: %.300s", in->path, cold.status, text ? text : "");
    free(text);
    return;
  }
  print_run("hbm report, cold", &cold, in->size, "target <= 5 s per GiB, <= 1.0x");
  measured_t cached = run_hbm(o, "never", out2, "report", in->path, NULL);
  print_run("  the same, file in page cache", &cached, in->size, "");
  evict(in->path);
  measured_t v_rss = {0};
  view_times_t vc = run_view(in, "never", &v_rss);
  if (vc.ok)
    printf("  %-30s %8.2f s to the first summary, %.0f MB  %5.2fx the file   target <= 3 s per "
           "GiB\n",
           "hbm view, cold", vc.first_summary_ms / 1e3, mb(v_rss.rss_kb),
           (double)v_rss.rss_kb * 1024.0 / (double)in->size);
  else if (strcmp(vc.error, "built without the viewer"))
    fail("hbm view, cold: %s", vc.error);
  measured_t writing = run_hbm(o, "always", out2, "report", in->path, NULL);
  char index[4700];
  struct stat st;
  if (!hbm__index_path(in->path, false, index, sizeof index) || stat(index, &st) != 0)
    fail("hbm report wrote no index for %s", in->path);
  char size[32];
  hbm_format_bytes(st.st_size, size, sizeof size);
  print_run("hbm report, writing the index", &writing, in->size, "");
  printf("  %-30s %s (%.4fx the file)\n", "the index", size, (double)st.st_size / (double)in->size);
  measured_t indexed = run_hbm(o, "always", out2, "report", in->path, NULL);
  print_run("hbm report, with the index", &indexed, in->size, "target <= 0.5 s");
  char *a = slurp(out), *b = slurp(out2);
  if (indexed.status != 0 || !a || !b || strcmp(a, b))
    fail("the report read from the index differs from the cold one (%s, %s)", out, out2);
  free(a);
  free(b);
  view_times_t vi = run_view(in, "always", &v_rss);
  if (vi.ok) {
    printf("  %-30s %8.3f s to the first summary%s; a timeline zoomed to 1/1000 in %.0f ms\n",
           "hbm view, with the index", vi.first_summary_ms / 1e3,
           vi.from_index ? " (from the index)" : "", vi.zoom_timeline_ms);
    printf("  %-30s whole file read after %.2f s; allocations zoomed to 1/1000 in %.0f ms, "
           "searched in %.0f ms; %.0f MB  %5.2fx the file\n",
           "", vi.full_ms / 1e3, vi.zoom_alloc_ms, vi.search_ms, mb(v_rss.rss_kb),
           (double)v_rss.rss_kb * 1024.0 / (double)in->size);
  } else if (strcmp(vi.error, "built without the viewer")) {
    fail("hbm view, with the index: %s", vi.error);
  }
  measured_t js = run_hbm(o, "always", out2, "report", "--json", in->path);
  char *json = slurp(out2);
  uint64_t got[64];
  size_t n = json && js.status == 0 ? json_peaks(json, got, 64) : 0;
  free(json);
  bool exact = n >= in->n_expected && in->n_expected > 0;
  for (size_t i = 0; exact && i < in->n_expected; i++) {
    bool found = false;
    for (size_t k = 0; k < n && !found; k++)
      found = got[k] == in->expected[i];
    exact = found;
  }
  if (exact)
    printf("  %-30s %llu bytes%s: exact\n", "peak", (unsigned long long)in->expected[0],
           in->n_expected > 1 ? " (and every other space's)" : "");
  else
    fail("peak: expected %llu bytes, hbm says %llu", (unsigned long long)in->expected[0],
         (unsigned long long)(n ? got[0] : 0));
  printf("  anchor: %s\n", in->anchor);
}

static bool wanted(const options_t *o, const char *format) {
  const char *p = strstr(o->formats, format);
  size_t n = strlen(format);
  return p && (p == o->formats || p[-1] == ',') && (p[n] == ',' || p[n] == '\0');
}

static bool prepare(const options_t *o, input_t *in, const char *name) {
  snprintf(in->logdir, sizeof in->logdir, "%s/%s", o->dir, in->format);
  snprintf(in->file, sizeof in->file, "%s", name);
  snprintf(in->run, sizeof in->run, RUN);
  char run[4300];
  snprintf(run, sizeof run, "%s/plugins/profile/" RUN, in->logdir);
  snprintf(in->path, sizeof in->path, "%s/%s", run, name);
  char cmd[4400];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", run);
  return system(cmd) == 0;
}

static void report_input(const input_t *in, double gen_s, int reps) {
  char size[32];
  char events[48] = "";
  if (in->events)
    snprintf(events, sizeof events, ", %llu events", (unsigned long long)in->events);
  printf("\n%s: %s (%llu bytes)%s, %d repetitions, written in %.1f s\n", in->what,
         hbm_format_bytes(in->size, size, sizeof size), (unsigned long long)in->size, events, reps,
         gen_s);
}

static uint64_t file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static void bench_torch(const options_t *o) {
  input_t in = {.format = "torch",
                .what = "PyTorch memory snapshot",
                .anchor = "PyTorch's memory_viz lags past 500 MB and crashes the browser at 1 GB "
                          "(pytorch/pytorch#155889, #176290)"};
  if (!prepare(o, &in, "snapshot.pickle"))
    return fail("cannot make %s", in.logdir);
  double t0 = now_s();
  int reps = 0;
  if (write_torch(o->torch_src, in.path, o->size, &in.expected[0], &in.events, &reps) != HBM_OK)
    return fail("torch: %s", hbm_last_error());
  in.n_expected = 1;
  in.size = file_size(in.path);
  report_input(&in, now_s() - t0, reps);
  printf("  %-30s %llu bytes, as PyTorch's memory_viz computes it\n", "expected peak",
         (unsigned long long)in.expected[0]);
  measure(o, &in);
}

static void bench_xplane(const options_t *o, bool memory) {
  input_t in = {.format = memory ? "xplane" : "xplane-activity",
                .what = memory ? "XProf .xplane.pb (every line repeated)"
                               : "XProf .xplane.pb (activity repeated, the allocator's lines once)",
                .anchor = "TensorBoard's profiler: 20-30 GB of memory and ~40 s for a ~1 GB "
                          ".xplane.pb (tensorflow/tensorboard#6132)"};
  if (!prepare(o, &in, "host.xplane.pb"))
    return fail("cannot make %s", in.logdir);
  char out[4300];
  snprintf(out, sizeof out, "%s.source.json", in.logdir);
  measured_t src = run_hbm(o, "never", out, "report", "--json", o->xplane_src);
  char *json = slurp(out);
  in.n_expected = src.status == 0 && json ? json_peaks(json, in.expected, 64) : 0;
  free(json);
  if (!in.n_expected)
    return fail("xplane: hbm report --json %s gave no peak", o->xplane_src);
  double t0 = now_s();
  int reps = 0;
  if (write_xplane(o->xplane_src, in.path, o->size, memory, &reps) != HBM_OK)
    return fail("xplane: %s", hbm_last_error());
  in.size = file_size(in.path);
  report_input(&in, now_s() - t0, reps);
  printf("  %-30s %llu bytes (the real file's peaks: %s)\n", "expected peak",
         (unsigned long long)in.expected[0],
         memory ? "each repetition has the same allocations, with the same bytes in use"
                : "its allocator's lines are as they are");
  measure(o, &in);
}

static void bench_rmm(const options_t *o) {
  input_t in = {.format = "rmm",
                .what = "RMM allocation log",
                .anchor = "no published figure for RMM logs this big"};
  if (!prepare(o, &in, "log.csv"))
    return fail("cannot make %s", in.logdir);
  double t0 = now_s();
  int reps = 0;
  if (write_rmm(o->rmm_src, in.path, o->size, &in.expected[0], &in.events, &reps) != HBM_OK)
    return fail("rmm: %s", hbm_last_error());
  in.n_expected = 1;
  in.size = file_size(in.path);
  report_input(&in, now_s() - t0, reps);
  measure(o, &in);
}

/* ---- hbm's recorder ---- */

typedef struct recorded {
  char path[4096];
  uint64_t peak;
  long rss_kb[10]; /* at each tenth of the events */
  double seconds;
  bool ok;
} recorded_t;

static long rss_now_kb(void) {
  char line[128];
  bench_read_line("/proc/self/status", "VmRSS", line, sizeof line);
  return atol(line);
}

static void record_child(const char *logdir, uint64_t events, recorded_t *r) {
  if (hbm_profiler_start(logdir) != HBM_OK)
    return;
  int id = hbm__rec_device_open("bench0", "bfc", 1ull << 40, NULL, NULL);
  static const hbm_tag_t tags[4] = {
      {"layer/dot", "f32[1024,1024]", HBM_CAT_TEMPORARY, "activations", "model.py:1"},
      {"layer/add", NULL, HBM_CAT_TEMPORARY, "activations", NULL},
      {"opt/m", NULL, HBM_CAT_PARAMETER, "optimizer", NULL},
      {NULL, NULL, 0, NULL, NULL}};
  uint64_t size_of[64] = {0}, live = 0;
  double t0 = now_s();
  uint64_t pairs = events / 2, tenth = pairs / 10 ? pairs / 10 : 1;
  for (uint64_t i = 0; i < pairs; i++) {
    unsigned k = (unsigned)(i * 2654435761u % 64);
    uint64_t address = 0x7f0000000000ull + (uint64_t)k * (1ull << 30);
    if (size_of[k]) {
      hbm__rec_free(id, address);
      live -= size_of[k];
    }
    size_of[k] = 4096 * (1 + i % 97);
    hbm__rec_alloc(id, address, size_of[k], size_of[k], &tags[i % 4]);
    live += size_of[k];
    r->peak = live > r->peak ? live : r->peak;
    if (i % 50000 == 0)
      hbm_profiler_step_begin((int64_t)(i / 50000));
    if (i % tenth == 0 && i / tenth < 10)
      r->rss_kb[i / tenth] = rss_now_kb();
  }
  for (unsigned k = 0; k < 64; k++)
    if (size_of[k])
      hbm__rec_free(id, 0x7f0000000000ull + (uint64_t)k * (1ull << 30));
  hbm__rec_device_close(id);
  snprintf(r->path, sizeof r->path, "%s", hbm_profiler_path() ? hbm_profiler_path() : "");
  r->ok = hbm_profiler_stop() == HBM_OK;
  r->seconds = now_s() - t0;
}

static void bench_trace(const options_t *o) {
  input_t in = {.format = "trace",
                .what = "hbm's own capture (.hbmtrace)",
                .anchor = "XLA's trace stops at 1M events; PyTorch's history buffer drops the "
                          "start of long runs"};
  if (!prepare(o, &in, "unused"))
    return fail("cannot make %s", in.logdir);
  int fds[2];
  recorded_t r = {0};
  if (pipe(fds) != 0)
    return fail("pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    recorded_t c = {0};
    record_child(in.logdir, o->events, &c);
    ssize_t w = write(fds[1], &c, sizeof c);
    _exit(w == (ssize_t)sizeof c ? 0 : 1);
  }
  close(fds[1]);
  bool got = pid > 0 && read(fds[0], &r, sizeof r) == (ssize_t)sizeof r;
  close(fds[0]);
  int status;
  if (pid > 0)
    waitpid(pid, &status, 0);
  if (!got || !r.ok || !r.path[0])
    return fail("the recorder did not write a capture (%s)", r.path);
  snprintf(in.path, sizeof in.path, "%s", r.path);
  snprintf(in.file, sizeof in.file, "%s", hbm__base_name(r.path));
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", r.path);
  snprintf(in.run, sizeof in.run, "%s", hbm__base_name(dirname(dir)));
  in.size = file_size(in.path);
  in.events = o->events / 2 * 2;
  in.expected[0] = r.peak;
  in.n_expected = 1;
  report_input(&in, r.seconds, 1);
  long lo = r.rss_kb[1], hi = r.rss_kb[1];
  for (int i = 1; i < 10; i++) {
    lo = r.rss_kb[i] < lo ? r.rss_kb[i] : lo;
    hi = r.rss_kb[i] > hi ? r.rss_kb[i] : hi;
  }
  /* Constant: what varies is the queue of events waiting for the writer thread, which the
   * recorder bounds (recorder.h), plus 4 MiB for its block buffers; never the events' count. */
  long bound_kb = (long)((HBM__REC_QUEUE_BOUND + HBM__REC_READY_BYTES) >> 10) + 4096;
  printf("  %-30s %.1f to %.1f MB resident from 10%% to 90%% of the events (bound: the lowest "
         "+ %.0f MB): %s\n",
         "recording", mb(lo), mb(hi), mb(bound_kb), hi <= lo + bound_kb ? "constant" : "GROWING");
  if (hi > lo + bound_kb)
    fail("the recording process grew from %ld to %ld kB", lo, hi);
  measure(o, &in);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

int main(int argc, char **argv) {
  options_t o = {.size = 1024ull << 20,
                 .formats = "torch,xplane,rmm,trace",
                 .torch_src = HBM_SOURCE_DIR REAL_TORCH,
                 .xplane_src = HBM_SOURCE_DIR REAL_XPLANE,
                 .rmm_src = HBM_SOURCE_DIR REAL_RMM};
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--keep")) {
      o.keep = true;
      continue;
    }
    if (!v) {
      fprintf(stderr, "bench_scale: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--size"))
      o.size = strtoull(v, NULL, 10) << 20;
    else if (!strcmp(argv[i], "--events"))
      o.events = strtoull(v, NULL, 10);
    else if (!strcmp(argv[i], "--formats"))
      o.formats = v;
    else if (!strcmp(argv[i], "--dir"))
      o.dir = v;
    else if (!strcmp(argv[i], "--hbm"))
      o.hbm = v;
    else if (!strcmp(argv[i], "--torch-src"))
      o.torch_src = v;
    else if (!strcmp(argv[i], "--xplane-src"))
      o.xplane_src = v;
    else if (!strcmp(argv[i], "--rmm-src"))
      o.rmm_src = v;
    else {
      fprintf(stderr, "bench_scale: unknown option %s\n", argv[i]);
      return 2;
    }
    i++;
  }
  if (!o.size) {
    fprintf(stderr, "bench_scale: --size must be at least 1 (MiB)\n");
    return 2;
  }
  if (!o.events)
    o.events = (o.size >> 20) * 100000;
  char hbm[4200], self[4096];
  if (!o.hbm) {
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    snprintf(hbm, sizeof hbm, "%s/../hbm", dirname(self));
    o.hbm = hbm;
  }
  if (access(o.hbm, X_OK) != 0) {
    fprintf(stderr, "bench_scale: no hbm binary at %s (--hbm PATH)\n", o.hbm);
    return 1;
  }
  char tmp[] = "/tmp/hbm-bench-scale-XXXXXX";
  if (!o.dir && !(o.dir = mkdtemp(tmp))) {
    fprintf(stderr, "bench_scale: cannot make a directory in /tmp\n");
    return 1;
  }
  setvbuf(stdout, NULL, _IOLBF, 0); /* each line as it comes (the runs are long) */
  bench_print_machine();
  printf("bench_scale: files of %llu MiB in %s; hbm %s\n", (unsigned long long)(o.size >> 20),
         o.dir, o.hbm);
  if (wanted(&o, "torch"))
    bench_torch(&o);
  if (wanted(&o, "xplane"))
    bench_xplane(&o, true);
  if (wanted(&o, "xplane-activity"))
    bench_xplane(&o, false);
  if (wanted(&o, "rmm"))
    bench_rmm(&o);
  if (wanted(&o, "trace"))
    bench_trace(&o);
  if (!o.keep)
    nftw(o.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  printf("\n%s\n", failures ? "bench_scale: FAILED (above)" : "bench_scale: every peak exact");
  return failures ? 1 : 0;
}
