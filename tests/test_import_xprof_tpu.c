/* test_import_xprof_tpu.c — a TPU profile as XProf shows it: one allocator timeline per chip
 * (the events' index_on_host, XProf's memory id), each chip's bytes in use counting the stack
 * the runtime reserves; XLA's memory colours named as XProf names them (VMEM, Sflag,
 * SparseCore); VMEM showing the largest scoped allocation of the program's backend configs.
 * No TPU file is at hand, so the fixture is a small synthetic .xplane.pb written with XProf's
 * schema (tests/xplane_fixtures.h); every number below is worked out by hand, and
 * tests/python/test_corpus_xprof.py runs XProf's own converter on the same file
 * (`test_import_xprof_tpu --write DIR` writes it there). */
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

enum { F32 = 11, S32 = 4, KIND_ALLOC = 0, KIND_FREE = 1, HLO_STAT = 1 };

static void tile_8_128(xf_module_t *m) {
  HbmHlo__LayoutProto *l = m->comp->instructions[m->comp->n_instructions - 1]->shape->layout;
  HbmHlo__TileProto *t = xf_new(m->a, sizeof *t);
  hbm_hlo__tile_proto__init(t);
  t->dimensions = XF_NEW_ARRAY(m->a, int64_t, 2);
  t->dimensions[0] = 8, t->dimensions[1] = 128, t->n_dimensions = 2;
  l->tiles = XF_NEW_ARRAY(m->a, HbmHlo__TileProto *, 1);
  l->tiles[0] = t, l->n_tiles = 1;
}

static void backend_config(xf_module_t *m, const char *json) {
  HbmHlo__HloInstructionProto *in = m->comp->instructions[m->comp->n_instructions - 1];
  in->backend_config.data = (uint8_t *)xf_str(m->a, json);
  in->backend_config.len = strlen(json);
}

/* The program jit_step(5) (hand calculation):
 * HBM (colour 0)
 *   allocation 0  parameter  p0 f32[1001,128]{1,0:T(8,128)}: 1008 x 128 x 4 = 516096 B
 *                 (unpadded 1001 x 128 x 4 = 512512)
 *   allocation 1  live-out   out f32[256,128] = 131072 B
 *   allocation 2  temporary  broadcast_add_fusion.2 f32[512,128] (262144 B) at 0,
 *                            fusion.7 f32[1024,128] (524288 B) at 262144; size 786432
 *   trace: ALLOC a, ALLOC b, FREE a, FREE b → heap 262144, 786432, 524288, 0
 *   peak 786432 + 516096 + 131072 = 1433600 at event 1 (fusion.7)
 * VMEM (colour 1): allocation 3, vmem_fusion f32[64,128] = 32768 B, its own trace
 *   (ALLOC, FREE); scoped allocations in the backend configs: broadcast_add_fusion.2 24 MiB
 *   (25165824), all-reduce 31 MiB (32505856, and 999999999 B in memory space 0, not VMEM's)
 *   → VMEM peak 32768 + 32505856 = 32538624, its allocations 32768 + 32505856 likewise
 * Sflag (colour 2): allocation 4, 16 B, no trace: peak 0, allocations 16
 * SparseCore (colour 6): allocation 5, parameter sc_param f32[256] = 1024 B: peak 1024 */
