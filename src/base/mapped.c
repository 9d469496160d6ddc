/* mapped.c — files mapped for readers that go through them once (base.h), and how much memory
 * the system has for them. */
#include "base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A big file is asked of the disk ahead of its reader, in the background: a cold read then
 * costs the reader's time, not the reader's time plus the disk's (a 1 GiB snapshot: 5.4 s
 * instead of 3.9 s before). Only while the whole file fits in half the memory available: the
 * page cache holds what is read ahead (not the process's memory). */
#define PREFETCH_MIN ((size_t)64 << 20)
#define PREFETCH_CHUNK ((size_t)16 << 20)

struct hbm__prefetch {
  pthread_t thread;
  const uint8_t *data;
  size_t len;
  atomic_bool stop;
};

static void *prefetch_main(void *arg) {
  struct hbm__prefetch *f = arg;
  for (size_t off = 0; off < f->len && !atomic_load(&f->stop); off += PREFETCH_CHUNK)
    madvise((void *)(f->data + off), f->len - off < PREFETCH_CHUNK ? f->len - off : PREFETCH_CHUNK,
            MADV_WILLNEED);
  return NULL;
}

static void prefetch_start(hbm__mapped_t *m) {
  uint64_t avail = hbm__memory_available();
  if (m->len < PREFETCH_MIN || (avail && m->len > avail / 2))
    return;
  struct hbm__prefetch *f = calloc(1, sizeof *f);
  if (!f)
    return;
  f->data = m->data;
  f->len = m->len;
  atomic_init(&f->stop, false);
  if (pthread_create(&f->thread, NULL, prefetch_main, f) != 0) {
    free(f);
    return;
  }
  m->prefetch = f;
}

static void prefetch_stop(hbm__mapped_t *m) {
  if (!m->prefetch)
    return;
  atomic_store(&m->prefetch->stop, true);
  pthread_join(m->prefetch->thread, NULL);
  free(m->prefetch);
  m->prefetch = NULL;
}

void hbm__map_keep(hbm__mapped_t *m) { prefetch_stop(m); }

hbm_status_t hbm__map_fd(int fd, const char *path, hbm__mapped_t *m) {
  memset(m, 0, sizeof *m);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return hbm__error(HBM_ERR_IO, "%s: not a regular file", path);
  size_t len = (size_t)st.st_size;
  void *p = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  if (p != MAP_FAILED) {
    madvise(p, len, MADV_SEQUENTIAL); /* read ahead: the reader goes front to back */
    m->data = p;
    m->len = len;
    m->mapped = true;
    prefetch_start(m);
    return HBM_OK;
  }
  char *data; /* empty files, and systems that cannot map this one */
  hbm_status_t s = hbm__read_fd(fd, path, &data, &len);
  if (s == HBM_OK) {
    m->data = (const uint8_t *)data;
    m->len = len;
  }
  return s;
}

hbm_status_t hbm__map_file(const char *path, hbm__mapped_t *m) {
  memset(m, 0, sizeof *m);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return hbm__error(HBM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  hbm_status_t s = hbm__map_fd(fd, path, m);
  close(fd); /* a mapping outlives its descriptor */
  return s;
}

static size_t page_size(void) {
  long n = sysconf(_SC_PAGESIZE);
  return n > 0 ? (size_t)n : 4096;
}

void hbm__map_drop_before(hbm__mapped_t *m, size_t offset) {
  if (!m || !m->mapped)
    return;
  size_t page = page_size();
  size_t end = (offset > m->len ? m->len : offset) / page * page;
  if (end < m->dropped) /* a new pass from the start: what it reads comes back */
    m->dropped = 0;
  if (end <= m->dropped)
    return;
  madvise((void *)(m->data + m->dropped), end - m->dropped, MADV_DONTNEED);
  m->dropped = end;
}

void hbm__map_drop_range(hbm__mapped_t *m, size_t from, size_t to) {
  if (!m || !m->mapped)
    return;
  size_t page = page_size();
  size_t start = (from + page - 1) / page * page, end = (to > m->len ? m->len : to) / page * page;
  if (start < end)
    madvise((void *)(m->data + start), end - start, MADV_DONTNEED);
}

void hbm__map_populate(hbm__mapped_t *m, size_t from, size_t to) {
#ifdef MADV_POPULATE_READ
  if (!m || !m->mapped)
    return;
  size_t page = page_size();
  size_t start = from / page * page, end = to > m->len ? m->len : to;
  if (start < end)
    madvise((void *)(m->data + start), end - start, MADV_POPULATE_READ);
#else
  (void)m, (void)from, (void)to;
#endif
}

void hbm__map_drop_all(hbm__mapped_t *m) {
  if (!m || !m->mapped || !m->len)
    return;
  madvise((void *)m->data, m->len, MADV_DONTNEED);
}

void hbm__unmap(hbm__mapped_t *m) {
  if (!m->data)
    return;
  prefetch_stop(m);
  if (m->mapped)
    munmap((void *)m->data, m->len);
  else
    free((void *)m->data);
  memset(m, 0, sizeof *m);
}

struct hbm__pager {
  hbm__mapped_t *m;
  int period_ms;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  bool stop;
};

static void *pager_main(void *arg) {
  hbm__pager_t *pg = arg;
  pthread_mutex_lock(&pg->lock);
  while (!pg->stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)pg->period_ms * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&pg->wake, &pg->lock, &until);
    if (!pg->stop)
      hbm__map_drop_all(pg->m);
  }
  pthread_mutex_unlock(&pg->lock);
  return NULL;
}

