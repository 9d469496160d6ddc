/* torch_trace.c — one device trace of a PyTorch snapshot, event by event, into the profile
 * (steps, buffers, reservation changes, OOMs) or into a replay log (torch_internal.h).
 *
 * The profile follows memory_viz's Active Memory Timeline (MemoryViz.js; every rule in
 * docs/pytorch-snapshots.md): a block is live from its alloc to its free_completed (or "free");
 * a free_requested changes nothing. The trace is a ring buffer that usually starts after the
 * model was built, so what was live before it began is found from both ends: a free of an
 * address no alloc of the trace holds was allocated before the trace (found here, as its free
 * comes); a block active_allocated at the dump that no alloc holds at the trace's end was
 * allocated before it and never freed (found at the dump, ts_trace_dump_state); segments
 * likewise for reserved memory. That state is step 0; each event is one step after it. An
 * alloc of a held address leaves the earlier allocation live for good, as memory_viz draws
 * it (the replay log frees it instead: a log must stay replayable). Events without their
 * numbers, sizes past TS_MAX_SIZE or totals past TS_MAX_TOTAL are skipped, and they and the
 * contradictions counted. Profile steps hold the event's time in microseconds until
 * torch_snapshot.c orders the devices' steps by time and makes them nanoseconds. */
#include "import/torch_internal.h"
#include "profile/profile_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Address states while reading a trace (values of `seen`). */
enum { SEEN_LIVE = 1, SEEN_FREED = 2, SEEN_DROPPED = 3 };

int64_t ts_trace_new(ts_reader_t *r) {
  ts_trace_t *grown = hbm__grow_array(r->traces, &r->cap_traces, r->n_traces + 1, sizeof *grown, 4);
  if (!grown)
    return -1;
  r->traces = grown;
  ts_trace_t *t = &r->traces[r->n_traces];
  memset(t, 0, sizeof *t);
  hbm_u64map_init(&t->seen);
  hbm_u64map_init(&t->open);
  hbm_u64map_init(&t->seg_seen);
  hbm_u64map_init(&t->log_live);
  hbm_u64map_init(&t->streams);
  t->device = -1;
  t->sum.device = -1;
  return (int64_t)r->n_traces++;
}

void ts_trace_free(ts_trace_t *t) {
  hbm_u64map_free(&t->seen);
  hbm_u64map_free(&t->open);
  hbm_u64map_free(&t->seg_seen);
  hbm_u64map_free(&t->log_live);
  hbm_u64map_free(&t->streams);
  free(t->before);
  free(t->ooms);
  free(t->log);
}

static bool out_of_memory(ts_reader_t *r) {
  hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory reading the trace", r->name);
  return false;
}

static bool add_before(ts_trace_t *t, ev_kind_t kind, uint64_t addr, uint64_t size, uint32_t stack,
                       int64_t end_step) {
  ts_before_t *grown =
      hbm__grow_array(t->before, &t->cap_before, t->n_before + 1, sizeof *grown, 16);
  if (!grown)
    return false;
  t->before = grown;
  t->before[t->n_before++] = (ts_before_t){kind, addr, size, stack, end_step, -1};
  return true;
}

/* ---- the profile ---- */

/* A new step of trace t, holding the event's time (microseconds, -1 unknown) for now. */
static int64_t new_step(ts_reader_t *r, uint32_t t, int64_t time_us) {
  if (!r->n_runs || r->runs[r->n_runs - 1].trace != t) {
    int64_t n_buffers;
    size_t n_reserves;
    hbm__profile_buffers(r->p, &n_buffers);
    hbm__profile_reserves(r->p, &n_reserves);
    ts_run_t *grown = hbm__grow_array(r->runs, &r->cap_runs, r->n_runs + 1, sizeof *grown, 4);
    if (!grown)
      return -1;
    r->runs = grown;
    r->runs[r->n_runs++] = (ts_run_t){t, hbm_profile_step_count(r->p), n_buffers, n_reserves};
  }
  return hbm_profile_add_step(r->p, time_us, NULL);
}

