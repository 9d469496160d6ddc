/* test_import_xplane.c — XProf's files (.xplane.pb, .hlo_proto.pb) read into the profile
 * model: XLA's buffer assignment replayed as XProf's Memory Viewer does, programs largest
 * peak first, allocator events as a Memory Profile, damaged files reported with the file,
 * the byte offset and what was expected while what could be read is kept. The fixtures are
 * built here with protobuf-c (tests/xplane_fixtures.h); every expected number is worked out
 * by hand in the comments. The last test reads ../shared/real/xprof and checks numbers that
 * XProf 2.24.2 itself printed for those files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hbm.h"
#include "helpers.h"
#include "xplane_fixtures.h"

enum { F32 = 11, KIND_ALLOC = 0, KIND_FREE = 1, KIND_SHARE = 2, HLO_STAT = 1 };

/* ---- the fixture program (hand calculation) ----
 * HBM (colour 0):
 *   allocation 0  parameter   1024 B  p0 f32[256] (unpadded 1024)
 *   allocation 1  live-out     512 B  out f32[128] (unpadded 512)
 *   allocation 2  temporary   3024 B  A (1024 B, f32[250]: 1000 unpadded), B (2000 B, f32[500]),
 *                                     C (1000 B, f32[250]) sharing A's memory
 *   allocation 3  thread-local   4 B  (registers: left out, as XProf 2.24 does)
 * Host (colour 5): allocation 4, parameter h f32[16] = 64 B.
 * Heap-simulator trace: ALLOC A, ALLOC B, FREE A, SHARE_WITH C→A, FREE B, FREE C
 *   heap after each event: 1024, 3024, 2000, 3000, 1000, 0
 *   peak = 3024 + indefinite (1024 + 512) = 4560 at step 1 (event "b");
 *   live there: p0, out, A, B; unpadded 1024 + 512 + 1000 + 2000 = 4536. */
static uint8_t *train_program(size_t *len) {
  xf_arena_t a = {0};
  xf_module_t m;
  xf_module_init(&m, &a, "jit_train", 16);
  int64_t d256 = 256, d128 = 128, d250 = 250, d500 = 500, d16 = 16;
  int64_t p0 = xf_instruction(&m, "p0", "parameter", F32, &d256, 1, "params");
  int64_t out = xf_instruction(&m, "out", "fusion", F32, &d128, 1, "jit(train)/out");
  int64_t ia = xf_instruction(&m, "a_fusion", "fusion", F32, &d250, 1, "jit(train)/a");
  int64_t ib = xf_instruction(&m, "b_fusion", "fusion", F32, &d500, 1, "jit(train)/b");
  int64_t ic = xf_instruction(&m, "c_fusion", "fusion", F32, &d250, 1, "jit(train)/c");
  int64_t tl = xf_instruction(&m, "add.1", "add", F32, NULL, 0, NULL);
  int64_t h = xf_instruction(&m, "h", "parameter", F32, &d16, 1, "host");
  xf_logical_buffer(&m, 1, p0, 1024, 0);
  xf_logical_buffer(&m, 2, out, 512, 0);
  xf_logical_buffer(&m, 3, ia, 1024, 0);
  xf_logical_buffer(&m, 4, ib, 2000, 0);
  xf_logical_buffer(&m, 5, ic, 1000, 0);
  xf_logical_buffer(&m, 6, tl, 4, 0);
  xf_logical_buffer(&m, 7, h, 64, 5);
  int64_t ids[] = {1, 2, 3, 4, 5, 6, 7}, temp[] = {3, 4, 5}, offs[] = {0, 1024, 0};
  xf_allocation(&m, 1024, 0, XF_PARAM, &ids[0], NULL, 1);
  xf_allocation(&m, 512, 0, XF_LIVE_OUT, &ids[1], NULL, 1);
  xf_allocation(&m, 3024, 0, 0, temp, offs, 3);
  xf_allocation(&m, 4, 0, XF_THREAD_LOCAL, &ids[5], NULL, 1);
  xf_allocation(&m, 64, 5, XF_PARAM, &ids[6], NULL, 1);
  xf_event(&m, KIND_ALLOC, 3, "a", 0);
  xf_event(&m, KIND_ALLOC, 4, "b", 0);
  xf_event(&m, KIND_FREE, 3, "b", 0);
  xf_event(&m, KIND_SHARE, 5, "c", 3);
  xf_event(&m, KIND_FREE, 4, "c", 0);
  xf_event(&m, KIND_FREE, 5, "end", 0);
  uint8_t *bytes = xf_pack_hlo(&m, len);
  xf_free(&a);
  return bytes;
}

/* A program with no heap-simulator events: a 16 B parameter and a 16 B output, peak 32. */
static uint8_t *small_program(size_t *len) {
  xf_arena_t a = {0};
  xf_module_t m;
  xf_module_init(&m, &a, "jit_small", 4);
  int64_t d4 = 4;
  int64_t p = xf_instruction(&m, "x", "parameter", F32, &d4, 1, "x");
  int64_t o = xf_instruction(&m, "neg", "negate", F32, &d4, 1, "jit(small)/neg");
  xf_logical_buffer(&m, 1, p, 16, 0);
  xf_logical_buffer(&m, 2, o, 16, 0);
  int64_t one = 1, two = 2;
  xf_allocation(&m, 16, 0, XF_PARAM, &one, NULL, 1);
  xf_allocation(&m, 16, 0, XF_LIVE_OUT, &two, NULL, 1);
  m.ba->n_heap_simulator_traces = 0;
  uint8_t *bytes = xf_pack_hlo(&m, len);
  xf_free(&a);
  return bytes;
}

enum { EV_ALLOC = 1, EV_FREE = 2, EV_OTHER = 3 };
enum { S_ALLOCATOR = 10, S_ADDR, S_REQUESTED, S_ALLOCATION, S_IN_USE, S_OP, S_REGION };

