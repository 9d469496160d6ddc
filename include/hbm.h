/* hbm.h — the one public header of libhbm, a toolkit for accelerator memory.
 *
 * Four parts, one model in the middle:
 *   1. the device allocator (JAX/XLA's modes: preallocated BFC, growth, platform, async pool,
 *      and hbm's expandable mode) on a simulated device or a real NVIDIA GPU;
 *   2. the profiler: tagged allocations recorded to an XProf-style logdir, and OOM errors
 *      that say what was live and why memory ran out;
 *   3. the profile model and its analysis (peak, timeline, buffers at peak, fragmentation),
 *      shared by `hbm report`, `hbm view`, the importers and the planner;
 *   4. the compile-time planner for XLA HLO.
 *
 * Conventions: functions that can fail return an hbm_status_t (HBM_OK == 0) or NULL, and set
 * a message that hbm_last_error() returns (per thread). The library never exits or aborts on
 * bad input. All functions on one hbm_device_t are thread-safe unless said otherwise;
 * a profile is safe to read from many threads once built, not while building.
 */
#ifndef HBM_H
#define HBM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HBM_VERSION "0.1.0"

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                      */
/* ------------------------------------------------------------------------------------------ */

typedef enum hbm_status {
  HBM_OK = 0,
  HBM_ERR_INVALID = 1,     /* bad argument or bad configuration value */
  HBM_ERR_NO_MEMORY = 2,   /* device memory exhausted: RESOURCE_EXHAUSTED */
  HBM_ERR_HOST_MEMORY = 3, /* host malloc failed */
  HBM_ERR_IO = 4,          /* file or socket error */
  HBM_ERR_PARSE = 5,       /* malformed input file; message says where and what was expected */
  HBM_ERR_UNAVAILABLE = 6, /* backend not present (no libcuda, no GPU) */
  HBM_ERR_NOT_FOUND = 7,   /* unknown pointer, run, profile, ... */
  HBM_ERR_INTERNAL = 8
} hbm_status_t;

/* The message of the last failed call on this thread ("" if none). Valid until the next
 * failing call on the same thread. */
const char *hbm_last_error(void);
/* The status of the last failed call on this thread. */
hbm_status_t hbm_last_status(void);
/* A short name for a status ("RESOURCE_EXHAUSTED", "INVALID_ARGUMENT", ...). */
const char *hbm_status_name(hbm_status_t s);

/* ------------------------------------------------------------------------------------------ */
/* Sizes                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* Parses "16GiB", "80GB", "512M", "1.5KiB", "1073741824" (K/M/G/T = 1000^n, Ki/Mi/Gi/Ti =
 * 1024^n, optional trailing "B"). Returns HBM_ERR_INVALID with a message naming `what`. */
hbm_status_t hbm_parse_size(const char *text, const char *what, uint64_t *out);
/* Byte totals (peaks, timelines, reserved memory, sums by category or group, the planner's
 * totals) are exact up to HBM_BYTES_MAX = 2^63 - 1 (8 EiB, the largest integer JSON readers
 * take) and saturate there instead of wrapping to a small number: a total of HBM_BYTES_MAX
 * means "at least that" (hbm_summary_t.overflowed says a sum saturated). */
#define HBM_BYTES_MAX ((uint64_t)INT64_MAX)
/* Formats bytes as "16.00GiB" / "512.0MiB" / "123B" into buf; returns buf. HBM_BYTES_MAX and
 * above: "≥ 8.00EiB (overflowed)" (give buf 32 bytes). */
char *hbm_format_bytes(uint64_t bytes, char *buf, size_t cap);

/* ------------------------------------------------------------------------------------------ */
/* Configuration: the seeds' environment variables, also settable from code                    */
/* ------------------------------------------------------------------------------------------ */

typedef enum hbm_device_kind {
  HBM_DEVICE_AUTO = 0, /* cuda if a GPU answers, else sim */
  HBM_DEVICE_SIM = 1,
  HBM_DEVICE_CUDA = 2
} hbm_device_kind_t;

/* XLA_PYTHON_CLIENT_ALLOCATOR / TF_GPU_ALLOCATOR */
typedef enum hbm_allocator_kind {
  HBM_ALLOCATOR_BFC = 0,      /* "default" / "bfc" */
  HBM_ALLOCATOR_PLATFORM = 1, /* exact, on demand, freed at once */
  HBM_ALLOCATOR_ASYNC = 2     /* "cuda_async" / TF_GPU_ALLOCATOR=cuda_malloc_async */
} hbm_allocator_kind_t;

/* The effective mode, derived from allocator + preallocate + expandable. */
typedef enum hbm_mode {
  HBM_MODE_BFC = 0,        /* preallocate the limit at first use, best-fit with coalescing */
  HBM_MODE_GROWTH = 1,     /* BFC without preallocation: grow in regions, never give back */
  HBM_MODE_PLATFORM = 2,   /* exact sizes from the device, returned at once */
  HBM_MODE_ASYNC = 3,      /* stream-ordered growing pool (cudaMallocAsync semantics) */
  HBM_MODE_EXPANDABLE = 4, /* one virtual range, physical granules mapped on demand */
  HBM_MODE_LEARN = 5,      /* HBM_PLAN=step: the repeating step found, planned offline, served
                              from the plan; the rest as bfc places it, mapped on demand */
  HBM_MODE_COUNT
} hbm_mode_t;

/* Where a configuration value came from, for `hbm info` and OOM messages. */
typedef enum hbm_origin {
  HBM_ORIGIN_DEFAULT = 0,
  HBM_ORIGIN_ENV = 1,  /* the environment variable named in hbm_config_origin() */
  HBM_ORIGIN_CODE = 2, /* set by the caller in the config struct */
  HBM_ORIGIN_FLAG = 3  /* set from a command-line flag */
} hbm_origin_t;

/* Fields of hbm_config_t that have an origin. */
typedef enum hbm_config_field {
  HBM_CFG_DEVICE = 0,
  HBM_CFG_ORDINAL,
  HBM_CFG_ALLOCATOR,
  HBM_CFG_PREALLOCATE,
  HBM_CFG_MEM_FRACTION,
  HBM_CFG_ASYNC_PREALLOC,
  HBM_CFG_EXPANDABLE,
  HBM_CFG_SIM_MEMORY,
  HBM_CFG_SIM_NAME,
  HBM_CFG_PROFILE_DIR,
  HBM_CFG_PLAN,
  HBM_CFG_COUNT
} hbm_config_field_t;

typedef struct hbm_config {
  hbm_device_kind_t device;       /* HBM_DEVICE (auto|sim|cuda), default auto */
  int ordinal;                    /* HBM_DEVICE_ORDINAL, default 0 */
  hbm_allocator_kind_t allocator; /* XLA_PYTHON_CLIENT_ALLOCATOR / TF_GPU_ALLOCATOR */
  int preallocate;                /* XLA_PYTHON_CLIENT_PREALLOCATE, default 1 */
  double mem_fraction;            /* XLA_PYTHON_CLIENT_MEM_FRACTION, default 0.75, in (0,1] */
  int64_t async_prealloc;         /* TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC: bytes, -1 = default
                                     amount, 0 = none (the default) */
  int expandable;                 /* HBM_EXPANDABLE, default 0 */
  uint64_t sim_memory;            /* HBM_SIM_MEMORY, default 16GiB */
  char sim_name[64];              /* HBM_SIM_NAME, default "sim0" */
  char profile_dir[1024];         /* HBM_PROFILE_DIR, default "" (no profiling) */
  int plan_step;                  /* HBM_PLAN=step (mode learn), default 0 (HBM_PLAN=none) */
  hbm_origin_t origin[HBM_CFG_COUNT];
  /* Which variable set each field when its origin is HBM_ORIGIN_ENV (or FLAG): an index
   * + 1 into hbm_config_variables(), 0 when none. Tells XLA_PYTHON_CLIENT_ALLOCATOR from
   * TF_GPU_ALLOCATOR for the allocator field. */
  unsigned char origin_var[HBM_CFG_COUNT];
} hbm_config_t;

/* Fills cfg with the built-in defaults (all origins HBM_ORIGIN_DEFAULT). */
void hbm_config_default(hbm_config_t *cfg);
/* Fills cfg with the defaults overridden by the environment. A bad value returns
 * HBM_ERR_INVALID with a message naming the variable, the value and what is accepted. */
