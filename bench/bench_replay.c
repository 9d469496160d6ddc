/* bench_replay.c — the allocator on real allocation logs, the numbers of BENCHMARKS.md's
 * "Allocator" table. For each log (RMM CSV), through hbm_replay_run on a private sim device:
 *   - ns/op in the default mode: steady state, the median of --repeat replays (default 9)
 *     after a warm-up replay, single thread, thread-safe build;
 *   - min memory in the default mode: the smallest device (1 MiB steps) the log runs on,
 *     over the log's peak live bytes;
 *   - growth: peak reserved bytes over peak live, on a device large enough;
 *   - expandable: peak physical memory mapped over peak live, against the budget
 *     1.01 x peak live + 64 MiB (and its ns/op, which the granule mappings dominate).
 * Next to them, what XLA's BFC allocator and an O(1) offset allocator did on the same logs,
 * read from the README.md beside the logs when it has a row for the log.
 *
 * Usage: bench_replay [--repeat N] LOG...      (prints a Markdown table) */
#include "hbm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1ull << 20)

/* What the README says about one log ("" when it has no row). */
typedef struct reference {
  char xla_min[16], xla_growth[16], xla_ns[16], offset_min[16], offset_ns[16], pytorch[16];
} reference_t;

static void trim_copy(char *dst, size_t cap, const char *src, size_t n) {
  while (n && (*src == ' ' || *src == '\t'))
    src++, n--;
  while (n && (src[n - 1] == ' ' || src[n - 1] == '\t'))
    n--;
  snprintf(dst, cap, "%.*s", (int)n, src);
}

/* Finds the row "| name | peak | xla min | xla growth | xla ns | offset min | offset ns |
 * pytorch |" in the README next to the log. */
static void read_reference(const char *log_path, const char *name, reference_t *ref) {
  memset(ref, 0, sizeof *ref);
  char path[4096];
  const char *slash = strrchr(log_path, '/');
  snprintf(path, sizeof path, "%.*sREADME.md", slash ? (int)(slash - log_path + 1) : 0, log_path);
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  char line[1024], want[300];
  snprintf(want, sizeof want, "| %s |", name);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, want, strlen(want)))
      continue;
    char *cells[10];
    int n = 0;
    for (char *p = line; n < 10 && (p = strchr(p, '|')); p++)
      cells[n++] = p + 1;
    char *fields[] = {ref->xla_min,    ref->xla_growth, ref->xla_ns,
                      ref->offset_min, ref->offset_ns,  ref->pytorch};
    for (int i = 0; i < 6 && i + 3 < n; i++)
      trim_copy(fields[i], sizeof ref->xla_min, cells[i + 2],
                (size_t)(cells[i + 3] - cells[i + 2] - 1));
    break;
  }
  fclose(f);
}

static int replay(const hbm_alloc_log_t *log, hbm_mode_t mode, int repeat, int min_memory,
                  hbm_replay_result_t *r) {
  hbm_replay_options_t opt;
  hbm_replay_options_default(&opt);
  opt.mode = mode;
  opt.repeat = repeat;
  opt.min_memory = min_memory;
  if (hbm_replay_run(log, &opt, r) != HBM_OK) {
    fprintf(stderr, "bench_replay: %s: %s\n", hbm_mode_name(mode), hbm_last_error());
    return -1;
  }
  if (r->failed_allocations)
    fprintf(stderr, "bench_replay: %s: %llu failed allocations\n", hbm_mode_name(mode),
            (unsigned long long)r->failed_allocations);
  return 0;
}

static const char *base_name(const char *path, char *buf, size_t cap) {
  const char *slash = strrchr(path, '/');
  snprintf(buf, cap, "%s", slash ? slash + 1 : path);
  char *dot = strrchr(buf, '.');
  if (dot && !strcmp(dot, ".csv"))
    *dot = '\0';
  return buf;
}

typedef struct worst {
  double ns, min_ratio, growth, expandable_excess; /* excess: mapped - budget, in MiB */
} worst_t;

static void bench_log(const char *path, int repeat, worst_t *w) {
  char name[256];
  base_name(path, name, sizeof name);
  hbm_alloc_log_t log;
  if (hbm_alloc_log_read(path, 0, &log) != HBM_OK) {
    fprintf(stderr, "bench_replay: %s\n", hbm_last_error());
    return;
  }
  hbm_replay_result_t bfc, growth, expandable;
  if (replay(&log, HBM_MODE_BFC, repeat, 1, &bfc) == 0 &&
      replay(&log, HBM_MODE_GROWTH, -1, 0, &growth) == 0 &&
      replay(&log, HBM_MODE_EXPANDABLE, repeat < 3 ? repeat : 3, 0, &expandable) == 0) {
    reference_t ref;
    read_reference(path, name, &ref);
    double peak = (double)bfc.peak_live_bytes;
    double min_ratio = (double)bfc.min_memory_bytes / peak;
    double grow = (double)growth.peak_reserved_bytes / peak;
    double mapped = (double)expandable.peak_reserved_bytes;
    double budget = 1.01 * peak + 64.0 * MiB;
    printf("| %s | %llu | %.0f | %.1f | %s | %s | %.4f | %s | %s | %.4f | %s | %s | %.4f | %s "
           "| %.0f |\n",
           name, (unsigned long long)bfc.events, peak / MiB, bfc.ns_per_op, ref.xla_ns,
           ref.offset_ns, min_ratio, ref.xla_min, ref.offset_min, grow, ref.xla_growth, ref.pytorch,
           mapped / peak, mapped <= budget ? "yes" : "**no**", expandable.ns_per_op);
    fflush(stdout);
    w->ns = bfc.ns_per_op > w->ns ? bfc.ns_per_op : w->ns;
    w->min_ratio = min_ratio > w->min_ratio ? min_ratio : w->min_ratio;
    w->growth = grow > w->growth ? grow : w->growth;
    if ((mapped - budget) / MiB > w->expandable_excess)
      w->expandable_excess = (mapped - budget) / MiB;
  }
  hbm_replay_result_free(&bfc);
  hbm_replay_result_free(&growth);
  hbm_replay_result_free(&expandable);
  hbm_alloc_log_free(&log);
}

int main(int argc, char **argv) {
  int repeat = 9, first = 1;
  if (argc > 2 && !strcmp(argv[1], "--repeat")) {
    repeat = atoi(argv[2]);
    first = 3;
  }
  if (first >= argc || repeat < 5 || repeat > 1000) {
    fprintf(stderr, "usage: bench_replay [--repeat N (>= 5)] LOG...\n");
    return 2;
  }
  printf("| log | events | peak live MiB | hbm ns/op | XLA BFC ns/op | offset ns/op | hbm min "
         "memory | XLA BFC | offset | hbm growth | XLA BFC growth | PyTorch reserved | hbm "
         "expandable | within 1.01x + 64 MiB | expandable ns/op |\n");
  printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
         "---: | :---: | ---: |\n");
  worst_t w = {0, 0, 0, -1e18};
  for (int i = first; i < argc; i++)
    bench_log(argv[i], repeat, &w);
  printf("\nWorst over the logs: %.1f ns/op (target <= 25), min memory %.4fx (target <= 1.02), "
         "growth %.4fx (target <= 1.05), expandable %+.1f MiB against its budget (target "
         "<= 0).\n",
         w.ns, w.min_ratio, w.growth, w.expandable_excess);
  return 0;
}
