/* report_step.h — mode learn's plan, read from a profile's markers (report_step.c), for
 * `hbm report` and the viewer. */
#ifndef HBM_PROFILE_REPORT_STEP_H
#define HBM_PROFILE_REPORT_STEP_H

#include "base/base.h"

#include <jansson.h>
#include <stdio.h>

/* The plan's section of the text report (nothing when the profile holds no plan). */
void hbm__step_plan_text(FILE *out, const hbm_profile_t *p);
/* The same as JSON: the step found, the plan and the memory saved, each planned step's
 * share served and the most reserved in it; json null when there is no plan. */
json_t *hbm__step_plan_json(const hbm_profile_t *p);

#endif /* HBM_PROFILE_REPORT_STEP_H */
