/* pickle_thread.c — a pickle sink run on a thread of its own (pickle_thread.h). The pickle
 * machine makes its sink calls on a proxy that only writes them down, in batches; a second
 * thread makes the same calls, in the same order and with the same values, on the real sink.
 * So the machine's run (pickle.c) and the sink's work (a snapshot's events, stacks and profile)
 * share the two cores instead of taking turns on one.
 *
 * What the real sink's close returns is known only on its thread, so the proxy hands the
 * machine a stand-in (PK_OBJ, an id of ours) and the sink's thread puts the real value back
 * wherever a stand-in comes as an item, and at the end as the root. A container completed
 * for one use only (no PK_CLOSE_AGAIN) is an item of the very next add, once, so its id is
 * used again after that; the others keep theirs. The states of the open containers stay on
 * the sink's thread too, under an id the proxy uses again once the container is closed or
 * discarded. A sink that fails stops the calls there; the machine learns it when it hands over
 * its next batch and stops with the sink's error, which pk_thread_finish returns whatever the
 * machine did after (as if the sink had failed on the machine's own thread). */
#include "import/pickle_thread.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BATCH_UNITS ((size_t)1 << 14) /* 256 KiB of calls a batch */
#define BATCHES 4                     /* batches in flight at most: the machine waits past it */

/* CALL_ADD_IDS: an add whose items are all stand-ins (a snapshot's frames lists), as their
 * ids, four a unit: a quarter of the bytes to hand over. */
/* CALL_PROGRESS: the options' progress (a mapped file's pages given back behind the reader),
 * made on the sink's thread: its system time off the machine's, and never ahead of the items
 * that point into those pages. */
enum { CALL_OPEN, CALL_ADD, CALL_ADD_IDS, CALL_CLOSE, CALL_DISCARD, CALL_PROGRESS };
enum { STAND_IN_ONCE = 1, STAND_IN_KEPT = 2 }; /* the tag of a stand-in */

typedef struct call { /* one sink call; an add's items follow it */
  uint8_t op, kind, flags;
  uint32_t n;     /* add: items */
  uint32_t state; /* the container's state id */
  uint32_t id;    /* close: its stand-in's id */
} call_t;

typedef union unit { /* batches are arrays of 16-byte units: calls and items */
  call_t call;
  pk_ref_t item;
  uint32_t ids[4];
} unit_t;

_Static_assert(sizeof(call_t) == sizeof(pk_ref_t), "a call takes one unit, as an item does");

/* Each side's fields on cache lines of their own: a line one thread writes while the other
 * reads it would go back and forth between the cores at every call. */
#define LINE 64

typedef struct batch {
  _Alignas(LINE) struct batch *next;
  unit_t *units;
  size_t n, cap;
  bool own; /* one big add's: freed once made */
} batch_t;

struct pk_thread {
  _Alignas(LINE) const pk_sink_t *sink; /* the real one, called on the thread only */
  const char *name;
  void (*progress)(void *ctx, size_t offset);
  void (*ahead)(void *ctx, size_t offset);
  void *progress_ctx;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t filled, emptied;
  /* under lock */
  batch_t *ready, *ready_tail, *free;
  size_t n_ready; /* batches handed over and not taken yet */
  bool finished;  /* the machine hands over nothing more */
  bool failed;    /* the sink failed: what it said */
  hbm_status_t status;
  char *message;
  /* the machine's side */
  _Alignas(LINE) batch_t *cur;
  uint32_t *free_states, *free_ids;
  size_t n_free_states, cap_free_states, n_free_ids, cap_free_ids;
  uint32_t next_state, next_id;
  /* the sink's side */
  _Alignas(LINE) uint64_t *states;
  size_t cap_states;
  pk_ref_t *values; /* per stand-in id: what the real sink's close returned */
  size_t cap_values;
  pk_ref_t *items; /* CALL_ADD_IDS's items */
  size_t cap_items;
};

/* Zeroed memory on cache lines of its own. */
static void *new_lines(size_t size) {
  size = (size + LINE - 1) / LINE * LINE;
  void *p = aligned_alloc(LINE, size);
  if (p)
    memset(p, 0, size);
  return p;
}

/* ---- the sink's thread ---- */

