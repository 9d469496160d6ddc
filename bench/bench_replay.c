/* bench_replay.c — the allocator on real allocation logs, the numbers of BENCHMARKS.md's
 * "Allocator" table. For each log (RMM CSV), through hbm_replay_run on a private sim device:
 *   - ns/op in the default mode: steady state, single thread, thread-safe build. --repeat
 *     rounds (default 9) over all the logs; in each, a log is replayed on a fresh device once
 *     to warm up and three times timed, and the round's figure is the median of the three;
 *     the table gives the median over the rounds. On a shared machine a passing load then
 *     weighs on every log alike instead of on the few that happened to be running;
 *   - min memory in the default mode: the smallest device (1 MiB steps) the log runs on,
 *     over the log's peak live bytes;
 *   - growth: peak reserved bytes over peak live, on a device large enough;
 *   - expandable: peak physical memory mapped over peak live, against the budget
 *     1.01 x peak live + 64 MiB (and its ns/op, which the granule mappings dominate); in a
 *     second table, the same on a sim device with CUDA's rules (HBM_SIM_VM_GRANULES=whole:
 *     a mapping is unmapped only whole, so the strategy maps and gives back whole runs),
 *     with the driver calls per operation of both.
 * Next to them, what XLA's BFC allocator and an O(1) offset allocator did on the same logs,
 * read from the README.md beside the logs when it has a row for the log.
 *
 * Usage: bench_replay [--repeat N] LOG...      (prints the Markdown tables)
 *        bench_replay --expandable LOG...      (only the expandable table)
 *        bench_replay --ns LOG                 (one log: fresh device, 1 untimed + 5 timed
 *                                               replays, prints the median ns/op)
 *        bench_replay --ns-arena LOG           (the same for hbm's arena alone: no device,
 *                                               lock, statistics or checks of arguments)
 *        bench_replay --ns-learn LOG           (--ns in mode learn: the steps served from a plan)
 *        bench_replay --learn LOG...           (mode learn against the default mode: the step
 *                                               found, the share served from the plan, what
 *                                               is reserved, min memory; exit 1 on a target missed)
 *        bench_replay --side-by-side-learn CMD ROUNDS LOG...
 *            --side-by-side with mode learn (--ns-learn) against CMD, the default mode beside
 *            them; exits 1 if mode learn is slower than CMD on any log
 *        bench_replay --side-by-side CMD ROUNDS LOG...
 *            hbm against another allocator's replay program CMD (run as `CMD LOG`, printing
 *            its median ns/op the same way), with hbm's arena alone beside them: a fresh
 *            process per allocator per log, ROUNDS rounds, order rotated, medians. Exits 1
 *            if hbm is slower on any log or anything measured nothing. */
#include "alloc/alloc.h" /* the arena, for --ns-arena */
#include "hbm.h"
#include "log_slots.h"
#include "machine.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Expandable mode on one log: peak mapped (over all its replays) / peak live, ns/op, driver
 * calls per operation. */
typedef struct expandable_run {
  double ratio, ns, calls, calls_first;
} expandable_run_t;

typedef struct row {
  char name[256];
  uint64_t events, peak;
  double min_ratio, growth, expandable, expandable_budget, expandable_ns;
  expandable_run_t divisible, whole; /* the sim device's two granule rules */
  double ns[1000];
  int timed;
  bool ok;
  reference_t ref;
} row_t;

/* Timed replays in expandable mode, their median the figure: a replay of a GPT log takes
 * 1-2 ms, most of it system calls, and a median of 3 moved by 20% from run to run. */
#define EXPANDABLE_REPEAT 9

/* Expandable mode with the sim device's granules divisible or `whole` (CUDA's rules, set
 * through HBM_SIM_VM_GRANULES for the device the replay opens). */
static int replay_expandable(const hbm_alloc_log_t *log, bool whole, expandable_run_t *out) {
  hbm_replay_result_t r;
  setenv("HBM_SIM_VM_GRANULES", whole ? "whole" : "divisible", 1);
  int st = replay(log, HBM_MODE_EXPANDABLE, EXPANDABLE_REPEAT, 0, &r);
  unsetenv("HBM_SIM_VM_GRANULES");
  if (st != 0)
    return st;
  if (r.failed_allocations || !r.peak_live_bytes) /* a failed replay measured nothing */
    st = -1;
  out->ratio = (double)r.peak_reserved_all_bytes / (double)r.peak_live_bytes;
  out->ns = r.ns_per_op;
  out->calls = r.vm_calls_per_op;
  out->calls_first = r.vm_calls_per_op_first;
  hbm_replay_result_free(&r);
  return st;
}

