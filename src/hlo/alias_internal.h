/* alias_internal.h — the dataflow state shared by alias.c (which builds it) and liveness.c
 * (which joins values into buffers and gives them live ranges). */
#ifndef HBM_HLO_ALIAS_INTERNAL_H
#define HBM_HLO_ALIAS_INTERNAL_H

#include "hlo.h"

/* How a called computation's parameter gets its values. */
enum { HLO_PARAM_DEFINE = 0, HLO_PARAM_FORWARD = 1, HLO_PARAM_LINK = 2 };

typedef struct hlo_param_src {
  uint8_t mode;
  uint32_t off; /* FORWARD/LINK: the caller's values (offset in the value-id pool) */
} hlo_param_src_t;

/* One instance of a sequential computation in the flattened schedule. */
typedef struct hlo_frame {
  const hlo_comp_t *comp;
  uint32_t pos;    /* index into frame_pos: one pool offset per instruction */
  uint32_t params; /* index into frame_params */
  uint32_t n_params;
  uint32_t pc; /* next instruction */
  /* a control-flow instruction being expanded */
  const hlo_instr_t *pending;
  uint32_t phase, step, body_frame, body_first, child;
  uint8_t have_body;
} hlo_frame_t;

/* Edge kinds: joins of values decided in program order (liveness.c). */
enum {
  HLO_EDGE_FORCE = 0,     /* a, b are one buffer (a loop parameter and its loop) */
  HLO_EDGE_LOOP_INIT = 1, /* a: initial value, b: loop buffer, c: 1 if the body never writes */
  HLO_EDGE_LOOP_BODY = 2, /* a: the body's new value, b: loop buffer, c: body parameter value */
  HLO_EDGE_BRANCH = 3,    /* a: a branch's root value, b: the result, c: last step, step: first */
  HLO_EDGE_INPLACE = 4,   /* a: operand value, b: result value updated in place */
  HLO_EDGE_SHARE = 5      /* a: operand value, b: element-wise result that may reuse it,
                             c: 1 when the operand instruction defines a (not forwarded) */
};

typedef struct hlo_edge {
  uint8_t kind;
  uint32_t a, b, c;
  uint32_t step;
} hlo_edge_t;

typedef struct hlo_dataflow {
  const hlo_module_t *m;
  hlo_vec_t values;       /* hlo_value_t */
  hlo_vec_t steps;        /* hlo_step_t */
  hlo_vec_t edges;        /* hlo_edge_t */
  hlo_vec_t frames;       /* hlo_frame_t */
  hlo_vec_t frame_pos;    /* uint32_t */
  hlo_vec_t frame_params; /* hlo_param_src_t */
  hlo_vec_t stack;        /* uint32_t frame ids */
  hlo_vec_t outputs;      /* uint32_t: the entry root's value at each subshape */
  uint32_t *pool;         /* value ids of every instruction instance, by subshape */
  size_t pool_len, pool_cap;
  size_t max_steps;
  uint32_t entry_root_off;
  bool exact_shape_sharing; /* XLA's sharing rule without a backend hook (HLO_XLA_CPU) */
  bool xla_order;           /* XLA's flattened order: a conditional after its branches */
  bool gpu;                 /* the GPU's sharing hook (gpu_sharing.c) */
} hlo_dataflow_t;

#define HLO_LIVE_OUT_STEP (UINT32_MAX - 1)

/* XLA's BufferAssigner: a temporary may live in an output's allocation when it is no
 * larger and their live ranges do not meet (reuse.c). Such temporaries join the output's
 * buffer; as->buffers is compacted. place = false only marks the tuple-shaped temporaries
 * that get allocations of their own. false when memory ran out. */
bool hbm__reuse_output_allocations(const hlo_dataflow_t *df, hlo_assignment_t *as, bool place);

/* xla_backend: 0 (the plain planner), HLO_XLA_GPU or HLO_XLA_CPU. */
hbm_status_t hbm__dataflow_run(const hlo_module_t *m, hlo_dataflow_t *df, int xla_backend);

/* XLA's GPU CanShareBufferHint (gpu_sharing.c) for result element e (0 for an array) of
 * user over its operand i: 1 may share, 0 may not, -1 no hint (XLA's generic rule). */
int hbm__gpu_can_share(const hlo_module_t *m, const hlo_instr_t *user, uint32_t i, uint32_t e);
void hbm__dataflow_free(hlo_dataflow_t *df);

#endif /* HBM_HLO_ALIAS_INTERNAL_H */
