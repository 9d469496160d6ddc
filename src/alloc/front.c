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
#include "profile/recorder.h"

#include <stdlib.h>
#include <string.h>

#define NO_RECORD UINT32_MAX
#define MAX_ALIGNMENT (1ull << 30)

/* ---- the live-block table ---- */

static hbm__record_t *record_at(hbm_device_t *dev, uint32_t i) { return &dev->records[i]; }

static uint32_t take_record(hbm_device_t *dev) {
  if (dev->free_record == NO_RECORD) {
    uint32_t cap = dev->records_cap ? dev->records_cap * 2 : 256;
    if (cap <= dev->records_cap)
      return NO_RECORD;
    hbm__record_t *grown = realloc(dev->records, (size_t)cap * sizeof *grown);
    if (!grown)
      return NO_RECORD;
    for (uint32_t i = dev->records_cap; i < cap; i++)
      grown[i].next_free = i + 1 < cap ? i + 1 : NO_RECORD;
    dev->records = grown;
    dev->free_record = dev->records_cap;
    dev->records_cap = cap;
  }
  uint32_t i = dev->free_record;
  dev->free_record = dev->records[i].next_free;
  return i;
}

static void drop_record(hbm_device_t *dev, uint32_t i) {
  dev->records[i].next_free = dev->free_record;
  dev->free_record = i;
}

/* The tag's strings interned in the device's table (they outlive the caller's). */
static hbm_tag_t intern_tag(hbm_device_t *dev, const hbm_tag_t *t) {
  hbm_tag_t out = {.category = t->category};
  out.op = hbm_intern(dev->strings, t->op);
  out.shape = hbm_intern(dev->strings, t->shape);
  out.group = hbm_intern(dev->strings, t->group);
  out.source = hbm_intern(dev->strings, t->source);
  return out;
}

static bool has_tag(const hbm_tag_t *t) {
  return t->op || t->shape || t->group || t->source || t->category != HBM_CAT_UNKNOWN;
}

/* ---- opening and closing ---- */

static void record_reservation(void *ctx, hbm_reserve_op_t op, uint64_t addr, uint64_t size) {
  hbm_device_t *dev = ctx;
  hbm__rec_reserve(dev->rec_id, op, addr, size);
}

/* For a profile started while the device is in use: tell the recorder what is live. */
static void describe_live_blocks(void *ctx) {
  hbm_device_t *dev = ctx;
  pthread_mutex_lock(&dev->lock);
  for (size_t i = 0; i < dev->live.cap; i++) {
    if (dev->live.used[i] != 1)
      continue;
    const hbm__record_t *r = record_at(dev, (uint32_t)dev->live.values[i]);
    hbm__rec_alloc(dev->rec_id, r->block.addr, r->size, r->block.allocated,
                   has_tag(&r->tag) ? &r->tag : NULL);
  }
  pthread_mutex_unlock(&dev->lock);
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
  case HBM_MODE_EXPANDABLE: return hbm__expandable_create(&env, &dev->strategy);
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
  hbm_device_t *dev = calloc(1, sizeof *dev);
  if (!dev) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory opening a device");
    return NULL;
  }
  dev->cfg = *cfg;
  hbm__config_mark_code_origins(&dev->cfg);
  dev->mode = hbm_config_mode(cfg);
  dev->free_record = NO_RECORD;
  dev->rec_id = -1;
  hbm_u64map_init(&dev->live);
  pthread_mutex_init(&dev->lock, NULL);
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
  if (dev->strategy)
    dev->strategy->ops->destroy(dev->strategy);
  if (dev->rec_id >= 0)
    hbm__rec_device_close(dev->rec_id);
  hbm__device_close(dev->phys);
  hbm_intern_free(dev->strings);
  hbm_u64map_free(&dev->live);
  free(dev->records);
  pthread_mutex_destroy(&dev->lock);
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

