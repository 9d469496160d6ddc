/* test_import_xprof_sums.c — XProf's files with sizes near 2^63 (issue 26.2): the readers'
 * running sums (the heap-simulator replay of an HloProto, an allocator's bytes in use and its
 * peak in an .xplane.pb) are exact up to HBM_BYTES_MAX and saturate there, never wrap to a
 * small number, and no size is cut down to a smaller one. The hostile files are built here
 * with protobuf-c (tests/xplane_fixtures.h); the expected numbers are worked out in the
 * comments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"
#include "xplane_fixtures.h"

enum { F32 = 11, KIND_ALLOC = 0, KIND_FREE = 1, HLO_STAT = 1 };
enum { EV_ALLOC = 1, EV_FREE = 2 };
enum { S_ALLOCATOR = 10, S_ADDR, S_REQUESTED, S_ALLOCATION, S_IN_USE, S_RESERVED };

static const char *write_bytes(const char *name, const void *data, size_t len) {
  static char path[4200];
  snprintf(path, sizeof path, "%s/%s", th_dir, name);
  assert_int_equal(th_write(path, data, len), 0);
  return path;
}

/* A program with a parameter of `param` bytes and two temporaries A and B of `temp` bytes
 * each, both live at once (ALLOC A, ALLOC B, FREE A, FREE B): its peak is param + 2 temp.
 * f32[n] with n = bytes / 4 gives each buffer its unpadded size. */
static uint8_t *huge_program(const char *name, int64_t param, int64_t temp, size_t *len) {
  xf_arena_t a = {0};
  xf_module_t m;
  xf_module_init(&m, &a, name, 8);
  int64_t dp = param / 4, dt = temp / 4;
  int64_t p = xf_instruction(&m, "p", "parameter", F32, &dp, 1, "params");
  int64_t ia = xf_instruction(&m, "a_fusion", "fusion", F32, &dt, 1, "jit(f)/a");
  int64_t ib = xf_instruction(&m, "b_fusion", "fusion", F32, &dt, 1, "jit(f)/b");
  xf_logical_buffer(&m, 1, p, param, 0);
  xf_logical_buffer(&m, 2, ia, temp, 0);
  xf_logical_buffer(&m, 3, ib, temp, 0);
  int64_t one = 1, temps[] = {2, 3}, offsets[] = {0, temp};
  xf_allocation(&m, param, 0, XF_PARAM, &one, NULL, 1);
  /* the temp allocation as XLA would size it, at most the largest size a proto holds */
  xf_allocation(&m, temp <= INT64_MAX / 2 ? 2 * temp : INT64_MAX, 0, 0, temps, offsets, 2);
  xf_event(&m, KIND_ALLOC, 2, "a", 0);
  xf_event(&m, KIND_ALLOC, 3, "b", 0);
  xf_event(&m, KIND_FREE, 2, "end", 0);
  xf_event(&m, KIND_FREE, 3, "end", 0);
  uint8_t *bytes = xf_pack_hlo(&m, len);
  xf_free(&a);
  return bytes;
}

/* Packs the XSpace built in arena a (freed here), writes it as `file` and reads it back. */
static hbm_profile_t *load_space(xf_arena_t *a, const HbmXplane__XSpace *s, const char *file) {
  size_t len;
  uint8_t *bytes = xf_pack_space(s, &len);
  xf_free(a);
  hbm_profile_t *p = hbm_profile_load(write_bytes(file, bytes, len));
  free(bytes);
  assert_non_null(p);
  return p;
}

static hbm_profile_t *load_program(const char *file, int64_t param, int64_t temp) {
  size_t len;
  uint8_t *bytes = huge_program("jit_huge", param, temp, &len);
  hbm_profile_t *p = hbm_profile_load(write_bytes(file, bytes, len));
  free(bytes);
  assert_non_null(p);
  return p;
}

/* 2^61-byte buffers (the old reader cut every size to 2^48): parameter 2^61 and A + B =
 * 2^62 give a peak of 3 * 2^61 = 6917529027641081856, below HBM_BYTES_MAX and exact. */
