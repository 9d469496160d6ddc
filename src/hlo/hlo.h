/* hlo.h — internal header of the compile-time planner (src/hlo). The planner reads XLA HLO
 * text into a module (lexer.c, parser.c, shape.c, module.c), decides which instructions
 * define buffers and which alias them (alias.c), gives every buffer a live range over the
 * flattened schedule (liveness.c), places the temporaries with XLA's global decreasing-size
 * best-fit heap (heap_sim.c), optionally rematerializes values to fit a memory limit
 * (remat.c), and turns the result into a profile of the one memory model (plan.c), reported
 * in XLA's E1000 form (e1000.c). XLA's own dumps are read by xla_dump.c.
 *
 * Memory: the module owns a copy of the text; every name in the IR is a slice of it, and all
 * IR nodes live in one arena freed with the module, so memory grows with the input. */
#ifndef HBM_HLO_H
#define HBM_HLO_H

#include "base/base.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* ---- arena (arena.c): bump allocation, freed all at once ---- */

typedef struct hlo_arena_block hlo_arena_block_t;
typedef struct hlo_arena {
  hlo_arena_block_t *head;
  char *cur, *end;
  size_t total; /* bytes taken from malloc */
} hlo_arena_t;

void hbm__hlo_arena_init(hlo_arena_t *a);
void hbm__hlo_arena_free(hlo_arena_t *a);
/* n bytes aligned to 8, zeroed; NULL (with an error set) when memory ran out. */
void *hbm__hlo_arena_alloc(hlo_arena_t *a, size_t n);
/* A NUL-terminated copy of s[0..n). */
char *hbm__hlo_arena_strndup(hlo_arena_t *a, const char *s, size_t n);

/* A growable array of pointer-sized or fixed-size items on malloc (vec.c-free: inline). */
typedef struct hlo_vec {
  void *data;
  size_t len, cap, item;
} hlo_vec_t;
void hbm__hlo_vec_init(hlo_vec_t *v, size_t item_size);
void hbm__hlo_vec_free(hlo_vec_t *v);
/* Appends one item (copied from `item`); false when memory ran out. */
bool hbm__hlo_vec_push(hlo_vec_t *v, const void *item);
/* Makes room for n items in all (a hint: false only when memory ran out). */
bool hbm__hlo_vec_reserve(hlo_vec_t *v, size_t n);
#define HLO_VEC_AT(v, type, i) (((type *)(v)->data)[i])

/* A slice of the module text. */
typedef struct hlo_str {
  const char *p;
  uint32_t n;
} hlo_str_t;

bool hbm__hlo_str_eq(hlo_str_t s, const char *lit);
/* The same against a string literal, without strlen. */
#define HLO_STR_IS(s, lit) ((s).n == sizeof(lit) - 1 && memcmp((s).p, lit, sizeof(lit) - 1) == 0)

/* ---- element types and shapes (shape.c) ---- */

typedef enum hlo_etype {
  HLO_T_INVALID = 0,
  HLO_T_PRED,
  HLO_T_S1,
  HLO_T_S2,
  HLO_T_S4,
  HLO_T_S8,
  HLO_T_S16,
  HLO_T_S32,
  HLO_T_S64,
  HLO_T_U1,
  HLO_T_U2,
  HLO_T_U4,
  HLO_T_U8,
  HLO_T_U16,
  HLO_T_U32,
  HLO_T_U64,
  HLO_T_F16,
  HLO_T_BF16,
  HLO_T_F32,
  HLO_T_F64,
  HLO_T_C64,
  HLO_T_C128,
  HLO_T_F8E5M2,
  HLO_T_F8E4M3,
  HLO_T_F8E4M3FN,
  HLO_T_F8E4M3B11FNUZ,
  HLO_T_F8E5M2FNUZ,
  HLO_T_F8E4M3FNUZ,
  HLO_T_F8E3M4,
  HLO_T_F8E8M0FNU,
  HLO_T_F4E2M1FN,
  HLO_T_TOKEN,
  HLO_T_OPAQUE,
  HLO_T_TUPLE,
  HLO_T_COUNT
} hlo_etype_t;

