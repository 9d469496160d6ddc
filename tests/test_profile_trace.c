/* test_profile_trace.c — the .hbmtrace format: hbm_profile_save round-trips every field of
 * runtime and plan profiles (tags included); a file cut short anywhere (mid-block too) or
 * damaged reads up to its last good block and says what was lost; any bytes at all give a
 * profile or a message, never a crash, and huge announced sizes allocate nothing huge. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include "helpers.h"
#include "profile/trace_blocks.h"
#include "profile/trace_format.h"

/* ---- fixtures ---- */

static hbm_profile_t *make_plan(void) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_PLAN, "module_0001.jit_train_step");
  assert_non_null(p);
  assert_int_equal(hbm_profile_set_meta(p, "module", "jit_train_step"), HBM_OK);
  assert_int_equal(hbm_profile_set_meta(p, "source_path", "/tmp/x \"quoted\".hlo"), HBM_OK);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "tpu", 0, 16ull << 30), 0);
  assert_int_equal(hbm_profile_add_space(p, "Host", "tpu", 5, 0), 1);
  char label[32];
  for (int i = 0; i < 40; i++) {
    snprintf(label, sizeof label, "fusion.%d", i);
    assert_int_equal(hbm_profile_add_step(p, 0, i % 7 ? label : NULL), i);
  }
  for (int i = 0; i < 30; i++) {
    char op[32], shape[32];
    snprintf(op, sizeof op, "jit(f)/dot_général.%d", i);
    snprintf(shape, sizeof shape, "bf16[%d,128]{1,0:T(8,128)}", i + 1);
    hbm_buffer_t b = {.address = (uint64_t)i * 4096,
                      .size = (uint64_t)(i + 1) * 4096,
                      .unpadded_size = (uint64_t)(i + 1) * 1000,
                      .start = i,
                      .end = i + 5 < 40 ? i + 5 : 40,
                      .space = i % 2,
                      .category = (hbm_category_t)(i % HBM_CAT_COUNT),
                      .flags = i % 5 == 0 ? HBM_BUF_INDEFINITE : 0,
                      .op = op,
                      .shape = i % 3 ? shape : NULL,
                      .group = i % 4 ? "activations" : NULL,
                      .source = "model.py:42",
                      .opcode = "fusion",
                      .label = i % 2 ? "%fusion.3 = bf16[8,128] fusion(%p0)" : NULL};
    assert_true(hbm_profile_add_buffer(p, &b) == i);
  }
  hbm_reserve_event_t r = {
      .step = 3, .space = 0, .op = HBM_RESERVE_GROW, .address = 1 << 20, .size = 2 << 20};
  assert_int_equal(hbm_profile_add_reserve(p, &r), HBM_OK);
  hbm_oom_event_t o = {.step = 39,
                       .space = 0,
                       .requested = 107374182400ull,
                       .message = "RESOURCE_EXHAUSTED: Allocation (size=107374182400) would "
                                  "exceed memory\nsecond line"};
  assert_int_equal(hbm_profile_add_oom(p, &o), HBM_OK);
  hbm_marker_t m = {.step = 10, .kind = HBM_MARKER_STEP_BEGIN, .value = -7, .text = "step -7"};
  assert_int_equal(hbm_profile_add_marker(p, &m), HBM_OK);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  return p;
}

static hbm_profile_t *make_runtime(void) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "host.1234");
  assert_non_null(p);
  assert_int_equal(hbm_profile_set_meta(p, "host", "host"), HBM_OK);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "sim0", 0, 1ull << 30), 0);
  hbm_tag_t tags[3] = {
      {"embed/embedding", "f32[32000,1024]", HBM_CAT_PARAMETER, "params", "model.py:12"},
      {"jit(step)/dot", "bf16[256,4096]", HBM_CAT_TEMPORARY, "activations", "model.py:30"},
      {NULL, NULL, HBM_CAT_OUTPUT, NULL, NULL}};
  int64_t t = 1000;
  for (int i = 0; i < 60; i++) {
    int64_t step = hbm_profile_add_step(p, t += 17 * (i + 1), NULL);
    assert_true(hbm_profile_alloc_at(p, step, 0, 0x7f0000000000ull + (uint64_t)i * 0x100000,
                                     (uint64_t)(i + 1) * 256, &tags[i % 3]) >= 0);
    if (i >= 3) {
      step = hbm_profile_add_step(p, t += 5, NULL);
      assert_int_equal(
          hbm_profile_free_at(p, step, 0, 0x7f0000000000ull + (uint64_t)(i - 3) * 0x100000),
          HBM_OK);
    }
  }
  hbm_marker_t m = {.step = 4, .kind = HBM_MARKER_TEXT, .text = "warm-up done"};
  assert_int_equal(hbm_profile_add_marker(p, &m), HBM_OK);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  return p;
}

