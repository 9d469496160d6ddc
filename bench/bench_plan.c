/* bench_plan.c — how fast the planner is: a synthetic module of N instructions (default 1M:
 * transformer-like blocks of broadcasts, element-wise ops, dots, reduces, tuples with
 * residual connections several blocks back) is generated as HLO text, then timed as
 *   parse          text → module IR
 *   parse+plan     + dataflow, aliasing, live ranges, heap simulation (the planner proper)
 *   hbm_plan_text  + the profile and its analysis (what `hbm plan` does before printing)
 * each the median of --runs runs (at least 9 for the real modules, and as many more as half a
 * second allows), in instructions per second; then the same for every real module in
 * ../shared/hlo. Peak RSS shows memory against the size of the input.
 *
 * Usage: bench_plan [--instructions N] [--runs R] [--shared DIR] [--write FILE]
 *                   [--dump DIR [--file F]...]
 *   --write FILE: only write the synthetic module to FILE (to time `hbm plan` on it).
 *   --dump DIR: time nothing; write every plan (synthetic, shared, each --file F) in full to
 *     DIR/<name>.plan — summary, steps, every buffer with its offset and tags, the reports,
 *     the same with --remat at 3/4 of the peak and with offsets aligned to 256 — so that two builds
 * of the planner can be compared with diff (a change of speed must not change one byte of these).
 */