static bool profile_alloc(ts_reader_t *r, uint32_t ti, const ts_event_t *e) {
  ts_trace_t *t = &r->traces[ti];
  int64_t step = new_step(r, ti, e->time_us);
  const ts_tags_t *tags = step < 0 ? NULL : ts_tags_of(r, e->stack, e->stream, false);
  if (!tags)
    return false;
  hbm_buffer_t b = {.address = e->addr,
                    .size = e->size,
                    .unpadded_size = e->size,
                    .start = step,
                    .end = -1,
                    .op = tags->op,
                    .group = tags->group,
                    .source = tags->source,
                    .label = tags->label};
  int64_t idx = hbm__profile_add_buffer_interned(r->p, &b);
  return idx >= 0 && hbm_u64map_put(&t->open, e->addr, (uint64_t)idx);
}

static bool profile_free(ts_reader_t *r, uint32_t ti, const ts_event_t *e) {
  ts_trace_t *t = &r->traces[ti];
  uint64_t idx;
  int64_t step = new_step(r, ti, e->time_us);
  if (step < 0)
    return false;
  if (hbm_u64map_remove(&t->open, e->addr, &idx))
    return hbm_profile_end_buffer(r->p, (int64_t)idx, step) == HBM_OK;
  /* allocated before the trace: its buffer is made with the state before (step 0) */
  t->before[t->n_before - 1].end_step = step;
  return true;
}

static bool profile_reserve(ts_reader_t *r, uint32_t ti, const ts_event_t *e) {
  int64_t step = new_step(r, ti, e->time_us);
  hbm_reserve_event_t re = {.step = step,
                            .op = e->kind == EV_RESERVE ? HBM_RESERVE_GROW : HBM_RESERVE_RELEASE,
                            .address = e->addr,
                            .size = e->size};
  return step >= 0 && hbm_profile_add_reserve(r->p, &re) == HBM_OK;
}

static bool profile_oom(ts_reader_t *r, uint32_t ti, const ts_event_t *e) {
  ts_trace_t *t = &r->traces[ti];
  int64_t step = new_step(r, ti, e->time_us);
  ts_oom_t *grown =
      step < 0 ? NULL : hbm__grow_array(t->ooms, &t->cap_ooms, t->n_ooms + 1, sizeof *grown, 4);
  if (!grown)
    return false;
  t->ooms = grown;
  t->ooms[t->n_ooms++] = (ts_oom_t){.step = step,
                                    .index = t->index,
                                    .stream = e->stream,
                                    .requested = e->size,
                                    .device_free = e->addr, /* its device_free (torch_sink.c) */
                                    .live = t->live_bytes,
                                    .reserved = t->net_reserved};
  return true;
}

/* ---- the replay log ---- */

/* Microseconds since t0 as nanoseconds, saturating (times come from the file). */
static int64_t us_to_ns(int64_t us, int64_t t0) {
  int64_t d = us >= t0 ? us - t0 : 0;
  return d > INT64_MAX / 1000 ? INT64_MAX / 1000 * 1000 : d * 1000;
}

static bool log_event(ts_trace_t *t, hbm_log_action_t action, const ts_event_t *e, bool before) {
  hbm_log_event_t *grown = hbm__grow_array(t->log, &t->cap_log, t->n_log + 1, sizeof *grown, 256);
  if (!grown)
    return false;
  t->log = grown;
  uint64_t stream = 0;
  if (!before && !hbm_u64map_get(&t->streams, (uint64_t)e->stream, &stream)) {
    stream = t->streams.count; /* the default stream (0) is numbered first */
    if (!hbm_u64map_put(&t->streams, (uint64_t)e->stream, stream))
      return false;
  }
  t->log[t->n_log++] = (hbm_log_event_t){
      .action = action,
      .stream = (uint32_t)stream,
      .size = e->size,
      .pointer = e->addr,
      .time_ns = !before && e->time_us > 0 ? us_to_ns(e->time_us, 0) : 0,
      .line = before ? 0 : t->index + 1}; /* its position in the trace, 1-based; 0 before it */
  return true;
}

/* Allocations of 0 bytes (and their frees) are left out: allocators refuse them. */
static bool log_apply(ts_reader_t *r, uint32_t ti, const ts_event_t *e) {
  ts_trace_t *t = &r->traces[ti];
  switch (e->kind) {
  case EV_ALLOC:
    return e->size == 0 ||
           (hbm_u64map_put(&t->log_live, e->addr, 1) && log_event(t, HBM_LOG_ALLOCATE, e, false));
  case EV_FREE:
    return !hbm_u64map_remove(&t->log_live, e->addr, NULL) || log_event(t, HBM_LOG_FREE, e, false);
  case EV_OOM: return log_event(t, HBM_LOG_ALLOCATE_FAILURE, e, false);
  default: return true;
  }
}

