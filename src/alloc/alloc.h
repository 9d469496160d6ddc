/* alloc.h — internal header of the allocator layer (src/alloc).
 *
 * How the layer fits together:
 *   options.c      the environment variables, in one table → hbm_config_t
 *   device/        physical memory of one accelerator (device/device.h): sim or CUDA
 *   arena.c        the best-fit-with-coalescing arena (TLSF: segregated free lists with
 *                  bitmaps) shared by the bfc, growth, async and expandable strategies
 *   bfc.c          the "bfc" (preallocated) and "growth" strategies
 *   platform.c     the "platform" strategy: exact sizes from the device, returned at once
 *   async_pool.c   the "async" strategy: a stream-ordered growing pool
 *   expandable.c   the "expandable" strategy (virtual range + physical granules)
 *   front.c        hbm_open/hbm_alloc/...: picks device and strategy, locking, live blocks,
 *                  statistics, tags, profiler hooks
 *   tags.c         hbm_alloc_tagged and the per-thread annotation stack
 *   oom.c          the RESOURCE_EXHAUSTED text and its diagnosis
 *
 * A strategy is an object with the operations below; the front calls them under the
 * device's lock, so a strategy needs no lock of its own (one that wants finer locking may
 * take one: the front never calls two operations of one strategy at once today). Metadata
 * lives on the host: no strategy reads or writes device memory. */
#ifndef HBM_ALLOC_H
#define HBM_ALLOC_H

#include "alloc/device/device.h"
#include "alloc/lock.h"
#include "base/base.h"
#include "hbm.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* Every block is at least this large and its size a multiple of it (as XLA's BFC). */
#define HBM__MIN_BLOCK 256u
/* Requests of this size or more are placed at the high end of the free chunk chosen for
 * them, smaller ones at its low end (arena.c says why). */
#define HBM__PLACE_HIGH (4ull << 20)

static inline uint64_t hbm__round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }
/* x rounded up to a multiple of `to`, or UINT64_MAX when that overflows. */
static inline uint64_t hbm__round_up_sat(uint64_t x, uint64_t to) {
  return x > UINT64_MAX - to ? UINT64_MAX : hbm__round_up(x, to);
}

/* ---- options.c ---- */

/* The limit of a configuration on a device of `total` bytes: mem_fraction × total, rounded
 * down to 256 bytes. */
uint64_t hbm__config_limit(const hbm_config_t *cfg, uint64_t total);
/* Marks fields whose value differs from the default but whose origin says "default" as
 * set from code (a caller that filled the struct without touching origin[]). */
void hbm__config_mark_code_origins(hbm_config_t *cfg);

/* ---- strategies ---- */

/* A block handed out by a strategy. `handle` is the strategy's own (an arena chunk index,
 * an alignment offset, ...), given back on free. */
typedef struct hbm__block {
  uint64_t addr;
  uint64_t allocated; /* bytes the block occupies */
  uint64_t handle;
} hbm__block_t;

/* Why a strategy could not serve an allocation (for oom.c). */
typedef enum hbm__failure_kind {
  HBM__FAIL_NONE = 0,
  HBM__FAIL_LIMIT,    /* serving it would take more than the limit allows */
  HBM__FAIL_DEVICE,   /* the device refused a region / physical memory within the limit */
  HBM__FAIL_PREALLOC, /* the preallocation (bfc, async prealloc) could not be made */
  HBM__FAIL_HOST      /* host memory for metadata ran out: not an OOM of the device */
} hbm__failure_kind_t;

typedef struct hbm__failure {
  hbm__failure_kind_t kind;
  uint64_t device_request;    /* bytes asked of the device when it refused */
  uint64_t pending_elsewhere; /* async: bytes freed on other streams, not yet synchronized */
  char detail[320];           /* the device's message when it refused */
} hbm__failure_t;

typedef struct hbm__strategy_stats {
  uint64_t reserved; /* taken from the device now (mapped, for expandable) */
  uint64_t peak_reserved;
  uint64_t allocated;    /* bytes occupied by blocks after rounding (pending frees too) */
  uint64_t largest_free; /* largest block allocatable without taking more from the device */
  uint64_t free_bytes;   /* free inside what is reserved */
  uint64_t pending;      /* async: freed on a stream, waiting for its synchronization */
} hbm__strategy_stats_t;

