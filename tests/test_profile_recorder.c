/* test_profile_recorder.c — the recorder behind hbm_profiler_*: what the allocator's hooks
 * report lands in <logdir>/plugins/profile/<run>/<host>.<pid>.hbmtrace and reads back as
 * the same events (tags, markers, reservations, OOMs, blocks live before the capture), from
 * many threads at once; an OOM puts the profile on disk before the error returns; two
 * captures within a second get two runs. The hooks are called here the way src/alloc calls
 * them: under a per-device lock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "profile/recorder.h"
#include "profile/trace_format.h"
#include "rec_device.h"

static hbm_profile_t *read_profile(const char *path) {
  size_t len;
  char *data = th_read(path, &len);
  assert_non_null(data);
  hbm_profile_t *p = hbm__trace_parse((const uint8_t *)data, len, path, 0);
  if (!p)
    fprintf(stderr, "%s\n", hbm_last_error());
  assert_non_null(p);
  free(data);
  return p;
}

static char *start_capture(char **dir) {
  *dir = th_mkdtemp("rec");
  assert_int_equal(hbm_profiler_start(*dir), HBM_OK);
  const char *path = hbm_profiler_path();
  assert_non_null(path);
  assert_non_null(strstr(path, "/plugins/profile/"));
  char suffix[64];
  snprintf(suffix, sizeof suffix, ".%ld.hbmtrace", (long)getpid());
  assert_non_null(strstr(path, suffix));
  return strdup(path);
}

static void end_capture(char *dir, char *path) {
  th_rmtree(dir);
  free(dir);
  free(path);
}

/* Whether /proc/cpuinfo lists both invariant-TSC flags (what the recorder's choice of clock
 * depends on, whatever the kernel's clocksource). */
static bool cpu_has_invariant_tsc(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return false;
  char line[8192];
  bool yes = false;
  while (!yes && fgets(line, sizeof line, f))
    yes =
        !strncmp(line, "flags", 5) && strstr(line, " constant_tsc") && strstr(line, " nonstop_tsc");
  fclose(f);
  return yes;
}

/* ---- tests ---- */

/* Issue 16: the recorder stamps events with the invariant TSC wherever the CPU has one, not
 * only where the kernel's clocksource is the TSC (cloud VMs run on kvm-clock); the header
 * says which clock, and event times still follow the order of events. */
static void invariant_tsc_is_the_clock(void **state) {
  (void)state;
#if !defined(__x86_64__) && !defined(__i386__)
  th_skip("not an x86 CPU: no TSC");
#endif
  if (getenv("HBM_RECORDER_CLOCK"))
    th_skip("HBM_RECORDER_CLOCK chooses the clock");
  if (!cpu_has_invariant_tsc())
    th_skip("this CPU has no invariant TSC");
  fake_device_t d = {0};
  open_device(&d, "simClock");
  char *dir, *path = start_capture(&dir);
  for (uint64_t i = 0; i < 1000; i++)
    dev_alloc(&d, 0x10000 + i * 256, 256, NULL);
  for (uint64_t i = 0; i < 1000; i++)
    dev_free(&d, 0x10000 + i * 256);
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  close_device(&d);
  hbm_profile_t *p = read_profile(path);
  assert_string_equal(hbm_profile_meta(p, "clock"), "tsc");
  assert_int_equal(hbm_profile_buffer_count(p), 1000);
  /* Each event is a step (docs/trace-format.md), in the order recorded: the 1000 allocations
   * are steps 0..999 and the frees steps 1000..1999, so buffer i lives over [i, 1000 + i). */
  for (int64_t i = 0; i < 1000; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    assert_int_equal(b->address, 0x10000 + (uint64_t)i * 256);
    assert_int_equal(b->start, i);
    assert_int_equal(b->end, 1000 + i);
  }
  hbm_profile_free(p);
  end_capture(dir, path);
}

