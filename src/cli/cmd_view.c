/* cmd_view.c — placeholder until its layer lands; replaced by the real command. */
#include "cli.h"

int hbm_cmd_view(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_fail("view", 1, "not built yet");
}
