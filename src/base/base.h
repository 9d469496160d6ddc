/* base.h — internal helpers shared by every layer of libhbm: error reporting, a growable
 * string builder, an open-addressing u64→u64 map and a string interner. Nothing here is
 * public; the public API is include/hbm.h. */
#ifndef HBM_BASE_H
#define HBM_BASE_H

#include "hbm.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define HBM_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define HBM_LIKELY(x) __builtin_expect(!!(x), 1)
#define HBM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define HBM_PRINTF(f, a)
#define HBM_LIKELY(x) (x)
#define HBM_UNLIKELY(x) (x)
#endif

#define HBM_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* a + b for byte totals, saturated at HBM_BYTES_MAX (hbm.h) instead of wrapping. */
static inline uint64_t hbm__bytes_add(uint64_t a, uint64_t b) {
  uint64_t sum;
  return __builtin_add_overflow(a, b, &sum) || sum > HBM_BYTES_MAX ? HBM_BYTES_MAX : sum;
}

/* The end of [address, address + size), at most the end of the 64-bit address space. */
static inline uint64_t hbm__end_of(uint64_t address, uint64_t size) {
  uint64_t end;
  return __builtin_add_overflow(address, size, &end) ? UINT64_MAX : end;
}

/* a - b for byte totals, never below 0; a saturated total stays saturated (what is left of
 * "at least 8 EiB" is not known to be less). */
static inline uint64_t hbm__bytes_sub(uint64_t a, uint64_t b) {
  return a >= HBM_BYTES_MAX ? HBM_BYTES_MAX : a > b ? a - b : 0;
}

/* ---- errors (error.c) ---- */

/* Sets this thread's last error and returns `status`, so callers can write
 * `return hbm__error(HBM_ERR_INVALID, "...", ...);`. */
hbm_status_t hbm__error(hbm_status_t status, const char *fmt, ...) HBM_PRINTF(2, 3);
/* Sets the last error to a ready-made (possibly long) text. */
hbm_status_t hbm__error_text(hbm_status_t status, const char *text);
/* Clears this thread's last error. */
void hbm__error_clear(void);

/* ---- string builder (strbuf.c) ---- */

typedef struct hbm_strbuf {
  char *data; /* always NUL-terminated once anything was appended */
  size_t len;
  size_t cap;
  bool failed; /* an allocation failed; further appends are ignored */
} hbm_strbuf_t;

void hbm_strbuf_init(hbm_strbuf_t *sb);
void hbm_strbuf_free(hbm_strbuf_t *sb);
void hbm_strbuf_append(hbm_strbuf_t *sb, const char *s, size_t n);
void hbm_strbuf_puts(hbm_strbuf_t *sb, const char *s);
void hbm_strbuf_printf(hbm_strbuf_t *sb, const char *fmt, ...) HBM_PRINTF(2, 3);
void hbm_strbuf_vprintf(hbm_strbuf_t *sb, const char *fmt, va_list ap);
/* The text so far ("" when empty). */
const char *hbm_strbuf_str(const hbm_strbuf_t *sb);

/* ---- u64 → u64 hash map, open addressing (u64map.c) ---- */

typedef struct hbm_u64map {
  uint64_t *keys;
  uint64_t *values;
  uint8_t *used; /* 0 empty, 1 used, 2 deleted */
  size_t cap;    /* power of two */
  size_t count;
  size_t tombstones;
} hbm_u64map_t;

void hbm_u64map_init(hbm_u64map_t *m);
void hbm_u64map_free(hbm_u64map_t *m);
/* Inserts or replaces; false when memory ran out. */
bool hbm_u64map_put(hbm_u64map_t *m, uint64_t key, uint64_t value);
bool hbm_u64map_get(const hbm_u64map_t *m, uint64_t key, uint64_t *value);
/* Removes key; returns whether it was present (and its value). */
bool hbm_u64map_remove(hbm_u64map_t *m, uint64_t key, uint64_t *value);

/* ---- string interner (intern.c): equal strings share one copy, freed together ---- */

typedef struct hbm_intern hbm_intern_t;
hbm_intern_t *hbm_intern_new(void);
void hbm_intern_free(hbm_intern_t *in);
/* The interned copy of s (NULL for NULL; NULL with an error set if memory ran out). */
const char *hbm_intern(hbm_intern_t *in, const char *s);
const char *hbm_intern_n(hbm_intern_t *in, const char *s, size_t n);

/* ---- misc (util.c) ---- */

