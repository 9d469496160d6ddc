/* server.c — the HTTP side of `hbm view`, on libmicrohttpd: epoll with a pool of worker
 * threads, so idle connections cost a file descriptor, not a thread (a browser's spare
 * connections, or 140 that never finish their request, cannot starve the page), and a short
 * timeout closes the idle ones; several workers keep a long profile load in one tab from
 * stalling another; the listening socket opened
 * here so "port in use" is reported as such, loopback-only Host names when bound to loopback
 * (a web page elsewhere cannot read the profiles through DNS rebinding), and a clean stop on
 * SIGINT/SIGTERM. Requests are answered by hbm__viewer_handle (routes.c). Connections that hold
 * a slot without finishing their request are cut (conn_guard.c): a request must be in within
 * HBM__SERVER_REQUEST_MS, and a reserve of slots is kept for new clients. */
#include "viewer/conn_guard.h"
#include "viewer/viewer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

/* Workers: requests answered at once (a profile's first load takes one for its duration). */
#define HBM__SERVER_THREADS 8
/* Open connections at most; idle ones cost a descriptor each, and are closed after
 * HBM__SERVER_IDLE_S seconds without a byte (a browser reconnects at once when it needs to). */
#define HBM__SERVER_CONNECTIONS 1000
#define HBM__SERVER_IDLE_S 15
/* A request (headers and body) must be in within this long of its connection's start or of
 * the previous answer (a byte every few seconds resets the idle timeout, not this). */
#define HBM__SERVER_REQUEST_MS 10000
/* Bound to another address than loopback: connections from one address at most (on loopback
 * every client has the same address). */
#define HBM__SERVER_PER_ADDRESS 256

typedef struct hbm__server {
  hbm__viewer_t *viewer;
  struct MHD_Daemon *daemon;
  int port;
  bool loopback_only; /* bound to a loopback address: check Host headers */
  hbm__conn_guard_t *guard;
  char host[256];
  FILE *log;
} hbm__server_t;

/* ---- listening socket ---- */

static bool is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
  return false;
}

static hbm_status_t bind_error(int err, const char *host, int port) {
  switch (err) {
  case EADDRINUSE:
    return hbm__error(HBM_ERR_IO,
                      "port %d is already in use on %s (another hbm view or xprof?); "
                      "choose another with --port",
                      port, host);
  case EACCES:
    return hbm__error(HBM_ERR_IO,
                      "no permission to listen on port %d (ports below 1024 need "
                      "privileges); choose another with --port",
                      port);
  case EADDRNOTAVAIL:
    return hbm__error(HBM_ERR_IO, "address %s is not an address of this machine", host);
  default: return hbm__error(HBM_ERR_IO, "cannot listen on %s:%d: %s", host, port, strerror(err));
  }
}

/* Opens a listening socket on host:port (port 0: any free port). */
static int open_listener(const char *host, int port, bool *loopback, int *family) {
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  int rc = getaddrinfo(host, service, &hints, &res);
  if (rc != 0) {
    hbm__error(HBM_ERR_INVALID, "cannot resolve host '%s': %s", host, gai_strerror(rc));
    return -1;
  }
  int err = EADDRNOTAVAIL;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0) {
      *loopback = is_loopback(ai->ai_addr);
      *family = ai->ai_family;
      freeaddrinfo(res);
      return fd;
    }
    err = errno;
    close(fd);
  }
  freeaddrinfo(res);
  bind_error(err, host, port);
  return -1;
}

static int bound_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
    return -1;
  if (ss.ss_family == AF_INET)
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

/* ---- requests ---- */

static enum MHD_Result add_argument(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
  hbm__query_add(cls, key, value);
  return MHD_YES;
}