/* ---- comparing profiles field by field ---- */

static void assert_same_string(const char *a, const char *b) {
  if (!a || !b)
    assert_ptr_equal(a, b);
  else
    assert_string_equal(a, b);
}

static void assert_same_buffer(const hbm_buffer_t *a, const hbm_buffer_t *b) {
  assert_true(a->id == b->id && a->address == b->address && a->size == b->size);
  assert_true(a->unpadded_size == b->unpadded_size && a->start == b->start && a->end == b->end);
  assert_true(a->space == b->space && a->category == b->category && a->flags == b->flags);
  assert_same_string(a->op, b->op);
  assert_same_string(a->shape, b->shape);
  assert_same_string(a->group, b->group);
  assert_same_string(a->source, b->source);
  assert_same_string(a->opcode, b->opcode);
  assert_same_string(a->label, b->label);
}

static void assert_same_profile(const hbm_profile_t *a, const hbm_profile_t *b) {
  assert_int_equal(hbm_profile_kind(a), hbm_profile_kind(b));
  assert_string_equal(hbm_profile_name(a), hbm_profile_name(b));
  assert_int_equal(hbm_profile_meta_count(a), hbm_profile_meta_count(b));
  for (size_t i = 0; i < hbm_profile_meta_count(a); i++) {
    const char *k = hbm_profile_meta_key(a, i);
    assert_string_equal(k, hbm_profile_meta_key(b, i));
    assert_string_equal(hbm_profile_meta(a, k), hbm_profile_meta(b, k));
  }
  assert_int_equal(hbm_profile_space_count(a), hbm_profile_space_count(b));
  for (int i = 0; i < hbm_profile_space_count(a); i++) {
    const hbm_space_info_t *x = hbm_profile_space(a, i), *y = hbm_profile_space(b, i);
    assert_string_equal(x->name, y->name);
    assert_string_equal(x->device, y->device);
    assert_true(x->color == y->color && x->limit == y->limit);
  }
  assert_true(hbm_profile_step_count(a) == hbm_profile_step_count(b));
  for (int64_t i = 0; i < hbm_profile_step_count(a); i++) {
    assert_true(hbm_profile_step_time(a, i) == hbm_profile_step_time(b, i));
    assert_same_string(hbm_profile_step_label(a, i), hbm_profile_step_label(b, i));
  }
  assert_true(hbm_profile_buffer_count(a) == hbm_profile_buffer_count(b));
  for (int64_t i = 0; i < hbm_profile_buffer_count(a); i++)
    assert_same_buffer(hbm_profile_buffer(a, i), hbm_profile_buffer(b, i));
  assert_int_equal(hbm_profile_reserve_count(a), hbm_profile_reserve_count(b));
  for (size_t i = 0; i < hbm_profile_reserve_count(a); i++)
    assert_memory_equal(hbm_profile_reserve(a, i), hbm_profile_reserve(b, i),
                        sizeof(hbm_reserve_event_t));
  assert_int_equal(hbm_profile_oom_count(a), hbm_profile_oom_count(b));
  for (size_t i = 0; i < hbm_profile_oom_count(a); i++) {
    const hbm_oom_event_t *x = hbm_profile_oom(a, i), *y = hbm_profile_oom(b, i);
    assert_true(x->step == y->step && x->space == y->space && x->requested == y->requested);
    assert_string_equal(x->message, y->message);
  }
  assert_int_equal(hbm_profile_marker_count(a), hbm_profile_marker_count(b));
  for (size_t i = 0; i < hbm_profile_marker_count(a); i++) {
    const hbm_marker_t *x = hbm_profile_marker(a, i), *y = hbm_profile_marker(b, i);
    assert_true(x->step == y->step && x->kind == y->kind && x->value == y->value);
    assert_string_equal(x->text, y->text);
  }
}

