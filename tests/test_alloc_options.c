/* test_alloc_options.c — every environment variable hbm reads, with good and bad values: the
 * seeds' meaning (mode, limit, preallocation), precedence between XLA's and TensorFlow's
 * allocator variables, where each setting came from, refusals that name the variable, the
 * value and what is accepted (and leave nothing allocated), and docs/configuration.md
 * listing the same table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "helpers.h"

/* Every variable starts unset, whatever the environment of the test run says. */
static int clear_environment(void **state) {
  (void)state;
  size_t n;
  const hbm_variable_t *vars = hbm_config_variables(&n);
  for (size_t i = 0; i < n; i++)
    unsetenv(vars[i].name);
  return 0;
}

static hbm_config_t from_env_ok(void) {
  hbm_config_t cfg;
  assert_int_equal(hbm_config_from_env(&cfg), HBM_OK);
  return cfg;
}

/* A refused value: the message names the variable, the value and the accepted values. */
static void assert_refused(const char *name, const char *value, const char *accepted_word) {
  setenv(name, value, 1);
  hbm_config_t cfg;
  memset(&cfg, 0x5a, sizeof cfg);
  assert_int_equal(hbm_config_from_env(&cfg), HBM_ERR_INVALID);
  const char *msg = hbm_last_error();
  if (!strstr(msg, name) || !strstr(msg, value) || !strstr(msg, accepted_word))
    fail_msg("%s=%s: message '%s' should name the variable, the value and '%s'", name, value, msg,
             accepted_word);
  unsetenv(name);
}

static void defaults_are_the_seeds(void **state) {
  (void)state;
  hbm_config_t cfg = from_env_ok();
  assert_int_equal(cfg.device, HBM_DEVICE_AUTO);
  assert_int_equal(cfg.ordinal, 0);
  assert_int_equal(cfg.allocator, HBM_ALLOCATOR_BFC);
  assert_int_equal(cfg.preallocate, 1);
  assert_true(cfg.mem_fraction == 0.75);
  assert_int_equal(cfg.async_prealloc, 0);
  assert_int_equal(cfg.expandable, 0);
  assert_true(cfg.sim_memory == 16ull << 30);
  assert_string_equal(cfg.sim_name, "sim0");
  assert_string_equal(cfg.profile_dir, "");
  assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_BFC);
  for (int f = 0; f < HBM_CFG_COUNT; f++)
    assert_int_equal(cfg.origin[f], HBM_ORIGIN_DEFAULT);
  char buf[128];
  assert_string_equal(hbm_config_origin(&cfg, HBM_CFG_MEM_FRACTION, buf, sizeof buf), "default");
}

static void preallocate_values(void **state) {
  (void)state;
  const char *no[] = {"false", "0", "no", "off", "FALSE", " false "};
  for (size_t i = 0; i < HBM_ARRAY_LEN(no); i++) {
    setenv("XLA_PYTHON_CLIENT_PREALLOCATE", no[i], 1);
    hbm_config_t cfg = from_env_ok();
    assert_int_equal(cfg.preallocate, 0);
    assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_GROWTH);
    assert_int_equal(cfg.origin[HBM_CFG_PREALLOCATE], HBM_ORIGIN_ENV);
  }
  const char *yes[] = {"true", "1", "yes", "on", "True"};
  for (size_t i = 0; i < HBM_ARRAY_LEN(yes); i++) {
    setenv("XLA_PYTHON_CLIENT_PREALLOCATE", yes[i], 1);
    hbm_config_t cfg = from_env_ok();
    assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_BFC);
  }
  unsetenv("XLA_PYTHON_CLIENT_PREALLOCATE");
  assert_refused("XLA_PYTHON_CLIENT_PREALLOCATE", "maybe", "true or false");
  assert_refused("XLA_PYTHON_CLIENT_PREALLOCATE", "2", "true or false");
}

