/* lock.h — the lock of a device, built for the allocator's hot path.
 *
 * Two parts:
 *   - hbm__mutex_t: a futex mutex whose uncontended lock and unlock are one atomic instruction
 *     each, inlined (pthread's costs two calls and a type dispatch); waiters spin briefly,
 *     then sleep in the kernel, so a long critical section does not burn the other core, and
 *     are counted, so that an unlock makes a system call only when someone may sleep.
 *   - hbm__devlock_t: that mutex, biased towards the one thread that uses the device. Most
 *     programs allocate from one thread, and on x86 every locked instruction waits for the
 *     store buffer to drain: two of them were half the time of an allocation. The owner
 *     enters with a plain store to `busy` and a plain load of `biased` (Dekker's protocol);
 *     the first other thread to take the lock revokes the bias for good: it takes the mutex,
 *     clears `biased`, runs membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) — a memory barrier
 *     on every running thread of the process, so that either the owner sees `biased` cleared
 *     or the revoker sees `busy` set — and waits for `busy` to drop. From then on every
 *     thread, the owner too, takes the mutex. Without membarrier (old kernels, some sandboxes)
 *     a device is never biased.
 * The orderings that carry happens-before (release store of `busy` / acquire load by the
 * revoker; the mutex) are C11 atomics, which ThreadSanitizer follows. */
#ifndef HBM_ALLOC_LOCK_H
#define HBM_ALLOC_LOCK_H

#include "base/base.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- the mutex ---- */

typedef struct hbm__mutex {
  _Atomic uint32_t state;   /* 0 free, 1 locked */
  _Atomic uint32_t waiters; /* threads in the slow path, which may sleep on `state` */
} hbm__mutex_t;

void hbm__mutex_lock_slow(hbm__mutex_t *m);
void hbm__mutex_wake(hbm__mutex_t *m);

static inline bool hbm__mutex_trylock(hbm__mutex_t *m) {
  uint32_t expected = 0;
  return atomic_compare_exchange_strong_explicit(&m->state, &expected, 1, memory_order_acquire,
                                                 memory_order_relaxed);
}

static inline void hbm__mutex_lock(hbm__mutex_t *m) {
  if (HBM_UNLIKELY(!hbm__mutex_trylock(m)))
    hbm__mutex_lock_slow(m);
}

/* The store and the load are sequentially consistent: a waiter that counted itself after
 * the load sees the lock free; one counted before is woken. Only real waiters cost a wake. */
static inline void hbm__mutex_unlock(hbm__mutex_t *m) {
  atomic_store(&m->state, 0);
  if (HBM_UNLIKELY(atomic_load(&m->waiters)))
    hbm__mutex_wake(m);
}

/* ---- the biased device lock ---- */

/* The flags are read on every operation and, once threads share a device, hardly ever
 * written: the mutex, which the sharing threads write, has a cache line of its own. */
typedef struct hbm__devlock {
  _Atomic uint32_t busy;       /* the owner is inside without the mutex */
  _Atomic uint32_t biased;     /* the owner may enter without the mutex */
  _Atomic uint32_t shared;     /* a thread other than the owner has taken the lock */
  _Atomic(const void *) owner; /* the owning thread's token, NULL until someone locks */
  _Alignas(64) hbm__mutex_t mutex;
  char after_mutex[64 - sizeof(hbm__mutex_t)];
} hbm__devlock_t;

/* One per thread: its address tells threads apart. */
extern _Thread_local char hbm__thread_token __attribute__((tls_model("initial-exec")));

void hbm__devlock_init(hbm__devlock_t *l);
void hbm__devlock_lock_slow(hbm__devlock_t *l);
/* Whether a thread other than the first one has taken the lock (it stays so). */
static inline bool hbm__devlock_shared(hbm__devlock_t *l) {
  return atomic_load_explicit(&l->shared, memory_order_relaxed);
}

/* The owner's entry without the mutex, for fast paths: true when the calling thread owns
 * the device and it is still biased (then leave with hbm__devlock_leave_biased); false, and
 * nothing held, otherwise (take the lock the general way). */
static inline bool hbm__devlock_enter_biased(hbm__devlock_t *l) {
  if (HBM_UNLIKELY(atomic_load_explicit(&l->owner, memory_order_relaxed) != &hbm__thread_token))
    return false;
  atomic_store_explicit(&l->busy, 1, memory_order_relaxed);
  atomic_signal_fence(memory_order_seq_cst); /* the store, then the load (membarrier pairs) */
  if (HBM_LIKELY(atomic_load_explicit(&l->biased, memory_order_relaxed)))
    return true;
  atomic_store_explicit(&l->busy, 0, memory_order_release);
  return false;
}

static inline void hbm__devlock_lock(hbm__devlock_t *l) {
  if (HBM_LIKELY(hbm__devlock_enter_biased(l)))
    return;
  hbm__devlock_lock_slow(l);
}

static inline void hbm__devlock_leave_biased(hbm__devlock_t *l) {
  atomic_store_explicit(&l->busy, 0, memory_order_release);
}

static inline void hbm__devlock_unlock(hbm__devlock_t *l) {
  if (atomic_load_explicit(&l->busy, memory_order_relaxed) &&
      atomic_load_explicit(&l->owner, memory_order_relaxed) == &hbm__thread_token)
    atomic_store_explicit(&l->busy, 0, memory_order_release);
  else
    hbm__mutex_unlock(&l->mutex);
}

#endif /* HBM_ALLOC_LOCK_H */
