/* fuzz_xplane.c — the XProf readers (src/import/xplane.c, hlo_proto.c, pb_wire.c) on any
 * bytes: a serialized XSpace, or with a leading 'H' a bare HloProto. They must give a profile
 * or a message naming the file and the byte, never crash; a profile they accept is analysed
 * and reported (text, JSON, Chrome trace) to /dev/null; an XSpace is also read as `hbm
 * replay` reads it (its busiest allocator as a log, its step markers in order). The corpus holds
 * small real .hlo_proto.pb files, the test suite's fixtures and damaged variants of them. */
#include "hbm.h"
#include "import/xprof.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *sink;
  if (!sink && !(sink = fopen("/dev/null", "w")))
    return 0;
  bool hlo = size > 0 && data[0] == 'H';
  const char *name = hlo ? "fuzz.hlo_proto.pb" : "fuzz.xplane.pb";
  if (!hlo) { /* the same bytes as an allocation log (hbm replay), with its step markers */
    hbm_alloc_log_t log;
    char allocator[64];
    if (hbm__xprof_log(name, data, size, &log, allocator, sizeof allocator) != HBM_OK) {
      if (!hbm_last_error()[0])
        abort();
    } else {
      for (size_t i = 0; i < log.n_step_begins; i++) /* in order, each before an event */
        if (log.step_begins[i] >= log.n_events ||
            (i && log.step_begins[i - 1] >= log.step_begins[i]))
          abort();
      hbm_alloc_log_free(&log);
    }
  }
  hbm_profile_t *p = hbm__xprof_load(name, data + hlo, size - hlo);
  if (!p) {
    if (!hbm_last_error()[0])
      abort(); /* a refusal must say why */
    return 0;
  }
  for (int s = 0; s < hbm_profile_space_count(p) && s < 4; s++) {
    hbm_analysis_t *a = hbm_analyze(p, s);
    hbm_analysis_free(a);
  }
  hbm_report_text(p, -1, 80, sink);
  hbm_report_json(p, -1, sink);
  hbm_export_chrome(p, sink);
  hbm_profile_free(p);
  return 0;
}
