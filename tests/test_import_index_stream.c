/* test_import_index_stream.c — a profile read in one pass as a summary (index_stream.c,
 * hbm__profile_load_summary) is the index the whole profile makes: for captures recorded here
 * (several devices, reservations, OOMs, markers, tags, frees of unknown addresses, buffers
 * allocated again while live, devices closed with buffers live, buffers live out, a device
 * opened late, one-step and empty captures, threads whose events interleave, read through a
 * window small enough that the reader reads the file again) and for ../shared's RMM logs,
 * the streamed index's bytes equal hbm__index_write's for the profile read whole, and the
 * report, text and JSON, is the same byte for byte. The truth is always the whole profile. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "import/load.h"
#include "profile/index.h"
#include "profile/profile_build.h"
#include "profile/trace_format.h"
#include "rec_device.h"

/* ---- the truth: the whole profile's index and reports ---- */

/* The bytes hbm__index_write writes for the profile read whole (then removed). */
static uint8_t *whole_index(const hbm_profile_t *whole, const char *path, size_t *len) {
  assert_int_equal(hbm__index_write(whole, path), HBM_OK);
  char where[4200];
  assert_true(hbm__index_path(path, false, where, sizeof where));
  uint8_t *bytes = (uint8_t *)th_read(where, len);
  assert_non_null(bytes);
  unlink(where);
  return bytes;
}

/* The index bytes of path read in one pass as a summary. */
static uint8_t *streamed_index(const char *path, size_t *len) {
  size_t n;
  char *data = th_read(path, &n);
  assert_non_null(data);
  bool trace = hbm__trace_is(data, n);
  hbm_profile_t *read = trace ? hbm__trace_parse_summary((const uint8_t *)data, n, path)
                              : hbm__alloc_log_load_summary(data, n, path);
  if (!read)
    fprintf(stderr, "%s\n", hbm_last_error());
  assert_non_null(read);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  uint8_t *bytes = hbm__index_stream_bytes(hbm__profile_stream_of(read), &st, len);
  assert_non_null(bytes);
  uint8_t *copy = malloc(*len);
  memcpy(copy, bytes, *len);
  munmap(bytes, *len);
  hbm_profile_free(read);
  free(data);
  return copy;
}

/* A report of every space, text and JSON, as one string. */
static char *reports(const hbm_profile_t *p) {
  char *text = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&text, &len);
  for (int s = 0; s < hbm_profile_space_count(p); s++) {
    assert_int_equal(hbm_report_text(p, s, 120, mem), HBM_OK);
    assert_int_equal(hbm_report_json(p, s, mem), HBM_OK);
  }
  fclose(mem);
  return text;
}

/* The first byte where a and b differ, for the message. */
static size_t first_difference(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
  size_t i = 0;
  while (i < na && i < nb && a[i] == b[i])
    i++;
  return i;
}

/* The streamed summary of path is the whole profile's index, and reports as it does. */
static void check_file(const char *path) {
  hbm_profile_t *whole = hbm_profile_load(path);
  assert_non_null(whole);
  size_t n_whole, n_streamed;
  uint8_t *expected = whole_index(whole, path, &n_whole);
  uint8_t *got = streamed_index(path, &n_streamed);
  if (n_whole != n_streamed || memcmp(expected, got, n_whole))
    fail_msg("%s: the streamed index differs from the whole profile's at byte %zu (%zu, %zu "
             "bytes)",
             path, first_difference(expected, n_whole, got, n_streamed), n_whole, n_streamed);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  hbm_profile_t *indexed = hbm__index_parse(expected, n_whole, &st, false);
  setenv("HBM_INDEX", "never", 1); /* in memory, nothing written */
  hbm_profile_t *summary = hbm__profile_load_summary(path);
  unsetenv("HBM_INDEX");
  if (!indexed) /* every index reads back, a profile of no steps' too (no_buffers) */
    fail_msg("%s: its index is refused: %s", path, hbm_last_error());
  hbm_profile_free(indexed);
  char *want = reports(whole);
  if (!summary)
    fail_msg("%s: %s", path, hbm_last_error());
  assert_true(hbm__profile_is_summary(summary));
  char *have = reports(summary);
  assert_string_equal(have, want);
  free(want), free(have), free(expected), free(got);
  hbm_profile_free(summary);
  hbm_profile_free(whole);
}

