/* replay.c — `hbm replay`: an allocation log (RMM CSV, read by src/profile/alloc_log.c)
 * replayed through libhbm on a private simulated device, to measure the allocator on real
 * workloads: the peak reserved memory of a mode, the smallest device on which the log runs
 * (min memory), the first allocation that fails and why, and the time per operation.
 *
 * The log's pointers are resolved to slot indices once, before any replay, so that the timed
 * loop does nothing but hbm_alloc / hbm_free and a store: what is measured is the allocator.
 * Every replay runs on a fresh sim device with its own name (so no other process shares its
 * ledger), as big as asked, all of it usable (fraction 1). The allocator never touches device
 * memory, and neither does the replay: a 16 GiB replay writes nothing.
 *
 * The peak live bytes come from the profile model (hbm_alloc_log_to_profile + hbm_analyze),
 * the same computation `hbm report` prints, so the two can never disagree. */
#include "alloc/alloc.h"
#include "alloc/step.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB (1ull << 20)
#define GiB (1ull << 30)
#define MAX_MEMORY (1ull << 50) /* HBM_SIM_MEMORY's upper bound: 1024 TiB */
#define DEFAULT_REPEAT 5
#define PROGRESS_EVERY 65536

/* One event, resolved: an allocation of `size` bytes into slot, or (size 0) a free of it. */
typedef struct replay_op {
  uint64_t size;
  uint32_t slot;
  uint32_t event; /* index in the log */
} replay_op_t;

typedef struct replay {
  const hbm_alloc_log_t *log;
  replay_op_t *ops;
  size_t n_ops;
  void **slots;
  uint32_t n_slots;
  uint32_t *left_live; /* the slots still live at the end of the log */
  uint32_t n_left_live;
  const hbm_replay_options_t *opt;
} replay_t;

/* What one replay saw. */
typedef struct outcome {
  uint64_t failed;
  int64_t first_event; /* -1: none failed */
  uint64_t first_size;
  char *first_message;
  uint64_t peak_reserved;
} outcome_t;

void hbm_replay_options_default(hbm_replay_options_t *opt) {
  memset(opt, 0, sizeof *opt);
  opt->mode = HBM_MODE_BFC;
}

void hbm_replay_result_free(hbm_replay_result_t *r) {
  if (!r)
    return;
  free(r->first_failure_message);
  r->first_failure_message = NULL;
}

static void progress(const replay_t *rp, const char *phase, double done) {
  if (rp->opt && rp->opt->progress)
    rp->opt->progress(rp->opt->progress_ctx, phase, done);
}

/* ---- resolving pointers to slots ---- */

static hbm_status_t bad_event(const hbm_alloc_log_t *log, size_t i, const char *what) {
  const hbm_log_event_t *e = &log->events[i];
  return hbm__error(HBM_ERR_INVALID, "event %zu (line %lld): %s 0x%llx", i, (long long)e->line,
                    what, (unsigned long long)e->pointer);
}

/* Gives each allocation a slot that is free at that point of the log (a stack of freed
 * slots), so the slot array is as long as the most blocks live at once. */
static hbm_status_t resolve(replay_t *rp) {
  const hbm_alloc_log_t *log = rp->log;
  rp->ops = malloc((log->n_events + 1) * sizeof *rp->ops);
  uint32_t *free_slots = malloc((log->n_events + 1) * sizeof *free_slots);
  hbm_u64map_t live; /* pointer → slot */
  hbm_u64map_init(&live);
  hbm_status_t st = rp->ops && free_slots
                        ? HBM_OK
                        : hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory resolving a log");
  size_t n_free = 0;
  for (size_t i = 0; i < log->n_events && st == HBM_OK; i++) {
    const hbm_log_event_t *e = &log->events[i];
    uint64_t slot;
    if (e->action == HBM_LOG_ALLOCATE) {
      if (hbm_u64map_get(&live, e->pointer, &slot)) {
        st = bad_event(log, i, "allocation of a live pointer");
        break;
      }
      slot = n_free ? free_slots[--n_free] : rp->n_slots++;
      if (!hbm_u64map_put(&live, e->pointer, slot))
        st = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory resolving a log");
      rp->ops[rp->n_ops++] = (replay_op_t){e->size, (uint32_t)slot, (uint32_t)i};
    } else if (e->action == HBM_LOG_FREE) {
      if (!hbm_u64map_remove(&live, e->pointer, &slot)) {
        st = bad_event(log, i, "free of a pointer that is not live:");
        break;
      }
      free_slots[n_free++] = (uint32_t)slot;
      rp->ops[rp->n_ops++] = (replay_op_t){0, (uint32_t)slot, (uint32_t)i};
    }
  }
  free(free_slots);
  if (st == HBM_OK && (!(rp->slots = calloc(rp->n_slots + 1, sizeof *rp->slots)) ||
                       !(rp->left_live = malloc((live.count + 1) * sizeof *rp->left_live))))
    st = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory resolving a log");
  for (size_t i = 0; st == HBM_OK && i < live.cap; i++)
    if (live.used[i] == 1)
      rp->left_live[rp->n_left_live++] = (uint32_t)live.values[i];
  hbm_u64map_free(&live);
  return st;
}

