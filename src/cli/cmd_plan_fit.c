/* cmd_plan_fit.c — `hbm plan --fit TEMPLATE --memory SIZE`: the largest value of a varying
 * dimension whose module fits (hbm_fit, src/hlo/fit.c). The family is a file template
 * ("step_b{}.hlo": the values are those for which a file exists) or, with --fit-command, a
 * command that prints the module for a value ("python make_hlo.py {}": any value from --from
 * to --to). Exit status: 0 a value fits, 2 not even the smallest, 1 a module could not be
 * made or read. */
#include "base/base.h" /* hbm__error: the plans' callbacks say why they failed */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* TEMPLATE with "{}" replaced by value, into buf; false when too long. */
static bool expand(const char *template, int64_t value, char *buf, size_t cap) {
  const char *at = strstr(template, "{}");
  int n = snprintf(buf, cap, "%.*s%" PRId64 "%s", (int)(at - template), template, value, at + 2);
  return n > 0 && (size_t)n < cap;
}

static hbm_plan_t *plan_file(int64_t value, const hbm_plan_options_t *opt, void *ctx) {
  const cli_fit_t *fit = ctx;
  char path[4096];
  if (!expand(fit->template, value, path, sizeof path)) {
    hbm__error(HBM_ERR_INVALID, "%s: path too long", fit->template);
    return NULL;
  }
  return hbm_plan_file(path, opt);
}

/* Runs the command for value and plans what it printed. */
static hbm_plan_t *plan_command(int64_t value, const hbm_plan_options_t *opt, void *ctx) {
  const cli_fit_t *fit = ctx;
  char cmd[8192];
  if (!expand(fit->command, value, cmd, sizeof cmd)) {
    hbm__error(HBM_ERR_INVALID, "--fit-command: command too long");
    return NULL;
  }
  FILE *p = popen(cmd, "r");
  if (!p) {
    hbm__error(HBM_ERR_IO, "%s: %s", cmd, strerror(errno));
    return NULL;
  }
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  char chunk[65536];
  size_t got;
  while (mem && (got = fread(chunk, 1, sizeof chunk, p)) > 0)
    fwrite(chunk, 1, got, mem);
  if (mem)
    fclose(mem);
  int status = pclose(p);
  hbm_plan_t *plan = NULL;
  if (status != 0 || !text || len == 0)
    hbm__error(HBM_ERR_IO, "%s: exit status %d%s", cmd,
               WIFEXITED(status) ? WEXITSTATUS(status) : -1, len == 0 ? ", no module printed" : "");
  else
    plan = hbm_plan_text(text, len, cmd, opt);
  free(text);
  return plan;
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? -1 : a > b;
}

/* The values for which the template names a file, ascending, within [from, to]. */
static int template_values(const cli_fit_t *fit, int64_t **out, size_t *n) {
  const char *at = strstr(fit->template, "{}");
  size_t prefix = (size_t)(at - fit->template), suffix = strlen(at + 2);
  char pattern[4200];
  snprintf(pattern, sizeof pattern, "%.*s*%s", (int)prefix, fit->template, at + 2);
  glob_t g;
  int rc = glob(pattern, 0, NULL, &g);
  if (rc != 0 && rc != GLOB_NOMATCH)
    return cli_fail("plan", 1, "--fit %s: cannot list the files", fit->template);
  *out = calloc(g.gl_pathc + 1, sizeof **out);
  *n = 0;
  for (size_t i = 0; *out && i < g.gl_pathc; i++) {
    const char *name = g.gl_pathv[i], *digits = name + prefix;
    size_t len = strlen(name);
    if (len <= prefix + suffix)
      continue;
    char *end;
    long long v = strtoll(digits, &end, 10);
    bool whole = isdigit((unsigned char)*digits) && (size_t)(end - name) == len - suffix;
    if (whole && v >= fit->from && (fit->to == 0 || v <= fit->to))
      (*out)[(*n)++] = v;
  }
  globfree(&g);
  if (!*out)
    return cli_fail("plan", 1, "out of host memory");
  if (*n == 0)
    return cli_fail("plan", 1, "--fit %s: no file matches (expected files with a number for {})",
                    fit->template);
  qsort(*out, *n, sizeof **out, cmp_i64);
  return 0;
}

int cli_plan_fit(const cli_fit_t *fit, const hbm_plan_options_t *opt, bool json) {
  const char *family = fit->command ? fit->command : fit->template;
  if (!strstr(family, "{}"))
    return cli_fail("plan", 2, "%s: the template must hold {} where the value goes", family);
  if (!opt->memory)
    return cli_fail("plan", 2, "--fit needs --memory SIZE: the memory to fit in");
  hbm_fit_options_t fo = {.plan = *opt, .lo = fit->from, .hi = fit->to, .multiple = fit->multiple};
  int64_t *values = NULL;
  int rc = 0;
  if (!fit->command && (rc = template_values(fit, &values, &fo.n_values)) != 0) {
    free(values);
    return rc;
  }
  fo.values = values;
  hbm_fit_result_t r;
  if (hbm_fit(fit->command ? plan_command : plan_file, (void *)fit, &fo, &r) != HBM_OK) {
    free(values);
    return cli_fail("plan", 1, "--fit: %s", hbm_last_error());
  }
  hbm_status_t st =
      json ? hbm_fit_report_json(&r, stdout) : hbm_fit_report_text(&r, fit->dimension, stdout);
  rc = st != HBM_OK ? cli_fail("plan", 1, "%s", hbm_last_error()) : r.found ? 0 : 2;
  hbm_fit_result_free(&r);
  free(values);
  return rc;
}