/* ---- events ---- */

static bool apply(ts_reader_t *r, uint32_t ti, const ts_event_t *e) {
  if (r->log_mode)
    return log_apply(r, ti, e);
  switch (e->kind) {
  case EV_ALLOC: return profile_alloc(r, ti, e);
  case EV_FREE: return profile_free(r, ti, e);
  case EV_OOM: return profile_oom(r, ti, e);
  default: return profile_reserve(r, ti, e);
  }
}

/* A second alloc of a live address: memory_viz keeps the first allocation live for good (its
 * free never comes: the address's next free ends the second), and so does the profile. The
 * replay log, which must stay a valid allocation log, frees the first there instead. */
static bool alloc_again(ts_reader_t *r, uint32_t ti, const ts_event_t *e) {
  ts_trace_t *t = &r->traces[ti];
  t->sum.inconsistent++;
  if (!r->log_mode)
    return true;
  ts_event_t free_it = *e;
  free_it.kind = EV_FREE;
  if (!apply(r, ti, &free_it))
    return false;
  t->live_bytes -= (int64_t)e->size;
  return true;
}

static bool feed_alloc(ts_reader_t *r, uint32_t ti, const ts_event_t *e) {
  ts_trace_t *t = &r->traces[ti];
  uint64_t state = 0;
  bool known = hbm_u64map_get(&t->seen, e->addr, &state);
  if (known && state == SEEN_LIVE && !alloc_again(r, ti, e))
    return false;
  if (e->size > TS_MAX_SIZE || t->live_bytes + (int64_t)e->size > TS_MAX_TOTAL) {
    t->sum.inconsistent++;
    return hbm_u64map_put(&t->seen, e->addr, SEEN_DROPPED);
  }
  if (!hbm_u64map_put(&t->seen, e->addr, SEEN_LIVE) || !apply(r, ti, e))
    return false;
  t->live_bytes += (int64_t)e->size;
  return true;
}

/* A free of an address no alloc of the trace holds: memory_viz draws an allocation of the
 * free's size live from the start of the trace to here, whether the address was never seen
 * (allocated before the trace) or freed already (a second free). The replay log takes the
 * first kind only: a second free has no allocation a valid log could give it. */
static bool free_unheld(ts_reader_t *r, uint32_t ti, const ts_event_t *e, bool known,
                        uint64_t state) {
  ts_trace_t *t = &r->traces[ti];
  if (known)
    t->sum.inconsistent++; /* freed twice, or the free of an allocation skipped */
  if (e->size > TS_MAX_SIZE || state == SEEN_DROPPED || (known && r->log_mode))
    return state != SEEN_DROPPED || hbm_u64map_put(&t->seen, e->addr, SEEN_FREED);
  if (!add_before(t, EV_ALLOC, e->addr, e->size, 0, -1))
    return false;
  if (r->log_mode) /* its allocation goes first in the log (log_before) */
    return hbm_u64map_put(&t->seen, e->addr, SEEN_FREED) &&
           (e->size == 0 || log_event(t, HBM_LOG_FREE, e, false));
  return hbm_u64map_put(&t->seen, e->addr, SEEN_FREED) && apply(r, ti, e);
}

static bool feed_free(ts_reader_t *r, uint32_t ti, const ts_event_t *e) {
  ts_trace_t *t = &r->traces[ti];
  uint64_t state = 0, size = e->size, idx;
  bool known = hbm_u64map_get(&t->seen, e->addr, &state);
  if (!known || state != SEEN_LIVE)
    return free_unheld(r, ti, e, known, state);
  if (!r->log_mode && hbm_u64map_get(&t->open, e->addr, &idx))
    size = hbm_profile_buffer(r->p, (int64_t)idx)->size; /* the alloc's own size */
  t->live_bytes -= (int64_t)size;
  return hbm_u64map_put(&t->seen, e->addr, SEEN_FREED) && apply(r, ti, e);
}

