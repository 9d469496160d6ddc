/* fuzz_xprof_memory_viewer_json.c — the reader of XProf's own memory_viewer JSON
 * (src/import/xprof_memory_viewer_json.c) on any bytes: a profile or a message naming the
 * file and where (line and column, or the field), never a crash; a profile it accepts is
 * analysed and reported to /dev/null. The corpus holds XProf's output for small programs (a
 * JAX MLP's, a revived buffer's, a TPU program's VMEM), the test fixture, and damaged
 * variants. */
#include "hbm.h"
#include "import/xprof.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *sink;
  if (!sink && !(sink = fopen("/dev/null", "w")))
    return 0;
  hbm_profile_t *p =
      hbm__xprof_memory_viewer_json_load("fuzz.memory_viewer.json", (const char *)data, size);
  if (!p) {
    if (!hbm_last_error()[0])
      abort(); /* a refusal must say why */
    return 0;
  }
  for (int s = 0; s < hbm_profile_space_count(p); s++) {
    hbm_analysis_t *a = hbm_analyze(p, s);
    hbm_analysis_free(a);
  }
  hbm_report_text(p, -1, 80, sink);
  hbm_report_json(p, -1, sink);
  hbm_profile_free(p);
  return 0;
}
