/* async_pool.c — the "async" strategy (TF_GPU_ALLOCATOR=cuda_malloc_async or
 * XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async): a memory pool that grows on demand with
 * cudaMallocAsync's stream semantics. Memory freed on a stream is reusable at once by
 * allocations on that same stream (the stream runs in order, so they cannot overlap its
 * earlier use) but by other streams only after the freeing stream was synchronized.
 * TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC=N fills the pool with N bytes at the first
 * allocation (-1: the limit, what the default mode would take). The pool keeps what it
 * grew to (TensorFlow sets the release threshold to the limit); hbm_trim gives free
 * segments back.
 *
 * On CUDA the pool is a real cuMemPool (device ops pool_*). Elsewhere it is built here on
 * the BFC arena: segments taken from the device as growth mode does, and per stream a list
 * of blocks freed on it and not yet synchronized. Those blocks stay "in use" in the arena
 * until the stream synchronizes, so no other stream can be handed them; the stream itself
 * reuses them first (best fit, splitting off what it does not need). */
#include "alloc/alloc.h"

#include <stdlib.h>
#include <string.h>

#define FIRST_SEGMENT (2ull << 20)

typedef struct stream_frees {
  uint64_t stream_id;
  hbm__block_t *blocks;
  size_t n, cap;
  uint64_t bytes;
} stream_frees_t;

typedef struct async_pool {
  hbm__strategy_t base;
  bool prefilled;
  uint64_t peak_reserved;
  /* host-side pool */
  hbm__arena_t *arena;
  uint64_t next_segment;
  stream_frees_t *streams; /* one per stream with pending frees */
  size_t n_streams, cap_streams;
  uint64_t pending;
  /* native pool (CUDA) */
  void *native;
  hbm_u64map_t native_live;    /* address → bytes */
  hbm_u64map_t native_aligned; /* address → the driver's pointer, when they differ */
  hbm_u64map_t native_stream;  /* address → the stream it was allocated on (not NULL) */
  uint64_t native_allocated;
} async_pool_t;

static async_pool_t *pool_of(hbm__strategy_t *s) { return (async_pool_t *)s; }

static void refused(hbm__failure_t *why, hbm__failure_kind_t kind, uint64_t bytes) {
  why->kind = kind;
  why->device_request = bytes;
  snprintf(why->detail, sizeof why->detail, "%s", hbm_last_error());
}

static uint64_t prefill_bytes(const async_pool_t *p) {
  int64_t n = p->base.env.cfg->async_prealloc;
  uint64_t limit = p->base.env.limit;
  uint64_t bytes = n < 0 ? limit : (uint64_t)n < limit ? (uint64_t)n : limit;
  return bytes / HBM__MIN_BLOCK * HBM__MIN_BLOCK;
}

/* ---- the host-side pool ---- */

static stream_frees_t *frees_of(async_pool_t *p, uint64_t stream_id, bool create) {
  for (size_t i = 0; i < p->n_streams; i++)
    if (p->streams[i].stream_id == stream_id)
      return &p->streams[i];
  if (!create)
    return NULL;
  if (p->n_streams == p->cap_streams) {
    size_t cap = p->cap_streams ? p->cap_streams * 2 : 4;
    stream_frees_t *grown = realloc(p->streams, cap * sizeof *grown);
    if (!grown)
      return NULL;
    p->streams = grown;
    p->cap_streams = cap;
  }
  stream_frees_t *f = &p->streams[p->n_streams++];
  memset(f, 0, sizeof *f);
  f->stream_id = stream_id;
  return f;
}