/* Everything but the default mode's time: once per log. */
static void measure_log(const char *path, row_t *row) {
  base_name(path, row->name, sizeof row->name);
  read_reference(path, row->name, &row->ref);
  hbm_alloc_log_t log;
  if (hbm_alloc_log_read(path, 0, &log) != HBM_OK) {
    fprintf(stderr, "bench_replay: %s\n", hbm_last_error());
    return;
  }
  hbm_replay_result_t bfc, growth, expandable;
  row->ok = replay(&log, HBM_MODE_BFC, -1, 1, &bfc) == 0 &&
            replay(&log, HBM_MODE_GROWTH, -1, 0, &growth) == 0 &&
            replay(&log, HBM_MODE_EXPANDABLE, EXPANDABLE_REPEAT, 0, &expandable) == 0 &&
            replay_expandable(&log, false, &row->divisible) == 0 &&
            replay_expandable(&log, true, &row->whole) == 0;
  if (row->ok) {
    double peak = (double)bfc.peak_live_bytes;
    row->events = bfc.events;
    row->peak = bfc.peak_live_bytes;
    row->min_ratio = (double)bfc.min_memory_bytes / peak;
    row->growth = (double)growth.peak_reserved_bytes / peak;
    row->expandable = (double)expandable.peak_reserved_bytes / peak;
    row->expandable_budget = 1.01 * peak + 64.0 * MiB;
    row->expandable_ns = expandable.ns_per_op;
  }
  hbm_replay_result_free(&bfc);
  hbm_replay_result_free(&growth);
  hbm_replay_result_free(&expandable);
  hbm_alloc_log_free(&log);
}

/* One round: on a fresh device, a warm-up replay and three timed ones (their median). */
static void time_once(const char *path, row_t *row) {
  hbm_alloc_log_t log;
  hbm_replay_result_t r;
  if (!row->ok || hbm_alloc_log_read(path, 0, &log) != HBM_OK)
    return;
  if (replay(&log, HBM_MODE_BFC, 3, 0, &r) == 0)
    row->ns[row->timed++] = r.ns_per_op;
  hbm_replay_result_free(&r);
  hbm_alloc_log_free(&log);
}

static int compare_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return a < b ? -1 : a > b;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static bool within_budget(const row_t *r, double ratio) {
  return ratio * (double)r->peak <= 1.01 * (double)r->peak + 64.0 * MiB;
}

/* The expandable table: divisible granules (sim) against whole runs (CUDA's rules). Returns
 * the worst ns/op of the whole runs (-1 when a log measured nothing). */
static double print_expandable(const row_t *rows, int n) {
  printf("\nExpandable mode, sim granules divisible (one mmap per run, partial unmaps) vs "
         "whole (HBM_SIM_VM_GRANULES=whole: CUDA's rules, a block's new granules one "
         "cuMemCreate + cuMemMap, unmapped only whole). Peak mapped over the first and the "
         "timed replays; budget 1.01x peak live + 64 MiB; calls: driver calls per operation "
         "(cuMemMap + cuMemSetAccess count 2) in the first replay, from an empty device, and "
         "in the timed ones.\n\n");
  printf("| log | peak live MiB | divisible mapped/peak | ns/op | calls/op first, timed | whole "
         "mapped/peak | within budget | ns/op | calls/op first, timed |\n| --- | ---: | ---: | "
         "---: | ---: | ---: | :---: | ---: | ---: |\n");
  double worst = 0;
  for (int i = 0; i < n; i++) {
    const row_t *r = &rows[i];
    if (!r->ok)
      return -1;
    printf("| %s | %.0f | %.4f | %.0f | %.4f, %.4f | %.4f | %s | %.0f | %.4f, %.4f |\n", r->name,
           (double)r->peak / MiB, r->divisible.ratio, r->divisible.ns, r->divisible.calls_first,
           r->divisible.calls, r->whole.ratio, within_budget(r, r->whole.ratio) ? "yes" : "**no**",
           r->whole.ns, r->whole.calls_first, r->whole.calls);
    worst = r->whole.ns > worst ? r->whole.ns : worst;
  }
  return worst;
}

