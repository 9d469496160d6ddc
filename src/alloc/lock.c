/* lock.c — the slow paths of the device lock (lock.h): sleeping on the mutex, taking the
 * ownership of a device's lock, and revoking it with membarrier(2). */
#include "alloc/lock.h"

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SPINS 200

_Thread_local char hbm__thread_token __attribute__((tls_model("initial-exec")));

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

void hbm__mutex_lock_slow(hbm__mutex_t *m) {
  for (int i = 0; i < SPINS; i++) {
    cpu_relax();
    if (atomic_load_explicit(&m->state, memory_order_relaxed) == 0 && hbm__mutex_trylock(m))
      return;
  }
  atomic_fetch_add(&m->waiters, 1);
  while (atomic_exchange(&m->state, 1) != 0)
    syscall(SYS_futex, &m->state, FUTEX_WAIT_PRIVATE, 1, NULL, NULL, 0);
  atomic_fetch_sub(&m->waiters, 1);
}

void hbm__mutex_wake(hbm__mutex_t *m) {
  syscall(SYS_futex, &m->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* ---- bias ---- */

static pthread_once_t membarrier_once = PTHREAD_ONCE_INIT;
static bool membarrier_ready;

static void register_membarrier(void) {
  long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  membarrier_ready = cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                     syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

/* Sanitizers that follow threads cannot see membarrier's ordering of plain flags: under
 * ThreadSanitizer the lock is never biased (only the mutex is used). */
#define BIAS_ALLOWED (!HBM__TSAN)

void hbm__devlock_init(hbm__devlock_t *l) {
  pthread_once(&membarrier_once, register_membarrier);
  atomic_init(&l->busy, 0);
  atomic_init(&l->biased, BIAS_ALLOWED && membarrier_ready);
  atomic_init(&l->shared, 0);
  atomic_init(&l->owner, NULL);
  atomic_init(&l->mutex.state, 0);
  atomic_init(&l->mutex.waiters, 0);
}

void hbm__devlock_lock_slow(hbm__devlock_t *l) {
  const void *me = &hbm__thread_token, *owner = NULL;
  /* The first thread to lock a device becomes its owner; with a bias, it enters biased. */
  if (atomic_compare_exchange_strong(&l->owner, &owner, me)) {
    if (atomic_load_explicit(&l->biased, memory_order_relaxed)) {
      hbm__devlock_lock(l);
      return;
    }
  } else if (owner != me && !atomic_load_explicit(&l->shared, memory_order_relaxed)) {
    atomic_store_explicit(&l->shared, 1, memory_order_relaxed);
  }
  hbm__mutex_lock(&l->mutex);
  if (!atomic_load_explicit(&l->biased, memory_order_relaxed))
    return;
  /* Another thread: revoke the owner's bias for good, then wait until it is out. */
  atomic_store_explicit(&l->biased, 0, memory_order_relaxed);
  syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  while (atomic_load_explicit(&l->busy, memory_order_acquire))
    sched_yield();
}
