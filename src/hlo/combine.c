/* combine.c — XLA's preallocated temp allocation: how the heap and the other temporary
 * allocations become one.
 *
 * XLA's BufferAssigner creates allocations in this order: one per buffer that needs its
 * own (entry parameters, constants, outputs, tuple-shaped temporaries), in the order it
 * visits buffers (largest first; ties: live-out first, then program order); then one per
 * colour for the heap simulator's result; then one per thread-local value. Then
 * CombineTempAllocations moves the temporary ones to the end with std::partition — which is
 * not stable, so their order is the one the libstdc++ algorithm leaves — and lays the
 * temporaries of each colour end to end, each starting at a multiple of the alignment.
 * The preallocated temp allocation is therefore the heap plus the tuple tables, in an order
 * that only this reproduction of the partition gets right (a 16-byte table either before a
 * heap, pushing it up by one alignment step, or on top of it). */
#include "hlo.h"

#include <stdlib.h>

typedef struct alloc_entry {
  uint32_t buffer; /* UINT32_MAX: the heap of `color` */
  int color;
  bool temp;
} alloc_entry_t;

static const hlo_buffer_t *order_buffers;

/* XLA's buffer order: size (largest first), live-out first, program order, index. */
static int xla_buffer_order(const void *pa, const void *pb) {
  uint32_t ia = *(const uint32_t *)pa, ib = *(const uint32_t *)pb;
  const hlo_buffer_t *a = &order_buffers[ia], *b = &order_buffers[ib];
  if (a->bytes != b->bytes)
    return a->bytes > b->bytes ? -1 : 1;
  bool la = (a->flags & HLO_V_OUTPUT) != 0, lb = (b->flags & HLO_V_OUTPUT) != 0;
  if (la != lb)
    return la ? -1 : 1;
  if (a->first_def != b->first_def)
    return a->first_def < b->first_def ? -1 : 1;
  return ia < ib ? -1 : ia > ib;
}

/* libstdc++'s std::partition over bidirectional iterators: keeps entries with temp ==
 * false in front, swapping from both ends. */
static void partition_like_libstdcxx(alloc_entry_t *a, size_t n) {
  size_t first = 0, last = n;
  for (;;) {
    for (;;) {
      if (first == last)
        return;
      if (!a[first].temp)
        first++;
      else
        break;
    }
    last--;
    for (;;) {
      if (first == last)
        return;
      if (a[last].temp)
        last--;
      else
        break;
    }
    alloc_entry_t t = a[first];
    a[first] = a[last];
    a[last] = t;
    first++;
  }
}

static bool makes_global_allocation(const hlo_buffer_t *b) {
  return b->bytes > 0 && ((b->indefinite && !(b->flags & HLO_V_THREAD)) || b->separate);
}

/* The allocations in XLA's creation order; *n set. NULL when memory ran out. */
static alloc_entry_t *creation_order(const hlo_assignment_t *as, size_t *n) {
  uint32_t nb = as->n_buffers;
  uint32_t *global = malloc(((size_t)nb + 1) * sizeof *global);
  alloc_entry_t *list = malloc(((size_t)nb + (size_t)as->n_colors + 1) * sizeof *list);
  if (!global || !list) {
    free(global);
    free(list);
    return NULL;
  }
  size_t ng = 0, k = 0;
  for (uint32_t i = 0; i < nb; i++)
    if (makes_global_allocation(&as->buffers[i]))
      global[ng++] = i;
  order_buffers = as->buffers;
  qsort(global, ng, sizeof *global, xla_buffer_order);
  for (size_t g = 0; g < ng; g++) {
    const hlo_buffer_t *b = &as->buffers[global[g]];
    list[k++] = (alloc_entry_t){global[g], b->color, b->separate != 0};
  }
  for (int c = 0; c < as->n_colors; c++) {
    bool any = false;
    for (uint32_t i = 0; i < nb && !any; i++) {
      const hlo_buffer_t *b = &as->buffers[i];
      any = b->color == c && !b->indefinite && !b->separate && b->end > b->start && b->bytes;
    }
    if (any)
      list[k++] = (alloc_entry_t){UINT32_MAX, c, true};
  }
  for (uint32_t i = 0; i < nb; i++)
    if (as->buffers[i].indefinite && (as->buffers[i].flags & HLO_V_THREAD) &&
        !(as->buffers[i].flags & (HLO_V_PARAM | HLO_V_OUTPUT | HLO_V_CONST)) &&
        as->buffers[i].bytes)
      list[k++] = (alloc_entry_t){i, as->buffers[i].color, false};
  free(global);
  *n = k;
  return list;
}

hbm_status_t hbm__hlo_combine_temps(hlo_assignment_t *as, uint64_t alignment) {
  size_t n;
  alloc_entry_t *list = creation_order(as, &n);
  if (!list)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory (planner)");
  partition_like_libstdcxx(list, n);
  uint64_t a = alignment ? alignment : 1;
  for (int c = 0; c < as->n_colors; c++) {
    uint64_t size = 0, heap_base = 0;
    for (size_t k = 0; k < n; k++) {
      if (!list[k].temp || list[k].color != c)
        continue;
      uint64_t base = (size + a - 1) / a * a;
      if (list[k].buffer == UINT32_MAX) {
        heap_base = base;
        size = base + as->heap_bytes[c];
      } else {
        as->buffers[list[k].buffer].offset = base;
        size = base + as->buffers[list[k].buffer].bytes;
      }
    }
    for (uint32_t i = 0; heap_base && i < as->n_buffers; i++) {
      hlo_buffer_t *b = &as->buffers[i];
      if (b->color == c && !b->indefinite && !b->separate)
        b->offset += heap_base;
    }
    as->heap_bytes[c] = size;
  }
  free(list);
  return HBM_OK;
}
