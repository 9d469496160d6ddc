/* bench_gpu_replay.c — real allocation logs (RMM CSV) replayed on a real GPU: through each of
 * hbm's modes on the CUDA backend, and beside them straight on the driver, with cuMemAlloc /
 * cuMemFree and with cuMemAllocAsync / cuMemFreeAsync (the device's default pool, its
 * release threshold raised so that it keeps what it took, as frameworks set it). The driver
 * is loaded with dlopen("libcuda.so.1"), as src/alloc/device/device_cuda.c does, so the program
 * builds everywhere and runs on the driver double too (tests/fakecuda).
 *
 * Per log and allocator: the time per operation (an allocation or a free; one untimed replay,
 * then up to --repeat timed ones, the median) and the memory reserved at the most:
 *   - hbm's modes: the allocator's own peak reserved bytes (hbm_get_stats);
 *   - cuMemAllocAsync: the pool's CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH;
 *   - cuMemAlloc: the device's used memory (cuMemGetInfo) over the replay's start, sampled
 *     after each allocation that raised the live bytes to a new high and every 256 operations
 *     (the driver keeps no high-water mark of its own).
 * The device's used memory is sampled the same way for every allocator ("device_used_bytes").
 * Memory is never touched: the log's blocks are only allocated and freed.
 *
 * Usage: bench_gpu_replay [--repeat N] [--budget SECONDS] [--allocators A,B,...] [--out FILE]
 *                         LOG...
 * Prints one JSON object on stdout, or writes it to FILE after every log (a table for people
 * goes to stderr). The budget is kept: a pair (log, allocator) that would start after it is
 * listed as not run, a replay running at its end stops there (and is listed as not run too),
 * and the timed replays are as many as fit in the pair's share of it. Exit status: 0 when every
 * pair ran and measured something, 1 otherwise, 2 on usage errors, 3 when there is no GPU. */
#include "alloc/device/cuda_api.h"
#include "hbm.h"
#include "log_slots.h"

#include <dlfcn.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SAMPLE_EVERY 256
#define MEMPOOL_ATTR_RESERVED_MEM_HIGH 6 /* CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH */

/* The driver's entry points the program calls itself. */
typedef struct driver {
  void *lib;
  hbmcu_result_t (*init)(unsigned);
  hbmcu_result_t (*device_get)(hbmcu_device_t *, int);
  hbmcu_result_t (*device_get_name)(char *, int, hbmcu_device_t);
  hbmcu_result_t (*error_name)(hbmcu_result_t, const char **);
  hbmcu_result_t (*ctx_retain)(hbmcu_context_t *, hbmcu_device_t);
  hbmcu_result_t (*ctx_release)(hbmcu_device_t);
  hbmcu_result_t (*ctx_set_current)(hbmcu_context_t);
  hbmcu_result_t (*mem_get_info)(size_t *, size_t *);
  hbmcu_result_t (*mem_alloc)(hbmcu_deviceptr_t *, size_t);
  hbmcu_result_t (*mem_free)(hbmcu_deviceptr_t);
  hbmcu_result_t (*stream_create)(hbmcu_stream_t *, unsigned);
  hbmcu_result_t (*stream_synchronize)(hbmcu_stream_t);
  hbmcu_result_t (*stream_destroy)(hbmcu_stream_t);
  hbmcu_result_t (*default_pool)(hbmcu_mempool_t *, hbmcu_device_t);
  hbmcu_result_t (*pool_set)(hbmcu_mempool_t, int, void *);
  hbmcu_result_t (*pool_get)(hbmcu_mempool_t, int, void *);
  hbmcu_result_t (*pool_trim)(hbmcu_mempool_t, size_t);
  hbmcu_result_t (*alloc_async)(hbmcu_deviceptr_t *, size_t, hbmcu_stream_t);
  hbmcu_result_t (*free_async)(hbmcu_deviceptr_t, hbmcu_stream_t);
  hbmcu_device_t device;
  hbmcu_context_t context;
  char name[128];
  uint64_t total;
} driver_t;

typedef enum kind { KIND_HBM, KIND_CU_MEM_ALLOC, KIND_CU_MEM_ALLOC_ASYNC } kind_t;

