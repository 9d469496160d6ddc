/* sim_ledger.c — who holds how much of a simulated device, shared by every process that uses
 * the same sim device name (HBM_SIM_NAME), so that each sees the others' holdings as not
 * free, exactly like processes sharing one GPU.
 *
 * The ledger is a POSIX shared-memory object "/hbm-sim.<uid>.<name>" holding the capacity and
 * one slot (pid, process start time, bytes) per open sim device object, under a robust
 * process-shared mutex: a process killed while holding the mutex does not wedge the others.
 * Slots of processes that died (kill -9 included) are reclaimed whenever memory is counted;
 * the process start time guards against a recycled pid. The last user to leave removes the
 * object; a `gone` flag set under the mutex tells a process that opened it just before that
 * to start over with a fresh one. */
#include "alloc/device/device.h"
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LEDGER_MAGIC 0x52474c4453424d48ull /* "HBMSDLGR" */
#define LEDGER_VERSION 1u
#define LEDGER_SLOTS 128

typedef struct ledger_slot {
  int32_t pid; /* 0: free */
  uint32_t instance;
  uint64_t start_time; /* /proc/<pid>/stat field 22; 0 when unknown */
  uint64_t bytes;
} ledger_slot_t;

typedef struct ledger_shm {
  _Atomic uint64_t magic; /* set last by the creator, once the rest is ready */
  uint32_t version;
  uint32_t size; /* sizeof(ledger_shm_t): builds must agree */
  uint32_t gone; /* unlinked by its last user: open a fresh one */
  uint32_t reserved;
  uint64_t capacity;
  pthread_mutex_t lock;
  ledger_slot_t slots[LEDGER_SLOTS];
} ledger_shm_t;

struct hbm__ledger {
  ledger_shm_t *shm;
  int slot;
  char shm_name[128];
  char name[64];
};

static _Atomic uint32_t next_instance = 1;

void hbm__ledger_shm_name(const char *name, char *buf, size_t cap) {
  snprintf(buf, cap, "/hbm-sim.%u.%s", (unsigned)getuid(), name);
}