hbm_status_t hbm_config_from_env(hbm_config_t *cfg);
/* The effective mode of a configuration. */
hbm_mode_t hbm_config_mode(const hbm_config_t *cfg);
/* "bfc", "growth", "platform", "async", "expandable", "learn". */
const char *hbm_mode_name(hbm_mode_t mode);
/* Parses a mode name as above; HBM_ERR_INVALID otherwise. */
hbm_status_t hbm_mode_parse(const char *name, hbm_mode_t *out);
/* Sets allocator/preallocate/expandable in cfg so that hbm_config_mode(cfg) == mode. */
void hbm_config_set_mode(hbm_config_t *cfg, hbm_mode_t mode, hbm_origin_t origin);
/* "XLA_PYTHON_CLIENT_MEM_FRACTION (environment)", "default", "code", ... for a field. */
const char *hbm_config_origin(const hbm_config_t *cfg, hbm_config_field_t field, char *buf,
                              size_t cap);
/* A field's effective setting as the variable that set it (or its main variable) would
 * be written: "XLA_PYTHON_CLIENT_MEM_FRACTION=0.5", "TF_GPU_ALLOCATOR=cuda_malloc_async".
 * Returns buf. */
const char *hbm_config_setting(const hbm_config_t *cfg, hbm_config_field_t field, char *buf,
                               size_t cap);
/* Sets one variable (by its environment name, e.g. "XLA_PYTHON_CLIENT_MEM_FRACTION") from
 * its text value, as hbm_config_from_env would; an empty value restores the default. A bad
 * value returns HBM_ERR_INVALID naming the variable, the value and what is accepted, and
 * leaves cfg unchanged. */
hbm_status_t hbm_config_set(hbm_config_t *cfg, const char *name, const char *value,
                            hbm_origin_t origin);
/* Checks a configuration filled from code (the ranges hbm_config_set enforces). */
hbm_status_t hbm_config_validate(const hbm_config_t *cfg);

/* The variables hbm reads, one table (docs/configuration.md lists the same). */
typedef struct hbm_variable {
  const char *name;          /* "XLA_PYTHON_CLIENT_MEM_FRACTION" */
  hbm_config_field_t field;  /* the field it sets */
  const char *values;        /* what is accepted, for messages: "a fraction in (0, 1]" */
  const char *default_value; /* "0.75" */
  const char *doc;           /* one sentence */
} hbm_variable_t;
/* The table; *count gets its length. */
const hbm_variable_t *hbm_config_variables(size_t *count);

/* ------------------------------------------------------------------------------------------ */
/* Devices and allocation                                                                      */
/* ------------------------------------------------------------------------------------------ */

typedef struct hbm_device hbm_device_t; /* one allocator on one device */
typedef struct hbm_stream hbm_stream_t; /* a stream; NULL means the default stream */

/* Opens a device with cfg (NULL: hbm_config_from_env). Nothing is allocated on the device
 * until the first allocation (which preallocates in BFC mode). */
hbm_device_t *hbm_open(const hbm_config_t *cfg);
/* Frees everything the device holds and the handle. Live blocks are released too. */
void hbm_close(hbm_device_t *dev);
/* The configuration the device was opened with. */
const hbm_config_t *hbm_device_config(const hbm_device_t *dev);
/* "sim0" / "cuda:0 (NVIDIA H100 80GB HBM3)". */
const char *hbm_device_name(const hbm_device_t *dev);
/* HBM_DEVICE_SIM or HBM_DEVICE_CUDA: the backend the device was opened on. */
hbm_device_kind_t hbm_device_kind(const hbm_device_t *dev);
/* The effective mode (hbm_config_mode of its configuration). */
hbm_mode_t hbm_device_mode(const hbm_device_t *dev);
/* Why this backend was chosen ("HBM_DEVICE=auto: no GPU answered (libcuda.so.1: ...)") and
 * what the device lacks ("no memory pools (...): hbm's own pool"); "" when it was asked
 * for explicitly and lacks nothing. */
const char *hbm_device_note(const hbm_device_t *dev);
/* Total and currently free bytes of the device as a whole (other processes included). */
hbm_status_t hbm_device_memory(hbm_device_t *dev, uint64_t *total, uint64_t *free_bytes);

/* Allocates size bytes aligned to `alignment` (0 = 256; a power of two; at least 256).
 * Returns NULL when it cannot: hbm_last_error() then begins with XLA's
 * "RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes." and goes on with
 * hbm's diagnosis. */
void *hbm_alloc(hbm_device_t *dev, size_t size, size_t alignment);
/* Frees a block from hbm_alloc (NULL is ignored). An unknown pointer is an error. */
hbm_status_t hbm_free(hbm_device_t *dev, void *ptr);
/* The requested size of a live block, 0 if ptr is not one. */
size_t hbm_block_size(hbm_device_t *dev, const void *ptr);

/* Streams (on the sim device host-side queues; on CUDA real streams). */
hbm_stream_t *hbm_stream_create(hbm_device_t *dev);
hbm_status_t hbm_stream_synchronize(hbm_device_t *dev, hbm_stream_t *stream);
hbm_status_t hbm_stream_destroy(hbm_device_t *dev, hbm_stream_t *stream);
/* Stream-ordered allocation: memory freed on a stream is reusable on that stream at once,
 * on other streams after the freeing stream was synchronized. In non-async modes these
 * behave like hbm_alloc/hbm_free. */
void *hbm_alloc_async(hbm_device_t *dev, size_t size, hbm_stream_t *stream);
hbm_status_t hbm_free_async(hbm_device_t *dev, void *ptr, hbm_stream_t *stream);

/* Gives free physical memory back to the device where the mode allows (expandable: unmaps
 * free granules; async: trims the pool; growth/bfc: nothing, as in XLA). */
hbm_status_t hbm_trim(hbm_device_t *dev);

typedef struct hbm_stats {
  uint64_t bytes_in_use;      /* sum of live requested sizes */
  uint64_t peak_bytes_in_use; /* exact while one thread uses the device; once threads share
                                 it, sampled when the device's lock is taken and when stats
                                 are read (docs/configuration.md, "Threads") */
  uint64_t bytes_reserved;    /* taken from the device (mapped, in expandable mode) */
  uint64_t peak_bytes_reserved;
  uint64_t bytes_limit;        /* the most this allocator may take */
  uint64_t largest_free_block; /* largest block allocatable without taking more */
  uint64_t num_allocs;         /* allocations served so far */
  uint64_t num_frees;
  uint64_t num_live;    /* live blocks now */
  uint64_t num_ooms;    /* failed allocations */
  double fragmentation; /* 1 - largest_free_block / free bytes (0 when nothing free) */
} hbm_stats_t;
hbm_status_t hbm_get_stats(hbm_device_t *dev, hbm_stats_t *out);

typedef struct hbm_block_info {
  const void *ptr;
  size_t size;      /* requested */
  size_t allocated; /* what it occupies after rounding */
  const char *op;   /* tags, NULL when untagged */
  const char *shape;
  int category; /* hbm_category_t */
  const char *group;
  const char *source;
} hbm_block_info_t;
/* Calls fn for every live block in address order, under the allocator's lock: fn must not
 * call back into dev. Stops early when fn returns non-zero. */
hbm_status_t hbm_walk(hbm_device_t *dev, int (*fn)(const hbm_block_info_t *, void *), void *ctx);

/* ------------------------------------------------------------------------------------------ */
/* Tags and annotations                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* Buffer categories, in XProf's precedence order (Parameter > Output > Thread-local >
 * Constant > Temporary). */
typedef enum hbm_category {
  HBM_CAT_UNKNOWN = 0,
  HBM_CAT_PARAMETER = 1, /* program input / argument */
  HBM_CAT_OUTPUT = 2,
  HBM_CAT_THREAD_LOCAL = 3,
  HBM_CAT_CONSTANT = 4,
  HBM_CAT_TEMPORARY = 5,
  HBM_CAT_COUNT
} hbm_category_t;
/* "parameter", "output", "thread-local", "constant", "temporary", "unknown". */
const char *hbm_category_name(hbm_category_t c);
hbm_status_t hbm_category_parse(const char *name, hbm_category_t *out);