static hbm_profile_t *parse_file(const char *path, uint64_t max_raw) {
  size_t len;
  char *data = th_read(path, &len);
  assert_non_null(data);
  hbm_profile_t *p = hbm__trace_parse((const uint8_t *)data, len, path, max_raw);
  free(data);
  return p;
}

/* ---- round trips ---- */

static void round_trip(hbm_profile_t *p) {
  char *dir = th_mkdtemp("trace");
  char path[4200];
  snprintf(path, sizeof path, "%s/saved.hbmtrace", dir);
  assert_int_equal(hbm_profile_save(p, path), HBM_OK);
  hbm_profile_t *q = parse_file(path, 0);
  assert_non_null(q);
  assert_null(hbm_profile_meta(q, "lost"));
  assert_same_profile(p, q);
  /* Saving what was loaded gives the same bytes: nothing drifts. */
  char again[4300];
  snprintf(again, sizeof again, "%s/again.hbmtrace", dir);
  assert_int_equal(hbm_profile_save(q, again), HBM_OK);
  size_t n1, n2;
  char *b1 = th_read(path, &n1), *b2 = th_read(again, &n2);
  assert_true(n1 == n2 && memcmp(b1, b2, n1) == 0);
  free(b1);
  free(b2);
  hbm_profile_free(q);
  hbm_profile_free(p);
  th_rmtree(dir);
  free(dir);
}

static void plan_round_trips_exactly(void **state) {
  (void)state;
  round_trip(make_plan());
}

static void runtime_tags_round_trip(void **state) {
  (void)state;
  hbm_profile_t *p = make_runtime();
  const hbm_buffer_t *b = hbm_profile_buffer(p, 0);
  assert_string_equal(b->op, "embed/embedding");
  round_trip(p);
}

static void empty_profile_round_trips(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "");
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  round_trip(p);
}

static void save_reports_unwritable_path(void **state) {
  (void)state;
  hbm_profile_t *p = make_runtime();
  assert_int_equal(hbm_profile_save(p, "/nonexistent-dir/x.hbmtrace"), HBM_ERR_IO);
  assert_non_null(strstr(hbm_last_error(), "/nonexistent-dir/x.hbmtrace"));
  hbm_profile_free(p);
}

/* ---- a recorded event stream in many blocks, cut anywhere ---- */

typedef struct stream_file {
  char *dir, path[4200];
  size_t header_end;
  size_t block_end[64]; /* file offset after each block */
  int n_blocks;
  int events_per_block;
} stream_file_t;

/* 20 blocks of 50 alloc/free events; not closed (as after kill -9). */
static void write_stream(stream_file_t *f) {
  f->dir = th_mkdtemp("stream");
  snprintf(f->path, sizeof f->path, "%s/host.1.hbmtrace", f->dir);
  const char *meta[][2] = {{"host", "host"}};
  hbm_trace_writer_t *w = hbm__tw_create(f->path, true, HBM_PROFILE_RUNTIME, "host.1", meta, 1, 1);
  assert_non_null(w);
  f->header_end = (size_t)hbm__tw_file_bytes(w);
  hbm__tw_space(w, 0, "HBM", "sim0", 0, 1 << 30);
  f->events_per_block = 50;
  f->n_blocks = 20;
  hbm_tag_t tag = {"op", "f32[4]", HBM_CAT_TEMPORARY, "g", "t.c:1"};
  int64_t t = 0;
  for (int blk = 0; blk < f->n_blocks; blk++) {
    for (int i = 0; i < f->events_per_block; i += 2) {
      uint64_t addr = 0x1000 + (uint64_t)(blk * 100 + i) * 0x100;
      hbm__tw_ev_alloc(w, t += 10, 0, addr, 256 + (uint64_t)i, 512, &tag, 0);
      /* frees lag behind, so the memory in use rises and falls */
      if (i % 4 == 2)
        hbm__tw_ev_free(w, t += 10, 0, addr - 0x200);
      else
        hbm__tw_ev_alloc(w, t += 10, 0, addr + 0x80, 100, 256, NULL, 0);
    }
    assert_int_equal(hbm__tw_flush(w), HBM_OK);
    f->block_end[blk] = (size_t)hbm__tw_file_bytes(w);
  }
  assert_int_equal(hbm__tw_close(w, false), HBM_OK);
}

