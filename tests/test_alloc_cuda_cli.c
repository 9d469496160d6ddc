/* test_alloc_cuda_cli.c — `hbm info` and `hbm demo` with HBM_DEVICE=cuda on the driver double
 * (tests/fakecuda; ctest puts it on LD_LIBRARY_PATH): the right device and what each mode
 * runs on, HBM_DEVICE=auto falling back only without a device, the demo in every mode on a
 * GPU whose memory the host cannot touch (it used to write into device memory from the
 * host), and its OOM diagnosis naming hbm's own memory, the context and another process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <dlfcn.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

/* The double, or a skip: these tests set its knobs. */
static void need_fake(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  bool fake = lib && dlsym(lib, "fakecuda_misuse");
  if (lib)
    dlclose(lib);
  if (!fake) {
    th_skip("needs the driver double tests/fakecuda (LD_LIBRARY_PATH)");
  }
}

/* Runs `hbm ARGS` with only ENV's settings (and the loader's path); returns the exit status,
 * -1 when it did not exit (a crash). */
static int run_hbm(const char *env, const char *args, char **out) {
  char cmd[20000];
  snprintf(cmd, sizeof cmd,
           "env -u HBM_DEVICE -u XLA_PYTHON_CLIENT_MEM_FRACTION -u XLA_PYTHON_CLIENT_PREALLOCATE "
           "-u XLA_PYTHON_CLIENT_ALLOCATOR -u TF_GPU_ALLOCATOR -u HBM_SIM_MEMORY -u HBM_EXPANDABLE "
           "-u HBM_PROFILE_DIR -u FAKECUDA_MEMORY -u FAKECUDA_OTHER_PROCESS -u FAKECUDA_FAIL "
           "HBM_SIM_NAME=tccli-%d %s '%s' %s",
           (int)getpid(), env, HBM_BIN, args);
  return th_run(cmd, out);
}

static void assert_contains(const char *text, const char *part) {
  if (!strstr(text, part))
    fail_msg("expected '%s' in:\n%s", part, text);
}

static void assert_lacks(const char *text, const char *part) {
  if (strstr(text, part))
    fail_msg("did not expect '%s' in:\n%s", part, text);
}

static void info_shows_the_gpu_and_its_modes(void **state) {
  (void)state;
  need_fake();
  char *out = NULL;
  assert_int_equal(
      run_hbm("HBM_DEVICE=cuda FAKECUDA_NAME=FakeH100 FAKECUDA_MEMORY=8G", "info", &out), 0);
  assert_contains(out, "  cuda  cuda:0 (FakeH100)");
  assert_contains(out, "total 8589934592 bytes (8.00GiB)");
  assert_contains(out, "  device       cuda:0 (FakeH100)\n");
  assert_contains(out, "    async       the driver's stream-ordered pool (cuMemPool)");
  assert_contains(out, "    expandable  granules mapped on demand");
  assert_contains(out, "    growth      a reserved range, committed as it grows");
  free(out);
  /* a GPU whose attributes say no VMM and no pools: the fallbacks, and why */
  assert_int_equal(run_hbm("HBM_DEVICE=cuda FAKECUDA_ATTR_OFF=VMM,POOLS", "info", &out), 0);
  assert_contains(out, "no virtual memory management (device attribute 0): plain regions");
  assert_contains(out, "no memory pools (device attribute 0): hbm's own pool");
  assert_contains(out, "    async       hbm's own stream-ordered pool");
  assert_contains(out, "    expandable  growth by regions (no virtual memory)");
  free(out);
  assert_int_equal(run_hbm("HBM_DEVICE=cuda", "info --json", &out), 0);
  json_error_t err;
  json_t *root = json_loads(out, 0, &err);
  assert_non_null(root);
  assert_string_equal(json_string_value(json_object_get(root, "device_kind")), "cuda");
  assert_string_equal(json_string_value(json_object_get(json_object_get(root, "modes"), "async")),
                      "the driver's stream-ordered pool (cuMemPool)");
  json_decref(root);
  free(out);
}

/* auto: sim where the driver has no device (said on stderr and in the note); a driver that
 * fails otherwise is not hidden behind the simulated device. */
static void info_auto_falls_back_only_without_a_device(void **state) {
  (void)state;
  need_fake();
  char *out = NULL;
  assert_int_equal(run_hbm("FAKECUDA_DEVICES=0", "info", &out), 0);
  assert_contains(out, "hbm: HBM_DEVICE=auto: no GPU answered (cuInit: CUDA_ERROR_NO_DEVICE (100)");
  assert_contains(out, " (HBM_DEVICE=auto: no GPU answered (cuInit: "
                       "CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected); using "
                       "the simulated device)");
  free(out);
  assert_int_equal(run_hbm("", "info", &out), 0);
  assert_contains(out, "  device       cuda:0 (FakeCUDA GPU) (HBM_DEVICE=auto: a GPU answered)");
  free(out);
  assert_int_equal(run_hbm("FAKECUDA_FAIL=cuDevicePrimaryCtxRetain:*:999", "info", &out), 1);
  assert_contains(out, "  device       not available: CUDA device 0: cuDevicePrimaryCtxRetain: "
                       "CUDA_ERROR_UNKNOWN (999)");
  free(out);
}

