/* analysis.c — the one place where hbm computes what a profile means: memory in use at every
 * step, the peak (the first step reaching the maximum, as XProf does), the buffers live at
 * the peak, totals by category and group, reserved memory and fragmentation. `hbm report`,
 * `hbm view`, the Chrome export and the planner's reports all call these functions; nothing
 * else computes a peak.
 *
 * Everything is computed once in hbm_analyze with difference arrays (O(steps + buffers)),
 * so a million-event profile is analysed in milliseconds and each query afterwards only reads
 * arrays. Runtime profiles take reserved memory from their reservation events; plans take it
 * as the heap's high-water mark (indefinite buffers + the highest temp offset in use so far),
 * which is XLA's "heap size with fragmentation".
 *
 * Two sums elsewhere look like peaks and are not this one: the planner's heap simulation
 * (src/hlo/heap_sim.c) computes the temp heap's size (the highest offset + size its best fit
 * placed, a quantity of the placement, not of the profile) and the live temporaries' maximum
 * (temp_peak, temporaries only) on its own buffer records while it places them and inside the
 * rematerialization loop, before any profile exists; the profile it then builds is analysed
 * here, and every peak the planner reports comes from this module. `hbm replay` takes the
 * log's peak from here too (src/alloc/replay.c, analysed_peak). */
#include "profile/index.h"
#include "profile/profile_internal.h"

#include <stdlib.h>
#include <string.h>

struct hbm_analysis {
  const hbm_profile_t *p;
  hbm_summary_t summary;
  uint64_t *live;     /* per step: live bytes */
  uint64_t *unpadded; /* per step: live unpadded bytes */
  uint64_t *reserved; /* per step: reserved bytes (NULL when the profile has no such data) */
  int64_t *members;   /* indices of this space's buffers, allocation order */
  size_t n_members;
  /* When the members' starts never go down (a runtime profile): the latest end in each block
   * of MEMBER_BLOCK members, so a window skips the blocks that ended before it. */
  int64_t *block_end;
  int64_t *at_peak, *by_size, *by_padding;
  hbm_group_total_t *groups;
  size_t n_groups;
  hbm_group_total_t
      *run_groups; /* by group over the whole run (stored, or counted in collect_members) */
  size_t n_run_groups;
  const hbm__digest_t *digest; /* stored numbers (a profile read from its index) */
  bool has_reserved;           /* the profile records reserved memory for this space */
  /* The buffers by profile index when p does not hold them (index_stream.c: a profile read
   * in one pass keeps only those live at its peaks); NULL: p's own. */
  hbm__buffer_lookup_t lookup;
  const void *lookup_ctx;
};

/* The buffer of profile index i. */
static const hbm_buffer_t *buffer_at(const hbm_analysis_t *a, int64_t i) {
  return a->lookup ? a->lookup(a->lookup_ctx, i) : &a->p->buffers[i];
}

/* x + y for a byte total of a's, saturated at HBM_BYTES_MAX (and said so in the summary). */
static uint64_t add_bytes(hbm_analysis_t *a, uint64_t x, uint64_t y) {
  uint64_t sum = hbm__bytes_add(x, y);
  a->summary.overflowed |= sum == HBM_BYTES_MAX;
  return sum;
}

static uint64_t padding_of(const hbm_buffer_t *b) {
  return b->size > b->unpadded_size ? b->size - b->unpadded_size : 0;
}

#define MEMBER_BLOCK 1024

/* The profile index of a's k-th buffer: a->members lists them, or is NULL while every buffer
 * of the profile is in a's space (one space: 5x10^7 indices, 0.4 GB, not written). */
static int64_t member(const hbm_analysis_t *a, size_t k) {
  return a->members ? a->members[k] : (int64_t)k;
}

/* The row of `name` in groups[0..*n), added when missing (the array has room for it). */
static hbm_group_total_t *group_row(hbm_group_total_t *groups, size_t *n, const char *name) {
  size_t g = 0;
  while (g < *n && groups[g].name != name) /* interned names: mostly the same pointer */
    g++;
  if (g == *n)
    for (g = 0; g < *n && strcmp(groups[g].name, name) != 0;)
      g++;
  if (g == *n)
    groups[(*n)++] = (hbm_group_total_t){.name = name};
  return &groups[g];
}

bool hbm__run_groups_add(hbm__run_groups_t *r, const hbm_buffer_t *b) {
  const char *name = b->group ? b->group : hbm_category_name(b->category);
  hbm_group_total_t *g;
  if (r->last < r->n && r->rows[r->last].name == name) { /* consecutive buffers mostly share */
    g = &r->rows[r->last];
  } else {
    if (r->n == r->cap) {
      hbm_group_total_t *grown = hbm__grow_array(r->rows, &r->cap, r->cap + 1, sizeof *r->rows, 16);
      if (!grown)
        return false;
      r->rows = grown;
    }
    g = group_row(r->rows, &r->n, name);
    r->last = (size_t)(g - r->rows);
  }
  g->bytes = hbm__bytes_add(g->bytes, b->size);
  g->count++;
  return true;
}

