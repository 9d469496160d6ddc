/* cmd_info.c — placeholder until its layer lands; replaced by the real command. */
#include "cli.h"

int hbm_cmd_info(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_fail("info", 1, "not built yet");
}
