/* pickle.h — a restricted reader for Python pickles (protocols 2 to 5) that builds plain data
 * only: None, booleans, integers (of any width), floats, strings, bytes (protocol 5's
 * out-of-band buffers stand in as bytes the file does not hold), lists, tuples, sets and dicts.
 * Any opcode that would name or call Python code (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST,
 * OBJ, NEWOBJ, PERSID, EXT*, ...) is refused with its name and byte offset; nothing in a
 * pickle is ever executed.
 *
 * Two ways to read one:
 *   - pk_stream: one pass over the bytes (first a quick scan for the memo entries the pickle
 *     refers to again), handing every container to a sink as it is built and completed. The
 *     reader itself keeps only its stack, the containers still open and the memo entries used
 *     later, in at most PK_MEMORY_PER_BYTE bytes per input byte (plus PK_MEMORY_BASE): a
 *     gigabyte PyTorch snapshot is read without ever holding its tree (torch_snapshot.c);
 *   - pk_parse: the whole tree, for small pickles and tests (a sink of pk_stream). */
#ifndef HBM_IMPORT_PICKLE_H
#define HBM_IMPORT_PICKLE_H

#include "base/base.h"

typedef enum pk_kind {
  PK_NONE = 0,
  PK_BOOL,
  PK_INT,
  PK_FLOAT,
  PK_STR,   /* text (str; Python 2 str too) */
  PK_BYTES, /* bytes, bytearray, out-of-band buffers */
  PK_LIST,  /* list, and sets (their order is the file's) */
  PK_TUPLE,
  PK_DICT, /* items hold key, value, key, value, ... */
  PK_OBJ   /* pk_ref_t only: a container its sink has completed (the sink's tag and handle) */
} pk_kind_t;

/* ---- streaming ---- */

#define PK_MEMORY_PER_BYTE 4              /* the reader's own memory per input byte, at most */
#define PK_MEMORY_BASE ((size_t)64 << 20) /* ... plus this */

/* Flags of a pk_ref_t. */
#define PK_UNSIGNED 1u    /* PK_INT in [2^63, 2^64): as.u holds it */
#define PK_HUGE 2u        /* PK_INT wider than 64 bits: no value */
#define PK_OUT_OF_BAND 4u /* PK_BYTES: a protocol 5 out-of-band buffer, not in the file */

/* One value as the reader passes it: 16 bytes, nothing allocated. Strings point into the
 * input (not NUL-terminated). Containers are PK_OBJ by the time a sink sees them. */
typedef struct pk_ref {
  uint8_t kind;  /* pk_kind_t */
  uint8_t flags; /* PK_UNSIGNED, PK_HUGE, PK_OUT_OF_BAND */
  uint16_t tag;  /* PK_OBJ: the sink's own kind */
  uint32_t n;    /* PK_STR, PK_BYTES: length; open containers: the reader's slot */
  union {
    bool b;
    int64_t i;
    uint64_t u;
    double f;
    const uint8_t *s;
    uint64_t obj; /* PK_OBJ: the sink's handle */
  } as;
} pk_ref_t;

#define PK_CLOSE_AGAIN 1u
#define PK_CLOSE_PARTIAL 2u

/* What a stream does with its containers. Each callback returns false with hbm_last_error()
 * set to stop the reading (out of memory, or a sink's own refusal). */
typedef struct pk_sink {
  void *ctx;
  /* A container (PK_LIST, PK_TUPLE, PK_DICT) is made; *state (0 at first) is the sink's. */
  bool (*open)(void *ctx, pk_kind_t kind, uint64_t *state);
  /* Items go into it, in the file's order: values (lists, tuples), or key, value pairs
   * (dicts; n is even). Containers among them are already completed (PK_OBJ). */
  bool (*add)(void *ctx, pk_kind_t kind, uint64_t *state, const pk_ref_t *items, size_t n);
  /* It is complete (used inside another container, or the pickle's result): *out is what it
   * stands for from now on. flags: PK_CLOSE_AGAIN (the pickle may use it again: memo, DUP),
   * PK_CLOSE_PARTIAL (a damaged pickle ended while items were still going into it). */
  bool (*close)(void *ctx, pk_kind_t kind, uint64_t state, unsigned flags, pk_ref_t *out);
  /* It was dropped without being completed (POP, or the reading failed). */
  void (*discard)(void *ctx, pk_kind_t kind, uint64_t state);
} pk_sink_t;

/* Where a damaged or truncated pickle stopped being read (salvage). */
typedef struct pk_damage {
  bool damaged;
  bool truncated; /* the input ended before the pickle did (a file cut short) */
  size_t at;      /* byte where reading stopped */
  size_t used;    /* bytes up to the last value completed inside a list or dict */
  char why[320];  /* "the file ends without STOP (truncated?)", the opcode's error, ... */
} pk_damage_t;

