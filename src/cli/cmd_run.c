/* cmd_run.c — `hbm run [--mode M] [--logdir DIR] [--memory-fraction F] -- CMD ARGS...`: runs
 * an unmodified program with hbm's allocator, profiler and OOM diagnosis under it. It loads
 * libhbm_preload.so into the program (LD_PRELOAD), switches the frameworks to one device
 * allocation per buffer (so that hbm places every buffer, in hbm's mode), tells the library
 * hbm's settings by environment (HBM_RUN_*), and exits with the program's status.
 * docs/run.md says what can and cannot be intercepted.
 *
 * It fails closed: before the program starts, everything that would leave it unguarded is
 * checked (the logdir can be written, the library is hbm's preload library and loads, the
 * loader will preload it into the program), and a failure stops here with the reason and exit
 * status 125, not a run whose allocations silently go to the driver. The library does the
 * same when hbm cannot serve a GPU (HBM_RUN_STRICT). --best-effort runs the program anyway. */
#include "cli.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PRELOAD_NAME "libhbm_preload.so"
#define REFUSED 125 /* hbm run's own refusal, apart from the program's statuses (as env(1)) */
#define PRELOAD_MARK "hbm_torch_malloc" /* a symbol only hbm's preload library exports */

/* What the frameworks are switched to: every buffer its own device allocation. */
static const struct framework_switch {
  const char *variable, *value, *framework;
} switches[] = {
    {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform", "JAX"},
    {"TF_GPU_ALLOCATOR", "cuda_malloc_async", "TensorFlow"},
    {"PYTORCH_NO_CUDA_MEMORY_CACHING", "1", "PyTorch"},
};

typedef struct run_options {
  const char *mode;     /* NULL: from the seeds' variables */
  const char *fraction; /* NULL: from XLA_PYTHON_CLIENT_MEM_FRACTION */
  const char *logdir;
  bool best_effort; /* run even when hbm cannot guard the program */
  char **command;
} run_options_t;

static void print_usage(FILE *out) {
  fprintf(out,
          "usage: hbm run [--mode bfc|growth|platform|async|expandable|learn] [--logdir DIR]\n"
          "               [--memory-fraction F] [--best-effort] -- CMD ARGS...\n\n"
          "Runs CMD with hbm's allocator under it (LD_PRELOAD=" PRELOAD_NAME "): the CUDA\n"
          "driver's and runtime's allocations are placed by hbm in its mode, within F of the\n"
          "GPU (each process its own share), profiled into DIR (default /tmp/hbm; see it with\n"
          "`hbm report DIR`), and an allocation that does not fit gets the framework's out-of-\n"
          "memory error with hbm's diagnosis on stderr. JAX, TensorFlow and PyTorch are\n"
          "switched to one allocation per buffer (the variables set are printed). Without\n"
          "--mode/--memory-fraction the seeds' variables decide (XLA_PYTHON_CLIENT_PREALLOCATE,\n"
          "XLA_PYTHON_CLIENT_MEM_FRACTION, ...). The exit status is CMD's. docs/run.md lists\n"
          "what cannot be intercepted. HBM_PRELOAD_LIB overrides where the library is found.\n\n"
          "hbm run does not run CMD unguarded: when DIR cannot be written, the library cannot\n"
          "be preloaded, or hbm cannot serve a GPU, it says why and exits with status 125.\n"
          "--best-effort runs CMD anyway (allocations hbm cannot serve go to the driver).\n");
}

/* 0, or an exit status after printing why. */
static int parse_options(int argc, char **argv, run_options_t *o) {
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    bool has_value = i + 1 < argc;
    if (!strcmp(a, "--")) {
      i++;
      break;
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      print_usage(stdout);
      return -1;
    } else if (!strcmp(a, "--mode") && has_value) {
      o->mode = argv[++i];
    } else if (!strcmp(a, "--logdir") && has_value) {
      o->logdir = argv[++i];
    } else if (!strcmp(a, "--best-effort")) {
      o->best_effort = true;
    } else if (!strcmp(a, "--memory-fraction") && has_value) {
      o->fraction = argv[++i];
    } else if (a[0] == '-') {
      print_usage(stderr);
      return 2;
    } else {
      break; /* the command, without "--" */
    }
  }
  if (i >= argc) {
    print_usage(stderr);
    return 2;
  }
  o->command = argv + i;
  return 0;
}