/* The name part of a Host header: "localhost:6006" → "localhost", "[::1]:6006" → "::1". */
static void host_name(const char *header, char *out, size_t cap) {
  const char *start = header, *end;
  if (*header == '[') {
    start = header + 1;
    end = strchr(start, ']');
  } else {
    end = strchr(header, ':');
  }
  size_t n = end ? (size_t)(end - start) : strlen(start);
  if (n >= cap)
    n = cap - 1;
  memcpy(out, start, n);
  out[n] = '\0';
}

static bool host_allowed(const hbm__server_t *s, struct MHD_Connection *conn) {
  if (!s->loopback_only)
    return true;
  const char *header = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
  if (!header)
    return true; /* HTTP/1.0 clients; browsers always send Host */
  char name[256];
  host_name(header, name, sizeof name);
  struct in_addr a4;
  return !strcasecmp(name, "localhost") || !strcasecmp(name, s->host) || !strcmp(name, "::1") ||
         (inet_pton(AF_INET, name, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127);
}

static enum MHD_Result send_response(struct MHD_Connection *conn, hbm__response_t *r) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      r->len, (void *)r->body, r->owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (!resp) {
    hbm__response_free(r);
    return MHD_NO;
  }
  r->owned = false; /* MHD frees it now */
  MHD_add_response_header(resp, "Content-Type", r->content_type ? r->content_type : "text/plain");
  MHD_add_response_header(resp, "Cache-Control", r->cacheable ? "no-cache" : "no-store");
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(resp, "Content-Security-Policy",
                          "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                          "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'");
  enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
  MHD_destroy_response(resp);
  return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **state) {
  static int seen_headers;
  hbm__server_t *s = cls;
  if (!*state) { /* first call: headers only */
    *state = &seen_headers;
    return MHD_YES;
  }
  if (*upload_data_size) { /* no endpoint takes a body: drop it */
    *upload_data_size = 0;
    return MHD_YES;
  }
  hbm__conn_guard_answering(s->guard, conn);
  hbm__response_t r = {0};
  if (!host_allowed(s, conn)) {
    hbm__respond_error(&r, 403, "this server answers to localhost only");
    return send_response(conn, &r);
  }
  hbm__query_t q;
  hbm__query_init(&q);
  MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_argument, &q);
  hbm__viewer_handle(s->viewer, method, url, &q, &r);
  hbm__query_free(&q);
  if (r.status >= 500 && s->log)
    fprintf(s->log, "hbm view: %d %s: %.*s\n", r.status, url, (int)(r.len > 400 ? 400 : r.len),
            r.body);
  return send_response(conn, &r);
}

/* ---- start and stop ---- */

/* HBM_VIEW_REQUEST_MS / HBM_VIEW_MAX_CONNECTIONS (tests and benchmarks: short deadlines, few
 * slots; HBM_VIEW_REQUEST_MS=0 turns the guard off, as before it existed): a whole number in
 * [min, max] (or 0 when zero_ok), else def. false with an error on bad text. */
static bool limit_from_env(const char *name, unsigned def, unsigned min, unsigned max, bool zero_ok,
                           unsigned *out) {
  const char *text = getenv(name);
  *out = def;
  if (!text || !*text)
    return true;
  char *end;
  unsigned long v = strtoul(text, &end, 10);
  if (*end || text[0] == '-' || ((v < min || v > max) && !(zero_ok && v == 0))) {
    hbm__error(HBM_ERR_INVALID, "%s=%s: expected a whole number from %u to %u%s", name, text, min,
               max, zero_ok ? ", or 0 (none)" : "");
    return false;
  }
  *out = (unsigned)v;
  return true;
}

static struct MHD_Daemon *start_daemon(hbm__server_t *s, int fd, int family, unsigned limit) {
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
  if (family == AF_INET6)
    flags |= MHD_USE_IPv6;
  unsigned per_address = s->loopback_only ? 0 : HBM__SERVER_PER_ADDRESS; /* 0: no limit */
  struct MHD_OptionItem guard[] = {
      {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)hbm__conn_guard_notify, s->guard},
      {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)hbm__conn_guard_completed, s->guard},
      {MHD_OPTION_END, 0, NULL}};
  return MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, fd,
                          MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HBM__SERVER_THREADS,
                          MHD_OPTION_CONNECTION_LIMIT, limit, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                          per_address, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HBM__SERVER_IDLE_S,
                          MHD_OPTION_ARRAY, s->guard ? guard : guard + 2, MHD_OPTION_END);
}

