/* test_alloc_private.c — the default simulated device is private to its process: two processes
 * that do not set HBM_SIM_NAME never see each other's memory (a demo next to another run gets
 * the same result as alone), while the devices of one process share it; naming the device
 * (HBM_SIM_NAME) is how processes share one (test_alloc_processes.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "hbm.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define GiB (1024ull * 1024 * 1024)

/* The environment of a user who set nothing but the device and the memory fraction. */
static void default_environment(const char *fraction) {
  unsetenv("HBM_SIM_NAME"); /* ctest sets one per test */
  setenv("HBM_DEVICE", "sim", 1);
  setenv("HBM_SIM_MEMORY", "16GiB", 1);
  setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", fraction, 1);
}

/* A child that preallocates 0.75 of the default device (12 GiB, never touched) and holds it
 * until the pipe closes. Returns its pid; *done is the write end that releases it. */
static pid_t spawn_holder(int *done) {
  int ready[2], hold[2];
  assert_int_equal(pipe(ready), 0);
  assert_int_equal(pipe(hold), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(ready[0]);
    close(hold[1]);
    default_environment("0.75");
    hbm_device_t *dev = hbm_open(NULL);
    char ok = dev && hbm_alloc(dev, 1000, 0) ? 'y' : 'n';
    if (write(ready[1], &ok, 1) != 1)
      _exit(2);
    char c;
    while (read(hold[0], &c, 1) > 0) {
    }
    hbm_close(dev);
    _exit(ok == 'y' ? 0 : 1);
  }
  close(ready[1]);
  close(hold[0]);
  char ok = 0;
  assert_int_equal(read(ready[0], &ok, 1), 1);
  close(ready[0]);
  assert_int_equal(ok, 'y');
  *done = hold[1];
  return pid;
}

static void unnamed_devices_of_two_processes_do_not_share(void **state) {
  (void)state;
  int done;
  pid_t holder = spawn_holder(&done); /* holds 12 of its 16 GiB */
  default_environment("0.5");
  hbm_device_t *dev = hbm_open(NULL);
  assert_non_null(dev);
  uint64_t total, free_bytes;
  assert_int_equal(hbm_device_memory(dev, &total, &free_bytes), HBM_OK);
  assert_true(total == 16 * GiB && free_bytes == 16 * GiB); /* the other's 12 GiB not seen */
  void *p = hbm_alloc(dev, 1000, 0); /* preallocates 8 GiB: fits only if not shared */
  if (!p)
    fail_msg("%s", hbm_last_error());
  /* a second device of this process shares this process's device: 8 + 8 of 16 GiB */
  hbm_device_t *second = hbm_open(NULL);
  assert_non_null(second);
  assert_int_equal(hbm_device_memory(second, &total, &free_bytes), HBM_OK);
  assert_true(free_bytes == 8 * GiB);
  void *q = hbm_alloc(second, 1000, 0);
  assert_non_null(q);
  assert_null(hbm_alloc(second, 9 * GiB, 0)); /* over its 8 GiB limit */
  assert_non_null(strstr(hbm_last_error(), "(simulated: private to this process, "
                                           "HBM_SIM_NAME not set"));
  hbm_free(second, q);
  hbm_close(second);
  hbm_free(dev, p);
  hbm_close(dev);
  close(done);
  int status;
  assert_int_equal(waitpid(holder, &status, 0), holder);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(unnamed_devices_of_two_processes_do_not_share),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
