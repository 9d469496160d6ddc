/* cmd_report.c — `hbm report PATH [--json] [--space NAME] [--width N]`: the peak, timeline,
 * buffers at the peak, totals and OOM events of a profile, via hbm_report_text/json.
 * PATH is a logdir (its newest run), a run directory, a profile file, an RMM CSV log or an
 * HLO/XLA dump; hbm_profile_load recognises files by content. Also home of
 * cli_profile_paths, which `hbm export` shares. */
#include "cli.h"
#include "import/load.h"
#include "profile/index.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Says on stderr what the listing of a logdir left out, and why (the page of `hbm view` says
 * the same). */
static void say_skipped(const char *cmd, const hbm_logdir_scan_t *scan) {
  size_t kept = scan->n_skipped < HBM_LOGDIR_SKIPS_KEPT ? scan->n_skipped : HBM_LOGDIR_SKIPS_KEPT;
  for (size_t i = 0; i < kept; i++)
    fprintf(stderr, "hbm %s: skipped %s: %s\n", cmd, scan->skipped[i].path, scan->skipped[i].why);
  if (scan->n_skipped > kept)
    fprintf(stderr, "hbm %s: ... and %zu more skipped\n", cmd, scan->n_skipped - kept);
}

int cli_profile_paths(const char *cmd, const char *path, int flags, hbm_logdir_entry_t **out,
                      size_t *n) {
  *out = NULL;
  *n = 0;
  struct stat st;
  if (stat(path, &st) != 0)
    return cli_fail(cmd, 1, "%s: no such file or directory", path);
  if (!S_ISDIR(st.st_mode)) {
    if (!(*out = calloc(1, sizeof **out)))
      return cli_fail(cmd, 1, "out of host memory");
    snprintf((*out)->path, sizeof(*out)->path, "%s", path);
    *n = 1;
    return 0;
  }
  hbm_logdir_scan_t scan;
  if (hbm_logdir_scan(path, flags, &scan) != HBM_OK)
    return cli_fail(cmd, 1, "%s", hbm_last_error());
  say_skipped(cmd, &scan);
  if (scan.n_entries == 0) {
    hbm_logdir_scan_free(&scan);
    return cli_fail(cmd, 1,
                    "%s: no profiles found (expected <logdir>/plugins/profile/<run>/*.hbmtrace or "
                    "*.xplane.pb, or profile files in the directory)%s",
                    path, scan.n_skipped ? "; some entries were skipped: see above" : "");
  }
  size_t k = 1; /* the newest run comes first */
  while (k < scan.n_entries && !strcmp(scan.entries[k].run, scan.entries[0].run))
    k++;
  free(scan.skipped);
  *out = scan.entries;
  *n = k;
  return 0;
}

static void print_usage(FILE *out) {
  fprintf(out,
          "usage: hbm report PATH [--json] [--space NAME] [--width N] [--follow-links]\n\n"
          "PATH: a logdir (its newest run), a run directory, an .hbmtrace profile, an RMM CSV\n"
          "log, HLO text, an XLA dump (*-buffer-assignment.txt, *-memory-usage-report.txt), an\n"
          "XProf file (*.xplane.pb as jax.profiler.trace writes it, *.hlo_proto.pb), a PyTorch\n"
          "memory snapshot or a pasted OOM text; without PATH, $HBM_PROFILE_DIR. When the run\n"
          "holds several hosts, devices or ranks, their summary comes first: the peak per\n"
          "device, the largest named, the spread, what the largest holds beyond the median.\n\n"
          "  --json        machine-readable report (peak_bytes, peak_step, peak_reserved_bytes,\n"
          "                limit_bytes, buffers_at_peak, oom_events, devices, ...)\n"
          "  --space NAME  only this memory space (its name, e.g. HBM, or its device, e.g. sim0)\n"
          "  --width N     chart width in columns (default: the terminal's, else 100)\n"
          "  --follow-links  in a logdir, read runs and profiles that symbolic links lead to\n"
          "                outside it (skipped by default, as `hbm view` does, and said so)\n");
}

static int terminal_width(void) {
  struct winsize ws;
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
    return ws.ws_col;
  const char *columns = getenv("COLUMNS");
  int n = columns ? atoi(columns) : 0;
  return n >= 40 ? n : 100;
}

/* The index of the space called `name` (by name or device), -1 for all; -2 when absent. */
static int find_space(const hbm_profile_t *p, const char *name) {
  if (!name)
    return -1;
  for (int i = 0; i < hbm_profile_space_count(p); i++) {
    const hbm_space_info_t *s = hbm_profile_space(p, i);
    if (!strcmp(s->name, name) || (s->device && !strcmp(s->device, name)))
      return i;
  }
  return -2;
}

