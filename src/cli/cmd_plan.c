/* cmd_plan.c — `hbm plan MODULE`: plans the memory of an XLA HLO module (or reads XLA's own
 * buffer-assignment / memory-usage-report dump) and prints XLA's E1000-style report, with
 * XLA's RESOURCE_EXHAUSTED text when it does not fit --memory, then hbm's diagnosis.
 * Exit status: 0 fits, 2 does not fit (or a usage error), 1 the module could not be read. */
#include "cli.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: hbm plan MODULE [options]\n\n"
      "Plans the memory of an XLA HLO module (HLO text, or XLA's *-buffer-assignment.txt /\n"
      "*-memory-usage-report.txt dumps): buffers, live ranges, XLA's best-fit heap, the peak\n"
      "and the buffers live there, in XLA's E1000 report form.\n\n"
      "  --memory SIZE     device memory to check the plan against (16GiB, 80GB, bytes)\n"
      "  --reserved SIZE   memory the runtime reserves (XLA's \"reserved\"), default 0\n"
      "  --remat           recompute cheap values to fit --memory (like enable_remat_opt_pass)\n"
      "  --remat-out FILE  write the rematerialized module as HLO text\n"
      "  --top N           largest buffers to list (default 10)\n"
      "  --color N         memory colour to plan (0 = HBM, 5 = host), default 0\n"
      "  --alignment N     heap offsets are multiples of N bytes (default: the backend's)\n"
      "  --backend B       gpu, cpu, tpu or none: whose buffer assignment to reproduce\n"
      "                    (default: from the file name and the module)\n"
      "  --json            print the plan as JSON\n"
      "  --values          with --json: every value's placement (allocation kind, which\n"
      "                    allocation, offset, size), to compare with XLA's assignment\n"
      "  --logdir DIR      save the plan as a profile under DIR/plugins/profile/<run>/\n"
      "                    (default: $HBM_PROFILE_DIR when set; else not saved)\n\n"
      "The largest size that fits (MODULE is then a family with {} where a value goes):\n"
      "  --fit TEMPLATE    files, one per value (step_b{}.hlo): the largest value whose\n"
      "                    module fits --memory, by bisection; the plans at it and the next\n"
      "  --fit-command CMD a command printing the module of a value (python make.py {})\n"
      "  --from N --to N   the values tried (default 1 to 2^40); --multiple N: only these\n"
      "  --dimension NAME  what the value is called in the report (default: value)\n\n"
      "Exit status: 0 fits, 2 does not fit --memory, 1 the module could not be read.\n"
      "With --fit: 0 a value fits, 2 not even the smallest, 1 a module could not be made.\n");
}

static int parse_int_flag(const char *flag, const char *text, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v < lo || v > hi) {
    cli_fail("plan", 2, "%s: expected a whole number from %ld to %ld, got '%s'", flag, lo, hi,
             text);
    return 1;
  }
  *out = v;
  return 0;
}

/* Module names become file names: keep them to [A-Za-z0-9_.-]. */
static void file_name_of(const char *name, char *buf, size_t cap) {
  size_t n = 0;
  for (const char *p = name; *p && n + 1 < cap; p++) {
    char c = *p;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || (c == '.' && n > 0);
    buf[n++] = ok ? c : '_';
  }
  if (n == 0)
    buf[n++] = 'm';
  buf[n] = '\0';
}

static int save_profile(hbm_plan_t *plan, const char *logdir) {
  char run[4096];
  if (hbm_logdir_new_run(logdir, run, sizeof run) != HBM_OK)
    return cli_fail("plan", 1, "%s", hbm_last_error());
  const hbm_profile_t *p = hbm_plan_profile(plan);
  char name[256], path[4400];
  file_name_of(hbm_profile_name(p) ? hbm_profile_name(p) : "module", name, sizeof name);
  snprintf(path, sizeof path, "%s/%s.hbmtrace", run, name);
  if (hbm_profile_save(p, path) != HBM_OK)
    return cli_fail("plan", 1, "%s", hbm_last_error());
  fprintf(stderr, "hbm plan: profile written to %s\n", path);
  return 0;
}

static int write_module(hbm_plan_t *plan, const char *path) {
  char *text = hbm_plan_module_text(plan);
  if (!text)
    return cli_fail("plan", 1, "%s", hbm_last_error());
  FILE *f = fopen(path, "w");
  if (!f) {
    free(text);
    return cli_fail("plan", 1, "%s: %s", path, strerror(errno));
  }
  size_t n = strlen(text);
  bool ok = fwrite(text, 1, n, f) == n;
  ok = (fclose(f) == 0) && ok;
  free(text);
  if (!ok)
    return cli_fail("plan", 1, "%s: could not write", path);
  fprintf(stderr, "hbm plan: rematerialized module written to %s\n", path);
  return 0;
}

