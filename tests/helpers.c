/* helpers.c — see helpers.h. */
#include "helpers.h"

#include <errno.h> /* program_invocation_short_name */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int th_run(const char *cmd, char **out) {
  size_t n = strlen(cmd) + 16;
  char *full = malloc(n);
  if (!full)
    return -1;
  snprintf(full, n, "%s 2>&1", cmd);
  FILE *p = popen(full, "r");
  free(full);
  if (!p)
    return -1;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (cap - len < 2) {
      char *grown = realloc(buf, cap *= 2);
      if (!grown) {
        free(buf);
        buf = NULL;
      } else
        buf = grown;
    }
  }
  int status = pclose(p);
  if (buf)
    buf[len] = '\0';
  if (out)
    *out = buf;
  else
    free(buf);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

char *th_mkdtemp(const char *tag) {
  const char *base = getenv("TMPDIR");
  char *path = malloc(4096);
  if (!path)
    return NULL;
  snprintf(path, 4096, "%s/hbm-test-%s-XXXXXX", base ? base : "/tmp", tag);
  if (!mkdtemp(path)) {
    free(path);
    return NULL;
  }
  return path;
}

void th_rmtree(const char *path) {
  if (!path || strlen(path) < 8)
    return;
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
  if (system(cmd) != 0)
    fprintf(stderr, "warning: could not remove %s\n", path);
}

char *th_dir;

int th_tmpdir_setup(void **state) {
  (void)state;
  th_dir = th_mkdtemp(program_invocation_short_name);
  return th_dir ? 0 : -1;
}

int th_tmpdir_teardown(void **state) {
  (void)state;
  th_rmtree(th_dir);
  free(th_dir);
  th_dir = NULL;
  return 0;
}

char *th_read(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = size >= 0 ? malloc((size_t)size + 1) : NULL;
  if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) {
    buf[size] = '\0';
    if (len)
      *len = (size_t)size;
  }
  return buf;
}

int th_write(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  size_t put = fwrite(data, 1, len, f);
  return (fclose(f) == 0 && put == len) ? 0 : -1;
}

int th_have_shared(void) {
  struct stat st;
  return stat(HBM_SHARED_DIR "/traces", &st) == 0 && S_ISDIR(st.st_mode);
}

void th_skip_reason(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("skipped: ");
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout); /* before cmocka's own "[  SKIPPED ]" line */
  va_end(ap);
}
