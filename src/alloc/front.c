/* front.c — the public face of the allocator: hbm_open picks the device backend and the
 * strategy from the configuration (the seeds' variables), and every call goes through here.
 *
 * The front owns what every mode shares: the device's lock, the table of live blocks
 * (address → requested size, strategy block, tags), the statistics users see (bytes in
 * use and its peak are sums of requested sizes, exact), streams, and the profiler hooks
 * (src/profile/recorder.h) called on open/close, every allocation and free, and every
 * change of reservation. The lock is per device, never global; the strategy runs under it.
 * An allocation that cannot be served goes to oom.c for its diagnosis. */
#include "alloc/alloc.h"
#include "alloc/live.h"
#include "alloc/step.h"
#include "profile/recorder.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ALIGNMENT (1ull << 30)

/* ---- tags of live blocks ---- */

static const hbm_tag_t no_tag;

const hbm_tag_t *hbm__record_tag(const hbm_device_t *dev, const hbm__record_t *r) {
  return r->tag ? &dev->tags[r->tag].tag : &no_tag;
}

/* An entry of the tag table holding t's strings interned in the device's string table (they
 * outlive the caller's, and stay unchanged until hbm_close, which is what lets the recorder
 * keep pointers to them: hbm__rec_alloc_stable); 0 when host memory ran out. */
static uint32_t store_tag(hbm_device_t *dev, const hbm_tag_t *t) {
  if (!dev->free_tag) {
    uint32_t old = dev->tags_cap, cap = old ? old * 2 : 64;
    hbm__tag_slot_t *grown = cap > old ? realloc(dev->tags, cap * sizeof *grown) : NULL;
    if (!grown)
      return 0;
    for (uint32_t i = cap - 1; i >= (old ? old : 1); i--) {
      grown[i].next_free = dev->free_tag;
      dev->free_tag = i;
    }
    dev->tags = grown;
    dev->tags_cap = cap;
  }
  uint32_t i = dev->free_tag;
  hbm__tag_slot_t *slot = &dev->tags[i];
  dev->free_tag = slot->next_free;
  slot->tag.category = t->category;
  slot->tag.op = hbm_intern(dev->strings, t->op);
  slot->tag.shape = hbm_intern(dev->strings, t->shape);
  slot->tag.group = hbm_intern(dev->strings, t->group);
  slot->tag.source = hbm_intern(dev->strings, t->source);
  return i;
}

static void drop_tag(hbm_device_t *dev, uint32_t i) {
  dev->tags[i].next_free = dev->free_tag;
  dev->free_tag = i;
}

/* ---- opening and closing ---- */

/* Whether this device's events go to the profile: a capture runs and has started on this
 * device (its describe_live_blocks ran). Under the lock. */
static inline bool recording(const hbm_device_t *dev) {
  return HBM_UNLIKELY(hbm__rec_active()) && dev->rec_capture == hbm__rec_capture();
}

static void record_reservation(void *ctx, hbm_reserve_op_t op, uint64_t addr, uint64_t size) {
  hbm_device_t *dev = ctx;
  if (recording(dev))
    hbm__rec_reserve(dev->rec_id, op, addr, size);
}

static hbm__record_t *live_records(hbm_device_t *dev, size_t *n);

/* For a profile started while the device is in use: tell the recorder what is live. The
 * capture starts on this device here, under its lock: events of other threads before this
 * point are not recorded (what they left live is listed below), those after it are — so the
 * profile never sees a free of a block it did not see allocated. (The per-thread caches'
 * fast paths, which run without this lock, check for a capture under their own lock, which
 * the listing below takes too.) */
static void describe_live_blocks(void *ctx) {
  hbm_device_t *dev = ctx;
  hbm__devlock_lock(&dev->lock);
  dev->rec_capture = hbm__rec_capture();
  size_t n;
  hbm__record_t *all = live_records(dev, &n);
  for (size_t i = 0; all && i < n; i++)
    hbm__rec_alloc_stable(dev->rec_id, all[i].block.addr, all[i].size, all[i].block.allocated,
                          all[i].tag ? &dev->tags[all[i].tag].tag : NULL);
  free(all);
  hbm__devlock_unlock(&dev->lock);
}

