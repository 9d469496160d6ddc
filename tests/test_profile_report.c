/* test_profile_report.c — hbm_report_text / hbm_report_json / hbm_export_chrome on profiles
 * built here: the JSON parses and its numbers equal what this test computes from the same
 * events; the text has the chart, the buffers, the OOM diagnosis and the loss note; the
 * Chrome trace is valid JSON with counters, paired slices and instant events. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"

#define N_EVENTS 40

/* Space 0 ("sim0"): allocations of 1000*(i+1) bytes, every third freed two events later.
 * Space 1 ("sim1"): two small buffers. The live bytes of space 0 are tracked in live0[]. */
static uint64_t live0[4 * N_EVENTS];
static int64_t n_live0;

static hbm_profile_t *make_profile(void) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "report-test");
  assert_non_null(p);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "sim0", 0, 1 << 20), 0);
  assert_int_equal(hbm_profile_add_space(p, "HBM", "sim1", 0, 1 << 20), 1);
  hbm_tag_t tags[] = {
      {"dense/kernel", "f32[16,16]", HBM_CAT_PARAMETER, "params", "m.py:1"},
      {"jit(f)/dot\xff\xfe", "bf16[4,4]", HBM_CAT_TEMPORARY, "activations", "m.py:2"},
      {NULL, NULL, HBM_CAT_OUTPUT, NULL, NULL}};
  uint64_t live = 0;
  n_live0 = 0;
  int64_t t = 0;
  hbm_reserve_event_t grow = {.step = 0, .space = 0, .op = HBM_RESERVE_GROW, .size = 1 << 19};
  assert_int_equal(hbm_profile_add_reserve(p, &grow), HBM_OK);
  for (int i = 0; i < N_EVENTS; i++) {
    int64_t step = hbm_profile_add_step(p, t += 1500, NULL);
    uint64_t size = 1000 * (uint64_t)(i + 1);
    assert_true(hbm_profile_alloc_at(p, step, 0, 0x1000 * (uint64_t)(i + 1), size, &tags[i % 3]) >=
                0);
    live0[n_live0++] = live += size;
    if (i % 3 == 2) {
      step = hbm_profile_add_step(p, t += 100, NULL);
      assert_int_equal(hbm_profile_free_at(p, step, 0, 0x1000 * (uint64_t)i), HBM_OK);
      live0[n_live0++] = live -= 1000 * (uint64_t)i;
    }
  }
  int64_t step = hbm_profile_add_step(p, t += 10, NULL);
  assert_true(hbm_profile_alloc_at(p, step, 1, 0x10, 64, NULL) >= 0);
  live0[n_live0++] = live;
  hbm_oom_event_t oom = {.step = step,
                         .space = 0,
                         .requested = 1 << 30,
                         .message = "RESOURCE_EXHAUSTED: Out of memory while trying to "
                                    "allocate 1073741824 bytes.\nhbm diagnosis: too big"};
  assert_int_equal(hbm_profile_add_oom(p, &oom), HBM_OK);
  hbm_marker_t m = {.step = 5, .kind = HBM_MARKER_STEP_BEGIN, .value = 1, .text = "step 1"};
  assert_int_equal(hbm_profile_add_marker(p, &m), HBM_OK);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  return p;
}

static void expected_peak(uint64_t *peak, int64_t *step) {
  *peak = 0;
  *step = -1;
  for (int64_t i = 0; i < n_live0; i++)
    if (live0[i] > *peak)
      *peak = live0[i], *step = i;
}

static char *capture(hbm_status_t (*fn)(const hbm_profile_t *, int, FILE *), const hbm_profile_t *p,
                     int space) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  assert_int_equal(fn(p, space, f), HBM_OK);
  fclose(f);
  return text;
}

static hbm_status_t text_100(const hbm_profile_t *p, int space, FILE *f) {
  return hbm_report_text(p, space, 100, f);
}

static hbm_status_t chrome(const hbm_profile_t *p, int space, FILE *f) {
  (void)space;
  return hbm_export_chrome(p, f);
}

static json_t *parse_json(const char *text) {
  json_error_t err;
  json_t *j = json_loads(text, 0, &err);
  if (!j)
    fail_msg("invalid JSON at line %d: %s", err.line, err.text);
  return j;
}