/* What collect_members learns on its way for compute_live. */
typedef struct member_totals {
  uint64_t size, unpadded; /* the magnitudes' (saturated) sums */
  bool padded;             /* a buffer's unpadded size differs from its size */
  uint64_t *d_live;        /* n_steps + 1 cells: +size where a buffer starts, -size where it
                              ends (modulo 2^64: exact when size stays below HBM_BYTES_MAX) */
} member_totals_t;

/* Adds v at the start and -v at the end of b's live range into d (a difference array). */
static void add_range(const hbm_buffer_t *b, int64_t n, uint64_t *d, uint64_t v) {
  int64_t start = (b->flags & HBM_BUF_INDEFINITE) ? 0 : b->start;
  int64_t end = (b->flags & HBM_BUF_INDEFINITE) ? n : b->end;
  if (start >= end || start >= n)
    return;
  d[start] += v;
  d[end] -= v;
}

static uint64_t clamp_bytes(uint64_t v) { return v < HBM_BYTES_MAX ? v : HBM_BYTES_MAX; }

/* Starts a->members at the first buffer not in a's space, `first`: those before it are. */
static bool list_members(hbm_analysis_t *a, size_t first) {
  a->members = malloc(((size_t)a->p->n_buffers + 1) * sizeof *a->members);
  if (!a->members)
    return false;
  for (size_t k = 0; k < first; k++)
    a->members[k] = (int64_t)k;
  return true;
}

/* Collects the buffers of a's space, the indefinite total, the blocks' latest ends, the
 * totals, the difference array of live bytes and the totals by group over the run, in one
 * pass over the buffers (5x10^7 of them are 6 GB). */
static bool collect_members(hbm_analysis_t *a, int space, member_totals_t *t) {
  const hbm_profile_t *p = a->p;
  a->block_end = malloc(((size_t)p->n_buffers / MEMBER_BLOCK + 1) * sizeof *a->block_end);
  t->d_live = calloc((size_t)p->n_steps + 1, sizeof *t->d_live);
  if (!a->block_end || !t->d_live)
    return false;
  bool sorted = true;
  int64_t last_start = INT64_MIN;
  hbm__run_groups_t run = {0};
  for (int64_t i = 0; i < p->n_buffers; i++) {
    const hbm_buffer_t *b = &p->buffers[i];
    if (b->space != space) {
      if (!a->members && !list_members(a, (size_t)i))
        return false;
      continue;
    }
    bool added = hbm__run_groups_add(&run, b);
    a->run_groups = run.rows;
    a->n_run_groups = run.n;
    if (!added)
      return false;
    size_t k = a->n_members++;
    if (a->members)
      a->members[k] = i;
    if (b->flags & HBM_BUF_INDEFINITE)
      a->summary.indefinite_bytes = add_bytes(a, a->summary.indefinite_bytes, b->size);
    sorted &= b->start >= last_start;
    last_start = b->start;
    int64_t end = (b->flags & HBM_BUF_INDEFINITE) ? INT64_MAX : b->end;
    if (k % MEMBER_BLOCK == 0 || end > a->block_end[k / MEMBER_BLOCK])
      a->block_end[k / MEMBER_BLOCK] = end;
    t->size = hbm__bytes_add(t->size, clamp_bytes(b->size));
    t->unpadded = hbm__bytes_add(t->unpadded, clamp_bytes(b->unpadded_size));
    t->padded |= b->unpadded_size != b->size;
    add_range(b, p->n_steps, t->d_live, b->size);
  }
  a->summary.n_buffers = (int64_t)a->n_members;
  if (!sorted || a->n_members <= MEMBER_BLOCK) { /* no blocks to skip */
    free(a->block_end);
    a->block_end = NULL;
  }
  return true;
}

/* ---- per-step sums ----
 * live[], unpadded[] and a runtime profile's reserved[] are prefix sums of difference arrays
 * (+size where a buffer starts, -size where it ends). They are exact up to HBM_BYTES_MAX and
 * saturate there. The cells are 64-bit when the magnitudes added cannot reach HBM_BYTES_MAX
 * (any profile a real device makes: no extra memory) and 128-bit only when an absurd or hostile
 * file's sizes (near 2^62 or 2^63) could. */
typedef __int128 wide_t;

typedef struct step_sums {
  int64_t *narrow; /* cells when the magnitudes' total is below HBM_BYTES_MAX */
  wide_t *wide;    /* otherwise */
} step_sums_t;

/* total: the (saturated) sum of the magnitudes that will be added. */
static bool sums_init(step_sums_t *s, int64_t n_steps, uint64_t total) {
  s->narrow = NULL;
  s->wide = NULL;
  if (total < HBM_BYTES_MAX)
    s->narrow = calloc((size_t)n_steps + 1, sizeof *s->narrow);
  else
    s->wide = calloc((size_t)n_steps + 1, sizeof *s->wide);
  return s->narrow || s->wide;
}

static void sums_add(step_sums_t *s, int64_t step, uint64_t bytes, bool subtract) {
  uint64_t v = clamp_bytes(bytes);
  if (s->narrow)
    s->narrow[step] += subtract ? -(int64_t)v : (int64_t)v;
  else
    s->wide[step] += subtract ? -(wide_t)v : (wide_t)v;
}

