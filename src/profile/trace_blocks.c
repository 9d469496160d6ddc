/* trace_blocks.c — an .hbmtrace file's blocks, each checked (header, checksum, size caps) and
 * decompressed for the reader (trace_read.c), in file order. For a big file this runs one
 * block ahead of the reader on a thread of its own, so that decompressing (a fifth of reading
 * a 10^8-event capture) overlaps reading the records; every message, every offset and what a
 * damaged file keeps are the same either way: the reader stops at the first block that fails,
 * whatever the thread found beyond it. */
#include "profile/trace_blocks.h"

#include "profile/trace_format.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

size_t hbm__trace_ahead_min = (size_t)8 << 20;

#define SLOTS 3 /* the block being read, and up to two decompressed ahead of it */

typedef struct slot {
  uint8_t *raw;
  size_t cap;
  hbm__trace_block_t block;
  int status; /* 1 a block, 0 the end, -1 damage (why), -2 out of memory */
  char why[640];
} slot_t;

struct hbm__trace_blocks {
  const uint8_t *data;
  size_t len, offset; /* the next block to unpack */
  uint64_t block;     /* blocks unpacked (the next one's number - 1) */
  uint64_t raw_total; /* bytes they decompressed to */
  uint64_t max_raw;
  slot_t slot[SLOTS];
  bool ahead, stop;            /* ahead: the thread runs (it started) */
  uint64_t produced, consumed; /* slots filled, slots the reader is done with */
  bool holding;                /* the reader holds slot[consumed % SLOTS] */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t changed;
};

