/* test_alloc_processes.c — processes sharing one sim device, as JAX processes share a GPU.
 * Two processes with XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 both preallocate; a third is told
 * that other processes hold the memory, with their pids; one of the holders killed with
 * SIGKILL has its memory reclaimed, and the third then succeeds. The holders are this test
 * binary run again (fork + exec) with "--hold": it opens the device from the environment,
 * allocates, reports "ready" on stdout and holds until its stdin closes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h> /* after the headers it needs */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc/alloc.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

typedef struct holder {
  pid_t pid;
  int to_child;   /* closing it lets the child go */
  int from_child; /* its report */
} holder_t;

static char sim_name[64];

/* The child's side: hold `bytes` (0: the smallest block, which preallocates in bfc mode). */
static int hold(uint64_t bytes) {
  hbm_device_t *dev = hbm_open(NULL);
  void *p = dev ? hbm_alloc(dev, bytes ? bytes : 1, 0) : NULL;
  if (!p) {
    printf("fail %s\n", hbm_last_error());
    fflush(stdout);
    hbm_close(dev);
    return 1;
  }
  printf("ready %d\n", (int)getpid());
  fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  hbm_close(dev);
  return 0;
}

/* Sets the environment every process of a test shares. */
static void use_device(const char *tag, const char *memory, const char *fraction) {
  snprintf(sim_name, sizeof sim_name, "tproc-%s-%d", tag, (int)getpid());
  setenv("HBM_DEVICE", "sim", 1);
  setenv("HBM_SIM_NAME", sim_name, 1);
  setenv("HBM_SIM_MEMORY", memory, 1);
  setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", fraction, 1);
}

static holder_t spawn_holder(const char *allocator, const char *bytes) {
  int in[2], out[2];
  assert_int_equal(pipe(in), 0);
  assert_int_equal(pipe(out), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]), close(in[1]), close(out[0]), close(out[1]);
    if (allocator)
      setenv("XLA_PYTHON_CLIENT_ALLOCATOR", allocator, 1);
    execl("/proc/self/exe", "holder", "--hold", bytes, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  return (holder_t){pid, in[1], out[0]};
}

/* Waits for the child's report; fails the test with its message if it could not hold. */
static void expect_ready(const holder_t *h) {
  char line[4096];
  ssize_t n = 0, got;
  while (n < (ssize_t)sizeof line - 1 && (got = read(h->from_child, line + n, 1)) == 1 &&
         line[n] != '\n')
    n++;
  line[n] = '\0';
  char want[64];
  snprintf(want, sizeof want, "ready %d", (int)h->pid);
  if (strcmp(line, want) != 0)
    fail_msg("holder %d: '%s'", (int)h->pid, line);
}

static int release_holder(holder_t *h) {
  close(h->to_child);
  int status = -1;
  waitpid(h->pid, &status, 0);
  close(h->from_child);
  return status;
}

static void kill_holder(holder_t *h) {
  kill(h->pid, SIGKILL);
  int status;
  waitpid(h->pid, &status, 0);
  assert_true(WIFSIGNALED(status));
  close(h->to_child);
  close(h->from_child);
}

static void assert_contains(const char *text, const char *part) {
  if (!strstr(text, part))
    fail_msg("expected '%s' in:\n%s", part, text);
}

static void assert_ledger_gone(void) {
  char shm[128], path[256];
  hbm__ledger_shm_name(sim_name, shm, sizeof shm);
  snprintf(path, sizeof path, "/dev/shm%s", shm);
  assert_int_not_equal(access(path, F_OK), 0);
}

/* Two processes at MEM_FRACTION=0.5 fit; a third is told who holds the memory. A holder
 * killed with SIGKILL gives its memory back. */
