/* logdir.c — XProf's logdir layout, <logdir>/plugins/profile/<run>/<host>.<ext>, so hbm
 * profiles sit where XProf users look for theirs. The recorder creates a run directory per
 * capture (hbm_logdir_new_run); `hbm report`, `hbm view` and others list the profiles of a
 * logdir newest run first (hbm_logdir_list). A directory without plugins/profile is taken as
 * one run holding its files (a run directory, or an XLA dump directory). */
#include "base/base.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define PROFILE_SUBDIR "plugins/profile"

/* mkdir -p */
static hbm_status_t make_dirs(const char *path) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf)
    return hbm__error(HBM_ERR_INVALID, "log directory path '%s' is empty or too long", path);
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0')
      continue;
    char saved = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return hbm__error(HBM_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
    buf[i] = saved;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return hbm__error(HBM_ERR_IO, "%s: not a directory", path);
  return HBM_OK;
}

hbm_status_t hbm_logdir_new_run(const char *logdir, char *buf, size_t cap) {
  if (!logdir || !*logdir)
    return hbm__error(HBM_ERR_INVALID, "no log directory given");
  char base[4096];
  int n = snprintf(base, sizeof base, "%s/%s", logdir, PROFILE_SUBDIR);
  if (n < 0 || (size_t)n >= sizeof base)
    return hbm__error(HBM_ERR_INVALID, "%s: log directory path too long", logdir);
  hbm_status_t s = make_dirs(base);
  if (s != HBM_OK)
    return s;
  char stamp[32];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(stamp, sizeof stamp, "%Y_%m_%d_%H_%M_%S", &tm);
  /* Two captures within one second (or two processes) each get their own run. */
  for (int k = 0; k < 10000; k++) {
    if (k == 0)
      n = snprintf(buf, cap, "%s/%s", base, stamp);
    else
      n = snprintf(buf, cap, "%s/%s_%d", base, stamp, k);
    if (n < 0 || (size_t)n >= cap)
      return hbm__error(HBM_ERR_INVALID, "%s: run directory path too long", logdir);
    if (mkdir(buf, 0755) == 0)
      return HBM_OK;
    if (errno != EEXIST)
      return hbm__error(HBM_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
  }
  return hbm__error(HBM_ERR_IO, "%s: too many runs named %s_*", base, stamp);
}

/* ---- listing ---- */

/* Files hbm can read, by name (the content decides the format when loading). */
static bool is_profile_name(const char *name) {
  static const char *const suffixes[] = {".hbmtrace",
                                         ".csv",
                                         ".hlo",
                                         ".hlo.txt",
                                         "-buffer-assignment.txt",
                                         "-memory-usage-report.txt",
                                         "after_optimizations.txt",
                                         ".pickle",
                                         ".pkl",
                                         ".xplane.pb",
                                         ".hlo_proto.pb"};
  if (name[0] == '.')
    return false;
  for (size_t i = 0; i < HBM_ARRAY_LEN(suffixes); i++)
    if (hbm__ends_with(name, suffixes[i]))
      return true;
  return false;
}

/* "2024_01_02_03_04_05_10" after "..._9": digit runs compare as numbers. */
static int natural_compare(const char *a, const char *b) {
  while (*a && *b) {
    if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
      while (*a == '0')
        a++;
      while (*b == '0')
        b++;
      size_t na = 0, nb = 0;
      while (isdigit((unsigned char)a[na]))
        na++;
      while (isdigit((unsigned char)b[nb]))
        nb++;
      if (na != nb)
        return na < nb ? -1 : 1;
      int c = strncmp(a, b, na);
      if (c)
        return c;
      a += na, b += nb;
      continue;
    }
    if (*a != *b)
      return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
    a++, b++;
  }
  return *a ? 1 : *b ? -1 : 0;
}

typedef struct listing {
  hbm_logdir_entry_t *items;
  size_t n, cap;
} listing_t;

static bool add_entry(listing_t *l, const char *run, const char *dir, const char *file) {
  hbm_logdir_entry_t e;
  memset(&e, 0, sizeof e);
  if (snprintf(e.path, sizeof e.path, "%s/%s", dir, file) >= (int)sizeof e.path)
    return true; /* a path we could not open anyway */
  struct stat st;
  if (stat(e.path, &st) != 0 || !S_ISREG(st.st_mode))
    return true;
  snprintf(e.run, sizeof e.run, "%s", run);
  snprintf(e.file, sizeof e.file, "%s", file);
  e.mtime = (int64_t)st.st_mtime;
  e.bytes = (uint64_t)st.st_size;
  if (l->n == l->cap) {
    hbm_logdir_entry_t *grown = hbm__grow_array(l->items, &l->cap, l->n + 1, sizeof *grown, 16);
    if (!grown)
      return false;
    l->items = grown;
  }
  l->items[l->n++] = e;
  return true;
}