static uint8_t *tpu_program(size_t *len) {
  xf_arena_t a = {0};
  xf_module_t m;
  xf_module_init(&m, &a, "jit_step", 16);
  int64_t d_p0[] = {1001, 128}, d_out[] = {256, 128}, d_a[] = {512, 128}, d_b[] = {1024, 128};
  int64_t d_ar[] = {128, 128}, d_v[] = {64, 128}, d4 = 4, d256 = 256;
  int64_t p0 = xf_instruction(&m, "p0", "parameter", F32, d_p0, 2, "params");
  tile_8_128(&m);
  int64_t out = xf_instruction(&m, "out", "fusion", F32, d_out, 2, "jit(step)/out");
  int64_t ia = xf_instruction(&m, "broadcast_add_fusion.2", "fusion", F32, d_a, 2, "jit(step)/add");
  backend_config(&m, "{\"used_scoped_memory_configs\":[{\"memory_space\":\"1\",\"offset\":\"0\","
                     "\"size\":\"25165824\"}]}");
  int64_t ib = xf_instruction(&m, "fusion.7", "fusion", F32, d_b, 2, "jit(step)/mul");
  xf_instruction(&m, "all-reduce", "all-reduce", F32, d_ar, 2, "jit(step)/psum");
  backend_config(&m, "{\"used_scoped_memory_configs\":[{\"memory_space\":1,\"offset\":0,"
                     "\"size\":32505856},{\"memory_space\":\"0\",\"size\":\"999999999\"}]}");
  int64_t iv = xf_instruction(&m, "vmem_fusion", "fusion", F32, d_v, 2, "jit(step)/v");
  int64_t isf = xf_instruction(&m, "sflag", "custom-call", S32, &d4, 1, NULL);
  int64_t isc = xf_instruction(&m, "sc_param", "parameter", F32, &d256, 1, "sc");
  xf_logical_buffer(&m, 1, p0, 516096, 0);
  xf_logical_buffer(&m, 2, out, 131072, 0);
  xf_logical_buffer(&m, 3, ia, 262144, 0);
  xf_logical_buffer(&m, 4, ib, 524288, 0);
  xf_logical_buffer(&m, 6, iv, 32768, 1);
  xf_logical_buffer(&m, 7, isf, 16, 2);
  xf_logical_buffer(&m, 8, isc, 1024, 6);
  int64_t one = 1, two = 2, temp[] = {3, 4}, offs[] = {0, 262144}, six = 6, seven = 7, eight = 8;
  xf_allocation(&m, 516096, 0, XF_PARAM, &one, NULL, 1);
  xf_allocation(&m, 131072, 0, XF_LIVE_OUT, &two, NULL, 1);
  xf_allocation(&m, 786432, 0, 0, temp, offs, 2);
  xf_allocation(&m, 32768, 1, 0, &six, NULL, 1);
  xf_allocation(&m, 16, 2, 0, &seven, NULL, 1);
  xf_allocation(&m, 1024, 6, XF_PARAM, &eight, NULL, 1);
  xf_event(&m, KIND_ALLOC, 3, "broadcast_add_fusion.2", 0);
  xf_event(&m, KIND_ALLOC, 4, "fusion.7", 0);
  xf_event(&m, KIND_FREE, 3, "fusion.7", 0);
  xf_event(&m, KIND_FREE, 4, "out", 0);
  xf_new_trace(&m, 4);
  xf_event(&m, KIND_ALLOC, 6, "vmem_fusion", 0);
  xf_event(&m, KIND_FREE, 6, "out", 0);
  uint8_t *bytes = xf_pack_hlo(&m, len);
  xf_free(&a);
  return bytes;
}

enum { EV_ALLOC = 1, EV_FREE = 2 };
enum { S_NAME = 10, S_INDEX, S_ADDR, S_REQUESTED, S_ALLOCATION, S_IN_USE, S_RESERVED, S_OP };

/* Chip k's allocator events (hand calculation), base = 100 k bytes in use before the trace,
 * stack reserved R = 2048 (k + 1):
 *   alloc 0x1000 (1000 B asked, 1024 given): allocated 1024 + base, reserved R
 *   alloc 0x2000 (4096):                      allocated 5120 + base, reserved R
 *   free 0x1000:                              allocated 4096 + base, reserved R + 512
 * XProf's peak in use = max(allocated + reserved) = 5120 + 100 k + 2048 (k + 1):
 *   chip 0: 7168, 1: 9316, 2: 11464, 3: 13612.
 * Each event names allocator "TPU_k_bfc" then index_on_host k: XProf keys it by the last,
 * "k". The chips' events are interleaved in time on one line. */
static void chip_events(xf_arena_t *a, HbmXplane__XLine *l) {
  for (int step = 0; step < 3; step++)
    for (int64_t k = 0; k < 4; k++) {
      int64_t base = 100 * k, r = 2048 * (k + 1);
      static const int64_t allocated[] = {1024, 5120, 4096}, requested[] = {1000, 4096, 1000};
      static const uint64_t addr[] = {0x1000, 0x2000, 0x1000};
      HbmXplane__XEvent *e =
          xf_xevent(a, l, step == 2 ? EV_FREE : EV_ALLOC, (step * 4 + k) * 1000, 9);
      char name[16];
      snprintf(name, sizeof name, "TPU_%d_bfc", (int)k);
      xf_event_str(a, e, S_NAME, name);
      xf_event_i64(a, e, S_INDEX, k);
      xf_event_i64(a, e, S_ADDR, (int64_t)addr[step]);
      xf_event_i64(a, e, S_REQUESTED, requested[step]);
      xf_event_i64(a, e, S_ALLOCATION, step == 1 ? 4096 : 1024);
      xf_event_i64(a, e, S_IN_USE, allocated[step] + base);
      xf_event_i64(a, e, S_RESERVED, r + (step == 2 ? 512 : 0));
      xf_event_str(a, e, S_OP, step == 1 ? "jit(step)/mul" : "jit(step)/add");
    }
}