static void replay_free(replay_t *rp) {
  free(rp->ops);
  free(rp->slots);
  free(rp->left_live);
}

/* ---- one replay ---- */

static hbm_device_t *open_replay_device(hbm_mode_t mode, uint64_t memory) {
  static atomic_uint counter;
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  cfg.device = HBM_DEVICE_SIM;
  cfg.sim_memory = memory;
  cfg.mem_fraction = 1.0;
  snprintf(cfg.sim_name, sizeof cfg.sim_name, "replay-%d-%u", (int)getpid(),
           atomic_fetch_add(&counter, 1));
  hbm_config_set_mode(&cfg, mode, HBM_ORIGIN_FLAG);
  /* What a diagnosis names as the origin of these settings: the replay's options. */
  const hbm_config_field_t set[] = {HBM_CFG_DEVICE, HBM_CFG_SIM_MEMORY, HBM_CFG_SIM_NAME,
                                    HBM_CFG_MEM_FRACTION};
  for (size_t i = 0; i < HBM_ARRAY_LEN(set); i++)
    cfg.origin[set[i]] = HBM_ORIGIN_FLAG;
  return hbm_open(&cfg);
}

/* Frees the blocks the log left live, so the next replay starts from an empty allocator.
 * (Only those slots: the timed loop leaves freed pointers in the others, which the next
 * allocation into the slot overwrites before any free reads them.) */
static void free_leftovers(replay_t *rp, hbm_device_t *dev) {
  for (uint32_t i = 0; i < rp->n_left_live; i++) {
    uint32_t s = rp->left_live[i];
    if (rp->slots[s])
      hbm_free(dev, rp->slots[s]);
    rp->slots[s] = NULL;
  }
}

/* Notes a failed allocation; false when it is not an OOM (host trouble: stop). */
static bool note_failure(outcome_t *o, const replay_op_t *op) {
  if (hbm_last_status() != HBM_ERR_NO_MEMORY)
    return false;
  if (o->failed++ == 0) {
    o->first_event = op->event;
    o->first_size = op->size;
    o->first_message = hbm__strdup(hbm_last_error());
  }
  return true;
}

/* The first replay of a device: counts failures, reports progress, and stops at the first
 * failure when stop_early (the min-memory search only wants to know whether it fits). The
 * log's step markers go to mode learn as the program's own would (not in the timed replays:
 * they serve the plan the first one found). */
static hbm_status_t replay_checked(replay_t *rp, hbm_device_t *dev, bool stop_early, outcome_t *o) {
  memset(o, 0, sizeof *o);
  o->first_event = -1;
  hbm_status_t st = HBM_OK;
  size_t i = 0, mark = 0;
  const hbm_alloc_log_t *log = rp->log;
  for (; i < rp->n_ops && st == HBM_OK; i++) {
    const replay_op_t *op = &rp->ops[i];
    for (; mark < log->n_step_begins && log->step_begins[mark] <= op->event; mark++)
      hbm__step_mark(hbm__device_strategy(dev));
    if (!op->size) {
      if (rp->slots[op->slot])
        st = hbm_free(dev, rp->slots[op->slot]);
      rp->slots[op->slot] = NULL;
    } else if (!(rp->slots[op->slot] = hbm_alloc(dev, op->size, 0))) {
      if (!note_failure(o, op))
        st = hbm_last_status();
      else if (stop_early)
        break;
    }
    if (!stop_early && i % PROGRESS_EVERY == PROGRESS_EVERY - 1)
      progress(rp, "replay", (double)i / (double)rp->n_ops);
  }
  hbm_stats_t s;
  if (hbm_get_stats(dev, &s) == HBM_OK)
    o->peak_reserved = s.peak_bytes_reserved;
  if (i < rp->n_ops) /* stopped early: the device is about to close with what is live */
    memset(rp->slots, 0, rp->n_slots * sizeof *rp->slots);
  else
    free_leftovers(rp, dev);
  return st;
}