/* One piece of a strategy's memory, for walks: a chunk inside a reservation. */
typedef struct hbm__chunk_info {
  uint64_t region_base; /* the reservation (region, pool segment, virtual range) */
  uint64_t region_size;
  uint64_t addr;
  uint64_t size;
  bool in_use;
  uint64_t handle; /* the strategy's handle of the block (arena strategies) */
} hbm__chunk_info_t;

/* What the front gives a strategy when it creates one. */
typedef struct hbm__strategy_env {
  hbm__device_t *device;
  const hbm_config_t *cfg; /* lives as long as the strategy */
  uint64_t limit;          /* the most it may take from the device */
  /* Report a change of reservation (preallocate, grow, map, unmap, release) to the front,
   * which records it in the profile. */
  void (*on_reserve)(void *ctx, hbm_reserve_op_t op, uint64_t addr, uint64_t size);
  void *ctx;
} hbm__strategy_env_t;

typedef struct hbm__strategy hbm__strategy_t;
typedef struct hbm__arena hbm__arena_t;

typedef struct hbm__strategy_ops {
  const char *name;
  /* size >= 1 requested bytes, alignment a power of two >= 256. On failure returns
   * HBM_ERR_NO_MEMORY (or HBM_ERR_HOST_MEMORY) and fills *why; the front writes the
   * message. stream: NULL = the default stream (only the async strategy cares). */
  hbm_status_t (*alloc)(hbm__strategy_t *s, uint64_t size, uint64_t alignment, hbm_stream_t *stream,
                        hbm__block_t *out, hbm__failure_t *why);
  /* ordered: freed with hbm_free_async on `stream` (reusable on that stream at once, on
   * others after it synchronizes); otherwise a plain hbm_free, reusable everywhere. */
  void (*free)(hbm__strategy_t *s, const hbm__block_t *b, hbm_stream_t *stream, bool ordered);
  void (*stats)(hbm__strategy_t *s, hbm__strategy_stats_t *out);
  /* Every chunk (free and used) of every reservation, in address order within each. */
  hbm_status_t (*walk)(hbm__strategy_t *s, int (*fn)(const hbm__chunk_info_t *, void *), void *ctx);
  /* Gives free reservations back to the device where the mode allows. */
  hbm_status_t (*trim)(hbm__strategy_t *s);
  uint64_t (*largest_free)(hbm__strategy_t *s);
  /* Optional (NULL: nothing to do): the stream was synchronized / is being destroyed. */
  hbm_status_t (*stream_sync)(hbm__strategy_t *s, hbm_stream_t *stream);
  void (*stream_destroy)(hbm__strategy_t *s, hbm_stream_t *stream);
  /* Releases everything, live blocks included, and the object. */
  void (*destroy)(hbm__strategy_t *s);
} hbm__strategy_ops_t;

struct hbm__strategy {
  const hbm__strategy_ops_t *ops;
  hbm__strategy_env_t env;
  /* Set by strategies whose blocks are plain blocks of this arena (bfc, growth): the front
   * then calls hbm__arena_alloc / hbm__arena_release itself, and ops->alloc only when the
   * arena cannot serve a request (to preallocate, grow, or say why not). */
  hbm__arena_t *arena;
  /* Set by mode learn (step_serve.c), whose plan serves blocks it finds by address itself:
   * the front asks it first (hbm__step_alloc / hbm__step_free), then takes the general path. */
  struct hbm__step *step;
};

/* Constructors, one per mode. They take nothing from the device yet. */
hbm_status_t hbm__bfc_create(const hbm__strategy_env_t *env, bool preallocate,
                             hbm__strategy_t **out);
hbm_status_t hbm__platform_create(const hbm__strategy_env_t *env, hbm__strategy_t **out);
hbm_status_t hbm__async_create(const hbm__strategy_env_t *env, hbm__strategy_t **out);
hbm_status_t hbm__expandable_create(const hbm__strategy_env_t *env, hbm__strategy_t **out);
/* Mode learn (step_serve.c). */
hbm_status_t hbm__learn_create(const hbm__strategy_env_t *env, hbm__strategy_t **out);

/* Mode learn's memory (expandable.c, step_serve.c): the expandable strategy with its range
 * the limit itself (placement as bfc's) and a cache of at most 1/128 of what is in use. */
