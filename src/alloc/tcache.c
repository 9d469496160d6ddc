/* tcache.c — per-thread caches of freed blocks, so that threads sharing a device do not all
 * queue on its lock. A device switches them on the first time a second thread takes its
 * lock (hbm__devlock_shared): a program that allocates from one thread never has them, so
 * its placement — and every replay — is the arena's alone.
 *
 * A cache belongs to one thread and one device, and holds
 *   - bins: blocks (of any size below 1 TiB) this thread freed, by size class, kept
 *     allocated in the arena, at most its budget in all: CACHE_BYTES, or a third of the
 *     device's limit when that is more — big blocks too, so that two threads each cycling
 *     through hundred-megabyte activations (the GPT logs) do not queue on the device's lock
 *     for every one. The budget must hold a thread's working set: at an eighth (3.5 GiB of
 *     a 28 GiB device) two threads replaying a 6.7 GiB log sent 8% of their allocations
 *     to the locked arena every pass, and ran at 0.3-0.8x of one thread. Where live blocks
 *     and caches together pass the limit, caches are emptied (below): what the bins hold
 *     is given back before an allocation would fail or the arena grow. That does not make
 *     the caches free of memory: a block in a bin is not coalesced with its neighbours, so
 *     the arena places what follows differently. One thread sent through its cache needed
 *     up to 7.3% more memory than the arena alone on the real logs (BENCHMARKS.md), which
 *     is why a device one thread uses never has caches;
 *   - owned: the blocks it handed out from its bins and not yet freed (address → block and
 *     requested size): a free by the same thread finds them here;
 *   - the statistics of what went through it.
 * Its own spinlock guards it: the owner takes it on every cached operation (uncontended,
 * one atomic exchange); other threads only to free a block it owns, to read statistics, to
 * walk live blocks, to drain the bins when memory runs short or on hbm_trim, and to reap
 * the cache of a thread that exited. Lock order: the device's lock, then caches' locks.
 *
 * An arena chunk held by a cache (in its bins or owned) carries HBM__CACHE_MARK | the cache's
 * slot in its tag, so the locked paths know whom to ask. The fast paths never touch the arena
 * (which the device lock guards): a cache keeps its own copy of each block's handle and size.
 *
 * Lifetimes: a cache is referenced by its thread (a list kept with a pthread key, whose
 * destructor runs at thread exit) and by its device; the last to let go frees it. A device
 * reaps the caches of exited threads — their live blocks become the device's own, their bins
 * go back to the arena — and a closed device's caches are dropped by their threads when met. */
#include "alloc/alloc.h"
#include "profile/recorder.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define UNIT HBM__MIN_BLOCK
#define CACHE_MAX_UNITS UINT32_MAX /* units are kept in 32 bits: blocks below 1 TiB */
#define CACHE_BYTES (64ull << 20)  /* what one cache may hold in its bins, at least */
#define EXACT_UNITS 64             /* below this, one bin per size */
#define BIN_SUBDIVISIONS 8         /* above, this many bins per power of two */
#define BIN_CAPACITY 4096          /* blocks in one bin, at most (a bin grows as it fills) */
#define BIN_SCAN 16                /* blocks looked at in one bin for one allocation */
#define N_BINS (EXACT_UNITS + 26 * BIN_SUBDIVISIONS) /* up to 2^32 - 1 units */

typedef struct cached_block {
  uint64_t addr;
  uint32_t handle;
  uint32_t units;
} cached_block_t;

typedef struct owned_block {
  uint64_t addr; /* 0: an empty slot */
  uint32_t handle;
  uint32_t units;
  uint64_t requested;
} owned_block_t;

/* A bin grows (doubling, from 16) as blocks come: the GPT logs keep hundreds of live blocks
 * of one size (4 KiB, 4 MiB, 16 MiB), and a bin of fixed room sent every one past its room
 * back to the arena, under the device's lock, each pass. */
