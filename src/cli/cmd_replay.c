/* cmd_replay.c — `hbm replay LOG [--mode M] [--memory SIZE] [--min-memory] [--json]
 * [--lenient] [--repeat N] [--device N]`: an RMM allocation log, the trace of a PyTorch
 * memory snapshot (beside PyTorch's own reserved bytes), or the busiest allocator of an XProf
 * trace (its step markers given to mode learn), replayed through libhbm on a private
 * simulated device (hbm_replay_run): the log's peak live bytes, the mode's peak reserved
 * bytes, the smallest memory the log runs on, the first allocation that fails and why, and
 * the time per operation. A progress bar goes to stderr when it is a terminal and the work
 * is long. Exit status: 0 when every allocation succeeded, 1 when some failed or the log is
 * bad, 2 for a usage error. */
#include "cli.h"
#include "import/pickle.h"
#include "import/torch_snapshot.h"
#include "import/xprof.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Above this many events (or with a search), the replay shows its progress. */
#define LONG_LOG 50000

typedef struct options {
  const char *path;
  hbm_replay_options_t replay;
  bool json, lenient;
  int device;                     /* snapshots: the device to replay, -1: the busiest */
  bool torch;                     /* the input is a PyTorch memory snapshot */
  torch_device_summary_t pytorch; /* what the snapshot says about that device */
  char xprof[256];                /* an XProf trace (.xplane.pb): the allocator replayed */
} options_t;

static void print_usage(FILE *out) {
  fprintf(out,
          "usage: hbm replay LOG [--mode MODE] [--memory SIZE] [--min-memory] [--json]\n"
          "                  [--lenient] [--repeat N] [--device N]\n\n"
          "Replays an RMM allocation log (Thread,Time,Action,Pointer,Size,Stream), the trace\n"
          "of a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot), or the busiest\n"
          "allocator of an XProf trace (.xplane.pb; its step markers go to mode learn), through\n"
          "the allocator on a private simulated device whose memory is never touched.\n\n"
          "  --mode MODE    bfc (default), growth, platform, async, expandable or learn\n"
          "                 (learn: the repeating step found and served from a plan)\n"
          "  --memory SIZE  device memory, all of it usable (default: 16GiB, or twice the\n"
          "                 log's peak when that is more)\n"
          "  --min-memory   also find the smallest memory (1 MiB resolution) on which the\n"
          "                 log runs without one failed allocation\n"
          "  --json         machine-readable result\n"
          "  --lenient      skip malformed lines, frees of unknown pointers and second\n"
          "                 allocations of live pointers, and count them\n"
          "  --repeat N     timed replays after the warm-up one (default 5; 0: no timing)\n"
          "  --device N     snapshots: the CUDA device to replay (default: the one with the\n"
          "                 most trace events)\n");
}

static int parse_repeat(const char *text, int *out) {
  char *end;
  long n = strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || n < 0 || n > 1000)
    return cli_fail("replay", 2, "--repeat: expected 0 to 1000 replays, got '%s'", text);
  *out = n == 0 ? -1 : (int)n;
  return 0;
}

static int parse_device(const char *text, int *out) {
  char *end;
  long n = strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || n < 0 || n > 1023)
    return cli_fail("replay", 2, "--device: expected a device number 0 to 1023, got '%s'", text);
  *out = (int)n;
  return 0;
}

static int parse_options(int argc, char **argv, options_t *o) {
  hbm_replay_options_default(&o->replay);
  o->device = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_value = i + 1 < argc;
    if (!strcmp(a, "--json")) {
      o->json = true;
    } else if (!strcmp(a, "--lenient")) {
      o->lenient = true;
    } else if (!strcmp(a, "--min-memory")) {
      o->replay.min_memory = 1;
    } else if (!strcmp(a, "--mode") && has_value) {
      if (hbm_mode_parse(argv[++i], &o->replay.mode) != HBM_OK)
        return cli_fail("replay", 2, "--mode: %s", hbm_last_error());
    } else if (!strcmp(a, "--memory") && has_value) {
      if (cli_parse_size("replay", "--memory", argv[++i], &o->replay.memory))
        return 2;
    } else if (!strcmp(a, "--repeat") && has_value) {
      if (parse_repeat(argv[++i], &o->replay.repeat))
        return 2;
    } else if (!strcmp(a, "--device") && has_value) {
      if (parse_device(argv[++i], &o->device))
        return 2;
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      print_usage(stdout);
      return -1;
    } else if (a[0] != '-' && !o->path) {
      o->path = a;
    } else {
      print_usage(stderr);
      return 2;
    }
  }
  if (!o->path) {
    print_usage(stderr);
    return 2;
  }
  return 0;
}

