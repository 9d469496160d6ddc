/* device_sim.c — the simulated accelerator: device memory is real host memory, so programs
 * can read and write what they allocate, and a 16 GiB device costs nothing until touched
 * (every mapping is MAP_NORESERVE). The capacity is HBM_SIM_MEMORY; every byte handed out is
 * counted in the ledger of HBM_SIM_NAME (sim_ledger.c), shared with the other processes
 * using that name, so one process sees the others' holdings as not free.
 *
 * Virtual memory works as on a GPU: va_reserve maps a PROT_NONE range; physical memory is
 * pages of a memfd file (one per device object, sparse, sized for twice the capacity so that
 * offsets never run out), mapped MAP_FIXED|MAP_SHARED into the range, and unmapped by mapping
 * PROT_NONE over it again; releasing physical memory punches its pages out of the file.
 * Streams are host objects: nothing runs on them, so synchronizing one only counts.
 *
 * HBM_SIM_VM_GRANULES=whole makes its virtual memory behave as CUDA's (for tests and
 * benchmarks without a GPU): physical memory can only be released whole, as created, and a
 * mapping only unmapped whole, as mapped (cuMemRelease / cuMemUnmap); anything else is
 * refused with an error, so a strategy that relies on more shows up. */
#include "alloc/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIM_GRANULARITY (2ull << 20)

typedef struct sim_device {
  hbm__device_t base;
  hbm__ledger_t *ledger;
  pthread_mutex_t lock; /* guards the memfd and its slot bitmap */
  int memfd;            /* -1 until physical memory is first created */
  uint64_t *slot_used;  /* one bit per granule of the memfd */
  uint64_t n_slots;
  uint64_t next_slot; /* where the search for free slots starts */
  /* HBM_SIM_VM_GRANULES=whole, under lock: physical allocation → its size, and mapped
   * address → the mapping's size, to refuse what CUDA refuses. */
  bool whole;
  hbm_u64map_t allocations, mappings;
} sim_device_t;

typedef struct sim_stream {
  _Atomic uint64_t synchronizations;
} sim_stream_t;

static sim_device_t *sim_of(hbm__device_t *d) { return (sim_device_t *)d; }

static hbm_status_t sim_memory(hbm__device_t *d, uint64_t *total, uint64_t *free_bytes) {
  uint64_t used;
  hbm_status_t st = hbm__ledger_used(sim_of(d)->ledger, &used);
  if (st != HBM_OK)
    return st;
  *total = d->total;
  *free_bytes = used >= d->total ? 0 : d->total - used;
  return HBM_OK;
}

static hbm_status_t host_map_failed(hbm__device_t *d, const char *what, uint64_t size, int e) {
  char text[32];
  return hbm__error(HBM_ERR_HOST_MEMORY, "sim device %s: the host could not %s %s: %s", d->name,
                    what, hbm_format_bytes(size, text, sizeof text), strerror(e));
}

static hbm_status_t sim_region_alloc(hbm__device_t *d, uint64_t size, void **out) {
  if (size == 0 || size > SIZE_MAX)
    return hbm__error(HBM_ERR_INVALID, "sim device %s: bad region size %llu", d->name,
                      (unsigned long long)size);
  hbm_status_t st = hbm__ledger_take(sim_of(d)->ledger, size);
  if (st != HBM_OK)
    return st;
  void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    hbm__ledger_give(sim_of(d)->ledger, size);
    return host_map_failed(d, "map", size, e);
  }
  *out = p;
  return HBM_OK;
}

static void sim_region_free(hbm__device_t *d, void *ptr, uint64_t size) {
  munmap(ptr, (size_t)size);
  hbm__ledger_give(sim_of(d)->ledger, size);
}

static hbm_status_t sim_va_reserve(hbm__device_t *d, uint64_t size, void **base) {
  uint64_t gran = d->granularity;
  if (size == 0 || size % gran || size > SIZE_MAX - gran)
    return hbm__error(HBM_ERR_INVALID,
                      "sim device %s: reserve size %llu is not a multiple "
                      "of the granularity",
                      d->name, (unsigned long long)size);
  /* Over-reserve by one granule, then cut the range down to a granule-aligned one. */
  size_t span = (size_t)(size + gran);
  char *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return host_map_failed(d, "reserve an address range of", size, errno);
  uintptr_t aligned = ((uintptr_t)p + gran - 1) / gran * gran;
  size_t head = aligned - (uintptr_t)p;
  if (head)
    munmap(p, head);
  if (span - head - size)
    munmap((char *)aligned + size, span - head - size);
  *base = (void *)aligned;
  return HBM_OK;
}

