/* cmd_info.c — `hbm info [--json]`: the devices this machine offers (the simulated one
 * always, CUDA when a GPU answers) with their total and free memory, and the configuration
 * an hbm program started here would run with: device, mode, limit in bytes, and where each
 * setting came from (a variable of the environment, or the default). Opening a device to
 * read its memory takes nothing from it. */
#include "alloc/alloc.h" /* what backs each mode on the device (its ops) */
#include "cli.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct device_probe {
  const char *kind; /* "sim" / "cuda" */
  bool available;
  char name[160];
  uint64_t total, free_bytes, limit;
  char note[512];                   /* why it was chosen (auto) */
  char error[512];                  /* why it is not available */
  bool virtual_memory, native_pool; /* what the modes are built on */
} device_probe_t;

/* What each mode runs on with this device: "growth (reserved range)", "async (cuMemPool)"... */
static const char *mode_basis(const device_probe_t *d, hbm_mode_t mode) {
  switch (mode) {
  case HBM_MODE_BFC: return "one region taken at the first allocation";
  case HBM_MODE_GROWTH:
    return d->virtual_memory ? "a reserved range, committed as it grows"
                             : "doubling regions (no virtual memory)";
  case HBM_MODE_PLATFORM: return "a region per allocation";
  case HBM_MODE_ASYNC:
    return d->native_pool ? "the driver's stream-ordered pool (cuMemPool)"
                          : "hbm's own stream-ordered pool";
  case HBM_MODE_EXPANDABLE:
    return d->virtual_memory ? "granules mapped on demand"
                             : "growth by regions (no virtual memory)";
  case HBM_MODE_LEARN:
    return d->virtual_memory ? "granules mapped on demand; the step served from its plan"
                             : "one region taken at the first allocation (no virtual memory)";
  case HBM_MODE_COUNT: break;
  }
  return "";
}

/* Opens the device cfg names, without profiling and in a mode that takes nothing up front,
 * and reads its memory. */
static void probe(const hbm_config_t *cfg, hbm_device_kind_t kind, device_probe_t *out) {
  hbm_config_t c = *cfg;
  c.device = kind;
  c.profile_dir[0] = '\0';
  hbm_config_set_mode(&c, HBM_MODE_PLATFORM, HBM_ORIGIN_FLAG);
  memset(out, 0, sizeof *out);
  hbm_device_t *dev = hbm_open(&c);
  if (!dev) {
    snprintf(out->error, sizeof out->error, "%s", hbm_last_error());
    out->kind = kind == HBM_DEVICE_CUDA ? "cuda" : "sim";
    return;
  }
  hbm_stats_t stats;
  out->available = hbm_device_memory(dev, &out->total, &out->free_bytes) == HBM_OK &&
                   hbm_get_stats(dev, &stats) == HBM_OK;
  if (!out->available)
    snprintf(out->error, sizeof out->error, "%s", hbm_last_error());
  out->limit = stats.bytes_limit;
  out->kind = hbm_device_kind(dev) == HBM_DEVICE_CUDA ? "cuda" : "sim";
  snprintf(out->name, sizeof out->name, "%s", hbm_device_name(dev));
  snprintf(out->note, sizeof out->note, "%s", hbm_device_note(dev));
  out->virtual_memory = dev->phys->ops->va_reserve != NULL;
  out->native_pool = dev->phys->ops->pool_create != NULL;
  hbm_close(dev);
}

static const char *origin_word(const hbm_config_t *cfg, hbm_config_field_t f) {
  switch (cfg->origin[f]) {
  case HBM_ORIGIN_ENV: return "environment";
  case HBM_ORIGIN_CODE: return "code";
  case HBM_ORIGIN_FLAG: return "command line";
  default: return "default";
  }
}

static const char *const field_names[HBM_CFG_COUNT] = {
    "device",         "ordinal",    "allocator",  "preallocate", "mem_fraction",
    "async_prealloc", "expandable", "sim_memory", "sim_name",    "profile_dir"};