static void capture_records_events_tags_and_markers(void **state) {
  (void)state;
  fake_device_t d = {.n_live = 2, .live_addr = {0x1000, 0x2000}, .live_size = {300, 700}};
  open_device(&d, "simA");
  char *dir, *path = start_capture(&dir);
  hbm_tag_t act = {"jit(f)/dot", "bf16[8,128]", HBM_CAT_TEMPORARY, "activations", "m.py:3"};
  assert_int_equal(hbm_profiler_step_begin(1), HBM_OK);
  dev_alloc(&d, 0x3000, 5000, &act);
  dev_alloc(&d, 0x5000, 100, NULL);
  assert_int_equal(hbm_profiler_marker("halfway"), HBM_OK);
  dev_free(&d, 0x1000);
  dev_free(&d, 0x3000);
  dev_alloc(&d, 0x3000, 64, &act);
  /* the allocator's way: interned strings, kept by address */
  static const char stable_op[] = "jit(f)/stable", stable_group[] = "stable group";
  hbm_tag_t stable = {stable_op, NULL, HBM_CAT_OUTPUT, stable_group, NULL};
  pthread_mutex_lock(&d.lock);
  hbm__rec_alloc_stable(d.id, 0x7000, 32, 256, &stable);
  hbm__rec_alloc_stable(d.id, 0x7100, 32, 256, &stable);
  hbm__rec_alloc_stable(d.id, 0x7200, 32, 256, NULL);
  pthread_mutex_unlock(&d.lock);
  assert_int_equal(hbm_profiler_step_end(1), HBM_OK);
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  assert_null(hbm_profiler_path());
  close_device(&d);

  hbm_profile_t *p = read_profile(path);
  assert_null(hbm_profile_meta(p, "lost"));
  assert_non_null(hbm_profile_meta(p, "host"));
  assert_int_equal(hbm_profile_space_count(p), 1);
  const hbm_space_info_t *s = hbm_profile_space(p, 0);
  assert_string_equal(s->name, "HBM");
  assert_string_equal(s->device, "simA");
  assert_true(s->limit == 1ull << 30);
  /* 2 described + 6 allocated; one step per alloc/free event */
  assert_true(hbm_profile_buffer_count(p) == 8);
  assert_true(hbm_profile_step_count(p) == 10);
  for (int i = 5; i <= 6; i++) {
    assert_string_equal(hbm_profile_buffer(p, i)->op, "jit(f)/stable");
    assert_string_equal(hbm_profile_buffer(p, i)->group, "stable group");
    assert_null(hbm_profile_buffer(p, i)->shape);
    assert_int_equal(hbm_profile_buffer(p, i)->category, HBM_CAT_OUTPUT);
  }
  assert_null(hbm_profile_buffer(p, 7)->op);
  const hbm_buffer_t *b = hbm_profile_buffer(p, 2);
  assert_true(b->address == 0x3000 && b->size == 5000);
  assert_string_equal(b->op, "jit(f)/dot");
  assert_string_equal(b->shape, "bf16[8,128]");
  assert_string_equal(b->group, "activations");
  assert_string_equal(b->source, "m.py:3");
  assert_int_equal(b->category, HBM_CAT_TEMPORARY);
  assert_string_equal(hbm_profile_buffer(p, 0)->op, "weights");
  assert_null(hbm_profile_buffer(p, 3)->op);
  /* in use: 300, 1000, 6000, 6100, 5800, 800, 864, 896, 928, 960: the peak is 6100 at 3 */
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_true(hbm_analysis_summary(a)->peak_bytes == 6100);
  assert_true(hbm_analysis_summary(a)->peak_step == 3);
  assert_true(hbm_analysis_summary(a)->peak_reserved_bytes == 1ull << 30);
  hbm_analysis_free(a);
  assert_int_equal(hbm_profile_marker_count(p), 3);
  assert_int_equal(hbm_profile_marker(p, 0)->kind, HBM_MARKER_STEP_BEGIN);
  assert_true(hbm_profile_marker(p, 0)->value == 1);
  assert_string_equal(hbm_profile_marker(p, 1)->text, "halfway");
  assert_true(hbm_profile_marker(p, 1)->step == 4);
  assert_int_equal(hbm_profile_marker(p, 2)->kind, HBM_MARKER_STEP_END);
  for (int64_t i = 1; i < hbm_profile_step_count(p); i++)
    assert_true(hbm_profile_step_time(p, i) >= hbm_profile_step_time(p, i - 1));
  hbm_profile_free(p);
  end_capture(dir, path);
}