/* out[s] = the sum of the cells up to s, within [0, HBM_BYTES_MAX]; frees the cells. Returns
 * whether a sum reached HBM_BYTES_MAX (saturated). */
static bool sums_finish(step_sums_t *s, int64_t n_steps, uint64_t *out) {
  bool saturated = false;
  wide_t run = 0;
  for (int64_t k = 0; k < n_steps; k++) {
    run += s->narrow ? (wide_t)s->narrow[k] : s->wide[k];
    saturated |= run >= (wide_t)HBM_BYTES_MAX;
    out[k] = run <= 0 ? 0 : run >= (wide_t)HBM_BYTES_MAX ? HBM_BYTES_MAX : (uint64_t)run;
  }
  free(s->narrow);
  free(s->wide);
  return saturated;
}

/* A difference array summed in place into the values it stands for (modulo 2^64, exact: the
 * magnitudes' total is below HBM_BYTES_MAX, compute_live checks). */
static void running_sum(uint64_t *d, int64_t n) {
  uint64_t sum = 0;
  for (int64_t s = 0; s < n; s++)
    d[s] = sum += d[s];
}

/* Every profile a real device makes: 64-bit difference arrays summed in place; unpadded[] is
 * live[] itself when no buffer has padding (runtime profiles), so n steps cost 8n bytes here,
 * not 32n. */
static bool compute_live_narrow(hbm_analysis_t *a, member_totals_t *t) {
  int64_t n = a->p->n_steps;
  running_sum(t->d_live, n);
  a->live = t->d_live;
  a->unpadded = t->d_live;
  t->d_live = NULL;
  if (!t->padded)
    return true;
  if (!(a->unpadded = calloc((size_t)n + 1, sizeof *a->unpadded)))
    return false;
  for (size_t k = 0; k < a->n_members; k++) {
    const hbm_buffer_t *b = &a->p->buffers[member(a, k)];
    add_range(b, n, a->unpadded, b->unpadded_size);
  }
  running_sum(a->unpadded, n);
  return true;
}

/* An absurd or hostile file whose sizes could add up past HBM_BYTES_MAX: step_sums cells,
 * saturated, and the summary says it overflowed. */
static bool compute_live_wide(hbm_analysis_t *a, uint64_t total, uint64_t total_unpadded) {
  int64_t n = a->p->n_steps;
  step_sums_t live, unpadded;
  a->live = malloc(((size_t)n + 1) * sizeof *a->live);
  a->unpadded = malloc(((size_t)n + 1) * sizeof *a->unpadded);
  bool have_live = sums_init(&live, n, total),
       have_unpadded = sums_init(&unpadded, n, total_unpadded);
  if (!have_live || !have_unpadded || !a->live || !a->unpadded) {
    sums_finish(&live, 0, NULL);
    sums_finish(&unpadded, 0, NULL);
    return false;
  }
  for (size_t k = 0; k < a->n_members; k++) {
    const hbm_buffer_t *b = &a->p->buffers[member(a, k)];
    int64_t start = (b->flags & HBM_BUF_INDEFINITE) ? 0 : b->start;
    int64_t end = (b->flags & HBM_BUF_INDEFINITE) ? n : b->end;
    if (start >= end || start >= n)
      continue;
    sums_add(&live, start, b->size, false);
    sums_add(&live, end, b->size, true);
    sums_add(&unpadded, start, b->unpadded_size, false);
    sums_add(&unpadded, end, b->unpadded_size, true);
  }
  a->summary.overflowed |= sums_finish(&live, n, a->live);
  a->summary.overflowed |= sums_finish(&unpadded, n, a->unpadded);
  return true;
}

/* live[] and unpadded[]: +size where a buffer starts, -size where it ends, summed. */
static bool compute_live(hbm_analysis_t *a, member_totals_t *t) {
  if (t->size < HBM_BYTES_MAX && t->unpadded < HBM_BYTES_MAX)
    return compute_live_narrow(a, t);
  free(t->d_live); /* cells that may have wrapped: summed again, wide */
  t->d_live = NULL;
  return compute_live_wide(a, t->size, t->unpadded);
}

static bool reserve_adds(const hbm_reserve_event_t *e) {
  return e->op == HBM_RESERVE_PREALLOCATE || e->op == HBM_RESERVE_GROW || e->op == HBM_RESERVE_MAP;
}

/* Runtime: reserved[s] = sum of the reservation changes at steps <= s. */
static bool compute_reserved_runtime(hbm_analysis_t *a, int space) {
  const hbm_profile_t *p = a->p;
  int64_t n = p->n_steps;
  bool any = false;
  uint64_t total = 0;
  for (size_t i = 0; i < p->n_reserves; i++)
    if (p->reserves[i].space == space) {
      any = true;
      total = hbm__bytes_add(total, clamp_bytes(p->reserves[i].size));
    }
  if (!any || n == 0)
    return true;
  step_sums_t delta;
  a->reserved = malloc(((size_t)n + 1) * sizeof *a->reserved);
  if (!sums_init(&delta, n, total) || !a->reserved) {
    sums_finish(&delta, 0, NULL);
    return false;
  }
  for (size_t i = 0; i < p->n_reserves; i++) {
    const hbm_reserve_event_t *e = &p->reserves[i];
    if (e->space == space)
      sums_add(&delta, e->step < n ? e->step : n, e->size, !reserve_adds(e));
  }
  a->summary.overflowed |= sums_finish(&delta, n, a->reserved);
  return true;
}