static hbm_status_t check_alignment(size_t *alignment) {
  if (*alignment == 0)
    *alignment = HBM__MIN_BLOCK;
  if (*alignment & (*alignment - 1))
    return hbm__error(HBM_ERR_INVALID, "alignment %zu is not a power of two", *alignment);
  if (*alignment > MAX_ALIGNMENT)
    return hbm__error(HBM_ERR_INVALID, "alignment %zu is larger than 1GiB", *alignment);
  if (*alignment < HBM__MIN_BLOCK)
    *alignment = HBM__MIN_BLOCK;
  return HBM_OK;
}

/* Enters a served block in the table and the statistics. Under the lock. */
static hbm_status_t remember_block(hbm_device_t *dev, uint64_t size, const hbm__block_t *b,
                                   const hbm_tag_t *tag) {
  uint32_t i = take_record(dev);
  if (i == NO_RECORD)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the live-block table");
  if (!hbm_u64map_put(&dev->live, b->addr, i)) {
    drop_record(dev, i);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the live-block table");
  }
  hbm__record_t *r = record_at(dev, i);
  r->size = size;
  r->block = *b;
  memset(&r->tag, 0, sizeof r->tag);
  if (tag)
    r->tag = intern_tag(dev, tag);
  dev->in_use += size;
  if (dev->in_use > dev->peak_in_use)
    dev->peak_in_use = dev->in_use;
  dev->num_allocs++;
  dev->num_live++;
  hbm__rec_alloc(dev->rec_id, b->addr, size, b->allocated, tag ? &r->tag : NULL);
  return HBM_OK;
}

void *hbm__alloc(hbm_device_t *dev, size_t size, size_t alignment, hbm_stream_t *stream,
                 const hbm_tag_t *tag) {
  if (!dev) {
    hbm__error(HBM_ERR_INVALID, "hbm_alloc: NULL device");
    return NULL;
  }
  if (size == 0) {
    hbm__error(HBM_ERR_INVALID, "hbm_alloc: size 0; allocations are at least 1 byte");
    return NULL;
  }
  if (check_alignment(&alignment) != HBM_OK)
    return NULL;
  if (stream && stream->dev != dev) {
    hbm__error(HBM_ERR_INVALID, "hbm_alloc_async: the stream belongs to another device");
    return NULL;
  }
  hbm_tag_t resolved;
  bool tagged = hbm__tag_resolve(tag, &resolved);
  hbm__block_t b;
  hbm__failure_t why;
  memset(&why, 0, sizeof why);
  pthread_mutex_lock(&dev->lock);
  hbm_status_t st = dev->strategy->ops->alloc(dev->strategy, size, alignment, stream, &b, &why);
  if (st == HBM_OK) {
    st = remember_block(dev, size, &b, tagged ? &resolved : NULL);
    if (st != HBM_OK)
      dev->strategy->ops->free(dev->strategy, &b, stream, false);
  } else if (st == HBM_ERR_NO_MEMORY && why.kind != HBM__FAIL_HOST) {
    dev->num_ooms++;
    hbm__oom_report(dev, size, alignment, &why);
  } else if (hbm_last_status() == HBM_OK) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory allocating %zu bytes", size);
  }
  pthread_mutex_unlock(&dev->lock);
  return st == HBM_OK ? (void *)(uintptr_t)b.addr : NULL;
}

void *hbm_alloc(hbm_device_t *dev, size_t size, size_t alignment) {
  return hbm__alloc(dev, size, alignment, NULL, NULL);
}

void *hbm_alloc_async(hbm_device_t *dev, size_t size, hbm_stream_t *stream) {
  return hbm__alloc(dev, size, 0, stream, NULL);
}

