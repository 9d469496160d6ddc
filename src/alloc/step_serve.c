/* step_serve.c — mode learn (HBM_PLAN=step), the strategy: it learns while no plan serves
 * (step_detect.c), places the step it found (step_plan.c, step_solve.c), and serves later
 * steps from that plan. Memory underneath is the tight expandable strategy (expandable.c): one
 * range the size of the limit, placed as bfc places it, physical memory mapped where blocks
 * are; so before a step is found, and for whatever the plan does not serve, this mode places
 * blocks exactly as the default mode does.
 *
 * A plan holds stretches of the range [base, base + span), taken from the arena as used
 * blocks ("holders") that map nothing, and one entry per allocation of the step, in order: its
 * size, its offset (the steady placement's) and its offset in the first planned step (that
 * step's own placement, around the blocks of the step before). The front's fast path
 * (front.c) asks hbm__step_alloc, which compares the request with the entry at the cursor and
 * hands out base + offset; hbm__step_free finds the entry live at an address in a table of
 * the plan's offsets. Both run under the device's lock, as every strategy does.
 *
 * Physical memory comes behind the holders as blocks use it (see "the span's memory" below):
 * through the first planned step each block maps what it uses and gives it back when freed,
 * so what is reserved is what is live, the survivors of the step before included; from the
 * second on, the steady stretches are mapped for good and serving makes no memory call.
 *
 * The plan is safe whatever the program does. Entry k may take its bytes when no live block of
 * the plan overlaps them; the solver guarantees that for blocks freed by their deadline (the
 * allocation before which the step frees them), so each cursor position lists the entries
 * due there, and one still live then is overdue: while any is, an allocation checks its range
 * against the overdue ones. What does not match (another size, an extra allocation, a step cut
 * short, another thread's requests in between) goes to the memory underneath, outside the
 * plan's holders; a few entries ahead or the step's first entry re-synchronize the cursor.
 * When the step changed for good (a step mostly not served, or a long run of misses) or
 * memory runs short, the plan is retired: its free memory goes back at once, its live blocks'
 * when they are freed, and learning starts again.
 *
 * Blocks live when the plan starts that belong to the step (the survivors: the previous
 * step's blocks still in use) stay where they are, blocks of the memory underneath: their
 * entries are planned as any other, the first step's placement goes around them until their
 * frees are due, and a survivor inside the plan's span joins the span when freed. Live blocks
 * whose end is not known are obstacles both placements leave alone. */
#include "alloc/step.h"
#include "profile/recorder.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_OFFSET HBM__STEP_NO_OFFSET
#define EMPTY_KEY UINT32_MAX
#define LOOKAHEAD 8  /* entries skipped to re-synchronize with a request */
#define MISS_RUN 256 /* allocations in a row the plan cannot serve: the step changed */
#define STATE_LIVE 1u
#define STATE_OVERDUE 2u
#define STATE_ADOPTED 4u /* a survivor: a block of the memory underneath */
#define STATE_COLD 8u    /* served while the plan was cold: it holds its granules itself */
#define HOT static inline __attribute__((always_inline))
#define FRONT_INLINE __attribute__((always_inline)) inline

typedef struct entry {
  uint64_t size;      /* requested bytes that match it */
  uint64_t offset;    /* in the span, from the second planned step on; NO_OFFSET: served by
                         the memory underneath */
  uint64_t first;     /* in the span, in the first planned step */
  uint32_t tslot;     /* its offset's slot in the address table */
  uint32_t fslot;     /* its first offset's */
  uint32_t due_begin; /* due[due_begin .. next entry's due_begin): due at this cursor */
} entry_t;

typedef struct slot {
  uint32_t key;   /* offset / 256 (EMPTY_KEY: unused slot) */
  uint32_t entry; /* the entry live there, HBM__STEP_NONE when none */
} slot_t;

typedef hbm__step_range_t range_t;

typedef struct plan {
  uint64_t base, span;
  uint32_t n;       /* allocations per step */
  entry_t *entries; /* n + 1 (the last only ends the due lists) */
  uint32_t *due;    /* entries by deadline */
  uint8_t *state;   /* per entry: STATE_* */
  slot_t *table;    /* address → live entry */
  uint32_t mask;
  unsigned shift;
  uint32_t cursor;  /* the entry the next allocation should be */
  uint32_t overdue; /* entries live past their deadline */
  uint32_t *overdue_list;
  uint32_t live;         /* blocks the plan served that are live */
  uint32_t moved;        /* of those, blocks at a first-step offset other than their steady one */
  uint64_t *live_at;     /* per entry: the offset of its live block (a survivor's: where it is) */
  hbm__block_t *holders; /* the span, held in the arena: used blocks that map nothing */
  size_t n_holders, cap_holders;
  range_t *stretches; /* of the span, those the steady placement uses (offsets, in order) */
  size_t n_stretches;
  uint64_t gran;        /* the device's granularity */
  uint32_t *uses;       /* per granule of the span: what keeps it backed (see back_range) */
  bool cold;            /* memory comes as blocks use it (the first planned step; retiring) */
  bool settled;         /* holders trimmed to the steady stretches */
  hbm_u64map_t adopted; /* address → entry, survivors not yet freed */
  uint64_t step;        /* steps ended under this plan */
  uint64_t step_planned, step_other; /* operations of the step under way */
  uint64_t step_reserved;            /* the most reserved in the step under way */
  uint32_t miss_run;
  bool retiring;
} plan_t;

