/* pickle.c — the restricted pickle reader of pickle.h. A pickle is a program for a small stack
 * machine; this runs only the opcodes that push plain data (numbers, strings, bytes, None,
 * booleans), build containers (lists, tuples, sets, dicts) and use the memo, and refuses
 * every opcode that would import a name, call it or restore an object's state. Those are
 * errors naming the opcode and its byte offset, so a hostile file is reported, never run.
 *
 * Every value lives in one arena owned by the document: memo references share values (a
 * snapshot refers to one frame list from thousands of events), so nothing is copied and
 * freeing is one walk over the arena's chunks. The machine is iterative (no recursion on
 * nesting) and every length is checked against the bytes left. */
#include "import/pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_BYTES ((size_t)2 << 30)
#define DEFAULT_MAX_OBJECTS ((size_t)64 << 20)
#define CHUNK_BYTES ((size_t)64 << 10)

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  max_align_t data[];
} chunk_t;

struct pk_doc {
  chunk_t *chunks;
  const pk_value_t *root;
};

typedef struct parser {
  const uint8_t *data;
  size_t len, pos, op_pos; /* op_pos: offset of the opcode being run */
  const char *name;
  pk_doc_t *doc;
  size_t objects, max_objects;
  pk_value_t **stack;
  size_t sp, stack_cap;
  size_t *marks; /* stack heights at each MARK */
  size_t n_marks, marks_cap;
  pk_value_t **memo; /* index → value (NULL: unset) */
  size_t memo_cap, memo_count;
} parser_t;

/* ---- arena ---- */

static void *arena_alloc(pk_doc_t *doc, size_t n) {
  n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
  chunk_t *c = doc->chunks;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > CHUNK_BYTES ? n : CHUNK_BYTES;
    c = malloc(sizeof *c + cap);
    if (!c)
      return NULL;
    c->used = 0;
    c->cap = cap;
    c->next = doc->chunks;
    doc->chunks = c;
  }
  void *p = (char *)c->data + c->used;
  c->used += n;
  return p;
}

void pk_free(pk_doc_t *doc) {
  if (!doc)
    return;
  for (chunk_t *c = doc->chunks, *next; c; c = next) {
    next = c->next;
    free(c);
  }
  free(doc);
}

const pk_value_t *pk_root(const pk_doc_t *doc) { return doc ? doc->root : NULL; }

/* ---- errors ---- */

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