hbm_status_t hbm__expandable_create_tight(const hbm__strategy_env_t *env, hbm__strategy_t **out);
hbm__arena_t *hbm__expandable_arena(hbm__strategy_t *s);
/* The range's base, 0 before the first allocation or claim reserved it. */
uint64_t hbm__expandable_base(hbm__strategy_t *s);
/* The granules that the bytes [lo, hi) of the range touch get one user more, mapped first
 * where they have none (HBM_ERR_NO_MEMORY with *why past the limit); unback: one user less.
 * The plan holds its span as used blocks of the arena that map nothing, and backs them so. */
hbm_status_t hbm__expandable_back(hbm__strategy_t *s, uint64_t lo, uint64_t hi,
                                  hbm__failure_t *why);
void hbm__expandable_unback(hbm__strategy_t *s, uint64_t lo, uint64_t hi);
/* The device's granularity: what back and unback count. */
uint64_t hbm__expandable_granule(hbm__strategy_t *s);

/* ---- the best-fit-with-coalescing arena (arena.c), shared by the bfc, growth, async and
 * expandable strategies: host-side chunks over regions of device addresses. Not locked. ---- */

/* indexed: the arena keeps an address index per region, for hbm__arena_find. */
hbm__arena_t *hbm__arena_new(bool indexed);
/* Frees the metadata (not the regions: release them first with hbm__arena_for_each_region). */
void hbm__arena_delete(hbm__arena_t *a);
/* Requests of `threshold` bytes or more go to the high end of the free chunk chosen for them
 * (default HBM__PLACE_HIGH; UINT64_MAX: every request at the low end). */
void hbm__arena_place_high(hbm__arena_t *a, uint64_t threshold);
/* Adds [base, base + size) as free memory; base and size multiples of 256. The region may
 * later be extended up to max_size bytes (max_size <= size: it may not). */
hbm_status_t hbm__arena_add_region(hbm__arena_t *a, uint64_t base, uint64_t size,
                                   uint64_t max_size);
/* Grows the region that starts at `base` by `added` bytes at its end (a multiple of 256). */
hbm_status_t hbm__arena_extend_region(hbm__arena_t *a, uint64_t base, uint64_t added);
/* The size of the free chunk that ends the region at `base` (0 if its last chunk is used). */
uint64_t hbm__arena_free_tail(hbm__arena_t *a, uint64_t base);
/* A block of at least size bytes (rounded up to 256) aligned to `alignment`; the arena
 * remembers `size` as the block's requested size. HBM_ERR_NO_MEMORY (no message set) when
 * no free chunk fits; HBM_ERR_HOST_MEMORY. */
hbm_status_t hbm__arena_alloc(hbm__arena_t *a, uint64_t size, uint64_t alignment,
                              hbm__block_t *out);
/* hbm__arena_alloc for the front's fast path: 256-byte alignment, and false (nothing
 * changed, no message) whenever the arena cannot serve it without growing its own tables or
 * no free chunk fits; then hbm__arena_alloc says which. */
bool hbm__arena_alloc_fast(hbm__arena_t *a, uint64_t size, uint64_t *addr);
/* Frees a block, coalescing with free neighbours. */
void hbm__arena_release(hbm__arena_t *a, const hbm__block_t *b);
/* Indexed arenas: the handle of the used block starting at addr, UINT32_MAX if none. */
uint32_t hbm__arena_find(const hbm__arena_t *a, uint64_t addr);
/* Indexed arenas: releases the used block starting at addr and says its requested size and
 * tag; false when no block starts there. */
bool hbm__arena_release_at(hbm__arena_t *a, uint64_t addr, uint64_t *requested, uint32_t *tag);
/* The block of a handle, its requested size and its tag (either pointer may be NULL). */
void hbm__arena_block(const hbm__arena_t *a, uint32_t handle, hbm__block_t *out,
                      uint64_t *requested, uint32_t *tag);
/* The front's tag index of a used block (0: none). */
void hbm__arena_set_tag(hbm__arena_t *a, uint32_t handle, uint32_t tag);
/* The requested size and tag of a used block. */
void hbm__arena_set_user(hbm__arena_t *a, uint32_t handle, uint64_t requested, uint32_t tag);
/* Cuts a used block in two: b keeps its first `keep` bytes (a multiple of 256), *rest gets
 * the others, also in use. */
hbm_status_t hbm__arena_split(hbm__arena_t *a, hbm__block_t *b, uint64_t keep, hbm__block_t *rest);
/* Every free chunk's part inside [lo, hi) becomes a used block (requested size = its size,
 * no tag), handed to fn in address order; fn's error stops the walk. */