static hbm_status_t add_segment(async_pool_t *p, uint64_t size, hbm_reserve_op_t op,
                                hbm__failure_t *why) {
  hbm__strategy_env_t *env = &p->base.env;
  void *base;
  if (hbm__device_region_alloc(env->device, size, &base) != HBM_OK) {
    refused(why, op == HBM_RESERVE_PREALLOCATE ? HBM__FAIL_PREALLOC : HBM__FAIL_DEVICE, size);
    return HBM_ERR_NO_MEMORY;
  }
  hbm_status_t st = hbm__arena_add_region(p->arena, (uint64_t)(uintptr_t)base, size, size);
  if (st != HBM_OK) {
    hbm__device_region_free(env->device, base, size);
    why->kind = HBM__FAIL_HOST;
    return st;
  }
  uint64_t reserved = hbm__arena_reserved(p->arena);
  if (reserved > p->peak_reserved)
    p->peak_reserved = reserved;
  if (env->on_reserve)
    env->on_reserve(env->ctx, op, (uint64_t)(uintptr_t)base, size);
  return HBM_OK;
}

/* A new segment of at least `need` bytes: doubling sizes, within the limit. */
static hbm_status_t grow_pool(async_pool_t *p, uint64_t need, hbm__failure_t *why) {
  uint64_t limit = p->base.env.limit, reserved = hbm__arena_reserved(p->arena);
  uint64_t headroom = limit > reserved ? (limit - reserved) / HBM__MIN_BLOCK * HBM__MIN_BLOCK : 0;
  if (need > headroom) {
    why->kind = HBM__FAIL_LIMIT;
    return HBM_ERR_NO_MEMORY;
  }
  while (p->next_segment < need)
    p->next_segment *= 2;
  uint64_t size = p->next_segment < headroom ? p->next_segment : headroom;
  hbm_status_t st = add_segment(p, size, HBM_RESERVE_GROW, why);
  if (st == HBM_ERR_NO_MEMORY && why->kind == HBM__FAIL_DEVICE && size > need)
    st = add_segment(p, size = need, HBM_RESERVE_GROW, why);
  if (st == HBM_OK)
    p->next_segment *= 2;
  return st;
}

/* The stream's own freed blocks come first: the best fit among them, trimmed to size. */
static bool reuse_own_free(async_pool_t *p, stream_frees_t *f, uint64_t size, uint64_t alignment,
                           hbm__block_t *out) {
  uint64_t need = hbm__round_up(size, HBM__MIN_BLOCK);
  size_t best = SIZE_MAX;
  for (size_t i = 0; i < f->n; i++) {
    const hbm__block_t *b = &f->blocks[i];
    if (b->allocated >= need && b->addr % alignment == 0 &&
        (best == SIZE_MAX || b->allocated < f->blocks[best].allocated))
      best = i;
  }
  if (best == SIZE_MAX)
    return false;
  hbm__block_t b = f->blocks[best];
  hbm__block_t rest;
  bool split = b.allocated > need && hbm__arena_split(p->arena, &b, need, &rest) == HBM_OK;
  f->bytes -= b.allocated;
  p->pending -= b.allocated;
  if (split)
    f->blocks[best] = rest; /* the remainder stays pending on this stream */
  else
    f->blocks[best] = f->blocks[--f->n];
  *out = b;
  return true;
}

static hbm_status_t host_alloc(async_pool_t *p, uint64_t size, uint64_t alignment,
                               hbm_stream_t *stream, hbm__block_t *out, hbm__failure_t *why) {
  stream_frees_t *own = frees_of(p, hbm__stream_id(stream), false);
  if (own && reuse_own_free(p, own, size, alignment, out))
    return HBM_OK;
  hbm_status_t st = hbm__arena_alloc(p->arena, size, alignment, out);
  if (st == HBM_ERR_NO_MEMORY) {
    uint64_t slack = alignment > p->base.env.device->region_alignment ? alignment - 256 : 0;
    st = grow_pool(p, hbm__round_up(size, HBM__MIN_BLOCK) + slack, why);
    if (st == HBM_OK)
      st = hbm__arena_alloc(p->arena, size, alignment, out);
  } else if (st != HBM_OK) {
    why->kind = HBM__FAIL_HOST;
  }
  if (st == HBM_ERR_NO_MEMORY) {
    if (why->kind == HBM__FAIL_NONE)
      why->kind = HBM__FAIL_LIMIT;
    why->pending_elsewhere = p->pending - (own ? own->bytes : 0);
  }
  return st;
}