/* Plan: reserved[s] = indefinite bytes + the highest temp offset+size allocated by step s. */
static bool compute_reserved_plan(hbm_analysis_t *a) {
  int64_t n = a->p->n_steps;
  if (n == 0)
    return true;
  uint64_t *top = calloc((size_t)n, sizeof *top);
  a->reserved = malloc((size_t)n * sizeof *a->reserved);
  if (!top || !a->reserved) {
    free(top);
    return false;
  }
  for (size_t k = 0; k < a->n_members; k++) {
    const hbm_buffer_t *b = &a->p->buffers[member(a, k)];
    if ((b->flags & HBM_BUF_INDEFINITE) || b->start >= b->end || b->start >= n)
      continue;
    uint64_t end = clamp_bytes(hbm__end_of(b->address, b->size));
    if (end > top[b->start])
      top[b->start] = end;
  }
  uint64_t high = 0;
  for (int64_t s = 0; s < n; s++) {
    if (top[s] > high)
      high = top[s];
    a->reserved[s] = add_bytes(a, a->summary.indefinite_bytes, high);
  }
  free(top);
  return true;
}

/* The summary's numbers at its peak step (found already): its time, unpadded bytes, padding,
 * and reserved memory there and at most. */
static void note_peak(hbm_summary_t *sum, int64_t time_ns, uint64_t unpadded,
                      uint64_t reserved_at_peak, uint64_t reserved_most) {
  sum->peak_time_ns = time_ns;
  sum->peak_unpadded_bytes = unpadded;
  sum->padding_bytes =
      sum->peak_bytes > sum->peak_unpadded_bytes ? sum->peak_bytes - sum->peak_unpadded_bytes : 0;
  sum->reserved_at_peak = reserved_at_peak;
  sum->peak_reserved_bytes = reserved_most;
  sum->heap_bytes = sum->peak_reserved_bytes;
}

static void find_peak(hbm_analysis_t *a) {
  hbm_summary_t *sum = &a->summary;
  sum->peak_step = -1;
  for (int64_t s = 0; s < a->p->n_steps; s++)
    if (sum->peak_step < 0 || a->live[s] > sum->peak_bytes) {
      sum->peak_bytes = a->live[s];
      sum->peak_step = s;
    }
  if (sum->peak_step < 0)
    return;
  uint64_t most = 0;
  for (int64_t s = 0; a->reserved && s < a->p->n_steps; s++)
    most = a->reserved[s] > most ? a->reserved[s] : most;
  note_peak(sum, a->p->step_time[sum->peak_step], a->unpadded[sum->peak_step],
            a->reserved ? a->reserved[sum->peak_step] : 0, most);
}

/* Sorting by keys copied next to the index keeps qsort free of global context. */
typedef struct sort_key {
  uint64_t primary, secondary; /* both sorted largest first */
  int64_t idx;                 /* then allocation order */
} sort_key_t;

