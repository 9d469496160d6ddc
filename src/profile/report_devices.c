/* report_devices.c — many devices, one view: the summary `hbm report DIR` prints first when a
 * run has several hosts, devices or ranks (several .xplane.pb, a folder of per-rank PyTorch
 * snapshots, an SPMD program on several devices, a process that used several GPUs).
 *
 * A device's figure is the analysis's peak of its memory space: a runtime profile's space per
 * GPU, or, in an XProf file, the largest peak among the programs XLA assigned to that device
 * (the HloModule's device assignment, meta "devices:<program>"; XProf's Memory Viewer draws
 * the same peak per program). Then: the largest device named, the median and the smallest,
 * the spread, and what the largest holds at its peak that the median does not (a diff of the
 * two peaks' buffers, hbm__diff_new_peaks, median against largest: the rows add up to the
 * difference; `hbm diff` pairs every buffer of the two). */
#include "profile/diff.h"
#include "profile/index.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define DIFF_ROWS 8
#define BAR_COLUMNS 30

typedef struct device_peak {
  char label[320];        /* "host1.xplane.pb device 2", "rank1.pickle cuda:1" */
  const hbm_profile_t *p; /* where its peak is */
  int space;
  int64_t device; /* XProf device id, -1 for a runtime space */
  size_t file;    /* index of its profile */
  uint64_t peak;
  size_t programs; /* XProf: programs run on it */
  bool runtime;    /* XProf: the figure is its allocator's (else a program's) */
} device_peak_t;

typedef struct device_list {
  device_peak_t *d;
  size_t n, cap;
  bool count_only; /* devices counted, their peaks not needed (left 0) */
} device_list_t;

/* The peak of a space and how many buffers it holds; when only counting, 0 and whether it
 * holds any — counting devices costs no analysis of each (a capture of 10^8 events would be
 * analysed twice by `hbm report` otherwise). */
static uint64_t peak_of(const device_list_t *l, const hbm_profile_t *p, int space,
                        size_t *n_buffers) {
  if (l->count_only) {
    if (n_buffers)
      *n_buffers = hbm__space_holds_buffers(p, space);
    return 0;
  }
  hbm_analysis_t *a = hbm_analyze(p, space);
  uint64_t peak = a ? hbm_analysis_summary(a)->peak_bytes : 0;
  if (n_buffers)
    *n_buffers = a ? (size_t)hbm_analysis_summary(a)->n_buffers : 0;
  hbm_analysis_free(a);
  return peak;
}

static device_peak_t *entry_for(device_list_t *l, size_t file, int64_t device) {
  for (size_t i = 0; device >= 0 && i < l->n; i++)
    if (l->d[i].file == file && l->d[i].device == device)
      return &l->d[i];
  if (l->n == l->cap) {
    device_peak_t *grown = hbm__grow_array(l->d, &l->cap, l->n + 1, sizeof *grown, 16);
    if (!grown)
      return NULL;
    l->d = grown;
  }
  device_peak_t *e = &l->d[l->n++];
  memset(e, 0, sizeof *e);
  e->file = file;
  e->device = device;
  return e;
}

/* An allocator of one device, as XLA names them ("GPU_3_bfc", "TPU_0_..."): its number, or -1
 * (a host allocator, "gpu_host_bfc"). */
static int64_t allocator_device(const hbm_space_info_t *info) {
  bool device_allocator = !strncmp(info->name, "GPU_", 4) || !strncmp(info->name, "TPU_", 4);
  if (!info->device || strcmp(info->device, "allocator") || !device_allocator)
    return -1;
  char *end;
  long long id = strtoll(info->name + 4, &end, 10);
  return end > info->name + 4 && *end == '_' && id >= 0 ? id : -1;
}

/* Takes space s of p as device `id`'s figure when it is the first or the larger one. */
static bool note_device(device_list_t *l, const hbm_profile_t *p, int s, size_t file,
                        const char *name, int64_t id, bool runtime) {
  device_peak_t *e = entry_for(l, file, id);
  if (!e)
    return false;
  if (e->runtime && !runtime)
    return true; /* what the device's allocator held beats a plan of it */
  uint64_t peak = peak_of(l, p, s, NULL);
  if (e->programs == 0 || runtime || peak > e->peak) {
    e->peak = peak;
    e->p = p;
    e->space = s;
    e->runtime = runtime;
  }
  e->programs += !runtime;
  snprintf(e->label, sizeof e->label, "%s%sdevice %lld", name, *name ? " " : "", (long long)id);
  return true;
}