static hbm_status_t create_strategy(hbm_device_t *dev) {
  hbm__strategy_env_t env = {.device = dev->phys,
                             .cfg = &dev->cfg,
                             .limit = dev->limit,
                             .on_reserve = record_reservation,
                             .ctx = dev};
  switch (dev->mode) {
  case HBM_MODE_BFC: return hbm__bfc_create(&env, true, &dev->strategy);
  case HBM_MODE_GROWTH: return hbm__bfc_create(&env, false, &dev->strategy);
  case HBM_MODE_PLATFORM: return hbm__platform_create(&env, &dev->strategy);
  case HBM_MODE_ASYNC: return hbm__async_create(&env, &dev->strategy);
  case HBM_MODE_EXPANDABLE: /* without virtual memory: growth by regions, as the note says */
    return dev->phys->ops->va_reserve ? hbm__expandable_create(&env, &dev->strategy)
                                      : hbm__bfc_create(&env, false, &dev->strategy);
  case HBM_MODE_LEARN: /* without virtual memory: bfc, as the note says */
    return dev->phys->ops->va_reserve ? hbm__learn_create(&env, &dev->strategy)
                                      : hbm__bfc_create(&env, true, &dev->strategy);
  case HBM_MODE_COUNT: break;
  }
  return hbm__error(HBM_ERR_INVALID, "unknown mode %d", (int)dev->mode);
}

/* HBM_PROFILE_DIR: capture this process unless a capture is already running. */
static hbm_status_t start_profile(const hbm_config_t *cfg) {
  if (!cfg->profile_dir[0] || hbm_profiler_path())
    return HBM_OK;
  hbm_status_t st = hbm_profiler_start(cfg->profile_dir);
  if (st == HBM_ERR_UNAVAILABLE) { /* a build without the profiler: run without it */
    hbm__error_clear();
    return HBM_OK;
  }
  if (st != HBM_OK) { /* say which setting asked for the directory */
    char *why = hbm__strdup(hbm_last_error());
    st = hbm__error(st, "HBM_PROFILE_DIR=%s: %s", cfg->profile_dir, why ? why : "");
    free(why);
  }
  return st;
}

hbm_device_t *hbm_open(const hbm_config_t *cfg) {
  hbm_config_t from_env;
  if (!cfg) {
    if (hbm_config_from_env(&from_env) != HBM_OK)
      return NULL;
    cfg = &from_env;
  }
  if (hbm_config_validate(cfg) != HBM_OK || start_profile(cfg) != HBM_OK)
    return NULL;
  /* Aligned for the lock's cache lines (lock.h). */
  hbm_device_t *dev =
      aligned_alloc(_Alignof(hbm_device_t), hbm__round_up(sizeof *dev, _Alignof(hbm_device_t)));
  if (dev)
    memset(dev, 0, sizeof *dev);
  if (!dev) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory opening a device");
    return NULL;
  }
  dev->cfg = *cfg;
  hbm__config_mark_code_origins(&dev->cfg);
  static atomic_uint_fast64_t next_uid;
  dev->uid = atomic_fetch_add(&next_uid, 1) + 1;
  dev->mode = hbm_config_mode(cfg);
  dev->rec_id = -1;
  hbm__devlock_init(&dev->lock);
  hbm_status_t st = hbm__device_open(cfg, &dev->phys, dev->device_note, sizeof dev->device_note);
  if (st == HBM_OK) {
    dev->limit = hbm__config_limit(cfg, dev->phys->total);
    dev->strings = hbm_intern_new();
    st = dev->strings ? create_strategy(dev) : HBM_ERR_HOST_MEMORY;
  }
  if (st != HBM_OK) {
    hbm_close(dev);
    return NULL;
  }
  dev->rec_id = hbm__rec_device_open(dev->phys->name, hbm_mode_name(dev->mode), dev->limit,
                                     describe_live_blocks, dev);
  return dev;
}

void hbm_close(hbm_device_t *dev) {
  if (!dev)
    return;
  while (dev->streams)
    hbm_stream_destroy(dev, dev->streams);
  hbm__tcache_close(dev);
  if (dev->strategy)
    dev->strategy->ops->destroy(dev->strategy);
  if (dev->rec_id >= 0)
    hbm__rec_device_close(dev->rec_id);
  hbm__device_close(dev->phys);
  hbm_intern_free(dev->strings);
  hbm__live_free(&dev->live);
  free(dev->tags);
  free(dev);
}

const hbm_config_t *hbm_device_config(const hbm_device_t *dev) { return &dev->cfg; }
const char *hbm_device_name(const hbm_device_t *dev) { return dev->phys->name; }
hbm_device_kind_t hbm_device_kind(const hbm_device_t *dev) { return dev->phys->kind; }
hbm_mode_t hbm_device_mode(const hbm_device_t *dev) { return dev->mode; }
const char *hbm_device_note(const hbm_device_t *dev) { return dev->device_note; }

hbm_status_t hbm_device_memory(hbm_device_t *dev, uint64_t *total, uint64_t *free_bytes) {
  if (!dev || !total || !free_bytes)
    return hbm__error(HBM_ERR_INVALID, "hbm_device_memory: NULL argument");
  return hbm__device_memory(dev->phys, total, free_bytes);
}

