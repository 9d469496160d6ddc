/* report_step.c — mode learn's plan as `hbm report` (text and JSON) and the viewer's panel
 * (/api/step_plan) show it. The strategy (src/alloc/step_serve.c) records what it does as
 * markers in the profile ("hbm plan: ..."): the step it found and the plan it made, each
 * planned step's share served from the plan and the most memory reserved in it, a plan
 * retired. They are read back here, once, for every view: the step found, the share served
 * per step, and the memory saved (what the step before the plan reserved at most, against
 * what the plan holds). */
#include "profile/report_step.h"
#include "profile/json_out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEXT_STEPS 8 /* planned steps listed one by one in the text report */

typedef struct plan_step {
  unsigned long long served, operations, fell_back, reserved; /* reserved: 0 when not said */
} plan_step_t;

typedef struct step_plan {
  unsigned long long operations, allocations; /* the step found (the last plan's) */
  unsigned long long plan, bound, first;      /* bytes: the plan, its step's live peak, what
                                                 the step before the plan reserved at most */
  unsigned long long plans, retired;
  plan_step_t *steps;
  size_t n_steps, cap;
} step_plan_t;

static bool add_step(step_plan_t *sp, plan_step_t s) {
  if (sp->n_steps == sp->cap) {
    plan_step_t *grown = hbm__grow_array(sp->steps, &sp->cap, sp->n_steps + 1, sizeof *grown, 64);
    if (!grown)
      return false;
    sp->steps = grown;
  }
  sp->steps[sp->n_steps++] = s;
  return true;
}

/* The plan's markers, read; false when there are none (or host memory ran out). */
static bool read_plan(const hbm_profile_t *p, step_plan_t *sp) {
  memset(sp, 0, sizeof *sp);
  for (size_t i = 0; i < hbm_profile_marker_count(p); i++) {
    const char *t = hbm_profile_marker(p, i)->text;
    unsigned long long step;
    plan_step_t s = {0};
    if (!t || strncmp(t, "hbm plan: ", 10))
      continue;
    if (sscanf(t,
               "hbm plan: step of %llu operations (%llu allocations) found in the stream; plan "
               "%llu bytes for a step live peak of %llu bytes; the first step reserved %llu",
               &sp->operations, &sp->allocations, &sp->plan, &sp->bound, &sp->first) == 5)
      sp->plans++;
    else if (sscanf(t,
                    "hbm plan: step %llu: %llu of %llu operations served from the plan, %llu fell "
                    "back; %llu",
                    &step, &s.served, &s.operations, &s.fell_back, &s.reserved) >= 4 &&
             !add_step(sp, s))
      return false;
    else if (!strncmp(t, "hbm plan: retired", 17))
      sp->retired++;
  }
  return sp->plans > 0;
}

static double share(unsigned long long part, unsigned long long whole) {
  return whole ? (double)part / (double)whole : 0.0;
}

static const char *bytes_text(unsigned long long n, char *buf) {
  return hbm_format_bytes(n, buf, 32);
}

/* Totals over the planned steps: served and all operations, the most reserved in any (0 when
 * the markers do not say). */
static void totals(const step_plan_t *sp, unsigned long long *served, unsigned long long *all,
                   unsigned long long *reserved) {
  *served = *all = *reserved = 0;
  for (size_t i = 0; i < sp->n_steps; i++) {
    *served += sp->steps[i].served, *all += sp->steps[i].operations;
    *reserved = sp->steps[i].reserved > *reserved ? sp->steps[i].reserved : *reserved;
  }
}

/* What the plan saved: the most the step before it reserved, less the most reserved in a
 * planned step (or, when the markers do not say that, less the plan itself). */
static long long saved_bytes(const step_plan_t *sp, unsigned long long reserved) {
  return (long long)sp->first - (long long)(reserved ? reserved : sp->plan);
}

void hbm__step_plan_text(FILE *out, const hbm_profile_t *p) {
  step_plan_t sp;
  if (!read_plan(p, &sp)) {
    free(sp.steps);
    return;
  }
  char a[32], b[32], c[32];
  unsigned long long served, all, reserved;
  totals(&sp, &served, &all, &reserved);
  long long saved = saved_bytes(&sp, reserved);
  fprintf(out,
          "\nstep plan (mode learn)\n  step found     %llu operations (%llu allocations), from "
          "the stream; %llu plan%s made, %llu retired\n",
          sp.operations, sp.allocations, sp.plans, sp.plans == 1 ? "" : "s", sp.retired);
  fprintf(out, "  plan           %s for a step whose blocks peak at %s\n", bytes_text(sp.plan, a),
          bytes_text(sp.bound, b));
  fprintf(out,
          "  memory         the step before the plan reserved %s, the planned steps %s at most: "
          "%s%s saved\n",
          bytes_text(sp.first, a), reserved ? bytes_text(reserved, b) : "(not recorded)",
          saved < 0 ? "-" : "",
          bytes_text(saved < 0 ? (unsigned long long)-saved : (unsigned long long)saved, c));
  fprintf(out,
          "  served         %zu steps, %llu of %llu operations from the plan (%.2f%%), %llu "
          "fell back\n",
          sp.n_steps, served, all, 100.0 * share(served, all), all - served);
  for (size_t i = 0; i < sp.n_steps && i < TEXT_STEPS; i++) {
    const plan_step_t *s = &sp.steps[i];
    fprintf(out, "    step %-4zu     %6.2f%% of %llu operations from the plan", i + 1,
            100.0 * share(s->served, s->operations), s->operations);
    if (s->reserved)
      fprintf(out, ", %s reserved at most", bytes_text(s->reserved, a));
    fprintf(out, "\n");
  }
  if (sp.n_steps > TEXT_STEPS)
    fprintf(out, "    (%zu more steps: hbm report --json lists every one)\n",
            sp.n_steps - TEXT_STEPS);
  free(sp.steps);
}

json_t *hbm__step_plan_json(const hbm_profile_t *p) {
  step_plan_t sp;
  if (!read_plan(p, &sp)) {
    free(sp.steps);
    return json_null();
  }
  unsigned long long served, all, reserved;
  totals(&sp, &served, &all, &reserved);
  json_t *steps = json_array();
  for (size_t i = 0; i < sp.n_steps; i++) {
    const plan_step_t *s = &sp.steps[i];
    json_array_append_new(
        steps, json_pack("{s:I, s:I, s:I, s:f, s:o}", "served", (json_int_t)s->served, "operations",
                         (json_int_t)s->operations, "fell_back", (json_int_t)s->fell_back,
                         "served_fraction", share(s->served, s->operations), "reserved_bytes",
                         s->reserved ? json_integer(hbm__json_bytes(s->reserved)) : json_null()));
  }
  json_t *o =
      json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:I, s:I, s:f, s:o}", "step_operations",
                (json_int_t)sp.operations, "step_allocations", (json_int_t)sp.allocations, "plans",
                (json_int_t)sp.plans, "retired", (json_int_t)sp.retired, "plan_bytes",
                hbm__json_bytes(sp.plan), "bound_bytes", hbm__json_bytes(sp.bound),
                "first_step_reserved_bytes", hbm__json_bytes(sp.first), "planned_reserved_bytes",
                reserved ? json_integer(hbm__json_bytes(reserved)) : json_null(), "saved_bytes",
                (json_int_t)saved_bytes(&sp, reserved), "served_operations", (json_int_t)served,
                "served_fraction", share(served, all), "steps", steps);
  free(sp.steps);
  return o ? o : json_null();
}