static void sim_va_release(hbm__device_t *d, void *base, uint64_t size) {
  (void)d;
  munmap(base, (size_t)size);
}

static bool slot_is_used(const sim_device_t *s, uint64_t i) {
  return s->slot_used[i / 64] >> (i % 64) & 1;
}
static void mark_slots(sim_device_t *s, uint64_t first, uint64_t n, bool used) {
  for (uint64_t i = first; i < first + n; i++) {
    if (used)
      s->slot_used[i / 64] |= 1ull << (i % 64);
    else
      s->slot_used[i / 64] &= ~(1ull << (i % 64));
  }
}

/* Creates the memfd on first use. Under s->lock. */
static hbm_status_t ensure_memfd(sim_device_t *s) {
  if (s->memfd >= 0)
    return HBM_OK;
  uint64_t gran = s->base.granularity;
  uint64_t n = 2 * hbm__round_up_sat(s->base.total, gran) / gran + 1;
  s->slot_used = calloc((n + 63) / 64, sizeof *s->slot_used);
  if (!s->slot_used)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the sim device's pages");
  int fd = memfd_create(s->base.name, MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)(n * gran)) != 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    free(s->slot_used);
    s->slot_used = NULL;
    return hbm__error(HBM_ERR_HOST_MEMORY, "sim device %s: cannot create its memory file: %s",
                      s->base.name, strerror(e));
  }
  s->memfd = fd;
  s->n_slots = n;
  return HBM_OK;
}

/* First fit of n consecutive free slots, starting from the last place one was found. */
static bool find_slots(sim_device_t *s, uint64_t n, uint64_t *first) {
  for (int pass = 0; pass < 2; pass++) {
    uint64_t start = pass == 0 ? s->next_slot : 0, run = 0;
    uint64_t end = pass == 0 ? s->n_slots : s->next_slot + n;
    for (uint64_t i = start; i < end && i < s->n_slots; i++) {
      run = slot_is_used(s, i) ? 0 : run + 1;
      if (run == n) {
        *first = i + 1 - n;
        return true;
      }
    }
  }
  return false;
}

static hbm_status_t sim_phys_create(hbm__device_t *d, uint64_t size, hbm__phys_t *out) {
  sim_device_t *s = sim_of(d);
  if (size == 0 || size % d->granularity)
    return hbm__error(HBM_ERR_INVALID,
                      "sim device %s: physical size %llu is not a multiple "
                      "of the granularity",
                      d->name, (unsigned long long)size);
  hbm_status_t st = hbm__ledger_take(s->ledger, size);
  if (st != HBM_OK)
    return st;
  pthread_mutex_lock(&s->lock);
  uint64_t n = size / d->granularity, first = 0;
  st = ensure_memfd(s);
  if (st == HBM_OK && !find_slots(s, n, &first))
    st = hbm__error(HBM_ERR_NO_MEMORY,
                    "sim device %s: no %llu consecutive free pages in its "
                    "memory file",
                    d->name, (unsigned long long)n);
  if (st == HBM_OK && s->whole && !hbm_u64map_put(&s->allocations, first * d->granularity, size))
    st = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the sim device's pages");
  if (st == HBM_OK) {
    mark_slots(s, first, n, true);
    s->next_slot = first + n;
  }
  pthread_mutex_unlock(&s->lock);
  if (st != HBM_OK) {
    hbm__ledger_give(s->ledger, size);
    return st;
  }
  *out = first * d->granularity;
  return HBM_OK;
}

/* Whole mode: the exact extent of one live allocation or mapping, removed from `map`; else
 * false and it stays. Under s->lock. */
static bool take_whole(hbm_u64map_t *map, uint64_t start, uint64_t size) {
  uint64_t recorded;
  return hbm_u64map_get(map, start, &recorded) && recorded == size &&
         hbm_u64map_remove(map, start, NULL);
}

static void sim_phys_release(hbm__device_t *d, hbm__phys_t phys, uint64_t size) {
  sim_device_t *s = sim_of(d);
  pthread_mutex_lock(&s->lock);
  if (s->whole && !take_whole(&s->allocations, phys, size)) {
    /* Refused, as cuMemRelease takes whole handles: the memory stays held, which shows. */
    pthread_mutex_unlock(&s->lock);
    hbm__error(HBM_ERR_INVALID,
               "sim device %s (HBM_SIM_VM_GRANULES=whole): release of %llu bytes at physical "
               "offset %llu is not one whole allocation",
               d->name, (unsigned long long)size, (unsigned long long)phys);
    return;
  }
  /* Punching the pages out gives their host memory back; the offsets become reusable. */
  fallocate(s->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)phys, (off_t)size);
  mark_slots(s, phys / d->granularity, size / d->granularity, false);
  pthread_mutex_unlock(&s->lock);
  hbm__ledger_give(s->ledger, size);
}

