/* test_import_torch.c — PyTorch memory snapshots: the restricted pickle reader (plain data
 * only; every opcode that names or calls code refused with its name and byte offset) and the
 * snapshot model. The fixtures in tests/data/torch/ come from make_snapshots.py, which
 * simulates a caching allocator and writes beside each snapshot the numbers of the simulated
 * run (NAME.expected): the peak of live requested bytes over the trace, PyTorch's reserved
 * bytes at the dump (the sum of the segments) and over the trace, the OOM events, the bytes
 * live at the end. hbm must find the same from the pickle alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"
#include "import/pickle.h"
#include "import/torch_snapshot.h"

#define DATA HBM_SOURCE_DIR "/tests/data/torch/"

/* ---- the pickle reader on hand-assembled bytes ---- */

static pk_doc_t *parse_bytes(const char *bytes, size_t n) {
  return pk_parse((const uint8_t *)bytes, n, "t.pickle", NULL);
}
#define PARSE(lit) parse_bytes(lit, sizeof lit - 1)

static void assert_refused(const char *bytes, size_t n, const char *opcode, const char *at) {
  pk_doc_t *doc = parse_bytes(bytes, n);
  if (doc)
    fail_msg("a pickle with %s was read", opcode);
  const char *err = hbm_last_error();
  if (!strstr(err, opcode) || !strstr(err, at) || !strstr(err, "t.pickle: "))
    fail_msg("expected '%s' at '%s' in: %s", opcode, at, err);
}
#define REFUSED(lit, opcode, at) assert_refused(lit, sizeof lit - 1, opcode, at)

static void plain_values(void **state) {
  (void)state;
  /* {'a': -2, 'b': [1.5, True, None], 'c': (b'xy', 'hé'), 'd': 2**40, 'e': -2**40} in
   * protocol 4, written by hand from the opcode table of Python's pickletools:
   * EMPTY_DICT MEMOIZE MARK 'a' BININT(-2) 'b' EMPTY_LIST MARK BINFLOAT 1.5 NEWTRUE NONE
   * APPENDS 'c' SHORT_BINBYTES 'xy' 'hé' TUPLE2 'd' LONG1 6 bytes 'e' LONG1 6 bytes
   * SETITEMS STOP */
  pk_doc_t *doc = PARSE("\x80\x04}\x94("
                        "\x8c\x01"
                        "a"
                        "J\xfe\xff\xff\xff"
                        "\x8c\x01"
                        "b]("
                        "G\x3f\xf8\x00\x00\x00\x00\x00\x00\x88Ne"
                        "\x8c\x01"
                        "c"
                        "C\x02xy\x8c\x03h\xc3\xa9\x86"
                        "\x8c\x01"
                        "d\x8a\x06\x00\x00\x00\x00\x00\x01"
                        "\x8c\x01"
                        "e\x8a\x06\x00\x00\x00\x00\x00\xff"
                        "u.");
  if (!doc)
    fail_msg("%s", hbm_last_error());
  const pk_value_t *root = pk_root(doc);
  int64_t v;
  assert_true(pk_int(pk_get(root, "a"), &v) && v == -2);
  size_t n;
  pk_value_t *const *b = pk_items(pk_get(root, "b"), &n);
  assert_int_equal(n, 3);
  assert_true(b[0]->kind == PK_FLOAT && b[0]->as.f == 1.5);
  assert_true(b[1]->kind == PK_BOOL && b[1]->as.b);
  assert_true(b[2]->kind == PK_NONE);
  pk_value_t *const *c = pk_items(pk_get(root, "c"), &n);
  assert_int_equal(n, 2);
  assert_true(c[0]->kind == PK_BYTES && c[0]->as.str.n == 2 && !memcmp(c[0]->as.str.s, "xy", 2));
  assert_string_equal(pk_str(c[1]), "h\xc3\xa9");
  assert_true(pk_int(pk_get(root, "d"), &v) && v == (int64_t)1 << 40);
  assert_true(pk_int(pk_get(root, "e"), &v) && v == -((int64_t)1 << 40));
  assert_null(pk_get(root, "missing"));
  pk_free(doc);
}