static bool feed_segment(ts_reader_t *r, uint32_t ti, const ts_event_t *e) {
  ts_trace_t *t = &r->traces[ti];
  int64_t delta = e->kind == EV_RESERVE ? (int64_t)e->size : -(int64_t)e->size;
  int64_t next = t->net_reserved + delta;
  if (e->size > TS_MAX_SIZE || next > TS_MAX_TOTAL || next < -TS_MAX_TOTAL) {
    t->sum.inconsistent++;
    return true;
  }
  bool first = !hbm_u64map_get(&t->seg_seen, e->addr, NULL);
  if (e->kind == EV_RELEASE && first && !add_before(t, EV_RESERVE, e->addr, e->size, 0, -1))
    return false;
  t->net_reserved = next;
  if (!t->any_reserve || next > t->max_reserved_prefix)
    t->max_reserved_prefix = next;
  t->any_reserve = true;
  return hbm_u64map_put(&t->seg_seen, e->addr, 1) && apply(r, ti, e);
}

bool ts_trace_feed(ts_reader_t *r, uint32_t ti, const ts_event_t *e) {
  ts_trace_t *t = &r->traces[ti];
  if (!e->numbers) { /* an event without its numbers says nothing hbm can place */
    t->sum.inconsistent++;
    return true;
  }
  t->sum.trace_events++;
  bool ok;
  switch (e->kind) {
  case EV_ALLOC: ok = feed_alloc(r, ti, e); break;
  case EV_FREE: ok = feed_free(r, ti, e); break;
  case EV_OOM: ok = apply(r, ti, e); break;
  default: ok = feed_segment(r, ti, e); break;
  }
  return ok || out_of_memory(r);
}

/* ---- at the dump: the state before the trace ---- */

/* The size memory_viz draws a block active at the dump with (its annotate_snapshot): with a
 * 'frames' key (PyTorch 2.1 on) its requested_size as it is; without, its requested_size
 * unless missing or 0, then its first history entry's real_size (2.0), then its size. */
static uint64_t drawn_size(const ts_block_t *b) {
  if (b->has_frames)
    return b->has_requested ? b->requested : b->size;
  if (b->has_requested && b->requested)
    return b->requested;
  return b->has_history ? b->history_size : b->size;
}

/* Whether the trace explains the block at `address`: profile mode, as memory_viz has it, when
 * an alloc of the trace still holds the address at its end (a block freed in the trace and
 * active at the dump was allocated again after the trace: it is drawn from the start); the
 * replay log, which must not allocate an address twice, when the trace names it at all. */
static bool explained(const ts_reader_t *r, ts_trace_t *t, uint64_t address) {
  uint64_t state = 0;
  if (!hbm_u64map_get(&t->seen, address, &state))
    return false;
  return r->log_mode || state == SEEN_LIVE;
}

/* Blocks active at the dump that no alloc of the trace explains were allocated before it and
 * are live throughout (in the profile, those pending free are not: memory_viz leaves them
 * out; the replay log, for the allocator, has them, as they hold memory). A block is
 * where memory_viz places it: at its segment's address plus the sizes of the blocks before
 * it (its 'address' key, where older files lack it or a block lacks a size). */
static bool read_blocks(ts_reader_t *r, ts_trace_t *t, const ts_segment_t *s) {
  const ts_list_t *l = s->blocks >= 0 ? &r->lists[s->blocks] : NULL;
  uint64_t at = s->address;
  bool placed = s->numbers;
  for (size_t i = 0; l && i < l->n; i++) {
    if (l->items[i] >> 32 != OBJ_BLOCK)
      continue;
    size_t id = l->items[i] & 0xffffffffu;
    const ts_block_t *b = &r->blocks[id];
    uint64_t address = placed ? at : b->address;
    bool has_address = placed || b->has_address;
    placed = placed && b->has_size && l->positions[i] == i;
    at += b->size;
    if (r->block_read[id]) {
      r->repeated++;
      continue;
    }
    r->block_read[id] = 1;
    if (!b->live || !has_address || !b->has_size)
      continue;
    t->sum.allocated_end = hbm__bytes_add(t->sum.allocated_end, b->size);
    if ((b->pending && !r->log_mode) || explained(r, t, address))
      continue;
    if (!add_before(t, EV_ALLOC, address, drawn_size(b), b->stack, -1) ||
        !hbm_u64map_put(&t->seen, address, SEEN_LIVE))
      return false;
  }
  return true;
}