/* The type named by s[0..n), HLO_T_INVALID if none ("tuple" is not a name in the text). */
hlo_etype_t hbm__etype_lookup(const char *s, size_t n);
const char *hbm__etype_name(hlo_etype_t t);
/* Storage bits of one element (sub-byte types: their width; pred: 8; token: 0;
 * opaque: 64, a pointer). */
int hbm__etype_bits(hlo_etype_t t);

#define HLO_MAX_RANK 64
#define HLO_MAX_TILES 8
#define HLO_TILE_COMBINE (-1) /* a '*' tile dimension */

typedef struct hlo_tile {
  uint8_t rank;
  int64_t *dims;
} hlo_tile_t;

typedef struct hlo_layout {
  uint16_t n_minor_to_major;
  uint8_t n_tiles;
  int64_t *minor_to_major;
  hlo_tile_t *tiles;
  int64_t element_bits; /* E(n), 0 = the type's width */
  int64_t memory_space; /* S(n), 0 = default (HBM) */
  int64_t tail_align;   /* L(n), elements; 1 = none */
} hlo_layout_t;

typedef struct hlo_shape hlo_shape_t;
struct hlo_shape {
  uint8_t etype;           /* hlo_etype_t */
  uint8_t is_dynamic;      /* some dimension is '<=' bounded or '?' */
  uint16_t rank;           /* arrays: number of dimensions; tuples: number of elements */
  int64_t *dims;           /* arrays: sizes (bounds for dynamic dims, 0 for '?') */
  hlo_layout_t *layout;    /* NULL: default (major-to-minor, no tiles) */
  hlo_shape_t **elems;     /* tuples */
  uint32_t *elem_offsets;  /* tuples: pre-order index of each element */
  uint32_t n_subshapes;    /* this shape and every nested one, pre-order */
  uint64_t bytes;          /* padded: as laid out (tuples: the 8-byte pointer table) */
  uint64_t unpadded_bytes; /* in the default layout, sub-byte types packed */
  hlo_str_t text;          /* as written, with layout */
};

/* Sizes of an array shape from its dims/type/layout; false on overflow. Tuples: 8 bytes per
 * element for the table. */
bool hbm__shape_compute_sizes(hlo_shape_t *s);
/* The subshape at pre-order index k (0 = the shape itself), or NULL. */
const hlo_shape_t *hbm__shape_subshape(const hlo_shape_t *s, uint32_t k);
/* Pre-order index of tuple element `i` of s (a tuple), or UINT32_MAX. */
uint32_t hbm__shape_elem_offset(const hlo_shape_t *s, int64_t i);
/* Pre-order index of the subshape at the index path idx[0..n), or UINT32_MAX. */
uint32_t hbm__shape_index_offset(const hlo_shape_t *s, const int64_t *idx, size_t n);
/* Writes the ShapeIndex text "{0,1}" of pre-order index k into buf. */
void hbm__shape_index_text(const hlo_shape_t *s, uint32_t k, char *buf, size_t cap);
/* Number of elements of an array shape (dynamic dims at their bound); saturates. */
uint64_t hbm__shape_elements(const hlo_shape_t *s);
/* Memory space (colour) of an array shape, 0 for tuples. */
int hbm__shape_color(const hlo_shape_t *s);

/* ---- opcodes (opcode.c) ---- */

typedef enum hlo_opcode {
#define HLO_OP(id, name, flags) HLO_OP_##id,
#include "opcodes.def"
#undef HLO_OP
  HLO_OP_COUNT
} hlo_opcode_t;

/* Opcode properties. */
#define HLO_F_ELEMENTWISE 0x01u /* output element i depends on operand elements i only */
#define HLO_F_CHEAP 0x02u       /* cheap to recompute (data movement, broadcast, iota) */
#define HLO_F_SIDE_EFFECT 0x04u /* must not be duplicated (rng, I/O, collectives) */
#define HLO_F_CONTROL 0x08u     /* while / conditional / call */
#define HLO_F_TRANSCENDENTAL 0x10u

hlo_opcode_t hbm__opcode_lookup(const char *s, size_t n);
const char *hbm__opcode_name(hlo_opcode_t op);
unsigned hbm__opcode_flags(hlo_opcode_t op);

/* ---- the module IR (module.c, parser.c) ---- */

