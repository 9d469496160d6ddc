/* cmd_report.c — `hbm report PATH [--json] [--space NAME] [--width N]`: the peak, timeline,
 * buffers at the peak, totals and OOM events of a profile, via hbm_report_text/json.
 * PATH is a logdir (its newest run), a run directory, a profile file, an RMM CSV log or an
 * HLO/XLA dump; hbm_profile_load recognises files by content. Also home of
 * cli_profile_paths, which `hbm export` shares. */
#include "cli.h"
#include "profile/index.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_profile_paths(const char *cmd, const char *path, hbm_logdir_entry_t **out, size_t *n) {
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
  size_t total = 0;
  if (hbm_logdir_list(path, NULL, 0, &total) != HBM_OK)
    return cli_fail(cmd, 1, "%s", hbm_last_error());
  if (total == 0)
    return cli_fail(cmd, 1,
                    "%s: no profiles found (expected <logdir>/plugins/profile/<run>/*.hbmtrace or "
                    "*.xplane.pb, or profile files in the directory)",
                    path);
  hbm_logdir_entry_t *all = calloc(total, sizeof *all);
  if (!all || hbm_logdir_list(path, all, total, &total) != HBM_OK) {
    free(all);
    return cli_fail(cmd, 1, "%s", all ? hbm_last_error() : "out of host memory");
  }
  size_t k = 1; /* the newest run comes first */
  while (k < total && !strcmp(all[k].run, all[0].run))
    k++;
  *out = all;
  *n = k;
  return 0;
}

static void print_usage(FILE *out) {
  fprintf(out,
          "usage: hbm report PATH [--json] [--space NAME] [--width N]\n\n"
          "PATH: a logdir (its newest run), a run directory, an .hbmtrace profile, an RMM CSV\n"
          "log, HLO text, an XLA dump (*-buffer-assignment.txt, *-memory-usage-report.txt), an\n"
          "XProf file (*.xplane.pb as jax.profiler.trace writes it, *.hlo_proto.pb), a PyTorch\n"
          "memory snapshot or a pasted OOM text; without PATH, $HBM_PROFILE_DIR.\n\n"
          "  --json        machine-readable report (peak_bytes, peak_step, peak_reserved_bytes,\n"
          "                limit_bytes, buffers_at_peak, oom_events, ...)\n"
          "  --space NAME  only this memory space (its name, e.g. HBM, or its device, e.g. sim0)\n"
          "  --width N     chart width in columns (default: the terminal's, else 100)\n");
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
  int width;
} options_t;

static int parse_options(int argc, char **argv, options_t *o) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      o->json = true;
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

/* Reports one profile file; JSON reports are appended to `reports`. */
static int report_one(const options_t *o, const char *path, bool heading, json_t *reports,
                      run_best_t *best) {
  int64_t t0 = hbm__now_ns(); /* a profile read before is read from its index (index.h) */
  hbm_profile_t *p = hbm__index_allowed() ? hbm__index_open(path) : NULL;
  bool from_index = p != NULL;
  if (!p && !(p = hbm_profile_load(path)))
    return cli_fail("report", 1, "%s", hbm_last_error());
  int64_t load_ns = hbm__now_ns() - t0;
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
  fflush(stdout); /* the report first; then, for a big profile, its index for next time */
  if (rc == 0 && !from_index && hbm__index_wanted(path, load_ns))
    hbm__index_write(p, path);
  hbm_profile_free(p);
  return rc;
}

/* One JSON document: the report of the profile with the highest peak at the top level, and
 * every profile of the run under "profiles" when there are several. */
static int print_json(json_t *reports) {
  size_t n = json_array_size(reports), best = 0;
  for (size_t i = 1; i < n; i++)
    if (json_integer_value(json_object_get(json_array_get(reports, i), "peak_bytes")) >
        json_integer_value(json_object_get(json_array_get(reports, best), "peak_bytes")))
      best = i;
  json_t *root = json_deep_copy(json_array_get(reports, best));
  if (root && n > 1)
    json_object_set(root, "profiles", reports);
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
  if ((rc = cli_profile_paths("report", o.path, &entries, &n)) != 0)
    return rc;
  json_t *reports = json_array();
  run_best_t best = {0};
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = report_one(&o, entries[i].path, n > 1, reports, &best);
  if (rc == 0 && !o.json && n > 1) {
    char size[32];
    printf("=== run %s: %zu profiles; the largest peak is %s, on %s\n", entries[0].run, n,
           hbm_format_bytes(best.peak, size, sizeof size), best.where);
  }
  if (rc == 0 && o.json)
    rc = print_json(reports);
  json_decref(reports);
  free(entries);
  if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout)))
    rc = cli_fail("report", 1, "cannot write the report");
  return rc;
}