/* The start time of a process (clock ticks since boot), 0 when it cannot be read. */
static uint64_t process_start_time(int pid) {
  char path[64], text[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  /* The command name may hold spaces and parentheses: fields resume after the last ')'. */
  char *p = strrchr(text, ')');
  if (!p)
    return 0;
  unsigned long long start = 0;
  /* After ')': state (field 3) ... starttime is field 22, the 20th after the ')'. */
  int field = 2;
  char *save = NULL;
  for (char *tok = strtok_r(p + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
    if (++field == 22) {
      start = strtoull(tok, NULL, 10);
      break;
    }
  }
  return start;
}

static bool slot_alive(const ledger_slot_t *s) {
  if (s->pid <= 0)
    return false;
  if (s->pid == getpid())
    return true;
  if (kill(s->pid, 0) != 0 && errno == ESRCH)
    return false;
  if (s->start_time) {
    uint64_t now = process_start_time(s->pid);
    if (now && now != s->start_time)
      return false; /* the pid was recycled */
  }
  return true;
}

/* Frees the slots of processes that died. Under the lock. */
static void reclaim_dead(ledger_shm_t *shm) {
  for (int i = 0; i < LEDGER_SLOTS; i++)
    if (shm->slots[i].pid && !slot_alive(&shm->slots[i]))
      memset(&shm->slots[i], 0, sizeof shm->slots[i]);
}

static hbm_status_t ledger_lock(ledger_shm_t *shm, const char *name) {
  int r = pthread_mutex_lock(&shm->lock);
  if (r == EOWNERDEAD) {
    /* Its owner died mid-update; every field is a whole 64-bit store, so the slots are
     * consistent. Drop the dead and carry on. */
    reclaim_dead(shm);
    pthread_mutex_consistent(&shm->lock);
    r = 0;
  }
  if (r != 0)
    return hbm__error(HBM_ERR_INTERNAL, "sim device %s: cannot lock its ledger: %s", name,
                      strerror(r));
  return HBM_OK;
}

static void ledger_unlock(ledger_shm_t *shm) { pthread_mutex_unlock(&shm->lock); }

static hbm_status_t init_shm(ledger_shm_t *shm, uint64_t capacity) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  int r = pthread_mutex_init(&shm->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  if (r != 0)
    return hbm__error(HBM_ERR_INTERNAL, "cannot create the sim ledger's mutex: %s", strerror(r));
  shm->version = LEDGER_VERSION;
  shm->size = sizeof *shm;
  shm->capacity = capacity;
  atomic_store_explicit(&shm->magic, LEDGER_MAGIC, memory_order_release);
  return HBM_OK;
}

static void sleep_briefly(void) {
  struct timespec ts = {0, 1000000}; /* 1 ms */
  nanosleep(&ts, NULL);
}

/* A creator may still be sizing the object: wait (bounded) for its full size. */
static hbm_status_t wait_for_size(int fd, const char *shm_name) {
  struct stat st;
  for (int i = 0; i < 2000; i++) {
    if (fstat(fd, &st) != 0 || (size_t)st.st_size >= sizeof(ledger_shm_t))
      break;
    sleep_briefly();
  }
  if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(ledger_shm_t))
    return HBM_OK;
  return hbm__error(HBM_ERR_IO,
                    "%s: the sim ledger is %lld bytes, expected %zu; remove "
                    "/dev/shm%s if no process uses it",
                    shm_name, (long long)st.st_size, sizeof(ledger_shm_t), shm_name);
}

/* Maps the ledger object, creating it when absent. *created tells which. */
static hbm_status_t map_ledger(const char *shm_name, uint64_t capacity, ledger_shm_t **out) {
  int fd = shm_open(shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
  bool created = fd >= 0;
  if (!created) {
    if (errno != EEXIST)
      return hbm__error(HBM_ERR_IO, "shm_open %s: %s", shm_name, strerror(errno));
    fd = shm_open(shm_name, O_RDWR, 0600);
    if (fd < 0)
      return errno == ENOENT ? HBM_ERR_NOT_FOUND /* removed meanwhile: retry */
                             : hbm__error(HBM_ERR_IO, "shm_open %s: %s", shm_name, strerror(errno));
  } else if (ftruncate(fd, sizeof(ledger_shm_t)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(shm_name);
    return hbm__error(HBM_ERR_IO, "ftruncate %s: %s", shm_name, strerror(e));
  }
  if (!created && wait_for_size(fd, shm_name) != HBM_OK) {
    close(fd);
    return HBM_ERR_IO;
  }
  void *map = mmap(NULL, sizeof(ledger_shm_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED)
    return hbm__error(HBM_ERR_IO, "mmap %s: %s", shm_name, strerror(errno));
  ledger_shm_t *shm = map;
  if (created) {
    hbm_status_t st2 = init_shm(shm, capacity);
    if (st2 != HBM_OK) {
      munmap(map, sizeof(ledger_shm_t));
      shm_unlink(shm_name);
      return st2;
    }
  }
  for (int i = 0; i < 2000; i++) {
    if (atomic_load_explicit(&shm->magic, memory_order_acquire) == LEDGER_MAGIC)
      break;
    sleep_briefly();
  }
  if (atomic_load_explicit(&shm->magic, memory_order_acquire) != LEDGER_MAGIC ||
      shm->version != LEDGER_VERSION || shm->size != sizeof(ledger_shm_t)) {
    munmap(map, sizeof(ledger_shm_t));
    return hbm__error(HBM_ERR_IO,
                      "%s: not a sim ledger of this version of hbm; remove "
                      "/dev/shm%s if no process uses it",
                      shm_name, shm_name);
  }
  *out = shm;
  return HBM_OK;
}

static int live_slots(const ledger_shm_t *shm) {
  int n = 0;
  for (int i = 0; i < LEDGER_SLOTS; i++)
    n += shm->slots[i].pid != 0;
  return n;
}

/* Takes a slot for this process; the capacity must match the live users'. Under the lock. */
static hbm_status_t join_ledger(hbm__ledger_t *l, uint64_t capacity) {
  ledger_shm_t *shm = l->shm;
  reclaim_dead(shm);
  if (live_slots(shm) == 0)
    shm->capacity = capacity; /* nobody left who could disagree */
  if (shm->capacity != capacity) {
    char have[32], want[32];
    int pid = 0;
    for (int i = 0; i < LEDGER_SLOTS && !pid; i++)
      pid = shm->slots[i].pid;
    return hbm__error(HBM_ERR_INVALID,
                      "HBM_SIM_MEMORY=%s: sim device '%s' is already in use "
                      "with %s of memory (by pid %d); use the same HBM_SIM_MEMORY or another "
                      "HBM_SIM_NAME",
                      hbm_format_bytes(capacity, want, sizeof want), l->name,
                      hbm_format_bytes(shm->capacity, have, sizeof have), pid);
  }
  for (int i = 0; i < LEDGER_SLOTS; i++) {
    if (shm->slots[i].pid == 0) {
      shm->slots[i].pid = getpid();
      shm->slots[i].instance = atomic_fetch_add(&next_instance, 1);
      shm->slots[i].start_time = process_start_time(getpid());
      shm->slots[i].bytes = 0;
      l->slot = i;
      return HBM_OK;
    }
  }
  return hbm__error(HBM_ERR_UNAVAILABLE, "sim device '%s': more than %d devices open on it",
                    l->name, LEDGER_SLOTS);
}

hbm_status_t hbm__ledger_open(const char *name, uint64_t capacity, hbm__ledger_t **out) {
  hbm__ledger_t *l = calloc(1, sizeof *l);
  if (!l)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory opening sim device %s", name);
  snprintf(l->name, sizeof l->name, "%s", name);
  hbm__ledger_shm_name(name, l->shm_name, sizeof l->shm_name);
  for (int attempt = 0; attempt < 100; attempt++) {
    hbm_status_t st = map_ledger(l->shm_name, capacity, &l->shm);
    if (st == HBM_ERR_NOT_FOUND)
      continue;
    if (st != HBM_OK)
      break;
    st = ledger_lock(l->shm, name);
    if (st == HBM_OK && l->shm->gone) {
      ledger_unlock(l->shm); /* its last user removed it just now: make a new one */
      munmap(l->shm, sizeof(ledger_shm_t));
      l->shm = NULL;
      continue;
    }
    if (st == HBM_OK) {
      st = join_ledger(l, capacity);
      ledger_unlock(l->shm);
    }
    if (st != HBM_OK) {
      munmap(l->shm, sizeof(ledger_shm_t));
      break;
    }
    *out = l;
    return HBM_OK;
  }
  if (hbm_last_status() == HBM_OK)
    hbm__error(HBM_ERR_IO, "sim device %s: cannot open its ledger %s", name, l->shm_name);
  hbm_status_t failed = hbm_last_status();
  free(l);
  return failed;
}

void hbm__ledger_close(hbm__ledger_t *l) {
  if (!l)
    return;
  if (ledger_lock(l->shm, l->name) == HBM_OK) {
    memset(&l->shm->slots[l->slot], 0, sizeof l->shm->slots[l->slot]);
    reclaim_dead(l->shm);
    if (live_slots(l->shm) == 0) {
      l->shm->gone = 1;
      shm_unlink(l->shm_name);
    }
    ledger_unlock(l->shm);
  }
  munmap(l->shm, sizeof(ledger_shm_t));
  free(l);
}

static uint64_t used_bytes(const ledger_shm_t *shm) {
  uint64_t used = 0;
  for (int i = 0; i < LEDGER_SLOTS; i++)
    if (shm->slots[i].pid)
      used += shm->slots[i].bytes;
  return used;
}

hbm_status_t hbm__ledger_take(hbm__ledger_t *l, uint64_t bytes) {
  hbm_status_t st = ledger_lock(l->shm, l->name);
  if (st != HBM_OK)
    return st;
  ledger_shm_t *shm = l->shm;
  uint64_t used = used_bytes(shm);
  if (bytes > shm->capacity - used) {
    reclaim_dead(shm); /* only when it matters: it costs a syscall per slot */
    used = used_bytes(shm);
  }
  if (bytes > shm->capacity - used) {
    uint64_t capacity = shm->capacity;
    ledger_unlock(shm);
    char want[32], free_text[32], total[32];
    return hbm__error(HBM_ERR_NO_MEMORY, "sim device %s has %s free of %s; %s requested", l->name,
                      hbm_format_bytes(capacity - used, free_text, sizeof free_text),
                      hbm_format_bytes(capacity, total, sizeof total),
                      hbm_format_bytes(bytes, want, sizeof want));
  }
  shm->slots[l->slot].bytes += bytes;
  ledger_unlock(shm);
  return HBM_OK;
}

void hbm__ledger_give(hbm__ledger_t *l, uint64_t bytes) {
  if (ledger_lock(l->shm, l->name) != HBM_OK)
    return;
  ledger_slot_t *s = &l->shm->slots[l->slot];
  s->bytes = bytes > s->bytes ? 0 : s->bytes - bytes;
  ledger_unlock(l->shm);
}

hbm_status_t hbm__ledger_used(hbm__ledger_t *l, uint64_t *used) {
  hbm_status_t st = ledger_lock(l->shm, l->name);
  if (st != HBM_OK)
    return st;
  reclaim_dead(l->shm);
  *used = used_bytes(l->shm);
  ledger_unlock(l->shm);
  return HBM_OK;
}

size_t hbm__ledger_holders(hbm__ledger_t *l, hbm__holder_t *out, size_t cap) {
  if (ledger_lock(l->shm, l->name) != HBM_OK)
    return 0;
  reclaim_dead(l->shm);
  size_t n = 0;
  for (int i = 0; i < LEDGER_SLOTS; i++) {
    const ledger_slot_t *s = &l->shm->slots[i];
    if (!s->pid || s->bytes == 0)
      continue;
    if (n < cap) {
      out[n].pid = s->pid;
      out[n].self = i == l->slot;
      out[n].same_process = i != l->slot && s->pid == getpid();
      out[n].bytes = s->bytes;
    }
    n++;
  }
  ledger_unlock(l->shm);
  return n;
}