typedef struct hlo_comp hlo_comp_t;
typedef struct hlo_instr hlo_instr_t;

/* Roles of called computations, by the attribute that names them. */
typedef enum hlo_call_role {
  HLO_CALL_TO_APPLY = 0,
  HLO_CALL_CALLS,
  HLO_CALL_CONDITION,
  HLO_CALL_BODY,
  HLO_CALL_BRANCH,
  HLO_CALL_SELECT,
  HLO_CALL_SCATTER,
  HLO_CALL_CALLED
} hlo_call_role_t;

typedef struct hlo_callref {
  hlo_str_t name;
  uint8_t role;
  hlo_comp_t *comp; /* resolved after the whole module is read */
} hlo_callref_t;

/* One entry of output_to_operand_aliasing / input_output_alias: output index `out` shares
 * the buffer of operand (or entry parameter) `operand` at index `in`. */
typedef struct hlo_alias_pair {
  int64_t *out;
  int64_t *in;
  uint8_t n_out, n_in;
  uint8_t must_alias;
  int64_t operand;
} hlo_alias_pair_t;

typedef struct hlo_span {
  uint32_t start, len;
} hlo_span_t;

/* What the metadata={...} attribute says (and the custom-call target): most instructions of
 * big modules share the empty one (hbm__hlo_no_metadata), so the instruction stays small. */
typedef struct hlo_metadata {
  hlo_str_t op_name, op_type, source_file, custom_call_target;
  int64_t source_line;    /* 0 = none */
  int64_t stack_frame_id; /* 1-based into the module's frame index; 0 = none */
} hlo_metadata_t;

extern const hlo_metadata_t hbm__hlo_no_metadata;

struct hlo_instr {
  hlo_str_t name; /* without '%' */
  const hlo_shape_t *shape;
  hlo_instr_t **operands;
  hlo_span_t *operand_spans; /* where each operand's name is in the text (for printing) */
  hlo_callref_t *called;
  hlo_alias_pair_t *aliasing; /* output_to_operand_aliasing */
  const hlo_metadata_t *meta; /* never NULL */
  hlo_comp_t *parent;
  const hlo_instr_t *remat_of; /* remat.c: the instruction this one recomputes */
  int64_t index;               /* get-tuple-element index, parameter number; -1 */
  hlo_span_t text;             /* from the name (its '%' included) to the last attribute */
  hlo_span_t opcode_text;      /* the opcode as written (unknown ones keep their name) */
  uint32_t n_operands, n_called, n_aliasing;
  uint32_t id;           /* position in parent->instrs */
  uint32_t operands_end; /* offset just past the ')' of the operand list */
  uint16_t opcode;       /* hlo_opcode_t */
  uint8_t is_root;
  uint8_t fusion_kind; /* 'L'oop, 'I'nput, 'O'utput, 'C'ustom, 0 */
};

typedef enum hlo_comp_kind {
  HLO_COMP_UNREACHABLE = 0,
  HLO_COMP_SEQUENTIAL, /* entry, and bodies of while / conditional / call: scheduled */
  HLO_COMP_EMBEDDED,   /* to_apply of reduce, sort, map, ...: thread-local values */
  HLO_COMP_FUSED       /* fusion and async bodies: no buffers of their own */
} hlo_comp_kind_t;

struct hlo_comp {
  hlo_str_t name;
  hlo_instr_t **instrs;
  uint32_t n_instrs;
  hlo_instr_t *root;
  hlo_instr_t **params; /* by parameter number; may have holes (NULL) */
  uint32_t n_params;
  uint8_t is_entry;
  uint8_t kind; /* hlo_comp_kind_t */
  uint32_t id;
  hlo_span_t body; /* text between the braces, for printing */
};

/* The module's stack-frame index (frames.c): XLA's StackFrameIndexProto as printed in the
 * FileNames / FunctionNames / FileLocations / StackFrames tables. Ids are 1-based. */
typedef struct hlo_file_location {
  int64_t file, function, line, column;
} hlo_file_location_t;

typedef struct hlo_stack_frame {
  int64_t location, parent; /* parent: a frame id, 0 = none (the text says parent + 1) */
} hlo_stack_frame_t;