hbm__server_t *hbm__server_start(hbm__viewer_t *v, const char *host, int port, FILE *log) {
  unsigned request_ms, limit;
  if (port < 0 || port > 65535) {
    hbm__error(HBM_ERR_INVALID, "port %d is not a TCP port (0-65535)", port);
    return NULL;
  }
  if (!limit_from_env("HBM_VIEW_REQUEST_MS", HBM__SERVER_REQUEST_MS, 50, 3600000, true,
                      &request_ms) ||
      !limit_from_env("HBM_VIEW_MAX_CONNECTIONS", HBM__SERVER_CONNECTIONS, 16, 100000, false,
                      &limit))
    return NULL;
  hbm__server_t *s = calloc(1, sizeof *s);
  if (!s) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  s->viewer = v;
  s->log = log;
  snprintf(s->host, sizeof s->host, "%s", host);
  int family = AF_INET;
  int fd = open_listener(host, port, &s->loopback_only, &family);
  if (fd < 0) {
    free(s);
    return NULL;
  }
  s->port = bound_port(fd);
  /* a tenth of the slots stay free for new clients */
  s->guard = request_ms ? hbm__conn_guard_new(limit, limit / 10, request_ms) : NULL;
  s->daemon = s->guard || !request_ms ? start_daemon(s, fd, family, limit) : NULL;
  if (!s->daemon) {
    close(fd);
    hbm__conn_guard_free(s->guard);
    free(s);
    hbm__error(HBM_ERR_IO, "the HTTP server (libmicrohttpd) could not start on %s:%d", host, port);
    return NULL;
  }
  return s;
}

int hbm__server_port(const hbm__server_t *s) { return s->port; }

void hbm__server_stop(hbm__server_t *s) {
  if (!s)
    return;
  MHD_stop_daemon(s->daemon); /* waits for the worker threads */
  hbm__conn_guard_free(s->guard);
  free(s);
}

static void print_url(FILE *log, const char *logdir, const char *host, int port, bool loopback) {
  bool v6 = strchr(host, ':') != NULL;
  fprintf(log, "hbm view: serving %s\n", logdir);
  fprintf(log, "hbm view: open http://%s%s%s:%d/ (Ctrl-C to stop)\n", v6 ? "[" : "", host,
          v6 ? "]" : "", port);
  if (!loopback)
    fprintf(log,
            "hbm view: warning: %s is reachable from other machines; the profiles are "
            "served to anyone who can connect\n",
            host);
  fflush(log);
}

int hbm_viewer_serve(const char *logdir, int flags, const char *host, int port, FILE *log) {
  if (!log)
    log = stderr;
  if (!host || !*host)
    host = "127.0.0.1";
  hbm__viewer_t *v = hbm__viewer_new(logdir);
  if (!v) {
    fprintf(log, "hbm view: %s\n", hbm_last_error());
    return 1;
  }
  v->cache.flags = flags;
  /* Block the stop signals before the server's threads exist, so they inherit the mask and
   * only sigwait below receives them. */
  sigset_t stop, old;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  hbm__server_t *s = hbm__server_start(v, host, port, log);
  if (!s) {
    fprintf(log, "hbm view: %s\n", hbm_last_error());
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    hbm__viewer_free(v);
    return 1;
  }
  print_url(log, logdir, host, s->port, s->loopback_only);
  int sig = 0;
  sigwait(&stop, &sig);
  fprintf(log, "hbm view: %s received, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  hbm__server_stop(s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  hbm__viewer_free(v);
  fflush(log);
  return 0;
}