static bool fit(pk_thread_t *t, void **items, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return true;
  void *grown = hbm__grow_array(*items, cap, need, elem, 1024);
  if (!grown) {
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", t->name);
    return false;
  }
  *items = grown;
  return true;
}

/* Makes the calls of one batch on the real sink; false when it failed. */
static bool make_calls(pk_thread_t *t, batch_t *b) {
  const pk_sink_t *s = t->sink;
  for (size_t i = 0; i < b->n;) {
    const call_t c = b->units[i++].call;
    if (c.state >= t->cap_states &&
        !fit(t, (void **)&t->states, &t->cap_states, (size_t)c.state + 1, sizeof *t->states))
      return false;
    uint64_t *state = &t->states[c.state];
    switch (c.op) {
    case CALL_OPEN:
      *state = 0;
      if (!s->open(s->ctx, (pk_kind_t)c.kind, state))
        return false;
      break;
    case CALL_ADD: {
      pk_ref_t *items = &b->units[i].item;
      for (uint32_t k = 0; k < c.n; k++)
        if (items[k].kind == PK_OBJ) /* a stand-in: the real value */
          items[k] = t->values[items[k].as.obj];
      i += c.n;
      if (!s->add(s->ctx, (pk_kind_t)c.kind, state, items, c.n))
        return false;
      break;
    }
    case CALL_ADD_IDS: {
      const uint32_t *ids = b->units[i].ids;
      if (!fit(t, (void **)&t->items, &t->cap_items, c.n, sizeof *t->items))
        return false;
      for (uint32_t k = 0; k < c.n; k++)
        t->items[k] = t->values[ids[k]];
      i += (c.n + 3) / 4;
      if (!s->add(s->ctx, (pk_kind_t)c.kind, state, t->items, c.n))
        return false;
      break;
    }
    case CALL_CLOSE: {
      pk_ref_t out = {0};
      if (!s->close(s->ctx, (pk_kind_t)c.kind, *state, c.flags, &out) ||
          (c.id >= t->cap_values &&
           !fit(t, (void **)&t->values, &t->cap_values, (size_t)c.id + 1, sizeof *t->values)))
        return false;
      t->values[c.id] = out;
      break;
    }
    case CALL_PROGRESS: t->progress(t->progress_ctx, (size_t)b->units[i++].item.as.u); break;
    default: s->discard(s->ctx, (pk_kind_t)c.kind, *state); break;
    }
  }
  return true;
}

static void *sink_main(void *arg) {
  pk_thread_t *t = arg;
  bool failed = false;
  for (;;) {
    pthread_mutex_lock(&t->lock);
    while (!t->ready && !t->finished)
      pthread_cond_wait(&t->filled, &t->lock);
    batch_t *b = t->ready;
    if (!b) {
      pthread_mutex_unlock(&t->lock);
      break;
    }
    if (!(t->ready = b->next))
      t->ready_tail = NULL;
    t->n_ready--;
    pthread_mutex_unlock(&t->lock);
    bool ok = failed || make_calls(t, b);
    pthread_mutex_lock(&t->lock);
    if (!ok) { /* what the sink said, for the machine's thread */
      failed = t->failed = true;
      t->status = hbm_last_status() != HBM_OK ? hbm_last_status() : HBM_ERR_HOST_MEMORY;
      t->message = strdup(hbm_last_error());
    }
    if (b->own) {
      free(b->units);
      free(b);
    } else {
      b->n = 0;
      b->next = t->free;
      t->free = b;
    }
    pthread_cond_signal(&t->emptied);
    pthread_mutex_unlock(&t->lock);
  }
  return NULL;
}

/* ---- the machine's side ---- */

/* The sink's error, on the machine's thread. */
static bool sink_failed(pk_thread_t *t) {
  hbm__error(t->status, "%s", t->message ? t->message : "out of host memory");
  return false;
}

static batch_t *new_batch(size_t cap, bool own) {
  batch_t *b = new_lines(sizeof *b);
  if (b && !(b->units = malloc(cap * sizeof *b->units))) {
    free(b);
    b = NULL;
  }
  if (b)
    b->cap = cap, b->own = own;
  return b;
}