static bool read_segments(ts_reader_t *r, ts_trace_t *t, int device) {
  const pk_ref_t *segs = &r->root_segments;
  const ts_list_t *l =
      segs->kind == PK_OBJ && segs->tag == OBJ_LIST ? &r->lists[segs->as.obj] : NULL;
  if (!r->seg_read && (!(r->seg_read = calloc(r->n_segments + 1, 1)) ||
                       !(r->block_read = calloc(r->n_blocks + 1, 1))))
    return false;
  for (size_t i = 0; l && i < l->n; i++) {
    if (l->items[i] >> 32 != OBJ_SEGMENT)
      continue;
    size_t id = l->items[i] & 0xffffffffu;
    const ts_segment_t *s = &r->segments[id];
    if (s->device != device)
      continue;
    if (r->seg_read[id]) { /* with the device read before (a block read once: the same) */
      r->repeated++;
      continue;
    }
    r->seg_read[id] = 1;
    if (s->numbers) {
      t->sum.reserved_end = hbm__bytes_add(t->sum.reserved_end, s->total_size);
      if (!hbm_u64map_get(&t->seg_seen, s->address, NULL) &&
          !add_before(t, EV_RESERVE, s->address, s->total_size, 0, -1))
        return false;
    }
    if (!read_blocks(r, t, s))
      return false;
  }
  return true;
}

/* Makes the reservations before the trace add up to what the segments at the dump need
 * (they differ when expandable segments map pages inside a segment the trace never saw). */
static bool balance_reserved(ts_trace_t *t) {
  uint64_t before = 0; /* saturating: a hostile file's segments may add up past 2^64 */
  for (size_t i = 0; i < t->n_before; i++)
    if (t->before[i].kind == EV_RESERVE)
      before = hbm__bytes_add(before, t->before[i].size);
  /* held at TS_MAX_TOTAL, and net_reserved is within ±TS_MAX_TOTAL: no overflow */
  int64_t end =
      t->sum.reserved_end > (uint64_t)TS_MAX_TOTAL ? TS_MAX_TOTAL : (int64_t)t->sum.reserved_end;
  int64_t diff = end - t->net_reserved;
  uint64_t want = diff < 0 ? 0 : (uint64_t)diff; /* releasing more than it held: none */
  if (want == before)
    return true;
  /* one reservation (or release) at address 0 absorbs the difference */
  ev_kind_t kind = want > before ? EV_RESERVE : EV_RELEASE;
  return add_before(t, kind, 0, want > before ? want - before : before - want, 0, -1);
}

/* Before-trace allocations past TS_MAX_TOTAL in all are skipped (hostile files only), and
 * reservations past it; counted. Then the most reserved over the trace. */
static void bound_before(ts_trace_t *t) {
  int64_t live = 0, reserved = 0, peak = 0;
  size_t kept = 0;
  for (size_t i = 0; i < t->n_before; i++) {
    ts_before_t *b = &t->before[i];
    int64_t *sum = b->kind == EV_ALLOC ? &live : &reserved;
    int64_t size = b->size > TS_MAX_SIZE ? 0 : (int64_t)b->size; /* negated only in range */
    int64_t delta = b->kind == EV_RELEASE ? -size : size;
    if (b->size > TS_MAX_SIZE || *sum + delta > TS_MAX_TOTAL || *sum + delta < -TS_MAX_TOTAL) {
      t->sum.inconsistent++;
      continue;
    }
    *sum += delta;
    if (b->kind != EV_ALLOC && reserved > peak)
      peak = reserved;
    t->before[kept++] = *b;
  }
  t->n_before = kept;
  if (t->any_reserve && reserved + t->max_reserved_prefix > peak)
    peak = reserved + t->max_reserved_prefix;
  t->sum.peak_reserved = (uint64_t)peak;
  t->sum.before_trace = 0;
  for (size_t i = 0; i < t->n_before; i++)
    t->sum.before_trace += t->before[i].kind == EV_ALLOC;
}

/* Bytes of the before-trace allocations still live at `step`, and reserved before it. */
static void before_at(const ts_trace_t *t, int64_t step, int64_t *live, int64_t *reserved) {
  *live = *reserved = 0;
  for (size_t i = 0; i < t->n_before; i++) {
    const ts_before_t *b = &t->before[i];
    if (b->kind == EV_ALLOC && (b->end_step < 0 || b->end_step > step))
      *live += (int64_t)b->size;
    else if (b->kind != EV_ALLOC)
      *reserved += b->kind == EV_RESERVE ? (int64_t)b->size : -(int64_t)b->size;
  }
}

