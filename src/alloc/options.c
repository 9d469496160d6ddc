/* options.c — the environment variables hbm reads, in one table (name, field, accepted values,
 * default, meaning), and hbm_config_t built from them: the seeds' XLA_PYTHON_CLIENT_* and
 * TF_* variables with the seeds' meaning, plus hbm's own HBM_*. Each variable has one parser
 * that either sets its field (and where it came from) or refuses the value with a message
 * naming the variable, the value and what is accepted. docs/configuration.md shows the same
 * table; a test keeps them in step. */
#include "alloc/alloc.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_SIM_MEMORY (16ull << 30)
#define MIN_SIM_MEMORY (1ull << 20)
#define MAX_SIM_MEMORY (1ull << 50)
#define MAX_ORDINAL 1023

static const char bool_values[] = "true or false (also 1/0, yes/no, on/off)";

/* The table. Index i here is parsers[i] below; origin_var stores i + 1. */
static const hbm_variable_t variables[] = {
    {"XLA_PYTHON_CLIENT_PREALLOCATE", HBM_CFG_PREALLOCATE, bool_values, "true",
     "true: reserve the limit at the first allocation and sub-allocate from it; false: grow "
     "on demand, reuse freed memory, never give it back"},
    {"XLA_PYTHON_CLIENT_MEM_FRACTION", HBM_CFG_MEM_FRACTION,
     "a fraction in (0, 1] such as .75 or 0.5", "0.75",
     "fraction of the device's total memory this process may use (the limit)"},
    {"XLA_PYTHON_CLIENT_ALLOCATOR", HBM_CFG_ALLOCATOR, "default, bfc, platform or cuda_async",
     "default",
     "bfc/default: best-fit with coalescing; platform: exactly what is asked, on demand, "
     "returned at once; cuda_async: stream-ordered growing pool (as TF_GPU_ALLOCATOR="
     "cuda_malloc_async). Wins over TF_GPU_ALLOCATOR unless it is default"},
    {"TF_GPU_ALLOCATOR", HBM_CFG_ALLOCATOR, "cuda_malloc_async, bfc or default", "default",
     "cuda_malloc_async: a stream-ordered memory pool that grows (cudaMallocAsync semantics) "
     "instead of the preallocated BFC allocator"},
    {"TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC", HBM_CFG_ASYNC_PREALLOC,
     "-1 (the default amount) or a size such as 1073741824 or 4GiB", "0",
     "with the async pool: bytes to preallocate at the first allocation; -1 preallocates what "
     "the default (BFC) mode would: the limit; 0: none"},
    {"HBM_DEVICE", HBM_CFG_DEVICE, "auto, sim or cuda", "auto",
     "which device backend: cuda (NVIDIA GPU through libcuda.so.1), sim (simulated device in "
     "host memory), auto (cuda if a GPU answers, else sim)"},
    {"HBM_DEVICE_ORDINAL", HBM_CFG_ORDINAL, "an integer from 0 to 1023", "0",
     "which GPU (CUDA device ordinal)"},
    {"HBM_SIM_MEMORY", HBM_CFG_SIM_MEMORY,
     "a size from 1MiB to 1024TiB such as 16GiB, 80GB or 1073741824", "16GiB",
     "total memory of the simulated device"},
    {"HBM_SIM_NAME", HBM_CFG_SIM_NAME, "1 to 63 letters, digits, '.', '_' or '-'", "sim0",
     "name of the simulated device; processes that set the same name share it (each sees "
     "what the others hold as not free); unset, the device is private to the process"},
    {"HBM_EXPANDABLE", HBM_CFG_EXPANDABLE, bool_values, "false",
     "expandable mode: one virtual range, physical memory mapped in 2 MiB granules on demand "
     "and unmapped when free (works with the default allocator)"},
    {"HBM_PROFILE_DIR", HBM_CFG_PROFILE_DIR, "a directory path (at most 1023 bytes)", "",
     "capture a profile of every device to DIR/plugins/profile/<run>/ (XProf layout)"},
    {"HBM_PLAN", HBM_CFG_PLAN, "step or none", "none",
     "step: mode learn: find the program's repeating step in its allocations, plan the step's "
     "placement offline, serve later steps from the plan (the rest as bfc places it, physical "
     "memory mapped on demand); none: the other variables choose the mode"},
};

