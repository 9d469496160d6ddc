/* expandable.c — the "expandable" strategy (HBM_EXPANDABLE=1), hbm's own mode: one large
 * virtual address range reserved once, sub-allocated by the best-fit arena (arena.c) as if it
 * were memory, and backed by physical memory only where live blocks are: in granules (2 MiB)
 * mapped the moment a block first covers them and unmapped the moment no block covers them.
 *
 * What it buys: fragmentation of physical memory disappears. A preallocated arena can fail
 * with enough bytes free in holes too small for a request; here a request only needs free
 * *address space* (the range is several times the limit, so there is plenty) plus physical
 * granules, which need not be contiguous. The physical peak is the peak of live bytes plus
 * the part-used granules at the edges of blocks (1.00-1.02x on the real logs), and memory
 * goes back to the device as soon as the peak has passed. The limit bounds mapped memory.
 *
 * On the sim device a granule is 2 MiB of a memfd file mapped MAP_FIXED|MAP_SHARED into the
 * range; on CUDA, cuMemCreate + cuMemMap + cuMemSetAccess / cuMemUnmap + cuMemRelease (the
 * device layer, device.h, does either). The granules an allocation lacks are mapped
 * together: one physical allocation and one mapping for each stretch of them (a block of
 * 100 granules costs one cuMemCreate, one cuMemMap, one cuMemSetAccess, not 100 of each).
 * A granule's use count is the number of used chunks that overlap it.
 *
 * Runs. What was mapped together can be given back in pieces only where the device allows
 * (vm_granules_divisible: the sim device, whose physical memory is file pages); there every
 * granule is a run of its own. On CUDA cuMemUnmap takes only a whole mapping and
 * cuMemRelease a whole handle, so the granules mapped together form one run, given back
 * whole (one cuMemUnmap, one cuMemRelease) once none of them is used; the cache below holds
 * and evicts whole runs. The cost is memory: a free granule of a run that a neighbouring
 * block still uses stays mapped, counts against the limit, and cannot be evicted. On the
 * shared logs this never raised the peak mapped (blocks come back to the holes they left,
 * runs are freed whole), and it cut the driver calls per operation to about a third of
 * what one handle per granule took (BENCHMARKS.md, "Expandable"). HBM_SIM_VM_GRANULES=whole gives
 * the sim device CUDA's rules, to test and measure this without a GPU.
 *
 * Mapping is a system call (sim) or a driver call (CUDA), the dominant cost of this mode;
 * recently freed granules therefore stay mapped (a cache): a block that comes back to the
 * same addresses — the common case, best fit reuses the same holes — then costs no call at
 * all. The cache always may hold CACHE_BYTES; beyond that it holds granules freed within the
 * last RECENT_OPS operations (allocations and frees of this device), and only up to a
 * little above the most granules in use so far (OVER_PEAK, at most an eighth of that peak):
 * before new granules would pass that, the cache gives back its oldest granules, EVICT_EXTRA
 * more than needed so that the next few mappings need no unmap call. So mapped memory never
 * passes the peak of granules in use by more than OVER_PEAK (plus, with whole runs, the
 * free granules of runs still in use); after a peak, memory goes back
 * once RECENT_OPS more operations have passed (or at hbm_trim), and a program that repeats
 * its steps finds last step's granules still mapped. On the GPT logs, whose blocks are tens to
 * hundreds of MiB, a 32 MiB cache missed almost every time (about one map or unmap call per
 * two operations, 600-1900 ns per operation); a cache held exactly to the peak still cost
 * 180-380 ns per operation on three of them (each pass touches more granules than the peak
 * holds), the 48 MiB above it and the extra 16 MiB given back at once 40-120 ns.
 * hbm_trim() unmaps the cache, and so does any allocation that would otherwise pass the
 * limit (only whole free runs can go: the limit counts the rest as held).
 *
 * Mode learn (step_serve.c) uses this strategy as its memory underneath, made "tight": the
 * range is the limit itself, so the arena places blocks exactly as bfc's preallocated region
 * would (same region size, same rules), and the cache holds at most 1/128 of the granules in
 * use (what is reserved then follows what is live); the plan holds its span of the range in
 * the arena and maps the granules its blocks use with hbm__expandable_back. */