static void memo_shares_values(void **state) {
  (void)state;
  /* [x, x] where x = ['f'] is stored once (BINPUT 7) and fetched again (BINGET 7) */
  pk_doc_t *doc = PARSE("\x80\x02](]q\x07X\x01\x00\x00\x00"
                        "fah\x07"
                        "e.");
  if (!doc)
    fail_msg("%s", hbm_last_error());
  size_t n, k;
  pk_value_t *const *items = pk_items(pk_root(doc), &n);
  assert_int_equal(n, 2);
  assert_ptr_equal(items[0], items[1]);
  assert_string_equal(pk_str(pk_items(items[0], &k)[0]), "f");
  pk_free(doc);
  /* a big integer (LONG4, 9 bytes) is read but marked as too big for int64 */
  doc = PARSE("\x80\x02\x8b\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01.");
  assert_non_null(doc);
  int64_t v;
  assert_true(pk_root(doc)->int_overflow && !pk_int(pk_root(doc), &v));
  pk_free(doc);
}

/* The reader's shortest paths give what the general ones give: Python's pickle.loads is the
 * expected value of each of these bytes (written by Python 3's pickle.dumps, protocol 2, or by
 * hand from pickletools' opcode table). */
static void short_paths_match_python(void **state) {
  (void)state;
  /* pickle.dumps([2**40, -2**40, 2**55-1, -2**55, 2**47, -1-2**39, 2**31, -2**31-1], 2):
   * LONG1 of 5 to 7 bytes, the last two within 8 bytes of the end (the general path) */
  static const int64_t longs[] = {
      (int64_t)1 << 40, -((int64_t)1 << 40),     ((int64_t)1 << 55) - 1, -((int64_t)1 << 55),
      (int64_t)1 << 47, -1 - ((int64_t)1 << 39), (int64_t)1 << 31,       -((int64_t)1 << 31) - 1};
  pk_doc_t *doc = PARSE("\x80\x02]q\x00(\x8a\x06\x00\x00\x00\x00\x00\x01\x8a\x06\x00\x00\x00\x00"
                        "\x00\xff\x8a\x07\xff\xff\xff\xff\xff\xff\x7f\x8a\x07\x00\x00\x00\x00\x00"
                        "\x00\x80\x8a\x07\x00\x00\x00\x00\x00\x80\x00\x8a\x06\xff\xff\xff\xff\x7f"
                        "\xff\x8a\x05\x00\x00\x00\x80\x00\x8a\x05\xff\xff\xff\x7f\xff"
                        "e.");
  if (!doc)
    fail_msg("%s", hbm_last_error());
  size_t n;
  int64_t v;
  pk_value_t *const *items = pk_items(pk_root(doc), &n);
  assert_int_equal(n, HBM_ARRAY_LEN(longs));
  for (size_t i = 0; i < n; i++)
    assert_true(pk_int(items[i], &v) && v == longs[i]);
  pk_free(doc);
  /* a memo index stored again after a reference to it: later references see the new value,
   * one at a time and in a batch of references (MARK BINGET APPENDS). By hand:
   * EMPTY_LIST BINPUT 0; MARK 1 BINPUT 5 APPENDS; MARK BINGET 5 APPENDS;
   * MARK 2 BINPUT 5 BINGET 5 APPENDS; MARK BINGET 5 APPENDS; pickle.loads: [1, 1, 2, 2, 2] */
  doc = PARSE("\x80\x02]q\x00(K\x01q\x05"
              "e(h\x05"
              "e(K\x02q\x05h\x05"
              "e(h\x05"
              "e.");
  if (!doc)
    fail_msg("%s", hbm_last_error());
  static const int64_t rebound[] = {1, 1, 2, 2, 2};
  items = pk_items(pk_root(doc), &n);
  assert_int_equal(n, HBM_ARRAY_LEN(rebound));
  for (size_t i = 0; i < n; i++)
    assert_true(pk_int(items[i], &v) && v == rebound[i]);
  pk_free(doc);
}