typedef struct bin {
  uint32_t n, cap;
  cached_block_t *blocks;
} bin_t;

struct hbm__tcache {
  _Atomic uint32_t lock;
  _Atomic uint32_t refs;   /* the thread's and the device's */
  _Atomic uint32_t orphan; /* the device was closed */
  bool dead;               /* the thread exited (under lock) */
  hbm_device_t *dev;
  uint64_t dev_uid;
  uint32_t slot; /* in dev->caches */
  hbm__tcache_t *thread_next;
  uint64_t budget; /* the most its bins may hold, bytes */
  /* under lock */
  uint64_t cached; /* bytes in bins */
  owned_block_t *owned;
  uint64_t owned_mask, owned_count;
  _Atomic int64_t in_use; /* requested bytes of owned blocks (read without the lock) */
  uint64_t allocs, frees;
  bin_t bins[N_BINS];
};

/* ---- the spinlock ---- */

static inline void spin_lock(_Atomic uint32_t *l) {
  while (atomic_exchange_explicit(l, 1, memory_order_acquire)) {
    for (int i = 0; i < 100 && atomic_load_explicit(l, memory_order_relaxed); i++)
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#else
      ;
#endif
    if (atomic_load_explicit(l, memory_order_relaxed))
      sched_yield();
  }
}

static inline void spin_unlock(_Atomic uint32_t *l) {
  atomic_store_explicit(l, 0, memory_order_release);
}

/* ---- size bins ---- */

static inline unsigned bin_of(uint64_t units) {
  if (units < EXACT_UNITS)
    return (unsigned)units;
  unsigned msb = 63u - (unsigned)__builtin_clzll(units); /* >= 6 */
  unsigned sub = (unsigned)(units >> (msb - 3)) & (BIN_SUBDIVISIONS - 1);
  return EXACT_UNITS + (msb - 6) * BIN_SUBDIVISIONS + sub;
}

static inline bool cacheable(uint64_t units) { return units <= CACHE_MAX_UNITS; }

/* ---- the table of owned blocks (open addressing, backward-shift deletion) ----
 * At most an eighth full, like the arena's address index (arena.c says why: each step over
 * a neighbour is a branch the processor cannot predict); at half full, two threads on the
 * real logs ran 15-30% slower per operation. */

static inline uint64_t owned_home(const hbm__tcache_t *c, uint64_t addr) {
  return ((addr >> 8) * 0x9E3779B97F4A7C15ull >> 20) & c->owned_mask;
}

static owned_block_t *owned_find(const hbm__tcache_t *c, uint64_t addr) {
  if (!c->owned)
    return NULL;
  for (uint64_t i = owned_home(c, addr);; i = (i + 1) & c->owned_mask) {
    if (c->owned[i].addr == addr)
      return &c->owned[i];
    if (!c->owned[i].addr)
      return NULL;
  }
}

static void owned_place(hbm__tcache_t *c, const owned_block_t *b) {
  uint64_t i = owned_home(c, b->addr);
  while (c->owned[i].addr)
    i = (i + 1) & c->owned_mask;
  c->owned[i] = *b;
}

static bool owned_insert(hbm__tcache_t *c, const owned_block_t *b) {
  if (!c->owned || 8 * (c->owned_count + 1) > c->owned_mask + 1) {
    uint64_t cap = c->owned ? 2 * (c->owned_mask + 1) : 64;
    owned_block_t *old = c->owned;
    uint64_t old_cap = old ? c->owned_mask + 1 : 0;
    if (!(c->owned = calloc(cap, sizeof *c->owned))) {
      c->owned = old;
      return false;
    }
    c->owned_mask = cap - 1;
    for (uint64_t i = 0; i < old_cap; i++)
      if (old[i].addr)
        owned_place(c, &old[i]);
    free(old);
  }
  owned_place(c, b);
  c->owned_count++;
  return true;
}