/* The peak of the first `blocks` blocks' events, computed here from the same events. */
static uint64_t expected_peak(int blocks) {
  uint64_t live = 0, peak = 0;
  for (int blk = 0; blk < blocks; blk++)
    for (int i = 0; i < 50; i += 2) {
      live += 256 + (uint64_t)i;
      peak = live > peak ? live : peak;
      if (i % 4 == 2)
        live -= 256 + (uint64_t)(i - 2); /* the alloc two events before, same block */
      else
        live += 100;
      peak = live > peak ? live : peak;
    }
  return peak;
}

static void check_cut(const stream_file_t *f, const char *data, size_t cut) {
  char path[4300];
  snprintf(path, sizeof path, "%s.cut", f->path);
  assert_int_equal(th_write(path, data, cut), 0);
  hbm_profile_t *p = parse_file(path, 0);
  assert_non_null(p);
  int whole = 0;
  while (whole < f->n_blocks && f->block_end[whole] <= cut)
    whole++;
  const char *lost = hbm_profile_meta(p, "lost");
  assert_non_null(lost);
  size_t last_end = whole ? f->block_end[whole - 1] : f->header_end;
  char expect[160];
  if (cut == last_end) {
    /* cut at a block boundary: nothing is half there, but the file was not closed */
    assert_non_null(strstr(lost, "not closed"));
  } else {
    if (whole)
      snprintf(expect, sizeof expect, "lost %zu bytes after block %d (file truncated)",
               cut - last_end, whole);
    else
      snprintf(expect, sizeof expect, "lost %zu bytes after the header (file truncated)",
               cut - last_end);
    assert_string_equal(lost, expect);
  }
  /* Every event of the whole blocks is there (one step each), and the peak is right. */
  assert_true(hbm_profile_step_count(p) == (int64_t)whole * f->events_per_block);
  if (whole) {
    hbm_analysis_t *a = hbm_analyze(p, 0);
    assert_non_null(a);
    assert_true(hbm_analysis_summary(a)->peak_bytes == expected_peak(whole));
    hbm_analysis_free(a);
  }
  hbm_profile_free(p);
}

static void truncated_file_reads_whole_blocks(void **state) {
  (void)state;
  stream_file_t f = {0};
  write_stream(&f);
  size_t len;
  char *data = th_read(f.path, &len);
  assert_true(len == f.block_end[f.n_blocks - 1]);
  size_t header_end = f.header_end;
  size_t cuts[] = {header_end,
                   header_end + 3,
                   f.block_end[0] - 1,
                   f.block_end[0],
                   f.block_end[0] + 10,
                   f.block_end[7] + 17,
                   f.block_end[12] - 40,
                   f.block_end[18],
                   len - 1,
                   len};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
    check_cut(&f, data, cuts[i]);
  free(data);
  th_rmtree(f.dir);
  free(f.dir);
}

static void damaged_block_is_reported(void **state) {
  (void)state;
  stream_file_t f = {0};
  write_stream(&f);
  size_t len;
  char *data = th_read(f.path, &len);
  data[f.block_end[4] + 20] ^= 0x40; /* inside block 6's compressed bytes */
  assert_int_equal(th_write(f.path, data, len), 0);
  hbm_profile_t *p = parse_file(f.path, 0);
  assert_non_null(p);
  char expect[128];
  snprintf(expect, sizeof expect, "lost %zu bytes after block 5 (block 6 is damaged: checksum",
           len - f.block_end[4]);
  assert_non_null(strstr(hbm_profile_meta(p, "lost"), expect));
  assert_true(hbm_profile_step_count(p) == 5 * 50);
  hbm_profile_free(p);
  free(data);
  th_rmtree(f.dir);
  free(f.dir);
}

