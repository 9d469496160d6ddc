/* logdir.c — XProf's logdir layout, <logdir>/plugins/profile/<run>/<host>.<ext>, so hbm
 * profiles sit where XProf users look for theirs. The recorder creates a run directory per
 * capture (hbm_logdir_new_run); `hbm report`, `hbm view` and others list the profiles of a
 * logdir newest run first (hbm_logdir_list). A directory without plugins/profile is taken as
 * one run holding its files (a run directory, or an XLA dump directory).
 *
 * Symbolic links: users link runs and profiles into a logdir. Each run directory and profile
 * is resolved (realpath); one that stays inside the logdir is listed with its real path, one
 * that leads outside is skipped with the reason (unless HBM_LOGDIR_FOLLOW_LINKS), so that
 * `hbm report DIR` and `hbm view --logdir DIR` show the same profiles and say the same about
 * the rest. The viewer opens what it lists by the real path, without following links
 * (profile_cache.c). */
#include "base/base.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
  int flags;
  const char *real_logdir; /* the logdir with its links resolved */
  hbm_logdir_entry_t *items;
  size_t n, cap;
  hbm_logdir_skip_t *skipped; /* the first HBM_LOGDIR_SKIPS_KEPT */
  size_t n_skipped;
} listing_t;

static bool inside(const listing_t *l, const char *real) {
  size_t n = strlen(l->real_logdir);
  if (n == 1) /* the logdir is "/" */
    return true;
  return !strncmp(real, l->real_logdir, n) && real[n] == '/';
}

static bool skip(listing_t *l, const char *path, const char *fmt, ...) HBM_PRINTF(3, 4);
static bool skip(listing_t *l, const char *path, const char *fmt, ...) {
  if (l->n_skipped < HBM_LOGDIR_SKIPS_KEPT) {
    if (!l->skipped && !(l->skipped = calloc(HBM_LOGDIR_SKIPS_KEPT, sizeof *l->skipped)))
      return false;
    hbm_logdir_skip_t *k = &l->skipped[l->n_skipped];
    snprintf(k->path, sizeof k->path, "%s", path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->why, sizeof k->why, fmt, ap);
    va_end(ap);
  }
  l->n_skipped++;
  return true;
}

typedef enum { TAKE, LEAVE_OUT, SKIPPED } verdict_t;

/* Where path really is (real, links resolved) and whether the listing takes it: a link to a
 * missing file, or out of the logdir without HBM_LOGDIR_FOLLOW_LINKS, is skipped and said so. */
static verdict_t resolve(listing_t *l, const char *path, char real[4096], bool *outside,
                         bool *failed) {
  char *r = realpath(path, NULL);
  struct stat st;
  if (!r) {
    char target[4096];
    ssize_t n = lstat(path, &st) == 0 && S_ISLNK(st.st_mode)
                    ? readlink(path, target, sizeof target - 1)
                    : -1;
    if (n < 0)
      return LEAVE_OUT; /* gone meanwhile, or unreadable: as if it were not there */
    target[n] = '\0';
    *failed = !skip(l, path, "a symbolic link to %s, which does not exist", target);
    return SKIPPED;
  }
  snprintf(real, 4096, "%s", r);
  free(r);
  *outside = !inside(l, real);
  if (*outside && !(l->flags & HBM_LOGDIR_FOLLOW_LINKS)) {
    *failed = !skip(l, path,
                    "through a symbolic link it is %s, outside the logdir: not read (pass "
                    "--follow-links to read profiles that links lead to anywhere)",
                    real);
    return SKIPPED;
  }
  return TAKE;
}

static bool add_entry(listing_t *l, const char *run, const char *dir, const char *file) {
  hbm_logdir_entry_t e;
  memset(&e, 0, sizeof e);
  if (snprintf(e.path, sizeof e.path, "%s/%s", dir, file) >= (int)sizeof e.path)
    return true; /* a path we could not open anyway */
  bool outside = false, failed = false;
  if (resolve(l, e.path, e.real, &outside, &failed) != TAKE)
    return !failed;
  struct stat st;
  if (stat(e.real, &st) != 0 || !S_ISREG(st.st_mode))
    return true;
  snprintf(e.run, sizeof e.run, "%s", run);
  snprintf(e.file, sizeof e.file, "%s", file);
  e.mtime = (int64_t)st.st_mtime;
  e.bytes = (uint64_t)st.st_size;
  e.outside = outside;
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
  char dir[4096], real[4096];
  while ((de = readdir(d)) != NULL && s == HBM_OK) {
    if (de->d_name[0] == '.' ||
        snprintf(dir, sizeof dir, "%s/%s", base, de->d_name) >= (int)sizeof dir)
      continue;
    bool outside = false, failed = false;
    verdict_t v = resolve(l, dir, real, &outside, &failed); /* a linked run: said once */
    if (failed)
      s = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory listing %s", base);
    else if (v == TAKE)
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

hbm_status_t hbm_logdir_scan(const char *logdir, int flags, hbm_logdir_scan_t *out) {
  memset(out, 0, sizeof *out);
  if (!logdir || !*logdir)
    return hbm__error(HBM_ERR_INVALID, "no log directory given");
  struct stat st;
  char *real_logdir = stat(logdir, &st) == 0 && S_ISDIR(st.st_mode) ? realpath(logdir, NULL) : NULL;
  if (!real_logdir)
    return hbm__error(HBM_ERR_NOT_FOUND, "%s: no such directory", logdir);
  char base[4096], run[256];
  snprintf(base, sizeof base, "%s/%s", logdir, PROFILE_SUBDIR);
  listing_t l = {.flags = flags, .real_logdir = real_logdir};
  hbm_status_t s = stat(base, &st) == 0 && S_ISDIR(st.st_mode)
                       ? list_runs(&l, base)
                       : list_run(&l, base_name(logdir, run, sizeof run), logdir);
  free(real_logdir);
  if (s != HBM_OK) {
    free(l.items);
    free(l.skipped);
    return s;
  }
  if (l.n > 1)
    qsort(l.items, l.n, sizeof *l.items, entry_order);
  *out = (hbm_logdir_scan_t){l.items, l.n, l.skipped, l.n_skipped};
  return HBM_OK;
}

void hbm_logdir_scan_free(hbm_logdir_scan_t *scan) {
  if (!scan)
    return;
  free(scan->entries);
  free(scan->skipped);
  memset(scan, 0, sizeof *scan);
}

hbm_status_t hbm_logdir_list(const char *logdir, hbm_logdir_entry_t *out, size_t cap,
                             size_t *total) {
  if (total)
    *total = 0;
  hbm_logdir_scan_t scan;
  hbm_status_t s = hbm_logdir_scan(logdir, 0, &scan);
  if (s != HBM_OK)
    return s;
  for (size_t i = 0; out && i < scan.n_entries && i < cap; i++)
    out[i] = scan.entries[i];
  if (total)
    *total = scan.n_entries;
  hbm_logdir_scan_free(&scan);
  return HBM_OK;
}
