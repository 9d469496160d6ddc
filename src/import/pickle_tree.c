/* pickle_tree.c — pk_parse: a pickle as a whole tree of pk_value_t (pickle.h), for small
 * pickles and the tests. It is a sink of the streaming reader (pickle.c): containers become
 * values in one arena owned by the document, completed ones are shared by every memo
 * reference to them, and freeing is one walk over the arena's chunks. Every value built is
 * counted against a budget in bytes that scales with the input (memo references and DUP too),
 * so a small hostile file cannot make it build gigabytes. */
#include "import/pickle.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_BYTES ((size_t)2 << 30)
#define TREE_BYTES_PER_BYTE 64
#define TREE_BASE_BYTES ((size_t)64 << 20)
#define CHUNK_BYTES ((size_t)64 << 10)

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  max_align_t data[];
} chunk_t;

struct pk_doc {
  chunk_t *chunks;
  const pk_value_t *root;
  size_t bytes, max_bytes; /* arena bytes handed out, and the budget */
  const char *name;
};

static void *arena_alloc(pk_doc_t *doc, size_t n) {
  n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
  if (doc->bytes + n > doc->max_bytes) {
    hbm__error(HBM_ERR_PARSE,
               "%s: the pickle's values take more than %zu bytes of memory: refused as too large",
               doc->name, doc->max_bytes);
    return NULL;
  }
  chunk_t *c = doc->chunks;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > CHUNK_BYTES ? n : CHUNK_BYTES;
    c = malloc(sizeof *c + cap);
    if (!c) {
      hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", doc->name);
      return NULL;
    }
    c->used = 0;
    c->cap = cap;
    c->next = doc->chunks;
    doc->chunks = c;
  }
  void *p = (char *)c->data + c->used;
  c->used += n;
  doc->bytes += n;
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

/* ---- the sink ---- */

static pk_value_t *new_value(pk_doc_t *doc, pk_kind_t kind) {
  pk_value_t *v = arena_alloc(doc, sizeof *v);
  if (v) {
    memset(v, 0, sizeof *v);
    v->kind = kind;
  }
  return v;
}

/* The tree value of a ref (a completed container is already one). */
static pk_value_t *value_of(pk_doc_t *doc, const pk_ref_t *r) {
  if (r->kind == PK_OBJ)
    return (pk_value_t *)(uintptr_t)r->as.obj;
  pk_value_t *v = new_value(doc, (pk_kind_t)r->kind);
  if (!v)
    return NULL;
  switch (r->kind) {
  case PK_BOOL: v->as.b = r->as.b; break;
  case PK_INT:
    v->int_overflow = (r->flags & (PK_HUGE | PK_UNSIGNED)) != 0;
    v->as.i = v->int_overflow ? 0 : r->as.i;
    break;
  case PK_FLOAT: v->as.f = r->as.f; break;
  case PK_STR:
  case PK_BYTES: {
    char *s = arena_alloc(doc, (size_t)r->n + 1);
    if (!s)
      return NULL;
    if (r->n)
      memcpy(s, r->as.s, r->n);
    s[r->n] = '\0';
    v->as.str.s = s;
    v->as.str.n = r->n;
    break;
  }
  default: break;
  }
  return v;
}

static bool tree_open(void *ctx, pk_kind_t kind, uint64_t *state) {
  pk_value_t *c = new_value(ctx, kind);
  *state = (uint64_t)(uintptr_t)c;
  return c != NULL;
}

/* Appends items to a container (arena arrays grow by doubling). */
static bool tree_add(void *ctx, pk_kind_t kind, uint64_t *state, const pk_ref_t *items, size_t n) {
  pk_doc_t *doc = ctx;
  pk_value_t *c = (pk_value_t *)(uintptr_t)*state;
  if (c->as.seq.n + n > c->as.seq.cap) {
    size_t cap = c->as.seq.cap ? c->as.seq.cap : 4;
    while (cap < c->as.seq.n + n)
      cap *= 2;
    pk_value_t **grown = arena_alloc(doc, cap * sizeof *grown);
    if (!grown)
      return false;
    if (c->as.seq.n)
      memcpy(grown, c->as.seq.items, c->as.seq.n * sizeof *grown);
    c->as.seq.items = grown;
    c->as.seq.cap = cap;
  }
  for (size_t i = 0; i < n; i++)
    if (!(c->as.seq.items[c->as.seq.n++] = value_of(doc, &items[i]))) {
      c->as.seq.n--;
      return false;
    }
  return true;
}

static bool tree_close(void *ctx, pk_kind_t kind, uint64_t state, unsigned flags, pk_ref_t *out) {
  *out = (pk_ref_t){.kind = PK_OBJ, .as.obj = state};
  return true;
}

static void tree_discard(void *ctx, pk_kind_t kind, uint64_t state) {} /* the arena frees it */

pk_doc_t *pk_parse(const uint8_t *data, size_t len, const char *name, const pk_limits_t *limits) {
  name = name ? name : "pickle";
  size_t max_bytes = limits && limits->max_bytes ? limits->max_bytes : DEFAULT_MAX_BYTES;
  if (len > max_bytes) {
    hbm__error(HBM_ERR_PARSE, "%s: %zu bytes, more than the %zu this reader takes", name, len,
               max_bytes);
    return NULL;
  }
  pk_doc_t *doc = calloc(1, sizeof *doc);
  if (!doc) {
    hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory", name);
    return NULL;
  }
  doc->name = name;
  doc->max_bytes = limits && limits->max_memory ? limits->max_memory
                                                : TREE_BASE_BYTES + TREE_BYTES_PER_BYTE * len;
  pk_sink_t sink = {doc, tree_open, tree_add, tree_close, tree_discard};
  pk_ref_t root;
  if (pk_stream(data, len, name, &sink, NULL, &root, NULL) != HBM_OK ||
      !(doc->root = value_of(doc, &root))) {
    pk_free(doc);
    return NULL;
  }
  return doc;
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
