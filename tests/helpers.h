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

#endif