static void memory_event(xf_arena_t *a, HbmXplane__XLine *l, int kind, int64_t ps, uint64_t addr,
                         uint64_t requested, uint64_t allocation, uint64_t in_use, const char *op) {
  HbmXplane__XEvent *e = xf_xevent(a, l, kind, ps, 8);
  xf_event_str(a, e, S_ALLOCATOR, "bfc");
  xf_event_u64(a, e, S_ADDR, addr);
  xf_event_u64(a, e, S_REQUESTED, requested);
  xf_event_u64(a, e, S_ALLOCATION, allocation);
  xf_event_u64(a, e, S_IN_USE, in_use);
  if (op)
    xf_event_str(a, e, S_OP, op);
}

/* The allocator "bfc" (hand calculation): 1000 B were in use before the trace began.
 *   t=1010 ns alloc 0x1000, 100 B asked, 256 B given, in use 1256
 *   t=1020 ns alloc 0x2000, 500 B asked, 512 B given, in use 1768   ← peak 1768 at step 1,
 *                                                                     unpadded 1000+100+500
 *   t=1030 ns free 0x1000, in use 1512
 *   t=1040 ns free 0x9000 (allocated before the trace, 400 B), in use 1112
 * The events are split over two lines, out of order, to check they are sorted by time. */
static void allocator_plane(xf_arena_t *a, HbmXplane__XSpace *s) {
  HbmXplane__XPlane *cpu = xf_plane(a, s, "/host:CPU", 2, 16);
  xf_event_meta(a, cpu, EV_ALLOC, "MemoryAllocation", 0);
  xf_event_meta(a, cpu, EV_FREE, "MemoryDeallocation", 0);
  xf_event_meta(a, cpu, EV_OTHER, "SomeOp", 0);
  const char *names[] = {"allocator_name",  "addr",  "requested_bytes", "allocation_bytes",
                         "bytes_allocated", "tf_op", "region_type"};
  for (int i = 0; i < 7; i++)
    xf_stat_meta(a, cpu, S_ALLOCATOR + i, names[i]);
  HbmXplane__XLine *l1 = xf_line(a, cpu, 1000, 4), *l2 = xf_line(a, cpu, 1000, 4);
  xf_xevent(a, l1, EV_OTHER, 0, 0);
  memory_event(a, l1, EV_ALLOC, 10000, 0x1000, 100, 256, 1256, "dense/kernel");
  memory_event(a, l1, EV_FREE, 30000, 0x1000, 0, 256, 1512, NULL);
  memory_event(a, l2, EV_ALLOC, 20000, 0x2000, 500, 512, 1768, "dense/act");
  memory_event(a, l2, EV_FREE, 40000, 0x9000, 0, 400, 1112, NULL);
}

/* An XSpace: /host:metadata with both programs (and, with `bad_program`, a third whose
 * HloProto does not parse), then the allocator plane. */
static uint8_t *space_file(size_t *len, bool bad_program) {
  xf_arena_t a = {0};
  HbmXplane__XSpace *s = xf_space(&a, 4);
  HbmXplane__XPlane *md = xf_plane(&a, s, "/host:metadata", 0, 4);
  xf_stat_meta(&a, md, HLO_STAT, "Hlo Proto");
  size_t n1, n2;
  uint8_t *p1 = train_program(&n1), *p2 = small_program(&n2);
  xf_meta_bytes(&a, xf_event_meta(&a, md, 7, "jit_train(7)", 1), HLO_STAT, p1, n1);
  xf_meta_bytes(&a, xf_event_meta(&a, md, 3, "jit_small(3)", 1), HLO_STAT, p2, n2);
  if (bad_program) /* field 1 says 100 bytes follow; 3 do */
    xf_meta_bytes(&a, xf_event_meta(&a, md, 9, "jit_bad(9)", 1), HLO_STAT,
                  (const uint8_t *)"\x0a\x64\x01\x02\x03", 5);
  free(p1);
  free(p2);
  allocator_plane(&a, s);
  uint8_t *bytes = xf_pack_space(s, len);
  xf_free(&a);
  return bytes;
}

static const char *write_bytes(const char *name, const void *data, size_t len) {
  static char path[4200];
  snprintf(path, sizeof path, "%s/%s", th_dir, name);
  assert_int_equal(th_write(path, data, len), 0);
  return path;
}

static const char *fixture_path(bool bad_program) {
  size_t len;
  uint8_t *bytes = space_file(&len, bad_program);
  const char *path = write_bytes(bad_program ? "bad.xplane.pb" : "host.xplane.pb", bytes, len);
  free(bytes);
  return path;
}

static const hbm_summary_t *summary_of(hbm_analysis_t **a, const hbm_profile_t *p, int space) {
  assert_true(space >= 0);
  *a = hbm_analyze(p, space);
  assert_non_null(*a);
  return hbm_analysis_summary(*a);
}

/* ---- tests ---- */

static void programs_largest_peak_first(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(fixture_path(false));
  assert_non_null(p);
  /* HBM of jit_train (4560) > Host of jit_train (64) > HBM of jit_small (32), then "bfc" */
  assert_int_equal(hbm_profile_space_count(p), 4);
  assert_string_equal(hbm_profile_space(p, 0)->name, "HBM");
  assert_string_equal(hbm_profile_space(p, 0)->device, "jit_train(7)");
  assert_string_equal(hbm_profile_space(p, 1)->name, "Host");
  assert_int_equal(hbm_profile_space(p, 1)->color, 5);
  assert_string_equal(hbm_profile_space(p, 2)->device, "jit_small(3)");
  assert_string_equal(hbm_profile_space(p, 3)->name, "bfc");
  assert_string_equal(hbm_profile_meta(p, "programs"), "2");
  assert_null(hbm_profile_meta(p, "lost"));
  hbm_profile_free(p);
}

