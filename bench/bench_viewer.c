/* bench_viewer.c — how fast the viewer's JSON API answers on a big profile: a runtime profile
 * of about 1M allocator events (tests/viewer_fixtures.h: a training loop, ~500k buffers) is
 * saved as an .hbmtrace in a temporary logdir, then every endpoint the page calls is timed
 * through the request handler (no socket): the cold first view (load + analysis + the page's
 * first requests) once, then each request the median of several runs.
 *
 * Usage: bench_viewer [--events N] [--runs R] [--write DIR]
 *   --write DIR: write the logdir to DIR and keep it (bench/viewer_browser_bench.sh serves it
 *   to the browser benchmark). */
#include "viewer/viewer.h"

#include "../tests/viewer_fixtures.h"
#include "machine.h"

#include <ftw.h>
#include <stdlib.h>
#include <string.h>

#define RUN "2026_01_01_00_00_00"
#define FILE_NAME "bench.hbmtrace"
#define Q "run=" RUN "&profile=" FILE_NAME

static hbm__viewer_t *viewer;

/* One request through the handler; returns its time in ms (exits on a non-200 answer). */
static double timed_request(const char *url, size_t *bytes) {
  hbm__response_t r;
  int64_t t0 = hbm__now_ns();
  hbm__viewer_handle_url(viewer, "GET", url, &r);
  double ms = (double)(hbm__now_ns() - t0) / 1e6;
  if (r.status != 200) {
    fprintf(stderr, "bench_viewer: %s answered %d: %.*s\n", url, r.status, (int)r.len, r.body);
    exit(1);
  }
  if (bytes)
    *bytes = r.len;
  hbm__response_free(&r);
  return ms;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Times url `runs` times. Each run adds an argument the endpoints ignore (bench_run=i), so
 * the answer is computed each time rather than taken from the answers kept per profile;
 * with keep, the same request is repeated and served from them. */
static void bench_request(const char *name, const char *url, int runs, bool keep) {
  double t[64];
  size_t bytes = 0;
  char full[2048];
  if (runs > 64)
    runs = 64;
  for (int i = 0; i < runs; i++) {
    snprintf(full, sizeof full, "%s%cbench_run=%d", url, strchr(url, '?') ? '&' : '?',
             keep ? -1 : i);
    t[i] = timed_request(full, &bytes);
  }
  qsort(t, (size_t)runs, sizeof t[0], cmp_double);
  printf("%-34s median %8.2f ms   min %8.2f   max %8.2f   %8zu bytes\n", name, t[runs / 2], t[0],
         t[runs - 1], bytes);
}

static void bench(const char *name, const char *url, int runs) {
  bench_request(name, url, runs, false);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  return remove(path);
}

static void write_logdir(const char *dir, int64_t events) {
  char run[4200];
  snprintf(run, sizeof run, "%s/plugins/profile/%s", dir, RUN);
  int64_t t0 = hbm__now_ns();
  hbm_profile_t *p = vf_runtime_profile("bench", events, 11, true);
  if (!p || vf_mkdirs(run) != 0) {
    fprintf(stderr, "bench_viewer: cannot build the profile: %s\n", hbm_last_error());
    exit(1);
  }
  printf("profile: %lld events, %lld buffers, built in %.0f ms\n",
         (long long)hbm_profile_step_count(p), (long long)hbm_profile_buffer_count(p),
         (double)(hbm__now_ns() - t0) / 1e6);
  if (vf_save(p, run, FILE_NAME) != 0)
    exit(1);
}

int main(int argc, char **argv) {
  bench_print_machine();
  int64_t events = 1000000;
  int runs = 9;
  const char *keep = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--events"))
      events = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--runs"))
      runs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--write"))
      keep = argv[i + 1];
  }
  char tmp[] = "/tmp/hbm-bench-viewer-XXXXXX";
  const char *dir = keep ? keep : mkdtemp(tmp);
  if (!dir)
    return 1;
  write_logdir(dir, events);
  if (keep) {
    printf("logdir written to %s\n", keep);
    return 0;
  }
  viewer = hbm__viewer_new(dir);
  if (!viewer)
    return 1;

  /* The page's first view, cold: profile, summary (load + analysis), the three bar charts,
   * OOM events, timeline and allocation timeline. */
  const char *first[] = {
      "/api/runs",
      "/api/profiles?run=" RUN,
      "/api/profile?" Q,
      "/api/summary?" Q "&space=0",
      "/api/buffers_at_peak?" Q "&space=0&order=program",
      "/api/buffers_at_peak?" Q "&space=0&order=size",
      "/api/buffers_at_peak?" Q "&space=0&order=padding",
      "/api/oom?" Q "&space=0",
      "/api/timeline?" Q "&space=0&points=1300",
      "/api/allocations?" Q "&space=0&limit=4000&cols=620&rows=170",
  };
  double total = 0;
  printf("\ncold first view (server side, one run):\n");
  for (size_t i = 0; i < HBM_ARRAY_LEN(first); i++) {
    size_t bytes;
    double ms = timed_request(first[i], &bytes);
    total += ms;
    printf("  %-70.70s %8.2f ms %8zu bytes\n", first[i], ms, bytes);
  }
  printf("  total %.1f ms\n", total);

  printf("\nwarm requests, computed each time (median of %d):\n", runs);
  bench("summary", "/api/summary?" Q "&space=0", runs);
  bench("timeline, all steps, 1300 points", "/api/timeline?" Q "&space=0&points=1300", runs);
  bench("timeline, zoomed 10%", "/api/timeline?" Q "&space=0&from=400000&to=500000&points=1300",
        runs);
  bench("buffers_at_peak (size)", "/api/buffers_at_peak?" Q "&space=0&order=size", runs);
  bench("buffer card", "/api/buffer?" Q "&id=12345", runs);
  bench("allocations, all, 4000 + raster",
        "/api/allocations?" Q "&space=0&limit=4000&cols=620&rows=170", runs);
  bench("allocations, zoomed 1%",
        "/api/allocations?" Q "&space=0&from=500000&to=510000&limit=4000&cols=620&rows=170", runs);
  bench("allocations, search 'layer_03/dot'",
        "/api/allocations?" Q "&space=0&q=layer_03/dot&limit=3000&cols=620&rows=170", runs);
  bench("oom", "/api/oom?" Q "&space=0", runs);
  bench("compare with itself", "/api/compare?" Q "&b_run=" RUN "&b_profile=" FILE_NAME, runs);
  printf("\nasked again (answers kept per profile, median of %d):\n", runs);
  bench_request("allocations, all, 4000 + raster",
                "/api/allocations?" Q "&space=0&limit=4000&cols=620&rows=170", runs, true);
  bench_request("timeline, all steps, 1300 points", "/api/timeline?" Q "&space=0&points=1300", runs,
                true);
  hbm__viewer_free(viewer);
  nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}
