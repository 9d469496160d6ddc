/* index.h — the profile index: what `hbm report` and the viewer's first view need from a
 * profile, kept on disk beside it (index_write.c), so that opening the same file again costs
 * milliseconds instead of reading it (index_read.c). docs/trace-format.md describes the file.
 *
 * Read back, an index is a summary profile: an hbm_profile_t with the profile's metadata,
 * memory spaces, step count, OOM events and markers, and only the buffers live at each
 * space's peak; hbm_analyze on it gives the analysis as it was computed when the index was
 * written (summary, buffers at the peak, groups), and its timeline, at any range and
 * resolution, from per-step values and their maxima over blocks of 64·2^k steps. Such a
 * profile has no other buffers (hbm_profile_buffer answers NULL for them;
 * hbm_analysis_buffers_in_window finds none): the viewer loads the whole file for those.
 *
 * An index is keyed on the profile's path, size, modification time, inode and the index
 * format; one that does not match, or is damaged in any byte (checksums), is ignored and
 * written again. */
#ifndef HBM_PROFILE_INDEX_H
#define HBM_PROFILE_INDEX_H

#include "base/base.h"

#define HBM_INDEX_MAGIC "HBMINDEX"
/* 3: buffers keep their source stack; 4: and their span_end */
#define HBM_INDEX_VERSION 4
#define HBM_INDEX_HEADER 64                      /* fixed header bytes */
#define HBM_INDEX_BLOCK_STEPS 4096               /* steps per compressed block of per-step values */
#define HBM_INDEX_LEVEL0 64                      /* the finest maxima: blocks of this many steps */
#define HBM_INDEX_MIN_BYTES ((uint64_t)16 << 20) /* HBM_INDEX=auto: files this big get one */

typedef struct hbm__digest hbm__digest_t;

/* Where the index of `path` is (beside it: DIR/.NAME.hbmindex, else in $XDG_CACHE_HOME/hbm,
 * else ~/.cache/hbm); `writable` picks the place a new one can be written. false when none. */
bool hbm__index_path(const char *path, bool writable, char *out, size_t cap);

/* Whether a profile read from `path` in `load_ns` gets an index (HBM_INDEX=auto, the
 * default: files of at least HBM_INDEX_MIN_BYTES or that took half a second to read;
 * HBM_INDEX=always; HBM_INDEX=never). */
bool hbm__index_wanted(const char *path, int64_t load_ns);
/* Whether indexes are read at all (not with HBM_INDEX=never). */
bool hbm__index_allowed(void);
/* Whether `hbm report` and the viewer's first view read a profile file without an index as a
 * summary, in one pass (hbm__profile_load_first): files of at least hbm__summary_min_bytes
 * (HBM_INDEX_MIN_BYTES; whole, they take about 70 bytes of memory per event; tests lower it),
 * every file with HBM_INDEX=always. */
bool hbm__summary_wanted(const char *path);
extern uint64_t hbm__summary_min_bytes;

/* Writes the index of p, read from `path`, atomically (a temporary file renamed). Best
 * effort: a profile is fine without one; HBM_OK or an error saying why not. */
hbm_status_t hbm__index_write(const hbm_profile_t *p, const char *path);
/* Writes index bytes (hbm__index_stream_bytes) as path's index, the same way. */
hbm_status_t hbm__index_store(const char *path, const uint8_t *bytes, size_t len);

/* Reads a profile whole from its file (hbm_profile_load: the import layer, above this one). */
typedef hbm_profile_t *(*hbm__whole_loader_t)(const char *path);

/* The summary profile of `path` from its index; NULL when there is none that matches the file
 * as it is now (hbm_last_error() then says why, for tests; callers read the file instead). */
hbm_profile_t *hbm__index_open(const char *path, hbm__whole_loader_t load_whole);

struct stat;
/* The same from index bytes, for a profile file of this stat (tests and the fuzzer: not
 * mapped; `mapped`: data is a mapping the summary profile takes over). */
