/* tags.c — what a buffer is (op, shape, category, group, source), so that profiles and OOM
 * texts can say more than an address and a size. A caller tags one allocation with
 * hbm_alloc_tagged, or a whole stretch of its own thread's allocations with an annotation
 * scope (hbm_annotate_push/pop, like a framework's named scope); explicit tags win field by
 * field over the innermost scope, which inherits from the scopes around it. Scope strings
 * are copied, so callers may pass temporaries. */
#include "alloc/alloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct scope {
  hbm_tag_t tag;  /* resolved: own fields, else the enclosing scope's */
  char *owned[4]; /* the copies this scope made (op, shape, group, source) */
} scope_t;

static _Thread_local scope_t *scopes;
static _Thread_local size_t capacity;
_Thread_local size_t hbm__annotation_depth __attribute__((tls_model("initial-exec")));
#define depth hbm__annotation_depth

static char *copy_field(const char *s, bool *failed) {
  if (!s)
    return NULL;
  char *copy = strdup(s);
  if (!copy)
    *failed = true;
  return copy;
}

hbm_status_t hbm_annotate_push(const hbm_tag_t *tag) {
  if (!tag)
    return hbm__error(HBM_ERR_INVALID, "hbm_annotate_push: NULL tag");
  if ((unsigned)tag->category >= HBM_CAT_COUNT)
    return hbm__error(HBM_ERR_INVALID,
                      "hbm_annotate_push: category %d is not one of "
                      "hbm_category_t",
                      (int)tag->category);
  if (depth == capacity) {
    scope_t *grown = hbm__grow_array(scopes, &capacity, depth + 1, sizeof *grown, 8);
    if (!grown)
      return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for an annotation scope");
    scopes = grown;
  }
  scope_t s;
  memset(&s, 0, sizeof s);
  bool failed = false;
  s.owned[0] = copy_field(tag->op, &failed);
  s.owned[1] = copy_field(tag->shape, &failed);
  s.owned[2] = copy_field(tag->group, &failed);
  s.owned[3] = copy_field(tag->source, &failed);
  if (failed) {
    for (int i = 0; i < 4; i++)
      free(s.owned[i]);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for an annotation scope");
  }
  const hbm_tag_t *outer = depth ? &scopes[depth - 1].tag : NULL;
  s.tag.op = s.owned[0] ? s.owned[0] : outer ? outer->op : NULL;
  s.tag.shape = s.owned[1] ? s.owned[1] : outer ? outer->shape : NULL;
  s.tag.group = s.owned[2] ? s.owned[2] : outer ? outer->group : NULL;
  s.tag.source = s.owned[3] ? s.owned[3] : outer ? outer->source : NULL;
  s.tag.category = tag->category != HBM_CAT_UNKNOWN ? tag->category
                   : outer                          ? outer->category
                                                    : HBM_CAT_UNKNOWN;
  scopes[depth++] = s;
  return HBM_OK;
}

void hbm_annotate_pop(void) {
  if (depth == 0)
    return;
  scope_t *s = &scopes[--depth];
  for (int i = 0; i < 4; i++)
    free(s->owned[i]);
  if (depth == 0) { /* a thread that balanced its scopes leaves nothing behind */
    free(scopes);
    scopes = NULL;
    capacity = 0;
  }
}

bool hbm__tag_resolve(const hbm_tag_t *explicit_tag, hbm_tag_t *out) {
  const hbm_tag_t *scope = depth ? &scopes[depth - 1].tag : NULL;
  if (!explicit_tag && !scope)
    return false;
  static const hbm_tag_t none = {0};
  const hbm_tag_t *e = explicit_tag ? explicit_tag : &none;
  const hbm_tag_t *s = scope ? scope : &none;
  out->op = e->op ? e->op : s->op;
  out->shape = e->shape ? e->shape : s->shape;
  out->group = e->group ? e->group : s->group;
  out->source = e->source ? e->source : s->source;
  out->category = e->category != HBM_CAT_UNKNOWN ? e->category : s->category;
  return out->op || out->shape || out->group || out->source || out->category != HBM_CAT_UNKNOWN;
}

void *hbm_alloc_tagged(hbm_device_t *dev, size_t size, size_t alignment, const hbm_tag_t *tag) {
  if (tag && (unsigned)tag->category >= HBM_CAT_COUNT) {
    hbm__error(HBM_ERR_INVALID, "hbm_alloc_tagged: category %d is not one of hbm_category_t",
               (int)tag->category);
    return NULL;
  }
  return hbm__alloc(dev, size, alignment, NULL, tag);
}
