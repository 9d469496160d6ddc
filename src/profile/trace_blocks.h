/* trace_blocks.h — an .hbmtrace file's blocks checked and decompressed in file order, ahead of
 * the reader on a second thread when the file is big (trace_blocks.c). */
#ifndef HBM_PROFILE_TRACE_BLOCKS_H
#define HBM_PROFILE_TRACE_BLOCKS_H

#include "base/base.h"

typedef struct hbm__trace_blocks hbm__trace_blocks_t;

typedef struct hbm__trace_block {
  const uint8_t *raw; /* the decompressed records, valid until the next call */
  size_t len;
  size_t offset; /* of the block's header in the file (of the damage, when it failed) */
  size_t next;   /* of the block after it */
} hbm__trace_block_t;

/* Files with at least this many bytes of blocks are unpacked on a thread ahead of the reader
 * (tests set it to 0 to read small files that way too). */
extern size_t hbm__trace_ahead_min;

/* The blocks of data[offset, len), at most max_raw bytes decompressed in all. NULL when out of
 * memory. */
hbm__trace_blocks_t *hbm__trace_blocks_open(const uint8_t *data, size_t len, size_t offset,
                                            uint64_t max_raw);
/* The next block: 1 (in *b), 0 at the end, -1 when it is damaged, cut short or past max_raw
 * (why says what; b->offset where), -2 out of memory. After anything but 1, the same again. */
int hbm__trace_blocks_next(hbm__trace_blocks_t *u, hbm__trace_block_t *b, char *why,
                           size_t why_cap);
void hbm__trace_blocks_close(hbm__trace_blocks_t *u);

#endif /* HBM_PROFILE_TRACE_BLOCKS_H */