#include "hlo/hlo.h"
#include "machine.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* ../shared beside the checkout: from this file's path, or $HBM_SHARED_DIR. */
static const char *default_shared_dir(char *buf, size_t cap) {
  const char *env = getenv("HBM_SHARED_DIR");
  if (env)
    return env;
  snprintf(buf, cap, "%s", __FILE__);
  char *slash = strrchr(buf, '/');
  if (slash)
    *slash = '\0'; /* .../bench */
  slash = strrchr(buf, '/');
  if (slash)
    *slash = '\0'; /* the checkout */
  size_t n = strlen(buf);
  snprintf(buf + n, cap - n, "/../shared");
  return buf;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* About 11 instructions per block; a block reads the previous block's result and, every
 * fourth block, one from eight blocks back (a residual connection). */
static char *synthetic_module(size_t target, size_t *len, size_t *n_instr) {
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_puts(&sb, "HloModule synthetic, is_scheduled=true\n\n"
                       "%add (x: f32[], y: f32[]) -> f32[] {\n"
                       "  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
                       "  ROOT %s = f32[] add(%x, %y)\n}\n\n"
                       "ENTRY %main (w: f32[512,512], v: f32[512]) -> f32[512,512] {\n"
                       "  %w = f32[512,512]{1,0} parameter(0)\n"
                       "  %v = f32[512]{0} parameter(1)\n"
                       "  %zero = f32[] constant(0)\n"
                       "  %h.0 = f32[512,512]{1,0} broadcast(%v), dimensions={1}\n");
  size_t n = 4, blocks = 0;
  while (n + 12 < target) {
    size_t i = ++blocks;
    hbm_strbuf_printf(
        &sb,
        "  %%b.%zu = f32[512,512]{1,0} broadcast(%%v), dimensions={1}\n"
        "  %%m.%zu = f32[512,512]{1,0} multiply(%%h.%zu, %%b.%zu)\n"
        "  %%e.%zu = f32[512,512]{1,0} exponential(%%m.%zu), metadata={op_type=\"Exp\" "
        "op_name=\"jit(step)/layer_%zu/exp\" source_file=\"model.py\" source_line=%zu}\n"
        "  %%d.%zu = f32[512,512]{1,0} dot(%%e.%zu, %%w), lhs_contracting_dims={1}, "
        "rhs_contracting_dims={0}, metadata={op_name=\"jit(step)/layer_%zu/dot_general\"}\n"
        "  %%r.%zu = f32[512]{0} reduce(%%d.%zu, %%zero), dimensions={0}, to_apply=%%add\n"
        "  %%t.%zu = (f32[512,512]{1,0}, f32[512]{0}) tuple(%%d.%zu, %%r.%zu)\n"
        "  %%g.%zu = f32[512,512]{1,0} get-tuple-element(%%t.%zu), index=0\n"
        "  %%a.%zu = f32[512,512]{1,0} add(%%g.%zu, %%m.%zu)\n"
        "  %%c.%zu = bf16[512,512]{1,0:T(8,128)(2,1)} convert(%%a.%zu)\n"
        "  %%u.%zu = f32[512,512]{1,0} convert(%%c.%zu)\n",
        i, i, i - 1, i, i, i, i, i, i, i, i, i, i, i, i, i, i, i, i, i, i, i, i, i, i);
    n += 10;
    if (i > 8 && i % 4 == 0) {
      hbm_strbuf_printf(&sb, "  %%h.%zu = f32[512,512]{1,0} add(%%u.%zu, %%a.%zu)\n", i, i, i - 8);
    } else {
      hbm_strbuf_printf(&sb, "  %%h.%zu = f32[512,512]{1,0} negate(%%u.%zu)\n", i, i);
    }
    n++;
  }
  hbm_strbuf_printf(&sb, "  ROOT %%out = f32[512,512]{1,0} copy(%%h.%zu)\n}\n", blocks);
  n++;
  *n_instr = n + 3; /* and the reducer */
  *len = sb.len;
  return sb.data;
}

static void dump_plan(FILE *f, const char *text, size_t len, const char *name,
                      const hbm_plan_options_t *opt) {
  hbm_plan_t *plan = hbm_plan_text(text, len, name, opt);
  if (!plan) {
    fprintf(f, "error: %s\n", hbm_last_error());
    return;
  }
  const hbm_plan_summary_t *s = hbm_plan_get_summary(plan);
  fprintf(f,
          "summary: args %llu out %llu alias %llu temp %llu temp_unpadded %llu peak %llu "
          "step %lld at %s frag %llu instr %zu buffers %zu fits %d before_remat %llu remat %zu "
          "flops %llu bytes %llu\n",
          (unsigned long long)s->argument_bytes, (unsigned long long)s->output_bytes,
          (unsigned long long)s->alias_bytes, (unsigned long long)s->temp_bytes,
          (unsigned long long)s->temp_unpadded_bytes, (unsigned long long)s->peak_bytes,
          (long long)s->peak_step, s->peak_instruction ? s->peak_instruction : "-",
          (unsigned long long)s->fragmentation_bytes, s->n_instructions, s->n_buffers, s->fits,
          (unsigned long long)s->peak_before_remat, s->n_remat,
          (unsigned long long)s->remat_extra_flops, (unsigned long long)s->remat_extra_bytes);
  const hbm_profile_t *p = hbm_plan_profile(plan);
  for (int i = 0; i < hbm_profile_space_count(p); i++) {
    const hbm_space_info_t *sp = hbm_profile_space(p, i);
    fprintf(f, "space %d: %s %s color %d limit %llu\n", i, sp->name, sp->device, sp->color,
            (unsigned long long)sp->limit);
  }
  for (int64_t i = 0; i < hbm_profile_step_count(p); i++)
    fprintf(f, "step %lld: %s\n", (long long)i, hbm_profile_step_label(p, i));
  for (int64_t i = 0; i < hbm_profile_buffer_count(p); i++) {
    const hbm_buffer_t *b = hbm_profile_buffer(p, i);
    fprintf(f,
            "buffer %lld: id %llu at %llu size %llu unpadded %llu [%lld,%lld) space %d cat %d "
            "flags %u op=%s shape=%s group=%s source=%s opcode=%s label=%s\n",
            (long long)i, (unsigned long long)b->id, (unsigned long long)b->address,
            (unsigned long long)b->size, (unsigned long long)b->unpadded_size, (long long)b->start,
            (long long)b->end, b->space, (int)b->category, b->flags, b->op ? b->op : "-",
            b->shape ? b->shape : "-", b->group ? b->group : "-", b->source ? b->source : "-",
            b->opcode ? b->opcode : "-", b->label ? b->label : "-");
  }
  size_t n_remat;
  const hbm_remat_info_t *r = hbm_plan_remats(plan, &n_remat);
  for (size_t i = 0; i < n_remat; i++)
    fprintf(f, "remat %s -> %s bytes %llu flops %llu\n", r[i].instruction, r[i].clone,
            (unsigned long long)r[i].bytes, (unsigned long long)r[i].flops);
  hbm_plan_report_text(plan, f);
  hbm_plan_report_json(plan, f);
  fputc('\n', f);
  hbm_plan_free(plan);
}

/* The plan of one module as DIR/<name>.plan: as given, then rematerialized to fit 3/4 of its
 * peak (which runs remat.c and plans again). */
static bool dump_module(const char *dir, const char *name, const char *text, size_t len) {
  char path[4096];
  const char *base = strrchr(name, '/');
  snprintf(path, sizeof path, "%s/%s.plan", dir, base ? base + 1 : name);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "bench_plan: cannot write %s\n", path);
    return false;
  }
  hbm_plan_options_t opt = {0};
  dump_plan(f, text, len, name, &opt);
  hbm_plan_t *plan = hbm_plan_text(text, len, name, &opt);
  uint64_t peak = plan ? hbm_plan_get_summary(plan)->peak_bytes : 0;
  hbm_plan_free(plan);
  if (peak) {
    opt.memory = peak / 4 * 3;
    opt.remat = 1;
    fprintf(f, "---- remat to %llu bytes\n", (unsigned long long)opt.memory);
    dump_plan(f, text, len, name, &opt);
  }
  hbm_plan_options_t aligned = {.alignment = 256};
  fprintf(f, "---- offsets aligned to 256\n");
  dump_plan(f, text, len, name, &aligned);
  bool ok = fclose(f) == 0;
  printf("%s\n", path);
  return ok;
}

