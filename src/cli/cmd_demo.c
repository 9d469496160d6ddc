/* cmd_demo.c — placeholder until its layer lands; replaced by the real command. */
#include "cli.h"

int hbm_cmd_demo(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_fail("demo", 1, "not built yet");
}
