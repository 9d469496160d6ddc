/* hlo_helpers.h — for the planner's tests: a module parsed, assigned and heap-simulated
 * from text or from a file under tests/data/hlo/, or the test fails. */
#ifndef HBM_TEST_HLO_HELPERS_H
#define HBM_TEST_HLO_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include "hlo/hlo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct planned {
  hlo_module_t *m;
  hlo_assignment_t as;
} planned_t;

static inline void plan_text(planned_t *p, const char *text, const char *name) {
  p->m = hbm__hlo_parse(text, strlen(text), name);
  if (!p->m)
    fail_msg("%s: %s", name, hbm_last_error());
  assert_int_equal(hbm__hlo_assign(p->m, &p->as), HBM_OK);
  hlo_plan_opts_t o = {1, false};
  assert_int_equal(hbm__hlo_simulate_heap(&p->as, &o), HBM_OK);
}

static inline void plan_file(planned_t *p, const char *file) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/data/hlo/%s", HBM_SOURCE_DIR, file);
  char *data;
  size_t len;
  assert_int_equal(hbm__read_file(path, &data, &len), HBM_OK);
  plan_text(p, data, file);
  free(data);
}

static inline void release(planned_t *p) {
  hbm__hlo_assignment_free(&p->as);
  hbm__hlo_free(p->m);
}

#endif