static void buffer_assignment_replayed(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(fixture_path(false));
  assert_non_null(p);
  hbm_analysis_t *a;
  const hbm_summary_t *s = summary_of(&a, p, 0);
  assert_true(s->peak_bytes == 4560);
  assert_true(s->peak_unpadded_bytes == 4536);
  assert_true(s->argument_bytes == 1024);
  assert_true(s->output_bytes == 512);
  assert_true(s->temporary_bytes == 3024);
  /* allocations laid end to end: 1024 + 512 + 3024 (the thread-local one is left out) */
  assert_true(s->heap_bytes == 4560);
  assert_string_equal(hbm_profile_step_label(p, s->peak_step), "b");
  size_t n;
  const int64_t *at = hbm_analysis_buffers_at_peak(a, &n);
  assert_int_equal(n, 4); /* in XProf's order: indefinite first, then as the trace allocated */
  const char *ops[] = {"p0", "out", "a_fusion", "b_fusion"};
  for (size_t i = 0; i < n; i++)
    assert_string_equal(hbm_profile_buffer(p, at[i])->op, ops[i]);
  const hbm_buffer_t *fa = hbm_profile_buffer(p, at[2]);
  assert_true(fa->size == 1024 && fa->unpadded_size == 1000);
  assert_string_equal(fa->shape, "f32[250]{0}");
  assert_string_equal(fa->group, "jit(train)/a");
  assert_string_equal(fa->source, "model.py:7");
  assert_string_equal(fa->label, "a_fusion: f32[250]{0} # jit(train)/a");
  assert_int_equal(fa->category, HBM_CAT_TEMPORARY);
  /* C revived A's memory at event 3 and is shown under its own name until event 5 */
  int64_t base = fa->start - 0, found = 0;
  for (int64_t i = 0; i < hbm_profile_buffer_count(p); i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    if (b->space == 0 && b->op && !strcmp(b->op, "c_fusion"))
      found++, assert_true(b->start == base + 3 && b->end == base + 5 && b->size == 1000);
    assert_false(b->op && !strcmp(b->op, "add.1")); /* thread-local: not device memory */
  }
  assert_int_equal(found, 1);
  hbm_analysis_free(a);
  s = summary_of(&a, p, 1); /* Host: the 64 B parameter, no trace */
  assert_true(s->peak_bytes == 64);
  hbm_analysis_free(a);
  s = summary_of(&a, p, 2);
  assert_true(s->peak_bytes == 32);
  /* issue 27: the page showed "at step 0 ((no heap-simulator trace))" */
  assert_string_equal(hbm_profile_step_label(p, s->peak_step), "no heap-simulator trace");
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

static void allocator_timeline(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(fixture_path(false));
  assert_non_null(p);
  int space = hbm_profile_find_space(p, "bfc", "allocator");
  hbm_analysis_t *a;
  const hbm_summary_t *s = summary_of(&a, p, space);
  assert_true(s->peak_bytes == 1768);
  assert_true(s->peak_unpadded_bytes == 1600);
  assert_int_equal(hbm_profile_step_time(p, s->peak_step), 10); /* 1020 ns - 1010 ns */
  assert_string_equal(hbm_profile_step_label(p, s->peak_step), "dense/act");
  assert_true(hbm_analysis_bytes_at(a, s->peak_step + 2) == 1112); /* the allocator's own */
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

static void bare_hlo_proto(void **state) {
  (void)state;
  size_t len;
  uint8_t *bytes = train_program(&len);
  hbm_profile_t *p = hbm_profile_load(write_bytes("jit_train.hlo_proto.pb", bytes, len));
  free(bytes);
  assert_non_null(p);
  assert_string_equal(hbm_profile_space(p, 0)->device, "jit_train"); /* the module's name */
  hbm_analysis_t *a;
  assert_true(summary_of(&a, p, 0)->peak_bytes == 4560);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

/* ---- source lines from the module's stack-frame index (what JAX 0.5+ writes) ---- */

/* The stack-frame index of a program (hand-written, as JAX writes it):
 *   files 1 train.py, 2 model.py; locations 1 train.py:10:4, 2 model.py:42:8;
 *   frames 1 (train.py:10, no caller), 2 (model.py:42, called from 1),
 *          3 and 4 (calling each other: a loop a hostile file may hold). */
static void add_stack_frames(xf_module_t *m) {
  xf_arena_t *a = m->a;
  HbmHlo__StackFrameIndexProto *ix = xf_new(a, sizeof *ix);
  hbm_hlo__stack_frame_index_proto__init(ix);
  ix->file_names = XF_NEW_ARRAY(a, char *, 2);
  ix->file_names[ix->n_file_names++] = xf_str(a, "train.py");
  ix->file_names[ix->n_file_names++] = xf_str(a, "model.py");
  int32_t locs[][3] = {{1, 10, 4}, {2, 42, 8}};
  ix->file_locations = XF_NEW_ARRAY(a, HbmHlo__StackFrameIndexProto__FileLocation *, 2);
  for (int i = 0; i < 2; i++) {
    HbmHlo__StackFrameIndexProto__FileLocation *l = xf_new(a, sizeof *l);
    hbm_hlo__stack_frame_index_proto__file_location__init(l);
    l->file_name_id = locs[i][0], l->line = locs[i][1], l->column = locs[i][2];
    ix->file_locations[ix->n_file_locations++] = l;
  }
  int32_t frames[][2] = {{1, 0}, {2, 1}, {2, 4}, {1, 3}}; /* {location, parent} */
  ix->stack_frames = XF_NEW_ARRAY(a, HbmHlo__StackFrameIndexProto__StackFrame *, 4);
  for (int i = 0; i < 4; i++) {
    HbmHlo__StackFrameIndexProto__StackFrame *f = xf_new(a, sizeof *f);
    hbm_hlo__stack_frame_index_proto__stack_frame__init(f);
    f->file_location_id = frames[i][0], f->parent_frame_id = frames[i][1];
    ix->stack_frames[ix->n_stack_frames++] = f;
  }
  m->proto->hlo_module->stack_frame_index = ix;
}

/* Four temporaries live together (peak 4000 B = 4 x 1000 B), each from its own instruction:
 * a_fusion frame 2 (no source_file: the frame gives model.py:42), b_fusion source_file
 * "model.py":7 and frame 2 (the metadata's own line wins), c_fusion frame 99 (points
 * nowhere), d_fusion frame 3 (frames that loop). */
static uint8_t *program_with_frames(size_t *len) {
  xf_arena_t a = {0};
  xf_module_t m;
  xf_module_init(&m, &a, "jit_frames", 8);
  int64_t d250 = 250, ids[4], off[4];
  const char *names[] = {"a_fusion", "b_fusion", "c_fusion", "d_fusion"};
  int32_t frame[] = {2, 2, 99, 3};
  for (int i = 0; i < 4; i++) {
    int64_t inst = xf_instruction(&m, names[i], "fusion", F32, &d250, 1, "jit(frames)/op");
    HbmHlo__OpMetadata *md = m.comp->instructions[m.comp->n_instructions - 1]->metadata;
    if (i != 1)
      md->source_file = xf_str(&a, ""), md->source_line = 0;
    md->stack_frame_id = frame[i];
    xf_logical_buffer(&m, i + 1, inst, 1000, 0);
    ids[i] = i + 1, off[i] = 1000 * i;
  }
  xf_allocation(&m, 4000, 0, 0, ids, off, 4);
  for (int i = 0; i < 4; i++)
    xf_event(&m, KIND_ALLOC, i + 1, names[i], 0);
  add_stack_frames(&m);
  uint8_t *bytes = xf_pack_hlo(&m, len);
  xf_free(&a);
  return bytes;
}

/* A stack 300 frames deep (frame k called from k - 1, one file location each) and two frames
 * calling each other (301 and 302) in an index of 302 frames: the deep stack is cut after 256
 * frames with "..." as its last line, the loop gives no source line (and is counted). */
static uint8_t *program_with_deep_frames(size_t *len) {
  xf_arena_t a = {0};
  xf_module_t m;
  xf_module_init(&m, &a, "jit_deep", 4);
  int64_t d250 = 250, ids[] = {1, 2}, off[] = {0, 1000};
  const char *names[] = {"deep_fusion", "loop_fusion"};
  for (int i = 0; i < 2; i++) {
    int64_t inst = xf_instruction(&m, names[i], "fusion", F32, &d250, 1, "jit(deep)/op");
    HbmHlo__OpMetadata *md = m.comp->instructions[m.comp->n_instructions - 1]->metadata;
    md->source_file = xf_str(&a, ""), md->stack_frame_id = i ? 301 : 300;
    xf_logical_buffer(&m, i + 1, inst, 1000, 0);
  }
  xf_allocation(&m, 2000, 0, 0, ids, off, 2);
  xf_event(&m, KIND_ALLOC, 1, "deep_fusion", 0);
  xf_event(&m, KIND_ALLOC, 2, "loop_fusion", 0);
  HbmHlo__StackFrameIndexProto *ix = xf_new(&a, sizeof *ix);
  hbm_hlo__stack_frame_index_proto__init(ix);
  ix->file_names = XF_NEW_ARRAY(&a, char *, 1);
  ix->file_names[ix->n_file_names++] = xf_str(&a, "deep.py");
  ix->file_locations = XF_NEW_ARRAY(&a, HbmHlo__StackFrameIndexProto__FileLocation *, 302);
  ix->stack_frames = XF_NEW_ARRAY(&a, HbmHlo__StackFrameIndexProto__StackFrame *, 302);
  for (int k = 1; k <= 302; k++) {
    HbmHlo__StackFrameIndexProto__FileLocation *l = xf_new(&a, sizeof *l);
    hbm_hlo__stack_frame_index_proto__file_location__init(l);
    l->file_name_id = 1, l->line = k, l->column = 1;
    ix->file_locations[ix->n_file_locations++] = l;
    HbmHlo__StackFrameIndexProto__StackFrame *f = xf_new(&a, sizeof *f);
    hbm_hlo__stack_frame_index_proto__stack_frame__init(f);
    f->file_location_id = k;
    f->parent_frame_id = k <= 300 ? k - 1 : (k == 301 ? 302 : 301);
    ix->stack_frames[ix->n_stack_frames++] = f;
  }
  m.proto->hlo_module->stack_frame_index = ix;
  uint8_t *bytes = xf_pack_hlo(&m, len);
  xf_free(&a);
  return bytes;
}

static const hbm_buffer_t *buffer_named(const hbm_profile_t *p, const char *op) {
  for (int64_t i = 0; i < hbm_profile_buffer_count(p); i++)
    if (hbm_profile_buffer(p, i)->op && !strcmp(hbm_profile_buffer(p, i)->op, op))
      return hbm_profile_buffer(p, i);
  fail_msg("no buffer %s", op);
  return NULL;
}

/* A fixture program written as a bare .hlo_proto.pb and loaded. */
static hbm_profile_t *load_program(uint8_t *(*make)(size_t *), const char *name) {
  size_t len;
  uint8_t *bytes = make(&len);
  hbm_profile_t *p = hbm_profile_load(write_bytes(name, bytes, len));
  free(bytes);
  if (!p)
    fail_msg("%s: %s", name, hbm_last_error());
  return p;
}

/* ---- a revived buffer's span (XProf's logicalBufferSpans) against its bytes (the heap) ----
 * HBM: allocation 0, parameter p0 f32[256] 1024 B; allocation 1, temporary 2048 B: A at
 * offset 1024, B and C sharing A's bytes, D at offset 0 (each f32[256], 1024 B).
 *   event 0 ALLOC A           heap 1024   A lives [0, 1)
 *   event 1 FREE A            heap    0
 *   event 2 SHARE_WITH B→A    heap 1024   A's bytes revived, shown as B
 *   event 3 SHARE_WITH C→B    heap 1024   C shares them too
 *   event 4 FREE B            heap 1024   B's own span ends here (XProf: limit 4) ...
 *   event 5 ALLOC D           heap 2048   peak: 2048 + the parameter's 1024 = 3072
 *   event 6 FREE C            heap 1024   ... its bytes leave here (the chart drops)
 *   event 7 FREE D            heap    0
 * At the peak (event 5, the first reaching 3072): p0, B (span [2, 4), bytes to 6), D.
 * Offsets as XProf's bufferBlocks give them: the heap-simulated allocation laid out first,
 * so D at 0 and B at 1024; the parameter's allocation after it, at 2048. */
static uint8_t *revived_program(size_t *len) {
  xf_arena_t a = {0};
  xf_module_t m;
  xf_module_init(&m, &a, "jit_revive", 16);
  int64_t d256 = 256;
  const char *names[] = {"p0", "a_fusion", "b_fusion", "c_fusion", "d_fusion"};
  for (int64_t i = 0; i < 5; i++) {
    int64_t inst = xf_instruction(&m, names[i], i ? "fusion" : "parameter", F32, &d256, 1, NULL);
    xf_logical_buffer(&m, i + 1, inst, 1024, 0);
  }
  int64_t param = 1, temp[] = {2, 3, 4, 5}, offs[] = {1024, 1024, 1024, 0};
  xf_allocation(&m, 1024, 0, XF_PARAM, &param, NULL, 1);
  xf_allocation(&m, 2048, 0, 0, temp, offs, 4);
  static const struct {
    int kind;
    int64_t buffer, shares;
    const char *at;
  } events[] = {{KIND_ALLOC, 2, 0, "a"}, {KIND_FREE, 2, 0, "b"},  {KIND_SHARE, 3, 2, "b"},
                {KIND_SHARE, 4, 3, "c"}, {KIND_FREE, 3, 0, "c"},  {KIND_ALLOC, 5, 0, "d"},
                {KIND_FREE, 4, 0, "d"},  {KIND_FREE, 5, 0, "end"}};
  for (size_t i = 0; i < sizeof events / sizeof events[0]; i++)
    xf_event(&m, events[i].kind, events[i].buffer, events[i].at, events[i].shares);
  uint8_t *bytes = xf_pack_hlo(&m, len);
  xf_free(&a);
  return bytes;
}

static void revived_buffer_span(void **state) {
  (void)state;
  hbm_profile_t *p = load_program(revived_program, "revive.hlo_proto.pb");
  hbm_analysis_t *a;
  const hbm_summary_t *s = summary_of(&a, p, 0);
  const hbm_buffer_t *b = buffer_named(p, "b_fusion"), *d = buffer_named(p, "d_fusion");
  int64_t base = d->start - 5;
  assert_true(s->peak_bytes == 3072 && s->peak_step == base + 5);
  size_t n;
  const int64_t *at = hbm_analysis_buffers_at_peak(a, &n);
  assert_int_equal(n, 3);
  assert_ptr_equal(hbm_profile_buffer(p, at[1]), b);
  assert_true(b->start == base + 2 && hbm_buffer_span_end(b) == base + 4); /* XProf's span */
  assert_true(b->end == base + 6); /* its bytes, as the heap keeps them */
  int64_t heap[] = {2048, 1024, 2048, 2048, 2048, 3072, 2048, 1024}; /* + the parameter */
  for (int64_t i = 0; i < 8; i++)
    assert_true(hbm_analysis_bytes_at(a, base + i) == (uint64_t)heap[i]);
  assert_true(b->address == 1024 && d->address == 0 && buffer_named(p, "p0")->address == 2048);
  assert_true(hbm_buffer_span_end(d) == d->end); /* not revived: one span */
  assert_true(hbm_buffer_span_end(buffer_named(p, "a_fusion")) == base + 1);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

static void source_lines_from_stack_frames(void **state) {
  (void)state;
  hbm_profile_t *p = load_program(program_with_frames, "frames.hlo_proto.pb");
  const hbm_buffer_t *b = buffer_named(p, "a_fusion");
  assert_string_equal(b->source, "model.py:42"); /* the innermost frame, as XProf */
  assert_string_equal(b->stack, "model.py:42:8\ntrain.py:10:4");
  b = buffer_named(p, "b_fusion");
  assert_string_equal(b->source, "model.py:7");
  assert_string_equal(b->stack, "model.py:42:8\ntrain.py:10:4");
  assert_null(buffer_named(p, "c_fusion")->source); /* the fallback: no line, no crash */
  assert_null(buffer_named(p, "c_fusion")->stack);
  assert_null(buffer_named(p, "d_fusion")->source);
  const char *lost = hbm_profile_meta(p, "lost"); /* and the warning says which and why */
  assert_non_null(lost);
  assert_non_null(strstr(lost, "program jit_frames: 2 buffers' instructions have a "
                               "stack_frame_id that points nowhere"));
  assert_non_null(strstr(lost, "index of 4 frames (first: 99)"));
  hbm_analysis_t *a;
  assert_true(summary_of(&a, p, 0)->peak_bytes == 4000); /* the numbers are untouched */
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

static void deep_and_looping_stacks(void **state) {
  (void)state;
  hbm_profile_t *p = load_program(program_with_deep_frames, "deep.hlo_proto.pb");
  const hbm_buffer_t *b = buffer_named(p, "deep_fusion");
  assert_string_equal(b->source, "deep.py:300");
  size_t lines = 1;
  for (const char *c = b->stack; *c; c++)
    lines += *c == '\n';
  assert_int_equal(lines, 257); /* 256 frames, then "..." */
  assert_non_null(strstr(b->stack, "deep.py:300:1\ndeep.py:299:1\n"));
  assert_string_equal(b->stack + strlen(b->stack) - 4, "\n...");
  assert_null(buffer_named(p, "loop_fusion")->source);
  assert_non_null(strstr(hbm_profile_meta(p, "lost"), "1 buffers' instructions have a "));
  hbm_profile_free(p);
}

/* A donated parameter holding an output (jax.jit(f, donate_argnums=0)): one allocation,
 * parameter and maybe-live-out, 4096 B; a fresh 1024 B output beside it. XLA's
 * memory_analysis() says arguments 4096, outputs 4096 + 1024 = 5120 (alias 4096). */
static void donated_parameter_is_an_output(void **state) {
  (void)state;
  xf_arena_t ar = {0};
  xf_module_t m;
  xf_module_init(&m, &ar, "jit_update", 4);
  int64_t d1024 = 1024, d256 = 256;
  int64_t w = xf_instruction(&m, "w", "parameter", F32, &d1024, 1, "w");
  int64_t o = xf_instruction(&m, "out", "fusion", F32, &d256, 1, "jit(update)/out");
  xf_logical_buffer(&m, 1, w, 4096, 0);
  xf_logical_buffer(&m, 2, o, 1024, 0);
  int64_t one = 1, two = 2;
  xf_allocation(&m, 4096, 0, XF_PARAM | XF_LIVE_OUT, &one, NULL, 1);
  xf_allocation(&m, 1024, 0, XF_LIVE_OUT, &two, NULL, 1);
  m.ba->n_heap_simulator_traces = 0;
  size_t len;
  uint8_t *bytes = xf_pack_hlo(&m, &len);
  xf_free(&ar);
  hbm_profile_t *p = hbm_profile_load(write_bytes("donate.hlo_proto.pb", bytes, len));
  free(bytes);
  assert_non_null(p);
  hbm_analysis_t *a;
  const hbm_summary_t *s = summary_of(&a, p, 0);
  assert_true(s->argument_bytes == 4096);
  assert_true(s->output_bytes == 5120);
  assert_true(s->peak_bytes == 5120);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

/* ---- damaged input: the error names the file, the byte and what was expected ---- */

static void expect_error(const char *name, const void *data, size_t len, const char *what) {
  const char *path = write_bytes(name, data, len);
  assert_null(hbm_profile_load(path));
  const char *err = hbm_last_error();
  if (!strstr(err, name) || !strstr(err, what))
    fail_msg("%s: expected '%s' in: %s", name, what, err);
}

static void bad_files(void **state) {
  (void)state;
  expect_error("wire.xplane.pb", "\x0b\x01\x02", 3, "byte 0: in XSpace: field 1 has group start");
  expect_error("long.xplane.pb", "\x0a\xff\x01\x12\x01", 5,
               "byte 0: in XSpace: field 1 says 255 bytes follow, but only 2 are left");
  expect_error("zip.xplane.pb.gz", "\x1f\x8b\x08\x00\x00\x00", 6, "byte 0: a gzip-compressed file");
  expect_error("empty.xplane.pb", "", 0, "byte 0: an empty file");
  expect_error("varint.xplane.pb", "\x0a", 1, "byte 0: in XSpace: expected the length");
  /* a bare HloProto that is cut: protobuf-c refuses it and the walk says where */
  size_t len;
  uint8_t *bytes = train_program(&len);
  expect_error("cut.hlo_proto.pb", bytes, len - 5, "says");
  free(bytes);
}

/* An HloProto whose tuple shapes nest 10,000 deep (34 KB) overflowed the stack inside
 * protobuf-c: it is refused before protobuf-c sees it, at the field that opens level 101, bare
 * or inside an .xplane.pb (where the other programs are kept). 96 tuples reach level 100
 * exactly (HloProto 0, module 1, computation 2, instruction 3, shape 4): accepted by the check,
 * then refused for what it lacks (a buffer assignment). */
static void deep_nesting_refused(void **state) {
  (void)state;
  enum { DEEP = 10000 };
  size_t len, *at = calloc(DEEP + 5, sizeof *at);
  assert_non_null(at);
  uint8_t *bytes = xf_deep_hlo_proto(DEEP, &len, at);
  char where[128];
  snprintf(where, sizeof where, "byte %zu: in ShapeProto: field 4 (tuple_shapes, a ShapeProto)",
           at[101]);
  expect_error("deep.hlo_proto.pb", bytes, len, where);
  assert_non_null(strstr(hbm_last_error(), "level 101: messages nested deeper than 100 levels"));

  xf_arena_t a = {0};
  HbmXplane__XSpace *s = xf_space(&a, 1);
  HbmXplane__XPlane *md = xf_plane(&a, s, "/host:metadata", 0, 2);
  xf_stat_meta(&a, md, HLO_STAT, "Hlo Proto");
  size_t n1;
  uint8_t *p1 = train_program(&n1);
  xf_meta_bytes(&a, xf_event_meta(&a, md, 7, "jit_train(7)", 1), HLO_STAT, p1, n1);
  xf_meta_bytes(&a, xf_event_meta(&a, md, 8, "jit_deep(8)", 1), HLO_STAT, bytes, len);
  free(p1);
  free(bytes);
  bytes = xf_pack_space(s, &len);
  xf_free(&a);
  hbm_profile_t *p = hbm_profile_load(write_bytes("deep.xplane.pb", bytes, len));
  free(bytes);
  assert_non_null(p);
  assert_string_equal(hbm_profile_meta(p, "programs"), "1");
  assert_non_null(strstr(hbm_profile_meta(p, "lost"), "level 101: messages nested deeper"));
  hbm_profile_free(p);

  bytes = xf_deep_hlo_proto(96, &len, NULL);
  expect_error("limit.hlo_proto.pb", bytes, len, "the HloProto has no buffer assignment");
  free(bytes);
  free(at);
}

static void damage_keeps_what_was_read(void **state) {
  (void)state;
  /* a program whose HloProto does not parse: the other two are shown, the loss noted */
  hbm_profile_t *p = hbm_profile_load(fixture_path(true));
  assert_non_null(p);
  assert_string_equal(hbm_profile_meta(p, "programs"), "2");
  const char *lost = hbm_profile_meta(p, "lost");
  assert_non_null(lost);
  assert_non_null(strstr(lost, "bad.xplane.pb: byte "));
  assert_non_null(strstr(lost, "in HloProto: field 1 says 100 bytes follow"));
  hbm_profile_free(p);
  /* a file cut inside its last plane (the allocator's): the programs are still there */
  size_t len;
  uint8_t *bytes = space_file(&len, false);
  p = hbm_profile_load(write_bytes("cut.xplane.pb", bytes, len - 9));
  free(bytes);
  assert_non_null(p);
  assert_string_equal(hbm_profile_space(p, 0)->device, "jit_train(7)");
  assert_int_equal(hbm_profile_find_space(p, "bfc", "allocator"), -1);
  assert_non_null(strstr(hbm_profile_meta(p, "lost"), "cut.xplane.pb: byte "));
  hbm_profile_free(p);
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

/* 10^7 events of 4 bytes (XEvent{metadata_id: 3}, not an allocator's) in one line, then one
 * allocation of 0x40 bytes: read in one pass, nothing kept but the allocation. */
static void ten_million_tiny_events(void **state) {
  (void)state;
  enum { N = 10000000 };
  static const uint8_t head[] = {
      0x12, 0x09, '/',  'h',  'o',  's',  't',  ':',  'C',  'P',  'U', /* name */
      0x22, 0x18, 0x08, 0x01, 0x12, 0x14, 0x08, 0x01, 0x12, 0x10,      /* event_metadata {1: ...} */
      'M',  'e',  'm',  'o',  'r',  'y',  'A',  'l',  'l',  'o',  'c', 'a', 't', 'i', 'o', 'n',
      0x2a, 0x18, 0x08, 0x05, 0x12, 0x14, 0x08, 0x05, 0x12, 0x10, /* stat_metadata {5: ...} */
      'a',  'l',  'l',  'o',  'c',  'a',  't',  'i',  'o',  'n',  '_', 'b', 'y', 't', 'e', 's'};
  static const uint8_t last[] = {0x22, 0x08, 0x08, 0x01, 0x22, 0x04, 0x08, 0x05, 0x18, 0x40};
  uint8_t tmp[10];
  size_t line = (size_t)N * 4 + sizeof last;
  size_t plane = sizeof head + 1 + put_varint(tmp, line) + line;
  size_t len = 1 + put_varint(tmp, plane) + plane;
  uint8_t *d = malloc(len), *w = d;
  assert_non_null(d);
  *w++ = 0x0a; /* XSpace.planes */
  w += put_varint(w, plane);
  memcpy(w, head, sizeof head), w += sizeof head;
  *w++ = 0x1a; /* XPlane.lines */
  w += put_varint(w, line);
  for (size_t i = 0; i < N; i++, w += 4) /* XLine.events */
    w[0] = 0x22, w[1] = 0x02, w[2] = 0x08, w[3] = 0x03;
  memcpy(w, last, sizeof last), w += sizeof last;
  assert_int_equal((size_t)(w - d), len);
  hbm_profile_t *p = hbm_profile_load(write_bytes("tiny.xplane.pb", d, len));
  free(d);
  assert_non_null(p);
  int space = hbm_profile_find_space(p, "allocator", "allocator");
  hbm_analysis_t *a;
  assert_true(summary_of(&a, p, space)->peak_bytes == 64);
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

/* 20,000 allocators of one 1 KiB allocation each (audit finding 26.4: the spaces were built
 * in a loop over every event per allocator, 40 s and 6.6 GB): the 256 with the highest peaks
 * are shown (here the 256 last, whose allocations are largest), and the profile says what
 * was left out. */
static void many_allocators_are_bounded(void **state) {
  (void)state;
  enum { N = 20000 };
  xf_arena_t a = {0};
  HbmXplane__XSpace *s = xf_space(&a, 1);
  HbmXplane__XPlane *cpu = xf_plane(&a, s, "/host:CPU", 1, 8);
  xf_event_meta(&a, cpu, EV_ALLOC, "MemoryAllocation", 0);
  const char *names[] = {"allocator_name", "addr", "requested_bytes", "allocation_bytes",
                         "bytes_allocated"};
  for (int i = 0; i < 5; i++)
    xf_stat_meta(&a, cpu, S_ALLOCATOR + i, names[i]);
  HbmXplane__XLine *l = xf_line(&a, cpu, 0, N);
  for (int i = 0; i < N; i++) {
    char name[32];
    snprintf(name, sizeof name, "alloc_%d", i);
    HbmXplane__XEvent *e = xf_xevent(&a, l, EV_ALLOC, (int64_t)i * 1000, 5);
    xf_event_str(&a, e, S_ALLOCATOR, name);
    xf_event_u64(&a, e, S_ADDR, 0x1000);
    xf_event_u64(&a, e, S_REQUESTED, 1024 + (uint64_t)i);
    xf_event_u64(&a, e, S_ALLOCATION, 1024 + (uint64_t)i);
    xf_event_u64(&a, e, S_IN_USE, 1024 + (uint64_t)i);
  }
  size_t len;
  uint8_t *bytes = xf_pack_space(s, &len);
  xf_free(&a);
  hbm_profile_t *p = hbm_profile_load(write_bytes("allocators.xplane.pb", bytes, len));
  free(bytes);
  assert_non_null(p);
  assert_int_equal(hbm_profile_space_count(p), 256);
  assert_int_equal(hbm_profile_find_space(p, "alloc_19999", "allocator") >= 0, 1);
  assert_int_equal(hbm_profile_find_space(p, "alloc_19744", "allocator") >= 0, 1);
  assert_int_equal(hbm_profile_find_space(p, "alloc_19743", "allocator"), -1);
  const char *lost = hbm_profile_meta(p, "lost");
  assert_non_null(lost);
  assert_non_null(strstr(lost, "20000 allocators (allocator_name / index_on_host / "
                               "device_ordinal): the 256 with the highest peaks are shown, the "
                               "other 19744 and their 19744 events are not"));
  hbm_profile_free(p);
}

static void logdir_and_cli(void **state) {
  (void)state;
  char dir[4200], cmd[9000];
  snprintf(dir, sizeof dir, "%s/logdir/plugins/profile/2026_01_01_00_00_00", th_dir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  assert_int_equal(th_run(cmd, NULL), 0);
  size_t len;
  uint8_t *bytes = space_file(&len, false);
  for (int host = 1; host <= 2; host++) {
    char path[4400];
    snprintf(path, sizeof path, "%s/host%d.xplane.pb", dir, host);
    assert_int_equal(th_write(path, bytes, len), 0);
  }
  free(bytes);
  char logdir[4200];
  snprintf(logdir, sizeof logdir, "%s/logdir", th_dir);
  hbm_logdir_entry_t e[4];
  size_t total;
  assert_int_equal(hbm_logdir_list(logdir, e, 4, &total), HBM_OK);
  assert_int_equal(total, 2);
  /* XProf, once it opened the run, wrote its copy of each program beside the .xplane.pb
   * ("<module>(<id>).hlo_proto.pb", "NO_MODULE.hlo_proto.pb"): the run reads the same. An
   * HloProto of the user's own beside them is still listed. */
  size_t hlo_len;
  uint8_t *hlo = train_program(&hlo_len);
  const char *copies[] = {"jit_train(7).hlo_proto.pb", "NO_MODULE.hlo_proto.pb",
                          "mine.hlo_proto.pb"};
  for (int i = 0; i < 3; i++) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, copies[i]);
    assert_int_equal(th_write(path, hlo, hlo_len), 0);
  }
  free(hlo);
  assert_int_equal(hbm_logdir_list(logdir, e, 4, &total), HBM_OK);
  assert_int_equal(total, 3);
  for (size_t i = 0; i < total; i++)
    assert_true(strstr(e[i].file, ".xplane.pb") || !strcmp(e[i].file, "mine.hlo_proto.pb"));
  snprintf(cmd, sizeof cmd, "rm '%s/mine.hlo_proto.pb'", dir);
  assert_int_equal(th_run(cmd, NULL), 0);
  char *out = NULL;
  snprintf(cmd, sizeof cmd, "'%s' report --json '%s/host1.xplane.pb'", HBM_BIN, dir);
  assert_int_equal(th_run(cmd, &out), 0);
  assert_non_null(strstr(out, "\"peak_bytes\": 4560"));
  free(out);
  /* the run: one report per host, then the summary row (both hosts peak at 4560 B in HBM) */
  snprintf(cmd, sizeof cmd, "'%s' report '%s' --width 60", HBM_BIN, logdir);
  assert_int_equal(th_run(cmd, &out), 0);
  assert_non_null(strstr(out, "=== run 2026_01_01_00_00_00: 2 profiles; the largest peak is"));
  assert_non_null(strstr(out, ".xplane.pb (HBM of jit_train(7))"));
  free(out);
  /* a program without a heap-simulator trace: its one step (7: jit_train's 7 come first)
   * labelled in brackets, once */
  snprintf(cmd, sizeof cmd, "'%s' report '%s/host1.xplane.pb' --space 'jit_small(3)'", HBM_BIN,
           dir);
  assert_int_equal(th_run(cmd, &out), 0);
  if (!strstr(out, "B at step 7 (no heap-simulator trace)\n") || strstr(out, "(("))
    fail_msg("%s", out);
  free(out);
  snprintf(cmd, sizeof cmd, "'%s' export '%s/host1.xplane.pb' --format chrome", HBM_BIN, dir);
  assert_int_equal(th_run(cmd, &out), 0);
  assert_non_null(strstr(out, "traceEvents"));
  free(out);
}

/* ---- the real files: numbers XProf 2.24.2 printed for them ---- */

static int64_t peak_of_space(const hbm_profile_t *p, const char *name, const char *device) {
  int space = hbm_profile_find_space(p, name, device);
  if (space < 0)
    return -1;
  hbm_analysis_t *a = hbm_analyze(p, space);
  int64_t peak = (int64_t)hbm_analysis_summary(a)->peak_bytes;
  hbm_analysis_free(a);
  return peak;
}

static void real_xprof_files(void **state) {
  (void)state;
  const char *dir = HBM_SHARED_DIR "/real/xprof";
  DIR *d = opendir(dir);
  if (!d)
    th_skip("no real XProf files (%s)", dir);
  struct dirent *de;
  int n = 0;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.' || !strstr(de->d_name, ".pb")) /* not an index beside one */
      continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    hbm_profile_t *p = hbm_profile_load(path);
    if (!p)
      fail_msg("%s: %s", path, hbm_last_error());
    assert_null(hbm_profile_meta(p, "lost"));
    hbm_profile_free(p);
    n++;
  }
  closedir(d);
  assert_true(n >= 8);
  /* xprof 2.24.2 memory_viewer, module jit_dot(21), memory_space 0: peakHeapMib 10 */
  hbm_profile_t *p =
      hbm_profile_load(HBM_SHARED_DIR "/real/xprof/AMD-AGI_TraceLens__jax08_gemm__tw003.xplane.pb");
  assert_non_null(p);
  assert_true(peak_of_space(p, "HBM", "jit_dot(21)") == 10485760);
  hbm_profile_free(p);
  /* xprof 2.24.2 memory_profile: GPU_4_bfc peakStats.peakBytesInUse 6208853760 */
  p = hbm_profile_load(
      HBM_SHARED_DIR
      "/real/xprof/tensorflow_profiler__GPU-multi-worker__34.83.195.179_6003.xplane.pb");
  assert_non_null(p);
  assert_true(peak_of_space(p, "GPU_4_bfc", "allocator") == 6208853760);
  assert_true(peak_of_space(p, "gpu_host_bfc", "allocator") == 605952);
  hbm_profile_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(programs_largest_peak_first),
      cmocka_unit_test(buffer_assignment_replayed),
      cmocka_unit_test(allocator_timeline),
      cmocka_unit_test(bare_hlo_proto),
      cmocka_unit_test(revived_buffer_span),
      cmocka_unit_test(source_lines_from_stack_frames),
      cmocka_unit_test(deep_and_looping_stacks),
      cmocka_unit_test(donated_parameter_is_an_output),
      cmocka_unit_test(bad_files),
      cmocka_unit_test(deep_nesting_refused),
      cmocka_unit_test(damage_keeps_what_was_read),
      cmocka_unit_test(ten_million_tiny_events),
      cmocka_unit_test(many_allocators_are_bounded),
      cmocka_unit_test(logdir_and_cli),
      cmocka_unit_test(real_xprof_files),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
