/* fuzz_torch_pickle.c — the restricted pickle reader (src/import/pickle.c) and the PyTorch
 * snapshot model (src/import/torch_snapshot.c) on any bytes. Every input must become a
 * profile or a message naming the input and where ("fuzz.pickle: byte N: ..." from the
 * reader); a profile is analysed and reported, and the replay log of the same bytes is built
 * too. Any input is given the pickle magic (0x80, protocol 4) when it lacks it, so mutations
 * reach the opcodes rather than the first check. */
#include "hbm.h"
#include "import/pickle.h"
#include "import/torch_snapshot.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_profile(const uint8_t *data, size_t size) {
  hbm_profile_t *p = hbm__torch_snapshot_load(data, size, "fuzz.pickle", NULL);
  if (!p) {
    if (!strstr(hbm_last_error(), "fuzz.pickle"))
      abort(); /* every refusal names the input */
    return;
  }
  FILE *null = fopen("/dev/null", "w");
  for (int s = 0; s < hbm_profile_space_count(p); s++) {
    hbm_analysis_t *a = hbm_analyze(p, s);
    if (!a)
      abort(); /* a profile the reader built is always valid */
    hbm_analysis_free(a);
  }
  if (null) {
    hbm_report_json(p, -1, null);
    fclose(null);
  }
  hbm_profile_free(p);
}

static void check_log(const uint8_t *data, size_t size) {
  hbm_alloc_log_t log;
  torch_device_summary_t sum;
  if (hbm__torch_snapshot_log(data, size, "fuzz.pickle", -1, &log, &sum, NULL) != HBM_OK)
    return;
  /* frees only of live pointers, allocations only of free ones: what the replay expects */
  hbm_profile_t *p = hbm_alloc_log_to_profile(&log, "fuzz.pickle");
  if (!p)
    abort();
  hbm_profile_free(p);
  hbm_alloc_log_free(&log);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (1u << 20))
    return 0;
  uint8_t *buf = malloc(size + 2);
  if (!buf)
    return 0;
  size_t n = size;
  if (pk_looks_like_pickle(data, size)) {
    memcpy(buf, data, size);
  } else {
    buf[0] = 0x80, buf[1] = 4;
    memcpy(buf + 2, data, size);
    n = size + 2;
  }
  check_profile(buf, n);
  check_log(buf, n);
  free(buf);
  return 0;
}