typedef struct hbm_tag {
  const char *op;    /* op / instruction name, e.g. "dot.3" or "jit(f)/matmul" */
  const char *shape; /* "bf16[327680,327680]" */
  hbm_category_t category;
  const char *group;  /* free-form group: "optimizer state", "activations", ... */
  const char *source; /* "model.c:42" */
} hbm_tag_t;

/* hbm_alloc with a tag; fields left NULL/UNKNOWN are filled from the thread's innermost
 * annotation scope. */
void *hbm_alloc_tagged(hbm_device_t *dev, size_t size, size_t alignment, const hbm_tag_t *tag);
/* Scoped per-thread annotation: everything this thread allocates until the matching pop
 * carries these tags (inner scopes override outer ones field by field). Strings are copied. */
hbm_status_t hbm_annotate_push(const hbm_tag_t *tag);
void hbm_annotate_pop(void);

/* ------------------------------------------------------------------------------------------ */
/* Profiler                                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Starts recording every device opened or already open in this process to
 * <logdir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.<pid>.hbmtrace. HBM_PROFILE_DIR=DIR
 * does the same for a whole process without code changes. */
hbm_status_t hbm_profiler_start(const char *logdir);
/* Flushes and closes the profile. */
hbm_status_t hbm_profiler_stop(void);
/* Path of the profile being written, or NULL. */
const char *hbm_profiler_path(void);
/* Markers in the profile: a user annotation, and step boundaries. */
hbm_status_t hbm_profiler_marker(const char *text);
hbm_status_t hbm_profiler_step_begin(int64_t step);
hbm_status_t hbm_profiler_step_end(int64_t step);
/* Writes everything recorded so far to disk (also done on OOM and at exit). */
hbm_status_t hbm_profiler_flush(void);

/* ------------------------------------------------------------------------------------------ */
/* The profile model                                                                           */
/* ------------------------------------------------------------------------------------------ */
/* Everything a user can look at (a run of their program, a compile-time plan, another
 * allocator's log) becomes an hbm_profile_t: buffers with a size, an unpadded size, an
 * address/offset, a live range [start, end) over steps, a category, a memory space, tags.
 * Steps are events in time (runtime) or instructions in program order (plan). */

typedef struct hbm_profile hbm_profile_t;

typedef enum hbm_profile_kind {
  HBM_PROFILE_RUNTIME = 0, /* steps are allocator events in time */
  HBM_PROFILE_PLAN = 1     /* steps are instructions in program order */
} hbm_profile_kind_t;

/* Buffer flags */
#define HBM_BUF_INDEFINITE 1u /* live for the whole program (parameters, constants, ...) */
#define HBM_BUF_LIVE_OUT 2u   /* still live at the end (output, or never freed) */

typedef struct hbm_buffer {
  uint64_t id;            /* allocation order, unique in the profile */
  uint64_t address;       /* device address (runtime); plan: offset in the temp heap, or in
                             its own allocation for HBM_BUF_INDEFINITE buffers; XProf
                             programs: the colour's allocations laid end to end, the
                             heap-simulated ones first (a temporary's is XProf's bufferBlocks
                             offset: its offset in the temp allocation), then the others */
  uint64_t size;          /* bytes as placed: requested (runtime) or padded (plan) */
  uint64_t unpadded_size; /* bytes in the default layout (== size when unknown) */
  int64_t start;          /* first step it is live */
  int64_t end;            /* first step it is no longer live; n_steps if live out */
  int space;              /* index into the profile's memory spaces */
  hbm_category_t category;
  uint32_t flags; /* HBM_BUF_* */
  const char *op; /* tags; NULL when absent. Owned by the profile. */
  const char *shape;
  const char *group;
  const char *source;
  const char *opcode; /* plan: HLO opcode */
  const char *label;  /* plan: XLA label (the instruction's text); runtime: NULL */
  const char *stack;  /* the source stack, innermost frame first, one "file:line:column" per
                         line (XProf's "Source Stack"); NULL when unknown. Not saved in
                         .hbmtrace files. */
  int64_t span_end;   /* 0, or where the value the buffer is shown as ends when its bytes stay
                         live after it, to `end` (XProf programs: a buffer revived by
                         SHARE_WITH and freed while a later sharer holds its bytes; XProf's
                         span). The span shown is [start, hbm_buffer_span_end()). Not saved in
                         .hbmtrace files. */
} hbm_buffer_t;

/* The end of the buffer's span as shown (its card, `hbm report`): span_end when set, else end.
 * The heap's occupancy (timelines, peaks) always uses end. */
int64_t hbm_buffer_span_end(const hbm_buffer_t *b);

typedef struct hbm_space_info {
  const char *name;   /* "HBM", "Host", "VMEM", ... */
  const char *device; /* "sim0", "cuda:0", "tpu" ... */
  int color;          /* XLA memory colour (HBM 0, Host 5, ...) */
  uint64_t limit;     /* bytes the allocator/plan may use, 0 = unknown */
} hbm_space_info_t;

typedef enum hbm_reserve_op {
  HBM_RESERVE_PREALLOCATE = 0, /* preallocated the limit */
  HBM_RESERVE_GROW = 1,        /* took a new region */
  HBM_RESERVE_MAP = 2,         /* mapped physical granules (expandable) */
  HBM_RESERVE_UNMAP = 3,       /* unmapped physical granules */
  HBM_RESERVE_RELEASE = 4      /* returned a region */
} hbm_reserve_op_t;

typedef struct hbm_reserve_event {
  int64_t step;
  int space;
  hbm_reserve_op_t op;
  uint64_t address;
  uint64_t size;
} hbm_reserve_event_t;

typedef struct hbm_oom_event {
  int64_t step;
  int space;
  uint64_t requested;
  const char *message; /* the full diagnosis text */
} hbm_oom_event_t;

typedef enum hbm_marker_kind {
  HBM_MARKER_TEXT = 0,
  HBM_MARKER_STEP_BEGIN = 1,
  HBM_MARKER_STEP_END = 2
} hbm_marker_kind_t;

typedef struct hbm_marker {
  int64_t step;
  hbm_marker_kind_t kind;
  int64_t value; /* step number for STEP_BEGIN/END */
  const char *text;
} hbm_marker_t;

/* Building (importers, the trace reader, the planner). Strings are copied into the profile. */
hbm_profile_t *hbm_profile_new(hbm_profile_kind_t kind, const char *name);
void hbm_profile_free(hbm_profile_t *p);
/* Free-form metadata: "host", "pid", "module", "source_path", ... */
hbm_status_t hbm_profile_set_meta(hbm_profile_t *p, const char *key, const char *value);
/* Adds a memory space; returns its index (or -1 on failure). */
int hbm_profile_add_space(hbm_profile_t *p, const char *name, const char *device, int color,
                          uint64_t limit);
/* Finds a space by name and device, -1 if absent. */
int hbm_profile_find_space(const hbm_profile_t *p, const char *name, const char *device);
/* Appends a step (time in ns since the profile began for runtime; label = instruction name
 * for plans). Returns its index (or -1). */
int64_t hbm_profile_add_step(hbm_profile_t *p, int64_t time_ns, const char *label);
/* Adds a buffer with an explicit live range (end may be -1: not yet known). Returns its
 * index (or -1). b->id is assigned by the profile. */
int64_t hbm_profile_add_buffer(hbm_profile_t *p, const hbm_buffer_t *b);
/* Sets the end of buffer idx. */
hbm_status_t hbm_profile_end_buffer(hbm_profile_t *p, int64_t idx, int64_t end);
/* Event-stream helpers: the buffer at `address` in `space` born / dying at `step`. A free of
 * an address with no live buffer returns HBM_ERR_NOT_FOUND. */
int64_t hbm_profile_alloc_at(hbm_profile_t *p, int64_t step, int space, uint64_t address,
                             uint64_t size, const hbm_tag_t *tag);
hbm_status_t hbm_profile_free_at(hbm_profile_t *p, int64_t step, int space, uint64_t address);
hbm_status_t hbm_profile_add_reserve(hbm_profile_t *p, const hbm_reserve_event_t *e);
hbm_status_t hbm_profile_add_oom(hbm_profile_t *p, const hbm_oom_event_t *e);
hbm_status_t hbm_profile_add_marker(hbm_profile_t *p, const hbm_marker_t *m);
/* Ends the building: buffers still open end at n_steps and get HBM_BUF_LIVE_OUT. */
hbm_status_t hbm_profile_finish(hbm_profile_t *p);