static void owned_erase(hbm__tcache_t *c, owned_block_t *b) {
  uint64_t hole = (uint64_t)(b - c->owned);
  for (uint64_t i = (hole + 1) & c->owned_mask; c->owned[i].addr; i = (i + 1) & c->owned_mask) {
    uint64_t home = owned_home(c, c->owned[i].addr);
    bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (!stays) {
      c->owned[hole] = c->owned[i];
      hole = i;
    }
  }
  c->owned[hole].addr = 0;
  c->owned_count--;
}

/* ---- finding this thread's cache ---- */

static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;
static _Thread_local hbm__tcache_t *thread_caches; /* this thread's, newest first */
static _Thread_local hbm__tcache_t *last_used;

static void drop_ref(hbm__tcache_t *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) {
    for (unsigned k = 0; k < N_BINS; k++)
      free(c->bins[k].blocks);
    free(c->owned);
    free(c);
  }
}

/* At thread exit: the caches are marked dead (their devices reap them) and let go. */
static void thread_exit(void *head) {
  for (hbm__tcache_t *c = head, *next; c; c = next) {
    next = c->thread_next;
    spin_lock(&c->lock);
    c->dead = true;
    spin_unlock(&c->lock);
    drop_ref(c);
  }
}

static void make_thread_key(void) { pthread_key_create(&thread_key, thread_exit); }

/* Lets go of caches of closed devices that this thread still lists. */
static void forget_orphans(void) {
  for (hbm__tcache_t **p = &thread_caches; *p;) {
    hbm__tcache_t *c = *p;
    if (atomic_load_explicit(&c->orphan, memory_order_acquire)) {
      *p = c->thread_next;
      if (last_used == c)
        last_used = NULL;
      drop_ref(c);
    } else {
      p = &c->thread_next;
    }
  }
  pthread_setspecific(thread_key, thread_caches);
}

static hbm__tcache_t *find_cache_slow(hbm_device_t *dev) {
  for (hbm__tcache_t *c = thread_caches; c; c = c->thread_next)
    if (c->dev == dev && c->dev_uid == dev->uid)
      return last_used = c;
  return NULL;
}

/* The last cache used (inlined: every cached operation asks), else a search. */
static inline hbm__tcache_t *find_cache(hbm_device_t *dev) {
  hbm__tcache_t *c = last_used;
  if (HBM_LIKELY(c && c->dev == dev && c->dev_uid == dev->uid))
    return c;
  return find_cache_slow(dev);
}

/* A new cache for this thread, registered with the device. Under dev->lock. */
static hbm__tcache_t *create_cache(hbm_device_t *dev) {
  pthread_once(&thread_key_once, make_thread_key);
  forget_orphans();
  uint32_t slot = 0;
  while (slot < dev->n_caches && dev->caches[slot])
    slot++;
  if (slot == dev->caches_cap) {
    uint32_t cap = dev->caches_cap ? 2 * dev->caches_cap : 8;
    hbm__tcache_t **grown = realloc(dev->caches, cap * sizeof *grown);
    if (!grown)
      return NULL;
    memset(grown + dev->caches_cap, 0, (cap - dev->caches_cap) * sizeof *grown);
    dev->caches = grown;
    dev->caches_cap = cap;
  }
  hbm__tcache_t *c = calloc(1, sizeof *c);
  if (!c)
    return NULL;
  atomic_init(&c->refs, 2);
  c->budget = dev->limit / 3 > CACHE_BYTES ? dev->limit / 3 : CACHE_BYTES;
  c->dev = dev;
  c->dev_uid = dev->uid;
  c->slot = slot;
  dev->caches[slot] = c;
  if (slot == dev->n_caches)
    dev->n_caches++;
  c->thread_next = thread_caches;
  thread_caches = last_used = c;
  pthread_setspecific(thread_key, thread_caches);
  return c;
}

/* ---- the fast paths ---- */