/* ---- allocation ---- */

/* The checks of hbm__alloc's arguments, off the hot path: false (with the message set) when
 * they are refused; *alignment becomes at least 256. */
static bool arguments_refused(hbm_device_t *dev, size_t size, size_t *alignment,
                              hbm_stream_t *stream) {
  if (!dev) {
    hbm__error(HBM_ERR_INVALID, "hbm_alloc: NULL device");
    return true;
  }
  if (size == 0) {
    hbm__error(HBM_ERR_INVALID, "hbm_alloc: size 0; allocations are at least 1 byte");
    return true;
  }
  if (*alignment & (*alignment - 1)) {
    hbm__error(HBM_ERR_INVALID, "alignment %zu is not a power of two", *alignment);
    return true;
  }
  if (*alignment > MAX_ALIGNMENT) {
    hbm__error(HBM_ERR_INVALID, "alignment %zu is larger than 1GiB", *alignment);
    return true;
  }
  if (stream && stream->dev != dev) {
    hbm__error(HBM_ERR_INVALID, "hbm_alloc_async: the stream belongs to another device");
    return true;
  }
  if (*alignment < HBM__MIN_BLOCK)
    *alignment = HBM__MIN_BLOCK;
  return false;
}

/* The statistics of a block handed out or given back (requested sizes). Under the lock. */
static inline void count_alloc(hbm_device_t *dev, uint64_t size) {
  dev->in_use += size;
  uint64_t total = dev->in_use;
  if (HBM_UNLIKELY(dev->n_caches)) /* the peak, sampled with what the caches hand out */
    total += (uint64_t)hbm__tcache_in_use(dev);
  if (total > dev->peak_in_use)
    dev->peak_in_use = total;
  dev->num_allocs++;
  dev->num_live++;
}

static inline void count_free(hbm_device_t *dev, uint64_t size) {
  dev->in_use -= size;
  dev->num_frees++;
  dev->num_live--;
}

/* Enters a served block in the table (the arena keeps its own) and the statistics. Under
 * the lock. */
static hbm_status_t remember_block(hbm_device_t *dev, uint64_t size, const hbm__block_t *b,
                                   const hbm_tag_t *tag) {
  uint32_t tag_index = 0;
  if (HBM_UNLIKELY(tag) && !(tag_index = store_tag(dev, tag)))
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the tags of live blocks");
  hbm__arena_t *arena = dev->strategy->arena;
  if (arena) {
    if (HBM_UNLIKELY(tag_index))
      hbm__arena_set_tag(arena, (uint32_t)b->handle, tag_index);
  } else {
    hbm__record_t r = {.block = *b, .size = size, .tag = tag_index};
    if (!hbm__live_insert(&dev->live, &r)) {
      if (tag_index)
        drop_tag(dev, tag_index);
      return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the live-block table");
    }
  }
  count_alloc(dev, size);
  if (recording(dev))
    hbm__rec_alloc_stable(dev->rec_id, b->addr, size, b->allocated,
                          tag ? &dev->tags[tag_index].tag : NULL);
  return HBM_OK;
}

/* The strategy's own allocation (the arena could not serve it, or the strategy has none),
 * and the diagnosis when it fails. Under the lock. */
static hbm_status_t strategy_alloc(hbm_device_t *dev, uint64_t size, uint64_t alignment,
                                   hbm_stream_t *stream, hbm__block_t *b) {
  hbm__failure_t why;
  memset(&why, 0, sizeof why);
  hbm_status_t st = dev->strategy->ops->alloc(dev->strategy, size, alignment, stream, b, &why);
  if (st == HBM_OK)
    return st;
  if (st == HBM_ERR_NO_MEMORY && why.kind != HBM__FAIL_HOST) {
    dev->num_ooms++;
    hbm__oom_report(dev, size, alignment, &why);
  } else if (hbm_last_status() == HBM_OK) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory allocating %llu bytes",
               (unsigned long long)size);
  }
  return st;
}

static inline void release_block(hbm_device_t *dev, const hbm__block_t *b, hbm_stream_t *stream,
                                 bool ordered) {
  hbm__strategy_t *s = dev->strategy;
  if (s->arena)
    hbm__arena_release(s->arena, b);
  else
    s->ops->free(s, b, stream, ordered);
}

/* Every allocation that the fast path (hbm__alloc) does not serve. (Not inlined: the fast
 * path stays a small function that saves few registers.) */
