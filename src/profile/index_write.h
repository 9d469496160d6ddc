/* index_write.h — the pieces of a profile index as index_write.c assembles them, for the two
 * ways of making one: from a profile held whole (index_write.c, hbm__index_write) and from a
 * profile read in one pass (index_stream.c). Both fill an hbm__index_parts_t and call
 * hbm__index_assemble, so an index is the same bytes whichever way it was made. */
#ifndef HBM_PROFILE_INDEX_WRITE_H
#define HBM_PROFILE_INDEX_WRITE_H

#include "profile/index.h"

#include <zstd.h>

/* Bytes being written. */
typedef struct hbm__index_out {
  uint8_t *d;
  size_t n, cap;
  bool failed;
} hbm__index_out_t;

void hbm__index_put(hbm__index_out_t *o, const void *p, size_t n);

/* Strings numbered as first met (1, 2, ...; 0: none); interned strings, so by pointer. */
typedef struct hbm__index_strings {
  hbm_u64map_t ids; /* string pointer → id */
  const char **list;
  size_t n, cap;
  bool failed;
} hbm__index_strings_t;

uint64_t hbm__index_string_id(hbm__index_strings_t *s, const char *text);
void hbm__index_strings_free(hbm__index_strings_t *s);

/* A column of per-step values in zstd blocks of HBM_INDEX_BLOCK_STEPS steps. */
typedef struct hbm__index_column {
  hbm__index_out_t data; /* the compressed blocks, one after another */
  uint32_t *lens;        /* per block: compressed length, raw length */
  size_t n_blocks, cap_blocks;
} hbm__index_column_t;

/* Compresses raw (then emptied) as the column's next block; false when out of memory. */
bool hbm__index_column_add(hbm__index_column_t *c, ZSTD_CCtx *zc, hbm__index_out_t *raw);
void hbm__index_column_free(hbm__index_column_t *c);

/* A block of a space's live bytes (and unpadded, unless NULL: the same), n steps. */
void hbm__index_live_block(hbm__index_out_t *raw, const uint64_t *live, const uint64_t *unpadded,
                           size_t n);

/* What a step is about (runtime): the op of the buffer it allocated or freed. */
typedef struct hbm__index_step_op {
  const char *op;
  uint8_t event; /* 0: no buffer, 1: allocated, 2: freed */
} hbm__index_step_op_t;

/* A block of n steps: times, labels, ops; strings numbered in `strings` as met. */
void hbm__index_step_block(hbm__index_out_t *raw, hbm__index_strings_t *strings,
                           const int64_t *time, const char *const *label,
                           const hbm__index_step_op_t *op, size_t n);

/* A space's part of the index. */
typedef struct hbm__index_space {
  const hbm_analysis_t *a;                /* summary, buffers at the peak, groups */
  const hbm__reserved_change_t *reserved; /* NULL: none recorded */
  size_t n_reserved;
  bool padded;                /* its unpadded bytes are a column of their own */
  const uint64_t *level0_max; /* the most live bytes in each block of HBM_INDEX_LEVEL0 steps */
  const int64_t *level0_at;   /* the first step reaching it */
  const hbm__index_column_t *live;
} hbm__index_space_t;

typedef struct hbm__index_parts {
  const hbm_profile_t *p;      /* metadata, spaces, OOM events, markers, step and buffer counts */
  hbm__buffer_lookup_t lookup; /* the buffers at the peaks, by profile index */
  const void *lookup_ctx;
  const hbm__index_space_t *spaces;
  const hbm__index_column_t *steps;
  hbm__index_strings_t *strings; /* the steps' strings numbered already: the others follow */
} hbm__index_parts_t;

/* The index (header and body) for a profile file of this stat, in an anonymous mapping of *len
 * bytes (munmap it, or give it to hbm__index_parse); NULL when out of memory. */
uint8_t *hbm__index_assemble(const hbm__index_parts_t *parts, const struct stat *st, size_t *len);

#endif /* HBM_PROFILE_INDEX_WRITE_H */