/* Reading. */
hbm_profile_kind_t hbm_profile_kind(const hbm_profile_t *p);
const char *hbm_profile_name(const hbm_profile_t *p);
const char *hbm_profile_meta(const hbm_profile_t *p, const char *key); /* NULL if absent */
size_t hbm_profile_meta_count(const hbm_profile_t *p);
const char *hbm_profile_meta_key(const hbm_profile_t *p, size_t i); /* i-th key, in order set */
int hbm_profile_space_count(const hbm_profile_t *p);
const hbm_space_info_t *hbm_profile_space(const hbm_profile_t *p, int i);
int64_t hbm_profile_step_count(const hbm_profile_t *p);
int64_t hbm_profile_step_time(const hbm_profile_t *p, int64_t step);
const char *hbm_profile_step_label(const hbm_profile_t *p, int64_t step); /* NULL if none */
int64_t hbm_profile_buffer_count(const hbm_profile_t *p);
const hbm_buffer_t *hbm_profile_buffer(const hbm_profile_t *p, int64_t i);
size_t hbm_profile_reserve_count(const hbm_profile_t *p);
const hbm_reserve_event_t *hbm_profile_reserve(const hbm_profile_t *p, size_t i);
size_t hbm_profile_oom_count(const hbm_profile_t *p);
const hbm_oom_event_t *hbm_profile_oom(const hbm_profile_t *p, size_t i);
size_t hbm_profile_marker_count(const hbm_profile_t *p);
const hbm_marker_t *hbm_profile_marker(const hbm_profile_t *p, size_t i);

/* Loading and saving. hbm_profile_load reads any of: an .hbmtrace file, an RMM CSV log, an
 * HLO module (planned with default options), an XLA buffer-assignment or memory-usage-report
 * dump; the format is recognised from the content. A truncated .hbmtrace loads up to its
 * last whole block; hbm_profile_meta(p, "lost") then says how much was lost. */
hbm_profile_t *hbm_profile_load(const char *path);
/* Writes p as an .hbmtrace file (docs/trace-format.md). */
hbm_status_t hbm_profile_save(const hbm_profile_t *p, const char *path);

/* ------------------------------------------------------------------------------------------ */
/* Pasted out-of-memory errors (`hbm explain`, src/import/oom_text*.c)                         */
/* ------------------------------------------------------------------------------------------ */
/* The text users paste around an OOM (a traceback, a log with prefixes, cut or wrapped) from
 * XLA on GPU or TPU, PyTorch or TensorFlow, parsed into numbers, peak buffers and a cause. */

typedef enum hbm_oom_kind {
  HBM_OOM_XLA_GPU = 0,    /* RESOURCE_EXHAUSTED: Out of memory while trying to allocate ... */
  HBM_OOM_XLA_TPU = 1,    /* Allocation (size=...) would exceed / Ran out of memory in ... */
  HBM_OOM_PYTORCH = 2,    /* CUDA out of memory. Tried to allocate ... */
  HBM_OOM_TENSORFLOW = 3, /* OOM when allocating tensor with shape[...] ... */
  HBM_OOM_XLA_CPU = 4,    /* RESOURCE_EXHAUSTED: Out of memory allocating N bytes. (host) */
  HBM_OOM_KIND_COUNT
} hbm_oom_kind_t;

/* The numbers a text may give, in bytes (counts for NUM_ALLOCS); each known or not. */
typedef enum hbm_oom_field {
  HBM_OOMF_REQUESTED = 0,        /* the allocation that failed */
  HBM_OOMF_ROUNDED,              /* BFC: the request rounded */
  HBM_OOMF_CAPACITY,             /* device memory (PyTorch, cudaMallocAsync, TPU) */
  HBM_OOMF_FREE,                 /* device memory free, as the framework saw it */
  HBM_OOMF_LIMIT,                /* allocator limit (BFC Limit, PyTorch "allowed") */
  HBM_OOMF_IN_USE,               /* this process (PyTorch) / the allocator (BFC InUse) */
  HBM_OOMF_ALLOCATED,            /* PyTorch: allocated by PyTorch; TPU: currently allocated */
  HBM_OOMF_RESERVED,             /* PyTorch: reserved in total (cached) */
  HBM_OOMF_RESERVED_UNALLOCATED, /* PyTorch: reserved but unallocated */
  HBM_OOMF_OTHER_PROCESSES,      /* memory of the other processes listed */
  HBM_OOMF_MAX_IN_USE,           /* BFC stats */
  HBM_OOMF_NUM_ALLOCS,
  HBM_OOMF_MAX_ALLOC_SIZE,
  HBM_OOMF_BFC_RESERVED,
  HBM_OOMF_PEAK_RESERVED,
  HBM_OOMF_LARGEST_FREE_BLOCK,
  HBM_OOMF_PARAMETER, /* XLA BufferAssignment stats */
  HBM_OOMF_CONSTANT,
  HBM_OOMF_MAYBE_LIVE_OUT,
  HBM_OOMF_PREALLOCATED_TEMP,
  HBM_OOMF_TEMP_FRAGMENTATION,
  HBM_OOMF_TOTAL_ALLOCATION,
  HBM_OOMF_TOTAL_FRAGMENTATION,
  HBM_OOMF_USED,         /* TPU: "Used U of C hbm" */
  HBM_OOMF_EXCEEDED,     /* TPU: "Exceeded hbm capacity by E" */
  HBM_OOMF_TOTAL_USAGE,  /* TPU: "Total hbm usage >= T" */
  HBM_OOMF_TPU_RESERVED, /* TPU: its "reserved" row */
  HBM_OOMF_PROGRAM,      /* TPU: "program" row / program requirement */
  HBM_OOMF_ARGUMENTS,    /* TPU: "arguments" row */
  HBM_OOMF_OUTPUT,       /* TPU: "Output size" */
  HBM_OOMF_HLO_TEMP,     /* TPU: "HLO temp" */
  HBM_OOMF_COUNT
} hbm_oom_field_t;

typedef struct hbm_oom_buffer {
  uint64_t size;
  uint64_t unpadded_size; /* 0 when the text does not say */
  char *op_name;          /* metadata op_name; NULL when absent (all strings malloc'd) */
  char *op_type;
  char *source_file;
  int64_t source_line; /* 0 when absent */
  char *label;         /* XLA label / tag */
  char *shape;
  char *allocation_type;  /* TPU "Allocation type", "Entry Parameter" for parameters */
  char *group;            /* the operator path hbm groups by (the layer) */
  int parameter;          /* "Entry Parameter Subshape" / allocation type parameter */
  char *instruction;      /* the HLO instruction that defines it: from the text (TPU's XLA
                             label) or from the module (hbm_oom_text_add_module); NULL unknown */
  int source_from_module; /* 1: source_file/line come from the module, not from the text */
} hbm_oom_buffer_t;

typedef struct hbm_oom_process {
  int64_t pid;
  uint64_t bytes;
} hbm_oom_process_t;

typedef struct hbm_oom_text {
  hbm_oom_kind_t kind;
  char *headline;     /* the framework's error line, as written (log prefixes removed) */
  int64_t line;       /* 1-based line of the headline in the input */
  char *device;       /* "GPU 0", "/device:GPU:0", "hbm", "GPU_0_bfc" ...; NULL unknown */
  char *allocator;    /* "GPU_0_bfc", "gpu_async_0" ...; NULL unknown */
  char *tensor_shape; /* TensorFlow: "[16,112,112,147]"; NULL unknown */
  char *tensor_type;  /* TensorFlow: "float" */
  char *op;           /* TensorFlow node / op; NULL unknown */
  uint64_t value[HBM_OOMF_COUNT];
  int known[HBM_OOMF_COUNT];    /* 1 when the text gave value[i] */
  hbm_oom_process_t *processes; /* PyTorch: "Process N has X memory in use" */
  size_t n_processes;
  int this_process_listed;   /* one listed process is taken to be this one */
  hbm_oom_buffer_t *buffers; /* peak buffers / largest program allocations, as listed */
  size_t n_buffers;
  /* Numbers the text gives that are no usable size: negative, or 2^64 bytes and more
   * ("1e308 GiB", "99999999999999.99E"). Never taken as values: unreadable[i] is 1 for a field
   * the text gave so (value[i] stays unknown), and notes says each one, with the number as
   * written (lines of text, NULL when none). */
  int unreadable[HBM_OOMF_COUNT];
  char *notes;
  /* hbm_oom_text_add_module: the module the text was matched with ("jit_f"), its file, and
   * what was found there (a sentence); NULL when none. */
  char *module;
  char *module_file;
  char *module_finding;
} hbm_oom_text_t;