enum {
  VAR_PREALLOCATE,
  VAR_MEM_FRACTION,
  VAR_XLA_ALLOCATOR,
  VAR_TF_ALLOCATOR,
  VAR_ASYNC_PREALLOC,
  VAR_DEVICE,
  VAR_ORDINAL,
  VAR_SIM_MEMORY,
  VAR_SIM_NAME,
  VAR_EXPANDABLE,
  VAR_PROFILE_DIR,
  VAR_PLAN,
  VAR_COUNT
};
_Static_assert(VAR_COUNT == HBM_ARRAY_LEN(variables), "one enum entry per variable");

const hbm_variable_t *hbm_config_variables(size_t *count) {
  if (count)
    *count = HBM_ARRAY_LEN(variables);
  return variables;
}

void hbm_config_default(hbm_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->device = HBM_DEVICE_AUTO;
  cfg->ordinal = 0;
  cfg->allocator = HBM_ALLOCATOR_BFC;
  cfg->preallocate = 1;
  cfg->mem_fraction = 0.75;
  cfg->async_prealloc = 0;
  cfg->expandable = 0;
  cfg->sim_memory = DEFAULT_SIM_MEMORY;
  snprintf(cfg->sim_name, sizeof cfg->sim_name, "sim0");
  cfg->profile_dir[0] = '\0';
}

/* ---- value parsers: each sets its field or refuses with the accepted values ---- */

static hbm_status_t refuse(int var, const char *value) {
  return hbm__error(HBM_ERR_INVALID, "%s=%s: invalid value; expected %s", variables[var].name,
                    value, variables[var].values);
}

static void set_origin(hbm_config_t *cfg, int var, hbm_origin_t origin) {
  hbm_config_field_t field = variables[var].field;
  cfg->origin[field] = origin;
  cfg->origin_var[field] = origin == HBM_ORIGIN_DEFAULT ? 0 : (unsigned char)(var + 1);
}

static bool parse_bool(const char *v, int *out) {
  static const char *yes[] = {"true", "1", "yes", "on"};
  static const char *no[] = {"false", "0", "no", "off"};
  for (size_t i = 0; i < HBM_ARRAY_LEN(yes); i++) {
    if (!strcasecmp(v, yes[i]))
      return *out = 1, true;
    if (!strcasecmp(v, no[i]))
      return *out = 0, true;
  }
  return false;
}

/* A plain decimal ("0.5", ".75", "1"): no sign, exponent, hex, inf or nan. */
static bool parse_fraction(const char *v, double *out) {
  size_t digits = strspn(v, "0123456789");
  const char *p = v + digits;
  size_t decimals = 0;
  if (*p == '.') {
    decimals = strspn(p + 1, "0123456789");
    p += 1 + decimals;
  }
  if (*p || digits + decimals == 0 || digits > 32 || decimals > 32)
    return false;
  *out = strtod(v, NULL);
  return true;
}

typedef hbm_status_t (*parser_fn)(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o);

static hbm_status_t parse_preallocate(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o) {
  int b;
  if (!parse_bool(v, &b))
    return refuse(var, v);
  cfg->preallocate = b;
  set_origin(cfg, var, o);
  return HBM_OK;
}

static hbm_status_t parse_mem_fraction(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o) {
  double f;
  if (!parse_fraction(v, &f) || !(f > 0.0 && f <= 1.0))
    return refuse(var, v);
  cfg->mem_fraction = f;
  set_origin(cfg, var, o);
  return HBM_OK;
}

/* XLA_PYTHON_CLIENT_ALLOCATOR: "default" leaves the choice to TF_GPU_ALLOCATOR (as XLA's
 * kDefault does); bfc, platform and cuda_async are explicit and win over it. */
