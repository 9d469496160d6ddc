/* cmd_report.c — placeholder until its layer lands; replaced by the real command. */
#include "cli.h"

int hbm_cmd_report(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_fail("report", 1, "not built yet");
}
