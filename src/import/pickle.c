/* pickle.c — the restricted streaming pickle reader of pickle.h. A pickle is a program for a
 * small stack machine; this runs only the opcodes that push plain data (numbers, strings,
 * bytes, None, booleans), build containers (lists, tuples, sets, dicts) and use the memo, and
 * refuses every opcode that would import a name, call it or restore an object's state. Those
 * are errors naming the opcode and its byte offset, so a hostile file is reported, never run.
 *
 * The reader builds nothing itself: containers go to a sink (pickle.h) item by item and are
 * completed when the pickle uses them inside another one, so a sink can turn each event of a
 * gigabyte snapshot into its own compact form and forget it. What the reader keeps: the
 * stack (16 bytes a value), the containers still open or referred to again, and the memo
 * entries the pickle uses again. Which ones those are, a first quick scan over the opcodes
 * tells (Python's pickler memoizes every string, list and dict it writes; a snapshot refers
 * back to a few thousand of its tens of millions). All of it is counted against a budget in
 * bytes that scales with the input, so no file makes it use more than PK_MEMORY_PER_BYTE per
 * byte (plus PK_MEMORY_BASE); DUP and memo references count like any other value. The machine
 * is iterative (no recursion on nesting) and every length is checked against the bytes left.
 *
 * pickle_tree.c is the sink that builds the whole tree (pk_parse). */
#include "import/pickle.h"
#include "import/pickle_thread.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNSET_KIND 0xff /* a memo entry not stored yet */

typedef struct slot { /* a container: open, or completed and still referred to */
  uint64_t state;     /* the sink's; free slots: the next free one */
  pk_ref_t done;      /* what it stands for once completed */
  uint32_t refs;      /* stack and memo references */
  uint8_t kind;
  bool closed, partial;
} slot_t;

typedef struct bitmap {
  uint64_t *words;
  size_t n_words;
} bitmap_t;

typedef struct memo_hit { /* a memo index recently used and its place among the used ones */
  uint64_t index;         /* + 1; 0: empty */
  size_t at;
  pk_ref_t value; /* what memo[at] holds, once it is no container (UNSET_KIND: look there) */
} memo_hit_t;

typedef struct machine {
  const uint8_t *data;
  size_t len, pos, op_pos; /* op_pos: offset of the opcode being run */
  const char *name;
  const pk_sink_t *sink;
  const pk_stream_options_t *opt;
  size_t memory, max_memory; /* bytes of the arrays below */
  pk_ref_t *stack;
  size_t sp, stack_cap;
  size_t *marks; /* stack heights at each MARK */
  size_t n_marks, marks_cap;
  slot_t *slots;
  size_t n_slots, slots_cap;
  uint32_t free_slot; /* UINT32_MAX: none */
  /* The memo: `used` marks the indices some GET refers to (the scan), `set` those stored so
   * far; only used ones keep a value, densely, at their rank among the used ones. */
  bitmap_t used, set;
  uint32_t *rank; /* per word of `used`: the used indices before it */
  pk_ref_t *memo;
  size_t memo_count;          /* distinct indices stored so far: MEMOIZE's next index */
  memo_hit_t memo_hits[2048]; /* snapshots refer to a few thousand frames again and again */
  pk_ref_t batch[1024];       /* run_get_batch's items */
  size_t used_until;          /* bytes up to the last value completed inside a container */
  size_t next_progress;
  bool refused;       /* the error is a refusal (code), not damage: never salvaged */
  bool truncated;     /* the input ended inside the pickle */
  bool explicit_memo; /* the pickle uses PUT: `set` says which indices are stored */
  bool sink_failed;
  pk_thread_t *thread; /* the sink's, when it runs on one: progress is reported there */
} machine_t;

/* ---- names and errors ---- */

static const char *opcode_name(uint8_t op) {
  static const struct {
    uint8_t op;
    const char *name;
  } names[] = {{'(', "MARK"},
               {'.', "STOP"},
               {'0', "POP"},
               {'1', "POP_MARK"},
               {'2', "DUP"},
               {'F', "FLOAT"},
               {'I', "INT"},
               {'J', "BININT"},
               {'K', "BININT1"},
               {'L', "LONG"},
               {'M', "BININT2"},
               {'N', "NONE"},
               {'P', "PERSID"},
               {'Q', "BINPERSID"},
               {'R', "REDUCE"},
               {'S', "STRING"},
               {'T', "BINSTRING"},
               {'U', "SHORT_BINSTRING"},
               {'V', "UNICODE"},
               {'X', "BINUNICODE"},
               {'a', "APPEND"},
               {'b', "BUILD"},
               {'c', "GLOBAL"},
               {'d', "DICT"},
               {'}', "EMPTY_DICT"},
               {'e', "APPENDS"},
               {'g', "GET"},
               {'h', "BINGET"},
               {'i', "INST"},
               {'j', "LONG_BINGET"},
               {'l', "LIST"},
               {']', "EMPTY_LIST"},
               {'o', "OBJ"},
               {'p', "PUT"},
               {'q', "BINPUT"},
               {'r', "LONG_BINPUT"},
               {'s', "SETITEM"},
               {'t', "TUPLE"},
               {')', "EMPTY_TUPLE"},
               {'u', "SETITEMS"},
               {'G', "BINFLOAT"},
               {0x80, "PROTO"},
               {0x81, "NEWOBJ"},
               {0x82, "EXT1"},
               {0x83, "EXT2"},
               {0x84, "EXT4"},
               {0x85, "TUPLE1"},
               {0x86, "TUPLE2"},
               {0x87, "TUPLE3"},
               {0x88, "NEWTRUE"},
               {0x89, "NEWFALSE"},
               {0x8a, "LONG1"},
               {0x8b, "LONG4"},
               {'B', "BINBYTES"},
               {'C', "SHORT_BINBYTES"},
               {0x8c, "SHORT_BINUNICODE"},
               {0x8d, "BINUNICODE8"},
               {0x8e, "BINBYTES8"},
               {0x8f, "EMPTY_SET"},
               {0x90, "ADDITEMS"},
               {0x91, "FROZENSET"},
               {0x92, "NEWOBJ_EX"},
               {0x93, "STACK_GLOBAL"},
               {0x94, "MEMOIZE"},
               {0x95, "FRAME"},
               {0x96, "BYTEARRAY8"},
               {0x97, "NEXT_BUFFER"},
               {0x98, "READONLY_BUFFER"}};
  for (size_t i = 0; i < HBM_ARRAY_LEN(names); i++)
    if (names[i].op == op)
      return names[i].name;
  return NULL;
}

static bool fail(machine_t *m, const char *fmt, ...) HBM_PRINTF(2, 3);
static bool fail(machine_t *m, const char *fmt, ...) {
  char why[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  hbm__error(HBM_ERR_PARSE, "%s: byte %zu: %s", m->name, m->op_pos, why);
  return false;
}

static bool fail_opcode(machine_t *m, uint8_t op, const char *why) {
  const char *name = opcode_name(op);
  return fail(m, "opcode %s (0x%02x) %s", name ? name : "unknown", op, why);
}

static bool out_of_memory(machine_t *m) {
  m->refused = true; /* not damage in the file: nothing to salvage */
  return fail(m, "out of host memory");
}

/* A printable copy of a name from the file, for messages. */
static void printable(const uint8_t *s, size_t n, char *out, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; i < n && k + 4 < cap; i++)
    out[k++] = s[i] >= 0x20 && s[i] < 0x7f ? (char)s[i] : '?';
  if (n && k < n && k + 4 >= cap)
    out[k++] = '.', out[k++] = '.', out[k++] = '.';
  out[k] = '\0';
}