/* One allocator on the device, for one log. */
typedef struct allocator {
  char name[32];
  kind_t kind;
  hbm_mode_t mode;       /* KIND_HBM */
  hbm_device_t *dev;     /* KIND_HBM */
  hbmcu_stream_t stream; /* KIND_CU_MEM_ALLOC_ASYNC */
  hbmcu_mempool_t pool;
  driver_t *cu;
  uint64_t failed;
  char error[256]; /* the first failure's message */
} allocator_t;

typedef struct log_input {
  const char *path;
  char name[256];
  slot_op_t *ops;
  size_t n_ops, n_events;
  uint32_t n_slots;
  uint64_t peak_live;
  void **slots;
} log_input_t;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- the driver ---- */

static bool load_symbols(driver_t *cu) {
  struct {
    const char *name;
    void **slot;
  } syms[] = {
      {"cuInit", (void **)&cu->init},
      {"cuDeviceGet", (void **)&cu->device_get},
      {"cuDeviceGetName", (void **)&cu->device_get_name},
      {"cuGetErrorName", (void **)&cu->error_name},
      {"cuDevicePrimaryCtxRetain", (void **)&cu->ctx_retain},
      {"cuDevicePrimaryCtxRelease_v2", (void **)&cu->ctx_release},
      {"cuCtxSetCurrent", (void **)&cu->ctx_set_current},
      {"cuMemGetInfo_v2", (void **)&cu->mem_get_info},
      {"cuMemAlloc_v2", (void **)&cu->mem_alloc},
      {"cuMemFree_v2", (void **)&cu->mem_free},
      {"cuStreamCreate", (void **)&cu->stream_create},
      {"cuStreamSynchronize", (void **)&cu->stream_synchronize},
      {"cuStreamDestroy_v2", (void **)&cu->stream_destroy},
      {"cuDeviceGetDefaultMemPool", (void **)&cu->default_pool},
      {"cuMemPoolSetAttribute", (void **)&cu->pool_set},
      {"cuMemPoolGetAttribute", (void **)&cu->pool_get},
      {"cuMemPoolTrimTo", (void **)&cu->pool_trim},
      {"cuMemAllocAsync", (void **)&cu->alloc_async},
      {"cuMemFreeAsync", (void **)&cu->free_async},
  };
  for (size_t i = 0; i < sizeof syms / sizeof *syms; i++) {
    /* POSIX: a function pointer round-trips through a void *. */
    void *sym = dlsym(cu->lib, syms[i].name);
    if (!sym) {
      fprintf(stderr, "bench_gpu_replay: the CUDA driver lacks %s\n", syms[i].name);
      return false;
    }
    memcpy(syms[i].slot, &sym, sizeof sym);
  }
  return true;
}

static const char *cu_error(driver_t *cu, hbmcu_result_t r) {
  const char *name = NULL;
  return cu->error_name && cu->error_name(r, &name) == HBMCU_SUCCESS && name ? name : "?";
}

/* The GPU's primary context made current; false (with a message) when there is none. */
static bool open_driver(driver_t *cu) {
  cu->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cu->lib) {
    fprintf(stderr, "bench_gpu_replay: no GPU: %s\n", dlerror());
    return false;
  }
  if (!load_symbols(cu))
    return false;
  hbmcu_result_t r = cu->init(0);
  if (r == HBMCU_SUCCESS)
    r = cu->device_get(&cu->device, 0);
  if (r == HBMCU_SUCCESS)
    r = cu->device_get_name(cu->name, (int)sizeof cu->name - 1, cu->device);
  if (r == HBMCU_SUCCESS)
    r = cu->ctx_retain(&cu->context, cu->device);
  if (r == HBMCU_SUCCESS)
    r = cu->ctx_set_current(cu->context);
  size_t free_bytes = 0, total = 0;
  if (r == HBMCU_SUCCESS)
    r = cu->mem_get_info(&free_bytes, &total);
  if (r != HBMCU_SUCCESS) {
    fprintf(stderr, "bench_gpu_replay: no GPU: %s\n", cu_error(cu, r));
    return false;
  }
  cu->total = total;
  return true;
}

static uint64_t device_used(driver_t *cu) {
  size_t free_bytes = 0, total = 0;
  if (cu->mem_get_info(&free_bytes, &total) != HBMCU_SUCCESS)
    return 0;
  return total - free_bytes;
}

/* ---- the allocators ---- */

static void note_failure(allocator_t *a, const char *fmt, const char *what, uint64_t size) {
  if (a->failed++ == 0)
    snprintf(a->error, sizeof a->error, fmt, what, (unsigned long long)size);
}