static long peak_rss_kib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/* At least `runs` runs, and more (up to MAX_RUNS) until half a second has gone: small
 * modules plan in a fraction of a millisecond, where one slow run in nine moves a median. */
#define MAX_RUNS 1000

static void bench_text(const char *name, const char *text, size_t len, int runs) {
  static double parse[MAX_RUNS], core[MAX_RUNS], full[MAX_RUNS];
  size_t n_instr = 0;
  uint64_t peak = 0;
  int64_t began = hbm__now_ns();
  int r = 0;
  for (; r < MAX_RUNS && (r < runs || hbm__now_ns() - began < 500000000); r++) {
    int64_t t0 = hbm__now_ns();
    hlo_module_t *m = hbm__hlo_parse(text, len, name);
    int64_t t1 = hbm__now_ns();
    if (!m) {
      fprintf(stderr, "bench_plan: %s: %s\n", name, hbm_last_error());
      exit(1);
    }
    hlo_assignment_t as;
    /* XLA's GPU rules: the most work (output reuse, event times, combined temp) */
    hlo_plan_opts_t o = {128, true};
    if (hbm__hlo_assign_opts(m, &as, &o) != HBM_OK || hbm__hlo_simulate_heap(&as, &o) != HBM_OK) {
      fprintf(stderr, "bench_plan: %s: %s\n", name, hbm_last_error());
      exit(1);
    }
    int64_t t2 = hbm__now_ns();
    n_instr = m->n_instrs;
    hbm__hlo_assignment_free(&as);
    hbm__hlo_free(m);
    hbm_plan_options_t opt = {.backend = HBM_PLAN_BACKEND_GPU};
    int64_t t3 = hbm__now_ns();
    hbm_plan_t *plan = hbm_plan_text(text, len, name, &opt);
    int64_t t4 = hbm__now_ns();
    if (!plan) {
      fprintf(stderr, "bench_plan: %s: %s\n", name, hbm_last_error());
      exit(1);
    }
    peak = hbm_plan_get_summary(plan)->peak_bytes;
    hbm_plan_free(plan);
    parse[r] = (double)(t1 - t0) / 1e6;
    core[r] = (double)(t2 - t0) / 1e6;
    full[r] = (double)(t4 - t3) / 1e6;
  }
  runs = r;
  double p = median(parse, runs), c = median(core, runs), f = median(full, runs);
  printf("%-30s %9zu instr %5.1f MB %4d runs | parse %8.2f ms | parse+plan %8.2f ms = %6.2f M "
         "instr/s | "
         "hbm_plan_text %8.2f ms = %6.2f M instr/s | peak %.2f GiB\n",
         name, n_instr, (double)len / 1e6, runs, p, c, (double)n_instr / (c / 1e3) / 1e6, f,
         (double)n_instr / (f / 1e3) / 1e6, (double)peak / (1024.0 * 1024 * 1024));
}