static hbm_status_t free_block(hbm_device_t *dev, void *ptr, hbm_stream_t *stream, bool ordered) {
  if (!ptr)
    return HBM_OK;
  if (!dev)
    return hbm__error(HBM_ERR_INVALID, "hbm_free: NULL device");
  if (stream && stream->dev != dev)
    return hbm__error(HBM_ERR_INVALID, "hbm_free_async: the stream belongs to another device");
  uint64_t addr = (uint64_t)(uintptr_t)ptr, i;
  pthread_mutex_lock(&dev->lock);
  if (!hbm_u64map_remove(&dev->live, addr, &i)) {
    pthread_mutex_unlock(&dev->lock);
    return hbm__error(HBM_ERR_NOT_FOUND, "hbm_free: %p is not a live block of device %s", ptr,
                      dev->phys->name);
  }
  hbm__record_t *r = record_at(dev, (uint32_t)i);
  dev->strategy->ops->free(dev->strategy, &r->block, stream, ordered);
  dev->in_use -= r->size;
  dev->num_frees++;
  dev->num_live--;
  drop_record(dev, (uint32_t)i);
  hbm__rec_free(dev->rec_id, addr);
  pthread_mutex_unlock(&dev->lock);
  return HBM_OK;
}

hbm_status_t hbm_free(hbm_device_t *dev, void *ptr) { return free_block(dev, ptr, NULL, false); }

hbm_status_t hbm_free_async(hbm_device_t *dev, void *ptr, hbm_stream_t *stream) {
  return free_block(dev, ptr, stream, true);
}

size_t hbm_block_size(hbm_device_t *dev, const void *ptr) {
  if (!dev || !ptr)
    return 0;
  uint64_t i;
  size_t size = 0;
  pthread_mutex_lock(&dev->lock);
  if (hbm_u64map_get(&dev->live, (uint64_t)(uintptr_t)ptr, &i))
    size = (size_t)record_at(dev, (uint32_t)i)->size;
  pthread_mutex_unlock(&dev->lock);
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
  pthread_mutex_lock(&dev->lock);
  s->id = ++dev->next_stream_id;
  s->next = dev->streams;
  dev->streams = s;
  pthread_mutex_unlock(&dev->lock);
  return s;
}

hbm_status_t hbm_stream_synchronize(hbm_device_t *dev, hbm_stream_t *stream) {
  if (!dev || (stream && stream->dev != dev))
    return hbm__error(HBM_ERR_INVALID, "hbm_stream_synchronize: no such stream on this device");
  hbm_status_t st = dev->phys->ops->stream_sync(dev->phys, hbm__stream_native(stream));
  if (st != HBM_OK)
    return st;
  pthread_mutex_lock(&dev->lock);
  if (dev->strategy->ops->stream_sync)
    st = dev->strategy->ops->stream_sync(dev->strategy, stream);
  pthread_mutex_unlock(&dev->lock);
  return st;
}

hbm_status_t hbm_stream_destroy(hbm_device_t *dev, hbm_stream_t *stream) {
  if (!stream)
    return HBM_OK;
  if (!dev || stream->dev != dev)
    return hbm__error(HBM_ERR_INVALID, "hbm_stream_destroy: no such stream on this device");
  dev->phys->ops->stream_sync(dev->phys, stream->native);
  pthread_mutex_lock(&dev->lock);
  if (dev->strategy && dev->strategy->ops->stream_destroy)
    dev->strategy->ops->stream_destroy(dev->strategy, stream);
  for (hbm_stream_t **p = &dev->streams; *p; p = &(*p)->next) {
    if (*p == stream) {
      *p = stream->next;
      break;
    }
  }
  pthread_mutex_unlock(&dev->lock);
  dev->phys->ops->stream_destroy(dev->phys, stream->native);
  free(stream);
  return HBM_OK;
}

/* ---- statistics, walks, trimming ---- */

hbm_status_t hbm_trim(hbm_device_t *dev) {
  if (!dev)
    return hbm__error(HBM_ERR_INVALID, "hbm_trim: NULL device");
  pthread_mutex_lock(&dev->lock);
  hbm_status_t st = dev->strategy->ops->trim(dev->strategy);
  pthread_mutex_unlock(&dev->lock);
  return st;
}

