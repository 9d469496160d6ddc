/* scale_rmm.h — bench_scale's big RMM allocation logs: a real log (../shared/traces) repeated.
 *
 * Repetition 0 is the log as it is. Repetitions 1, 2, ... are the steps that would follow:
 * the events of every pointer that is not live at the end of the log (each of its allocations
 * is freed later in the log, so its events come in balanced pairs), with their times moved on
 * by the log's length; 'allocate failure' lines and pointers still live at the end appear
 * once, so no pointer is allocated twice. Threads and streams keep their numbers (thread N,
 * stream 0xN). While writing, the expected peak is computed: the most bytes live after any
 * line, which is what `hbm report` calls the peak of a log (one step per line).
 * Header-only: part of bench_scale.c. */
#ifndef HBM_BENCH_SCALE_RMM_H
#define HBM_BENCH_SCALE_RMM_H

#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *rg_action(hbm_log_action_t a) {
  return a == HBM_LOG_ALLOCATE ? "allocate" : a == HBM_LOG_FREE ? "free" : "allocate failure";
}

/* Writes `out`: the log `src` repeated until the file has `target` bytes. *peak gets the most
 * bytes live after any line, *events the lines, *reps the repetitions. */
static hbm_status_t write_rmm(const char *src, const char *out, uint64_t target, uint64_t *peak,
                              uint64_t *events, int *reps) {
  hbm_alloc_log_t log;
  hbm_status_t st = hbm_alloc_log_read(src, 0, &log);
  if (st != HBM_OK)
    return st;
  if (!log.n_events) {
    hbm_alloc_log_free(&log);
    return hbm__error(HBM_ERR_INVALID, "%s: no events to repeat", src);
  }
  hbm_u64map_t live; /* pointer → its size, at the end of the log */
  hbm_u64map_init(&live);
  for (size_t i = 0; i < log.n_events; i++) {
    const hbm_log_event_t *e = &log.events[i];
    if (e->action == HBM_LOG_ALLOCATE)
      hbm_u64map_put(&live, e->pointer, e->size);
    else if (e->action == HBM_LOG_FREE)
      hbm_u64map_remove(&live, e->pointer, NULL);
  }
  bool *again = calloc(log.n_events, 1);
  FILE *f = fopen(out, "wb");
  if (!again || !f) {
    free(again);
    if (f)
      fclose(f);
    hbm_u64map_free(&live);
    hbm_alloc_log_free(&log);
    return hbm__error(HBM_ERR_IO, "%s: cannot write", out);
  }
  static char buf[1 << 20];
  setvbuf(f, buf, _IOFBF, sizeof buf);
  for (size_t i = 0; i < log.n_events; i++)
    again[i] = log.events[i].action != HBM_LOG_ALLOCATE_FAILURE &&
               !hbm_u64map_get(&live, log.events[i].pointer, NULL);
  int64_t t0 = log.events[0].time_ns, t1 = log.events[log.n_events - 1].time_ns;
  int64_t period = t1 - t0 + 1000;
  uint64_t written = (uint64_t)fprintf(f, "Thread,Time,Action,Pointer,Size,Stream\n");
  uint64_t in_use = 0;
  hbm_u64map_t sizes; /* pointer → size, while live */
  hbm_u64map_init(&sizes);
  *peak = 0;
  *events = 0;
  *reps = 0;
  bool failed = false;
  for (int rep = 0; written < target || rep == 0; rep++) {
    for (size_t i = 0; i < log.n_events; i++) {
      const hbm_log_event_t *e = &log.events[i];
      if (rep > 0 && !again[i])
        continue;
      int64_t t = e->time_ns - t0 + (int64_t)rep * period;
      int n =
          fprintf(f, "%u,%lld.%09lld,%s,0x%llx,%llu,0x%x\n", e->thread, (long long)(t / 1000000000),
                  (long long)(t % 1000000000), rg_action(e->action), (unsigned long long)e->pointer,
                  (unsigned long long)e->size, e->stream);
      failed |= n < 0;
      written += n > 0 ? (uint64_t)n : 0;
      (*events)++;
      uint64_t size = 0;
      if (e->action == HBM_LOG_ALLOCATE) {
        in_use += e->size;
        hbm_u64map_put(&sizes, e->pointer, e->size);
      } else if (e->action == HBM_LOG_FREE && hbm_u64map_remove(&sizes, e->pointer, &size)) {
        in_use -= size; /* a free's size may be left out: its allocation's */
      }
      *peak = in_use > *peak ? in_use : *peak;
    }
    *reps = rep + 1;
  }
  if (fclose(f) != 0 || failed)
    st = hbm__error(HBM_ERR_IO, "%s: cannot write", out);
  free(again);
  hbm_u64map_free(&sizes);
  hbm_u64map_free(&live);
  hbm_alloc_log_free(&log);
  return st;
}

#endif /* HBM_BENCH_SCALE_RMM_H */