hbm_profile_t *hbm__index_parse(const uint8_t *data, size_t len, const struct stat *st,
                                bool mapped);

/* A profile read from its index (a summary profile) or not. */
bool hbm__profile_is_summary(const hbm_profile_t *p);
/* Whether a space of p holds a buffer: the first one found ends the walk (a summary profile:
 * as its index counted them). Cheaper than an analysis for callers that only need to know. */
bool hbm__space_holds_buffers(const hbm_profile_t *p, int space);
/* The whole profile a summary was indexed from, read from its file again (the caller frees). */
hbm_profile_t *hbm__profile_load_whole(const hbm_profile_t *summary);
/* HBM_OK for a whole profile; for a summary, an error saying that `what` needs every buffer. */
hbm_status_t hbm__need_whole(const hbm_profile_t *p, const char *what);
/* A summary profile's op of a step (hbm__digest_step_op); NULL for other profiles. */
const char *hbm__profile_step_op(const hbm_profile_t *p, int64_t step, int *event);

/* ---- for profile.c and analysis.c: a summary profile's answers ---- */

void hbm__digest_free(hbm__digest_t *d);
int64_t hbm__digest_step_count(const hbm__digest_t *d);
int64_t hbm__digest_buffer_count(const hbm__digest_t *d);
int64_t hbm__digest_step_time(const hbm__digest_t *d, int64_t step);
const char *hbm__digest_step_label(const hbm__digest_t *d, int64_t step);
/* The buffer of (whole-profile) index i when the index kept it, else NULL. */
const hbm_buffer_t *hbm__digest_buffer(const hbm__digest_t *d, int64_t i);
/* Runtime profiles: the op of the buffer the step allocated (*event 1) or, when it allocated
 * none, freed (*event 2); NULL and 0 when none. */
const char *hbm__digest_step_op(const hbm__digest_t *d, int64_t step, int *event);
hbm_analysis_t *hbm__digest_analyze(const hbm__digest_t *d, const hbm_profile_t *p, int space);
size_t hbm__digest_timeline(const hbm__digest_t *d, int space, int64_t from, int64_t to,
                            size_t max_points, hbm_timeline_point_t *out);
uint64_t hbm__digest_bytes_at(const hbm__digest_t *d, int space, int64_t step);

/* ---- analysis.c for the index ---- */

/* An analysis whose numbers were stored (it takes the arrays; d answers its timeline). */
hbm_analysis_t *hbm__analysis_stored(const hbm_profile_t *p, const hbm__digest_t *d,
                                     const hbm_summary_t *s, int64_t *at_peak, int64_t *by_size,
                                     int64_t *by_padding, hbm_group_total_t *groups,
                                     size_t n_groups, hbm_group_total_t *run_groups,
                                     size_t n_run_groups);
/* Totals over the whole run by group: every buffer of the space once (group name, else its
 * category's), largest first, computed when asked or as stored; the caller frees. NULL (with
 * hbm_last_error) when out of memory. */
hbm_group_total_t *hbm__analysis_run_groups(const hbm_analysis_t *a, size_t *n);
/* The per-step series of a computed analysis: live bytes (0), unpadded (1), reserved (2,
 * NULL when the profile records none); NULL for a stored one. */
const uint64_t *hbm__analysis_series(const hbm_analysis_t *a, int which);

/* ---- analysis.c for a profile read in one pass (index_stream.c) ---- */

/* A buffer by its profile index, from wherever a caller keeps it. */
typedef const hbm_buffer_t *(*hbm__buffer_lookup_t)(const void *ctx, int64_t i);

/* Totals by group over the run (group name, else its category's), rows in first-met order. */
typedef struct hbm__run_groups {
  hbm_group_total_t *rows;
  size_t n, cap, last; /* last: the row found before, tried first */
} hbm__run_groups_t;
/* Counts b in its group's row; false when out of memory. */
bool hbm__run_groups_add(hbm__run_groups_t *r, const hbm_buffer_t *b);

