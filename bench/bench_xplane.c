/* bench_xplane.c — the first view of a large XProf profile: a ~100 MB .xplane.pb like a real
 * multi-program training job's (40 compiled programs of 3000 instructions each in
 * /host:metadata, 300k allocator events on /host:CPU, 3M kernel events on a device plane) is
 * written to a temporary file, then timed: hbm_profile_load (read, walk, replay every
 * program's buffer assignment and the allocator timeline), and the analysis and answers the
 * page's first view needs for its default space (summary, buffers at the peak, a 1000-point
 * timeline). Also the peak resident memory, against the file's size.
 *
 * With --allocators N it instead writes a small .xplane.pb naming N distinct allocators (one
 * allocation each, the audit's adversarial file of issue 26.4) and times loading it and writing
 * `hbm report --json` of it to /dev/null.
 *
 * Usage: bench_xplane [--mb N] [--runs R] [--keep PATH] [--allocators N] */
#include "hbm.h"

#include "../tests/xplane_fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One program: a chain of n fusions, three alive at a time in the temp allocation. */
static uint8_t *program(int which, int n, size_t *len) {
  xf_arena_t a = {0};
  xf_module_t m;
  char name[64];
  snprintf(name, sizeof name, "jit_layer_%d", which);
  xf_module_init(&m, &a, name, (size_t)n + 8);
  int64_t dims[2] = {128, 0}, temp_size = 0;
  int64_t *ids = XF_NEW_ARRAY(&a, int64_t, n), *offsets = XF_NEW_ARRAY(&a, int64_t, n);
  for (int i = 0; i < n; i++) {
    char inst[32], op[64];
    snprintf(inst, sizeof inst, "fusion.%d", i);
    snprintf(op, sizeof op, "jit(train)/layer_%d/op_%d", which, i);
    dims[1] = 64 + (i * 37 + which * 11) % 960;
    int64_t id = xf_instruction(&m, inst, "fusion", 11, dims, 2, op);
    xf_logical_buffer(&m, i + 1, id, dims[0] * dims[1] * 4, 0);
    ids[i] = i + 1, offsets[i] = (i % 3) * 128 * 1024 * 4;
    temp_size = 3 * 128 * 1024 * 4;
  }
  xf_allocation(&m, dims[0] * 1024 * 4, 0, XF_PARAM, &ids[0], NULL, 1);
  xf_allocation(&m, dims[0] * 1024 * 4, 0, XF_LIVE_OUT, &ids[n - 1], NULL, 1);
  xf_allocation(&m, temp_size, 0, 0, &ids[1], &offsets[1], (size_t)n - 2);
  for (int i = 1; i < n - 1; i++) {
    char inst[32];
    snprintf(inst, sizeof inst, "fusion.%d", i);
    xf_event(&m, 0, i + 1, inst, 0);
    if (i >= 3)
      xf_event(&m, 1, i - 1, inst, 0);
  }
  uint8_t *bytes = xf_pack_hlo(&m, len);
  xf_free(&a);
  return bytes;
}

/* The protobuf-c part: /host:metadata and the allocator's plane. */
static uint8_t *programs_and_allocator(int n_programs, int n_memory, size_t *len) {
  xf_arena_t a = {0};
  HbmXplane__XSpace *s = xf_space(&a, 2);
  HbmXplane__XPlane *md = xf_plane(&a, s, "/host:metadata", 0, (size_t)n_programs);
  xf_stat_meta(&a, md, 1, "Hlo Proto");
  for (int i = 0; i < n_programs; i++) {
    size_t n;
    uint8_t *p = program(i, 3000, &n);
    char name[64];
    snprintf(name, sizeof name, "jit_layer_%d(%d)", i, i + 1);
    xf_meta_bytes(&a, xf_event_meta(&a, md, i + 1, name, 1), 1, p, n);
    free(p);
  }
  HbmXplane__XPlane *cpu = xf_plane(&a, s, "/host:CPU", 1, 8);
  xf_event_meta(&a, cpu, 1, "MemoryAllocation", 0);
  xf_event_meta(&a, cpu, 2, "MemoryDeallocation", 0);
  const char *stats[] = {"allocator_name",  "addr", "requested_bytes", "allocation_bytes",
                         "bytes_allocated", "tf_op"};
  for (int i = 0; i < 6; i++)
    xf_stat_meta(&a, cpu, 10 + i, stats[i]);
  HbmXplane__XLine *line = xf_line(&a, cpu, 1000000, (size_t)n_memory);
  uint64_t in_use = 0;
  for (int i = 0; i < n_memory; i++) {
    bool alloc = i % 2 == 0 || i < 64;
    uint64_t slot = alloc ? (uint64_t)i : (uint64_t)(i - 63), size = 256 * (1 + slot % 4096);
    in_use = alloc ? in_use + size : in_use - size;
    HbmXplane__XEvent *e = xf_xevent(&a, line, alloc ? 1 : 2, (int64_t)i * 1000, 6);
    xf_event_str(&a, e, 10, "GPU_0_bfc");
    xf_event_u64(&a, e, 11, 0x7f0000000000ull + slot * 1048576);
    xf_event_u64(&a, e, 12, size - 17);
    xf_event_u64(&a, e, 13, size);
    xf_event_u64(&a, e, 14, in_use);
    xf_event_str(&a, e, 15, "jit(train)/dot_general");
  }
  uint8_t *bytes = xf_pack_space(s, len);
  xf_free(&a);
  return bytes;
}

