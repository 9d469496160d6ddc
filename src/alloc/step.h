/* step.h — mode learn (HBM_PLAN=step), internal to src/alloc. A training program runs the same
 * step thousands of times, with the same requests in the same order; this mode finds that
 * step in the stream of allocations and frees (step_detect.c), solves the placement of one
 * step offline, every lifetime known (step_solve.c), and serves later steps from the plan
 * (step_serve.c, the strategy): the k-th allocation of the step gets its precomputed offset
 * after comparing its size, a free is a look-up of its address. What does not match goes to
 * the memory underneath, the tight expandable strategy (bfc's placement, physical memory
 * mapped where blocks are). */
#ifndef HBM_ALLOC_STEP_H
#define HBM_ALLOC_STEP_H

#include "alloc/alloc.h"

#define HBM__STEP_NONE UINT32_MAX

/* ---- step_detect.c: the operations seen while learning, and the step found in them ---- */

typedef struct hbm__step_history {
  uint64_t *size;     /* per operation: bytes allocated; 0 for a free */
  uint64_t *addr;     /* allocations: the address given */
  uint64_t *reserved; /* what the memory underneath held after the operation */
  uint32_t *pair;     /* allocation: the free of it (NONE while live); free: its allocation
                         (NONE: allocated before the history began) */
  uint32_t n, cap;
  hbm_u64map_t live; /* address → allocation, for the blocks allocated in the history */
  uint32_t *table;   /* hash of the last W operations → the latest operation that ended them */
  uint32_t table_mask;
  uint32_t *gram_prev; /* per operation: the previous one whose last W had the same hash */
  uint64_t gram;       /* the hash of the last W operations */
  uint32_t period;     /* the period being followed, in operations (0: none) */
  uint32_t matched;    /* operations in a row equal to the one a period before */
  uint32_t tried;      /* `matched` when a plan of this period was last tried (0: never) */
  uint32_t tries;      /* plans tried and not made since learning began */
  /* bytes live as the history saw them, and their range since it began: a step worth a plan
   * moves a good part of it (a loop inside the step, an optimizer's update of one tensor, moves
   * little, and planning it would blind the search for the whole step) */
  int64_t bytes, bytes_min, bytes_max;
  uint32_t marks[3]; /* the operations where the program's last steps began
                        (hbm_profiler_step_begin), oldest first; NONE: none */
} hbm__step_history_t;

/* What the detector found: operations [boundary - period, boundary) were the first step seen
 * and [boundary, n) repeat it so far. */
typedef struct hbm__step_found {
  uint32_t period;
  uint32_t boundary;
} hbm__step_found_t;

void hbm__step_history_clear(hbm__step_history_t *h);
void hbm__step_history_free(hbm__step_history_t *h);
/* Appends an allocation / a free; false when host memory ran out (learning then stops and
 * starts again: the allocation itself is not affected). */
bool hbm__step_history_alloc(hbm__step_history_t *h, uint64_t addr, uint64_t size,
                             uint64_t reserved);
bool hbm__step_history_free_op(hbm__step_history_t *h, uint64_t addr, uint64_t bytes,
                               uint64_t reserved);
/* The program said a step begins before the last operation (hbm_profiler_step_begin). */
void hbm__step_history_mark(hbm__step_history_t *h);
/* After an operation: true when a step is confirmed and worth a try now. */
bool hbm__step_detect(hbm__step_history_t *h, hbm__step_found_t *out);
/* The plan was not made for the period found: try it again a period later. */
void hbm__step_detect_defer(hbm__step_history_t *h);

/* One allocation of the step, as the solver sees it. Time is counted in allocations of the
 * step: the item is live over [start, end), end in (start, start + n] (past n: into the next
 * step, which repeats from 0). */
typedef struct hbm__step_item {
  uint64_t size;  /* requested bytes: a later request matches it when equal */
  uint64_t bytes; /* rounded to 256 */
  uint32_t start, end;
  bool planned;    /* false: left to the memory underneath (its lifetime is not known) */
  bool live_now;   /* the block of the step before is live now, at `addr` */
  bool fixed;      /* the solver keeps it at `offset` (step_plan.c: the first planned step's
                      blocks live past its end, at their steady offsets) */
  uint64_t addr;   /* the block live now (live_now) */
  uint64_t offset; /* in the plan's span (the solver's answer) */
} hbm__step_item_t;

/* The step ending at the history's last operation: one item per allocation in it, in order
 * (malloc'd). Lifetimes come from the step itself, or for blocks still live, from the one
 * allocated a period earlier. */
hbm_status_t hbm__step_template(const hbm__step_history_t *h, uint32_t period,
                                hbm__step_item_t **items, uint32_t *n_items);

/* ---- step_solve.c: placement of one step ---- */

/* Memory the plan must leave alone: a live block, until the allocation `until` of the first
 * step planned (UINT32_MAX: the whole step, its end not known). */
typedef struct hbm__step_obstacle {
  uint64_t offset, bytes;
  uint32_t until;
} hbm__step_obstacle_t;