typedef struct worker {
  fake_device_t *dev;
  int index, n;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  hbm_tag_t tag = {"worker", NULL, HBM_CAT_TEMPORARY, NULL, NULL};
  uint64_t base = 0x100000000ull * (uint64_t)(w->index + 1);
  for (int i = 0; i < w->n; i++) {
    dev_alloc(w->dev, base + (uint64_t)(i % 64) * 4096, 256 + (uint64_t)(i % 7),
              i % 3 ? &tag : NULL);
    dev_free(w->dev, base + (uint64_t)(i % 64) * 4096);
    if (w->index == 0 && i % 5000 == 0)
      hbm_profiler_flush(); /* a flush while the others record */
  }
  return NULL;
}

static void threads_record_concurrently(void **state) {
  (void)state;
  fake_device_t d = {0};
  open_device(&d, "simT");
  char *dir, *path = start_capture(&dir);
  enum { THREADS = 4, EACH = 20000 };
  pthread_t th[THREADS];
  worker_t w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker_t){&d, i, EACH};
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  close_device(&d);
  hbm_profile_t *p = read_profile(path);
  assert_null(hbm_profile_meta(p, "lost"));
  assert_null(hbm_profile_meta(p, "unmatched_frees"));
  assert_null(hbm_profile_meta(p, "missing_frees"));
  assert_true(hbm_profile_buffer_count(p) == THREADS * EACH);
  assert_true(hbm_profile_step_count(p) == 2 * THREADS * EACH);
  for (int64_t i = 0; i < hbm_profile_buffer_count(p); i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    assert_true(b->end > b->start && !(b->flags & HBM_BUF_LIVE_OUT));
  }
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_true(hbm_analysis_summary(a)->peak_bytes <= THREADS * (256 + 6));
  hbm_analysis_free(a);
  hbm_profile_free(p);
  end_capture(dir, path);
}

static void oom_puts_profile_on_disk(void **state) {
  (void)state;
  fake_device_t d = {0};
  open_device(&d, "simO");
  char *dir, *path = start_capture(&dir);
  dev_alloc(&d, 0x4000, 1 << 20, NULL);
  pthread_mutex_lock(&d.lock);
  hbm__rec_oom(d.id, 200ull << 30,
               "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 214748364800 bytes.");
  pthread_mutex_unlock(&d.lock);
  /* read while the capture still runs: the OOM is there, the end is not */
  hbm_profile_t *p = read_profile(path);
  assert_int_equal(hbm_profile_oom_count(p), 1);
  assert_true(hbm_profile_oom(p, 0)->requested == 200ull << 30);
  assert_non_null(strstr(hbm_profile_oom(p, 0)->message, "RESOURCE_EXHAUSTED"));
  assert_true(hbm_profile_buffer_count(p) == 1);
  assert_non_null(strstr(hbm_profile_meta(p, "lost"), "not closed"));
  hbm_profile_free(p);
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  close_device(&d);
  p = read_profile(path);
  assert_null(hbm_profile_meta(p, "lost"));
  assert_int_equal(hbm_profile_oom_count(p), 1);
  hbm_profile_free(p);
  end_capture(dir, path);
}

static void flush_writes_what_was_recorded(void **state) {
  (void)state;
  fake_device_t d = {0};
  open_device(&d, "simF");
  char *dir, *path = start_capture(&dir);
  for (int i = 0; i < 10; i++)
    dev_alloc(&d, 0x10000 + (uint64_t)i * 0x1000, 512, NULL);
  assert_int_equal(hbm_profiler_flush(), HBM_OK);
  hbm_profile_t *p = read_profile(path);
  assert_true(hbm_profile_buffer_count(p) == 10);
  hbm_profile_free(p);
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  close_device(&d);
  end_capture(dir, path);
}

static void two_captures_in_one_second_get_two_runs(void **state) {
  (void)state;
  char *dir = th_mkdtemp("runs");
  assert_int_equal(hbm_profiler_start(dir), HBM_OK);
  char *first = strdup(hbm_profiler_path());
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  assert_int_equal(hbm_profiler_start(dir), HBM_OK);
  char *second = strdup(hbm_profiler_path());
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  assert_string_not_equal(first, second);
  hbm_profile_t *p = read_profile(first), *q = read_profile(second);
  hbm_profile_free(p);
  hbm_profile_free(q);
  hbm_logdir_entry_t e[4];
  size_t total;
  assert_int_equal(hbm_logdir_list(dir, e, 4, &total), HBM_OK);
  assert_int_equal(total, 2);
  assert_string_equal(e[0].path, second); /* newest run first */
  free(first);
  free(second);
  th_rmtree(dir);
  free(dir);
}