/* GLOBAL names its module and attribute on two text lines; STACK_GLOBAL takes two strings
 * from the stack. Either way the message says what the file tried to import. */
static bool refuse_global(machine_t *m, uint8_t op) {
  char what[160] = "", a[72], b[72];
  if (op == 'c') {
    const uint8_t *p = m->data + m->pos, *end = m->data + m->len;
    const uint8_t *nl1 = memchr(p, '\n', (size_t)(end - p));
    const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(end - nl1 - 1)) : NULL;
    if (nl2) {
      printable(p, (size_t)(nl1 - p), a, sizeof a);
      printable(nl1 + 1, (size_t)(nl2 - nl1 - 1), b, sizeof b);
      snprintf(what, sizeof what, " ('%s.%s')", a, b);
    }
  } else if (m->sp >= 2 && m->stack[m->sp - 2].kind == PK_STR &&
             m->stack[m->sp - 1].kind == PK_STR) {
    const pk_ref_t *mod = &m->stack[m->sp - 2], *attr = &m->stack[m->sp - 1];
    printable(mod->as.s, mod->n, a, sizeof a);
    printable(attr->as.s, attr->n, b, sizeof b);
    snprintf(what, sizeof what, " ('%s.%s')", a, b);
  }
  char why[300];
  snprintf(why, sizeof why,
           "imports Python code%s: refused; hbm reads only plain data (dicts, lists, strings, "
           "numbers) and never runs anything from a pickle",
           what);
  m->refused = true;
  return fail_opcode(m, op, why);
}

/* ---- memory: every array the machine grows is counted ---- */

static bool grow(machine_t *m, void **items, size_t *cap, size_t need, size_t elem, size_t first) {
  if (need <= *cap)
    return true;
  size_t old = *cap;
  size_t want = old ? old : first;
  while (want < need)
    want *= 2;
  if (m->memory + (want - old) * elem > m->max_memory) {
    m->refused = true;
    return fail(m,
                "the pickle needs more than %zu bytes of memory at once for a %zu-byte file "
                "(at most %d per input byte, plus %zu MiB): refused as hostile",
                m->max_memory, m->len, PK_MEMORY_PER_BYTE, PK_MEMORY_BASE >> 20);
  }
  void *grown = hbm__grow_array(*items, cap, need, elem, first);
  if (!grown)
    return out_of_memory(m);
  m->memory += (*cap - old) * elem;
  *items = grown;
  return true;
}

static bool bit_get(const bitmap_t *b, uint64_t i) {
  return i / 64 < b->n_words && (b->words[i / 64] >> (i % 64) & 1);
}

static bool bit_set_grown(machine_t *m, bitmap_t *b, uint64_t i) {
  size_t need = (size_t)(i / 64) + 1, old = b->n_words;
  if (!grow(m, (void **)&b->words, &b->n_words, need, sizeof *b->words, 64))
    return false;
  memset(b->words + old, 0, (b->n_words - old) * sizeof *b->words);
  b->words[i / 64] |= (uint64_t)1 << (i % 64);
  return true;
}

static inline bool bit_set(machine_t *m, bitmap_t *b, uint64_t i) {
  if (HBM_UNLIKELY(i / 64 >= b->n_words))
    return bit_set_grown(m, b, i);
  b->words[i / 64] |= (uint64_t)1 << (i % 64);
  return true;
}

/* ---- containers ---- */

static bool new_slot(machine_t *m, pk_kind_t kind, uint32_t *out) {
  uint32_t i = m->free_slot;
  if (i != UINT32_MAX) {
    m->free_slot = (uint32_t)m->slots[i].state;
  } else {
    if (m->n_slots >= UINT32_MAX - 1)
      return fail(m, "more than 4 billion containers open at once");
    if (!grow(m, (void **)&m->slots, &m->slots_cap, m->n_slots + 1, sizeof *m->slots, 64))
      return false;
    i = (uint32_t)m->n_slots++;
  }
  m->slots[i] = (slot_t){.kind = (uint8_t)kind};
  if (!m->sink->open(m->sink->ctx, kind, &m->slots[i].state)) {
    m->slots[i].state = m->free_slot;
    m->free_slot = i;
    m->sink_failed = true;
    return false;
  }
  *out = i;
  return true;
}

static bool is_container(const pk_ref_t *r) {
  return r->kind == PK_LIST || r->kind == PK_TUPLE || r->kind == PK_DICT;
}

static void hold(machine_t *m, const pk_ref_t *r) {
  if (is_container(r))
    m->slots[r->n].refs++;
}

/* Drops one reference to r's container; the last one frees it (discarding it if open). */
static void release(machine_t *m, const pk_ref_t *r) {
  if (!is_container(r))
    return;
  slot_t *s = &m->slots[r->n];
  if (--s->refs > 0)
    return;
  if (!s->closed)
    m->sink->discard(m->sink->ctx, (pk_kind_t)s->kind, s->state);
  s->state = m->free_slot;
  m->free_slot = r->n;
}

/* What r stands for as an item: a container is completed first (once). */
static bool complete_container(machine_t *m, pk_ref_t *r);

static inline bool complete(machine_t *m, pk_ref_t *r) {
  return !is_container(r) || complete_container(m, r);
}

static bool complete_container(machine_t *m, pk_ref_t *r) {
  slot_t *s = &m->slots[r->n];
  if (!s->closed) {
    pk_ref_t done = {0};
    unsigned flags = (s->refs > 1 ? PK_CLOSE_AGAIN : 0u) | (s->partial ? PK_CLOSE_PARTIAL : 0u);
    if (!m->sink->close(m->sink->ctx, (pk_kind_t)s->kind, s->state, flags, &done)) {
      m->sink_failed = true;
      return false;
    }
    s = &m->slots[r->n]; /* the sink may not grow our arrays, but be safe */
    s->closed = true;
    s->done = done;
  }
  pk_ref_t done = s->done;
  release(m, r);
  *r = done;
  return true;
}

/* Adds items[0, n) (completed in place) to the open container `c`. On failure the items not
 * completed yet keep their references (the caller leaves them on the stack). */
static bool add_items(machine_t *m, const pk_ref_t *c, pk_ref_t *items, size_t n) {
  slot_t *s = &m->slots[c->n];
  if (s->closed)
    return fail(m, "a container is changed after the pickle used it (not what Python's pickler "
                   "writes): refused");
  for (size_t i = 0; i < n; i++) {
    if (is_container(&items[i]) && items[i].n == c->n)
      return fail(m, "a container inside itself: refused");
    if (!complete(m, &items[i]))
      return false;
  }
  if (n && !m->sink->add(m->sink->ctx, (pk_kind_t)s->kind, &m->slots[c->n].state, items, n)) {
    m->sink_failed = true;
    return false;
  }
  m->used_until = m->pos;
  return true;
}

/* ---- the stack ---- */

static inline __attribute__((always_inline)) bool push(machine_t *m, pk_ref_t r) {
  if (m->sp == m->stack_cap &&
      !grow(m, (void **)&m->stack, &m->stack_cap, m->sp + 1, sizeof *m->stack, 256))
    return false;
  hold(m, &r);
  m->stack[m->sp++] = r;
  return true;
}