/* ---- hostile bytes ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(rng_state >> 33);
}

static void expect_profile_or_message(const uint8_t *data, size_t len) {
  hbm__error_clear();
  hbm_profile_t *p = hbm__trace_parse(data, len, "fuzz.hbmtrace", 4u << 20);
  if (p)
    hbm_profile_free(p);
  else
    assert_true(strlen(hbm_last_error()) > 0);
}

/* A valid header followed by one block holding the given raw records. */
static size_t build_file(uint8_t *out, size_t cap, const uint8_t *raw, size_t raw_len,
                         uint32_t claimed_raw) {
  uint8_t header[HBM_TRACE_HEADER_FIXED + 2];
  memcpy(header, HBM_TRACE_MAGIC, 8);
  header[8] = 1, header[9] = 0, header[10] = 0, header[11] = 0;
  uint8_t hbody[2] = {0, 0}; /* name length 0, 0 metadata entries */
  hbm__put_le32(header + 12, 2);
  hbm__put_le32(header + 16, hbm__crc32(0, hbody, 2));
  memcpy(header + HBM_TRACE_HEADER_FIXED, hbody, 2);
  size_t n = sizeof header;
  memcpy(out, header, n);
  size_t c = ZSTD_compress(out + n + 16, cap - n - 16, raw, raw_len, 1);
  assert_false(ZSTD_isError(c));
  memcpy(out + n, "HBMB", 4);
  hbm__put_le32(out + n + 4, (uint32_t)c);
  hbm__put_le32(out + n + 8, claimed_raw);
  hbm__put_le32(out + n + 12, hbm__crc32(0, out + n + 16, c));
  return n + 16 + c;
}

static void hostile_bytes_give_messages(void **state) {
  (void)state;
  uint8_t buf[4096];
  expect_profile_or_message(NULL, 0);
  expect_profile_or_message((const uint8_t *)"HBMTRACE", 8);
  for (int round = 0; round < 3000; round++) {
    size_t len = rng() % sizeof buf;
    for (size_t i = 0; i < len; i++)
      buf[i] = (uint8_t)rng();
    if (round % 2) /* a plausible start, so the parser goes deeper */
      memcpy(buf, HBM_TRACE_MAGIC, len < 8 ? len : 8);
    expect_profile_or_message(buf, len);
  }
  /* flip bytes of a real file */
  hbm_profile_t *p = make_plan();
  char *dir = th_mkdtemp("flip"), path[4200];
  snprintf(path, sizeof path, "%s/p.hbmtrace", dir);
  assert_int_equal(hbm_profile_save(p, path), HBM_OK);
  hbm_profile_free(p);
  size_t len;
  uint8_t *data = (uint8_t *)th_read(path, &len);
  for (int round = 0; round < 300; round++) {
    size_t at = rng() % len;
    uint8_t old = data[at];
    data[at] ^= (uint8_t)(1 + rng() % 255);
    expect_profile_or_message(data, len);
    expect_profile_or_message(data, rng() % len);
    data[at] = old;
  }
  free(data);
  th_rmtree(dir);
  free(dir);
}