/* The timed loop: nothing but the allocator's calls. Returns nanoseconds. */
static int64_t replay_timed(replay_t *rp, hbm_device_t *dev) {
  void **slots = rp->slots;
  const replay_op_t *op = rp->ops, *end = rp->ops + rp->n_ops;
  int64_t t0 = hbm__now_ns();
  for (; op < end; op++) {
    if (op->size)
      slots[op->slot] = hbm_alloc(dev, op->size, 0);
    else if (slots[op->slot])
      hbm_free(dev, slots[op->slot]);
  }
  int64_t t1 = hbm__now_ns();
  free_leftovers(rp, dev);
  return t1 - t0;
}

static int compare_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

static void time_replays(replay_t *rp, hbm_device_t *dev, int repeat, hbm_replay_result_t *out) {
  double *ns = malloc((size_t)repeat * sizeof *ns);
  if (!ns || rp->n_ops == 0) {
    free(ns);
    return;
  }
  uint64_t calls = atomic_load(&dev->phys->vm_calls);
  for (int i = 0; i < repeat; i++) {
    ns[i] = (double)replay_timed(rp, dev) / (double)rp->n_ops;
    progress(rp, "timing", (double)(i + 1) / repeat);
  }
  calls = atomic_load(&dev->phys->vm_calls) - calls;
  out->vm_calls_per_op = (double)calls / ((double)rp->n_ops * repeat);
  hbm_stats_t s; /* a cache may hold more in later passes than in the first */
  if (hbm_get_stats(dev, &s) == HBM_OK)
    out->peak_reserved_all_bytes = s.peak_bytes_reserved;
  qsort(ns, (size_t)repeat, sizeof *ns, compare_double);
  out->timed_replays = repeat;
  out->ns_per_op = repeat % 2 ? ns[repeat / 2] : (ns[repeat / 2 - 1] + ns[repeat / 2]) / 2;
  out->ns_per_op_min = ns[0];
  out->ns_per_op_max = ns[repeat - 1];
  free(ns);
}

/* ---- the minimum memory ---- */

/* Whether the whole log runs on `memory` bytes in `mode`; *fits gets the answer. */
static hbm_status_t runs_on(replay_t *rp, hbm_mode_t mode, uint64_t memory, bool *fits) {
  hbm_device_t *dev = open_replay_device(mode, memory);
  if (!dev)
    return hbm_last_status();
  outcome_t o;
  hbm_status_t st = replay_checked(rp, dev, true, &o);
  hbm_close(dev);
  free(o.first_message);
  *fits = o.failed == 0;
  return st;
}

static hbm_status_t analysed_peak(const hbm_alloc_log_t *log, uint64_t *peak);

/* Gallops up from the first size that could hold the peak, then bisects between the last
 * size that failed and the first that worked. */
static hbm_status_t search_min_memory(replay_t *rp, hbm_mode_t mode, uint64_t peak, uint64_t *out) {
  uint64_t lo = peak ? (peak - 1) / MiB : 0; /* MiB: every size <= lo is below the peak */
  uint64_t step = lo / 256 ? lo / 256 : 1, hi = lo + 1;
  bool fits = false;
  hbm_status_t st = HBM_OK;
  int probes = 0;
  *out = 0;
  while (st == HBM_OK && hi * MiB <= MAX_MEMORY) {
    if ((st = runs_on(rp, mode, hi * MiB, &fits)) != HBM_OK || fits)
      break;
    progress(rp, "min-memory", 0.5 * (1.0 - 1.0 / ++probes));
    lo = hi;
    hi = lo + step;
    step *= 2;
  }
  if (st != HBM_OK || !fits)
    return st;
  for (int done = 1; hi - lo > 1 && st == HBM_OK; done++) {
    uint64_t mid = lo + (hi - lo) / 2;
    if ((st = runs_on(rp, mode, mid * MiB, &fits)) == HBM_OK)
      *(fits ? &hi : &lo) = mid;
    double left = hi - lo > 1 ? log2((double)(hi - lo)) : 0; /* bisections to go */
    progress(rp, "min-memory", 0.5 + 0.5 * done / (done + left));
  }
  *out = st == HBM_OK ? hi * MiB : 0;
  return st;
}