hbm_status_t hbm__arena_claim_free(hbm__arena_t *a, uint64_t lo, uint64_t hi,
                                   hbm_status_t (*fn)(void *ctx, const hbm__block_t *b), void *ctx);
uint64_t hbm__arena_largest_free(const hbm__arena_t *a);
uint64_t hbm__arena_reserved(const hbm__arena_t *a);
uint64_t hbm__arena_allocated(const hbm__arena_t *a);
/* Removes the regions that are entirely free, calling release for each. */
void hbm__arena_drop_free_regions(hbm__arena_t *a,
                                  void (*release)(void *ctx, uint64_t base, uint64_t size),
                                  void *ctx);
void hbm__arena_for_each_region(const hbm__arena_t *a,
                                void (*fn)(void *ctx, uint64_t base, uint64_t size), void *ctx);
/* Every chunk of every region, regions in address order, chunks in address order. */
hbm_status_t hbm__arena_walk(const hbm__arena_t *a, int (*fn)(const hbm__chunk_info_t *, void *),
                             void *ctx);
/* Calls fn for every free chunk, in no particular order. */
void hbm__arena_for_each_free(const hbm__arena_t *a,
                              void (*fn)(void *ctx, uint64_t addr, uint64_t size), void *ctx);

/* ---- streams ---- */

struct hbm_stream {
  hbm_device_t *dev;
  uint64_t id;  /* > 0; the default stream (NULL) is id 0 */
  void *native; /* the device's stream */
  struct hbm_stream *next;
};
static inline uint64_t hbm__stream_id(const hbm_stream_t *s) { return s ? s->id : 0; }
static inline void *hbm__stream_native(const hbm_stream_t *s) { return s ? s->native : NULL; }

/* ---- tags.c ---- */

/* Fills *out from explicit (may be NULL) and, field by field where explicit leaves it
 * empty, from this thread's innermost annotation scope. Returns false when the result is
 * empty (no tag at all). */
bool hbm__tag_resolve(const hbm_tag_t *explicit_tag, hbm_tag_t *out);
/* How many annotation scopes this thread has open (for the front's hot path: no tag and no
 * scope means no tag to resolve). */
extern _Thread_local size_t hbm__annotation_depth __attribute__((tls_model("initial-exec")));

/* ---- the front (front.c) ---- */

/* A live block as the front knows it: its strategy block (whose address is the key), its
 * requested size, and its tags (an index into the device's tag table, 0 when untagged).
 * Blocks of arena strategies (strategy->arena) are kept by the arena itself, which finds
 * them by address; the table below holds the blocks of the other strategies. */
typedef struct hbm__record {
  hbm__block_t block;
  uint64_t size;
  uint32_t tag;
} hbm__record_t;

/* The live blocks of a device: open addressing on the address, linear probing, deletion by
 * backward shift (no tombstones), at most half full. Records move when others are removed:
 * pointers into it are valid until the next change. An empty slot has address 0. */
typedef struct hbm__live_table {
  hbm__record_t *slots;
  uint64_t mask;  /* capacity - 1 (capacity a power of two, or 0 when none yet) */
  unsigned shift; /* 64 - log2(capacity) */
  uint64_t count;
} hbm__live_table_t;

/* An entry of a device's tag table. */
typedef struct hbm__tag_slot {
  hbm_tag_t tag;
  uint32_t next_free; /* link in the list of unused entries */
} hbm__tag_slot_t;

typedef struct hbm__tcache hbm__tcache_t;

struct hbm_device {
  uint64_t uid; /* unique among the devices this process opened */
  hbm_config_t cfg;
  hbm_mode_t mode;
  hbm__device_t *phys;
  hbm__strategy_t *strategy;
  uint64_t limit;
  char device_note[256]; /* why this device was chosen (auto) */
  int rec_id;            /* the recorder's id for this device */
  unsigned rec_capture;  /* the capture (hbm__rec_capture) that started on this device, under
                            the lock: events are recorded while it is the current one */
  bool oom_list_buffers; /* list the largest live buffers in OOM texts even when no
                            profile is captured (tests, `hbm demo`) */

