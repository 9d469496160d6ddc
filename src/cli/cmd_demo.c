/* cmd_demo.c — `hbm demo [--logdir DIR]`: the seed's program, on the simulated device.
 * The profile goes to DIR: --logdir, else HBM_PROFILE_DIR, else /tmp/hbm.
 * With the profiler on, a small "model" trains for two steps — tagged parameters, optimizer
 * state, activations and temporaries inside annotation scopes — and then the seed's
 * `random.normal(..., (327680, 327680), dtype=bfloat16)` asks for 214748364800 bytes on a
 * 16 GiB device, which fails as on a GPU with XLA's RESOURCE_EXHAUSTED text, followed by
 * hbm's diagnosis. The profile is left in DIR for `hbm report DIR`. Exit status 1, as the
 * seed's program fails.
 *
 * Memory that is allocated but never written costs the host nothing, so the model's sizes
 * are realistic; the demo writes only a few bytes of each buffer. */
#include "alloc/alloc.h" /* hbm__device_set_oom_buffers: always list the live buffers here */
#include "cli.h"
#ifdef HBM_HAVE_VIEWER
#include "viewer/viewer.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED_BYTES 214748364800ull /* bf16[327680,327680] */

typedef struct demo_buffer {
  const char *op, *shape, *group, *source;
  hbm_category_t category;
  size_t bytes;
} demo_buffer_t;

/* A two-layer MLP with an embedding, as JAX would hold it on the device. */
static const demo_buffer_t parameters[] = {
    {"embed/embedding", "f32[32000,1024]", "params", "model.py:12", HBM_CAT_PARAMETER,
     32000ull * 1024 * 4},
    {"dense_1/kernel", "f32[1024,4096]", "params", "model.py:15", HBM_CAT_PARAMETER,
     1024ull * 4096 * 4},
    {"dense_1/bias", "f32[4096]", "params", "model.py:15", HBM_CAT_PARAMETER, 4096ull * 4},
    {"dense_2/kernel", "f32[4096,1024]", "params", "model.py:16", HBM_CAT_PARAMETER,
     4096ull * 1024 * 4},
    {"dense_2/bias", "f32[1024]", "params", "model.py:16", HBM_CAT_PARAMETER, 1024ull * 4},
};

/* The device memory is real: a little of it is written, through the driver (on a GPU the
 * host cannot touch device memory). */
static void touch(hbm_device_t *dev, void *p) {
  static const unsigned char zeros[64];
  if (dev->phys->ops->copy_to_device(dev->phys, p, zeros, sizeof zeros) != HBM_OK)
    fprintf(stderr, "hbm demo: writing to %p: %s\n", p, hbm_last_error());
}

static void *alloc_tagged(hbm_device_t *dev, const demo_buffer_t *b, const char *op_prefix) {
  char op[128];
  snprintf(op, sizeof op, "%s%s", op_prefix, b->op);
  hbm_tag_t tag = {op, b->shape, b->category, b->group, b->source};
  void *p = hbm_alloc_tagged(dev, b->bytes, 0, &tag);
  if (p)
    touch(dev, p);
  return p;
}

/* One training step: activations and temporaries in annotation scopes, freed at its end. */
static int train_step(hbm_device_t *dev, int64_t step) {
  hbm_profiler_step_begin(step);
  hbm_tag_t forward = {.op = "jit(train_step)/forward",
                       .category = HBM_CAT_TEMPORARY,
                       .group = "activations",
                       .source = "model.py:30"};
  hbm_annotate_push(&forward);
  void *act[4] = {0};
  act[0] = hbm_alloc_tagged(
      dev, 256ull * 4096 * 2, 0,
      &(hbm_tag_t){.op = "jit(train_step)/dense_1/dot_general", .shape = "bf16[256,4096]"});
  act[1] = hbm_alloc_tagged(
      dev, 256ull * 1024 * 2, 0,
      &(hbm_tag_t){.op = "jit(train_step)/dense_2/dot_general", .shape = "bf16[256,1024]"});
  hbm_tag_t backward = {
      .op = "jit(train_step)/backward", .group = "gradients", .source = "model.py:41"};
  hbm_annotate_push(&backward);
  act[2] = hbm_alloc(dev, 1024ull * 4096 * 4, 0); /* gradient of dense_1/kernel */
  act[3] = hbm_alloc_tagged(dev, 256ull * 4096 * 4, 0,
                            &(hbm_tag_t){.op = "jit(train_step)/transpose",
                                         .shape = "f32[256,4096]",
                                         .group = "temporaries"});
  hbm_annotate_pop();
  hbm_annotate_pop();
  int failed = 0;
  for (int i = 0; i < 4; i++) {
    failed |= act[i] == NULL;
    hbm_free(dev, act[i]);
  }
  hbm_profiler_step_end(step);
  return failed;
}

