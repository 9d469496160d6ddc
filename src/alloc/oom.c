/* oom.c — what a user reads when memory runs out. The text starts exactly as XLA's does on a
 * GPU, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate N bytes.", so searches
 * for it still find answers, then says what hbm knows: the device, the mode and the limit
 * with the variable that set them, what is in use, the largest free block, and one line
 * with the cause and its remedy (the seeds' remedies). The causes told apart:
 *   - the request alone is larger than the limit (or than the whole device);
 *   - what is in use plus the request is over the limit;
 *   - fragmentation: enough bytes are free, but not in one piece;
 *   - memory freed on other streams waits for their synchronization (async mode);
 *   - other processes hold the device's memory (their pids and bytes, from the sim ledger;
 *     on CUDA from NVML); this process's CUDA context and memory nobody accounts for
 *     ("unknown": no NVML, or NVML does not say) are listed as such, never as processes;
 *   - the preallocation itself could not be made;
 *   - the device refused a new region although the limit allowed it (other hbm devices of
 *     this process, or host trouble on sim).
 * While a profile is captured (or when asked, see hbm__device_set_oom_buffers) the text
 * goes on with the largest live buffers and their tags, as XLA's "Peak buffers:" does, and
 * where the profile is. */
#include "alloc/alloc.h"
#include "base/oom_fixes.h" /* the fix texts, shared with `hbm explain` */
#include "profile/recorder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LISTED_BUFFERS 10

typedef enum oom_cause {
  CAUSE_TOO_LARGE,
  CAUSE_OVER_LIMIT,
  CAUSE_FRAGMENTATION,
  CAUSE_WAITING_STREAMS,
  CAUSE_OTHER_PROCESSES,
  CAUSE_PREALLOCATION,
  CAUSE_DEVICE_FULL
} oom_cause_t;

/* Everything the text is made of, gathered once under the device's lock. */
typedef struct oom_facts {
  hbm_device_t *dev;
  uint64_t requested, rounded;
  uint64_t total, device_free;
  bool device_free_known;
  uint64_t limit;
  hbm__strategy_stats_t stats;
  uint64_t headroom;                /* limit - reserved: what growing modes may still take */
  uint64_t others, other_processes; /* all but this object; processes with a pid */
  uint64_t own_elsewhere;           /* this process, outside this hbm device */
  hbm__holder_t holders[32];
  size_t n_holders;
  const hbm__failure_t *why;
} oom_facts_t;

static const char *fmt(uint64_t bytes, char *buf) { return hbm_format_bytes(bytes, buf, 32); }

/* Appends "XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 (environment)". */
static void put_setting(hbm_strbuf_t *sb, const hbm_config_t *cfg, hbm_config_field_t field) {
  char value[1200], origin[128];
  hbm_config_setting(cfg, field, value, sizeof value);
  hbm_config_origin(cfg, field, origin, sizeof origin);
  hbm_strbuf_printf(sb, "%s (%s)", value,
                    cfg->origin[field] == HBM_ORIGIN_ENV ? "environment" : origin);
}

static bool grows(hbm_mode_t mode) {
  return mode == HBM_MODE_GROWTH || mode == HBM_MODE_ASYNC || mode == HBM_MODE_EXPANDABLE;
}

static oom_cause_t classify(const oom_facts_t *f) {
  if (f->rounded > f->limit)
    return CAUSE_TOO_LARGE;
  if (f->why->kind == HBM__FAIL_PREALLOC)
    return f->other_processes ? CAUSE_OTHER_PROCESSES : CAUSE_PREALLOCATION;
  if (f->why->kind == HBM__FAIL_DEVICE)
    return f->other_processes ? CAUSE_OTHER_PROCESSES : CAUSE_DEVICE_FULL;
  uint64_t allocated = f->stats.allocated, pending = f->why->pending_elsewhere;
  if (pending && pending <= allocated && allocated - pending <= f->limit - f->rounded)
    return CAUSE_WAITING_STREAMS;
  if (allocated > f->limit - f->rounded)
    return CAUSE_OVER_LIMIT;
  return CAUSE_FRAGMENTATION;
}