int main(int argc, char **argv) {
  bench_print_machine();
  size_t target = 1000000;
  int runs = 5;
  const char *write_to = NULL, *dump_dir = NULL;
  const char *files_extra[64];
  int n_extra = 0;
  char shared_buf[4096];
  const char *shared = default_shared_dir(shared_buf, sizeof shared_buf);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--instructions") && i + 1 < argc)
      target = (size_t)strtoull(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
      runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--shared") && i + 1 < argc)
      shared = argv[++i];
    else if (!strcmp(argv[i], "--write") && i + 1 < argc)
      write_to = argv[++i];
    else if (!strcmp(argv[i], "--dump") && i + 1 < argc)
      dump_dir = argv[++i];
    else if (!strcmp(argv[i], "--file") && i + 1 < argc && n_extra < 64)
      files_extra[n_extra++] = argv[++i];
    else {
      fprintf(stderr, "usage: bench_plan [--instructions N] [--runs R] [--shared DIR] "
                      "[--write FILE] [--dump DIR [--file F]...]\n");
      return 2;
    }
  }
  if (runs < 1)
    runs = 1;
  printf("bench_plan: medians of %d runs\n", runs);
  size_t len, n_instr;
  char *text = synthetic_module(target, &len, &n_instr);
  if (!text) {
    fprintf(stderr, "bench_plan: out of memory\n");
    return 1;
  }
  if (write_to) {
    FILE *f = fopen(write_to, "w");
    bool ok = f && fwrite(text, 1, len, f) == len;
    if (f)
      ok = fclose(f) == 0 && ok;
    free(text);
    printf("%s: %zu instructions, %zu bytes%s\n", write_to, n_instr, len, ok ? "" : " (failed)");
    return ok ? 0 : 1;
  }
  static const char *files[] = {"ssd_mobilenet_tf.hlo", "graphsage_tf.hlo",
                                "hlo_llama3_8b_cp_bf16_1x4.hlo", "attention_model.hlo"};
  if (dump_dir) {
    bool ok = dump_module(dump_dir, "synthetic", text, len);
    free(text);
    for (size_t i = 0; i < sizeof files / sizeof files[0] + (size_t)n_extra; i++) {
      char path[4096];
      if (i < sizeof files / sizeof files[0])
        snprintf(path, sizeof path, "%s/hlo/%s", shared, files[i]);
      else
        snprintf(path, sizeof path, "%s", files_extra[i - sizeof files / sizeof files[0]]);
      char *data;
      if (hbm__read_file(path, &data, &len) != HBM_OK) {
        printf("%s (absent)\n", path);
        continue;
      }
      ok = dump_module(dump_dir, path, data, len) && ok;
      free(data);
    }
    return ok ? 0 : 1;
  }
  long rss_before = peak_rss_kib();
  bench_text("synthetic", text, len, runs);
  printf("  peak RSS %.1f MiB for %.1f MB of text (%.1f MiB before planning)\n",
         (double)peak_rss_kib() / 1024.0, (double)len / 1e6, (double)rss_before / 1024.0);
  free(text);
  for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/hlo/%s", shared, files[i]);
    char *data;
    if (hbm__read_file(path, &data, &len) != HBM_OK) {
      printf("%-34s (absent)\n", files[i]);
      continue;
    }
    bench_text(files[i], data, len, runs < 9 ? 9 : runs);
    free(data);
  }
  return 0;
}
