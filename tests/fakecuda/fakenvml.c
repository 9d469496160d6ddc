/* fakenvml.c — a tiny double of NVML (libnvidia-ml.so.1) beside fakecuda.c: who holds a
 * device's memory. This process's usage (its contexts' overhead and its allocations) comes
 * from the fake driver when it is loaded; other processes from FAKECUDA_OTHER_PROCESS.
 * Knobs (read at each call): FAKECUDA_NVML=0 (nvmlInit fails, as without a driver),
 * FAKECUDA_NVML_USAGE=0 (per-process usage NVML_VALUE_NOT_AVAILABLE, as in containers),
 * FAKECUDA_DEVICES, FAKECUDA_MEMORY, FAKECUDA_OTHER_PROCESS as in fakecuda.c. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define NOT_AVAILABLE (~0ull)

typedef int nvmlReturn_t;
typedef struct nvml_device *nvmlDevice_t;
enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
};

typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
typedef struct {
  unsigned pid;
  unsigned long long usedGpuMemory;
  unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

static struct nvml_device { int index; } devices[4] = {{0}, {1}, {2}, {3}};
static int inits;

static long env_long(const char *name, long fallback) {
  const char *s = getenv(name);
  return s && *s ? strtol(s, NULL, 0) : fallback;
}

static unsigned long long parse_bytes(const char *s) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  int shift = *end == 'K' || *end == 'k'   ? 10
              : *end == 'M' || *end == 'm' ? 20
              : *end == 'G' || *end == 'g' ? 30
              : *end == 'T' || *end == 't' ? 40
                                           : 0;
  return v << shift;
}

static int device_count(void) {
  long n = env_long("FAKECUDA_DEVICES", 1);
  return n < 0 ? 0 : n > 4 ? 4 : (int)n;
}

/* The fake driver's figures for device d, when this process has it loaded. */
static void driver_usage(int d, unsigned long long *total, unsigned long long *used,
                         unsigned long long *mine) {
  const char *memory = getenv("FAKECUDA_MEMORY");
  *total = memory && *memory ? parse_bytes(memory) : 2ull << 30;
  *used = *mine = 0;
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!cuda)
    return;
  int (*usage)(int, unsigned long long *, unsigned long long *, unsigned long long *);
  *(void **)&usage = dlsym(cuda, "fakecuda_process_usage");
  if (usage)
    usage(d, total, used, mine);
  dlclose(cuda);
}

/* Other processes from FAKECUDA_OTHER_PROCESS=PID:BYTES[,PID:BYTES]. */
static size_t others(nvmlProcessInfo_t *out, size_t cap) {
  const char *s = getenv("FAKECUDA_OTHER_PROCESS");
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s ? s : "");
  size_t n = 0;
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item;
       item = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(item, ':');
    if (!colon)
      continue;
    if (n < cap)
      out[n] = (nvmlProcessInfo_t){.pid = (unsigned)strtoul(item, NULL, 10),
                                   .usedGpuMemory = parse_bytes(colon + 1)};
    n++;
  }
  return n;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) {
  if (!env_long("FAKECUDA_NVML", 1))
    return NVML_ERROR_DRIVER_NOT_LOADED;
  inits++;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
  if (!inits)
    return NVML_ERROR_UNINITIALIZED;
  inits--;
  return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
  case NVML_SUCCESS: return "Success";
  case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
  case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
  case NVML_ERROR_NOT_FOUND: return "Not Found";
  case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
  case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
  default: return "Unknown Error";
  }
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
  if (!inits)
    return NVML_ERROR_UNINITIALIZED;
  if (!count)
    return NVML_ERROR_INVALID_ARGUMENT;
  *count = (unsigned)device_count();
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
  if (!inits)
    return NVML_ERROR_UNINITIALIZED;
  if (!device || index >= (unsigned)device_count())
    return NVML_ERROR_INVALID_ARGUMENT;
  *device = &devices[index];
  return NVML_SUCCESS;
}

/* fakecuda.c names device d's bus "00000000:%02X:00.0" with 0x10 + d. */
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *device) {
  if (!inits)
    return NVML_ERROR_UNINITIALIZED;
  unsigned domain, number;
  if (!bus || !device || sscanf(bus, "%x:%x", &domain, &number) != 2)
    return NVML_ERROR_INVALID_ARGUMENT;
  int d = (int)number - 0x10;
  if (d < 0 || d >= device_count())
    return NVML_ERROR_NOT_FOUND;
  *device = &devices[d];
  return NVML_SUCCESS;
}

static bool valid(nvmlDevice_t device) {
  return device >= &devices[0] && device < &devices[4] && device->index < device_count();
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
  if (!inits)
    return NVML_ERROR_UNINITIALIZED;
  if (!valid(device) || !memory)
    return NVML_ERROR_INVALID_ARGUMENT;
  unsigned long long total, used, mine;
  driver_usage(device->index, &total, &used, &mine);
  if (!used) { /* the driver is not loaded here: only the others */
    nvmlProcessInfo_t list[8];
    size_t n = others(list, 8);
    for (size_t i = 0; i < n && i < 8; i++)
      used += list[i].usedGpuMemory;
  }
  memory->total = total;
  memory->used = used < total ? used : total;
  memory->free = total - memory->used;
  return NVML_SUCCESS;
}

/* This process (when it holds anything) and the others, as the v3 entry point lists them. */
static nvmlReturn_t processes(nvmlDevice_t device, unsigned *count, nvmlProcessInfo_t *out) {
  if (!inits)
    return NVML_ERROR_UNINITIALIZED;
  if (!valid(device) || !count)
    return NVML_ERROR_INVALID_ARGUMENT;
  nvmlProcessInfo_t list[9];
  unsigned long long total, used, mine;
  driver_usage(device->index, &total, &used, &mine);
  size_t n = 0;
  if (mine)
    list[n++] = (nvmlProcessInfo_t){.pid = (unsigned)getpid(), .usedGpuMemory = mine};
  size_t o = others(list + n, 8);
  n += o < 8 ? o : 8;
  if (!env_long("FAKECUDA_NVML_USAGE", 1))
    for (size_t i = 0; i < n; i++)
      list[i].usedGpuMemory = NOT_AVAILABLE;
  unsigned cap = *count;
  *count = (unsigned)n;
  if (n > cap || (n && !out))
    return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(out, list, n * sizeof *list);
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned *count,
                                                            nvmlProcessInfo_t *infos) {
  return processes(device, count, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned *count,
                                                            nvmlProcessInfo_t *infos) {
  return processes(device, count, infos);
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned *count,
                                                         nvmlProcessInfo_v1_t *infos) {
  nvmlProcessInfo_t list[9];
  unsigned n = *count < 9 ? *count : 9;
  nvmlReturn_t r = processes(device, &n, infos ? list : NULL);
  *count = n;
  for (unsigned i = 0; r == NVML_SUCCESS && i < n; i++)
    infos[i] = (nvmlProcessInfo_v1_t){list[i].pid, list[i].usedGpuMemory};
  return r;
}