static void print_text(const hbm_config_t *cfg, const device_probe_t *devices, size_t n,
                       const device_probe_t *chosen) {
  char a[32], b[32], s[1200];
  printf("hbm %s\n\ndevices:\n", HBM_VERSION);
  for (size_t i = 0; i < n; i++) {
    const device_probe_t *d = &devices[i];
    if (d->available)
      printf("  %-5s %-28s total %llu bytes (%s), free %llu bytes (%s)\n", d->kind, d->name,
             (unsigned long long)d->total, hbm_format_bytes(d->total, a, sizeof a),
             (unsigned long long)d->free_bytes, hbm_format_bytes(d->free_bytes, b, sizeof b));
    else
      printf("  %-5s not available: %s\n", d->kind, d->error);
  }
  printf("\nconfiguration:\n");
  if (!chosen->available) {
    printf("  device       not available: %s\n", chosen->error);
  } else {
    printf("  device       %s%s%s%s\n", chosen->name, chosen->note[0] ? " (" : "", chosen->note,
           chosen->note[0] ? ")" : "");
    printf("  mode         %s\n", hbm_mode_name(hbm_config_mode(cfg)));
    printf("  limit        %llu bytes (%s) = %g of %s\n", (unsigned long long)chosen->limit,
           hbm_format_bytes(chosen->limit, a, sizeof a), cfg->mem_fraction,
           hbm_format_bytes(chosen->total, b, sizeof b));
    printf("  preallocate  %s\n", cfg->preallocate ? "true" : "false");
    printf("  modes        (on this device)\n");
    for (int m = 0; m < HBM_MODE_COUNT; m++)
      printf("    %-11s %s\n", hbm_mode_name((hbm_mode_t)m), mode_basis(chosen, (hbm_mode_t)m));
  }
  printf("\nsettings (where each came from):\n");
  for (int f = 0; f < HBM_CFG_COUNT; f++)
    printf("  %-14s %-48s %s\n", field_names[f],
           hbm_config_setting(cfg, (hbm_config_field_t)f, s, sizeof s),
           origin_word(cfg, (hbm_config_field_t)f));
}

static json_t *device_json(const device_probe_t *d) {
  json_t *o = json_object();
  json_object_set_new(o, "kind", json_string(d->kind));
  json_object_set_new(o, "available", json_boolean(d->available));
  if (d->available) {
    json_object_set_new(o, "name", json_string(d->name));
    json_object_set_new(o, "total_bytes", json_integer((json_int_t)d->total));
    json_object_set_new(o, "free_bytes", json_integer((json_int_t)d->free_bytes));
  } else {
    json_object_set_new(o, "error", json_string(d->error));
  }
  return o;
}

static int print_json(const hbm_config_t *cfg, const device_probe_t *devices, size_t n,
                      const device_probe_t *chosen) {
  char s[1200];
  json_t *root = json_object();
  json_object_set_new(root, "version", json_string(HBM_VERSION));
  json_object_set_new(root, "device", chosen->available ? json_string(chosen->name) : json_null());
  json_object_set_new(root, "device_kind", json_string(chosen->kind));
  if (chosen->note[0])
    json_object_set_new(root, "device_note", json_string(chosen->note));
  if (!chosen->available)
    json_object_set_new(root, "device_error", json_string(chosen->error));
  json_object_set_new(root, "total_bytes", json_integer((json_int_t)chosen->total));
  json_object_set_new(root, "free_bytes", json_integer((json_int_t)chosen->free_bytes));
  json_object_set_new(root, "mode", json_string(hbm_mode_name(hbm_config_mode(cfg))));
  json_object_set_new(root, "limit_bytes", json_integer((json_int_t)chosen->limit));
  json_object_set_new(root, "preallocate", json_boolean(cfg->preallocate));
  json_object_set_new(root, "mem_fraction", json_real(cfg->mem_fraction));
  if (chosen->available) {
    json_t *modes = json_object();
    for (int m = 0; m < HBM_MODE_COUNT; m++)
      json_object_set_new(modes, hbm_mode_name((hbm_mode_t)m),
                          json_string(mode_basis(chosen, (hbm_mode_t)m)));
    json_object_set_new(root, "modes", modes);
  }
  json_t *list = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(list, device_json(&devices[i]));
  json_object_set_new(root, "devices", list);
  json_t *settings = json_object();
  for (int f = 0; f < HBM_CFG_COUNT; f++) {
    json_t *o = json_object();
    json_object_set_new(o, "setting",
                        json_string(hbm_config_setting(cfg, (hbm_config_field_t)f, s, sizeof s)));
    json_object_set_new(o, "origin", json_string(origin_word(cfg, (hbm_config_field_t)f)));
    json_object_set_new(settings, field_names[f], o);
  }
  json_object_set_new(root, "settings", settings);
  int rc = json_dumpf(root, stdout, JSON_INDENT(2)) == 0 ? 0 : 1;
  putchar('\n');
  json_decref(root);
  return rc;
}

int hbm_cmd_info(int argc, char **argv) {
  bool json = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) {
      json = true;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: hbm info [--json]\n\nThe devices (sim always, cuda when a GPU answers), "
             "their total and free memory,\nand the effective allocator configuration with "
             "where each setting came from.\n");
      return 0;
    } else {
      return cli_fail("info", 2, "unknown option '%s' (usage: hbm info [--json])", argv[i]);
    }
  }
  hbm_config_t cfg;
  if (hbm_config_from_env(&cfg) != HBM_OK)
    return cli_fail("info", 2, "%s", hbm_last_error());
  device_probe_t devices[2], chosen;
  probe(&cfg, HBM_DEVICE_SIM, &devices[0]);
  probe(&cfg, HBM_DEVICE_CUDA, &devices[1]);
  probe(&cfg, cfg.device, &chosen);
  if (json)
    return print_json(&cfg, devices, 2, &chosen) || !chosen.available;
  print_text(&cfg, devices, 2, &chosen);
  return chosen.available ? 0 : 1;
}