static void mem_fraction_values(void **state) {
  (void)state;
  struct {
    const char *text;
    double value;
  } good[] = {{".75", 0.75}, {"0.5", 0.5}, {"1", 1.0}, {"1.0", 1.0}, {"0.01", 0.01}};
  for (size_t i = 0; i < HBM_ARRAY_LEN(good); i++) {
    setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", good[i].text, 1);
    hbm_config_t cfg = from_env_ok();
    assert_true(cfg.mem_fraction == good[i].value);
    char buf[128];
    assert_string_equal(hbm_config_origin(&cfg, HBM_CFG_MEM_FRACTION, buf, sizeof buf),
                        "XLA_PYTHON_CLIENT_MEM_FRACTION (environment)");
  }
  unsetenv("XLA_PYTHON_CLIENT_MEM_FRACTION");
  const char *bad[] = {"0",    "1.5",    "abc", "-0.5", "0.0",   "nan", "inf",
                       "1e-1", "0x1p-1", ".",   "75%",  "0.5.5", "2"};
  for (size_t i = 0; i < HBM_ARRAY_LEN(bad); i++)
    assert_refused("XLA_PYTHON_CLIENT_MEM_FRACTION", bad[i], "(0, 1]");
}

static void allocator_values(void **state) {
  (void)state;
  struct {
    const char *text;
    hbm_mode_t mode;
  } xla[] = {{"default", HBM_MODE_BFC},
             {"bfc", HBM_MODE_BFC},
             {"platform", HBM_MODE_PLATFORM},
             {"cuda_async", HBM_MODE_ASYNC}};
  for (size_t i = 0; i < HBM_ARRAY_LEN(xla); i++) {
    setenv("XLA_PYTHON_CLIENT_ALLOCATOR", xla[i].text, 1);
    hbm_config_t cfg = from_env_ok();
    assert_int_equal(hbm_config_mode(&cfg), xla[i].mode);
  }
  unsetenv("XLA_PYTHON_CLIENT_ALLOCATOR");
  assert_refused("XLA_PYTHON_CLIENT_ALLOCATOR", "tlsf", "default, bfc, platform or cuda_async");
  assert_refused("XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_malloc_async", "cuda_async");

  setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async", 1);
  hbm_config_t cfg = from_env_ok();
  assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_ASYNC);
  char buf[128];
  assert_string_equal(hbm_config_origin(&cfg, HBM_CFG_ALLOCATOR, buf, sizeof buf),
                      "TF_GPU_ALLOCATOR (environment)");
  assert_string_equal(hbm_config_setting(&cfg, HBM_CFG_ALLOCATOR, buf, sizeof buf),
                      "TF_GPU_ALLOCATOR=cuda_malloc_async");
  setenv("TF_GPU_ALLOCATOR", "bfc", 1);
  cfg = from_env_ok();
  assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_BFC);
  setenv("TF_GPU_ALLOCATOR", "default", 1);
  cfg = from_env_ok();
  assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_BFC);
  unsetenv("TF_GPU_ALLOCATOR");
  assert_refused("TF_GPU_ALLOCATOR", "cuda_async", "cuda_malloc_async, bfc or default");
}

/* XLA_PYTHON_CLIENT_ALLOCATOR=default leaves the choice to TF_GPU_ALLOCATOR; an explicit
 * value wins over it. */
static void allocator_precedence(void **state) {
  (void)state;
  setenv("TF_GPU_ALLOCATOR", "cuda_malloc_async", 1);
  setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "default", 1);
  hbm_config_t cfg = from_env_ok();
  assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_ASYNC);
  setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "platform", 1);
  cfg = from_env_ok();
  assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_PLATFORM);
  char buf[128];
  assert_string_equal(hbm_config_origin(&cfg, HBM_CFG_ALLOCATOR, buf, sizeof buf),
                      "XLA_PYTHON_CLIENT_ALLOCATOR (environment)");
  setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "bfc", 1);
  cfg = from_env_ok();
  assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_BFC);
  /* The same through hbm_config_set, in either order. */
  hbm_config_default(&cfg);
  assert_int_equal(hbm_config_set(&cfg, "XLA_PYTHON_CLIENT_ALLOCATOR", "platform", HBM_ORIGIN_ENV),
                   HBM_OK);
  assert_int_equal(hbm_config_set(&cfg, "TF_GPU_ALLOCATOR", "cuda_malloc_async", HBM_ORIGIN_ENV),
                   HBM_OK);
  assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_PLATFORM);
  unsetenv("TF_GPU_ALLOCATOR");
  unsetenv("XLA_PYTHON_CLIENT_ALLOCATOR");
}