static bool fail(parser_t *ps, const char *fmt, ...) HBM_PRINTF(2, 3);
static bool fail(parser_t *ps, const char *fmt, ...) {
  char why[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  hbm__error(HBM_ERR_PARSE, "%s: byte %zu: %s", ps->name, ps->op_pos, why);
  return false;
}

static bool fail_opcode(parser_t *ps, uint8_t op, const char *why) {
  const char *name = opcode_name(op);
  return fail(ps, "opcode %s (0x%02x) %s", name ? name : "unknown", op, why);
}

static bool out_of_memory(parser_t *ps) { return fail(ps, "out of host memory"); }

/* A printable copy of a name from the file, for messages. */
static void printable(const char *s, size_t n, char *out, size_t cap) {
  size_t k = 0;
  for (size_t i = 0; i < n && k + 4 < cap; i++)
    out[k++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
  if (n && k < n && k + 4 >= cap)
    out[k++] = '.', out[k++] = '.', out[k++] = '.';
  out[k] = '\0';
}

/* GLOBAL names its module and attribute on two text lines; STACK_GLOBAL takes two strings
 * from the stack. Either way the message says what the file tried to import. */
static bool refuse_global(parser_t *ps, uint8_t op) {
  char what[160] = "", a[72], b[72];
  if (op == 'c') {
    const uint8_t *p = ps->data + ps->pos, *end = ps->data + ps->len;
    const uint8_t *nl1 = memchr(p, '\n', (size_t)(end - p));
    const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(end - nl1 - 1)) : NULL;
    if (nl2) {
      printable((const char *)p, (size_t)(nl1 - p), a, sizeof a);
      printable((const char *)nl1 + 1, (size_t)(nl2 - nl1 - 1), b, sizeof b);
      snprintf(what, sizeof what, " ('%s.%s')", a, b);
    }
  } else if (ps->sp >= 2 && ps->stack[ps->sp - 2]->kind == PK_STR &&
             ps->stack[ps->sp - 1]->kind == PK_STR) {
    const pk_value_t *m = ps->stack[ps->sp - 2], *n = ps->stack[ps->sp - 1];
    printable(m->as.str.s, m->as.str.n, a, sizeof a);
    printable(n->as.str.s, n->as.str.n, b, sizeof b);
    snprintf(what, sizeof what, " ('%s.%s')", a, b);
  }
  char why[300];
  snprintf(why, sizeof why,
           "imports Python code%s: refused; hbm reads only plain data (dicts, lists, strings, "
           "numbers) and never runs anything from a pickle",
           what);
  return fail_opcode(ps, op, why);
}

/* ---- values and the stack ---- */

static pk_value_t *new_value(parser_t *ps, pk_kind_t kind) {
  if (ps->objects >= ps->max_objects) {
    fail(ps, "more than %zu values: refused as too large", ps->max_objects);
    return NULL;
  }
  pk_value_t *v = arena_alloc(ps->doc, sizeof *v);
  if (!v) {
    out_of_memory(ps);
    return NULL;
  }
  memset(v, 0, sizeof *v);
  v->kind = kind;
  ps->objects++;
  return v;
}

static bool push(parser_t *ps, pk_value_t *v) {
  if (!v)
    return false;
  if (ps->sp == ps->stack_cap) {
    pk_value_t **grown = hbm__grow_array(ps->stack, &ps->stack_cap, ps->sp + 1, sizeof *grown, 256);
    if (!grown)
      return out_of_memory(ps);
    ps->stack = grown;
  }
  ps->stack[ps->sp++] = v;
  return true;
}

/* The stack height at the innermost MARK, or false with an error. */
static bool top_mark(parser_t *ps, size_t *height) {
  if (!ps->n_marks)
    return fail(ps, "expected a MARK earlier on the stack, found none");
  *height = ps->marks[ps->n_marks - 1];
  if (*height > ps->sp)
    return fail(ps, "the stack lost items that a MARK covers");
  return true;
}

static bool need(parser_t *ps, size_t n, const char *what) {
  if (ps->sp < n || (ps->n_marks && ps->sp - n < ps->marks[ps->n_marks - 1]))
    return fail(ps, "expected %zu item%s on the stack for %s", n, n == 1 ? "" : "s", what);
  return true;
}

/* Appends items[0, n) to a container (arena arrays grow by doubling). */
static bool add_items(parser_t *ps, pk_value_t *c, pk_value_t *const *items, size_t n) {
  if (c->as.seq.n + n > c->as.seq.cap) {
    size_t cap = c->as.seq.cap ? c->as.seq.cap : 4;
    while (cap < c->as.seq.n + n)
      cap *= 2;
    if (cap > ps->max_objects * 2)
      return fail(ps, "a container of more than %zu items: refused as too large", ps->max_objects);
    pk_value_t **grown = arena_alloc(ps->doc, cap * sizeof *grown);
    if (!grown)
      return out_of_memory(ps);
    if (c->as.seq.n)
      memcpy(grown, c->as.seq.items, c->as.seq.n * sizeof *grown);
    c->as.seq.items = grown;
    c->as.seq.cap = cap;
  }
  if (n)
    memcpy(c->as.seq.items + c->as.seq.n, items, n * sizeof *items);
  c->as.seq.n += n;
  return true;
}

/* ---- reading operands ---- */

static bool take(parser_t *ps, size_t n, const uint8_t **out) {
  if (ps->len - ps->pos < n)
    return fail(ps, "expected %zu more byte%s, the file ends after %zu", n, n == 1 ? "" : "s",
                ps->len - ps->pos);
  *out = ps->data + ps->pos;
  ps->pos += n;
  return true;
}

static bool take_le(parser_t *ps, size_t n, uint64_t *out) {
  const uint8_t *p = NULL;
  if (!take(ps, n, &p))
    return false;
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;)
    v = v << 8 | p[i];
  *out = v;
  return true;
}

