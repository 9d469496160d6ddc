/* util.c — small system helpers: whole-file reads, a monotonic clock, checked strdup. */
#include "base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

hbm_status_t hbm__read_file(const char *path, char **data, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return hbm__error(HBM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return hbm__error(HBM_ERR_IO, "%s: not a regular file", path);
  }
  size_t size = (size_t)st.st_size;
  char *buf = malloc(size + 1);
  if (!buf) {
    fclose(f);
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory reading %zu bytes", path, size);
  }
  size_t got = fread(buf, 1, size, f);
  int failed = ferror(f);
  fclose(f);
  if (failed || got != size) {
    free(buf);
    return hbm__error(HBM_ERR_IO, "%s: read error", path);
  }
  buf[size] = '\0';
  *data = buf;
  *len = size;
  return HBM_OK;
}

int64_t hbm__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

char *hbm__strdup(const char *s) {
  if (!s)
    return NULL;
  char *copy = strdup(s);
  if (!copy)
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory copying a string");
  return copy;
}