static void async_prealloc_values(void **state) {
  (void)state;
  struct {
    const char *text;
    int64_t bytes;
  } good[] = {{"-1", -1}, {"0", 0}, {"1073741824", 1073741824}, {"4GiB", 4ll << 30}};
  for (size_t i = 0; i < HBM_ARRAY_LEN(good); i++) {
    setenv("TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", good[i].text, 1);
    hbm_config_t cfg = from_env_ok();
    assert_true(cfg.async_prealloc == good[i].bytes);
  }
  unsetenv("TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC");
  const char *bad[] = {"-2", "lots", "1.5", "12XB"};
  for (size_t i = 0; i < HBM_ARRAY_LEN(bad); i++)
    assert_refused("TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", bad[i], "-1");
}

static void device_values(void **state) {
  (void)state;
  struct {
    const char *text;
    hbm_device_kind_t kind;
  } good[] = {{"auto", HBM_DEVICE_AUTO}, {"sim", HBM_DEVICE_SIM}, {"cuda", HBM_DEVICE_CUDA}};
  for (size_t i = 0; i < HBM_ARRAY_LEN(good); i++) {
    setenv("HBM_DEVICE", good[i].text, 1);
    assert_int_equal(from_env_ok().device, good[i].kind);
  }
  unsetenv("HBM_DEVICE");
  assert_refused("HBM_DEVICE", "tpu", "auto, sim or cuda");

  setenv("HBM_DEVICE_ORDINAL", "3", 1);
  assert_int_equal(from_env_ok().ordinal, 3);
  unsetenv("HBM_DEVICE_ORDINAL");
  const char *bad[] = {"-1", "one", "1024", "3.0", "99999"};
  for (size_t i = 0; i < HBM_ARRAY_LEN(bad); i++)
    assert_refused("HBM_DEVICE_ORDINAL", bad[i], "0 to 1023");
}

static void sim_values(void **state) {
  (void)state;
  struct {
    const char *text;
    uint64_t bytes;
  } good[] = {{"16GiB", 16ull << 30},
              {"80GB", 80000000000ull},
              {"1073741824", 1ull << 30},
              {"1MiB", 1ull << 20},
              {"1024TiB", 1ull << 50}};
  for (size_t i = 0; i < HBM_ARRAY_LEN(good); i++) {
    setenv("HBM_SIM_MEMORY", good[i].text, 1);
    assert_true(from_env_ok().sim_memory == good[i].bytes);
  }
  unsetenv("HBM_SIM_MEMORY");
  const char *bad[] = {"big", "512KiB", "1025TiB", "-1GiB", "16 GiBs"};
  for (size_t i = 0; i < HBM_ARRAY_LEN(bad); i++)
    assert_refused("HBM_SIM_MEMORY", bad[i], "16GiB");

  setenv("HBM_SIM_NAME", "gpu-a.1_x", 1);
  assert_string_equal(from_env_ok().sim_name, "gpu-a.1_x");
  unsetenv("HBM_SIM_NAME");
  const char *bad_names[] = {"a/b", "with space", "x*",
                             "0123456789012345678901234567890123456789012345678901234567890123"};
  for (size_t i = 0; i < HBM_ARRAY_LEN(bad_names); i++)
    assert_refused("HBM_SIM_NAME", bad_names[i], "letters, digits");
}

static void expandable_and_profile_values(void **state) {
  (void)state;
  setenv("HBM_EXPANDABLE", "1", 1);
  hbm_config_t cfg = from_env_ok();
  assert_int_equal(hbm_config_mode(&cfg), HBM_MODE_EXPANDABLE);
  setenv("HBM_EXPANDABLE", "off", 1);
  assert_int_equal(hbm_config_mode((cfg = from_env_ok(), &cfg)), HBM_MODE_BFC);
  unsetenv("HBM_EXPANDABLE");
  assert_refused("HBM_EXPANDABLE", "sometimes", "true or false");
  /* Expandable mode builds on the default allocator; another choice is a contradiction. */
  setenv("HBM_EXPANDABLE", "true", 1);
  setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "platform", 1);
  assert_int_equal(hbm_config_from_env(&cfg), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "HBM_EXPANDABLE"));
  assert_non_null(strstr(hbm_last_error(), "XLA_PYTHON_CLIENT_ALLOCATOR=platform"));
  unsetenv("XLA_PYTHON_CLIENT_ALLOCATOR");
  unsetenv("HBM_EXPANDABLE");

  setenv("HBM_PROFILE_DIR", "/tmp/some profile", 1);
  assert_string_equal(from_env_ok().profile_dir, "/tmp/some profile");
  char long_path[1100];
  memset(long_path, 'x', sizeof long_path - 1);
  long_path[sizeof long_path - 1] = '\0';
  setenv("HBM_PROFILE_DIR", long_path, 1);
  assert_int_equal(hbm_config_from_env(&cfg), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "HBM_PROFILE_DIR"));
  unsetenv("HBM_PROFILE_DIR");
}

