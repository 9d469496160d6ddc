/* train_step.c — libhbm from a program: open the device the environment describes, profile a
 * few tagged allocations of a toy training step, and show what an OOM says.
 *
 *   cc train_step.c $(pkg-config --cflags --libs hbm) -o train_step
 *   HBM_SIM_MEMORY=1GiB ./train_step /tmp/xprof && hbm report /tmp/xprof
 */
#include <hbm.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  const char *logdir = argc > 1 ? argv[1] : "/tmp/xprof";
  hbm_device_t *dev = hbm_open(NULL); /* configuration from the environment */
  if (!dev) {
    fprintf(stderr, "%s\n", hbm_last_error());
    return 1;
  }
  if (hbm_profiler_start(logdir) != HBM_OK)
    fprintf(stderr, "no profile: %s\n", hbm_last_error());

  hbm_tag_t weights = {.op = "dense_1/kernel",
                       .shape = "f32[1024,4096]",
                       .category = HBM_CAT_PARAMETER,
                       .group = "params",
                       .source = __FILE__};
  void *w = hbm_alloc_tagged(dev, 1024 * 4096 * 4, 0, &weights);

  hbm_tag_t scope = {
      .op = "jit(train_step)/dense_1", .category = HBM_CAT_TEMPORARY, .group = "activations"};
  hbm_annotate_push(&scope); /* everything allocated here is tagged with the scope */
  hbm_profiler_step_begin(1);
  void *act = hbm_alloc(dev, 256 * 4096 * 2, 0);
  if (act)
    memset(act, 0, 4096); /* sim memory is host memory: touch only what you need */
  void *huge = hbm_alloc(dev, (size_t)1 << 40, 0); /* 1 TiB: does not fit */
  if (!huge)
    printf("%s\n", hbm_last_error()); /* RESOURCE_EXHAUSTED: ... + hbm's diagnosis */
  hbm_free(dev, act);
  hbm_profiler_step_end(1);
  hbm_annotate_pop();

  hbm_stats_t stats;
  hbm_get_stats(dev, &stats);
  char peak[32];
  printf("peak in use: %s\n", hbm_format_bytes(stats.peak_bytes_in_use, peak, sizeof peak));
  hbm_free(dev, w);
  hbm_profiler_stop();
  hbm_close(dev);
  return huge ? 1 : 0; /* the 1 TiB allocation must have failed */
}