static size_t put_varint(uint8_t *w, uint64_t v) {
  size_t n = 0;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    w[n++] = (uint8_t)(b | (v ? 0x80 : 0));
  } while (v);
  return n;
}

/* A device plane of n kernel events (metadata id, offset, duration, one stat), written
 * directly in the wire format: an XSpace's planes can be appended one after another. */
static void write_device_plane(FILE *f, size_t n) {
  size_t cap = n * 24 + 4096, at = 0;
  uint8_t *line = malloc(cap), head[16];
  for (size_t i = 0; i < n; i++) {
    uint8_t ev[32];
    size_t k = 0;
    ev[k++] = 0x08, k += put_varint(ev + k, 1 + i % 1000);
    ev[k++] = 0x10, k += put_varint(ev + k, i * 2000000);
    ev[k++] = 0x18, k += put_varint(ev + k, 1500000 + i % 7777);
    ev[k++] = 0x22, ev[k++] = 4, ev[k++] = 0x08, ev[k++] = 0x01, ev[k++] = 0x20;
    ev[k++] = (uint8_t)(i & 0x7f);
    line[at++] = 0x22, line[at++] = (uint8_t)k;
    memcpy(line + at, ev, k), at += k;
  }
  const char name[] = "/device:GPU:0";
  size_t plane = 2 + sizeof name - 1 + 1 + put_varint(head, at) + at;
  size_t h = 0;
  head[h++] = 0x0a, h += put_varint(head + h, plane);
  fwrite(head, 1, h, f);
  fputc(0x12, f), fputc((int)(sizeof name - 1), f), fwrite(name, 1, sizeof name - 1, f);
  h = 0, head[h++] = 0x1a, h += put_varint(head + h, at);
  fwrite(head, 1, h, f);
  fwrite(line, 1, at, f);
  free(line);
}

/* N allocators of one allocation each on /host:CPU. */
static uint8_t *many_allocators(int n, size_t *len) {
  xf_arena_t a = {0};
  HbmXplane__XSpace *s = xf_space(&a, 1);
  HbmXplane__XPlane *cpu = xf_plane(&a, s, "/host:CPU", 1, 8);
  xf_event_meta(&a, cpu, 1, "MemoryAllocation", 0);
  const char *stats[] = {"allocator_name", "addr", "allocation_bytes", "bytes_allocated"};
  for (int i = 0; i < 4; i++)
    xf_stat_meta(&a, cpu, 10 + i, stats[i]);
  HbmXplane__XLine *line = xf_line(&a, cpu, 0, (size_t)n);
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "allocator_%d", i);
    HbmXplane__XEvent *e = xf_xevent(&a, line, 1, (int64_t)i * 1000, 4);
    xf_event_str(&a, e, 10, name);
    xf_event_u64(&a, e, 11, 0x1000);
    xf_event_u64(&a, e, 12, 256 + (uint64_t)i);
    xf_event_u64(&a, e, 13, 256 + (uint64_t)i);
  }
  uint8_t *bytes = xf_pack_space(s, len);
  xf_free(&a);
  return bytes;
}