/* hbm's configuration as the program will see it: the seeds' variables, then the flags. */
static int effective_config(const run_options_t *o, hbm_config_t *cfg) {
  if (hbm_config_from_env(cfg) != HBM_OK)
    return cli_fail("run", 2, "%s", hbm_last_error());
  if (o->mode) {
    hbm_mode_t mode;
    if (hbm_mode_parse(o->mode, &mode) != HBM_OK)
      return cli_fail("run", 2, "--mode: %s", hbm_last_error());
    hbm_config_set_mode(cfg, mode, HBM_ORIGIN_FLAG);
  }
  if (o->fraction &&
      hbm_config_set(cfg, "XLA_PYTHON_CLIENT_MEM_FRACTION", o->fraction, HBM_ORIGIN_FLAG) != HBM_OK)
    return cli_fail("run", 2, "--memory-fraction: %s", hbm_last_error());
  return 0;
}

static bool readable(const char *path) { return access(path, R_OK) == 0; }

/* The first of the patterns (relative to this executable's directory) that names a
 * readable file, resolved, into out; false when none does. */
static bool find_beside(const char *bindir, char *out, size_t cap) {
  static const char *const places[] = {
      "",        /* the build tree */
      "/../lib", /* installed trees */
      "/../lib64",
      "/../lib/*-linux-gnu",
      "/../lib/python3*/site-packages/hbm", /* a wheel in a venv: inside the package */
  };
  for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
    char pattern[PATH_MAX + 64];
    snprintf(pattern, sizeof pattern, "%s%s/" PRELOAD_NAME, bindir, places[i]);
    glob_t found;
    bool ok = false;
    if (glob(pattern, 0, NULL, &found) == 0) {
      for (size_t k = 0; k < found.gl_pathc && !ok; k++) {
        char *resolved = realpath(found.gl_pathv[k], NULL);
        ok = resolved && readable(resolved) && strlen(resolved) < cap;
        if (ok)
          snprintf(out, cap, "%s", resolved);
        free(resolved);
      }
      globfree(&found);
    }
    if (ok)
      return true;
  }
  return false;
}

/* HBM_PRELOAD_LIB, else beside this executable (find_beside); false with why. */
static bool find_preload(char *out, size_t cap, char *why, size_t why_cap) {
  const char *env = getenv("HBM_PRELOAD_LIB");
  if (env && *env) {
    if (!readable(env))
      return snprintf(why, why_cap, "HBM_PRELOAD_LIB=%s: %s", env, strerror(errno)), false;
    snprintf(out, cap, "%s", env);
    return true;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
      *slash = '\0';
    if (find_beside(exe, out, cap))
      return true;
  }
  snprintf(why, why_cap,
           "cannot find " PRELOAD_NAME " next to the hbm executable, in ../lib or in the "
           "Python package; set HBM_PRELOAD_LIB to its path");
  return false;
}

/* ---- before the program starts: what would leave it unguarded ---- */

/* The profile goes to DIR/plugins/profile/<run>/ (made by the library at the first
 * allocation): the deepest part of that path that exists must be a directory this process can
 * create files in. Nothing is created here (a program that never allocates leaves no trace). */
static bool logdir_writable(const char *logdir, char *why, size_t cap) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/plugins/profile", logdir);
  struct stat st;
  while (stat(path, &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) {
      snprintf(why, cap, "%s: %s", path, strerror(errno));
      return false;
    }
    char *slash = strrchr(path, '/');
    if (!slash || slash == path) {
      snprintf(path, sizeof path, "/");
      continue;
    }
    *slash = '\0';
  }
  if (!S_ISDIR(st.st_mode)) {
    snprintf(why, cap, "%s is not a directory", path);
    return false;
  }
  char probe[PATH_MAX + 32];
  snprintf(probe, sizeof probe, "%s/.hbm-run-XXXXXX", path);
  int fd = mkstemp(probe);
  if (fd < 0) {
    snprintf(why, cap, "%s/plugins/profile cannot be made: cannot create files in %s: %s", logdir,
             path, strerror(errno));
    return false;
  }
  close(fd);
  unlink(probe);
  return true;
}