static hbm_status_t release_stream_frees(async_pool_t *p, stream_frees_t *f) {
  for (size_t i = 0; i < f->n; i++)
    hbm__arena_release(p->arena, &f->blocks[i]);
  p->pending -= f->bytes;
  f->n = 0;
  f->bytes = 0;
  return HBM_OK;
}

/* ---- the native pool ---- */

/* The driver aligns pool blocks to 256 bytes; a stricter alignment takes slack, and the
 * block's handle remembers the offset. */
static hbm_status_t native_alloc(async_pool_t *p, uint64_t size, uint64_t alignment,
                                 hbm_stream_t *stream, hbm__block_t *out, hbm__failure_t *why) {
  hbm__strategy_env_t *env = &p->base.env;
  uint64_t slack = alignment > HBM__MIN_BLOCK ? alignment - HBM__MIN_BLOCK : 0;
  uint64_t bytes = hbm__round_up(size, HBM__MIN_BLOCK) + slack;
  if (bytes > env->limit - p->native_allocated) {
    why->kind = HBM__FAIL_LIMIT;
    return HBM_ERR_NO_MEMORY;
  }
  void *ptr;
  if (env->device->ops->pool_alloc(env->device, p->native, bytes, hbm__stream_native(stream),
                                   &ptr) != HBM_OK) {
    refused(why, HBM__FAIL_DEVICE, bytes);
    return HBM_ERR_NO_MEMORY;
  }
  uint64_t base = (uint64_t)(uintptr_t)ptr, addr = hbm__round_up(base, alignment);
  void *native = hbm__stream_native(stream);
  if (!hbm_u64map_put(&p->native_live, addr, bytes) ||
      (addr != base && !hbm_u64map_put(&p->native_aligned, addr, base)) ||
      (native && !hbm_u64map_put(&p->native_stream, addr, (uint64_t)(uintptr_t)native))) {
    hbm_u64map_remove(&p->native_live, addr, NULL);
    hbm_u64map_remove(&p->native_aligned, addr, NULL);
    env->device->ops->pool_free(env->device, p->native, ptr, hbm__stream_native(stream));
    why->kind = HBM__FAIL_HOST;
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the async pool");
  }
  p->native_allocated += bytes;
  out->addr = addr;
  out->allocated = bytes;
  out->handle = addr - base;
  return HBM_OK;
}

/* Fills the pool: allocate, then free, and the pool keeps it (release threshold = limit). */
static hbm_status_t native_prefill(async_pool_t *p, uint64_t bytes, hbm__failure_t *why) {
  hbm__device_t *d = p->base.env.device;
  void *ptr;
  if (d->ops->pool_alloc(d, p->native, bytes, NULL, &ptr) != HBM_OK) {
    refused(why, HBM__FAIL_PREALLOC, bytes);
    return HBM_ERR_NO_MEMORY;
  }
  d->ops->pool_free(d, p->native, ptr, NULL);
  d->ops->stream_sync(d, NULL);
  return HBM_OK;
}

/* ---- the strategy ---- */

static hbm_status_t async_alloc(hbm__strategy_t *s, uint64_t size, uint64_t alignment,
                                hbm_stream_t *stream, hbm__block_t *out, hbm__failure_t *why) {
  async_pool_t *p = pool_of(s);
  if (size > s->env.limit) {
    why->kind = HBM__FAIL_LIMIT;
    return HBM_ERR_NO_MEMORY;
  }
  if (!p->prefilled && s->env.cfg->async_prealloc != 0 && prefill_bytes(p) > 0) {
    uint64_t bytes = prefill_bytes(p);
    hbm_status_t st = p->native ? native_prefill(p, bytes, why)
                                : add_segment(p, bytes, HBM_RESERVE_PREALLOCATE, why);
    if (st != HBM_OK)
      return st;
    if (p->native && s->env.on_reserve)
      s->env.on_reserve(s->env.ctx, HBM_RESERVE_PREALLOCATE, 0, bytes);
  }
  p->prefilled = true;
  if (p->native)
    return native_alloc(p, size, alignment, stream, out, why);
  return host_alloc(p, size, alignment, stream, out, why);
}