static int bench_allocators(int n, const char *path, bool keep) {
  size_t len;
  uint8_t *bytes = many_allocators(n, &len);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(bytes, 1, len, f) != len)
    return perror(path), 1;
  fclose(f);
  free(bytes);
  FILE *sink = fopen("/dev/null", "w");
  double t0 = now_ms();
  hbm_profile_t *p = hbm_profile_load(path);
  double t1 = now_ms();
  if (!p || !sink || hbm_report_json(p, -1, sink) != HBM_OK)
    return fprintf(stderr, "bench_xplane: %s\n", hbm_last_error()), 1;
  double t2 = now_ms();
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("allocators: %d in a %.0f KB file: load %.0f ms, report --json %.0f ms, %d spaces "
         "shown, peak resident memory %.0f MB\n",
         n, (double)len / 1e3, t1 - t0, t2 - t1, hbm_profile_space_count(p),
         (double)ru.ru_maxrss / 1024);
  if (hbm_profile_space_count(p) <= 0)
    return fprintf(stderr, "bench_xplane: nothing was read\n"), 1;
  hbm_profile_free(p);
  fclose(sink);
  if (!keep)
    remove(path);
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int mb = 100, runs = 5, allocators = 0;
  const char *keep = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--mb") && i + 1 < argc)
      mb = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--allocators") && i + 1 < argc)
      allocators = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
      runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--keep") && i + 1 < argc)
      keep = argv[++i];
  }
  char path[256];
  snprintf(path, sizeof path, "%s", keep ? keep : "/tmp/bench_xplane_XXXXXX.xplane.pb");
  if (!keep) {
    int fd = mkstemps(path, 10);
    if (fd < 0)
      return perror("mkstemps"), 1;
    close(fd);
  }
  if (allocators > 0)
    return bench_allocators(allocators, path, keep != NULL);
  FILE *f = fopen(path, "wb");
  if (!f)
    return perror(path), 1;
  size_t len;
  uint8_t *head = programs_and_allocator(40, 300000, &len);
  fwrite(head, 1, len, f);
  free(head);
  size_t device_bytes = (size_t)mb * 1048576 > len ? (size_t)mb * 1048576 - len : 0;
  write_device_plane(f, device_bytes / 22); /* ~22 bytes an event */
  long bytes = ftell(f);
  fclose(f);
  printf("file: %.1f MB (%zu KB of programs and allocator events), %s\n", (double)bytes / 1e6,
         len / 1024, path);
  double *load = calloc((size_t)runs, sizeof *load), *view = calloc((size_t)runs, sizeof *view);
  for (int r = 0; r < runs; r++) {
    double t0 = now_ms();
    hbm_profile_t *p = hbm_profile_load(path);
    if (!p)
      return fprintf(stderr, "bench_xplane: %s\n", hbm_last_error()), 1;
    double t1 = now_ms();
    hbm_analysis_t *a = hbm_analyze(p, 0);
    size_t n;
    hbm_analysis_buffers_at_peak_by_size(a, &n);
    hbm_timeline_point_t pts[1000];
    hbm_analysis_timeline(a, 0, hbm_profile_step_count(p), 1000, pts);
    double t2 = now_ms();
    load[r] = t1 - t0, view[r] = t2 - t1;
    if (r == 0)
      printf("profile: %d spaces, %lld steps, %lld buffers; default space %s of %s, peak %llu B\n",
             hbm_profile_space_count(p), (long long)hbm_profile_step_count(p),
             (long long)hbm_profile_buffer_count(p), hbm_profile_space(p, 0)->name,
             hbm_profile_space(p, 0)->device,
             (unsigned long long)hbm_analysis_summary(a)->peak_bytes);
    hbm_analysis_free(a);
    hbm_profile_free(p);
  }
  qsort(load, (size_t)runs, sizeof *load, cmp_double);
  qsort(view, (size_t)runs, sizeof *view, cmp_double);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("load (read + walk + replay), median of %d: %.0f ms (min %.0f, max %.0f)\n", runs,
         load[runs / 2], load[0], load[runs - 1]);
  printf("first view's analysis (summary, buffers at peak, timeline): %.1f ms\n", view[runs / 2]);
  printf("first view total: %.0f ms\n", load[runs / 2] + view[runs / 2]);
  printf("peak resident memory: %.0f MB (file %.0f MB)\n", (double)ru.ru_maxrss / 1024,
         (double)bytes / 1e6);
  if (!keep)
    remove(path);
  free(load);
  free(view);
  return 0;
}