static int no_such_space(const hbm_profile_t *p, const char *path, const char *name) {
  char list[1024] = "";
  size_t n = 0;
  for (int i = 0; i < hbm_profile_space_count(p) && n < sizeof list - 1; i++) {
    const hbm_space_info_t *s = hbm_profile_space(p, i);
    int k = snprintf(list + n, sizeof list - n, "%s%s on %s", i ? ", " : "", s->name, s->device);
    n += k > 0 ? (size_t)k : 0;
  }
  return cli_fail("report", 2, "%s: no memory space '%s' (it has: %s)", path, name,
                  list[0] ? list : "none");
}

/* One profile's JSON report as a jansson object (via a memory stream). */
static json_t *report_as_json(const hbm_profile_t *p, int space) {
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem)
    return NULL;
  hbm_status_t s = hbm_report_json(p, space, mem);
  fclose(mem);
  json_t *j = s == HBM_OK ? json_loadb(text, len, 0, NULL) : NULL;
  free(text);
  return j;
}

typedef struct options {
  const char *path, *space;
  bool json;
  int flags; /* HBM_LOGDIR_FOLLOW_LINKS */
  int width;
} options_t;

static int parse_options(int argc, char **argv, options_t *o) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      o->json = true;
    } else if (!strcmp(argv[i], "--follow-links")) {
      o->flags |= HBM_LOGDIR_FOLLOW_LINKS;
    } else if (!strcmp(argv[i], "--space") && i + 1 < argc) {
      o->space = argv[++i];
    } else if (!strcmp(argv[i], "--width") && i + 1 < argc) {
      o->width = atoi(argv[++i]);
      if (o->width < 40 || o->width > 1000)
        return cli_fail("report", 2, "--width: expected 40 to 1000 columns, got '%s'", argv[i]);
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      print_usage(stdout);
      return -1;
    } else if (argv[i][0] != '-' && !o->path) {
      o->path = argv[i];
    } else {
      print_usage(stderr);
      return 2;
    }
  }
  if (!o->path)
    o->path = cli_env_logdir();
  if (!o->path) {
    print_usage(stderr);
    return 2;
  }
  return 0;
}

/* The run's summary row when a run has several profiles (hosts): the largest peak, where. */
typedef struct run_best {
  uint64_t peak;
  char where[512];
} run_best_t;

static void note_best(const hbm_profile_t *p, const char *path, run_best_t *best) {
  for (int s = 0; s < hbm_profile_space_count(p); s++) {
    hbm_analysis_t *a = hbm_analyze(p, s);
    uint64_t peak = a ? hbm_analysis_summary(a)->peak_bytes : 0;
    hbm_analysis_free(a);
    const hbm_space_info_t *info = hbm_profile_space(p, s);
    if (peak > best->peak) {
      best->peak = peak;
      const char *slash = strrchr(path, '/');
      snprintf(best->where, sizeof best->where, "%.200s (%.100s of %.200s)",
               slash ? slash + 1 : path, info->name, info->device);
    }
  }
}

/* Reports one profile; JSON reports are appended to `reports`. */
static int report_one(const options_t *o, const char *path, const hbm_profile_t *p, bool heading,
                      json_t *reports, run_best_t *best) {
  int space = find_space(p, o->space), rc = 0;
  if (space == -2) {
    rc = no_such_space(p, path, o->space);
  } else if (o->json) {
    json_t *j = report_as_json(p, space);
    if (!j)
      rc = cli_fail("report", 1, "%s: %s", path, hbm_last_error());
    else
      json_object_set_new(j, "path", json_string(path)), json_array_append_new(reports, j);
  } else {
    if (heading)
      printf("=== %s\n", path);
    if (hbm_report_text(p, space, o->width ? o->width : terminal_width(), stdout) != HBM_OK)
      rc = cli_fail("report", 1, "%s: %s", path, hbm_last_error());
    if (heading)
      printf("\n");
    if (heading)
      note_best(p, path, best);
  }
  return rc;
}

/* The profiles of the run, loaded (a profile read before is read from its index, index.h);
 * 0 or an exit status. load_ns[i] is how long profile i took, 0 when it came from its index. */
