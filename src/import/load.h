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

#endif /* HBM_IMPORT_LOAD_H */