/* The seed's `random.normal(..., (327680, 327680), dtype=bfloat16)`: 1 when it fails.
 * *told: the OOM text already gave the profile's path and the command to read it. */
static int allocate_the_seeds_array(hbm_device_t *dev, bool *told) {
  char peak[32];
  hbm_stats_t stats;
  hbm_get_stats(dev, &stats);
  printf("model: 2 training steps, peak %s in use\n",
         hbm_format_bytes(stats.peak_bytes_in_use, peak, sizeof peak));
  printf("allocating the seed's bf16[327680,327680] array (%llu bytes) ...\n\n", SEED_BYTES);
  hbm_tag_t seed = {"jit(oom)/random_normal", "bf16[327680,327680]", HBM_CAT_OUTPUT, "outputs",
                    "demo.py:8"};
  void *a = hbm_alloc_tagged(dev, SEED_BYTES, 0, &seed);
  if (a) { /* a device with more than 200 GiB (HBM_SIM_MEMORY=1TiB, a big GPU) */
    printf("it fit: the device has room for it\n");
    hbm_free(dev, a);
    return 0;
  }
  fflush(stdout);
  fprintf(stderr, "%s\n", hbm_last_error());
  *told = strstr(hbm_last_error(), "\nSee it with: ") != NULL;
  return 1;
}

static void print_usage(FILE *out) {
  fprintf(out, "usage: hbm demo [--logdir DIR] [--serve] [--port N]\n\n"
               "Runs the seed's program on the simulated device with the profiler on: a small\n"
               "model, then a bf16[327680,327680] array (214748364800 bytes) that does not fit\n"
               "in 16 GiB. Prints the RESOURCE_EXHAUSTED error and its diagnosis; exit status 1.\n"
               "--serve then serves the profile in the Memory Viewer on 127.0.0.1:PORT (default\n"
               "6006) until Ctrl-C, as `hbm view --logdir DIR` does.\n\n"
               "DIR: --logdir, else $HBM_PROFILE_DIR, else /tmp/hbm.\n");
}

/* --serve: the demo's logdir in the Memory Viewer; the server's exit status. */
static int serve_logdir(const char *logdir, int port) {
#ifdef HBM_HAVE_VIEWER
  fflush(stdout);
  return hbm_viewer_serve(logdir, 0, "127.0.0.1", port, stderr);
#else
  (void)port;
  return cli_fail("demo", 1,
                  "this hbm was built without the viewer (HBM_VIEWER=OFF); "
                  "run `hbm report %s` instead",
                  logdir);
#endif
}

/* The configuration: the environment's, on the sim device unless HBM_DEVICE names one.
 * *logdir: --logdir when given, else HBM_PROFILE_DIR, else /tmp/hbm (copied to dir). */
static int demo_config(hbm_config_t *cfg, const char **logdir, const char **source, char *dir,
                       size_t cap) {
  if (hbm_config_from_env(cfg) != HBM_OK)
    return cli_fail("demo", 2, "%s", hbm_last_error());
  if (cfg->origin[HBM_CFG_DEVICE] == HBM_ORIGIN_DEFAULT) {
    cfg->device = HBM_DEVICE_SIM;
    cfg->origin[HBM_CFG_DEVICE] = HBM_ORIGIN_FLAG;
  }
  if (*logdir) {
    *source = "--logdir";
  } else if (cfg->profile_dir[0]) {
    snprintf(dir, cap, "%s", cfg->profile_dir);
    *logdir = dir;
    *source = "HBM_PROFILE_DIR";
  } else {
    *logdir = "/tmp/hbm";
  }
  cfg->profile_dir[0] = '\0'; /* started here, on *logdir */
  return 0;
}

