/* diff.c — what changed between two profiles' peaks, and why (`hbm diff`, the viewer's
 * "Compare with…", the many-device summary of `hbm report`).
 *
 * Both peaks and the buffers live at them come from the analysis (analysis.c); this module
 * only pairs buffers and adds. A buffer's identity across two profiles is its tags: op,
 * source, group and category (not its size or shape: those are what may change). Among the
 * buffers of one identity, those live at each side's peak are paired first, in allocation
 * order, then the rest of A's peak with B's buffers that are not at B's peak, and so on.
 * Every buffer then contributes (its bytes at B's peak) - (its bytes at A's peak), so each
 * table's rows sum to peak(B) - peak(A) exactly, whatever the grouping. */
#include "profile/diff.h"
#include "profile/index.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TOP 15

/* One buffer of one side, with what pairing needs. */
typedef struct member {
  const hbm_buffer_t *b;
  int64_t idx;
  bool at_peak;
} member_t;

struct hbm_diff {
  const hbm_analysis_t *an[2];
  const hbm_profile_t *p[2];
  hbm_summary_t sum[2];
  int64_t change;
  hbm_diff_row_t *rows[HBM_DIFF_BY_COUNT];
  size_t n_rows[HBM_DIFF_BY_COUNT];
  size_t n_unchanged;
  uint64_t unchanged_bytes;
  size_t n_paired; /* pairs of buffers found in both (at a peak or not) */
  char **notes;
  size_t n_notes;
  hbm_intern_t *strings; /* keys made here ("a -> b" shapes) */
  bool peaks_only;       /* hbm__diff_new_peaks: only the buffers at the two peaks */
};

static const char *const reason_names[HBM_DIFF_REASON_COUNT] = {
    "new",          "gone",          "grew",           "shrank",
    "lived_longer", "lived_shorter", "only_at_b_peak", "only_at_a_peak"};
static const char *const reason_words[HBM_DIFF_REASON_COUNT] = {"new buffer",
                                                                "gone",
                                                                "grew",
                                                                "shrank",
                                                                "lived longer across the peak",
                                                                "no longer across the peak",
                                                                "only at B's peak",
                                                                "only at A's peak"};
static const char *const by_names[HBM_DIFF_BY_COUNT] = {"buffer", "op",    "source", "category",
                                                        "shape",  "group", "reason"};

const char *hbm_diff_reason_name(hbm_diff_reason_t r) {
  return (unsigned)r < HBM_DIFF_REASON_COUNT ? reason_names[r] : "?";
}

const char *hbm_diff_by_name(hbm_diff_by_t by) {
  return (unsigned)by < HBM_DIFF_BY_COUNT ? by_names[by] : "?";
}

/* ---- identity of a buffer across profiles ---- */

static int cmp_text(const char *x, const char *y) {
  if (!x || !y)
    return (x != NULL) - (y != NULL);
  return strcmp(x, y);
}

static int cmp_identity(const hbm_buffer_t *x, const hbm_buffer_t *y) {
  int c = cmp_text(x->op, y->op);
  if (!c)
    c = cmp_text(x->source, y->source);
  if (!c)
    c = cmp_text(x->group, y->group);
  if (!c)
    c = (int)x->category - (int)y->category;
  return c;
}