/* The demo in every mode on a GPU the host cannot touch: no crash, no misuse of the driver,
 * no leak, and the seed's OOM (the 200 GiB array on a 16 GiB device). */
static void demo_on_a_discrete_gpu_in_every_mode(void **state) {
  (void)state;
  need_fake();
  const char *modes[] = {"", "XLA_PYTHON_CLIENT_PREALLOCATE=false",
                         "XLA_PYTHON_CLIENT_ALLOCATOR=platform",
                         "XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async", "HBM_EXPANDABLE=true"};
  const char *names[] = {"mode bfc", "mode growth", "mode platform", "mode async",
                         "mode expandable"};
  char *dir = th_mkdtemp("cuda-demo");
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    char env[8400], args[4200], log[4200], *out = NULL;
    snprintf(log, sizeof log, "%s/fakecuda-%zu.log", dir, m);
    snprintf(env, sizeof env,
             "HBM_DEVICE=cuda FAKECUDA_HOST_ACCESS=0 FAKECUDA_MEMORY=16G FAKECUDA_LEAK_EXIT=3 "
             "FAKECUDA_LOG='%s' %s",
             log, modes[m]);
    snprintf(args, sizeof args, "demo --logdir '%s/run%zu'", dir, m);
    int rc = run_hbm(env, args, &out);
    if (rc != 1)
      fail_msg("%s: exit status %d (1 expected: the seed's OOM):\n%s", modes[m], rc, out);
    assert_contains(out, names[m]);
    assert_contains(out, "  cause: request larger than the device: 200.0GiB requested, but the "
                         "device has 16.00GiB in total");
    free(out);
    size_t len;
    char *text = th_read(log, &len);
    assert_non_null(text);
    assert_lacks(text, "MISUSE");
    assert_lacks(text, "LEAK");
    free(text);
  }
  th_rmtree(dir);
  free(dir);
}

/* A 16 GiB GPU; this process's context takes 500 MiB, pid 4242 holds 6 GiB. bfc takes 0.75 of
 * 16 GiB = 12 GiB at the first allocation, but 16 - 0.5 - 6 = 9.5 GiB are free: refused,
 * and the cause is pid 4242 (with the context's 500 MiB listed, not blamed on anyone).
 * In growth mode the demo runs until the 200 GiB array; the facts then show hbm's own
 * reservation beside the context and pid 4242. */
static void demo_oom_names_the_holders(void **state) {
  (void)state;
  need_fake();
  char *dir = th_mkdtemp("cuda-demo-oom");
  char args[4200], *out = NULL;
  snprintf(args, sizeof args, "demo --logdir '%s'", dir);
  const char *gpu = "HBM_DEVICE=cuda FAKECUDA_MEMORY=16G FAKECUDA_CONTEXT_OVERHEAD=500M "
                    "FAKECUDA_OTHER_PROCESS=4242:6G";
  assert_int_equal(run_hbm(gpu, args, &out), 1);
  assert_contains(out, "  cause: other processes hold the device's memory: pid 4242 holds "
                       "6.00GiB (6.00GiB of 16.00GiB; 9.51GiB free), so the preallocation of "
                       "12.00GiB could not be made.");
  assert_contains(out, "this process's CUDA context holds 500.0MiB");
  assert_lacks(out, "unknown");
  free(out);
  char env[1000];
  snprintf(env, sizeof env, "%s XLA_PYTHON_CLIENT_PREALLOCATE=false", gpu);
  assert_int_equal(run_hbm(env, args, &out), 1);
  assert_contains(out, "  cause: request larger than the device: 200.0GiB requested");
  assert_contains(out, "  held by others: 6.49GiB (this process's CUDA context holds 500.0MiB, "
                       "pid 4242 holds 6.00GiB)");
  assert_contains(out, "; reserved ");
  assert_lacks(out, "reserved 0B,");
  assert_lacks(out, "unknown");
  free(out);
  th_rmtree(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(info_shows_the_gpu_and_its_modes),
      cmocka_unit_test(info_auto_falls_back_only_without_a_device),
      cmocka_unit_test(demo_on_a_discrete_gpu_in_every_mode),
      cmocka_unit_test(demo_oom_names_the_holders),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
