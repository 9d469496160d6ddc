/* util.c — small system helpers: whole-file reads, a monotonic clock, checked strdup, file
 * names, growing arrays. */
#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

hbm_status_t hbm__read_fd(int fd, const char *path, char **data, size_t *len) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return hbm__error(HBM_ERR_IO, "%s: not a regular file", path);
  size_t size = (size_t)st.st_size, got = 0;
  char *buf = malloc(size + 1);
  if (!buf)
    return hbm__error(HBM_ERR_HOST_MEMORY, "%s: out of host memory reading %zu bytes", path, size);
  while (got < size) {
    ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      free(buf);
      return hbm__error(HBM_ERR_IO, "%s: read error", path);
    }
    got += (size_t)n;
  }
  buf[size] = '\0';
  *data = buf;
  *len = size;
  return HBM_OK;
}

hbm_status_t hbm__read_file(const char *path, char **data, size_t *len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return hbm__error(HBM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  hbm_status_t s = hbm__read_fd(fd, path, data, len);
  close(fd);
  return s;
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

const char *hbm__base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

bool hbm__ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

void *hbm__grow_array(void *items, size_t *cap, size_t need, size_t elem_size, size_t first_cap) {
  if (need <= *cap)
    return items;
  size_t grown_cap = *cap ? *cap : (first_cap ? first_cap : 1);
  while (grown_cap < need && grown_cap <= SIZE_MAX / 2)
    grown_cap *= 2;
  if (grown_cap < need || grown_cap > SIZE_MAX / elem_size) {
    hbm__error(HBM_ERR_HOST_MEMORY, "an array of %zu items is too large", need);
    return NULL;
  }
  void *grown = realloc(items, grown_cap * elem_size);
  if (!grown) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory growing an array to %zu items", grown_cap);
    return NULL;
  }
  *cap = grown_cap;
  return grown;
}