/* Whether lib is hbm's preload library and loads in a program of this kind: dlopen'd in a
 * child process (its side effects stay there), which must find PRELOAD_MARK. Otherwise the
 * loader would print "cannot be preloaded: ignored" and run the program without hbm. */
static bool preload_loads(const char *lib, char *why, size_t cap) {
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    snprintf(why, cap, "pipe: %s", strerror(errno));
    return false;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    unsetenv("HBM_PROFILE_DIR");
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    const char *err = !h                        ? dlerror()
                      : !dlsym(h, PRELOAD_MARK) ? "not hbm's preload library (it does not "
                                                  "export " PRELOAD_MARK ")"
                                                : NULL;
    if (err && write(pipefd[1], err, strlen(err)) < 0)
      _exit(2);
    _exit(err ? 1 : 0);
  }
  close(pipefd[1]);
  ssize_t n = pid > 0 ? read(pipefd[0], why, cap - 1) : -1;
  close(pipefd[0]);
  why[n > 0 ? n : 0] = '\0';
  int status = 0;
  while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return true;
  if (!why[0])
    snprintf(why, cap, "%s", pid < 0 ? strerror(errno) : "the check could not load it");
  return false;
}

/* The program as execvp will find it, when it is a file (NULL: not found, execvp says so). */
static const char *program_file(const char *name, char *buf, size_t cap) {
  if (strchr(name, '/'))
    return name;
  const char *path = getenv("PATH");
  for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
    const char *colon = strchr(p, ':');
    size_t n = colon ? (size_t)(colon - p) : strlen(p);
    snprintf(buf, cap, "%.*s/%s", (int)n, n ? p : ".", name);
    if (access(buf, X_OK) == 0)
      return buf;
    p += n + (colon != NULL);
  }
  return NULL;
}

/* The loader ignores LD_PRELOAD for set-user-ID and set-group-ID programs (a path with a slash
 * is never preloaded into them). */
static bool preload_reaches(char **command, char *why, size_t cap) {
  char buf[PATH_MAX];
  const char *file = program_file(command[0], buf, sizeof buf);
  struct stat st;
  if (file && stat(file, &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID))) {
    snprintf(why, cap, "%s is set-%s-ID: the loader does not preload libraries into it", file,
             st.st_mode & S_ISUID ? "user" : "group");
    return false;
  }
  return true;
}

/* 0 when the program may start guarded, with the library in lib (lib[0] == 0: none to
 * preload); otherwise, unless --best-effort, REFUSED after saying why (with --best-effort: a
 * warning, and 0). */
static int check_guarded(const run_options_t *o, const char *logdir, char *lib, size_t cap) {
  char why[2 * PATH_MAX] = "";
  const char *what = NULL;
  if (!find_preload(lib, cap, why, sizeof why))
    what = "the preload library cannot be found";
  else if (strpbrk(lib, ": "))
    what = "the preload library cannot be preloaded",
    snprintf(why, sizeof why, "%s: LD_PRELOAD cannot hold a path with ':' or ' '", lib);
  else if (!preload_loads(lib, why, sizeof why))
    what = "the preload library cannot be loaded";
  if (what)
    lib[0] = '\0'; /* nothing to preload */
  else if (!logdir_writable(logdir, why, sizeof why))
    what = "the profile directory (--logdir) cannot be written";
  else if (!preload_reaches(o->command, why, sizeof why))
    what = "the preload library cannot reach the program";
  if (!what)
    return 0;
  if (o->best_effort) {
    fprintf(stderr,
            "hbm run: warning: %s: %s; running it anyway (--best-effort): hbm may not "
            "guard its allocations\n",
            what, why);
    return 0;
  }
  return cli_fail("run", REFUSED,
                  "%s: %s. The program was not started: without hbm its allocations would go to "
                  "the CUDA driver unguarded (no memory fraction, no profile); --best-effort runs "
                  "it anyway",
                  what, why);
}