/* ---- progress ---- */

static void draw_progress(void *ctx, const char *phase, double done) {
  (void)ctx;
  int filled = (int)(done * 30 + 0.5);
  fprintf(stderr, "\r  %-10s [%.*s%*s] %3d%%", phase, filled, "##############################",
          30 - filled, "", (int)(done * 100 + 0.5));
  fflush(stderr);
}

static void clear_progress(void) { fprintf(stderr, "\r%*s\r", 52, ""); }

static bool wants_progress(const options_t *o, const hbm_alloc_log_t *log) {
  return isatty(STDERR_FILENO) &&
         (log->n_events >= LONG_LOG || o->replay.min_memory ||
          o->replay.mode == HBM_MODE_PLATFORM || o->replay.mode == HBM_MODE_EXPANDABLE);
}

/* ---- output ---- */

static const char *bytes(uint64_t n, char *buf) { return hbm_format_bytes(n, buf, 32); }

static void print_indented(const char *text, const char *indent) {
  while (*text) {
    const char *nl = strchr(text, '\n');
    int n = nl ? (int)(nl - text) : (int)strlen(text);
    printf("%s%.*s\n", indent, n, text);
    text += n + (nl != NULL);
  }
}

static double ratio(uint64_t x, uint64_t peak) { return peak ? (double)x / (double)peak : 0.0; }

/* PyTorch's own reserved bytes beside hbm's: what hbm would have needed for the same trace. */
static void print_pytorch(const options_t *o, const hbm_replay_result_t *r) {
  const torch_device_summary_t *t = &o->pytorch;
  char a[32], b[32];
  printf("  PyTorch reserved     %s (%llu bytes) at the snapshot (its segments on cuda:%d), "
         "%s at most over the trace\n",
         bytes(t->reserved_end, a), (unsigned long long)t->reserved_end, t->device,
         bytes(t->peak_reserved, b));
  /* BFC preallocates the whole device, so what it needs is the smallest memory it runs on */
  bool bfc = r->mode == HBM_MODE_BFC;
  uint64_t needed = bfc ? r->min_memory_bytes : r->peak_reserved_bytes;
  if (t->peak_reserved && needed)
    printf("  hbm vs PyTorch       %s %s: %.4fx PyTorch's peak reserved\n", hbm_mode_name(r->mode),
           bfc ? "min memory" : "peak reserved", ratio(needed, t->peak_reserved));
  else if (bfc)
    printf("  hbm vs PyTorch       bfc preallocates the whole device; --min-memory finds what "
           "it needs\n");
  printf("  snapshot             %zu trace events, %zu allocations live before the trace "
         "began%s\n",
         t->trace_events, t->before_trace, t->n_devices > 1 ? " (one of several devices)" : "");
}