/* The smallest fraction (in hundredths, rounded up) that gives at least `bytes`. */
static double fraction_for(uint64_t bytes, uint64_t total) {
  return ceil((double)bytes / (double)total * 100.0) / 100.0;
}

static void cause_too_large(hbm_strbuf_t *sb, const oom_facts_t *f) {
  char a[32], b[32], c[32];
  const hbm_config_t *cfg = &f->dev->cfg;
  if (f->rounded > f->total) {
    hbm_strbuf_printf(sb,
                      "request larger than the device: %s requested, but the device has "
                      "%s in total (limit %s). " HBM_FIX_TOO_LARGE,
                      fmt(f->requested, a), fmt(f->total, b), fmt(f->limit, c));
    return;
  }
  hbm_strbuf_printf(sb,
                    "request larger than the limit: %s requested, limit %s "
                    "(XLA_PYTHON_CLIENT_MEM_FRACTION=%g of %s). Raise "
                    "XLA_PYTHON_CLIENT_MEM_FRACTION to at least %.2f, or make the array "
                    "smaller.",
                    fmt(f->requested, a), fmt(f->limit, b), cfg->mem_fraction, fmt(f->total, c),
                    fraction_for(f->rounded, f->total));
}

static void cause_over_limit(hbm_strbuf_t *sb, const oom_facts_t *f) {
  char a[32], b[32], c[32];
  const hbm_config_t *cfg = &f->dev->cfg;
  uint64_t needed = f->stats.allocated + f->rounded;
  hbm_strbuf_printf(sb,
                    "in use + request over the limit: %s in use + %s requested > limit "
                    "%s. Free buffers that are no longer needed, or make the program smaller "
                    "(a smaller batch, rematerialization)",
                    fmt(f->stats.allocated, a), fmt(f->requested, b), fmt(f->limit, c));
  if (cfg->mem_fraction < 1.0 && needed <= f->total)
    hbm_strbuf_printf(sb, "; or raise XLA_PYTHON_CLIENT_MEM_FRACTION from %g to at least %.2f",
                      cfg->mem_fraction, fraction_for(needed, f->total));
  hbm_strbuf_puts(sb, ".");
  if (f->dev->mode == HBM_MODE_EXPANDABLE && f->why->detail[0]) /* what the granules hold */
    hbm_strbuf_printf(sb, " %s", f->why->detail);
}

static void cause_fragmentation(hbm_strbuf_t *sb, const oom_facts_t *f) {
  char a[32], b[32], c[32];
  uint64_t free_in_limit = f->limit - f->stats.allocated;
  uint64_t contiguous = f->stats.largest_free;
  if (grows(f->dev->mode) && f->headroom > contiguous)
    contiguous = f->headroom;
  hbm_strbuf_printf(sb,
                    "fragmentation: %s are free within the limit but the largest "
                    "contiguous free block is %s, smaller than the %s requested. ",
                    fmt(free_in_limit, a), fmt(contiguous, b), fmt(f->requested, c));
  switch (f->dev->mode) {
  case HBM_MODE_GROWTH:
    hbm_strbuf_puts(sb, "XLA_PYTHON_CLIENT_PREALLOCATE=false is more prone to fragmentation: "
                        "set it to true (the default), or try HBM_EXPANDABLE=1 (free memory "
                        "need not be contiguous) or TF_GPU_ALLOCATOR=cuda_malloc_async.");
    break;
  case HBM_MODE_ASYNC:
    hbm_strbuf_puts(sb, "Try HBM_EXPANDABLE=1 (free memory need not be contiguous), or "
                        "allocate long-lived buffers first.");
    break;
  default:
    hbm_strbuf_puts(sb, "Try HBM_EXPANDABLE=1 (free memory need not be contiguous) or "
                        "TF_GPU_ALLOCATOR=cuda_malloc_async, or allocate long-lived buffers "
                        "first.");
    break;
  }
}