/* `source` names where the directory came from ("--logdir", "HBM_PROFILE_DIR", NULL). */
static bool start_profiler(const char *logdir, const char *source) {
  if (hbm_profiler_start(logdir) == HBM_OK)
    return true;
  if (hbm_last_status() == HBM_ERR_UNAVAILABLE)
    printf("note: no profile will be written: %s\n", hbm_last_error());
  else if (source)
    fprintf(stderr, "hbm demo: cannot write the profile to %s=%s: %s\n", source, logdir,
            hbm_last_error());
  else
    fprintf(stderr, "hbm demo: cannot write the profile to %s: %s\n", logdir, hbm_last_error());
  return false;
}

static int run_model(hbm_device_t *dev, void **held, size_t *n_held) {
  hbm_profiler_marker("model: parameters and optimizer state");
  for (size_t i = 0; i < HBM_ARRAY_LEN(parameters); i++) {
    demo_buffer_t mu = parameters[i], nu = parameters[i];
    mu.group = nu.group = "optimizer state";
    held[(*n_held)++] = alloc_tagged(dev, &parameters[i], "");
    held[(*n_held)++] = alloc_tagged(dev, &mu, "adam/mu/");
    held[(*n_held)++] = alloc_tagged(dev, &nu, "adam/nu/");
  }
  fflush(stdout); /* the error below comes after what was printed */
  for (size_t i = 0; i < *n_held; i++)
    if (!held[i])
      return cli_fail("demo", 1, "%s", hbm_last_error());
  for (int64_t step = 1; step <= 2; step++)
    if (train_step(dev, step))
      return cli_fail("demo", 1, "%s", hbm_last_error());
  return 0;
}

int hbm_cmd_demo(int argc, char **argv) {
  const char *logdir = NULL, *source = NULL;
  char dir[1024];
  bool serve = false;
  int port = 6006;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--logdir") && i + 1 < argc) {
      logdir = argv[++i];
    } else if (!strcmp(argv[i], "--serve")) {
      serve = true;
    } else if (!strcmp(argv[i], "--port") && i + 1 < argc) {
      char *end;
      long value = strtol(argv[++i], &end, 10);
      if (*end || value < 0 || value > 65535)
        return cli_fail("demo", 2, "--port: '%s' is not a port number (0-65535)", argv[i]);
      port = (int)value;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      print_usage(stdout);
      return 0;
    } else {
      print_usage(stderr);
      return 2;
    }
  }
  hbm_config_t cfg;
  int rc = demo_config(&cfg, &logdir, &source, dir, sizeof dir);
  if (rc)
    return rc;
  bool profiling = start_profiler(logdir, source);
  hbm_device_t *dev = hbm_open(&cfg);
  if (!dev) {
    if (profiling)
      hbm_profiler_stop();
    return cli_fail("demo", 1, "%s", hbm_last_error());
  }
  hbm__device_set_oom_buffers(dev, true);
  char total[32], limit[32];
  hbm_stats_t stats;
  hbm_get_stats(dev, &stats);
  uint64_t device_total, device_free;
  hbm_device_memory(dev, &device_total, &device_free);
  printf("hbm demo: device %s (%s), mode %s, limit %s\n", hbm_device_name(dev),
         hbm_format_bytes(device_total, total, sizeof total), hbm_mode_name(hbm_device_mode(dev)),
         hbm_format_bytes(stats.bytes_limit, limit, sizeof limit));
  void *held[3 * HBM_ARRAY_LEN(parameters)] = {0};
  size_t n_held = 0;
  bool told = false;
  rc = run_model(dev, held, &n_held);
  if (rc == 0)
    rc = allocate_the_seeds_array(dev, &told);
  const char *path = profiling ? hbm_profiler_path() : NULL;
  char saved[4096] = "";
  if (path)
    snprintf(saved, sizeof saved, "%s", path);
  for (size_t i = 0; i < n_held; i++)
    hbm_free(dev, held[i]);
  hbm_close(dev);
  if (profiling && hbm_profiler_stop() == HBM_OK && saved[0] && !told)
    printf("\nProfile: %s\nSee it with: hbm report %s\n", saved, logdir);
  return serve ? serve_logdir(logdir, port) : rc;
}