static void pop_to(machine_t *m, size_t height) {
  while (m->sp > height)
    release(m, &m->stack[--m->sp]);
}

/* The stack height at the innermost MARK, or false with an error. */
static bool top_mark(machine_t *m, size_t *height) {
  if (!m->n_marks)
    return fail(m, "expected a MARK earlier on the stack, found none");
  *height = m->marks[m->n_marks - 1];
  if (*height > m->sp)
    return fail(m, "the stack lost items that a MARK covers");
  return true;
}

static bool need(machine_t *m, size_t n, const char *what) {
  if (m->sp < n || (m->n_marks && m->sp - n < m->marks[m->n_marks - 1]))
    return fail(m, "expected %zu item%s on the stack for %s", n, n == 1 ? "" : "s", what);
  return true;
}

static bool push_new(machine_t *m, pk_kind_t kind) {
  uint32_t slot = 0;
  if (!new_slot(m, kind, &slot))
    return false;
  pk_ref_t r = {.kind = (uint8_t)kind, .n = slot};
  if (!push(m, r)) {
    m->slots[slot].refs = 1;
    release(m, &r);
    return false;
  }
  return true;
}

/* A new container of `kind` made of the stack items above `from`. */
static bool push_built(machine_t *m, size_t from, pk_kind_t kind) {
  if (kind == PK_DICT && (m->sp - from) % 2)
    return fail(m, "DICT needs key/value pairs, found %zu items", m->sp - from);
  if (!push_new(m, kind))
    return false;
  pk_ref_t c = m->stack[--m->sp]; /* keeps its reference while the items go in */
  if (!add_items(m, &c, m->stack + from, m->sp - from)) {
    release(m, &c);
    return false;
  }
  m->sp = from; /* the items were completed and released by add_items */
  m->stack[m->sp++] = c;
  return true;
}

static bool push_marked(machine_t *m, pk_kind_t kind) {
  size_t h = 0;
  if (!top_mark(m, &h))
    return false;
  m->n_marks--;
  return push_built(m, h, kind);
}

/* APPEND/APPENDS/SETITEM/SETITEMS/ADDITEMS: items above `from` go into the container below. */
static bool extend(machine_t *m, size_t from, pk_kind_t kind, const char *what) {
  if (from == 0 || from > m->sp)
    return fail(m, "%s without a container below its items", what);
  pk_ref_t c = m->stack[from - 1];
  if (c.kind != kind)
    return fail(m, "%s on a value that is not a %s", what, kind == PK_DICT ? "dict" : "list");
  size_t n = m->sp - from;
  if (kind == PK_DICT && n % 2)
    return fail(m, "%s needs key/value pairs, found %zu items", what, n);
  bool ok = add_items(m, &c, m->stack + from, n);
  if (ok)
    m->sp = from;
  return ok;
}

static bool extend_marked(machine_t *m, pk_kind_t kind, const char *what) {
  size_t h = 0;
  if (!top_mark(m, &h) || !extend(m, h, kind, what))
    return false;
  m->n_marks--;
  return true;
}

static bool push_mark(machine_t *m) {
  if (m->n_marks == m->marks_cap &&
      !grow(m, (void **)&m->marks, &m->marks_cap, m->n_marks + 1, sizeof *m->marks, 64))
    return false;
  m->marks[m->n_marks++] = m->sp;
  return true;
}

/* ---- reading operands ---- */

static bool take(machine_t *m, size_t n, const uint8_t **out) {
  if (m->len - m->pos < n && (m->truncated = true))
    return fail(m, "expected %zu more byte%s, the file ends after %zu", n, n == 1 ? "" : "s",
                m->len - m->pos);
  *out = m->data + m->pos;
  m->pos += n;
  return true;
}

static bool take_le(machine_t *m, size_t n, uint64_t *out) {
  const uint8_t *p = NULL;
  if (!take(m, n, &p))
    return false;
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;)
    v = v << 8 | p[i];
  *out = v;
  return true;
}

static bool push_int(machine_t *m, int64_t i) {
  return push(m, (pk_ref_t){.kind = PK_INT, .as.i = i});
}

/* LONG1 / LONG4: a little-endian two's complement integer of n bytes. Values in [2^63, 2^64)
 * (a -1 that went through an unsigned C++ type: pytorch/pytorch#115234) are kept unsigned. */
static bool push_long(machine_t *m, size_t n) {
  const uint8_t *p = NULL;
  if (!take(m, n, &p))
    return false;
  pk_ref_t r = {.kind = PK_INT};
  if (n && n < 8) { /* addresses and times: the sign of the top byte, extended */
    uint64_t u = 0;
    for (size_t i = n; i-- > 0;)
      u = u << 8 | p[i];
    if (p[n - 1] & 0x80)
      u |= ~(uint64_t)0 << (8 * n);
    r.as.u = u;
    return push(m, r);
  }
  bool negative = n && (p[n - 1] & 0x80);
  size_t significant = n;
  while (significant > 1 && p[significant - 1] == (negative ? 0xff : 0x00) &&
         ((p[significant - 2] & 0x80) != 0) == negative)
    significant--; /* bytes that only extend the sign */
  if (!negative && significant == 9 && p[8] == 0)
    significant = 8, r.flags = PK_UNSIGNED; /* 2^63 .. 2^64-1 */
  if (significant > 8) {
    r.flags = PK_HUGE;
    return push(m, r);
  }
  uint64_t u = negative ? ~(uint64_t)0 : 0;
  for (size_t i = significant; i-- > 0;)
    u = u << 8 | p[i];
  if (significant < 8 && significant && negative)
    u |= ~(uint64_t)0 << (8 * significant);
  r.as.u = u;
  return push(m, r);
}

static bool push_text(machine_t *m, pk_kind_t kind, size_t len_bytes) {
  uint64_t n;
  const uint8_t *p = NULL;
  if (!take_le(m, len_bytes, &n))
    return false;
  if (n > m->len - m->pos && (m->truncated = true))
    return fail(m, "a string of %llu bytes, but only %zu bytes are left", (unsigned long long)n,
                m->len - m->pos);
  if (n > UINT32_MAX)
    return fail(m, "a string of %llu bytes (more than 4 GiB): refused", (unsigned long long)n);
  if (!take(m, (size_t)n, &p))
    return false;
  return push(m, (pk_ref_t){.kind = (uint8_t)kind, .n = (uint32_t)n, .as.s = p});
}

static bool push_float(machine_t *m) {
  const uint8_t *p = NULL;
  if (!take(m, 8, &p))
    return false;
  uint64_t bits = 0;
  for (int i = 0; i < 8; i++) /* big-endian */
    bits = bits << 8 | p[i];
  pk_ref_t r = {.kind = PK_FLOAT};
  memcpy(&r.as.f, &bits, sizeof r.as.f);
  return push(m, r);
}

/* ---- memo ---- */

static unsigned popcount64(uint64_t x);

static size_t memo_rank(const machine_t *m, uint64_t index) {
  uint64_t below = m->used.words[index / 64] & (((uint64_t)1 << (index % 64)) - 1);
  return m->rank[index / 64] + popcount64(below);
}

/* An index far beyond what the file could fill is hostile: the memo is bounded by the input. */
static bool check_index(machine_t *m, uint64_t index) {
  if (index > m->len + 256)
    return fail(m, "memo index %llu is beyond the %zu-byte input", (unsigned long long)index,
                m->len);
  return true;
}

