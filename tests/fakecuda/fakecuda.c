/* fakecuda.c — a strict double of the CUDA driver (libcuda.so.1) on host memory, for hbm's
 * tests: every entry point hbm loads, with the driver's documented semantics checked more
 * strictly than a real GPU would (a real GPU often "works" by luck where the program is
 * wrong). Device memory is a memfd: a "window" mapping of it is what device pointers point
 * at (PROT_NONE unless allocated, complete in stream order and host access is on), and a
 * read-write "shadow" mapping of it, which only the double uses, is what copies go through.
 *
 * Semantics enforced:
 *   - a per-thread context stack (cuCtxPush/Pop/Set/GetCurrent); calls that need a context
 *     fail CUDA_ERROR_INVALID_CONTEXT without one, CUDA_ERROR_CONTEXT_IS_DESTROYED when the
 *     current one was destroyed (e.g. the primary context released to zero while current);
 *   - device memory is PROT_NONE until allocated and again after free;
 *   - stream-ordered allocations (cuMemAllocAsync / cuMemAllocFromPoolAsync) are usable by
 *     the host only once their stream, or one ordered after it, was synchronized; driver
 *     copies on other streams (or on the legacy stream, for a non-blocking stream's block)
 *     fail CUDA_ERROR_ILLEGAL_ADDRESS. Freed pool blocks are reusable by other streams only
 *     after the freeing stream completes, and memory freed but not synchronized is not
 *     released by cuMemPoolTrimTo;
 *   - pools: release threshold (applied at synchronizations), trimming, reserved/used
 *     current and high attributes;
 *   - VMM: cuMemAddressReserve/cuMemCreate/cuMemMap/cuMemSetAccess/cuMemUnmap/cuMemRelease
 *     with a granularity; cuMemUnmap must cover whole mappings, mapped memory is not
 *     accessible until cuMemSetAccess, a released handle's memory lives until unmapped;
 *   - cuMemGetInfo counts a per-context overhead and other processes' memory.
 *
 * Knobs (environment, read by every cuInit and fakecuda_reload(); the size, device count,
 * granularity and host access only while nothing is allocated and no context lives):
 *   FAKECUDA_DEVICES=N            devices (default 1; 0: cuInit fails CUDA_ERROR_NO_DEVICE)
 *   FAKECUDA_MEMORY=BYTES         memory per device (default 2G; K/M/G suffixes)
 *   FAKECUDA_NAME=TEXT            device name (default "FakeCUDA GPU")
 *   FAKECUDA_CONTEXT_OVERHEAD=B   bytes each live context takes (default 64M)
 *   FAKECUDA_OTHER_PROCESS=PID:B[,PID:B]  other processes holding memory (default none)
 *   FAKECUDA_HOST_ACCESS=0        device memory is never host-accessible (discrete GPU);
 *                                 default 1 (as with HMM / an integrated GPU)
 *   FAKECUDA_ATTR_OFF=A[,A]       device attributes reported as 0: numbers, or VMM (102),
 *                                 POOLS (115)
 *   FAKECUDA_GRANULARITY=B        VMM granularity (default 2M)
 *   FAKECUDA_FAIL=SPEC[,SPEC]     failure injection: NAME:N[:CODE] fails the Nth call of
 *                                 entry point NAME (counted from the last reload), NAME:N+
 *                                 every call from the Nth, NAME:* every call; CODE defaults
 *                                 to 2 (out of memory) for allocating calls, else 999
 *   FAKECUDA_POOL_STREAM_REUSE=1  a block freed on a stream is reused by that stream before
 *                                 it synchronizes (default 0: only after)
 *   FAKECUDA_INIT_ERROR=CODE      cuInit returns CODE
 *   FAKECUDA_LOG=PATH|stderr      a line per allocating/freeing call, misuse and injected
 *                                 failure; leaks at exit go to it (or to stderr without it)
 *   FAKECUDA_LEAK_EXIT=N          exit status N when leaks remain at exit
 *   FAKECUDA_NVML=0               the fake NVML's nvmlInit fails (fakenvml.c)
 *   FAKECUDA_NVML_USAGE=0         NVML reports per-process usage as not available
 * Test hooks (exported): fakecuda_reload(), fakecuda_misuse() (calls that returned an error
 * the program caused, injected ones excluded), fakecuda_live() (live objects),
 * fakecuda_reset_counters(), fakecuda_calls(name) (calls of an entry point since the reset),
 * fakecuda_process_usage() (for the fake NVML). fakecuda_reload() also restarts the counts
 * of FAKECUDA_FAIL. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemHandle;
typedef struct fctx *CUcontext;
typedef struct fstream *CUstream;
typedef struct fevent *CUevent;
typedef struct fpool *CUmemoryPool;

enum {
  OK = 0,
  E_INVALID_VALUE = 1,
  E_OUT_OF_MEMORY = 2,
  E_NOT_INITIALIZED = 3,
  E_NO_DEVICE = 100,
  E_INVALID_DEVICE = 101,
  E_INVALID_CONTEXT = 201,
  E_INVALID_HANDLE = 400,
  E_NOT_FOUND = 500,
  E_NOT_READY = 600,
  E_ILLEGAL_ADDRESS = 700,
  E_CONTEXT_IS_DESTROYED = 709,
  E_NOT_PERMITTED = 800,
  E_NOT_SUPPORTED = 801,
  E_UNKNOWN = 999,
};

#define MAX_DEVICES 4
#define MAX_STACK 32
#define PAGE 4096ull
#define LEGACY ((struct fstream *)0x1)
#define PER_THREAD ((struct fstream *)0x2)

/* ---- state ---- */

typedef struct range {
  uint64_t off, size;
} range_t;

typedef struct fctx {
  int device;
  bool primary, alive;
  int refs; /* primary: retains */
  struct fctx *next_all;
} fctx_t;

typedef struct fstream {
  int device;
  fctx_t *ctx;
  unsigned flags; /* 1: non-blocking */
  uint64_t last, done;
  bool alive;
  struct fstream *next_all;
} fstream_t;

typedef struct fevent {
  fstream_t *stream;
  uint64_t seq;
  bool alive;
  struct fevent *next_all;
} fevent_t;

typedef struct fpool {
  int device;
  fctx_t *ctx;
  bool is_default, alive;
  uint64_t threshold, reserved, reserved_high, used, used_high;
  int reuse[4];
  struct fpool *next_all;
} fpool_t;

typedef enum { A_LIVE, A_LIVE_PENDING, A_FREE_PENDING, A_FREE_READY } astate_t;

/* A linear allocation: cuMemAlloc (pool NULL) or a pool block. */
typedef struct falloc {
  uint64_t va, size, off;
  uint64_t bytes; /* asked for (size: whole pages) */
  int device;
  fctx_t *ctx;
  fpool_t *pool;
  astate_t state;
  fstream_t *stream; /* pending on */
  uint64_t seq;
} falloc_t;

typedef struct fhandle {
  uint64_t id, off, size;
  int device, maps;
  bool released;
} fhandle_t;

typedef struct freserve {
  uint64_t va, size, mapped_len;
  char *map_base;
  size_t map_len;
} freserve_t;

typedef struct fmapping {
  uint64_t va, size, hoff;
  fhandle_t *handle;
  int access; /* 0 none, 1 read, 3 read-write */
} fmapping_t;

typedef struct fdevice {
  uint64_t total;
  int memfd;
  char *window, *shadow;
  range_t *free;
  size_t n_free, cap_free;
  uint64_t phys_used;
  int contexts; /* live contexts (each costs the overhead) */
  fctx_t *primary;
  fpool_t *default_pool;
} fdevice_t;

typedef struct wait_edge {
  fstream_t *waiter, *source;
  uint64_t at, source_seq;
} wait_edge_t;

typedef struct other_process {
  unsigned pid;
  uint64_t bytes;
} other_process_t;

typedef struct fail_rule {
  char name[64];
  unsigned long n;
  bool onward;
  int code;
  unsigned long calls;
} fail_rule_t;

#define VEC(T)                                                                                     \
  struct {                                                                                         \
    T *v;                                                                                          \
    size_t n, cap;                                                                                 \
  }