static void cause_waiting_streams(hbm_strbuf_t *sb, const oom_facts_t *f) {
  char a[32];
  hbm_strbuf_printf(sb,
                    "memory waiting on other streams: %s freed on other streams cannot be "
                    "reused until those streams are synchronized. Call "
                    "hbm_stream_synchronize() on them before allocating, or free on the "
                    "stream that allocates.",
                    fmt(f->why->pending_elsewhere, a));
}

static bool other_process(const hbm__holder_t *h) {
  return !h->self && !h->same_process && h->pid > 0;
}

static size_t count_other_processes(const oom_facts_t *f) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_holders; i++)
    n += other_process(&f->holders[i]);
  return n;
}

/* "pid 4242 holds 256.0MiB, this process's CUDA context holds 64.00MiB, ..." — the other
 * processes, and unless processes_only the context and the unknown rest. */
static void list_other_processes_or_all(hbm_strbuf_t *sb, const oom_facts_t *f,
                                        bool processes_only) {
  char a[32];
  const char *sep = "";
  for (size_t i = 0; i < f->n_holders; i++) {
    const hbm__holder_t *h = &f->holders[i];
    if (other_process(h))
      hbm_strbuf_printf(sb, "%spid %d holds %s", sep, h->pid, fmt(h->bytes, a));
    else if (processes_only || h->self)
      continue;
    else if (h->pid == HBM__HOLDER_CONTEXT)
      hbm_strbuf_printf(sb, "%sthis process's CUDA context holds %s", sep, fmt(h->bytes, a));
    else if (h->pid == HBM__HOLDER_UNKNOWN)
      hbm_strbuf_printf(sb, "%s%s held by unknown holders (the driver does not say whose)", sep,
                        fmt(h->bytes, a));
    else
      continue; /* this process outside this device: said after the list */
    sep = ", ";
  }
}

static void list_other_processes(hbm_strbuf_t *sb, const oom_facts_t *f) {
  list_other_processes_or_all(sb, f, true);
}

static void cause_other_processes(hbm_strbuf_t *sb, const oom_facts_t *f) {
  char a[32], b[32], c[32];
  size_t n = count_other_processes(f);
  hbm_strbuf_puts(sb, "other processes hold the device's memory: ");
  list_other_processes(sb, f);
  hbm_strbuf_printf(sb, " (%s of %s; %s free)", fmt(f->other_processes, a), fmt(f->total, b),
                    fmt(f->device_free, c));
  if (f->why->kind == HBM__FAIL_PREALLOC)
    hbm_strbuf_printf(sb, ", so the preallocation of %s could not be made",
                      fmt(f->why->device_request, a));
  else
    hbm_strbuf_printf(sb, ", so the device refused %s", fmt(f->why->device_request, a));
  hbm_strbuf_printf(sb, ". " HBM_FIX_SHARE_PROCESSES, floor(100.0 / (double)(n + 1)) / 100.0,
                    n + 1);
}

static void cause_preallocation(hbm_strbuf_t *sb, const oom_facts_t *f) {
  char a[32], b[32], c[32];
  const hbm_config_t *cfg = &f->dev->cfg;
  uint64_t own_elsewhere = f->own_elsewhere;
  if (f->dev->mode == HBM_MODE_ASYNC)
    hbm_strbuf_printf(sb,
                      "preallocation failed: TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC=%lld "
                      "asked for %s, which the device could not give (%s).",
                      (long long)cfg->async_prealloc, fmt(f->why->device_request, a),
                      f->why->detail);
  else
    hbm_strbuf_printf(sb,
                      "preallocation failed: the limit of %s (XLA_PYTHON_CLIENT_MEM_"
                      "FRACTION=%g of %s) could not be taken from the device (%s).",
                      fmt(f->why->device_request, a), cfg->mem_fraction, fmt(f->total, b),
                      f->why->detail);
  if (own_elsewhere)
    hbm_strbuf_printf(sb, " This process already holds %s of it through other hbm devices.",
                      fmt(own_elsewhere, a));
  if (f->device_free_known && f->device_free < f->total)
    hbm_strbuf_printf(sb,
                      " Lower %s to fit the %s free (at most %.2f of the total), or set "
                      "XLA_PYTHON_CLIENT_PREALLOCATE=false.",
                      f->dev->mode == HBM_MODE_ASYNC ? "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC"
                                                     : "XLA_PYTHON_CLIENT_MEM_FRACTION",
                      fmt(f->device_free, c),
                      floor((double)f->device_free / (double)f->total * 100.0) / 100.0);
  else
    hbm_strbuf_puts(sb, " Lower XLA_PYTHON_CLIENT_MEM_FRACTION or set "
                        "XLA_PYTHON_CLIENT_PREALLOCATE=false.");
}

