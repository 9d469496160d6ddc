/* fit.c — the largest value of a varying dimension (a batch size, a sequence length) whose
 * program fits in a given memory, found by planning members of the module family: an
 * exponential search from the smallest value for the first one that does not fit, then
 * bisection between the last that fits and it. Used by `hbm plan --fit` (files or a command
 * per value) and hbm.fit in Python (JAX compiles each value). A plan "fits" as hbm_plan says:
 * reserved + arguments + outputs + constants + temporaries (with fragmentation) <= memory. */
#include "hlo/plan_internal.h"
#include "profile/json_out.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_HI ((int64_t)1 << 40)

/* The candidate values: opt->values, or multiples of opt->multiple in [lo, hi]. */
typedef struct candidates {
  const hbm_fit_options_t *opt;
  int64_t first_k, multiple; /* value(i) = (first_k + i) * multiple */
  size_t n;
} candidates_t;

static int64_t value_at(const candidates_t *c, size_t i) {
  return c->opt->values ? c->opt->values[i] : (c->first_k + (int64_t)i) * c->multiple;
}

static hbm_status_t candidates_of(const hbm_fit_options_t *opt, candidates_t *c) {
  memset(c, 0, sizeof *c);
  c->opt = opt;
  if (opt->plan.memory == 0)
    return hbm__error(HBM_ERR_INVALID, "fit: no memory to fit in (give the device's memory)");
  if (opt->values) {
    for (size_t i = 1; i < opt->n_values; i++)
      if (opt->values[i] <= opt->values[i - 1])
        return hbm__error(HBM_ERR_INVALID,
                          "fit: the values must be ascending (%" PRId64 " after %" PRId64 ")",
                          opt->values[i], opt->values[i - 1]);
    c->n = opt->n_values;
    return c->n ? HBM_OK : hbm__error(HBM_ERR_INVALID, "fit: no values to try");
  }
  int64_t lo = opt->lo ? opt->lo : 1, hi = opt->hi ? opt->hi : DEFAULT_HI;
  c->multiple = opt->multiple ? opt->multiple : 1;
  if (lo < 1 || c->multiple < 1 || hi < lo)
    return hbm__error(HBM_ERR_INVALID,
                      "fit: values from %" PRId64 " to %" PRId64 " in multiples of %" PRId64
                      " are not a range of positive values",
                      lo, hi, c->multiple);
  c->first_k = (lo + c->multiple - 1) / c->multiple;
  int64_t last_k = hi / c->multiple;
  if (last_k < c->first_k)
    return hbm__error(HBM_ERR_INVALID,
                      "fit: no multiple of %" PRId64 " between %" PRId64 " and %" PRId64,
                      c->multiple, lo, hi);
  c->n = (size_t)(last_k - c->first_k + 1);
  return HBM_OK;
}

typedef struct search {
  hbm_fit_plan_fn plan_fn;
  void *ctx;
  const hbm_fit_options_t *opt;
  candidates_t c;
  hbm_fit_result_t *out;
  long fit_index, fail_index; /* -1 until known */
  size_t cap_tried;
} search_t;

/* Plans candidate i; keeps the plan when it is the best fitting or the first failing one. */
static hbm_status_t try_index(search_t *s, size_t i, bool *fits) {
  int64_t value = value_at(&s->c, i);
  hbm__error_clear(); /* a callback that cannot set hbm's error still gets a message */
  hbm_plan_t *plan = s->plan_fn(value, &s->opt->plan, s->ctx);
  if (!plan)
    return hbm_last_status() != HBM_OK
               ? hbm_last_status()
               : hbm__error(HBM_ERR_INVALID, "fit: the plan for %" PRId64 " could not be made",
                            value);
  hbm_fit_result_t *r = s->out;
  if (r->n_tried == s->cap_tried) {
    hbm_fit_try_t *grown =
        hbm__grow_array(r->tried, &s->cap_tried, r->n_tried + 1, sizeof *grown, 32);
    if (!grown) {
      hbm_plan_free(plan);
      return hbm_last_status();
    }
    r->tried = grown;
  }
  *fits = hbm_plan_get_summary(plan)->fits != 0;
  r->tried[r->n_tried++] = (hbm_fit_try_t){value, plan->used_bytes, *fits};
  if (*fits) { /* values only grow between fitting plans kept */
    hbm_plan_free(r->plan);
    r->plan = plan;
    r->value = value;
    s->fit_index = (long)i;
  } else {
    hbm_plan_free(r->next_plan);
    r->next_plan = plan;
    r->next = value;
    s->fail_index = (long)i;
  }
  return HBM_OK;
}

/* Indices 0, 1, 3, 7, ... (values lo, 2 lo, 4 lo, ... from 1) until one does not fit. */
static hbm_status_t exponential(search_t *s) {
  bool fits = false;
  hbm_status_t st = try_index(s, 0, &fits);
  for (size_t i = 1; st == HBM_OK && fits;) {
    if (i >= s->c.n - 1) {
      if ((long)(s->c.n - 1) != s->fit_index)
        st = try_index(s, s->c.n - 1, &fits);
      break;
    }
    st = try_index(s, i, &fits);
    i = 2 * i + 1;
  }
  return st;
}

static hbm_status_t bisect(search_t *s) {
  hbm_status_t st = HBM_OK;
  while (st == HBM_OK && s->fit_index >= 0 && s->fail_index > s->fit_index + 1) {
    bool fits;
    st = try_index(s, (size_t)(s->fit_index + (s->fail_index - s->fit_index) / 2), &fits);
  }
  return st;
}