static __attribute__((noinline)) void *general_alloc(hbm_device_t *dev, size_t size,
                                                     size_t alignment, hbm_stream_t *stream,
                                                     const hbm_tag_t *tag) {
  if (HBM_UNLIKELY(!dev || size == 0 || (alignment & (alignment - 1)) ||
                   alignment > HBM__MIN_BLOCK || stream) &&
      arguments_refused(dev, size, &alignment, stream))
    return NULL;
  if (alignment < HBM__MIN_BLOCK)
    alignment = HBM__MIN_BLOCK;
  hbm_tag_t resolved;
  bool tagged = (tag || hbm__annotation_depth) && hbm__tag_resolve(tag, &resolved);
  hbm__block_t b;
  hbm__strategy_t *s = dev->strategy;
  /* A shared device's cache, for the alignments the fast path does not try it with. */
  if (HBM_UNLIKELY(hbm__devlock_shared(&dev->lock)) && alignment > HBM__MIN_BLOCK && s->arena &&
      !tagged && !stream && !hbm__rec_active() && hbm__tcache_alloc(dev, size, alignment, &b.addr))
    return (void *)(uintptr_t)b.addr;
  hbm__devlock_lock(&dev->lock);
  hbm_status_t st = s->arena ? hbm__arena_alloc(s->arena, size, alignment, &b) : HBM_ERR_NO_MEMORY;
  if (HBM_UNLIKELY(st != HBM_OK) && dev->n_caches) {
    /* What threads' caches hold comes before growing, and before an OOM. */
    hbm__tcache_drain(dev);
    st = hbm__arena_alloc(s->arena, size, alignment, &b);
  }
  if (HBM_UNLIKELY(st != HBM_OK))
    st = strategy_alloc(dev, size, alignment, stream, &b);
  if (HBM_LIKELY(st == HBM_OK)) {
    st = remember_block(dev, size, &b, tagged ? &resolved : NULL);
    if (HBM_UNLIKELY(st != HBM_OK))
      release_block(dev, &b, stream, false);
  }
  hbm__devlock_unlock(&dev->lock);
  return st == HBM_OK ? (void *)(uintptr_t)b.addr : NULL;
}

/* Records an allocation the fast path served, then leaves the lock: the record goes in under
 * the lock, as on the general path, so that no other thread's free of the block can be
 * recorded before it. */
static __attribute__((noinline)) void *record_fast_alloc(hbm_device_t *dev, uint64_t addr,
                                                         uint64_t size) {
  hbm__rec_alloc_stable(dev->rec_id, addr, size, hbm__round_up(size, HBM__MIN_BLOCK), NULL);
  hbm__devlock_leave_biased(&dev->lock);
  return (void *)(uintptr_t)addr;
}

/* Mode learn's hook (step_serve.c): its plan first, under the lock as everything else (the
 * owner's biased entry, or the mutex once threads share the device); what the plan does not
 * serve takes the general path, where the strategy learns and places it. */
static __attribute__((noinline)) void *step_alloc(hbm_device_t *dev, size_t size) {
  uint64_t addr;
  if (HBM_UNLIKELY(size == 0))
    return general_alloc(dev, size, HBM__MIN_BLOCK, NULL, NULL);
  hbm__devlock_lock(&dev->lock);
  if (HBM_UNLIKELY(!hbm__step_alloc(dev->strategy->step, size, &addr))) {
    hbm__devlock_unlock(&dev->lock);
    return general_alloc(dev, size, HBM__MIN_BLOCK, NULL, NULL);
  }
  count_alloc(dev, size);
  if (recording(dev))
    hbm__rec_alloc_stable(dev->rec_id, addr, size, hbm__round_up(size, HBM__MIN_BLOCK), NULL);
  hbm__devlock_unlock(&dev->lock);
  return (void *)(uintptr_t)addr;
}

/* The fast path, which serves most calls of most programs: untagged, on no stream, aligned to
 * at most 256 bytes, on a device whose strategy sub-allocates from its arena. Used by one
 * thread (its lock biased to that thread, lock.h; so there are no thread caches either), it
 * does what the general path does — the arena's allocation and the statistics under the
 * lock, recorded when a profile is being captured — without its checks and copies (issue
 * 16: they were a third of an allocation's time). Shared by threads, it goes to the
 * thread's cache (tcache.c). Anything else, and any allocation these cannot serve at once
 * (the arena must grow, memory ran out, the cache has no block), goes the general way.
 * On the one-thread path every call is its last act (a tail call), and the arena's part is
 * inlined (arena.c, FRONT_INLINE): with no value to keep across a call, the path saves fewer
 * registers, whose saving and restoring was a tenth of its instructions. */