/* --expandable LOG...: only the expandable table. Exit status 1 when a log measured nothing
 * or a whole-runs replay was over 150 ns/op or over its budget. */
static int expandable_only(char **logs, int n) {
  if (n == 0) {
    fprintf(stderr, "usage: bench_replay --expandable LOG...\n");
    return 2;
  }
  row_t *rows = calloc((size_t)n, sizeof *rows);
  if (!rows)
    return 1;
  bool budget = true;
  for (int i = 0; i < n; i++) {
    row_t *r = &rows[i];
    hbm_alloc_log_t log;
    base_name(logs[i], r->name, sizeof r->name);
    if (hbm_alloc_log_read(logs[i], 0, &log) != HBM_OK) {
      fprintf(stderr, "bench_replay: %s\n", hbm_last_error());
      continue;
    }
    hbm_replay_result_t peak;
    r->ok = replay(&log, HBM_MODE_BFC, -1, 0, &peak) == 0 &&
            replay_expandable(&log, false, &r->divisible) == 0 &&
            replay_expandable(&log, true, &r->whole) == 0;
    r->peak = r->ok ? peak.peak_live_bytes : 0;
    if (r->ok)
      hbm_replay_result_free(&peak);
    hbm_alloc_log_free(&log);
    budget = budget && r->ok && within_budget(r, r->whole.ratio);
  }
  double worst = print_expandable(rows, n);
  free(rows);
  if (worst < 0) {
    printf("\nA log measured nothing: no target is met.\n");
    return 1;
  }
  printf("\nWhole runs, worst: %.0f ns/op (target <= 150: %s), every peak within budget: %s.\n",
         worst, worst <= 150 ? "met" : "**not met**", budget ? "yes" : "**no**");
  return worst <= 150 && budget ? 0 : 1;
}

/* --ns LOG: this process replays one log on a fresh device, once untimed and 5 times timed,
 * and prints the median ns/op (what --side-by-side runs, one fresh process per replay). */
static int time_one_log(const char *path, hbm_mode_t mode) {
  hbm_alloc_log_t log;
  hbm_replay_result_t r;
  if (hbm_alloc_log_read(path, 0, &log) != HBM_OK) {
    fprintf(stderr, "bench_replay: %s\n", hbm_last_error());
    return 1;
  }
  int st = replay(&log, mode, 5, 0, &r);
  hbm_alloc_log_free(&log);
  if (st != 0 || r.failed_allocations || r.timed_replays == 0 || r.events == 0) {
    fprintf(stderr, "bench_replay: %s: nothing was timed\n", path);
    return 1;
  }
  printf("%.3f\n", r.ns_per_op);
  if (mode == HBM_MODE_LEARN) /* what was timed: the share of it the plan served */
    fprintf(stderr, "%s: %.4f of the timed operations served from the plan\n", path,
            r.planned_fraction_timed);
  hbm_replay_result_free(&r);
  return 0;
}

/* ---- hbm's arena alone (--ns-arena) ---- */

#define ARENA_BASE (1ull << 40)
#define ARENA_BYTES (1ull << 40) /* more than any log needs: no allocation fails */

/* One replay on the arena, as hbm_replay_run's timed loop does it through hbm_alloc and
 * hbm_free (the front's fast path, then its general path when the arena must grow its
 * tables); the blocks left live are freed after the clock stops. Nanoseconds, or -1 when an
 * allocation failed. */