bool hbm__tcache_alloc(hbm_device_t *dev, uint64_t size, uint64_t alignment, uint64_t *addr) {
  hbm__tcache_t *c = find_cache(dev);
  uint64_t units = (size + UNIT - 1) / UNIT;
  if (!c || !cacheable(units))
    return false;
  unsigned first = bin_of(units);
  spin_lock(&c->lock);
  if (HBM_UNLIKELY(hbm__rec_active())) { /* a capture started: the locked path records */
    spin_unlock(&c->lock);
    return false;
  }
  /* Its own bin (whose blocks may be a little smaller) or, above the exact sizes, the next. */
  for (unsigned k = first; k <= first + (first >= EXACT_UNITS) && k < N_BINS; k++) {
    bin_t *bin = &c->bins[k];
    for (uint32_t i = bin->n, end = i > BIN_SCAN ? i - BIN_SCAN : 0; i-- > end;) {
      cached_block_t b = bin->blocks[i];
      if (b.units < units || b.addr & (alignment - 1))
        continue;
      owned_block_t o = {.addr = b.addr, .handle = b.handle, .units = b.units, .requested = size};
      if (!owned_insert(c, &o))
        break;
      bin->blocks[i] = bin->blocks[--bin->n];
      c->cached -= (uint64_t)b.units * UNIT;
      atomic_store_explicit(&c->in_use,
                            atomic_load_explicit(&c->in_use, memory_order_relaxed) + (int64_t)size,
                            memory_order_relaxed);
      c->allocs++;
      spin_unlock(&c->lock);
      *addr = b.addr;
      return true;
    }
  }
  spin_unlock(&c->lock);
  return false;
}

/* Takes block o out of c's owned table (and its statistics). Under c->lock. */
static inline void forget_owned(hbm__tcache_t *c, owned_block_t *o) {
  uint64_t requested = o->requested;
  owned_erase(c, o);
  atomic_store_explicit(&c->in_use,
                        atomic_load_explicit(&c->in_use, memory_order_relaxed) - (int64_t)requested,
                        memory_order_relaxed);
  c->frees++;
}

/* Doubles a full bin's room (16 at first); false: out of host memory. */
static bool grow_bin(bin_t *bin) {
  uint32_t cap = bin->cap ? 2 * bin->cap : 16;
  cached_block_t *grown = realloc(bin->blocks, cap * sizeof *grown);
  if (!grown)
    return false;
  bin->blocks = grown;
  bin->cap = cap;
  return true;
}

/* Whether the bin may take a block of `bytes` (growing it if it is full). */
static inline bool has_room(hbm__tcache_t *c, bin_t *bin, uint64_t bytes) {
  if (c->cached + bytes > c->budget || bin->n >= BIN_CAPACITY)
    return false;
  return HBM_LIKELY(bin->n < bin->cap) || grow_bin(bin);
}

/* Makes room for a block of `bytes` in `bin` by taking blocks out of the bins (the largest
 * classes first, down to half the cache, and half of a full bin) into out[] (at most cap),
 * for the caller to give back to the arena under one lock. Under c->lock. */
static size_t evict(hbm__tcache_t *c, bin_t *bin, uint64_t bytes, cached_block_t *out, size_t cap) {
  size_t n = 0;
  while (bin->n > BIN_CAPACITY / 2 && n < cap) {
    out[n] = bin->blocks[--bin->n];
    c->cached -= (uint64_t)out[n++].units * UNIT;
  }
  for (unsigned k = N_BINS; k-- > 0 && c->cached + bytes > c->budget / 2 && n < cap;) {
    bin_t *b = &c->bins[k];
    while (b->n && c->cached + bytes > c->budget / 2 && n < cap) {
      out[n] = b->blocks[--b->n];
      c->cached -= (uint64_t)out[n++].units * UNIT;
    }
  }
  return n;
}