hbm_status_t hbm_replay_min_memory(const hbm_alloc_log_t *log, hbm_mode_t mode, uint64_t *out) {
  if (!log || !out || (unsigned)mode >= HBM_MODE_COUNT)
    return hbm__error(HBM_ERR_INVALID, "hbm_replay_min_memory: bad argument");
  replay_t rp = {.log = log};
  uint64_t peak = 0; /* where the search starts: the log's peak, from the analysis module */
  hbm_status_t st = resolve(&rp);
  if (st == HBM_OK)
    st = analysed_peak(log, &peak);
  if (st == HBM_OK)
    st = search_min_memory(&rp, mode, peak, out);
  replay_free(&rp);
  return st;
}

/* ---- the whole replay ---- */

/* The log's peak, computed by the one analysis module. */
static hbm_status_t analysed_peak(const hbm_alloc_log_t *log, uint64_t *peak) {
  hbm_profile_t *p = hbm_alloc_log_to_profile(log, "replay");
  if (!p)
    return hbm_last_status();
  hbm_analysis_t *a = hbm_analyze(p, 0);
  hbm_status_t st = a ? HBM_OK : hbm_last_status();
  if (a)
    *peak = hbm_analysis_summary(a)->peak_bytes;
  hbm_analysis_free(a);
  hbm_profile_free(p);
  return st;
}

static uint64_t default_memory(uint64_t peak) {
  uint64_t twice = (2 * peak + GiB - 1) / GiB * GiB;
  return twice > 16 * GiB ? (twice < MAX_MEMORY ? twice : MAX_MEMORY) : 16 * GiB;
}

static void count_events(const hbm_alloc_log_t *log, hbm_replay_result_t *out) {
  for (size_t i = 0; i < log->n_events; i++) {
    hbm_log_action_t a = log->events[i].action;
    out->events += a != HBM_LOG_ALLOCATE_FAILURE;
    out->allocations += a == HBM_LOG_ALLOCATE;
    out->failure_records += a == HBM_LOG_ALLOCATE_FAILURE;
  }
  out->skipped_lines = log->skipped;
}

static void take_outcome(const replay_t *rp, outcome_t *o, hbm_replay_result_t *out) {
  out->peak_reserved_bytes = out->peak_reserved_all_bytes = o->peak_reserved;
  out->failed_allocations = o->failed;
  out->first_failure_event = o->first_event;
  out->first_failure_line = o->first_event >= 0 ? rp->log->events[o->first_event].line : -1;
  out->first_failure_size = o->first_size;
  out->first_failure_message = o->first_message;
  o->first_message = NULL;
}

static hbm_status_t check_options(const hbm_replay_options_t *opt) {
  if ((unsigned)opt->mode >= HBM_MODE_COUNT)
    return hbm__error(HBM_ERR_INVALID, "hbm_replay_run: unknown mode %d", (int)opt->mode);
  if (opt->memory && (opt->memory < MiB || opt->memory > MAX_MEMORY))
    return hbm__error(HBM_ERR_INVALID, "replay memory %llu is outside 1MiB..1024TiB",
                      (unsigned long long)opt->memory);
  return HBM_OK;
}

/* The most bytes live over operations [from, to) of the replay (requested sizes). */
static uint64_t peak_live_between(const replay_t *rp, uint64_t from, uint64_t to) {
  uint64_t *sizes = calloc(rp->n_slots + 1, sizeof *sizes), live = 0, peak = 0;
  for (size_t i = 0; sizes && i < rp->n_ops && i < to; i++) {
    const replay_op_t *op = &rp->ops[i];
    live = op->size ? live + op->size : live - sizes[op->slot];
    sizes[op->slot] = op->size;
    if (i >= from && live > peak)
      peak = live;
  }
  free(sizes);
  return peak;
}

/* Mode learn's account of the first replay: the step, what the plan served from the second
 * step on, what was reserved meanwhile. */