/* ---- captures ---- */

static void dev_reserve(fake_device_t *d, hbm_reserve_op_t op, uint64_t addr, uint64_t size) {
  pthread_mutex_lock(&d->lock);
  hbm__rec_reserve(d->id, op, addr, size);
  pthread_mutex_unlock(&d->lock);
}

/* Starts a capture in a new directory; its file's path. */
static char *start(char **dir) {
  *dir = th_mkdtemp("stream");
  assert_int_equal(hbm_profiler_start(*dir), HBM_OK);
  return strdup(hbm_profiler_path());
}

static void check_capture(char *dir, char *path) {
  check_file(path);
  th_rmtree(dir);
  free(dir);
  free(path);
}

static const hbm_tag_t tags[] = {
    {"jit(f)/dot", "bf16[8,128]", HBM_CAT_TEMPORARY, "activations", "m.py:3"},
    {"weights", "f32[1024]", HBM_CAT_PARAMETER, "params", "init.py:1"},
    {"out", NULL, HBM_CAT_OUTPUT, NULL, NULL},
    {NULL, NULL, HBM_CAT_TEMPORARY, "temporary", NULL}, /* a group named as a category */
};

/* Several devices, one opened late; tags; growth and expandable reservations; OOMs;
 * markers; frees of unknown addresses; an address allocated again while live; a device
 * closed with buffers live; buffers live out; blocks of steps past 4096 and 64. */
static void many_kinds_of_events(void **state) {
  (void)state;
  fake_device_t a = {0}, b = {0}, c = {0};
  open_device(&a, "simA");
  char *dir, *path = start(&dir);
  open_device(&b, "simB");
  for (uint64_t i = 0; i < 6000; i++) {
    const hbm_tag_t *tag = i % 5 ? &tags[i % HBM_ARRAY_LEN(tags)] : NULL;
    dev_alloc(i % 3 ? &a : &b, 0x1000 + (i % 97) * 0x10000, 1000 + (i * 7919) % 50000, tag);
    if (i % 4 == 1)
      dev_free(i % 3 ? &a : &b, 0x1000 + ((i * 31) % 97) * 0x10000);
    if (i % 1000 == 500) {
      dev_reserve(&a, HBM_RESERVE_GROW, 0x40000000 + i * 0x100000, 1 << 20);
      hbm_profiler_marker("phase");
      hbm_profiler_step_begin((int64_t)i);
    }
    if (i % 1500 == 700)
      dev_reserve(&a, HBM_RESERVE_RELEASE, 0x40000000 + 500 * 0x100000, 1 << 20);
    if (i == 3000) {
      pthread_mutex_lock(&b.lock);
      hbm__rec_oom(b.id, 1ull << 40, "RESOURCE_EXHAUSTED: Out of memory (test)");
      pthread_mutex_unlock(&b.lock);
      open_device(&c, "simC"); /* a device opened past the first blocks of steps */
    }
    if (i > 3000 && i % 7 == 0) {
      dev_reserve(&c, i % 2 ? HBM_RESERVE_MAP : HBM_RESERVE_UNMAP, 0x2000000 + (i % 13) * 4096,
                  4096);
      dev_alloc(&c, 0x2000000 + (i % 13) * 4096, 4096, &tags[1]);
    }
    if (i % 2000 == 1999)
      hbm_profiler_step_end((int64_t)i);
  }
  close_device(&b);         /* with buffers live: released by the close */
  dev_free(&a, 0xdead0000); /* an address never allocated */
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  close_device(&a);
  close_device(&c);
  check_capture(dir, path);
}