static struct {
  pthread_mutex_t lock;
  bool initialized, mapped;
  int n_devices, init_error;
  uint64_t memory, overhead, granularity;
  char name[128];
  bool host_access, stream_reuse, nvml, nvml_usage;
  int attr_off[16];
  size_t n_attr_off;
  other_process_t others[8];
  size_t n_others;
  char fail_spec[512];
  fail_rule_t rules[16];
  struct {
    const char *name; /* a string literal of an entry point */
    unsigned long n;
  } calls[96];
  size_t n_calls;
  size_t n_rules;
  FILE *log;
  int leak_exit;
  fdevice_t dev[MAX_DEVICES];
  uint64_t seq, next_handle;
  unsigned long misuse, injected;
  fctx_t *contexts;
  fstream_t *streams;
  fevent_t *events;
  fpool_t *pools;
  fstream_t legacy;
  VEC(falloc_t *) allocs;
  VEC(fhandle_t *) handles;
  VEC(freserve_t) reserves;
  VEC(fmapping_t) maps;
  VEC(wait_edge_t) edges;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local fctx_t *stack[MAX_STACK];
static _Thread_local int depth;

#define VEC_PUSH(vec, item)                                                                        \
  do {                                                                                             \
    if ((vec).n == (vec).cap) {                                                                    \
      size_t cap_ = (vec).cap ? (vec).cap * 2 : 16;                                                \
      void *grown_ = realloc((vec).v, cap_ * sizeof *(vec).v);                                     \
      if (!grown_)                                                                                 \
        abort(); /* a test double: out of host memory is not a case it models */                   \
      (vec).v = grown_;                                                                            \
      (vec).cap = cap_;                                                                            \
    }                                                                                              \
    (vec).v[(vec).n++] = (item);                                                                   \
  } while (0)
#define VEC_DEL(vec, i) ((vec).v[i] = (vec).v[--(vec).n])

/* ---- logging, misuse and failure injection ---- */

static void flog(const char *fmt, ...) {
  if (!g.log)
    return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(g.log, "fakecuda[%d]: ", (int)getpid());
  vfprintf(g.log, fmt, ap);
  fputc('\n', g.log);
  fflush(g.log);
  va_end(ap);
}

/* An error the program caused (not an injected one, nor out of memory): counted. */
static CUresult misuse(CUresult r, const char *call, const char *why) {
  g.misuse++;
  flog("MISUSE %s: %s (error %d)", call, why, r);
  return r;
}

static bool allocating(const char *name) {
  return strstr(name, "Alloc") || strstr(name, "Create") || strstr(name, "Retain") ||
         strstr(name, "Reserve");
}

static void count_call(const char *name) {
  for (size_t i = 0; i < g.n_calls; i++)
    if (!strcmp(g.calls[i].name, name)) {
      g.calls[i].n++;
      return;
    }
  if (g.n_calls < sizeof g.calls / sizeof g.calls[0]) {
    g.calls[g.n_calls].name = name;
    g.calls[g.n_calls++].n = 1;
  }
}

static CUresult injected(const char *name) {
  count_call(name);
  for (size_t i = 0; i < g.n_rules; i++) {
    fail_rule_t *r = &g.rules[i];
    if (strcmp(r->name, name))
      continue;
    r->calls++;
    if (r->calls == r->n || (r->onward && r->calls >= r->n)) {
      g.injected++;
      flog("%s: injected failure %d (call %lu)", name, r->code, r->calls);
      return r->code;
    }
  }
  return OK;
}

/* ---- knobs ---- */

static uint64_t parse_bytes(const char *s, uint64_t fallback) {
  if (!s || !*s)
    return fallback;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  switch (toupper((unsigned char)*end)) {
  case 'K': v <<= 10; break;
  case 'M': v <<= 20; break;
  case 'G': v <<= 30; break;
  case 'T': v <<= 40; break;
  default: break;
  }
  return v;
}

static long env_long(const char *name, long fallback) {
  const char *s = getenv(name);
  return s && *s ? strtol(s, NULL, 0) : fallback;
}

static void parse_fail_spec(const char *spec) {
  snprintf(g.fail_spec, sizeof g.fail_spec, "%s", spec ? spec : "");
  g.n_rules = 0;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", g.fail_spec);
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item && g.n_rules < 16;
       item = strtok_r(NULL, ",", &save)) {
    fail_rule_t *r = &g.rules[g.n_rules];
    memset(r, 0, sizeof *r);
    char *colon = strchr(item, ':');
    if (!colon)
      continue;
    *colon = '\0';
    snprintf(r->name, sizeof r->name, "%s", item);
    char *count = colon + 1, *end;
    if (*count == '*') {
      r->n = 1;
      r->onward = true;
      end = count + 1;
    } else {
      r->n = strtoul(count, &end, 10);
      if (*end == '+') {
        r->onward = true;
        end++;
      }
    }
    r->code = *end == ':' ? (int)strtol(end + 1, NULL, 0)
                          : (allocating(r->name) ? E_OUT_OF_MEMORY : E_UNKNOWN);
    g.n_rules++;
  }
}

static void parse_others(const char *s) {
  g.n_others = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s ? s : "");
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item && g.n_others < 8;
       item = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(item, ':');
    if (!colon)
      continue;
    g.others[g.n_others].pid = (unsigned)strtoul(item, NULL, 10);
    g.others[g.n_others++].bytes = parse_bytes(colon + 1, 0);
  }
}

static void parse_attr_off(const char *s) {
  g.n_attr_off = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s ? s : "");
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item && g.n_attr_off < 16;
       item = strtok_r(NULL, ",", &save)) {
    int a = !strcasecmp(item, "VMM")     ? 102
            : !strcasecmp(item, "POOLS") ? 115
                                         : (int)strtol(item, NULL, 0);
    g.attr_off[g.n_attr_off++] = a;
  }
}

static bool idle(void) {
  for (int d = 0; d < MAX_DEVICES; d++)
    if (g.dev[d].contexts || g.dev[d].phys_used)
      return false;
  return true;
}

/* Reads the knobs; those that shape the devices only while nothing lives on them. */
static void read_knobs(bool restart_failures) {
  const char *fail = getenv("FAKECUDA_FAIL");
  if (restart_failures || strcmp(fail ? fail : "", g.fail_spec) || !g.initialized)
    parse_fail_spec(fail);
  parse_others(getenv("FAKECUDA_OTHER_PROCESS"));
  parse_attr_off(getenv("FAKECUDA_ATTR_OFF"));
  g.stream_reuse = env_long("FAKECUDA_POOL_STREAM_REUSE", 0) != 0;
  g.init_error = (int)env_long("FAKECUDA_INIT_ERROR", 0);
  g.nvml = env_long("FAKECUDA_NVML", 1) != 0;
  g.nvml_usage = env_long("FAKECUDA_NVML_USAGE", 1) != 0;
  g.leak_exit = (int)env_long("FAKECUDA_LEAK_EXIT", 0);
  g.overhead = parse_bytes(getenv("FAKECUDA_CONTEXT_OVERHEAD"), 64ull << 20);
  const char *name = getenv("FAKECUDA_NAME");
  snprintf(g.name, sizeof g.name, "%s", name && *name ? name : "FakeCUDA GPU");
  if (!g.log) {
    const char *path = getenv("FAKECUDA_LOG");
    if (path && !strcmp(path, "stderr"))
      g.log = stderr;
    else if (path && *path)
      g.log = fopen(path, "a");
  }
  if (!idle())
    return;
  g.n_devices = (int)env_long("FAKECUDA_DEVICES", 1);
  if (g.n_devices < 0 || g.n_devices > MAX_DEVICES)
    g.n_devices = MAX_DEVICES;
  g.granularity = parse_bytes(getenv("FAKECUDA_GRANULARITY"), 2ull << 20);
  g.host_access = env_long("FAKECUDA_HOST_ACCESS", 1) != 0;
  uint64_t memory = parse_bytes(getenv("FAKECUDA_MEMORY"), 2ull << 30);
  if (memory != g.memory && g.mapped) { /* reshape: unmap the old devices */
    for (int d = 0; d < MAX_DEVICES; d++) {
      fdevice_t *dev = &g.dev[d];
      if (!dev->window)
        continue;
      munmap(dev->window, dev->total);
      munmap(dev->shadow, dev->total);
      close(dev->memfd);
      free(dev->free);
      dev->window = dev->shadow = NULL;
      dev->free = NULL;
      dev->n_free = dev->cap_free = 0;
    }
    g.mapped = false;
  }
  g.memory = memory;
}

/* ---- physical memory of a device: offsets in its memfd ---- */

static bool map_device(int d) {
  fdevice_t *dev = &g.dev[d];
  if (dev->window)
    return true;
  dev->total = g.memory;
  dev->memfd = memfd_create("fakecuda", MFD_CLOEXEC);
  if (dev->memfd < 0 || ftruncate(dev->memfd, (off_t)dev->total) != 0)
    return false;
  dev->window = mmap(NULL, dev->total, PROT_NONE, MAP_SHARED | MAP_NORESERVE, dev->memfd, 0);
  dev->shadow =
      mmap(NULL, dev->total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, dev->memfd, 0);
  if (dev->window == MAP_FAILED || dev->shadow == MAP_FAILED)
    return false;
  dev->free = malloc(sizeof *dev->free);
  if (!dev->free)
    return false;
  dev->free[0] = (range_t){0, dev->total};
  dev->n_free = dev->cap_free = 1;
  return true;
}

static uint64_t used_bytes(int d) {
  uint64_t used = g.dev[d].phys_used + (uint64_t)g.dev[d].contexts * g.overhead;
  for (size_t i = 0; i < g.n_others; i++)
    used += g.others[i].bytes;
  return used;
}

static uint64_t free_bytes(int d) {
  uint64_t used = used_bytes(d);
  return used < g.dev[d].total ? g.dev[d].total - used : 0;
}

/* Takes `size` bytes of the memfd at an `align`ed offset; the device counts `counted` of
 * them as used (what was asked for: the pages around it are the double's business). */
static bool phys_take(int d, uint64_t size, uint64_t counted, uint64_t align, uint64_t *off) {
  fdevice_t *dev = &g.dev[d];
  if (counted > free_bytes(d))
    return false;
  for (size_t i = 0; i < dev->n_free; i++) {
    range_t *r = &dev->free[i];
    uint64_t start = (r->off + align - 1) / align * align;
    if (start + size > r->off + r->size)
      continue;
    uint64_t end = r->off + r->size;
    range_t after = {start + size, end - (start + size)};
    if (start > r->off) {
      r->size = start - r->off;
      if (after.size) {
        if (dev->n_free == dev->cap_free) {
          range_t *grown = realloc(dev->free, 2 * dev->cap_free * sizeof *grown);
          if (!grown)
            return false;
          dev->free = grown;
          dev->cap_free *= 2;
          r = &dev->free[i];
        }
        memmove(&dev->free[i + 2], &dev->free[i + 1], (dev->n_free - i - 1) * sizeof *r);
        dev->free[i + 1] = after;
        dev->n_free++;
      }
    } else if (after.size) {
      *r = after;
    } else {
      memmove(&dev->free[i], &dev->free[i + 1], (dev->n_free - i - 1) * sizeof *r);
      dev->n_free--;
    }
    dev->phys_used += counted;
    *off = start;
    return true;
  }
  return false;
}