  hbm__devlock_t lock; /* guards everything below and the strategy */
  hbm__live_table_t live;
  hbm__tag_slot_t *tags; /* tags of live blocks (interned strings); tags[0] is unused */
  uint32_t tags_cap;
  uint32_t free_tag; /* head of the list of unused entries (0: none) */
  hbm_intern_t *strings;
  uint64_t in_use;
  uint64_t peak_in_use;
  uint64_t num_allocs;
  uint64_t num_frees;
  uint64_t num_live;
  uint64_t num_ooms;
  hbm_stream_t *streams;
  uint64_t next_stream_id;
  hbm__tcache_t **caches; /* per-thread caches (tcache.c), by slot; NULL slots are free */
  uint32_t n_caches, caches_cap;
};

/* The tags of a live record (all empty for an untagged block). Under dev->lock. */
const hbm_tag_t *hbm__record_tag(const hbm_device_t *dev, const hbm__record_t *r);

/* hbm_alloc, hbm_alloc_tagged and hbm_alloc_async in one: tag may be NULL (the thread's
 * annotation scope still applies). */
void *hbm__alloc(hbm_device_t *dev, size_t size, size_t alignment, hbm_stream_t *stream,
                 const hbm_tag_t *tag);
/* The live blocks, largest first, in a malloc'd array (*n of them); NULL when host memory
 * ran out. Called under dev->lock. */
hbm__record_t *hbm__live_by_size(hbm_device_t *dev, size_t *n);
/* Lets a device list its largest live buffers in every OOM text (not only while profiling). */
void hbm__device_set_oom_buffers(hbm_device_t *dev, bool on);
/* The strategy of a device (tests: walks over reservations). */
hbm__strategy_t *hbm__device_strategy(hbm_device_t *dev);

/* What the device holds for its user: bytes in use, live blocks and the peak, counting the
 * per-thread caches. Under dev->lock. */
void hbm__device_usage(hbm_device_t *dev, uint64_t *in_use, uint64_t *num_live, uint64_t *peak);

/* ---- per-thread caches (tcache.c) ---- */

/* In an arena chunk's tag: the block is held by the per-thread cache in slot tag & ~mark. */
#define HBM__CACHE_MARK 0x80000000u

typedef struct hbm__tcache_totals {
  int64_t in_use;
  uint64_t allocs, frees, live;
} hbm__tcache_totals_t;

/* Without the device's lock (arena strategies, untagged, no stream, not profiling, once the
 * device is shared by threads): an allocation from this thread's cache; a free of a block
 * this thread's cache handed out. False: not served, take the locked path. */
bool hbm__tcache_alloc(hbm_device_t *dev, uint64_t size, uint64_t alignment, uint64_t *addr);
bool hbm__tcache_free(hbm_device_t *dev, uint64_t addr);
/* Under the device's lock. A block a cache handed out (mark from its chunk), freed on the
 * locked path: taken out of that cache; false when the cache does not hold it as live. */
bool hbm__tcache_give_back(hbm_device_t *dev, uint32_t mark, uint64_t addr, uint64_t *requested);
/* The requested size of a live block a cache handed out; false when it does not hold it. */
bool hbm__tcache_find(hbm_device_t *dev, uint32_t mark, uint64_t addr, uint64_t *requested);
/* This thread's cache takes a freed arena block (marking its chunk); false: no room. */
bool hbm__tcache_keep(hbm_device_t *dev, const hbm__block_t *b);
/* Every cache's freed blocks back to the arena; caches of exited threads reaped. */
void hbm__tcache_drain(hbm_device_t *dev);
void hbm__tcache_totals(hbm_device_t *dev, hbm__tcache_totals_t *out);
/* Bytes in use through the caches, read without their locks (for the peak). */
int64_t hbm__tcache_in_use(hbm_device_t *dev);
/* Copies of the live blocks the caches handed out (at most cap); returns how many. */
size_t hbm__tcache_records(hbm_device_t *dev, hbm__record_t *out, size_t cap);
/* At hbm_close: lets go of the caches (their threads free them when they meet them). */
void hbm__tcache_close(hbm_device_t *dev);

/* ---- oom.c ---- */

/* Builds the RESOURCE_EXHAUSTED text for a failed allocation of `size` bytes, records it in
 * the profile and sets it as the last error. Called under dev->lock. */
hbm_status_t hbm__oom_report(hbm_device_t *dev, uint64_t size, uint64_t alignment,
                             const hbm__failure_t *why);

#endif /* HBM_ALLOC_H */