/* Whether index was stored: by MEMOIZE alone, those below the count. */
static bool memo_stored(const machine_t *m, uint64_t index) {
  return m->explicit_memo ? bit_get(&m->set, index) : index < m->memo_count;
}

static bool memo_put(machine_t *m, uint64_t index) {
  if (!m->sp)
    return fail(m, "nothing on the stack to memoize");
  if (!check_index(m, index))
    return false;
  if (!memo_stored(m, index)) {
    if (m->explicit_memo && !bit_set(m, &m->set, index))
      return false;
    m->memo_count++;
  }
  if (!bit_get(&m->used, index))
    return true; /* never referred to again: nothing to keep */
  pk_ref_t *e = &m->memo[memo_rank(m, index)];
  if (e->kind != UNSET_KIND)
    release(m, e);
  *e = m->stack[m->sp - 1];
  hold(m, e);
  memo_hit_t *hit = &m->memo_hits[index % HBM_ARRAY_LEN(m->memo_hits)];
  if (hit->index == index + 1)
    hit->value.kind = UNSET_KIND; /* a PUT over a used index: the cached value is gone */
  return true;
}

/* The memo entry `index` refers to, first time: its place among the used ones. */
static bool memo_find(machine_t *m, uint64_t index, memo_hit_t *hit) {
  if (!memo_stored(m, index) || !bit_get(&m->used, index))
    return fail(m, "memo entry %llu was never stored", (unsigned long long)index);
  *hit = (memo_hit_t){index + 1, memo_rank(m, index), {.kind = UNSET_KIND}};
  return true;
}

static inline __attribute__((always_inline)) bool memo_get(machine_t *m, uint64_t index) {
  memo_hit_t *hit = &m->memo_hits[index % HBM_ARRAY_LEN(m->memo_hits)];
  /* a stored index stays stored: the first get checks */
  if (HBM_UNLIKELY(hit->index != index + 1) && !memo_find(m, index, hit))
    return false;
  if (HBM_LIKELY(hit->value.kind != UNSET_KIND))
    return push(m, hit->value);
  pk_ref_t *e = &m->memo[hit->at];
  if (is_container(e) && m->slots[e->n].closed) { /* from now on the memo holds what it became */
    pk_ref_t done = m->slots[e->n].done;
    release(m, e);
    *e = done;
  }
  if (!is_container(e))
    hit->value = *e;
  return push(m, *e);
}

/* ---- the scan: which memo entries does the pickle use again? ---- */

/* How the scan steps over each opcode's operands. */
enum {
  OPS_STOP = 0, /* STOP, a refused opcode, or not an opcode: the scan ends there */
  OPS_NONE,     /* no operand */
  OPS_FIXED1,
  OPS_FIXED2,
  OPS_FIXED4,
  OPS_FIXED8,
  OPS_LEN1, /* a length, then that many bytes */
  OPS_LEN4,
  OPS_LEN8,
  OPS_GET1,
  OPS_GET4,
  OPS_PUT1,
  OPS_PUT4,
  OPS_MEMOIZE
};

static const uint8_t op_shape[256] = {
    ['('] = OPS_NONE,   ['0'] = OPS_NONE,   ['1'] = OPS_NONE,     ['2'] = OPS_NONE,
    ['N'] = OPS_NONE,   ['a'] = OPS_NONE,   ['d'] = OPS_NONE,     ['}'] = OPS_NONE,
    ['e'] = OPS_NONE,   ['l'] = OPS_NONE,   [']'] = OPS_NONE,     ['s'] = OPS_NONE,
    ['t'] = OPS_NONE,   [')'] = OPS_NONE,   ['u'] = OPS_NONE,     [0x85] = OPS_NONE,
    [0x86] = OPS_NONE,  [0x87] = OPS_NONE,  [0x88] = OPS_NONE,    [0x89] = OPS_NONE,
    [0x8f] = OPS_NONE,  [0x90] = OPS_NONE,  [0x91] = OPS_NONE,    [0x97] = OPS_NONE,
    [0x98] = OPS_NONE,  ['K'] = OPS_FIXED1, [0x80] = OPS_FIXED1,  ['M'] = OPS_FIXED2,
    ['J'] = OPS_FIXED4, ['G'] = OPS_FIXED8, [0x95] = OPS_FIXED8,  [0x8a] = OPS_LEN1,
    [0x8c] = OPS_LEN1,  ['U'] = OPS_LEN1,   ['C'] = OPS_LEN1,     [0x8b] = OPS_LEN4,
    ['X'] = OPS_LEN4,   ['T'] = OPS_LEN4,   ['B'] = OPS_LEN4,     [0x8d] = OPS_LEN8,
    [0x8e] = OPS_LEN8,  [0x96] = OPS_LEN8,  ['h'] = OPS_GET1,     ['j'] = OPS_GET4,
    ['q'] = OPS_PUT1,   ['r'] = OPS_PUT4,   [0x94] = OPS_MEMOIZE,
};

static inline uint64_t le_bytes(const uint8_t *p, size_t n) {
  if (n == 1)
    return p[0];
  if (n == 4)
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24;
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;)
    v = v << 8 | p[i];
  return v;
}

/* 8 little-endian bytes (the caller knows they are there). */
static inline uint64_t le_u64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

static unsigned popcount64(uint64_t x) { /* SWAR: no libgcc call where POPCNT is not assumed */
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return (unsigned)((x * 0x0101010101010101ull) >> 56);
}

/* The memo indices stored so far, once a PUT names its own: until then MEMOIZE numbers them
 * 0, 1, 2, ... and no bitmap is needed (Python's pickler writes only MEMOIZE). */
static bool start_explicit_memo(machine_t *m, bitmap_t *set, size_t count) {
  for (size_t i = 0; i < count; i++)
    if (!bit_set(m, set, i))
      return false;
  return true;
}

#define SCAN_STOP SIZE_MAX

/* Steps over one opcode other than BINGET/LONG_BINGET at d[at]: where the next one begins;
 * SCAN_STOP at STOP, a refused or unknown opcode, or operands past the end (the machine says
 * why there), or when memory ran out (*ok false). The position goes by value: a pointer to it
 * would make every store to the bitmaps reload it. */
static size_t scan_one(machine_t *m, size_t at, bitmap_t *set, size_t *count, bool *explicit_memo,
                       bool *ok) {
  const uint8_t *d = m->data;
  size_t pos = at + 1, left = m->len - pos, width;
  uint8_t shape = op_shape[d[at]];
  switch (shape) {
  case OPS_NONE: break;
  case OPS_FIXED1:
  case OPS_FIXED2:
  case OPS_FIXED4:
  case OPS_FIXED8:
    width = (size_t)1 << (shape - OPS_FIXED1);
    if (left < width)
      return SCAN_STOP;
    pos += width;
    break;
  case OPS_LEN1:
  case OPS_LEN4:
  case OPS_LEN8:
    width = shape == OPS_LEN1 ? 1 : shape == OPS_LEN4 ? 4 : 8;
    if (left < width || le_bytes(d + pos, width) > left - width)
      return SCAN_STOP;
    pos += width + (size_t)le_bytes(d + pos, width);
    break;
  case OPS_PUT1:
  case OPS_PUT4: {
    width = shape == OPS_PUT1 ? 1 : 4;
    if (left < width)
      return SCAN_STOP;
    uint64_t index = le_bytes(d + pos, width);
    pos += width;
    if (index > m->len + 256)
      break;
    if (!*explicit_memo && !(*ok = start_explicit_memo(m, set, *count)))
      return SCAN_STOP;
    *explicit_memo = true;
    if (!bit_get(set, index) && (*ok = bit_set(m, set, index)))
      (*count)++;
    break;
  }
  case OPS_MEMOIZE: /* the next index, unless a PUT took it: then Python overwrites it */
    if (!*explicit_memo)
      (*count)++;
    else if (!bit_get(set, *count) && (*ok = bit_set(m, set, *count)))
      (*count)++;
    break;
  default: return SCAN_STOP; /* STOP, refused or unknown; GETs are the caller's */
  }
  return *ok ? pos : SCAN_STOP;
}