hbm__pager_t *hbm__pager_start(hbm__mapped_t *m, int period_ms) {
  if (!m || !m->mapped)
    return NULL;
  hbm__pager_t *pg = calloc(1, sizeof *pg);
  if (!pg)
    return NULL;
  pg->m = m;
  pg->period_ms = period_ms;
  pthread_mutex_init(&pg->lock, NULL);
  pthread_cond_init(&pg->wake, NULL);
  if (pthread_create(&pg->thread, NULL, pager_main, pg) != 0) {
    pthread_mutex_destroy(&pg->lock);
    pthread_cond_destroy(&pg->wake);
    free(pg);
    return NULL;
  }
  return pg;
}

void hbm__pager_stop(hbm__pager_t *pg) {
  if (!pg)
    return;
  pthread_mutex_lock(&pg->lock);
  pg->stop = true;
  pthread_cond_signal(&pg->wake);
  pthread_mutex_unlock(&pg->lock);
  pthread_join(pg->thread, NULL);
  pthread_mutex_destroy(&pg->lock);
  pthread_cond_destroy(&pg->wake);
  free(pg);
}

/* A number after `key` in a /proc or /sys file, times `unit`; 0 when absent. */
static uint64_t read_number(const char *path, const char *key, uint64_t unit) {
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  char line[256];
  uint64_t v = 0;
  size_t k = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, k)) {
      unsigned long long n;
      if (sscanf(line + k, " %llu", &n) == 1)
        v = (uint64_t)n * unit;
      break;
    }
  fclose(f);
  return v;
}

uint64_t hbm__memory_available(void) {
  uint64_t avail = read_number("/proc/meminfo", "MemAvailable:", 1024);
  uint64_t cgroup = read_number("/sys/fs/cgroup/memory.max", "", 1);
  uint64_t used = read_number("/sys/fs/cgroup/memory.current", "", 1);
  if (cgroup && cgroup > used && (!avail || cgroup - used < avail))
    avail = cgroup - used;
  struct rlimit rl; /* an address-space limit: what is left of it (mappings count) */
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    uint64_t size = read_number("/proc/self/status", "VmSize:", 1024);
    uint64_t left = (uint64_t)rl.rlim_cur > size ? (uint64_t)rl.rlim_cur - size : 1;
    if (!avail || left < avail)
      avail = left;
  }
  return avail;
}

/* Threads of this process running now (state R in /proc/self/task/N/stat). */
static long own_running(void) {
  DIR *dir = opendir("/proc/self/task");
  long n = 0;
  for (struct dirent *e; dir && (e = readdir(dir));) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", e->d_name);
    FILE *f = e->d_name[0] != '.' ? fopen(path, "r") : NULL;
    const char *paren = f && fgets(line, sizeof line, f) ? strrchr(line, ')') : NULL;
    n += paren && paren[1] == ' ' && paren[2] == 'R';
    if (f)
      fclose(f);
  }
  if (dir)
    closedir(dir);
  return n;
}

/* Threads other processes run now, from /proc/loadavg; -1 when it cannot tell. */
static long others_running(void) {
  FILE *f = fopen("/proc/loadavg", "r");
  if (!f)
    return -1;
  double one, five, fifteen;
  long running = 0, total = 0;
  int got = fscanf(f, "%lf %lf %lf %ld/%ld", &one, &five, &fifteen, &running, &total);
  fclose(f);
  return got == 5 ? running - own_running() : -1;
}

bool hbm__cpu_idle(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN), fewest = LONG_MAX;
  /* three looks 1 ms apart, the fewest: a process that runs for an instant (the client that
   * just sent the request being answered) is not one that keeps a CPU */
  for (int i = 0; i < 3; i++) {
    long n = others_running();
    if (n < 0 || cpus <= 0)
      return true;
    fewest = n < fewest ? n : fewest;
    if (i < 2)
      nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return fewest + 2 <= cpus; /* the caller and a second thread fit beside them */
}

void *hbm__map_grow(void *old, size_t old_size, size_t new_size) {
  if (!old)
    return mmap(NULL, new_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (!HBM__TSAN)
    return mremap(old, old_size, new_size, MREMAP_MAYMOVE);
  void *grown = mmap(NULL, new_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (grown != MAP_FAILED) {
    memcpy(grown, old, old_size < new_size ? old_size : new_size);
    munmap(old, old_size);
  }
  return grown;
}
