/* torch_internal.h — what the parts of the PyTorch snapshot reader share:
 *   torch_sink.c      the pickle sink: each dict and list of the snapshot, as the streaming
 *                     pickle reader completes it, becomes a frame, a stack, an event, a block,
 *                     a segment or a list record (nothing else is kept);
 *   torch_trace.c     each device trace, event by event, into the profile (or a replay log);
 *   torch_tags.c      a buffer's tags from its stack (the innermost frame of the user's code);
 *   torch_snapshot.c  the entry points and what needs the whole file: which trace is which
 *                     device, the state before the traces began, spaces, metadata.
 * Ids are indices into the reader's tables; 0 is "none" for stacks. */
#ifndef HBM_IMPORT_TORCH_INTERNAL_H
#define HBM_IMPORT_TORCH_INTERNAL_H

#include "import/pickle.h"
#include "import/torch_snapshot.h"

#define TS_MAX_DEVICES 1024
#define TS_MAX_STACK_FRAMES 64 /* frames shown in a buffer's stack; the rest are counted */
#define TS_CALLER_FRAMES 4     /* user frames above the op that name its group */
#define TS_MAX_FRAME_TEXT 512  /* bytes of a frame's file or function name used */
#define TS_MAX_STACK_TEXT 8192 /* bytes of a buffer's stack text */
/* Bounds that keep every sum of a hostile file inside int64 (the analysis sums sizes): no
 * block above 1 PiB, no total above 1 EiB. Real snapshots are far below both. */
#define TS_MAX_SIZE ((uint64_t)1 << 50)
#define TS_MAX_TOTAL ((int64_t)1 << 60)

/* Tags of the PK_OBJ refs the sink gives the pickle reader. */
enum {
  OBJ_OTHER = 1, /* nothing hbm reads */
  OBJ_FRAME,     /* id: frame */
  OBJ_STACK,     /* id: stack (0: an empty list) */
  OBJ_EVENT,     /* id: pending event */
  OBJ_BLOCK,     /* id: block */
  OBJ_SEGMENT,   /* id: segment */
  OBJ_LIST,      /* id: list record */
  OBJ_TRACE,     /* id: trace (a list of events) */
  OBJ_SETTINGS,  /* allocator_settings; id: its PYTORCH_CUDA_ALLOC_CONF (interned), 0 none */
  OBJ_ROOT,      /* the snapshot's dict */
  OBJ_HISTORY    /* id: a block's history entry (PyTorch 2.0: real_size, frames) */
};

typedef enum ev_kind { EV_ALLOC, EV_FREE, EV_RESERVE, EV_RELEASE, EV_OOM } ev_kind_t;

typedef struct ts_frame {
  const char *file, *name; /* interned, at most TS_MAX_FRAME_TEXT bytes */
  int file_len, name_len;
  int64_t line;
} ts_frame_t;

typedef struct ts_stack {
  size_t first; /* into the reader's frame-id pool */
  uint32_t n;   /* frames */
} ts_stack_t;

/* One trace event, as read. */
typedef struct ts_event {
  ev_kind_t kind;
  bool numbers;  /* addr and size were there */
  bool consumed; /* already fed to a trace (a dict used twice counts once) */
  uint64_t addr, size;
  int64_t stream, time_us;
  uint32_t stack;
} ts_event_t;

typedef struct ts_block {
  uint64_t address, size, requested;
  uint64_t history_size; /* real_size of its first history entry (2.0), when has_history */
  bool live, has_address, has_size, has_requested;
  bool pending;     /* active_pending_free (live, but not drawn as allocated before the trace) */
  bool has_frames;  /* a 'frames' key (2.1 on): requested_size is its size as it is */
  bool has_history; /* a 'history' list with a first entry that has real_size */
  uint32_t stack;
} ts_block_t;

typedef struct ts_history { /* one entry of a block's 'history' (PyTorch 2.0) */
  uint64_t real_size;
  bool has_real_size;
  uint32_t stack;
} ts_history_t;

typedef struct ts_segment {
  int64_t device;
  uint64_t address, total_size;
  bool numbers;
  int64_t blocks; /* list record, -1 none */
} ts_segment_t;

/* A list the snapshot needs by position: the device traces, the segments, a segment's
 * blocks. items: (tag << 32 | id) of the items hbm reads, at positions[]. */
typedef struct ts_list {
  size_t n_items; /* all items, read or not (positions count them) */
  uint64_t *items;
  size_t *positions;
  size_t n, cap;
} ts_list_t;

/* Something in the state before a trace began, found while reading it or at the dump. */
typedef struct ts_before {
  ev_kind_t kind; /* EV_ALLOC, EV_RESERVE, EV_RELEASE */
  uint64_t addr, size;
  uint32_t stack;
  int64_t end_step; /* EV_ALLOC: the step of its free, -1 live to the end */
  int64_t buffer;   /* profile mode: its buffer, -1 none */
} ts_before_t;

typedef struct ts_oom {
  int64_t step, index, stream;
  uint64_t requested, device_free;
  int64_t live, reserved; /* by the trace's own events, at the time */
} ts_oom_t;

typedef struct ts_reader ts_reader_t;

typedef struct ts_action_seen { /* an action string's bytes in the file, and its kind */
  const uint8_t *s;
  uint32_t n;
  bool known;
  int kind;
} ts_action_seen_t;

