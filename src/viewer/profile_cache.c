/* profile_cache.c — the profiles the viewer has loaded, shared by all request threads.
 *
 * The logdir is listed through hbm_logdir_scan at most every HBM__LISTING_MS, so runs written
 * while the server is up appear without a restart; links that leave the logdir are skipped
 * there (unless --follow-links) and what was skipped is kept for /api/runs. A profile is opened
 * at the real path the listing found, component by component from the logdir with O_NOFOLLOW,
 * so a link swapped in after the listing is refused, not followed out of the logdir (the race
 * of issue 26), then loaded from that descriptor. It is loaded on first use (outside the lock,
 * other requests for the same file wait for it): its summary first when it has an index or is
 * big (hbm__profile_load_first, as `hbm report` reads it), the whole file behind it. It is
 * reloaded when its size, mtime or inode changes (a file still being written at most every
 * HBM__LISTING_MS), and what is derived from it is computed once: the analyses (one hbm_analyze per
 * memory space), the allocation timeline's layout (layout.c), the buffer of each step, and the
 * answers already given (routes.c). At most HBM__CACHE_MAX profiles stay loaded; the least recently
 * used one that no request holds is dropped first. */
#include "import/load.h"
#include "profile/index.h"
#include "profile/profile_build.h"
#include "viewer/viewer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

hbm_status_t hbm__cache_init(hbm__cache_t *c, const char *logdir) {
  memset(c, 0, sizeof *c);
  c->logdir = hbm__strdup(logdir);
  c->real_logdir = realpath(logdir, NULL);
  if (!c->logdir || !c->real_logdir) {
    free(c->logdir);
    free(c->real_logdir);
    return hbm__error(HBM_ERR_IO, "logdir %s: cannot resolve its path", logdir);
  }
  uint64_t avail = hbm__memory_available() / 2;
  c->max_bytes = avail > HBM__CACHE_BYTES_MIN ? (size_t)avail : HBM__CACHE_BYTES_MIN;
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->loaded, NULL);
  return HBM_OK;
}

static void free_answers(hbm__cached_answer_t *a) {
  while (a) {
    hbm__cached_answer_t *next = a->next;
    free(a->key);
    free(a->body);
    free(a);
    a = next;
  }
}

static void entry_free(hbm__loaded_t *e) {
  if (!e)
    return;
  free_answers(e->answers);
  for (int i = 0; e->analyses && i < e->n_spaces; i++)
    hbm_analysis_free(e->analyses[i]);
  free(e->analyses);
  for (int i = 0; e->layouts && i < e->n_spaces; i++)
    free(e->layouts[i].bands);
  free(e->layouts);
  free(e->rows);
  free(e->step_buffer);
  free(e->step_is_free);
  hbm_profile_free(e->profile);
  free(e->error);
  pthread_mutex_destroy(&e->lock);
  free(e);
}

void hbm__cache_destroy(hbm__cache_t *c) {
  pthread_mutex_lock(&c->lock); /* the background readers and index writers finish first */
  c->stopping = true;
  while (c->n_workers)
    pthread_cond_wait(&c->loaded, &c->lock);
  pthread_mutex_unlock(&c->lock);
  hbm__loaded_t *e = c->entries;
  while (e) {
    hbm__loaded_t *next = e->next;
    entry_free(e);
    e = next;
  }
  free(c->listing);
  free(c->skipped);
  free(c->listing_error);
  free(c->logdir);
  free(c->real_logdir);
  pthread_cond_destroy(&c->loaded);
  pthread_mutex_destroy(&c->lock);
  memset(c, 0, sizeof *c);
}

/* A logdir without plugins/profile/ yet is an empty logdir, not an error: the page then says
 * how to make a profile and keeps looking. */