hbm_status_t hbm_get_stats(hbm_device_t *dev, hbm_stats_t *out) {
  if (!dev || !out)
    return hbm__error(HBM_ERR_INVALID, "hbm_get_stats: NULL argument");
  hbm__strategy_stats_t s;
  pthread_mutex_lock(&dev->lock);
  dev->strategy->ops->stats(dev->strategy, &s);
  out->bytes_in_use = dev->in_use;
  out->peak_bytes_in_use = dev->peak_in_use;
  out->num_allocs = dev->num_allocs;
  out->num_frees = dev->num_frees;
  out->num_live = dev->num_live;
  out->num_ooms = dev->num_ooms;
  pthread_mutex_unlock(&dev->lock);
  out->bytes_reserved = s.reserved;
  out->peak_bytes_reserved = s.peak_reserved;
  out->bytes_limit = dev->limit;
  out->largest_free_block = s.largest_free;
  out->fragmentation = s.free_bytes ? 1.0 - (double)s.largest_free / (double)s.free_bytes : 0.0;
  return HBM_OK;
}

static int compare_by_address(const void *x, const void *y) {
  uint64_t a = (*(hbm__record_t *const *)x)->block.addr;
  uint64_t b = (*(hbm__record_t *const *)y)->block.addr;
  return a < b ? -1 : a > b;
}

static int compare_by_size_desc(const void *x, const void *y) {
  uint64_t a = (*(hbm__record_t *const *)x)->size, b = (*(hbm__record_t *const *)y)->size;
  if (a != b)
    return a > b ? -1 : 1;
  return compare_by_address(x, y);
}

/* The live records, in a malloc'd array. Under the lock. */
static hbm__record_t **live_records(hbm_device_t *dev, size_t *n) {
  *n = 0;
  hbm__record_t **out = malloc((dev->live.count + 1) * sizeof *out);
  if (!out)
    return NULL;
  for (size_t i = 0; i < dev->live.cap; i++)
    if (dev->live.used[i] == 1)
      out[(*n)++] = record_at(dev, (uint32_t)dev->live.values[i]);
  return out;
}

hbm__record_t **hbm__live_by_size(hbm_device_t *dev, size_t *n) {
  hbm__record_t **all = live_records(dev, n);
  if (all)
    qsort(all, *n, sizeof *all, compare_by_size_desc);
  return all;
}

hbm_status_t hbm_walk(hbm_device_t *dev, int (*fn)(const hbm_block_info_t *, void *), void *ctx) {
  if (!dev || !fn)
    return hbm__error(HBM_ERR_INVALID, "hbm_walk: NULL argument");
  pthread_mutex_lock(&dev->lock);
  size_t n;
  hbm__record_t **all = live_records(dev, &n);
  if (!all) {
    pthread_mutex_unlock(&dev->lock);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory walking live blocks");
  }
  qsort(all, n, sizeof *all, compare_by_address);
  for (size_t i = 0; i < n; i++) {
    const hbm__record_t *r = all[i];
    hbm_block_info_t info = {.ptr = (const void *)(uintptr_t)r->block.addr,
                             .size = (size_t)r->size,
                             .allocated = (size_t)r->block.allocated,
                             .op = r->tag.op,
                             .shape = r->tag.shape,
                             .category = r->tag.category,
                             .group = r->tag.group,
                             .source = r->tag.source};
    if (fn(&info, ctx))
      break;
  }
  free(all);
  pthread_mutex_unlock(&dev->lock);
  return HBM_OK;
}

void hbm__device_set_oom_buffers(hbm_device_t *dev, bool on) {
  pthread_mutex_lock(&dev->lock);
  dev->oom_list_buffers = on;
  pthread_mutex_unlock(&dev->lock);
}

hbm__strategy_t *hbm__device_strategy(hbm_device_t *dev) { return dev->strategy; }