#include "alloc/alloc.h"

#include <stdlib.h>
#include <string.h>

#define UNIT HBM__MIN_BLOCK
/* Free granules always allowed to stay mapped (the budget for them is 64 MiB over
 * 1.01x the peak); more while they fit under the peak (cache_room). */
#define CACHE_BYTES (32ull << 20)
/* How far above the most granules in use so far the cache may keep mapped memory (and
 * never more than an eighth of that peak): the budget is 1.01x the peak live + 64
 * MiB, and the granules in use peak at 1.00-1.02x the peak live on the shared logs. */
#define OVER_PEAK (48ull << 20)
/* When the cache must give back granules for new ones, it gives back this much more. */
#define EVICT_EXTRA (16ull << 20)
/* Beyond CACHE_BYTES, freed granules stay mapped this many operations. */
#define RECENT_OPS (1ull << 16)
/* The range: this many times the limit, or less when the address space will not have it. */
static const unsigned range_factors[] = {4, 2, 1};

/* A run is granules that are unmapped together, one device call each for the unmap and the
 * release: on a device whose granules are divisible every granule is a run of its own (and
 * neighbours still go in one call, see joins); elsewhere (CUDA) the granules that one
 * mapping created, since only that whole mapping can be unmapped. Fields marked (run) are
 * kept in the run's first granule. */
typedef struct granule {
  uint32_t users;   /* used chunks overlapping it */
  uint32_t run_off; /* how many granules its run's first granule lies before it */
  uint32_t run_len; /* (run) granules in the run */
  uint32_t busy;    /* (run) granules of the run with users */
  uint32_t seq;     /* (run) which of its queue entries is current (see queued) */
  bool mapped;      /* backed by `phys` */
  bool queued;      /* (run) free, mapped, and in the queue with sequence number `seq` */
  bool fresh;       /* mapped by the allocation in progress (undone if it fails) */
  hbm__phys_t phys; /* divisible: this granule's own; else the run's physical allocation */
} granule_t;

typedef struct queued {
  uint64_t granule;  /* the first of a run */
  uint64_t freed_at; /* the operation count when it was freed */
  uint32_t seq;
} queued_t;

typedef struct expandable {
  hbm__strategy_t base;
  hbm__arena_t *arena;
  uint64_t gran;  /* the device's granularity */
  uint64_t range; /* base of the reserved range, 0 until the first allocation */
  uint64_t range_size;
  granule_t *granules;
  uint64_t n_granules;
  uint64_t mapped; /* bytes mapped now */
  uint64_t peak_mapped;
  uint64_t in_use;      /* bytes of granules with users */
  uint64_t ops;         /* allocations and frees so far (the cache's clock) */
  uint64_t peak_in_use; /* the most bytes of granules in use so far */
  /* free but still mapped runs, oldest first: a ring whose stale entries (the run was used
   * again since) are skipped, and dropped when it fills up */
  queued_t *queue;
  uint64_t queue_head, queue_len;
  uint64_t cached;   /* bytes of free mapped runs: what the cache can give back */
  uint64_t *evicted; /* scratch: runs being unmapped together */
  bool tight;        /* mode learn's memory: range = limit, cache <= 1/128 of what is in use */
} expandable_t;

static expandable_t *exp_of(hbm__strategy_t *s) { return (expandable_t *)s; }

static void report(expandable_t *e, hbm_reserve_op_t op, uint64_t g, uint64_t n) {
  hbm__strategy_env_t *env = &e->base.env;
  if (env->on_reserve)
    env->on_reserve(env->ctx, op, e->range + g * e->gran, n * e->gran);
}

static void *granule_addr(const expandable_t *e, uint64_t g) {
  return (void *)(uintptr_t)(e->range + g * e->gran);
}

/* ---- the range ---- */