typedef struct hlo_frame_index {
  hlo_str_t *files, *functions;
  hlo_file_location_t *locations;
  hlo_stack_frame_t *frames;
  uint32_t n_files, n_functions, n_locations, n_frames;
} hlo_frame_index_t;

/* One resolved frame: file, function (may be empty), line and column. */
typedef struct hlo_source_frame {
  hlo_str_t file, function;
  int64_t line, column;
} hlo_source_frame_t;

typedef struct hlo_module {
  char *text;
  size_t len;
  char *filename;
  hlo_str_t name;
  hlo_arena_t arena;
  hlo_comp_t **comps;
  uint32_t n_comps;
  hlo_comp_t *entry;
  bool is_scheduled;
  int64_t num_partitions; /* the header's num_partitions (1 when absent) */
  uint32_t n_io_alias;
  hlo_alias_pair_t *io_alias; /* operand = parameter number */
  uint32_t n_donors;
  hlo_alias_pair_t *donors;  /* buffer_donor: operand = parameter number, in = index */
  size_t n_instrs;           /* in every computation */
  uint32_t n_remat;          /* clones added by remat.c (for unique names) */
  hlo_instr_t **entry_owned; /* remat.c: the entry's instruction array once it grows */
  size_t entry_cap;
  hlo_frame_index_t frames; /* empty when the text has no stack-frame tables */
} hlo_module_t;

/* Parses HLO text (copied). name is used in error messages ("file:line:col: ..."). */
hlo_module_t *hbm__hlo_parse(const char *text, size_t len, const char *name);
/* Sets every computation's kind from how it is called; an error if the call graph has a
 * cycle. hbm__hlo_parse calls it. */
hbm_status_t hbm__hlo_classify(hlo_module_t *m);
void hbm__hlo_free(hlo_module_t *m);
/* line and column (1-based) of a text offset. */
void hbm__hlo_text_position(const char *text, size_t offset, int *line, int *col);
/* Prints the module as HLO text (the original text, with remat.c's changes) into sb. */
void hbm__hlo_print(const hlo_module_t *m, hbm_strbuf_t *sb);
/* Writes the instruction's text (name and operands as they are now) into sb. */
void hbm__instr_print(const hlo_module_t *m, const hlo_instr_t *in, hbm_strbuf_t *sb);
/* Writes "%name = shape opcode(operands)" into out (room for max_len + 1 bytes, max_len >= 4),
 * NUL-terminated, at most max_len characters ("..." when shortened); returns its length.
 * The profile's labels are HLO_LABEL_MAX long at most. */
#define HLO_LABEL_MAX 160
size_t hbm__instr_label(const hlo_module_t *m, const hlo_instr_t *in, size_t max_len, char *out);

/* The stack of frame `id`, innermost first, into out[0..cap): the number of frames written,
 * or -1 when the frame `id` (or what it names) is not in the index. A chain that points
 * nowhere part-way ends there; a cycle ends after as many frames as the index has. */
int hbm__hlo_frame_stack(const hlo_frame_index_t *fx, int64_t id, hlo_source_frame_t *out, int cap);

typedef enum hlo_source_status {
  HLO_SOURCE_NONE = 0,  /* the instruction names no source */
  HLO_SOURCE_METADATA,  /* metadata source_file / source_line */
  HLO_SOURCE_FRAME,     /* the innermost frame of its stack_frame_id */
  HLO_SOURCE_BAD_FRAME, /* a stack_frame_id the module's index does not have */
} hlo_source_status_t;

/* Where the instruction comes from in the user's program (*out: file and line; the function
 * and column too when from a frame). */
hlo_source_status_t hbm__hlo_instr_source(const hlo_module_t *m, const hlo_instr_t *in,
                                          hlo_source_frame_t *out);

/* ---- buffers: dataflow, aliasing and live ranges (alias.c, liveness.c) ---- */

/* Value flags */
#define HLO_V_PARAM 0x001u    /* an entry parameter (leaf or tuple table) */
#define HLO_V_CONST 0x002u    /* a constant */
#define HLO_V_OUTPUT 0x004u   /* lives out of the entry computation */
#define HLO_V_THREAD 0x008u   /* defined in an embedded computation: thread-local */
#define HLO_V_WRITABLE 0x010u /* an entry parameter donated (input_output_alias/buffer_donor) */
#define HLO_V_LOOP 0x020u     /* a while loop's carried buffer */
#define HLO_V_BRANCH 0x040u   /* a conditional's result */
#define HLO_V_ALIASED 0x080u  /* an output sharing an entry parameter's buffer */
#define HLO_V_COPY 0x100u     /* an implicit copy (as XLA's copy insertion would add) */