/* Puts the current batch (if it holds calls) in the queue; under the lock. */
static void queue_current(pk_thread_t *t) {
  batch_t *b = t->cur;
  t->cur = NULL;
  if (b && b->n) {
    b->next = NULL;
    if (t->ready_tail)
      t->ready_tail->next = b;
    else
      t->ready = b;
    t->ready_tail = b;
    t->n_ready++;
    pthread_cond_signal(&t->filled);
  } else if (b && b->own) {
    free(b->units);
    free(b);
  } else if (b) {
    b->next = t->free;
    t->free = b;
  }
}

/* Hands the current batch over and takes an empty one, or a batch of its own for `units`
 * units when they are more than a batch holds. */
static bool hand_over(pk_thread_t *t, size_t units) {
  bool own = units > BATCH_UNITS;
  pthread_mutex_lock(&t->lock);
  queue_current(t);
  while (!t->failed && t->n_ready >= BATCHES) /* the sink's thread is behind: memory bounded */
    pthread_cond_wait(&t->emptied, &t->lock);
  if (t->failed) {
    pthread_mutex_unlock(&t->lock);
    return sink_failed(t);
  }
  if (!own && t->free) {
    t->cur = t->free;
    t->free = t->cur->next;
  }
  pthread_mutex_unlock(&t->lock);
  if (!t->cur)
    t->cur = new_batch(own ? units : BATCH_UNITS, own);
  if (!t->cur)
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", t->name), false;
  return true;
}

/* Room for `units` units in the current batch (NULL with the error set when the sink failed
 * or memory ran out). */
static inline unit_t *room(pk_thread_t *t, size_t units) {
  batch_t *b = t->cur;
  if (HBM_UNLIKELY(!b || b->n + units > b->cap)) {
    if (!hand_over(t, units))
      return NULL;
    b = t->cur;
  }
  unit_t *u = b->units + b->n;
  b->n += units;
  return u;
}

/* An id from a free list, or the next new one. */
static bool take_id(pk_thread_t *t, const uint32_t *free_ids, size_t *n_free, uint32_t *next,
                    uint32_t *out) {
  if (*n_free) {
    *out = free_ids[--*n_free];
    return true;
  }
  if (*next == UINT32_MAX)
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: more than 4 billion containers", t->name), false;
  *out = (*next)++;
  return true;
}

static bool give_id(pk_thread_t *t, uint32_t **free_ids, size_t *n_free, size_t *cap, uint32_t id) {
  if (*n_free == *cap && !fit(t, (void **)free_ids, cap, *n_free + 1, sizeof **free_ids))
    return false;
  (*free_ids)[(*n_free)++] = id;
  return true;
}

static bool proxy_open(void *ctx, pk_kind_t kind, uint64_t *state) {
  pk_thread_t *t = ctx;
  uint32_t id;
  unit_t *u;
  if (!take_id(t, t->free_states, &t->n_free_states, &t->next_state, &id) || !(u = room(t, 1)))
    return false;
  u->call = (call_t){.op = CALL_OPEN, .kind = (uint8_t)kind, .state = id};
  *state = id;
  return true;
}

static bool proxy_add(void *ctx, pk_kind_t kind, uint64_t *state, const pk_ref_t *items, size_t n) {
  pk_thread_t *t = ctx;
  if (n > UINT32_MAX)
    return hbm__error(HBM_ERR_PARSE, "%s: more than 4 billion items at once", t->name), false;
  size_t kept = 0;
  while (kept < n && items[kept].kind == PK_OBJ && items[kept].tag == STAND_IN_KEPT)
    kept++;
  if (kept == n && n) {
    unit_t *u = room(t, 1 + (n + 3) / 4);
    if (!u)
      return false;
    u->call = (call_t){
        .op = CALL_ADD_IDS, .kind = (uint8_t)kind, .n = (uint32_t)n, .state = (uint32_t)*state};
    uint32_t *ids = u[1].ids;
    for (size_t i = 0; i < n; i++)
      ids[i] = (uint32_t)items[i].as.obj;
    return true;
  }
  unit_t *u = room(t, 1 + n);
  if (!u)
    return false;
  u->call =
      (call_t){.op = CALL_ADD, .kind = (uint8_t)kind, .n = (uint32_t)n, .state = (uint32_t)*state};
  memcpy(&u[1].item, items, n * sizeof *items);
  for (size_t i = 0; i < n; i++) /* a stand-in used once: its id is free again */
    if (items[i].kind == PK_OBJ && items[i].tag == STAND_IN_ONCE &&
        !give_id(t, &t->free_ids, &t->n_free_ids, &t->cap_free_ids, (uint32_t)items[i].as.obj))
      return false;
  return true;
}