static void push(hbm__tcache_t *c, bin_t *bin, cached_block_t b) {
  bin->blocks[bin->n++] = b;
  c->cached += (uint64_t)b.units * UNIT;
}

static void release_all(hbm_device_t *dev, const cached_block_t *blocks, size_t n) {
  hbm__arena_t *arena = dev->strategy->arena;
  for (size_t i = 0; i < n; i++) {
    hbm__block_t b = {blocks[i].addr, (uint64_t)blocks[i].units * UNIT, blocks[i].handle};
    hbm__arena_release(arena, &b);
  }
}

#define EVICT_BATCH 64

bool hbm__tcache_free(hbm_device_t *dev, uint64_t addr) {
  hbm__tcache_t *c = find_cache(dev);
  if (!c)
    return false;
  spin_lock(&c->lock);
  owned_block_t *o = HBM_UNLIKELY(hbm__rec_active()) ? NULL : owned_find(c, addr);
  if (!o) { /* not ours, or a capture started: the locked path (which records) */
    spin_unlock(&c->lock);
    return false;
  }
  cached_block_t b = {addr, o->handle, o->units}, out[EVICT_BATCH + 1];
  forget_owned(c, o);
  bin_t *bin = &c->bins[bin_of(b.units)];
  size_t n = has_room(c, bin, (uint64_t)b.units * UNIT)
                 ? 0
                 : evict(c, bin, (uint64_t)b.units * UNIT, out, EVICT_BATCH);
  if (has_room(c, bin, (uint64_t)b.units * UNIT))
    push(c, bin, b);
  else
    out[n++] = b;
  spin_unlock(&c->lock);
  if (n) { /* what no longer fits goes back to the arena, in one visit */
    hbm__devlock_lock(&dev->lock);
    release_all(dev, out, n);
    hbm__devlock_unlock(&dev->lock);
  }
  return true;
}

/* ---- under the device's lock ---- */

static hbm__tcache_t *cache_of_mark(hbm_device_t *dev, uint32_t mark) {
  uint32_t slot = mark & ~HBM__CACHE_MARK;
  return slot < dev->n_caches ? dev->caches[slot] : NULL;
}

bool hbm__tcache_give_back(hbm_device_t *dev, uint32_t mark, uint64_t addr, uint64_t *requested) {
  hbm__tcache_t *c = cache_of_mark(dev, mark);
  if (!c)
    return false;
  spin_lock(&c->lock);
  owned_block_t *o = owned_find(c, addr);
  if (o) {
    *requested = o->requested;
    forget_owned(c, o);
  }
  spin_unlock(&c->lock);
  return o != NULL;
}

bool hbm__tcache_find(hbm_device_t *dev, uint32_t mark, uint64_t addr, uint64_t *requested) {
  hbm__tcache_t *c = cache_of_mark(dev, mark);
  if (!c)
    return false;
  spin_lock(&c->lock);
  const owned_block_t *o = owned_find(c, addr);
  if (o)
    *requested = o->requested;
  spin_unlock(&c->lock);
  return o != NULL;
}

bool hbm__tcache_keep(hbm_device_t *dev, const hbm__block_t *b) {
  uint64_t units = b->allocated / UNIT;
  if (!cacheable(units))
    return false;
  hbm__tcache_t *c = find_cache(dev);
  if (!c && !(c = create_cache(dev)))
    return false;
  bin_t *bin = &c->bins[bin_of(units)];
  cached_block_t out[EVICT_BATCH];
  spin_lock(&c->lock);
  size_t n = has_room(c, bin, b->allocated) ? 0 : evict(c, bin, b->allocated, out, EVICT_BATCH);
  bool kept = has_room(c, bin, b->allocated);
  if (kept)
    push(c, bin, (cached_block_t){b->addr, (uint32_t)b->handle, (uint32_t)units});
  spin_unlock(&c->lock);
  release_all(dev, out, n); /* the caller holds the device's lock */
  if (kept)
    hbm__arena_set_tag(dev->strategy->arena, (uint32_t)b->handle, HBM__CACHE_MARK | c->slot);
  return kept;
}