static int64_t arena_replay(hbm__arena_t *a, const slot_op_t *ops, size_t n, uint64_t *slots,
                            uint32_t n_slots) {
  bool failed = false;
  int64_t t0 = hbm__now_ns();
  for (const slot_op_t *op = ops, *end = ops + n; op < end; op++) {
    uint64_t *slot = &slots[op->slot], requested;
    uint32_t tag;
    if (op->size) {
      hbm__block_t b;
      if (!hbm__arena_alloc_fast(a, op->size, slot))
        *slot = hbm__arena_alloc(a, op->size, HBM__MIN_BLOCK, &b) == HBM_OK ? b.addr : 0;
      failed |= !*slot;
    } else if (*slot) {
      hbm__arena_release_at(a, *slot, &requested, &tag);
      *slot = 0;
    }
  }
  int64_t t1 = hbm__now_ns();
  for (uint32_t i = 0; i < n_slots; i++) {
    uint64_t requested;
    uint32_t tag;
    if (slots[i])
      hbm__arena_release_at(a, slots[i], &requested, &tag);
    slots[i] = 0;
  }
  return failed ? -1 : t1 - t0;
}

/* --ns-arena LOG: hbm's best-fit arena and its address index with nothing around them,
 * timed like --ns (1 untimed + 5 timed replays, the median): beside --ns it splits hbm's
 * time into the arena's and the front's (device lock, statistics, checks). */
static int time_arena_alone(const char *path) {
  hbm_alloc_log_t log;
  if (hbm_alloc_log_read(path, 0, &log) != HBM_OK) {
    fprintf(stderr, "bench_replay: %s\n", hbm_last_error());
    return 1;
  }
  size_t n = 0;
  uint32_t n_slots = 0;
  slot_op_t *ops = NULL;
  bool resolved = resolve_slots(&log, &ops, &n, &n_slots);
  hbm_alloc_log_free(&log);
  uint64_t *slots = calloc((size_t)n_slots + 1, sizeof *slots);
  hbm__arena_t *a = hbm__arena_new(true);
  double ns[6];
  int timed = 0;
  if (resolved && slots && a && n && hbm__arena_add_region(a, ARENA_BASE, ARENA_BYTES, 0) == HBM_OK)
    for (int r = 0; r < 6; r++) {
      int64_t t = arena_replay(a, ops, n, slots, n_slots);
      if (t < 0)
        break;
      if (r > 0)
        ns[timed++] = (double)t / (double)n;
    }
  hbm__arena_delete(a);
  free(slots);
  free(ops);
  if (timed < 5) {
    fprintf(stderr, "bench_replay: %s: nothing was timed on the arena\n", path);
    return 1;
  }
  printf("%.3f\n", median(ns, timed));
  return 0;
}

/* One fresh process: `command` with the log's path quoted after it; its output's number. */
static bool run_timer(const char *command, const char *path, double *ns) {
  char line[8192];
  snprintf(line, sizeof line, "%s '%s'", command, path);
  FILE *p = popen(line, "r");
  if (!p)
    return false;
  bool ok = fscanf(p, "%lf", ns) == 1;
  return pclose(p) == 0 && ok && *ns > 0;
}

/* --side-by-side CMD: hbm (this program with --ns), hbm's arena alone (--ns-arena) and CMD
 * (another allocator's replay of the same log, printing its median ns/op), each a fresh
 * process per log, `rounds` rounds, the order of the three rotated every round; medians.
 * Exit status 1 unless every log was timed by all three and hbm was at or below CMD on
 * every log. */
