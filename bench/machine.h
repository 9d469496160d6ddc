/* machine.h — the facts about the machine that change benchmark results, printed by every
 * benchmark before its table: cores, CPU model, the kernel's clocksource, the CPU's TSC flags
 * (the recorder's clock depends on them) and the load average (a busy machine slows
 * everything). Header-only: each bench_*.c is its own program. */
#ifndef HBM_BENCH_MACHINE_H
#define HBM_BENCH_MACHINE_H

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void bench_read_line(const char *path, const char *prefix, char *out, size_t cap) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  char line[8192];
  while (fgets(line, sizeof line, f)) {
    if (prefix && strncmp(line, prefix, strlen(prefix)))
      continue;
    const char *v = prefix ? strchr(line, ':') : NULL;
    v = v ? v + 1 : line;
    while (*v == ' ' || *v == '\t')
      v++;
    snprintf(out, cap, "%s", v);
    out[strcspn(out, "\n")] = '\0';
    break;
  }
  fclose(f);
}

/* "constant_tsc nonstop_tsc" (those of the invariant-TSC flags the CPU has), or "none". */
static void bench_tsc_flags(char *out, size_t cap) {
  char flags[8192];
  bench_read_line("/proc/cpuinfo", "flags", flags, sizeof flags);
  const char *names[] = {"tsc", "constant_tsc", "nonstop_tsc", "tsc_known_freq"};
  out[0] = '\0';
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    char word[64];
    snprintf(word, sizeof word, " %s ", names[i]);
    char padded[8200];
    snprintf(padded, sizeof padded, " %s ", flags);
    if (strstr(padded, word))
      snprintf(out + strlen(out), cap - strlen(out), "%s%s", out[0] ? " " : "", names[i]);
  }
  if (!out[0])
    snprintf(out, cap, "none");
}

static void bench_print_machine(void) {
  char model[256], source[64], load[128], tsc[128];
  bench_read_line("/proc/cpuinfo", "model name", model, sizeof model);
  bench_read_line("/sys/devices/system/clocksource/clocksource0/current_clocksource", NULL, source,
                  sizeof source);
  bench_read_line("/proc/loadavg", NULL, load, sizeof load);
  bench_tsc_flags(tsc, sizeof tsc);
  char *space = load; /* the three load averages only */
  for (int i = 0; i < 3 && space; i++)
    space = strchr(space + (i > 0), ' ');
  if (space)
    *space = '\0';
  time_t now = time(NULL);
  char when[64];
  strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
  printf("machine: %ld cores, %s, clocksource %s, TSC flags: %s, load average %s, %s\n\n",
         sysconf(_SC_NPROCESSORS_ONLN), model[0] ? model : "unknown CPU",
         source[0] ? source : "unknown", tsc, load, when);
}

#endif /* HBM_BENCH_MACHINE_H */