static void phys_give(int d, uint64_t off, uint64_t size, uint64_t counted) {
  fdevice_t *dev = &g.dev[d];
  /* The contents go: a new allocation never sees an old one's data by accident. */
  fallocate(dev->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)size);
  dev->phys_used -= counted;
  size_t i = 0;
  while (i < dev->n_free && dev->free[i].off < off)
    i++;
  if (dev->n_free == dev->cap_free) {
    range_t *grown = realloc(dev->free, 2 * dev->cap_free * sizeof *grown);
    if (!grown)
      abort();
    dev->free = grown;
    dev->cap_free *= 2;
  }
  memmove(&dev->free[i + 1], &dev->free[i], (dev->n_free - i) * sizeof *dev->free);
  dev->free[i] = (range_t){off, size};
  dev->n_free++;
  if (i + 1 < dev->n_free && dev->free[i].off + dev->free[i].size == dev->free[i + 1].off) {
    dev->free[i].size += dev->free[i + 1].size;
    memmove(&dev->free[i + 1], &dev->free[i + 2], (dev->n_free - i - 2) * sizeof *dev->free);
    dev->n_free--;
  }
  if (i > 0 && dev->free[i - 1].off + dev->free[i - 1].size == dev->free[i].off) {
    dev->free[i - 1].size += dev->free[i].size;
    memmove(&dev->free[i], &dev->free[i + 1], (dev->n_free - i - 1) * sizeof *dev->free);
    dev->n_free--;
  }
}

static void protect(uint64_t va, uint64_t size, int access) {
  int prot = g.host_access ? (access == 3 ? PROT_READ | PROT_WRITE : access ? PROT_READ : 0) : 0;
  mprotect((void *)(uintptr_t)va, size, prot);
}

/* ---- contexts ---- */

static CUresult need_init(void) { return g.initialized ? OK : E_NOT_INITIALIZED; }

static CUresult current(const char *call, fctx_t **out) {
  if (!g.initialized)
    return misuse(E_NOT_INITIALIZED, call, "cuInit was not called");
  fctx_t *c = depth ? stack[depth - 1] : NULL;
  if (!c)
    return misuse(E_INVALID_CONTEXT, call, "no context is current on this thread");
  if (!c->alive)
    return misuse(E_CONTEXT_IS_DESTROYED, call, "the current context was destroyed");
  *out = c;
  return OK;
}

static fctx_t *new_context(int device, bool primary) {
  fctx_t *c = calloc(1, sizeof *c);
  if (!c)
    abort();
  c->device = device;
  c->primary = primary;
  c->alive = true;
  c->next_all = g.contexts;
  g.contexts = c;
  g.dev[device].contexts++;
  return c;
}

static void free_alloc_memory(falloc_t *a) {
  protect(a->va, a->size, 0);
  phys_give(a->device, a->off, a->size, a->bytes);
}

/* A context's end: what it still owns is a leak; reported, then given back. */
static void destroy_context(fctx_t *c) {
  c->alive = false;
  g.dev[c->device].contexts--;
  for (size_t i = 0; i < g.allocs.n;) {
    falloc_t *a = g.allocs.v[i];
    if (a->ctx != c) {
      i++;
      continue;
    }
    if (a->state == A_LIVE || a->state == A_LIVE_PENDING)
      flog("LEAK at context destruction: %s 0x%llx of %llu bytes",
           a->pool ? "pool block" : "region", (unsigned long long)a->va,
           (unsigned long long)a->size);
    if (a->pool) {
      a->pool->reserved -= a->size;
      if (a->state <= A_LIVE_PENDING)
        a->pool->used -= a->size;
    }
    free_alloc_memory(a);
    free(a);
    VEC_DEL(g.allocs, i);
  }
  for (fstream_t *s = g.streams; s; s = s->next_all)
    if (s->ctx == c && s->alive) {
      flog("LEAK at context destruction: stream %p", (void *)s);
      s->alive = false;
    }
  for (fpool_t *p = g.pools; p; p = p->next_all)
    if (p->ctx == c && p->alive) {
      if (!p->is_default)
        flog("LEAK at context destruction: pool %p", (void *)p);
      p->alive = false;
      if (p == g.dev[c->device].default_pool)
        g.dev[c->device].default_pool = NULL;
    }
}

/* ---- stream order ---- */

static fstream_t *resolve_stream(CUstream s) {
  return (!s || s == LEGACY || s == PER_THREAD) ? &g.legacy : s;
}

static bool blocking(const fstream_t *s) { return s != &g.legacy && !(s->flags & 1); }

static uint64_t enqueue(fstream_t *s) {
  s->last = ++g.seq;
  return s->last;
}

/* Work up to seq on s has completed; what it was ordered after completes too. */
static void complete(fstream_t *s, uint64_t seq) {
  if (seq <= s->done)
    return;
  s->done = seq;
  if (s == &g.legacy) {
    for (fstream_t *b = g.streams; b; b = b->next_all)
      if (b->alive && blocking(b))
        complete(b, seq < b->last ? seq : b->last);
  } else if (blocking(s)) {
    complete(&g.legacy, seq < g.legacy.last ? seq : g.legacy.last);
  }
  for (size_t i = 0; i < g.edges.n; i++) {
    wait_edge_t e = g.edges.v[i];
    if (e.waiter == s && e.at <= seq)
      complete(e.source, e.source_seq);
  }
}

/* Whether work on `user` issued now runs after operation (s, seq). */
static bool ordered_after(fstream_t *user, fstream_t *s, uint64_t seq) {
  if (s->done >= seq || user == s)
    return true;
  if ((user == &g.legacy && blocking(s)) || (blocking(user) && s == &g.legacy))
    return true;
  for (size_t i = 0; i < g.edges.n; i++)
    if (g.edges.v[i].waiter == user && g.edges.v[i].source == s && g.edges.v[i].source_seq >= seq)
      return true;
  return false;
}

static void release_block(size_t i) {
  falloc_t *a = g.allocs.v[i];
  a->pool->reserved -= a->size;
  free_alloc_memory(a);
  free(a);
  VEC_DEL(g.allocs, i);
}

/* Pending pool operations whose stream completed take effect. */
static void settle(void) {
  for (size_t i = 0; i < g.allocs.n; i++) {
    falloc_t *a = g.allocs.v[i];
    if ((a->state == A_LIVE_PENDING || a->state == A_FREE_PENDING) && a->stream->done >= a->seq) {
      a->state = a->state == A_LIVE_PENDING ? A_LIVE : A_FREE_READY;
      if (a->state == A_LIVE)
        protect(a->va, a->size, 3);
    }
  }
}

static void trim_pool(fpool_t *p, uint64_t keep) {
  for (size_t i = 0; i < g.allocs.n && p->reserved > keep;) {
    falloc_t *a = g.allocs.v[i];
    if (a->pool == p && a->state == A_FREE_READY)
      release_block(i);
    else
      i++;
  }
}

/* A synchronization: settle, then pools give back what is above their threshold. */
static void synchronized(void) {
  settle();
  for (fpool_t *p = g.pools; p; p = p->next_all)
    if (p->alive && p->reserved > p->threshold)
      trim_pool(p, p->threshold);
}

/* ---- finding device memory ---- */

static falloc_t *alloc_at(uint64_t va, size_t *index) {
  for (size_t i = 0; i < g.allocs.n; i++)
    if (g.allocs.v[i]->va == va) {
      if (index)
        *index = i;
      return g.allocs.v[i];
    }
  return NULL;
}

static falloc_t *alloc_containing(uint64_t va) {
  for (size_t i = 0; i < g.allocs.n; i++) {
    falloc_t *a = g.allocs.v[i];
    if (va >= a->va && va < a->va + a->size && a->state <= A_LIVE_PENDING)
      return a;
  }
  return NULL;
}

static fmapping_t *mapping_containing(uint64_t va) {
  for (size_t i = 0; i < g.maps.n; i++)
    if (va >= g.maps.v[i].va && va < g.maps.v[i].va + g.maps.v[i].size)
      return &g.maps.v[i];
  return NULL;
}

/* The shadow address of [va, va + n) for a driver copy on `stream`, or an error. A copy
 * may span adjacent mappings: *run gets how much of it lies in this piece. */
static CUresult locate(const char *call, uint64_t va, uint64_t n, fstream_t *stream, bool write,
                       char **shadow, uint64_t *run) {
  falloc_t *a = alloc_containing(va);
  if (a) {
    if (va + n > a->va + a->size)
      return misuse(E_INVALID_VALUE, call, "the copy runs past the end of the allocation");
    if (a->state == A_LIVE_PENDING && !ordered_after(stream, a->stream, a->seq))
      return misuse(E_ILLEGAL_ADDRESS, call,
                    "the block's stream-ordered allocation is not ordered before this copy");
    *shadow = g.dev[a->device].shadow + a->off + (va - a->va);
    *run = n;
    return OK;
  }
  fmapping_t *m = mapping_containing(va);
  if (!m)
    return misuse(E_INVALID_VALUE, call, "not device memory (unallocated, freed or unmapped)");
  if (m->access != 3 && (write || m->access == 0))
    return misuse(E_ILLEGAL_ADDRESS, call, "mapped memory without access (cuMemSetAccess)");
  uint64_t in_map = m->va + m->size - va;
  *shadow = g.dev[m->handle->device].shadow + m->handle->off + m->hoff + (va - m->va);
  *run = n < in_map ? n : in_map;
  return OK;
}