/* Whole mode's map: inside one live allocation (as cuMemMap inside one handle), recorded so
 * that only the same extent can be unmapped. */
static hbm_status_t map_whole(sim_device_t *s, void *addr, uint64_t size, hbm__phys_t phys,
                              uint64_t offset) {
  hbm__device_t *d = &s->base;
  uint64_t allocated = 0;
  pthread_mutex_lock(&s->lock);
  hbm_status_t st = HBM_OK;
  if (!hbm_u64map_get(&s->allocations, phys, &allocated) || offset + size > allocated)
    st = hbm__error(HBM_ERR_INVALID,
                    "sim device %s (HBM_SIM_VM_GRANULES=whole): map of %llu bytes at offset "
                    "%llu of physical memory %llu: not inside one live allocation",
                    d->name, (unsigned long long)size, (unsigned long long)offset,
                    (unsigned long long)phys);
  else if (mmap(addr, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, s->memfd,
                (off_t)(phys + offset)) == MAP_FAILED)
    st = host_map_failed(d, "map", size, errno);
  else if (!hbm_u64map_put(&s->mappings, (uint64_t)(uintptr_t)addr, size))
    st = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for the sim device's mappings");
  pthread_mutex_unlock(&s->lock);
  return st;
}

static hbm_status_t sim_map(hbm__device_t *d, void *addr, uint64_t size, hbm__phys_t phys,
                            uint64_t offset) {
  sim_device_t *s = sim_of(d);
  uint64_t gran = d->granularity;
  if ((uintptr_t)addr % gran || size == 0 || size % gran || offset % gran || s->memfd < 0 ||
      (phys + offset + size) / gran > s->n_slots)
    return hbm__error(HBM_ERR_INVALID,
                      "sim device %s: map of %llu bytes at %p: address, size "
                      "or offset not granule-aligned, or no such physical memory",
                      d->name, (unsigned long long)size, addr);
  if (s->whole)
    return map_whole(s, addr, size, phys, offset);
  void *p = mmap(addr, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, s->memfd,
                 (off_t)(phys + offset));
  if (p == MAP_FAILED)
    return host_map_failed(d, "map", size, errno);
  return HBM_OK;
}

