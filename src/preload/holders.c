/* holders.c — who else holds a GPU's memory under `hbm run`: the processes the driver's
 * management library (NVML, loaded at run time when present, src/alloc/device/device_cuda.c) names,
 * with their bytes, written into the profile as a marker when hbm first serves the GPU and
 * again at exit. `hbm run`'s summary and `hbm report` show them; without NVML, or where NVML
 * does not say (containers), the marker says what is unaccounted for instead. */
#include "alloc/alloc.h"
#include "preload/preload.h"

#include <stdio.h>

#define MAX_HOLDERS 64

void preload_note_holders(hbm_device_t *dev, const char *when) {
  hbm__holder_t h[MAX_HOLDERS];
  preload_inside++;
  size_t n = hbm__device_holders(dev->phys, h, MAX_HOLDERS);
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  for (size_t i = 0; i < n && i < MAX_HOLDERS; i++) {
    char b[32];
    hbm_format_bytes(h[i].bytes, b, sizeof b);
    if (h[i].pid > 0 && !h[i].self && !h[i].same_process)
      hbm_strbuf_printf(&sb, "%spid %d holds %s (%llu bytes)", sb.len ? "; " : "", h[i].pid, b,
                        (unsigned long long)h[i].bytes);
    else if (h[i].pid == HBM__HOLDER_UNKNOWN)
      hbm_strbuf_printf(&sb, "%s%s (%llu bytes) held by no process NVML names", sb.len ? "; " : "",
                        b, (unsigned long long)h[i].bytes);
  }
  if (sb.len && !sb.failed) {
    char text[4096];
    snprintf(text, sizeof text, "%s %s: other processes on %s: %s", PRELOAD_HOLDERS_MARK, when,
             hbm_device_name(dev), hbm_strbuf_str(&sb));
    hbm_profiler_marker(text);
  }
  hbm_strbuf_free(&sb);
  preload_inside--;
}
