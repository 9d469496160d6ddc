/* test_alloc_cli.c — `hbm info` and `hbm demo` through the hbm binary (HBM_BIN): the devices
 * and the effective configuration with where each setting came from (text and JSON), bad
 * variables refused with exit status 2, and the seed's program failing with XLA's
 * RESOURCE_EXHAUSTED text, the diagnosis and exit status 1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

/* Runs `hbm ARGS` with a private sim device and ENV before it; returns the exit status. */
static int run_hbm(const char *env, const char *args, char **out) {
  char cmd[9000];
  snprintf(cmd, sizeof cmd,
           "env -u HBM_DEVICE -u XLA_PYTHON_CLIENT_MEM_FRACTION -u XLA_PYTHON_CLIENT_PREALLOCATE "
           "-u XLA_PYTHON_CLIENT_ALLOCATOR -u TF_GPU_ALLOCATOR -u HBM_SIM_MEMORY "
           "-u HBM_PROFILE_DIR HBM_SIM_NAME=tcli-%d %s '%s' %s",
           (int)getpid(), env, HBM_BIN, args);
  return th_run(cmd, out);
}

static void assert_contains(const char *text, const char *part) {
  if (!strstr(text, part))
    fail_msg("expected '%s' in:\n%s", part, text);
}

static void info_shows_devices_and_configuration(void **state) {
  (void)state;
  char *out = NULL;
  assert_int_equal(run_hbm("HBM_DEVICE=sim", "info", &out), 0);
  assert_contains(out, "devices:\n  sim ");
  assert_contains(out, "total 17179869184 bytes (16.00GiB)");
  assert_contains(out, "  cuda "); /* listed, available or not */
  assert_contains(out, "  mode         bfc\n");
  assert_contains(out, "  limit        12884901888 bytes (12.00GiB) = 0.75 of 16.00GiB\n");
  assert_contains(out, "  preallocate  true\n");
  assert_contains(out, "HBM_DEVICE=sim");
  assert_contains(out, "XLA_PYTHON_CLIENT_MEM_FRACTION=0.75");
  free(out);
  assert_int_equal(run_hbm("HBM_DEVICE=sim XLA_PYTHON_CLIENT_ALLOCATOR=platform", "info", &out), 0);
  assert_contains(out, "  mode         platform\n");
  assert_contains(out, "XLA_PYTHON_CLIENT_ALLOCATOR=platform");
  assert_contains(out, "environment");
  free(out);
}

static void info_json_has_the_keys(void **state) {
  (void)state;
  char *out = NULL;
  assert_int_equal(run_hbm("HBM_DEVICE=sim HBM_SIM_MEMORY=64MiB XLA_PYTHON_CLIENT_MEM_FRACTION=.5 "
                           "XLA_PYTHON_CLIENT_PREALLOCATE=false",
                           "info --json", &out),
                   0);
  json_error_t err;
  json_t *root = json_loads(out, 0, &err);
  if (!root)
    fail_msg("not JSON (%s): %s", err.text, out);
  assert_true(json_is_string(json_object_get(root, "device")));
  assert_true(json_integer_value(json_object_get(root, "total_bytes")) == 64 << 20);
  assert_true(json_integer_value(json_object_get(root, "free_bytes")) == 64 << 20);
  assert_string_equal(json_string_value(json_object_get(root, "mode")), "growth");
  assert_true(json_integer_value(json_object_get(root, "limit_bytes")) == 32 << 20);
  assert_true(json_is_false(json_object_get(root, "preallocate")));
  json_t *settings = json_object_get(root, "settings");
  json_t *fraction = json_object_get(settings, "mem_fraction");
  assert_string_equal(json_string_value(json_object_get(fraction, "origin")), "environment");
  assert_string_equal(json_string_value(json_object_get(fraction, "setting")),
                      "XLA_PYTHON_CLIENT_MEM_FRACTION=0.5");
  json_t *memory = json_object_get(settings, "sim_memory");
  assert_string_equal(json_string_value(json_object_get(memory, "setting")),
                      "HBM_SIM_MEMORY=64MiB");
  json_t *devices = json_object_get(root, "devices");
  assert_true(json_array_size(devices) == 2);
  assert_string_equal(json_string_value(json_object_get(json_array_get(devices, 0), "kind")),
                      "sim");
  json_decref(root);
  free(out);
}

static void info_refuses_bad_variables(void **state) {
  (void)state;
  struct {
    const char *env, *expect;
  } cases[] = {
      {"XLA_PYTHON_CLIENT_MEM_FRACTION=1.5", "XLA_PYTHON_CLIENT_MEM_FRACTION=1.5"},
      {"XLA_PYTHON_CLIENT_MEM_FRACTION=abc", "(0, 1]"},
      {"XLA_PYTHON_CLIENT_ALLOCATOR=fast", "default, bfc, platform or cuda_async"},
      {"HBM_SIM_MEMORY=lots", "HBM_SIM_MEMORY=lots"},
      {"HBM_DEVICE=tpu", "auto, sim or cuda"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *out = NULL;
    assert_int_equal(run_hbm(cases[i].env, "info", &out), 2);
    assert_contains(out, "hbm info: ");
    assert_contains(out, cases[i].expect);
    free(out);
  }
  char *out = NULL;
  assert_int_equal(run_hbm("", "info --bogus", &out), 2);
  free(out);
}

static void demo_fails_like_the_seed(void **state) {
  (void)state;
  char *dir = th_mkdtemp("alloc-demo");
  char args[4200], *out = NULL;
  snprintf(args, sizeof args, "demo --logdir '%s'", dir);
  assert_int_equal(run_hbm("", args, &out), 1);
  assert_contains(out, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 214748364800 "
                       "bytes.\nhbm diagnosis:\n");
  assert_contains(out, "  cause: request larger than the device: 200.0GiB requested, but the "
                       "device has 16.00GiB in total");
  assert_contains(out, "mode: bfc");
  assert_contains(out, "limit: 12884901888 bytes");
  assert_contains(out, "Peak buffers:");
  assert_contains(out, "Operator: embed/embedding");
  assert_contains(out, "Group: optimizer state");
  if (strstr(out, "note: no profile"))
    assert_contains(out, "profiling is not built yet");
  else
    assert_contains(out, "hbm report ");
  free(out);
  th_rmtree(dir);
  free(dir);
}

/* On a device with room for it, the seed's array fits (nothing is touched). */
static void demo_fits_on_a_big_device(void **state) {
  (void)state;
  char *dir = th_mkdtemp("alloc-demo-big");
  char args[4200], *out = NULL;
  snprintf(args, sizeof args, "demo --logdir '%s'", dir);
  assert_int_equal(run_hbm("HBM_SIM_MEMORY=1TiB", args, &out), 0);
  assert_contains(out, "it fit");
  free(out);
  assert_int_equal(run_hbm("XLA_PYTHON_CLIENT_PREALLOCATE=nope", args, &out), 2);
  assert_contains(out, "XLA_PYTHON_CLIENT_PREALLOCATE=nope");
  free(out);
  assert_int_equal(run_hbm("", "demo --what", &out), 2);
  free(out);
  th_rmtree(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(info_shows_devices_and_configuration),
      cmocka_unit_test(info_json_has_the_keys),
      cmocka_unit_test(info_refuses_bad_variables),
      cmocka_unit_test(demo_fails_like_the_seed),
      cmocka_unit_test(demo_fits_on_a_big_device),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