static hbm_status_t sim_unmap(hbm__device_t *d, void *addr, uint64_t size) {
  if ((uintptr_t)addr % d->granularity || size % d->granularity)
    return hbm__error(HBM_ERR_INVALID,
                      "sim device %s: unmap at %p of %llu bytes is not "
                      "granule-aligned",
                      d->name, addr, (unsigned long long)size);
  sim_device_t *s = sim_of(d);
  pthread_mutex_lock(&s->lock);
  bool refused = s->whole && !take_whole(&s->mappings, (uint64_t)(uintptr_t)addr, size);
  pthread_mutex_unlock(&s->lock);
  if (refused) /* as cuMemUnmap: the range must be exactly one earlier mapping */
    return hbm__error(HBM_ERR_INVALID,
                      "sim device %s (HBM_SIM_VM_GRANULES=whole): unmap of %llu bytes at %p "
                      "is not one whole mapping",
                      d->name, (unsigned long long)size, addr);
  /* Mapping PROT_NONE over the range keeps the reservation while dropping the pages. */
  void *p = mmap(addr, (size_t)size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return host_map_failed(d, "unmap", size, errno);
  return HBM_OK;
}

static hbm_status_t sim_copy(hbm__device_t *d, void *dst, const void *src, size_t n) {
  (void)d;
  memcpy(dst, src, n);
  return HBM_OK;
}

static hbm_status_t sim_stream_create(hbm__device_t *d, void **native) {
  sim_stream_t *s = calloc(1, sizeof *s);
  if (!s)
    return hbm__error(HBM_ERR_HOST_MEMORY, "sim device %s: out of host memory for a stream",
                      d->name);
  *native = s;
  return HBM_OK;
}

static hbm_status_t sim_stream_sync(hbm__device_t *d, void *native) {
  (void)d;
  if (native)
    atomic_fetch_add(&((sim_stream_t *)native)->synchronizations, 1);
  return HBM_OK;
}

static void sim_stream_destroy(hbm__device_t *d, void *native) {
  (void)d;
  free(native);
}

static size_t sim_holders(hbm__device_t *d, hbm__holder_t *out, size_t cap) {
  return hbm__ledger_holders(sim_of(d)->ledger, out, cap);
}

static void sim_close(hbm__device_t *d) {
  sim_device_t *s = sim_of(d);
  if (s->memfd >= 0)
    close(s->memfd);
  free(s->slot_used);
  hbm_u64map_free(&s->allocations);
  hbm_u64map_free(&s->mappings);
  pthread_mutex_destroy(&s->lock);
  hbm__ledger_close(s->ledger);
  free(s);
}

static const hbm__device_ops_t sim_ops = {
    .close = sim_close,
    .memory = sim_memory,
    .region_alloc = sim_region_alloc,
    .region_free = sim_region_free,
    .va_reserve = sim_va_reserve,
    .va_release = sim_va_release,
    .phys_create = sim_phys_create,
    .phys_release = sim_phys_release,
    .map = sim_map,
    .unmap = sim_unmap,
    .copy_to_device = sim_copy,
    .copy_from_device = sim_copy,
    .stream_create = sim_stream_create,
    .stream_sync = sim_stream_sync,
    .stream_destroy = sim_stream_destroy,
    .holders = sim_holders,
};

bool hbm__sim_is_private(const hbm_config_t *cfg) {
  hbm_config_t d;
  hbm_config_default(&d);
  return cfg->origin[HBM_CFG_SIM_NAME] == HBM_ORIGIN_DEFAULT &&
         strncmp(cfg->sim_name, d.sim_name, sizeof d.sim_name) == 0;
}

/* HBM_SIM_VM_GRANULES: "whole" (CUDA's rules) or "divisible" (the default; unset or empty
 * too). A test and benchmark switch, read here like HBM_RECORDER_CLOCK, not a setting of
 * hbm_config_t. */
static hbm_status_t read_vm_granules(bool *whole) {
  const char *v = getenv("HBM_SIM_VM_GRANULES");
  *whole = v && !strcmp(v, "whole");
  if (!v || !*v || *whole || !strcmp(v, "divisible"))
    return HBM_OK;
  return hbm__error(HBM_ERR_INVALID,
                    "HBM_SIM_VM_GRANULES=%s: invalid value; expected whole or divisible", v);
}

hbm_status_t hbm__sim_open(const hbm_config_t *cfg, hbm__device_t **out) {
  bool whole;
  if (read_vm_granules(&whole) != HBM_OK)
    return HBM_ERR_INVALID;
  sim_device_t *s = calloc(1, sizeof *s);
  if (!s)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory opening a sim device");
  /* Sharing is what a user asks for by naming the device: the default one is this process's
   * alone (its devices share it), so two unrelated runs never change each other's results. */
  char ledger[96];
  if (hbm__sim_is_private(cfg))
    snprintf(ledger, sizeof ledger, "%s.pid%d", cfg->sim_name, (int)getpid());
  else
    snprintf(ledger, sizeof ledger, "%s", cfg->sim_name);
  /* Physical memory comes in whole granules, as a GPU's does (whose memory is a multiple of
   * them): a device of HBM_SIM_MEMORY bytes holds the granule that its last bytes begin, so a
   * range as large as the device can be mapped whole (mode learn's). Regions and the other
   * modes' limits still count the bytes themselves. */
  hbm_status_t st =
      hbm__ledger_open(ledger, hbm__round_up_sat(cfg->sim_memory, SIM_GRANULARITY), &s->ledger);
  if (st != HBM_OK) {
    free(s);
    return st;
  }
  pthread_mutex_init(&s->lock, NULL);
  s->memfd = -1;
  s->whole = whole;
  hbm_u64map_init(&s->allocations);
  hbm_u64map_init(&s->mappings);
  s->base.ops = &sim_ops;
  s->base.kind = HBM_DEVICE_SIM;
  snprintf(s->base.name, sizeof s->base.name, "%s", cfg->sim_name);
  s->base.total = cfg->sim_memory;
  s->base.granularity = SIM_GRANULARITY;
  s->base.vm_granules_divisible = !whole;
  s->base.region_alignment = (uint64_t)sysconf(_SC_PAGESIZE);
  *out = &s->base;
  return HBM_OK;
}
