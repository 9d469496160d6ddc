/* fuzz_index.c — the profile index reader (src/profile/index_read.c) on any bytes. The input is
 * an index's body; this driver puts a header in front that names a made-up profile file and
 * carries the body's checksums, so mutations get past the checksums and reach the sections.
 * Whatever is read must be safe to use as the summary profile it claims to be: both reports,
 * every space's timeline at a few resolutions, the step times, labels and ops. Any other input
 * is refused, never a crash. */
#include "hbm.h"
#include "profile/index.h"
#include "profile/trace_format.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static void use(const hbm_profile_t *p) {
  FILE *null = fopen("/dev/null", "w");
  if (null) {
    hbm_report_json(p, -1, null);
    hbm_report_text(p, -1, 80, null);
    fclose(null);
  }
  hbm_timeline_point_t pts[64];
  int64_t n = hbm_profile_step_count(p);
  for (int s = 0; s < hbm_profile_space_count(p); s++) {
    hbm_analysis_t *a = hbm_analyze(p, s);
    if (!a)
      continue;
    hbm_analysis_timeline(a, 0, n, 64, pts);
    hbm_analysis_timeline(a, n / 3, n / 3 + 50, 7, pts);
    hbm_analysis_bytes_at(a, n - 1);
    hbm_analysis_free(a);
  }
  for (int64_t s = 0; s < n && s < 100; s++) {
    hbm_profile_step_time(p, s);
    hbm_profile_step_label(p, s);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > (8u << 20))
    return 0;
  uint8_t *file = malloc(HBM_INDEX_HEADER + size + 1);
  if (!file)
    return 0;
  struct stat st;
  memset(&st, 0, sizeof st);
  st.st_size = 12345, st.st_ino = 7, st.st_mtim.tv_sec = 1700000000;
  memset(file, 0, HBM_INDEX_HEADER);
  memcpy(file, HBM_INDEX_MAGIC, 8);
  hbm__put_le32(file + 8, HBM_INDEX_VERSION);
  hbm__put_le32(file + 12, HBM_TRACE_VERSION);
  put64(file + 16, (uint64_t)st.st_size);
  put64(file + 24, (uint64_t)st.st_mtim.tv_sec * 1000000000ull);
  put64(file + 32, (uint64_t)st.st_ino);
  put64(file + 40, size);
  memcpy(file + HBM_INDEX_HEADER, data, size);
  hbm__put_le32(file + 48, hbm__crc32(0, file + HBM_INDEX_HEADER, size));
  hbm__put_le32(file + 52, hbm__crc32(0, file, 52));
  hbm_profile_t *p = hbm__index_parse(file, HBM_INDEX_HEADER + size, &st, false);
  if (p) {
    use(p);
    hbm_profile_free(p);
  }
  free(file);
  return 0;
}