/* Finds the first out-of-memory error in `data` and parses what is around it. Returns NULL
 * with hbm_last_error() = "<name>: no out-of-memory error found (...)" when there is none
 * (status HBM_ERR_NOT_FOUND). Free with hbm_oom_text_free. */
hbm_oom_text_t *hbm_oom_text_parse(const char *data, size_t len, const char *name);
void hbm_oom_text_free(hbm_oom_text_t *t);
/* True when `data` holds an out-of-memory error hbm_oom_text_parse would find. */
int hbm_oom_text_is(const char *data, size_t len);
/* "XLA on GPU", "XLA on TPU", "PyTorch", "TensorFlow"; and each field's JSON name. */
const char *hbm_oom_kind_name(hbm_oom_kind_t kind);
const char *hbm_oom_field_name(hbm_oom_field_t field);
/* The diagnosis: the headline kept, the numbers, the cause, the fixes, the peak buffers
 * grouped by operator path. */
hbm_status_t hbm_oom_text_explain(const hbm_oom_text_t *t, FILE *out);
/* The parsed numbers, cause and buffers as JSON. */
hbm_status_t hbm_oom_text_json(const hbm_oom_text_t *t, FILE *out);
/* Adds what the program's compiled module tells about t (`hbm explain --module PATH`). PATH
 * is an XLA dump directory (XLA_FLAGS=--xla_dump_to), one of its files, or a module's HLO text
 * (compiled.as_text()). A listed buffer without a source line gets one when the instructions
 * that may define it (its instruction name, else its op_name, opcode and shape) all have the
 * same line, from their metadata or the module's stack frames; a text that lists no buffers
 * but names the bytes that failed gets the buffers XLA's dump shows live at the peak of the
 * one module with an allocation of exactly that size. Nothing is guessed: what cannot be told
 * is said in t->notes. Errors: PATH unreadable, or no module in it. */
hbm_status_t hbm_oom_text_add_module(hbm_oom_text_t *t, const char *path);
/* The peak buffers as a plan profile (one step: the peak) with the OOM as its event; a text
 * that lists no buffers gives its totals instead (XLA's parameter / output / temp rows, TPU's
 * usage rows, what PyTorch allocated, the BFC allocator's InUse), one buffer each. */
hbm_profile_t *hbm_oom_text_to_profile(const hbm_oom_text_t *t, const char *name);

/* ------------------------------------------------------------------------------------------ */
/* Analysis: the one module that computes peaks, timelines and buffers at the peak             */
/* ------------------------------------------------------------------------------------------ */

typedef struct hbm_analysis hbm_analysis_t;

typedef struct hbm_summary {
  int space;
  int64_t n_steps;
  int64_t n_buffers;            /* buffers in this space */
  uint64_t peak_bytes;          /* max over steps of live sizes (padded) */
  int64_t peak_step;            /* first step reaching it (-1 when empty) */
  int64_t peak_time_ns;         /* time of that step (runtime) */
  uint64_t peak_unpadded_bytes; /* sum of unpadded sizes live at peak_step */
  uint64_t padding_bytes;       /* peak_bytes - peak_unpadded_bytes */
  uint64_t indefinite_bytes;    /* buffers live for the whole program (HBM_BUF_INDEFINITE) */
  uint64_t argument_bytes;      /* parameters live at the peak */
  uint64_t output_bytes;        /* outputs live at the peak (plans: with the donated
                                   parameters that hold outputs, as memory_analysis()) */
  uint64_t temporary_bytes;     /* peak_bytes minus buffers live at the peak that are
                                   indefinite or program inputs/outputs, constants,
                                   thread-local (XProf's peak - indefinite); untagged
                                   buffers count as temporaries */
  uint64_t heap_bytes;          /* highest address+size in use (plan: heap size with
                                   fragmentation; runtime: span of reserved memory) */
  uint64_t peak_reserved_bytes; /* max reserved over steps (runtime); heap_bytes for plans */
  uint64_t reserved_at_peak;    /* reserved at peak_step */
  uint64_t limit_bytes;         /* the space's limit, 0 = unknown */
  double fragmentation_at_peak; /* 1 - largest free block / free bytes, within reserved
                                   memory at peak_step (0 when nothing free; -1 when the
                                   profile records no reserved memory, e.g. an RMM log) */
  uint64_t largest_free_at_peak;
  size_t n_buffers_at_peak;
  size_t n_oom;
  uint64_t category_bytes[HBM_CAT_COUNT]; /* live at the peak, by category */
  int overflowed; /* 1 when a byte total reached HBM_BYTES_MAX and was saturated there */
} hbm_summary_t;

typedef struct hbm_timeline_point {
  int64_t step;      /* the step this point stands for (the max of its bucket) */
  uint64_t bytes;    /* live (padded) bytes */
  uint64_t unpadded; /* live unpadded bytes */
  uint64_t reserved; /* reserved bytes (runtime), heap high-water (plan) */
} hbm_timeline_point_t;

typedef struct hbm_group_total {
  const char *name; /* group name, or the category name for untagged groups */
  uint64_t bytes;   /* live at the peak */
  size_t count;
} hbm_group_total_t;

/* Analyses one memory space of p (p must outlive the analysis). All the work is done here;
 * the hbm_analysis_* readers below only read, so any number of threads may call them on one
 * analysis at once. */
hbm_analysis_t *hbm_analyze(const hbm_profile_t *p, int space);
void hbm_analysis_free(hbm_analysis_t *a);
const hbm_summary_t *hbm_analysis_summary(const hbm_analysis_t *a);
/* The timeline over steps [from, to) in at most max_points points. When downsampled each
 * point is the bucket's maximum, so the exact peak is always present. Returns the number
 * of points written. */
size_t hbm_analysis_timeline(const hbm_analysis_t *a, int64_t from, int64_t to, size_t max_points,
                             hbm_timeline_point_t *out);
/* Live bytes at one step. */
uint64_t hbm_analysis_bytes_at(const hbm_analysis_t *a, int64_t step);
/* Buffers live at the peak, as indices into the profile, in allocation order. */
const int64_t *hbm_analysis_buffers_at_peak(const hbm_analysis_t *a, size_t *n);
/* The same, sorted by size (largest first) or by padding (largest first). */
const int64_t *hbm_analysis_buffers_at_peak_by_size(const hbm_analysis_t *a, size_t *n);
const int64_t *hbm_analysis_buffers_at_peak_by_padding(const hbm_analysis_t *a, size_t *n);
/* Totals at the peak by group (tag group if any, else category name), largest first. */
const hbm_group_total_t *hbm_analysis_groups(const hbm_analysis_t *a, size_t *n);
/* Buffers of this space whose live range meets [from, to), in allocation order. Writes at
 * most cap indices to out and returns how many there are in total. */
size_t hbm_analysis_buffers_in_window(const hbm_analysis_t *a, int64_t from, int64_t to,
                                      int64_t *out, size_t cap);
/* The profile an analysis was made of. */
const hbm_profile_t *hbm_analysis_profile(const hbm_analysis_t *a);

/* ------------------------------------------------------------------------------------------ */
/* Reports and exports                                                                         */
/* ------------------------------------------------------------------------------------------ */

/* The terminal report of `hbm report` for one space (-1: every space). width = terminal
 * columns for the timeline chart (0: 100). */
hbm_status_t hbm_report_text(const hbm_profile_t *p, int space, int width, FILE *out);
/* The same as JSON (keys: peak_bytes, peak_step, peak_reserved_bytes, limit_bytes,
 * buffers_at_peak[{size, op, shape, category, ...}], oom_events, ...). */
hbm_status_t hbm_report_json(const hbm_profile_t *p, int space, FILE *out);
/* Totals by group of one space (under `hbm run` a buffer's group is the shared library that
 * asked for it): live at the peak and allocated over the whole profile, each line prefixed
 * with `indent`. */