/* A runtime profile's reserved bytes in a space where they change, from step 0: the series an
 * analysis sums, kept sparse. */
typedef struct hbm__reserved_change {
  int64_t step;
  uint64_t bytes;
} hbm__reserved_change_t;
/* *out (the caller frees) is NULL when the profile records no reserved memory for the space;
 * false when out of memory. */
bool hbm__analysis_reserved_changes(const hbm_profile_t *p, int space, hbm__reserved_change_t **out,
                                    size_t *n_out);

/* A space's peak as a pass over its steps found it. */
typedef struct hbm__streamed_peak {
  int64_t n_buffers; /* the space's */
  int64_t step;      /* the first step reaching the most live bytes */
  uint64_t bytes, unpadded;
  int64_t time_ns;
} hbm__streamed_peak_t;
/* The analysis of a runtime profile p (its steps and buffers counted, not held) from its peak,
 * the buffers live there (at_peak, by index; lookup finds them) and its run groups: everything
 * hbm_analyze derives from these, derived by the same code. Takes at_peak and run_groups. */
hbm_analysis_t *hbm__analysis_streamed(const hbm_profile_t *p, int space,
                                       const hbm__streamed_peak_t *peak,
                                       hbm__buffer_lookup_t lookup, const void *ctx,
                                       int64_t *at_peak, size_t n_at_peak,
                                       hbm_group_total_t *run_groups, size_t n_run_groups);

/* ---- index_stream.c: the index of a profile as it is read (profile.c passes it on) ---- */

typedef struct hbm__index_stream hbm__index_stream_t;
hbm__index_stream_t *hbm__index_stream_new(hbm_profile_t *p);
void hbm__index_stream_free(hbm__index_stream_t *s);
/* The profile's calls, each after its own checks; false / an error: not taken (said why). */
bool hbm__index_stream_space(hbm__index_stream_t *s, int space);
bool hbm__index_stream_step(hbm__index_stream_t *s, int64_t time_ns, const char *label);
bool hbm__index_stream_buffer(hbm__index_stream_t *s, int64_t idx, const hbm_buffer_t *b);
/* A buffer's source text interned for the stream (kept while a buffer live or at a peak
 * has it); NULL for NULL, or when out of memory. */
const char *hbm__index_stream_source(hbm__index_stream_t *s, const char *text);
hbm_status_t hbm__index_stream_end(hbm__index_stream_t *s, int64_t idx, int64_t end);
/* Whether a call was refused (or ran out of memory): the index would be wrong, read whole. */
bool hbm__index_stream_failed(const hbm__index_stream_t *s);
/* The last step done; what is still live lives out. */
hbm_status_t hbm__index_stream_finish(hbm__index_stream_t *s);
/* The index of the profile read (as hbm__index_write makes it for a file of this stat), in an
 * anonymous mapping of *len bytes; NULL when out of memory. */
uint8_t *hbm__index_stream_bytes(hbm__index_stream_t *s, const struct stat *st, size_t *len);

/* Reads p from here on as a summary (profile.c): its steps and buffers go to an index stream
 * and are not kept. Runtime profiles only; an error when p is a plan or has buffers. */
hbm_status_t hbm__profile_stream(hbm_profile_t *p);
hbm__index_stream_t *hbm__profile_stream_of(const hbm_profile_t *p);
/* A summary profile from index bytes in an anonymous mapping (taken, freed on failure) for
 * the file at path as st says it was; hbm__profile_load_whole then reads it with load_whole. */
hbm_profile_t *hbm__index_open_bytes(uint8_t *map, size_t len, const struct stat *st,
                                     const char *path, hbm__whole_loader_t load_whole);

#endif /* HBM_PROFILE_INDEX_H */