#define SIZE_LEN1 0xff /* a one-byte length, then that many bytes */

/* An opcode's whole size for the scan's shortest paths: fixed (1 + its operand), SIZE_LEN1,
 * or 0 (scan_one steps over it). */
static uint8_t scan_size(uint8_t shape) {
  switch (shape) {
  case OPS_NONE: return 1;
  case OPS_FIXED1: return 2;
  case OPS_FIXED2: return 3;
  case OPS_FIXED4: return 5;
  case OPS_FIXED8: return 9;
  case OPS_LEN1: return SIZE_LEN1;
  default: return 0;
  }
}

/* Scans [*at, end) for the memo indices some GET refers to, into `used` (whose bit 255 is
 * set: BINGET's indices fit without a check). Stops at `end`, at STOP or at the first opcode
 * it cannot step over (the machine then says why there): *at is where. false when memory ran
 * out. Memo references are most of a snapshot's opcodes: they take the shortest path. With
 * `drop`, the pages passed are given back every 16 MiB (a scan on a thread of its own). */
static bool scan_range(machine_t *m, bitmap_t *used, size_t *at, size_t end, bool *explicit_memo,
                       bool drop) {
  bitmap_t set = {0};
  size_t count = 0, next_progress = m->next_progress, pos = *at, from = pos;
  uint64_t max_index = (uint64_t)m->len + 256;
  bool ok = true;
  const uint8_t *d = m->data;
  size_t len = m->len;
  uint8_t size_of[256]; /* each opcode's whole size where it is fixed, SIZE_LEN1, else 0 */
  for (int op = 0; op < 256; op++)
    size_of[op] = scan_size(op_shape[op]);
  if (drop)
    next_progress = pos + ((size_t)16 << 20);
  size_t room_end = len > 9 ? len - 9 : 0; /* before it, any fixed operand is there */
  while (ok && pos < end) {
    size_t limit = next_progress < end ? next_progress : end;
    while (pos < limit) {
      /* the shortest path: memo references and fixed-size opcodes, no bounds to check */
      size_t fast = limit < room_end ? limit : room_end;
      uint64_t *words = used->words, n_words = used->n_words;
      bool numbered = !*explicit_memo; /* MEMOIZE numbers them 0, 1, 2, ... */
      while (pos < fast) {
        uint8_t op = d[pos];
        uint64_t index;
        if (op == 'h') {
          words[d[pos + 1] / 64] |= (uint64_t)1 << (d[pos + 1] % 64);
          pos += 2;
        } else if (op == 'j' && (index = le_bytes(d + pos + 1, 4)) / 64 < n_words &&
                   index <= max_index) {
          words[index / 64] |= (uint64_t)1 << (index % 64);
          pos += 5;
        } else if ((uint8_t)(size_of[op] - 1) < 9) {
          pos += size_of[op]; /* 1 to 9 bytes: MARK, EMPTY_DICT, BININT, FRAME, ... */
        } else if (size_of[op] == SIZE_LEN1 && d[pos + 1] <= len - pos - 2) {
          pos += 2 + (size_t)d[pos + 1]; /* SHORT_BINUNICODE, LONG1, ... */
        } else if (op == 0x94 && numbered) {
          count++;
          pos++;
        } else {
          break;
        }
      }
      if (pos >= limit)
        break;
      /* one opcode the checked way (near the end, or its operands matter) */
      uint8_t op = d[pos];
      size_t left = len - pos, size;
      if (op == 'h' && left > 1) {
        used->words[d[pos + 1] / 64] |= (uint64_t)1 << (d[pos + 1] % 64);
        pos += 2;
      } else if (op == 'j' && left > 4) {
        uint64_t index = le_bytes(d + pos + 1, 4);
        pos += 5;
        if (index <= max_index && !(ok = bit_set(m, used, index)))
          goto done;
      } else if ((size = size_of[op]) != 0 && size != SIZE_LEN1 && left >= size) {
        pos += size; /* no operand the scan needs: MARK, EMPTY_DICT, BININT, ... */
      } else if (size == SIZE_LEN1 && left > 1 && d[pos + 1] <= left - 2) {
        pos += 2 + (size_t)d[pos + 1]; /* SHORT_BINUNICODE, LONG1, ... */
      } else if (op == 0x94 && !*explicit_memo) {
        count++; /* MEMOIZE numbers them 0, 1, 2, ... */
        pos++;
      } else {
        size_t next = scan_one(m, pos, &set, &count, explicit_memo, &ok);
        if (next == SCAN_STOP)
          goto done;
        pos = next;
      }
    }
    if (drop && pos >= next_progress) {
      m->opt->drop(m->opt->progress_ctx, from, pos);
      next_progress = pos + ((size_t)16 << 20);
    } else if (!drop && m->opt->progress && pos >= next_progress) {
      m->opt->progress(m->opt->progress_ctx, pos);
      next_progress = pos + (m->opt->progress_bytes ? m->opt->progress_bytes : (64u << 20));
    }
  }
done:
  *at = pos;
  m->memory -= set.n_words * sizeof *set.words;
  free(set.words);
  return ok;
}

/* Whether a chain of frames starts at `at`: FRAME_CHAIN frame headers in a row, each right
 * after the one before, or fewer reaching the end of the file exactly. */
#define FRAME_CHAIN 4

static bool frames_chain(const uint8_t *d, size_t len, size_t at) {
  for (int k = 0; k < FRAME_CHAIN; k++) {
    if (at == len)
      return k > 0;
    if (at > len || len - at < 9 || d[at] != 0x95)
      return false;
    uint64_t n = le_bytes(d + at + 1, 8);
    if (n == 0 || n > len - at - 9)
      return false;
    at += 9 + (size_t)n;
  }
  return true;
}

/* Where the second half's scan starts: the first FRAME at or after `target` (within
 * FRAME_SEARCH bytes) that starts a chain of frames, for a pickle framed from its start
 * (Python's, protocol 4 and 5, frames each opcode whole); 0 when there is none. Only the pages
 * around `target` are read, so a cold file's second half is read from the disk at the same
 * time as its first (stepping from frame to frame from the start waited for the first half:
 * 0.55 s of a cold 1 GiB snapshot's 1.0 s scan). A 0x95 byte inside a value that happens to
 * chain is no frame: the first half's scan then does not end exactly there, and scan() goes
 * on alone from where it ended, as from any split that does not join. */
#define FRAME_SEARCH ((size_t)1 << 20)

static size_t frame_near(const machine_t *m, size_t target) {
  const uint8_t *d = m->data;
  size_t len = m->len;
  if (len < 11 || d[2] != 0x95 || target >= len)
    return 0;
  size_t end = len - target > FRAME_SEARCH ? target + FRAME_SEARCH : len;
  for (size_t at = target; at < end; at++) {
    const uint8_t *hit = memchr(d + at, 0x95, end - at);
    if (!hit)
      return 0;
    at = (size_t)(hit - d);
    if (frames_chain(d, len, at))
      return at;
  }
  return 0;
}