/* Reserves the range and sets up the arena over it, at the first allocation. */
static hbm_status_t reserve_range(expandable_t *e, hbm__failure_t *why) {
  hbm__device_t *d = e->base.env.device;
  uint64_t limit = hbm__round_up_sat(e->base.env.limit, e->gran);
  hbm_status_t st = HBM_ERR_NO_MEMORY;
  void *base = NULL;
  for (size_t i = e->tight ? HBM_ARRAY_LEN(range_factors) - 1 : 0;
       i < HBM_ARRAY_LEN(range_factors) && st != HBM_OK; i++) {
    if (limit > UINT64_MAX / range_factors[i])
      continue;
    e->range_size = limit * range_factors[i];
    st = hbm__device_va_reserve(d, e->range_size, &base);
  }
  if (st != HBM_OK) {
    why->kind = HBM__FAIL_DEVICE;
    why->device_request = limit;
    snprintf(why->detail, sizeof why->detail, "reserving an address range: %s", hbm_last_error());
    return HBM_ERR_NO_MEMORY;
  }
  e->n_granules = e->range_size / e->gran;
  e->granules = calloc(e->n_granules, sizeof *e->granules);
  e->queue = malloc(e->n_granules * sizeof *e->queue);
  e->evicted = malloc(e->n_granules * sizeof *e->evicted);
  st = e->granules && e->queue && e->evicted
           ? HBM_OK
           : hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the expandable allocator");
  if (st == HBM_OK) /* tight: the region is the limit, byte for byte, as bfc's */
    st = hbm__arena_add_region(e->arena, (uint64_t)(uintptr_t)base,
                               e->tight ? e->base.env.limit : e->range_size, 0);
  if (st != HBM_OK) {
    hbm__device_va_release(d, base, e->range_size);
    why->kind = HBM__FAIL_HOST;
    return st;
  }
  e->range = (uint64_t)(uintptr_t)base;
  return HBM_OK;
}

/* ---- granules and runs ---- */

static uint64_t run_of(const expandable_t *e, uint64_t g) { return g - e->granules[g].run_off; }

static uint64_t run_bytes(const expandable_t *e, uint64_t run) {
  return e->granules[run].run_len * e->gran;
}

/* Runs `prev` and `g` (first granules) can go in one unmap and one release: neighbours, on
 * a divisible device, consecutive in physical memory too. */
static bool joins(const expandable_t *e, uint64_t prev, uint64_t g) {
  return e->base.env.device->vm_granules_divisible && g == prev + 1 &&
         e->granules[g].phys == e->granules[prev].phys + e->gran;
}

/* Unmaps [g, g + n) (whole runs) and releases its physical memory: one call each. When the
 * device refuses the unmap, the granules stay mapped and counted (free runs outside the
 * cache until used again): memory must never be released while mapped. */
static void unmap_span(expandable_t *e, uint64_t g, uint64_t n) {
  hbm__device_t *d = e->base.env.device;
  if (hbm__device_unmap(d, granule_addr(e, g), n * e->gran) != HBM_OK)
    return;
  hbm__device_phys_release(d, e->granules[g].phys, n * e->gran);
  for (uint64_t i = g; i < g + n; i++)
    e->granules[i].mapped = false;
  e->mapped -= n * e->gran;
  report(e, HBM_RESERVE_UNMAP, g, n);
}

static int compare_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}

/* Unmaps the free runs whose first granules are runs[0..n), in address order, joined where
 * the device allows. */
static void unmap_all(expandable_t *e, uint64_t *runs, uint64_t n) {
  if (n == 0) /* runs may then be NULL, which qsort must not get */
    return;
  qsort(runs, n, sizeof *runs, compare_u64);
  for (uint64_t i = 0, start = 0; i < n; i++)
    if (i + 1 == n || !joins(e, runs[i], runs[i + 1])) {
      unmap_span(e, runs[start], runs[i] + e->granules[runs[i]].run_len - runs[start]);
      start = i + 1;
    }
}

static bool is_current(const expandable_t *e, queued_t q) {
  return e->granules[q.granule].queued && e->granules[q.granule].seq == q.seq;
}