void *hbm__alloc(hbm_device_t *dev, size_t size, size_t alignment, hbm_stream_t *stream,
                 const hbm_tag_t *tag) {
  if (HBM_UNLIKELY(!dev || alignment > HBM__MIN_BLOCK || (alignment & (alignment - 1)) || stream ||
                   tag || hbm__annotation_depth))
    return general_alloc(dev, size, alignment, stream, tag);
  hbm__arena_t *arena = dev->strategy->arena;
  if (HBM_UNLIKELY(!arena))
    return dev->strategy->step ? step_alloc(dev, size)
                               : general_alloc(dev, size, alignment, NULL, NULL);
  /* Shared first: threads that share a device take their caches (tcache.c), and must not
   * see the owner write the lock's `busy` flag on every call (they read its line on theirs). */
  if (HBM_UNLIKELY(hbm__devlock_shared(&dev->lock))) {
    uint64_t cached;
    if (!hbm__rec_active() && hbm__tcache_alloc(dev, size, HBM__MIN_BLOCK, &cached))
      return (void *)(uintptr_t)cached;
    return general_alloc(dev, size, alignment, NULL, NULL);
  }
  if (HBM_UNLIKELY(!hbm__devlock_enter_biased(&dev->lock)))
    return general_alloc(dev, size, alignment, NULL, NULL);
  uint64_t addr;
  if (HBM_UNLIKELY(!hbm__arena_alloc_fast(arena, size, &addr))) {
    hbm__devlock_leave_biased(&dev->lock);
    return general_alloc(dev, size, alignment, NULL, NULL);
  }
  count_alloc(dev, size);
  if (recording(dev))
    return record_fast_alloc(dev, addr, size);
  hbm__devlock_leave_biased(&dev->lock);
  return (void *)(uintptr_t)addr;
}

void *hbm_alloc(hbm_device_t *dev, size_t size, size_t alignment) {
  return hbm__alloc(dev, size, alignment, NULL, NULL);
}

void *hbm_alloc_async(hbm_device_t *dev, size_t size, hbm_stream_t *stream) {
  return hbm__alloc(dev, size, 0, stream, NULL);
}

/* What forget_block found. */
typedef enum forgotten { NOT_LIVE, DEVICE_BLOCK, CACHE_BLOCK } forgotten_t;

/* forget_block for a device shared by threads: the block may be one a thread's cache handed
 * out (its counters then change, not the device's), and a freed block may stay in this
 * thread's cache instead of going back to the arena. */
static forgotten_t forget_shared_block(hbm_device_t *dev, uint64_t addr, uint64_t *size,
                                       uint32_t *tag) {
  hbm__arena_t *arena = dev->strategy->arena;
  uint32_t h = hbm__arena_find(arena, addr);
  if (h == UINT32_MAX)
    return NOT_LIVE;
  hbm__block_t b;
  hbm__arena_block(arena, h, &b, size, tag);
  forgotten_t what = DEVICE_BLOCK;
  if (*tag & HBM__CACHE_MARK) {
    if (!hbm__tcache_give_back(dev, *tag, addr, size))
      return NOT_LIVE; /* freed into a cache already */
    *tag = 0;
    what = CACHE_BLOCK;
  }
  if (*tag) {
    drop_tag(dev, *tag);
    *tag = 0;
  }
  if (hbm__rec_active() || !hbm__tcache_keep(dev, &b))
    hbm__arena_release(arena, &b);
  return what;
}

/* Takes the block at addr out of the live blocks and gives it back to the strategy; its
 * requested size and tag go to *size and *tag. Under the lock. */
static inline forgotten_t forget_block(hbm_device_t *dev, uint64_t addr, hbm_stream_t *stream,
                                       bool ordered, uint64_t *size, uint32_t *tag) {
  hbm__strategy_t *s = dev->strategy;
  if (s->arena) {
    if (HBM_UNLIKELY(hbm__devlock_shared(&dev->lock)))
      return forget_shared_block(dev, addr, size, tag);
    return hbm__arena_release_at(s->arena, addr, size, tag) ? DEVICE_BLOCK : NOT_LIVE;
  }
  hbm__record_t *r = hbm__live_find(&dev->live, addr);
  if (!r && s->step && hbm__step_free(s->step, addr, size)) { /* mode learn's plan */
    *tag = 0;
    return DEVICE_BLOCK;
  }
  if (!r)
    return NOT_LIVE;
  *size = r->size;
  *tag = r->tag;
  s->ops->free(s, &r->block, stream, ordered);
  hbm__live_erase(&dev->live, r);
  return DEVICE_BLOCK;
}