struct hbm__step {
  hbm__strategy_t base;
  hbm__strategy_t *mem; /* the tight expandable strategy */
  plan_t *active, *retiring;
  hbm__step_history_t hist;
  uint64_t marks;                 /* step markers seen: the program's and the log's */
  atomic_uint_fast64_t log_marks; /* a replayed log's (hbm__step_mark) */
  hbm__step_stats_t stats;
};

static hbm__step_t *step_of(hbm__strategy_t *s) { return (hbm__step_t *)s; }

static uint64_t entry_bytes(const entry_t *e) { return hbm__round_up(e->size, HBM__MIN_BLOCK); }

/* ---- the record in the profile ---- */

static void marker(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void marker(const char *fmt, ...) {
  if (!hbm__rec_active())
    return;
  char text[320];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  hbm_profiler_marker(text);
}

static uint64_t most(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* What is reserved moved: after the first step, the most of it counts (in the first planned
 * step, or later). */
static void note_reserved(hbm__step_t *st) {
  hbm__step_stats_t *t = &st->stats;
  if (!t->first_step_end)
    return;
  hbm__strategy_stats_t s;
  st->mem->ops->stats(st->mem, &s);
  t->steady_reserved = most(t->steady_reserved, s.reserved);
  if (st->active)
    st->active->step_reserved = most(st->active->step_reserved, s.reserved);
  if (t->first_planned_end)
    t->later_reserved = most(t->later_reserved, s.reserved);
  else
    t->first_reserved = most(t->first_reserved, s.reserved);
}

/* ---- the plan's tables ---- */

static uint32_t home(const plan_t *p, uint32_t key) {
  return (uint32_t)((key * 0x9E3779B1u) >> p->shift) & p->mask;
}

static void plan_free(plan_t *p) {
  if (!p)
    return;
  free(p->entries);
  free(p->due);
  free(p->state);
  free(p->table);
  free(p->overdue_list);
  free(p->live_at);
  free(p->holders);
  free(p->uses);
  free(p->stretches);
  hbm_u64map_free(&p->adopted);
  free(p);
}

/* The table slot of an offset (added when new). */
static uint32_t table_slot(plan_t *p, uint64_t offset) {
  uint32_t key = (uint32_t)(offset / HBM__MIN_BLOCK), h = home(p, key);
  while (p->table[h].key != EMPTY_KEY && p->table[h].key != key)
    h = (h + 1) & p->mask;
  p->table[h].key = key;
  return h;
}

/* The address table: one slot per distinct offset (steady and first), at most half full. */
static bool build_table(plan_t *p) {
  uint32_t cap = 16;
  while (cap < 4 * p->n + 2)
    cap *= 2;
  p->table = malloc(cap * sizeof *p->table);
  if (!p->table)
    return false;
  for (uint32_t i = 0; i < cap; i++)
    p->table[i] = (slot_t){EMPTY_KEY, HBM__STEP_NONE};
  p->mask = cap - 1;
  p->shift = 32u - (unsigned)__builtin_ctz(cap);
  for (uint32_t k = 0; k < p->n; k++) {
    entry_t *e = &p->entries[k];
    if (e->offset == NO_OFFSET)
      continue;
    e->tslot = table_slot(p, e->offset);
    e->fslot = table_slot(p, e->first);
  }
  return true;
}

/* The due lists: entry k is due at the cursor where the step has freed it. */
static bool build_due(plan_t *p, const hbm__step_item_t *items) {
  uint32_t *count = calloc((size_t)p->n + 1, sizeof *count);
  p->due = malloc(((size_t)p->n + 1) * sizeof *p->due);
  if (!count || !p->due) {
    free(count);
    return false;
  }
  for (uint32_t k = 0; k < p->n; k++)
    if (p->entries[k].offset != NO_OFFSET)
      count[items[k].end % p->n]++;
  uint32_t at = 0;
  for (uint32_t c = 0; c <= p->n; c++) {
    p->entries[c].due_begin = at;
    at += c < p->n ? count[c] : 0;
    count[c] = p->entries[c].due_begin;
  }
  for (uint32_t k = 0; k < p->n; k++)
    if (p->entries[k].offset != NO_OFFSET)
      p->due[count[items[k].end % p->n]++] = k;
  free(count);
  return true;
}

static plan_t *build_plan(const hbm__step_item_t *items, uint32_t n, uint64_t base,
                          hbm__step_places_t *places, uint64_t gran) {
  plan_t *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->base = base;
  p->span = places->span;
  p->n = n;
  p->gran = gran;
  p->cold = true;
  hbm_u64map_init(&p->adopted);
  p->entries = calloc((size_t)n + 1, sizeof *p->entries);
  p->state = calloc(n, 1);
  p->overdue_list = malloc((size_t)n * sizeof *p->overdue_list);
  p->live_at = malloc((size_t)n * sizeof *p->live_at);
  p->uses = calloc(p->span / gran + 1, sizeof *p->uses);
  if (!p->entries || !p->state || !p->overdue_list || !p->live_at || !p->uses) {
    plan_free(p);
    return NULL;
  }
  for (uint32_t k = 0; k < n; k++)
    p->entries[k] =
        (entry_t){.size = items[k].size, .offset = places->steady[k], .first = places->first[k]};
  p->stretches = places->stretches; /* the plan's now */
  p->n_stretches = places->n_stretches;
  places->stretches = NULL;
  if (!build_due(p, items) || !build_table(p)) {
    plan_free(p);
    return NULL;
  }
  return p;
}

static bool add_holder(plan_t *p, const hbm__block_t *b) {
  if (p->n_holders == p->cap_holders) {
    hbm__block_t *grown =
        hbm__grow_array(p->holders, &p->cap_holders, p->n_holders + 1, sizeof *grown, 16);
    if (!grown)
      return false;
    p->holders = grown;
  }
  p->holders[p->n_holders++] = *b;
  return true;
}

static hbm_status_t take_holder(void *ctx, const hbm__block_t *b) {
  return add_holder(ctx, b) ? HBM_OK
                            : hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for a plan");
}

static void release_holders(hbm__step_t *st, plan_t *p) {
  for (size_t i = 0; i < p->n_holders; i++)
    hbm__arena_release(hbm__expandable_arena(st->mem), &p->holders[i]);
  p->n_holders = 0;
}

static int compare_range(const void *x, const void *y) {
  const range_t *a = x, *b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Keeps, of holder h, what the ranges (absolute, in order, apart) cover, releasing the rest. */
static void trim_holder(hbm__arena_t *a, hbm__block_t h, const range_t *keep, size_t n_keep,
                        hbm__block_t *kept, size_t *n_kept) {
  bool have = true;
  for (size_t i = 0; i < n_keep && have; i++) {
    uint64_t lo = keep[i].lo > h.addr ? keep[i].lo : h.addr;
    uint64_t end = h.addr + h.allocated, hi = keep[i].hi < end ? keep[i].hi : end;
    if (lo >= hi)
      continue;
    hbm__block_t rest;
    if (lo > h.addr && hbm__arena_split(a, &h, lo - h.addr, &rest) == HBM_OK) {
      hbm__arena_release(a, &h);
      h = rest;
    }
    if (hi < h.addr + h.allocated && hbm__arena_split(a, &h, hi - h.addr, &rest) == HBM_OK) {
      kept[(*n_kept)++] = h;
      h = rest;
    } else {
      kept[(*n_kept)++] = h;
      have = false;
    }
  }
  if (have)
    hbm__arena_release(a, &h);
}

/* The holders keep only what the ranges (absolute, sorted and apart) cover. */
static void trim_holders(hbm__step_t *st, plan_t *p, const range_t *keep, size_t n_keep) {
  hbm__block_t *kept = malloc((p->n_holders * (2 * n_keep + 1) + 1) * sizeof *kept);
  size_t n_kept = 0;
  if (!kept) /* no memory to trim: keep them all */
    return;
  for (size_t i = 0; i < p->n_holders; i++)
    trim_holder(hbm__expandable_arena(st->mem), p->holders[i], keep, n_keep, kept, &n_kept);
  free(p->holders);
  p->holders = kept;
  p->n_holders = p->cap_holders = n_kept;
}

/* ---- the span's memory ----
 *
 * The span is held from the start, but physical memory comes behind it as blocks use it:
 * each granule of the span counts what keeps it backed (uses), and is backed by the memory
 * underneath (hbm__expandable_back, one user there) while that count is above zero. While
 * the plan is cold (the first planned step, and once it retires) each block it serves holds
 * its own granules and gives them back when freed: what is reserved is what is live, the
 * survivors of the step before included, not the span plus the survivors. After the first
 * step the steady stretches hold one use more for good, and serving needs no memory call. */

/* The granules [lo, hi) of the span (byte offsets) get one use more; those that had none
 * are backed, a stretch in one call. False (nothing changed) when memory ran short. */
static bool back_range(hbm__step_t *st, plan_t *p, uint64_t lo, uint64_t hi) {
  uint64_t first = lo / p->gran, last = (hi - 1) / p->gran;
  hbm__failure_t why;
  for (uint64_t g = first; g <= last;) {
    uint64_t end = g;
    while (end <= last && p->uses[end] == 0)
      end++;
    if (end > g && hbm__expandable_back(st->mem, p->base + g * p->gran, p->base + end * p->gran,
                                        &why) != HBM_OK) {
      for (uint64_t u = first; u < g; u++) /* undo the stretches backed before this one */
        if (p->uses[u] == 0)
          hbm__expandable_unback(st->mem, p->base + u * p->gran, p->base + (u + 1) * p->gran);
      hbm__error_clear();
      return false;
    }
    g = end > g ? end : g + 1;
  }
  for (uint64_t g = first; g <= last; g++)
    p->uses[g]++;
  return true;
}

/* One use less on granules [lo, hi); those left with none go back, a stretch in one call. */
static void unback_range(hbm__step_t *st, plan_t *p, uint64_t lo, uint64_t hi) {
  uint64_t first = lo / p->gran, last = (hi - 1) / p->gran;
  for (uint64_t g = first; g <= last; g++)
    p->uses[g]--;
  for (uint64_t g = first; g <= last;) {
    uint64_t end = g;
    while (end <= last && p->uses[end] == 0)
      end++;
    if (end > g)
      hbm__expandable_unback(st->mem, p->base + g * p->gran, p->base + end * p->gran);
    g = end + 1;
  }
}

/* Every steady stretch: one use more (false, nothing changed, when memory ran short). */
static bool back_stretches(hbm__step_t *st, plan_t *p) {
  for (size_t i = 0; i < p->n_stretches; i++)
    if (!back_range(st, p, p->stretches[i].lo, p->stretches[i].hi)) {
      while (i--)
        unback_range(st, p, p->stretches[i].lo, p->stretches[i].hi);
      return false;
    }
  return true;
}

/* The first planned step is over (and the step was served well): the steady stretches are
 * backed for good. */
static void warm_up(hbm__step_t *st, plan_t *p) {
  if (p->cold && back_stretches(st, p))
    p->cold = false;
}

/* Once no block lies where only the first step put blocks (nor a survivor in the span), the
 * holders keep only the steady stretches: the rest goes back to the memory underneath. */
static void settle(hbm__step_t *st, plan_t *p) {
  if (p->settled || p->step == 0 || p->moved || p->adopted.count)
    return;
  range_t *keep = malloc((p->n_stretches + 1) * sizeof *keep);
  if (!keep)
    return;
  for (size_t i = 0; i < p->n_stretches; i++)
    keep[i] = (range_t){p->base + p->stretches[i].lo, p->base + p->stretches[i].hi};
  trim_holders(st, p, keep, p->n_stretches);
  free(keep);
  p->settled = true;
}

/* Retiring, or a step served poorly: each live block holds its own granules again, and the
 * stretches no longer do, so memory goes back as the blocks are freed. */
static void cool_down(hbm__step_t *st, plan_t *p) {
  for (uint32_t k = 0; k < p->n && !p->cold; k++)
    if ((p->state[k] & (STATE_LIVE | STATE_ADOPTED | STATE_COLD)) == STATE_LIVE &&
        back_range(st, p, p->live_at[k], p->live_at[k] + entry_bytes(&p->entries[k])))
      p->state[k] |= STATE_COLD; /* (backed already: only counted) */
  if (!p->cold)
    for (size_t i = 0; i < p->n_stretches; i++)
      unback_range(st, p, p->stretches[i].lo, p->stretches[i].hi);
  p->cold = true;
}

/* ---- making a plan ---- */

/* Enough of the step can be planned (most of its allocations have known lifetimes), and what
 * it has live at once is a good part of what the history saw move (hbm__step_history_t). */
static bool worth_planning(const hbm__step_history_t *h, const hbm__step_item_t *items, uint32_t n,
                           uint64_t limit) {
  uint32_t planned = 0;
  for (uint32_t k = 0; k < n; k++)
    planned += items[k].planned;
  uint64_t moved = (uint64_t)(h->bytes_max - h->bytes_min), bound = hbm__step_live_bound(items, n);
  return n >= 2 && planned >= n - n / 10 && 2 * bound >= moved && bound < limit;
}

static void start_plan(hbm__step_t *st, plan_t *p, const hbm__step_item_t *items,
                       const hbm__step_found_t *f, const hbm__step_places_t *places) {
  for (uint32_t k = 0; k < p->n; k++)
    if (items[k].planned && items[k].live_now) {
      p->state[k] = STATE_LIVE | STATE_ADOPTED;
      p->live_at[k] = items[k].addr - p->base;
      hbm_u64map_put(&p->adopted, items[k].addr, k);
    }
  hbm__step_stats_t *s = &st->stats;
  if (!s->first_step_end) { /* the operations since the second step began were not planned */
    s->first_step_end = s->ops - (st->hist.n - f->boundary);
    for (uint32_t i = f->boundary; i < st->hist.n; i++)
      s->steady_reserved = s->first_reserved = most(s->steady_reserved, st->hist.reserved[i]);
  }
  uint64_t first = 0; /* what the first step (before the plan) reserved at most */
  for (uint32_t i = f->boundary >= f->period ? f->boundary - f->period : 0; i < f->boundary; i++)
    first = st->hist.reserved[i] > first ? st->hist.reserved[i] : first;
  s->plans++;
  s->period = f->period;
  s->heap_bytes = places->steady_bytes;
  s->bound_bytes = hbm__step_live_bound(items, p->n);
  s->solve_ms += places->solve_ms;
  if (!s->first_planned_end) /* the plan whose first step counts as the first planned one */
    s->first_floor = most(s->first_floor, places->first_floor);
  st->active = p;
  note_reserved(st);
  marker("hbm plan: step of %u operations (%u allocations) found in the stream; plan %llu bytes "
         "for a step live peak of %llu bytes; the first step reserved %llu bytes",
         f->period, p->n, (unsigned long long)places->steady_bytes,
         (unsigned long long)s->bound_bytes, (unsigned long long)first);
  hbm__step_history_clear(&st->hist);
}

/* The plan leaves the memory underneath a hole for the step's largest block (else a step that
 * changes could not be served beside it, and retiring it may leave its live blocks where the
 * default mode would not have put them: where memory is that short, bfc's placement serves). */
static bool leaves_room(const range_t *r, size_t m, uint64_t limit, uint64_t largest) {
  uint64_t at = 0;
  for (size_t i = 0; i < m; i++) {
    if (r[i].lo >= at + largest)
      return true;
    at = r[i].hi;
  }
  return limit >= at + largest;
}

/* Holds what either placement uses (its free parts: survivors lie inside); nothing is mapped
 * yet (back_range). */
static bool claim_span(hbm__step_t *st, plan_t *p, const hbm__step_item_t *items, uint32_t n,
                       const hbm__step_places_t *places) {
  uint64_t largest = 0;
  for (uint32_t k = 0; k < n; k++)
    largest = items[k].planned && items[k].bytes > largest ? items[k].bytes : largest;
  bool ok = leaves_room(places->held, places->n_held, st->base.env.limit, largest);
  for (size_t i = 0; i < places->n_held && ok; i++)
    ok = hbm__arena_claim_free(hbm__expandable_arena(st->mem), p->base + places->held[i].lo,
                               p->base + places->held[i].hi, take_holder, p) == HBM_OK;
  return ok;
}

/* Plans the step found, holds its span and starts serving from it; false when it could not. */
static bool activate(hbm__step_t *st, const hbm__step_found_t *f) {
  hbm__step_item_t *items;
  uint32_t n;
  uint64_t base = hbm__expandable_base(st->mem);
  if (!base || hbm__step_template(&st->hist, f->period, &items, &n) != HBM_OK) {
    hbm__error_clear();
    return false;
  }
  plan_t *p = NULL;
  hbm__step_places_t places = {0};
  bool ok = worth_planning(&st->hist, items, n, st->base.env.limit) &&
            hbm__step_place(st->mem, base, items, n, st->base.env.limit, &places) == HBM_OK &&
            places.span / HBM__MIN_BLOCK < EMPTY_KEY &&
            (p = build_plan(items, n, base, &places, hbm__expandable_granule(st->mem))) &&
            claim_span(st, p, items, n, &places);
  st->stats.solve_ms += ok ? 0 : places.solve_ms;
  if (ok)
    start_plan(st, p, items, f, &places);
  else if (p) {
    release_holders(st, p);
    plan_free(p);
  }
  hbm__step_places_free(&places);
  hbm__error_clear();
  free(items);
  return ok;
}

/* ---- retiring a plan ---- */

/* The plan stops serving: what its live blocks do not use goes back now. */
static void retire(hbm__step_t *st) {
  plan_t *p = st->active;
  st->active = NULL;
  st->stats.retired++;
  hbm_u64map_free(&p->adopted); /* survivors stay blocks of the memory underneath */
  cool_down(st, p);
  range_t *live = malloc(((size_t)p->live + 1) * sizeof *live);
  size_t n_live = 0;
  for (uint32_t k = 0; live && k < p->n; k++)
    if ((p->state[k] & (STATE_LIVE | STATE_ADOPTED)) == STATE_LIVE)
      live[n_live++] =
          (range_t){p->base + p->live_at[k], p->base + p->live_at[k] + entry_bytes(&p->entries[k])};
  if (n_live == 0) {
    release_holders(st, p);
  } else if (live) { /* (no memory to sort them: keep all) */
    qsort(live, n_live, sizeof *live, compare_range);
    size_t m = 0; /* merged: blocks of the two placements may touch */
    for (size_t i = 0; i < n_live; i++)
      if (m && live[i].lo <= live[m - 1].hi)
        live[m - 1].hi = live[i].hi > live[m - 1].hi ? live[i].hi : live[m - 1].hi;
      else
        live[m++] = live[i];
    trim_holders(st, p, live, m);
  }
  free(live);
  marker("hbm plan: retired after %llu steps (the step changed, or memory ran short); "
         "learning again",
         (unsigned long long)p->step);
  if (p->live) {
    p->retiring = true;
    st->retiring = p;
  } else {
    plan_free(p);
  }
  note_reserved(st);
  hbm__step_history_clear(&st->hist);
}

/* ---- serving ---- */

/* Entries whose deadline is cursor c and that are still live become overdue. */
static void mark_due(plan_t *p, uint32_t c) {
  const entry_t *e = &p->entries[c];
  for (uint32_t i = e->due_begin; i < e[1].due_begin; i++) {
    uint32_t j = p->due[i];
    if (p->state[j] & STATE_LIVE && !(p->state[j] & STATE_OVERDUE)) {
      p->state[j] |= STATE_OVERDUE;
      p->overdue_list[p->overdue++] = j;
    }
  }
}

static void no_longer_overdue(plan_t *p, uint32_t j) {
  for (uint32_t i = 0; i < p->overdue; i++)
    if (p->overdue_list[i] == j) {
      p->overdue_list[i] = p->overdue_list[--p->overdue];
      return;
    }
}

/* Bytes [lo, hi) of the span overlap no overdue block. */
static bool fits(const plan_t *p, uint64_t lo, uint64_t hi) {
  for (uint32_t i = 0; i < p->overdue; i++) {
    uint32_t j = p->overdue_list[i];
    uint64_t at = p->live_at[j];
    if (at < hi && lo < at + entry_bytes(&p->entries[j]))
      return false;
  }
  return true;
}

/* The step under way ended: say how it went; a step mostly not served means it changed. */
static void end_step(hbm__step_t *st, plan_t *p) {
  p->step++;
  uint64_t all = p->step_planned + p->step_other;
  marker("hbm plan: step %llu: %llu of %llu operations served from the plan, %llu fell back; "
         "%llu bytes reserved at most",
         (unsigned long long)p->step, (unsigned long long)p->step_planned, (unsigned long long)all,
         (unsigned long long)p->step_other, (unsigned long long)p->step_reserved);
  bool changed = all && 2 * p->step_planned < all;
  /* the steady span is worth mapping whole while steps are served from it: else what falls
   * back would be reserved beside all of it */
  bool served = 10 * p->step_planned >= 9 * all;
  p->step_planned = p->step_other = p->step_reserved = 0; /* (note_reserved below sets it) */
  if (!st->stats.first_planned_end)
    st->stats.first_planned_end = st->stats.ops;
  if (changed) {
    retire(st);
    return;
  }
  if (served)
    warm_up(st, p);
  else
    cool_down(st, p);
  settle(st, p);
  note_reserved(st);
}

static void advance(hbm__step_t *st, plan_t *p) {
  if (++p->cursor < p->n)
    return;
  p->cursor = 0;
  end_step(st, p);
}

/* How far ahead the request matches an entry (1..LOOKAHEAD), or the step's first entry (a
 * step cut short: the distance to it); 0 when neither. */
static uint32_t resync(const plan_t *p, uint64_t size) {
  for (uint32_t k = 1; k <= LOOKAHEAD && k < p->n; k++)
    if (p->entries[(p->cursor + k) % p->n].size == size)
      return k;
  return p->entries[0].size == size ? p->n - p->cursor : 0;
}

static bool missed(hbm__step_t *st, plan_t *p) {
  if (++p->miss_run >= MISS_RUN)
    retire(st);
  return false;
}

/* Entry c takes its place, if it is free: the first planned step's, or the steady one; while
 * the plan is cold the block backs its own memory. */
static bool serve(hbm__step_t *st, plan_t *p, uint32_t c, uint64_t *addr) {
  const entry_t *e = &p->entries[c];
  bool first = p->step == 0;
  uint64_t at = first ? e->first : e->offset, end = at + entry_bytes(e);
  if (e->offset == NO_OFFSET || p->state[c] || !fits(p, at, end) ||
      (p->cold && !back_range(st, p, at, end)))
    return false;
  p->state[c] = p->cold ? STATE_LIVE | STATE_COLD : STATE_LIVE;
  p->live_at[c] = at;
  p->moved += at != e->offset;
  p->table[first ? e->fslot : e->tslot].entry = c;
  p->live++;
  p->step_planned++;
  p->miss_run = 0;
  st->stats.planned_ops++;
  st->stats.ops++;
  *addr = p->base + at;
  if (p->cold)
    note_reserved(st);
  return true;
}

static __attribute__((noinline)) bool alloc_slow(hbm__step_t *st, plan_t *p, uint64_t size,
                                                 uint64_t *addr) {
  mark_due(p, p->cursor);
  if (p->entries[p->cursor].size != size) {
    uint32_t skip = resync(p, size);
    if (!skip)
      return missed(st, p); /* an extra allocation: the memory underneath serves it */
    while (skip--) {
      advance(st, p);
      if (st->active != p)
        return false;
      mark_due(p, p->cursor);
    }
  }
  bool served = serve(st, p, p->cursor, addr);
  advance(st, p);
  if (served)
    return true;
  if (st->active != p) /* the step ended and retired the plan: p may be freed */
    return false;
  return missed(st, p);
}

FRONT_INLINE bool hbm__step_alloc(hbm__step_t *st, uint64_t size, uint64_t *addr) {
  plan_t *p = st->active;
  if (HBM_UNLIKELY(!p))
    return false;
  uint32_t c = p->cursor;
  const entry_t *e = &p->entries[c];
  if (HBM_UNLIKELY(size != e->size || p->overdue || p->cold || c + 1 == p->n ||
                   e->offset == NO_OFFSET))
    return alloc_slow(st, p, size, addr);
  for (uint32_t i = e->due_begin; i < e[1].due_begin; i++)
    if (HBM_UNLIKELY(p->state[p->due[i]]))
      return alloc_slow(st, p, size, addr);
  p->state[c] = STATE_LIVE;
  p->live_at[c] = e->offset;
  p->table[e->tslot].entry = c;
  p->cursor = c + 1;
  p->live++;
  p->step_planned++;
  p->miss_run = 0;
  st->stats.planned_ops++;
  st->stats.ops++;
  *addr = p->base + e->offset;
  return true;
}

/* The table slot of the plan block at addr, or NULL. */
HOT slot_t *slot_of(plan_t *p, uint64_t addr) {
  uint64_t off = addr - p->base;
  if (off >= p->span)
    return NULL;
  uint32_t key = (uint32_t)(off / HBM__MIN_BLOCK), h = home(p, key);
  while (p->table[h].key != key) {
    if (p->table[h].key == EMPTY_KEY)
      return NULL;
    h = (h + 1) & p->mask;
  }
  return p->table[h].entry != HBM__STEP_NONE ? &p->table[h] : NULL;
}

/* A plan block freed: what it held is free for the plan again (or, retiring, given back once
 * the last block is gone). */
static bool forget_planned(hbm__step_t *st, plan_t *p, slot_t *sl, uint64_t *size) {
  uint32_t j = sl->entry;
  const entry_t *e = &p->entries[j];
  *size = e->size;
  if (p->state[j] & STATE_OVERDUE)
    no_longer_overdue(p, j);
  if (p->state[j] & STATE_COLD) /* it held its granules itself */
    unback_range(st, p, p->live_at[j], p->live_at[j] + entry_bytes(e));
  p->moved -= p->live_at[j] != e->offset;
  p->state[j] = 0;
  sl->entry = HBM__STEP_NONE;
  p->live--;
  st->stats.planned_ops++;
  st->stats.ops++;
  bool memory_moved = p->cold || p->retiring;
  if (!p->retiring) {
    p->step_planned++;
    settle(st, p);
  } else if (p->live == 0) {
    release_holders(st, p);
    plan_free(p);
    st->retiring = NULL;
  }
  if (memory_moved)
    note_reserved(st);
  return true;
}

static __attribute__((noinline)) bool free_slow(hbm__step_t *st, uint64_t addr, uint64_t *size) {
  plan_t *plans[2] = {st->active, st->retiring};
  for (int i = 0; i < 2; i++) {
    slot_t *sl = plans[i] ? slot_of(plans[i], addr) : NULL;
    if (sl)
      return forget_planned(st, plans[i], sl, size);
  }
  return false;
}

FRONT_INLINE bool hbm__step_free(hbm__step_t *st, uint64_t addr, uint64_t *size) {
  plan_t *p = st->active;
  slot_t *sl = HBM_LIKELY(p) ? slot_of(p, addr) : NULL;
  if (HBM_UNLIKELY(!sl || p->state[sl->entry] != STATE_LIVE))
    return free_slow(st, addr, size);
  uint32_t j = sl->entry;
  *size = p->entries[j].size;
  p->state[j] = 0;
  sl->entry = HBM__STEP_NONE;
  p->live--;
  p->step_planned++;
  st->stats.planned_ops++;
  st->stats.ops++;
  return true;
}

bool hbm__step_find(hbm__step_t *st, uint64_t addr, hbm__record_t *out) {
  plan_t *plans[2] = {st->active, st->retiring};
  for (int i = 0; i < 2; i++) {
    slot_t *sl = plans[i] ? slot_of(plans[i], addr) : NULL;
    if (!sl)
      continue;
    const entry_t *e = &plans[i]->entries[sl->entry];
    *out = (hbm__record_t){.block = {addr, entry_bytes(e), sl->entry}, .size = e->size};
    return true;
  }
  return false;
}

size_t hbm__step_live_count(hbm__step_t *st) {
  return (st->active ? st->active->live : 0) + (st->retiring ? st->retiring->live : 0);
}

size_t hbm__step_records(hbm__step_t *st, hbm__record_t *out, size_t cap) {
  size_t n = 0;
  plan_t *plans[2] = {st->active, st->retiring};
  for (int i = 0; i < 2; i++)
    for (uint32_t k = 0; plans[i] && k < plans[i]->n && n < cap; k++) {
      const plan_t *p = plans[i];
      if ((p->state[k] & (STATE_LIVE | STATE_ADOPTED)) != STATE_LIVE)
        continue;
      const entry_t *e = &p->entries[k];
      out[n++] =
          (hbm__record_t){.block = {p->base + p->live_at[k], entry_bytes(e), k}, .size = e->size};
    }
  return n;
}

/* ---- the strategy: what the plan does not serve, and learning ---- */

static uint64_t reserved_now(hbm__step_t *st) {
  hbm__strategy_stats_t s;
  st->mem->ops->stats(st->mem, &s);
  return s.reserved;
}

/* One operation while no plan serves: kept, and a step found is planned. */
static void learn(hbm__step_t *st, uint64_t addr, uint64_t size, uint64_t bytes) {
  uint64_t reserved = reserved_now(st);
  bool kept = size ? hbm__step_history_alloc(&st->hist, addr, size, reserved)
                   : hbm__step_history_free_op(&st->hist, addr, bytes, reserved);
  if (!kept) {
    hbm__step_history_clear(&st->hist);
    return;
  }
  uint64_t marks = atomic_load_explicit(&hbm__rec_step_marks, memory_order_relaxed) +
                   atomic_load_explicit(&st->log_marks, memory_order_relaxed);
  if (marks != st->marks) { /* a step began before this operation */
    st->marks = marks;
    hbm__step_history_mark(&st->hist);
  }
  hbm__step_found_t f;
  if (!st->retiring && hbm__step_detect(&st->hist, &f) && !activate(st, &f))
    hbm__step_detect_defer(&st->hist);
}

static hbm_status_t learn_alloc(hbm__strategy_t *s, uint64_t size, uint64_t alignment,
                                hbm_stream_t *stream, hbm__block_t *out, hbm__failure_t *why) {
  hbm__step_t *st = step_of(s);
  hbm_status_t rc = st->mem->ops->alloc(st->mem, size, alignment, stream, out, why);
  if (rc == HBM_ERR_NO_MEMORY && why->kind != HBM__FAIL_HOST && st->active) {
    retire(st); /* the plan's free memory first, as bfc would have had it */
    memset(why, 0, sizeof *why);
    rc = st->mem->ops->alloc(st->mem, size, alignment, stream, out, why);
  }
  if (rc != HBM_OK)
    return rc;
  st->stats.ops++;
  note_reserved(st);
  if (st->active)
    st->active->step_other++;
  else
    learn(st, out->addr, size, 0);
  return HBM_OK;
}

static void learn_free(hbm__strategy_t *s, const hbm__block_t *b, hbm_stream_t *stream,
                       bool ordered) {
  hbm__step_t *st = step_of(s);
  plan_t *p = st->active;
  uint64_t k;
  st->stats.ops++;
  if (p && p->adopted.count && hbm_u64map_remove(&p->adopted, b->addr, &k)) {
    if (p->state[k] & STATE_OVERDUE) /* a block taken over */
      no_longer_overdue(p, (uint32_t)k);
    p->state[k] = 0;
    p->step_other++;
    if (b->addr - p->base < p->span && add_holder(p, b)) /* inside the span: the plan holds */
      hbm__expandable_unback(st->mem, b->addr, b->addr + b->allocated); /* it, unbacked */
    else
      st->mem->ops->free(st->mem, b, stream, ordered);
    settle(st, p);
    note_reserved(st);
    return;
  }
  st->mem->ops->free(st->mem, b, stream, ordered);
  note_reserved(st);
  if (st->active)
    st->active->step_other++;
  else
    learn(st, b->addr, 0, b->allocated);
}

static void learn_stats(hbm__strategy_t *s, hbm__strategy_stats_t *out) {
  hbm__step_t *st = step_of(s);
  st->mem->ops->stats(st->mem, out);
}

static hbm_status_t learn_walk(hbm__strategy_t *s, int (*fn)(const hbm__chunk_info_t *, void *),
                               void *ctx) {
  hbm__step_t *st = step_of(s);
  return st->mem->ops->walk(st->mem, fn, ctx);
}

static hbm_status_t learn_trim(hbm__strategy_t *s) {
  hbm__step_t *st = step_of(s);
  return st->mem->ops->trim(st->mem);
}

static uint64_t learn_largest_free(hbm__strategy_t *s) {
  hbm__step_t *st = step_of(s);
  return st->mem->ops->largest_free(st->mem);
}

static void learn_destroy(hbm__strategy_t *s) {
  hbm__step_t *st = step_of(s);
  plan_free(st->active); /* the memory underneath releases everything, holders included */
  plan_free(st->retiring);
  hbm__step_history_free(&st->hist);
  st->mem->ops->destroy(st->mem);
  free(st);
}

static const hbm__strategy_ops_t learn_ops = {
    .name = "learn",
    .alloc = learn_alloc,
    .free = learn_free,
    .stats = learn_stats,
    .walk = learn_walk,
    .trim = learn_trim,
    .largest_free = learn_largest_free,
    .destroy = learn_destroy,
};

hbm_status_t hbm__learn_create(const hbm__strategy_env_t *env, hbm__strategy_t **out) {
  hbm__step_t *st = calloc(1, sizeof *st);
  if (!st)
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory for mode learn");
  hbm_status_t rc = hbm__expandable_create_tight(env, &st->mem);
  if (rc != HBM_OK) {
    free(st);
    return rc;
  }
  hbm_u64map_init(&st->hist.live);
  hbm__step_history_clear(&st->hist);
  st->marks = atomic_load_explicit(&hbm__rec_step_marks, memory_order_relaxed);
  st->base.ops = &learn_ops;
  st->base.env = *env;
  st->base.step = st;
  *out = &st->base;
  return HBM_OK;
}

void hbm__step_mark(hbm__strategy_t *s) {
  if (s && s->step)
    atomic_fetch_add_explicit(&s->step->log_marks, 1, memory_order_relaxed);
}

void hbm__step_get_stats(hbm__strategy_t *s, hbm__step_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (s && s->step)
    *out = s->step->stats;
}
