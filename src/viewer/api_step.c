/* api_step.c — /api/step_plan: mode learn's plan in a profile (the step found, the share of
 * each planned step served from the plan, the memory saved), for the page's small panel; the
 * same object `hbm report --json` gives under "step_plan" (profile/report_step.c reads it
 * from the profile's markers, once for both). */
#include "profile/report_step.h"
#include "viewer/viewer.h"

void hbm__api_step_plan(hbm__viewer_t *v, const hbm__query_t *q, hbm__response_t *r) {
  hbm__target_t t;
  if (!hbm__target_open(v, q, "", false, &t, r))
    return;
  json_t *root = json_object();
  json_object_set_new(root, "step_plan", hbm__step_plan_json(t.profile));
  hbm__respond_json(r, 200, root);
  hbm__target_close(v, &t);
}