static void empty_bins(hbm_device_t *dev, hbm__tcache_t *c) {
  hbm__arena_t *arena = dev->strategy->arena;
  for (unsigned k = 0; k < N_BINS; k++) {
    bin_t *bin = &c->bins[k];
    for (uint32_t i = 0; i < bin->n; i++) {
      const cached_block_t *cb = &bin->blocks[i];
      hbm__block_t b = {cb->addr, (uint64_t)cb->units * UNIT, cb->handle};
      hbm__arena_release(arena, &b);
    }
    bin->n = 0;
  }
  c->cached = 0;
}

/* A cache whose thread exited: its live blocks become the device's own. */
static void adopt(hbm_device_t *dev, hbm__tcache_t *c) {
  for (uint64_t i = 0; c->owned && i <= c->owned_mask; i++) {
    const owned_block_t *o = &c->owned[i];
    if (o->addr)
      hbm__arena_set_user(dev->strategy->arena, o->handle, o->requested, 0);
  }
  dev->in_use += (uint64_t)atomic_load_explicit(&c->in_use, memory_order_relaxed);
  dev->num_allocs += c->allocs;
  dev->num_frees += c->frees;
  dev->num_live += c->owned_count;
}

void hbm__tcache_drain(hbm_device_t *dev) {
  for (uint32_t k = 0; k < dev->n_caches; k++) {
    hbm__tcache_t *c = dev->caches[k];
    if (!c)
      continue;
    spin_lock(&c->lock);
    empty_bins(dev, c);
    bool dead = c->dead;
    if (dead)
      adopt(dev, c);
    spin_unlock(&c->lock);
    if (dead) {
      dev->caches[k] = NULL;
      drop_ref(c);
    }
  }
}

void hbm__tcache_totals(hbm_device_t *dev, hbm__tcache_totals_t *out) {
  memset(out, 0, sizeof *out);
  for (uint32_t k = 0; k < dev->n_caches; k++) {
    hbm__tcache_t *c = dev->caches[k];
    if (!c)
      continue;
    spin_lock(&c->lock);
    out->in_use += atomic_load_explicit(&c->in_use, memory_order_relaxed);
    out->allocs += c->allocs;
    out->frees += c->frees;
    out->live += c->owned_count;
    spin_unlock(&c->lock);
  }
}

int64_t hbm__tcache_in_use(hbm_device_t *dev) {
  int64_t sum = 0;
  for (uint32_t k = 0; k < dev->n_caches; k++)
    if (dev->caches[k])
      sum += atomic_load_explicit(&dev->caches[k]->in_use, memory_order_relaxed);
  return sum;
}

size_t hbm__tcache_records(hbm_device_t *dev, hbm__record_t *out, size_t cap) {
  size_t n = 0;
  for (uint32_t k = 0; k < dev->n_caches; k++) {
    hbm__tcache_t *c = dev->caches[k];
    if (!c)
      continue;
    spin_lock(&c->lock);
    for (uint64_t i = 0; c->owned && i <= c->owned_mask && n < cap; i++) {
      const owned_block_t *o = &c->owned[i];
      if (o->addr)
        out[n++] =
            (hbm__record_t){{o->addr, (uint64_t)o->units * UNIT, o->handle}, o->requested, 0};
    }
    spin_unlock(&c->lock);
  }
  return n;
}

void hbm__tcache_close(hbm_device_t *dev) {
  for (uint32_t k = 0; k < dev->n_caches; k++) {
    hbm__tcache_t *c = dev->caches[k];
    if (!c)
      continue;
    atomic_store_explicit(&c->orphan, 1, memory_order_release);
    drop_ref(c);
  }
  free(dev->caches);
  dev->caches = NULL;
  dev->n_caches = dev->caches_cap = 0;
}
