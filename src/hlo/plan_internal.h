/* plan_internal.h — the layout of hbm_plan_t, shared by plan.c (planning and the profile),
 * e1000.c (report texts), remat.c (rematerialization) and xla_dump.c (plans read from XLA's
 * own dumps). */
#ifndef HBM_HLO_PLAN_INTERNAL_H
#define HBM_HLO_PLAN_INTERNAL_H

#include "hlo.h"

typedef enum plan_source {
  PLAN_FROM_HLO = 0,
  PLAN_FROM_BUFFER_ASSIGNMENT = 1,
  PLAN_FROM_MEMORY_REPORT = 2
} plan_source_t;

struct hbm_plan {
  hbm_plan_options_t opt;
  plan_source_t source;
  char *name;  /* module name */
  int backend; /* HBM_PLAN_BACKEND_*, AUTO resolved */
  /* what makes the plan differ from XLA's (before optimizations, not partitioned, ...) */
#define HBM_PLAN_MAX_WARNINGS 4
  char *warnings[HBM_PLAN_MAX_WARNINGS];
  size_t n_warnings;
  char *path;
  hlo_module_t *module; /* HLO input only */
  hlo_assignment_t as;
  uint32_t *buffer_index;   /* hlo buffer → profile buffer index */
  uint32_t *profile_hlo;    /* profile buffer index → hlo buffer */
  size_t n_profile_buffers; /* one per hlo buffer, one per segment of a gapped buffer */
  hbm_profile_t *profile;
  int space; /* the profile's space for opt.space_color */
  hbm_analysis_t *analysis;
  hbm_plan_summary_t summary;
  char *peak_instruction;
  /* the planned colour, in bytes */
  uint64_t constant_bytes, thread_local_bytes, indefinite_bytes;
  uint64_t heap_bytes; /* temp heap with fragmentation */
  uint64_t temp_peak;  /* live temporaries at the peak */
  uint64_t used_bytes; /* reserved + indefinite + heap: what the device must hold */
  int64_t oversized;   /* profile index of the first buffer larger than memory, -1 */
  /* rematerialization */
  hbm_remat_info_t *remats;
  size_t n_remats;
  uint64_t remat_extra_bytes;
  uint64_t remat_short_by; /* bytes still over the limit after remat, 0 if it fits */
  bool remat_ran;
};

/* "gpu", "cpu", "tpu" or "unknown". */
const char *hbm__plan_backend_name(int backend);

/* Memory-space names by XLA colour (HBM 0, Host 5, ...). */
const char *hbm__hlo_color_name(int color, char *buf, size_t cap);

/* Fills summary and the byte breakdown from the profile (via hbm_analyze) and as. */
hbm_status_t hbm__plan_finish(hbm_plan_t *plan);

/* Rematerialization (remat.c): edits plan->module until its plan fits opt.memory or no
 * candidate is left; fills plan->remats. The caller re-plans afterwards. */
hbm_status_t hbm__plan_remat(hbm_plan_t *plan, const hlo_plan_opts_t *opt);

/* XLA dumps (xla_dump.c): builds plan->profile and the byte breakdown. */
bool hbm__xla_dump_kind(const char *text, size_t len, plan_source_t *kind);
hbm_status_t hbm__plan_from_dump(hbm_plan_t *plan, const char *text, size_t len,
                                 plan_source_t kind);

/* plan_values.c: every value's placement (instruction, shape index, allocation kind, which
 * allocation, offset, size) as a JSON array; empty for plans read from XLA's dumps. */
typedef struct json_t json_t;
json_t *hbm__plan_values_json(const hbm_plan_t *plan);

/* XLA's compact sizes in E1000 reports: "0B", "4.0K", "530.00M", "10.96G". */
char *hbm__xla_bytes(uint64_t bytes, char *buf, size_t cap);

#endif /* HBM_HLO_PLAN_INTERNAL_H */
