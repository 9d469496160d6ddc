/* index_read.c — reads a profile's index back as a summary profile (index.h). The file is
 * mapped; nothing in it is trusted: the header must name the profile's file as it is now
 * (size, mtime, inode) and the index format, both checksums must match, and every count,
 * offset and id is checked against what is there before it is used, so a damaged or hostile
 * index is refused (the caller then reads the profile itself) and never read out of bounds.
 * Per-step values are decoded a block of 4096 steps at a time, into a cache per thread. */
#include "profile/index.h"

#include "profile/profile_internal.h"
#include "profile/trace_format.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

enum { SEC_STRINGS = 1, SEC_PROFILE, SEC_EVENTS, SEC_BUFFERS, SEC_SPACE, SEC_STEPS, SEC_BLOCKS };

typedef struct table {    /* compressed blocks of per-step values */
  const uint8_t *entries; /* count × (u64 offset, u32 compressed, u32 raw) */
  uint64_t count;
} table_t;

typedef struct level {
  const uint8_t *pairs; /* count × (u64 max, u64 step) */
  uint64_t count;
} level_t;

typedef struct space_digest {
  hbm_summary_t sum;
  const uint8_t *peak; /* 3 × n_peak u64: allocation order, by size, by padding */
  uint64_t n_peak;
  const uint8_t *groups; /* n_groups × (name, bytes, count): at the peak */
  uint64_t n_groups;
  const uint8_t *run_groups; /* the same over the whole run */
  uint64_t n_run_groups;
  bool has_reserved, padded;
  const uint8_t *changes; /* n_changes × (step, reserved) */
  uint64_t n_changes;
  level_t *levels;
  uint64_t n_levels;
  table_t live;
} space_digest_t;

struct hbm__digest {
  uint64_t serial; /* tells this digest from one mapped later at the same address */
  const uint8_t *map;
  size_t map_len;
  const char **strings;
  uint64_t n_strings;
  char *path; /* the profile's file, to read whole when a caller needs every buffer */
  hbm__whole_loader_t load_whole;
  hbm_profile_kind_t kind;
  int64_t n_steps, n_buffers;
  hbm_buffer_t *buffers; /* those kept, by index */
  int64_t *index;
  uint64_t n_kept;
  space_digest_t *spaces;
  int n_spaces;
  table_t steps;
  const uint8_t *blocks;
  uint64_t blocks_len;
};

static atomic_ullong next_serial = 1;

/* ---- a bounded cursor ---- */

typedef struct cur {
  const uint8_t *p, *end;
  bool bad;
} cur_t;

static uint64_t get_u64(cur_t *c) {
  if (c->bad || c->end - c->p < 8) {
    c->bad = true;
    return 0;
  }
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | c->p[i];
  c->p += 8;
  return v;
}

/* n records of `size` bytes, checked to be there; the cursor moves past them. */
static const uint8_t *take(cur_t *c, uint64_t n, size_t size) {
  if (c->bad || (size && n > (uint64_t)(c->end - c->p) / size)) {
    c->bad = true;
    return NULL;
  }
  const uint8_t *p = c->p;
  c->p += n * size;
  return p;
}

static uint64_t u64_at(const uint8_t *p, uint64_t i) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; k--)
    v = v << 8 | p[8 * i + k];
  return v;
}

/* A string id (0: NULL); an id past the table makes the index bad. */
static const char *string_at(const hbm__digest_t *d, cur_t *c, uint64_t id) {
  if (id > d->n_strings) {
    c->bad = true;
    return NULL;
  }
  return id ? d->strings[id - 1] : NULL;
}

/* ---- sections ---- */

static bool read_strings(hbm__digest_t *d, cur_t c) {
  d->n_strings = get_u64(&c);
  const uint8_t *offsets = take(&c, d->n_strings, 8);
  if (c.bad || !(d->strings = malloc((d->n_strings + 1) * sizeof *d->strings)))
    return false;
  size_t bytes = (size_t)(c.end - c.p);
  for (uint64_t i = 0; i < d->n_strings; i++) {
    uint64_t at = u64_at(offsets, i);
    if (at >= bytes || !memchr(c.p + at, '\0', bytes - at))
      return false; /* every string ends inside the section */
    d->strings[i] = (const char *)c.p + at;
  }
  return true;
}

