/* fuzz_options.c — the environment-variable parser (src/alloc/options.c). The input is read
 * as lines "NAME=VALUE"; a first byte of 0xff instead picks a variable by the next byte and
 * gives it the rest as its value, so byte-level mutations reach every parser. Each value is
 * set with hbm_config_set; whatever is accepted must leave a configuration that validates,
 * has a mode, and prints every field. */
#include "hbm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void set_one(hbm_config_t *cfg, const char *name, const char *value) {
  hbm_config_t before = *cfg;
  if (hbm_config_set(cfg, name, value, HBM_ORIGIN_ENV) != HBM_OK) {
    if (memcmp(&before, cfg, sizeof before) != 0)
      abort(); /* a refused value must change nothing */
    if (!hbm_last_error()[0])
      abort(); /* and must say why */
  }
}

static void check(const hbm_config_t *cfg) {
  char buf[2048];
  hbm_config_validate(cfg);
  if ((unsigned)hbm_config_mode(cfg) >= HBM_MODE_COUNT)
    abort();
  for (int f = 0; f < HBM_CFG_COUNT; f++) {
    hbm_config_setting(cfg, (hbm_config_field_t)f, buf, sizeof buf);
    hbm_config_origin(cfg, (hbm_config_field_t)f, buf, sizeof buf);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text)
    return 0;
  memcpy(text, data, size);
  text[size] = '\0';
  hbm_config_t cfg;
  hbm_config_default(&cfg);
  size_t n_vars;
  const hbm_variable_t *vars = hbm_config_variables(&n_vars);
  if (size >= 2 && data[0] == 0xff) {
    set_one(&cfg, vars[data[1] % n_vars].name, text + 2);
  } else {
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
      char *eq = strchr(line, '=');
      if (!eq)
        continue;
      *eq = '\0';
      set_one(&cfg, line, eq + 1);
    }
  }
  check(&cfg);
  hbm_mode_t mode;
  hbm_mode_parse(text, &mode);
  free(text);
  return 0;
}
