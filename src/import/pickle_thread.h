/* pickle_thread.h — a pickle sink run on a thread of its own (pickle_thread.c), so that the
 * pickle machine (pickle.c) and what its sink makes of each container use both cores. */
#ifndef HBM_IMPORT_PICKLE_THREAD_H
#define HBM_IMPORT_PICKLE_THREAD_H

#include "import/pickle.h"

typedef struct pk_thread pk_thread_t;

/* Starts a thread that makes `sink`'s calls, in the order the machine makes them on *proxy.
 * NULL when no thread could be started (the caller then uses `sink` itself; no error set). */
pk_thread_t *pk_thread_start(const pk_sink_t *sink, const char *name,
                             const pk_stream_options_t *opt, pk_sink_t *proxy);

/* opt->progress(opt->progress_ctx, offset), made on the sink's thread after the calls before. */
void pk_thread_progress(pk_thread_t *t, size_t offset);

/* Waits until the thread has made every call the proxy was given, and ends it. *root, a value
 * the proxy handed out, becomes the real sink's. Returns HBM_OK, or the sink's failure (its
 * error then set on this thread too, as if the sink had run here). */
hbm_status_t pk_thread_finish(pk_thread_t *t, pk_ref_t *root);

#endif /* HBM_IMPORT_PICKLE_THREAD_H */