hbm_status_t hbm_report_groups_text(const hbm_profile_t *p, int space, const char *indent,
                                    FILE *out);
/* Chrome trace / Perfetto JSON: memory counters and allocation slices. */
hbm_status_t hbm_export_chrome(const hbm_profile_t *p, FILE *out);
/* Many devices, one view (the summary `hbm report DIR` prints first): profiles[0..n) of one
 * run (names[i]: their file names, may be NULL) hold several devices (a runtime profile's
 * spaces with buffers; an XProf file's devices, each at the largest peak of the programs XLA
 * assigned to it). Text: the largest device named, the median, the smallest, the spread, the
 * peak per device and what the largest holds beyond the median (hbm_diff); nothing when there
 * are fewer than two devices. JSON: {count, per_device[], largest, median, smallest,
 * spread_bytes, difference}. */
size_t hbm_report_device_count(const hbm_profile_t *const *profiles, const char *const *names,
                               size_t n);
hbm_status_t hbm_report_devices_text(const hbm_profile_t *const *profiles, const char *const *names,
                                     size_t n, FILE *out);
hbm_status_t hbm_report_devices_json(const hbm_profile_t *const *profiles, const char *const *names,
                                     size_t n, FILE *out);

/* ------------------------------------------------------------------------------------------ */
/* Logdir (XProf layout: <logdir>/plugins/profile/<run>/<host>.<ext>)                          */
/* ------------------------------------------------------------------------------------------ */

typedef struct hbm_logdir_entry {
  char run[256];   /* run directory name */
  char file[256];  /* profile file name inside the run */
  char path[4096]; /* full path */
  int64_t mtime;
  uint64_t bytes;
  char real[4096]; /* the path with every symbolic link resolved: where the file is */
  int outside;     /* 1: real lies outside the logdir (listed with HBM_LOGDIR_FOLLOW_LINKS) */
} hbm_logdir_entry_t;
/* Lists profiles (.hbmtrace runtime profiles and plans, .csv logs, XLA dumps) under a logdir,
 * newest run first, with the link policy of hbm_logdir_scan (flags 0).
 * Returns the count written to out (at most cap) and the total in *total. */
hbm_status_t hbm_logdir_list(const char *logdir, hbm_logdir_entry_t *out, size_t cap,
                             size_t *total);

/* Symbolic links in a logdir (users link their runs in): a run or profile whose link leads
 * to a place inside the logdir is listed; one that leads outside it is skipped, and said so,
 * unless flags has HBM_LOGDIR_FOLLOW_LINKS (`--follow-links` of hbm report and hbm view). */
#define HBM_LOGDIR_FOLLOW_LINKS 1
/* What a listing left out, and why ("a symbolic link to /data/r1, outside the logdir ..."). */
typedef struct hbm_logdir_skip {
  char path[4096];
  char why[640];
} hbm_logdir_skip_t;
/* At most this many skipped entries are kept (all are counted). */
#define HBM_LOGDIR_SKIPS_KEPT 64
typedef struct hbm_logdir_scan {
  hbm_logdir_entry_t *entries; /* newest run first */
  size_t n_entries;
  hbm_logdir_skip_t *skipped; /* the first HBM_LOGDIR_SKIPS_KEPT */
  size_t n_skipped;           /* how many were skipped in all */
} hbm_logdir_scan_t;
/* Lists the logdir into out (free with hbm_logdir_scan_free). */
hbm_status_t hbm_logdir_scan(const char *logdir, int flags, hbm_logdir_scan_t *out);
void hbm_logdir_scan_free(hbm_logdir_scan_t *scan);
/* Creates <logdir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/ and returns it in buf. */
hbm_status_t hbm_logdir_new_run(const char *logdir, char *buf, size_t cap);

/* ------------------------------------------------------------------------------------------ */
/* Replay of allocation logs (`hbm replay`)                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef enum hbm_log_action {
  HBM_LOG_ALLOCATE = 0,
  HBM_LOG_FREE = 1,
  HBM_LOG_ALLOCATE_FAILURE = 2
} hbm_log_action_t;

typedef struct hbm_log_event {
  hbm_log_action_t action;
  uint32_t thread; /* 0, 1, ... in order of first appearance in the log */
  uint32_t stream; /* 0 = the default stream (0x0); others 1, 2, ... in order of appearance */
  uint64_t size;
  uint64_t pointer;
  int64_t time_ns; /* the Time column in ns (HH:MM:SS clock times run on past midnight) */
  int64_t line;    /* line number in the source file */
} hbm_log_event_t;

typedef struct hbm_alloc_log {
  hbm_log_event_t *events;
  size_t n_events;
  /* The events before which the program began a step, by its own step markers (an XProf
   * trace's step events), in order; mode learn takes them as hbm_profiler_step_begin. */
  size_t *step_begins;
  size_t n_step_begins;
  size_t skipped;       /* malformed lines skipped with lenient = 1 */
  char first_skip[512]; /* the message of the first skipped line */
} hbm_alloc_log_t;

/* Reads an RMM CSV log (Thread,Time,Action,Pointer,Size,Stream). With lenient = 0 the first
 * bad line is an error "file:line: ..."; with lenient = 1 bad lines (malformed, unknown
 * pointer freed, duplicate live pointer) are skipped and counted. */
hbm_status_t hbm_alloc_log_read(const char *path, int lenient, hbm_alloc_log_t *out);
hbm_status_t hbm_alloc_log_parse(const char *data, size_t len, const char *name, int lenient,
                                 hbm_alloc_log_t *out);
void hbm_alloc_log_free(hbm_alloc_log_t *log);
/* The log as a runtime profile (one step per event). */
hbm_profile_t *hbm_alloc_log_to_profile(const hbm_alloc_log_t *log, const char *name);

/* Replays a log through libhbm on a private simulated device (its own HBM_SIM_NAME, never
 * shared with other processes; the allocator never touches device memory, so a replay
 * writes nothing there). The device has `memory` bytes and the allocator may use all of
 * them (XLA_PYTHON_CLIENT_MEM_FRACTION=1). 'allocate failure' lines of the log are counted,
 * not replayed. */
typedef struct hbm_replay_options {
  hbm_mode_t mode; /* default HBM_MODE_BFC */
  uint64_t memory; /* device memory; 0: 16 GiB, or twice the peak live bytes rounded up to
                      a GiB when that is more */
  int min_memory;  /* also search the smallest memory (1 MiB resolution) the log runs on */
  int repeat;      /* timed replays after the first (warm-up) one; 0: 5, < 0: none */
  /* Called now and then with a phase ("replay", "timing", "min-memory") and the fraction
   * of the whole work done, in [0, 1]; may be NULL. */
  void (*progress)(void *ctx, const char *phase, double done);
  void *progress_ctx;
} hbm_replay_options_t;

