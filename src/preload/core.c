/* core.c — hbm's allocator behind the hooks: one hbm device per GPU ordinal, opened at the
 * program's first call with the settings `hbm run` passes by environment (HBM_RUN_MODE,
 * HBM_RUN_MEM_FRACTION, HBM_RUN_LOGDIR; otherwise the seeds' variables as for any hbm
 * program), on the CUDA backend. Under `hbm run` (HBM_RUN_STRICT=1, unless --best-effort) a
 * GPU hbm cannot serve stops the program there, with the reason and status 125, instead of
 * letting its allocations go to the driver unguarded. Every block is tagged with its caller
 * (library, symbol, entry point, stream) so the profile and the OOM diagnosis say who asked. */
#include "alloc/alloc.h" /* hbm__device_set_oom_buffers */
#include "preload/preload.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DEVICES 64

_Thread_local int preload_inside;

static hbm_device_t *devices[MAX_DEVICES];
static bool device_failed[MAX_DEVICES];
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- configuration ---- */

/* The seeds' variables, then what `hbm run` decided (its flags and the user's own settings
 * before it switched the frameworks to per-buffer allocation). */
static hbm_status_t run_config(int ordinal, hbm_config_t *cfg) {
  hbm_status_t st = hbm_config_from_env(cfg);
  if (st != HBM_OK)
    return st;
  cfg->device = HBM_DEVICE_CUDA;
  cfg->origin[HBM_CFG_DEVICE] = HBM_ORIGIN_FLAG;
  cfg->ordinal = ordinal;
  cfg->origin[HBM_CFG_ORDINAL] = HBM_ORIGIN_FLAG;
  const char *mode_text = getenv("HBM_RUN_MODE");
  if (mode_text && *mode_text) {
    hbm_mode_t mode;
    if ((st = hbm_mode_parse(mode_text, &mode)) != HBM_OK)
      return st;
    hbm_config_set_mode(cfg, mode, HBM_ORIGIN_FLAG);
  }
  const char *fraction = getenv("HBM_RUN_MEM_FRACTION");
  if (fraction && *fraction &&
      (st = hbm_config_set(cfg, "XLA_PYTHON_CLIENT_MEM_FRACTION", fraction, HBM_ORIGIN_FLAG)) !=
          HBM_OK)
    return st;
  const char *logdir = getenv("HBM_RUN_LOGDIR");
  if (logdir && *logdir &&
      (st = hbm_config_set(cfg, "HBM_PROFILE_DIR", logdir, HBM_ORIGIN_FLAG)) != HBM_OK)
    return st;
  return HBM_OK;
}

static hbm_device_t *open_device(int ordinal) {
  hbm_config_t cfg;
  hbm_device_t *dev = NULL;
  preload_inside++;
  if (run_config(ordinal, &cfg) == HBM_OK)
    dev = hbm_open(&cfg);
  preload_inside--;
  if (!dev) {
    const char *strict = getenv("HBM_RUN_STRICT");
    if (strict && !strcmp(strict, "1")) { /* fail closed: this is the program's first call */
      fprintf(stderr,
              "hbm: cannot serve GPU %d's allocations: %s\n"
              "hbm: stopping the program (exit status 125) rather than letting them go to the "
              "CUDA driver unguarded; hbm run --best-effort lets them\n",
              ordinal, hbm_last_error());
      _exit(125);
    }
    fprintf(stderr,
            "hbm: cannot serve GPU %d's allocations: %s\n"
            "hbm: they go to the CUDA driver unchanged\n",
            ordinal, hbm_last_error());
    return NULL;
  }
  hbm__device_set_oom_buffers(dev, true); /* the diagnosis names the largest live buffers */
  hbm_stats_t stats;
  char limit[32];
  hbm_get_stats(dev, &stats);
  fprintf(stderr, "hbm: %s, mode %s, limit %s%s%s\n", hbm_device_name(dev),
          hbm_mode_name(hbm_device_mode(dev)),
          hbm_format_bytes(stats.bytes_limit, limit, sizeof limit),
          hbm_profiler_path() ? ", profile " : "", hbm_profiler_path() ? hbm_profiler_path() : "");
  return dev;
}

/* At exit, who else holds each GPU's memory (the profiler's own exit handler, registered
 * earlier, runs after this one and writes the markers out). */
static void note_holders_at_exit(void) {
  for (int i = 0; i < MAX_DEVICES; i++)
    if (devices[i])
      preload_note_holders(devices[i], "exit");
}

static void register_exit_note(void) { atexit(note_holders_at_exit); }

static void note_holders_at_start(hbm_device_t *dev) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  preload_note_holders(dev, "start");
  pthread_once(&once, register_exit_note);
}

