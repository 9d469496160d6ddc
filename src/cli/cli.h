/* cli.h — the `hbm` command line: one file per command (cmd_<name>.c), each a thin layer that
 * parses flags and calls the library. Exit status: 0 success, 1 runtime failure (OOM, port in
 * use, bad input file), 2 usage error or "does not fit" (hbm plan). */
#ifndef HBM_CLI_H
#define HBM_CLI_H

#include "hbm.h"

#include <stdbool.h>

int hbm_cmd_info(int argc, char **argv);
int hbm_cmd_demo(int argc, char **argv);
int hbm_cmd_replay(int argc, char **argv);
int hbm_cmd_report(int argc, char **argv);
int hbm_cmd_export(int argc, char **argv);
int hbm_cmd_plan(int argc, char **argv);
int hbm_cmd_view(int argc, char **argv);
int hbm_cmd_explain(int argc, char **argv);
int hbm_cmd_run(int argc, char **argv);
int hbm_cmd_diff(int argc, char **argv);

/* Prints "hbm <cmd>: <message>" to stderr and returns exit status `code`. */
int cli_fail(const char *cmd, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The logdir a command uses when no --logdir is given: $HBM_PROFILE_DIR (NULL when unset or
 * empty). Everywhere: --logdir over the variable, the variable over the default. */
const char *cli_env_logdir(void);
/* Parses a size flag value; on error prints the message and returns non-zero. */
int cli_parse_size(const char *cmd, const char *flag, const char *text, uint64_t *out);
/* The profile files PATH stands for (cmd_report.c): the file itself, or the newest run's
 * profiles of a logdir / the files of a run directory (flags: HBM_LOGDIR_FOLLOW_LINKS; what the
 * listing skipped is said on stderr). *out is malloc'd. Returns 0, or an exit status after
 * printing why. */
int cli_profile_paths(const char *cmd, const char *path, int flags, hbm_logdir_entry_t **out,
                      size_t *n);

/* `hbm plan --fit` (cmd_plan_fit.c): the module family and the range of its varying value. */
typedef struct cli_fit {
  const char *template;  /* "step_b{}.hlo": files, one per value */
  const char *command;   /* or "python make.py {}": prints the module of a value */
  const char *dimension; /* what the value is called in the report ("batch") */
  int64_t from, to, multiple;
} cli_fit_t;
/* Finds and reports the largest value that fits opt->memory; the exit status. */
int cli_plan_fit(const cli_fit_t *fit, const hbm_plan_options_t *opt, bool json);

#endif /* HBM_CLI_H */