/* The scan of a big file's second half, on a thread of its own. */
#define SCAN_SPLIT_MIN ((size_t)64 << 20)

typedef struct scan_half {
  machine_t m; /* its own memory count and errors */
  bitmap_t used;
  size_t at;
  bool explicit_memo, ok;
} scan_half_t;

static void *scan_half_main(void *arg) {
  scan_half_t *h = arg;
  h->ok = bit_set(&h->m, &h->used, 255) &&
          scan_range(&h->m, &h->used, &h->at, h->m.len, &h->explicit_memo, h->m.opt->drop != NULL);
  return NULL;
}

/* Fills m->used with the memo indices some GET refers to, and the rank table. A big framed
 * file is scanned in two halves at once (the second on a thread); when the first half does not
 * end exactly where the second began, or the second failed, the scan goes on from there
 * alone, so the result and any error are those of one scan from the start. */
static bool scan(machine_t *m) {
  bool explicit_memo = false;
  size_t pos = 2, len = m->len;
  if (!bit_set(m, &m->used, 255))
    return false;
  scan_half_t *half = NULL;
  size_t split_min = m->opt->split_min ? m->opt->split_min : SCAN_SPLIT_MIN;
  size_t split = len >= split_min ? frame_near(m, len / 2) : 0;
  pthread_t thread;
  if (split && (half = calloc(1, sizeof *half))) {
    half->m = (machine_t){.data = m->data,
                          .len = len,
                          .name = m->name,
                          .opt = m->opt,
                          .max_memory = m->max_memory,
                          .next_progress = SIZE_MAX};
    half->at = split;
    if (pthread_create(&thread, NULL, scan_half_main, half) != 0) {
      free(half);
      half = NULL;
    }
  }
  bool ok = scan_range(m, &m->used, &pos, half ? split : len, &explicit_memo, false);
  if (half) {
    pthread_join(thread, NULL);
    bool joined = ok && pos == split && half->ok;
    if (joined) {
      size_t words = half->used.n_words, old = m->used.n_words;
      ok = words <= old ||
           grow(m, (void **)&m->used.words, &m->used.n_words, words, sizeof *m->used.words, 64);
      if (ok && m->used.n_words > old)
        memset(m->used.words + old, 0, (m->used.n_words - old) * sizeof *m->used.words);
      for (size_t w = 0; ok && w < words; w++)
        m->used.words[w] |= half->used.words[w];
      explicit_memo |= half->explicit_memo;
    }
    free(half->used.words);
    free(half);
    if (ok && !joined && pos >= split) /* the rest (or the first half's last opcode on) */
      ok = scan_range(m, &m->used, &pos, len, &explicit_memo, false);
  }
  m->explicit_memo = explicit_memo;
  if (!ok)
    return false;
  size_t words = m->used.n_words, total = 0;
  if (!grow(m, (void **)&m->rank, &(size_t){0}, words + 1, sizeof *m->rank, 1))
    return false;
  for (size_t w = 0; w < words; w++) {
    m->rank[w] = (uint32_t)total;
    total += popcount64(m->used.words[w]);
  }
  size_t cap = 0;
  if (total && !grow(m, (void **)&m->memo, &cap, total, sizeof *m->memo, 1))
    return false;
  for (size_t i = 0; i < total; i++)
    m->memo[i].kind = UNSET_KIND;
  return true;
}

/* ---- the machine ---- */

/* Opcodes that push one value. Returns false on error; *handled is false for others. */
static bool run_data_opcode(machine_t *m, uint8_t op, bool *handled) {
  uint64_t n;
  *handled = true;
  switch (op) {
  case 'N': return push(m, (pk_ref_t){.kind = PK_NONE});
  case 0x88:
  case 0x89: return push(m, (pk_ref_t){.kind = PK_BOOL, .as.b = op == 0x88});
  case 'K': return take_le(m, 1, &n) && push_int(m, (int64_t)n);
  case 'M': return take_le(m, 2, &n) && push_int(m, (int64_t)n);
  case 'J': return take_le(m, 4, &n) && push_int(m, (int64_t)(int32_t)(uint32_t)n);
  case 0x8a: return take_le(m, 1, &n) && push_long(m, (size_t)n);
  case 0x8b:
    if (!take_le(m, 4, &n))
      return false;
    if ((int32_t)(uint32_t)n < 0)
      return fail(m, "LONG4 with a negative length");
    if (n > m->len - m->pos && (m->truncated = true))
      return fail(m, "an integer of %llu bytes, but only %zu bytes are left", (unsigned long long)n,
                  m->len - m->pos);
    return push_long(m, (size_t)n);
  case 'G': return push_float(m);
  case 0x8c: return push_text(m, PK_STR, 1);
  case 'X': return push_text(m, PK_STR, 4);
  case 0x8d: return push_text(m, PK_STR, 8);
  case 'U': return push_text(m, PK_STR, 1);
  case 'T': return push_text(m, PK_STR, 4);
  case 'C': return push_text(m, PK_BYTES, 1);
  case 'B': return push_text(m, PK_BYTES, 4);
  case 0x8e:
  case 0x96: return push_text(m, PK_BYTES, 8);
  /* protocol 5: a buffer passed beside the pickle (PEP 574); the file does not hold it */
  case 0x97: return push(m, (pk_ref_t){.kind = PK_BYTES, .flags = PK_OUT_OF_BAND});
  case 0x98: return need(m, 1, "READONLY_BUFFER"); /* the buffer becomes read-only: no change */
  case '}': return push_new(m, PK_DICT);
  case ']':
  case 0x8f: return push_new(m, PK_LIST);
  case ')': return push_new(m, PK_TUPLE);
  case 0x85:
  case 0x86:
  case 0x87:
    return need(m, (size_t)(op - 0x84), "a tuple") &&
           push_built(m, m->sp - (size_t)(op - 0x84), PK_TUPLE);
  default: *handled = false; return true;
  }
}

static bool run_structure_opcode(machine_t *m, uint8_t op, bool *handled) {
  uint64_t n;
  *handled = true;
  switch (op) {
  case '(': return push_mark(m);
  case 't': return push_marked(m, PK_TUPLE);
  case 'l':
  case 0x91: return push_marked(m, PK_LIST);
  case 'd': return push_marked(m, PK_DICT);
  /* the container below the items must be above the innermost MARK too, as in Python */
  case 'a': return need(m, 2, "APPEND") && extend(m, m->sp - 1, PK_LIST, "APPEND");
  case 's': return need(m, 3, "SETITEM") && extend(m, m->sp - 2, PK_DICT, "SETITEM");
  case 'e': return extend_marked(m, PK_LIST, "APPENDS");
  case 0x90: return extend_marked(m, PK_LIST, "ADDITEMS");
  case 'u': return extend_marked(m, PK_DICT, "SETITEMS");
  case '0': /* POP: the top item, or the innermost MARK when nothing is above it */
    if (m->n_marks && m->marks[m->n_marks - 1] == m->sp) {
      m->n_marks--;
      return true;
    }
    if (!need(m, 1, "POP"))
      return false;
    pop_to(m, m->sp - 1);
    return true;
  case '1': {
    size_t h = 0;
    if (!top_mark(m, &h))
      return false;
    pop_to(m, h);
    m->n_marks--;
    return true;
  }
  case '2': return need(m, 1, "DUP") && push(m, m->stack[m->sp - 1]);
  case 0x94: return memo_put(m, m->memo_count);
  case 'q': return take_le(m, 1, &n) && memo_put(m, n);
  case 'r': return take_le(m, 4, &n) && memo_put(m, n);
  case 'h': return take_le(m, 1, &n) && memo_get(m, n);
  case 'j': return take_le(m, 4, &n) && memo_get(m, n);
  case 0x95: /* FRAME: only a hint for buffered readers; its length must fit the file */
    if (!take_le(m, 8, &n))
      return false;
    if (n > m->len - m->pos && (m->truncated = true))
      return fail(m, "a frame of %llu bytes, but only %zu bytes are left", (unsigned long long)n,
                  m->len - m->pos);
    return true;
  case 0x80:
    if (!take_le(m, 1, &n))
      return false;
    if (n < 2 || n > 5)
      return fail(m, "pickle protocol %llu; hbm reads protocols 2 to 5", (unsigned long long)n);
    return true;
  default: *handled = false; return true;
  }
}