static int sort_key_desc(const void *x, const void *y) {
  const sort_key_t *a = x, *b = y;
  if (a->primary != b->primary)
    return a->primary > b->primary ? -1 : 1;
  if (a->secondary != b->secondary)
    return a->secondary > b->secondary ? -1 : 1;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Sorts idx[0..n) by size, or by padding then size, largest first. */
static bool sort_buffers(const hbm_analysis_t *a, int64_t *idx, size_t n, bool by_padding) {
  sort_key_t *keys = malloc((n + 1) * sizeof *keys);
  if (!keys)
    return false;
  for (size_t i = 0; i < n; i++) {
    const hbm_buffer_t *b = buffer_at(a, idx[i]);
    keys[i] = (sort_key_t){by_padding ? padding_of(b) : b->size, b->size, idx[i]};
  }
  qsort(keys, n, sizeof *keys, sort_key_desc);
  for (size_t i = 0; i < n; i++)
    idx[i] = keys[i].idx;
  free(keys);
  return true;
}

/* What the buffers live at the peak (a->at_peak, n of them, by index) make of the summary:
 * bytes by category, temporaries, arguments and outputs, and the lists by size and padding. */
static bool peak_buffers_summary(hbm_analysis_t *a, size_t n) {
  hbm_summary_t *sum = &a->summary;
  a->by_size = malloc((n + 1) * sizeof *a->by_size);
  a->by_padding = malloc((n + 1) * sizeof *a->by_padding);
  if (!a->by_size || !a->by_padding)
    return false;
  for (size_t k = 0; k < n; k++) {
    const hbm_buffer_t *b = buffer_at(a, a->at_peak[k]);
    sum->category_bytes[b->category] = add_bytes(a, sum->category_bytes[b->category], b->size);
  }
  sum->n_buffers_at_peak = n;
  /* Temporaries: everything at the peak that is not program input/output, constant or
   * thread-local (XProf's peak minus indefinite, which for runtime profiles, where nothing is
   * flagged indefinite, comes from the tags). Untagged buffers count as temporaries. */
  uint64_t program = 0;
  for (size_t k = 0; k < n; k++) {
    const hbm_buffer_t *b = buffer_at(a, a->at_peak[k]);
    bool temporary = b->category == HBM_CAT_TEMPORARY || b->category == HBM_CAT_UNKNOWN;
    if ((b->flags & HBM_BUF_INDEFINITE) || !temporary)
      program = add_bytes(a, program, b->size);
  }
  sum->temporary_bytes = sum->peak_bytes > program ? sum->peak_bytes - program : 0;
  sum->argument_bytes = sum->category_bytes[HBM_CAT_PARAMETER];
  sum->output_bytes = sum->category_bytes[HBM_CAT_OUTPUT];
  /* A plan's parameter that lives out is a donated argument holding an output: XLA's
   * memory_analysis() and XProf count it in the outputs too (and as an alias). */
  for (size_t k = 0; hbm_profile_kind(a->p) == HBM_PROFILE_PLAN && k < n; k++) {
    const hbm_buffer_t *b = buffer_at(a, a->at_peak[k]);
    if (b->category == HBM_CAT_PARAMETER && (b->flags & HBM_BUF_LIVE_OUT))
      sum->output_bytes += b->size;
  }
  memcpy(a->by_size, a->at_peak, n * sizeof *a->at_peak);
  memcpy(a->by_padding, a->at_peak, n * sizeof *a->at_peak);
  return sort_buffers(a, a->by_size, n, false) && sort_buffers(a, a->by_padding, n, true);
}

static bool collect_peak_buffers(hbm_analysis_t *a) {
  hbm_summary_t *sum = &a->summary;
  size_t cells = a->n_members + 1;
  if (!(a->at_peak = malloc(cells * sizeof *a->at_peak)))
    return false;
  /* Live at the peak: in the window of the peak's step alone (which skips the blocks of
   * buffers that ended before it, when starts are in order). */
  size_t n = sum->peak_step < 0 ? 0
                                : hbm_analysis_buffers_in_window(
                                      a, sum->peak_step, sum->peak_step + 1, a->at_peak, cells);
  return peak_buffers_summary(a, n);
}

static int group_bytes_desc(const void *x, const void *y) {
  const hbm_group_total_t *a = x, *b = y;
  if (a->bytes != b->bytes)
    return a->bytes > b->bytes ? -1 : 1;
  return strcmp(a->name, b->name);
}

/* Totals at the peak by tag group, or by category name for untagged buffers. Group names
 * are interned, so equal names are equal pointers. */
static bool collect_groups(hbm_analysis_t *a) {
  size_t n_peak = a->summary.n_buffers_at_peak;
  a->groups = calloc(n_peak + 1, sizeof *a->groups);
  if (!a->groups)
    return false;
  for (size_t k = 0; k < n_peak; k++) {
    const hbm_buffer_t *b = buffer_at(a, a->at_peak[k]);
    const char *name = b->group ? b->group : hbm_category_name(b->category);
    size_t g = 0;
    while (g < a->n_groups && strcmp(a->groups[g].name, name) != 0)
      g++;
    if (g == a->n_groups)
      a->groups[a->n_groups++].name = name;
    a->groups[g].bytes = add_bytes(a, a->groups[g].bytes, b->size);
    a->groups[g].count++;
  }
  qsort(a->groups, a->n_groups, sizeof *a->groups, group_bytes_desc);
  return true;
}

hbm_group_total_t *hbm__analysis_run_groups(const hbm_analysis_t *a, size_t *n) {
  *n = a->n_run_groups;
  hbm_group_total_t *groups = malloc((a->n_run_groups + 1) * sizeof *groups);
  if (!groups) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory totalling groups");
    return NULL;
  }
  if (a->n_run_groups)
    memcpy(groups, a->run_groups, a->n_run_groups * sizeof *groups);
  qsort(groups, *n, sizeof *groups, group_bytes_desc);
  return groups;
}

typedef struct span {
  uint64_t begin, end;
} span_t;

static int span_begin_asc(const void *x, const void *y) {
  const span_t *a = x, *b = y;
  return a->begin < b->begin ? -1 : a->begin > b->begin;
}

typedef struct edge {
  uint64_t at;
  int delta;
} edge_t;

static int edge_asc(const void *x, const void *y) {
  const edge_t *a = x, *b = y;
  if (a->at != b->at)
    return a->at < b->at ? -1 : 1;
  return b->delta - a->delta; /* additions first: touching regions form one free range */
}

/* The memory reserved at `step` as disjoint sorted spans: runtime from reservation events
 * (each map/grow counts +1 over its range, each unmap/release -1), plans the temp heap. */