/* Copies host <-> device (or fills device) through the shadow mapping. */
static CUresult device_bytes(const char *call, uint64_t va, uint64_t n, fstream_t *stream,
                             void *host_dst, const void *host_src, int fill) {
  uint64_t done = 0;
  while (done < n) {
    char *shadow;
    uint64_t run;
    CUresult r = locate(call, va + done, n - done, stream, !host_dst, &shadow, &run);
    if (r != OK)
      return r;
    if (host_dst)
      memcpy((char *)host_dst + done, shadow, run);
    else if (host_src)
      memcpy(shadow, (const char *)host_src + done, run);
    else
      memset(shadow, fill, run);
    done += run;
  }
  return OK;
}

/* ---- entry points: initialization, devices ---- */

#define ENTER(name)                                                                                \
  pthread_mutex_lock(&g.lock);                                                                     \
  CUresult r_ = injected(name);                                                                    \
  if (r_ != OK) {                                                                                  \
    pthread_mutex_unlock(&g.lock);                                                                 \
    return r_;                                                                                     \
  }
#define LEAVE(value)                                                                               \
  do {                                                                                             \
    CUresult v_ = (value);                                                                         \
    pthread_mutex_unlock(&g.lock);                                                                 \
    return v_;                                                                                     \
  } while (0)

EXPORT CUresult cuInit(unsigned flags) {
  pthread_mutex_lock(&g.lock);
  read_knobs(false);
  CUresult r = injected("cuInit");
  if (r == OK && flags)
    r = misuse(E_INVALID_VALUE, "cuInit", "flags must be 0");
  if (r == OK && g.init_error)
    r = g.init_error;
  if (r == OK && g.n_devices == 0)
    r = E_NO_DEVICE;
  if (r == OK && !g.mapped) {
    for (int d = 0; d < g.n_devices; d++)
      if (!map_device(d))
        r = E_UNKNOWN;
    g.mapped = r == OK;
  }
  if (r == OK)
    g.initialized = true;
  flog("cuInit(%u) = %d", flags, r);
  LEAVE(r);
}

EXPORT CUresult cuDriverGetVersion(int *version) {
  ENTER("cuDriverGetVersion");
  if (!version)
    LEAVE(misuse(E_INVALID_VALUE, "cuDriverGetVersion", "NULL"));
  *version = 12040;
  LEAVE(OK);
}

static CUresult check_device(const char *call, CUdevice dev) {
  if (!g.initialized)
    return misuse(E_NOT_INITIALIZED, call, "cuInit was not called");
  if (dev < 0 || dev >= g.n_devices)
    return misuse(E_INVALID_DEVICE, call, "no such device");
  return OK;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
  ENTER("cuDeviceGetCount");
  if (!count)
    LEAVE(misuse(E_INVALID_VALUE, "cuDeviceGetCount", "NULL"));
  CUresult r = need_init();
  if (r == OK)
    *count = g.n_devices;
  LEAVE(r);
}

EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
  ENTER("cuDeviceGet");
  CUresult r = check_device("cuDeviceGet", ordinal);
  if (r == OK)
    *dev = ordinal;
  LEAVE(r);
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  ENTER("cuDeviceGetName");
  CUresult r = check_device("cuDeviceGetName", dev);
  if (r == OK && (!name || len <= 0))
    r = misuse(E_INVALID_VALUE, "cuDeviceGetName", "no buffer");
  if (r == OK)
    snprintf(name, (size_t)len, "%s", g.name);
  LEAVE(r);
}

EXPORT CUresult cuDeviceGetPCIBusId(char *bus, int len, CUdevice dev) {
  ENTER("cuDeviceGetPCIBusId");
  CUresult r = check_device("cuDeviceGetPCIBusId", dev);
  if (r == OK && (!bus || len <= 0))
    r = misuse(E_INVALID_VALUE, "cuDeviceGetPCIBusId", "no buffer");
  if (r == OK)
    snprintf(bus, (size_t)len, "00000000:%02X:00.0", 0x10 + dev);
  LEAVE(r);
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  ENTER("cuDeviceTotalMem_v2");
  CUresult r = check_device("cuDeviceTotalMem_v2", dev);
  if (r == OK)
    *bytes = (size_t)g.dev[dev].total;
  LEAVE(r);
}

static int attribute(int attr) {
  for (size_t i = 0; i < g.n_attr_off; i++)
    if (g.attr_off[i] == attr)
      return 0;
  switch (attr) {
  case 16: return 132;                 /* multiprocessors */
  case 41: return 1;                   /* unified addressing */
  case 75: return 9;                   /* compute capability major */
  case 76: return 0;                   /* minor */
  case 88: return g.host_access;       /* pageable memory access */
  case 102: return 1;                  /* virtual memory management */
  case 115: return 1;                  /* memory pools */
  default: return attr < 140 ? 0 : -1; /* -1: not an attribute */
  }
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attr, CUdevice dev) {
  ENTER("cuDeviceGetAttribute");
  CUresult r = check_device("cuDeviceGetAttribute", dev);
  if (r == OK && (!value || attribute(attr) < 0))
    r = misuse(E_INVALID_VALUE, "cuDeviceGetAttribute", "no such attribute");
  if (r == OK)
    *value = attribute(attr);
  LEAVE(r);
}

/* ---- entry points: contexts ---- */

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev) {
  ENTER("cuDevicePrimaryCtxRetain");
  CUresult r = check_device("cuDevicePrimaryCtxRetain", dev);
  if (r == OK && !ctx)
    r = misuse(E_INVALID_VALUE, "cuDevicePrimaryCtxRetain", "NULL");
  if (r == OK && g.overhead > free_bytes(dev) && !(g.dev[dev].primary && g.dev[dev].primary->alive))
    r = E_OUT_OF_MEMORY;
  if (r == OK) {
    fdevice_t *d = &g.dev[dev];
    if (!d->primary || !d->primary->alive)
      d->primary = new_context(dev, true);
    d->primary->refs++;
    *ctx = d->primary;
  }
  flog("cuDevicePrimaryCtxRetain(%d) = %d", dev, r);
  LEAVE(r);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  ENTER("cuDevicePrimaryCtxRelease_v2");
  CUresult r = check_device("cuDevicePrimaryCtxRelease_v2", dev);
  fdevice_t *d = &g.dev[dev < 0 || dev >= MAX_DEVICES ? 0 : dev];
  if (r == OK && (!d->primary || !d->primary->alive || d->primary->refs <= 0))
    r = misuse(E_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease_v2", "not retained");
  if (r == OK && --d->primary->refs == 0)
    destroy_context(d->primary);
  flog("cuDevicePrimaryCtxRelease_v2(%d) = %d", dev, r);
  LEAVE(r);
}

EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned *flags, int *active) {
  ENTER("cuDevicePrimaryCtxGetState");
  CUresult r = check_device("cuDevicePrimaryCtxGetState", dev);
  if (r == OK) {
    *flags = 0;
    *active = g.dev[dev].primary && g.dev[dev].primary->alive;
  }
  LEAVE(r);
}

EXPORT CUresult cuCtxCreate_v2(CUcontext *ctx, unsigned flags, CUdevice dev) {
  ENTER("cuCtxCreate_v2");
  (void)flags;
  CUresult r = check_device("cuCtxCreate_v2", dev);
  if (r == OK && depth == MAX_STACK)
    r = misuse(E_UNKNOWN, "cuCtxCreate_v2", "context stack overflow");
  if (r == OK && g.overhead > free_bytes(dev))
    r = E_OUT_OF_MEMORY;
  if (r == OK) {
    *ctx = new_context(dev, false);
    stack[depth++] = *ctx;
  }
  LEAVE(r);
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  ENTER("cuCtxDestroy_v2");
  CUresult r = OK;
  if (!ctx || !ctx->alive || ctx->primary)
    r = misuse(E_INVALID_CONTEXT, "cuCtxDestroy_v2", "not a live non-primary context");
  if (r == OK) {
    destroy_context(ctx);
    if (depth && stack[depth - 1] == ctx)
      depth--;
  }
  LEAVE(r);
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx) {
  ENTER("cuCtxGetCurrent");
  CUresult r = need_init();
  if (r == OK)
    *ctx = depth ? stack[depth - 1] : NULL;
  LEAVE(r);
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  ENTER("cuCtxSetCurrent");
  CUresult r = need_init();
  if (r == OK && ctx && !ctx->alive)
    r = misuse(E_INVALID_CONTEXT, "cuCtxSetCurrent", "the context was destroyed");
  if (r == OK) {
    if (!ctx)
      depth = depth ? depth - 1 : 0;
    else if (depth)
      stack[depth - 1] = ctx;
    else
      stack[depth++] = ctx;
  }
  LEAVE(r);
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  ENTER("cuCtxPushCurrent_v2");
  CUresult r = need_init();
  if (r == OK && (!ctx || !ctx->alive))
    r = misuse(E_INVALID_CONTEXT, "cuCtxPushCurrent_v2", "not a live context");
  if (r == OK && depth == MAX_STACK)
    r = misuse(E_UNKNOWN, "cuCtxPushCurrent_v2", "context stack overflow");
  if (r == OK)
    stack[depth++] = ctx;
  LEAVE(r);
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *ctx) {
  ENTER("cuCtxPopCurrent_v2");
  CUresult r = need_init();
  if (r == OK && !depth)
    r = misuse(E_INVALID_CONTEXT, "cuCtxPopCurrent_v2", "the context stack is empty");
  if (r == OK) {
    fctx_t *top = stack[--depth];
    if (ctx)
      *ctx = top;
  }
  LEAVE(r);
}