int hbm_cmd_plan(int argc, char **argv) {
  hbm_plan_options_t opt = {0};
  cli_fit_t fit = {.from = 1};
  const char *module = NULL, *logdir = NULL, *remat_out = NULL;
  bool json = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool has_value = i + 1 < argc;
    long v;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--json")) {
      json = true;
    } else if (!strcmp(a, "--values")) {
      opt.values = 1;
    } else if (!strcmp(a, "--remat")) {
      opt.remat = 1;
    } else if (!strcmp(a, "--memory") && has_value) {
      if (cli_parse_size("plan", "--memory", argv[++i], &opt.memory))
        return 2;
    } else if (!strcmp(a, "--reserved") && has_value) {
      if (cli_parse_size("plan", "--reserved", argv[++i], &opt.reserved))
        return 2;
    } else if (!strcmp(a, "--top") && has_value) {
      if (parse_int_flag("--top", argv[++i], 1, 100000, &v))
        return 2;
      opt.top = (int)v;
    } else if (!strcmp(a, "--color") && has_value) {
      if (parse_int_flag("--color", argv[++i], 0, 255, &v))
        return 2;
      opt.space_color = (int)v;
    } else if (!strcmp(a, "--alignment") && has_value) {
      if (parse_int_flag("--alignment", argv[++i], 1, 1L << 30, &v))
        return 2;
      opt.alignment = (uint64_t)v;
    } else if (!strcmp(a, "--backend") && has_value) {
      const char *b = argv[++i];
      opt.backend = !strcmp(b, "gpu")    ? HBM_PLAN_BACKEND_GPU
                    : !strcmp(b, "cpu")  ? HBM_PLAN_BACKEND_CPU
                    : !strcmp(b, "tpu")  ? HBM_PLAN_BACKEND_TPU
                    : !strcmp(b, "none") ? HBM_PLAN_BACKEND_NONE
                                         : -1;
      if (opt.backend < 0)
        return cli_fail("plan", 2, "--backend takes gpu, cpu, tpu or none, not '%s'", b);
    } else if (!strcmp(a, "--logdir") && has_value) {
      logdir = argv[++i];
    } else if (!strcmp(a, "--remat-out") && has_value) {
      remat_out = argv[++i];
    } else if (!strcmp(a, "--fit") && has_value) {
      fit.template = argv[++i];
    } else if (!strcmp(a, "--fit-command") && has_value) {
      fit.command = argv[++i];
    } else if (!strcmp(a, "--dimension") && has_value) {
      fit.dimension = argv[++i];
    } else if ((!strcmp(a, "--from") || !strcmp(a, "--to") || !strcmp(a, "--multiple")) &&
               has_value) {
      if (parse_int_flag(a, argv[++i], 1, 1L << 40, &v))
        return 2;
      *(!strcmp(a, "--from") ? &fit.from : !strcmp(a, "--to") ? &fit.to : &fit.multiple) = v;
    } else if (a[0] == '-' && a[1]) {
      usage(stderr);
      return cli_fail("plan", 2, "unknown option or missing value: %s", a);
    } else if (!module) {
      module = a;
    } else {
      usage(stderr);
      return cli_fail("plan", 2, "one module at a time (got '%s' and '%s')", module, a);
    }
  }
  if (fit.template || fit.command)
    return cli_plan_fit(&fit, &opt, json);
  if (!module) {
    usage(stderr);
    return cli_fail("plan", 2, "no module given");
  }
  if (opt.remat && !opt.memory)
    return cli_fail("plan", 2, "--remat needs --memory SIZE: the limit to fit under");
  if (!logdir)
    logdir = cli_env_logdir();
  hbm_plan_t *plan = hbm_plan_file(module, &opt);
  if (!plan)
    return cli_fail("plan", 1, "%s", hbm_last_error());
  int rc = 0;
  if ((json ? hbm_plan_report_json(plan, stdout) : hbm_plan_report_text(plan, stdout)) != HBM_OK)
    rc = cli_fail("plan", 1, "%s", hbm_last_error());
  fflush(stdout);
  if (!rc && remat_out)
    rc = write_module(plan, remat_out);
  if (!rc && logdir)
    rc = save_profile(plan, logdir);
  if (!rc && !hbm_plan_get_summary(plan)->fits)
    rc = 2;
  hbm_plan_free(plan);
  return rc;
}