/* Places the planned items of a step (fixed ones where they are) around the obstacles, in
 * [0, limit), so that items live at the same time never overlap, the highest end as low as
 * the heuristics and the search find; *heap gets that end (of the items it placed: fixed ones
 * stay where they are). `first`: the first planned step's placement, where an item's height
 * also counts the survivors (obstacles with an end) lying above it while it lives, since they
 * are mapped meanwhile. HBM_ERR_NO_MEMORY when it does not fit under limit. */
hbm_status_t hbm__step_solve(hbm__step_item_t *items, uint32_t n,
                             const hbm__step_obstacle_t *obstacles, uint32_t n_obstacles,
                             uint64_t limit, bool first, uint64_t *heap);
/* The most bytes live at once over the step (planned items): the bound no plan beats. */
uint64_t hbm__step_live_bound(const hbm__step_item_t *items, uint32_t n);

/* ---- step_plan.c: the places of a step in the range of the memory underneath ---- */

#define HBM__STEP_NO_OFFSET UINT64_MAX

typedef struct hbm__step_range {
  uint64_t lo, hi;
} hbm__step_range_t;

typedef struct hbm__step_places {
  uint64_t *steady;             /* per item: its offset from the second planned step on */
  uint64_t *first;              /* per item: its offset in the first planned step */
  hbm__step_range_t *stretches; /* what the steady placement uses, merged, in order */
  size_t n_stretches;
  hbm__step_range_t *held; /* what either uses */
  size_t n_held;
  uint64_t span;         /* the end of the highest of either */
  uint64_t steady_bytes; /* the stretches' sum */
  uint64_t first_floor;  /* the least the first planned step can map (step_floor.c) */
  double solve_ms;
} hbm__step_places_t;

/* Both placements of the step (offsets from base, the range of mem; HBM__STEP_NO_OFFSET for
 * items not planned): items whose block live now the walk of mem does not find are not
 * planned. HBM_ERR_NO_MEMORY when a placement does not fit under limit. */
hbm_status_t hbm__step_place(hbm__strategy_t *mem, uint64_t base, hbm__step_item_t *items,
                             uint32_t n, uint64_t limit, hbm__step_places_t *out);
void hbm__step_places_free(hbm__step_places_t *p);

/* ---- step_floor.c: what the first planned step cannot do without ---- */

/* A lower bound on the memory (whole granules of `gran` bytes) any placement of the first
 * planned step maps at its worst moment: the line instance of step_plan.c (fixed items at
 * their offsets) around the obstacles where they lie. 0 when host memory ran out. */
uint64_t hbm__step_first_floor(const hbm__step_item_t *line, uint32_t n,
                               const hbm__step_obstacle_t *obstacles, size_t n_obstacles,
                               uint64_t gran);

/* ---- step_serve.c: the strategy ---- */

typedef struct hbm__step hbm__step_t;

/* The front's hooks, under the device's lock. hbm__step_alloc: true when the plan served the
 * request (*addr); false: take the general path (ops->alloc). hbm__step_free: true when addr
 * was a block of a plan (*size its requested bytes); false: the general path. */
bool hbm__step_alloc(hbm__step_t *st, uint64_t size, uint64_t *addr);
bool hbm__step_free(hbm__step_t *st, uint64_t addr, uint64_t *size);
/* A plan's live block at addr (hbm_block_size); false when addr is none. */
bool hbm__step_find(hbm__step_t *st, uint64_t addr, hbm__record_t *out);
/* Copies of the live blocks of the plans (at most cap); how many. */
size_t hbm__step_records(hbm__step_t *st, hbm__record_t *out, size_t cap);
size_t hbm__step_live_count(hbm__step_t *st);

/* What mode learn did (hbm replay, the report). */
typedef struct hbm__step_stats {
  uint64_t ops;               /* allocations and frees seen */
  uint64_t first_step_end;    /* the operation where the second step began (0: no step found) */
  uint64_t period;            /* operations per step of the last plan (0: none) */
  uint64_t planned_ops;       /* operations served from a plan (allocations and frees) */
  uint64_t fallback_ops;      /* operations after the first step that the plan did not serve */
  uint64_t plans;             /* plans made */
  uint64_t retired;           /* plans given up (the step changed, or memory was short) */
  uint64_t heap_bytes;        /* the last plan's span */
  uint64_t bound_bytes;       /* the most bytes its step had live at once */
  uint64_t steady_reserved;   /* most reserved at any point after the first step */
  uint64_t first_planned_end; /* the operation where the first plan's first step ended (0: not
                                 yet): the survivors of the step before are gone */
  uint64_t first_reserved;    /* most reserved from first_step_end to first_planned_end */
  uint64_t later_reserved;    /* most reserved from first_planned_end on */
  uint64_t first_floor;       /* the least the first plan's first step could map (step_floor.c) */
  double solve_ms;            /* time spent solving */
} hbm__step_stats_t;

void hbm__step_get_stats(hbm__strategy_t *s, hbm__step_stats_t *out);
/* A replayed log's step marker: a step begins with the next operation, as after
 * hbm_profiler_step_begin, for this strategy alone (any thread; nothing for other modes). */
void hbm__step_mark(hbm__strategy_t *s);

#endif /* HBM_ALLOC_STEP_H */
