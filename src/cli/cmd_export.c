/* cmd_export.c — placeholder until its layer lands; replaced by the real command. */
#include "cli.h"

int hbm_cmd_export(int argc, char **argv) {
  (void)argc;
  (void)argv;
  return cli_fail("export", 1, "not built yet");
}
