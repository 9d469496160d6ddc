/* fuzz_oom_text.c — the reader of pasted out-of-memory errors (src/import/oom_text*.c) on
 * any bytes: either it finds no error and says so, or what it found explains, writes JSON
 * and becomes a profile that the analysis accepts. */
#include "hbm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(const hbm_oom_text_t *t) {
  FILE *sink = fopen("/dev/null", "w");
  if (!sink)
    abort();
  if (hbm_oom_text_explain(t, sink) != HBM_OK || hbm_oom_text_json(t, sink) != HBM_OK)
    abort(); /* a parsed text always explains */
  fclose(sink);
  hbm_profile_t *p = hbm_oom_text_to_profile(t, "fuzz.txt");
  if (!p)
    abort();
  hbm_analysis_t *a = hbm_analyze(p, 0);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hbm_oom_text_t *t = hbm_oom_text_parse((const char *)data, size, "fuzz.txt");
  if (!t) {
    if (!strstr(hbm_last_error(), "fuzz.txt"))
      abort(); /* every refusal names the input */
    return 0;
  }
  if ((hbm_oom_text_is((const char *)data, size) != 0) != 1)
    abort(); /* the recogniser agrees with the parser */
  check(t);
  hbm_oom_text_free(t);
  return 0;
}