static bool add_oom(ts_reader_t *r, const ts_trace_t *t, const ts_oom_t *o, int device, int space) {
  int64_t before_live, before_reserved;
  before_at(t, o->step, &before_live, &before_reserved);
  int64_t live = before_live + o->live, reserved = before_reserved + o->reserved;
  int64_t unallocated = reserved - live;
  char req[32], freeb[32], alloc[32], res[32], unalloc[32], message[1024];
  snprintf(message, sizeof message,
           "CUDA out of memory (recorded in the PyTorch snapshot, trace event %lld): tried to "
           "allocate %s (%llu bytes) on cuda:%d, stream %lld. The device had %s free. PyTorch "
           "had %s allocated and %s reserved, %s of it reserved but unallocated.%s",
           (long long)o->index, hbm_format_bytes(o->requested, req, sizeof req),
           (unsigned long long)o->requested, device, (long long)o->stream,
           hbm_format_bytes(o->device_free, freeb, sizeof freeb),
           hbm_format_bytes((uint64_t)(live > 0 ? live : 0), alloc, sizeof alloc),
           hbm_format_bytes((uint64_t)(reserved > 0 ? reserved : 0), res, sizeof res),
           hbm_format_bytes((uint64_t)(unallocated > 0 ? unallocated : 0), unalloc, sizeof unalloc),
           unallocated > 0 && (uint64_t)unallocated >= o->requested
               ? " Reserved but unallocated memory could have held the request: fragmentation; "
                 "try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."
               : "");
  hbm_oom_event_t oom = {
      .step = o->step, .space = space, .requested = o->requested, .message = message};
  return hbm_profile_add_oom(r->p, &oom) == HBM_OK;
}

/* The state before the trace as buffers and reservations at step 0 (moved in front of the
 * trace's own by torch_snapshot.c), and the OOM events with their texts. */
static bool profile_before(ts_reader_t *r, ts_trace_t *t, int device, int space) {
  for (size_t i = 0; i < t->n_before; i++) {
    ts_before_t *b = &t->before[i];
    if (b->kind != EV_ALLOC) {
      hbm_reserve_event_t re = {.step = 0,
                                .space = space,
                                .op =
                                    b->kind == EV_RESERVE ? HBM_RESERVE_GROW : HBM_RESERVE_RELEASE,
                                .address = b->addr,
                                .size = b->size};
      if (hbm_profile_add_reserve(r->p, &re) != HBM_OK)
        return false;
      continue;
    }
    const ts_tags_t *tags = ts_tags_of(r, b->stack, 0, true);
    if (!tags)
      return false;
    hbm_buffer_t buf = {.address = b->addr,
                        .size = b->size,
                        .unpadded_size = b->size,
                        .start = 0,
                        .end = b->end_step,
                        .space = space,
                        .op = tags->op,
                        .group = tags->group,
                        .source = tags->source,
                        .label = tags->label};
    if ((b->buffer = hbm__profile_add_buffer_interned(r->p, &buf)) < 0)
      return false;
  }
  for (size_t i = 0; i < t->n_ooms; i++)
    if (!add_oom(r, t, &t->ooms[i], device, space))
      return false;
  return true;
}

/* The replay log: the allocations before the trace come first. */
static bool log_before(ts_trace_t *t) {
  size_t n = 0;
  for (size_t i = 0; i < t->n_before; i++)
    n += t->before[i].kind == EV_ALLOC && t->before[i].size > 0;
  if (!n)
    return true;
  hbm_log_event_t *grown = hbm__grow_array(t->log, &t->cap_log, t->n_log + n, sizeof *grown, 256);
  if (!grown)
    return false;
  t->log = grown;
  memmove(t->log + n, t->log, t->n_log * sizeof *t->log);
  size_t k = 0;
  for (size_t i = 0; i < t->n_before; i++)
    if (t->before[i].kind == EV_ALLOC && t->before[i].size > 0)
      t->log[k++] = (hbm_log_event_t){
          .action = HBM_LOG_ALLOCATE, .size = t->before[i].size, .pointer = t->before[i].addr};
  t->n_log += n;
  return true;
}

bool ts_trace_dump_state(ts_reader_t *r, ts_trace_t *t, int device) {
  t->device = device;
  t->sum.device = device;
  bool ok = read_segments(r, t, device) && balance_reserved(t);
  if (ok)
    bound_before(t);
  return ok || out_of_memory(r);
}

bool ts_trace_emit_before(ts_reader_t *r, ts_trace_t *t, int space) {
  bool ok = r->log_mode ? log_before(t) : profile_before(r, t, t->device, space);
  return ok || out_of_memory(r);
}
