/* pickle.h — a restricted reader for Python pickles (protocols 2 to 5) that builds plain data
 * only: None, booleans, integers, floats, strings, bytes, lists, tuples, sets and dicts. Any
 * opcode that would name or call Python code (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ,
 * NEWOBJ, PERSID, EXT*, ...) is refused with its name and byte offset; nothing in a pickle is
 * ever executed. Used for PyTorch memory snapshots (torch_snapshot.c). */
#ifndef HBM_IMPORT_PICKLE_H
#define HBM_IMPORT_PICKLE_H

#include "base/base.h"

typedef enum pk_kind {
  PK_NONE = 0,
  PK_BOOL,
  PK_INT,
  PK_FLOAT,
  PK_STR,   /* text (str; Python 2 str too) */
  PK_BYTES, /* bytes, bytearray */
  PK_LIST,  /* list, and sets (their order is the file's) */
  PK_TUPLE,
  PK_DICT /* items hold key, value, key, value, ... */
} pk_kind_t;

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
  size_t max_bytes;   /* input size (default 2 GiB) */
  size_t max_objects; /* values built (default: 64 Mi) */
} pk_limits_t;

/* Reads one pickle from data[0, len); `name` is used in messages ("name: byte N: ...").
 * Returns NULL with hbm_last_error() set when the input is not a pickle of plain data. */
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