/* Mode learn: the step found, what the plan served from the second step on. */
static void print_plan(const hbm_replay_result_t *r) {
  char a[32], b[32];
  if (!r->step_operations || r->first_step_end_event < 0) {
    printf("  step                 none found: every allocation placed as bfc places it\n");
    return;
  }
  printf("  step                 %llu operations, found in the stream; the second began at "
         "event %lld\n",
         (unsigned long long)r->step_operations, (long long)r->first_step_end_event);
  printf("  plan                 %s for a step whose blocks peak at %s (%.4fx), solved in %.1f "
         "ms; %llu plan%s made, %llu retired\n",
         bytes(r->plan_bytes, a), bytes(r->plan_bound_bytes, b),
         ratio(r->plan_bytes, r->plan_bound_bytes), r->solve_ms, (unsigned long long)r->plans,
         r->plans == 1 ? "" : "s", (unsigned long long)r->plans_retired);
  printf("  served from the plan %.2f%% of the operations from the second step on (%llu fell "
         "back to the allocator)\n",
         100.0 * r->planned_fraction, (unsigned long long)r->fallback_operations);
  printf("  steady reserved      %s, %.4fx the peak live from the second step on (%s)\n",
         bytes(r->steady_reserved_bytes, a),
         ratio(r->steady_reserved_bytes, r->steady_peak_live_bytes),
         bytes(r->steady_peak_live_bytes, b));
  printf("    first planned step %s, %.4fx its peak live (%s): blocks of the step before live\n",
         bytes(r->first_planned_reserved_bytes, a),
         ratio(r->first_planned_reserved_bytes, r->first_planned_peak_live_bytes),
         bytes(r->first_planned_peak_live_bytes, b));
  if (r->first_planned_floor_bytes)
    printf("      its floor        %s: no placement maps less around those blocks\n",
           bytes(r->first_planned_floor_bytes, a));
  if (r->later_peak_live_bytes)
    printf("    later steps        %s, %.4fx their peak live (%s)\n",
           bytes(r->later_reserved_bytes, a),
           ratio(r->later_reserved_bytes, r->later_peak_live_bytes),
           bytes(r->later_peak_live_bytes, b));
  if (r->timed_replays)
    printf("  timed replays        %.2f%% of their operations served from the plan\n",
           100.0 * r->planned_fraction_timed);
}

static void print_text(const options_t *o, const hbm_alloc_log_t *log,
                       const hbm_replay_result_t *r) {
  char a[32], b[32];
  printf("hbm replay %s: mode %s on %s of simulated memory\n", o->path, hbm_mode_name(r->mode),
         bytes(r->memory_bytes, a));
  printf("  events               %llu (%llu allocation%s)", (unsigned long long)r->events,
         (unsigned long long)r->allocations, r->allocations == 1 ? "" : "s");
  if (r->failure_records)
    printf(", %llu 'allocate failure' record%s not replayed",
           (unsigned long long)r->failure_records, r->failure_records == 1 ? "" : "s");
  printf("\n");
  if (r->skipped_lines)
    printf("  skipped lines        %llu (first: %s)\n", (unsigned long long)r->skipped_lines,
           log->first_skip);
  printf("  peak live            %s (%llu bytes)\n", bytes(r->peak_live_bytes, a),
         (unsigned long long)r->peak_live_bytes);
  printf("  peak reserved        %s (%llu bytes), %.4fx peak live%s\n",
         bytes(r->peak_reserved_bytes, a), (unsigned long long)r->peak_reserved_bytes,
         ratio(r->peak_reserved_bytes, r->peak_live_bytes),
         r->mode == HBM_MODE_EXPANDABLE ? " (physical memory mapped)" : "");
  if (o->torch)
    print_pytorch(o, r);
  if (o->xprof[0])
    printf("  XProf trace          allocator %s; %zu step marker%s\n", o->xprof, log->n_step_begins,
           log->n_step_begins == 1 ? "" : "s");
  if (o->replay.min_memory) {
    if (r->min_memory_bytes)
      printf("  min memory           %s (%llu bytes), %.4fx peak live\n",
             bytes(r->min_memory_bytes, a), (unsigned long long)r->min_memory_bytes,
             ratio(r->min_memory_bytes, r->peak_live_bytes));
    else
      printf("  min memory           none: the log does not run on any simulated device\n");
  }
  printf("  failed allocations   %llu\n", (unsigned long long)r->failed_allocations);
  if (r->first_failure_event >= 0) {
    /* a snapshot's "line" is the event's place in its device trace, 1-based (0: before it) */
    printf("  first failure        event %lld (%s %lld%s), %s requested:\n",
           (long long)r->first_failure_event, o->torch ? "trace event" : "line",
           (long long)(o->torch ? r->first_failure_line - 1 : r->first_failure_line),
           o->torch ? "" : " of the log", bytes(r->first_failure_size, b));
    print_indented(r->first_failure_message ? r->first_failure_message : "", "    ");
  }
  if (r->mode == HBM_MODE_LEARN)
    print_plan(r);
  if (r->timed_replays)
    printf("  time per operation   %.1f ns (median of %d replays after a warm-up; %.1f to "
           "%.1f)\n",
           r->ns_per_op, r->timed_replays, r->ns_per_op_min, r->ns_per_op_max);
}