static span_t *reserved_spans(const hbm_analysis_t *a, int64_t step, size_t *n_out) {
  const hbm_profile_t *p = a->p;
  *n_out = 0;
  if (p->kind == HBM_PROFILE_PLAN) {
    span_t *one = malloc(sizeof *one);
    if (one) {
      one->begin = 0;
      one->end = a->reserved ? a->reserved[step] - a->summary.indefinite_bytes : 0;
      *n_out = one->end ? 1 : 0;
    }
    return one;
  }
  edge_t *edges = malloc((2 * p->n_reserves + 1) * sizeof *edges);
  span_t *spans = malloc((p->n_reserves + 1) * sizeof *spans);
  if (!edges || !spans) {
    free(edges);
    free(spans);
    return NULL;
  }
  size_t n_edges = 0;
  for (size_t i = 0; i < p->n_reserves; i++) {
    const hbm_reserve_event_t *e = &p->reserves[i];
    if (e->space != a->summary.space || e->step > step || e->size == 0)
      continue;
    int sign = reserve_adds(e) ? 1 : -1;
    edges[n_edges++] = (edge_t){e->address, sign};
    edges[n_edges++] = (edge_t){hbm__end_of(e->address, e->size), -sign};
  }
  qsort(edges, n_edges, sizeof *edges, edge_asc);
  int depth = 0;
  uint64_t open_at = 0;
  for (size_t i = 0; i < n_edges; i++) {
    int before = depth;
    depth += edges[i].delta;
    if (before <= 0 && depth > 0)
      open_at = edges[i].at;
    else if (before > 0 && depth <= 0 && edges[i].at > open_at)
      spans[(*n_out)++] = (span_t){open_at, edges[i].at};
  }
  free(edges);
  return spans;
}

/* Fragmentation at the peak: the free gaps inside reserved memory between the buffers live
 * there. 1 - largest gap / free bytes; -1 when the profile says nothing about reserved
 * memory (an RMM log, say). */
static bool compute_fragmentation(hbm_analysis_t *a) {
  hbm_summary_t *sum = &a->summary;
  sum->fragmentation_at_peak = -1.0;
  if (!a->has_reserved || sum->peak_step < 0)
    return true;
  size_t n_regions;
  span_t *regions = reserved_spans(a, sum->peak_step, &n_regions);
  span_t *used = malloc((sum->n_buffers_at_peak + 1) * sizeof *used);
  if (!regions || !used) {
    free(regions);
    free(used);
    return false;
  }
  size_t n_used = 0;
  for (size_t k = 0; k < sum->n_buffers_at_peak; k++) {
    const hbm_buffer_t *b = buffer_at(a, a->at_peak[k]);
    bool in_heap = a->p->kind != HBM_PROFILE_PLAN || !(b->flags & HBM_BUF_INDEFINITE);
    if (in_heap && b->size)
      used[n_used++] = (span_t){b->address, hbm__end_of(b->address, b->size)};
  }
  qsort(used, n_used, sizeof *used, span_begin_asc);
  uint64_t free_bytes = 0, largest = 0;
  size_t u = 0;
  for (size_t r = 0; r < n_regions; r++) {
    uint64_t cursor = regions[r].begin;
    while (u < n_used && used[u].end <= regions[r].begin)
      u++;
    for (size_t v = u; v < n_used && used[v].begin < regions[r].end; v++) {
      if (used[v].begin > cursor) {
        uint64_t gap = used[v].begin - cursor;
        free_bytes = add_bytes(a, free_bytes, gap);
        largest = gap > largest ? gap : largest;
      }
      cursor = used[v].end > cursor ? used[v].end : cursor;
    }
    if (regions[r].end > cursor) {
      uint64_t gap = regions[r].end - cursor;
      free_bytes = add_bytes(a, free_bytes, gap);
      largest = gap > largest ? gap : largest;
    }
  }
  sum->largest_free_at_peak = clamp_bytes(largest);
  sum->fragmentation_at_peak = free_bytes ? 1.0 - (double)largest / (double)free_bytes : 0.0;
  free(regions);
  free(used);
  return true;
}

/* An analysis of p's space with the profile's numbers but none of the buffers'. */
static hbm_analysis_t *analysis_new(const hbm_profile_t *p, int space) {
  hbm_analysis_t *a = calloc(1, sizeof *a);
  if (!a) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory analysing a profile");
    return NULL;
  }
  a->p = p;
  a->summary.space = space;
  a->summary.n_steps = p->n_steps;
  a->summary.limit_bytes = p->spaces[space].limit;
  for (size_t i = 0; i < p->n_ooms; i++)
    a->summary.n_oom += p->ooms[i].space == space;
  return a;
}

hbm_analysis_t *hbm_analyze(const hbm_profile_t *p, int space) {
  if (!p || space < 0 || space >= p->n_spaces) {
    hbm__error(HBM_ERR_INVALID, "memory space %d does not exist (the profile has %d)", space,
               p ? p->n_spaces : 0);
    return NULL;
  }
  if (p->digest) /* read from its index: the numbers as they were computed here */
    return hbm__digest_analyze(p->digest, p, space);
  hbm_analysis_t *a = analysis_new(p, space);
  if (!a)
    return NULL;
  member_totals_t totals = {0, 0, false, NULL};
  bool ok = collect_members(a, space, &totals) && compute_live(a, &totals);
  free(totals.d_live); /* when a step above failed */
  /* A plan that states what it reserves (XLA's allocations, read from XProf's files) is
   * taken at its word; otherwise its reservation is what its buffers reach. */
  bool stated = false;
  for (size_t i = 0; i < p->n_reserves && !stated; i++)
    stated = p->reserves[i].space == space;
  if (ok)
    ok = p->kind == HBM_PROFILE_PLAN && !stated ? compute_reserved_plan(a)
                                                : compute_reserved_runtime(a, space);
  if (ok) {
    a->has_reserved = a->reserved != NULL;
    find_peak(a);
    ok = collect_peak_buffers(a) && collect_groups(a) && compute_fragmentation(a);
  }
  if (!ok) {
    hbm_analysis_free(a);
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory analysing a profile of %lld steps",
               (long long)p->n_steps);
    return NULL;
  }
  return a;
}