static __attribute__((noinline)) hbm_status_t general_free(hbm_device_t *dev, void *ptr,
                                                           hbm_stream_t *stream, bool ordered) {
  if (HBM_UNLIKELY(!dev))
    return hbm__error(HBM_ERR_INVALID, "hbm_free: NULL device");
  if (HBM_UNLIKELY(stream && stream->dev != dev))
    return hbm__error(HBM_ERR_INVALID, "hbm_free_async: the stream belongs to another device");
  uint64_t addr = (uint64_t)(uintptr_t)ptr, size;
  uint32_t tag;
  hbm__devlock_lock(&dev->lock);
  forgotten_t what = forget_block(dev, addr, stream, ordered, &size, &tag);
  if (HBM_UNLIKELY(what == NOT_LIVE)) {
    hbm__devlock_unlock(&dev->lock);
    return hbm__error(HBM_ERR_NOT_FOUND, "hbm_free: %p is not a live block of device %s", ptr,
                      dev->phys->name);
  }
  if (HBM_LIKELY(what == DEVICE_BLOCK))
    count_free(dev, size);
  if (HBM_UNLIKELY(tag))
    drop_tag(dev, tag);
  if (recording(dev))
    hbm__rec_free(dev->rec_id, addr);
  hbm__devlock_unlock(&dev->lock);
  return HBM_OK;
}

/* Mode learn's hook for frees (as step_alloc). */
static __attribute__((noinline)) hbm_status_t step_free(hbm_device_t *dev, void *ptr,
                                                        bool ordered) {
  uint64_t addr = (uint64_t)(uintptr_t)ptr, size;
  hbm__devlock_lock(&dev->lock);
  if (HBM_UNLIKELY(!hbm__step_free(dev->strategy->step, addr, &size))) {
    hbm__devlock_unlock(&dev->lock);
    return general_free(dev, ptr, NULL, ordered);
  }
  count_free(dev, size);
  if (recording(dev))
    hbm__rec_free(dev->rec_id, addr);
  hbm__devlock_unlock(&dev->lock);
  return HBM_OK;
}

/* Records a free the fast path made, then leaves the lock (as record_fast_alloc). */
static __attribute__((noinline)) hbm_status_t record_fast_free(hbm_device_t *dev, uint64_t addr) {
  hbm__rec_free(dev->rec_id, addr);
  hbm__devlock_leave_biased(&dev->lock);
  return HBM_OK;
}

/* hbm_free's fast path, for the blocks hbm__alloc serves, built the same way (every call
 * a tail call); the general path also says why a pointer that is not live is refused. */
static inline hbm_status_t free_block(hbm_device_t *dev, void *ptr, hbm_stream_t *stream,
                                      bool ordered) {
  if (!ptr)
    return HBM_OK;
  hbm__arena_t *arena = HBM_LIKELY(dev && !stream) ? dev->strategy->arena : NULL;
  if (HBM_UNLIKELY(!arena))
    return dev && !stream && dev->strategy->step ? step_free(dev, ptr, ordered)
                                                 : general_free(dev, ptr, stream, ordered);
  if (HBM_UNLIKELY(hbm__devlock_shared(&dev->lock))) {
    if (!hbm__rec_active() && hbm__tcache_free(dev, (uint64_t)(uintptr_t)ptr))
      return HBM_OK;
    return general_free(dev, ptr, NULL, ordered);
  }
  if (HBM_UNLIKELY(!hbm__devlock_enter_biased(&dev->lock)))
    return general_free(dev, ptr, NULL, ordered);
  uint64_t addr = (uint64_t)(uintptr_t)ptr, size;
  uint32_t tag;
  if (HBM_UNLIKELY(!hbm__arena_release_at(arena, addr, &size, &tag))) {
    hbm__devlock_leave_biased(&dev->lock);
    return general_free(dev, ptr, NULL, ordered);
  }
  if (HBM_UNLIKELY(tag))
    drop_tag(dev, tag);
  count_free(dev, size);
  if (recording(dev))
    return record_fast_free(dev, addr);
  hbm__devlock_leave_biased(&dev->lock);
  return HBM_OK;
}

hbm_status_t hbm_free(hbm_device_t *dev, void *ptr) { return free_block(dev, ptr, NULL, false); }

hbm_status_t hbm_free_async(hbm_device_t *dev, void *ptr, hbm_stream_t *stream) {
  return free_block(dev, ptr, stream, true);
}

/* The live record of addr (a copy); false if addr is not live. Under the lock. */
static bool find_block(hbm_device_t *dev, uint64_t addr, hbm__record_t *out) {
  hbm__arena_t *arena = dev->strategy->arena;
  if (arena) {
    uint32_t h = hbm__arena_find(arena, addr);
    if (h == UINT32_MAX)
      return false;
    hbm__arena_block(arena, h, &out->block, &out->size, &out->tag);
    if (!(out->tag & HBM__CACHE_MARK))
      return true;
    bool live = hbm__tcache_find(dev, out->tag, addr, &out->size);
    out->tag = 0;
    return live;
  }
  const hbm__record_t *r = hbm__live_find(&dev->live, addr);
  if (r)
    *out = *r;
  return r != NULL || (dev->strategy->step && hbm__step_find(dev->strategy->step, addr, out));
}