static json_t *plan_json(const hbm_replay_result_t *r) {
  return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f}", "step_operations",
                   (json_int_t)r->step_operations, "first_step_end_event",
                   (json_int_t)r->first_step_end_event, "planned_operations",
                   (json_int_t)r->planned_operations, "fallback_operations",
                   (json_int_t)r->fallback_operations, "plan_bytes", (json_int_t)r->plan_bytes,
                   "plan_bound_bytes", (json_int_t)r->plan_bound_bytes, "plans",
                   (json_int_t)r->plans, "plans_retired", (json_int_t)r->plans_retired, "solve_ms",
                   r->solve_ms, "planned_fraction_timed", r->planned_fraction_timed);
}

static json_t *first_failure_json(const hbm_replay_result_t *r) {
  if (r->first_failure_event < 0)
    return json_null();
  return json_pack("{s:I, s:I, s:I, s:s}", "event", (json_int_t)r->first_failure_event, "line",
                   (json_int_t)r->first_failure_line, "size", (json_int_t)r->first_failure_size,
                   "message", r->first_failure_message ? r->first_failure_message : "");
}

static int print_json(const options_t *o, const hbm_alloc_log_t *log,
                      const hbm_replay_result_t *r) {
  json_t *root = json_object();
  json_object_set_new(root, "log", json_string(o->path));
  json_object_set_new(root, "mode", json_string(hbm_mode_name(r->mode)));
  json_object_set_new(root, "memory_bytes", json_integer((json_int_t)r->memory_bytes));
  json_object_set_new(root, "events", json_integer((json_int_t)r->events));
  json_object_set_new(root, "allocations", json_integer((json_int_t)r->allocations));
  json_object_set_new(root, "failure_records", json_integer((json_int_t)r->failure_records));
  json_object_set_new(root, "skipped_lines", json_integer((json_int_t)r->skipped_lines));
  if (r->skipped_lines)
    json_object_set_new(root, "first_skipped", json_string(log->first_skip));
  json_object_set_new(root, "peak_live_bytes", json_integer((json_int_t)r->peak_live_bytes));
  json_object_set_new(root, "peak_reserved_bytes",
                      json_integer((json_int_t)r->peak_reserved_bytes));
  json_object_set_new(root, "min_memory_bytes",
                      o->replay.min_memory && r->min_memory_bytes
                          ? json_integer((json_int_t)r->min_memory_bytes)
                          : json_null());
  json_object_set_new(root, "failed_allocations", json_integer((json_int_t)r->failed_allocations));
  json_object_set_new(root, "first_failure", first_failure_json(r));
  json_object_set_new(root, "ns_per_op", r->timed_replays ? json_real(r->ns_per_op) : json_null());
  json_object_set_new(root, "timed_replays", json_integer(r->timed_replays));
  if (r->mode == HBM_MODE_LEARN) {
    json_object_set_new(root, "steady_reserved_bytes",
                        json_integer((json_int_t)r->steady_reserved_bytes));
    json_object_set_new(root, "steady_peak_live_bytes",
                        json_integer((json_int_t)r->steady_peak_live_bytes));
    json_object_set_new(root, "first_planned_reserved_bytes",
                        json_integer((json_int_t)r->first_planned_reserved_bytes));
    json_object_set_new(root, "first_planned_peak_live_bytes",
                        json_integer((json_int_t)r->first_planned_peak_live_bytes));
    json_object_set_new(root, "first_planned_floor_bytes",
                        json_integer((json_int_t)r->first_planned_floor_bytes));
    json_object_set_new(root, "later_reserved_bytes",
                        json_integer((json_int_t)r->later_reserved_bytes));
    json_object_set_new(root, "later_peak_live_bytes",
                        json_integer((json_int_t)r->later_peak_live_bytes));
    json_object_set_new(root, "planned_fraction", json_real(r->planned_fraction));
    json_object_set_new(root, "plan", plan_json(r));
  }
  if (o->xprof[0])
    json_object_set_new(root, "xprof",
                        json_pack("{s:s, s:I}", "allocator", o->xprof, "step_markers",
                                  (json_int_t)log->n_step_begins));
  if (o->torch)
    json_object_set_new(root, "pytorch",
                        json_pack("{s:i, s:I, s:I, s:I, s:I, s:I}", "device", o->pytorch.device,
                                  "reserved_bytes", (json_int_t)o->pytorch.reserved_end,
                                  "peak_reserved_bytes", (json_int_t)o->pytorch.peak_reserved,
                                  "allocated_bytes", (json_int_t)o->pytorch.allocated_end,
                                  "trace_events", (json_int_t)o->pytorch.trace_events,
                                  "allocations_before_trace", (json_int_t)o->pytorch.before_trace));
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!text)
    return cli_fail("replay", 1, "out of host memory writing the result");
  printf("%s\n", text);
  free(text);
  return 0;
}