static bool logdir_has_profiles_dir(const char *logdir) {
  char path[4200];
  struct stat st;
  snprintf(path, sizeof path, "%s/plugins/profile", logdir);
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void unlink_entry_locked(hbm__cache_t *c, hbm__loaded_t *victim) {
  for (hbm__loaded_t **p = &c->entries; *p; p = &(*p)->next)
    if (*p == victim) {
      *p = victim->next;
      c->n_entries--;
      return;
    }
}

/* Drops the cache's reference to e; returns e when nobody else holds it (free it unlocked). */
static hbm__loaded_t *drop_locked(hbm__cache_t *c, hbm__loaded_t *e) {
  unlink_entry_locked(c, e);
  e->next = NULL;
  return --e->refs == 0 ? e : NULL;
}

static bool listed_locked(const hbm__cache_t *c, const char *path) {
  for (size_t i = 0; i < c->n_listing; i++)
    if (!strcmp(c->listing[i].path, path))
      return true;
  return false;
}

/* Entries whose file left the listing are dropped; those beyond HBM__CACHE_MAX too, least
 * recently used first. Returns a list (through ->next) of entries to free unlocked. */
static hbm__loaded_t *evict_locked(hbm__cache_t *c) {
  hbm__loaded_t *to_free = NULL;
  for (hbm__loaded_t *e = c->entries, *next; e; e = next) {
    next = e->next;
    if (!e->loading && !listed_locked(c, e->path)) {
      hbm__loaded_t *dead = drop_locked(c, e);
      if (dead) {
        dead->next = to_free;
        to_free = dead;
      }
    }
  }
  size_t bytes = 0; /* a loading entry's memory is its loader's to write, not yet counted */
  for (hbm__loaded_t *e = c->entries; e; e = e->next)
    bytes += e->loading ? 0 : e->memory;
  while (c->n_entries > HBM__CACHE_MAX || (bytes > c->max_bytes && c->n_entries > 1)) {
    hbm__loaded_t *oldest = NULL;
    for (hbm__loaded_t *e = c->entries; e; e = e->next)
      if (!e->loading && e->refs == 1 && (!oldest || e->last_used < oldest->last_used))
        oldest = e;
    if (!oldest)
      break; /* all in use: keep them until released */
    bytes -= oldest->memory;
    hbm__loaded_t *dead = drop_locked(c, oldest);
    if (dead) {
      dead->next = to_free;
      to_free = dead;
    }
  }
  return to_free;
}

static void free_list(hbm__loaded_t *e) {
  while (e) {
    hbm__loaded_t *next = e->next;
    entry_free(e);
    e = next;
  }
}

static hbm_status_t list_logdir(const hbm__cache_t *c, hbm_logdir_scan_t *scan) {
  memset(scan, 0, sizeof *scan);
  return logdir_has_profiles_dir(c->logdir) ? hbm_logdir_scan(c->logdir, c->flags, scan) : HBM_OK;
}

/* Refreshes the listing when it is older than HBM__LISTING_MS. On failure the old listing
 * stays and the error is remembered for /api/runs. */
static hbm_status_t refresh_listing_locked(hbm__cache_t *c, hbm__loaded_t **to_free) {
  int64_t now = hbm__now_ns();
  if (c->listed_at_ns && now - c->listed_at_ns < (int64_t)HBM__LISTING_MS * 1000000)
    return c->listing_error ? HBM_ERR_IO : HBM_OK;
  c->listed_at_ns = now;
  hbm_logdir_scan_t scan;
  hbm_status_t st = list_logdir(c, &scan);
  free(c->listing_error);
  c->listing_error = NULL;
  if (st != HBM_OK) {
    c->listing_error = strdup(hbm_last_error());
    return st;
  }
  free(c->listing);
  free(c->skipped);
  c->listing = scan.entries;
  c->n_listing = scan.n_entries;
  c->skipped = scan.skipped;
  c->n_skipped = scan.n_skipped;
  *to_free = evict_locked(c);
  return HBM_OK;
}

/* A malloc'd copy of n items of size each (one byte when n is 0); NULL when out of memory. */
static void *copy_of(const void *items, size_t n, size_t size) {
  void *copy = malloc(n ? n * size : 1);
  if (copy && n)
    memcpy(copy, items, n * size);
  return copy;
}

hbm_status_t hbm__cache_listing(hbm__cache_t *c, hbm_logdir_entry_t **out, size_t *n,
                                hbm_logdir_skip_t **skipped, size_t *n_skipped) {
  hbm__loaded_t *to_free = NULL;
  pthread_mutex_lock(&c->lock);
  hbm_status_t st = refresh_listing_locked(c, &to_free);
  if (st != HBM_OK) {
    hbm__error(st, "cannot list logdir %s: %s", c->logdir,
               c->listing_error ? c->listing_error : "unknown error");
  } else {
    size_t kept = c->n_skipped < HBM_LOGDIR_SKIPS_KEPT ? c->n_skipped : HBM_LOGDIR_SKIPS_KEPT;
    *n = c->n_listing;
    *out = copy_of(c->listing, c->n_listing, sizeof **out);
    if (skipped)
      *skipped = copy_of(c->skipped, kept, sizeof **skipped);
    if (n_skipped)
      *n_skipped = c->n_skipped;
    if (!*out || (skipped && !*skipped)) {
      free(*out);
      if (skipped)
        free(*skipped);
      st = hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    }
  }
  pthread_mutex_unlock(&c->lock);
  free_list(to_free);
  return st;
}

static const hbm_logdir_entry_t *find_listed_locked(const hbm__cache_t *c, const char *run,
                                                    const char *file) {
  for (size_t i = 0; i < c->n_listing; i++)
    if (!strcmp(c->listing[i].run, run) && !strcmp(c->listing[i].file, file))
      return &c->listing[i];
  return NULL;
}

static hbm__loaded_t *find_entry_locked(const hbm__cache_t *c, const char *path) {
  for (hbm__loaded_t *e = c->entries; e; e = e->next)
    if (!strcmp(e->path, path))
      return e;
  return NULL;
}

/* What tells one version of a file from the next: size, mtime to the nanosecond, inode (a
 * rewrite within the same second, or a rename over it, still reloads). */
typedef struct file_version {
  uint64_t bytes, inode;
  struct timespec mtime;
} file_version_t;

static file_version_t version_of(const char *path) {
  struct stat st;
  file_version_t v = {0};
  if (stat(path, &st) == 0) {
    v.bytes = (uint64_t)st.st_size;
    v.inode = (uint64_t)st.st_ino;
    v.mtime = st.st_mtim;
  }
  return v;
}

static bool same_version(const hbm__loaded_t *e, const file_version_t *v) {
  return e->bytes == v->bytes && e->inode == v->inode && e->changed.tv_sec == v->mtime.tv_sec &&
         e->changed.tv_nsec == v->mtime.tv_nsec;
}

static hbm__loaded_t *new_entry(const hbm_logdir_entry_t *le, const file_version_t *v) {
  hbm__loaded_t *e = calloc(1, sizeof *e);
  if (!e)
    return NULL;
  snprintf(e->run, sizeof e->run, "%s", le->run);
  snprintf(e->file, sizeof e->file, "%s", le->file);
  snprintf(e->path, sizeof e->path, "%s", le->path);
  snprintf(e->real, sizeof e->real, "%s", le->real);
  e->outside = le->outside;
  e->mtime = le->mtime;
  e->bytes = v->bytes;
  e->inode = v->inode;
  e->changed = v->mtime;
  e->loading = true;
  e->refs = 2; /* the cache's and the caller's */
  pthread_mutex_init(&e->lock, NULL);
  return e;
}

/* Opens the next component of a path below dir (closed) without following a link: a
 * directory, or the file itself (O_NONBLOCK: a FIFO swapped in does not hang the open). */
static int open_component(int dir, const char *name, bool last) {
  int flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (last ? O_NONBLOCK : O_DIRECTORY);
  int fd = openat(dir, name, flags);
  int saved = errno;
  close(dir);
  errno = saved;
  return fd;
}

/* Opens e's file as the listing found it: a profile inside the logdir component by component
 * from the logdir, none of them a link (they were not when listed); one outside (listed with
 * --follow-links) at its real path, its last component not a link. -1 with the error set. */
static int open_listed(const hbm__cache_t *c, const hbm__loaded_t *e) {
  size_t n = strlen(c->real_logdir);
  const char *rel = n == 1 ? e->real + 1 : e->real + n + 1;
  int fd;
  if (e->outside || strncmp(e->real, c->real_logdir, n)) {
    fd = open(e->real, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  } else {
    char part[4096];
    fd = open(c->real_logdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (const char *p = rel; fd >= 0 && *p;) {
      const char *slash = strchr(p, '/');
      size_t len = slash ? (size_t)(slash - p) : strlen(p);
      snprintf(part, sizeof part, "%.*s", (int)len, p);
      fd = open_component(fd, part, !slash);
      p += len + (slash != NULL);
    }
  }
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
    return fd;
  if (fd >= 0 || errno == ELOOP || errno == ENOTDIR) {
    hbm__error(HBM_ERR_IO,
               "%s: changed since the logdir was listed (a symbolic link or something other "
               "than a file now stands on its path %s): not opened; it is listed again within "
               "half a second",
               e->path, e->real);
    if (fd >= 0)
      close(fd);
    return -1;
  }
  hbm__error(HBM_ERR_IO, "%s: cannot open: %s", e->path, strerror(errno));
  return -1;
}

/* About the bytes a loaded profile takes with what the viewer derives from it (analyses,
 * layout, the buffer of each step): what the cache's byte bound counts. */
static size_t entry_memory(const hbm__loaded_t *e) {
  if (!e->profile)
    return 0;
  int64_t steps = hbm_profile_step_count(e->profile),
          buffers = hbm_profile_buffer_count(e->profile);
  if (e->summary_only) /* the index is mapped; a few tables beside it */
    return (size_t)steps / 64 * 16 + ((size_t)1 << 20);
  return hbm__profile_memory(e->profile) + (size_t)steps * 25 + (size_t)buffers * 16;
}

/* Loads e's file; runs without the cache lock while e->loading keeps others waiting. */
static void load_entry(const hbm__cache_t *c, hbm__loaded_t *e) {
  int64_t t0 = hbm__now_ns();
  int fd = open_listed(c, e);
  e->profile = fd >= 0 ? hbm__profile_load_fd(fd, e->path) : NULL;
  if (fd >= 0)
    close(fd);
  e->loaded_at_ns = hbm__now_ns();
  e->load_ms = (double)(e->loaded_at_ns - t0) / 1e6;
  if (!e->profile) {
    e->status = hbm_last_status() != HBM_OK ? hbm_last_status() : HBM_ERR_INTERNAL;
    e->error = strdup(hbm_last_error()[0] ? hbm_last_error() : "the profile could not be loaded");
  } else {
    e->n_spaces = hbm_profile_space_count(e->profile);
  }
  e->memory = entry_memory(e);
}

/* The first summary without the whole file, as `hbm report` reads it (hbm__profile_load_first):
 * from the profile's index when one matches the file, else a big .hbmtrace or RMM log's in one
 * pass (writing its index on the way with HBM_INDEX=auto). false when neither: read it whole. */
static bool read_summary(const hbm__cache_t *c, hbm__loaded_t *e) {
  int64_t t0 = hbm__now_ns();
  int fd = open_listed(c, e);
  if (fd < 0)
    return false; /* load_entry says why */
  e->profile = hbm__profile_load_first(e->path, fd);
  close(fd);
  if (!e->profile)
    return false;
  e->summary_only = true;
  e->n_spaces = hbm_profile_space_count(e->profile);
  e->loaded_at_ns = hbm__now_ns();
  e->load_ms = (double)(e->loaded_at_ns - t0) / 1e6;
  e->memory = entry_memory(e);
  return true;
}

typedef struct worker_job {
  hbm__cache_t *c;
  hbm__loaded_t *e; /* a reference held for the job */
} worker_job_t;

static void worker_done(hbm__cache_t *c) {
  pthread_mutex_lock(&c->lock);
  c->n_workers--;
  pthread_cond_broadcast(&c->loaded);
  pthread_mutex_unlock(&c->lock);
}

/* Reads the whole profile behind a summary and puts it in the summary's place. */
static void *read_whole(void *arg) {
  worker_job_t *job = arg;
  hbm__cache_t *c = job->c;
  hbm__loaded_t *e = job->e, *full = calloc(1, sizeof *full), *dead = NULL;
  if (full) {
    *full = (hbm__loaded_t){.mtime = e->mtime,
                            .bytes = e->bytes,
                            .changed = e->changed,
                            .inode = e->inode,
                            .loading = true,
                            .refs = 1};
    memcpy(full->run, e->run, sizeof full->run);
    memcpy(full->file, e->file, sizeof full->file);
    memcpy(full->path, e->path, sizeof full->path);
    memcpy(full->real, e->real, sizeof full->real);
    full->outside = e->outside;
    pthread_mutex_init(&full->lock, NULL);
    load_entry(c, full);
    full->memory = entry_memory(full);
    full->loading = false;
    bool is_free; /* the op of each step, before a timeline asks for it */
    hbm__loaded_step_buffer(full, 0, &is_free);
  }
  pthread_mutex_lock(&c->lock);
  if (full && find_entry_locked(c, e->path) == e && !c->stopping) {
    dead = drop_locked(c, e);
    full->last_used = ++c->clock;
    full->next = c->entries;
    c->entries = full;
    c->n_entries++;
    full = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  entry_free(dead);
  entry_free(full); /* not wanted any more: the file changed, or the viewer stops */
  hbm__cache_release(c, e);
  free(job);
  worker_done(c);
  return NULL;
}

static void *write_index(void *arg) {
  worker_job_t *job = arg;
  bool is_free; /* the op of each step, before a timeline asks for it */
  hbm__loaded_step_buffer(job->e, 0, &is_free);
  hbm__index_write(job->e->profile, job->e->path);
  hbm__cache_release(job->c, job->e);
  worker_done(job->c);
  free(job);
  return NULL;
}

/* A detached thread on e (under the cache's lock; e gets a reference for it). */
static void start_worker(hbm__cache_t *c, hbm__loaded_t *e, void *(*fn)(void *)) {
  worker_job_t *job = malloc(sizeof *job);
  pthread_t thread;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (job) {
    *job = (worker_job_t){c, e};
    e->refs++;
    c->n_workers++;
    if (pthread_create(&thread, &attr, fn, job) != 0) {
      e->refs--;
      c->n_workers--;
      free(job);
    }
  }
  pthread_attr_destroy(&attr);
}

hbm__loaded_t *hbm__cache_get(hbm__cache_t *c, const char *run, const char *file) {
  hbm__loaded_t *to_free = NULL, *e;
  pthread_mutex_lock(&c->lock);
  refresh_listing_locked(c, &to_free);
  const hbm_logdir_entry_t *le = find_listed_locked(c, run, file);
  if (!le) {
    pthread_mutex_unlock(&c->lock);
    free_list(to_free);
    hbm__error(HBM_ERR_NOT_FOUND, "no profile '%s' in run '%s' of the logdir", file, run);
    return NULL;
  }
  while ((e = find_entry_locked(c, le->path)) && e->loading) {
    pthread_cond_wait(&c->loaded, &c->lock);
    le = find_listed_locked(c, run, file); /* the listing may have been refreshed meanwhile */
    if (!le) {
      pthread_mutex_unlock(&c->lock);
      free_list(to_free);
      hbm__error(HBM_ERR_NOT_FOUND, "profile '%s' of run '%s' is gone", file, run);
      return NULL;
    }
  }
  file_version_t version = version_of(le->path);
  bool fresh_enough = e && hbm__now_ns() - e->loaded_at_ns < (int64_t)HBM__LISTING_MS * 1000000;
  if (e && (same_version(e, &version) || fresh_enough)) {
    e->refs++;
    e->last_used = ++c->clock;
    pthread_mutex_unlock(&c->lock);
    free_list(to_free);
    return e;
  }
  if (e) { /* the file changed: the old entry goes as soon as nobody uses it */
    hbm__loaded_t *dead = drop_locked(c, e);
    if (dead) {
      dead->next = to_free;
      to_free = dead;
    }
  }
  hbm__loaded_t *fresh = new_entry(le, &version);
  if (!fresh) {
    pthread_mutex_unlock(&c->lock);
    free_list(to_free);
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
    return NULL;
  }
  fresh->last_used = ++c->clock;
  fresh->next = c->entries;
  c->entries = fresh;
  c->n_entries++;
  hbm__loaded_t *evicted = evict_locked(c);
  pthread_mutex_unlock(&c->lock);
  free_list(to_free);
  free_list(evicted);

  int64_t t0 = hbm__now_ns();
  bool summary = read_summary(c, fresh);
  if (!summary)
    load_entry(c, fresh);
  int64_t load_ns = hbm__now_ns() - t0;

  pthread_mutex_lock(&c->lock);
  fresh->loading = false;
  if (summary) /* the first view from the index or one pass; the whole file behind it */
    start_worker(c, fresh, read_whole);
  else if (fresh->profile && hbm__index_wanted(fresh->path, load_ns))
    fresh->index_wanted = true; /* after the first summary: see hbm__cache_release */
  pthread_cond_broadcast(&c->loaded);
  pthread_mutex_unlock(&c->lock);
  return fresh;
}

hbm__loaded_t *hbm__cache_get_full(hbm__cache_t *c, hbm__loaded_t *e) {
  pthread_mutex_lock(&c->lock);
  while (e->summary_only && find_entry_locked(c, e->path) == e && !c->stopping)
    pthread_cond_wait(&c->loaded, &c->lock);
  hbm__loaded_t *full = find_entry_locked(c, e->path);
  if (full && !full->summary_only && !full->loading) {
    full->refs++;
    full->last_used = ++c->clock;
  } else {
    full = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  hbm__cache_release(c, e);
  if (!full)
    hbm__error(HBM_ERR_NOT_FOUND, "the profile changed or was dropped while it was read");
  return full;
}

static bool analysed(hbm__loaded_t *e) {
  pthread_mutex_lock(&e->lock);
  bool any = false;
  for (int s = 0; e->analyses && s < e->n_spaces && !any; s++)
    any = e->analyses[s] != NULL;
  pthread_mutex_unlock(&e->lock);
  return any;
}

/* A profile read from its file writes its index in the background once a request that
 * analysed it is done (the first summary, as a rule), not as soon as it is read: the writer
 * analyses every space again and walks every buffer, which on a 2-core machine delayed the
 * first summary, the one the user waits for. */
static void write_index_if_due(hbm__cache_t *c, hbm__loaded_t *e) {
  pthread_mutex_lock(&c->lock);
  bool wanted = e->index_wanted;
  pthread_mutex_unlock(&c->lock);
  if (!wanted || !analysed(e))
    return;
  pthread_mutex_lock(&c->lock);
  if (e->index_wanted && !c->stopping && find_entry_locked(c, e->path) == e) {
    e->index_wanted = false;
    start_worker(c, e, write_index);
  }
  pthread_mutex_unlock(&c->lock);
}

void hbm__cache_release(hbm__cache_t *c, hbm__loaded_t *e) {
  if (!e)
    return;
  write_index_if_due(c, e);
  pthread_mutex_lock(&c->lock);
  bool last = --e->refs == 0;
  pthread_mutex_unlock(&c->lock);
  if (last)
    entry_free(e);
}

const hbm_analysis_t *hbm__loaded_analysis(hbm__loaded_t *e, int space) {
  if (!e->profile) {
    hbm__error(e->status, "%s", e->error ? e->error : "profile not loaded");
    return NULL;
  }
  if (space < 0 || space >= e->n_spaces) {
    hbm__error(HBM_ERR_NOT_FOUND, "no memory space %d in %s/%s (it has %d)", space, e->run, e->file,
               e->n_spaces);
    return NULL;
  }
  pthread_mutex_lock(&e->lock);
  if (!e->analyses)
    e->analyses = calloc((size_t)e->n_spaces, sizeof *e->analyses);
  hbm_analysis_t *a = NULL;
  if (!e->analyses) {
    hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  } else {
    if (!e->analyses[space])
      e->analyses[space] = hbm_analyze(e->profile, space);
    a = e->analyses[space];
  }
  pthread_mutex_unlock(&e->lock);
  return a;
}

static void compute_layouts_locked(hbm__loaded_t *e) {
  int64_t count = hbm_profile_buffer_count(e->profile);
  e->rows = calloc(count > 0 ? (size_t)count : 1, sizeof *e->rows);
  e->layouts = calloc(e->n_spaces > 0 ? (size_t)e->n_spaces : 1, sizeof *e->layouts);
  bool ok = e->rows && e->layouts;
  for (int s = 0; ok && s < e->n_spaces; s++)
    ok = hbm__layout_build(e->profile, s, e->rows, &e->layouts[s]);
  if (!ok) {
    for (int s = 0; e->layouts && s < e->n_spaces; s++)
      free(e->layouts[s].bands);
    free(e->layouts);
    free(e->rows);
    e->layouts = NULL;
    e->rows = NULL;
  }
  e->layout_ready = ok;
}

const hbm__layout_t *hbm__loaded_layout(hbm__loaded_t *e, int space) {
  if (!e->profile || e->summary_only || space < 0 || space >= e->n_spaces)
    return NULL; /* a summary has only the buffers at the peaks */
  pthread_mutex_lock(&e->lock);
  if (!e->layout_ready)
    compute_layouts_locked(e);
  const hbm__layout_t *l = e->layout_ready ? &e->layouts[space] : NULL;
  pthread_mutex_unlock(&e->lock);
  return l;
}

uint64_t hbm__loaded_row(hbm__loaded_t *e, int64_t buffer) {
  const hbm_buffer_t *b = e->profile ? hbm_profile_buffer(e->profile, buffer) : NULL;
  return b && hbm__loaded_layout(e, b->space) ? e->rows[buffer] : 0;
}

/* Which buffer each step is about: a runtime profile has no step labels, so the op shown at a
 * point of the timeline is that of the buffer allocated (or freed) by the step. */
static void index_steps_locked(hbm__loaded_t *e) {
  int64_t n_steps = hbm_profile_step_count(e->profile);
  size_t n = n_steps > 0 ? (size_t)n_steps : 1;
  e->step_buffer = malloc(n * sizeof *e->step_buffer);
  e->step_is_free = calloc(n, sizeof *e->step_is_free);
  if (!e->step_buffer || !e->step_is_free) {
    free(e->step_buffer);
    free(e->step_is_free);
    e->step_buffer = NULL;
    e->step_is_free = NULL;
    return;
  }
  for (size_t i = 0; i < n; i++)
    e->step_buffer[i] = -1;
  int64_t count = hbm_profile_buffer_count(e->profile);
  for (int64_t i = 0; i < count; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(e->profile, i);
    if (b && b->start >= 0 && b->start < n_steps && e->step_buffer[b->start] < 0)
      e->step_buffer[b->start] = i;
  }
  for (int64_t i = 0; i < count; i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(e->profile, i);
    if (b && b->end >= 0 && b->end < n_steps && e->step_buffer[b->end] < 0) {
      e->step_buffer[b->end] = i;
      e->step_is_free[b->end] = 1;
    }
  }
}

int64_t hbm__loaded_step_buffer(hbm__loaded_t *e, int64_t step, bool *is_free) {
  *is_free = false;
  if (!e->profile || e->summary_only || step < 0 || step >= hbm_profile_step_count(e->profile))
    return -1;
  pthread_mutex_lock(&e->lock);
  if (!e->step_buffer)
    index_steps_locked(e);
  int64_t idx = e->step_buffer ? e->step_buffer[step] : -1;
  *is_free = e->step_is_free && e->step_is_free[step];
  pthread_mutex_unlock(&e->lock);
  return idx;
}

/* ---- answers ---- */

bool hbm__loaded_answer(hbm__loaded_t *e, const char *key, char **body, size_t *len) {
  bool found = false;
  pthread_mutex_lock(&e->lock);
  for (hbm__cached_answer_t *a = e->answers; a && !found; a = a->next) {
    if (strcmp(a->key, key))
      continue;
    *body = malloc(a->len + 1);
    if (*body) {
      memcpy(*body, a->body, a->len + 1);
      *len = a->len;
      found = true;
    }
  }
  pthread_mutex_unlock(&e->lock);
  return found;
}

void hbm__loaded_keep_answer(hbm__loaded_t *e, const char *key, const char *body, size_t len) {
  if (len > HBM__ANSWER_BYTES_MAX / 4)
    return;
  hbm__cached_answer_t *a = calloc(1, sizeof *a);
  char *k = strdup(key), *b = malloc(len + 1);
  if (!a || !k || !b) {
    free(a);
    free(k);
    free(b);
    return;
  }
  memcpy(b, body, len);
  b[len] = '\0';
  *a = (hbm__cached_answer_t){k, b, len, NULL};
  pthread_mutex_lock(&e->lock);
  a->next = e->answers; /* newest first: past the limits, the tail (the oldest) goes */
  e->answers = a;
  size_t n = 0, bytes = 0;
  for (hbm__cached_answer_t **p = &e->answers; *p; p = &(*p)->next) {
    bytes += (*p)->len;
    if (++n > HBM__ANSWERS_MAX || bytes > HBM__ANSWER_BYTES_MAX) {
      free_answers(*p);
      *p = NULL;
      break;
    }
  }
  pthread_mutex_unlock(&e->lock);
}