static bool push_int(parser_t *ps, int64_t i) {
  pk_value_t *v = new_value(ps, PK_INT);
  if (v)
    v->as.i = i;
  return push(ps, v);
}

/* LONG1 / LONG4: a little-endian two's complement integer of n bytes. */
static bool push_long(parser_t *ps, size_t n) {
  const uint8_t *p = NULL;
  if (!take(ps, n, &p))
    return false;
  pk_value_t *v = new_value(ps, PK_INT);
  if (!v)
    return false;
  bool negative = n && (p[n - 1] & 0x80);
  for (size_t i = 8; i < n; i++) /* bytes above 64 bits must only extend the sign */
    if (p[i] != (negative ? 0xff : 0x00))
      v->int_overflow = true;
  uint64_t u = negative ? ~(uint64_t)0 : 0;
  for (size_t i = n < 8 ? n : 8; i-- > 0;)
    u = u << 8 | p[i];
  if (n < 8 && n && negative)
    u |= ~(uint64_t)0 << (8 * n);
  if (n >= 8 && ((u >> 63) != 0) != negative)
    v->int_overflow = true;
  v->as.i = v->int_overflow ? 0 : (int64_t)u;
  return push(ps, v);
}

static bool push_text(parser_t *ps, pk_kind_t kind, size_t len_bytes) {
  uint64_t n;
  const uint8_t *p = NULL;
  if (!take_le(ps, len_bytes, &n))
    return false;
  if (n > ps->len - ps->pos)
    return fail(ps, "a string of %llu bytes, but only %zu bytes are left", (unsigned long long)n,
                ps->len - ps->pos);
  if (!take(ps, (size_t)n, &p))
    return false;
  pk_value_t *v = new_value(ps, kind);
  if (!v)
    return false;
  char *s = arena_alloc(ps->doc, (size_t)n + 1);
  if (!s)
    return out_of_memory(ps);
  if (n)
    memcpy(s, p, (size_t)n);
  s[n] = '\0';
  v->as.str.s = s;
  v->as.str.n = (size_t)n;
  return push(ps, v);
}

static bool push_float(parser_t *ps) {
  const uint8_t *p = NULL;
  if (!take(ps, 8, &p))
    return false;
  uint64_t bits = 0;
  for (int i = 0; i < 8; i++) /* big-endian */
    bits = bits << 8 | p[i];
  pk_value_t *v = new_value(ps, PK_FLOAT);
  if (v)
    memcpy(&v->as.f, &bits, sizeof v->as.f);
  return push(ps, v);
}

/* ---- memo ---- */

static bool memo_put(parser_t *ps, uint64_t index) {
  if (!ps->sp)
    return fail(ps, "nothing on the stack to memoize");
  /* An index far beyond what the file could fill is hostile; bound the memo by the input. */
  if (index > ps->len + 256)
    return fail(ps, "memo index %llu is beyond the %zu-byte input", (unsigned long long)index,
                ps->len);
  if (index >= ps->memo_cap) {
    size_t old_cap = ps->memo_cap;
    pk_value_t **grown =
        hbm__grow_array(ps->memo, &ps->memo_cap, (size_t)index + 1, sizeof *grown, 1024);
    if (!grown)
      return out_of_memory(ps);
    memset(grown + old_cap, 0, (ps->memo_cap - old_cap) * sizeof *grown);
    ps->memo = grown;
  }
  if (!ps->memo[index])
    ps->memo_count++;
  ps->memo[index] = ps->stack[ps->sp - 1];
  return true;
}

static bool memo_get(parser_t *ps, uint64_t index) {
  if (index >= ps->memo_cap || !ps->memo[index])
    return fail(ps, "memo entry %llu was never stored", (unsigned long long)index);
  return push(ps, ps->memo[index]);
}