static bool refuse(machine_t *m, uint8_t op) {
  switch (op) {
  case 'c':
  case 0x93: return refuse_global(m, op);
  case 'R':
  case 'b':
  case 'i':
  case 'o':
  case 0x81:
  case 0x92:
    m->refused = true;
    return fail_opcode(m, op,
                       "calls Python code or restores an object: refused; hbm reads "
                       "only plain data and never runs anything from a pickle");
  case 'P':
  case 'Q':
  case 0x82:
  case 0x83:
  case 0x84:
    m->refused = true;
    return fail_opcode(m, op,
                       "refers to an object outside the pickle: refused; hbm reads "
                       "only plain data");
  case 'F':
  case 'I':
  case 'L':
  case 'S':
  case 'V':
  case 'g':
  case 'p':
    return fail_opcode(m, op, "is a protocol 0/1 text opcode; hbm reads binary protocols 2 to 5");
  default: return fail_opcode(m, op, "is not a pickle opcode");
  }
}

static void report_progress(machine_t *m) {
  if (m->opt->progress && m->pos >= m->next_progress) {
    if (m->thread)
      pk_thread_progress(m->thread, m->pos);
    else
      m->opt->progress(m->opt->progress_ctx, m->pos);
    m->next_progress = m->pos + (m->opt->progress_bytes ? m->opt->progress_bytes : (64u << 20));
  }
}

/* MARK, memo references, APPENDS into the open list below: the frames list of every event of a
 * snapshot. Run as one batch straight into the sink (nothing pushed), when every reference is
 * to a value or a completed container; -1 otherwise (the general path runs it). */
static int run_get_batch(machine_t *m) {
  const pk_ref_t *list = m->sp ? &m->stack[m->sp - 1] : NULL;
  if (!list || list->kind != PK_LIST || m->slots[list->n].closed)
    return -1;
  const uint8_t *p = m->data + m->pos, *end = m->data + m->len;
  memo_hit_t *hits = m->memo_hits;
  pk_ref_t *batch = m->batch;
  size_t n = 0;
  /* the last bytes of a file (no room for a LONG_BINGET) go the general way */
  const uint8_t *room = end - p >= 5 ? end - 4 : p;
  while (p < room && n < HBM_ARRAY_LEN(m->batch)) {
    uint64_t index;
    uint8_t op = *p;
    if (op == 'h') {
      index = p[1];
      p += 2;
    } else if (op == 'j') {
      index = le_bytes(p + 1, 4);
      p += 5;
    } else {
      break; /* the APPENDS, or something the general path runs (or reports) */
    }
    memo_hit_t *hit = &hits[index % HBM_ARRAY_LEN(m->memo_hits)];
    if (HBM_LIKELY(hit->index == index + 1 && hit->value.kind != UNSET_KIND)) {
      batch[n++] = hit->value;
      continue;
    }
    if (hit->index != index + 1) {
      if (!memo_stored(m, index) || !bit_get(&m->used, index) || index / 64 >= m->used.n_words)
        return -1;
      *hit = (memo_hit_t){index + 1, memo_rank(m, index), {.kind = UNSET_KIND}};
    }
    pk_ref_t *e = &m->memo[hit->at];
    if (is_container(e)) {
      if (!m->slots[e->n].closed)
        return -1;
      pk_ref_t done = m->slots[e->n].done;
      release(m, e);
      *e = done;
    }
    hit->value = *e; /* no container now: a value that stays until a PUT over it */
    batch[n++] = *e;
  }
  if (p >= end || *p != 'e' || n == 0)
    return -1;
  m->pos = (size_t)(p + 1 - m->data);
  if (!m->sink->add(m->sink->ctx, PK_LIST, &m->slots[list->n].state, m->batch, n)) {
    m->sink_failed = true;
    return 0;
  }
  m->used_until = m->pos;
  return 1;
}

/* The opcodes snapshots are made of (hundreds of millions in a gigabyte), without the general
 * dispatch: 1 run, 0 failed, -1 not run here (operands missing too: the general path says what
 * is wrong). */
static inline int run_common(machine_t *m, uint8_t op) {
  const uint8_t *p = m->data + m->pos;
  size_t left = m->len - m->pos, n;
  switch (op) {
  case 'h':
    if (!left)
      return -1;
    m->pos++;
    return memo_get(m, p[0]);
  case 'j':
    if (left < 4)
      return -1;
    m->pos += 4;
    return memo_get(m, le_bytes(p, 4));
  case 0x94: /* MEMOIZE of an entry never referred to again: only counted */
    if (!m->explicit_memo && m->sp && m->memo_count <= m->len + 256 &&
        !bit_get(&m->used, m->memo_count)) {
      m->memo_count++;
      return 1;
    }
    return memo_put(m, m->memo_count);
  case '(':
    if (left && (p[0] == 'h' || p[0] == 'j')) {
      int batch = run_get_batch(m);
      if (batch >= 0)
        return batch;
    }
    return push_mark(m);
  case 'u': return extend_marked(m, PK_DICT, "SETITEMS");
  case 'e': return extend_marked(m, PK_LIST, "APPENDS");
  case '}': return push_new(m, PK_DICT);
  case ']': return push_new(m, PK_LIST);
  case 'N': return push(m, (pk_ref_t){.kind = PK_NONE});
  case 'K':
    if (!left)
      return -1;
    m->pos++;
    return push_int(m, p[0]);
  case 'J':
    if (left < 4)
      return -1;
    m->pos += 4;
    return push_int(m, (int64_t)(int32_t)(uint32_t)le_bytes(p, 4));
  case 0x8c:
    if (!left || (n = p[0]) > left - 1)
      return -1;
    m->pos += 1 + n;
    return push(m, (pk_ref_t){.kind = PK_STR, .n = (uint32_t)n, .as.s = p + 1});
  case 0x8a:
    if (!left || p[0] > left - 1)
      return -1;
    if (p[0] && p[0] < 8 && left > 8) { /* addresses, times: 8 bytes read at once, cut to n */
      unsigned bits = 8u * p[0];
      uint64_t u = le_u64(p + 1) & (((uint64_t)1 << bits) - 1);
      if (p[p[0]] & 0x80)
        u |= ~(uint64_t)0 << bits; /* the sign of the top byte, extended */
      m->pos += 1 + (size_t)p[0];
      return push(m, (pk_ref_t){.kind = PK_INT, .as.u = u});
    }
    m->pos++;
    return push_long(m, p[0]);
  default: return -1;
  }
}