static void hlo_heap_is_exact_below_the_limit(void **state) {
  (void)state;
  const uint64_t e61 = (uint64_t)1 << 61;
  hbm_profile_t *p = load_program("exact.hlo_proto.pb", (int64_t)e61, (int64_t)e61);
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_non_null(a);
  const hbm_summary_t *s = hbm_analysis_summary(a);
  assert_true(s->peak_bytes == 6917529027641081856ull);
  assert_true(s->argument_bytes == e61);
  assert_true(s->temporary_bytes == 2 * e61);
  assert_int_equal(s->overflowed, 0);
  size_t n;
  const int64_t *at = hbm_analysis_buffers_at_peak(a, &n);
  assert_int_equal(n, 3);
  for (size_t i = 0; i < n; i++)
    assert_true(hbm_profile_buffer(p, at[i])->size == e61);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

/* Parameter 2^61 and A + B = 2^62 + 2^62: 2^61 + 2^63 passes 2^63 - 1 when B is allocated
 * (an int64_t heap wraps negative there): the peak is HBM_BYTES_MAX, said to be saturated,
 * at B's step with all three buffers live, each with its own size. */
static void hlo_heap_saturates_past_the_limit(void **state) {
  (void)state;
  const uint64_t e61 = (uint64_t)1 << 61, e62 = (uint64_t)1 << 62;
  hbm_profile_t *p = load_program("huge.hlo_proto.pb", (int64_t)e61, (int64_t)e62);
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_non_null(a);
  const hbm_summary_t *s = hbm_analysis_summary(a);
  assert_true(s->peak_bytes == HBM_BYTES_MAX);
  assert_int_equal(s->overflowed, 1);
  size_t n;
  const int64_t *at = hbm_analysis_buffers_at_peak(a, &n);
  assert_int_equal(n, 3);
  assert_true(hbm_profile_buffer(p, at[0])->size == e61);
  assert_true(hbm_profile_buffer(p, at[1])->size == e62);
  assert_true(hbm_profile_buffer(p, at[2])->size == e62);
  hbm_analysis_free(a);
  /* the report says so rather than printing a number */
  char cmd[4400], *out = NULL;
  snprintf(cmd, sizeof cmd, "%s report %s/huge.hlo_proto.pb 2>&1", HBM_BIN, th_dir);
  assert_int_equal(th_run(cmd, &out), 0);
  assert_null(strstr(out, "peak in use 64B"));
  assert_non_null(strstr(out, "8.00EiB (overflowed)"));
  free(out);
  hbm_profile_free(p);
}

/* An .xplane.pb with the hostile program and a small one: programs are listed largest peak
 * first, so a peak that wrapped would put the hostile one last. */
static void hostile_program_is_listed_first(void **state) {
  (void)state;
  xf_arena_t a = {0};
  HbmXplane__XSpace *s = xf_space(&a, 1);
  HbmXplane__XPlane *md = xf_plane(&a, s, "/host:metadata", 0, 4);
  xf_stat_meta(&a, md, HLO_STAT, "Hlo Proto");
  size_t n1, n2;
  const int64_t e62 = (int64_t)1 << 62;
  uint8_t *small = huge_program("jit_small", 1024, 512, &n1); /* peak 2048 */
  uint8_t *huge = huge_program("jit_huge", e62, e62, &n2);
  xf_meta_bytes(&a, xf_event_meta(&a, md, 1, "jit_small(1)", 1), HLO_STAT, small, n1);
  xf_meta_bytes(&a, xf_event_meta(&a, md, 2, "jit_huge(2)", 1), HLO_STAT, huge, n2);
  free(small);
  free(huge);
  hbm_profile_t *p = load_space(&a, s, "two.xplane.pb");
  assert_string_equal(hbm_profile_space(p, 0)->device, "jit_huge(2)");
  assert_string_equal(hbm_profile_space(p, 1)->device, "jit_small(1)");
  hbm_profile_free(p);
}

static HbmXplane__XLine *allocator_line(xf_arena_t *a, HbmXplane__XSpace *s, size_t cap) {
  HbmXplane__XPlane *cpu = xf_plane(a, s, "/host:CPU", 1, 8);
  xf_event_meta(a, cpu, EV_ALLOC, "MemoryAllocation", 0);
  xf_event_meta(a, cpu, EV_FREE, "MemoryDeallocation", 0);
  const char *names[] = {"allocator_name",  "addr",          "requested_bytes", "allocation_bytes",
                         "bytes_allocated", "bytes_reserved"};
  for (int i = 0; i < 6; i++)
    xf_stat_meta(a, cpu, S_ALLOCATOR + i, names[i]);
  return xf_line(a, cpu, 0, cap);
}

static void memory_event(xf_arena_t *a, HbmXplane__XLine *l, int kind, int64_t ps,
                         const char *allocator, uint64_t addr, uint64_t bytes, uint64_t in_use,
                         uint64_t reserved) {
  HbmXplane__XEvent *e = xf_xevent(a, l, kind, ps, 6);
  xf_event_str(a, e, S_ALLOCATOR, allocator);
  xf_event_u64(a, e, S_ADDR, addr);
  xf_event_u64(a, e, S_REQUESTED, bytes);
  xf_event_u64(a, e, S_ALLOCATION, bytes);
  xf_event_u64(a, e, S_IN_USE, in_use);
  if (reserved)
    xf_event_u64(a, e, S_RESERVED, reserved);
}

/* 257 allocators, one more than hbm shows: 256 ordinary ones (one 1000-byte allocation each,
 * peak 1000) and "hostile", whose bytes in use (2^64 - 11) plus bytes reserved (100) pass
 * 2^64. Added in 64 bits they wrap to 89, and the hostile allocator was the one left out as
 * the smallest; saturated it is the largest, and an ordinary one is left out. */
static void allocator_peak_saturates(void **state) {
  (void)state;
  enum { N = 256 };
  xf_arena_t a = {0};
  HbmXplane__XSpace *s = xf_space(&a, 1);
  HbmXplane__XLine *l = allocator_line(&a, s, N + 1);
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "alloc_%d", i);
    memory_event(&a, l, EV_ALLOC, (int64_t)i * 1000, name, 0x1000, 1000, 1000, 0);
  }
  memory_event(&a, l, EV_ALLOC, (int64_t)N * 1000, "hostile", 0x1000, 4096, UINT64_MAX - 10, 100);
  hbm_profile_t *p = load_space(&a, s, "allocators.xplane.pb");
  assert_int_equal(hbm_profile_space_count(p), N);
  assert_true(hbm_profile_find_space(p, "hostile", "allocator") >= 0);
  const char *lost = hbm_profile_meta(p, "lost");
  assert_non_null(lost);
  assert_non_null(strstr(lost, "257 allocators"));
  hbm_profile_free(p);
}