/* Takes the free run `run` out of the cache to be unmapped. */
static void evict(expandable_t *e, uint64_t run, uint64_t *n) {
  e->granules[run].queued = false;
  e->cached -= run_bytes(e, run);
  e->evicted[(*n)++] = run;
}

/* Unmaps free cached runs, oldest first, until at most `keep` bytes stay cached; the ones
 * going together are unmapped together. */
static void shrink_cache(expandable_t *e, uint64_t keep) {
  uint64_t n = 0;
  while (e->cached > keep && e->queue_len) {
    queued_t q = e->queue[e->queue_head];
    e->queue_head = (e->queue_head + 1) % e->n_granules;
    e->queue_len--;
    if (is_current(e, q))
      evict(e, q.granule, &n);
  }
  unmap_all(e, e->evicted, n);
}

/* Drops the stale entries of a full queue (each run has at most one current entry, so what
 * remains is far from full). */
static void compact_queue(expandable_t *e) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < e->queue_len; i++) {
    queued_t q = e->queue[(e->queue_head + i) % e->n_granules];
    if (is_current(e, q))
      e->queue[(e->queue_head + n++) % e->n_granules] = q;
  }
  e->queue_len = n;
}

static void enqueue(expandable_t *e, uint64_t run) {
  if (e->queue_len == e->n_granules)
    compact_queue(e);
  granule_t *gr = &e->granules[run];
  gr->queued = true;
  e->queue[(e->queue_head + e->queue_len++) % e->n_granules] = (queued_t){run, e->ops, ++gr->seq};
}

static hbm_status_t device_refused(hbm__failure_t *why, uint64_t bytes) {
  why->kind = HBM__FAIL_DEVICE;
  why->device_request = bytes;
  snprintf(why->detail, sizeof why->detail, "%s", hbm_last_error());
  return HBM_ERR_NO_MEMORY;
}

/* Granules [g, g + n) are now mapped to `phys`: on a divisible device n runs of one granule
 * (granule i at phys + i granules), else one run. Sequence numbers live on: the queue may
 * still hold stale entries with older ones. */
static void set_mapped(expandable_t *e, uint64_t g, uint64_t n, hbm__phys_t phys) {
  bool divisible = e->base.env.device->vm_granules_divisible;
  for (uint64_t i = 0; i < n; i++) {
    granule_t *gr = &e->granules[g + i];
    *gr = (granule_t){.seq = gr->seq, .mapped = true, .fresh = true};
    gr->phys = divisible ? phys + i * e->gran : phys;
    gr->run_off = divisible ? 0 : (uint32_t)i;
    gr->run_len = divisible ? 1 : (uint32_t)n;
  }
  e->mapped += n * e->gran;
  report(e, HBM_RESERVE_MAP, g, n);
}

/* Backs granules [g, g + n) (none mapped) with new physical memory: one allocation and one
 * mapping for the whole stretch, or, where the device has no n granules in one piece, one
 * per granule. */
static hbm_status_t map_run(expandable_t *e, uint64_t g, uint64_t n, hbm__failure_t *why) {
  hbm__device_t *d = e->base.env.device;
  hbm__phys_t phys;
  if (n > 1 && hbm__device_phys_create(d, n * e->gran, &phys) == HBM_OK) {
    if (hbm__device_map(d, granule_addr(e, g), n * e->gran, phys, 0) != HBM_OK) {
      hbm__device_phys_release(d, phys, n * e->gran);
      return device_refused(why, n * e->gran);
    }
    set_mapped(e, g, n, phys);
    return HBM_OK;
  }
  for (uint64_t i = g; i < g + n; i++) {
    if (hbm__device_phys_create(d, e->gran, &phys) != HBM_OK)
      return device_refused(why, e->gran);
    if (hbm__device_map(d, granule_addr(e, i), e->gran, phys, 0) != HBM_OK) {
      hbm__device_phys_release(d, phys, e->gran);
      return device_refused(why, e->gran);
    }
    set_mapped(e, i, 1, phys);
  }
  return HBM_OK;
}