static hbm_status_t parse_xla_allocator(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o) {
  hbm_allocator_kind_t kind;
  if (!strcasecmp(v, "default")) {
    if (cfg->origin_var[HBM_CFG_ALLOCATOR] != VAR_TF_ALLOCATOR + 1) {
      cfg->allocator = HBM_ALLOCATOR_BFC;
      set_origin(cfg, var, HBM_ORIGIN_DEFAULT);
    }
    return HBM_OK;
  }
  if (!strcasecmp(v, "bfc"))
    kind = HBM_ALLOCATOR_BFC;
  else if (!strcasecmp(v, "platform"))
    kind = HBM_ALLOCATOR_PLATFORM;
  else if (!strcasecmp(v, "cuda_async"))
    kind = HBM_ALLOCATOR_ASYNC;
  else
    return refuse(var, v);
  cfg->allocator = kind;
  set_origin(cfg, var, o);
  return HBM_OK;
}

static hbm_status_t parse_tf_allocator(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o) {
  hbm_allocator_kind_t kind;
  if (!strcasecmp(v, "cuda_malloc_async"))
    kind = HBM_ALLOCATOR_ASYNC;
  else if (!strcasecmp(v, "bfc") || !strcasecmp(v, "default"))
    kind = HBM_ALLOCATOR_BFC;
  else
    return refuse(var, v);
  if (cfg->origin_var[HBM_CFG_ALLOCATOR] == VAR_XLA_ALLOCATOR + 1)
    return HBM_OK; /* an explicit XLA_PYTHON_CLIENT_ALLOCATOR wins */
  cfg->allocator = kind;
  set_origin(cfg, var, strcasecmp(v, "default") ? o : HBM_ORIGIN_DEFAULT);
  return HBM_OK;
}

static hbm_status_t parse_async_prealloc(hbm_config_t *cfg, int var, const char *v,
                                         hbm_origin_t o) {
  int64_t bytes;
  if (!strcmp(v, "-1")) {
    bytes = -1;
  } else {
    uint64_t size;
    if (hbm_parse_size(v, variables[var].name, &size) != HBM_OK || size > (uint64_t)INT64_MAX)
      return refuse(var, v);
    bytes = (int64_t)size;
  }
  cfg->async_prealloc = bytes;
  set_origin(cfg, var, o);
  return HBM_OK;
}

static hbm_status_t parse_device(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o) {
  hbm_device_kind_t kind;
  if (!strcasecmp(v, "auto"))
    kind = HBM_DEVICE_AUTO;
  else if (!strcasecmp(v, "sim"))
    kind = HBM_DEVICE_SIM;
  else if (!strcasecmp(v, "cuda"))
    kind = HBM_DEVICE_CUDA;
  else
    return refuse(var, v);
  cfg->device = kind;
  set_origin(cfg, var, o);
  return HBM_OK;
}

static hbm_status_t parse_ordinal(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o) {
  size_t digits = strspn(v, "0123456789");
  if (digits == 0 || v[digits] || digits > 4 || atoi(v) > MAX_ORDINAL)
    return refuse(var, v);
  cfg->ordinal = atoi(v);
  set_origin(cfg, var, o);
  return HBM_OK;
}

static hbm_status_t parse_sim_memory(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o) {
  uint64_t size;
  if (hbm_parse_size(v, variables[var].name, &size) != HBM_OK || size < MIN_SIM_MEMORY ||
      size > MAX_SIM_MEMORY)
    return refuse(var, v);
  cfg->sim_memory = size;
  set_origin(cfg, var, o);
  return HBM_OK;
}

static bool valid_sim_name(const char *v) {
  size_t n = strlen(v);
  if (n == 0 || n > 63)
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)v[i]) && !strchr("._-", v[i]))
      return false;
  return true;
}

static hbm_status_t parse_sim_name(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o) {
  if (!valid_sim_name(v))
    return refuse(var, v);
  snprintf(cfg->sim_name, sizeof cfg->sim_name, "%s", v);
  set_origin(cfg, var, o);
  return HBM_OK;
}

static hbm_status_t parse_expandable(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o) {
  int b;
  if (!parse_bool(v, &b))
    return refuse(var, v);
  cfg->expandable = b;
  set_origin(cfg, var, o);
  return HBM_OK;
}

static hbm_status_t parse_profile_dir(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o) {
  if (strlen(v) >= sizeof cfg->profile_dir)
    return refuse(var, v);
  snprintf(cfg->profile_dir, sizeof cfg->profile_dir, "%s", v);
  set_origin(cfg, var, o);
  return HBM_OK;
}