static void huge_sizes_allocate_nothing_huge(void **state) {
  (void)state;
  static uint8_t file[1 << 16];
  /* a STRING record announcing 2^62 bytes */
  uint8_t raw[32] = {HBM_REC_STRING};
  size_t n = 1 + hbm__put_varint(raw + 1, 1ull << 62);
  size_t len = build_file(file, sizeof file, raw, n, (uint32_t)n);
  hbm_profile_t *p = hbm__trace_parse(file, len, "huge.hbmtrace", 0);
  assert_non_null(p); /* the block is damaged, the header was fine */
  assert_non_null(strstr(hbm_profile_meta(p, "lost"), "runs past the end of its block"));
  hbm_profile_free(p);
  /* a block claiming more than the 16 MiB a block may hold */
  len = build_file(file, sizeof file, raw, n, 0x7fffffffu);
  p = hbm__trace_parse(file, len, "huge.hbmtrace", 0);
  assert_non_null(p);
  assert_non_null(strstr(hbm_profile_meta(p, "lost"), "bad block header"));
  hbm_profile_free(p);
  /* a zstd bomb: 8 MiB of step records from a few KiB */
  size_t big = 8u << 20;
  uint8_t *steps = malloc(big);
  for (size_t i = 0; i + 3 <= big; i += 3)
    steps[i] = HBM_REC_STEP, steps[i + 1] = 1, steps[i + 2] = 0;
  len = build_file(file, sizeof file, steps, big / 3 * 3, (uint32_t)(big / 3 * 3));
  free(steps);
  assert_true(len < sizeof file);
  p = hbm__trace_parse(file, len, "bomb.hbmtrace", 1u << 20);
  assert_non_null(p);
  assert_non_null(strstr(hbm_profile_meta(p, "lost"), "decompresses to more than"));
  assert_true(hbm_profile_step_count(p) == 0);
  hbm_profile_free(p);
  /* more memory spaces than a reader takes (each one is analysed on its own) */
  uint8_t *spaces = malloc(8 * 5000 + 8); /* type, length, index (2 bytes), 4 fields */
  size_t k = 0;
  spaces[k++] = HBM_REC_STRING, spaces[k++] = 1, spaces[k++] = 'S';
  for (unsigned i = 0; i < 5000; i++) {
    uint8_t body[16];
    size_t b = hbm__put_varint(body, i);
    body[b++] = 1, body[b++] = 0, body[b++] = 0, body[b++] = 0; /* name 1, no device */
    spaces[k++] = HBM_REC_SPACE, spaces[k++] = (uint8_t)b;
    memcpy(spaces + k, body, b);
    k += b;
  }
  len = build_file(file, sizeof file, spaces, k, (uint32_t)k);
  free(spaces);
  p = hbm__trace_parse(file, len, "spaces.hbmtrace", 0);
  assert_non_null(p);
  assert_non_null(strstr(hbm_profile_meta(p, "lost"), "more than 4096 memory spaces"));
  hbm_profile_free(p);
  /* header announcing a 4 GiB body */
  uint8_t header[HBM_TRACE_HEADER_FIXED] = "HBMTRACE\x01\x00\x00\x00";
  hbm__put_le32(header + 12, 0xffffffffu);
  assert_null(hbm__trace_parse(header, sizeof header, "h.hbmtrace", 0));
  assert_non_null(strstr(hbm_last_error(), "header is cut short"));
}

/* Issue 26.3: a few KB of tiny, identical event records that decompress to 100 MB. A reader
 * reads at most HBM_TRACE_RAW_PER_BYTE record bytes per file byte (plus 1 MiB) and says what
 * it did not read; `hbm report` on it stays in tens of MB (it took 3.4 GB). */
static void tiny_events_are_bounded_by_the_file(void **state) {
  (void)state;
  char *dir = th_mkdtemp("tiny"), path[4200];
  snprintf(path, sizeof path, "%s/tiny.hbmtrace", dir);
  hbm_trace_writer_t *w = hbm__tw_create(path, true, HBM_PROFILE_RUNTIME, "tiny", NULL, 0, 1);
  assert_non_null(w);
  hbm__tw_space(w, 0, "HBM", "sim0", 0, 0);
  for (int i = 0; i < 20000000; i++) /* frees of a block the profile never saw: 5 bytes each */
    hbm__tw_ev_free(w, 0, 0, 0x10);
  assert_int_equal(hbm__tw_close(w, true), HBM_OK);
  size_t len;
  char *data = th_read(path, &len);
  assert_non_null(data);
  assert_true(len < 64 * 1024);
  hbm_profile_t *p = hbm__trace_parse((const uint8_t *)data, len, "tiny.hbmtrace", 0);
  assert_non_null(p);
  const char *lost = hbm_profile_meta(p, "lost");
  if (!lost || !strstr(lost, "decompresses to more than"))
    fail_msg("%s", lost ? lost : "nothing lost");
  hbm_profile_free(p);
  free(data);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stdout))
      _exit(99);
    execl(HBM_BIN, HBM_BIN, "report", path, (char *)NULL);
    _exit(98);
  }
  int status;
  struct rusage ru;
  assert_true(wait4(pid, &status, 0, &ru) == pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  th_rmtree(dir);
  free(dir);
  if (TH_SANITIZED) /* the rest was checked: only the memory bound cannot be */
    th_skip("the memory bound: a sanitizer's shadow memory is resident too");
  if (ru.ru_maxrss > 64 * 1024) /* KiB */
    fail_msg("hbm report took %ld KiB for a %zu-byte file", ru.ru_maxrss, len);
}