typedef struct ts_key_seen { /* a dict key's bytes in the file, and which key they are */
  const uint8_t *s;
  uint32_t n;
  int id;
} ts_key_seen_t;

/* One list of events: a device's trace once the snapshot says which device. */
typedef struct ts_trace {
  int64_t index;         /* events seen (their position in the device trace) */
  int64_t length;        /* the list's items, every action's (memory_viz opens the longest) */
  hbm_u64map_t seen;     /* address → SEEN_* */
  hbm_u64map_t open;     /* address → buffer index (profile mode) */
  hbm_u64map_t seg_seen; /* segment addresses the trace reserves or releases */
  hbm_u64map_t log_live; /* log mode: addresses allocated (non-zero) and not freed */
  hbm_u64map_t streams;  /* log mode: stream → 0, 1, ... by first appearance */
  int64_t live_bytes, net_reserved, max_reserved_prefix;
  bool any_reserve;
  ts_before_t *before;
  size_t n_before, cap_before;
  ts_oom_t *ooms;
  size_t n_ooms, cap_ooms;
  hbm_log_event_t *log; /* log mode */
  size_t n_log, cap_log;
  torch_device_summary_t sum;
  int device; /* -1 until the snapshot's device_traces says */
} ts_trace_t;

/* Where the profile's steps, buffers and reservation changes of each trace begin: a new run
 * starts whenever events of another trace come (one run per trace in files PyTorch wrote). */
typedef struct ts_run {
  uint32_t trace;
  int64_t step, buffer;
  size_t reserve;
} ts_run_t;

struct ts_reader {
  const char *name; /* the file's base name, for messages */
  bool log_mode;    /* build replay logs instead of a profile */
  hbm_profile_t *p; /* profile mode */
  hbm_intern_t *strings;
  /* tables */
  ts_frame_t *frames;
  size_t n_frames, cap_frames;
  hbm_u64map_t frame_index; /* content hash → frame id + 1 (chained by equality check) */
  uint32_t *frame_pool;     /* stacks' frame ids */
  size_t n_pool, cap_pool;
  ts_stack_t *stacks;
  size_t n_stacks, cap_stacks;
  hbm_u64map_t stack_index; /* content hash → stack id */
  ts_event_t *events;       /* pending events (a free list through `addr`) */
  size_t n_events, cap_events, free_event;
  ts_block_t *blocks;
  size_t n_blocks, cap_blocks;
  ts_history_t *histories;
  size_t n_histories, cap_histories;
  ts_segment_t *segments;
  size_t n_segments, cap_segments;
  ts_list_t *lists;
  size_t n_lists, cap_lists;
  ts_trace_t *traces;
  size_t n_traces, cap_traces;
  ts_run_t *runs;
  size_t n_runs, cap_runs;
  /* the root dict */
  bool have_root;
  pk_ref_t root_segments, root_traces;
  const char *alloc_conf;
  /* container states of the sink (torch_sink.c), and the keys last seen by their bytes' address
   * in this file (memo references repeat the same bytes) */
  void *free_dicts, *free_lists;
  ts_key_seen_t key_cache[256];
  ts_action_seen_t action_cache[64];
  /* tags (torch_tags.c): (stack, stream, before) → the profile's interned tag strings */
  hbm_u64map_t tag_index;
  struct ts_tags *tags;
  size_t n_tags, cap_tags;
  hbm_u64map_t stream_ids;
  size_t tag_text_budget;       /* bytes of stack text left to write; past it, short labels */
  size_t inconsistent_unplaced; /* events of traces no device claims */
  /* segments and blocks already read: the same dict twice (a memo reference) counts once */
  uint8_t *seg_read, *block_read;
  size_t repeated; /* such repeats */
};

/* torch_sink.c */
void ts_sink_init(ts_reader_t *r, pk_sink_t *sink);
void ts_sink_free(ts_reader_t *r);
/* The frame ids of a stack. */
const uint32_t *ts_stack_frames(const ts_reader_t *r, uint32_t stack, uint32_t *n);

/* torch_trace.c */
/* A new trace (a list that got its first event); -1 with an error when out of memory. */
int64_t ts_trace_new(ts_reader_t *r);
/* One event of trace t, in order. false with an error when out of memory. */
bool ts_trace_feed(ts_reader_t *r, uint32_t t, const ts_event_t *e);
/* What the dump says about trace t's device: its segments and their blocks (what was there
 * before the trace), the reservations balanced against them, the bounds. */
bool ts_trace_dump_state(ts_reader_t *r, ts_trace_t *t, int device);
/* That state into the profile (in `space`, with the OOM texts) or in front of the log. */
bool ts_trace_emit_before(ts_reader_t *r, ts_trace_t *t, int space);
void ts_trace_free(ts_trace_t *t);

/* torch_tags.c */
typedef struct ts_tags {
  const char *op, *group, *source, *label; /* interned in the profile */
} ts_tags_t;
/* The tags of an allocation with this stack (0: none) on this stream (before: allocated
 * before the trace began); computed once per (stack, stream, before). NULL when out of
 * memory. */
const ts_tags_t *ts_tags_of(ts_reader_t *r, uint32_t stack, int64_t stream, bool before);
void ts_tags_free(ts_reader_t *r);

#endif /* HBM_IMPORT_TORCH_INTERNAL_H */