/* What the cache may hold above the peak of granules in use (whole granules). */
static uint64_t over_peak(const expandable_t *e) {
  if (e->tight)
    return 0;
  uint64_t room = e->peak_in_use / 8 < OVER_PEAK ? e->peak_in_use / 8 : OVER_PEAK;
  return room / e->gran * e->gran;
}

static uint64_t unmapped_in(const expandable_t *e, uint64_t first, uint64_t last) {
  uint64_t n = 0;
  for (uint64_t g = first; g <= last; g++)
    n += !e->granules[g].mapped;
  return n;
}

/* A request over the limit. With whole runs, part of what counts may be free granules of
 * runs a neighbouring block still uses: the diagnosis says how much, since the blocks in use
 * alone do not explain the failure. */
static hbm_status_t over_limit(expandable_t *e, hbm__failure_t *why) {
  why->kind = HBM__FAIL_LIMIT;
  uint64_t pinned_free = e->mapped - e->cached - e->in_use;
  if (pinned_free) {
    char bytes[32];
    snprintf(why->detail, sizeof why->detail,
             "Of what counts as in use, %s are free granules that stay mapped: a mapping on "
             "this device is unmapped only whole, and blocks still use other parts of theirs.",
             hbm_format_bytes(pinned_free, bytes, sizeof bytes));
  }
  return HBM_ERR_NO_MEMORY;
}

/* Maps what [first, last] lacks, within the limit (giving back cached granules first if
 * needed). On failure nothing this call mapped stays mapped. */
static hbm_status_t map_granules(expandable_t *e, uint64_t first, uint64_t last,
                                 hbm__failure_t *why) {
  /* tight: the arena's region is the limit, so what is placed respects it; its last granule
   * may be a part one, mapped whole */
  uint64_t limit = e->tight ? hbm__round_up_sat(e->base.env.limit, e->gran) : e->base.env.limit;
  uint64_t need = unmapped_in(e, first, last) * e->gran;
  /* New granules would take mapped memory past OVER_PEAK above the peak in use: the cache
   * gives back what lies above it first (and EVICT_EXTRA more). Giving back may take
   * granules of this block, which then count in `need`: hence the loop. */
  for (;;) {
    uint64_t allowed = e->peak_in_use + over_peak(e);
    if (e->in_use + need > allowed)
      allowed = e->in_use + need;
    if (!need || !e->cached || e->mapped + need <= allowed)
      break;
    uint64_t over = e->mapped + need - allowed + EVICT_EXTRA;
    shrink_cache(e, e->cached > over ? e->cached - over : 0);
    need = unmapped_in(e, first, last) * e->gran;
  }
  if (e->mapped + need > limit) {
    shrink_cache(e, 0);
    need = unmapped_in(e, first, last) * e->gran;
  }
  if (e->mapped + need > limit)
    return over_limit(e, why);
  hbm_status_t st = HBM_OK;
  for (uint64_t g = first; g <= last && st == HBM_OK;) {
    uint64_t end = g;
    while (end <= last && !e->granules[end].mapped)
      end++;
    if (end > g)
      st = map_run(e, g, end - g, why);
    g = end + 1;
  }
  uint64_t n = 0; /* on failure, the runs this call mapped (they lie inside [first, last]) */
  for (uint64_t g = first; g <= last; g++) {
    if (st != HBM_OK && e->granules[g].fresh && !e->granules[g].run_off)
      e->evicted[n++] = g;
    e->granules[g].fresh = false;
  }
  if (n)
    unmap_all(e, e->evicted, n);
  if (e->mapped > e->peak_mapped)
    e->peak_mapped = e->mapped;
  return st;
}

static void granules_of(const expandable_t *e, const hbm__block_t *b, uint64_t *first,
                        uint64_t *last) {
  *first = (b->addr - e->range) / e->gran;
  *last = (b->addr + b->allocated - 1 - e->range) / e->gran;
}

/* The block [first, last] now uses its granules (all mapped); a run that was free leaves
 * the cache (its queue entry goes stale). */