static void code_is_refused(void **state) {
  (void)state;
  /* each opcode that names or calls code, with the byte offset of the opcode */
  REFUSED("\x80\x02)\x85R.", "REDUCE", "byte 4:");
  REFUSED("\x80\x02}}b.", "BUILD", "byte 4:");
  REFUSED("\x80\x02(ios\nsystem\n.", "INST", "byte 3:");
  REFUSED("\x80\x02()o.", "OBJ", "byte 4:");
  REFUSED("\x80\x02))\x81.", "NEWOBJ", "byte 4:");
  REFUSED("\x80\x04)))\x92.", "NEWOBJ_EX", "byte 5:");
  REFUSED("\x80\x02Pid\n.", "PERSID", "byte 2:");
  REFUSED("\x80\x02NQ.", "BINPERSID", "byte 3:");
  REFUSED("\x80\x02\x82\x01.", "EXT1", "byte 2:");
  REFUSED("\x80\x02"
          "cbuiltins\neval\n.",
          "'builtins.eval'", "byte 2:");
}

static void malformed_input_says_where(void **state) {
  (void)state;
  REFUSED("\x80\x04X\xff\x00\x00\x00"
          "ab",
          "string of 255 bytes", "byte 2:");
  REFUSED("\x80\x04]h\x03.", "memo entry 3", "byte 3:");
  REFUSED("\x80\x04]", "without STOP", "byte 3:");
  REFUSED("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N.", "a frame of 255 bytes", "byte 2:");
  REFUSED("\x80\x04Na.", "APPEND", "byte 3:");
  REFUSED("\x80\x04}Nu.", "MARK", "byte 4:");
  REFUSED("\x80\x04I1\n.", "text opcode", "byte 2:");
  REFUSED("\x80\x04\xff.", "not a pickle opcode", "byte 2:");
  REFUSED("\x80\x04Nr\x00\x00\x00\x7f.", "memo index", "byte 3:");
  assert_null(PARSE("\x80\x06N."));
  assert_non_null(strstr(hbm_last_error(), "protocol 2 to 5"));
}

/* ---- snapshots ---- */

typedef struct expected {
  char device[16];
  char key[32];
  uint64_t value;
} expected_t;

/* NAME.expected: "cuda:N key value" lines written by make_snapshots.py. */
static size_t read_expected(const char *name, expected_t *out, size_t cap) {
  char path[512];
  snprintf(path, sizeof path, DATA "%s.expected", name);
  FILE *f = fopen(path, "r");
  if (!f)
    fail_msg("cannot open %s", path);
  size_t n = 0;
  char line[256];
  while (fgets(line, sizeof line, f))
    if (line[0] != '#' && n < cap &&
        sscanf(line, "%15s %31s %lu", out[n].device, out[n].key, &out[n].value) == 3)
      n++;
  fclose(f);
  assert_true(n > 0);
  return n;
}

static uint64_t measured(const hbm_profile_t *p, int space, const char *key) {
  hbm_analysis_t *a = hbm_analyze(p, space);
  assert_non_null(a);
  const hbm_summary_t *s = hbm_analysis_summary(a);
  int64_t last = hbm_profile_step_count(p) - 1;
  hbm_timeline_point_t end;
  assert_int_equal(hbm_analysis_timeline(a, last, last + 1, 1, &end), 1);
  uint64_t v = !strcmp(key, "peak_bytes")      ? s->peak_bytes
               : !strcmp(key, "reserved_end")  ? end.reserved
               : !strcmp(key, "peak_reserved") ? s->peak_reserved_bytes
               : !strcmp(key, "ooms")          ? (uint64_t)s->n_oom
               : !strcmp(key, "live_end")      ? end.bytes
               : !strcmp(key, "inconsistent")
                   ? strtoull(hbm_profile_meta(p, "inconsistent_trace_events")
                                  ? hbm_profile_meta(p, "inconsistent_trace_events")
                                  : "0",
                              NULL, 10)
                   : UINT64_MAX;
  hbm_analysis_free(a);
  if (v == UINT64_MAX)
    fail_msg("unknown expected key %s", key);
  return v;
}