/* LD_PRELOAD gets the library after what it already holds (sanitizer runtimes must stay
 * first); the loader splits the list on ':' and ' ', so such paths cannot be preloaded. */
static int set_preload(const char *lib) {
  if (!lib[0]) /* --best-effort without a library that loads */
    return 0;
  const char *old = getenv("LD_PRELOAD");
  if (old && strstr(old, lib))
    return 0;
  size_t len = strlen(lib) + (old ? strlen(old) + 1 : 0) + 1;
  char *value = malloc(len);
  if (!value)
    return cli_fail("run", REFUSED, "out of memory");
  snprintf(value, len, "%s%s%s", old && *old ? old : "", old && *old ? ":" : "", lib);
  int rc = setenv("LD_PRELOAD", value, 1);
  free(value);
  return rc ? cli_fail("run", REFUSED, "setenv: %s", strerror(errno)) : 0;
}

/* The framework switches, said on stderr with what they replaced. */
static void set_framework_switches(void) {
  fprintf(stderr, "hbm run: one device allocation per buffer:");
  for (size_t i = 0; i < sizeof switches / sizeof switches[0]; i++) {
    const char *old = getenv(switches[i].variable);
    fprintf(stderr, "%s %s=%s (%s", i ? "," : "", switches[i].variable, switches[i].value,
            switches[i].framework);
    if (old && strcmp(old, switches[i].value))
      fprintf(stderr, "; was %s", old);
    fprintf(stderr, ")");
    setenv(switches[i].variable, switches[i].value, 1);
  }
  fprintf(stderr, "\n");
}

/* HBM_RUN_*: hbm's settings for the library. The mode is decided here, from the user's
 * variables as they were before the switches; the fraction is passed only when the flag gave
 * it (otherwise XLA_PYTHON_CLIENT_MEM_FRACTION, untouched, speaks for itself). */
static int pass_settings(const run_options_t *o, const hbm_config_t *cfg, const char *logdir) {
  char fraction[32];
  snprintf(fraction, sizeof fraction, "%.6g", cfg->mem_fraction);
  if (setenv("HBM_RUN_MODE", hbm_mode_name(hbm_config_mode(cfg)), 1) ||
      (o->fraction ? setenv("HBM_RUN_MEM_FRACTION", fraction, 1)
                   : unsetenv("HBM_RUN_MEM_FRACTION")) ||
      setenv("HBM_RUN_LOGDIR", logdir, 1) ||
      (o->best_effort ? unsetenv("HBM_RUN_STRICT") : setenv("HBM_RUN_STRICT", "1", 1)))
    return cli_fail("run", REFUSED, "setenv: %s", strerror(errno));
  char origin[160];
  fprintf(stderr, "hbm run: mode %s, memory fraction %s (%s), profile in %s\n",
          hbm_mode_name(hbm_config_mode(cfg)), fraction,
          hbm_config_origin(cfg, HBM_CFG_MEM_FRACTION, origin, sizeof origin), logdir);
  return 0;
}

/* The program's exit status, shell style: 128 + N when signal N ended it. */
static int run_command(char **command, pid_t *pid_out) {
  struct sigaction ignore = {.sa_handler = SIG_IGN}, old_int, old_quit;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGINT, &ignore, &old_int); /* Ctrl-C is the program's to handle */
  sigaction(SIGQUIT, &ignore, &old_quit);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    execvp(command[0], command);
    int err = errno;
    fprintf(stderr, "hbm run: %s: %s\n", command[0], strerror(err));
    _exit(err == ENOENT ? 127 : 126);
  }
  int status = 0, rc;
  if (pid < 0) {
    rc = cli_fail("run", 1, "fork: %s", strerror(errno));
  } else {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGQUIT, &old_quit, NULL);
  *pid_out = pid;
  return rc;
}