static void third_process_is_told_about_the_others(void **state) {
  (void)state;
  use_device("three", "2GiB", "0.5");
  holder_t a = spawn_holder(NULL, "0"), b = spawn_holder(NULL, "0");
  expect_ready(&a);
  expect_ready(&b);
  hbm_device_t *dev = hbm_open(NULL);
  assert_non_null(dev);
  uint64_t total, free_bytes;
  assert_int_equal(hbm_device_memory(dev, &total, &free_bytes), HBM_OK);
  assert_true(total == 2 * GiB && free_bytes == 0);
  assert_null(hbm_alloc(dev, 1000, 0));
  const char *text = hbm_last_error();
  print_message("%s\n", text);
  /* the preallocation (0.5 of 2 GiB) failed, not the 1000 bytes that asked for it first */
  assert_contains(text, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1073741824 "
                        "bytes.\n");
  assert_contains(text, "request: the preallocation of 1.00GiB, made at this device's first "
                        "allocation (1000 bytes)");
  assert_contains(text, "  cause: other processes hold the device's memory: ");
  char pid_a[64], pid_b[64];
  snprintf(pid_a, sizeof pid_a, "pid %d holds 1.00GiB", (int)a.pid);
  snprintf(pid_b, sizeof pid_b, "pid %d holds 1.00GiB", (int)b.pid);
  assert_contains(text, pid_a);
  assert_contains(text, pid_b);
  assert_contains(text, "(2.00GiB of 2.00GiB; 0B free), so the preallocation of 1.00GiB could "
                        "not be made");
  assert_contains(text, "XLA_PYTHON_CLIENT_MEM_FRACTION (e.g. 0.33 each for 3 processes)");
  assert_contains(text, "XLA_PYTHON_CLIENT_PREALLOCATE=false");
  assert_contains(text, "set by XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 (environment)");
  /* kill -9 one holder: its gigabyte comes back, and the third process fits. */
  kill_holder(&a);
  assert_int_equal(hbm_device_memory(dev, &total, &free_bytes), HBM_OK);
  assert_true(free_bytes == 1 * GiB);
  void *p = hbm_alloc(dev, 1000, 0);
  assert_non_null(p);
  memset(p, 5, 1000);
  assert_int_equal(release_holder(&b), 0);
  hbm_close(dev);
  assert_ledger_gone();
}

/* Without preallocation the device refuses a region: the cause is still the others. */
static void other_processes_in_growth_mode(void **state) {
  (void)state;
  use_device("growth", "1GiB", "1");
  holder_t h = spawn_holder("platform", "805306368"); /* 768 MiB */
  expect_ready(&h);
  setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false", 1);
  hbm_device_t *dev = hbm_open(NULL);
  unsetenv("XLA_PYTHON_CLIENT_PREALLOCATE");
  assert_non_null(dev);
  assert_non_null(hbm_alloc(dev, 100 * MiB, 0));
  assert_null(hbm_alloc(dev, 300 * MiB, 0));
  const char *text = hbm_last_error();
  char pid[64];
  snprintf(pid, sizeof pid, "pid %d holds 768.0MiB", (int)h.pid);
  assert_contains(text, "  cause: other processes hold the device's memory: ");
  assert_contains(text, pid);
  assert_contains(text, "so the device refused");
  assert_contains(text, "mode: growth");
  assert_int_equal(release_holder(&h), 0);
  assert_non_null(hbm_alloc(dev, 300 * MiB, 0)); /* the holder left */
  hbm_close(dev);
  assert_ledger_gone();
}

/* A holder that could not hold says why (the helper itself works as a process). */
static void a_holder_reports_its_own_oom(void **state) {
  (void)state;
  use_device("own", "64MiB", "0.5");
  holder_t h = spawn_holder(NULL, "104857600"); /* 100 MiB > the 32 MiB limit */
  char line[4096];
  ssize_t n = read(h.from_child, line, sizeof line - 1);
  assert_true(n > 0);
  line[n] = '\0';
  assert_contains(line, "fail RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                        "104857600 bytes.");
  assert_int_not_equal(release_holder(&h), 0);
  assert_ledger_gone();
}

static int remove_ledger(void **state) {
  (void)state;
  char shm[128];
  hbm__ledger_shm_name(sim_name, shm, sizeof shm);
  shm_unlink(shm);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--hold"))
    return hold(strtoull(argv[2], NULL, 10));
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(third_process_is_told_about_the_others, remove_ledger),
      cmocka_unit_test_teardown(other_processes_in_growth_mode, remove_ledger),
      cmocka_unit_test_teardown(a_holder_reports_its_own_oom, remove_ledger),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