/* An empty value means "unset": the default comes back. */
static void empty_values_restore_defaults(void **state) {
  (void)state;
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  assert_int_equal(hbm_config_set(&cfg, "XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5", HBM_ORIGIN_ENV),
                   HBM_OK);
  assert_int_equal(hbm_config_set(&cfg, "XLA_PYTHON_CLIENT_MEM_FRACTION", "", HBM_ORIGIN_ENV),
                   HBM_OK);
  assert_true(cfg.mem_fraction == 0.75);
  assert_int_equal(cfg.origin[HBM_CFG_MEM_FRACTION], HBM_ORIGIN_DEFAULT);
  setenv("HBM_SIM_NAME", "", 1);
  assert_string_equal(from_env_ok().sim_name, "sim0");
  unsetenv("HBM_SIM_NAME");
  assert_int_equal(hbm_config_set(&cfg, "NO_SUCH_VARIABLE", "1", HBM_ORIGIN_ENV), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "NO_SUCH_VARIABLE"));
}

/* A refused value leaves the configuration as it was. */
static void refusal_changes_nothing(void **state) {
  (void)state;
  hbm_config_t cfg, before;
  hbm_config_default(&cfg);
  before = cfg;
  size_t n;
  const hbm_variable_t *vars = hbm_config_variables(&n);
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(vars[i].name, "HBM_PROFILE_DIR"))
      continue; /* any path is a value */
    assert_int_equal(hbm_config_set(&cfg, vars[i].name, "~~bad~~", HBM_ORIGIN_ENV),
                     HBM_ERR_INVALID);
    assert_memory_equal(&cfg, &before, sizeof cfg);
  }
}

static void modes_round_trip(void **state) {
  (void)state;
  for (int m = 0; m < HBM_MODE_COUNT; m++) {
    hbm_mode_t parsed;
    assert_int_equal(hbm_mode_parse(hbm_mode_name((hbm_mode_t)m), &parsed), HBM_OK);
    assert_int_equal(parsed, m);
    hbm_config_t cfg;
    hbm_config_default(&cfg);
    hbm_config_set_mode(&cfg, (hbm_mode_t)m, HBM_ORIGIN_FLAG);
    assert_int_equal(hbm_config_mode(&cfg), m);
    assert_int_equal(hbm_config_validate(&cfg), HBM_OK);
    assert_int_equal(cfg.origin[HBM_CFG_ALLOCATOR], HBM_ORIGIN_FLAG);
  }
  hbm_mode_t parsed;
  assert_int_equal(hbm_mode_parse("fast", &parsed), HBM_ERR_INVALID);
  assert_non_null(strstr(hbm_last_error(), "bfc, growth, platform, async, expandable or learn"));
}

/* A configuration filled from code is checked as strictly as the environment. */
static void code_configs_are_validated(void **state) {
  (void)state;
  hbm_config_t cfg;
  double fractions[] = {0.0, 1.5, -1.0};
  for (size_t i = 0; i < HBM_ARRAY_LEN(fractions); i++) {
    hbm_config_default(&cfg);
    cfg.mem_fraction = fractions[i];
    assert_int_equal(hbm_config_validate(&cfg), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(), "XLA_PYTHON_CLIENT_MEM_FRACTION"));
    assert_null(hbm_open(&cfg));
    assert_int_equal(hbm_last_status(), HBM_ERR_INVALID);
  }
  hbm_config_default(&cfg);
  cfg.sim_memory = 1000;
  assert_int_equal(hbm_config_validate(&cfg), HBM_ERR_INVALID);
  hbm_config_default(&cfg);
  cfg.async_prealloc = -5;
  assert_int_equal(hbm_config_validate(&cfg), HBM_ERR_INVALID);
  hbm_config_default(&cfg);
  strcpy(cfg.sim_name, "bad name");
  assert_int_equal(hbm_config_validate(&cfg), HBM_ERR_INVALID);
  hbm_config_default(&cfg);
  cfg.ordinal = 5000;
  assert_int_equal(hbm_config_validate(&cfg), HBM_ERR_INVALID);
  hbm_config_default(&cfg);
  cfg.device = (hbm_device_kind_t)7;
  assert_int_equal(hbm_config_validate(&cfg), HBM_ERR_INVALID);
}