/* One allocator: A, B and C of 3 * 2^61 bytes each (in use 3 * 2^61, then as much as a u64
 * holds), all three freed, then D of 4096 (in use 4096). Bytes live reach 9 * 2^61, past
 * 2^64: the timeline's peak saturates at B's step, and once A, B and C are gone the bytes in
 * use are the allocator's 4096 again, with nothing "in use before the trace began". */
static void allocator_live_bytes_do_not_wrap(void **state) {
  (void)state;
  const uint64_t big = (uint64_t)3 << 61;
  xf_arena_t a = {0};
  HbmXplane__XSpace *s = xf_space(&a, 1);
  HbmXplane__XLine *l = allocator_line(&a, s, 7);
  memory_event(&a, l, EV_ALLOC, 1000, "bfc", 0x1000, big, big, 0);
  memory_event(&a, l, EV_ALLOC, 2000, "bfc", 0x2000, big, UINT64_MAX, 0);
  memory_event(&a, l, EV_ALLOC, 3000, "bfc", 0x3000, big, UINT64_MAX, 0);
  memory_event(&a, l, EV_FREE, 4000, "bfc", 0x1000, big, UINT64_MAX, 0);
  memory_event(&a, l, EV_FREE, 5000, "bfc", 0x2000, big, big, 0);
  memory_event(&a, l, EV_FREE, 6000, "bfc", 0x3000, big, 0, 0);
  memory_event(&a, l, EV_ALLOC, 7000, "bfc", 0x4000, 4096, 4096, 0);
  hbm_profile_t *p = load_space(&a, s, "live.xplane.pb");
  int space = hbm_profile_find_space(p, "bfc", "allocator");
  assert_true(space >= 0);
  hbm_analysis_t *an = hbm_analyze(p, space);
  assert_non_null(an);
  const hbm_summary_t *sum = hbm_analysis_summary(an);
  assert_true(sum->peak_bytes == HBM_BYTES_MAX);
  assert_int_equal(sum->overflowed, 1);
  assert_int_equal(sum->peak_step, 1);
  assert_true(hbm_analysis_bytes_at(an, 0) == big);
  assert_true(hbm_analysis_bytes_at(an, 4) == big);
  assert_true(hbm_analysis_bytes_at(an, 5) == 0);
  assert_true(hbm_analysis_bytes_at(an, 6) == 4096);
  for (int64_t i = 0; i < hbm_profile_buffer_count(p); i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    assert_false(b->space == space && b->op && strstr(b->op, "before the trace"));
  }
  hbm_analysis_free(an);
  hbm_profile_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hlo_heap_is_exact_below_the_limit),
      cmocka_unit_test(hlo_heap_saturates_past_the_limit),
      cmocka_unit_test(hostile_program_is_listed_first),
      cmocka_unit_test(allocator_peak_saturates),
      cmocka_unit_test(allocator_live_bytes_do_not_wrap),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