EXPORT CUresult cuCtxGetDevice(CUdevice *dev) {
  ENTER("cuCtxGetDevice");
  fctx_t *c;
  CUresult r = current("cuCtxGetDevice", &c);
  if (r == OK)
    *dev = c->device;
  LEAVE(r);
}

EXPORT CUresult cuCtxSynchronize(void) {
  ENTER("cuCtxSynchronize");
  fctx_t *c;
  CUresult r = current("cuCtxSynchronize", &c);
  if (r == OK) {
    complete(&g.legacy, g.legacy.last);
    for (fstream_t *s = g.streams; s; s = s->next_all)
      if (s->ctx == c)
        complete(s, s->last);
    synchronized();
  }
  LEAVE(r);
}

/* ---- entry points: memory ---- */

EXPORT CUresult cuMemGetInfo_v2(size_t *free_out, size_t *total) {
  ENTER("cuMemGetInfo_v2");
  fctx_t *c;
  CUresult r = current("cuMemGetInfo_v2", &c);
  if (r == OK && (!free_out || !total))
    r = misuse(E_INVALID_VALUE, "cuMemGetInfo_v2", "NULL");
  if (r == OK) {
    *free_out = (size_t)free_bytes(c->device);
    *total = (size_t)g.dev[c->device].total;
  }
  LEAVE(r);
}

static falloc_t *new_alloc(fctx_t *c, uint64_t size, uint64_t bytes, uint64_t off) {
  falloc_t *a = calloc(1, sizeof *a);
  if (!a)
    abort();
  a->device = c->device;
  a->ctx = c;
  a->size = size;
  a->bytes = bytes;
  a->off = off;
  a->va = (uint64_t)(uintptr_t)g.dev[c->device].window + off;
  VEC_PUSH(g.allocs, a);
  return a;
}

static uint64_t round_page(uint64_t n) { return (n + PAGE - 1) / PAGE * PAGE; }

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
  ENTER("cuMemAlloc_v2");
  fctx_t *c;
  CUresult r = current("cuMemAlloc_v2", &c);
  if (r == OK && (!ptr || !size))
    r = misuse(E_INVALID_VALUE, "cuMemAlloc_v2", "NULL pointer or size 0");
  uint64_t off;
  if (r == OK && !phys_take(c->device, round_page(size), size, PAGE, &off))
    r = E_OUT_OF_MEMORY;
  if (r == OK) {
    falloc_t *a = new_alloc(c, round_page(size), size, off);
    a->state = A_LIVE;
    protect(a->va, a->size, 3);
    *ptr = a->va;
  }
  flog("cuMemAlloc_v2(%zu) = %d -> 0x%llx", size, r, r == OK ? *ptr : 0ull);
  LEAVE(r);
}

/* cuMemFree on a pool block: the driver synchronizes first. */
static void free_pool_block_now(falloc_t *a) {
  complete(a->stream, a->seq);
  a->pool->used -= a->size;
  a->state = A_FREE_READY;
  protect(a->va, a->size, 0);
  synchronized();
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
  ENTER("cuMemFree_v2");
  fctx_t *c;
  CUresult r = current("cuMemFree_v2", &c);
  size_t i = 0;
  falloc_t *a = r == OK && ptr ? alloc_at(ptr, &i) : NULL;
  if (r == OK && ptr && (!a || a->state > A_LIVE_PENDING))
    r = misuse(E_INVALID_VALUE, "cuMemFree_v2", "not a live allocation (double free?)");
  if (r == OK && a && a->pool) {
    free_pool_block_now(a);
  } else if (r == OK && a) {
    free_alloc_memory(a);
    free(a);
    VEC_DEL(g.allocs, i);
  }
  flog("cuMemFree_v2(0x%llx) = %d", ptr, r);
  LEAVE(r);
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
  ENTER("cuMemGetAddressRange_v2");
  fctx_t *c;
  CUresult r = current("cuMemGetAddressRange_v2", &c);
  if (r == OK) {
    falloc_t *a = alloc_containing(ptr);
    fmapping_t *m = a ? NULL : mapping_containing(ptr);
    if (!a && !m)
      r = E_NOT_FOUND;
    if (base && r == OK)
      *base = a ? a->va : m->va;
    if (size && r == OK)
      *size = (size_t)(a ? a->size : m->size);
  }
  LEAVE(r);
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
  ENTER("cuMemcpyHtoD_v2");
  fctx_t *c;
  CUresult r = current("cuMemcpyHtoD_v2", &c);
  if (r == OK)
    r = device_bytes("cuMemcpyHtoD_v2", dst, n, &g.legacy, NULL, src, 0);
  LEAVE(r);
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
  ENTER("cuMemcpyDtoH_v2");
  fctx_t *c;
  CUresult r = current("cuMemcpyDtoH_v2", &c);
  if (r == OK)
    r = device_bytes("cuMemcpyDtoH_v2", src, n, &g.legacy, dst, NULL, 0);
  LEAVE(r);
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
  ENTER("cuMemcpyHtoDAsync_v2");
  fctx_t *c;
  CUresult r = current("cuMemcpyHtoDAsync_v2", &c);
  if (r == OK)
    r = device_bytes("cuMemcpyHtoDAsync_v2", dst, n, resolve_stream(s), NULL, src, 0);
  if (r == OK)
    enqueue(resolve_stream(s));
  LEAVE(r);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER("cuMemcpyDtoHAsync_v2");
  fctx_t *c;
  CUresult r = current("cuMemcpyDtoHAsync_v2", &c);
  if (r == OK)
    r = device_bytes("cuMemcpyDtoHAsync_v2", src, n, resolve_stream(s), dst, NULL, 0);
  if (r == OK)
    enqueue(resolve_stream(s));
  LEAVE(r);
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
  ENTER("cuMemsetD8_v2");
  fctx_t *c;
  CUresult r = current("cuMemsetD8_v2", &c);
  if (r == OK)
    r = device_bytes("cuMemsetD8_v2", dst, n, &g.legacy, NULL, NULL, value);
  LEAVE(r);
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) {
  ENTER("cuMemsetD8Async");
  fctx_t *c;
  CUresult r = current("cuMemsetD8Async", &c);
  if (r == OK)
    r = device_bytes("cuMemsetD8Async", dst, n, resolve_stream(s), NULL, NULL, value);
  if (r == OK)
    enqueue(resolve_stream(s));
  LEAVE(r);
}

/* ---- entry points: streams and events ---- */

EXPORT CUresult cuStreamCreate(CUstream *stream, unsigned flags) {
  ENTER("cuStreamCreate");
  fctx_t *c;
  CUresult r = current("cuStreamCreate", &c);
  if (r == OK && (!stream || flags > 1))
    r = misuse(E_INVALID_VALUE, "cuStreamCreate", "NULL or unknown flags");
  if (r == OK) {
    fstream_t *s = calloc(1, sizeof *s);
    if (!s)
      abort();
    s->device = c->device;
    s->ctx = c;
    s->flags = flags;
    s->alive = true;
    s->next_all = g.streams;
    g.streams = s;
    *stream = s;
  }
  LEAVE(r);
}

static CUresult check_stream(const char *call, CUstream s) {
  if (!s || s == LEGACY || s == PER_THREAD)
    return OK;
  for (fstream_t *t = g.streams; t; t = t->next_all)
    if (t == s)
      return t->alive ? OK : misuse(E_INVALID_HANDLE, call, "the stream was destroyed");
  return misuse(E_INVALID_HANDLE, call, "not a stream");
}

EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  ENTER("cuStreamSynchronize");
  fctx_t *c;
  CUresult r = check_stream("cuStreamSynchronize", stream);
  if (r == OK && (!stream || stream == LEGACY || stream == PER_THREAD))
    r = current("cuStreamSynchronize", &c);
  if (r == OK) {
    fstream_t *s = resolve_stream(stream);
    complete(s, s->last);
    synchronized();
  }
  flog("cuStreamSynchronize(%p) = %d", (void *)stream, r);
  LEAVE(r);
}

EXPORT CUresult cuStreamQuery(CUstream stream) {
  ENTER("cuStreamQuery");
  CUresult r = check_stream("cuStreamQuery", stream);
  if (r == OK) { /* the double's work is done as soon as anyone looks */
    fstream_t *s = resolve_stream(stream);
    complete(s, s->last);
    settle();
  }
  LEAVE(r);
}

EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  ENTER("cuStreamDestroy_v2");
  CUresult r = check_stream("cuStreamDestroy_v2", stream);
  if (r == OK && (!stream || stream == LEGACY || stream == PER_THREAD))
    r = misuse(E_INVALID_HANDLE, "cuStreamDestroy_v2", "the NULL stream cannot be destroyed");
  if (r == OK) {
    /* Its work completes in the background; pending pool operations take effect. */
    complete(stream, stream->last);
    settle();
    stream->alive = false;
  }
  LEAVE(r);
}