/* Checks and decompresses the block at u->offset into s; advances u past it when it is good. */
static int unpack_one(hbm__trace_blocks_t *u, slot_t *s) {
  s->why[0] = '\0';
  s->block.offset = u->offset;
  if (u->offset >= u->len)
    return s->status = 0;
  const uint8_t *h = u->data + u->offset;
  size_t left = u->len - u->offset;
  unsigned long long number = (unsigned long long)u->block + 1;
  uint32_t clen = left >= HBM_TRACE_BLOCK_HEAD ? hbm__get_le32(h + 4) : 0;
  uint32_t rlen = left >= HBM_TRACE_BLOCK_HEAD ? hbm__get_le32(h + 8) : 0;
  if (left < HBM_TRACE_BLOCK_HEAD)
    snprintf(s->why, sizeof s->why, "file truncated");
  else if (memcmp(h, HBM_TRACE_BLOCK_MAGIC, 4) != 0 || rlen > HBM_TRACE_BLOCK_RAW_MAX ||
           clen > ZSTD_compressBound(HBM_TRACE_BLOCK_RAW_MAX))
    snprintf(s->why, sizeof s->why, "block %llu is damaged: bad block header", number);
  else if (clen > left - HBM_TRACE_BLOCK_HEAD)
    snprintf(s->why, sizeof s->why, "file truncated");
  else if (hbm__crc32(0, h + HBM_TRACE_BLOCK_HEAD, clen) != hbm__get_le32(h + 12))
    snprintf(s->why, sizeof s->why, "block %llu is damaged: checksum mismatch", number);
  else if (u->raw_total + rlen > u->max_raw)
    snprintf(s->why, sizeof s->why,
             "the file decompresses to more than %llu bytes: not read further",
             (unsigned long long)u->max_raw);
  if (s->why[0])
    return s->status = -1;
  size_t need = rlen ? rlen : 1;
  if (need > s->cap) {
    uint8_t *grown = realloc(s->raw, need);
    if (!grown)
      return s->status = -2;
    s->raw = grown;
    s->cap = need;
  }
  size_t got = ZSTD_decompress(s->raw, rlen, h + HBM_TRACE_BLOCK_HEAD, clen);
  if (ZSTD_isError(got) || got != rlen) {
    snprintf(s->why, sizeof s->why, "block %llu is damaged: %s", number,
             ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong decompressed size");
    return s->status = -1;
  }
  s->block.raw = s->raw;
  s->block.len = rlen;
  s->block.next = u->offset + HBM_TRACE_BLOCK_HEAD + clen;
  u->offset = s->block.next;
  u->block++;
  u->raw_total += rlen;
  return s->status = 1;
}

/* The thread ahead: fills free slots in order until the end or a block that fails. */
static void *unpack_main(void *arg) {
  hbm__trace_blocks_t *u = arg;
  pthread_mutex_lock(&u->mu);
  for (;;) {
    while (!u->stop && u->produced - u->consumed >= SLOTS)
      pthread_cond_wait(&u->changed, &u->mu);
    if (u->stop)
      break;
    slot_t *s = &u->slot[u->produced % SLOTS];
    pthread_mutex_unlock(&u->mu); /* the slot is the thread's until it is counted produced */
    int status = unpack_one(u, s);
    pthread_mutex_lock(&u->mu);
    u->produced++;
    pthread_cond_broadcast(&u->changed);
    if (status != 1)
      break;
  }
  pthread_mutex_unlock(&u->mu);
  return NULL;
}

hbm__trace_blocks_t *hbm__trace_blocks_open(const uint8_t *data, size_t len, size_t offset,
                                            uint64_t max_raw) {
  hbm__trace_blocks_t *u = calloc(1, sizeof *u);
  if (!u)
    return NULL;
  *u = (hbm__trace_blocks_t){.data = data, .len = len, .offset = offset, .max_raw = max_raw};
  u->ahead = len > offset && len - offset >= hbm__trace_ahead_min;
  if (u->ahead && pthread_mutex_init(&u->mu, NULL) != 0)
    u->ahead = false;
  if (u->ahead && pthread_cond_init(&u->changed, NULL) != 0) {
    pthread_mutex_destroy(&u->mu);
    u->ahead = false;
  }
  if (u->ahead && pthread_create(&u->thread, NULL, unpack_main, u) != 0) {
    pthread_cond_destroy(&u->changed);
    pthread_mutex_destroy(&u->mu);
    u->ahead = false; /* no thread: the reader unpacks its blocks itself */
  }
  return u;
}

/* The next block from the thread ahead; the one handed out before goes back to it. */
static const slot_t *next_ahead(hbm__trace_blocks_t *u) {
  pthread_mutex_lock(&u->mu);
  if (u->holding && u->slot[u->consumed % SLOTS].status != 1) { /* the last: asked again */
    pthread_mutex_unlock(&u->mu);
    return &u->slot[u->consumed % SLOTS];
  }
  if (u->holding) {
    u->consumed++;
    u->holding = false;
    pthread_cond_broadcast(&u->changed);
  }
  while (u->produced == u->consumed)
    pthread_cond_wait(&u->changed, &u->mu);
  u->holding = true;
  const slot_t *s = &u->slot[u->consumed % SLOTS];
  pthread_mutex_unlock(&u->mu);
  return s;
}

int hbm__trace_blocks_next(hbm__trace_blocks_t *u, hbm__trace_block_t *b, char *why,
                           size_t why_cap) {
  const slot_t *s = u->ahead ? next_ahead(u) : &u->slot[0];
  if (!u->ahead)
    unpack_one(u, &u->slot[0]);
  *b = s->block;
  if (s->status == -1)
    snprintf(why, why_cap, "%s", s->why);
  return s->status;
}

void hbm__trace_blocks_close(hbm__trace_blocks_t *u) {
  if (!u)
    return;
  if (u->ahead) {
    pthread_mutex_lock(&u->mu);
    u->stop = true;
    pthread_cond_broadcast(&u->changed);
    pthread_mutex_unlock(&u->mu);
    pthread_join(u->thread, NULL);
    pthread_cond_destroy(&u->changed);
    pthread_mutex_destroy(&u->mu);
  }
  for (int i = 0; i < SLOTS; i++)
    free(u->slot[i].raw);
  free(u);
}
