/* test_viewer_server.c — the viewer's HTTP server over real sockets on 127.0.0.1: answers,
 * headers, several clients at once, the loopback Host check, a port already in use, and the
 * `hbm view` command (missing logdir, bad flags, port in use, Ctrl-C stops it with status 0). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "helpers.h"
#include "viewer/viewer.h"
#include "viewer_fixtures.h"
#include "xplane_fixtures.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char *logdir;
static hbm__viewer_t *viewer;
static hbm__server_t *server;
static int port;

static int setup(void **state) {
  logdir = th_mkdtemp("viewer-server");
  if (!logdir || vf_write_logdir(logdir, 2000) != 0)
    return -1;
  viewer = hbm__viewer_new(logdir);
  server = viewer ? hbm__server_start(viewer, "127.0.0.1", 0, NULL) : NULL;
  if (!server)
    return -1;
  port = hbm__server_port(server);
  return 0;
}

static int teardown(void **state) {
  hbm__server_stop(server);
  hbm__viewer_free(viewer);
  th_rmtree(logdir);
  free(logdir);
  return 0;
}

/* One HTTP/1.1 request on a fresh connection; returns the whole answer (malloc'd) or NULL. */
static char *http_get(int to_port, const char *path, const char *host) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)to_port)};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  /* bounded: a server that does not answer within 5 s fails the test instead of hanging it */
  struct timeval limit = {.tv_sec = 5};
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) != 0 ||
      connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  char req[1024];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                   path, host);
  if (write(fd, req, (size_t)n) != n) {
    close(fd);
    return NULL;
  }
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  ssize_t got;
  while (buf && (got = read(fd, buf + len, cap - len - 1)) > 0) {
    len += (size_t)got;
    if (cap - len < 2) {
      char *grown = realloc(buf, cap *= 2);
      if (!grown)
        free(buf);
      buf = grown;
    }
  }
  close(fd);
  if (buf)
    buf[len] = '\0';
  return buf;
}

/* /api/runs on a server at to_port answers 200. */
static void expect_runs_answered(int to_port) {
  char host[64];
  snprintf(host, sizeof host, "127.0.0.1:%d", to_port);
  char *answer = http_get(to_port, "/api/runs", host);
  assert_non_null(answer);
  assert_non_null(strstr(answer, "HTTP/1.1 200"));
  free(answer);
}

static char *get_local(const char *path) {
  char host[64];
  snprintf(host, sizeof host, "127.0.0.1:%d", port);
  return http_get(port, path, host);
}

static void test_answers_json_and_page(void **state) {
  char *answer = get_local("/api/runs");
  assert_non_null(answer);
  assert_non_null(strstr(answer, "HTTP/1.1 200"));
  assert_non_null(strstr(answer, "Content-Type: application/json"));
  assert_non_null(strstr(answer, "Content-Security-Policy: default-src 'self'"));
  assert_non_null(strstr(answer, "\"run\":\"" VF_RUN_PLANS "\""));
  free(answer);
  answer = get_local("/");
  assert_non_null(strstr(answer, "HTTP/1.1 200"));
  assert_non_null(strstr(answer, "text/html"));
  assert_non_null(strstr(answer, "<script src=\"/app.js\">"));
  free(answer);
  answer = get_local("/app.js");
  assert_non_null(strstr(answer, "text/javascript"));
  assert_true(strlen(answer) > 10000); /* the bundle with the charting library */
  free(answer);
  answer = get_local("/api/summary?run=..%2F..&profile=x");
  assert_non_null(strstr(answer, "HTTP/1.1 404"));
  assert_non_null(strstr(answer, "\"error\""));
  free(answer);
  answer = get_local("/%2e%2e/%2e%2e/etc/passwd");
  assert_non_null(strstr(answer, "HTTP/1.1 404"));
  assert_null(strstr(answer, "root:"));
  free(answer);
}

static void *client(void *arg) {
  const char *paths[] = {
      "/api/runs",
      "/api/summary?run=" VF_RUN_TRAIN "&profile=testhost.4242.hbmtrace",
      "/api/timeline?run=" VF_RUN_TRAIN "&profile=testhost.4242.hbmtrace&points=200",
      "/api/allocations?run=" VF_RUN_TRAIN "&profile=testhost.4242.hbmtrace&limit=500",
      "/api/buffers_at_peak?run=" VF_RUN_PLANS "&profile=module_0001.jit_train_step.hbmtrace",
      "/app.js",
  };
  intptr_t ok = 0;
  for (int i = 0; i < 12; i++) {
    char *answer = get_local(paths[(i + (intptr_t)arg) % 6]);
    ok += answer && strstr(answer, "HTTP/1.1 200") != NULL;
    free(answer);
  }
  return (void *)ok;
}

