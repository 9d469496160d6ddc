/* cmd_diff.c — `hbm diff A B [--json] [--top N]`: the peaks of two profiles, the change, and
 * the change attributed to buffers by op, source, category, shape, group and reason, via
 * hbm_profile_select (which part of which file) and hbm_diff_* (src/profile/diff.c). */
#include "cli.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
  fprintf(out,
          "usage: hbm diff A B [--json] [--top N]\n\n"
          "What changed from profile A to profile B: both peaks, the change, and the change\n"
          "attributed to buffers (new, gone, grew, shrank, lived longer across the peak, no\n"
          "longer across it) by op / instruction, source file:line, category, shape and group.\n"
          "Each table's rows add up to the change exactly. A and B are anything `hbm report`\n"
          "reads (of any kind: a plan and a runtime profile still compare, and what cannot is\n"
          "said), with a selector:\n"
          "  PATH              the memory space with the highest peak\n"
          "  PATH#SPACE        a memory space: its index, device (jit_step(10), cuda:1), name\n"
          "                    (HBM) or a part of the device naming one program (#jit_step)\n"
          "  PATH@STEP         training step STEP, between the profile's step markers\n"
          "  PATH@FROM:TO      steps FROM to TO (events of a runtime profile, instructions of a\n"
          "                    plan)\n"
          "  PATH#SPACE@STEP   both\n"
          "A directory stands for its newest run's only profile.\n\n"
          "  --json    every row, as JSON (docs/diff.md)\n"
          "  --top N   rows shown per table (default 15)\n\n"
          "Exit status: 0 compared, 1 a profile could not be read, 2 usage.\n");
}

typedef struct options {
  const char *spec[2];
  bool json;
  int top;
} options_t;

static int parse_options(int argc, char **argv, options_t *o) {
  int n = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return -1;
    } else if (!strcmp(a, "--json")) {
      o->json = true;
    } else if (!strcmp(a, "--top") && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || end == argv[i] || v < 1 || v > 1000000)
        return cli_fail("diff", 2, "--top: expected a whole number from 1 to 1000000, got '%s'",
                        argv[i]);
      o->top = (int)v;
    } else if (a[0] == '-' && a[1]) {
      usage(stderr);
      return cli_fail("diff", 2, "unknown option or missing value: %s", a);
    } else if (n < 2) {
      o->spec[n++] = a;
    } else {
      usage(stderr);
      return cli_fail("diff", 2, "two profiles, not more (got a third: '%s')", a);
    }
  }
  if (n < 2) {
    usage(stderr);
    return cli_fail("diff", 2, "two profiles are needed, A and B");
  }
  return 0;
}

static int compare(const options_t *o, hbm_selection_t sel[2]) {
  hbm_analysis_t *an[2] = {NULL, NULL};
  for (int s = 0; s < 2; s++)
    if (!(an[s] = hbm_analyze(sel[s].profile, sel[s].space))) {
      hbm_analysis_free(an[0]);
      return cli_fail("diff", 1, "%s: %s", o->spec[s], hbm_last_error());
    }
  char label[2][4700];
  for (int s = 0; s < 2; s++)
    snprintf(label[s], sizeof label[s], "%s (%s)", o->spec[s], sel[s].what);
  const char *labels[2] = {label[0], label[1]};
  hbm_diff_t *d = hbm_diff_new(an[0], an[1]);
  int rc = 0;
  if (!d)
    rc = cli_fail("diff", 1, "%s", hbm_last_error());
  else if ((o->json ? hbm_diff_json(d, labels, stdout)
                    : hbm_diff_text(d, labels, o->top, stdout)) != HBM_OK)
    rc = cli_fail("diff", 1, "%s", hbm_last_error());
  hbm_diff_free(d);
  hbm_analysis_free(an[0]);
  hbm_analysis_free(an[1]);
  if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout)))
    rc = cli_fail("diff", 1, "cannot write the diff");
  return rc;
}

int hbm_cmd_diff(int argc, char **argv) {
  options_t o = {0};
  int rc = parse_options(argc, argv, &o);
  if (rc)
    return rc < 0 ? 0 : rc;
  hbm_selection_t sel[2] = {{0}, {0}};
  for (int s = 0; s < 2 && rc == 0; s++)
    if (hbm_profile_select(o.spec[s], &sel[s]) != HBM_OK)
      rc = cli_fail("diff", hbm_last_status() == HBM_ERR_INVALID ? 2 : 1, "%s", hbm_last_error());
  if (rc == 0)
    rc = compare(&o, sel);
  hbm_selection_free(&sel[0]);
  hbm_selection_free(&sel[1]);
  return rc;
}