static int side_by_side(const char *command, int rounds, char **logs, int n, bool learn) {
  double(*ns)[3][1000] = calloc((size_t)n, sizeof *ns);
  if (!ns)
    return 1;
  char self[4096], hbm_cmd[4200], arena_cmd[4200];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    free(ns);
    return 1;
  }
  self[len] = '\0';
  snprintf(hbm_cmd, sizeof hbm_cmd, "'%s' %s", self, learn ? "--ns-learn" : "--ns");
  snprintf(arena_cmd, sizeof arena_cmd, "'%s' %s", self, learn ? "--ns" : "--ns-arena");
  const char *cmds[3] = {hbm_cmd, command, arena_cmd};
  bool ok = n > 0;
  for (int r = 0; r < rounds && ok; r++)
    for (int i = 0; i < n && ok; i++)
      for (int k = 0; k < 3 && ok; k++) {
        int which = (k + r + i) % 3;
        ok = run_timer(cmds[which], logs[i], &ns[i][which][r]);
        if (!ok)
          fprintf(stderr, "bench_replay: %s on %s measured nothing\n", cmds[which], logs[i]);
      }
  if (learn)
    printf("| log | hbm mode learn ns/op | offset allocator ns/op | learn / offset | hbm default "
           "mode ns/op | default / offset |\n| --- | ---: | ---: | ---: | ---: | ---: |\n");
  else
    printf("| log | hbm ns/op | offset allocator ns/op | hbm / offset | hbm's arena alone ns/op | "
           "arena alone / offset |\n| --- | ---: | ---: | ---: | ---: | ---: |\n");
  double worst = 0;
  for (int i = 0; ok && i < n; i++) {
    char name[256];
    double h = median(ns[i][0], rounds), o = median(ns[i][1], rounds);
    double a = median(ns[i][2], rounds);
    printf("| %s | %.1f | %.1f | %.2f | %.1f | %.2f |\n", base_name(logs[i], name, sizeof name), h,
           o, h / o, a, a / o);
    worst = h / o > worst ? h / o : worst;
  }
  free(ns);
  if (!ok)
    return 1;
  printf("\nWorst hbm%s / offset allocator: %.2f (target <= 1.00, %d rounds, order rotated): %s\n",
         learn ? " mode learn" : "", worst, rounds, worst <= 1.0 ? "met" : "**not met**");
  return worst <= 1.0 ? 0 : 1;
}

/* ---- mode learn (--learn) ---- */

#define SIM_GRANULE (2 * MiB) /* the sim device's physical granule (a GPU's, under CUDA's VMM) */

static double ratio(uint64_t x, uint64_t of) { return of ? (double)x / (double)of : 0; }

/* The least whole granules that hold `bytes` (the bytes live at a peak: no placement on a
 * device that maps whole granules reserves less while they are live). */
static uint64_t granules_for(uint64_t bytes) {
  return (bytes + SIM_GRANULE - 1) / SIM_GRANULE * SIM_GRANULE;
}

/* One log in mode learn beside the default mode: the first replay's plan, min memory of both.
 * Returns false when it measured nothing. */
static bool learn_row(const char *path, bool *met, int *floored) {
  char name[256];
  hbm_alloc_log_t log;
  if (hbm_alloc_log_read(path, 0, &log) != HBM_OK) {
    fprintf(stderr, "bench_replay: %s\n", hbm_last_error());
    return false;
  }
  hbm_replay_result_t l, b;
  bool ok = replay(&log, HBM_MODE_LEARN, -1, 1, &l) == 0;
  if (ok && replay(&log, HBM_MODE_BFC, -1, 1, &b) != 0) {
    hbm_replay_result_free(&l);
    ok = false;
  }
  hbm_alloc_log_free(&log);
  if (!ok || !l.events || !l.peak_live_bytes || !b.min_memory_bytes || !l.min_memory_bytes) {
    fprintf(stderr, "bench_replay: %s: measured nothing\n", path);
    return false;
  }
  double peak = (double)l.peak_live_bytes;
  bool stepped = l.first_step_end_event >= 0, later = stepped && l.later_peak_live_bytes;
  double first =
             stepped ? ratio(l.first_planned_reserved_bytes, l.first_planned_peak_live_bytes) : 0,
         rest = later ? ratio(l.later_reserved_bytes, l.later_peak_live_bytes) : 0;
  /* the floors: whole granules for the peak live bytes (the first planned step's also no
   * lower than what the blocks of the step before leave it, step_floor.c) */
  uint64_t first_floor = granules_for(l.first_planned_peak_live_bytes);
  first_floor =
      l.first_planned_floor_bytes > first_floor ? l.first_planned_floor_bytes : first_floor;
  double first_min = ratio(first_floor, l.first_planned_peak_live_bytes),
         rest_min =
             later ? ratio(granules_for(l.later_peak_live_bytes), l.later_peak_live_bytes) : 0;
  bool fraction_ok = !stepped || l.planned_fraction >= 0.95;
  bool reserved_ok = !stepped || (first <= 1.01 && (!later || rest <= 1.01));
  bool at_floor = stepped && first <= first_min + 1e-9 && (!later || rest <= rest_min + 1e-9);
  bool min_ok = l.min_memory_bytes <= b.min_memory_bytes && !l.failed_allocations;
  *met = *met && fraction_ok && reserved_ok && min_ok;
  *floored += fraction_ok && !reserved_ok && at_floor && min_ok;
  char step[64] = "none", frac[32] = "—", f[32] = "—", ff[32] = "—", r[32] = "—", rf[32] = "—",
       plan[32] = "—";
  if (stepped) {
    snprintf(step, sizeof step, "%llu ops", (unsigned long long)l.step_operations);
    snprintf(frac, sizeof frac, "%s%.2f%%%s", fraction_ok ? "" : "**", 100.0 * l.planned_fraction,
             fraction_ok ? "" : "**");
    snprintf(f, sizeof f, "%.4f", first);
    snprintf(ff, sizeof ff, "%.4f", first_min);
    if (later) {
      snprintf(r, sizeof r, "%.4f", rest);
      snprintf(rf, sizeof rf, "%.4f", rest_min);
    }
    snprintf(plan, sizeof plan, "%.4f", ratio(l.plan_bytes, l.plan_bound_bytes));
  }
  printf("| %s | %llu | %.0f | %s | %s | %llu | %s | %s | %s | %s | %s | %s | %.0f | %.4f | "
         "%s%.4f%s | %llu |\n",
         base_name(path, name, sizeof name), (unsigned long long)l.events, peak / MiB, step, frac,
         (unsigned long long)l.fallback_operations, f, ff, r, rf,
         !stepped      ? "—"
         : reserved_ok ? "yes"
         : at_floor    ? "no: at the floor"
                       : "**no**",
         plan, l.solve_ms, (double)b.min_memory_bytes / peak, min_ok ? "" : "**",
         (double)l.min_memory_bytes / peak, min_ok ? "" : "**",
         (unsigned long long)l.failed_allocations);
  hbm_replay_result_free(&l);
  hbm_replay_result_free(&b);
  return true;
}