static void json_report_numbers_match(void **state) {
  (void)state;
  hbm_profile_t *p = make_profile();
  char *text = capture(hbm_report_json, p, -1);
  json_t *j = parse_json(text);
  uint64_t peak;
  int64_t peak_step;
  expected_peak(&peak, &peak_step);
  assert_true((uint64_t)json_integer_value(json_object_get(j, "peak_bytes")) == peak);
  assert_true(json_integer_value(json_object_get(j, "peak_step")) == peak_step);
  assert_true(json_integer_value(json_object_get(j, "peak_reserved_bytes")) == 1 << 19);
  assert_true(json_integer_value(json_object_get(j, "limit_bytes")) == 1 << 20);
  assert_string_equal(json_string_value(json_object_get(j, "device")), "sim0");
  json_t *buffers = json_object_get(j, "buffers_at_peak");
  assert_true(json_array_size(buffers) > 0);
  uint64_t sum = 0, previous = UINT64_MAX;
  for (size_t i = 0; i < json_array_size(buffers); i++) {
    json_t *b = json_array_get(buffers, i);
    uint64_t size = (uint64_t)json_integer_value(json_object_get(b, "size"));
    assert_true(size <= previous); /* largest first */
    previous = size;
    sum += size;
    assert_non_null(json_object_get(b, "op"));
    assert_non_null(json_object_get(b, "shape"));
    assert_true(json_is_string(json_object_get(b, "category")));
  }
  assert_true(sum == peak);
  json_t *first = json_array_get(buffers, 0);
  assert_string_equal(json_string_value(json_object_get(first, "category")), "parameter");
  json_t *ooms = json_object_get(j, "oom_events");
  assert_int_equal(json_array_size(ooms), 1);
  assert_non_null(strstr(json_string_value(json_object_get(json_array_get(ooms, 0), "message")),
                         "hbm diagnosis"));
  assert_int_equal(json_array_size(json_object_get(j, "spaces")), 2);
  assert_true(json_is_null(json_object_get(j, "lost")));
  json_decref(j);
  free(text);
  /* one space asked for */
  text = capture(hbm_report_json, p, 1);
  j = parse_json(text);
  assert_string_equal(json_string_value(json_object_get(j, "device")), "sim1");
  assert_true(json_integer_value(json_object_get(j, "peak_bytes")) == 64);
  assert_int_equal(json_array_size(json_object_get(j, "oom_events")), 0);
  json_decref(j);
  free(text);
  hbm_profile_free(p);
}

static void text_report_has_every_section(void **state) {
  (void)state;
  hbm_profile_t *p = make_profile();
  assert_int_equal(hbm_profile_set_meta(p, "lost",
                                        "lost 1234 bytes after block 17 (file "
                                        "truncated)"),
                   HBM_OK);
  char *text = capture(text_100, p, -1);
  uint64_t peak;
  int64_t peak_step;
  expected_peak(&peak, &peak_step);
  char line[64], bytes[32];
  snprintf(line, sizeof line, "peak in use      %s at step %lld",
           hbm_format_bytes(peak, bytes, sizeof bytes), (long long)peak_step);
  const char *expect[] = {line,
                          "note: lost 1234 bytes after block 17 (file truncated)",
                          "== HBM on sim0 ==",
                          "== HBM on sim1 ==",
                          "█",
                          "▲",
                          "buffers live at the peak, largest first",
                          "dense/kernel",
                          "f32[16,16]",
                          "at the peak by category",
                          "at the peak by group",
                          "params",
                          "OOM events (1)",
                          "      hbm diagnosis: too big",
                          "markers (1)"};
  for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++)
    if (!strstr(text, expect[i])) {
      fprintf(stderr, "%s", text);
      fail_msg("the report above lacks '%s'", expect[i]);
    }
  free(text);
  hbm_profile_free(p);
}

static void plan_report_names_instructions(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_PLAN, "module");
  hbm_profile_add_space(p, "HBM", "tpu", 0, 0);
  hbm_profile_add_step(p, 0, "param.0");
  hbm_profile_add_step(p, 0, "fusion.47");
  hbm_profile_add_step(p, 0, "ROOT tuple");
  hbm_buffer_t a = {.size = 4096,
                    .unpadded_size = 1000,
                    .start = 0,
                    .end = 3,
                    .category = HBM_CAT_PARAMETER,
                    .flags = HBM_BUF_INDEFINITE,
                    .label = "%param.0 = f32[250] parameter(0)"};
  hbm_buffer_t b = {.address = 4096,
                    .size = 8192,
                    .unpadded_size = 8192,
                    .start = 1,
                    .end = 2,
                    .category = HBM_CAT_TEMPORARY,
                    .op = "fusion.47"};
  assert_true(hbm_profile_add_buffer(p, &a) == 0 && hbm_profile_add_buffer(p, &b) == 1);
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  char *text = capture(text_100, p, 0);
  assert_non_null(strstr(text, "at step 1 (fusion.47)"));
  assert_non_null(strstr(text, "unpadded"));
  assert_non_null(strstr(text, "padding"));
  free(text);
  text = capture(chrome, p, 0);
  json_t *j = parse_json(text);
  json_t *events = json_object_get(j, "traceEvents");
  int slices = 0;
  for (size_t i = 0; i < json_array_size(events); i++) {
    json_t *e = json_array_get(events, i);
    if (!strcmp(json_string_value(json_object_get(e, "ph")), "b") &&
        !strcmp(json_string_value(json_object_get(e, "name")), "fusion.47")) {
      assert_true(json_number_value(json_object_get(e, "ts")) == 1.0); /* the step index */
      slices++;
    }
  }
  assert_int_equal(slices, 1);
  json_decref(j);
  free(text);
  hbm_profile_free(p);
}

