/* fuzz_select.c — the selector of `hbm diff` (src/import/select.c: PATH#SPACE@STEP,
 * PATH@FROM:TO) on any text after the path of a small profile with two memory spaces and two
 * marked training steps, written once: it selects or says why not, never crashes; what it
 * selects is analysed and diffed against the whole profile, and every table of the diff must
 * add up to the change of the peak (src/profile/diff.c). */
#include "hbm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[64];

static void add(hbm_profile_t *p, int space, uint64_t address, uint64_t size, const char *op) {
  hbm_tag_t tag = {.op = op};
  if (hbm_profile_alloc_at(p, hbm_profile_add_step(p, 0, NULL), space, address, size, &tag) < 0)
    abort();
}

static void marker(hbm_profile_t *p, hbm_marker_kind_t kind, int64_t step) {
  hbm_marker_t m = {.step = hbm_profile_step_count(p), .kind = kind, .value = step};
  if (hbm_profile_add_marker(p, &m) != HBM_OK)
    abort();
}

static void write_profile(void) {
  snprintf(path, sizeof path, "/tmp/hbm-fuzz-select-%ld.hbmtrace", (long)getpid());
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, "fuzz");
  if (!p || hbm_profile_add_space(p, "HBM", "sim0", 0, 0) != 0 ||
      hbm_profile_add_space(p, "HBM", "sim1", 0, 0) != 1)
    abort();
  for (int step = 1; step <= 2; step++) {
    marker(p, HBM_MARKER_STEP_BEGIN, step);
    add(p, 0, 0x100, 100, "a");
    add(p, 0, 0x200, 200u * (unsigned)step, "b");
    add(p, 1, 0x300, 50, "c");
    if (hbm_profile_free_at(p, hbm_profile_add_step(p, 0, NULL), 0, 0x100) != HBM_OK ||
        hbm_profile_free_at(p, hbm_profile_add_step(p, 0, NULL), 0, 0x200) != HBM_OK ||
        hbm_profile_free_at(p, hbm_profile_add_step(p, 0, NULL), 1, 0x300) != HBM_OK)
      abort();
    marker(p, HBM_MARKER_STEP_END, step);
  }
  if (hbm_profile_finish(p) != HBM_OK || hbm_profile_save(p, path) != HBM_OK)
    abort();
  hbm_profile_free(p);
}

static void remove_profile(void) { unlink(path); }

static void diff_against_whole(const hbm_selection_t *sel) {
  hbm_profile_t *whole = hbm_profile_load(path);
  hbm_analysis_t *a = whole ? hbm_analyze(whole, 0) : NULL;
  hbm_analysis_t *b = hbm_analyze(sel->profile, sel->space);
  hbm_diff_t *d = a && b ? hbm_diff_new(a, b) : NULL;
  if (!d)
    abort();
  for (int by = 0; by < HBM_DIFF_BY_COUNT; by++) {
    size_t n;
    const hbm_diff_row_t *rows = hbm_diff_rows(d, (hbm_diff_by_t)by, &n);
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++)
      sum += rows[i].delta;
    if (sum != hbm_diff_change(d))
      abort();
  }
  hbm_diff_free(d);
  hbm_analysis_free(a);
  hbm_analysis_free(b);
  hbm_profile_free(whole);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!path[0]) {
    write_profile();
    atexit(remove_profile);
  }
  char spec[256];
  size_t n = size < sizeof spec - sizeof path ? size : sizeof spec - sizeof path;
  size_t at = (size_t)snprintf(spec, sizeof spec, "%s", path);
  memcpy(spec + at, data, n);
  spec[at + n] = '\0';
  hbm_selection_t sel;
  if (hbm_profile_select(spec, &sel) != HBM_OK) {
    if (!hbm_last_error()[0])
      abort(); /* every refusal says why */
    return 0;
  }
  if (sel.space < 0 || sel.space >= hbm_profile_space_count(sel.profile))
    abort();
  diff_against_whole(&sel);
  hbm_selection_free(&sel);
  return 0;
}