static void device_lifecycle_during_capture(void **state) {
  (void)state;
  char *dir, *path = start_capture(&dir);
  fake_device_t d = {0}, again = {0};
  open_device(&d, "simL"); /* opened during the capture: a space of its own */
  dev_alloc(&d, 0x8000, 4096, NULL);
  dev_alloc(&d, 0x9000, 4096, NULL);
  close_device(&d); /* closing releases what it still held */
  open_device(&again, "simL");
  dev_alloc(&again, 0x8000, 100, NULL); /* same address, new life */
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  close_device(&again);
  hbm_profile_t *p = read_profile(path);
  int simL = hbm_profile_find_space(p, "HBM", "simL");
  assert_true(simL >= 0);
  int count = 0;
  for (int i = 0; i < hbm_profile_space_count(p); i++)
    count += !strcmp(hbm_profile_space(p, i)->device, "simL");
  assert_int_equal(count, 1);
  assert_true(hbm_profile_buffer_count(p) == 3);
  assert_true(hbm_profile_buffer(p, 0)->end == 2 && hbm_profile_buffer(p, 1)->end == 2);
  assert_true(hbm_profile_buffer(p, 2)->start == 3);
  assert_null(hbm_profile_meta(p, "missing_frees"));
  hbm_profile_free(p);
  end_capture(dir, path);
}

/* Most events carry a thread's last clock reading (recorder.c, stamp()): a pause between
 * two events must still show in their times (the writer's 10 ms heartbeat makes the next
 * event read the clock), and events in a burst keep their order. Expected: the 50 ms sleep
 * below, less the heartbeat's 10 ms and the usleep's own slack. */
static void pauses_show_in_carried_times(void **state) {
  (void)state;
  char *dir, *path = start_capture(&dir);
  fake_device_t d = {0};
  open_device(&d, "simT");
  for (uint64_t i = 0; i < 5; i++) /* a burst: most of these carry one reading */
    dev_alloc(&d, 0x10000 + i * 0x1000, 256, NULL);
  usleep(50000);
  dev_alloc(&d, 0x20000, 256, NULL); /* fifth of eight since a reading: would carry it */
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  close_device(&d);
  hbm_profile_t *p = read_profile(path);
  assert_true(hbm_profile_step_count(p) == 6);
  for (int64_t i = 1; i < 6; i++)
    assert_true(hbm_profile_step_time(p, i) > hbm_profile_step_time(p, i - 1));
  int64_t gap = hbm_profile_step_time(p, 5) - hbm_profile_step_time(p, 4);
  if (gap < 35000000)
    fail_msg("a 50 ms pause shows as %lld ns", (long long)gap);
  for (int i = 0; i < 6; i++) /* the buffers in the order they were allocated */
    assert_true(hbm_profile_buffer(p, i)->start == i);
  hbm_profile_free(p);
  end_capture(dir, path);
}

static void misuse_gives_messages(void **state) {
  (void)state;
  assert_int_equal(hbm_profiler_stop(), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "no profile is being captured"));
  assert_int_equal(hbm_profiler_marker("x"), HBM_ERR_INVALID);
  assert_int_equal(hbm_profiler_flush(), HBM_ERR_INVALID);
  assert_int_equal(hbm_profiler_start(""), HBM_ERR_INVALID);
  assert_int_equal(hbm_profiler_start("/proc/hbm-cannot-create-here"), HBM_ERR_IO);
  char *dir, *path = start_capture(&dir);
  assert_int_equal(hbm_profiler_start(dir), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "already being captured"));
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  /* hooks without a capture do nothing */
  hbm__rec_alloc(0, 1, 2, 3, NULL);
  hbm__rec_free(0, 1);
  end_capture(dir, path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(capture_records_events_tags_and_markers),
      cmocka_unit_test(invariant_tsc_is_the_clock),
      cmocka_unit_test(threads_record_concurrently),
      cmocka_unit_test(oom_puts_profile_on_disk),
      cmocka_unit_test(flush_writes_what_was_recorded),
      cmocka_unit_test(two_captures_in_one_second_get_two_runs),
      cmocka_unit_test(device_lifecycle_during_capture),
      cmocka_unit_test(pauses_show_in_carried_times),
      cmocka_unit_test(misuse_gives_messages),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