static void take_plan(const replay_t *rp, hbm_device_t *dev, hbm_replay_result_t *out) {
  hbm__step_stats_t s;
  hbm__step_get_stats(hbm__device_strategy(dev), &s);
  out->first_step_end_event = -1;
  out->step_operations = s.period;
  out->plans = s.plans;
  out->plans_retired = s.retired;
  out->plan_bytes = s.heap_bytes;
  out->plan_bound_bytes = s.bound_bytes;
  out->solve_ms = s.solve_ms;
  if (!s.first_step_end || s.first_step_end >= rp->n_ops)
    return;
  uint64_t after = s.ops - s.first_step_end;
  out->first_step_end_event = rp->ops[s.first_step_end].event;
  out->steady_reserved_bytes = s.steady_reserved;
  out->steady_peak_live_bytes = peak_live_between(rp, s.first_step_end, rp->n_ops);
  uint64_t first_end = s.first_planned_end ? s.first_planned_end : rp->n_ops;
  out->first_planned_reserved_bytes = s.first_reserved;
  out->first_planned_peak_live_bytes = peak_live_between(rp, s.first_step_end, first_end);
  out->first_planned_floor_bytes = s.first_floor;
  out->later_reserved_bytes = s.later_reserved;
  out->later_peak_live_bytes =
      s.first_planned_end ? peak_live_between(rp, s.first_planned_end, rp->n_ops) : 0;
  out->planned_operations = s.planned_ops;
  out->fallback_operations = after - s.planned_ops;
  out->planned_fraction = after ? (double)s.planned_ops / (double)after : 0;
}

static hbm_status_t replay_and_time(replay_t *rp, hbm_replay_result_t *out) {
  const hbm_replay_options_t *opt = rp->opt;
  hbm_device_t *dev = open_replay_device(opt->mode, out->memory_bytes);
  if (!dev)
    return hbm_last_status();
  outcome_t o;
  uint64_t calls = atomic_load(&dev->phys->vm_calls);
  hbm_status_t st = replay_checked(rp, dev, false, &o);
  calls = atomic_load(&dev->phys->vm_calls) - calls;
  out->vm_calls_per_op_first = rp->n_ops ? (double)calls / (double)rp->n_ops : 0;
  take_outcome(rp, &o, out);
  progress(rp, "replay", 1.0);
  hbm__step_stats_t before, after;
  hbm__step_get_stats(hbm__device_strategy(dev), &before);
  if (opt->mode == HBM_MODE_LEARN && st == HBM_OK && !o.failed)
    take_plan(rp, dev, out);
  int repeat = opt->repeat == 0 ? DEFAULT_REPEAT : opt->repeat;
  if (st == HBM_OK && repeat > 0)
    time_replays(rp, dev, repeat, out);
  hbm__step_get_stats(hbm__device_strategy(dev), &after);
  if (after.ops > before.ops)
    out->planned_fraction_timed =
        (double)(after.planned_ops - before.planned_ops) / (double)(after.ops - before.ops);
  hbm_close(dev);
  return st;
}

hbm_status_t hbm_replay_run(const hbm_alloc_log_t *log, const hbm_replay_options_t *opt,
                            hbm_replay_result_t *out) {
  hbm_replay_options_t defaults;
  if (!opt) {
    hbm_replay_options_default(&defaults);
    opt = &defaults;
  }
  if (!log || !out)
    return hbm__error(HBM_ERR_INVALID, "hbm_replay_run: NULL argument");
  memset(out, 0, sizeof *out);
  out->first_failure_event = out->first_failure_line = out->first_step_end_event = -1;
  out->mode = opt->mode;
  hbm_status_t st = check_options(opt);
  if (st != HBM_OK)
    return st;
  replay_t rp = {.log = log, .opt = opt};
  count_events(log, out);
  st = analysed_peak(log, &out->peak_live_bytes);
  if (st == HBM_OK)
    st = resolve(&rp);
  out->memory_bytes = opt->memory ? opt->memory : default_memory(out->peak_live_bytes);
  if (st == HBM_OK)
    st = replay_and_time(&rp, out);
  if (st == HBM_OK && opt->min_memory)
    st = search_min_memory(&rp, opt->mode, out->peak_live_bytes, &out->min_memory_bytes);
  replay_free(&rp);
  if (st != HBM_OK)
    hbm_replay_result_free(out);
  return st;
}