static bool read_profile(hbm__digest_t *d, cur_t c, hbm_profile_t **out) {
  uint64_t kind = get_u64(&c);
  d->n_steps = (int64_t)get_u64(&c);
  d->n_buffers = (int64_t)get_u64(&c);
  const char *name = string_at(d, &c, get_u64(&c));
  if (c.bad || kind > HBM_PROFILE_PLAN || d->n_steps < 0 || d->n_buffers < 0)
    return false;
  d->kind = (hbm_profile_kind_t)kind;
  hbm_profile_t *p = *out = hbm_profile_new(d->kind, name);
  uint64_t n_meta = get_u64(&c);
  for (uint64_t i = 0; p && !c.bad && i < n_meta; i++) {
    const char *k = string_at(d, &c, get_u64(&c)), *v = string_at(d, &c, get_u64(&c));
    if (!c.bad && (!k || !v || hbm_profile_set_meta(p, k, v) != HBM_OK))
      c.bad = true;
  }
  uint64_t n_spaces = get_u64(&c);
  if (c.bad || n_spaces > (uint64_t)(c.end - c.p) / 32)
    return false;
  for (uint64_t i = 0; p && !c.bad && i < n_spaces; i++) {
    const char *sname = string_at(d, &c, get_u64(&c)), *dev = string_at(d, &c, get_u64(&c));
    int64_t color = (int64_t)get_u64(&c);
    uint64_t limit = get_u64(&c);
    if (!c.bad && (!sname || color < INT32_MIN || color > INT32_MAX ||
                   hbm_profile_add_space(p, sname, dev, (int)color, limit) < 0))
      c.bad = true;
  }
  d->n_spaces = (int)n_spaces;
  return p && !c.bad;
}

static bool read_events(hbm__digest_t *d, cur_t c, hbm_profile_t *p) {
  uint64_t n = get_u64(&c);
  for (uint64_t i = 0; !c.bad && i < n; i++) {
    hbm_oom_event_t e = {.step = (int64_t)get_u64(&c), .space = (int)(int64_t)get_u64(&c)};
    e.requested = get_u64(&c);
    e.message = string_at(d, &c, get_u64(&c));
    if (!c.bad && (e.step < 0 || e.step > d->n_steps || hbm_profile_add_oom(p, &e) != HBM_OK))
      c.bad = true;
  }
  n = get_u64(&c);
  for (uint64_t i = 0; !c.bad && i < n; i++) {
    hbm_marker_t m = {.step = (int64_t)get_u64(&c)};
    uint64_t kind = get_u64(&c);
    m.value = (int64_t)get_u64(&c);
    m.text = string_at(d, &c, get_u64(&c));
    if (c.bad || kind > HBM_MARKER_STEP_END)
      return false;
    m.kind = (hbm_marker_kind_t)kind;
    if (hbm_profile_add_marker(p, &m) != HBM_OK)
      return false;
  }
  return !c.bad;
}

/* u64 each: index, id ... flags, 7 string ids, span_end (index_write.c) */
#define BUFFER_FIELDS 18

static bool read_buffers(hbm__digest_t *d, cur_t c) {
  uint64_t n = get_u64(&c);
  const uint8_t *rows = take(&c, n, BUFFER_FIELDS * 8);
  if (c.bad || !(d->buffers = calloc(n + 1, sizeof *d->buffers)) ||
      !(d->index = malloc((n + 1) * sizeof *d->index)))
    return false;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t f[BUFFER_FIELDS];
    for (int k = 0; k < BUFFER_FIELDS; k++)
      f[k] = u64_at(rows, i * BUFFER_FIELDS + (uint64_t)k);
    hbm_buffer_t *b = &d->buffers[i];
    *b = (hbm_buffer_t){.id = f[1],
                        .address = f[2],
                        .size = f[3],
                        .unpadded_size = f[4],
                        .start = (int64_t)f[5],
                        .end = (int64_t)f[6],
                        .space = (int)f[7],
                        .category = (hbm_category_t)f[8],
                        .flags = (uint32_t)f[9],
                        .span_end = (int64_t)f[17]};
    const char **s[] = {&b->op, &b->shape, &b->group, &b->source, &b->opcode, &b->label, &b->stack};
    for (int k = 0; k < 7; k++)
      *s[k] = string_at(d, &c, f[10 + k]);
    d->index[i] = (int64_t)f[0];
    if (c.bad || f[0] >= (uint64_t)d->n_buffers || (i && d->index[i] <= d->index[i - 1]) ||
        f[7] >= (uint64_t)d->n_spaces || f[8] >= HBM_CAT_COUNT || b->start < 0 ||
        b->end < b->start || b->end > d->n_steps)
      return false;
  }
  d->n_kept = n;
  return true;
}