typedef struct reserve_delta {
  int64_t step;
  wide_t delta;
} reserve_delta_t;

static int delta_by_step(const void *x, const void *y) {
  const reserve_delta_t *a = x, *b = y;
  return a->step < b->step ? -1 : a->step > b->step;
}

bool hbm__analysis_reserved_changes(const hbm_profile_t *p, int space, hbm__reserved_change_t **out,
                                    size_t *n_out) {
  *out = NULL;
  *n_out = 0;
  size_t n = 0;
  for (size_t i = 0; i < p->n_reserves; i++)
    n += p->reserves[i].space == space;
  if (n == 0 || p->n_steps == 0) /* as compute_reserved_runtime: no series */
    return true;
  reserve_delta_t *d = malloc(n * sizeof *d);
  hbm__reserved_change_t *c = malloc((n + 1) * sizeof *c);
  if (!d || !c) {
    free(d), free(c);
    return false;
  }
  n = 0;
  for (size_t i = 0; i < p->n_reserves; i++) {
    const hbm_reserve_event_t *e = &p->reserves[i];
    if (e->space != space || e->step >= p->n_steps) /* at or past the end: never in use */
      continue;
    wide_t v = (wide_t)clamp_bytes(e->size);
    d[n++] = (reserve_delta_t){e->step, reserve_adds(e) ? v : -v};
  }
  qsort(d, n, sizeof *d, delta_by_step);
  /* The series summed as sums_finish sums it: saturated at HBM_BYTES_MAX, never below 0. */
  wide_t run = 0;
  size_t i = 0, changes = 0;
  do { /* step 0 first (whatever changes there), then each step that has a change */
    int64_t step = changes == 0 ? 0 : d[i].step;
    for (; i < n && d[i].step <= step; i++)
      run += d[i].delta;
    uint64_t v = run <= 0 ? 0 : run >= (wide_t)HBM_BYTES_MAX ? HBM_BYTES_MAX : (uint64_t)run;
    if (changes == 0 || c[changes - 1].bytes != v)
      c[changes++] = (hbm__reserved_change_t){step, v};
  } while (i < n);
  free(d);
  *out = c;
  *n_out = changes;
  return true;
}

/* Reserved memory at `step` and at most, from its changes. */
static void reserved_at(const hbm__reserved_change_t *c, size_t n, int64_t step, uint64_t *at,
                        uint64_t *most) {
  *at = *most = 0;
  for (size_t i = 0; i < n; i++) {
    if (c[i].step <= step)
      *at = c[i].bytes;
    *most = c[i].bytes > *most ? c[i].bytes : *most;
  }
}

hbm_analysis_t *hbm__analysis_streamed(const hbm_profile_t *p, int space,
                                       const hbm__streamed_peak_t *peak,
                                       hbm__buffer_lookup_t lookup, const void *ctx,
                                       int64_t *at_peak, size_t n_at_peak,
                                       hbm_group_total_t *run_groups, size_t n_run_groups) {
  hbm_analysis_t *a = analysis_new(p, space);
  if (!a) {
    free(at_peak), free(run_groups);
    return NULL;
  }
  a->lookup = lookup;
  a->lookup_ctx = ctx;
  a->at_peak = at_peak;
  a->run_groups = run_groups;
  a->n_run_groups = n_run_groups;
  hbm_summary_t *sum = &a->summary;
  sum->n_buffers = peak->n_buffers;
  sum->peak_step = p->n_steps > 0 ? peak->step : -1;
  sum->peak_bytes = peak->bytes;
  hbm__reserved_change_t *changes;
  size_t n_changes;
  bool ok = hbm__analysis_reserved_changes(p, space, &changes, &n_changes);
  a->has_reserved = changes != NULL;
  if (ok && sum->peak_step >= 0) {
    uint64_t at, most;
    reserved_at(changes, n_changes, sum->peak_step, &at, &most);
    note_peak(sum, peak->time_ns, peak->unpadded, at, most);
  }
  free(changes);
  ok = ok && peak_buffers_summary(a, n_at_peak) && collect_groups(a) && compute_fragmentation(a);
  if (!ok) {
    hbm_analysis_free(a);
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory analysing a profile");
    return NULL;
  }
  return a;
}

void hbm_analysis_free(hbm_analysis_t *a) {
  if (!a)
    return;
  if (a->unpadded != a->live)
    free(a->unpadded);
  free(a->live);
  free(a->reserved);
  free(a->members);
  free(a->block_end);
  free(a->at_peak);
  free(a->by_size);
  free(a->by_padding);
  free(a->groups);
  free(a->run_groups);
  free(a);
}