static void async_free(hbm__strategy_t *s, const hbm__block_t *b, hbm_stream_t *stream,
                       bool ordered) {
  async_pool_t *p = pool_of(s);
  if (p->native) {
    hbm__device_t *d = s->env.device;
    uint64_t allocated_on = 0;
    hbm_u64map_remove(&p->native_live, b->addr, NULL);
    hbm_u64map_remove(&p->native_aligned, b->addr, NULL);
    hbm_u64map_remove(&p->native_stream, b->addr, &allocated_on);
    p->native_allocated -= b->allocated;
    /* No waiting: the driver orders the free on its stream, and other streams reuse the
     * memory once it has run. A plain free goes on the stream the block was allocated on
     * (after all its work there), or for a plain block on the device's own stream. */
    void *on = stream ? hbm__stream_native(stream) : (void *)(uintptr_t)allocated_on;
    d->ops->pool_free(d, p->native, (void *)(uintptr_t)(b->addr - b->handle), on);
    return;
  }
  stream_frees_t *f = ordered ? frees_of(p, hbm__stream_id(stream), true) : NULL;
  if (f && f->n == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 16;
    hbm__block_t *grown = realloc(f->blocks, cap * sizeof *grown);
    if (grown) {
      f->blocks = grown;
      f->cap = cap;
    }
  }
  if (!f || f->n == f->cap) {
    /* A plain free, or no host memory to remember the stream: free it for everyone (the
     * host-side pool runs no work, so nothing can still be using it). */
    hbm__arena_release(p->arena, b);
    return;
  }
  f->blocks[f->n++] = *b;
  f->bytes += b->allocated;
  p->pending += b->allocated;
}

static void async_stats(hbm__strategy_t *s, hbm__strategy_stats_t *out) {
  async_pool_t *p = pool_of(s);
  memset(out, 0, sizeof *out);
  if (p->native) {
    uint64_t reserved = 0, used = 0;
    hbm__device_t *d = s->env.device;
    d->ops->pool_usage(d, p->native, &reserved, &used);
    if (reserved > p->peak_reserved)
      p->peak_reserved = reserved;
    out->reserved = reserved;
    out->peak_reserved = p->peak_reserved;
    out->allocated = p->native_allocated;
    out->free_bytes = reserved > used ? reserved - used : 0;
    out->largest_free = out->free_bytes; /* the driver does not tell; an upper bound */
    return;
  }
  out->reserved = hbm__arena_reserved(p->arena);
  out->peak_reserved = p->peak_reserved;
  out->allocated = hbm__arena_allocated(p->arena);
  out->free_bytes = out->reserved - out->allocated;
  out->largest_free = hbm__arena_largest_free(p->arena);
  out->pending = p->pending;
}

static hbm_status_t async_walk(hbm__strategy_t *s, int (*fn)(const hbm__chunk_info_t *, void *),
                               void *ctx) {
  async_pool_t *p = pool_of(s);
  if (!p->native)
    return hbm__arena_walk(p->arena, fn, ctx);
  /* The driver's segments are not visible: each live block stands for itself. */
  for (size_t i = 0; i < p->native_live.cap; i++) {
    if (p->native_live.used[i] != 1)
      continue;
    hbm__chunk_info_t info = {.region_base = p->native_live.keys[i],
                              .region_size = p->native_live.values[i],
                              .addr = p->native_live.keys[i],
                              .size = p->native_live.values[i],
                              .in_use = true};
    if (fn(&info, ctx))
      break;
  }
  return HBM_OK;
}

static void release_segment(void *ctx, uint64_t base, uint64_t size) {
  hbm__strategy_env_t *env = ctx;
  hbm__device_region_free(env->device, (void *)(uintptr_t)base, size);
  if (env->on_reserve)
    env->on_reserve(env->ctx, HBM_RESERVE_RELEASE, base, size);
}

