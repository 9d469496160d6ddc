/* cmd_replay.c — placeholder until its layer lands; replaced by the real command. */
#include "cli.h"

int hbm_cmd_replay(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_fail("replay", 1, "not built yet");
}
