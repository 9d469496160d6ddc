/* units.c — byte sizes in and out: "16GiB", "80GB", "1073741824" for HBM_SIM_MEMORY and
 * --memory flags, and human-readable sizes for reports and messages. */
#include "base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct unit_suffix {
  const char *name;
  double factor;
} unit_suffix_t;

static const unit_suffix_t size_suffixes[] = {
    {"", 1.0},
    {"B", 1.0},
    {"K", 1e3},
    {"KB", 1e3},
    {"KiB", 1024.0},
    {"M", 1e6},
    {"MB", 1e6},
    {"MiB", 1048576.0},
    {"G", 1e9},
    {"GB", 1e9},
    {"GiB", 1073741824.0},
    {"T", 1e12},
    {"TB", 1e12},
    {"TiB", 1099511627776.0},
};

hbm_status_t hbm_parse_size(const char *text, const char *what, uint64_t *out) {
  const char *accepted = "a byte count such as 1073741824, 16GiB, 80GB or 512MiB";
  if (!what)
    what = "size";
  if (!text || !*text)
    return hbm__error(HBM_ERR_INVALID, "%s: empty value; expected %s", what, accepted);
  const char *p = text;
  while (isspace((unsigned char)*p))
    p++;
  /* Plain decimal only: strtod alone would also take hex, "inf" and exponents. */
  size_t digits = strspn(p, "0123456789.");
  if (digits == 0 || memchr(p, '.', digits) != memrchr(p, '.', digits))
    return hbm__error(HBM_ERR_INVALID, "%s: invalid size '%s'; expected %s", what, text, accepted);
  errno = 0;
  char *end;
  double number = strtod(p, &end);
  if (errno || end != p + digits || !isfinite(number) || number < 0)
    return hbm__error(HBM_ERR_INVALID, "%s: invalid size '%s'; expected %s", what, text, accepted);
  while (isspace((unsigned char)*end))
    end++;
  size_t suffix_len = strlen(end);
  while (suffix_len && isspace((unsigned char)end[suffix_len - 1]))
    suffix_len--;
  for (size_t i = 0; i < HBM_ARRAY_LEN(size_suffixes); i++) {
    const char *name = size_suffixes[i].name;
    if (strlen(name) != suffix_len || strncasecmp(name, end, suffix_len) != 0)
      continue;
    /* "KiB" vs "KB": case-insensitive match would confuse "kib" and "KIB" only, which
     * both mean the binary unit, so that is harmless. */
    double bytes = number * size_suffixes[i].factor;
    if (bytes >= 18446744073709551615.0)
      return hbm__error(HBM_ERR_INVALID, "%s: size '%s' is too large (at most 16EiB)", what, text);
    if (bytes != floor(bytes))
      return hbm__error(HBM_ERR_INVALID, "%s: size '%s' is not a whole number of bytes", what,
                        text);
    *out = (uint64_t)bytes;
    return HBM_OK;
  }
  return hbm__error(HBM_ERR_INVALID,
                    "%s: unknown unit '%.*s' in '%s'; expected B, KB, MB, GB, "
                    "TB, KiB, MiB, GiB or TiB",
                    what, (int)suffix_len, end, text);
}

char *hbm_format_bytes(uint64_t bytes, char *buf, size_t cap) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes >= HBM_BYTES_MAX) { /* a saturated total: never print it as a plain number */
    snprintf(buf, cap, "≥ 8.00EiB (overflowed)");
    return buf;
  }
  if (bytes < 1024) {
    snprintf(buf, cap, "%lluB", (unsigned long long)bytes);
    return buf;
  }
  double v = (double)bytes;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < HBM_ARRAY_LEN(units)) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, cap, v >= 100.0 ? "%.1f%s" : "%.2f%s", v, units[u]);
  return buf;
}