/* ---- containers ---- */

/* Items above the innermost MARK become a new container of `kind`. */
static bool push_marked(parser_t *ps, pk_kind_t kind) {
  size_t h = 0;
  if (!top_mark(ps, &h))
    return false;
  pk_value_t *c = new_value(ps, kind);
  if (!c)
    return false;
  size_t n = ps->sp - h;
  if (kind == PK_DICT && n % 2)
    return fail(ps, "DICT needs key/value pairs, found %zu items", n);
  if (!add_items(ps, c, ps->stack + h, n))
    return false;
  ps->sp = h;
  ps->n_marks--;
  return push(ps, c);
}

static bool push_tuple_of(parser_t *ps, size_t n) {
  if (!need(ps, n, "a tuple"))
    return false;
  pk_value_t *t = new_value(ps, PK_TUPLE);
  if (!t || !add_items(ps, t, ps->stack + ps->sp - n, n))
    return false;
  ps->sp -= n;
  return push(ps, t);
}

/* APPEND/APPENDS/SETITEM/SETITEMS/ADDITEMS: items above `from` go into the container below. */
static bool extend(parser_t *ps, size_t from, pk_kind_t kind, const char *what) {
  if (from == 0 || from > ps->sp)
    return fail(ps, "%s without a container below its items", what);
  pk_value_t *c = ps->stack[from - 1];
  if (c->kind != kind)
    return fail(ps, "%s on a value that is not a %s", what, kind == PK_DICT ? "dict" : "list");
  size_t n = ps->sp - from;
  if (kind == PK_DICT && n % 2)
    return fail(ps, "%s needs key/value pairs, found %zu items", what, n);
  if (!add_items(ps, c, ps->stack + from, n))
    return false;
  ps->sp = from;
  return true;
}

static bool extend_marked(parser_t *ps, pk_kind_t kind, const char *what) {
  size_t h = 0;
  if (!top_mark(ps, &h) || !extend(ps, h, kind, what))
    return false;
  ps->n_marks--;
  return true;
}

static bool push_mark(parser_t *ps) {
  if (ps->n_marks == ps->marks_cap) {
    size_t *grown = hbm__grow_array(ps->marks, &ps->marks_cap, ps->n_marks + 1, sizeof *grown, 64);
    if (!grown)
      return out_of_memory(ps);
    ps->marks = grown;
  }
  ps->marks[ps->n_marks++] = ps->sp;
  return true;
}

/* ---- the machine ---- */

/* Opcodes that only build data. Returns false on error; *stop at STOP. */
static bool run_data_opcode(parser_t *ps, uint8_t op, bool *handled) {
  uint64_t n;
  *handled = true;
  switch (op) {
  case 'N': return push(ps, new_value(ps, PK_NONE));
  case 0x88:
  case 0x89: {
    pk_value_t *v = new_value(ps, PK_BOOL);
    if (v)
      v->as.b = op == 0x88;
    return push(ps, v);
  }
  case 'K': return take_le(ps, 1, &n) && push_int(ps, (int64_t)n);
  case 'M': return take_le(ps, 2, &n) && push_int(ps, (int64_t)n);
  case 'J': return take_le(ps, 4, &n) && push_int(ps, (int64_t)(int32_t)(uint32_t)n);
  case 0x8a: return take_le(ps, 1, &n) && push_long(ps, (size_t)n);
  case 0x8b:
    if (!take_le(ps, 4, &n))
      return false;
    if ((int32_t)(uint32_t)n < 0)
      return fail(ps, "LONG4 with a negative length");
    if (n > ps->len - ps->pos)
      return fail(ps, "an integer of %llu bytes, but only %zu bytes are left",
                  (unsigned long long)n, ps->len - ps->pos);
    return push_long(ps, (size_t)n);
  case 'G': return push_float(ps);
  case 0x8c: return push_text(ps, PK_STR, 1);
  case 'X': return push_text(ps, PK_STR, 4);
  case 0x8d: return push_text(ps, PK_STR, 8);
  case 'U': return push_text(ps, PK_STR, 1);
  case 'T': return push_text(ps, PK_STR, 4);
  case 'C': return push_text(ps, PK_BYTES, 1);
  case 'B': return push_text(ps, PK_BYTES, 4);
  case 0x8e:
  case 0x96: return push_text(ps, PK_BYTES, 8);
  case '}': return push(ps, new_value(ps, PK_DICT));
  case ']':
  case 0x8f: return push(ps, new_value(ps, PK_LIST));
  case ')': return push(ps, new_value(ps, PK_TUPLE));
  case 0x85: return push_tuple_of(ps, 1);
  case 0x86: return push_tuple_of(ps, 2);
  case 0x87: return push_tuple_of(ps, 3);
  default: *handled = false; return true;
  }
}