static int64_t kept_at(const hbm__digest_t *d, int64_t index) {
  uint64_t lo = 0, hi = d->n_kept;
  while (lo < hi) {
    uint64_t mid = (lo + hi) / 2;
    if (d->index[mid] < index)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < d->n_kept && d->index[lo] == index ? (int64_t)lo : -1;
}

static bool read_table(const hbm__digest_t *d, cur_t *c, table_t *t) {
  t->count = get_u64(c);
  t->entries = take(c, t->count, 16);
  uint64_t want =
      d->n_steps ? ((uint64_t)d->n_steps + HBM_INDEX_BLOCK_STEPS - 1) / HBM_INDEX_BLOCK_STEPS : 0;
  if (c->bad || t->count != want)
    return false;
  for (uint64_t b = 0; b < t->count; b++) {
    uint64_t at = u64_at(t->entries, 2 * b), sizes = u64_at(t->entries, 2 * b + 1);
    uint64_t clen = sizes & 0xffffffffu, rlen = sizes >> 32;
    if (at > d->blocks_len || clen > d->blocks_len - at || rlen > 8u * 10 * HBM_INDEX_BLOCK_STEPS)
      return false;
  }
  return true;
}

static void read_summary(cur_t *c, hbm_summary_t *s, int space) {
  uint64_t f[19];
  for (int i = 0; i < 19; i++)
    f[i] = get_u64(c);
  *s = (hbm_summary_t){.space = space,
                       .n_steps = (int64_t)f[0],
                       .n_buffers = (int64_t)f[1],
                       .peak_bytes = f[2],
                       .peak_step = (int64_t)f[3],
                       .peak_time_ns = (int64_t)f[4],
                       .peak_unpadded_bytes = f[5],
                       .padding_bytes = f[6],
                       .indefinite_bytes = f[7],
                       .argument_bytes = f[8],
                       .output_bytes = f[9],
                       .temporary_bytes = f[10],
                       .heap_bytes = f[11],
                       .peak_reserved_bytes = f[12],
                       .reserved_at_peak = f[13],
                       .limit_bytes = f[14],
                       .largest_free_at_peak = f[16],
                       .n_buffers_at_peak = (size_t)f[17],
                       .n_oom = (size_t)f[18]};
  memcpy(&s->fragmentation_at_peak, &f[15], sizeof s->fragmentation_at_peak);
  for (int k = 0; k < HBM_CAT_COUNT; k++)
    s->category_bytes[k] = get_u64(c);
}

static bool read_levels(const hbm__digest_t *d, cur_t *c, space_digest_t *sp) {
  sp->n_levels = get_u64(c);
  if (c->bad || sp->n_levels == 0 || sp->n_levels > 64 ||
      !(sp->levels = calloc(sp->n_levels, sizeof *sp->levels)))
    return false;
  uint64_t size = HBM_INDEX_LEVEL0;
  for (uint64_t lv = 0; lv<sp->n_levels; lv++, size = size> UINT64_MAX / 2 ? size : size * 2) {
    level_t *l = &sp->levels[lv];
    l->count = get_u64(c);
    l->pairs = take(c, l->count, 16);
    if (c->bad || l->count != ((uint64_t)d->n_steps + size - 1) / size)
      return false;
    for (uint64_t b = 0; b < l->count; b++) { /* each maximum at a step of its block */
      uint64_t step = u64_at(l->pairs, 2 * b + 1);
      if (step < b * size || step >= b * size + size || step >= (uint64_t)d->n_steps)
        return false;
    }
  }
  return true;
}

static bool read_space(hbm__digest_t *d, cur_t c) {
  uint64_t i = get_u64(&c);
  if (c.bad || i >= (uint64_t)d->n_spaces || d->spaces[i].levels)
    return false;
  space_digest_t *sp = &d->spaces[i];
  read_summary(&c, &sp->sum, (int)i);
  sp->n_peak = get_u64(&c);
  sp->peak = take(&c, 3 * sp->n_peak, 8);
  sp->n_groups = get_u64(&c);
  sp->groups = take(&c, sp->n_groups, 24);
  sp->n_run_groups = get_u64(&c);
  sp->run_groups = take(&c, sp->n_run_groups, 24);
  if (c.bad || sp->sum.n_buffers_at_peak != sp->n_peak || sp->sum.peak_step < -1 ||
      sp->sum.peak_step >= d->n_steps || sp->sum.n_steps != d->n_steps)
    return false;
  for (uint64_t k = 0; k < 3 * sp->n_peak; k++)
    if (kept_at(d, (int64_t)u64_at(sp->peak, k)) < 0)
      return false; /* the buffers at the peak are all there */
  for (uint64_t k = 0; k < sp->n_groups; k++)
    if (!string_at(d, &c, u64_at(sp->groups, 3 * k)))
      return false;
  for (uint64_t k = 0; k < sp->n_run_groups; k++)
    if (!string_at(d, &c, u64_at(sp->run_groups, 3 * k)))
      return false;
  sp->has_reserved = get_u64(&c) != 0;
  sp->n_changes = get_u64(&c);
  sp->changes = take(&c, sp->n_changes, 16);
  for (uint64_t k = 0; !c.bad && k < sp->n_changes; k++)
    if (u64_at(sp->changes, 2 * k) >= (uint64_t)d->n_steps ||
        (k && u64_at(sp->changes, 2 * k) <= u64_at(sp->changes, 2 * k - 2)))
      return false;
  sp->padded = get_u64(&c) != 0;
  return read_levels(d, &c, sp) && read_table(d, &c, &sp->live) && !c.bad;
}

/* ---- blocks ---- */

typedef struct decoded {
  uint64_t serial, block;
  int group; /* -1 steps, else the space */
  uint64_t a[HBM_INDEX_BLOCK_STEPS], b[HBM_INDEX_BLOCK_STEPS], c[HBM_INDEX_BLOCK_STEPS];
  bool ok;
} decoded_t;

static bool next_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t byte = *(*p)++;
    *v |= (uint64_t)(byte & 0x7f) << shift;
    if (!(byte & 0x80))
      return true;
  }
  return false;
}