EXPORT CUresult cuEventCreate(CUevent *event, unsigned flags) {
  ENTER("cuEventCreate");
  (void)flags;
  fctx_t *c;
  CUresult r = current("cuEventCreate", &c);
  if (r == OK) {
    fevent_t *e = calloc(1, sizeof *e);
    if (!e)
      abort();
    e->alive = true;
    e->next_all = g.events;
    g.events = e;
    *event = e;
  }
  LEAVE(r);
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream stream) {
  ENTER("cuEventRecord");
  CUresult r = check_stream("cuEventRecord", stream);
  if (r == OK && (!e || !e->alive))
    r = misuse(E_INVALID_HANDLE, "cuEventRecord", "not an event");
  if (r == OK) {
    e->stream = resolve_stream(stream);
    e->seq = enqueue(e->stream);
  }
  LEAVE(r);
}

EXPORT CUresult cuEventSynchronize(CUevent e) {
  ENTER("cuEventSynchronize");
  CUresult r = OK;
  if (!e || !e->alive)
    r = misuse(E_INVALID_HANDLE, "cuEventSynchronize", "not an event");
  if (r == OK && e->stream) {
    complete(e->stream, e->seq);
    synchronized();
  }
  LEAVE(r);
}

EXPORT CUresult cuEventQuery(CUevent e) {
  ENTER("cuEventQuery");
  CUresult r = OK;
  if (!e || !e->alive)
    r = misuse(E_INVALID_HANDLE, "cuEventQuery", "not an event");
  if (r == OK && e->stream) {
    complete(e->stream, e->seq);
    settle();
  }
  LEAVE(r);
}

EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent e, unsigned flags) {
  ENTER("cuStreamWaitEvent");
  (void)flags;
  CUresult r = check_stream("cuStreamWaitEvent", stream);
  if (r == OK && (!e || !e->alive))
    r = misuse(E_INVALID_HANDLE, "cuStreamWaitEvent", "not an event");
  if (r == OK && e->stream) {
    fstream_t *s = resolve_stream(stream);
    wait_edge_t edge = {s, e->stream, enqueue(s), e->seq};
    VEC_PUSH(g.edges, edge);
  }
  LEAVE(r);
}

EXPORT CUresult cuEventDestroy_v2(CUevent e) {
  ENTER("cuEventDestroy_v2");
  CUresult r = OK;
  if (!e || !e->alive)
    r = misuse(E_INVALID_HANDLE, "cuEventDestroy_v2", "not an event");
  if (r == OK)
    e->alive = false;
  LEAVE(r);
}

/* ---- entry points: memory pools ---- */

static CUresult check_pool(const char *call, fpool_t *p) {
  for (fpool_t *q = g.pools; q; q = q->next_all)
    if (q == p)
      return q->alive ? OK : misuse(E_INVALID_VALUE, call, "the pool was destroyed");
  return misuse(E_INVALID_VALUE, call, "not a pool");
}

static fpool_t *new_pool(fctx_t *c, bool is_default) {
  fpool_t *p = calloc(1, sizeof *p);
  if (!p)
    abort();
  p->device = c->device;
  p->ctx = c;
  p->is_default = is_default;
  p->alive = true;
  p->reuse[1] = p->reuse[2] = p->reuse[3] = 1;
  p->next_all = g.pools;
  g.pools = p;
  return p;
}

typedef struct pool_props { /* CUmemPoolProps */
  int alloc_type, handle_types;
  struct {
    int type, id;
  } location;
  void *win32;
  size_t max_size;
  unsigned short usage;
  unsigned char reserved[54];
} pool_props_t;

EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const pool_props_t *props) {
  ENTER("cuMemPoolCreate");
  fctx_t *c;
  CUresult r = current("cuMemPoolCreate", &c);
  if (r == OK && (!pool || !props || props->alloc_type != 1 || props->location.type != 1 ||
                  props->location.id != c->device))
    r = misuse(E_INVALID_VALUE, "cuMemPoolCreate", "bad properties");
  if (r == OK && !attribute(115))
    r = E_NOT_SUPPORTED;
  if (r == OK)
    *pool = new_pool(c, false);
  LEAVE(r);
}

EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
  ENTER("cuDeviceGetDefaultMemPool");
  fctx_t *c;
  CUresult r = check_device("cuDeviceGetDefaultMemPool", dev);
  if (r == OK)
    r = current("cuDeviceGetDefaultMemPool", &c);
  if (r == OK && !attribute(115))
    r = E_NOT_SUPPORTED;
  if (r == OK) {
    if (!g.dev[dev].default_pool)
      g.dev[dev].default_pool = new_pool(c, true);
    *pool = g.dev[dev].default_pool;
  }
  LEAVE(r);
}

EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  ENTER("cuMemPoolDestroy");
  CUresult r = check_pool("cuMemPoolDestroy", pool);
  if (r == OK && pool->is_default)
    r = misuse(E_INVALID_VALUE, "cuMemPoolDestroy", "the default pool");
  if (r == OK) {
    for (size_t i = 0; i < g.allocs.n;) {
      falloc_t *a = g.allocs.v[i];
      if (a->pool != pool) {
        i++;
      } else if (a->state >= A_FREE_PENDING) {
        release_block(i);
      } else { /* the driver frees it once the last block is freed: here, a leak */
        flog("LEAK: pool destroyed with block 0x%llx of %llu bytes live", (unsigned long long)a->va,
             (unsigned long long)a->size);
        i++;
      }
    }
    pool->alive = false;
  }
  LEAVE(r);
}

enum { ATTR_THRESHOLD = 4, ATTR_RESERVED = 5, ATTR_RESERVED_HIGH, ATTR_USED, ATTR_USED_HIGH };

EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attr, void *value) {
  ENTER("cuMemPoolSetAttribute");
  CUresult r = check_pool("cuMemPoolSetAttribute", pool);
  if (r == OK && !value)
    r = misuse(E_INVALID_VALUE, "cuMemPoolSetAttribute", "NULL");
  if (r == OK) {
    if (attr >= 1 && attr <= 3) {
      pool->reuse[attr] = *(int *)value;
    } else if (attr == ATTR_THRESHOLD) {
      pool->threshold = *(unsigned long long *)value;
    } else if ((attr == ATTR_RESERVED_HIGH || attr == ATTR_USED_HIGH) &&
               *(unsigned long long *)value == 0) {
      if (attr == ATTR_RESERVED_HIGH)
        pool->reserved_high = pool->reserved;
      else
        pool->used_high = pool->used;
    } else {
      r = misuse(E_INVALID_VALUE, "cuMemPoolSetAttribute", "read-only or unknown attribute");
    }
  }
  LEAVE(r);
}

EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attr, void *value) {
  ENTER("cuMemPoolGetAttribute");
  CUresult r = check_pool("cuMemPoolGetAttribute", pool);
  if (r == OK && !value)
    r = misuse(E_INVALID_VALUE, "cuMemPoolGetAttribute", "NULL");
  if (r == OK) {
    unsigned long long *v = value;
    switch (attr) {
    case 1:
    case 2:
    case 3: *(int *)value = pool->reuse[attr]; break;
    case ATTR_THRESHOLD: *v = pool->threshold; break;
    case ATTR_RESERVED: *v = pool->reserved; break;
    case ATTR_RESERVED_HIGH: *v = pool->reserved_high; break;
    case ATTR_USED: *v = pool->used; break;
    case ATTR_USED_HIGH: *v = pool->used_high; break;
    default: r = misuse(E_INVALID_VALUE, "cuMemPoolGetAttribute", "unknown attribute");
    }
  }
  LEAVE(r);
}

EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  ENTER("cuMemPoolTrimTo");
  CUresult r = check_pool("cuMemPoolTrimTo", pool);
  if (r == OK)
    trim_pool(pool, keep);
  flog("cuMemPoolTrimTo(%zu) = %d, %llu reserved", keep, r,
       r == OK ? (unsigned long long)pool->reserved : 0ull);
  LEAVE(r);
}

/* A free block of the pool that `stream` may take now (best fit), or NULL. */
static falloc_t *reusable(fpool_t *p, uint64_t need, fstream_t *stream) {
  falloc_t *best = NULL;
  for (size_t i = 0; i < g.allocs.n; i++) {
    falloc_t *a = g.allocs.v[i];
    bool ready = a->state == A_FREE_READY ||
                 (a->state == A_FREE_PENDING && g.stream_reuse && a->stream == stream);
    if (a->pool == p && ready && a->size >= need && (!best || a->size < best->size))
      best = a;
  }
  return best;
}

static CUresult pool_alloc(const char *call, CUdeviceptr *ptr, size_t size, fpool_t *pool,
                           CUstream stream) {
  fctx_t *c;
  CUresult r = current(call, &c);
  if (r == OK)
    r = check_pool(call, pool);
  if (r == OK)
    r = check_stream(call, stream);
  if (r == OK && (!ptr || !size))
    r = misuse(E_INVALID_VALUE, call, "NULL pointer or size 0");
  if (r != OK)
    return r;
  fstream_t *s = resolve_stream(stream);
  uint64_t need = round_page(size), off;
  falloc_t *a = reusable(pool, need, s);
  if (!a) {
    if (!phys_take(pool->device, need, need, PAGE, &off))
      return E_OUT_OF_MEMORY;
    a = new_alloc(c, need, need, off);
    a->pool = pool;
    pool->reserved += need;
    if (pool->reserved > pool->reserved_high)
      pool->reserved_high = pool->reserved;
  }
  a->state = A_LIVE_PENDING;
  a->stream = s;
  a->seq = enqueue(s);
  protect(a->va, a->size, 0); /* until its stream is synchronized */
  pool->used += a->size;
  if (pool->used > pool->used_high)
    pool->used_high = pool->used;
  *ptr = a->va;
  return OK;
}

EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *ptr, size_t size, CUmemoryPool pool,
                                        CUstream stream) {
  ENTER("cuMemAllocFromPoolAsync");
  CUresult r = pool_alloc("cuMemAllocFromPoolAsync", ptr, size, pool, stream);
  flog("cuMemAllocFromPoolAsync(%zu, %p) = %d -> 0x%llx", size, (void *)stream, r,
       r == OK ? *ptr : 0ull);
  LEAVE(r);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *ptr, size_t size, CUstream stream) {
  ENTER("cuMemAllocAsync");
  fctx_t *c;
  CUresult r = current("cuMemAllocAsync", &c);
  if (r == OK && !attribute(115))
    r = E_NOT_SUPPORTED;
  if (r == OK) {
    fdevice_t *d = &g.dev[c->device];
    if (!d->default_pool)
      d->default_pool = new_pool(c, true);
    r = pool_alloc("cuMemAllocAsync", ptr, size, d->default_pool, stream);
  }
  LEAVE(r);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  ENTER("cuMemFreeAsync");
  fctx_t *c;
  CUresult r = current("cuMemFreeAsync", &c);
  if (r == OK)
    r = check_stream("cuMemFreeAsync", stream);
  size_t i = 0;
  falloc_t *a = r == OK ? alloc_at(ptr, &i) : NULL;
  if (r == OK && (!a || a->state > A_LIVE_PENDING))
    r = misuse(E_INVALID_VALUE, "cuMemFreeAsync", "not a live allocation (double free?)");
  if (r == OK && !a->pool) { /* a cuMemAlloc block: the driver frees it in order, at once here */
    free_alloc_memory(a);
    free(a);
    VEC_DEL(g.allocs, i);
  } else if (r == OK) {
    fstream_t *s = resolve_stream(stream);
    if (a->state == A_LIVE_PENDING && !ordered_after(s, a->stream, a->seq))
      r = misuse(E_ILLEGAL_ADDRESS, "cuMemFreeAsync",
                 "freed on a stream not ordered after its allocation");
    if (r == OK) {
      a->state = A_FREE_PENDING;
      a->stream = s;
      a->seq = enqueue(s);
      a->pool->used -= a->size;
      protect(a->va, a->size, 0);
    }
  }
  flog("cuMemFreeAsync(0x%llx, %p) = %d", ptr, (void *)stream, r);
  LEAVE(r);
}

/* ---- entry points: virtual memory management ---- */

typedef struct alloc_prop { /* CUmemAllocationProp */
  int type, requested_handle_types;
  struct {
    int type, id;
  } location;
  void *win32;
  unsigned char flags[8];
} alloc_prop_t;

typedef struct access_desc { /* CUmemAccessDesc */
  struct {
    int type, id;
  } location;
  int flags;
} access_desc_t;

static CUresult need_vmm(const char *call, fctx_t **c) {
  CUresult r = current(call, c);
  if (r == OK && !attribute(102))
    r = E_NOT_SUPPORTED;
  return r;
}

static bool granular(uint64_t n) { return n % g.granularity == 0; }

EXPORT CUresult cuMemGetAllocationGranularity(size_t *gran, const alloc_prop_t *prop, int option) {
  ENTER("cuMemGetAllocationGranularity");
  CUresult r = need_init();
  if (r == OK &&
      (!gran || !prop || prop->type != 1 || prop->location.type != 1 || prop->location.id < 0 ||
       prop->location.id >= g.n_devices || option < 0 || option > 1))
    r = misuse(E_INVALID_VALUE, "cuMemGetAllocationGranularity", "bad properties");
  if (r == OK && !attribute(102))
    r = E_NOT_SUPPORTED;
  if (r == OK)
    *gran = (size_t)g.granularity;
  LEAVE(r);
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags) {
  ENTER("cuMemAddressReserve");
  (void)addr;
  fctx_t *c;
  CUresult r = need_vmm("cuMemAddressReserve", &c);
  if (r == OK && (!ptr || !size || !granular(size) || flags))
    r = misuse(E_INVALID_VALUE, "cuMemAddressReserve", "size not a multiple of the granularity");
  uint64_t align = alignment > g.granularity ? alignment : g.granularity;
  if (r == OK) {
    size_t len = size + align;
    char *m = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      r = E_OUT_OF_MEMORY;
    } else {
      uint64_t va = ((uint64_t)(uintptr_t)m + align - 1) / align * align;
      freserve_t res = {va, size, 0, m, len};
      VEC_PUSH(g.reserves, res);
      *ptr = va;
    }
  }
  flog("cuMemAddressReserve(%zu) = %d -> 0x%llx", size, r, r == OK ? *ptr : 0ull);
  LEAVE(r);
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  ENTER("cuMemAddressFree");
  fctx_t *c;
  CUresult r = need_vmm("cuMemAddressFree", &c);
  size_t i = 0;
  while (r == OK && i < g.reserves.n && g.reserves.v[i].va != ptr)
    i++;
  if (r == OK && (i == g.reserves.n || g.reserves.v[i].size != size))
    r = misuse(E_INVALID_VALUE, "cuMemAddressFree", "not a whole reservation");
  for (size_t m = 0; r == OK && m < g.maps.n; m++)
    if (g.maps.v[m].va >= ptr && g.maps.v[m].va < ptr + size)
      r = misuse(E_INVALID_VALUE, "cuMemAddressFree", "the range still has mappings");
  if (r == OK) {
    munmap(g.reserves.v[i].map_base, g.reserves.v[i].map_len);
    VEC_DEL(g.reserves, i);
  }
  LEAVE(r);
}

EXPORT CUresult cuMemCreate(CUmemHandle *handle, size_t size, const alloc_prop_t *prop,
                            unsigned long long flags) {
  ENTER("cuMemCreate");
  fctx_t *c;
  CUresult r = need_vmm("cuMemCreate", &c);
  if (r == OK &&
      (!handle || !prop || !size || !granular(size) || flags || prop->type != 1 ||
       prop->location.type != 1 || prop->location.id < 0 || prop->location.id >= g.n_devices))
    r = misuse(E_INVALID_VALUE, "cuMemCreate", "bad size or properties");
  uint64_t off;
  if (r == OK && !phys_take(prop->location.id, size, size, g.granularity, &off))
    r = E_OUT_OF_MEMORY;
  if (r == OK) {
    fhandle_t *h = calloc(1, sizeof *h);
    if (!h)
      abort();
    *h = (fhandle_t){.id = ++g.next_handle, .off = off, .size = size, .device = prop->location.id};
    VEC_PUSH(g.handles, h);
    *handle = h->id;
  }
  flog("cuMemCreate(%zu) = %d -> %llu", size, r, r == OK ? *handle : 0ull);
  LEAVE(r);
}

static fhandle_t *handle_of(CUmemHandle id, size_t *index) {
  for (size_t i = 0; i < g.handles.n; i++)
    if (g.handles.v[i]->id == id) {
      if (index)
        *index = i;
      return g.handles.v[i];
    }
  return NULL;
}

static void drop_handle_if_unused(fhandle_t *h) {
  size_t i;
  if (!h->released || h->maps || !handle_of(h->id, &i))
    return;
  phys_give(h->device, h->off, h->size, h->size);
  free(h);
  VEC_DEL(g.handles, i);
}

EXPORT CUresult cuMemRelease(CUmemHandle handle) {
  ENTER("cuMemRelease");
  fctx_t *c;
  CUresult r = need_vmm("cuMemRelease", &c);
  fhandle_t *h = r == OK ? handle_of(handle, NULL) : NULL;
  if (r == OK && (!h || h->released))
    r = misuse(E_INVALID_VALUE, "cuMemRelease", "not a live handle (released twice?)");
  if (r == OK) {
    h->released = true;
    drop_handle_if_unused(h);
  }
  flog("cuMemRelease(%llu) = %d", handle, r);
  LEAVE(r);
}

