/* recorder.c — the profiler's event recorder (recorder.h) and the public hbm_profiler_*
 * functions. While a capture runs, every hook appends a small fixed-layout record to a buffer
 * ("chunk") owned by the calling thread: no lock, no atomic read-modify-write, and a time
 * stamp that reads the clock (rdtsc wherever the TSC is invariant, whatever clocksource the
 * kernel picked; see choose_clock) at one event in eight or after 10 ms (stamp()). A writer
 * thread collects full chunks (and, once a second or on flush/OOM/stop, the filled part of
 * every thread's current chunk),
 * turns them into trace records (strings interned once per file, times in ns) and lets
 * trace_write.c compress and append them as blocks. So the allocating thread pays for the
 * record only; compression happens on the writer thread.
 *
 * Concurrency: a chunk's owner appends past `committed` and publishes with a release store;
 * collectors read [consumed, committed) with an acquire load under rec.lock. Lock order:
 * devices_lock > (a device's own lock) > write_lock > lock. Captures are numbered (gen): a
 * thread's leftovers from an earlier capture are dropped when it next records. */
#include "profile/recorder.h"

#include "base/base.h"
#include "profile/trace_format.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

#define CHUNK_BYTES (64u << 10)
#define MAX_QUEUED_BYTES HBM__REC_QUEUE_BOUND /* past this, producers help the writer */
#define PREFILL_CHUNKS (HBM__REC_READY_BYTES / CHUNK_BYTES) /* more freed ones are unmapped */
#define MAX_TAG_STRING 4095u /* longer tag strings are cut in the profile */
#define FLUSH_PERIOD_S 1     /* bounds what a crash can lose */
/* The clock is read at one event in CLOCK_EVERY of a thread, and whenever the writer's
 * heartbeat (every HEARTBEAT_MS) moved since the thread's last reading (stamp()). */
#define CLOCK_EVERY 8
#define HEARTBEAT_MS 10
#define MAX_STAMPED_DEVICES 1024 /* devices whose stamps may skip the clock (ids below) */

atomic_uint hbm__rec_capturing;

/* ---- raw records, as threads write them (never stored in files) ---- */

enum { RAW_ALLOC = 1, RAW_FREE = 2, RAW_RESERVE = 3 };
#define RAW_TAGGED 1u    /* an ALLOC followed by 4 string lengths and the strings */
#define RAW_DESCRIBED 2u /* an ALLOC listed by describe(): live before the capture */
#define RAW_STABLE 4u    /* an ALLOC followed by 4 string pointers (hbm__rec_alloc_stable) */

typedef struct raw_head {
  uint8_t type, flags;
  uint16_t extra; /* category (ALLOC), op (RESERVE) */
  int32_t device;
  uint64_t ticks;
} raw_head_t;

typedef struct raw_alloc {
  raw_head_t h;
  uint64_t address, size, allocated;
} raw_alloc_t;

typedef struct raw_free {
  raw_head_t h;
  uint64_t address;
} raw_free_t;

typedef struct raw_reserve {
  raw_head_t h;
  uint64_t address, size;
} raw_reserve_t;

typedef struct chunk {
  struct chunk *next;
  _Atomic size_t committed; /* bytes the owner has finished writing */
  size_t consumed;          /* bytes already turned into trace records (under rec.lock) */
  unsigned gen;
  _Alignas(8) uint8_t data[CHUNK_BYTES];
} chunk_t;

typedef struct rec_thread {
  struct rec_thread *next;
  chunk_t *cur; /* changed by the owner under rec.lock only */
  size_t pos;   /* owner only */
  /* stamp(), owner only: the last clock reading, events left before the next one, and the
   * heartbeat it was taken at */
  uint64_t last_ticks;
  unsigned clock_in, beat;
  unsigned gen; /* capture this thread's chunk belongs to (owner, under rec.lock) */
  bool describing;
  bool dead; /* its thread exited; the struct is reused once drained */
} rec_thread_t;

typedef struct rec_device {
  char name[64];
  char mode[16];
  uint64_t limit;
  void (*describe)(void *dev);
  void *dev;
  bool open;
} rec_device_t;

typedef struct space_slot {
  char device[64];
  uint64_t limit;
} space_slot_t;

static struct {
  pthread_mutex_t devices_lock; /* the device registry; start/stop */
  pthread_mutex_t write_lock;   /* the trace writer and the device → space map */
  pthread_mutex_t lock;         /* threads, chunks, queue */
  pthread_cond_t wake;          /* the writer thread */
  /* registry (devices_lock) */
  rec_device_t *devices;
  int n_devices, cap_devices;
  /* threads and chunks (lock) */
  rec_thread_t *threads;
  chunk_t *queue_head, *queue_tail;
  size_t n_queued;
  chunk_t *free_chunks;
  size_t n_free; /* chunks on free_chunks */
  bool stopping;
  /* the capture (write_lock) */
  hbm_trace_writer_t *tw;
  int *space_of; /* device id → space index, -1 when none */
  int cap_space_of;
  space_slot_t *spaces;
  int n_spaces, cap_spaces;
  uint8_t *scratch;
  size_t cap_scratch;
  bool dirty; /* records written since the last block went to disk */
  uint64_t written_events;
  /* set at start */
  pthread_t writer;
  bool writer_running;
  uint64_t ticks0;
  double ns_per_tick;
  uint64_t step_ticks; /* the fewest ticks that make one nanosecond more (stamp()) */
  bool use_tsc;
  char clock_name[16]; /* the header's "clock": tsc, cntvct or monotonic */
  char *path;
  atomic_uint gen;
  atomic_ullong dropped;
  atomic_uint heartbeat; /* the writer thread's, every HEARTBEAT_MS while capturing */
  /* The last stamp of each device's events: written under the device's lock. */
  _Atomic uint64_t last_stamp[MAX_STAMPED_DEVICES];
} rec = {.devices_lock = PTHREAD_MUTEX_INITIALIZER,
         .write_lock = PTHREAD_MUTEX_INITIALIZER,
         .lock = PTHREAD_MUTEX_INITIALIZER,
         .wake = PTHREAD_COND_INITIALIZER};