static bool run_structure_opcode(parser_t *ps, uint8_t op, bool *handled) {
  uint64_t n;
  *handled = true;
  switch (op) {
  case '(': return push_mark(ps);
  case 't': return push_marked(ps, PK_TUPLE);
  case 'l':
  case 0x91: return push_marked(ps, PK_LIST);
  case 'd': return push_marked(ps, PK_DICT);
  /* the container below the items must be above the innermost MARK too, as in Python */
  case 'a': return need(ps, 2, "APPEND") && extend(ps, ps->sp - 1, PK_LIST, "APPEND");
  case 's': return need(ps, 3, "SETITEM") && extend(ps, ps->sp - 2, PK_DICT, "SETITEM");
  case 'e': return extend_marked(ps, PK_LIST, "APPENDS");
  case 0x90: return extend_marked(ps, PK_LIST, "ADDITEMS");
  case 'u': return extend_marked(ps, PK_DICT, "SETITEMS");
  case '0': /* POP: the top item, or the innermost MARK when nothing is above it */
    if (ps->n_marks && ps->marks[ps->n_marks - 1] == ps->sp) {
      ps->n_marks--;
      return true;
    }
    if (!need(ps, 1, "POP"))
      return false;
    ps->sp--;
    return true;
  case '1': {
    size_t h = 0;
    if (!top_mark(ps, &h))
      return false;
    ps->sp = h;
    ps->n_marks--;
    return true;
  }
  case '2': return need(ps, 1, "DUP") && push(ps, ps->stack[ps->sp - 1]);
  case 0x94: return memo_put(ps, ps->memo_count);
  case 'q': return take_le(ps, 1, &n) && memo_put(ps, n);
  case 'r': return take_le(ps, 4, &n) && memo_put(ps, n);
  case 'h': return take_le(ps, 1, &n) && memo_get(ps, n);
  case 'j': return take_le(ps, 4, &n) && memo_get(ps, n);
  case 0x95: /* FRAME: only a hint for buffered readers; its length must fit the file */
    if (!take_le(ps, 8, &n))
      return false;
    if (n > ps->len - ps->pos)
      return fail(ps, "a frame of %llu bytes, but only %zu bytes are left", (unsigned long long)n,
                  ps->len - ps->pos);
    return true;
  case 0x80:
    if (!take_le(ps, 1, &n))
      return false;
    if (n < 2 || n > 5)
      return fail(ps, "pickle protocol %llu; hbm reads protocols 2 to 5", (unsigned long long)n);
    return true;
  default: *handled = false; return true;
  }
}

static bool refuse(parser_t *ps, uint8_t op) {
  switch (op) {
  case 'c':
  case 0x93: return refuse_global(ps, op);
  case 'R':
  case 'b':
  case 'i':
  case 'o':
  case 0x81:
  case 0x92:
    return fail_opcode(ps, op,
                       "calls Python code or restores an object: refused; hbm reads "
                       "only plain data and never runs anything from a pickle");
  case 'P':
  case 'Q':
  case 0x82:
  case 0x83:
  case 0x84:
    return fail_opcode(ps, op,
                       "refers to an object outside the pickle: refused; hbm reads "
                       "only plain data");
  case 0x97:
  case 0x98: return fail_opcode(ps, op, "needs out-of-band buffers, which hbm does not take");
  case 'F':
  case 'I':
  case 'L':
  case 'S':
  case 'V':
  case 'g':
  case 'p':
    return fail_opcode(ps, op, "is a protocol 0/1 text opcode; hbm reads binary protocols 2 to 5");
  default: return fail_opcode(ps, op, "is not a pickle opcode");
  }
}