static void check_fixture(const char *name) {
  char path[512];
  snprintf(path, sizeof path, DATA "%s.pickle", name);
  hbm_profile_t *p = hbm_profile_load(path);
  if (!p)
    fail_msg("%s: %s", name, hbm_last_error());
  assert_int_equal(hbm_profile_kind(p), HBM_PROFILE_RUNTIME);
  assert_string_equal(hbm_profile_meta(p, "format"), "PyTorch memory snapshot (pickle)");
  expected_t exp[32];
  size_t n = read_expected(name, exp, 32);
  for (size_t i = 0; i < n; i++) {
    int space = hbm_profile_find_space(p, "HBM", exp[i].device);
    if (space < 0)
      fail_msg("%s: no space for %s", name, exp[i].device);
    uint64_t got = measured(p, space, exp[i].key);
    if (got != exp[i].value)
      fail_msg("%s %s %s: hbm %llu, the simulation %llu", name, exp[i].device, exp[i].key,
               (unsigned long long)got, (unsigned long long)exp[i].value);
  }
  hbm_profile_free(p);
}

static void fixtures_match_the_simulation(void **state) {
  (void)state;
  const char *names[] = {"small", "small_p2",   "small_p5",     "two_devices",
                         "old",   "expandable", "inconsistent", "empty"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    check_fixture(names[i]);
}

static void os_system_is_refused(void **state) {
  (void)state;
  const struct {
    const char *file, *opcode, *name;
  } cases[] = {{"refused_global", "opcode GLOBAL (0x63)", "'os.system'"},
               {"refused_stack_global", "opcode STACK_GLOBAL (0x93)", "'os.system'"},
               {"refused_in_dict", "opcode STACK_GLOBAL (0x93)", "'posix.system'"}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char path[512];
    snprintf(path, sizeof path, DATA "%s.pickle", cases[i].file);
    assert_null(hbm_profile_load(path));
    const char *err = hbm_last_error();
    if (!strstr(err, cases[i].opcode) || !strstr(err, cases[i].name) || !strstr(err, "byte ") ||
        !strstr(err, "refused"))
      fail_msg("%s: %s", cases[i].file, err);
  }
}

static void not_a_snapshot(void **state) {
  (void)state;
  char path[4200];
  snprintf(path, sizeof path, "%s/list.pickle", th_dir);
  assert_int_equal(th_write(path, "\x80\x04]\x94.", 5), 0); /* pickle.dumps([]) */
  assert_null(hbm_profile_load(path));
  assert_non_null(strstr(hbm_last_error(), "not a PyTorch memory snapshot"));
}

static void put(char **p, const char *bytes, size_t n) {
  memcpy(*p, bytes, n);
  *p += n;
}
#define PUT(p, lit) put(p, lit, sizeof lit - 1)

/* {'segments': [S] * N} with S = {'blocks': [B] * M}: the memo makes it 2 bytes per reference,
 * but walking it would be N x M blocks. Each dict is read once (the repeats are counted): one
 * segment, one block, live before the trace (1 byte), in time linear in the file. */
static void shared_data_is_read_once(void **state) {
  (void)state;
  enum { N = 20000, M = 20000 };
  char *data = malloc(2 * (N + M) + 256), *p = data;
  PUT(&p, "\x80\x04}(\x8c\x08segments](");
  PUT(&p, "}q\x00(\x8c\x06"
          "deviceK\x00\x8c\x06"
          "blocks](");                   /* S, memo 0 */
  PUT(&p, "}q\x01(\x8c\x05state\x8c\x10" /* B, memo 1 */
          "active_allocated\x8c\x07"
          "addressK\x01\x8c\x04sizeK\x01u");
  for (int i = 1; i < M; i++)
    PUT(&p, "h\x01");
  PUT(&p, "eu");
  for (int i = 1; i < N; i++)
    PUT(&p, "h\x00");
  PUT(&p, "eu.");
  char path[4200];
  snprintf(path, sizeof path, "%s/shared.pickle", th_dir);
  assert_int_equal(th_write(path, data, (size_t)(p - data)), 0);
  free(data);
  hbm_profile_t *prof = hbm_profile_load(path);
  if (!prof)
    fail_msg("%s", hbm_last_error());
  assert_string_equal(hbm_profile_meta(prof, "repeated_objects_read_once"), "39998");
  assert_int_equal(hbm_profile_buffer_count(prof), 1);
  assert_int_equal(hbm_profile_buffer(prof, 0)->size, 1);
  hbm_profile_free(prof);
}

/* {'segments': [S] * 5}, S = {'device': 0, 'address': i, 'total_size': 2**62, 'blocks':
 * [{'state': 'active_allocated', 'address': i, 'size': 2**62}]}: a hostile file's sizes add up
 * to 5 * 2**62, past 2**64. By hand: every total saturates at HBM_BYTES_MAX (2**63 - 1); a
 * wrapped sum would read 2**62 (5 * 2**62 mod 2**64). */
static void sums_past_64_bits_saturate(void **state) {
  (void)state;
  char data[1024], *p = data;
  const char two_to_62[] = "\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x40"; /* LONG1, 8 bytes */
  PUT(&p, "\x80\x04}(\x8c\x08segments](");
  for (char i = 1; i <= 5; i++) {
    PUT(&p, "}(\x8c\x06"
            "deviceK\x00\x8c\x07"
            "addressK");
    put(&p, &i, 1);
    PUT(&p, "\x8c\x0atotal_size");
    PUT(&p, two_to_62);
    PUT(&p, "\x8c\x06"
            "blocks](}(\x8c\x05state\x8c\x10"
            "active_allocated\x8c\x07"
            "addressK");
    put(&p, &i, 1);
    PUT(&p, "\x8c\x04size");
    PUT(&p, two_to_62);
    PUT(&p, "ueu");
  }
  PUT(&p, "eu.");
  char path[4200];
  snprintf(path, sizeof path, "%s/huge_sums.pickle", th_dir);
  assert_int_equal(th_write(path, data, (size_t)(p - data)), 0);
  hbm_profile_t *prof = hbm_profile_load(path);
  if (!prof)
    fail_msg("%s", hbm_last_error());
  assert_string_equal(hbm_profile_meta(prof, "pytorch_reserved_bytes"), "9223372036854775807");
  assert_string_equal(hbm_profile_meta(prof, "pytorch_allocated_bytes"), "9223372036854775807");
  hbm_profile_free(prof);
}

static const hbm_buffer_t *buffer_with_op(const hbm_profile_t *p, const char *op) {
  for (int64_t i = 0; i < hbm_profile_buffer_count(p); i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    if (b->op && !strcmp(b->op, op))
      return b;
  }
  fail_msg("no buffer with op '%s'", op);
  return NULL;
}

/* The stacks of make_snapshots.py (innermost frame first): the op is the innermost frame of
 * the user's own code, skipping PyTorch (dist-packages/torch), and C++ frames. */
static void tags_from_the_user_frames(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(DATA "small.pickle");
  assert_non_null(p);
  /* model.py:54 forward <- torch _call_impl <- model.py:245 forward <- ... <- train.py:65 */
  const hbm_buffer_t *b = buffer_with_op(p, "model.py:54 forward");
  assert_string_equal(b->source, "/home/me/proj/model.py:54");
  /* grouped by the top user frame, as memory_viz colours it; its callers head the stack */
  assert_string_equal(b->group, "model.py:54 forward");
  assert_non_null(strstr(b->label, "called from train.py:65 / model.py:245\n"));
  assert_non_null(strstr(b->label, "\n"
                                   "/usr/lib/python3/dist-packages/torch/nn/modules/"
                                   "module.py:1790 _call_impl"));
  /* adamw.py (inside torch) <- train.py:70: the op is the user's line that called it */
  b = buffer_with_op(p, "train.py:70 <module>");
  assert_string_equal(b->group, "train.py:70 <module>");
  /* empty (??) <- LinearAlgebra.cpp <- attention.py:33 forward <- train.py:65 */
  b = buffer_with_op(p, "attention.py:33 forward");
  assert_string_equal(b->group, "attention.py:33 forward");
  assert_non_null(strstr(b->label, "called from train.py:65\n"));
  buffer_with_op(p, "(no stack recorded)");
  buffer_with_op(p, "(allocated before the trace)");
  /* the OOM event keeps PyTorch's numbers: the request and the free device memory */
  assert_int_equal(hbm_profile_oom_count(p), 1);
  const hbm_oom_event_t *oom = hbm_profile_oom(p, 0);
  assert_true(oom->requested == 40ull << 30);
  assert_non_null(strstr(oom->message, "123.0MiB free"));
  hbm_profile_free(p);
}

static void replay_beside_pytorch(void **state) {
  (void)state;
  expected_t exp[8];
  read_expected("small", exp, 8);
  char cmd[1024], want[128];
  snprintf(cmd, sizeof cmd, "%s replay %ssmall.pickle --mode growth --repeat 0 --json", HBM_BIN,
           DATA);
  char *out = NULL;
  assert_int_equal(th_run(cmd, &out), 0);
  const char *pytorch = strstr(out, "\"pytorch\"");
  assert_non_null(pytorch);
  for (size_t i = 0; i < 8 && exp[i].key[0]; i++) {
    const char *json_key = !strcmp(exp[i].key, "peak_bytes")      ? "peak_live_bytes"
                           : !strcmp(exp[i].key, "reserved_end")  ? "reserved_bytes"
                           : !strcmp(exp[i].key, "peak_reserved") ? "peak_reserved_bytes"
                                                                  : NULL;
    if (!json_key)
      continue;
    snprintf(want, sizeof want, "\"%s\": %llu", json_key, (unsigned long long)exp[i].value);
    /* hbm's numbers come before PyTorch's in the JSON */
    bool theirs = strcmp(json_key, "peak_live_bytes") != 0;
    if (!strstr(theirs ? pytorch : out, want))
      fail_msg("expected %s in:\n%s", want, out);
  }
  free(out);
  /* the text form names PyTorch's own reserved bytes */
  snprintf(cmd, sizeof cmd, "%s replay %stwo_devices.pickle --device 1 --repeat 0", HBM_BIN, DATA);
  assert_int_equal(th_run(cmd, &out), 0);
  assert_non_null(strstr(out, "PyTorch reserved     62.00MiB (65011712 bytes) at the snapshot "
                              "(its segments on cuda:1)"));
  free(out);
  /* on too small a device the first failure names its place in PyTorch's trace */
  snprintf(cmd, sizeof cmd, "%s replay %ssmall.pickle --memory 60MiB --repeat 0", HBM_BIN, DATA);
  assert_int_equal(th_run(cmd, &out), 1);
  if (!strstr(out, "(trace event ") || !strstr(out, "RESOURCE_EXHAUSTED"))
    fail_msg("%s", out);
  free(out);
  snprintf(cmd, sizeof cmd, "%s replay %stwo_devices.pickle --device 5 2>&1", HBM_BIN, DATA);
  assert_int_equal(th_run(cmd, &out), 1);
  assert_non_null(strstr(out, "no device 5"));
  free(out);
}

static void logdir_of_snapshots(void **state) {
  (void)state;
  char dir[4200], cmd[9000];
  snprintf(dir, sizeof dir, "%s/logdir/plugins/profile/run1", th_dir);
  snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %sexpandable.pickle %s/", dir, DATA, dir);
  assert_int_equal(th_run(cmd, NULL), 0);
  snprintf(cmd, sizeof cmd, "%s report %s/logdir", HBM_BIN, th_dir);
  char *out = NULL;
  assert_int_equal(th_run(cmd, &out), 0);
  if (!strstr(out, "expandable.pickle") || !strstr(out, "cuda:0") || !strstr(out, "40.00MiB"))
    fail_msg("%s", out);
  free(out);
}

static void export_of_two_devices(void **state) {
  (void)state;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "%s export %stwo_devices.pickle --format chrome", HBM_BIN, DATA);
  char *out = NULL;
  assert_int_equal(th_run(cmd, &out), 0);
  if (!strstr(out, "\"HBM on cuda:0\"") || !strstr(out, "\"HBM on cuda:1\""))
    fail_msg("%.2000s", out);
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(plain_values),
      cmocka_unit_test(memo_shares_values),
      cmocka_unit_test(short_paths_match_python),
      cmocka_unit_test(code_is_refused),
      cmocka_unit_test(malformed_input_says_where),
      cmocka_unit_test(fixtures_match_the_simulation),
      cmocka_unit_test(os_system_is_refused),
      cmocka_unit_test(not_a_snapshot),
      cmocka_unit_test(shared_data_is_read_once),
      cmocka_unit_test(tags_from_the_user_frames),
      cmocka_unit_test(replay_beside_pytorch),
      cmocka_unit_test(logdir_of_snapshots),
      cmocka_unit_test(export_of_two_devices),
      cmocka_unit_test(sums_past_64_bits_saturate),
  };
  return cmocka_run_group_tests(tests, th_tmpdir_setup, th_tmpdir_teardown);
}