/* Paths of past captures: hbm_profiler_path() may have handed them out. Freed at exit. */
typedef struct old_path {
  struct old_path *next;
  char *path;
} old_path_t;
static old_path_t *old_paths;
static _Atomic(const char *) current_path;

static __attribute__((tls_model("initial-exec"))) _Thread_local rec_thread_t *tls_thread;
static pthread_key_t thread_key;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* ---- time ---- */

static int64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The invariant counter the recorder stamps events with, when the machine has one. */
#if defined(__x86_64__) || defined(__i386__)
static inline uint64_t read_counter(void) { return __rdtsc(); }
#elif defined(__aarch64__)
#define HAVE_TSC 1
static inline uint64_t read_counter(void) { /* the generic timer: invariant by the spec */
  uint64_t v;
  __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
  return v;
}
#endif

static inline uint64_t read_ticks(void) {
#ifdef HAVE_TSC
  if (HBM_LIKELY(rec.use_tsc))
    return read_counter();
#endif
  return (uint64_t)monotonic_ns();
}

#ifdef HAVE_TSC
static void read_line(const char *path, char *out, size_t cap) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  if (!fgets(out, (int)cap, f))
    out[0] = '\0';
  fclose(f);
  out[strcspn(out, "\n")] = '\0';
}

/* Whether the CPU says its TSC ticks at one rate whatever the frequency and sleep states
 * (constant_tsc + nonstop_tsc: an invariant TSC). That holds on cloud VMs whose kernel chose
 * kvm-clock or hyperv_clocksource all the same: the kernel's choice guards against live
 * migration and suspend, rare within a capture whose times are approximate anyway; the order
 * of a device's events (stamped under its lock) needs only a TSC consistent across CPUs,
 * which the kernel checks at boot (docs/trace-format.md). Meanwhile
 * per-event clock_gettime through those clocksources costs 30-70 ns where rdtsc costs a few. */
static bool invariant_tsc(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return false;
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, f))
    if (!strncmp(line, "flags", 5))
      found = strstr(line, " constant_tsc") && strstr(line, " nonstop_tsc");
  fclose(f);
  return found;
}
#endif

/* The counter is used where it is invariant: the kernel's own clocksource is the TSC, the
 * CPU flags say so, or on ARMv8 (whose generic timer always is). HBM_RECORDER_CLOCK=monotonic
 * or =tsc overrides (benchmarks, tests). Calibrated once against CLOCK_MONOTONIC over 2 ms
 * (about 1e-4 relative error: docs/trace-format.md). */
static void pick_clock(void) {
  rec.use_tsc = false;
  rec.ns_per_tick = 1.0;
  snprintf(rec.clock_name, sizeof rec.clock_name, "monotonic");
#ifdef HAVE_TSC
  char source[64];
  read_line("/sys/devices/system/clocksource/clocksource0/current_clocksource", source,
            sizeof source);
  const char *force = getenv("HBM_RECORDER_CLOCK");
  bool use = !strncmp(source, "tsc", 3) || invariant_tsc();
#if defined(__aarch64__)
  use = true;
#endif
  if (force && !strcmp(force, "monotonic"))
    use = false;
  else if (force && !strcmp(force, "tsc"))
    use = true;
  else if (force && *force) /* a profiler must not fail a program: say so, keep the default */
    fprintf(stderr,
            "hbm: HBM_RECORDER_CLOCK=%s is not accepted (expected 'tsc' or 'monotonic'); "
            "the profiler chooses its clock itself\n",
            force);
  if (!use)
    return;
  int64_t t0 = monotonic_ns();
  uint64_t c0 = read_counter();
  int64_t t1;
  do
    t1 = monotonic_ns();
  while (t1 - t0 < 2000000);
  uint64_t c1 = read_counter();
  if (c1 > c0) {
    rec.ns_per_tick = (double)(t1 - t0) / (double)(c1 - c0);
    rec.use_tsc = true;
#if defined(__aarch64__)
    snprintf(rec.clock_name, sizeof rec.clock_name, "cntvct");
#else
    snprintf(rec.clock_name, sizeof rec.clock_name, "tsc");
#endif
  }
#endif
}

/* The clock and the rate of its ticks, once per process. */
static void choose_clock(void) {
  pick_clock();
  rec.step_ticks = (uint64_t)(1.0 / rec.ns_per_tick) + 1;
}

static int64_t ticks_to_ns(uint64_t ticks) {
  return ticks <= rec.ticks0 ? 0 : (int64_t)((double)(ticks - rec.ticks0) * rec.ns_per_tick);
}

/* ---- threads and chunks ---- */

static void thread_exited(void *arg) {
  rec_thread_t *t = arg;
  pthread_mutex_lock(&rec.lock);
  t->dead = true;
  tls_thread = NULL; /* a later event of this thread (another destructor) registers anew */
  pthread_mutex_unlock(&rec.lock);
}

static void init_once_fn(void) { pthread_key_create(&thread_key, thread_exited); }

/* Chunks are mapped, not malloc'ed: one unmapped after a burst gives its memory back to the
 * system (a freed 64 KiB malloc block stays in the heap), so the recording's resident
 * memory follows the queue's depth down again instead of keeping its high-water mark. */