static void use_granules(expandable_t *e, uint64_t first, uint64_t last) {
  for (uint64_t g = first; g <= last; g++) {
    if (e->granules[g].users++)
      continue;
    e->in_use += e->gran;
    granule_t *run = &e->granules[run_of(e, g)];
    if (run->busy++ == 0 && run->queued) {
      run->queued = false;
      e->cached -= run->run_len * e->gran;
    }
  }
  if (e->in_use > e->peak_in_use)
    e->peak_in_use = e->in_use;
}

/* Gives back cached runs freed more than RECENT_OPS operations ago, oldest first, while the
 * cache holds more than CACHE_BYTES. */
static void expire_cache(expandable_t *e) {
  if (e->tight) { /* at most 1/128 of what is in use, recent or not */
    uint64_t keep = e->in_use / 128 / e->gran * e->gran;
    if (e->cached > keep)
      shrink_cache(e, keep);
    return;
  }
  uint64_t n = 0;
  while (e->cached > CACHE_BYTES && e->queue_len) {
    queued_t q = e->queue[e->queue_head];
    bool current = is_current(e, q);
    if (current && e->ops - q.freed_at < RECENT_OPS)
      break;
    e->queue_head = (e->queue_head + 1) % e->n_granules;
    e->queue_len--;
    if (current)
      evict(e, q.granule, &n);
  }
  unmap_all(e, e->evicted, n);
}

/* The block [first, last] is gone: runs left without users go to the cache. */
static void release_granules(expandable_t *e, uint64_t first, uint64_t last) {
  for (uint64_t g = first; g <= last; g++) {
    if (--e->granules[g].users)
      continue;
    e->in_use -= e->gran;
    uint64_t run = run_of(e, g);
    if (--e->granules[run].busy)
      continue;
    e->cached += run_bytes(e, run);
    enqueue(e, run);
  }
  expire_cache(e);
}

/* ---- the strategy ---- */

static hbm_status_t exp_alloc(hbm__strategy_t *s, uint64_t size, uint64_t alignment,
                              hbm_stream_t *stream, hbm__block_t *out, hbm__failure_t *why) {
  expandable_t *e = exp_of(s);
  (void)stream;
  e->ops++;
  if (size > s->env.limit) {
    why->kind = HBM__FAIL_LIMIT;
    return HBM_ERR_NO_MEMORY;
  }
  hbm_status_t st = e->range ? HBM_OK : reserve_range(e, why);
  if (st != HBM_OK)
    return st;
  st = hbm__arena_alloc(e->arena, size, alignment, out);
  if (st != HBM_OK) {
    why->kind = st == HBM_ERR_NO_MEMORY ? HBM__FAIL_LIMIT : HBM__FAIL_HOST;
    return st;
  }
  uint64_t first, last;
  granules_of(e, out, &first, &last);
  if ((st = map_granules(e, first, last, why)) != HBM_OK) {
    hbm__arena_release(e->arena, out);
    return st;
  }
  use_granules(e, first, last);
  return HBM_OK;
}

static void exp_free(hbm__strategy_t *s, const hbm__block_t *b, hbm_stream_t *stream,
                     bool ordered) {
  expandable_t *e = exp_of(s);
  (void)stream, (void)ordered;
  e->ops++;
  uint64_t first, last;
  granules_of(e, b, &first, &last);
  hbm__arena_release(e->arena, b);
  release_granules(e, first, last);
}

static void exp_stats(hbm__strategy_t *s, hbm__strategy_stats_t *out) {
  expandable_t *e = exp_of(s);
  memset(out, 0, sizeof *out);
  out->reserved = e->mapped;
  out->peak_reserved = e->peak_mapped;
  /* What counts against the limit is mapped memory the cache cannot give back: granules in
   * use and (whole runs) the free granules of runs still in use. A request fits when the
   * granules it needs fit; free address space is never what is short. */
  out->allocated = e->mapped - e->cached;
  out->free_bytes = e->cached;
  uint64_t limit = s->env.limit, room = limit > out->allocated ? limit - out->allocated : 0;
  uint64_t largest = e->range ? hbm__arena_largest_free(e->arena) : limit;
  out->largest_free = (room < largest ? room : largest) / UNIT * UNIT;
}