/* Identity, then those at the peak first, then allocation order. */
static int cmp_member(const void *xp, const void *yp) {
  const member_t *x = xp, *y = yp;
  int c = cmp_identity(x->b, y->b);
  if (c)
    return c;
  if (x->at_peak != y->at_peak)
    return x->at_peak ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The buffers live at a's peak, sorted by cmp_member (a diff of the peaks alone). */
static member_t *peak_members_of(const hbm_analysis_t *a, size_t *n_out) {
  const hbm_profile_t *p = hbm_analysis_profile(a);
  size_t n;
  const int64_t *peak = hbm_analysis_buffers_at_peak(a, &n);
  member_t *m = malloc((n + 1) * sizeof *m);
  if (!m)
    return NULL;
  for (size_t k = 0; k < n; k++)
    m[k] = (member_t){hbm_profile_buffer(p, peak[k]), peak[k], true};
  qsort(m, n, sizeof *m, cmp_member);
  *n_out = n;
  return m;
}

/* The buffers of a's space, each marked when live at the peak, sorted by cmp_member. */
static member_t *members_of(const hbm_analysis_t *a, size_t *n_out) {
  const hbm_profile_t *p = hbm_analysis_profile(a);
  int space = hbm_analysis_summary(a)->space;
  size_t n_peak;
  const int64_t *peak = hbm_analysis_buffers_at_peak(a, &n_peak);
  int64_t total = hbm_profile_buffer_count(p);
  size_t n = 0;
  for (int64_t i = 0; i < total; i++)
    n += hbm_profile_buffer(p, i)->space == space;
  member_t *m = malloc((n + 1) * sizeof *m);
  bool *marked = calloc((size_t)total + 1, sizeof *marked);
  if (!m || !marked) {
    free(m);
    free(marked);
    return NULL;
  }
  for (size_t k = 0; k < n_peak; k++)
    marked[peak[k]] = true;
  n = 0;
  for (int64_t i = 0; i < total; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    if (b->space == space)
      m[n++] = (member_t){b, i, marked[i]};
  }
  free(marked);
  qsort(m, n, sizeof *m, cmp_member);
  *n_out = n;
  return m;
}

/* ---- rows ---- */

typedef struct row_list {
  hbm_diff_row_t *rows;
  size_t n, cap;
} row_list_t;

static bool push_row(row_list_t *l, const hbm_diff_row_t *r) {
  if (l->n == l->cap) {
    hbm_diff_row_t *grown = hbm__grow_array(l->rows, &l->cap, l->n + 1, sizeof *grown, 64);
    if (!grown)
      return false;
    l->rows = grown;
  }
  l->rows[l->n++] = *r;
  return true;
}

static const char *tag_or_none(const char *s) { return s && *s ? s : "(none)"; }

static const char *op_of(const hbm_buffer_t *b) { return tag_or_none(b->op ? b->op : b->label); }

/* A pair's contribution: its bytes at B's peak less its bytes at A's peak. */
static hbm_diff_row_t pair_row(const member_t *a, const member_t *b, hbm_diff_reason_t reason) {
  hbm_diff_row_t r = {.reason = reason, .a_index = a ? a->idx : -1, .b_index = b ? b->idx : -1};
  r.a_size = a ? a->b->size : 0;
  r.b_size = b ? b->b->size : 0;
  r.a_bytes = a && a->at_peak ? a->b->size : 0;
  r.b_bytes = b && b->at_peak ? b->b->size : 0;
  r.a_count = a && a->at_peak;
  r.b_count = b && b->at_peak;
  r.delta = (int64_t)r.b_bytes - (int64_t)r.a_bytes;
  r.key = op_of(b ? b->b : a->b);
  return r;
}

typedef struct pairing {
  row_list_t out;
  size_t unchanged, paired;
  uint64_t unchanged_bytes;
  bool peaks_only; /* the members are the buffers at the peaks, no others */
} pairing_t;

/* Records one pair (or lone buffer); pairs with no change at either peak are only counted. */
static bool emit(pairing_t *pg, const member_t *a, const member_t *b) {
  bool a_peak = a && a->at_peak, b_peak = b && b->at_peak;
  pg->paired += a && b;
  if (!a_peak && !b_peak)
    return true;
  hbm_diff_reason_t reason;
  if (a_peak && b_peak)
    reason = b->b->size >= a->b->size ? HBM_DIFF_GREW : HBM_DIFF_SHRANK;
  else if (b_peak)
    reason = a ? HBM_DIFF_LIVED_LONGER : pg->peaks_only ? HBM_DIFF_ONLY_AT_B_PEAK : HBM_DIFF_NEW;
  else
    reason = b ? HBM_DIFF_LIVED_SHORTER : pg->peaks_only ? HBM_DIFF_ONLY_AT_A_PEAK : HBM_DIFF_GONE;
  hbm_diff_row_t r = pair_row(a, b, reason);
  if (r.delta == 0) {
    pg->unchanged += a_peak && b_peak;
    pg->unchanged_bytes += a_peak && b_peak ? r.a_bytes : 0;
    return true;
  }
  return push_row(&pg->out, &r);
}

static int cmp_size_then_order(const void *xp, const void *yp) {
  const member_t *x = *(const member_t *const *)xp, *y = *(const member_t *const *)yp;
  if (x->b->size != y->b->size)
    return x->b->size < y->b->size ? -1 : 1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Pairs the buffers at both peaks: those of equal size first (the same tensor, unchanged,
 * even when allocated in another order), then the rest in allocation order (a tensor that
 * grew). Marks the paired ones in used_a / used_b. */
static bool pair_at_peaks(pairing_t *pg, const member_t *a, size_t pa, const member_t *b, size_t pb,
                          bool *used_a, bool *used_b) {
  const member_t **sa = malloc((pa + 1) * sizeof *sa), **sb = malloc((pb + 1) * sizeof *sb);
  bool ok = sa && sb;
  for (size_t i = 0; ok && i < pa; i++)
    sa[i] = &a[i];
  for (size_t i = 0; ok && i < pb; i++)
    sb[i] = &b[i];
  if (ok) {
    qsort(sa, pa, sizeof *sa, cmp_size_then_order);
    qsort(sb, pb, sizeof *sb, cmp_size_then_order);
  }
  for (size_t i = 0, j = 0; ok && i < pa && j < pb;) {
    if (sa[i]->b->size != sb[j]->b->size) {
      sa[i]->b->size < sb[j]->b->size ? i++ : j++;
      continue;
    }
    used_a[sa[i] - a] = used_b[sb[j] - b] = true;
    ok = emit(pg, sa[i++], sb[j++]);
  }
  free(sa);
  free(sb);
  for (size_t i = 0, j = 0; ok && i < pa && j < pb; i++, j++) {
    while (i < pa && used_a[i])
      i++;
    while (j < pb && used_b[j])
      j++;
    if (i == pa || j == pb)
      break;
    used_a[i] = used_b[j] = true;
    ok = emit(pg, &a[i], &b[j]);
  }
  return ok;
}

/* Pairs the members of one identity: A's [a, a + na) and B's [b, b + nb), each with those at
 * the peak first. At-peak with at-peak, then the leftovers at one peak with the other side's
 * buffers not at its peak, then lone buffers. */
static bool pair_identity(pairing_t *pg, const member_t *a, size_t na, const member_t *b,
                          size_t nb) {
  size_t pa = 0, pb = 0;
  while (pa < na && a[pa].at_peak)
    pa++;
  while (pb < nb && b[pb].at_peak)
    pb++;
  bool *used_a = calloc(pa + 1, sizeof *used_a), *used_b = calloc(pb + 1, sizeof *used_b);
  bool ok = used_a && used_b && pair_at_peaks(pg, a, pa, b, pb, used_a, used_b);
  /* A's peak leftovers meet B's not-at-peak buffers (and B's the same way round). */
  size_t next_b = pb, next_a = pa;
  for (size_t i = 0; i < pa && ok; i++)
    if (!used_a[i])
      ok = emit(pg, &a[i], next_b < nb ? &b[next_b++] : NULL);
  for (size_t i = 0; i < pb && ok; i++)
    if (!used_b[i])
      ok = emit(pg, next_a < na ? &a[next_a++] : NULL, &b[i]);
  free(used_a);
  free(used_b);
  /* The rest are at neither peak: only counted as pairs. */
  size_t rest_a = na - next_a, rest_b = nb - next_b;
  pg->paired += rest_a < rest_b ? rest_a : rest_b;
  return ok;
}

/* Walks both sorted member lists identity by identity. */
static bool pair_all(const member_t *a, size_t na, const member_t *b, size_t nb, pairing_t *pg) {
  size_t i = 0, j = 0;
  while (i < na || j < nb) {
    int c = i == na ? 1 : j == nb ? -1 : cmp_identity(a[i].b, b[j].b);
    size_t ei = i, ej = j;
    if (c <= 0)
      while (ei < na && !cmp_identity(a[ei].b, a[i].b))
        ei++;
    if (c >= 0)
      while (ej < nb && !cmp_identity(b[ej].b, b[j].b))
        ej++;
    if (!pair_identity(pg, a + i, ei - i, b + j, ej - j))
      return false;
    i = ei;
    j = ej;
  }
  return true;
}

/* ---- tables: the buffer rows summed by a key and reason ---- */

static uint64_t magnitude(int64_t v) { return v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v; }

static int cmp_key_reason(const void *xp, const void *yp) {
  const hbm_diff_row_t *x = xp, *y = yp;
  int c = strcmp(x->key, y->key);
  return c ? c : (int)x->reason - (int)y->reason;
}

static int cmp_change(const void *xp, const void *yp) {
  const hbm_diff_row_t *x = xp, *y = yp;
  uint64_t mx = magnitude(x->delta), my = magnitude(y->delta);
  if (mx != my)
    return mx > my ? -1 : 1;
  if (x->delta != y->delta)
    return x->delta > y->delta ? -1 : 1;
  int c = strcmp(x->key, y->key);
  if (c)
    return c;
  if (x->reason != y->reason)
    return (int)x->reason - (int)y->reason;
  return x->b_index != y->b_index ? (x->b_index < y->b_index ? -1 : 1)
                                  : (x->a_index < y->a_index ? -1 : x->a_index > y->a_index);
}

/* The key of a buffer row in table `by`; NULL when out of memory. */
static const char *key_in(hbm_diff_t *d, const hbm_diff_row_t *r, hbm_diff_by_t by) {
  const hbm_buffer_t *a = r->a_index >= 0 ? hbm_profile_buffer(d->p[0], r->a_index) : NULL;
  const hbm_buffer_t *b = r->b_index >= 0 ? hbm_profile_buffer(d->p[1], r->b_index) : NULL;
  const hbm_buffer_t *either = b ? b : a;
  switch (by) {
  case HBM_DIFF_BY_OP: return op_of(either);
  case HBM_DIFF_BY_SOURCE: return tag_or_none(either->source);
  case HBM_DIFF_BY_CATEGORY: return hbm_category_name(either->category);
  case HBM_DIFF_BY_GROUP: return tag_or_none(either->group);
  case HBM_DIFF_BY_REASON: return reason_names[r->reason];
  case HBM_DIFF_BY_SHAPE:
    if (a && b && cmp_text(a->shape, b->shape)) {
      hbm_strbuf_t sb;
      hbm_strbuf_init(&sb);
      hbm_strbuf_printf(&sb, "%s -> %s", tag_or_none(a->shape), tag_or_none(b->shape));
      const char *k = sb.failed ? NULL : hbm_intern(d->strings, hbm_strbuf_str(&sb));
      hbm_strbuf_free(&sb);
      return k;
    }
    return tag_or_none(either->shape);
  default: return r->key;
  }
}

static void add_into(hbm_diff_row_t *into, const hbm_diff_row_t *r) {
  into->delta += r->delta;
  into->a_bytes += r->a_bytes;
  into->b_bytes += r->b_bytes;
  into->a_count += r->a_count;
  into->b_count += r->b_count;
}

/* Sums the buffer rows by (key, reason) into table `by`; rows whose sum is 0 are dropped. */
static bool build_table(hbm_diff_t *d, hbm_diff_by_t by) {
  const hbm_diff_row_t *buf = d->rows[HBM_DIFF_BY_BUFFER];
  size_t n = d->n_rows[HBM_DIFF_BY_BUFFER];
  hbm_diff_row_t *rows = malloc((n + 1) * sizeof *rows);
  if (!rows)
    return false;
  for (size_t i = 0; i < n; i++) {
    rows[i] = (hbm_diff_row_t){.reason = buf[i].reason, .a_index = -1, .b_index = -1};
    add_into(&rows[i], &buf[i]);
    if (!(rows[i].key = key_in(d, &buf[i], by))) {
      free(rows);
      return false;
    }
  }
  /* A reason table is keyed by the reason alone: the key already is it. */
  qsort(rows, n, sizeof *rows, cmp_key_reason);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (m && !cmp_key_reason(&rows[m - 1], &rows[i]))
      add_into(&rows[m - 1], &rows[i]);
    else
      rows[m++] = rows[i];
  }
  size_t kept = 0;
  for (size_t i = 0; i < m; i++)
    if (rows[i].delta)
      rows[kept++] = rows[i];
  qsort(rows, kept, sizeof *rows, cmp_change);
  d->rows[by] = rows;
  d->n_rows[by] = kept;
  return true;
}

/* ---- notes: what cannot be compared ---- */

static bool note(hbm_diff_t *d, const char *fmt, ...) HBM_PRINTF(2, 3);
static bool note(hbm_diff_t *d, const char *fmt, ...) {
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  va_list ap;
  va_start(ap, fmt);
  hbm_strbuf_vprintf(&sb, fmt, ap);
  va_end(ap);
  char **grown = realloc(d->notes, (d->n_notes + 1) * sizeof *grown);
  if (sb.failed || !grown) {
    if (grown)
      d->notes = grown;
    hbm_strbuf_free(&sb);
    return false;
  }
  d->notes = grown;
  d->notes[d->n_notes++] = sb.data;
  return true;
}

static const char *kind_words(const hbm_profile_t *p) {
  return hbm_profile_kind(p) == HBM_PROFILE_PLAN
             ? "a compile-time plan (steps are instructions in program order)"
             : "a runtime profile (steps are allocator events in time)";
}

static bool has_padding(const hbm_profile_t *p, int space) {
  for (int64_t i = 0; i < hbm_profile_buffer_count(p); i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    if (b->space == space && b->unpadded_size != b->size)
      return true;
  }
  return false;
}

static bool write_notes(hbm_diff_t *d) {
  const hbm_profile_t *a = d->p[0], *b = d->p[1];
  const hbm_space_info_t *sa = hbm_profile_space(a, d->sum[0].space);
  const hbm_space_info_t *sb = hbm_profile_space(b, d->sum[1].space);
  bool ok = true;
  if (hbm_profile_kind(a) != hbm_profile_kind(b))
    ok &= note(d,
               "A is %s, B is %s: the peaks and the buffers at them compare, the steps of the "
               "peaks and the timelines' lengths do not",
               kind_words(a), kind_words(b));
  if (cmp_text(sa->name, sb->name))
    ok &= note(d, "the memory spaces differ (A: %s on %s, B: %s on %s)", sa->name, sa->device,
               sb->name, sb->device);
  bool ra = d->sum[0].peak_reserved_bytes != 0, rb = d->sum[1].peak_reserved_bytes != 0;
  if (ra != rb)
    ok &= note(d, "reserved memory is recorded only in %s: its change is unknown", ra ? "A" : "B");
  /* a diff of the peaks knows the padding at the peaks only */
  bool pa = d->peaks_only ? d->sum[0].padding_bytes != 0 : has_padding(a, d->sum[0].space);
  bool pb = d->peaks_only ? d->sum[1].padding_bytes != 0 : has_padding(b, d->sum[1].space);
  if (pa != pb && hbm_profile_kind(a) != hbm_profile_kind(b))
    ok &= note(d, "padding is known only in %s (the other records requested sizes only)",
               pa ? "A" : "B");
  if (d->n_paired == 0 && d->sum[0].n_buffers_at_peak && d->sum[1].n_buffers_at_peak)
    ok &= note(d, "no buffer of A has a counterpart in B (no op, source, group and category in "
                  "common): every row is a new or a gone buffer");
  if (d->sum[0].n_buffers == 0 || d->sum[1].n_buffers == 0)
    ok &= note(d, "%s has no buffers in its memory space: its peak is 0",
               d->sum[0].n_buffers == 0 ? "A" : "B");
  return ok;
}

/* ---- the diff ---- */

static hbm_diff_t *fail(hbm_diff_t *d) {
  hbm_diff_free(d);
  hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory comparing two profiles");
  return NULL;
}

static hbm_diff_t *diff_new(const hbm_analysis_t *a, const hbm_analysis_t *b, bool peaks_only) {
  if (!a || !b) {
    hbm__error(HBM_ERR_INVALID, "diff: NULL analysis");
    return NULL;
  }
  if (!peaks_only && (hbm__need_whole(hbm_analysis_profile(a), "a diff") != HBM_OK ||
                      hbm__need_whole(hbm_analysis_profile(b), "a diff") != HBM_OK))
    return NULL;
  hbm_diff_t *d = calloc(1, sizeof *d);
  if (!d || !(d->strings = hbm_intern_new()))
    return fail(d);
  d->peaks_only = peaks_only;
  const hbm_analysis_t *an[2] = {a, b};
  for (int s = 0; s < 2; s++) {
    d->an[s] = an[s];
    d->p[s] = hbm_analysis_profile(an[s]);
    d->sum[s] = *hbm_analysis_summary(an[s]);
  }
  d->change = (int64_t)d->sum[1].peak_bytes - (int64_t)d->sum[0].peak_bytes;
  size_t na = 0, nb = 0;
  member_t *(*members)(const hbm_analysis_t *, size_t *) =
      peaks_only ? peak_members_of : members_of;
  member_t *ma = members(a, &na), *mb = members(b, &nb);
  pairing_t pg = {.peaks_only = peaks_only};
  bool ok = ma && mb && pair_all(ma, na, mb, nb, &pg);
  free(ma);
  free(mb);
  if (!ok) {
    free(pg.out.rows);
    return fail(d);
  }
  if (pg.out.n) /* rows is NULL when nothing changed */
    qsort(pg.out.rows, pg.out.n, sizeof *pg.out.rows, cmp_change);
  d->rows[HBM_DIFF_BY_BUFFER] = pg.out.rows;
  d->n_rows[HBM_DIFF_BY_BUFFER] = pg.out.n;
  d->n_unchanged = pg.unchanged;
  d->unchanged_bytes = pg.unchanged_bytes;
  d->n_paired = pg.paired;
  for (int by = HBM_DIFF_BY_BUFFER + 1; by < HBM_DIFF_BY_COUNT; by++)
    if (!build_table(d, (hbm_diff_by_t)by))
      return fail(d);
  if (!write_notes(d))
    return fail(d);
  return d;
}

hbm_diff_t *hbm_diff_new(const hbm_analysis_t *a, const hbm_analysis_t *b) {
  return diff_new(a, b, false);
}

hbm_diff_t *hbm__diff_new_peaks(const hbm_analysis_t *a, const hbm_analysis_t *b) {
  return diff_new(a, b, true);
}

void hbm_diff_free(hbm_diff_t *d) {
  if (!d)
    return;
  for (int by = 0; by < HBM_DIFF_BY_COUNT; by++)
    free(d->rows[by]);
  for (size_t i = 0; i < d->n_notes; i++)
    free(d->notes[i]);
  free(d->notes);
  hbm_intern_free(d->strings);
  free(d);
}

const hbm_summary_t *hbm_diff_summary(const hbm_diff_t *d, int side) {
  return side == 0 || side == 1 ? &d->sum[side] : NULL;
}

int64_t hbm_diff_change(const hbm_diff_t *d) { return d->change; }

const hbm_diff_row_t *hbm_diff_rows(const hbm_diff_t *d, hbm_diff_by_t by, size_t *n) {
  if ((unsigned)by >= HBM_DIFF_BY_COUNT) {
    *n = 0;
    return NULL;
  }
  *n = d->n_rows[by];
  return d->rows[by];
}

size_t hbm_diff_unchanged(const hbm_diff_t *d, uint64_t *bytes) {
  if (bytes)
    *bytes = d->unchanged_bytes;
  return d->n_unchanged;
}

const char *const *hbm_diff_notes(const hbm_diff_t *d, size_t *n) {
  *n = d->n_notes;
  return (const char *const *)d->notes;
}

const hbm_profile_t *hbm__diff_profile(const hbm_diff_t *d, int side) { return d->p[side]; }

/* ---- text ---- */

static const char *signed_bytes(int64_t v, char *buf, size_t cap) {
  char b[24];
  hbm_format_bytes(magnitude(v), b, sizeof b);
  snprintf(buf, cap, "%s%s", v > 0 ? "+" : v < 0 ? "-" : "", b);
  return buf;
}

static const char *label_of(const hbm_diff_t *d, const char *const labels[2], int side) {
  return labels && labels[side] ? labels[side] : hbm_profile_name(d->p[side]);
}

/* "A  LABEL: runtime, peak 6.53GiB at step 6720 (label)"; the space is named when no label
 * says which it is. */
static void text_side(const hbm_diff_t *d, const char *const labels[2], int side, FILE *out) {
  const hbm_summary_t *s = &d->sum[side];
  const hbm_profile_t *p = d->p[side];
  const hbm_space_info_t *info = hbm_profile_space(p, s->space);
  const char *step_label = s->peak_step >= 0 ? hbm_profile_step_label(p, s->peak_step) : NULL;
  char peak[32];
  fprintf(out, "  %s  %s: %s", side ? "B" : "A", label_of(d, labels, side),
          hbm_profile_kind(p) == HBM_PROFILE_PLAN ? "plan" : "runtime");
  if (!labels || !labels[side])
    fprintf(out, ", %s on %s", info->name, info->device && *info->device ? info->device : "-");
  fprintf(out, ", peak %s at step %" PRId64, hbm_format_bytes(s->peak_bytes, peak, sizeof peak),
          s->peak_step);
  if (step_label)
    fprintf(out, " (%s)", step_label);
  fputc('\n', out);
}

static void text_metric(FILE *out, const char *what, uint64_t a, uint64_t b) {
  char x[32], y[32], z[32];
  fprintf(out, "    %-22s %12s %12s %13s\n", what, hbm_format_bytes(a, x, sizeof x),
          hbm_format_bytes(b, y, sizeof y), signed_bytes((int64_t)b - (int64_t)a, z, sizeof z));
}

static void text_metrics(const hbm_diff_t *d, FILE *out) {
  const hbm_summary_t *a = &d->sum[0], *b = &d->sum[1];
  char pct[32] = "";
  if (a->peak_bytes)
    snprintf(pct, sizeof pct, " (%+.1f%%)", 100.0 * (double)d->change / (double)a->peak_bytes);
  char c[32];
  fprintf(out, "  change of the peak: %s%s\n\n", signed_bytes(d->change, c, sizeof c), pct);
  fprintf(out, "    %-22s %12s %12s %13s\n", "", "A", "B", "B - A");
  text_metric(out, "peak in use", a->peak_bytes, b->peak_bytes);
  text_metric(out, "arguments at the peak", a->argument_bytes, b->argument_bytes);
  text_metric(out, "outputs at the peak", a->output_bytes, b->output_bytes);
  text_metric(out, "temporaries", a->temporary_bytes, b->temporary_bytes);
  if (a->padding_bytes || b->padding_bytes)
    text_metric(out, "padding at the peak", a->padding_bytes, b->padding_bytes);
  if (a->peak_reserved_bytes && b->peak_reserved_bytes)
    text_metric(out, "peak reserved", a->peak_reserved_bytes, b->peak_reserved_bytes);
  fprintf(out, "    %-22s %12zu %12zu %+13lld\n", "buffers at the peak", a->n_buffers_at_peak,
          b->n_buffers_at_peak, (long long)b->n_buffers_at_peak - (long long)a->n_buffers_at_peak);
}

static void text_table(const hbm_diff_t *d, hbm_diff_by_t by, size_t top, FILE *out) {
  size_t n = d->n_rows[by];
  const hbm_diff_row_t *rows = d->rows[by];
  if (n == 0)
    return;
  static const char *const titles[HBM_DIFF_BY_COUNT] = {
      "buffer", "op / instruction", "source", "category", "shape", "group", "reason"};
  size_t shown = n < top ? n : top;
  char total[32];
  fprintf(out, "\n  by %s (%zu row%s%s; they add up to %s)\n", titles[by], n, n == 1 ? "" : "s",
          shown < n ? ", the largest shown" : "", signed_bytes(d->change, total, sizeof total));
  bool reasons = by == HBM_DIFF_BY_REASON; /* the key is the reason: said once */
  fprintf(out, "    %12s  %-28s %11s %11s%s%s\n", "change", reasons ? "reason" : "why", "A", "B",
          reasons ? "" : "  ", reasons ? "" : titles[by]);
  for (size_t i = 0; i < shown; i++) {
    char c[32], a[32], b[32];
    fprintf(out, "    %12s  %-28s %11s %11s%s%s", signed_bytes(rows[i].delta, c, sizeof c),
            reason_words[rows[i].reason], hbm_format_bytes(rows[i].a_bytes, a, sizeof a),
            hbm_format_bytes(rows[i].b_bytes, b, sizeof b), reasons ? "" : "  ",
            reasons ? "" : rows[i].key);
    if (rows[i].a_count > 1 || rows[i].b_count > 1)
      fprintf(out, "  (%zu -> %zu buffers)", rows[i].a_count, rows[i].b_count);
    fputc('\n', out);
  }
  if (shown < n) {
    int64_t rest = 0;
    for (size_t i = shown; i < n; i++)
      rest += rows[i].delta;
    char r[32];
    fprintf(out, "    %12s  ... and %zu more rows\n", signed_bytes(rest, r, sizeof r), n - shown);
  }
}

hbm_status_t hbm_diff_text(const hbm_diff_t *d, const char *const labels[2], int top, FILE *out) {
  if (!d || !out)
    return hbm__error(HBM_ERR_INVALID, "diff: NULL diff or stream");
  size_t rows = top > 0 ? (size_t)top : DEFAULT_TOP;
  fprintf(out, "hbm diff\n");
  text_side(d, labels, 0, out);
  text_side(d, labels, 1, out);
  text_metrics(d, out);
  static const hbm_diff_by_t order[] = {HBM_DIFF_BY_REASON,   HBM_DIFF_BY_OP,    HBM_DIFF_BY_SOURCE,
                                        HBM_DIFF_BY_CATEGORY, HBM_DIFF_BY_SHAPE, HBM_DIFF_BY_GROUP};
  for (size_t i = 0; i < HBM_ARRAY_LEN(order); i++)
    text_table(d, order[i], rows, out);
  if (d->n_unchanged) {
    char b[32];
    fprintf(out, "\n  unchanged: %zu buffers (%s) at both peaks with the same size\n",
            d->n_unchanged, hbm_format_bytes(d->unchanged_bytes, b, sizeof b));
  }
  if (d->change == 0 && d->n_rows[HBM_DIFF_BY_BUFFER] == 0)
    fprintf(out, "\n  the buffers at the two peaks are the same\n");
  for (size_t i = 0; i < d->n_notes; i++)
    fprintf(out, "%s%s\n", i ? "  - " : "\nnot compared:\n  - ", d->notes[i]);
  if (ferror(out))
    return hbm__error(HBM_ERR_IO, "cannot write the diff");
  return HBM_OK;
}

/* ---- JSON ---- */

static json_t *json_side(const hbm_diff_t *d, const char *const labels[2], int side) {
  const hbm_summary_t *s = &d->sum[side];
  const hbm_profile_t *p = d->p[side];
  const hbm_space_info_t *info = hbm_profile_space(p, s->space);
  json_t *o = json_pack(
      "{s:o, s:o, s:s, s:o, s:o, s:i, s:I, s:I, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "label",
      hbm__json_string(label_of(d, labels, side)), "profile", hbm__json_string(hbm_profile_name(p)),
      "kind", hbm_profile_kind(p) == HBM_PROFILE_PLAN ? "plan" : "runtime", "space",
      hbm__json_string(info->name), "device", hbm__json_string(info->device), "space_index",
      s->space, "peak_bytes", (json_int_t)s->peak_bytes, "peak_step", (json_int_t)s->peak_step,
      "peak_label",
      hbm__json_string(s->peak_step >= 0 ? hbm_profile_step_label(p, s->peak_step) : NULL),
      "peak_unpadded_bytes", (json_int_t)s->peak_unpadded_bytes, "argument_bytes",
      (json_int_t)s->argument_bytes, "output_bytes", (json_int_t)s->output_bytes, "temporary_bytes",
      (json_int_t)s->temporary_bytes, "peak_reserved_bytes", (json_int_t)s->peak_reserved_bytes,
      "n_buffers", (json_int_t)s->n_buffers, "n_buffers_at_peak", (json_int_t)s->n_buffers_at_peak);
  if (o && !s->peak_reserved_bytes)
    json_object_set_new(o, "peak_reserved_bytes", json_null());
  return o;
}

static json_t *json_row(const hbm_diff_t *d, hbm_diff_by_t by, const hbm_diff_row_t *r) {
  json_t *o = json_pack("{s:o, s:s, s:I, s:I, s:I, s:I, s:I}", "key", hbm__json_string(r->key),
                        "reason", reason_names[r->reason], "delta", (json_int_t)r->delta, "a_bytes",
                        (json_int_t)r->a_bytes, "b_bytes", (json_int_t)r->b_bytes, "a_count",
                        (json_int_t)r->a_count, "b_count", (json_int_t)r->b_count);
  if (o && by == HBM_DIFF_BY_BUFFER) {
    const hbm_buffer_t *a = r->a_index >= 0 ? hbm_profile_buffer(d->p[0], r->a_index) : NULL;
    const hbm_buffer_t *b = r->b_index >= 0 ? hbm_profile_buffer(d->p[1], r->b_index) : NULL;
    const hbm_buffer_t *e = b ? b : a;
    json_object_update_new(
        o, json_pack(
               "{s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:s}", "a_index", (json_int_t)r->a_index,
               "b_index", (json_int_t)r->b_index, "a_size", (json_int_t)r->a_size, "b_size",
               (json_int_t)r->b_size, "a_shape", hbm__json_string(a ? a->shape : NULL), "b_shape",
               hbm__json_string(b ? b->shape : NULL), "source", hbm__json_string(e->source),
               "group", hbm__json_string(e->group), "category", hbm_category_name(e->category)));
  }
  return o;
}

json_t *hbm__diff_to_json(const hbm_diff_t *d, const char *const labels[2], size_t top) {
  json_t *root = json_object(), *notes = json_array();
  json_object_set_new(root, "a", json_side(d, labels, 0));
  json_object_set_new(root, "b", json_side(d, labels, 1));
  json_object_set_new(root, "change", json_integer((json_int_t)d->change));
  json_object_set_new(root, "unchanged",
                      json_pack("{s:I, s:I}", "count", (json_int_t)d->n_unchanged, "bytes",
                                (json_int_t)d->unchanged_bytes));
  for (int by = 0; by < HBM_DIFF_BY_COUNT; by++) {
    json_t *rows = json_array();
    size_t n = d->n_rows[by], shown = top && top < n ? top : n;
    int64_t rest = 0;
    for (size_t i = 0; i < n; i++) {
      if (i < shown)
        json_array_append_new(rows, json_row(d, (hbm_diff_by_t)by, &d->rows[by][i]));
      else
        rest += d->rows[by][i].delta;
    }
    char key[32];
    snprintf(key, sizeof key, "by_%s", by_names[by]);
    json_object_set_new(root, key, rows);
    if (shown < n) {
      snprintf(key, sizeof key, "by_%s_rest", by_names[by]);
      json_object_set_new(
          root, key,
          json_pack("{s:I, s:I}", "rows", (json_int_t)(n - shown), "delta", (json_int_t)rest));
    }
  }
  for (size_t i = 0; i < d->n_notes; i++)
    json_array_append_new(notes, hbm__json_string(d->notes[i]));
  json_object_set_new(root, "notes", notes);
  return root;
}

hbm_status_t hbm_diff_json(const hbm_diff_t *d, const char *const labels[2], FILE *out) {
  if (!d || !out)
    return hbm__error(HBM_ERR_INVALID, "diff: NULL diff or stream");
  return hbm__write_json(out, hbm__diff_to_json(d, labels, 0), "diff");
}