static hbm_status_t parse_plan(hbm_config_t *cfg, int var, const char *v, hbm_origin_t o) {
  if (strcasecmp(v, "step") && strcasecmp(v, "none"))
    return refuse(var, v);
  cfg->plan_step = !strcasecmp(v, "step");
  set_origin(cfg, var, o);
  return HBM_OK;
}

static const parser_fn parsers[VAR_COUNT] = {
    [VAR_PREALLOCATE] = parse_preallocate,
    [VAR_MEM_FRACTION] = parse_mem_fraction,
    [VAR_XLA_ALLOCATOR] = parse_xla_allocator,
    [VAR_TF_ALLOCATOR] = parse_tf_allocator,
    [VAR_ASYNC_PREALLOC] = parse_async_prealloc,
    [VAR_DEVICE] = parse_device,
    [VAR_ORDINAL] = parse_ordinal,
    [VAR_SIM_MEMORY] = parse_sim_memory,
    [VAR_SIM_NAME] = parse_sim_name,
    [VAR_EXPANDABLE] = parse_expandable,
    [VAR_PROFILE_DIR] = parse_profile_dir,
    [VAR_PLAN] = parse_plan,
};

/* Restores a variable's field to its default (an empty value). */
static void reset_variable(hbm_config_t *cfg, int var) {
  hbm_config_field_t field = variables[var].field;
  if (field == HBM_CFG_ALLOCATOR && cfg->origin_var[field] != var + 1)
    return; /* the other allocator variable set it */
  hbm_config_t defaults;
  hbm_config_default(&defaults);
  switch (field) {
  case HBM_CFG_DEVICE: cfg->device = defaults.device; break;
  case HBM_CFG_ORDINAL: cfg->ordinal = defaults.ordinal; break;
  case HBM_CFG_ALLOCATOR: cfg->allocator = defaults.allocator; break;
  case HBM_CFG_PREALLOCATE: cfg->preallocate = defaults.preallocate; break;
  case HBM_CFG_MEM_FRACTION: cfg->mem_fraction = defaults.mem_fraction; break;
  case HBM_CFG_ASYNC_PREALLOC: cfg->async_prealloc = defaults.async_prealloc; break;
  case HBM_CFG_EXPANDABLE: cfg->expandable = defaults.expandable; break;
  case HBM_CFG_SIM_MEMORY: cfg->sim_memory = defaults.sim_memory; break;
  case HBM_CFG_SIM_NAME: memcpy(cfg->sim_name, defaults.sim_name, sizeof cfg->sim_name); break;
  case HBM_CFG_PROFILE_DIR: cfg->profile_dir[0] = '\0'; break;
  case HBM_CFG_PLAN: cfg->plan_step = defaults.plan_step; break;
  case HBM_CFG_COUNT: break;
  }
  set_origin(cfg, var, HBM_ORIGIN_DEFAULT);
}

static int find_variable(const char *name) {
  for (int i = 0; i < VAR_COUNT; i++)
    if (!strcmp(variables[i].name, name))
      return i;
  return -1;
}

hbm_status_t hbm_config_set(hbm_config_t *cfg, const char *name, const char *value,
                            hbm_origin_t origin) {
  if (!cfg || !name)
    return hbm__error(HBM_ERR_INVALID, "hbm_config_set: NULL configuration or name");
  int var = find_variable(name);
  if (var < 0)
    return hbm__error(HBM_ERR_INVALID, "%s: unknown variable", name);
  if (!value)
    value = "";
  /* Surrounding blanks are a quoting slip, not a different value. */
  char trimmed[1100];
  while (isspace((unsigned char)*value))
    value++;
  size_t n = strlen(value);
  while (n && isspace((unsigned char)value[n - 1]))
    n--;
  if (n >= sizeof trimmed)
    return refuse(var, value);
  memcpy(trimmed, value, n);
  trimmed[n] = '\0';
  if (n == 0) {
    reset_variable(cfg, var);
    return HBM_OK;
  }
  return parsers[var](cfg, var, trimmed, origin);
}

