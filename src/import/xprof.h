/* xprof.h — what the XProf readers (xplane.c, hlo_proto.c) share: the programs and allocator
 * timelines read from a file, held with their strings until they are put into one profile,
 * largest peak first (XProf's users got the wrong module when it took the first). */
#ifndef HBM_IMPORT_XPROF_H
#define HBM_IMPORT_XPROF_H

#include "base/base.h"

/* One live interval of one buffer, steps relative to its program (end -1: to the end).
 * span_end: where the value it is shown as ends when its bytes outlive it (a buffer revived
 * by SHARE_WITH, freed while a later sharer holds the bytes: XProf's span), 0 none. */
typedef struct xprof_buffer {
  const char *op, *shape, *opcode, *label, *group, *source, *stack;
  uint64_t size, unpadded, offset;
  int64_t start, end, span_end;
  hbm_category_t category;
  uint32_t flags;
} xprof_buffer_t;

/* One program in one memory colour, or one allocator's timeline. */
typedef struct xprof_space {
  const char *name;   /* "HBM", "Host", "color 3"; the allocator's name */
  const char *device; /* the program ("jit_f(12)"); "allocator" for runtime timelines */
  int color;
  const char **step_labels; /* n_steps labels */
  int64_t *step_times;      /* allocator timelines: ns since the first event; else NULL */
  int64_t n_steps;
  xprof_buffer_t *buffers;
  size_t n_buffers, cap_buffers;
  uint64_t peak;     /* XProf's peak heap (indefinite included), to order the programs */
  uint64_t reserved; /* programs: XLA's allocations of the colour ("total buffer
                        allocation"), reserved over the program's steps; 0 none */
  bool runtime;
} xprof_space_t;

typedef struct xprof_import {
  const char *file;
  hbm_intern_t *strings;
  xprof_space_t *spaces;
  size_t n_spaces, cap_spaces;
  size_t n_programs;
  hbm_strbuf_t problems; /* what could not be read, for the profile's "lost" note */
  size_t n_problems;
  int backend;       /* HBM_PLAN_BACKEND_* for hbm's own plan of each program (device planes) */
  const char **meta; /* key, value, key, value, ...: interned, set on the profile */
  size_t n_meta, cap_meta;
} xprof_import_t;

bool xprof_import_init(xprof_import_t *im, const char *file); /* false: out of memory */
void xprof_import_free(xprof_import_t *im);
/* Everything read, as one profile (meta "format" = format); NULL with the error set. */
hbm_profile_t *xprof_to_profile(xprof_import_t *im, const char *name, const char *format);

xprof_space_t *xprof_add_space(xprof_import_t *im, const char *name, const char *device, int color);
xprof_buffer_t *xprof_add_buffer(xprof_space_t *s);
/* A profile meta entry (copied); false when memory ran out. */
bool xprof_add_meta(xprof_import_t *im, const char *key, const char *value);
/* A TPU program's largest scoped VMEM allocation (`by` makes it) as a buffer live over the
 * whole program above the space's allocations: what XProf adds to VMEM's heap ("HLO temp +
 * scoped"). false when memory ran out. */
bool xprof_add_scoped(xprof_import_t *im, xprof_space_t *s, uint64_t bytes, const char *by);
/* Records a problem (the last error's text) and carries on with what could be read. */
void xprof_note_problem(xprof_import_t *im);

/* hlo_proto.c: one serialized HloProto (data inside a file that starts at file_start) → one
 * space per memory colour, replaying XLA's heap-simulator trace as XProf does. `program`
 * names it (NULL: the module's name). HBM_OK, or an error with the byte offset. */
hbm_status_t xprof_read_hlo_proto(xprof_import_t *im, const uint8_t *data, size_t len,
                                  const uint8_t *file_start, const char *program);

/* xplane.c: a serialized XSpace. Programs of /host:metadata and the allocators'
 * MemoryAllocation / MemoryDeallocation events; problems are noted and reading goes on. */
hbm_status_t xprof_read_xspace(xprof_import_t *im, const uint8_t *data, size_t len);

/* xplane.c: the allocator with the most events of a serialized XSpace as an allocation log
 * (hbm replay), time order, and the program's step markers as the log's step beginnings;
 * *allocator gets its name (interned in im; NULL when the file has no allocator events). */
hbm_status_t xprof_xspace_log(xprof_import_t *im, const uint8_t *data, size_t len,
                              hbm_alloc_log_t *out, const char **allocator);

/* The entry point for load.c: an .xplane.pb or .hlo_proto.pb in memory → a profile. */
hbm_profile_t *hbm__xprof_load(const char *path, const uint8_t *data, size_t len);
/* The entry point for `hbm replay`: an .xplane.pb in memory → its busiest allocator's events
 * as a log (xprof_xspace_log); name (cap bytes) gets the allocator's name. */
hbm_status_t hbm__xprof_log(const char *path, const uint8_t *data, size_t len, hbm_alloc_log_t *out,
                            char *name, size_t cap);
/* Whether the bytes look like a serialized XSpace or HloProto (or a gzip'd one). */
bool hbm__xprof_is(const char *path, const uint8_t *data, size_t len);

/* xprof_memory_viewer_json.c: XProf's own Memory Viewer data (the JSON its converter returns
 * for the tool "memory_viewer", which users save from its page) → a profile. */
hbm_profile_t *hbm__xprof_memory_viewer_json_load(const char *path, const char *data, size_t len);
/* Whether the text is such a JSON object (by its first keys). */
bool hbm__xprof_memory_viewer_json_is(const char *data, size_t len);

#endif /* HBM_IMPORT_XPROF_H */