static void test_several_clients_at_once(void **state) {
  pthread_t threads[8];
  for (intptr_t i = 0; i < 8; i++)
    assert_int_equal(pthread_create(&threads[i], NULL, client, (void *)i), 0);
  intptr_t ok = 0;
  for (int i = 0; i < 8; i++) {
    void *result;
    pthread_join(threads[i], &result);
    ok += (intptr_t)result;
  }
  assert_int_equal(ok, 8 * 12);
}

/* A profile whose HloProto nests 10,000 tuple shapes (it overflowed the stack inside
 * protobuf-c and took the whole server down): its request is answered with the error, and the
 * server goes on answering everyone. */
static void test_deep_profile_does_not_kill_the_server(void **state) {
  char dir[4200], path[4300];
  snprintf(dir, sizeof dir, "%s/plugins/profile/2026_01_03_00_00_00", logdir);
  assert_int_equal(mkdir(dir, 0755), 0);
  snprintf(path, sizeof path, "%s/deep.hlo_proto.pb", dir);
  size_t len;
  uint8_t *bytes = xf_deep_hlo_proto(10000, &len, NULL);
  assert_int_equal(th_write(path, bytes, len), 0);
  free(bytes);
  usleep((HBM__LISTING_MS + 100) * 1000); /* the next listing has it */
  char *answer = get_local("/api/summary?run=2026_01_03_00_00_00&profile=deep.hlo_proto.pb");
  assert_non_null(answer);
  assert_non_null(strstr(answer, "HTTP/1.1 500"));
  assert_non_null(strstr(answer, "messages nested deeper than 100 levels are refused"));
  free(answer);
  answer = get_local("/api/runs");
  assert_non_null(answer);
  assert_non_null(strstr(answer, "HTTP/1.1 200"));
  free(answer);
  th_rmtree(dir);
}

/* Opens n connections to to_port that each send the start of a request and stop before its
 * end; returns their sockets (malloc'd), or NULL after failing the test. */
static int *half_requests(int to_port, int n) {
  int *fds = malloc((size_t)n * sizeof *fds);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)to_port)};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const char *half = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (int i = 0; fds && i < n; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&addr, sizeof addr) != 0)
      fail_msg("connection %d: %s", i, strerror(errno));
    if (write(fds[i], half, strlen(half)) < 0) /* a refused one may be closed already */
      continue;
  }
  return fds;
}

static void close_all(int *fds, int n) {
  for (int i = 0; i < n; i++)
    close(fds[i]);
  free(fds);
}

/* GET path answers 200 while `beside` other connections are open; says how fast. */
static void expect_answered_beside(const char *path, int beside, const char *what) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char *answer = get_local(path);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  assert_non_null(answer);
  assert_non_null(strstr(answer, "HTTP/1.1 200"));
  free(answer);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  print_message("%s answered in %.3f s beside %d %s\n", path, s, beside, what);
}

/* 140 connections that send half a request and then nothing (more than the 128 threads the
 * server once had): the page is still answered at once, not after they time out. */
static void test_idle_connections_do_not_starve(void **state) {
  enum { IDLE = 140 };
  int *fds = half_requests(port, IDLE);
  expect_answered_beside("/", IDLE, "idle connections");
  close_all(fds, IDLE);
}

/* Slowloris: 300 connections each send one more byte of their headers every 200 ms, so the
 * idle timeout (15 s) never closes them. With requests due within 1 s (HBM_VIEW_REQUEST_MS, the
 * test's short deadline; 10 s by default) the server cuts every one of them within about 1.5 s,
 * and answers a new client. */
static void test_slow_requests_are_cut(void **state) {
  enum { SLOW = 300 };
  setenv("HBM_VIEW_REQUEST_MS", "1000", 1);
  hbm__server_t *guarded = hbm__server_start(viewer, "127.0.0.1", 0, NULL);
  unsetenv("HBM_VIEW_REQUEST_MS");
  assert_non_null(guarded);
  int guarded_port = hbm__server_port(guarded);
  int *fds = half_requests(guarded_port, SLOW);
  int open = SLOW;
  for (int tick = 0; tick < 20 && open > 0; tick++) { /* at most 4 s */
    usleep(200000);
    open = 0;
    for (int i = 0; i < SLOW; i++) {
      char byte = 'X', buf[64];
      ssize_t got = recv(fds[i], buf, sizeof buf, MSG_DONTWAIT);
      bool closed = got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                    send(fds[i], &byte, 1, MSG_NOSIGNAL) < 0;
      open += !closed;
    }
  }
  print_message("slow connections still open after the deadline: %d of %d\n", open, SLOW);
  assert_int_equal(open, 0);
  expect_runs_answered(guarded_port);
  close_all(fds, SLOW);
  hbm__server_stop(guarded);
}