/* Block `block` of a table, decoded (steps: time, label, op; a space: live, unpadded). */
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static void make_cache_key(void) { pthread_key_create(&cache_key, free); }

static const decoded_t *decode(const hbm__digest_t *d, int group, uint64_t block) {
  pthread_once(&cache_once, make_cache_key);
  decoded_t *cache = pthread_getspecific(cache_key); /* two blocks per thread: steps, a space */
  if (!cache && (!(cache = calloc(2, sizeof *cache)) || pthread_setspecific(cache_key, cache))) {
    free(cache);
    return NULL;
  }
  decoded_t *out = &cache[group < 0 ? 0 : 1];
  if (out->serial == d->serial && out->group == group && out->block == block)
    return out->ok ? out : NULL;
  out->serial = d->serial;
  out->group = group;
  out->block = block;
  out->ok = false;
  const table_t *t = group < 0 ? &d->steps : &d->spaces[group].live;
  if (block >= t->count)
    return NULL;
  uint64_t at = u64_at(t->entries, 2 * block), sizes = u64_at(t->entries, 2 * block + 1);
  size_t clen = sizes & 0xffffffffu, rlen = (size_t)(sizes >> 32);
  uint8_t *raw = malloc(rlen + 1);
  if (!raw || ZSTD_decompress(raw, rlen, d->blocks + at, clen) != rlen) {
    free(raw);
    return NULL;
  }
  uint64_t n = (uint64_t)d->n_steps - block * HBM_INDEX_BLOCK_STEPS;
  n = n > HBM_INDEX_BLOCK_STEPS ? HBM_INDEX_BLOCK_STEPS : n;
  const uint8_t *p = raw, *end = raw + rlen;
  bool ok = true;
  uint64_t v;
  uint64_t last = 0; /* modulo 2^64 as the writer took the deltas: a hostile one cannot overflow */
  for (uint64_t i = 0; ok && i < n; i++) { /* time, or live bytes: deltas */
    ok = next_varint(&p, end, &v);
    out->a[i] = last += (uint64_t)hbm__unzigzag(v);
  }
  bool second = group < 0 || d->spaces[group].padded;
  for (uint64_t i = 0; ok && i < n; i++) { /* label, or live - unpadded */
    ok = !second || next_varint(&p, end, &v);
    out->b[i] = !second ? out->a[i] : group < 0 ? v : out->a[i] - (uint64_t)hbm__unzigzag(v);
  }
  for (uint64_t i = 0; ok && group < 0 && i < n; i++) /* the op of the step */
    ok = next_varint(&p, end, &out->c[i]);
  free(raw);
  out->ok = ok;
  return ok ? out : NULL;
}

/* ---- answers ---- */

int64_t hbm__digest_step_count(const hbm__digest_t *d) { return d->n_steps; }
int64_t hbm__digest_buffer_count(const hbm__digest_t *d) { return d->n_buffers; }

