/* cmd_plan.c — placeholder until its layer lands; replaced by the real command. */
#include "cli.h"

int hbm_cmd_plan(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_fail("plan", 1, "not built yet");
}