hbm_status_t hbm_config_validate(const hbm_config_t *cfg) {
  if (!cfg)
    return hbm__error(HBM_ERR_INVALID, "configuration is NULL");
  if ((unsigned)cfg->device > HBM_DEVICE_CUDA)
    return hbm__error(HBM_ERR_INVALID, "device kind %d: expected auto, sim or cuda",
                      (int)cfg->device);
  if (cfg->ordinal < 0 || cfg->ordinal > MAX_ORDINAL)
    return hbm__error(HBM_ERR_INVALID, "HBM_DEVICE_ORDINAL=%d: invalid value; expected %s",
                      cfg->ordinal, variables[VAR_ORDINAL].values);
  if ((unsigned)cfg->allocator > HBM_ALLOCATOR_ASYNC)
    return hbm__error(HBM_ERR_INVALID, "allocator kind %d: expected bfc, platform or async",
                      (int)cfg->allocator);
  if (!(cfg->mem_fraction > 0.0 && cfg->mem_fraction <= 1.0))
    return hbm__error(HBM_ERR_INVALID,
                      "XLA_PYTHON_CLIENT_MEM_FRACTION=%g: invalid value; "
                      "expected %s",
                      cfg->mem_fraction, variables[VAR_MEM_FRACTION].values);
  if (cfg->async_prealloc < -1)
    return hbm__error(HBM_ERR_INVALID,
                      "TF_CUDA_MALLOC_ASYNC_SUPPORTED_PREALLOC=%lld: invalid "
                      "value; expected %s",
                      (long long)cfg->async_prealloc, variables[VAR_ASYNC_PREALLOC].values);
  if (cfg->sim_memory < MIN_SIM_MEMORY || cfg->sim_memory > MAX_SIM_MEMORY)
    return hbm__error(HBM_ERR_INVALID, "HBM_SIM_MEMORY=%llu: invalid value; expected %s",
                      (unsigned long long)cfg->sim_memory, variables[VAR_SIM_MEMORY].values);
  if (!memchr(cfg->sim_name, '\0', sizeof cfg->sim_name) || !valid_sim_name(cfg->sim_name))
    return hbm__error(HBM_ERR_INVALID, "HBM_SIM_NAME=%.63s: invalid value; expected %s",
                      cfg->sim_name, variables[VAR_SIM_NAME].values);
  if (!memchr(cfg->profile_dir, '\0', sizeof cfg->profile_dir))
    return hbm__error(HBM_ERR_INVALID, "HBM_PROFILE_DIR: not terminated within 1023 bytes");
  if (cfg->expandable && cfg->allocator != HBM_ALLOCATOR_BFC) {
    char buf[96];
    return hbm__error(HBM_ERR_INVALID,
                      "HBM_EXPANDABLE=true works with the default allocator, "
                      "but %s chose %s; unset one of them",
                      hbm_config_setting(cfg, HBM_CFG_ALLOCATOR, buf, sizeof buf),
                      cfg->allocator == HBM_ALLOCATOR_PLATFORM ? "platform" : "the async pool");
  }
  if (cfg->plan_step && (cfg->expandable || cfg->allocator != HBM_ALLOCATOR_BFC)) {
    char buf[96];
    return hbm__error(HBM_ERR_INVALID,
                      "HBM_PLAN=step places memory itself (mode learn), but %s chose another "
                      "mode; unset one of them",
                      cfg->expandable
                          ? "HBM_EXPANDABLE=true"
                          : hbm_config_setting(cfg, HBM_CFG_ALLOCATOR, buf, sizeof buf));
  }
  return HBM_OK;
}

hbm_status_t hbm_config_from_env(hbm_config_t *cfg) {
  hbm_config_t built;
  hbm_config_default(&built);
  for (int var = 0; var < VAR_COUNT; var++) {
    const char *value = getenv(variables[var].name);
    if (value && hbm_config_set(&built, variables[var].name, value, HBM_ORIGIN_ENV) != HBM_OK)
      return hbm_last_status();
  }
  if (hbm_config_validate(&built) != HBM_OK)
    return hbm_last_status();
  *cfg = built;
  return HBM_OK;
}