static int load_all(const hbm_logdir_entry_t *entries, size_t n, hbm_profile_t **profiles,
                    const char **names, int64_t *load_ns) {
  for (size_t i = 0; i < n; i++) {
    names[i] = entries[i].path;
    int64_t t0 = hbm__now_ns();
    /* From its index, or a big one without an index in one pass as the summary it would be. */
    if ((profiles[i] = hbm__profile_load_first(entries[i].path, -1)) != NULL)
      continue;
    if (!(profiles[i] = hbm_profile_load(entries[i].path)))
      return cli_fail("report", 1, "%s", hbm_last_error());
    load_ns[i] = hbm__now_ns() - t0;
  }
  return 0;
}

/* After the report: the index of each big profile read whole, for next time. */
static void write_indexes(const hbm_logdir_entry_t *entries, size_t n,
                          hbm_profile_t *const *profiles, const int64_t *load_ns) {
  fflush(stdout);
  for (size_t i = 0; i < n; i++)
    if (load_ns[i] && hbm__index_wanted(entries[i].path, load_ns[i]))
      hbm__index_write(profiles[i], entries[i].path);
}

/* The many-device summary as a jansson object (via a memory stream); NULL when none. */
static json_t *devices_as_json(hbm_profile_t *const *profiles, const char **names, size_t n) {
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem)
    return NULL;
  hbm_status_t s = hbm_report_devices_json((const hbm_profile_t *const *)profiles, names, n, mem);
  fclose(mem);
  json_t *j = s == HBM_OK ? json_loadb(text, len, 0, NULL) : NULL;
  free(text);
  return j;
}

/* One JSON document: the report of the profile with the highest peak at the top level, and
 * every profile of the run under "profiles" when there are several. */
static int print_json(json_t *reports, json_t *devices) {
  size_t n = json_array_size(reports), best = 0;
  for (size_t i = 1; i < n; i++)
    if (json_integer_value(json_object_get(json_array_get(reports, i), "peak_bytes")) >
        json_integer_value(json_object_get(json_array_get(reports, best), "peak_bytes")))
      best = i;
  json_t *root = json_deep_copy(json_array_get(reports, best));
  if (root && n > 1)
    json_object_set(root, "profiles", reports);
  if (root && devices)
    json_object_set(root, "devices", devices);
  char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(root);
  if (!text)
    return cli_fail("report", 1, "out of host memory writing the report");
  printf("%s\n", text);
  free(text);
  return 0;
}

int hbm_cmd_report(int argc, char **argv) {
  options_t o = {0};
  int rc = parse_options(argc, argv, &o);
  if (rc)
    return rc < 0 ? 0 : rc;
  hbm_logdir_entry_t *entries;
  size_t n;
  if ((rc = cli_profile_paths("report", o.path, o.flags, &entries, &n)) != 0)
    return rc;
  json_t *reports = json_array(), *devices = NULL;
  run_best_t best = {0};
  hbm_profile_t **profiles = calloc(n, sizeof *profiles);
  const char **names = calloc(n, sizeof *names);
  int64_t *load_ns = calloc(n, sizeof *load_ns);
  if (!profiles || !names || !load_ns)
    rc = cli_fail("report", 1, "out of host memory");
  if (rc == 0)
    rc = load_all(entries, n, profiles, names, load_ns);
  /* Several hosts, devices or ranks: their summary first. */
  bool many =
      rc == 0 && hbm_report_device_count((const hbm_profile_t *const *)profiles, names, n) >= 2;
  if (many && o.json && !(devices = devices_as_json(profiles, names, n)))
    rc = cli_fail("report", 1, "the device summary: %s", hbm_last_error());
  else if (many && !o.json &&
           hbm_report_devices_text((const hbm_profile_t *const *)profiles, names, n, stdout) !=
               HBM_OK)
    rc = cli_fail("report", 1, "the device summary: %s", hbm_last_error());
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = report_one(&o, entries[i].path, profiles[i], n > 1, reports, &best);
  if (rc == 0 && !o.json && n > 1) {
    char size[32];
    printf("=== run %s: %zu profiles; the largest peak is %s, on %s\n", entries[0].run, n,
           hbm_format_bytes(best.peak, size, sizeof size), best.where);
  }
  if (rc == 0 && o.json)
    rc = print_json(reports, devices);
  if (rc == 0)
    write_indexes(entries, n, profiles, load_ns);
  for (size_t i = 0; profiles && i < n; i++)
    hbm_profile_free(profiles[i]);
  free(profiles);
  free(names);
  free(load_ns);
  json_decref(devices);
  json_decref(reports);
  free(entries);
  if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout)))
    rc = cli_fail("report", 1, "cannot write the report");
  return rc;
}