/* An XProf file: a device's allocator (XProf's Memory Profile) where the file has it, else the
 * largest program XLA assigned to the device (its Memory Viewer); with neither, the file is one
 * device at its largest program. */
static bool add_xprof_devices(device_list_t *l, const hbm_profile_t *p, size_t file,
                              const char *name) {
  size_t before = l->n;
  for (int s = 0; s < hbm_profile_space_count(p); s++) {
    int64_t id = allocator_device(hbm_profile_space(p, s));
    if (id >= 0 && !note_device(l, p, s, file, name, id, true))
      return false;
  }
  for (int s = 0; s < hbm_profile_space_count(p); s++) {
    const hbm_space_info_t *info = hbm_profile_space(p, s);
    char key[512];
    snprintf(key, sizeof key, "devices:%s", info->device ? info->device : "");
    const char *ids = info->color == 0 ? hbm_profile_meta(p, key) : NULL;
    for (const char *c = ids; c && *c;) {
      char *end;
      long long id = strtoll(c, &end, 10);
      if (end == c || !note_device(l, p, s, file, name, id, false))
        return end == c;
      c = *end == ',' ? end + 1 : end;
    }
  }
  if (l->n > before)
    return true;
  int best = -1; /* no devices known: the host as one */
  uint64_t peak = 0;
  for (int s = 0; s < hbm_profile_space_count(p); s++) {
    uint64_t v = hbm_profile_space(p, s)->color == 0 ? peak_of(l, p, s, NULL) : 0;
    if (best < 0 || v > peak)
      best = s, peak = v;
  }
  device_peak_t *e = best >= 0 ? entry_for(l, file, -1) : NULL;
  if (e) {
    *e = (device_peak_t){.p = p, .space = best, .device = -1, .file = file, .peak = peak};
    snprintf(e->label, sizeof e->label, "%s", name);
  }
  return best < 0 || e;
}

static bool is_xprof(const hbm_profile_t *p) {
  const char *format = hbm_profile_meta(p, "format");
  return format && !strcmp(format, "xprof");
}

/* A runtime profile (a run, a snapshot, an allocation log): each device memory space (colour 0:
 * not host memory) that holds buffers is a device. A compile-time plan is a program, not a
 * device: it has none. */
static bool add_space_devices(device_list_t *l, const hbm_profile_t *p, size_t file,
                              const char *name) {
  if (hbm_profile_kind(p) == HBM_PROFILE_PLAN)
    return true;
  for (int s = 0; s < hbm_profile_space_count(p); s++) {
    if (hbm_profile_space(p, s)->color != 0)
      continue;
    size_t n_buffers;
    uint64_t peak = peak_of(l, p, s, &n_buffers);
    if (n_buffers == 0)
      continue;
    device_peak_t *e = entry_for(l, file, -1);
    if (!e)
      return false;
    const hbm_space_info_t *info = hbm_profile_space(p, s);
    *e = (device_peak_t){.p = p, .space = s, .device = -1, .file = file, .peak = peak};
    snprintf(e->label, sizeof e->label, "%s%s%s", name, *name ? " " : "",
             info->device && *info->device ? info->device : info->name);
  }
  return true;
}

static bool collect(const hbm_profile_t *const *profiles, const char *const *names, size_t n,
                    device_list_t *l) {
  for (size_t i = 0; i < n; i++) {
    /* One file: its devices need no file name. */
    const char *name = n == 1              ? ""
                       : names && names[i] ? hbm__base_name(names[i])
                                           : hbm_profile_name(profiles[i]);
    bool ok = is_xprof(profiles[i]) ? add_xprof_devices(l, profiles[i], i, name)
                                    : add_space_devices(l, profiles[i], i, name);
    if (!ok)
      return false;
  }
  return true;
}

static int cmp_peak(const void *x, const void *y) {
  const device_peak_t *a = *(device_peak_t *const *)x, *b = *(device_peak_t *const *)y;
  if (a->peak != b->peak)
    return a->peak < b->peak ? -1 : 1;
  return a < b ? -1 : a > b;
}

/* The devices by peak, smallest first; median = the lower middle one (a real device, so that
 * the difference to the largest can be attributed to buffers). */
typedef struct ranking {
  device_list_t list;
  device_peak_t **by_peak;
  const device_peak_t *smallest, *median, *largest;
} ranking_t;

static void ranking_free(ranking_t *r) {
  free(r->list.d);
  free(r->by_peak);
}