/* More buffers than the builder's ring of live buffers holds, some long-lived: those move
 * to its map of older ones, some freed from there, some live out. */
static void long_and_short_lived(void **state) {
  (void)state;
  fake_device_t a = {0};
  open_device(&a, "simLong");
  char *dir, *path = start(&dir);
  for (uint64_t i = 0; i < 40; i++)
    dev_alloc(&a, 0x100000000ull + i * 0x10000, 1 << 20, &tags[1]);
  for (uint64_t i = 0; i < 150000; i++) {
    dev_alloc(&a, 0x1000 + (i % 50) * 0x1000, 256 + i % 4000, i % 2 ? &tags[0] : NULL);
    if (i % 10 == 9)
      for (uint64_t k = i - 9; k <= i - (i % 20 == 19 ? 1 : 0); k++)
        dev_free(&a, 0x1000 + (k % 50) * 0x1000);
    if (i == 100000)
      for (uint64_t k = 0; k < 20; k++) /* half the long-lived go, from the older map */
        dev_free(&a, 0x100000000ull + k * 0x10000);
  }
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  close_device(&a);
  check_capture(dir, path);
}

static void one_step(void **state) {
  (void)state;
  fake_device_t a = {0};
  open_device(&a, "simOne");
  char *dir, *path = start(&dir);
  dev_alloc(&a, 0x1000, 4096, &tags[0]);
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  close_device(&a);
  check_capture(dir, path);
}

static void no_buffers(void **state) {
  (void)state;
  fake_device_t a = {0};
  open_device(&a, "simNone");
  char *dir, *path = start(&dir);
  hbm_profiler_marker("nothing happened");
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  close_device(&a);
  check_capture(dir, path);
}

typedef struct worker {
  fake_device_t *dev;
  int index, n;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  uint64_t base = 0x100000000ull * (uint64_t)(w->index + 1);
  for (int i = 0; i < w->n; i++) {
    dev_alloc(w->dev, base + (uint64_t)(i % 64) * 4096, 256 + (uint64_t)(i % 7) * 1000,
              i % 3 ? &tags[i % 3] : NULL);
    if (i % 3 != 2)
      dev_free(w->dev, base + (uint64_t)((i * 7) % 64) * 4096);
    if (w->index == 0 && i % 5000 == 0)
      hbm_profiler_flush();
  }
  return NULL;
}

static void threads_interleave(size_t window) {
  fake_device_t a = {0}, b = {0};
  open_device(&a, "simT0");
  open_device(&b, "simT1");
  char *dir, *path = start(&dir);
  enum { THREADS = 4, EACH = 12000 };
  pthread_t th[THREADS];
  worker_t w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker_t){i % 2 ? &b : &a, i, EACH};
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  assert_int_equal(hbm_profiler_stop(), HBM_OK);
  close_device(&a);
  close_device(&b);
  size_t had = hbm__trace_window;
  hbm__trace_window = window;
  check_file(path);
  hbm__trace_window = had;
  th_rmtree(dir);
  free(dir);
  free(path);
}

static void threads_in_the_window(void **state) {
  (void)state;
  threads_interleave(hbm__trace_window);
}

/* A window of 16 events: the threads' events come further apart, and the file is read again
 * with its events sorted whole; the summary starts again with it. */
static void threads_read_again(void **state) {
  (void)state;
  uint64_t before = hbm__trace_rereads();
  threads_interleave(16);
  assert_true(hbm__trace_rereads() > before);
}

/* A saved profile (explicit records: buffers with their whole range, not in step order) is
 * refused, never summed wrong: the caller reads it whole. */