/* --learn LOG...: the table of BENCHMARKS.md's "Mode learn"; exit 1 when a log measured nothing
 * or missed a target (>= 95% of the operations after the first step served from the plan,
 * reserved <= 1.01x the peak live meanwhile, min memory no worse than the default mode's). */
static int learn_table(char **logs, int n) {
  if (n == 0) {
    fprintf(stderr, "usage: bench_replay --learn LOG...\n");
    return 2;
  }
  printf("| log | events | peak live MiB | step found | served from the plan after the first "
         "step | fell back | reserved / peak live, first planned step | its floor | later steps | "
         "their floor | <= 1.01x | plan / step bound | solve ms | bfc min memory | learn min "
         "memory | failed |\n");
  printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: | ---: | "
         "---: | ---: | ---: | ---: |\n");
  bool met = true, measured = true;
  int floored = 0;
  for (int i = 0; i < n; i++)
    measured = learn_row(logs[i], &met, &floored) && measured;
  printf("\nTargets (every log with a step: >= 95%% served, reserved <= 1.01x the peak live in "
         "the first planned step and in the later ones; every log: min memory <= bfc's, no "
         "failure): %s",
         !measured ? "**a log measured nothing**"
         : met     ? "met"
                   : "**not met**");
  if (measured && floored)
    printf(" (%d log%s over 1.01x only where reserved is at its floor: no placement reserves "
           "less on a device mapping 2 MiB granules)",
           floored, floored == 1 ? "" : "s");
  printf("\n");
  return measured && met ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--ns"))
    return time_one_log(argv[2], HBM_MODE_BFC);
  if (argc == 3 && !strcmp(argv[1], "--ns-learn"))
    return time_one_log(argv[2], HBM_MODE_LEARN);
  if (argc > 1 && !strcmp(argv[1], "--learn")) {
    bench_print_machine();
    return learn_table(argv + 2, argc - 2);
  }
  if (argc > 4 && !strcmp(argv[1], "--side-by-side-learn")) {
    int rounds = atoi(argv[3]);
    if (rounds < 1 || rounds > 1000)
      return 2;
    return side_by_side(argv[2], rounds, argv + 4, argc - 4, true);
  }
  if (argc == 3 && !strcmp(argv[1], "--ns-arena"))
    return time_arena_alone(argv[2]);
  if (argc > 4 && !strcmp(argv[1], "--side-by-side")) {
    int rounds = atoi(argv[3]);
    if (rounds < 1 || rounds > 1000)
      return 2;
    return side_by_side(argv[2], rounds, argv + 4, argc - 4, false);
  }
  if (argc > 1 && !strcmp(argv[1], "--expandable")) {
    bench_print_machine();
    return expandable_only(argv + 2, argc - 2);
  }
  int repeat = 9, first = 1;
  if (argc > 2 && !strcmp(argv[1], "--repeat")) {
    repeat = atoi(argv[2]);
    first = 3;
  }
  if (first >= argc || repeat < 5 || repeat > 1000) {
    fprintf(stderr, "usage: bench_replay [--repeat N (>= 5)] LOG...\n");
    return 2;
  }
  bench_print_machine();
  int n = argc - first;
  row_t *rows = calloc((size_t)n, sizeof *rows);
  if (!rows)
    return 1;
  for (int i = 0; i < n; i++)
    measure_log(argv[first + i], &rows[i]);
  for (int round = 0; round < repeat; round++)
    for (int i = 0; i < n; i++)
      time_once(argv[first + i], &rows[i]);
  printf("Columns marked (README) are copied from the README.md beside the logs, not measured "
         "here.\n\n");
  printf("| log | events | peak live MiB | hbm ns/op | XLA BFC ns/op (README) | offset ns/op "
         "(README) | hbm min memory | XLA BFC (README) | offset (README) | hbm growth | XLA BFC "
         "growth (README) | PyTorch reserved (README) | hbm expandable | within 1.01x + 64 MiB "
         "| expandable ns/op |\n");
  printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
         "---: | :---: | ---: |\n");
  double worst_ns = 0, worst_min = 0, worst_growth = 0, worst_excess = -1e18;
  int unmeasured = 0;
  double worst_exp_ns = 0;
  for (int i = 0; i < n; i++) {
    row_t *r = &rows[i];
    if (!r->ok || !r->timed || !r->events) {
      fprintf(stderr, "bench_replay: %s: measured nothing\n", argv[first + i]);
      unmeasured++;
      continue;
    }
    double ns = median(r->ns, r->timed), mapped = r->expandable * (double)r->peak;
    const reference_t *ref = &r->ref;
    printf("| %s | %llu | %.0f | %.1f | %s | %s | %.4f | %s | %s | %.4f | %s | %s | %.4f | %s "
           "| %.0f |\n",
           r->name, (unsigned long long)r->events, (double)r->peak / MiB, ns, ref->xla_ns,
           ref->offset_ns, r->min_ratio, ref->xla_min, ref->offset_min, r->growth, ref->xla_growth,
           ref->pytorch, r->expandable, mapped <= r->expandable_budget ? "yes" : "**no**",
           r->expandable_ns);
    worst_ns = ns > worst_ns ? ns : worst_ns;
    worst_min = r->min_ratio > worst_min ? r->min_ratio : worst_min;
    worst_growth = r->growth > worst_growth ? r->growth : worst_growth;
    worst_exp_ns = r->expandable_ns > worst_exp_ns ? r->expandable_ns : worst_exp_ns;
    double excess = (mapped - r->expandable_budget) / MiB;
    worst_excess = excess > worst_excess ? excess : worst_excess;
  }
  if (unmeasured) { /* a benchmark that measured nothing must not pass */
    printf("\n%d of %d logs measured nothing: no target is met.\n", unmeasured, n);
    free(rows);
    return 1;
  }
  printf("\nWorst over the logs: %.1f ns/op (target <= 25), min memory %.4fx (target <= 1.02), "
         "growth %.4fx (target <= 1.05), expandable %+.1f MiB against its budget (target "
         "<= 0), expandable %.0f ns/op (target <= 150: %s).\n",
         worst_ns, worst_min, worst_growth, worst_excess, worst_exp_ns,
         worst_exp_ns <= 150 ? "met" : "**not met**");
  double worst_whole = print_expandable(rows, n);
  printf("\nWhole runs (CUDA's rules), worst: %.0f ns/op (target <= 150: %s).\n", worst_whole,
         worst_whole <= 150 ? "met" : "**not met**");
  free(rows);
  return 0;
}