typedef struct hbm_replay_result {
  hbm_mode_t mode;
  uint64_t events;              /* allocate and free events replayed */
  uint64_t allocations;         /* of which allocations */
  uint64_t failure_records;     /* 'allocate failure' lines in the log (not replayed) */
  uint64_t skipped_lines;       /* bad lines the reader skipped (lenient) */
  uint64_t memory_bytes;        /* the device memory of the replay */
  uint64_t peak_live_bytes;     /* the log's peak (hbm_analyze, as `hbm report` says) */
  uint64_t peak_reserved_bytes; /* the allocator's peak reserved (expandable: mapped) */
  uint64_t min_memory_bytes;    /* 0 when not searched (or when no memory up to 1024 TiB runs
                                   the log) */
  uint64_t failed_allocations;  /* allocations that failed in the first replay */
  int64_t first_failure_event;  /* index among the log's events, -1 when none failed */
  int64_t first_failure_line;   /* its line in the log */
  uint64_t first_failure_size;
  char *first_failure_message; /* the allocator's diagnosis (malloc'd), NULL when none */
  int timed_replays;           /* replays behind ns_per_op */
  double ns_per_op;            /* median over the timed replays of time / events; 0 if none */
  double ns_per_op_min, ns_per_op_max;
  /* Virtual-memory calls per operation in the timed replays, counted as CUDA driver calls
   * (cuMemCreate, cuMemMap + cuMemSetAccess, cuMemUnmap, cuMemRelease): expandable mode's
   * cost; 0 in the other modes. */
  double vm_calls_per_op;
  double vm_calls_per_op_first;     /* the same in the first replay, from an empty device */
  uint64_t peak_reserved_all_bytes; /* peak reserved over the first and the timed replays */
  /* Mode learn, in the first replay: the step found and how much the plan served. */
  uint64_t step_operations;        /* operations per step (0: no step found) */
  int64_t first_step_end_event;    /* the event where the second step began (-1: none) */
  uint64_t steady_reserved_bytes;  /* the most reserved at any point from there on */
  uint64_t steady_peak_live_bytes; /* the most bytes live from there on */
  /* The same over the first planned step (from the second step's beginning to the end of the
   * plan's first step: blocks of the step before are still live), and over the later steps
   * (0 when the log ends before) */
  uint64_t first_planned_reserved_bytes, first_planned_peak_live_bytes;
  uint64_t later_reserved_bytes, later_peak_live_bytes;
  /* The least the first planned step can reserve whatever the plan does: whole granules
   * around the blocks of the step before, where they lie (0: not known) */
  uint64_t first_planned_floor_bytes;
  double planned_fraction; /* of the operations from there on, served from the plan */
  uint64_t planned_operations, fallback_operations; /* from there on */
  uint64_t plan_bytes;                              /* memory the last plan holds for the step */
  uint64_t plan_bound_bytes;                        /* the most bytes its step had live at once */
  uint64_t plans, plans_retired; /* plans made, and given up (step changed, memory short) */
  double solve_ms;               /* time spent solving placements */
  double planned_fraction_timed; /* of the timed replays' operations, served from the plan */
} hbm_replay_result_t;

void hbm_replay_options_default(hbm_replay_options_t *opt);
/* Replays log per opt (NULL: defaults). Fills *out (free it with hbm_replay_result_free);
 * failed allocations are results, not errors: errors are bad options and host trouble. */
hbm_status_t hbm_replay_run(const hbm_alloc_log_t *log, const hbm_replay_options_t *opt,
                            hbm_replay_result_t *out);
void hbm_replay_result_free(hbm_replay_result_t *r);
/* The smallest device memory (a multiple of 1 MiB) on which the log runs in `mode` without
 * one failed allocation; found by bisection above the log's peak. *out = 0 when even
 * 1024 TiB does not do. */
hbm_status_t hbm_replay_min_memory(const hbm_alloc_log_t *log, hbm_mode_t mode, uint64_t *out);

/* ------------------------------------------------------------------------------------------ */
/* The compile-time planner for XLA HLO                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct hbm_plan hbm_plan_t;

typedef struct hbm_plan_options {
  uint64_t memory;    /* device memory for the fit check (0 = none) */
  uint64_t reserved;  /* bytes reserved by the runtime (XLA's "reserved"), default 0 */
  int remat;          /* rematerialize to fit `memory` */
  int space_color;    /* memory colour to plan (0 = HBM) */
  uint64_t alignment; /* heap offsets are multiples of this (0 = 1) */
  int top;            /* buffers listed in reports (0 = 10) */
  int backend;        /* HBM_PLAN_BACKEND_*: whose buffer assignment to reproduce */
  int values;         /* the JSON report lists every value's placement ("values") */
} hbm_plan_options_t;

/* The backend decides the heap alignment (XLA GPU 128 bytes, CPU 64) and how reducers'
 * values are counted. AUTO reads it from the file name (`*.sm_8.0_gpu_after_...`,
 * `*.cpu_after_...`) and the module (GPU scheduling names and library calls, CPU partition
 * configs, TPU tiled layouts); unknown modules get alignment 1. */
enum {
  HBM_PLAN_BACKEND_AUTO = 0,
  HBM_PLAN_BACKEND_GPU = 1,
  HBM_PLAN_BACKEND_CPU = 2,
  HBM_PLAN_BACKEND_TPU = 3,
  HBM_PLAN_BACKEND_NONE = 4 /* none: alignment 1, as before backends were told apart */
};

typedef struct hbm_plan_summary {
  uint64_t argument_bytes;      /* compiled.memory_analysis().argument_size_in_bytes */
  uint64_t output_bytes;        /* output_size_in_bytes */
  uint64_t alias_bytes;         /* output bytes shared with arguments */
  uint64_t temp_bytes;          /* temp_size_in_bytes (heap size with fragmentation) */
  uint64_t temp_unpadded_bytes; /* unpadded bytes of the temporaries live at the peak */
  uint64_t peak_bytes;          /* arguments + outputs not aliased + constants + temp peak */
  int64_t peak_step;
  const char *peak_instruction;
  uint64_t fragmentation_bytes; /* temp_bytes - the temporaries live at the peak */
  size_t n_instructions;
  size_t n_buffers;
  int fits; /* 1 if reserved + arguments + outputs + constants + temp_bytes
               <= memory, or memory == 0 */
  /* remat */
  uint64_t peak_before_remat;
  size_t n_remat;             /* instructions rematerialized */
  uint64_t remat_extra_flops; /* estimated extra work: element-wise operations */
  uint64_t remat_extra_bytes; /* and bytes read and written by the recomputations */
} hbm_plan_summary_t;

/* One rematerialized instruction: `clone` recomputes `instruction` (same opcode, same
 * operands) right before its first use after the peak. */
typedef struct hbm_remat_info {
  const char *instruction;
  const char *clone;
  uint64_t bytes; /* the buffer no longer live across the peak */
  uint64_t flops; /* estimated element-wise operations of one recomputation */
} hbm_remat_info_t;

/* Parses HLO text (or an XLA dump: buffer assignment / memory usage report) and plans it.
 * Parse errors: HBM_ERR_PARSE, "file:line:column: expected ...". A plan that does not fit
 * opt->memory is still returned (summary.fits == 0). */
hbm_plan_t *hbm_plan_file(const char *path, const hbm_plan_options_t *opt);
hbm_plan_t *hbm_plan_text(const char *text, size_t len, const char *name,
                          const hbm_plan_options_t *opt);
void hbm_plan_free(hbm_plan_t *plan);
const hbm_plan_summary_t *hbm_plan_get_summary(const hbm_plan_t *plan);
/* The plan as a profile (kind HBM_PROFILE_PLAN); owned by the plan. */
const hbm_profile_t *hbm_plan_profile(const hbm_plan_t *plan);
/* Takes the profile out of the plan (the caller frees it); NULL if already taken. */
hbm_profile_t *hbm_plan_take_profile(hbm_plan_t *plan);
/* Why this plan may differ from XLA's by construction (HLO before optimizations, not
 * partitioned, ...): NUL-terminated sentences owned by the plan; n = 0 when none. */
const char *const *hbm_plan_warnings(const hbm_plan_t *plan, size_t *n);
/* Rematerialized instructions (n = 0 when none). */
const hbm_remat_info_t *hbm_plan_remats(const hbm_plan_t *plan, size_t *n);
/* The module as HLO text including the rematerialized instructions (malloc'd; NULL for
 * plans read from XLA dumps). */
char *hbm_plan_module_text(const hbm_plan_t *plan);
/* XLA's E1000-style report (and, when it does not fit, the RESOURCE_EXHAUSTED line first)
 * followed by hbm's diagnosis. */
hbm_status_t hbm_plan_report_text(const hbm_plan_t *plan, FILE *out);
/* JSON: argument_bytes, output_bytes, alias_bytes, temp_bytes, peak_bytes,
 * peak_instruction, buffers_at_peak[{size, unpadded_size, op, shape, category, opcode,
 * label, ...}], remat, fits, ... */
hbm_status_t hbm_plan_report_json(const hbm_plan_t *plan, FILE *out);

/* ---- What is the largest size that fits (`hbm plan --fit`, hbm.fit in Python; fit.c) ---- */
/* A module family where one dimension varies (a batch size, a sequence length): `plan` makes
 * the plan of the member for `value` with the options it is given (their memory is the one to
 * fit), or returns NULL with hbm_last_error() set. hbm_fit finds the largest value that fits
 * by planning: from the smallest value, doubling while the plan fits (exponential search for
 * an upper bound), then bisection, on the assumption that memory grows with the value. */
typedef hbm_plan_t *(*hbm_fit_plan_fn)(int64_t value, const hbm_plan_options_t *opt, void *ctx);

