/* load.h — the loader's entry for a file that is already open: the viewer opens each profile
 * of a logdir itself, without following a symbolic link swapped in after the listing
 * (src/viewer/profile_cache.c), and hands the descriptor here. hbm_profile_load (hbm.h) is the
 * same by path. */
#ifndef HBM_IMPORT_LOAD_H
#define HBM_IMPORT_LOAD_H

#include "base/base.h"

/* As hbm_profile_load, reading the open file fd (left open); path names it in messages and
 * its ending counts where content alone does not tell the format. */
hbm_profile_t *hbm__profile_load_fd(int fd, const char *path);

/* The summary profile of the file at path (what its index holds, index.h), read in one pass
 * without holding its buffers: .hbmtrace files and RMM logs. With HBM_INDEX=auto a big one's
 * index is written on the way. NULL (hbm_last_error says why) for other formats and for a
 * file whose events do not come in step order: callers read those whole (hbm_profile_load). */
hbm_profile_t *hbm__profile_load_summary(const char *path);

/* What `hbm report` and the viewer's first view read first, decided here for both: the
 * summary from path's index when one matches it (hbm__index_open), else, for a big file
 * without one (hbm__summary_wanted), its one-pass summary (hbm__profile_load_summary). NULL
 * when neither (hbm_last_error says why): the caller reads the file whole. fd, unless -1, is
 * path already open (the viewer's, opened without following links): the one pass reads it,
 * and leaves it open. */
hbm_profile_t *hbm__profile_load_first(const char *path, int fd);

#endif /* HBM_IMPORT_LOAD_H */