static chunk_t *map_chunk(void) {
  void *p = mmap(NULL, sizeof(chunk_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void unmap_chunk(chunk_t *c) { munmap(c, sizeof *c); }

static chunk_t *take_chunk(void) { /* under rec.lock */
  chunk_t *c = rec.free_chunks;
  if (c) {
    rec.free_chunks = c->next;
    rec.n_free--;
  } else if (!(c = map_chunk()))
    return NULL;
  c->next = NULL;
  atomic_store_explicit(&c->committed, 0, memory_order_relaxed);
  c->consumed = 0;
  c->gen = atomic_load(&rec.gen);
  return c;
}

/* Chunks ready for use, their pages touched: a burst of events at the start of a capture
 * then takes no page faults on the recording threads. Under rec.lock. */
static void prefill_chunks(void) {
  for (size_t n = rec.n_free; n < PREFILL_CHUNKS; n++) {
    chunk_t *c = map_chunk();
    if (!c)
      return;
    memset(c->data, 0, sizeof c->data);
    c->next = rec.free_chunks;
    rec.free_chunks = c;
    rec.n_free++;
  }
}

static bool drained(const rec_thread_t *t) {
  return !t->cur || t->cur->consumed == atomic_load(&t->cur->committed) ||
         t->gen != atomic_load(&rec.gen);
}

/* A struct for the calling thread: a drained one of an exited thread, or a new one. */
static rec_thread_t *register_thread(void) { /* under rec.lock */
  rec_thread_t *t = rec.threads;
  while (t && !(t->dead && drained(t)))
    t = t->next;
  if (!t) {
    if (!(t = calloc(1, sizeof *t)))
      return NULL;
    t->next = rec.threads;
    rec.threads = t;
  }
  t->dead = false;
  t->describing = false;
  t->gen = 0; /* forces a reset on first use */
  t->clock_in = 0;
  pthread_setspecific(thread_key, t);
  return t;
}

static void wake_writer(void) { pthread_cond_signal(&rec.wake); }
static void collect_and_write(bool all, bool to_disk);

/* The slow path of reserve(): first use, a new capture, or a full chunk. */
static uint8_t *reserve_slow(size_t need) {
  pthread_once(&init_once, init_once_fn);
  pthread_mutex_lock(&rec.lock);
  rec_thread_t *t = tls_thread;
  if (!t && !(t = tls_thread = register_thread())) {
    pthread_mutex_unlock(&rec.lock);
    return NULL;
  }
  unsigned gen = atomic_load(&rec.gen);
  bool help = false;
  if (t->gen != gen)
    t->clock_in = 0;             /* a new capture reads the clock at its first event */
  if (t->cur && t->gen != gen) { /* leftovers of an earlier capture: dropped */
    t->cur->consumed = 0;
    atomic_store_explicit(&t->cur->committed, 0, memory_order_relaxed);
    t->cur->gen = gen;
    t->pos = 0;
  } else if (t->cur && t->pos + need > CHUNK_BYTES) {
    chunk_t *full = t->cur;
    full->next = NULL;
    if (rec.queue_tail)
      rec.queue_tail->next = full;
    else
      rec.queue_head = full;
    rec.queue_tail = full;
    rec.n_queued++;
    t->cur = NULL;
    help = rec.n_queued * CHUNK_BYTES > MAX_QUEUED_BYTES;
    wake_writer();
  }
  t->gen = gen;
  if (!t->cur) {
    t->cur = take_chunk();
    t->pos = 0;
  }
  pthread_mutex_unlock(&rec.lock);
  if (help)
    collect_and_write(false, false);
  return t->cur ? t->cur->data + t->pos : NULL;
}

/* Room for `need` bytes in this thread's chunk (NULL: out of host memory, event dropped). */
static inline uint8_t *reserve(size_t need) {
  rec_thread_t *t = tls_thread;
  if (HBM_LIKELY(t && t->gen == atomic_load_explicit(&rec.gen, memory_order_relaxed) &&
                 t->pos + need <= CHUNK_BYTES))
    return t->cur->data + t->pos;
  return reserve_slow(need);
}

static inline void commit(size_t n) {
  rec_thread_t *t = tls_thread;
  t->pos += n;
  atomic_store_explicit(&t->cur->committed, t->pos, memory_order_release);
}

static void drop_event(void) { atomic_fetch_add_explicit(&rec.dropped, 1, memory_order_relaxed); }

/* ticks, or the first stamp at least a nanosecond past device id's last (id is tracked). */
static inline uint64_t past_last_stamp(int id, uint64_t ticks) {
  uint64_t after = atomic_load_explicit(&rec.last_stamp[id], memory_order_relaxed) + rec.step_ticks;
  return ticks > after ? ticks : after;
}

/* The time stamp of an event of device `id`, under that device's lock (after reserve()).
 * Reading the TSC costs about 10 ns on the cloud VMs hbm runs on, most of what a record
 * costs, so a thread reads it at one event in CLOCK_EVERY and whenever the writer's
 * heartbeat moved since its last reading; the events between carry that reading. Order
 * must stay exact (the reader orders events by time): each device's stamps are kept
 * strictly increasing in nanoseconds — a carried reading not past the device's last stamp
 * becomes that stamp + step_ticks, the ticks of at least one nanosecond (one tick is 0.3 ns
 * with the TSC: two stamps one tick apart were one time in the profile, and ties go by file
 * order, which is not the order between threads). So a time is early by at most
 * HEARTBEAT_MS (and CLOCK_EVERY - 1 events), the order is that of each device's state
 * changes, and docs/trace-format.md says so.
 * Devices past MAX_STAMPED_DEVICES read the clock at every event. */
static inline uint64_t stamp(int id) {
  rec_thread_t *t = tls_thread;
  unsigned beat = atomic_load_explicit(&rec.heartbeat, memory_order_relaxed);
  bool tracked = (unsigned)id < MAX_STAMPED_DEVICES;
  uint64_t ticks;
  if (HBM_LIKELY(t->clock_in && t->beat == beat && tracked)) {
    t->clock_in--;
    ticks = t->last_ticks;
  } else {
    ticks = t->last_ticks = read_ticks();
    t->clock_in = CLOCK_EVERY - 1;
    t->beat = beat;
    if (!tracked)
      return ticks;
  }
  ticks = past_last_stamp(id, ticks);
  atomic_store_explicit(&rec.last_stamp[id], ticks, memory_order_relaxed);
  return ticks;
}

/* The time of a record written outside the hooks (a device's close, an OOM, a marker): the
 * clock, past the last stamp of device `id` (-1: none). It moves the heartbeat, so that
 * every event after it — in this thread, or in one that synchronised with it — reads the
 * clock again instead of carrying an older reading past it. */
static uint64_t clock_now(int id) {
  uint64_t now = read_ticks();
  if (id >= 0 && id < MAX_STAMPED_DEVICES) {
    now = past_last_stamp(id, now);
  }
  atomic_fetch_add_explicit(&rec.heartbeat, 1, memory_order_relaxed);
  return now;
}

/* ---- the hooks ---- */

/* Records are written into the chunk in place, field by field. (Built on the stack and
 * copied, the copy's 16-byte loads read back the narrow stores just made, which the
 * processor cannot forward: a stall of about half of what a record costs.) */
static inline void put_head(uint8_t *p, uint8_t type, uint8_t flags, uint16_t extra, int id) {
  int32_t device = id;
  uint64_t ticks = stamp(id);
  memcpy(p + offsetof(raw_head_t, type), &type, sizeof type);
  memcpy(p + offsetof(raw_head_t, flags), &flags, sizeof flags);
  memcpy(p + offsetof(raw_head_t, extra), &extra, sizeof extra);
  memcpy(p + offsetof(raw_head_t, device), &device, sizeof device);
  memcpy(p + offsetof(raw_head_t, ticks), &ticks, sizeof ticks);
}

static inline void put_u64(uint8_t *p, size_t offset, uint64_t v) {
  memcpy(p + offset, &v, sizeof v);
}

static inline void put_alloc(uint8_t *p, uint8_t flags, const hbm_tag_t *tag, int id,
                             uint64_t address, uint64_t size, uint64_t allocated) {
  put_head(p, RAW_ALLOC, flags, (uint16_t)(tag ? tag->category : HBM_CAT_UNKNOWN), id);
  put_u64(p, offsetof(raw_alloc_t, address), address);
  put_u64(p, offsetof(raw_alloc_t, size), size);
  put_u64(p, offsetof(raw_alloc_t, allocated), allocated);
}

static size_t tag_length(const char *s) { return s ? strnlen(s, MAX_TAG_STRING) : 0; }

static uint8_t alloc_flags(const hbm_tag_t *tag, uint8_t kind) {
  return (uint8_t)((tag ? kind : 0) | (tls_thread->describing ? RAW_DESCRIBED : 0));
}

void hbm__rec_alloc(int id, uint64_t address, uint64_t size, uint64_t allocated,
                    const hbm_tag_t *tag) {
  if (!hbm__rec_active())
    return;
  size_t lens[4] = {0}, need = sizeof(raw_alloc_t);
  const char *s[4] = {NULL, NULL, NULL, NULL};
  if (tag) {
    s[0] = tag->op, s[1] = tag->shape, s[2] = tag->group, s[3] = tag->source;
    need += 4 * sizeof(uint16_t);
    for (int i = 0; i < 4; i++)
      need += (lens[i] = tag_length(s[i])) + 1;
    need = (need + 7) & ~(size_t)7;
  }
  uint8_t *p = reserve(need);
  if (HBM_UNLIKELY(!p)) {
    drop_event();
    return;
  }
  put_alloc(p, alloc_flags(tag, RAW_TAGGED), tag, id, address, size, allocated);
  if (tag) {
    const size_t head = sizeof(raw_alloc_t);
    uint8_t *q = p + head + 4 * sizeof(uint16_t);
    for (int i = 0; i < 4; i++) {
      uint16_t n = (uint16_t)lens[i];
      memcpy(p + head + i * sizeof n, &n, sizeof n);
      if (n)
        memcpy(q, s[i], n);
      q[n] = '\0';
      q += n + 1;
    }
  }
  commit(need);
}

void hbm__rec_alloc_stable(int id, uint64_t address, uint64_t size, uint64_t allocated,
                           const hbm_tag_t *tag) {
  if (!hbm__rec_active())
    return;
  size_t need = sizeof(raw_alloc_t) + (tag ? 4 * sizeof(const char *) : 0);
  uint8_t *p = reserve(need);
  if (HBM_UNLIKELY(!p)) {
    drop_event();
    return;
  }
  put_alloc(p, alloc_flags(tag, RAW_STABLE), tag, id, address, size, allocated);
  if (tag) {
    const char *s[4] = {tag->op, tag->shape, tag->group, tag->source};
    for (int i = 0; i < 4; i++)
      memcpy(p + sizeof(raw_alloc_t) + i * sizeof s[i], &s[i], sizeof s[i]);
  }
  commit(need);
}

void hbm__rec_free(int id, uint64_t address) {
  if (!hbm__rec_active())
    return;
  uint8_t *p = reserve(sizeof(raw_free_t));
  if (HBM_UNLIKELY(!p)) {
    drop_event();
    return;
  }
  put_head(p, RAW_FREE, 0, 0, id);
  put_u64(p, offsetof(raw_free_t, address), address);
  commit(sizeof(raw_free_t));
}

void hbm__rec_reserve(int id, hbm_reserve_op_t op, uint64_t address, uint64_t size) {
  if (!hbm__rec_active())
    return;
  uint8_t *p = reserve(sizeof(raw_reserve_t));
  if (HBM_UNLIKELY(!p)) {
    drop_event();
    return;
  }
  put_head(p, RAW_RESERVE, 0, (uint16_t)op, id);
  put_u64(p, offsetof(raw_reserve_t, address), address);
  put_u64(p, offsetof(raw_reserve_t, size), size);
  commit(sizeof(raw_reserve_t));
}

/* ---- turning raw records into trace records (under write_lock) ---- */

static int space_of(int id) { return id >= 0 && id < rec.cap_space_of ? rec.space_of[id] : -1; }

/* Returns the bytes of the raw record at p (0 when malformed: the rest is skipped). */
static size_t encode_raw(const uint8_t *p, size_t left) {
  raw_head_t h;
  if (left < sizeof h)
    return 0;
  memcpy(&h, p, sizeof h);
  int space = space_of(h.device);
  bool stale = h.ticks < rec.ticks0 || space < 0; /* from an earlier capture */
  int64_t t = ticks_to_ns(h.ticks);
  if (h.type == RAW_FREE) {
    raw_free_t r;
    memcpy(&r, p, sizeof r);
    if (!stale)
      hbm__tw_ev_free(rec.tw, t, space, r.address);
    return sizeof r;
  }
  if (h.type == RAW_RESERVE) {
    raw_reserve_t r;
    memcpy(&r, p, sizeof r);
    if (!stale)
      hbm__tw_ev_reserve(rec.tw, t, space, (hbm_reserve_op_t)h.extra, r.address, r.size);
    return sizeof r;
  }
  raw_alloc_t r;
  memcpy(&r, p, sizeof r);
  size_t n = sizeof r;
  hbm_tag_t tag = {.category = (hbm_category_t)h.extra};
  unsigned flags = (h.flags & RAW_DESCRIBED) ? HBM_EV_PREEXISTING : 0;
  if (h.flags & RAW_STABLE) {
    const char *s[4];
    memcpy(s, p + n, sizeof s);
    tag.op = s[0], tag.shape = s[1], tag.group = s[2], tag.source = s[3];
    if (!stale)
      hbm__tw_ev_alloc_stable(rec.tw, t, space, r.address, r.size, r.allocated, &tag, flags);
    return n + sizeof s;
  }
  if (h.flags & RAW_TAGGED) {
    const char **s[4] = {&tag.op, &tag.shape, &tag.group, &tag.source};
    const uint8_t *q = p + n + 4 * sizeof(uint16_t);
    for (int i = 0; i < 4; i++) {
      uint16_t len;
      memcpy(&len, p + n + i * sizeof len, sizeof len);
      *s[i] = len ? (const char *)q : NULL;
      q += len + 1;
    }
    n = ((size_t)(q - p) + 7) & ~(size_t)7;
  }
  if (!stale)
    hbm__tw_ev_alloc(rec.tw, t, space, r.address, r.size, r.allocated,
                     (h.flags & RAW_TAGGED) ? &tag : NULL, flags);
  return n;
}

static void encode_range(const uint8_t *p, size_t n) {
  size_t off = 0;
  while (off < n) {
    size_t used = encode_raw(p + off, n - off);
    if (!used)
      break;
    off += used;
    rec.written_events++;
  }
  if (n)
    rec.dirty = true;
}

static bool grow_scratch(size_t need) {
  if (need <= rec.cap_scratch)
    return true;
  size_t cap = rec.cap_scratch ? rec.cap_scratch : CHUNK_BYTES;
  while (cap < need)
    cap *= 2;
  uint8_t *grown = realloc(rec.scratch, cap);
  if (!grown)
    return false;
  rec.scratch = grown;
  rec.cap_scratch = cap;
  return true;
}

/* Takes the queued chunks and (when all) the unread part of every thread's chunk.
 * Under write_lock; takes rec.lock. Returns the list of queued chunks; copies go to
 * rec.scratch (*copied bytes). */
static chunk_t *collect(bool all, size_t *copied) {
  *copied = 0;
  pthread_mutex_lock(&rec.lock);
  chunk_t *list = rec.queue_head;
  rec.queue_head = rec.queue_tail = NULL;
  rec.n_queued = 0;
  unsigned gen = atomic_load(&rec.gen);
  for (rec_thread_t *t = all ? rec.threads : NULL; t; t = t->next) {
    if (!t->cur || t->gen != gen)
      continue;
    size_t end = atomic_load_explicit(&t->cur->committed, memory_order_acquire);
    size_t n = end - t->cur->consumed;
    if (n == 0 || !grow_scratch(*copied + n))
      continue;
    memcpy(rec.scratch + *copied, t->cur->data + t->cur->consumed, n);
    *copied += n;
    t->cur->consumed = end;
  }
  pthread_mutex_unlock(&rec.lock);
  return list;
}

/* Written chunks back to the ready list, up to PREFILL_CHUNKS of them; the rest unmapped. */
static void recycle(chunk_t *list) {
  chunk_t *surplus = NULL;
  pthread_mutex_lock(&rec.lock);
  while (list) {
    chunk_t *next = list->next;
    chunk_t **to = rec.n_free < PREFILL_CHUNKS ? &rec.free_chunks : &surplus;
    rec.n_free += to == &rec.free_chunks;
    list->next = *to;
    *to = list;
    list = next;
  }
  pthread_mutex_unlock(&rec.lock);
  while (surplus) {
    chunk_t *next = surplus->next;
    unmap_chunk(surplus);
    surplus = next;
  }
}

/* Moves recorded events to the trace writer; to_disk also writes the partial block. Under
 * write_lock. */
static void collect_locked(bool all, bool to_disk) {
  if (!rec.tw)
    return;
  size_t copied;
  chunk_t *list = collect(all, &copied);
  unsigned gen = atomic_load(&rec.gen);
  for (chunk_t *c = list; c; c = c->next) {
    size_t end = atomic_load_explicit(&c->committed, memory_order_acquire);
    if (c->gen == gen)
      encode_range(c->data + c->consumed, end - c->consumed);
  }
  encode_range(rec.scratch, copied);
  recycle(list);
  if (to_disk && rec.dirty) {
    hbm__tw_flush(rec.tw);
    rec.dirty = false;
  }
}

static void collect_and_write(bool all, bool to_disk) {
  pthread_mutex_lock(&rec.write_lock);
  collect_locked(all, to_disk);
  pthread_mutex_unlock(&rec.write_lock);
}

/* Waits for a queued chunk or HEARTBEAT_MS, whichever comes first; under rec.lock. */
static void wait_for_work(void) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += HEARTBEAT_MS * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(&rec.wake, &rec.lock, &until);
}

/* Writes queued chunks as they come and, once every FLUSH_PERIOD_S, what every thread has
 * recorded; beats the heartbeat that bounds how stale a carried stamp can be (stamp()). */
static void *writer_main(void *arg) {
  (void)arg;
  int64_t next_flush = monotonic_ns() + FLUSH_PERIOD_S * 1000000000LL;
  pthread_mutex_lock(&rec.lock);
  while (!rec.stopping) {
    if (rec.n_queued == 0)
      wait_for_work();
    atomic_fetch_add_explicit(&rec.heartbeat, 1, memory_order_relaxed);
    if (rec.stopping)
      break;
    bool periodic = monotonic_ns() >= next_flush;
    if (!periodic && rec.n_queued == 0)
      continue;
    if (periodic)
      next_flush = monotonic_ns() + FLUSH_PERIOD_S * 1000000000LL;
    pthread_mutex_unlock(&rec.lock);
    collect_and_write(periodic, periodic);
    pthread_mutex_lock(&rec.lock);
  }
  pthread_mutex_unlock(&rec.lock);
  return NULL;
}

/* ---- devices ---- */

static void describe_device(int id);

/* The space of device `id` in the current capture, written on first use. Under write_lock. */
static int assign_space(int id, const rec_device_t *d) {
  if (id >= rec.cap_space_of) {
    int cap = rec.cap_space_of ? rec.cap_space_of : 16;
    while (cap <= id)
      cap *= 2;
    int *grown = realloc(rec.space_of, (size_t)cap * sizeof *grown);
    if (!grown)
      return -1;
    for (int i = rec.cap_space_of; i < cap; i++)
      grown[i] = -1;
    rec.space_of = grown;
    rec.cap_space_of = cap;
  }
  /* A device closed and opened again with the same name and limit keeps its space. */
  for (int s = 0; s < rec.n_spaces; s++)
    if (!strcmp(rec.spaces[s].device, d->name) && rec.spaces[s].limit == d->limit)
      return rec.space_of[id] = s;
  if (rec.n_spaces == rec.cap_spaces) {
    int cap = rec.cap_spaces ? rec.cap_spaces * 2 : 8;
    space_slot_t *grown = realloc(rec.spaces, (size_t)cap * sizeof *grown);
    if (!grown)
      return -1;
    rec.spaces = grown;
    rec.cap_spaces = cap;
  }
  space_slot_t *slot = &rec.spaces[rec.n_spaces];
  snprintf(slot->device, sizeof slot->device, "%s", d->name);
  slot->limit = d->limit;
  hbm__tw_space(rec.tw, rec.n_spaces, "HBM", d->name, 0, d->limit);
  return rec.space_of[id] = rec.n_spaces++;
}

int hbm__rec_device_open(const char *name, const char *mode, uint64_t limit,
                         void (*describe)(void *dev), void *dev) {
  pthread_mutex_lock(&rec.devices_lock);
  int id = -1;
  if (rec.n_devices == rec.cap_devices) {
    int cap = rec.cap_devices ? rec.cap_devices * 2 : 8;
    rec_device_t *grown = realloc(rec.devices, (size_t)cap * sizeof *grown);
    if (!grown)
      goto out;
    rec.devices = grown;
    rec.cap_devices = cap;
  }
  id = rec.n_devices++;
  rec_device_t *d = &rec.devices[id];
  memset(d, 0, sizeof *d);
  snprintf(d->name, sizeof d->name, "%s", name ? name : "device");
  snprintf(d->mode, sizeof d->mode, "%s", mode ? mode : "");
  d->limit = limit;
  d->describe = describe;
  d->dev = dev;
  d->open = true;
  if (hbm__rec_active()) { /* opened during a capture: nothing is live on it yet */
    pthread_mutex_lock(&rec.write_lock);
    if (rec.tw && assign_space(id, d) < 0)
      drop_event();
    pthread_mutex_unlock(&rec.write_lock);
    describe_device(id); /* the capture starts on it now */
  }
out:
  pthread_mutex_unlock(&rec.devices_lock);
  return id;
}

void hbm__rec_device_close(int id) {
  pthread_mutex_lock(&rec.devices_lock);
  if (id >= 0 && id < rec.n_devices) {
    rec.devices[id].open = false;
    if (hbm__rec_active()) {
      uint64_t now = clock_now(id);
      pthread_mutex_lock(&rec.write_lock);
      collect_locked(true, false); /* its last frees go before the close */
      if (rec.tw && space_of(id) >= 0)
        hbm__tw_ev_close(rec.tw, ticks_to_ns(now), space_of(id));
      if (rec.tw) /* its stable tag strings are about to be freed */
        hbm__tw_forget_stable(rec.tw);
      pthread_mutex_unlock(&rec.write_lock);
    }
  }
  pthread_mutex_unlock(&rec.devices_lock);
}

void hbm__rec_oom(int id, uint64_t requested, const char *message) {
  if (!hbm__rec_active())
    return;
  uint64_t now = clock_now(id);
  pthread_mutex_lock(&rec.write_lock);
  collect_locked(true, false);
  if (rec.tw && space_of(id) >= 0) {
    hbm__tw_ev_oom(rec.tw, ticks_to_ns(now), space_of(id), requested, message);
    rec.dirty = true;
  }
  collect_locked(false, true); /* the profile is on disk before the error reaches the user */
  pthread_mutex_unlock(&rec.write_lock);
}

/* ---- the public profiler API ---- */

static hbm_status_t add_marker(hbm_marker_kind_t kind, int64_t value, const char *text) {
  if (!hbm__rec_active())
    return hbm__error(HBM_ERR_INVALID, "no profile is being captured (hbm_profiler_start)");
  uint64_t now = clock_now(-1);
  pthread_mutex_lock(&rec.write_lock);
  if (rec.tw) {
    hbm__tw_ev_marker(rec.tw, ticks_to_ns(now), kind, value, text);
    rec.dirty = true;
  }
  pthread_mutex_unlock(&rec.write_lock);
  return HBM_OK;
}

hbm_status_t hbm_profiler_marker(const char *text) {
  return add_marker(HBM_MARKER_TEXT, 0, text ? text : "");
}

atomic_uint_fast64_t hbm__rec_step_marks;

hbm_status_t hbm_profiler_step_begin(int64_t step) {
  atomic_fetch_add_explicit(&hbm__rec_step_marks, 1, memory_order_relaxed);
  char text[48];
  snprintf(text, sizeof text, "step %lld", (long long)step);
  return add_marker(HBM_MARKER_STEP_BEGIN, step, text);
}

hbm_status_t hbm_profiler_step_end(int64_t step) {
  char text[48];
  snprintf(text, sizeof text, "end of step %lld", (long long)step);
  return add_marker(HBM_MARKER_STEP_END, step, text);
}

hbm_status_t hbm_profiler_flush(void) {
  if (!hbm__rec_active())
    return hbm__error(HBM_ERR_INVALID, "no profile is being captured (hbm_profiler_start)");
  pthread_mutex_lock(&rec.write_lock);
  collect_locked(true, true);
  hbm_status_t s = rec.tw ? hbm__tw_flush(rec.tw) : HBM_OK;
  pthread_mutex_unlock(&rec.write_lock);
  return s;
}

const char *hbm_profiler_path(void) {
  return hbm__rec_active() ? atomic_load(&current_path) : NULL;
}

static void free_old_paths(void) {
  while (old_paths) {
    old_path_t *next = old_paths->next;
    free(old_paths->path);
    free(old_paths);
    old_paths = next;
  }
}

static void stop_at_exit(void) {
  if (hbm__rec_active())
    hbm_profiler_stop();
  free_old_paths();
}

/* After fork() the child has no writer thread: it does not record (its parent does). */
static void before_fork(void) {
  pthread_mutex_lock(&rec.devices_lock);
  pthread_mutex_lock(&rec.write_lock);
  pthread_mutex_lock(&rec.lock);
}
static void after_fork_parent(void) {
  pthread_mutex_unlock(&rec.lock);
  pthread_mutex_unlock(&rec.write_lock);
  pthread_mutex_unlock(&rec.devices_lock);
}
static void after_fork_child(void) {
  atomic_store(&hbm__rec_capturing, 0);
  rec.writer_running = false;
  rec.tw = NULL; /* the parent's; its memory is simply not used here */
  after_fork_parent();
}

static void register_process_hooks(void) {
  atexit(stop_at_exit);
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* "host.pid" and the header metadata of a new capture. */
static void capture_meta(char *host, size_t host_cap, char (*values)[256]) {
  if (gethostname(host, host_cap) != 0 || !host[0])
    snprintf(host, host_cap, "localhost");
  host[host_cap - 1] = '\0';
  for (char *c = host; *c; c++)
    if (*c == '/')
      *c = '_';
  snprintf(values[0], 256, "%s", host);
  snprintf(values[1], 256, "%ld", (long)getpid());
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(values[2], 256, "%Y-%m-%dT%H:%M:%S%z", &tm);
  snprintf(values[3], 256, "%s", rec.clock_name);
  snprintf(values[4], 256, "%s", HBM_VERSION);
  values[5][0] = values[6][0] = '\0';
  for (int id = 0, n = 0; id < rec.n_devices; id++) { /* under devices_lock */
    const rec_device_t *d = &rec.devices[id];
    char limit[32];
    if (d->open && n < 200)
      n += snprintf(values[6] + n, (size_t)(256 - n), "%s%s: %s mode, limit %s", n ? "; " : "",
                    d->name, d->mode, hbm_format_bytes(d->limit, limit, sizeof limit));
  }
  FILE *f = fopen("/proc/self/cmdline", "r");
  if (f) {
    size_t n = fread(values[5], 1, 255, f);
    fclose(f);
    values[5][n] = '\0';
    for (size_t i = 0; i + 1 < n; i++)
      if (!values[5][i])
        values[5][i] = ' ';
  }
}

static hbm_status_t open_trace(const char *logdir) {
  static pthread_once_t clock_once = PTHREAD_ONCE_INIT;
  pthread_once(&clock_once, choose_clock);
  char run[4096], host[128], values[7][256];
  hbm_status_t s = hbm_logdir_new_run(logdir, run, sizeof run);
  if (s != HBM_OK)
    return s;
  capture_meta(host, sizeof host, values);
  hbm_strbuf_t path;
  hbm_strbuf_init(&path);
  hbm_strbuf_printf(&path, "%s/%s.%ld.hbmtrace", run, host, (long)getpid());
  const char *const meta[][2] = {{"host", values[0]},        {"pid", values[1]},
                                 {"started", values[2]},     {"clock", values[3]},
                                 {"hbm_version", values[4]}, {"command", values[5]},
                                 {"devices", values[6]}};
  char name[192];
  snprintf(name, sizeof name, "%s.%ld", host, (long)getpid());
  old_path_t *keep = calloc(1, sizeof *keep);
  hbm_trace_writer_t *tw = path.failed || !keep
                               ? NULL
                               : hbm__tw_create(path.data, true, HBM_PROFILE_RUNTIME, name, meta,
                                                HBM_ARRAY_LEN(meta), 1);
  if (!tw) {
    free(keep);
    hbm_strbuf_free(&path);
    return hbm_last_status() != HBM_OK ? hbm_last_status()
                                       : hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  }
  keep->path = path.data; /* ownership moves to the list */
  keep->next = old_paths;
  old_paths = keep;
  atomic_store(&current_path, keep->path);
  pthread_mutex_lock(&rec.write_lock);
  rec.tw = tw;
  rec.n_spaces = 0;
  for (int i = 0; i < rec.cap_space_of; i++)
    rec.space_of[i] = -1;
  for (int id = 0; id < rec.n_devices; id++)
    if (rec.devices[id].open)
      assign_space(id, &rec.devices[id]);
  rec.written_events = 0;
  rec.dirty = true;
  pthread_mutex_unlock(&rec.write_lock);
  return HBM_OK;
}

/* Asks device `id` for its live blocks (their ALLOC records are marked DESCRIBED); the capture
 * starts on it there (recorder.h). Under devices_lock. */
static void describe_device(int id) {
  const rec_device_t *d = &rec.devices[id];
  if (!d->open || !d->describe)
    return;
  rec_thread_t *t = tls_thread;
  if (!t) { /* a record makes this thread known; reserve_slow registers it */
    if (!reserve_slow(0))
      return;
    t = tls_thread;
  }
  t->describing = true;
  d->describe(d->dev);
  t->describing = false;
}

static void describe_devices(void) {
  for (int id = 0; id < rec.n_devices; id++)
    describe_device(id);
}

hbm_status_t hbm_profiler_start(const char *logdir) {
  static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;
  if (!logdir || !*logdir)
    return hbm__error(HBM_ERR_INVALID, "hbm_profiler_start: no log directory given");
  pthread_mutex_lock(&rec.devices_lock);
  hbm_status_t s = HBM_OK;
  if (hbm__rec_active()) {
    s = hbm__error(HBM_ERR_INVALID,
                   "a profile is already being captured to %s; "
                   "hbm_profiler_stop() it first",
                   atomic_load(&current_path));
    goto out;
  }
  pthread_once(&hooks_once, register_process_hooks);
  pthread_mutex_lock(&rec.lock);
  atomic_fetch_add(&rec.gen, 1);
  chunk_t *stale = rec.queue_head; /* queued after the last capture stopped */
  rec.queue_head = rec.queue_tail = NULL;
  rec.n_queued = 0;
  rec.stopping = false;
  prefill_chunks();
  pthread_mutex_unlock(&rec.lock);
  recycle(stale);
  atomic_store(&rec.dropped, 0);
  if ((s = open_trace(logdir)) != HBM_OK)
    goto out;
  rec.ticks0 = read_ticks();
  atomic_store(&hbm__rec_capturing, atomic_load(&rec.gen));
  rec.writer_running = pthread_create(&rec.writer, NULL, writer_main, NULL) == 0;
  describe_devices();
out:
  pthread_mutex_unlock(&rec.devices_lock);
  return s;
}

hbm_status_t hbm_profiler_stop(void) {
  pthread_mutex_lock(&rec.devices_lock);
  if (!hbm__rec_active()) {
    pthread_mutex_unlock(&rec.devices_lock);
    return hbm__error(HBM_ERR_INVALID, "no profile is being captured (hbm_profiler_start)");
  }
  atomic_store(&hbm__rec_capturing, 0);
  if (rec.writer_running) {
    pthread_mutex_lock(&rec.lock);
    rec.stopping = true;
    pthread_cond_signal(&rec.wake);
    pthread_mutex_unlock(&rec.lock);
    pthread_join(rec.writer, NULL);
    rec.writer_running = false;
  }
  pthread_mutex_lock(&rec.write_lock);
  collect_locked(true, false);
  unsigned long long dropped = atomic_load(&rec.dropped);
  if (dropped) {
    char text[128];
    snprintf(text, sizeof text, "hbm: %llu events were not recorded (out of host memory)", dropped);
    hbm__tw_ev_marker(rec.tw, ticks_to_ns(clock_now(-1)), HBM_MARKER_TEXT, 0, text);
  }
  hbm_status_t s = hbm__tw_close(rec.tw, true);
  rec.tw = NULL;
  pthread_mutex_unlock(&rec.write_lock);
  if (s == HBM_OK && dropped)
    s = hbm__error(HBM_ERR_HOST_MEMORY,
                   "%s: %llu events were not recorded (out of host memory while capturing)",
                   atomic_load(&current_path), dropped);
  pthread_mutex_unlock(&rec.devices_lock);
  return s;
}
