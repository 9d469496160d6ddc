/* helpers.h — small utilities shared by the C tests: run the hbm binary and capture its
 * output, make temporary directories, read files. */
#ifndef HBM_TEST_HELPERS_H
#define HBM_TEST_HELPERS_H

#include <stddef.h>

/* Runs `sh -c cmd`, returns its exit status (or -1) and, when out != NULL, its stdout and
 * stderr together in a malloc'd string. */
int th_run(const char *cmd, char **out);
/* A fresh temporary directory (malloc'd path), removed by th_rmtree. */
char *th_mkdtemp(const char *tag);
void th_rmtree(const char *path);
/* cmocka group fixtures: a fresh temporary directory in th_dir, removed afterwards. */
extern char *th_dir;
int th_tmpdir_setup(void **state);
int th_tmpdir_teardown(void **state);
/* Whole file into a malloc'd NUL-terminated buffer, NULL on error. */
char *th_read(const char *path, size_t *len);
/* Writes data to path; 0 on success. */
int th_write(const char *path, const void *data, size_t len);
/* 1 when the shared data directory (../shared) is present. */
int th_have_shared(void);
/* Prints "skipped: REASON" on the test's output (scripts/test-summary.py gives it beside the
 * case's name); th_skip then skips the cmocka case, so that no case skips without saying why. */
void th_skip_reason(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define th_skip(...)                                                                               \
  do {                                                                                             \
    th_skip_reason(__VA_ARGS__);                                                                   \
    skip();                                                                                        \
  } while (0)
/* TH_SANITIZED: 1 in an ASan or TSan build (their shadow memory makes resident memory and
 * address space no measure of hbm's). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TH_SANITIZED 1
#endif
#endif
#ifndef TH_SANITIZED
#define TH_SANITIZED 0
#endif
/* Skips the case (saying so) when ../shared is absent. */
#define th_need_shared()                                                                           \
  do {                                                                                             \
    if (!th_have_shared())                                                                         \
      th_skip("the shared data is absent (%s)", HBM_SHARED_DIR);                                   \
  } while (0)

#endif
