/* cmd_explain.c — `hbm explain [FILE|-] [--json] [--logdir DIR] [--module PATH]`: reads the
 * text of an out-of-memory error as users paste it (XLA on GPU, TPU or CPU, PyTorch,
 * TensorFlow; a whole traceback or log around it is fine) and says what it means: the
 * framework's first line, the numbers, the cause, the fixes, the peak buffers by operator
 * path. --module adds the source lines the program's compiled module knows (an XLA dump or
 * HLO text); --logdir also saves the peak buffers as a profile for `hbm view`. Exit status: 0
 * explained, 1 no OOM in the text (or unreadable, or the module unreadable), 2 usage error. */
#include "cli.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct options {
  const char *path; /* NULL or "-": standard input */
  const char *logdir;
  const char *module;
  bool json;
} options_t;

static void print_usage(FILE *out) {
  fprintf(out,
          "usage: hbm explain [FILE|-] [--json] [--logdir DIR] [--module PATH]\n\n"
          "Explains a pasted out-of-memory error (from a file, or standard input): XLA on GPU\n"
          "(RESOURCE_EXHAUSTED: Out of memory while trying to allocate ...), TPU (Allocation\n"
          "... would exceed memory, Ran out of memory in memory space hbm) or CPU (Out of memory\n"
          "allocating N bytes), PyTorch (CUDA out of memory. Tried to allocate ...) or\n"
          "TensorFlow (OOM when allocating tensor ...). A whole traceback or log around it is\n"
          "fine.\n\n"
          "  --json         the parsed numbers, cause, fixes and buffers as JSON\n"
          "  --logdir DIR   also save the peak buffers as a profile under DIR for hbm view\n"
          "  --module PATH  the program's compiled module: the directory XLA_FLAGS=\n"
          "                 --xla_dump_to=PATH wrote, one of its files, or HLO text; gives the\n"
          "                 buffers their source file:line from it (JAX 0.5+ puts them there,\n"
          "                 not in the error), and the buffers at the peak when the text names\n"
          "                 only the bytes that failed\n");
}

static int parse_options(int argc, char **argv, options_t *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json")) {
      o->json = true;
    } else if (!strcmp(a, "--logdir") && i + 1 < argc) {
      o->logdir = argv[++i];
    } else if (!strcmp(a, "--module") && i + 1 < argc) {
      o->module = argv[++i];
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      print_usage(stdout);
      return -1;
    } else if ((a[0] != '-' || !strcmp(a, "-")) && !o->path) {
      o->path = a;
    } else {
      print_usage(stderr);
      return 2;
    }
  }
  return 0;
}

/* All of a stream (malloc'd); NULL when it cannot be read. */
static char *read_stream(FILE *in, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  *len = 0;
  char *buf = malloc(cap);
  while (buf) {
    size_t got = fread(buf + n, 1, cap - n, in);
    n += got;
    if (got == 0)
      break;
    if (n == cap) {
      char *bigger = realloc(buf, cap * 2);
      if (!bigger)
        free(buf);
      buf = bigger;
      cap *= 2;
    }
  }
  if (buf && ferror(in)) {
    free(buf);
    buf = NULL;
  }
  *len = n;
  return buf;
}

static int read_input(const options_t *o, char **data, size_t *len, const char **name) {
  bool from_stdin = !o->path || !strcmp(o->path, "-");
  *name = from_stdin ? "<stdin>" : o->path;
  if (from_stdin && isatty(STDIN_FILENO))
    fprintf(stderr, "hbm explain: paste the error, then Ctrl-D\n");
  FILE *in = from_stdin ? stdin : fopen(o->path, "rb");
  if (!in)
    return cli_fail("explain", 1, "%s: cannot open: %s", o->path, strerror(errno));
  *data = read_stream(in, len);
  if (!from_stdin)
    fclose(in);
  return *data ? 0 : cli_fail("explain", 1, "%s: cannot read", *name);
}

/* The peak buffers as a profile in a new run of the logdir. */
static int save_profile(const hbm_oom_text_t *t, const char *name, const char *logdir) {
  char run[1024], path[1200];
  hbm_profile_t *p = hbm_oom_text_to_profile(t, name);
  if (!p || hbm_logdir_new_run(logdir, run, sizeof run) != HBM_OK) {
    hbm_profile_free(p);
    return cli_fail("explain", 1, "%s", hbm_last_error());
  }
  snprintf(path, sizeof path, "%s/explain.hbmtrace", run);
  hbm_status_t s = hbm_profile_save(p, path);
  hbm_profile_free(p);
  if (s != HBM_OK)
    return cli_fail("explain", 1, "%s", hbm_last_error());
  fprintf(stderr, "Profile: %s\nSee it with: hbm view --logdir %s\n", path, logdir);
  return 0;
}

int hbm_cmd_explain(int argc, char **argv) {
  options_t o = {0};
  int rc = parse_options(argc, argv, &o);
  if (rc)
    return rc < 0 ? 0 : rc;
  char *data = NULL;
  size_t len = 0;
  const char *name;
  if ((rc = read_input(&o, &data, &len, &name)))
    return rc;
  hbm_oom_text_t *t = hbm_oom_text_parse(data, len, name);
  free(data);
  if (!t)
    return cli_fail("explain", 1, "%s", hbm_last_error());
  if (o.module && hbm_oom_text_add_module(t, o.module) != HBM_OK) {
    rc = cli_fail("explain", 1, "%s", hbm_last_error());
    hbm_oom_text_free(t);
    return rc;
  }
  hbm_status_t s = o.json ? hbm_oom_text_json(t, stdout) : hbm_oom_text_explain(t, stdout);
  rc = s == HBM_OK ? 0 : cli_fail("explain", 1, "%s", hbm_last_error());
  if (!rc && o.logdir)
    rc = save_profile(t, name, o.logdir);
  hbm_oom_text_free(t);
  return rc;
}