static void empty_profile_reports(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "empty");
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  char *text = capture(hbm_report_json, p, -1);
  json_t *j = parse_json(text);
  assert_true(json_integer_value(json_object_get(j, "peak_bytes")) == 0);
  assert_int_equal(json_array_size(json_object_get(j, "buffers_at_peak")), 0);
  json_decref(j);
  free(text);
  text = capture(text_100, p, -1);
  assert_non_null(strstr(text, "nothing was allocated"));
  free(text);
  text = capture(chrome, p, 0);
  json_decref(parse_json(text));
  free(text);
  assert_int_equal(hbm_report_json(p, 3, stdout), HBM_ERR_INVALID);
  hbm_profile_free(p);
}

/* A long run says which of its training steps it holds (step markers): all of them, or which
 * range with some missing. */
static void report_says_which_steps_it_holds(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "steps");
  assert_int_equal(hbm_profile_add_space(p, "HBM", "sim0", 0, 0), 0);
  for (int i = 0; i < 5; i++) {
    int64_t step = hbm_profile_add_step(p, i, NULL);
    hbm_marker_t m = {step, HBM_MARKER_STEP_BEGIN, 10 + i, "step"};
    if (i != 2) /* step 12 is not there */
      assert_int_equal(hbm_profile_add_marker(p, &m), HBM_OK);
  }
  assert_int_equal(hbm_profile_finish(p), HBM_OK);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_int_equal(hbm_report_text(p, -1, 80, f), HBM_OK);
  fclose(f);
  if (!strstr(text, "steps        10 to 14, 4 of them recorded (the others are missing)"))
    fail_msg("%s", text);
  free(text);
  hbm_profile_free(p);
}

static void chrome_trace_is_valid(void **state) {
  (void)state;
  hbm_profile_t *p = make_profile();
  char *text = capture(chrome, p, 0);
  json_t *j = parse_json(text);
  json_t *events = json_object_get(j, "traceEvents");
  int counters = 0, begins = 0, ends = 0, instants = 0;
  uint64_t max_in_use = 0;
  for (size_t i = 0; i < json_array_size(events); i++) {
    json_t *e = json_array_get(events, i);
    const char *ph = json_string_value(json_object_get(e, "ph"));
    assert_non_null(ph);
    if (strcmp(ph, "M") != 0)
      assert_true(json_is_number(json_object_get(e, "ts")));
    if (!strcmp(ph, "C") && json_integer_value(json_object_get(e, "pid")) == 1) {
      counters++;
      uint64_t v =
          (uint64_t)json_integer_value(json_object_get(json_object_get(e, "args"), "in use"));
      max_in_use = v > max_in_use ? v : max_in_use;
      assert_non_null(json_object_get(json_object_get(e, "args"), "reserved"));
    } else if (!strcmp(ph, "b")) {
      begins++;
      assert_non_null(json_object_get(json_object_get(e, "args"), "size"));
    } else if (!strcmp(ph, "e")) {
      ends++;
    } else if (!strcmp(ph, "i")) {
      instants++;
    }
  }
  uint64_t peak;
  int64_t peak_step;
  expected_peak(&peak, &peak_step);
  assert_true(max_in_use == peak);
  assert_true(counters > 0);
  assert_true(begins == hbm_profile_buffer_count(p) && ends == begins);
  assert_int_equal(instants, 2); /* the OOM and the marker */
  json_decref(j);
  free(text);
  hbm_profile_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(json_report_numbers_match),
      cmocka_unit_test(text_report_has_every_section),
      cmocka_unit_test(plan_report_names_instructions),
      cmocka_unit_test(empty_profile_reports),
      cmocka_unit_test(report_says_which_steps_it_holds),
      cmocka_unit_test(chrome_trace_is_valid),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