static bool run(parser_t *ps) {
  while (ps->pos < ps->len) {
    ps->op_pos = ps->pos;
    uint8_t op = ps->data[ps->pos++];
    if (op == '.') {
      if (!ps->sp)
        return fail(ps, "STOP with nothing on the stack");
      ps->doc->root = ps->stack[ps->sp - 1];
      return true;
    }
    bool handled;
    if (!run_data_opcode(ps, op, &handled))
      return false;
    if (!handled && !run_structure_opcode(ps, op, &handled))
      return false;
    if (!handled)
      return refuse(ps, op);
  }
  ps->op_pos = ps->len;
  return fail(ps, "the pickle ends without STOP (a truncated file?)");
}

bool pk_looks_like_pickle(const uint8_t *data, size_t len) {
  return len >= 2 && data[0] == 0x80 && data[1] >= 2 && data[1] <= 5;
}

pk_doc_t *pk_parse(const uint8_t *data, size_t len, const char *name, const pk_limits_t *limits) {
  parser_t ps = {.data = data, .len = len, .name = name ? name : "pickle"};
  size_t max_bytes = limits && limits->max_bytes ? limits->max_bytes : DEFAULT_MAX_BYTES;
  ps.max_objects = limits && limits->max_objects ? limits->max_objects : DEFAULT_MAX_OBJECTS;
  if (len > max_bytes) {
    hbm__error(HBM_ERR_PARSE, "%s: %zu bytes, more than the %zu this reader takes", ps.name, len,
               max_bytes);
    return NULL;
  }
  if (!pk_looks_like_pickle(data, len)) {
    hbm__error(HBM_ERR_PARSE,
               "%s: byte 0: expected a pickle of protocol 2 to 5 (0x80 and the protocol)", ps.name);
    return NULL;
  }
  ps.doc = calloc(1, sizeof *ps.doc);
  if (!ps.doc) {
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", ps.name);
    return NULL;
  }
  /* the stack exists from the start, so "the items above a MARK" is never NULL + 0 */
  ps.stack_cap = 256;
  if (!(ps.stack = malloc(ps.stack_cap * sizeof *ps.stack))) {
    pk_free(ps.doc);
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", ps.name);
    return NULL;
  }
  bool ok = run(&ps);
  free(ps.stack);
  free(ps.marks);
  free(ps.memo);
  if (!ok) {
    pk_free(ps.doc);
    return NULL;
  }
  return ps.doc;
}

/* ---- readers ---- */

const pk_value_t *pk_get(const pk_value_t *dict, const char *key) {
  if (!dict || dict->kind != PK_DICT)
    return NULL;
  size_t n = strlen(key);
  for (size_t i = dict->as.seq.n; i >= 2; i -= 2) {
    const pk_value_t *k = dict->as.seq.items[i - 2];
    if (k->kind == PK_STR && k->as.str.n == n && !memcmp(k->as.str.s, key, n))
      return dict->as.seq.items[i - 1];
  }
  return NULL;
}

bool pk_int(const pk_value_t *v, int64_t *out) {
  if (!v || (v->kind != PK_INT && v->kind != PK_BOOL) || v->int_overflow)
    return false;
  *out = v->kind == PK_BOOL ? (int64_t)v->as.b : v->as.i;
  return true;
}

const char *pk_str(const pk_value_t *v) { return v && v->kind == PK_STR ? v->as.str.s : NULL; }

pk_value_t *const *pk_items(const pk_value_t *v, size_t *n) {
  if (!v || (v->kind != PK_LIST && v->kind != PK_TUPLE)) {
    *n = 0;
    return NULL;
  }
  *n = v->as.seq.n;
  return v->as.seq.items;
}
