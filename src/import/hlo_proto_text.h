/* hlo_proto_text.h — an HloModuleProto rendered as the HLO text hbm's planner reads, and the
 * plan of it set beside XLA's buffer assignment (hlo_proto_text.c). */
#ifndef HBM_IMPORT_HLO_PROTO_TEXT_H
#define HBM_IMPORT_HLO_PROTO_TEXT_H

#include "hlo.pb-c.h"
#include "import/xprof.h"

/* Appends the module's HLO text to out: the header (is_scheduled, input_output_alias), each
 * computation with its instructions in schedule order. False with the reason in why (a
 * sentence, no file name) when the module cannot be written (an operand or called
 * computation that is not in it). */
bool hlo_proto_text(const HbmHlo__HloModuleProto *m, hbm_strbuf_t *out, hbm_strbuf_t *why);

/* XLA's device sizes from its buffer assignment, as compiled.memory_analysis() counts them
 * (PopulateBufferStatsFromAllocations): over every memory colour but host memory (5),
 * parameters, outputs (maybe_live_out) and the other allocations (temporaries; not
 * thread-local, not constant). */
typedef struct xla_sizes {
  uint64_t argument_bytes, output_bytes, temp_bytes;
} xla_sizes_t;
xla_sizes_t hlo_proto_xla_sizes(const HbmHlo__BufferAssignmentProto *ba);

/* Plans the program's module with hbm's planner (backend im->backend) and records both
 * results in im's meta under "hbm_plan:<program>" (a sentence) and the numbers
 * "hbm_plan_temp_bytes:", "xla_temp_bytes:", "hbm_plan_differs:" (1/0). A module that cannot
 * be rendered or planned says why there, with XLA's totals still (and "xla_temp_bytes:");
 * this never fails the load. */
void hlo_proto_plan(xprof_import_t *im, const HbmHlo__HloProto *hp, const char *program);

#endif /* HBM_IMPORT_HLO_PROTO_TEXT_H */