hbm_device_t *preload_device(int ordinal) {
  if (ordinal < 0 || ordinal >= MAX_DEVICES)
    return NULL;
  hbm_device_t *dev = __atomic_load_n(&devices[ordinal], __ATOMIC_ACQUIRE);
  if (dev)
    return dev;
  pthread_mutex_lock(&devices_lock);
  bool opened = false;
  if (!devices[ordinal] && !device_failed[ordinal]) {
    dev = open_device(ordinal);
    device_failed[ordinal] = dev == NULL;
    opened = dev != NULL;
    __atomic_store_n(&devices[ordinal], dev, __ATOMIC_RELEASE);
  }
  dev = devices[ordinal];
  pthread_mutex_unlock(&devices_lock);
  if (opened)
    note_holders_at_start(dev);
  return dev;
}

preload_cu_t preload_current_ordinal(int *ordinal) {
  const preload_driver_t *drv = preload_driver();
  if (!drv)
    return PRELOAD_CU_ERROR_NOT_INITIALIZED;
  int device = 0, count = 0;
  preload_cu_t r = drv->ctx_get_device(&device);
  if (r == PRELOAD_CU_SUCCESS)
    r = drv->device_get_count(&count);
  for (int i = 0; r == PRELOAD_CU_SUCCESS && i < count; i++) {
    int d = -1;
    if (drv->device_get(&d, i) == PRELOAD_CU_SUCCESS && d == device) {
      *ordinal = i;
      return PRELOAD_CU_SUCCESS;
    }
  }
  return r != PRELOAD_CU_SUCCESS ? r : PRELOAD_CU_ERROR_UNKNOWN;
}

/* ---- who called: library and symbol of a return address, cached per address ---- */

typedef struct caller_info {
  const void *addr;
  char library[96]; /* basename */
  char symbol[160];
  uintptr_t offset; /* in the library */
} caller_info_t;

#define CALLER_SLOTS 1024
static caller_info_t callers[CALLER_SLOTS];
static pthread_mutex_t callers_lock = PTHREAD_MUTEX_INITIALIZER;

/* C++ callers (every framework) have mangled names: demangled with the C++ runtime's
 * __cxa_demangle when the program has one loaded, else left as they are. */
static void readable_symbol(const char *name, char *out, size_t cap) {
  typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);
  static demangle_fn demangle;
  static bool looked;
  if (!looked) {
    void *p = preload_real_dlsym(RTLD_DEFAULT, "__cxa_demangle");
    memcpy(&demangle, &p, sizeof p);
    looked = true;
  }
  int status = -1;
  char *plain =
      name[0] == '_' && name[1] == 'Z' && demangle ? demangle(name, NULL, NULL, &status) : NULL;
  snprintf(out, cap, "%s", plain && status == 0 ? plain : name);
  free(plain);
}

typedef struct main_search {
  uintptr_t addr;
  bool found;
} main_search_t;

/* dl_iterate_phdr lists the program itself first: whether addr lies in one of its segments. */
static int in_first_object(struct dl_phdr_info *info, size_t size, void *ctx) {
  (void)size;
  main_search_t *m = ctx;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && m->addr >= lo && m->addr < lo + ph->p_memsz)
      m->found = true;
  }
  return 1; /* the first object only */
}

static bool in_the_program(const void *addr) {
  main_search_t m = {(uintptr_t)addr, false};
  dl_iterate_phdr(in_first_object, &m);
  return m.found;
}

static void describe_caller(const void *addr, caller_info_t *out) {
  memset(out, 0, sizeof *out);
  out->addr = addr;
  Dl_info info;
  if (!addr || !dladdr(addr, &info)) {
    snprintf(out->library, sizeof out->library, "?");
    return;
  }
  const char *slash = info.dli_fname ? strrchr(info.dli_fname, '/') : NULL;
  snprintf(out->library, sizeof out->library, "%s%s",
           slash            ? slash + 1
           : info.dli_fname ? info.dli_fname
                            : "?",
           in_the_program(addr) ? " (the program)" : "");
  out->offset = (uintptr_t)addr - (uintptr_t)info.dli_fbase;
  if (info.dli_sname)
    readable_symbol(info.dli_sname, out->symbol, sizeof out->symbol);
}

/* dladdr searches symbol tables: once per call site, then from the cache (callers_lock also
 * guards readable_symbol's lookup of the demangler). */
static void caller_of(const void *addr, caller_info_t *out) {
  size_t slot = ((uintptr_t)addr >> 2) * 0x9E3779B97F4A7C15ull >> 54; /* 10 bits */
  pthread_mutex_lock(&callers_lock);
  if (callers[slot].addr != addr)
    describe_caller(addr, &callers[slot]);
  *out = callers[slot];
  pthread_mutex_unlock(&callers_lock);
}

/* Libraries an allocation passes through on its way to the driver (the CUDA runtime, the
 * driver itself): the library that asked is the first frame past them. */
static bool passes_through(const caller_info_t *c) {
  return !strncmp(c->library, "libcudart", 9) || !strncmp(c->library, "libcuda.so", 10);
}

#define WALK_FRAMES 32