/* Runs to STOP; *root is the pickle's result. */
static bool run(machine_t *m, pk_ref_t *root) {
  while (m->pos < m->len) {
    /* the common opcodes, until one is not or the next progress report is due */
    size_t stop = m->next_progress < m->len ? m->next_progress : m->len;
    uint8_t op;
    int common;
    do {
      m->op_pos = m->pos;
      op = m->data[m->pos++];
      common = run_common(m, op);
    } while (common > 0 && m->pos < stop);
    if (common == 0)
      return false;
    if (common > 0) {
      if (m->pos >= m->next_progress)
        report_progress(m);
      continue;
    }
    if (op == '.') {
      if (!m->sp)
        return fail(m, "STOP with nothing on the stack");
      *root = m->stack[--m->sp];
      if (!complete(m, root))
        return false;
      pop_to(m, 0);
      return true;
    }
    bool handled;
    if (!run_data_opcode(m, op, &handled))
      return false;
    if (!handled && !run_structure_opcode(m, op, &handled))
      return false;
    if (!handled)
      return refuse(m, op);
    if (HBM_UNLIKELY(m->pos >= m->next_progress))
      report_progress(m);
  }
  m->op_pos = m->len;
  m->truncated = true;
  return fail(m, "the pickle ends without STOP (a truncated file?)");
}

/* ---- salvage: what a damaged pickle held up to the damage ---- */

static bool is_open_container(const machine_t *m, const pk_ref_t *r, pk_kind_t kind) {
  return r->kind == kind && !m->slots[r->n].closed;
}

/* A dict's items above its MARK must pair up: a trailing list item belongs to the open list
 * before it (Python appends a lone last item with APPEND, after the list). */
static bool fold_lone_items(machine_t *m, size_t from, bool pairs) {
  while (m->sp - from >= 2 && (!pairs || (m->sp - from) % 2) &&
         is_open_container(m, &m->stack[m->sp - 2], PK_LIST)) {
    pk_ref_t list = m->stack[m->sp - 2];
    m->slots[list.n].partial = true;
    if (!add_items(m, &list, &m->stack[m->sp - 1], 1))
      return false;
    m->sp--;
  }
  return true;
}

/* Puts the items above each MARK into the open container below it, innermost first, then
 * lone items into the lists before them; the bottom of the stack is the result. */
static bool close_what_is_open(machine_t *m, pk_ref_t *root) {
  while (m->n_marks) {
    size_t h = m->marks[--m->n_marks];
    if (h > m->sp)
      h = m->sp;
    const pk_ref_t *below = h ? &m->stack[h - 1] : NULL;
    bool dict = below && is_open_container(m, below, PK_DICT);
    bool list = below && is_open_container(m, below, PK_LIST);
    if (!fold_lone_items(m, h, dict))
      return false;
    if (dict && (m->sp - h) % 2)
      pop_to(m, m->sp - 1); /* a key without its value */
    if (dict || list) {
      pk_ref_t c = *below;
      m->slots[c.n].partial = true;
      if (!add_items(m, &c, m->stack + h, m->sp - h))
        return false;
      m->sp = h;
    } else {
      pop_to(m, h);
    }
  }
  if (!fold_lone_items(m, 0, false) || !m->sp)
    return false;
  pk_ref_t top = m->stack[0];
  m->stack[0] = (pk_ref_t){0};
  if (!complete(m, &top))
    return false;
  *root = top;
  pop_to(m, 0);
  return true;
}

/* ---- entry points ---- */

bool pk_looks_like_pickle(const uint8_t *data, size_t len) {
  return len >= 2 && data[0] == 0x80 && data[1] >= 2 && data[1] <= 5;
}

static void machine_free(machine_t *m) {
  pop_to(m, 0);
  for (size_t i = 0; m->memo && i < m->used.n_words; i++)
    for (uint64_t w = m->used.words[i]; w; w &= w - 1) {
      pk_ref_t *e = &m->memo[memo_rank(m, i * 64 + (uint64_t)__builtin_ctzll(w))];
      if (e->kind != UNSET_KIND)
        release(m, e);
    }
  free(m->stack);
  free(m->marks);
  free(m->slots);
  free(m->used.words);
  free(m->set.words);
  free(m->rank);
  free(m->memo);
}

hbm_status_t pk_stream(const uint8_t *data, size_t len, const char *name, const pk_sink_t *sink,
                       const pk_stream_options_t *options, pk_ref_t *root, pk_damage_t *damage) {
  pk_stream_options_t defaults = {0};
  const pk_stream_options_t *opt = options ? options : &defaults;
  machine_t m = {.data = data,
                 .len = len,
                 .pos = 2,
                 .op_pos = 0,
                 .name = name ? name : "pickle",
                 .sink = sink,
                 .opt = opt,
                 .free_slot = UINT32_MAX,
                 .next_progress = SIZE_MAX};
  if (opt->progress)
    m.next_progress = opt->progress_bytes ? opt->progress_bytes : (size_t)64 << 20;
  m.max_memory = opt->max_memory ? opt->max_memory
                 : len > (SIZE_MAX - PK_MEMORY_BASE) / PK_MEMORY_PER_BYTE
                     ? SIZE_MAX
                     : PK_MEMORY_BASE + PK_MEMORY_PER_BYTE * len;
  memset(root, 0, sizeof *root);
  if (damage)
    memset(damage, 0, sizeof *damage);
  if (!pk_looks_like_pickle(data, len))
    return hbm__error(HBM_ERR_PARSE,
                      "%s: byte 0: expected a pickle of protocol 2 to 5 (0x80 and the protocol)",
                      m.name);
  bool ok = scan(&m);
  pk_sink_t proxy;
  pk_thread_t *thread = NULL;
  if (ok && opt->sink_thread_min && len >= opt->sink_thread_min &&
      (!opt->sink_thread_if_idle || hbm__cpu_idle()) &&
      (thread = pk_thread_start(sink, m.name, opt, &proxy)))
    m.sink = &proxy, m.thread = thread;
  if (ok) {
    m.pos = 0; /* PROTO is run like any opcode: it checks the protocol */
    ok = run(&m, root);
  }
  hbm_status_t st = HBM_OK;
  if (!ok && opt->salvage && damage && !m.refused && !m.sink_failed) {
    damage->damaged = true;
    damage->truncated = m.truncated;
    damage->at = m.op_pos;
    snprintf(damage->why, sizeof damage->why, "%s", hbm_last_error());
    damage->used = m.used_until;
    hbm__error_clear();
    if (!close_what_is_open(&m, root))
      st = hbm_last_status() != HBM_OK
               ? hbm_last_status()
               : hbm__error(HBM_ERR_PARSE, "%s", damage->why); /* nothing at all was read */
  } else if (!ok) {
    st = hbm_last_status() != HBM_OK ? hbm_last_status() : HBM_ERR_PARSE;
  }
  machine_free(&m);
  if (thread && pk_thread_finish(thread, root) != HBM_OK) { /* the sink failed: that is all */
    st = hbm_last_status();
    memset(root, 0, sizeof *root);
    if (damage)
      memset(damage, 0, sizeof *damage);
  }
  return st;
}

/* ---- reading refs ---- */

bool pk_ref_is(const pk_ref_t *r, const char *text, size_t len) {
  return r->kind == PK_STR && r->n == len && !memcmp(r->as.s, text, len);
}