static void *allocate(allocator_t *a, uint64_t size) {
  hbmcu_deviceptr_t p = 0;
  hbmcu_result_t r = HBMCU_SUCCESS;
  switch (a->kind) {
  case KIND_HBM: {
    void *block = hbm_alloc(a->dev, size, 0);
    if (!block)
      note_failure(a, "%.200s (%llu bytes)", hbm_last_error(), size);
    return block;
  }
  case KIND_CU_MEM_ALLOC: r = a->cu->mem_alloc(&p, size); break;
  case KIND_CU_MEM_ALLOC_ASYNC: r = a->cu->alloc_async(&p, size, a->stream); break;
  }
  if (r != HBMCU_SUCCESS) {
    note_failure(a, "%s (%llu bytes)", cu_error(a->cu, r), size);
    return NULL;
  }
  return (void *)(uintptr_t)p;
}

static void release(allocator_t *a, void *block) {
  switch (a->kind) {
  case KIND_HBM: hbm_free(a->dev, block); break;
  case KIND_CU_MEM_ALLOC: a->cu->mem_free((hbmcu_deviceptr_t)(uintptr_t)block); break;
  case KIND_CU_MEM_ALLOC_ASYNC:
    a->cu->free_async((hbmcu_deviceptr_t)(uintptr_t)block, a->stream);
    break;
  }
}

static bool parse_allocator(const char *name, allocator_t *a) {
  memset(a, 0, sizeof *a);
  snprintf(a->name, sizeof a->name, "%s", name);
  if (!strcmp(name, "cuMemAlloc"))
    a->kind = KIND_CU_MEM_ALLOC;
  else if (!strcmp(name, "cuMemAllocAsync"))
    a->kind = KIND_CU_MEM_ALLOC_ASYNC;
  else if (!strncmp(name, "hbm:", 4) && hbm_mode_parse(name + 4, &a->mode) == HBM_OK)
    a->kind = KIND_HBM;
  else
    return false;
  return true;
}