/* A value: one subshape of one instruction instance in the flattened schedule. */
typedef struct hlo_value {
  const hlo_instr_t *instr;
  const hlo_shape_t *shape; /* the subshape */
  uint32_t subshape;        /* pre-order index in instr->shape */
  uint32_t def_step;
  uint32_t last_use; /* step of the last use, >= def_step */
  /* A while's loop value as XLA sees it (two phis, HloLiveRange): live from def_step to
   * split_use (its last read in the condition or body), then again from split_def (where
   * the loop ends) to last_use. UINT32_MAX: one range. Set with the XLA backends only. */
  uint32_t split_use, split_def;
  uint32_t flags;
  uint64_t bytes, unpadded_bytes;
  int color;
} hlo_value_t;

/* A logical buffer: a set of values that must share memory (XLA's HloBuffer). */
typedef struct hlo_buffer {
  uint32_t value; /* the representative (defining) value: smallest def_step */
  uint32_t n_values;
  uint32_t flags;      /* union of the values' flags */
  uint32_t start, end; /* live range [start, end) over steps */
  uint32_t first_def;  /* the step of its first definition (indefinite buffers too) */
  uint64_t bytes, unpadded_bytes;
  int color;
  uint32_t share_group; /* buffers sharing one heap chunk (in-place reuse); own index if none */
  uint64_t offset;      /* heap offset (temporaries) */
  int indefinite;       /* parameters, constants, outputs, thread-local: outside the heap */
  uint8_t separate;     /* a temporary with an allocation of its own (XLA: tuple-shaped) */
  /* Its memory passes at step `end` to a result of its share group (XLA's ShareWith): XLA's
   * heap simulator frees it there, as it allocates that result, not at the step before. */
  uint8_t gives;
  uint8_t takes; /* it takes the memory of the buffer of its share group giving at its start */
  /* heap_sim.c, XLA backends: a buffer whose values leave gaps (a loop buffer between its
   * last read in the body and the body's new value) holds its memory only during n_segs
   * segments, as->segs[2 * seg_at ..]: [start, end) pairs. 0: all of [start, end). */
  uint32_t n_segs, seg_at;
} hlo_buffer_t;

typedef struct hlo_step {
  const hlo_instr_t *instr;
} hlo_step_t;

typedef struct hlo_plan_opts {
  uint64_t alignment; /* heap offsets are multiples of this (>= 1) */
  /* XLA's BufferAssigner on top of the heap: temporaries may live in output allocations,
   * tuple-shaped temporaries get allocations of their own, and the temp allocations are
   * combined into one (reuse.c, combine.c). Its value names the backend, whose rule for a
   * result taking an operand's buffer differs: HLO_XLA_GPU, the GPU hook's (same elements
   * and bytes, direct uses element-wise), or HLO_XLA_CPU, XLA's own
   * CanShareOperandBufferWithUser with no hook (equal shapes, layouts included, and for a
   * loop fusion every transitive use of the operand in its body element-wise). */
  uint8_t xla_allocations;
} hlo_plan_opts_t;

#define HLO_XLA_GPU 1
#define HLO_XLA_CPU 2
#define HLO_XLA_BACKEND 3u /* the bits above */
/* With either backend: no temporary goes into an output allocation (the worst case of
 * XLA's choices among competing temporaries, for the contention warning). */
#define HLO_XLA_NO_REUSE 4u

