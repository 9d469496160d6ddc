/* cmd_view.c — `hbm view --logdir DIR [--port 6006] [--host 127.0.0.1] [--stop-with-stdin]`:
 * serves the Memory Viewer for an XProf-style logdir (src/viewer/) until Ctrl-C (or, with
 * --stop-with-stdin, until its standard input closes). Exit status 0 after a clean stop, 1
 * when the logdir is missing or the port is in use, 2 on bad flags. */
#include "cli.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HBM_HAVE_VIEWER
#include "viewer/viewer.h"
#endif

static void view_usage(FILE *out) {
  fprintf(out,
          "usage: hbm view [--logdir DIR] [--port 6006] [--host 127.0.0.1] [--follow-links]\n"
          "                [--stop-with-stdin]\n\n"
          "Serves the Memory Viewer for the profiles under DIR/plugins/profile/<run>/ (as\n"
          "`xprof --logdir DIR --port 6006` does) and prints the URL to open. Runs written\n"
          "while it serves appear without a restart. Listens on loopback unless --host says\n"
          "otherwise (--host 0.0.0.0: every interface). Ctrl-C stops it.\n\n"
          "Runs and profiles linked into DIR are served when the link stays inside DIR; links\n"
          "that lead out of DIR are skipped (the page says which) unless --follow-links.\n\n"
          "  --stop-with-stdin  also stop when standard input closes: a parent that holds\n"
          "                     a pipe to it (hbm.view() in Python) takes the server with\n"
          "                     it when it exits, however it exits\n\n"
          "DIR: --logdir, else $HBM_PROFILE_DIR.\n");
}

#ifdef HBM_HAVE_VIEWER
/* Reads standard input to its end, then sends the process the SIGTERM on which the server
 * stops cleanly (hbm_viewer_serve waits for it with sigwait). */
static void *watch_stdin(void *arg) {
  (void)arg;
  char buf[256];
  ssize_t n;
  while ((n = read(STDIN_FILENO, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
    continue;
  fprintf(stderr, "hbm view: standard input closed, stopping\n");
  kill(getpid(), SIGTERM);
  return NULL;
}

/* The watcher runs with every signal blocked (set before it exists, so none reaches it on
 * the way): the SIGTERM it sends is the server's to take. */
static int start_stdin_watch(void) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  pthread_t thread;
  int rc = pthread_create(&thread, NULL, watch_stdin, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc == 0)
    pthread_detach(thread);
  return rc;
}
#endif

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
  bool stop_with_stdin = false;
  int flags = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      view_usage(stdout);
      return 0;
    } else if (!strcmp(argv[i], "--stop-with-stdin")) {
      stop_with_stdin = true;
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
  if (stop_with_stdin && start_stdin_watch() != 0)
    return cli_fail("view", 1, "--stop-with-stdin: cannot start a thread");
  return hbm_viewer_serve(logdir, flags, host, port, stderr);
#else
  (void)host, (void)flags;
  (void)stop_with_stdin;
  return cli_fail("view", 1,
                  "this hbm was built without the viewer (-DHBM_VIEWER=OFF); "
                  "rebuild with -DHBM_VIEWER=ON after scripts/install-deps.sh");
#endif
}