int64_t hbm__digest_step_time(const hbm__digest_t *d, int64_t step) {
  if (step < 0 || step >= d->n_steps)
    return 0;
  const decoded_t *b = decode(d, -1, (uint64_t)step / HBM_INDEX_BLOCK_STEPS);
  return b ? (int64_t)b->a[step % HBM_INDEX_BLOCK_STEPS] : 0;
}

const char *hbm__digest_step_label(const hbm__digest_t *d, int64_t step) {
  if (step < 0 || step >= d->n_steps)
    return NULL;
  const decoded_t *b = decode(d, -1, (uint64_t)step / HBM_INDEX_BLOCK_STEPS);
  uint64_t id = b ? b->b[step % HBM_INDEX_BLOCK_STEPS] : 0;
  return id && id <= d->n_strings ? d->strings[id - 1] : NULL;
}

const char *hbm__digest_step_op(const hbm__digest_t *d, int64_t step, int *event) {
  *event = 0;
  if (step < 0 || step >= d->n_steps)
    return NULL;
  const decoded_t *b = decode(d, -1, (uint64_t)step / HBM_INDEX_BLOCK_STEPS);
  uint64_t v = b ? b->c[step % HBM_INDEX_BLOCK_STEPS] : 0, id = v / 4;
  *event = (int)(v % 4);
  return id && id <= d->n_strings ? d->strings[id - 1] : NULL;
}

const hbm_buffer_t *hbm__digest_buffer(const hbm__digest_t *d, int64_t i) {
  int64_t k = kept_at(d, i);
  return k >= 0 ? &d->buffers[k] : NULL;
}

static uint64_t live_at(const hbm__digest_t *d, int space, int64_t step, uint64_t *unpadded) {
  const decoded_t *b = decode(d, space, (uint64_t)step / HBM_INDEX_BLOCK_STEPS);
  if (unpadded)
    *unpadded = b ? b->b[step % HBM_INDEX_BLOCK_STEPS] : 0;
  return b ? b->a[step % HBM_INDEX_BLOCK_STEPS] : 0;
}

