/* conn_guard.h — what the viewer's HTTP server (server.c) does against connections that hold a
 * slot without finishing their request (see conn_guard.c). */
#ifndef HBM_VIEWER_CONN_GUARD_H
#define HBM_VIEWER_CONN_GUARD_H

#include "base/base.h"

#include <microhttpd.h>

typedef struct hbm__conn_guard hbm__conn_guard_t;

/* A guard for a server of at most max_connections; a request (headers and body) must be in
 * within request_ms of the connection's start or of its previous answer; once reserve slots
 * or fewer are left, each new connection cuts the one that has waited longest for its request.
 * Starts the thread that cuts late requests. NULL with an error. */
hbm__conn_guard_t *hbm__conn_guard_new(unsigned max_connections, unsigned reserve,
                                       unsigned request_ms);
/* Stops the thread; call after MHD_stop_daemon (the connections are gone by then). */
void hbm__conn_guard_free(hbm__conn_guard_t *g);

/* For MHD_OPTION_NOTIFY_CONNECTION (cls: the guard). */
void hbm__conn_guard_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                            enum MHD_ConnectionNotificationCode code);
/* For MHD_OPTION_NOTIFY_COMPLETED (cls: the guard): the answer went out, the connection waits
 * for its next request. */
void hbm__conn_guard_completed(void *cls, struct MHD_Connection *conn, void **request_context,
                               enum MHD_RequestTerminationCode code);
/* The whole request is in: the server answers it, the guard leaves the connection alone. */
void hbm__conn_guard_answering(hbm__conn_guard_t *g, struct MHD_Connection *conn);

#endif /* HBM_VIEWER_CONN_GUARD_H */
