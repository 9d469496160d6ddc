/* bench_recorder.c — what profiling costs the allocating thread. Each figure is the median
 * of 7 runs, in ns per recorded event (an alloc or a free), single thread:
 *   hooks     hbm__rec_alloc/free called as the allocator calls them, without a capture
 *             (one atomic load and a branch) and with one (the record itself);
 *   tagged    the same with a tag of four strings, copied into the record (hbm__rec_alloc)
 *             or kept by address (hbm__rec_alloc_stable, what the allocator uses);
 *   sustained 4M events in a row: the writer thread must keep up (compression included),
 *             else the recording thread helps it;
 *   alloc     hbm_alloc/hbm_free of 256 B on the simulated device, without and with a
 *             capture: the cost on top of the allocation.
 * Usage: bench_recorder [runs]   (prints a table; BENCHMARKS.md quotes it) */
#include "hbm.h"
#include "profile/recorder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BURST 200000 /* events per timed run: fits in the recorder's queue */
#define SUSTAINED 4000000

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static char logdir[256];

static void capture(bool on) {
  if (on && hbm_profiler_start(logdir) != HBM_OK) {
    fprintf(stderr, "bench_recorder: %s\n", hbm_last_error());
    exit(1);
  }
  if (!on && hbm_profiler_path())
    hbm_profiler_stop();
}

/* ns per event of `events` hook calls (alloc/free pairs); stable: hbm__rec_alloc_stable. */
static double run_hooks(int id, int events, const hbm_tag_t *tag, bool stable) {
  double t0 = now_ns();
  for (int i = 0; i < events / 2; i++) {
    uint64_t addr = 0x7f0000000000ull + (uint64_t)(i & 1023) * 4096;
    if (stable)
      hbm__rec_alloc_stable(id, addr, 256, 256, tag);
    else
      hbm__rec_alloc(id, addr, 256, 256, tag);
    hbm__rec_free(id, addr);
  }
  return (now_ns() - t0) / events;
}

static double hooks_median(int runs, bool on, int id, int events, const hbm_tag_t *tag,
                           bool stable) {
  double v[64];
  for (int r = 0; r < runs; r++) {
    capture(on);
    v[r] = run_hooks(id, events, tag, stable);
    capture(false);
  }
  return median(v, runs);
}

static double run_allocator(hbm_device_t *dev, int events) {
  double t0 = now_ns();
  for (int i = 0; i < events / 2; i++) {
    void *p = hbm_alloc(dev, 256, 0);
    hbm_free(dev, p);
  }
  return (now_ns() - t0) / events;
}

static double allocator_median(int runs, bool on, hbm_device_t *dev) {
  double v[64];
  for (int r = 0; r < runs; r++) {
    capture(on);
    v[r] = run_allocator(dev, BURST);
    capture(false);
  }
  return median(v, runs);
}

int main(int argc, char **argv) {
  int runs = argc > 1 ? atoi(argv[1]) : 7;
  runs = runs < 1 ? 1 : runs > 64 ? 64 : runs;
  snprintf(logdir, sizeof logdir, "/tmp/hbm-bench-recorder-%ld", (long)getpid());
  int id = hbm__rec_device_open("bench0", "bfc", 1ull << 34, NULL, NULL);
  hbm_tag_t tag = {"jit(train_step)/transformer/layer_3/attention/dot_general", "bf16[8,2048,128]",
                   HBM_CAT_TEMPORARY, "activations", "model.py:142"};
  run_hooks(id, BURST, NULL, false); /* warm-up */
  double off = hooks_median(runs, false, id, BURST, NULL, false);
  double on = hooks_median(runs, true, id, BURST, NULL, false);
  double tagged = hooks_median(runs, true, id, BURST, &tag, false);
  double stable = hooks_median(runs, true, id, BURST, &tag, true);
  double sustained = hooks_median(runs < 3 ? runs : 3, true, id, SUSTAINED, NULL, false);
  double sustained_tagged = hooks_median(runs < 3 ? runs : 3, true, id, SUSTAINED, &tag, true);
  hbm__rec_device_close(id);

  hbm_config_t cfg;
  hbm_config_default(&cfg);
  cfg.device = HBM_DEVICE_SIM;
  snprintf(cfg.sim_name, sizeof cfg.sim_name, "bench-rec-%ld", (long)getpid());
  hbm_device_t *dev = hbm_open(&cfg);
  if (!dev) {
    fprintf(stderr, "bench_recorder: %s\n", hbm_last_error());
    return 1;
  }
  run_allocator(dev, BURST);
  double alloc_off = allocator_median(runs, false, dev);
  double alloc_on = allocator_median(runs, true, dev);
  hbm_close(dev);

  printf("recorder cost, ns per event (median of %d runs, %d events each; single thread)\n", runs,
         BURST);
  printf("  %-44s %8.2f\n", "hooks, no capture", off);
  printf("  %-44s %8.2f  (+%.2f)\n", "hooks, capturing", on, on - off);
  printf("  %-44s %8.2f  (+%.2f)\n", "hooks, capturing, tagged (4 strings)", tagged, tagged - off);
  printf("  %-44s %8.2f  (+%.2f)\n", "hooks, capturing, tagged, stable strings", stable,
         stable - off);
  printf("  %-44s %8.2f  (+%.2f)\n", "hooks, capturing, 4M events in a row", sustained,
         sustained - off);
  printf("  %-44s %8.2f  (+%.2f)\n", "the same, tagged with stable strings", sustained_tagged,
         sustained_tagged - off);
  printf("  %-44s %8.2f\n", "hbm_alloc+hbm_free 256B, no capture", alloc_off);
  printf("  %-44s %8.2f  (+%.2f)\n", "hbm_alloc+hbm_free 256B, capturing", alloc_on,
         alloc_on - alloc_off);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", logdir);
  if (system(cmd) != 0)
    fprintf(stderr, "bench_recorder: could not remove %s\n", logdir);
  return 0;
}