/* The audit's lock-out: 1,050 connections (more than the 1,000 the server takes) that never
 * finish their requests. A reserve of slots is kept: past 900, each new connection cuts the
 * one that has waited longest, so a new client is answered at once rather than refused. Needs
 * about 2,200 descriptors (both ends in this process). */
static void test_full_server_keeps_a_slot(void **state) {
  enum { HOLD = 1050 };
  struct rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 2400) {
    lim.rlim_cur = lim.rlim_max < 2400 ? lim.rlim_max : 2400;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur < 2400) {
    th_skip("needs 2400 open files, the limit is %llu", (unsigned long long)lim.rlim_cur);
  }
  int *fds = half_requests(port, HOLD);
  expect_answered_beside("/api/runs", HOLD, "connections that never finish");
  close_all(fds, HOLD);
}

static void test_foreign_host_refused(void **state) {
  char *answer = http_get(port, "/api/runs", "attacker.example");
  assert_non_null(answer);
  assert_non_null(strstr(answer, "HTTP/1.1 403"));
  free(answer);
  char host[64];
  snprintf(host, sizeof host, "localhost:%d", port);
  answer = http_get(port, "/api/runs", host);
  assert_non_null(strstr(answer, "HTTP/1.1 200"));
  free(answer);
}

static void test_port_in_use(void **state) {
  hbm__server_t *second = hbm__server_start(viewer, "127.0.0.1", port, NULL);
  assert_null(second);
  assert_non_null(strstr(hbm_last_error(), "already in use"));
  assert_null(hbm__server_start(viewer, "127.0.0.1", 70000, NULL));
  assert_null(hbm__server_start(viewer, "no-such-host.invalid", 0, NULL));
}

/* ---- the command ---- */

static void test_cli_errors(void **state) {
  char *out = NULL, cmd[4400];
  assert_int_equal(th_run(HBM_BIN " view --logdir /nonexistent/logdir", &out), 1);
  assert_non_null(strstr(out, "does not exist"));
  free(out);
  assert_int_equal(th_run(HBM_BIN " view", &out), 2);
  assert_non_null(strstr(out, "--logdir"));
  free(out);
  assert_int_equal(th_run(HBM_BIN " view --logdir /tmp --port 99999", &out), 2);
  free(out);
  assert_int_equal(th_run(HBM_BIN " view --logdir /tmp --frobnicate", &out), 2);
  free(out);
  snprintf(cmd, sizeof cmd, HBM_BIN " view --logdir %s --port %d", logdir, port);
  assert_int_equal(th_run(cmd, &out), 1);
  assert_non_null(strstr(out, "already in use"));
  free(out);
}

/* Starts `hbm view --port 0`, reads the port from the URL it prints, asks it something,
 * sends SIGINT and expects a clean exit. */
static void test_cli_serves_and_stops_on_sigint(void **state) {
  int err[2];
  assert_int_equal(pipe(err), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(err[1], STDERR_FILENO);
    close(err[0]);
    execl(HBM_BIN, HBM_BIN, "view", "--logdir", logdir, "--port", "0", (char *)NULL);
    _exit(127);
  }
  close(err[1]);
  FILE *f = fdopen(err[0], "r");
  char line[512];
  int child_port = 0;
  while (!child_port && fgets(line, sizeof line, f)) {
    const char *at = strstr(line, "http://127.0.0.1:");
    if (at)
      child_port = atoi(at + strlen("http://127.0.0.1:"));
  }
  assert_true(child_port > 0);
  expect_runs_answered(child_port);
  kill(pid, SIGINT);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  fclose(f);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_answers_json_and_page),
      cmocka_unit_test(test_several_clients_at_once),
      cmocka_unit_test(test_idle_connections_do_not_starve),
      cmocka_unit_test(test_deep_profile_does_not_kill_the_server),
      cmocka_unit_test(test_slow_requests_are_cut),
      cmocka_unit_test(test_full_server_keeps_a_slot),
      cmocka_unit_test(test_foreign_host_refused),
      cmocka_unit_test(test_port_in_use),
      cmocka_unit_test(test_cli_errors),
      cmocka_unit_test(test_cli_serves_and_stops_on_sigint),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