size_t hbm_block_size(hbm_device_t *dev, const void *ptr) {
  if (!dev || !ptr)
    return 0;
  hbm__record_t r;
  hbm__devlock_lock(&dev->lock);
  size_t size = find_block(dev, (uint64_t)(uintptr_t)ptr, &r) ? (size_t)r.size : 0;
  hbm__devlock_unlock(&dev->lock);
  return size;
}

/* ---- streams ---- */

hbm_stream_t *hbm_stream_create(hbm_device_t *dev) {
  if (!dev) {
    hbm__error(HBM_ERR_INVALID, "hbm_stream_create: NULL device");
    return NULL;
  }
  hbm_stream_t *s = calloc(1, sizeof *s);
  if (!s) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for a stream");
    return NULL;
  }
  if (dev->phys->ops->stream_create(dev->phys, &s->native) != HBM_OK) {
    free(s);
    return NULL;
  }
  s->dev = dev;
  hbm__devlock_lock(&dev->lock);
  s->id = ++dev->next_stream_id;
  s->next = dev->streams;
  dev->streams = s;
  hbm__devlock_unlock(&dev->lock);
  return s;
}

hbm_status_t hbm_stream_synchronize(hbm_device_t *dev, hbm_stream_t *stream) {
  if (!dev || (stream && stream->dev != dev))
    return hbm__error(HBM_ERR_INVALID, "hbm_stream_synchronize: no such stream on this device");
  hbm_status_t st = dev->phys->ops->stream_sync(dev->phys, hbm__stream_native(stream));
  if (st != HBM_OK)
    return st;
  hbm__devlock_lock(&dev->lock);
  if (dev->strategy->ops->stream_sync)
    st = dev->strategy->ops->stream_sync(dev->strategy, stream);
  hbm__devlock_unlock(&dev->lock);
  return st;
}

hbm_status_t hbm_stream_destroy(hbm_device_t *dev, hbm_stream_t *stream) {
  if (!stream)
    return HBM_OK;
  if (!dev || stream->dev != dev)
    return hbm__error(HBM_ERR_INVALID, "hbm_stream_destroy: no such stream on this device");
  dev->phys->ops->stream_sync(dev->phys, stream->native);
  hbm__devlock_lock(&dev->lock);
  if (dev->strategy && dev->strategy->ops->stream_destroy)
    dev->strategy->ops->stream_destroy(dev->strategy, stream);
  for (hbm_stream_t **p = &dev->streams; *p; p = &(*p)->next) {
    if (*p == stream) {
      *p = stream->next;
      break;
    }
  }
  hbm__devlock_unlock(&dev->lock);
  dev->phys->ops->stream_destroy(dev->phys, stream->native);
  free(stream);
  return HBM_OK;
}

/* ---- statistics, walks, trimming ---- */

hbm_status_t hbm_trim(hbm_device_t *dev) {
  if (!dev)
    return hbm__error(HBM_ERR_INVALID, "hbm_trim: NULL device");
  hbm__devlock_lock(&dev->lock);
  hbm__tcache_drain(dev);
  hbm_status_t st = dev->strategy->ops->trim(dev->strategy);
  hbm__devlock_unlock(&dev->lock);
  return st;
}

hbm_status_t hbm_get_stats(hbm_device_t *dev, hbm_stats_t *out) {
  if (!dev || !out)
    return hbm__error(HBM_ERR_INVALID, "hbm_get_stats: NULL argument");
  hbm__strategy_stats_t s;
  hbm__tcache_totals_t cached;
  hbm__devlock_lock(&dev->lock);
  dev->strategy->ops->stats(dev->strategy, &s);
  hbm__tcache_totals(dev, &cached);
  out->bytes_in_use = dev->in_use + (uint64_t)cached.in_use;
  if (out->bytes_in_use > dev->peak_in_use)
    dev->peak_in_use = out->bytes_in_use;
  out->peak_bytes_in_use = dev->peak_in_use;
  out->num_allocs = dev->num_allocs + cached.allocs;
  out->num_frees = dev->num_frees + cached.frees;
  out->num_live = dev->num_live + cached.live;
  out->num_ooms = dev->num_ooms;
  hbm__devlock_unlock(&dev->lock);
  out->bytes_reserved = s.reserved;
  out->peak_bytes_reserved = s.peak_reserved;
  out->bytes_limit = dev->limit;
  out->largest_free_block = s.largest_free;
  out->fragmentation = s.free_bytes ? 1.0 - (double)s.largest_free / (double)s.free_bytes : 0.0;
  return HBM_OK;
}