static void cause_device_full(hbm_strbuf_t *sb, const oom_facts_t *f) {
  char a[32], b[32];
  hbm_strbuf_printf(sb,
                    "device memory exhausted: the device refused %s although the limit "
                    "allows it (%s).",
                    fmt(f->why->device_request, a), f->why->detail);
  if (f->own_elsewhere)
    hbm_strbuf_printf(sb,
                      " This process holds %s of the device through other hbm devices: "
                      "lower their XLA_PYTHON_CLIENT_MEM_FRACTION or close them.",
                      fmt(f->own_elsewhere, b));
  else if (f->others)
    hbm_strbuf_printf(sb,
                      " Others hold %s of it (see above); lower XLA_PYTHON_CLIENT_MEM_FRACTION "
                      "to what the device can give.",
                      fmt(f->others, b));
  else
    hbm_strbuf_puts(sb, " Lower XLA_PYTHON_CLIENT_MEM_FRACTION to what the device can give.");
}

static void write_cause(hbm_strbuf_t *sb, const oom_facts_t *f) {
  hbm_strbuf_puts(sb, "  cause: ");
  switch (classify(f)) {
  case CAUSE_TOO_LARGE: cause_too_large(sb, f); break;
  case CAUSE_OVER_LIMIT: cause_over_limit(sb, f); break;
  case CAUSE_FRAGMENTATION: cause_fragmentation(sb, f); break;
  case CAUSE_WAITING_STREAMS: cause_waiting_streams(sb, f); break;
  case CAUSE_OTHER_PROCESSES: cause_other_processes(sb, f); break;
  case CAUSE_PREALLOCATION: cause_preallocation(sb, f); break;
  case CAUSE_DEVICE_FULL: cause_device_full(sb, f); break;
  }
  hbm_strbuf_puts(sb, "\n");
}

static void write_mode(hbm_strbuf_t *sb, const hbm_device_t *dev) {
  const hbm_config_t *cfg = &dev->cfg;
  hbm_strbuf_printf(sb, "  mode: %s (", hbm_mode_name(dev->mode));
  switch (dev->mode) {
  case HBM_MODE_BFC:
  case HBM_MODE_GROWTH:
    put_setting(sb, cfg, HBM_CFG_ALLOCATOR);
    hbm_strbuf_puts(sb, ", ");
    put_setting(sb, cfg, HBM_CFG_PREALLOCATE);
    break;
  case HBM_MODE_ASYNC:
    put_setting(sb, cfg, HBM_CFG_ALLOCATOR);
    hbm_strbuf_puts(sb, ", ");
    put_setting(sb, cfg, HBM_CFG_ASYNC_PREALLOC);
    break;
  case HBM_MODE_PLATFORM: put_setting(sb, cfg, HBM_CFG_ALLOCATOR); break;
  default: put_setting(sb, cfg, HBM_CFG_EXPANDABLE); break;
  }
  hbm_strbuf_puts(sb, ")\n");
}

