/* fuzz_oom_module.c — `hbm explain --module` (src/import/oom_text_module.c) on any bytes: the
 * input is an OOM text, then a module's HLO, its buffer-assignment and its live-range dump,
 * separated by lines "=====". They are written as one module of an XLA dump directory (made
 * once per process, rewritten for every input) and the text is explained with it: a module
 * that does not parse, a live-range line that names nothing, a size no allocation has must
 * give notes, never a crash, and a text that explains must still explain, write JSON and
 * become a profile. */
#include "hbm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const parts[] = {".txt", "-buffer-assignment.txt", "-live-range.txt"};

static char dir[64];

static void remove_dump(void) {
  char path[160];
  for (size_t k = 0; k < sizeof parts / sizeof *parts; k++) {
    snprintf(path, sizeof path, "%s/module_0001.jit_f.cpu_after_optimizations%s", dir, parts[k]);
    unlink(path);
  }
  rmdir(dir);
}

static const char *dump_dir(void) {
  if (!dir[0]) {
    strcpy(dir, "/tmp/hbm-fuzz-oom-module-XXXXXX");
    if (!mkdtemp(dir))
      abort();
    atexit(remove_dump);
  }
  return dir;
}

/* Writes part k (bytes [p, end)) as the dump's module file k. */
static void write_part(int k, const uint8_t *p, const uint8_t *end) {
  char path[160];
  snprintf(path, sizeof path, "%s/module_0001.jit_f.cpu_after_optimizations%s", dump_dir(),
           parts[k]);
  FILE *f = fopen(path, "wb");
  if (!f || (end > p && fwrite(p, 1, (size_t)(end - p), f) != (size_t)(end - p)))
    abort();
  fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char sep[] = "\n=====\n";
  const uint8_t *end = data + size, *cut[4] = {data, end, end, end};
  int n = 1;
  for (const uint8_t *p = data; n < 4 && p + sizeof sep - 1 <= end; p++)
    if (!memcmp(p, sep, sizeof sep - 1)) {
      cut[n++] = p;
      p += sizeof sep - 2;
    }
  for (int k = 0; k < 3; k++)
    write_part(k, cut[k + 1] == end ? end : cut[k + 1] + sizeof sep - 1,
               k + 2 < 4 ? cut[k + 2] : end);
  hbm_oom_text_t *t = hbm_oom_text_parse((const char *)data, (size_t)(cut[1] - data), "fuzz.txt");
  if (!t)
    return 0;
  if (hbm_oom_text_add_module(t, dump_dir()) != HBM_OK)
    abort(); /* the directory holds a module: a bad one is a note, not an error */
  FILE *sink = fopen("/dev/null", "w");
  if (!sink || hbm_oom_text_explain(t, sink) != HBM_OK || hbm_oom_text_json(t, sink) != HBM_OK)
    abort();
  fclose(sink);
  hbm_profile_t *p = hbm_oom_text_to_profile(t, "fuzz.txt");
  if (!p)
    abort();
  hbm_analysis_free(hbm_analyze(p, 0));
  hbm_profile_free(p);
  hbm_oom_text_free(t);
  return 0;
}