static int compare_by_address(const void *x, const void *y) {
  uint64_t a = ((const hbm__record_t *)x)->block.addr, b = ((const hbm__record_t *)y)->block.addr;
  return a < b ? -1 : a > b;
}

static int compare_by_size_desc(const void *x, const void *y) {
  uint64_t a = ((const hbm__record_t *)x)->size, b = ((const hbm__record_t *)y)->size;
  if (a != b)
    return a > b ? -1 : 1;
  return compare_by_address(x, y);
}

typedef struct record_list {
  const hbm__arena_t *arena;
  hbm__record_t *out;
  size_t n, cap;
} record_list_t;

/* Live blocks of the device itself; those threads' caches hold are listed by the caches. */
static int add_arena_block(const hbm__chunk_info_t *c, void *ctx) {
  record_list_t *l = ctx;
  if (c->in_use && l->n < l->cap) {
    hbm__record_t *r = &l->out[l->n];
    hbm__arena_block(l->arena, (uint32_t)c->handle, &r->block, &r->size, &r->tag);
    l->n += !(r->tag & HBM__CACHE_MARK);
  }
  return 0;
}

/* Copies of the live records, in a malloc'd array. Under the lock. */
static hbm__record_t *live_records(hbm_device_t *dev, size_t *n) {
  *n = 0;
  hbm__arena_t *arena = dev->strategy->arena;
  hbm__tcache_totals_t cached;
  hbm__tcache_totals(dev, &cached);
  hbm__step_t *step = dev->strategy->step;
  size_t cap = arena ? dev->num_live + cached.live
                     : dev->live.count + (step ? hbm__step_live_count(step) : 0);
  hbm__record_t *out = malloc((cap + 1) * sizeof *out);
  if (!out)
    return NULL;
  if (arena) {
    record_list_t l = {.arena = arena, .out = out, .cap = cap};
    hbm__arena_walk(arena, add_arena_block, &l);
    *n = l.n + hbm__tcache_records(dev, out + l.n, cap - l.n);
    return out;
  }
  for (uint64_t i = 0; dev->live.slots && i <= dev->live.mask; i++)
    if (dev->live.slots[i].block.addr)
      out[(*n)++] = dev->live.slots[i];
  if (step) /* mode learn's plan keeps its own blocks */
    *n += hbm__step_records(step, out + *n, cap - *n);
  return out;
}

hbm__record_t *hbm__live_by_size(hbm_device_t *dev, size_t *n) {
  hbm__record_t *all = live_records(dev, n);
  if (all)
    qsort(all, *n, sizeof *all, compare_by_size_desc);
  return all;
}

hbm_status_t hbm_walk(hbm_device_t *dev, int (*fn)(const hbm_block_info_t *, void *), void *ctx) {
  if (!dev || !fn)
    return hbm__error(HBM_ERR_INVALID, "hbm_walk: NULL argument");
  hbm__devlock_lock(&dev->lock);
  size_t n;
  hbm__record_t *all = live_records(dev, &n);
  if (!all) {
    hbm__devlock_unlock(&dev->lock);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory walking live blocks");
  }
  qsort(all, n, sizeof *all, compare_by_address);
  for (size_t i = 0; i < n; i++) {
    const hbm__record_t *r = &all[i];
    const hbm_tag_t *t = hbm__record_tag(dev, r);
    hbm_block_info_t info = {.ptr = (const void *)(uintptr_t)r->block.addr,
                             .size = (size_t)r->size,
                             .allocated = (size_t)r->block.allocated,
                             .op = t->op,
                             .shape = t->shape,
                             .category = t->category,
                             .group = t->group,
                             .source = t->source};
    if (fn(&info, ctx))
      break;
  }
  free(all);
  hbm__devlock_unlock(&dev->lock);
  return HBM_OK;
}

void hbm__device_set_oom_buffers(hbm_device_t *dev, bool on) {
  hbm__devlock_lock(&dev->lock);
  dev->oom_list_buffers = on;
  hbm__devlock_unlock(&dev->lock);
}

hbm__strategy_t *hbm__device_strategy(hbm_device_t *dev) { return dev->strategy; }

void hbm__device_usage(hbm_device_t *dev, uint64_t *in_use, uint64_t *num_live, uint64_t *peak) {
  hbm__tcache_totals_t cached;
  hbm__tcache_totals(dev, &cached);
  *in_use = dev->in_use + (uint64_t)cached.in_use;
  *num_live = dev->num_live + cached.live;
  *peak = *in_use > dev->peak_in_use ? *in_use : dev->peak_in_use;
}