hbm_mode_t hbm_config_mode(const hbm_config_t *cfg) {
  if (cfg->plan_step)
    return HBM_MODE_LEARN;
  if (cfg->expandable)
    return HBM_MODE_EXPANDABLE;
  switch (cfg->allocator) {
  case HBM_ALLOCATOR_PLATFORM: return HBM_MODE_PLATFORM;
  case HBM_ALLOCATOR_ASYNC: return HBM_MODE_ASYNC;
  case HBM_ALLOCATOR_BFC: break;
  }
  return cfg->preallocate ? HBM_MODE_BFC : HBM_MODE_GROWTH;
}

static const char *const mode_names[HBM_MODE_COUNT] = {"bfc",   "growth",     "platform",
                                                       "async", "expandable", "learn"};

const char *hbm_mode_name(hbm_mode_t mode) {
  return (unsigned)mode < HBM_MODE_COUNT ? mode_names[mode] : "unknown";
}

hbm_status_t hbm_mode_parse(const char *name, hbm_mode_t *out) {
  for (int m = 0; m < HBM_MODE_COUNT; m++) {
    if (name && !strcasecmp(name, mode_names[m])) {
      *out = (hbm_mode_t)m;
      return HBM_OK;
    }
  }
  return hbm__error(HBM_ERR_INVALID,
                    "mode '%s': expected bfc, growth, platform, async, expandable or "
                    "learn",
                    name ? name : "(null)");
}

void hbm_config_set_mode(hbm_config_t *cfg, hbm_mode_t mode, hbm_origin_t origin) {
  cfg->expandable = mode == HBM_MODE_EXPANDABLE;
  cfg->plan_step = mode == HBM_MODE_LEARN;
  cfg->allocator = mode == HBM_MODE_PLATFORM ? HBM_ALLOCATOR_PLATFORM
                   : mode == HBM_MODE_ASYNC  ? HBM_ALLOCATOR_ASYNC
                                             : HBM_ALLOCATOR_BFC;
  if (mode == HBM_MODE_BFC || mode == HBM_MODE_GROWTH)
    cfg->preallocate = mode == HBM_MODE_BFC;
  const hbm_config_field_t fields[] = {HBM_CFG_ALLOCATOR, HBM_CFG_PREALLOCATE, HBM_CFG_EXPANDABLE,
                                       HBM_CFG_PLAN};
  for (size_t i = 0; i < HBM_ARRAY_LEN(fields); i++) {
    cfg->origin[fields[i]] = origin;
    cfg->origin_var[fields[i]] = 0;
  }
}

/* The variable that set a field, or the field's main variable. */
static int field_variable(const hbm_config_t *cfg, hbm_config_field_t field) {
  int var = cfg->origin_var[field] - 1;
  if (var >= 0 && var < VAR_COUNT && variables[var].field == field)
    return var;
  for (int i = 0; i < VAR_COUNT; i++)
    if (variables[i].field == field)
      return i;
  return 0;
}

const char *hbm_config_origin(const hbm_config_t *cfg, hbm_config_field_t field, char *buf,
                              size_t cap) {
  if ((unsigned)field >= HBM_CFG_COUNT) {
    snprintf(buf, cap, "unknown");
    return buf;
  }
  const char *var = variables[field_variable(cfg, field)].name;
  switch (cfg->origin[field]) {
  case HBM_ORIGIN_ENV: snprintf(buf, cap, "%s (environment)", var); break;
  case HBM_ORIGIN_CODE: snprintf(buf, cap, "code"); break;
  case HBM_ORIGIN_FLAG: snprintf(buf, cap, "command line"); break;
  default: snprintf(buf, cap, "default"); break;
  }
  return buf;
}

/* A size the way a user would write it: "16GiB" when exact, else bytes. */
static void format_exact_size(uint64_t bytes, char *buf, size_t cap) {
  static const char *units[] = {"TiB", "GiB", "MiB", "KiB"};
  for (int i = 0; i < 4; i++) {
    uint64_t unit = 1ull << (10 * (4 - i));
    if (bytes >= unit && bytes % unit == 0) {
      snprintf(buf, cap, "%llu%s", (unsigned long long)(bytes / unit), units[i]);
      return;
    }
  }
  snprintf(buf, cap, "%llu", (unsigned long long)bytes);
}