/* An RMM CSV log, or (by its content) a PyTorch memory snapshot's trace, or an XProf trace's
 * busiest allocator. */
static hbm_status_t read_input(options_t *o, hbm_alloc_log_t *log) {
  memset(log, 0, sizeof *log);
  hbm__mapped_t in;
  hbm_status_t st = hbm__map_file(o->path, &in);
  if (st != HBM_OK)
    return st;
  o->torch = pk_looks_like_pickle(in.data, in.len);
  bool xprof = !o->torch && hbm__xprof_is(o->path, in.data, in.len);
  if (o->torch) {
    st = hbm__torch_snapshot_log(in.data, in.len, o->path, o->device, log, &o->pytorch, &in);
  } else if (xprof) {
    st = hbm__xprof_log(o->path, in.data, in.len, log, o->xprof, sizeof o->xprof);
  } else { /* the CSV parser wants its text NUL-terminated */
    hbm__unmap(&in);
    char *data;
    size_t len;
    if ((st = hbm__read_file(o->path, &data, &len)) != HBM_OK)
      return st;
    st = hbm_alloc_log_parse(data, len, o->path, o->lenient, log);
    free(data);
  }
  hbm__unmap(&in);
  return st;
}

int hbm_cmd_replay(int argc, char **argv) {
  options_t o;
  memset(&o, 0, sizeof o);
  int rc = parse_options(argc, argv, &o);
  if (rc)
    return rc < 0 ? 0 : rc;
  hbm_alloc_log_t log;
  if (read_input(&o, &log) != HBM_OK) /* --lenient helps with bad lines only */
    return cli_fail("replay", 1, "%s%s", hbm_last_error(),
                    o.lenient || o.torch || hbm_last_status() != HBM_ERR_PARSE
                        ? ""
                        : " (--lenient skips such lines)");
  bool progress = wants_progress(&o, &log);
  if (progress)
    o.replay.progress = draw_progress;
  hbm_replay_result_t r;
  hbm_status_t st = hbm_replay_run(&log, &o.replay, &r);
  if (progress)
    clear_progress();
  if (st != HBM_OK)
    rc = cli_fail("replay", 1, "%s: %s", o.path, hbm_last_error());
  else if (o.json)
    rc = print_json(&o, &log, &r);
  else
    print_text(&o, &log, &r);
  if (rc == 0 && r.failed_allocations)
    rc = 1;
  if (st == HBM_OK)
    hbm_replay_result_free(&r);
  hbm_alloc_log_free(&log);
  if (fflush(stdout) != 0 || ferror(stdout))
    rc = cli_fail("replay", 1, "cannot write the result");
  return rc;
}
