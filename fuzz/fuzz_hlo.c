/* fuzz_hlo.c — the HLO planner (src/hlo) on any bytes: parse, dataflow and aliasing over the
 * flattened schedule, liveness, heap simulation, the profile, both reports, and (for small
 * inputs) rematerialization against a tiny memory limit with the rematerialized module
 * parsed again; then once more with XLA's GPU buffer-assignment rules (output-allocation
 * reuse, tuple allocations, the combined temp allocation). A refusal must be a parse error that
 * says where ("fuzz.hlo:LINE:COL: ..."); an accepted module must give a plan whose temporaries live
 * at the same time never share bytes. */
#include "hbm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_offsets(const hbm_profile_t *p) {
  int64_t n = hbm_profile_buffer_count(p);
  if (n > 2000)
    return; /* quadratic; the property is the same on small plans */
  for (int64_t i = 0; i < n; i++) {
    const hbm_buffer_t *a = hbm_profile_buffer(p, i);
    if (a->flags & HBM_BUF_INDEFINITE)
      continue;
    for (int64_t j = i + 1; j < n; j++) {
      const hbm_buffer_t *b = hbm_profile_buffer(p, j);
      if ((b->flags & HBM_BUF_INDEFINITE) || a->space != b->space)
        continue;
      if (a->start < b->end && b->start < a->end && a->address < b->address + b->size &&
          b->address < a->address + a->size)
        abort();
    }
  }
}

static void plan_once(const char *text, size_t size, const hbm_plan_options_t *opt) {
  hbm_plan_t *plan = hbm_plan_text(text, size, "fuzz.hlo", opt);
  if (!plan) {
    hbm_status_t st = hbm_last_status();
    if (st == HBM_ERR_PARSE && !strstr(hbm_last_error(), "fuzz.hlo:"))
      abort(); /* every parse error says where */
    return;
  }
  check_offsets(hbm_plan_profile(plan));
  FILE *null = fopen("/dev/null", "w");
  if (null) {
    hbm_plan_report_text(plan, null);
    hbm_plan_report_json(plan, null);
    fclose(null);
  }
  if (opt->remat) {
    char *again = hbm_plan_module_text(plan);
    if (again) {
      hbm_plan_options_t plain = {0};
      hbm_plan_t *p2 = hbm_plan_text(again, strlen(again), "fuzz.hlo", &plain);
      if (!p2 && hbm_last_status() == HBM_ERR_PARSE)
        abort(); /* rematerialization must leave a module that still parses */
      hbm_plan_free(p2);
      free(again);
    }
  }
  hbm_plan_free(plan);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hbm_plan_options_t opt = {0};
  plan_once((const char *)data, size, &opt);
  hbm_plan_options_t gpu = {.backend = HBM_PLAN_BACKEND_GPU};
  plan_once((const char *)data, size, &gpu);
  if (size < 4096) {
    opt.memory = 4096;
    opt.remat = 1;
    plan_once((const char *)data, size, &opt);
  }
  return 0;
}