/* XProf, once it has opened a run, writes each program of the run's .xplane.pb files beside
 * them as "<module>(<program id>).hlo_proto.pb" (and "NO_MODULE.hlo_proto.pb" when there is
 * none): copies of programs the .xplane.pb already holds, left out so that a run reads the
 * same before and after XProf opened it. */
static bool is_xprof_copy(const char *name) {
  static const char suffix[] = ".hlo_proto.pb";
  size_t n = strlen(name), stem = n - (sizeof suffix - 1);
  if (!hbm__ends_with(name, suffix))
    return false;
  if (stem == 9 && !strncmp(name, "NO_MODULE", 9))
    return true;
  if (stem < 3 || name[stem - 1] != ')')
    return false;
  size_t digits = stem - 1;
  while (digits > 0 && isdigit((unsigned char)name[digits - 1]))
    digits--;
  return digits > 1 && digits < stem - 1 && name[digits - 1] == '(';
}

static bool has_xplane(DIR *d) {
  struct dirent *de;
  bool found = false;
  while (!found && (de = readdir(d)) != NULL)
    found = de->d_name[0] != '.' && hbm__ends_with(de->d_name, ".xplane.pb");
  rewinddir(d);
  return found;
}

static hbm_status_t list_run(listing_t *l, const char *run, const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return HBM_OK; /* not a directory (a stray file under plugins/profile) */
  struct dirent *de;
  hbm_status_t s = HBM_OK;
  bool xplane = has_xplane(d);
  while ((de = readdir(d)) != NULL && s == HBM_OK)
    if (is_profile_name(de->d_name) && !(xplane && is_xprof_copy(de->d_name)) &&
        !add_entry(l, run, dir, de->d_name))
      s = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory listing %s", dir);
  closedir(d);
  return s;
}

static hbm_status_t list_runs(listing_t *l, const char *base) {
  DIR *d = opendir(base);
  if (!d)
    return hbm__error(HBM_ERR_IO, "%s: cannot open: %s", base, strerror(errno));
  struct dirent *de;
  hbm_status_t s = HBM_OK;
  char dir[4096];
  while ((de = readdir(d)) != NULL && s == HBM_OK) {
    if (de->d_name[0] == '.')
      continue;
    if (snprintf(dir, sizeof dir, "%s/%s", base, de->d_name) < (int)sizeof dir)
      s = list_run(l, de->d_name, dir);
  }
  closedir(d);
  return s;
}

/* Newest run first; within a run, by file name. */
static int entry_order(const void *x, const void *y) {
  const hbm_logdir_entry_t *a = x, *b = y;
  int c = natural_compare(b->run, a->run);
  return c ? c : strcmp(a->file, b->file);
}

static const char *base_name(const char *path, char *buf, size_t cap) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/')
    n--;
  size_t start = n;
  while (start > 0 && path[start - 1] != '/')
    start--;
  snprintf(buf, cap, "%.*s", (int)(n - start), path + start);
  return buf;
}

hbm_status_t hbm_logdir_list(const char *logdir, hbm_logdir_entry_t *out, size_t cap,
                             size_t *total) {
  if (total)
    *total = 0;
  if (!logdir || !*logdir)
    return hbm__error(HBM_ERR_INVALID, "no log directory given");
  struct stat st;
  if (stat(logdir, &st) != 0 || !S_ISDIR(st.st_mode))
    return hbm__error(HBM_ERR_NOT_FOUND, "%s: no such directory", logdir);
  char base[4096], run[256];
  snprintf(base, sizeof base, "%s/%s", logdir, PROFILE_SUBDIR);
  listing_t l = {NULL, 0, 0};
  hbm_status_t s = stat(base, &st) == 0 && S_ISDIR(st.st_mode)
                       ? list_runs(&l, base)
                       : list_run(&l, base_name(logdir, run, sizeof run), logdir);
  if (s == HBM_OK) {
    if (l.n > 1)
      qsort(l.items, l.n, sizeof *l.items, entry_order);
    for (size_t i = 0; out && i < l.n && i < cap; i++)
      out[i] = l.items[i];
    if (total)
      *total = l.n;
  }
  free(l.items);
  return s;
}