static void saved_profile_is_refused(void **state) {
  (void)state;
  char *dir = th_mkdtemp("saved");
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "saved");
  int space = hbm_profile_add_space(p, "HBM", "sim0", 0, 1 << 20);
  for (int i = 0; i < 10; i++)
    hbm_profile_add_step(p, i, NULL);
  hbm_buffer_t b = {.size = 100, .unpadded_size = 100, .start = 2, .end = 7, .space = space};
  hbm_profile_add_buffer(p, &b);
  b.start = 1, b.end = 3;
  hbm_profile_add_buffer(p, &b);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  char path[4200];
  snprintf(path, sizeof path, "%s/saved.hbmtrace", dir);
  assert_int_equal(hbm_profile_save(p, path), HBM_OK);
  hbm_profile_free(p);
  assert_null(hbm__profile_load_summary(path));
  th_rmtree(dir);
  free(dir);
}

/* An RMM log of more allocations than the builder keeps sources for before it makes its
 * table of them again (each allocation's source is its FILE:LINE): some live long. */
static void rmm_log_of_many_allocations(void **state) {
  (void)state;
  char *dir = th_mkdtemp("rmm");
  char path[4200];
  snprintf(path, sizeof path, "%s/many.csv", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "Thread,Time,Action,Pointer,Size,Stream\n");
  for (int i = 0; i < 30; i++) /* live long, a third of them out */
    fprintf(f, "0,0.%06d,allocate,0x%x,%d,0x0\n", i, 0x10000000 + i * 0x100000, 1 << 20);
  for (int i = 0; i < 200000; i++) {
    fprintf(f, "0,%d.%06d,allocate,0x%x,%d,0x0\n", 1 + i / 1000000, i % 1000000,
            0x1000 + (i % 40) * 0x1000, 256 + i % 3000);
    if (i % 8 == 7)
      for (int k = i - 7; k <= i; k++)
        fprintf(f, "0,%d.%06d,free,0x%x,%d,0x0\n", 1 + i / 1000000, i % 1000000,
                0x1000 + (k % 40) * 0x1000, 256 + k % 3000);
    if (i == 150000)
      for (int k = 0; k < 20; k++)
        fprintf(f, "0,%d.%06d,free,0x%x,%d,0x0\n", 1 + i / 1000000, i % 1000000,
                0x10000000 + k * 0x100000, 1 << 20);
  }
  fclose(f);
  check_file(path);
  /* cut inside its last line: read up to it, the loss noted, in one pass as whole. The last
   * line is the free of i = 199999: "0,1.199999,free,0x28000,2255,0x0\n", 33 bytes; 7 cut
   * leave 26 of it, which are lost. */
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(truncate(path, st.st_size - 7), 0);
  hbm_profile_t *cut = hbm_profile_load(path);
  assert_non_null(cut);
  assert_non_null(strstr(hbm_profile_meta(cut, "lost"), "lost 26 bytes from line"));
  hbm_profile_free(cut);
  check_file(path);
  th_rmtree(dir);
  free(dir);
}

/* ../shared's RMM logs. */
static void shared_rmm_logs(void **state) {
  (void)state;
  th_need_shared();
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/traces", HBM_SHARED_DIR);
  DIR *d = opendir(dir);
  if (!d)
    th_skip("%s is absent", dir);
  char *cache = th_mkdtemp("cache"); /* ../shared is read-only: indexes go here */
  setenv("XDG_CACHE_HOME", cache, 1);
  struct dirent *e;
  int checked = 0;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (n < 5 || strcmp(e->d_name + n - 4, ".csv"))
      continue;
    char path[4500];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    check_file(path);
    checked++;
  }
  closedir(d);
  unsetenv("XDG_CACHE_HOME");
  th_rmtree(cache);
  free(cache);
  assert_true(checked > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(many_kinds_of_events),
      cmocka_unit_test(long_and_short_lived),
      cmocka_unit_test(one_step),
      cmocka_unit_test(no_buffers),
      cmocka_unit_test(threads_in_the_window),
      cmocka_unit_test(threads_read_again),
      cmocka_unit_test(saved_profile_is_refused),
      cmocka_unit_test(rmm_log_of_many_allocations),
      cmocka_unit_test(shared_rmm_logs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