static void write_facts(hbm_strbuf_t *sb, const oom_facts_t *f) {
  char a[32], b[32], c[32], d[32];
  const hbm_device_t *dev = f->dev;
  const hbm_config_t *cfg = &dev->cfg;
  hbm_strbuf_printf(sb, "  device: %s", dev->phys->name);
  if (dev->phys->kind == HBM_DEVICE_SIM) {
    hbm_strbuf_puts(sb, " (simulated: ");
    if (hbm__sim_is_private(cfg))
      hbm_strbuf_puts(sb, "private to this process, HBM_SIM_NAME not set");
    else
      put_setting(sb, cfg, HBM_CFG_SIM_NAME);
    hbm_strbuf_puts(sb, ", ");
    put_setting(sb, cfg, HBM_CFG_SIM_MEMORY);
    hbm_strbuf_puts(sb, ")");
  }
  hbm_strbuf_printf(sb, ", %s total", fmt(f->total, a));
  if (f->device_free_known)
    hbm_strbuf_printf(sb, ", %s free now", fmt(f->device_free, a));
  hbm_strbuf_puts(sb, "\n");
  write_mode(sb, dev);
  hbm_strbuf_printf(sb, "  limit: %llu bytes (%s) = %g of the device's %s, set by ",
                    (unsigned long long)f->limit, fmt(f->limit, a), cfg->mem_fraction,
                    fmt(f->total, b));
  put_setting(sb, cfg, HBM_CFG_MEM_FRACTION);
  hbm_strbuf_puts(sb, "\n");
  uint64_t in_use, live, peak;
  hbm__device_usage(f->dev, &in_use, &live, &peak);
  hbm_strbuf_printf(sb,
                    "  in use: %llu bytes (%s) in %llu block%s, peak %s; reserved %s, "
                    "peak %s\n",
                    (unsigned long long)in_use, fmt(in_use, a), (unsigned long long)live,
                    live == 1 ? "" : "s", fmt(peak, b), fmt(f->stats.reserved, c),
                    fmt(f->stats.peak_reserved, d));
  hbm_strbuf_printf(sb,
                    "  largest free block: %llu bytes (%s); free inside reserved memory "
                    "%s",
                    (unsigned long long)f->stats.largest_free, fmt(f->stats.largest_free, a),
                    fmt(f->stats.free_bytes, b));
  if (grows(dev->mode))
    hbm_strbuf_printf(sb, "; may still grow by %s", fmt(f->headroom, c));
  hbm_strbuf_puts(sb, "\n");
  if (f->stats.pending)
    hbm_strbuf_printf(sb, "  freed on streams, not yet synchronized: %s\n",
                      fmt(f->stats.pending, a));
  if (f->others) {
    hbm_strbuf_printf(sb, "  held by others: %s", fmt(f->others, a));
    if (f->others > f->own_elsewhere) {
      hbm_strbuf_puts(sb, " (");
      list_other_processes_or_all(sb, f, false);
      hbm_strbuf_puts(sb, ")");
    }
    if (f->own_elsewhere)
      hbm_strbuf_printf(sb, "; %s by %s", fmt(f->own_elsewhere, b),
                        dev->phys->kind == HBM_DEVICE_CUDA
                            ? "this process outside this hbm device (other hbm devices, "
                              "its own allocations)"
                            : "other hbm devices of this process");
    hbm_strbuf_puts(sb, "\n");
  }
}

static void write_field(hbm_strbuf_t *sb, const char *name, const char *value) {
  if (value && *value)
    hbm_strbuf_printf(sb, "\t\t%s: %s\n", name, value);
}

/* The largest live buffers, like XLA's "Peak buffers:" list. */
static void write_live_buffers(hbm_strbuf_t *sb, hbm_device_t *dev) {
  size_t n;
  hbm__record_t *live = hbm__live_by_size(dev, &n);
  if (!live)
    return;
  char a[32];
  size_t shown = n < LISTED_BUFFERS ? n : LISTED_BUFFERS;
  uint64_t in_use, live_count, peak;
  hbm__device_usage(dev, &in_use, &live_count, &peak);
  if (n == 0) {
    hbm_strbuf_puts(sb, "Peak buffers: none live\n");
    free(live);
    return;
  }
  hbm_strbuf_printf(sb, "Peak buffers: the %zu largest of %zu live buffers (%s in use):\n", shown,
                    n, fmt(in_use, a));
  for (size_t i = 0; i < shown; i++) {
    const hbm__record_t *r = &live[i];
    const hbm_tag_t *tag = hbm__record_tag(dev, r);
    hbm_strbuf_printf(sb, "\tBuffer %zu:\n\t\tSize: %s (%llu bytes)\n", i + 1, fmt(r->size, a),
                      (unsigned long long)r->size);
    write_field(sb, "Operator", tag->op);
    write_field(sb, "Shape", tag->shape);
    if (tag->category != HBM_CAT_UNKNOWN)
      write_field(sb, "Category", hbm_category_name(tag->category));
    write_field(sb, "Group", tag->group);
    write_field(sb, "Source", tag->source);
    hbm_strbuf_printf(sb, "\t\tAddress: %#llx\n", (unsigned long long)r->block.addr);
  }
  free(live);
}