static void unknown_records_are_skipped(void **state) {
  (void)state;
  static uint8_t file[4096];
  uint8_t raw[] = {0x60,
                   3,
                   'a',
                   'b',
                   'c', /* a record type from the future */
                   HBM_REC_STRING,
                   3,
                   'H',
                   'B',
                   'M', /* string 1 */
                   HBM_REC_SPACE,
                   5,
                   0,
                   1,
                   0,
                   0,
                   0, /* space 0: "HBM" */
                   HBM_REC_EV_ALLOC,
                   12,
                   2,
                   0,
                   0x80,
                   0x20,
                   100,
                   0,
                   0,
                   0,
                   0,
                   0,
                   0,
                   0,
                   HBM_REC_END,
                   1,
                   1};
  size_t len = build_file(file, sizeof file, raw, sizeof raw, sizeof raw);
  hbm_profile_t *p = hbm__trace_parse(file, len, "future.hbmtrace", 0);
  assert_non_null(p);
  assert_null(hbm_profile_meta(p, "lost"));
  assert_true(hbm_profile_buffer_count(p) == 1);
  assert_true(hbm_profile_buffer(p, 0)->address == 0x1000 && hbm_profile_buffer(p, 0)->size == 100);
  hbm_profile_free(p);
}

/* ---- events out of order (threads' blocks interleaved) ---- */

typedef struct timed {
  int64_t time;
  size_t order;
} timed_t;

static int by_time_then_order(const void *a, const void *b) {
  const timed_t *x = a, *y = b;
  if (x->time != y->time)
    return x->time < y->time ? -1 : 1;
  return x->order < y->order ? -1 : 1;
}

/* Allocations written with the times time_of(i): the profile replays them by time, ties in
 * file order (its buffers, in allocation order, have the sizes of that order). */
static void check_sorted(size_t n, int64_t (*time_of)(size_t)) {
  char *dir = th_mkdtemp("order"), path[4200];
  snprintf(path, sizeof path, "%s/host.1.hbmtrace", dir);
  const char *meta[][2] = {{"host", "host"}};
  hbm_trace_writer_t *w = hbm__tw_create(path, true, HBM_PROFILE_RUNTIME, "host.1", meta, 1, 1);
  assert_non_null(w);
  hbm__tw_space(w, 0, "HBM", "sim0", 0, 1ull << 40);
  timed_t *want = malloc(n * sizeof *want);
  for (size_t i = 0; i < n; i++) {
    want[i] = (timed_t){time_of(i), i};
    hbm__tw_ev_alloc(w, want[i].time, 0, 0x1000 + i * 0x100, 1 + i, 1 + i, NULL, 0);
  }
  assert_int_equal(hbm__tw_close(w, true), HBM_OK);
  qsort(want, n, sizeof *want, by_time_then_order);
  size_t len;
  char *data = th_read(path, &len);
  assert_non_null(data);
  hbm_profile_t *p = hbm__trace_parse((const uint8_t *)data, len, path, 0);
  free(data);
  assert_non_null(p);
  assert_int_equal(hbm_profile_buffer_count(p), n);
  for (size_t i = 0; i < n; i++)
    assert_int_equal(hbm_profile_buffer(p, (int64_t)i)->size, 1 + want[i].order);
  hbm_profile_free(p);
  free(want);
  th_rmtree(dir);
  free(dir);
}

static int64_t three_runs(size_t i) { /* interleaved runs, with equal times across them */
  return (int64_t)(i % 1000) * 10 + (i / 1000 == 1 ? 5 : 0);
}

static int64_t pairs_swapped(size_t i) { /* 1, 0, 3, 2, ...: a run every two events */
  return (int64_t)(i % 2 ? i - 1 : i + 1);
}

