/* main.c — `hbm <command>`: finds the command and hands it the remaining arguments. */
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cli_command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} cli_command_t;

static const cli_command_t commands[] = {
    {"info", hbm_cmd_info, "devices, memory and the effective allocator configuration"},
    {"demo", hbm_cmd_demo, "the seed's OOM program on the simulated device, profiled"},
    {"replay", hbm_cmd_replay, "replay an allocation log (RMM CSV) through the allocator"},
    {"report", hbm_cmd_report, "peak, timeline and buffers at the peak of a profile"},
    {"diff", hbm_cmd_diff, "what changed between two profiles' peaks, and why"},
    {"export", hbm_cmd_export, "write a profile as Chrome trace / Perfetto JSON"},
    {"plan", hbm_cmd_plan, "plan the memory of an XLA HLO module (peak, E1000 report, remat)"},
    {"view", hbm_cmd_view, "serve the Memory Viewer for a logdir in the browser"},
    {"explain", hbm_cmd_explain, "explain a pasted out-of-memory error (XLA, PyTorch, TF)"},
    {"run", hbm_cmd_run, "run a program with hbm's allocator, profiler and OOM diagnosis"},
};

static void print_usage(FILE *out) {
  fprintf(out, "hbm %s — accelerator memory: allocator, profiler, viewer, planner\n\n",
          HBM_VERSION);
  fprintf(out, "usage: hbm <command> [options]   (hbm help <command>, or hbm <command> --help,\n"
               "                                  for its options)\n\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
}

int cli_fail(const char *cmd, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "hbm %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return code;
}

const char *cli_env_logdir(void) {
  const char *dir = getenv("HBM_PROFILE_DIR");
  return dir && *dir ? dir : NULL;
}

int cli_parse_size(const char *cmd, const char *flag, const char *text, uint64_t *out) {
  if (hbm_parse_size(text, flag, out) != HBM_OK) {
    cli_fail(cmd, 2, "%s", hbm_last_error());
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && !strcmp(argv[1], "help")) { /* `hbm help plan`: plan's own help */
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
      if (!strcmp(argv[2], commands[i].name))
        return commands[i].run(2, (char *[]){argv[2], "--help", NULL});
    fprintf(stderr, "hbm: unknown command '%s'\n\n", argv[2]);
    print_usage(stderr);
    return 2;
  }
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
      !strcmp(argv[1], "help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
    printf("hbm %s\n", HBM_VERSION);
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name))
      return commands[i].run(argc - 1, argv + 1);
  fprintf(stderr, "hbm: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
