/* oom_written.h — for the tests of pasted OOM texts (test_import_oom_text.c,
 * test_import_oom_module.c): what a writer (hbm_oom_text_explain or _json) writes about a
 * parsed text, as a malloc'd string. Include after cmocka.h and hbm.h. */
#ifndef HBM_TESTS_OOM_WRITTEN_H
#define HBM_TESTS_OOM_WRITTEN_H

#include <stdio.h>

static inline char *written(const hbm_oom_text_t *t,
                            hbm_status_t (*write)(const hbm_oom_text_t *, FILE *)) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  assert_int_equal(write(t, f), HBM_OK);
  fclose(f);
  return text;
}

#endif