hbm_status_t hbm_fit(hbm_fit_plan_fn plan, void *ctx, const hbm_fit_options_t *opt,
                     hbm_fit_result_t *out) {
  if (!plan || !opt || !out)
    return hbm__error(HBM_ERR_INVALID, "fit: NULL argument");
  memset(out, 0, sizeof *out);
  search_t s = {
      .plan_fn = plan, .ctx = ctx, .opt = opt, .out = out, .fit_index = -1, .fail_index = -1};
  hbm_status_t st = candidates_of(opt, &s.c);
  if (st == HBM_OK)
    st = exponential(&s);
  if (st == HBM_OK)
    st = bisect(&s);
  if (st != HBM_OK) {
    hbm_fit_result_free(out);
    return st;
  }
  out->memory = opt->plan.memory;
  out->found = s.fit_index >= 0;
  out->has_next = s.fail_index >= 0;
  return HBM_OK;
}

void hbm_fit_result_free(hbm_fit_result_t *r) {
  if (!r)
    return;
  hbm_plan_free(r->plan);
  hbm_plan_free(r->next_plan);
  free(r->tried);
  memset(r, 0, sizeof *r);
}

/* ---- reports ---- */

static const char *used_text(const hbm_fit_result_t *r, uint64_t used, char *buf, size_t cap) {
  char u[32], m[32], d[32];
  uint64_t mem = r->memory;
  bool fits = used <= mem;
  snprintf(buf, cap, "%s (%" PRIu64 " bytes) used of %s: %s %s",
           hbm_format_bytes(used, u, sizeof u), used, hbm_format_bytes(mem, m, sizeof m),
           fits ? "fits," : "does not fit, over by",
           hbm_format_bytes(fits ? mem - used : used - mem, d, sizeof d));
  if (fits)
    snprintf(buf + strlen(buf), cap - strlen(buf), " to spare");
  return buf;
}

hbm_status_t hbm_fit_report_text(const hbm_fit_result_t *r, const char *dimension, FILE *out) {
  if (!r || !out)
    return hbm__error(HBM_ERR_INVALID, "fit report: NULL result or stream");
  const char *dim = dimension && *dimension ? dimension : "value";
  char mem[32], line[200];
  hbm_format_bytes(r->memory, mem, sizeof mem);
  if (!r->found)
    fprintf(out, "hbm fit: even the smallest %s, %" PRId64 ", does not fit in %s\n", dim, r->next,
            mem);
  else if (!r->has_next)
    fprintf(out, "hbm fit: every %s tried fits in %s; the largest, %" PRId64 ", is the answer\n",
            dim, mem, r->value);
  else
    fprintf(out, "hbm fit: the largest %s that fits in %s is %" PRId64 "\n", dim, mem, r->value);
  if (r->found)
    fprintf(out, "  %s %" PRId64 ": %s\n", dim, r->value,
            used_text(r, r->plan->used_bytes, line, sizeof line));
  if (r->has_next)
    fprintf(out, "  %s %" PRId64 ": %s\n", dim, r->next,
            used_text(r, r->next_plan->used_bytes, line, sizeof line));
  fprintf(out, "  plans made: %zu (%s", r->n_tried, dim);
  for (size_t i = 0; i < r->n_tried; i++)
    fprintf(out, " %" PRId64 "%s", r->tried[i].value, r->tried[i].fits ? "" : "x");
  fprintf(out, "; x: does not fit)\n");
  if (r->has_next) {
    fprintf(out, "\nwhat is at the peak at %s %" PRId64 ", where it stops fitting:\n", dim,
            r->next);
    hbm_status_t st = hbm_plan_report_text(r->next_plan, out);
    if (st != HBM_OK)
      return st;
  }
  return ferror(out) ? hbm__error(HBM_ERR_IO, "cannot write the fit report") : HBM_OK;
}

/* A plan's JSON report as a jansson object. */
static json_t *plan_json(const hbm_plan_t *plan) {
  if (!plan)
    return json_null();
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  if (!mem)
    return NULL;
  hbm_status_t st = hbm_plan_report_json(plan, mem);
  fclose(mem);
  json_t *j = st == HBM_OK ? json_loadb(text, len, 0, NULL) : NULL;
  free(text);
  return j;
}

hbm_status_t hbm_fit_report_json(const hbm_fit_result_t *r, FILE *out) {
  if (!r || !out)
    return hbm__error(HBM_ERR_INVALID, "fit report: NULL result or stream");
  json_t *root = json_object(), *tried = json_array();
  for (size_t i = 0; i < r->n_tried; i++)
    json_array_append_new(
        tried, json_pack("{s:I, s:I, s:b}", "value", (json_int_t)r->tried[i].value, "used_bytes",
                         (json_int_t)r->tried[i].used_bytes, "fits", r->tried[i].fits));
  json_object_set_new(root, "memory_bytes", json_integer((json_int_t)r->memory));
  json_object_set_new(root, "found", json_boolean(r->found));
  json_object_set_new(root, "value", r->found ? json_integer(r->value) : json_null());
  json_object_set_new(root, "next", r->has_next ? json_integer(r->next) : json_null());
  json_object_set_new(root, "tried", tried);
  json_object_set_new(root, "plan", plan_json(r->plan));
  json_object_set_new(root, "next_plan", plan_json(r->next_plan));
  return hbm__write_json(out, root, "fit report");
}