static hbm_status_t async_trim(hbm__strategy_t *s) {
  async_pool_t *p = pool_of(s);
  if (p->native)
    return s->env.device->ops->pool_trim(s->env.device, p->native, 0);
  hbm__arena_drop_free_regions(p->arena, release_segment, &s->env);
  return HBM_OK;
}

static uint64_t async_largest_free(hbm__strategy_t *s) {
  hbm__strategy_stats_t st;
  async_stats(s, &st);
  return st.largest_free;
}

static hbm_status_t async_stream_sync(hbm__strategy_t *s, hbm_stream_t *stream) {
  async_pool_t *p = pool_of(s);
  if (p->native)
    return HBM_OK; /* the driver tracks stream order itself */
  stream_frees_t *f = frees_of(p, hbm__stream_id(stream), false);
  return f ? release_stream_frees(p, f) : HBM_OK;
}

/* Blocks allocated on a stream that goes away are plain blocks from now on (it was
 * synchronized before it is destroyed). */
static void forget_native_stream(async_pool_t *p, void *native) {
  hbm_u64map_t *m = &p->native_stream;
  for (size_t i = 0; i < m->cap; i++) /* removing leaves a tombstone: nothing moves */
    if (m->used[i] == 1 && m->values[i] == (uint64_t)(uintptr_t)native)
      hbm_u64map_remove(m, m->keys[i], NULL);
}

static void async_stream_destroy(hbm__strategy_t *s, hbm_stream_t *stream) {
  async_pool_t *p = pool_of(s);
  if (p->native) {
    forget_native_stream(p, hbm__stream_native(stream));
    return;
  }
  stream_frees_t *f = frees_of(p, hbm__stream_id(stream), false);
  if (!f)
    return;
  release_stream_frees(p, f);
  free(f->blocks);
  *f = p->streams[--p->n_streams];
}

static void async_destroy(hbm__strategy_t *s) {
  async_pool_t *p = pool_of(s);
  hbm__device_t *d = s->env.device;
  if (p->native) {
    for (size_t i = 0; i < p->native_live.cap; i++) {
      if (p->native_live.used[i] != 1)
        continue;
      uint64_t base = p->native_live.keys[i];
      hbm_u64map_get(&p->native_aligned, base, &base);
      d->ops->pool_free(d, p->native, (void *)(uintptr_t)base, NULL);
    }
    d->ops->stream_sync(d, NULL);
    d->ops->pool_destroy(d, p->native);
    hbm_u64map_free(&p->native_live);
    hbm_u64map_free(&p->native_aligned);
    hbm_u64map_free(&p->native_stream);
  } else {
    hbm__arena_for_each_region(p->arena, release_segment, &s->env);
    hbm__arena_delete(p->arena);
    for (size_t i = 0; i < p->n_streams; i++)
      free(p->streams[i].blocks);
    free(p->streams);
  }
  free(p);
}

static const hbm__strategy_ops_t async_ops = {
    .name = "async",
    .alloc = async_alloc,
    .free = async_free,
    .stats = async_stats,
    .walk = async_walk,
    .trim = async_trim,
    .largest_free = async_largest_free,
    .stream_sync = async_stream_sync,
    .stream_destroy = async_stream_destroy,
    .destroy = async_destroy,
};

hbm_status_t hbm__async_create(const hbm__strategy_env_t *env, hbm__strategy_t **out) {
  async_pool_t *p = calloc(1, sizeof *p);
  if (!p)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the async pool");
  p->base.ops = &async_ops;
  p->base.env = *env;
  p->next_segment = FIRST_SEGMENT;
  hbm__device_t *d = env->device;
  hbm_status_t st = HBM_OK;
  if (d->ops->pool_create) {
    hbm_u64map_init(&p->native_live);
    hbm_u64map_init(&p->native_aligned);
    hbm_u64map_init(&p->native_stream);
    st = d->ops->pool_create(d, env->limit, &p->native);
  } else if (!(p->arena = hbm__arena_new(false))) {
    st = HBM_ERR_HOST_MEMORY;
  }
  if (st != HBM_OK) {
    free(p);
    return st;
  }
  *out = &p->base;
  return HBM_OK;
}
