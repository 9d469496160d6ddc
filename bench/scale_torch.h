/* scale_torch.h — bench_scale's big PyTorch memory snapshots: a real snapshot's trace
 * repeated, written the way Python's pickler writes torch.cuda.memory._dump_snapshot's dict
 * (protocol 4, 64 KiB frames, every string/list/dict memoized, shared objects as memo
 * references, lists and dicts in batches of 1000).
 *
 * Repetition 0 is the real trace as it is. Repetitions 1, 2, ... are the training steps that
 * would follow: the trace's balanced events (an alloc and its free_requested/free_completed,
 * a segment_alloc and its segment_free, at addresses not live at the end of the trace), each
 * a new event dict with its time moved on by the trace's length, and its own new frames list
 * of the same frame dicts. What was live before the trace or stays live after it is there
 * once, so the segments and blocks of the dump stay true. While writing, the expected peak is
 * computed as PyTorch's memory_viz computes its Active Memory Timeline (process_alloc_data in
 * torch/utils/viz/MemoryViz.js): frees of addresses it never saw allocated and active blocks of
 * the dump not allocated in the trace count from the start; the maximum is taken after each
 * alloc or free. Header-only: part of bench_scale.c. */
#ifndef HBM_BENCH_SCALE_TORCH_H
#define HBM_BENCH_SCALE_TORCH_H

#include "base/base.h"
#include "import/pickle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PW_FRAME_TARGET (64u << 10) /* Python's _FRAME_SIZE_TARGET */
#define PW_BATCH 1000               /* Python's _BATCHSIZE */

typedef struct pickle_writer {
  FILE *out;
  uint8_t *frame;
  size_t n, cap;
  uint64_t memo;       /* the next memo index */
  hbm_u64map_t ids;    /* an object (tree pointer, or interned shared string) → memo index */
  hbm_intern_t *names; /* strings shared by content: dict keys, action names */
  uint64_t written;
  bool failed;
} pickle_writer_t;

static void pw_bytes(pickle_writer_t *w, const void *p, size_t n) {
  if (w->n + n > w->cap) {
    size_t cap = (w->n + n) * 2;
    uint8_t *grown = realloc(w->frame, cap);
    if (!grown) {
      w->failed = true;
      return;
    }
    w->frame = grown;
    w->cap = cap;
  }
  memcpy(w->frame + w->n, p, n);
  w->n += n;
}

static void pw_op(pickle_writer_t *w, uint8_t op) { pw_bytes(w, &op, 1); }

