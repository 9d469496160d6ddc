/* fuzz_replay.c — hbm_replay_run on any log the RMM CSV reader accepts (leniently): the
 * replay itself must never crash, and what it reports must hold together: no failed
 * allocation when the log's peak fits easily, and a minimum memory (searched for small
 * logs) that is at least the peak and on which a replay indeed fails nothing. Devices are
 * small (64 MiB) so that runs stay fast; with 8 MiB of live bytes at most, in at most 2048
 * blocks, nothing may fail (the rounding to 256 bytes and the granules at the ends of an
 * expandable range cost well under the other 56 MiB). */
#include "hbm.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define MiB (1ull << 20)

static hbm_replay_result_t replay(const hbm_alloc_log_t *log, hbm_mode_t mode, uint64_t memory,
                                  int min_memory) {
  hbm_replay_options_t opt;
  hbm_replay_options_default(&opt);
  opt.mode = mode;
  opt.memory = memory;
  opt.repeat = -1;
  opt.min_memory = min_memory;
  hbm_replay_result_t r;
  if (hbm_replay_run(log, &opt, &r) != HBM_OK)
    abort(); /* a log the reader accepted is always replayable */
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hbm_alloc_log_t log;
  if (hbm_alloc_log_parse((const char *)data, size, "fuzz.csv", 1, &log) != HBM_OK)
    return 0;
  uint64_t largest = 0; /* sizes near 2^64 make sums of live bytes meaningless */
  for (size_t i = 0; i < log.n_events; i++)
    if (log.events[i].size > largest)
      largest = log.events[i].size;
  bool small = largest <= 16 * MiB;
  const hbm_mode_t modes[] = {HBM_MODE_BFC, HBM_MODE_GROWTH, HBM_MODE_EXPANDABLE};
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    bool search = small && log.n_events <= 200;
    hbm_replay_result_t r = replay(&log, modes[m], 64 * MiB, search);
    /* 4 KiB of slack per allocation covers rounding, and 8 MiB the granules of a range */
    if (small && r.peak_live_bytes <= 8 * MiB && r.allocations <= 2048 && r.failed_allocations)
      abort();
    if (r.failed_allocations && (r.first_failure_event < 0 || !r.first_failure_message))
      abort();
    uint64_t min = r.min_memory_bytes, peak = r.peak_live_bytes;
    hbm_replay_result_free(&r);
    if (!search || !min)
      continue;
    if (min < peak || min % MiB)
      abort();
    r = replay(&log, modes[m], min, 0);
    if (r.failed_allocations)
      abort(); /* the minimum runs the log */
    hbm_replay_result_free(&r);
  }
  hbm_alloc_log_free(&log);
  return 0;
}