/* Reads a whole file into a NUL-terminated malloc'd buffer. */
hbm_status_t hbm__read_file(const char *path, char **data, size_t *len);
/* The same from a file already open (a regular file; path names it in messages). */
hbm_status_t hbm__read_fd(int fd, const char *path, char **data, size_t *len);
/* Monotonic nanoseconds. */
int64_t hbm__now_ns(void);
/* strdup that sets an error on failure. */
char *hbm__strdup(const char *s);
/* The file name at the end of path (after its last '/'). */
const char *hbm__base_name(const char *path);
/* Whether s ends with suffix. */
bool hbm__ends_with(const char *s, const char *suffix);
/* Makes room for `need` items of `elem_size` bytes in the malloc'd array `items` of *cap items:
 * the capacity doubles (starting at `first_cap`) until it holds `need`. Returns the array,
 * moved or not, with *cap updated; NULL (items untouched, error set) when memory ran out or the
 * size overflows. */
void *hbm__grow_array(void *items, size_t *cap, size_t need, size_t elem_size, size_t first_cap);

/* ---- mapped files (mapped.c) ---- */

/* A file's bytes for a reader that goes through it once: mapped read-only where the system
 * allows (else read into memory), so the pages it has passed can be given back (they stay in
 * the page cache; touched again, they come back from there). A gigabyte file then costs a
 * reader what it keeps, not the file's size. */
typedef struct hbm__mapped {
  const uint8_t *data;
  size_t len;
  bool mapped;                    /* a read-only mapping (else malloc'd, NUL-terminated) */
  size_t dropped;                 /* bytes from the start already given back */
  struct hbm__prefetch *prefetch; /* asks the disk for the file ahead of the reader */
} hbm__mapped_t;

/* Maps path (a regular file). HBM_ERR_IO with the path when it cannot be opened or read. */
hbm_status_t hbm__map_file(const char *path, hbm__mapped_t *m);
/* The same for a file already open (fd stays open; path names it in messages). */
hbm_status_t hbm__map_fd(int fd, const char *path, hbm__mapped_t *m);
/* Gives back the pages before `offset` (m may be NULL or not mapped: nothing happens). */
void hbm__map_drop_before(hbm__mapped_t *m, size_t offset);
/* Gives back the whole pages inside [from, to), leaving `dropped` as it is (a second reader
 * on another thread may call it). */
void hbm__map_drop_range(hbm__mapped_t *m, size_t from, size_t to);
/* Maps the pages of [from, to) that are in the page cache into m now, in one call: a reader
 * ahead of which another thread does it takes no page faults there (a hint; nothing happens
 * where the system cannot). */
void hbm__map_populate(hbm__mapped_t *m, size_t from, size_t to);
/* Gives back every page read so far (a reader that jumps around calls it now and then). */
void hbm__map_drop_all(hbm__mapped_t *m);
void hbm__unmap(hbm__mapped_t *m);
/* Before a reader takes m's mapping over (to munmap it itself, not through hbm__unmap). */
void hbm__map_keep(hbm__mapped_t *m);
/* For a reader that cannot say how far it got (the XProf walker): a thread that gives back
 * every page of m each `period_ms` until stopped; the reader's next touch brings a page back
 * from the page cache. NULL when not mapped or no thread could start (nothing to stop). */
typedef struct hbm__pager hbm__pager_t;
hbm__pager_t *hbm__pager_start(hbm__mapped_t *m, int period_ms);
void hbm__pager_stop(hbm__pager_t *pager);

/* An anonymous read-write mapping of old_size bytes grown to new_size (old NULL: a new one),
 * its bytes kept; MAP_FAILED when the system refuses. mremap, except under ThreadSanitizer,
 * which does not follow mremap (google/sanitizers#1099) and would report two readers' arrays
 * as one racing object: there a copy. */
void *hbm__map_grow(void *old, size_t old_size, size_t new_size);

/* Built with ThreadSanitizer (gcc defines the first, clang answers the second). */
#if defined(__SANITIZE_THREAD__)
#define HBM__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HBM__TSAN 1
#endif
#endif
#ifndef HBM__TSAN
#define HBM__TSAN 0
#endif

/* Memory the system can give this process now, in bytes (MemAvailable, bounded by
 * RLIMIT_AS and a cgroup limit when set); 0 when unknown. */
uint64_t hbm__memory_available(void);
/* Whether a CPU is idle now besides the caller's: the threads other processes run now
 * (/proc/loadavg less this process's running ones), the caller and one more fit the CPUs
 * online. True when it cannot tell. A reader that would put a second thread to work asks it
 * first: on a busy machine the second thread's cost in CPU outweighs what it overlaps. */
bool hbm__cpu_idle(void);

#endif /* HBM_BASE_H */