/* The other processes holding each GPU's memory, as the program's library recorded them
 * (markers "hbm run: start|exit: other processes on ..."): the ones at exit, else at start. */
static void say_other_processes(const hbm_profile_t *p) {
  static const char *const when[] = {"hbm run: exit: ", "hbm run: start: "};
  for (size_t w = 0; w < 2; w++) {
    bool said = false;
    for (size_t i = 0; i < hbm_profile_marker_count(p); i++) {
      const char *text = hbm_profile_marker(p, i)->text;
      if (text && !strncmp(text, when[w], strlen(when[w]))) {
        fprintf(stderr, "hbm run: %s\n", text + strlen(when[w]));
        said = true;
      }
    }
    if (said)
      return;
  }
}

/* One line per GPU of the program's profile: its peaks against the limit, and its OOMs; then
 * its totals by calling library, and who else held the GPU's memory. */
static void summarize(const char *path) {
  hbm_profile_t *p = hbm_profile_load(path);
  for (int space = 0; p && space < hbm_profile_space_count(p); space++) {
    hbm_analysis_t *a = hbm_analyze(p, space);
    const hbm_summary_t *s = a ? hbm_analysis_summary(a) : NULL;
    char peak[32], reserved[32], limit[32];
    if (s)
      fprintf(stderr, "hbm run: %s: peak in use %s, peak reserved %s, limit %s, %zu OOM(s)\n",
              hbm_profile_space(p, space)->device,
              hbm_format_bytes(s->peak_bytes, peak, sizeof peak),
              hbm_format_bytes(s->peak_reserved_bytes, reserved, sizeof reserved),
              hbm_format_bytes(s->limit_bytes, limit, sizeof limit), s->n_oom);
    if (s && s->n_buffers) {
      fprintf(stderr, "hbm run: %s by calling library:\n", hbm_profile_space(p, space)->device);
      hbm_report_groups_text(p, space, "hbm run:   ", stderr);
    }
    hbm_analysis_free(a);
  }
  if (p)
    say_other_processes(p);
  hbm_profile_free(p);
}

/* The program's profile, when it allocated device memory (<host>.<pid>.hbmtrace). */
static void say_where_the_profile_is(const char *logdir, pid_t pid) {
  hbm_logdir_entry_t entries[64];
  size_t total = 0;
  if (hbm_logdir_list(logdir, entries, 64, &total) != HBM_OK)
    return;
  char needle[32];
  snprintf(needle, sizeof needle, ".%ld.hbmtrace", (long)pid);
  for (size_t i = 0; i < total && i < 64; i++) {
    if (strstr(entries[i].file, needle)) {
      summarize(entries[i].path);
      fprintf(stderr, "hbm run: profile %s\nhbm run: see it with: hbm report %s\n", entries[i].path,
              logdir);
      return;
    }
  }
}

int hbm_cmd_run(int argc, char **argv) {
  run_options_t o = {.logdir = "/tmp/hbm"};
  int rc = parse_options(argc, argv, &o);
  if (rc)
    return rc < 0 ? 0 : rc;
  hbm_config_t cfg;
  if ((rc = effective_config(&o, &cfg)))
    return rc;
  char logdir[PATH_MAX], lib[PATH_MAX];
  if (!realpath(o.logdir, logdir)) { /* absolute, so that the program may chdir */
    if (o.logdir[0] == '/' || !getcwd(logdir, sizeof logdir) ||
        strlen(logdir) + strlen(o.logdir) + 2 > sizeof logdir)
      snprintf(logdir, sizeof logdir, "%s", o.logdir);
    else
      snprintf(logdir + strlen(logdir), sizeof logdir - strlen(logdir), "/%s", o.logdir);
  }
  if ((rc = check_guarded(&o, logdir, lib, sizeof lib)) || (rc = set_preload(lib)) ||
      (rc = pass_settings(&o, &cfg, logdir)))
    return rc;
  set_framework_switches();
  pid_t pid = -1;
  rc = run_command(o.command, &pid);
  if (pid > 0)
    say_where_the_profile_is(logdir, pid);
  return rc;
}