/* The result of planning one module. */
typedef struct hlo_assignment {
  hlo_step_t *steps;
  uint32_t n_steps;
  hlo_value_t *values;
  uint32_t n_values;
  uint32_t *value_buffer; /* value → buffer */
  uint32_t *entry_value;  /* entry instruction id → its value at subshape {} */
  hlo_buffer_t *buffers;
  uint32_t n_buffers;
  /* per colour (index = colour) after heap simulation */
  int n_colors;
  uint64_t *heap_bytes;     /* temp heap size with fragmentation */
  uint64_t *temp_peak;      /* max over steps of live temp bytes */
  uint32_t *temp_peak_step; /* first step reaching it */
  /* reuse.c: temporaries kept out of an output allocation only by another temporary put
   * there first; XLA's order of candidates (its post-order) may have chosen otherwise */
  uint32_t contended;
  uint64_t contended_bytes;
  /* liveness.c, when temporaries were contended: the same assignment with no temporary in
   * an output allocation (the warning's bound), ready for the heap; NULL otherwise */
  struct hlo_assignment *without_reuse;
  uint32_t *segs; /* the buffers' live segments (hlo_buffer_t.n_segs), [start, end) pairs */
  uint32_t n_segs, segs_cap;
} hlo_assignment_t;

/* Dataflow + aliasing + live ranges: fills steps, values, buffers. */
hbm_status_t hbm__hlo_assign(const hlo_module_t *m, hlo_assignment_t *out);
/* The same, with the allocation rules of opt (NULL: none of them). */
hbm_status_t hbm__hlo_assign_opts(const hlo_module_t *m, hlo_assignment_t *out,
                                  const hlo_plan_opts_t *opt);
/* Heap simulation of the temporaries of every colour (offsets, heap sizes) and the live peak
 * of temporaries per colour. */
hbm_status_t hbm__hlo_simulate_heap(hlo_assignment_t *as, const hlo_plan_opts_t *opt);
void hbm__hlo_assignment_free(hlo_assignment_t *as);
/* XLA's CombineTempAllocations (combine.c): the heap of each colour and the separate
 * temporaries, laid end to end (each aligned) in XLA's allocation order; sets their offsets
 * and as->heap_bytes. */
hbm_status_t hbm__hlo_combine_temps(hlo_assignment_t *as, uint64_t alignment);

/* value_order.c: XLA's HloComputation::MakeInstructionPostOrder over c (pos[id]: the rank;
 * scratch: stack of n_instrs + every operand, state and users of n_instrs), and per buffer
 * the key of its first value in XLA's HloValue id order (NULL when memory ran out). */
void hbm__hlo_instruction_post_order(const hlo_comp_t *c, uint32_t *pos, uint32_t *stack,
                                     uint8_t *state, uint32_t *users);
uint64_t *hbm__hlo_xla_value_keys(const hlo_assignment_t *as);

/* ---- heap simulator (heap_sim.c): XLA's GlobalDecreasingSizeBestFitHeap ---- */

typedef struct hlo_interval {
  uint32_t start, end; /* [start, end) */
  uint64_t size;
  uint64_t offset; /* out */
  uint32_t share;  /* 0: alone; k > 0: at the same offset as every interval with share k */
} hlo_interval_t;

/* Places every interval (sorted internally by size, then duration, then index), each at the
 * smallest free gap among the intervals overlapping it in time, or on top. Intervals that
 * share are placed together (at their largest's turn) in a gap free during each of them, as
 * XLA places colocated buffers. Returns the heap size in *heap. */
hbm_status_t hbm__hlo_best_fit(hlo_interval_t *iv, size_t n, uint64_t alignment, uint64_t *heap);
/* XLA's two placement orders: spatial (size, then duration) and temporal (duration, then
 * size); ties in both go to the earlier interval. */
typedef enum { HLO_HEAP_SPATIAL, HLO_HEAP_TEMPORAL } hlo_heap_order_t;
/* hbm__hlo_best_fit in either order, with durations counted in XLA's event time (ev[2i],
 * ev[2i+1]: the interval's alloc and free events) instead of steps; ev may be NULL. */
hbm_status_t hbm__hlo_best_fit_order(hlo_interval_t *iv, size_t n, uint64_t alignment,
                                     const uint32_t *ev, hlo_heap_order_t how, uint64_t *heap);
/* XLA's choice (ChooseBestHeapAlgorithm): both orders, the smaller heap kept (the spatial one
 * on a tie), its offsets in iv. */
hbm_status_t hbm__hlo_best_fit_events(hlo_interval_t *iv, size_t n, uint64_t alignment,
                                      const uint32_t *ev, uint64_t *heap);

#endif /* HBM_HLO_H */