hbm_analysis_t *hbm__analysis_stored(const hbm_profile_t *p, const hbm__digest_t *d,
                                     const hbm_summary_t *s, int64_t *at_peak, int64_t *by_size,
                                     int64_t *by_padding, hbm_group_total_t *groups,
                                     size_t n_groups, hbm_group_total_t *run_groups,
                                     size_t n_run_groups) {
  hbm_analysis_t *a = calloc(1, sizeof *a);
  if (!a) {
    free(at_peak), free(by_size), free(by_padding), free(groups), free(run_groups);
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  *a = (hbm_analysis_t){.p = p,
                        .summary = *s,
                        .at_peak = at_peak,
                        .by_size = by_size,
                        .by_padding = by_padding,
                        .groups = groups,
                        .n_groups = n_groups,
                        .run_groups = run_groups,
                        .n_run_groups = n_run_groups,
                        .digest = d};
  return a;
}

const uint64_t *hbm__analysis_series(const hbm_analysis_t *a, int which) {
  return which == 0 ? a->live : which == 1 ? a->unpadded : a->reserved;
}

const hbm_summary_t *hbm_analysis_summary(const hbm_analysis_t *a) { return &a->summary; }

static hbm_timeline_point_t point_at(const hbm_analysis_t *a, int64_t s) {
  return (hbm_timeline_point_t){.step = s,
                                .bytes = a->live[s],
                                .unpadded = a->unpadded[s],
                                .reserved = a->reserved ? a->reserved[s] : 0};
}

size_t hbm_analysis_timeline(const hbm_analysis_t *a, int64_t from, int64_t to, size_t max_points,
                             hbm_timeline_point_t *out) {
  if (a->digest)
    return hbm__digest_timeline(a->digest, a->summary.space, from, to, max_points, out);
  int64_t n = a->p->n_steps;
  from = from < 0 ? 0 : from;
  to = to > n || to < 0 ? n : to;
  if (from >= to || max_points == 0)
    return 0;
  uint64_t span = (uint64_t)(to - from);
  if (span <= max_points) {
    for (int64_t s = from; s < to; s++)
      out[s - from] = point_at(a, s);
    return (size_t)span;
  }
  /* Each bucket is represented by its highest step, so the global peak always survives. */
  for (size_t i = 0; i < max_points; i++) {
    int64_t begin = from + (int64_t)(span * i / max_points);
    int64_t end = from + (int64_t)(span * (i + 1) / max_points);
    int64_t best = begin;
    for (int64_t s = begin + 1; s < end; s++)
      if (a->live[s] > a->live[best])
        best = s;
    out[i] = point_at(a, best);
  }
  return max_points;
}

uint64_t hbm_analysis_bytes_at(const hbm_analysis_t *a, int64_t step) {
  if (a->digest)
    return hbm__digest_bytes_at(a->digest, a->summary.space, step);
  return step >= 0 && step < a->p->n_steps ? a->live[step] : 0;
}

const int64_t *hbm_analysis_buffers_at_peak(const hbm_analysis_t *a, size_t *n) {
  *n = a->summary.n_buffers_at_peak;
  return a->at_peak;
}

const int64_t *hbm_analysis_buffers_at_peak_by_size(const hbm_analysis_t *a, size_t *n) {
  *n = a->summary.n_buffers_at_peak;
  return a->by_size;
}

const int64_t *hbm_analysis_buffers_at_peak_by_padding(const hbm_analysis_t *a, size_t *n) {
  *n = a->summary.n_buffers_at_peak;
  return a->by_padding;
}

const hbm_group_total_t *hbm_analysis_groups(const hbm_analysis_t *a, size_t *n) {
  *n = a->n_groups;
  return a->groups;
}

size_t hbm_analysis_buffers_in_window(const hbm_analysis_t *a, int64_t from, int64_t to,
                                      int64_t *out, size_t cap) {
  size_t total = 0; /* a stored analysis (from an index) has no buffers but those at the peak */
  size_t n = a->n_members;
  if (a->block_end) { /* starts in order: only the members that start before `to` */
    size_t lo = 0;
    while (lo < n) {
      size_t mid = lo + (n - lo) / 2;
      if (a->p->buffers[member(a, mid)].start < to)
        lo = mid + 1;
      else
        n = mid;
    }
  }
  for (size_t k = 0; k < n; k++) {
    if (a->block_end && k % MEMBER_BLOCK == 0 && a->block_end[k / MEMBER_BLOCK] <= from) {
      k += MEMBER_BLOCK - 1; /* the whole block ended before the window */
      continue;
    }
    const hbm_buffer_t *b = &a->p->buffers[member(a, k)];
    bool meets = (b->flags & HBM_BUF_INDEFINITE) || (b->start < to && b->end > from);
    if (!meets || b->start == b->end)
      continue;
    if (total < cap)
      out[total] = member(a, k);
    total++;
  }
  return total;
}

const hbm_profile_t *hbm_analysis_profile(const hbm_analysis_t *a) { return a->p; }

/* ---- a buffer's span as shown ---- */

int64_t hbm_buffer_span_end(const hbm_buffer_t *b) {
  /* A value whose bytes outlive it (a later sharer holds them) ends before them; anything
   * outside (start, end) is not such an end. */
  return b->span_end > b->start && b->span_end < b->end ? b->span_end : b->end;
}
