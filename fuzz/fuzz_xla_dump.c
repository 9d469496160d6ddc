/* fuzz_xla_dump.c — the readers of XLA's dumps (src/hlo/xla_dump.c): buffer assignments and
 * memory usage reports, old and new forms. Inputs that do not start like a dump get a
 * "BufferAssignment:" or "Memory Space:" first line (chosen by their first byte) so every
 * mutation reaches a reader. Refusals must say where; accepted dumps must give a profile that
 * analyses and reports. */
#include "hbm.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *heads[] = {"BufferAssignment:\n", "Memory Space: default (color=0)\n",
                                "Total bytes used: 0 (0B)\n"};
  const char *text = (const char *)data;
  bool dump = size > 10 && (!memcmp(text, "BufferAssi", 10) || !memcmp(text, "allocation", 10) ||
                            !memcmp(text, "Memory Spa", 10) || !memcmp(text, "Total byte", 10));
  char *buf = NULL;
  if (!dump) {
    const char *head = heads[size ? data[0] % 3 : 0];
    size_t h = strlen(head);
    buf = malloc(h + size + 1);
    if (!buf)
      return 0;
    memcpy(buf, head, h);
    memcpy(buf + h, data, size);
    text = buf;
    size += h;
  }
  hbm_plan_options_t opt = {.memory = 1 << 20};
  hbm_plan_t *plan = hbm_plan_text(text, size, "fuzz.txt", &opt);
  if (!plan) {
    if (hbm_last_status() == HBM_ERR_PARSE && !strstr(hbm_last_error(), "fuzz.txt:"))
      abort();
  } else {
    FILE *null = fopen("/dev/null", "w");
    if (null) {
      hbm_plan_report_text(plan, null);
      hbm_plan_report_json(plan, null);
      fclose(null);
    }
    hbm_analysis_t *a = hbm_analyze(hbm_plan_profile(plan), 0);
    hbm_analysis_free(a);
    hbm_plan_free(plan);
  }
  free(buf);
  return 0;
}