const char *hbm_config_setting(const hbm_config_t *cfg, hbm_config_field_t field, char *buf,
                               size_t cap) {
  int var = field_variable(cfg, field);
  const char *name = variables[var].name;
  char value[1100];
  static const char *devices[] = {"auto", "sim", "cuda"};
  switch (field) {
  case HBM_CFG_DEVICE:
    snprintf(value, sizeof value, "%s", devices[(unsigned)cfg->device % 3]);
    break;
  case HBM_CFG_ORDINAL: snprintf(value, sizeof value, "%d", cfg->ordinal); break;
  case HBM_CFG_ALLOCATOR:
    if (var == VAR_TF_ALLOCATOR)
      snprintf(value, sizeof value, "%s",
               cfg->allocator == HBM_ALLOCATOR_ASYNC ? "cuda_malloc_async" : "bfc");
    else
      snprintf(value, sizeof value, "%s",
               cfg->allocator == HBM_ALLOCATOR_PLATFORM   ? "platform"
               : cfg->allocator == HBM_ALLOCATOR_ASYNC    ? "cuda_async"
               : cfg->origin[field] == HBM_ORIGIN_DEFAULT ? "default"
                                                          : "bfc");
    break;
  case HBM_CFG_PREALLOCATE:
    snprintf(value, sizeof value, "%s", cfg->preallocate ? "true" : "false");
    break;
  case HBM_CFG_MEM_FRACTION: snprintf(value, sizeof value, "%g", cfg->mem_fraction); break;
  case HBM_CFG_ASYNC_PREALLOC:
    snprintf(value, sizeof value, "%lld", (long long)cfg->async_prealloc);
    break;
  case HBM_CFG_EXPANDABLE:
    snprintf(value, sizeof value, "%s", cfg->expandable ? "true" : "false");
    break;
  case HBM_CFG_SIM_MEMORY: format_exact_size(cfg->sim_memory, value, sizeof value); break;
  case HBM_CFG_SIM_NAME: snprintf(value, sizeof value, "%.63s", cfg->sim_name); break;
  case HBM_CFG_PROFILE_DIR: snprintf(value, sizeof value, "%.1023s", cfg->profile_dir); break;
  case HBM_CFG_PLAN: snprintf(value, sizeof value, "%s", cfg->plan_step ? "step" : "none"); break;
  default: snprintf(value, sizeof value, "?"); break;
  }
  snprintf(buf, cap, "%s=%s", name, value);
  return buf;
}

uint64_t hbm__config_limit(const hbm_config_t *cfg, uint64_t total) {
  double limit = floor(cfg->mem_fraction * (double)total);
  uint64_t bytes = limit >= (double)total ? total : (uint64_t)limit;
  return bytes / HBM__MIN_BLOCK * HBM__MIN_BLOCK;
}

void hbm__config_mark_code_origins(hbm_config_t *cfg) {
  hbm_config_t d;
  hbm_config_default(&d);
  bool differs[HBM_CFG_COUNT] = {
      [HBM_CFG_DEVICE] = cfg->device != d.device,
      [HBM_CFG_ORDINAL] = cfg->ordinal != d.ordinal,
      [HBM_CFG_ALLOCATOR] = cfg->allocator != d.allocator,
      [HBM_CFG_PREALLOCATE] = !cfg->preallocate != !d.preallocate,
      [HBM_CFG_MEM_FRACTION] = cfg->mem_fraction != d.mem_fraction,
      [HBM_CFG_ASYNC_PREALLOC] = cfg->async_prealloc != d.async_prealloc,
      [HBM_CFG_EXPANDABLE] = !cfg->expandable != !d.expandable,
      [HBM_CFG_SIM_MEMORY] = cfg->sim_memory != d.sim_memory,
      [HBM_CFG_SIM_NAME] = strncmp(cfg->sim_name, d.sim_name, sizeof d.sim_name) != 0,
      [HBM_CFG_PROFILE_DIR] = cfg->profile_dir[0] != '\0',
      [HBM_CFG_PLAN] = !cfg->plan_step != !d.plan_step,
  };
  for (int f = 0; f < HBM_CFG_COUNT; f++) {
    if (differs[f] && cfg->origin[f] == HBM_ORIGIN_DEFAULT) {
      cfg->origin[f] = HBM_ORIGIN_CODE;
      cfg->origin_var[f] = 0;
    }
  }
}