static hbm_status_t rank(const hbm_profile_t *const *profiles, const char *const *names, size_t n,
                         ranking_t *r) {
  memset(r, 0, sizeof *r);
  if (!collect(profiles, names, n, &r->list) ||
      !(r->by_peak = malloc((r->list.n + 1) * sizeof *r->by_peak))) {
    ranking_free(r);
    return hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory summarizing devices");
  }
  for (size_t i = 0; i < r->list.n; i++)
    r->by_peak[i] = &r->list.d[i];
  qsort(r->by_peak, r->list.n, sizeof *r->by_peak, cmp_peak);
  if (r->list.n) {
    r->smallest = r->by_peak[0];
    r->median = r->by_peak[(r->list.n - 1) / 2];
    size_t top = r->list.n - 1; /* among equal peaks, the first device is named */
    while (top > 0 && r->by_peak[top - 1]->peak == r->by_peak[top]->peak)
      top--;
    r->largest = r->by_peak[top];
  }
  return HBM_OK;
}

size_t hbm_report_device_count(const hbm_profile_t *const *profiles, const char *const *names,
                               size_t n) {
  device_list_t l = {.count_only = true};
  size_t count = collect(profiles, names, n, &l) ? l.n : 0;
  free(l.d);
  return count;
}

/* The diff of the median device's peak against the largest's; NULL when they peak alike.
 * Only the buffers at the two peaks are compared (hbm__diff_new_peaks): that is the
 * question asked, and a profile read from its index keeps exactly those, so none is read
 * whole for it. */
typedef struct difference {
  hbm_diff_t *diff;
  hbm_analysis_t *an[2];
} difference_t;

static void difference(const ranking_t *r, difference_t *d) {
  *d = (difference_t){0};
  if (r->largest->peak == r->median->peak)
    return;
  const device_peak_t *dev[2] = {r->median, r->largest};
  for (int s = 0; s < 2; s++)
    if (!(d->an[s] = hbm_analyze(dev[s]->p, dev[s]->space)))
      return;
  d->diff = hbm__diff_new_peaks(d->an[0], d->an[1]);
}

static void free_difference(difference_t *d) {
  hbm_diff_free(d->diff);
  hbm_analysis_free(d->an[0]);
  hbm_analysis_free(d->an[1]);
}

/* A row's reason in the summary's words (A the median, B the largest). */
static const char *device_reason(hbm_diff_reason_t reason) {
  switch (reason) {
  case HBM_DIFF_ONLY_AT_B_PEAK: return "only at the largest's peak";
  case HBM_DIFF_ONLY_AT_A_PEAK: return "only at the median's peak";
  default: return hbm_diff_reason_name(reason);
  }
}

static const char *space_of(const device_peak_t *d) {
  const hbm_space_info_t *s = hbm_profile_space(d->p, d->space);
  return s && s->device ? s->device : "-";
}

static void text_device(FILE *out, const char *role, const device_peak_t *d) {
  char b[32];
  fprintf(out, "  %-9s %10s  %s", role, hbm_format_bytes(d->peak, b, sizeof b), d->label);
  if (d->device >= 0)
    fprintf(out, " (%s %s)", d->runtime ? "allocator" : "program",
            d->runtime ? hbm_profile_space(d->p, d->space)->name : space_of(d));
  fputc('\n', out);
}

static void text_bars(FILE *out, const ranking_t *r) {
  fprintf(out, "\n  peak per device\n");
  for (size_t i = 0; i < r->list.n; i++) {
    const device_peak_t *d = &r->list.d[i];
    int cols = r->largest->peak
                   ? (int)((double)d->peak / (double)r->largest->peak * BAR_COLUMNS + 0.5)
                   : 0;
    char b[32];
    fprintf(out, "    %10s  ", hbm_format_bytes(d->peak, b, sizeof b));
    for (int c = 0; c < BAR_COLUMNS; c++)
      fputs(c < cols ? "█" : " ", out);
    fprintf(out, "  %s%s\n", d->label, d == r->largest ? "  <- largest" : "");
  }
}