static bool proxy_close(void *ctx, pk_kind_t kind, uint64_t state, unsigned flags, pk_ref_t *out) {
  pk_thread_t *t = ctx;
  uint32_t id;
  unit_t *u;
  bool kept = flags & PK_CLOSE_AGAIN;
  size_t none = 0; /* a stand-in kept for good takes a new id, never one used before */
  if (!take_id(t, t->free_ids, kept ? &none : &t->n_free_ids, &t->next_id, &id))
    return false;
  if (!(u = room(t, 1)) ||
      !give_id(t, &t->free_states, &t->n_free_states, &t->cap_free_states, (uint32_t)state))
    return false;
  u->call = (call_t){.op = CALL_CLOSE,
                     .kind = (uint8_t)kind,
                     .flags = (uint8_t)flags,
                     .state = (uint32_t)state,
                     .id = id};
  *out = (pk_ref_t){.kind = PK_OBJ, .tag = kept ? STAND_IN_KEPT : STAND_IN_ONCE, .as.obj = id};
  return true;
}

/* A discard cannot fail: when the call cannot be handed over, the sink has failed (or memory
 * ran out), and the reading fails with it anyway. */
static void proxy_discard(void *ctx, pk_kind_t kind, uint64_t state) {
  pk_thread_t *t = ctx;
  unit_t *u = room(t, 1);
  if (u && give_id(t, &t->free_states, &t->n_free_states, &t->cap_free_states, (uint32_t)state))
    u->call = (call_t){.op = CALL_DISCARD, .kind = (uint8_t)kind, .state = (uint32_t)state};
}

void pk_thread_progress(pk_thread_t *t, size_t offset) {
  unit_t *u = room(t, 2);
  if (u) {
    u[0].call = (call_t){.op = CALL_PROGRESS};
    u[1].item = (pk_ref_t){.as.u = offset};
  }
}

/* ---- start and finish ---- */

static void thread_free(pk_thread_t *t) {
  for (batch_t *b = t->free, *next; b; b = next) {
    next = b->next;
    free(b->units);
    free(b);
  }
  if (t->cur) {
    free(t->cur->units);
    free(t->cur);
  }
  pthread_mutex_destroy(&t->lock);
  pthread_cond_destroy(&t->filled);
  pthread_cond_destroy(&t->emptied);
  free(t->message);
  free(t->free_states);
  free(t->free_ids);
  free(t->states);
  free(t->values);
  free(t->items);
  free(t);
}

pk_thread_t *pk_thread_start(const pk_sink_t *sink, const char *name,
                             const pk_stream_options_t *opt, pk_sink_t *proxy) {
  pk_thread_t *t = new_lines(sizeof *t);
  if (!t)
    return NULL;
  t->sink = sink;
  t->name = name;
  t->progress = opt->progress;
  t->ahead = opt->ahead;
  t->progress_ctx = opt->progress_ctx;
  pthread_mutex_init(&t->lock, NULL);
  pthread_cond_init(&t->filled, NULL);
  pthread_cond_init(&t->emptied, NULL);
  if (pthread_create(&t->thread, NULL, sink_main, t) != 0) {
    thread_free(t);
    return NULL;
  }
  *proxy = (pk_sink_t){t, proxy_open, proxy_add, proxy_close, proxy_discard};
  return t;
}

hbm_status_t pk_thread_finish(pk_thread_t *t, pk_ref_t *root) {
  pthread_mutex_lock(&t->lock);
  queue_current(t);
  t->finished = true;
  pthread_cond_signal(&t->filled);
  pthread_mutex_unlock(&t->lock);
  pthread_join(t->thread, NULL);
  hbm_status_t st = HBM_OK;
  if (t->failed)
    st = hbm__error(t->status, "%s", t->message ? t->message : "out of host memory");
  else if (root->kind == PK_OBJ && root->as.obj < t->cap_values)
    *root = t->values[root->as.obj];
  thread_free(t);
  return st;
}
