/* cmd_view.c — `hbm view --logdir DIR [--port 6006] [--host 127.0.0.1]`: serves the Memory
 * Viewer for an XProf-style logdir (src/viewer/) until Ctrl-C. Exit status 0 after a clean
 * stop, 1 when the logdir is missing or the port is in use, 2 on bad flags. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HBM_HAVE_VIEWER
#include "viewer/viewer.h"
#endif

static void view_usage(FILE *out) {
  fprintf(out,
          "usage: hbm view [--logdir DIR] [--port 6006] [--host 127.0.0.1] [--follow-links]\n\n"
          "Serves the Memory Viewer for the profiles under DIR/plugins/profile/<run>/ (as\n"
          "`xprof --logdir DIR --port 6006` does) and prints the URL to open. Runs written\n"
          "while it serves appear without a restart. Listens on loopback unless --host says\n"
          "otherwise (--host 0.0.0.0: every interface). Ctrl-C stops it.\n\n"
          "Runs and profiles linked into DIR are served when the link stays inside DIR; links\n"
          "that lead out of DIR are skipped (the page says which) unless --follow-links.\n\n"
          "DIR: --logdir, else $HBM_PROFILE_DIR.\n");
}

/* "--flag value" or "--flag=value"; advances *i past what it used. */
static const char *flag_value(int argc, char **argv, int *i, const char *flag) {
  size_t n = strlen(flag);
  if (strncmp(argv[*i], flag, n))
    return NULL;
  if (argv[*i][n] == '=')
    return argv[*i] + n + 1;
  if (argv[*i][n] == '\0' && *i + 1 < argc)
    return argv[++*i];
  return NULL;
}

static int parse_port(const char *text, int *port) {
  char *end;
  long v = strtol(text, &end, 10);
  if (!*text || *end || v < 0 || v > 65535)
    return -1;
  *port = (int)v;
  return 0;
}

int hbm_cmd_view(int argc, char **argv) {
  const char *logdir = NULL, *host = "127.0.0.1", *port_text = "6006", *v;
  int flags = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      view_usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--follow-links")) {
      flags |= HBM_LOGDIR_FOLLOW_LINKS;
    } else if ((v = flag_value(argc, argv, &i, "--logdir"))) {
      logdir = v;
    } else if ((v = flag_value(argc, argv, &i, "--port"))) {
      port_text = v;
    } else if ((v = flag_value(argc, argv, &i, "--host"))) {
      host = v;
    } else {
      view_usage(stderr);
      return cli_fail("view", 2, "unknown or incomplete option '%s'", argv[i]);
    }
  }
  int port;
  if (!logdir)
    logdir = cli_env_logdir();
  if (!logdir) {
    view_usage(stderr);
    return cli_fail("view", 2, "--logdir DIR is required (or HBM_PROFILE_DIR)");
  }
  if (parse_port(port_text, &port) != 0)
    return cli_fail("view", 2, "--port %s: expected a TCP port number (0-65535)", port_text);
#ifdef HBM_HAVE_VIEWER
  return hbm_viewer_serve(logdir, flags, host, port, stderr);
#else
  (void)host, (void)flags;
  return cli_fail("view", 1,
                  "this hbm was built without the viewer (-DHBM_VIEWER=OFF); "
                  "rebuild with -DHBM_VIEWER=ON after scripts/install-deps.sh");
#endif
}