static void text_difference(FILE *out, const ranking_t *r) {
  difference_t diff;
  difference(r, &diff);
  hbm_diff_t *d = diff.diff;
  if (!d) {
    if (r->largest->peak == r->median->peak)
      fprintf(out, "\n  every device peaks at the same bytes: nothing sets the largest apart\n");
    else
      fprintf(out, "\n  the largest against the median: not compared (%s)\n", hbm_last_error());
    free_difference(&diff);
    return;
  }
  size_t n;
  const hbm_diff_row_t *rows = hbm_diff_rows(d, HBM_DIFF_BY_OP, &n);
  char c[32];
  int64_t change = hbm_diff_change(d);
  fprintf(out,
          "\n  what the largest holds at its peak beyond the median's (%s%s; the buffers at the "
          "two peaks, paired as `hbm diff` pairs them)\n",
          change >= 0 ? "+" : "-",
          hbm_format_bytes(change >= 0 ? (uint64_t)change : (uint64_t)-change, c, sizeof c));
  for (size_t i = 0; i < n && i < DIFF_ROWS; i++) {
    char delta[32];
    int64_t v = rows[i].delta;
    fprintf(out, "    %s%-10s  %-28s %s\n", v >= 0 ? "+" : "-",
            hbm_format_bytes(v >= 0 ? (uint64_t)v : (uint64_t)-v, delta, sizeof delta),
            device_reason(rows[i].reason), rows[i].key);
  }
  if (n > DIFF_ROWS)
    fprintf(out, "    ... and %zu more rows (hbm diff shows them all)\n", n - DIFF_ROWS);
  free_difference(&diff);
}

hbm_status_t hbm_report_devices_text(const hbm_profile_t *const *profiles, const char *const *names,
                                     size_t n, FILE *out) {
  ranking_t r;
  hbm_status_t st = rank(profiles, names, n, &r);
  if (st != HBM_OK)
    return st;
  if (r.list.n >= 2) {
    char spread[32], pct[48] = "";
    uint64_t over = r.largest->peak - r.median->peak;
    if (r.median->peak)
      snprintf(pct, sizeof pct, ", %.1f%% over the median",
               100.0 * (double)over / (double)r.median->peak);
    fprintf(out, "== %zu devices ==\n", r.list.n);
    text_device(out, "largest", r.largest);
    text_device(out, "median", r.median);
    text_device(out, "smallest", r.smallest);
    fprintf(out, "  spread    %10s  (largest - smallest%s)\n",
            hbm_format_bytes(r.largest->peak - r.smallest->peak, spread, sizeof spread), pct);
    text_bars(out, &r);
    text_difference(out, &r);
    fputc('\n', out);
  }
  ranking_free(&r);
  if (ferror(out))
    return hbm__error(HBM_ERR_IO, "cannot write the device summary");
  return HBM_OK;
}

static json_t *device_json(const device_peak_t *d, const char *const *names) {
  const hbm_space_info_t *s = hbm_profile_space(d->p, d->space);
  json_t *o =
      json_pack("{s:o, s:o, s:o, s:i, s:o, s:I}", "label", hbm__json_string(d->label), "profile",
                hbm__json_string(names ? names[d->file] : NULL), "space",
                hbm__json_string(s ? s->name : NULL), "space_index", d->space, "space_device",
                hbm__json_string(s ? s->device : NULL), "peak_bytes", (json_int_t)d->peak);
  if (o && d->device >= 0) {
    json_object_set_new(o, "device", json_integer((json_int_t)d->device));
    json_object_set_new(o, "programs", json_integer((json_int_t)d->programs));
    json_object_set_new(o, "source", json_string(d->runtime ? "allocator" : "program"));
  }
  return o;
}

json_t *hbm__devices_json(const hbm_profile_t *const *profiles, const char *const *names,
                          size_t n) {
  ranking_t r;
  if (rank(profiles, names, n, &r) != HBM_OK)
    return NULL;
  json_t *root = json_object(), *all = json_array();
  for (size_t i = 0; i < r.list.n; i++)
    json_array_append_new(all, device_json(&r.list.d[i], names));
  json_object_set_new(root, "count", json_integer((json_int_t)r.list.n));
  json_object_set_new(root, "per_device", all);
  if (r.list.n) {
    json_object_set_new(root, "largest", device_json(r.largest, names));
    json_object_set_new(root, "median", device_json(r.median, names));
    json_object_set_new(root, "smallest", device_json(r.smallest, names));
    json_object_set_new(root, "spread_bytes",
                        json_integer((json_int_t)(r.largest->peak - r.smallest->peak)));
    difference_t diff;
    difference(&r, &diff);
    const char *labels[2] = {r.median->label, r.largest->label};
    json_object_set_new(root, "difference",
                        diff.diff ? hbm__diff_to_json(diff.diff, labels, DIFF_ROWS) : json_null());
    free_difference(&diff);
  }
  ranking_free(&r);
  return root;
}

hbm_status_t hbm_report_devices_json(const hbm_profile_t *const *profiles, const char *const *names,
                                     size_t n, FILE *out) {
  json_t *root = hbm__devices_json(profiles, names, n);
  if (!root)
    return hbm_last_status() != HBM_OK ? hbm_last_status()
                                       : hbm__error(HBM_ERR_HOST_MEMORY, "out of host memory");
  return hbm__write_json(out, root, "device summary");
}