static void gather(oom_facts_t *f, hbm_device_t *dev, uint64_t size, const hbm__failure_t *why) {
  memset(f, 0, sizeof *f);
  f->dev = dev;
  f->why = why;
  f->requested = size;
  f->rounded = hbm__round_up_sat(size, HBM__MIN_BLOCK);
  f->limit = dev->limit;
  dev->strategy->ops->stats(dev->strategy, &f->stats);
  f->headroom = f->limit > f->stats.reserved ? f->limit - f->stats.reserved : 0;
  f->total = dev->phys->total;
  uint64_t total;
  f->device_free_known = hbm__device_memory(dev->phys, &total, &f->device_free) == HBM_OK;
  f->n_holders = hbm__device_holders(dev->phys, f->holders, HBM_ARRAY_LEN(f->holders));
  if (f->n_holders > HBM_ARRAY_LEN(f->holders))
    f->n_holders = HBM_ARRAY_LEN(f->holders);
  for (size_t i = 0; i < f->n_holders; i++) {
    const hbm__holder_t *h = &f->holders[i];
    if (h->self)
      continue;
    f->others += h->bytes;
    if (other_process(h))
      f->other_processes += h->bytes;
    else if (h->same_process && h->pid > 0)
      f->own_elsewhere += h->bytes;
  }
}

hbm_status_t hbm__oom_report(hbm_device_t *dev, uint64_t size, uint64_t alignment,
                             const hbm__failure_t *why) {
  (void)alignment;
  oom_facts_t f;
  gather(&f, dev, size, why);
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  /* A failed preallocation is the allocation that failed: its size, not the first request's
   * (which only triggered it), goes in XLA's line. */
  bool prealloc = why->kind == HBM__FAIL_PREALLOC && why->device_request > 0;
  hbm_strbuf_printf(&sb,
                    "RESOURCE_EXHAUSTED: Out of memory while trying to allocate %llu "
                    "bytes.\nhbm diagnosis:\n",
                    (unsigned long long)(prealloc ? why->device_request : size));
  if (prealloc) {
    char a[32];
    hbm_strbuf_printf(&sb,
                      "  request: the preallocation of %s, made at this device's first "
                      "allocation (%llu bytes)\n",
                      fmt(why->device_request, a), (unsigned long long)size);
  }
  write_facts(&sb, &f);
  write_cause(&sb, &f);
  const char *profile = hbm_profiler_path();
  if (profile || dev->oom_list_buffers)
    write_live_buffers(&sb, dev);
  if (profile) {
    /* <logdir>/plugins/profile/<run>/<file>: `hbm report` takes the logdir. */
    const char *layout = strstr(profile, "/plugins/profile/");
    hbm_strbuf_printf(&sb, "Profile: %s\nSee it with: hbm report %.*s\n", profile,
                      layout ? (int)(layout - profile) : (int)strlen(profile), profile);
  }
  if (sb.len && sb.data[sb.len - 1] == '\n')
    sb.data[--sb.len] = '\0';
  const char *text = hbm_strbuf_str(&sb);
  hbm__rec_oom(dev->rec_id, size, text);
  if (sb.failed)
    hbm__error(HBM_ERR_NO_MEMORY,
               "RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
               "%llu bytes.",
               (unsigned long long)size);
  else
    hbm__error_text(HBM_ERR_NO_MEMORY, text);
  hbm_strbuf_free(&sb);
  return HBM_ERR_NO_MEMORY;
}