static int64_t two_long_runs(size_t i) { /* 2 runs of 1.25M, interleaved over their length */
  return (int64_t)(i % 1250000) * 2 + (int64_t)(i / 1250000);
}

static void events_out_of_order_are_sorted_stably(void **state) {
  (void)state;
  check_sorted(3000, three_runs);     /* a few runs: merged at once */
  check_sorted(20000, pairs_swapped); /* 10^4 runs: merged two by two */
  /* Merged while replayed, the pages both runs have passed given back on the way (past 2^20
   * events, 32 MiB): what is read after that is still there. (Through a window smaller than
   * the runs' distance, so that they are collected and merged whole.) */
  size_t window = hbm__trace_window;
  hbm__trace_window = 1024;
  check_sorted(2500000, two_long_runs);
  hbm__trace_window = window;
}

static int64_t some_early(size_t i) { /* every 50th written 30 events early, as markers are */
  return (int64_t)(i % 50 == 0 ? i + 30 : i) * 10;
}

/* Replayed as they are read through a window of 64 events (16 kept back): events written
 * early (the recorder's markers) or late by less than 16 come out in order without reading the
 * file again; runs interleaved further apart make the reader read it again, sorted whole. */
static void events_replayed_through_a_window(void **state) {
  (void)state;
  size_t window = hbm__trace_window;
  hbm__trace_window = 64;
  uint64_t before = hbm__trace_rereads();
  check_sorted(5000, some_early);
  check_sorted(20000, pairs_swapped);
  assert_int_equal(hbm__trace_rereads(), before);
  check_sorted(3000, three_runs); /* the second run starts 1000 events late */
  assert_int_equal(hbm__trace_rereads(), before + 1);
  hbm__trace_window = window;
}

static void not_a_trace_is_refused(void **state) {
  (void)state;
  const char *text = "Thread,Time,Action,Pointer,Size,Stream\n";
  assert_null(hbm__trace_parse((const uint8_t *)text, strlen(text), "log.csv", 0));
  assert_non_null(strstr(hbm_last_error(), "log.csv: not an .hbmtrace file"));
  uint8_t v2[HBM_TRACE_HEADER_FIXED] = "HBMTRACE\x02\x00\x00\x00";
  assert_null(hbm__trace_parse(v2, sizeof v2, "v2.hbmtrace", 0));
  assert_non_null(strstr(hbm_last_error(), "version 2"));
}

/* The format's checksum is the standard CRC-32: its published check value, and a CRC
 * continued over two pieces equals the CRC of the whole. */
static void checksum_is_crc32(void **state) {
  (void)state;
  assert_int_equal(hbm__crc32(0, "123456789", 9), 0xCBF43926u);
  assert_int_equal(hbm__crc32(0, "", 0), 0);
  assert_int_equal(hbm__crc32(hbm__crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(checksum_is_crc32),
      cmocka_unit_test(plan_round_trips_exactly),
      cmocka_unit_test(runtime_tags_round_trip),
      cmocka_unit_test(empty_profile_round_trips),
      cmocka_unit_test(save_reports_unwritable_path),
      cmocka_unit_test(truncated_file_reads_whole_blocks),
      cmocka_unit_test(damaged_block_is_reported),
      cmocka_unit_test(hostile_bytes_give_messages),
      cmocka_unit_test(huge_sizes_allocate_nothing_huge),
      cmocka_unit_test(tiny_events_are_bounded_by_the_file),
      cmocka_unit_test(unknown_records_are_skipped),
      cmocka_unit_test(events_out_of_order_are_sorted_stably),
      cmocka_unit_test(events_replayed_through_a_window),
      cmocka_unit_test(not_a_trace_is_refused),
  };
  int failed = cmocka_run_group_tests_name("blocks read in turn", tests, NULL, NULL);
  /* Again with every file's blocks unpacked on the thread ahead of the reader (big files'
   * way, trace_blocks.c): the same profiles, messages and losses. */
  hbm__trace_ahead_min = 0;
  return failed + cmocka_run_group_tests_name("blocks unpacked ahead", tests, NULL, NULL);
}
