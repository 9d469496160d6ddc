/* bench_alloc_log.c — how fast the RMM CSV reader (src/profile/alloc_log.c) parses the real
 * logs in ../shared/traces: per log, the median of 7 parses of the file already in memory
 * (hbm_alloc_log_parse), in ms and MB/s, and the time to turn the events into a profile
 * (hbm_alloc_log_to_profile). Usage: bench_alloc_log [DIR]   (default ../shared/traces) */
#include "base/base.h" /* hbm__read_file */
#include "hbm.h"
#include "machine.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 7

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int bench_one(const char *path, const char *name) {
  size_t len;
  char *data;
  if (hbm__read_file(path, &data, &len) != HBM_OK)
    return fprintf(stderr, "%s\n", hbm_last_error()), 1;
  double parse[RUNS], convert[RUNS];
  hbm_alloc_log_t log;
  for (int r = 0; r < RUNS; r++) {
    double t0 = now_ms();
    if (hbm_alloc_log_parse(data, len, name, 0, &log) != HBM_OK) {
      fprintf(stderr, "%s\n", hbm_last_error());
      free(data);
      return 1;
    }
    double t1 = now_ms();
    hbm_profile_t *p = hbm_alloc_log_to_profile(&log, name);
    convert[r] = now_ms() - t1;
    parse[r] = t1 - t0;
    hbm_profile_free(p);
    if (r + 1 < RUNS)
      hbm_alloc_log_free(&log);
  }
  qsort(parse, RUNS, sizeof *parse, compare_double);
  qsort(convert, RUNS, sizeof *convert, compare_double);
  printf("  %-38s %8zu %7.2f MB %8.2f ms %8.0f MB/s %10.2f ms\n", name, log.n_events,
         (double)len / 1e6, parse[RUNS / 2], (double)len / 1e3 / parse[RUNS / 2],
         convert[RUNS / 2]);
  hbm_alloc_log_free(&log);
  free(data);
  return 0;
}

int main(int argc, char **argv) {
  bench_print_machine();
  const char *dir_path = argc > 1 ? argv[1] : "../shared/traces";
  DIR *dir = opendir(dir_path);
  if (!dir)
    return fprintf(stderr, "bench_alloc_log: %s: no such directory\n", dir_path), 1;
  printf("RMM CSV parse, median of %d runs (file in memory)\n", RUNS);
  printf("  %-38s %8s %10s %11s %12s %13s\n", "log", "events", "size", "parse", "speed",
         "to profile");
  struct dirent *de;
  int rc = 0, logs = 0;
  while ((de = readdir(dir)) != NULL) {
    size_t n = strlen(de->d_name);
    if (n < 5 || strcmp(de->d_name + n - 4, ".csv") != 0)
      continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir_path, de->d_name);
    rc |= bench_one(path, de->d_name);
    logs++;
  }
  closedir(dir);
  if (logs == 0) /* a benchmark that measured nothing fails */
    return fprintf(stderr, "bench_alloc_log: no .csv logs in %s: measured nothing\n", dir_path), 1;
  return rc;
}
