/* bench_viewer_conns.c — how fast `hbm view` answers a new client while many connections are
 * open (issue 26, finding 7), with the connection guard (src/viewer/conn_guard.c) and without it
 * (HBM_VIEW_REQUEST_MS=0, the server as it was), side by side in one run. The server runs in
 * this process on 127.0.0.1 over the viewer's test logdir; each load is opened, then a probe
 * makes 200 requests for /api/runs one after the other, each on a fresh connection, and their
 * latencies (connect to the last byte) are summarised. Loads:
 *   - 500 / 2000 browsers: connections that made a request, got the answer and stay open
 *     (keep-alive), as idle browser tabs do; 2000 is more than the 1,000 the server takes;
 *   - 1050 slow: connections that send half a request and nothing more (the audit's lock-out).
 * A probe that gets no answer within 2 s counts as failed. Prints the machine's facts first;
 * fails when a probe of the guarded server failed or nothing was measured.
 * Usage: bench_viewer_conns [--probes N] */
#include "viewer/viewer.h"

#include "../tests/viewer_fixtures.h"
#include "machine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Reads until the answer to one request is complete (its Content-Length), or the peer
 * closes, or 2 s pass; true when a whole 200 answer came. */
static bool read_answer(int fd) {
  char buf[65536];
  size_t have = 0, need = SIZE_MAX;
  int64_t deadline = hbm__now_ns() + 2000000000;
  while (have < need) {
    struct pollfd p = {fd, POLLIN, 0};
    int wait_ms = (int)((deadline - hbm__now_ns()) / 1000000);
    if (wait_ms <= 0 || poll(&p, 1, wait_ms) <= 0)
      return false;
    ssize_t n = recv(fd, buf + (have < sizeof buf ? have : 0),
                     have < sizeof buf ? sizeof buf - have : sizeof buf, 0);
    if (n <= 0)
      return false;
    have += (size_t)n;
    const char *end = have <= sizeof buf ? memmem(buf, have, "\r\n\r\n", 4) : NULL;
    const char *len = end ? strcasestr(buf, "Content-Length: ") : NULL;
    if (end && len && need == SIZE_MAX)
      need = (size_t)(end + 4 - buf) + strtoull(len + 16, NULL, 10);
  }
  return !strncmp(buf, "HTTP/1.1 200", 12);
}

static bool request(int fd, int port, bool keep_alive) {
  char req[256];
  int n = snprintf(req, sizeof req, "GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n", port,
                   keep_alive ? "" : "Connection: close\r\n");
  return send(fd, req, (size_t)n, MSG_NOSIGNAL) == n && read_answer(fd);
}

/* Opens the load: n connections, each left open after a request and its answer (browsers)
 * or after half a request (slow). Returns how many the server took. */
static int open_load(int port, int n, bool slow, int *fds) {
  int took = 0;
  for (int i = 0; i < n; i++) {
    fds[i] = connect_to(port);
    if (fds[i] < 0)
      continue;
    if (slow)
      took += send(fds[i], "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n", 34, MSG_NOSIGNAL) == 34;
    else
      took += request(fds[i], port, true);
  }
  return took;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One row: the probe's median and 99th percentile in ms, and its failures. */
static int probe(int port, int probes, const char *server, const char *load, int took) {
  double *ms = malloc((size_t)probes * sizeof *ms);
  int ok = 0, failed = 0;
  for (int i = 0; i < probes; i++) {
    int64_t t0 = hbm__now_ns();
    int fd = connect_to(port);
    bool answered = fd >= 0 && request(fd, port, false);
    if (fd >= 0)
      close(fd);
    if (answered)
      ms[ok++] = (double)(hbm__now_ns() - t0) / 1e6;
    else
      failed++;
  }
  qsort(ms, (size_t)ok, sizeof *ms, cmp_double);
  if (ok)
    printf("| %-22s | %-26s | %5d | %8.3f | %8.3f | %4d of %d |\n", server, load, took, ms[ok / 2],
           ms[(size_t)ok * 99 / 100], failed, probes);
  else
    printf("| %-22s | %-26s | %5d | %8s | %8s | %4d of %d |\n", server, load, took, "-", "-",
           failed, probes);
  fflush(stdout);
  free(ms);
  return failed;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

int main(int argc, char **argv) {
  int probes = 200;
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--probes"))
      probes = atoi(argv[++i]);
  struct rlimit lim;
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max < 8192 ? lim.rlim_max : 8192;
  setrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 4600) {
    fprintf(stderr,
            "bench_viewer_conns: needs 4600 open files (both ends of 2000 connections); "
            "the limit is %llu\n",
            (unsigned long long)lim.rlim_cur);
    return 1;
  }
  bench_print_machine();
  char dir[] = "/tmp/hbm-bench-conns-XXXXXX";
  if (!mkdtemp(dir) || vf_write_logdir(dir, 2000) != 0)
    return 1;
  hbm__viewer_t *viewer = hbm__viewer_new(dir);
  static const struct {
    const char *name;
    int n;
    bool slow;
  } loads[] = {{"none", 0, false},
               {"500 browsers (keep-alive)", 500, false},
               {"2000 browsers (keep-alive)", 2000, false},
               {"1050 slow (half a request)", 1050, true}};
  int *fds = malloc(2000 * sizeof *fds), guarded_failures = 0, rows = 0;
  printf("\nprobe: %d requests for /api/runs, one after another, each on a fresh connection; "
         "ms from connect to the last byte\n\n",
         probes);
  printf("| server                 | load                       | taken | median   | p99      | "
         "failed     |\n|---|---|---:|---:|---:|---:|\n");
  for (int guarded = 0; guarded < 2; guarded++) {
    const char *server = guarded ? "guard (10 s, reserve)" : "no guard (as before)";
    for (size_t k = 0; k < sizeof loads / sizeof *loads; k++) {
      if (!guarded)
        setenv("HBM_VIEW_REQUEST_MS", "0", 1);
      hbm__server_t *s = hbm__server_start(viewer, "127.0.0.1", 0, NULL);
      unsetenv("HBM_VIEW_REQUEST_MS");
      if (!s) {
        fprintf(stderr, "bench_viewer_conns: %s\n", hbm_last_error());
        return 1;
      }
      int port = hbm__server_port(s);
      int took = open_load(port, loads[k].n, loads[k].slow, fds);
      int failed = probe(port, probes, server, loads[k].name, took);
      guarded_failures += guarded ? failed : 0;
      rows += failed < probes;
      for (int i = 0; i < loads[k].n; i++)
        if (fds[i] >= 0)
          close(fds[i]);
      hbm__server_stop(s);
    }
  }
  free(fds);
  hbm__viewer_free(viewer);
  nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (!rows || guarded_failures) {
    fprintf(stderr, "bench_viewer_conns: %s\n",
            rows ? "the guarded server failed probes" : "measured nothing");
    return 1;
  }
  return 0;
}