/* Ready to replay; false with a->error set when it cannot be. */
static bool open_allocator(allocator_t *a, driver_t *cu) {
  a->cu = cu;
  a->failed = 0;
  a->error[0] = '\0';
  if (a->kind == KIND_HBM) {
    hbm_config_t cfg;
    hbm_config_default(&cfg);
    cfg.device = HBM_DEVICE_CUDA;
    hbm_config_set_mode(&cfg, a->mode, HBM_ORIGIN_CODE);
    a->dev = hbm_open(&cfg);
    if (!a->dev)
      snprintf(a->error, sizeof a->error, "hbm_open: %.200s", hbm_last_error());
    return a->dev != NULL;
  }
  if (a->kind == KIND_CU_MEM_ALLOC)
    return true;
  unsigned long long keep = UINT64_MAX, zero = 0;
  hbmcu_result_t r = cu->stream_create(&a->stream, HBMCU_STREAM_NON_BLOCKING);
  if (r == HBMCU_SUCCESS)
    r = cu->default_pool(&a->pool, cu->device);
  if (r == HBMCU_SUCCESS)
    r = cu->pool_trim(a->pool, 0);
  if (r == HBMCU_SUCCESS)
    r = cu->pool_set(a->pool, HBMCU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
  if (r == HBMCU_SUCCESS) /* resets the high-water mark */
    r = cu->pool_set(a->pool, MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
  if (r != HBMCU_SUCCESS)
    snprintf(a->error, sizeof a->error, "the stream and pool: %s", cu_error(cu, r));
  return r == HBMCU_SUCCESS;
}

/* The most memory the allocator reserved; where it comes from in *how. */
static uint64_t peak_reserved(allocator_t *a, uint64_t device_high, const char **how) {
  if (a->kind == KIND_HBM) {
    hbm_stats_t s;
    *how = "hbm_get_stats peak_bytes_reserved";
    return hbm_get_stats(a->dev, &s) == HBM_OK ? s.peak_bytes_reserved : 0;
  }
  if (a->kind == KIND_CU_MEM_ALLOC_ASYNC) {
    unsigned long long high = 0;
    *how = "CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH";
    a->cu->pool_get(a->pool, MEMPOOL_ATTR_RESERVED_MEM_HIGH, &high);
    return high;
  }
  *how = "cuMemGetInfo used, sampled";
  return device_high;
}

static void close_allocator(allocator_t *a) {
  if (a->dev)
    hbm_close(a->dev);
  a->dev = NULL;
  if (a->stream) {
    a->cu->stream_synchronize(a->stream);
    a->cu->pool_trim(a->pool, 0);
    a->cu->stream_destroy(a->stream);
  }
  a->stream = NULL;
}

/* ---- replays ---- */

static void free_live(log_input_t *in, allocator_t *a) {
  for (uint32_t s = 0; s < in->n_slots; s++)
    if (in->slots[s])
      release(a, in->slots[s]);
  memset(in->slots, 0, in->n_slots * sizeof *in->slots);
  if (a->stream)
    a->cu->stream_synchronize(a->stream);
}

/* The budget's end: a replay still running then stops where it is (see run_pair). */
static double hard_deadline;

/* The untimed replay: failures counted, the device's used memory sampled; returns the
 * highest sample over `base`. *complete is false when the deadline stopped it. */
static uint64_t replay_checked(log_input_t *in, allocator_t *a, uint64_t base, bool *complete) {
  uint64_t live = 0, live_high = 0, high = 0;
  uint64_t *sizes = calloc(in->n_slots ? in->n_slots : 1, sizeof *sizes);
  *complete = sizes != NULL;
  for (size_t i = 0; sizes && i < in->n_ops; i++) {
    if (i % 4096 == 4095 && now_s() > hard_deadline) {
      *complete = false;
      break;
    }
    const slot_op_t *op = &in->ops[i];
    bool sample = i % SAMPLE_EVERY == 0;
    if (op->size) {
      in->slots[op->slot] = allocate(a, op->size);
      sizes[op->slot] = in->slots[op->slot] ? op->size : 0;
      live += sizes[op->slot];
      sample |= live > live_high;
      live_high = live > live_high ? live : live_high;
    } else if (in->slots[op->slot]) {
      release(a, in->slots[op->slot]);
      in->slots[op->slot] = NULL;
      live -= sizes[op->slot];
    }
    uint64_t used = sample ? device_used(a->cu) : 0;
    high = used > base && used - base > high ? used - base : high;
  }
  free(sizes);
  free_live(in, a);
  return high;
}

static double replay_timed(log_input_t *in, allocator_t *a) {
  void **slots = in->slots;
  double t0 = now_s();
  for (const slot_op_t *op = in->ops, *end = in->ops + in->n_ops; op < end; op++) {
    if (op->size)
      slots[op->slot] = allocate(a, op->size);
    else if (slots[op->slot])
      release(a, slots[op->slot]), slots[op->slot] = NULL;
  }
  double t = now_s() - t0;
  free_live(in, a);
  return t;
}

static int compare_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

/* One allocator on one log, within `seconds`: its JSON row. */
static json_t *run_pair(log_input_t *in, allocator_t *a, driver_t *cu, int repeat, double seconds) {
  json_t *row = json_pack("{s:s}", "allocator", a->name);
  uint64_t base = device_used(cu);
  if (!open_allocator(a, cu)) {
    json_object_set_new(row, "error", json_string(a->error));
    close_allocator(a);
    return row;
  }
  double t0 = now_s();
  bool complete;
  uint64_t device_high = replay_checked(in, a, base, &complete);
  double first = now_s() - t0;
  if (!complete) {
    json_object_set_new(row, "error", json_string("stopped: the time budget was spent"));
    close_allocator(a);
    return row;
  }
  const char *how;
  uint64_t reserved = peak_reserved(a, device_high, &how);
  uint64_t failed = a->failed;
  int n = repeat;
  if (first > 0 && (double)n * first > seconds - first) /* what the budget leaves room for */
    n = (int)((seconds - first) / first);
  n = n < 1 ? 1 : n;
  if (now_s() + first > hard_deadline) /* not even one timed replay fits */
    n = 0;
  double ns[1000] = {0};
  n = n > 1000 ? 1000 : n;
  for (int i = 0; i < n; i++)
    ns[i] = replay_timed(in, a) * 1e9 / (double)(in->n_ops ? in->n_ops : 1);
  qsort(ns, (size_t)n, sizeof *ns, compare_double);
  json_object_update_new(
      row, json_pack("{s:I,s:s,s:I,s:I,s:I,s:i}", "peak_reserved_bytes", (json_int_t)reserved,
                     "reserved_from", how, "device_used_bytes", (json_int_t)device_high,
                     "failed_allocations", (json_int_t)failed, "failed_in_timed_replays",
                     (json_int_t)(a->failed - failed), "timed_replays", n));
  if (n > 0) /* else only the memory was measured */
    json_object_update_new(row, json_pack("{s:f,s:f,s:f}", "ns_per_op",
                                          n % 2 ? ns[n / 2] : (ns[n / 2 - 1] + ns[n / 2]) / 2,
                                          "ns_per_op_min", ns[0], "ns_per_op_max", ns[n - 1]));
  if (a->error[0])
    json_object_set_new(row, "first_failure", json_string(a->error));
  close_allocator(a);
  return row;
}

/* ---- logs ---- */

static void log_name(const char *path, char *out, size_t cap) {
  const char *slash = strrchr(path, '/');
  snprintf(out, cap, "%s", slash ? slash + 1 : path);
  char *dot = strstr(out, ".csv");
  if (dot)
    *dot = '\0';
}

/* The log's operations and its peak live bytes; false (with a message) when unreadable. */
static bool load_log(const char *path, log_input_t *in) {
  memset(in, 0, sizeof *in);
  in->path = path;
  log_name(path, in->name, sizeof in->name);
  hbm_alloc_log_t log;
  if (hbm_alloc_log_read(path, 0, &log) != HBM_OK) {
    fprintf(stderr, "bench_gpu_replay: %s\n", hbm_last_error());
    return false;
  }
  in->n_events = log.n_events;
  bool ok = resolve_slots(&log, &in->ops, &in->n_ops, &in->n_slots);
  hbm_alloc_log_free(&log);
  in->slots = calloc(in->n_slots ? in->n_slots : 1, sizeof *in->slots);
  uint64_t *sizes = calloc(in->n_slots ? in->n_slots : 1, sizeof *sizes), live = 0;
  for (size_t i = 0; ok && sizes && i < in->n_ops; i++) {
    const slot_op_t *op = &in->ops[i];
    live = op->size ? live + op->size : live - sizes[op->slot];
    sizes[op->slot] = op->size;
    in->peak_live = live > in->peak_live ? live : in->peak_live;
  }
  ok = ok && in->slots && sizes;
  free(sizes);
  if (!ok)
    fprintf(stderr, "bench_gpu_replay: %s: out of host memory\n", path);
  return ok;
}

static void free_log(log_input_t *in) {
  free(in->ops);
  free(in->slots);
}

/* ---- the command ---- */

static const char *default_allocators =
    "hbm:bfc,hbm:growth,hbm:platform,hbm:async,hbm:expandable,cuMemAlloc,cuMemAllocAsync";

typedef struct options {
  int repeat;
  double budget;
  const char *out; /* --out FILE: the JSON, written again after every log */
  allocator_t allocators[16];
  int n_allocators;
  char **logs;
  int n_logs;
} options_t;

static int usage(const char *why) {
  fprintf(stderr,
          "bench_gpu_replay: %s\nusage: bench_gpu_replay [--repeat N] [--budget SECONDS] "
          "[--allocators A,B,...] [--out FILE] LOG...\n  allocators: hbm:MODE (bfc, growth, "
          "platform, async, "
          "expandable), cuMemAlloc, cuMemAllocAsync\n",
          why);
  return 2;
}

static int parse_allocators(const char *list, options_t *o) {
  char copy[512];
  snprintf(copy, sizeof copy, "%s", list);
  o->n_allocators = 0;
  for (char *save = NULL, *name = strtok_r(copy, ",", &save); name;
       name = strtok_r(NULL, ",", &save)) {
    if (o->n_allocators == 16 || !parse_allocator(name, &o->allocators[o->n_allocators]))
      return usage("--allocators: expected hbm:MODE, cuMemAlloc or cuMemAllocAsync");
    o->n_allocators++;
  }
  return o->n_allocators ? 0 : usage("--allocators: empty");
}

static int parse_options(int argc, char **argv, options_t *o) {
  o->repeat = 5;
  o->budget = 120;
  int st = parse_allocators(default_allocators, o);
  int i = 1;
  for (; st == 0 && i + 1 < argc && !strncmp(argv[i], "--", 2); i += 2) {
    if (!strcmp(argv[i], "--repeat"))
      o->repeat = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--budget"))
      o->budget = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--allocators"))
      st = parse_allocators(argv[i + 1], o);
    else if (!strcmp(argv[i], "--out"))
      o->out = argv[i + 1];
    else
      return usage("unknown option");
  }
  if (st)
    return st;
  if (o->repeat < 1 || o->repeat > 999 || o->budget <= 0)
    return usage("--repeat takes 1 to 999 and --budget a positive number of seconds");
  o->logs = argv + i;
  o->n_logs = argc - i;
  return o->n_logs > 0 ? 0 : usage("no log given");
}

/* Every allocator on one log, each within its share of what is left of the budget. */
static bool run_log(log_input_t *in, options_t *o, driver_t *cu, double deadline, int pairs_left,
                    json_t *rows, json_t *not_run) {
  bool ok = true;
  for (int k = 0; k < o->n_allocators; k++, pairs_left--) {
    allocator_t *a = &o->allocators[k];
    double left = deadline - now_s();
    if (left <= 0) {
      json_array_append_new(not_run,
                            json_sprintf("%s on %s: the time budget was spent", a->name, in->name));
      ok = false;
      continue;
    }
    json_t *row = run_pair(in, a, cu, o->repeat, left / pairs_left);
    json_t *ns = json_object_get(row, "ns_per_op");
    ok = ok && ns && json_real_value(ns) > 0;
    const char *error = json_string_value(json_object_get(row, "error"));
    if (error && !strncmp(error, "stopped", 7)) /* begun, not finished: not run either */
      json_array_append_new(
          not_run, json_sprintf("%s on %s: stopped, the time budget was spent", a->name, in->name));
    else if (!error && !ns) /* its memory measured, but no timed replay fit: say so */
      json_array_append_new(
          not_run, json_sprintf("%s on %s: timed replays not run, the time budget was spent",
                                a->name, in->name));
    fprintf(stderr, "  %-16s %10.1f ns/op  reserved %14lld B  failed %lld%s%s\n", a->name,
            ns ? json_real_value(ns) : 0.0,
            (long long)json_integer_value(json_object_get(row, "peak_reserved_bytes")),
            (long long)json_integer_value(json_object_get(row, "failed_allocations")),
            error ? "  error: " : "", error ? error : "");
    json_array_append_new(rows, row);
  }
  return ok;
}

/* The results so far, to stdout or (replaced whole) to --out. */
static void write_json(const options_t *o, json_t *out) {
  if (!o->out) {
    json_dumpf(out, stdout, JSON_INDENT(1));
    putchar('\n');
    return;
  }
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", o->out);
  if (json_dump_file(out, tmp, JSON_INDENT(1)) != 0 || rename(tmp, o->out) != 0)
    fprintf(stderr, "bench_gpu_replay: cannot write %s\n", o->out);
}

int main(int argc, char **argv) {
  options_t o = {0};
  int st = parse_options(argc, argv, &o);
  if (st)
    return st;
  driver_t cu = {0};
  if (!open_driver(&cu))
    return 3;
  hard_deadline = now_s() + o.budget;
  json_t *logs = json_array(), *not_run = json_array();
  json_t *out = json_pack("{s:s,s:I,s:i,s:f,s:O,s:O}", "device", cu.name, "device_total_bytes",
                          (json_int_t)cu.total, "repeat", o.repeat, "budget_seconds", o.budget,
                          "logs", logs, "not_run", not_run);
  bool ok = true;
  for (int l = 0; l < o.n_logs; l++) {
    log_input_t in;
    if (!load_log(o.logs[l], &in)) {
      json_array_append_new(not_run, json_sprintf("%s: unreadable", o.logs[l]));
      ok = false;
      continue;
    }
    fprintf(stderr, "%s: %zu events, peak live %llu B\n", in.name, in.n_events,
            (unsigned long long)in.peak_live);
    json_t *rows = json_array();
    ok &= run_log(&in, &o, &cu, hard_deadline, (o.n_logs - l) * o.n_allocators, rows, not_run);
    json_array_append_new(logs,
                          json_pack("{s:s,s:I,s:I,s:I,s:o}", "log", in.name, "events",
                                    (json_int_t)in.n_events, "operations", (json_int_t)in.n_ops,
                                    "peak_live_bytes", (json_int_t)in.peak_live, "results", rows));
    free_log(&in);
    if (o.out)
      write_json(&o, out);
  }
  write_json(&o, out);
  json_decref(logs);
  json_decref(not_run);
  json_decref(out);
  cu.ctx_release(cu.device);
  return ok ? 0 : 1;
}
