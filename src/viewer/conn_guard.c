/* conn_guard.c — keeps the viewer answering when clients hold connections without finishing
 * their requests. libmicrohttpd closes a connection after an idle time without a byte, but a
 * client sending one byte every few seconds (slowloris) is never idle: 1,050 such connections
 * took every slot and locked everyone out. libmicrohttpd has no deadline for a whole request,
 * so this adds two:
 *   - a request (headers and any body) must be in within request_ms of the connection's start
 *     or of the previous answer on it; a thread checks every few hundred ms and cuts the late;
 *   - once only `reserve` slots are left, each new connection cuts the one that has waited
 *     longest for its request, so a new client always finds a slot (a browser's request is in
 *     within milliseconds; it is never the one that has waited longest).
 * A connection is cut with shutdown(2) on its socket: libmicrohttpd sees the end of the stream
 * and closes it in its own thread. Every connection is in the guard's list from
 * MHD_CONNECTION_NOTIFY_STARTED to MHD_CONNECTION_NOTIFY_CLOSED, which libmicrohttpd calls before
 * it closes the socket, and cuts happen under the list's lock: a descriptor is never shut down
 * after it was closed (and perhaps reused). */
#include "viewer/conn_guard.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

typedef struct guarded {
  struct MHD_Connection *conn;
  int fd;
  int64_t waiting_since; /* ns: since when it waits for its request; 0 while answered or cut */
  bool cut;
  struct guarded *prev, *next;
} guarded_t;

struct hbm__conn_guard {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  pthread_t sweeper;
  bool stopping;
  guarded_t *head;
  size_t count;   /* in the list */
  size_t pending; /* of them, cut and not yet closed by libmicrohttpd */
  unsigned max_connections, reserve;
  int64_t request_ns;
};

static void cut_locked(hbm__conn_guard_t *g, guarded_t *c) {
  if (c->fd >= 0)
    shutdown(c->fd, SHUT_RDWR);
  c->waiting_since = 0;
  c->cut = true;
  g->pending++;
}

/* The connection (other than `except`) that has waited longest for its request. */
static guarded_t *longest_waiting_locked(hbm__conn_guard_t *g, const guarded_t *except) {
  guarded_t *oldest = NULL;
  for (guarded_t *c = g->head; c; c = c->next)
    if (c != except && c->waiting_since && (!oldest || c->waiting_since < oldest->waiting_since))
      oldest = c;
  return oldest;
}

static void *sweep(void *arg) {
  hbm__conn_guard_t *g = arg;
  int64_t period = g->request_ns / 4 < 250000000 ? g->request_ns / 4 : 250000000;
  pthread_mutex_lock(&g->lock);
  while (!g->stopping) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = until.tv_nsec + (period > 10000000 ? period : 10000000);
    until.tv_sec += ns / 1000000000;
    until.tv_nsec = ns % 1000000000;
    pthread_cond_timedwait(&g->wake, &g->lock, &until);
    int64_t now = hbm__now_ns();
    for (guarded_t *c = g->head; c && !g->stopping; c = c->next)
      if (c->waiting_since && now - c->waiting_since > g->request_ns)
        cut_locked(g, c);
  }
  pthread_mutex_unlock(&g->lock);
  return NULL;
}

hbm__conn_guard_t *hbm__conn_guard_new(unsigned max_connections, unsigned reserve,
                                       unsigned request_ms) {
  hbm__conn_guard_t *g = calloc(1, sizeof *g);
  if (!g) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  g->max_connections = max_connections;
  g->reserve = reserve;
  g->request_ns = (int64_t)request_ms * 1000000;
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->wake, NULL);
  if (pthread_create(&g->sweeper, NULL, sweep, g) != 0) {
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->lock);
    free(g);
    hbm__error(HBM_ERR_IO, "cannot start the viewer's connection guard thread");
    return NULL;
  }
  return g;
}

void hbm__conn_guard_free(hbm__conn_guard_t *g) {
  if (!g)
    return;
  pthread_mutex_lock(&g->lock);
  g->stopping = true;
  pthread_cond_signal(&g->wake);
  pthread_mutex_unlock(&g->lock);
  pthread_join(g->sweeper, NULL);
  while (g->head) { /* none after MHD_stop_daemon; kept safe all the same */
    guarded_t *next = g->head->next;
    free(g->head);
    g->head = next;
  }
  pthread_cond_destroy(&g->wake);
  pthread_mutex_destroy(&g->lock);
  free(g);
}

static void started(hbm__conn_guard_t *g, struct MHD_Connection *conn, void **socket_context) {
  guarded_t *c = calloc(1, sizeof *c);
  if (!c)
    return; /* unguarded: MHD's idle timeout still applies */
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  c->conn = conn;
  c->fd = info ? info->connect_fd : -1;
  c->waiting_since = hbm__now_ns();
  pthread_mutex_lock(&g->lock);
  c->next = g->head;
  if (g->head)
    g->head->prev = c;
  g->head = c;
  g->count++;
  if (g->count - g->pending + g->reserve > g->max_connections) {
    guarded_t *victim = longest_waiting_locked(g, c);
    if (victim)
      cut_locked(g, victim);
  }
  pthread_mutex_unlock(&g->lock);
  *socket_context = c;
}

static void closed(hbm__conn_guard_t *g, void **socket_context) {
  guarded_t *c = *socket_context;
  if (!c)
    return;
  pthread_mutex_lock(&g->lock);
  if (c->prev)
    c->prev->next = c->next;
  else
    g->head = c->next;
  if (c->next)
    c->next->prev = c->prev;
  g->count--;
  g->pending -= c->cut;
  pthread_mutex_unlock(&g->lock);
  free(c);
  *socket_context = NULL;
}

void hbm__conn_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                            enum MHD_ConnectionNotificationCode code) {
  if (code == MHD_CONNECTION_NOTIFY_STARTED)
    started(cls, conn, socket_context);
  else if (code == MHD_CONNECTION_NOTIFY_CLOSED)
    closed(cls, socket_context);
}

static void set_waiting(hbm__conn_guard_t *g, struct MHD_Connection *conn, int64_t since) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  guarded_t *c = info ? info->socket_context : NULL;
  if (!c)
    return;
  pthread_mutex_lock(&g->lock);
  if (!c->cut) /* a cut connection stays out of the sweep */
    c->waiting_since = since;
  pthread_mutex_unlock(&g->lock);
}

void hbm__conn_guard_completed(void *cls, struct MHD_Connection *conn, void **request_context,
                               enum MHD_RequestTerminationCode code) {
  (void)request_context;
  if (code == MHD_REQUEST_TERMINATED_COMPLETED_OK)
    set_waiting(cls, conn, hbm__now_ns());
}

void hbm__conn_guard_answering(hbm__conn_guard_t *g, struct MHD_Connection *conn) {
  if (g) /* NULL: the server runs without a guard (HBM_VIEW_REQUEST_MS=0) */
    set_waiting(g, conn, 0);
}