static uint8_t *tpu_file(size_t *len) {
  xf_arena_t a = {0};
  HbmXplane__XSpace *s = xf_space(&a, 8);
  HbmXplane__XPlane *md = xf_plane(&a, s, "/host:metadata", 0, 2);
  xf_stat_meta(&a, md, HLO_STAT, "Hlo Proto");
  size_t n;
  uint8_t *p = tpu_program(&n);
  xf_meta_bytes(&a, xf_event_meta(&a, md, 5, "jit_step(5)", 1), HLO_STAT, p, n);
  free(p);
  HbmXplane__XPlane *cpu = xf_plane(&a, s, "/host:CPU", 1, 16);
  xf_event_meta(&a, cpu, EV_ALLOC, "MemoryAllocation", 0);
  xf_event_meta(&a, cpu, EV_FREE, "MemoryDeallocation", 0);
  const char *names[] = {"allocator_name",   "index_on_host",   "addr",           "requested_bytes",
                         "allocation_bytes", "bytes_allocated", "bytes_reserved", "tf_op"};
  for (int i = 0; i < 8; i++)
    xf_stat_meta(&a, cpu, S_NAME + i, names[i]);
  chip_events(&a, xf_line(&a, cpu, 1000, 12));
  for (int k = 0; k < 4; k++) {
    char name[32];
    snprintf(name, sizeof name, "/device:TPU:%d", k);
    xf_plane(&a, s, name, 0, 0);
  }
  uint8_t *bytes = xf_pack_space(s, len);
  xf_free(&a);
  return bytes;
}

static const char *write_tpu(const char *dir) {
  static char path[4200];
  snprintf(path, sizeof path, "%s/tpu.xplane.pb", dir);
  size_t len;
  uint8_t *bytes = tpu_file(&len);
  int rc = th_write(path, bytes, len);
  free(bytes);
  return rc == 0 ? path : NULL;
}

static uint64_t peak_of(const hbm_profile_t *p, const char *space, const char *device) {
  int i = hbm_profile_find_space(p, space, device);
  if (i < 0)
    fail_msg("no space %s of %s", space, device);
  hbm_analysis_t *a = hbm_analyze(p, i);
  assert_non_null(a);
  uint64_t peak = hbm_analysis_summary(a)->peak_bytes;
  hbm_analysis_free(a);
  return peak;
}

static void one_allocator_space_per_chip(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(write_tpu(th_dir));
  assert_non_null(p);
  static const uint64_t peaks[] = {7168, 9316, 11464, 13612};
  for (int k = 0; k < 4; k++) {
    char id[4];
    snprintf(id, sizeof id, "%d", k);
    assert_true(peak_of(p, id, "allocator") == peaks[k]);
  }
  assert_int_equal(hbm_profile_find_space(p, "allocator", "allocator"), -1);
  assert_int_equal(hbm_profile_find_space(p, "TPU_0_bfc", "allocator"), -1);
  hbm_profile_free(p);
}

static void colours_named_as_xprof(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(write_tpu(th_dir));
  assert_non_null(p);
  assert_true(peak_of(p, "HBM", "jit_step(5)") == 1433600);
  assert_true(peak_of(p, "Sflag", "jit_step(5)") == 0);
  assert_true(peak_of(p, "SparseCore", "jit_step(5)") == 1024);
  int sflag = hbm_profile_find_space(p, "Sflag", "jit_step(5)");
  assert_int_equal(hbm_profile_space(p, sflag)->color, 2);
  hbm_analysis_t *a = hbm_analyze(p, sflag);
  assert_true(hbm_analysis_summary(a)->heap_bytes == 16); /* its allocation, never used */
  hbm_analysis_free(a);
  for (int i = 0; i < hbm_profile_space_count(p); i++)
    assert_null(strstr(hbm_profile_space(p, i)->name, "color"));
  hbm_profile_free(p);
}

static void vmem_shows_the_largest_scoped_allocation(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(write_tpu(th_dir));
  assert_non_null(p);
  int vmem = hbm_profile_find_space(p, "VMEM", "jit_step(5)");
  assert_true(vmem >= 0);
  assert_int_equal(hbm_profile_space(p, vmem)->color, 1);
  hbm_analysis_t *a = hbm_analyze(p, vmem);
  const hbm_summary_t *s = hbm_analysis_summary(a);
  assert_true(s->peak_bytes == 32538624);
  assert_true(s->heap_bytes == 32538624);
  size_t n;
  const int64_t *at = hbm_analysis_buffers_at_peak_by_size(a, &n);
  assert_int_equal(n, 2);
  const hbm_buffer_t *b = hbm_profile_buffer(p, at[0]);
  assert_string_equal(b->op, "all-reduce");
  assert_true(b->size == 32505856);
  assert_non_null(strstr(b->label, "largest scoped VMEM allocation"));
  assert_string_equal(hbm_profile_buffer(p, at[1])->op, "vmem_fusion");
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--write")) { /* for XProf's converter to read too */
    const char *path = write_tpu(argv[2]);
    if (!path)
      return fprintf(stderr, "cannot write %s/tpu.xplane.pb\n", argv[2]), 1;
    printf("%s\n", path);
    return 0;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_allocator_space_per_chip),
      cmocka_unit_test(colours_named_as_xprof),
      cmocka_unit_test(vmem_shows_the_largest_scoped_allocation),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