/* Who asked: the hook's return address, or, when that lies in the CUDA runtime (an
 * allocation the runtime makes for its caller: cudaMallocPitch, cudaMalloc3D, ...), the
 * first frame of the stack outside the runtime, the driver and this library. */
static void asker_of(const void *caller, caller_info_t *who) {
  caller_of(caller, who);
  if (!passes_through(who))
    return;
  void *frames[WALK_FRAMES];
  int n = backtrace(frames, WALK_FRAMES);
  for (int i = 0; i < n; i++) {
    caller_info_t frame;
    if (preload_is_own_address(frames[i]))
      continue;
    caller_of(frames[i], &frame);
    /* A sanitizer's runtime intercepts backtrace itself: its frames are not the asker. */
    bool sanitizer = !strncmp(frame.library, "libasan", 7) ||
                     !strncmp(frame.library, "libtsan", 7) ||
                     !strncmp(frame.library, "libubsan", 8);
    if (!passes_through(&frame) && !sanitizer && strcmp(frame.library, "?")) {
      *who = frame;
      return;
    }
  }
}

/* ---- allocation ---- */

hbm_status_t preload_alloc(hbm_device_t *dev, size_t size, const preload_call_t *call, void **out) {
  caller_info_t who;
  asker_of(call->caller, &who);
  char source[256];
  if (call->ordered && call->stream)
    snprintf(source, sizeof source, "%s on stream %p from %s+0x%zx", call->entry, call->stream,
             who.library, (size_t)who.offset);
  else if (call->ordered)
    snprintf(source, sizeof source, "%s on the default stream from %s+0x%zx", call->entry,
             who.library, (size_t)who.offset);
  else
    snprintf(source, sizeof source, "%s from %s+0x%zx", call->entry, who.library,
             (size_t)who.offset);
  hbm_tag_t tag = {
      .op = who.symbol[0] ? who.symbol : call->entry, .group = who.library, .source = source};
  preload_inside++;
  void *p = hbm_alloc_tagged(dev, size, 0, &tag);
  hbm_status_t st = p ? HBM_OK : hbm_last_status();
  if (!p && st == HBM_ERR_NO_MEMORY) {
    char bytes[32];
    fprintf(stderr, "hbm: %s(%zu bytes = %s) from %s%s%s failed: out of memory\n%s\n", call->entry,
            size, hbm_format_bytes(size, bytes, sizeof bytes), who.library,
            who.symbol[0] ? " in " : "", who.symbol, hbm_last_error());
  } else if (!p) {
    fprintf(stderr, "hbm: %s(%zu bytes) from %s failed: %s\n", call->entry, size, who.library,
            hbm_last_error());
  }
  preload_inside--;
  *out = p;
  return st;
}

hbm_device_t *preload_owner(const void *ptr) {
  if (!ptr)
    return NULL;
  for (int i = 0; i < MAX_DEVICES; i++) {
    hbm_device_t *dev = __atomic_load_n(&devices[i], __ATOMIC_ACQUIRE);
    if (!dev)
      continue;
    preload_inside++;
    size_t size = hbm_block_size(dev, ptr);
    preload_inside--;
    if (size)
      return dev;
  }
  return NULL;
}

hbm_status_t preload_free(hbm_device_t *dev, void *ptr, const preload_call_t *call) {
  const preload_driver_t *drv = preload_driver();
  preload_inside++;
  /* The block may still be read or written by work in flight: cuMemFree waits for the
   * context, cuMemFreeAsync orders the free after the stream's work. hbm may hand the block
   * out again at once, so wait here for what the driver would have waited for. */
  if (drv && !call->synced) {
    if (call->ordered && drv->stream_synchronize)
      drv->stream_synchronize(call->stream);
    else if (!call->ordered && drv->ctx_synchronize)
      drv->ctx_synchronize();
  }
  hbm_status_t st = hbm_free(dev, ptr);
  preload_inside--;
  return st;
}

hbm_status_t preload_mem_info(hbm_device_t *dev, size_t *free_bytes, size_t *total) {
  hbm_stats_t s;
  uint64_t dev_total = 0, dev_free = 0;
  preload_inside++;
  hbm_status_t st = hbm_get_stats(dev, &s);
  if (st == HBM_OK)
    st = hbm_device_memory(dev, &dev_total, &dev_free);
  preload_inside--;
  if (st != HBM_OK)
    return st;
  /* What hbm would still hand out: the limit less what is in use, but no more than its
   * free reserved memory plus what the device itself has free. */
  uint64_t room = s.bytes_limit > s.bytes_in_use ? s.bytes_limit - s.bytes_in_use : 0;
  uint64_t reserved_free =
      s.bytes_reserved > s.bytes_in_use ? s.bytes_reserved - s.bytes_in_use : 0;
  if (room > reserved_free + dev_free)
    room = reserved_free + dev_free;
  *free_bytes = (size_t)room;
  *total = (size_t)s.bytes_limit;
  return HBM_OK;
}
