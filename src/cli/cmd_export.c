/* cmd_export.c — `hbm export PATH --format chrome [-o FILE]`: a profile as Chrome trace /
 * Perfetto JSON (hbm_export_chrome), to stdout or a file. PATH is resolved as in
 * `hbm report` (cli_profile_paths); a run with several profiles needs one of them named. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_usage(FILE *out) {
  fprintf(
      out,
      "usage: hbm export PATH [--format chrome] [-o FILE]\n\n"
      "Writes the profile at PATH (a logdir, a run, a profile file, an RMM CSV log, an\n"
      "HLO/XLA dump; default: $HBM_PROFILE_DIR) as Chrome trace / Perfetto JSON: memory\n"
      "counters, one slice per buffer, OOMs and markers. Open it at https://ui.perfetto.dev.\n\n"
      "  --format chrome  the only format so far (the default)\n"
      "  -o FILE          write to FILE instead of stdout\n");
}

static int export_to(const char *path, const char *output) {
  hbm_profile_t *p = hbm_profile_load(path);
  if (!p)
    return cli_fail("export", 1, "%s", hbm_last_error());
  FILE *out = output ? fopen(output, "w") : stdout;
  int rc = 0;
  if (!out)
    rc = cli_fail("export", 1, "%s: cannot create", output);
  else if (hbm_export_chrome(p, out) != HBM_OK)
    rc = cli_fail("export", 1, "%s: %s", path, hbm_last_error());
  if (out && output && fclose(out) != 0 && rc == 0)
    rc = cli_fail("export", 1, "%s: cannot write", output);
  hbm_profile_free(p);
  return rc;
}

int hbm_cmd_export(int argc, char **argv) {
  const char *path = NULL, *output = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--format") && i + 1 < argc) {
      if (strcmp(argv[++i], "chrome") != 0)
        return cli_fail("export", 2, "unknown format '%s' (expected chrome)", argv[i]);
    } else if (!strcmp(argv[i], "-o") && i + 1 < argc) {
      output = argv[++i];
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      print_usage(stdout);
      return 0;
    } else if (argv[i][0] != '-' && !path) {
      path = argv[i];
    } else {
      print_usage(stderr);
      return 2;
    }
  }
  if (!path)
    path = cli_env_logdir();
  if (!path) {
    print_usage(stderr);
    return 2;
  }
  hbm_logdir_entry_t *entries;
  size_t n;
  int rc = cli_profile_paths("export", path, 0, &entries, &n);
  if (rc)
    return rc;
  if (n > 1) {
    fprintf(stderr, "hbm export: %s holds %zu profiles in run %s; name one of them:\n", path, n,
            entries[0].run);
    for (size_t i = 0; i < n; i++)
      fprintf(stderr, "  %s\n", entries[i].path);
    free(entries);
    return 2;
  }
  rc = export_to(entries[0].path, output);
  free(entries);
  return rc;
}