static uint64_t reserved_at(const space_digest_t *sp, int64_t step) {
  uint64_t lo = 0, hi = sp->n_changes; /* the last change at or before step */
  while (lo < hi) {
    uint64_t mid = (lo + hi) / 2;
    if ((int64_t)u64_at(sp->changes, 2 * mid) <= step)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo ? u64_at(sp->changes, 2 * (lo - 1) + 1) : 0;
}

uint64_t hbm__digest_bytes_at(const hbm__digest_t *d, int space, int64_t step) {
  return step >= 0 && step < d->n_steps ? live_at(d, space, step, NULL) : 0;
}

static hbm_timeline_point_t point_at(const hbm__digest_t *d, int space, int64_t s) {
  hbm_timeline_point_t pt = {.step = s};
  pt.bytes = live_at(d, space, s, &pt.unpadded);
  pt.reserved = d->spaces[space].has_reserved ? reserved_at(&d->spaces[space], s) : 0;
  return pt;
}

/* The first step of [begin, end) with the most live bytes: stored maxima of the aligned blocks
 * inside the range, per-step values at its ends. */
static int64_t range_max(const hbm__digest_t *d, int space, int64_t begin, int64_t end) {
  const space_digest_t *sp = &d->spaces[space];
  int64_t best = -1;
  uint64_t best_v = 0;
  for (int64_t s = begin; s < end;) {
    uint64_t v;
    int64_t at = s, size = 1;
    if (s % HBM_INDEX_LEVEL0 == 0 && s + HBM_INDEX_LEVEL0 <= end) {
      uint64_t lv = 0;
      size = HBM_INDEX_LEVEL0;
      while (lv + 1 < sp->n_levels && s % (2 * size) == 0 && s + 2 * size <= end)
        lv++, size *= 2;
      v = u64_at(sp->levels[lv].pairs, 2 * (uint64_t)(s / size));
      at = (int64_t)u64_at(sp->levels[lv].pairs, 2 * (uint64_t)(s / size) + 1);
    } else {
      v = live_at(d, space, s, NULL);
    }
    if (best < 0 || v > best_v)
      best = at, best_v = v;
    s += size;
  }
  return best;
}

size_t hbm__digest_timeline(const hbm__digest_t *d, int space, int64_t from, int64_t to,
                            size_t max_points, hbm_timeline_point_t *out) {
  int64_t n = d->n_steps;
  from = from < 0 ? 0 : from;
  to = to > n || to < 0 ? n : to;
  if (from >= to || max_points == 0 || space < 0 || space >= d->n_spaces)
    return 0;
  uint64_t span = (uint64_t)(to - from);
  if (span <= max_points) {
    for (int64_t s = from; s < to; s++)
      out[s - from] = point_at(d, space, s);
    return (size_t)span;
  }
  for (size_t i = 0; i < max_points; i++) { /* as hbm_analysis_timeline: each bucket's max */
    int64_t begin = from + (int64_t)(span * i / max_points);
    int64_t end = from + (int64_t)(span * (i + 1) / max_points);
    out[i] = point_at(d, space, range_max(d, space, begin, end));
  }
  return max_points;
}

/* n group totals (name, bytes, count) stored at g, as the analysis keeps them. */
static hbm_group_total_t *stored_groups(const hbm__digest_t *d, const uint8_t *g, uint64_t n) {
  hbm_group_total_t *groups = calloc(n + 1, sizeof *groups);
  for (uint64_t k = 0; groups && k < n; k++)
    groups[k] = (hbm_group_total_t){d->strings[u64_at(g, 3 * k) - 1], u64_at(g, 3 * k + 1),
                                    (size_t)u64_at(g, 3 * k + 2)};
  return groups;
}

hbm_analysis_t *hbm__digest_analyze(const hbm__digest_t *d, const hbm_profile_t *p, int space) {
  const space_digest_t *sp = &d->spaces[space];
  size_t n = (size_t)sp->n_peak;
  int64_t *lists[3];
  hbm_group_total_t *groups = stored_groups(d, sp->groups, sp->n_groups);
  hbm_group_total_t *run = stored_groups(d, sp->run_groups, sp->n_run_groups);
  for (int l = 0; l < 3; l++)
    lists[l] = malloc((n + 1) * sizeof *lists[l]);
  if (!groups || !run || !lists[0] || !lists[1] || !lists[2]) {
    free(groups), free(run), free(lists[0]), free(lists[1]), free(lists[2]);
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  for (int l = 0; l < 3; l++)
    for (size_t i = 0; i < n; i++)
      lists[l][i] = (int64_t)u64_at(sp->peak, (uint64_t)l * n + i);
  return hbm__analysis_stored(p, d, &sp->sum, lists[0], lists[1], lists[2], groups,
                              (size_t)sp->n_groups, run, (size_t)sp->n_run_groups);
}

void hbm__digest_free(hbm__digest_t *d) {
  if (!d)
    return;
  for (int i = 0; d->spaces && i < d->n_spaces; i++)
    free(d->spaces[i].levels);
  free(d->spaces);
  free(d->strings);
  free(d->buffers);
  free(d->index);
  free(d->path);
  if (d->map)
    munmap((void *)d->map, d->map_len);
  free(d);
}

/* ---- opening ---- */

static uint64_t le64(const uint8_t *p) { return u64_at(p, 0); }

static bool read_sections(hbm__digest_t *d, const uint8_t **sec, const size_t *sec_len,
                          cur_t *space_at, size_t spaces_seen, hbm_profile_t **out);

/* The body: sections of a type and a length each. */
static bool read_body(hbm__digest_t *d, const uint8_t *body, size_t len, hbm_profile_t **out) {
  cur_t c = {body, body + len, false};
  const uint8_t *sec[SEC_BLOCKS + 1] = {0};
  size_t sec_len[SEC_BLOCKS + 1] = {0};
  size_t spaces_seen = 0, cap = 0;
  cur_t *space_at = NULL;
  bool ok = true;
  while (ok && !c.bad && c.p < c.end) {
    uint64_t type = get_u64(&c) & 0xffffffffu, n = get_u64(&c);
    const uint8_t *data = take(&c, n, 1);
    if (c.bad || type == 0 || type > SEC_BLOCKS ||
        (type != SEC_BLOCKS && !take(&c, (8 - n % 8) % 8, 1))) {
      ok = false;
      break;
    }
    if (type == SEC_SPACE) {
      cur_t *grown = hbm__grow_array(space_at, &cap, spaces_seen + 1, sizeof *grown, 8);
      if ((ok = grown != NULL)) {
        space_at = grown;
        space_at[spaces_seen++] = (cur_t){data, data + n, false};
      }
    } else {
      sec[type] = data;
      sec_len[type] = n;
    }
  }
  ok = ok && read_sections(d, sec, sec_len, space_at, spaces_seen, out) && !c.bad;
  free(space_at);
  return ok;
}

/* The sections found, read in the order ids are defined. */
static bool read_sections(hbm__digest_t *d, const uint8_t **sec, const size_t *sec_len,
                          cur_t *space_at, size_t spaces_seen, hbm_profile_t **out) {
  if (!sec[SEC_STRINGS] || !sec[SEC_PROFILE] || !sec[SEC_EVENTS] || !sec[SEC_BUFFERS] ||
      !sec[SEC_STEPS] || !sec[SEC_BLOCKS])
    return false;
  d->blocks = sec[SEC_BLOCKS];
  d->blocks_len = sec_len[SEC_BLOCKS];
#define SECTION(t) ((cur_t){sec[t], sec[t] + sec_len[t], false})
  if (!read_strings(d, SECTION(SEC_STRINGS)) || !read_profile(d, SECTION(SEC_PROFILE), out) ||
      !read_events(d, SECTION(SEC_EVENTS), *out) || !read_buffers(d, SECTION(SEC_BUFFERS)) ||
      spaces_seen != (size_t)d->n_spaces ||
      !(d->spaces = calloc((size_t)d->n_spaces + 1, sizeof *d->spaces)))
    return false;
  for (size_t i = 0; i < spaces_seen; i++)
    if (!read_space(d, space_at[i]))
      return false;
  cur_t steps = SECTION(SEC_STEPS);
#undef SECTION
  return read_table(d, &steps, &d->steps);
}

/* The header: magic, versions, the file as it is now, the checksums. */
static bool header_matches(const uint8_t *h, size_t len, const struct stat *st) {
  uint64_t mtime = (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
  return len >= HBM_INDEX_HEADER && !memcmp(h, HBM_INDEX_MAGIC, 8) &&
         hbm__get_le32(h + 8) == HBM_INDEX_VERSION && hbm__get_le32(h + 12) == HBM_TRACE_VERSION &&
         hbm__get_le32(h + 52) == hbm__crc32(0, h, 52) && le64(h + 16) == (uint64_t)st->st_size &&
         le64(h + 24) == mtime && le64(h + 32) == (uint64_t)st->st_ino &&
         le64(h + 40) == len - HBM_INDEX_HEADER &&
         hbm__get_le32(h + 48) == hbm__crc32(0, h + HBM_INDEX_HEADER, len - HBM_INDEX_HEADER);
}

/* A summary profile from index bytes (tests and the fuzzer call it on bytes in memory). */
hbm_profile_t *hbm__index_parse(const uint8_t *data, size_t len, const struct stat *st,
                                bool mapped) {
  hbm__digest_t *d = calloc(1, sizeof *d);
  hbm_profile_t *p = NULL;
  if (!d || !header_matches(data, len, st) ||
      !read_body(d, data + HBM_INDEX_HEADER, len - HBM_INDEX_HEADER, &p)) {
    hbm_profile_free(p);
    hbm__digest_free(d);
    hbm__error(HBM_ERR_PARSE, "the index does not match its profile or is damaged");
    return NULL;
  }
  d->serial = atomic_fetch_add(&next_serial, 1);
  if (mapped) {
    d->map = data;
    d->map_len = len;
  }
  p->digest = d;
  return p;
}

/* The summary p remembers its file, to read it whole when asked (hbm__profile_load_whole). */
static hbm_profile_t *attach_file(hbm_profile_t *p, const char *path,
                                  hbm__whole_loader_t load_whole) {
  if (!(p->digest->path = strdup(path))) {
    hbm_profile_free(p);
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  p->digest->load_whole = load_whole;
  return p;
}

hbm_profile_t *hbm__index_open(const char *path, hbm__whole_loader_t load_whole) {
  struct stat st;
  char where[4200];
  if (stat(path, &st) != 0 || !hbm__index_path(path, false, where, sizeof where)) {
    hbm__error(HBM_ERR_NOT_FOUND, "%s: no index", path);
    return NULL;
  }
  hbm__mapped_t m;
  if (hbm__map_file(where, &m) != HBM_OK)
    return NULL;
  if (!m.mapped) { /* an empty file: no index */
    hbm__unmap(&m);
    hbm__error(HBM_ERR_NOT_FOUND, "%s: no index", path);
    return NULL;
  }
  hbm__map_keep(&m);
  hbm_profile_t *p = hbm__index_parse(m.data, m.len, &st, true);
  if (!p) {
    hbm__unmap(&m); /* the parse took the mapping only when it succeeded */
    return NULL;
  }
  return attach_file(p, path, load_whole);
}

hbm_profile_t *hbm__index_open_bytes(uint8_t *map, size_t len, const struct stat *st,
                                     const char *path, hbm__whole_loader_t load_whole) {
  hbm_profile_t *p = hbm__index_parse(map, len, st, true);
  if (!p) {
    munmap(map, len);
    return NULL;
  }
  return attach_file(p, path, load_whole);
}

hbm_profile_t *hbm__profile_load_whole(const hbm_profile_t *summary) {
  if (!summary->digest->path || !summary->digest->load_whole) { /* parsed from bytes */
    hbm__error(HBM_ERR_INVALID, "a profile read from its index alone has no file to read");
    return NULL;
  }
  return summary->digest->load_whole(summary->digest->path);
}

hbm_status_t hbm__need_whole(const hbm_profile_t *p, const char *what) {
  return hbm__profile_is_summary(p)
             ? hbm__error(HBM_ERR_INVALID,
                          "%s needs every buffer of the profile, and this one was read from its "
                          "index (which keeps the buffers at the peaks): read it whole",
                          what)
             : HBM_OK;
}

bool hbm__profile_is_summary(const hbm_profile_t *p) { return p && p->digest; }

bool hbm__space_holds_buffers(const hbm_profile_t *p, int space) {
  if (hbm__profile_is_summary(p)) {
    hbm_analysis_t *a = hbm_analyze(p, space);
    bool any = a && hbm_analysis_summary(a)->n_buffers > 0;
    hbm_analysis_free(a);
    return any;
  }
  for (int64_t i = 0; i < p->n_buffers; i++)
    if (p->buffers[i].space == space)
      return true;
  return false;
}

const char *hbm__profile_step_op(const hbm_profile_t *p, int64_t step, int *event) {
  *event = 0;
  return p && p->digest ? hbm__digest_step_op(p->digest, step, event) : NULL;
}

/* ---- where ---- */

/* The cache directory for indexes of logdirs that cannot take them. */
static bool cache_dir(char *out, size_t cap, bool create) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  int n = xdg && *xdg     ? snprintf(out, cap, "%s/hbm", xdg)
          : home && *home ? snprintf(out, cap, "%s/.cache/hbm", home)
                          : -1;
  if (n < 0 || (size_t)n >= cap)
    return false;
  if (create) {
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", out);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
      *slash = '\0';
      mkdir(parent, 0755);
    }
    mkdir(out, 0755);
  }
  return true;
}

static uint64_t path_hash(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++)
    h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

/* A directory we may write in and that is not marked read-only: root may write anywhere, but
 * a logdir whose mode grants no one write (as published data often is) keeps no index. */
static bool dir_takes_files(const char *dir) {
  struct stat st;
  return access(dir, W_OK) == 0 && stat(dir, &st) == 0 &&
         (st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) != 0;
}

bool hbm__index_path(const char *path, bool writable, char *out, size_t cap) {
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  int dir_len = slash ? (int)(slash - path) : 0;
  int n = slash ? snprintf(out, cap, "%.*s/.%s.hbmindex", dir_len, path, base)
                : snprintf(out, cap, ".%s.hbmindex", base);
  if (n < 0 || (size_t)n >= cap)
    return false;
  char dir[4200];
  snprintf(dir, sizeof dir, "%.*s", slash ? dir_len : 1, slash ? path : ".");
  if (writable ? dir_takes_files(dir) : access(out, R_OK) == 0)
    return true;
  char *real = realpath(path, NULL), cache[4096];
  bool ok = real && cache_dir(cache, sizeof cache, writable);
  if (ok) {
    n = snprintf(out, cap, "%s/%016llx-%s.hbmindex", cache, (unsigned long long)path_hash(real),
                 base);
    ok = n > 0 && (size_t)n < cap;
  }
  free(real);
  return ok;
}

bool hbm__index_allowed(void) {
  const char *mode = getenv("HBM_INDEX");
  return !mode || strcmp(mode, "never");
}

bool hbm__index_wanted(const char *path, int64_t load_ns) {
  const char *mode = getenv("HBM_INDEX");
  if (mode && !strcmp(mode, "never"))
    return false;
  if (mode && !strcmp(mode, "always"))
    return true;
  struct stat st;
  return load_ns >= 500000000 ||
         (stat(path, &st) == 0 && (uint64_t)st.st_size >= HBM_INDEX_MIN_BYTES);
}

uint64_t hbm__summary_min_bytes = HBM_INDEX_MIN_BYTES;

bool hbm__summary_wanted(const char *path) {
  const char *mode = getenv("HBM_INDEX");
  struct stat st;
  return (mode && !strcmp(mode, "always")) ||
         (stat(path, &st) == 0 && (uint64_t)st.st_size >= hbm__summary_min_bytes);
}