typedef struct pk_stream_options {
  size_t max_memory; /* the reader's own memory (0: PK_MEMORY_BASE + PK_MEMORY_PER_BYTE × len) */
  /* Read a damaged or truncated pickle up to the damage, close what was open and report it
   * in *damage, instead of failing. Code opcodes are refused all the same. */
  bool salvage;
  /* Called every `progress_bytes` of input with the offset reached (may be NULL): a reader
   * over a mapped file drops the pages behind it. */
  void (*progress)(void *ctx, size_t offset);
  void *progress_ctx;
  size_t progress_bytes;
  /* Gives back the pages of [from, to) (may be NULL; called with progress_ctx, from another
   * thread than progress, at the same time: a big file's second half is scanned on a thread
   * of its own). */
  void (*drop)(void *ctx, size_t from, size_t to);
  /* A framed pickle this big or more is scanned in two halves at once, the second on a thread
   * of its own (0: 64 MiB; SIZE_MAX: never). The result is the same either way. */
  size_t split_min;
  /* A pickle this big or more has its sink run on a thread of its own while the machine runs
   * (pickle_thread.c; 0: never). The sink gets the same calls in the same order either way. */
  size_t sink_thread_min;
  bool sink_thread_if_idle; /* ... and only when a CPU is idle as the scan ends (hbm__cpu_idle) */
  /* With the sink on its thread: called there after each progress of the machine's run, with
   * the same offset (may be NULL): a reader over a mapped file maps the pages the machine
   * reads next, so the machine takes no page faults. */
  void (*ahead)(void *ctx, size_t offset);
} pk_stream_options_t;

/* Reads one pickle from data[0, len) into sink; `name` is used in messages ("name: byte N:
 * ..."). *root gets the pickle's result (completed). HBM_ERR_PARSE when the bytes are not a
 * pickle of plain data (or, without salvage, are damaged). */
hbm_status_t pk_stream(const uint8_t *data, size_t len, const char *name, const pk_sink_t *sink,
                       const pk_stream_options_t *options, pk_ref_t *root, pk_damage_t *damage);

/* Readers of refs: pk_ref_int: an integer (or boolean) that fits int64; pk_ref_u64: one that
 * fits uint64 and is not negative. Inline: a snapshot's sink reads millions of them. */
static inline bool pk_ref_int(const pk_ref_t *r, int64_t *out) {
  if (r->kind == PK_BOOL) {
    *out = r->as.b;
    return true;
  }
  if (r->kind != PK_INT || (r->flags & (PK_HUGE | PK_UNSIGNED)))
    return false;
  *out = r->as.i;
  return true;
}

static inline bool pk_ref_u64(const pk_ref_t *r, uint64_t *out) {
  if (r->kind == PK_INT && (r->flags & PK_UNSIGNED)) {
    *out = r->as.u;
    return true;
  }
  int64_t v;
  if (!pk_ref_int(r, &v) || v < 0)
    return false;
  *out = (uint64_t)v;
  return true;
}

/* Whether a PK_STR ref holds exactly `text`. */
bool pk_ref_is(const pk_ref_t *r, const char *text, size_t len);

/* ---- the whole tree ---- */

typedef struct pk_value pk_value_t;
struct pk_value {
  pk_kind_t kind;
  bool int_overflow; /* PK_INT whose value does not fit in int64 (i is then 0) */
  union {
    bool b;
    int64_t i;
    double f;
    struct {
      const char *s; /* NUL-terminated, n bytes (may hold NULs) */
      size_t n;
    } str;
    struct {
      pk_value_t **items;
      size_t n, cap;
    } seq;
  } as;
};

typedef struct pk_doc pk_doc_t; /* owns every value it built */

/* Limits against hostile input; zeros take the defaults. */
typedef struct pk_limits {
  size_t max_bytes;  /* input size (default 2 GiB) */
  size_t max_memory; /* the tree's memory (default: 64 MiB + 64 bytes per input byte) */
} pk_limits_t;

/* Reads one pickle from data[0, len) as a tree. NULL with hbm_last_error() set when the input
 * is not a pickle of plain data. Every value built counts, memo references too. */
pk_doc_t *pk_parse(const uint8_t *data, size_t len, const char *name, const pk_limits_t *limits);
void pk_free(pk_doc_t *doc);
/* The object the pickle stands for. */
const pk_value_t *pk_root(const pk_doc_t *doc);

/* True for bytes that start like a pickle of protocol 2 to 5 (0x80, then the protocol). */
bool pk_looks_like_pickle(const uint8_t *data, size_t len);

/* Readers: NULL / false when absent or of another kind. */
/* The value of a string key in a dict (the last one when repeated). */
const pk_value_t *pk_get(const pk_value_t *dict, const char *key);
bool pk_int(const pk_value_t *v, int64_t *out); /* ints (not overflowed), booleans */
const char *pk_str(const pk_value_t *v);        /* PK_STR text */
/* Items of a list or tuple (*n = 0 and NULL otherwise). */
pk_value_t *const *pk_items(const pk_value_t *v, size_t *n);

#endif /* HBM_IMPORT_PICKLE_H */