static void pw_le(pickle_writer_t *w, uint64_t v, int n) {
  uint8_t b[8];
  for (int i = 0; i < n; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  pw_bytes(w, b, (size_t)n);
}

/* Python commits a frame when it reaches the target, before the next object. */
static void pw_commit(pickle_writer_t *w, bool always) {
  if (!w->n || (!always && w->n < PW_FRAME_TARGET))
    return;
  uint8_t head[9] = {0x95};
  for (int i = 0; i < 8; i++)
    head[1 + i] = (uint8_t)((uint64_t)w->n >> (8 * i));
  if (fwrite(head, 1, 9, w->out) != 9 || fwrite(w->frame, 1, w->n, w->out) != w->n)
    w->failed = true;
  w->written += 9 + w->n;
  w->n = 0;
}

static void pw_memoize(pickle_writer_t *w, uint64_t key) {
  pw_op(w, 0x94);
  if (key)
    hbm_u64map_put(&w->ids, key, w->memo);
  w->memo++;
}

/* A memo reference to an object already written; false when it was not. */
static bool pw_get(pickle_writer_t *w, uint64_t key) {
  uint64_t index;
  if (!key || !hbm_u64map_get(&w->ids, key, &index))
    return false;
  if (index < 256) {
    pw_op(w, 'h');
    pw_le(w, index, 1);
  } else {
    pw_op(w, 'j');
    pw_le(w, index, 4);
  }
  return true;
}

static void pw_int(pickle_writer_t *w, int64_t v) {
  if (v >= 0 && v < 256) {
    pw_op(w, 'K');
    pw_le(w, (uint64_t)v, 1);
  } else if (v >= 0 && v < 65536) {
    pw_op(w, 'M');
    pw_le(w, (uint64_t)v, 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    pw_op(w, 'J');
    pw_le(w, (uint64_t)v, 4);
  } else { /* LONG1: the fewest two's complement bytes */
    int n = 1;
    while (n < 8 && !(v >> (8 * n - 1) == 0 || v >> (8 * n - 1) == -1))
      n++;
    pw_op(w, 0x8a);
    pw_le(w, (uint64_t)n, 1);
    pw_le(w, (uint64_t)v, n);
  }
}

/* A string; shared ones (keys, action names) once, then by memo reference. */
static void pw_str(pickle_writer_t *w, const char *s, size_t n, bool shared) {
  uint64_t key = shared ? (uintptr_t)hbm_intern_n(w->names, s, n) : 0;
  if (pw_get(w, key))
    return;
  if (n < 256) {
    pw_op(w, 0x8c);
    pw_le(w, n, 1);
  } else {
    pw_op(w, 'X');
    pw_le(w, n, 4);
  }
  pw_bytes(w, s, n);
  pw_memoize(w, key);
}

static void pw_value(pickle_writer_t *w, const pk_value_t *v, bool fresh);

static void pw_items(pickle_writer_t *w, const pk_value_t *v, bool dict) {
  size_t n = v->as.seq.n, step = dict ? 2 : 1;
  for (size_t i = 0; i < n; i += PW_BATCH * step) {
    size_t k = (n - i) / step < PW_BATCH ? (n - i) / step : PW_BATCH;
    if (k > 1)
      pw_op(w, '(');
    for (size_t j = 0; j < k * step; j++) {
      const pk_value_t *item = v->as.seq.items[i + j];
      if (dict && j % 2 == 0 && item->kind == PK_STR)
        pw_str(w, item->as.str.s, item->as.str.n, true);
      else
        pw_value(w, item, false);
    }
    pw_op(w, k > 1 ? (dict ? 'u' : 'e') : (dict ? 's' : 'a'));
  }
}

/* A value of the source tree; containers already written go as memo references unless
 * `fresh` (a new object of the same content). */
static void pw_value(pickle_writer_t *w, const pk_value_t *v, bool fresh) {
  pw_commit(w, false);
  uint64_t key = fresh ? 0 : (uintptr_t)v;
  switch (v->kind) {
  case PK_NONE: pw_op(w, 'N'); return;
  case PK_BOOL: pw_op(w, v->as.b ? 0x88 : 0x89); return;
  case PK_INT: pw_int(w, v->as.i); return;
  case PK_FLOAT: {
    uint64_t bits;
    memcpy(&bits, &v->as.f, 8);
    pw_op(w, 'G');
    for (int i = 7; i >= 0; i--)
      pw_op(w, (uint8_t)(bits >> (8 * i)));
    return;
  }
  case PK_STR: pw_str(w, v->as.str.s, v->as.str.n, false); return;
  case PK_BYTES:
    pw_op(w, 'B');
    pw_le(w, v->as.str.n, 4);
    pw_bytes(w, v->as.str.s, v->as.str.n);
    pw_memoize(w, 0);
    return;
  case PK_TUPLE:
    if (pw_get(w, key))
      return;
    if (v->as.seq.n == 0) {
      pw_op(w, ')');
      return;
    }
    if (v->as.seq.n > 3)
      pw_op(w, '(');
    for (size_t i = 0; i < v->as.seq.n; i++)
      pw_value(w, v->as.seq.items[i], false);
    pw_op(w, v->as.seq.n > 3 ? 't' : (uint8_t)(0x84 + v->as.seq.n));
    pw_memoize(w, key);
    return;
  case PK_LIST:
  case PK_DICT:
    if (pw_get(w, key))
      return;
    pw_op(w, v->kind == PK_DICT ? '}' : ']');
    pw_memoize(w, key);
    pw_items(w, v, v->kind == PK_DICT);
    return;
  default: return;
  }
}

/* ---- the trace, repeated ---- */

typedef struct torch_gen {
  const pk_value_t *root, *trace;
  size_t n_events;
  bool *repeat;       /* per event: part of a balanced pair (written again each repetition) */
  int64_t t0, period; /* microseconds: the trace's first time and its length */
  /* memory_viz's running numbers */
  hbm_u64map_t allocated; /* address → size of the alloc it has now */
  int64_t now, peak, initially;
  bool any_action;
} torch_gen_t;

static int64_t tg_field(const pk_value_t *d, const char *key, int64_t fallback) {
  int64_t v;
  return pk_int(pk_get(d, key), &v) ? v : fallback;
}

static bool tg_is(const pk_value_t *e, const char *action) {
  const char *a = pk_str(pk_get(e, "action"));
  return a && !strcmp(a, action);
}

/* Which events repeat: an alloc, its frees, at an address not live when the trace ends;
 * a segment_alloc/map with its free/unmap likewise. */
static bool tg_mark_balanced(torch_gen_t *g, pk_value_t *const *ev) {
  hbm_u64map_t open, seg_open;
  hbm_u64map_init(&open);
  hbm_u64map_init(&seg_open);
  g->repeat = calloc(g->n_events + 1, sizeof *g->repeat);
  uint64_t *pair = calloc(g->n_events + 1, sizeof *pair); /* the alloc of each closing event */
  if (!g->repeat || !pair)
    return false;
  for (size_t i = 0; i < g->n_events; i++) {
    uint64_t addr = (uint64_t)tg_field(ev[i], "addr", -1), start;
    bool seg_open_ev = tg_is(ev[i], "segment_alloc") || tg_is(ev[i], "segment_map");
    bool seg_close = tg_is(ev[i], "segment_free") || tg_is(ev[i], "segment_unmap");
    if (tg_is(ev[i], "alloc"))
      hbm_u64map_put(&open, addr, i);
    else if (seg_open_ev)
      hbm_u64map_put(&seg_open, addr, i);
    else if ((tg_is(ev[i], "free_completed") || tg_is(ev[i], "free")) &&
             hbm_u64map_remove(&open, addr, &start))
      pair[i] = start + 1;
    else if (seg_close && hbm_u64map_remove(&seg_open, addr, &start))
      pair[i] = start + 1;
  }
  /* pairs at addresses still open at the end would collide with what stays live */
  for (size_t i = 0; i < g->n_events; i++) {
    if (!pair[i])
      continue;
    uint64_t addr = (uint64_t)tg_field(ev[i], "addr", -1);
    bool seg = tg_is(ev[i], "segment_free") || tg_is(ev[i], "segment_unmap");
    if (hbm_u64map_get(seg ? &seg_open : &open, addr, NULL))
      continue;
    g->repeat[i] = g->repeat[pair[i] - 1] = true;
    for (size_t k = pair[i]; k < i; k++) /* its free_requested */
      if (tg_is(ev[k], "free_requested") && (uint64_t)tg_field(ev[k], "addr", -1) == addr)
        g->repeat[k] = true;
  }
  free(pair);
  hbm_u64map_free(&open);
  hbm_u64map_free(&seg_open);
  return true;
}

/* memory_viz, one event at a time. */
static void tg_viz(torch_gen_t *g, const pk_value_t *e) {
  uint64_t addr = (uint64_t)tg_field(e, "addr", -1), size = (uint64_t)tg_field(e, "size", 0), was;
  if (tg_is(e, "alloc")) {
    hbm_u64map_put(&g->allocated, addr, size);
    g->now += (int64_t)size;
  } else if (tg_is(e, "free_completed") || tg_is(e, "free")) {
    if (hbm_u64map_remove(&g->allocated, addr, &was)) {
      g->now -= (int64_t)was;
    } else { /* allocated before the trace: counts from the start */
      g->initially += (int64_t)size;
      g->now -= (int64_t)size;
    }
  } else {
    return;
  }
  if (!g->any_action || g->now > g->peak)
    g->peak = g->now;
  g->any_action = true;
}

/* An event as a new dict: its keys and values, time moved on, frames a new list. */
static void tg_write_again(pickle_writer_t *w, const pk_value_t *e, int64_t shift) {
  pw_commit(w, false);
  pw_op(w, '}');
  pw_memoize(w, 0);
  pw_op(w, '(');
  for (size_t i = 0; i + 1 < e->as.seq.n; i += 2) {
    const pk_value_t *k = e->as.seq.items[i], *v = e->as.seq.items[i + 1];
    pw_str(w, k->as.str.s, k->as.str.n, true);
    if (k->kind == PK_STR && !strcmp(k->as.str.s, "time_us")) {
      pw_int(w, tg_field(e, "time_us", 0) + shift);
    } else if (k->kind == PK_STR && !strcmp(k->as.str.s, "action")) {
      pw_str(w, v->as.str.s, v->as.str.n, true);
    } else if (v->kind == PK_LIST) { /* frames: a new list of the same frame dicts */
      pw_op(w, ']');
      pw_memoize(w, 0);
      pw_items(w, v, false);
    } else {
      pw_value(w, v, true);
    }
  }
  pw_op(w, 'u');
}

static void tg_write_event(pickle_writer_t *w, const pk_value_t *e) {
  pw_commit(w, false);
  if (pw_get(w, (uintptr_t)e))
    return;
  pw_op(w, '}');
  pw_memoize(w, (uintptr_t)e);
  pw_op(w, '(');
  for (size_t i = 0; i + 1 < e->as.seq.n; i += 2) {
    const pk_value_t *k = e->as.seq.items[i], *v = e->as.seq.items[i + 1];
    pw_str(w, k->as.str.s, k->as.str.n, true);
    if (k->kind == PK_STR && !strcmp(k->as.str.s, "action"))
      pw_str(w, v->as.str.s, v->as.str.n, true);
    else
      pw_value(w, v, false);
  }
  pw_op(w, 'u');
}

/* The repeated trace as one list, in batches; stops once `target` bytes are written. */
static void tg_write_trace(pickle_writer_t *w, torch_gen_t *g, uint64_t target, int *reps) {
  size_t n;
  pk_value_t *const *ev = pk_items(g->trace, &n);
  pw_op(w, ']');
  pw_memoize(w, 0);
  size_t in_batch = 0;
  for (int k = 0;; k++) {
    for (size_t i = 0; i < n; i++) {
      if (k > 0 && !g->repeat[i])
        continue;
      if (in_batch == 0)
        pw_op(w, '(');
      if (k == 0)
        tg_write_event(w, ev[i]);
      else
        tg_write_again(w, ev[i], (int64_t)k * g->period);
      tg_viz(g, ev[i]);
      if (++in_batch == PW_BATCH) {
        pw_op(w, 'e');
        in_batch = 0;
      }
    }
    *reps = k + 1;
    if (w->written + w->n >= target || w->failed)
      break;
  }
  if (in_batch)
    pw_op(w, 'e');
}

static bool tg_is_state(const pk_value_t *block) {
  const char *s = pk_str(pk_get(block, "state"));
  return s && !strcmp(s, "active_allocated");
}

/* The active blocks of the dump that the trace leaves unallocated count from the start. */
static void tg_viz_blocks(torch_gen_t *g) {
  size_t n_segs, n_blocks;
  pk_value_t *const *segs = pk_items(pk_get(g->root, "segments"), &n_segs);
  for (size_t i = 0; i < n_segs; i++) {
    if (tg_field(segs[i], "device", 0) != 0)
      continue;
    pk_value_t *const *blocks = pk_items(pk_get(segs[i], "blocks"), &n_blocks);
    for (size_t b = 0; b < n_blocks; b++)
      if (tg_is_state(blocks[b]) &&
          !hbm_u64map_get(&g->allocated, (uint64_t)tg_field(blocks[b], "address", -1), NULL))
        g->initially += tg_field(blocks[b], "requested_size", tg_field(blocks[b], "size", 0));
  }
}

/* Writes `out`: the snapshot `src` with its (busiest) trace repeated until the file has
 * `target` bytes. *peak gets memory_viz's peak of the result, *events its trace events. */
static hbm_status_t write_torch(const char *src, const char *out, uint64_t target, uint64_t *peak,
                                uint64_t *events, int *reps) {
  char *data;
  size_t len;
  hbm_status_t st = hbm__read_file(src, &data, &len);
  if (st != HBM_OK)
    return st;
  pk_doc_t *doc = pk_parse((const uint8_t *)data, len, src, NULL);
  free(data);
  if (!doc)
    return hbm_last_status();
  torch_gen_t g = {.root = pk_root(doc)};
  hbm_u64map_init(&g.allocated);
  size_t n_traces, best = 0;
  pk_value_t *const *traces = pk_items(pk_get(g.root, "device_traces"), &n_traces);
  for (size_t i = 0; i < n_traces; i++) {
    size_t a, b;
    pk_items(traces[i], &a);
    pk_items(traces[best], &b);
    if (a > b)
      best = i;
  }
  g.trace = n_traces ? traces[best] : NULL;
  pk_value_t *const *ev = pk_items(g.trace, &g.n_events);
  if (!g.n_events) {
    pk_free(doc);
    return hbm__error(HBM_ERR_INVALID, "%s: no trace events to repeat", src);
  }
  int64_t t_last = 0;
  g.t0 = -1;
  for (size_t i = 0; i < g.n_events; i++) {
    int64_t t = tg_field(ev[i], "time_us", -1);
    if (t >= 0 && (g.t0 < 0 || t < g.t0))
      g.t0 = t;
    t_last = t > t_last ? t : t_last;
  }
  g.period = t_last - g.t0 + 1;
  pickle_writer_t w = {.out = fopen(out, "wb"), .names = hbm_intern_new()};
  hbm_u64map_init(&w.ids);
  if (!w.out || !w.names || !tg_mark_balanced(&g, ev)) {
    st = hbm__error(HBM_ERR_IO, "%s: cannot write", out);
  } else {
    fwrite("\x80\x04", 1, 2, w.out); /* PROTO, outside the frames */
    w.written = 2;
    pw_op(&w, '}');
    pw_memoize(&w, 0);
    pw_op(&w, '(');
    for (size_t i = 0; i + 1 < g.root->as.seq.n; i += 2) {
      const pk_value_t *k = g.root->as.seq.items[i], *v = g.root->as.seq.items[i + 1];
      pw_str(&w, k->as.str.s, k->as.str.n, true);
      if (k->kind == PK_STR && !strcmp(k->as.str.s, "device_traces")) {
        pw_op(&w, ']');
        pw_memoize(&w, 0);
        tg_write_trace(&w, &g, target, reps);
        pw_op(&w, 'a');
      } else {
        pw_value(&w, v, false);
      }
    }
    pw_op(&w, 'u');
    pw_op(&w, '.');
    pw_commit(&w, true);
    tg_viz_blocks(&g);
    *peak = g.any_action ? (uint64_t)(g.initially + g.peak) : 0;
    *events = 0;
    for (size_t i = 0; i < g.n_events; i++)
      *events += 1 + (uint64_t)(*reps - 1) * g.repeat[i];
    if (w.failed || fclose(w.out) != 0)
      st = hbm__error(HBM_ERR_IO, "%s: cannot write", out);
    w.out = NULL;
  }
  if (w.out)
    fclose(w.out);
  free(w.frame);
  hbm_u64map_free(&w.ids);
  hbm_intern_free(w.names);
  hbm_u64map_free(&g.allocated);
  free(g.repeat);
  pk_free(doc);
  return st;
}

#endif /* HBM_BENCH_SCALE_TORCH_H */