static freserve_t *reservation_of(uint64_t va, uint64_t size) {
  for (size_t i = 0; i < g.reserves.n; i++) {
    freserve_t *res = &g.reserves.v[i];
    if (va >= res->va && va + size <= res->va + res->size)
      return res;
  }
  return NULL;
}

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemHandle handle,
                         unsigned long long flags) {
  ENTER("cuMemMap");
  fctx_t *c;
  CUresult r = need_vmm("cuMemMap", &c);
  fhandle_t *h = r == OK ? handle_of(handle, NULL) : NULL;
  if (r == OK && (!h || h->released))
    r = misuse(E_INVALID_HANDLE, "cuMemMap", "not a live handle");
  if (r == OK && (!size || !granular(ptr) || !granular(size) || !granular(offset) || flags ||
                  offset + size > h->size))
    r = misuse(E_INVALID_VALUE, "cuMemMap", "unaligned, or beyond the handle");
  if (r == OK && !reservation_of(ptr, size))
    r = misuse(E_INVALID_VALUE, "cuMemMap", "not inside one reservation");
  for (size_t i = 0; r == OK && i < g.maps.n; i++)
    if (g.maps.v[i].va < ptr + size && ptr < g.maps.v[i].va + g.maps.v[i].size)
      r = misuse(E_INVALID_VALUE, "cuMemMap", "overlaps a mapping");
  if (r == OK) {
    void *m = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                   g.dev[h->device].memfd, (off_t)(h->off + offset));
    if (m == MAP_FAILED) {
      r = E_OUT_OF_MEMORY;
    } else {
      fmapping_t map = {ptr, size, offset, h, 0};
      VEC_PUSH(g.maps, map);
      h->maps++;
    }
  }
  flog("cuMemMap(0x%llx, %zu, %zu, %llu) = %d", ptr, size, offset, handle, r);
  LEAVE(r);
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const access_desc_t *desc,
                               size_t count) {
  ENTER("cuMemSetAccess");
  fctx_t *c;
  CUresult r = need_vmm("cuMemSetAccess", &c);
  if (r == OK && (!desc || count != 1 || desc->location.type != 1 || desc->location.id < 0 ||
                  desc->location.id >= g.n_devices || (desc->flags & ~3)))
    r = misuse(E_INVALID_VALUE, "cuMemSetAccess", "bad access descriptor");
  /* The whole range must be mapped, by whole mappings or parts of them. */
  for (uint64_t va = ptr; r == OK && va < ptr + size;) {
    fmapping_t *m = mapping_containing(va);
    if (!m) {
      r = misuse(E_INVALID_VALUE, "cuMemSetAccess", "part of the range is not mapped");
      break;
    }
    va = m->va + m->size;
  }
  for (size_t i = 0; r == OK && i < g.maps.n; i++) {
    fmapping_t *m = &g.maps.v[i];
    if (m->va >= ptr && m->va + m->size <= ptr + size) {
      m->access = desc->flags;
      protect(m->va, m->size, m->access);
    }
  }
  LEAVE(r);
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  ENTER("cuMemUnmap");
  fctx_t *c;
  CUresult r = need_vmm("cuMemUnmap", &c);
  /* Only whole mappings: the range starts and ends at mapping boundaries, all mapped. */
  for (uint64_t va = ptr; r == OK && va < ptr + size;) {
    fmapping_t *m = mapping_containing(va);
    if (!m || m->va != va || m->va + m->size > ptr + size) {
      r = misuse(E_INVALID_VALUE, "cuMemUnmap", "not a run of whole mappings");
      break;
    }
    va = m->va + m->size;
  }
  if (r == OK && !size)
    r = misuse(E_INVALID_VALUE, "cuMemUnmap", "size 0");
  for (size_t i = 0; r == OK && i < g.maps.n;) {
    fmapping_t m = g.maps.v[i];
    if (m.va < ptr || m.va >= ptr + size) {
      i++;
      continue;
    }
    mmap((void *)(uintptr_t)m.va, m.size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    VEC_DEL(g.maps, i);
    m.handle->maps--;
    drop_handle_if_unused(m.handle);
  }
  flog("cuMemUnmap(0x%llx, %zu) = %d", ptr, size, r);
  LEAVE(r);
}

/* ---- errors and the procedure table ---- */

static const struct {
  int code;
  const char *name, *text;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int error_index(CUresult e) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].code == e)
      return (int)i;
  return -1;
}

EXPORT CUresult cuGetErrorName(CUresult e, const char **name) {
  int i = error_index(e);
  if (!name)
    return E_INVALID_VALUE;
  *name = i < 0 ? NULL : errors[i].name;
  return i < 0 ? E_INVALID_VALUE : OK;
}

EXPORT CUresult cuGetErrorString(CUresult e, const char **text) {
  int i = error_index(e);
  if (!text)
    return E_INVALID_VALUE;
  *text = i < 0 ? NULL : errors[i].text;
  return i < 0 ? E_INVALID_VALUE : OK;
}

/* cuGetProcAddress("cuMemAlloc", ...) answers the newest version this double exports. */
static void *proc_address(const char *symbol) {
  Dl_info info;
  if (!symbol || !dladdr((void *)proc_address, &info))
    return NULL;
  void *self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (!self)
    return NULL;
  char name[128];
  void *fn = NULL;
  for (int v = 3; v >= 2 && !fn; v--) {
    snprintf(name, sizeof name, "%s_v%d", symbol, v);
    fn = dlsym(self, name);
  }
  if (!fn)
    fn = dlsym(self, symbol);
  dlclose(self);
  return fn;
}

EXPORT CUresult cuGetProcAddress(const char *symbol, void **fn, int version,
                                 unsigned long long flags) {
  (void)version;
  (void)flags;
  pthread_mutex_lock(&g.lock);
  CUresult r = injected("cuGetProcAddress");
  pthread_mutex_unlock(&g.lock);
  if (r != OK || !fn)
    return r != OK ? r : E_INVALID_VALUE;
  *fn = proc_address(symbol);
  return *fn ? OK : E_NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **fn, int version,
                                    unsigned long long flags, int *status) {
  CUresult r = cuGetProcAddress(symbol, fn, version, flags);
  if (status)
    *status = r == OK ? 0 : 1; /* CU_GET_PROC_ADDRESS_SUCCESS / _SYMBOL_NOT_FOUND */
  return r;
}

/* ---- test hooks ---- */

EXPORT void fakecuda_reload(void) {
  pthread_mutex_lock(&g.lock);
  read_knobs(true);
  pthread_mutex_unlock(&g.lock);
}

EXPORT unsigned long fakecuda_misuse(void) {
  pthread_mutex_lock(&g.lock);
  unsigned long n = g.misuse;
  pthread_mutex_unlock(&g.lock);
  return n;
}

EXPORT unsigned long fakecuda_injected(void) {
  pthread_mutex_lock(&g.lock);
  unsigned long n = g.injected;
  pthread_mutex_unlock(&g.lock);
  return n;
}

EXPORT void fakecuda_reset_counters(void) {
  pthread_mutex_lock(&g.lock);
  g.misuse = g.injected = 0;
  g.n_calls = 0;
  pthread_mutex_unlock(&g.lock);
}

/* How often entry point `name` was called since the counters were reset. */
EXPORT unsigned long fakecuda_calls(const char *name) {
  pthread_mutex_lock(&g.lock);
  unsigned long n = 0;
  for (size_t i = 0; i < g.n_calls; i++)
    if (!strcmp(g.calls[i].name, name))
      n = g.calls[i].n;
  pthread_mutex_unlock(&g.lock);
  return n;
}

/* Counts (and, when `report`, logs) what is still alive. */
static unsigned long count_live(FILE *out) {
  unsigned long n = 0;
  for (size_t i = 0; i < g.allocs.n; i++) {
    falloc_t *a = g.allocs.v[i];
    if (a->state > A_LIVE_PENDING)
      continue;
    n++;
    if (out)
      fprintf(out, "fakecuda: leak: %s 0x%llx of %llu bytes\n",
              a->pool ? "stream-ordered block" : "cuMemAlloc region", (unsigned long long)a->va,
              (unsigned long long)a->size);
  }
  for (size_t i = 0; i < g.handles.n; i++, n++)
    if (out)
      fprintf(out, "fakecuda: leak: cuMemCreate handle %llu of %llu bytes%s\n",
              (unsigned long long)g.handles.v[i]->id, (unsigned long long)g.handles.v[i]->size,
              g.handles.v[i]->released ? " (released, still mapped)" : "");
  for (size_t i = 0; i < g.reserves.n; i++, n++)
    if (out)
      fprintf(out, "fakecuda: leak: cuMemAddressReserve range 0x%llx of %llu bytes\n",
              (unsigned long long)g.reserves.v[i].va, (unsigned long long)g.reserves.v[i].size);
  for (fpool_t *p = g.pools; p; p = p->next_all)
    if (p->alive && !p->is_default && ++n && out)
      fprintf(out, "fakecuda: leak: memory pool %p\n", (void *)p);
  for (fstream_t *s = g.streams; s; s = s->next_all)
    if (s->alive && ++n && out)
      fprintf(out, "fakecuda: leak: stream %p\n", (void *)s);
  for (fevent_t *e = g.events; e; e = e->next_all)
    if (e->alive && ++n && out)
      fprintf(out, "fakecuda: leak: event %p\n", (void *)e);
  for (fctx_t *c = g.contexts; c; c = c->next_all)
    if (c->alive && ++n && out)
      fprintf(out, "fakecuda: leak: %s context of device %d%s\n",
              c->primary ? "primary" : "created", c->device,
              c->primary ? " (retained, never released)" : "");
  return n;
}

EXPORT unsigned long fakecuda_live(void) {
  pthread_mutex_lock(&g.lock);
  unsigned long n = count_live(NULL);
  pthread_mutex_unlock(&g.lock);
  return n;
}

/* For the fake NVML: device d's total and used memory, and this process's share. */
EXPORT int fakecuda_process_usage(int d, unsigned long long *total, unsigned long long *used,
                                  unsigned long long *mine) {
  pthread_mutex_lock(&g.lock);
  int ok = d >= 0 && d < MAX_DEVICES;
  if (ok) {
    if (!g.memory)
      read_knobs(false);
    *total = g.dev[d].total ? g.dev[d].total : g.memory;
    *used = used_bytes(d);
    *mine = g.dev[d].phys_used + (uint64_t)g.dev[d].contexts * g.overhead;
  }
  pthread_mutex_unlock(&g.lock);
  return ok;
}

__attribute__((destructor)) static void report_leaks(void) {
  pthread_mutex_lock(&g.lock);
  FILE *out = g.log ? g.log : stderr;
  unsigned long n = g.initialized ? count_live(out) : 0;
  if (n)
    fprintf(out, "fakecuda: %lu leak(s) at exit (pid %d)\n", n, (int)getpid());
  if (g.misuse)
    fprintf(out, "fakecuda: %lu misuse(s) of the driver API (pid %d)\n", g.misuse, (int)getpid());
  fflush(out);
  pthread_mutex_unlock(&g.lock);
  if (n && g.leak_exit)
    _exit(g.leak_exit);
}