/* A bad environment: hbm_open(NULL) refuses and takes nothing from the sim device. */
static void bad_environment_opens_nothing(void **state) {
  (void)state;
  char name[64];
  snprintf(name, sizeof name, "opts%d", (int)getpid());
  setenv("HBM_DEVICE", "sim", 1);
  setenv("HBM_SIM_NAME", name, 1);
  setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "1.5", 1);
  assert_null(hbm_open(NULL));
  assert_int_equal(hbm_last_status(), HBM_ERR_INVALID);
  char shm[128];
  hbm__ledger_shm_name(name, shm, sizeof shm);
  char path[160];
  snprintf(path, sizeof path, "/dev/shm%s", shm);
  assert_int_not_equal(access(path, F_OK), 0); /* not even the ledger was created */
  unsetenv("XLA_PYTHON_CLIENT_MEM_FRACTION");
  hbm_device_t *dev = hbm_open(NULL);
  assert_non_null(dev);
  assert_string_equal(hbm_device_name(dev), name);
  hbm_close(dev);
  unsetenv("HBM_DEVICE");
  unsetenv("HBM_SIM_NAME");
}

/* The limit is the fraction of the device's total memory, rounded down to 256 bytes. */
static void limit_is_fraction_of_total(void **state) {
  (void)state;
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  assert_true(hbm__config_limit(&cfg, 16ull << 30) == 12ull << 30);
  cfg.mem_fraction = 0.5;
  assert_true(hbm__config_limit(&cfg, 80000000000ull) == 40000000000ull);
  cfg.mem_fraction = 0.33;
  uint64_t limit = hbm__config_limit(&cfg, 1000000000ull);
  assert_true(limit % 256 == 0 && limit <= 330000000ull && limit > 330000000ull - 256);
  cfg.mem_fraction = 1.0;
  assert_true(hbm__config_limit(&cfg, 1ull << 20) == 1ull << 20);
}

/* docs/configuration.md documents exactly the variables of the table. */
static void docs_list_every_variable(void **state) {
  (void)state;
  char path[4096];
  snprintf(path, sizeof path, "%s/docs/configuration.md", HBM_SOURCE_DIR);
  char *doc = th_read(path, NULL);
  assert_non_null(doc);
  size_t n;
  const hbm_variable_t *vars = hbm_config_variables(&n);
  for (size_t i = 0; i < n; i++) {
    char cell[128];
    snprintf(cell, sizeof cell, "| `%s` |", vars[i].name);
    if (!strstr(doc, cell))
      fail_msg("docs/configuration.md lacks a row for %s", vars[i].name);
  }
  free(doc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(defaults_are_the_seeds, clear_environment),
      cmocka_unit_test_setup(preallocate_values, clear_environment),
      cmocka_unit_test_setup(mem_fraction_values, clear_environment),
      cmocka_unit_test_setup(allocator_values, clear_environment),
      cmocka_unit_test_setup(allocator_precedence, clear_environment),
      cmocka_unit_test_setup(async_prealloc_values, clear_environment),
      cmocka_unit_test_setup(device_values, clear_environment),
      cmocka_unit_test_setup(sim_values, clear_environment),
      cmocka_unit_test_setup(expandable_and_profile_values, clear_environment),
      cmocka_unit_test_setup(empty_values_restore_defaults, clear_environment),
      cmocka_unit_test_setup(refusal_changes_nothing, clear_environment),
      cmocka_unit_test_setup(modes_round_trip, clear_environment),
      cmocka_unit_test_setup(code_configs_are_validated, clear_environment),
      cmocka_unit_test_setup(bad_environment_opens_nothing, clear_environment),
      cmocka_unit_test(limit_is_fraction_of_total),
      cmocka_unit_test(docs_list_every_variable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