static hbm_status_t exp_walk(hbm__strategy_t *s, int (*fn)(const hbm__chunk_info_t *, void *),
                             void *ctx) {
  return hbm__arena_walk(exp_of(s)->arena, fn, ctx);
}

static hbm_status_t exp_trim(hbm__strategy_t *s) {
  shrink_cache(exp_of(s), 0);
  return HBM_OK;
}

static uint64_t exp_largest_free(hbm__strategy_t *s) {
  hbm__strategy_stats_t st;
  exp_stats(s, &st);
  return st.largest_free;
}

static void exp_destroy(hbm__strategy_t *s) {
  expandable_t *e = exp_of(s);
  uint64_t n = 0;
  for (uint64_t g = 0; g < e->n_granules; g++)
    if (e->granules[g].mapped && !e->granules[g].run_off)
      e->evicted[n++] = g;
  unmap_all(e, e->evicted, n);
  if (e->range)
    hbm__device_va_release(s->env.device, (void *)(uintptr_t)e->range, e->range_size);
  hbm__arena_delete(e->arena);
  free(e->granules);
  free(e->queue);
  free(e->evicted);
  free(e);
}

static const hbm__strategy_ops_t exp_ops = {
    .name = "expandable",
    .alloc = exp_alloc,
    .free = exp_free,
    .stats = exp_stats,
    .walk = exp_walk,
    .trim = exp_trim,
    .largest_free = exp_largest_free,
    .destroy = exp_destroy,
};

hbm_status_t hbm__expandable_create(const hbm__strategy_env_t *env, hbm__strategy_t **out) {
  expandable_t *e = calloc(1, sizeof *e);
  if (!e)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the expandable allocator");
  e->arena = hbm__arena_new(false);
  if (!e->arena) {
    free(e);
    return HBM_ERR_HOST_MEMORY;
  }
  e->base.ops = &exp_ops;
  e->base.env = *env;
  e->gran = env->device->granularity;
  *out = &e->base;
  return HBM_OK;
}

/* ---- mode learn's memory (step_serve.c) ---- */

hbm_status_t hbm__expandable_create_tight(const hbm__strategy_env_t *env, hbm__strategy_t **out) {
  hbm_status_t st = hbm__expandable_create(env, out);
  if (st == HBM_OK)
    exp_of(*out)->tight = true;
  return st;
}

hbm__arena_t *hbm__expandable_arena(hbm__strategy_t *s) { return exp_of(s)->arena; }

uint64_t hbm__expandable_base(hbm__strategy_t *s) { return exp_of(s)->range; }

/* The granules that [lo, hi) touches get one user more (the plan of mode learn backs its
 * blocks this way: its span is held in the arena as used blocks that map nothing, and memory
 * comes behind the parts of it that blocks use); those without users are mapped first. */
hbm_status_t hbm__expandable_back(hbm__strategy_t *s, uint64_t lo, uint64_t hi,
                                  hbm__failure_t *why) {
  expandable_t *e = exp_of(s);
  hbm__block_t b = {lo, hi - lo, 0};
  uint64_t first, last;
  granules_of(e, &b, &first, &last);
  hbm_status_t st = map_granules(e, first, last, why);
  if (st == HBM_OK)
    use_granules(e, first, last);
  return st;
}

/* ... one user less: a granule left without users goes to the cache. */
void hbm__expandable_unback(hbm__strategy_t *s, uint64_t lo, uint64_t hi) {
  expandable_t *e = exp_of(s);
  hbm__block_t b = {lo, hi - lo, 0};
  uint64_t first, last;
  granules_of(e, &b, &first, &last);
  e->ops++;
  release_granules(e, first, last);
}

uint64_t hbm__expandable_granule(hbm__strategy_t *s) { return exp_of(s)->gran; }