typedef struct hbm_fit_options {
  hbm_plan_options_t plan; /* plan.memory: the memory to fit (required) */
  int64_t lo;              /* the smallest value (default 1) */
  int64_t hi;              /* the largest value tried (0: 2^40) */
  int64_t multiple;        /* values are multiples of this (default 1) */
  /* Or the values themselves (sorted ascending; a family of files): searched by index. */
  const int64_t *values;
  size_t n_values;
} hbm_fit_options_t;

typedef struct hbm_fit_try {
  int64_t value;
  uint64_t used_bytes; /* what the device must hold for the plan */
  int fits;
} hbm_fit_try_t;

typedef struct hbm_fit_result {
  uint64_t memory;
  int found;             /* 1 when some value fits */
  int64_t value;         /* the largest value that fits (found) */
  int has_next;          /* 1 when a value past it was planned and does not fit */
  int64_t next;          /* the next value, which does not fit (the smallest, when !found) */
  hbm_plan_t *plan;      /* the plan at value (NULL when !found) */
  hbm_plan_t *next_plan; /* the plan at next: what is at the peak when it stops fitting */
  hbm_fit_try_t *tried;  /* every plan made, in order */
  size_t n_tried;
} hbm_fit_result_t;

/* Fails only when a plan cannot be made (the callback's error) or on bad options; a family
 * whose smallest value does not fit is a result (found = 0, next_plan its plan). */
hbm_status_t hbm_fit(hbm_fit_plan_fn plan, void *ctx, const hbm_fit_options_t *opt,
                     hbm_fit_result_t *out);
void hbm_fit_result_free(hbm_fit_result_t *r);
/* The answer, the plans tried, and the E1000 report of the next value (what is at its peak);
 * `dimension` names the value ("batch"; NULL: "value"). */
hbm_status_t hbm_fit_report_text(const hbm_fit_result_t *r, const char *dimension, FILE *out);
/* {memory_bytes, found, value, next, tried[{value, used_bytes, fits}], plan, next_plan}. */
hbm_status_t hbm_fit_report_json(const hbm_fit_result_t *r, FILE *out);

/* ------------------------------------------------------------------------------------------ */
/* Two profiles compared (`hbm diff`: src/profile/diff.c, window.c; src/import/select.c)      */
/* ------------------------------------------------------------------------------------------ */
/* The change of the peak from profile A to profile B, attributed to buffers: each buffer of A
 * is paired with "the same" buffer of B (same op, source, group and category; the k-th such
 * buffer of A with the k-th of B, those live at each peak first), and each pair or lone buffer
 * contributes its bytes at B's peak minus its bytes at A's peak. The rows of every table
 * (by buffer, op, source file:line, category, shape, group, reason) therefore add up to
 * B's peak minus A's peak exactly. Both peaks are the analysis's (hbm_analyze). */

typedef enum hbm_diff_reason {
  HBM_DIFF_NEW = 0,           /* at B's peak; A has no such buffer */
  HBM_DIFF_GONE = 1,          /* at A's peak; B has no such buffer */
  HBM_DIFF_GREW = 2,          /* at both peaks, larger in B */
  HBM_DIFF_SHRANK = 3,        /* at both peaks, smaller in B */
  HBM_DIFF_LIVED_LONGER = 4,  /* in both, live across B's peak but not across A's */
  HBM_DIFF_LIVED_SHORTER = 5, /* in both, live across A's peak but not across B's */
  /* A diff of the two peaks alone (hbm report's many-device summary: the buffers at each peak,
   * nothing else read) cannot tell "new" from "lived longer"; it says only this: */
  HBM_DIFF_ONLY_AT_B_PEAK = 6, /* at B's peak; nothing like it at A's peak */
  HBM_DIFF_ONLY_AT_A_PEAK = 7, /* at A's peak; nothing like it at B's peak */
  HBM_DIFF_REASON_COUNT
} hbm_diff_reason_t;

typedef enum hbm_diff_by {
  HBM_DIFF_BY_BUFFER = 0, /* one row per buffer (pair) */
  HBM_DIFF_BY_OP = 1,     /* op / instruction name */
  HBM_DIFF_BY_SOURCE = 2, /* source file:line */
  HBM_DIFF_BY_CATEGORY = 3,
  HBM_DIFF_BY_SHAPE = 4, /* "f32[128,64] -> f32[256,64]" when a pair's shapes differ */
  HBM_DIFF_BY_GROUP = 5, /* group (layer, calling library, ...) */
  HBM_DIFF_BY_REASON = 6,
  HBM_DIFF_BY_COUNT
} hbm_diff_by_t;

typedef struct hbm_diff_row {
  const char *key; /* what the row is about ("(none)" when the buffers have no such tag) */
  hbm_diff_reason_t reason;
  int64_t delta;             /* bytes at B's peak minus bytes at A's peak */
  uint64_t a_bytes, b_bytes; /* bytes of the row's buffers live at each peak */
  size_t a_count, b_count;   /* buffers of the row live at each peak */
  /* HBM_DIFF_BY_BUFFER only (-1 / 0 elsewhere): the buffers (profile indices, -1 none) and
   * their sizes whether or not live at the peak. */
  int64_t a_index, b_index;
  uint64_t a_size, b_size;
} hbm_diff_row_t;

typedef struct hbm_diff hbm_diff_t;

/* Compares the analysed spaces a (before) and b (after); the analyses and their profiles must
 * outlive the diff. Never fails on what the profiles hold: what cannot be compared (kinds,
 * reserved memory, padding, no common tags) is said in hbm_diff_notes. */
hbm_diff_t *hbm_diff_new(const hbm_analysis_t *a, const hbm_analysis_t *b);
void hbm_diff_free(hbm_diff_t *d);
/* side 0: A, 1: B. */
const hbm_summary_t *hbm_diff_summary(const hbm_diff_t *d, int side);
/* B's peak minus A's peak, in bytes. */
int64_t hbm_diff_change(const hbm_diff_t *d);
/* The rows of one table, largest change first (rows whose change is 0 are left out). */
const hbm_diff_row_t *hbm_diff_rows(const hbm_diff_t *d, hbm_diff_by_t by, size_t *n);
/* Buffers paired at both peaks with the same size: not in any row. */
size_t hbm_diff_unchanged(const hbm_diff_t *d, uint64_t *bytes);
/* Sentences on what cannot be compared; n = 0 when everything can. */
const char *const *hbm_diff_notes(const hbm_diff_t *d, size_t *n);
/* "new", "gone", "grew", "shrank", "lived_longer", "lived_shorter"; the table names "buffer",
 * "op", "source", "category", "shape", "group", "reason". */
const char *hbm_diff_reason_name(hbm_diff_reason_t r);
const char *hbm_diff_by_name(hbm_diff_by_t by);
/* The terminal text (top rows per table, 0: 15) and JSON (every row). labels name A and B in
 * the output (NULL: the profiles' names). */
hbm_status_t hbm_diff_text(const hbm_diff_t *d, const char *const labels[2], int top, FILE *out);
hbm_status_t hbm_diff_json(const hbm_diff_t *d, const char *const labels[2], FILE *out);

/* A profile as `hbm diff` names it: "PATH", "PATH#SPACE", "PATH@STEP", "PATH@FROM:TO",
 * "PATH#SPACE@STEP". SPACE: a memory space's index, its device (an XProf program such as
 * jit_step(10), a GPU such as cuda:1), its name (HBM) or a part of its device that names one
 * program only; default: the space with the highest peak (the one `hbm report` puts first).
 * STEP: the training step N between the profile's step markers (hbm_profiler_step_begin/end);
 * FROM:TO: the steps [FROM, TO). PATH is taken whole when a file of that name exists. */
typedef struct hbm_selection {
  hbm_profile_t *profile; /* owned: the file's profile, or the window of it asked for */
  int space;
  char what[512]; /* "jit_step(10) (HBM), training step 3 = steps 120-340" */
} hbm_selection_t;
hbm_status_t hbm_profile_select(const char *spec, hbm_selection_t *out);
void hbm_selection_free(hbm_selection_t *s);
/* Steps [from, to) of p as a profile of their own: buffers live in the window clipped to it,
 * reserved memory from before it carried in at its first step. */
hbm_profile_t *hbm_profile_window(const hbm_profile_t *p, int64_t from, int64_t to);

#ifdef __cplusplus
}
#endif
#endif /* HBM_H */
