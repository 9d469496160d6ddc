/* replay_corpus.c — a driver for builds without libFuzzer: feeds every file of the
 * directories (or files) named on the command line to LLVMFuzzerTestOneInput once. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return fprintf(stderr, "%s: cannot open\n", path), 1;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
  size_t got = buf ? fread(buf, 1, (size_t)size, f) : 0;
  fclose(f);
  if (!buf || got != (size_t)size)
    return free(buf), fprintf(stderr, "%s: cannot read\n", path), 1;
  LLVMFuzzerTestOneInput(buf, got);
  free(buf);
  return 0;
}

static int run_path(const char *path, int *count) {
  struct stat st;
  if (stat(path, &st) != 0)
    return fprintf(stderr, "%s: missing\n", path), 1;
  if (!S_ISDIR(st.st_mode))
    return ++*count, run_file(path);
  DIR *d = opendir(path);
  if (!d)
    return 1;
  int failed = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.')
      continue;
    char child[4096];
    snprintf(child, sizeof child, "%s/%s", path, e->d_name);
    failed |= run_path(child, count);
  }
  closedir(d);
  return failed;
}

int main(int argc, char **argv) {
  int failed = 0, count = 0;
  for (int i = 1; i < argc; i++)
    failed |= run_path(argv[i], &count);
  printf("replayed %d inputs\n", count);
  return failed;
}
