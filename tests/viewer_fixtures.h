/* viewer_fixtures.h — synthetic profiles and logdirs for the viewer's tests and benchmarks
 * (tests/test_viewer_*.c, bench/bench_viewer.c, and through `test_viewer_api --write-fixtures
 * DIR` the browser test). Built with the public builder API only (hbm_profile_new, add_step,
 * alloc_at/free_at, add_buffer, ...) and saved with hbm_profile_save, so they go through the
 * same loader as users' files.
 *
 * The runtime profile looks like a training loop on a device: weights and optimizer state
 * allocated first and kept, then per iteration activations pushed layer by layer (with small
 * scratch buffers), popped in reverse during the backward pass, gradients in between; a Host
 * space with a few pinned buffers; an OOM at the end when asked. The plan looks like a
 * compiled module: instructions in program order, temporaries with padding (tiled layouts),
 * opcodes, XLA labels and sources. Header-only (static inline functions, so a user that needs
 * only some of them gets no unused-function warnings). */
#ifndef HBM_VIEWER_FIXTURES_H
#define HBM_VIEWER_FIXTURES_H

#include "hbm.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VF_MIB (1024ull * 1024ull)
#define VF_LAYERS 24
#define VF_RUNTIME_LIMIT (12ull * 1024 * VF_MIB)

static inline uint32_t vf_rand(uint32_t *state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

typedef struct vf_stack {
  uint64_t top;       /* next free address */
  uint64_t addr[256]; /* live activations, innermost last */
  int n;
} vf_stack_t;

static inline int64_t vf_step(hbm_profile_t *p, int64_t *t_ns) {
  *t_ns += 1000;
  return hbm_profile_add_step(p, *t_ns, NULL);
}

/* One event allocating size at the stack top; returns the address or 0 on failure. */
static inline uint64_t vf_push(hbm_profile_t *p, vf_stack_t *s, int64_t *t, uint64_t size,
                               const hbm_tag_t *tag) {
  int64_t step = vf_step(p, t);
  uint64_t addr = s->top;
  if (step < 0 || hbm_profile_alloc_at(p, step, 0, addr, size, tag) < 0)
    return 0;
  s->top += (size + 255) & ~255ull;
  return addr;
}

static inline bool vf_free(hbm_profile_t *p, int64_t *t, int space, uint64_t addr) {
  int64_t step = vf_step(p, t);
  return step >= 0 && hbm_profile_free_at(p, step, space, addr) == HBM_OK;
}

static inline bool vf_weights(hbm_profile_t *p, vf_stack_t *s, int64_t *t, uint32_t *rng) {
  char op[96], shape[64];
  for (int i = 0; i < VF_LAYERS; i++) {
    uint64_t rows = 1024u << (vf_rand(rng) % 3), size = rows * 4096 * 4;
    snprintf(op, sizeof op, "params/layer_%02d/kernel", i);
    snprintf(shape, sizeof shape, "f32[%llu,4096]", (unsigned long long)rows);
    hbm_tag_t w = {op, shape, HBM_CAT_PARAMETER, "weights", "model.py:31"};
    if (!vf_push(p, s, t, size, &w))
      return false;
    snprintf(op, sizeof op, "opt_state/layer_%02d/adam_mu", i);
    hbm_tag_t m = {op, shape, HBM_CAT_PARAMETER, "optimizer state", "train.py:88"};
    if (!vf_push(p, s, t, size, &m))
      return false;
  }
  return true;
}

/* One training iteration: forward (activations + scratch), backward (gradients, pops). */
static inline bool vf_iteration(hbm_profile_t *p, vf_stack_t *s, int64_t *t, int iter,
                                uint32_t *rng) {
  char op[96], shape[64];
  hbm_marker_t begin = {hbm_profile_step_count(p), HBM_MARKER_STEP_BEGIN, iter, "train_step"};
  hbm_profile_add_marker(p, &begin);
  uint64_t scale = 10 + (uint64_t)(iter % 7);
  for (int l = 0; l < VF_LAYERS && s->n < 256; l++) {
    uint64_t size = (uint64_t)(8 + (l * 5) % 23) * VF_MIB * scale / 10;
    snprintf(op, sizeof op, "jit(train_step)/layer_%02d/dot_general", l);
    snprintf(shape, sizeof shape, "bf16[%llu,2048]", (unsigned long long)(size / 4096));
    hbm_tag_t act = {op, shape, HBM_CAT_TEMPORARY, "activations", "model.py:57"};
    uint64_t a = vf_push(p, s, t, size, &act);
    if (!a)
      return false;
    s->addr[s->n++] = a;
    snprintf(op, sizeof op, "jit(train_step)/layer_%02d/reduce_scratch", l);
    hbm_tag_t scratch = {op, "u8[4096]", HBM_CAT_TEMPORARY, "scratch", "model.py:60"};
    uint64_t top = s->top, sc = vf_push(p, s, t, 1024 + vf_rand(rng) % 8192, &scratch);
    if (!sc || !vf_free(p, t, 0, sc))
      return false;
    s->top = top;
  }
  while (s->n > 0) {
    int l = s->n - 1;
    snprintf(op, sizeof op, "jit(train_step)/transpose(jvp(layer_%02d))/dot_general", l);
    hbm_tag_t grad = {op, "f32[4096,4096]", HBM_CAT_TEMPORARY, "gradients", "model.py:57"};
    uint64_t top = s->top, g = vf_push(p, s, t, 16 * VF_MIB, &grad);
    if (!g || !vf_free(p, t, 0, g))
      return false;
    s->top = top;
    if (!vf_free(p, t, 0, s->addr[--s->n]))
      return false;
    s->top = s->addr[s->n];
  }
  hbm_marker_t end = {hbm_profile_step_count(p), HBM_MARKER_STEP_END, iter, "train_step"};
  hbm_profile_add_marker(p, &end);
  return true;
}

static inline void vf_oom(hbm_profile_t *p, vf_stack_t *s, int64_t *t, uint64_t base) {
  uint64_t in_use = s->top - base, want = VF_RUNTIME_LIMIT;
  char msg[1024];
  snprintf(msg, sizeof msg,
           "RESOURCE_EXHAUSTED: Out of memory while trying to allocate %llu bytes.\n"
           "hbm: %llu bytes in use of a %llu-byte limit when "
           "jit(train_step)/logits/dot_general asked for %llu bytes.\n"
           "Largest live buffers: opt_state/layer_23/adam_mu, params/layer_23/kernel.\n"
           "Try: a smaller batch, or XLA_PYTHON_CLIENT_MEM_FRACTION=.95",
           (unsigned long long)want, (unsigned long long)in_use,
           (unsigned long long)VF_RUNTIME_LIMIT, (unsigned long long)want);
  int64_t step = vf_step(p, t);
  hbm_oom_event_t e = {step, 0, want, msg};
  hbm_profile_add_oom(p, &e);
}

/* A runtime profile of about n_events allocator events. */
static inline hbm_profile_t *vf_runtime_profile(const char *name, int64_t n_events, uint32_t seed,
                                                bool with_oom) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_RUNTIME, name);
  if (!p)
    return NULL;
  hbm_profile_set_meta(p, "host", "testhost");
  hbm_profile_set_meta(p, "pid", "4242");
  hbm_profile_add_space(p, "HBM", "sim0", 0, VF_RUNTIME_LIMIT);
  hbm_profile_add_space(p, "Host", "host", 5, 0);
  uint32_t rng = seed;
  int64_t t = 0;
  const uint64_t base = 0x7f2a00000000ull;
  vf_stack_t s = {base, {0}, 0};
  hbm_reserve_event_t pre = {0, 0, HBM_RESERVE_PREALLOCATE, base, VF_RUNTIME_LIMIT};
  bool ok = vf_weights(p, &s, &t, &rng) && hbm_profile_add_reserve(p, &pre) == HBM_OK;
  int64_t step = vf_step(p, &t);
  hbm_tag_t pinned = {"host/input_batch", "u8[8388608]", HBM_CAT_PARAMETER, "input pipeline",
                      "data.py:12"};
  ok = ok && hbm_profile_alloc_at(p, step, 1, 0x1000, 8 * VF_MIB, &pinned) >= 0;
  for (int iter = 0; ok && hbm_profile_step_count(p) < n_events; iter++)
    ok = vf_iteration(p, &s, &t, iter, &rng);
  if (ok && with_oom)
    vf_oom(p, &s, &t, base);
  if (!ok || hbm_profile_finish(p) != HBM_OK) {
    hbm_profile_free(p);
    return NULL;
  }
  return p;
}

/* ---- plans ---- */

typedef struct vf_live {
  uint64_t off, size;
  int64_t end;
} vf_live_t;

/* First-fit offset among the buffers still live at `step` (a toy heap simulator). */
static inline uint64_t vf_place(vf_live_t *live, int n, int64_t step, uint64_t size) {
  uint64_t off = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (int i = 0; i < n; i++)
      if (live[i].end > step && off < live[i].off + live[i].size && live[i].off < off + size) {
        off = live[i].off + live[i].size;
        moved = true;
      }
  }
  return off;
}

static const char *const vf_opcodes[] = {"fusion", "convolution", "dot",       "reduce",
                                         "copy",   "all-reduce",  "transpose", "broadcast"};

/* A compile-time plan of n_instr instructions (steps labelled with instruction names). */
static inline hbm_profile_t *vf_plan_profile(const char *module, int n_instr, uint32_t seed,
                                             uint64_t scale) {
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_PLAN, module);
  if (!p)
    return NULL;
  hbm_profile_set_meta(p, "module", module);
  hbm_profile_add_space(p, "HBM", "tpu", 0, 16ull * 1024 * VF_MIB);
  uint32_t rng = seed;
  char label[192], name[64], shape[64];
  for (int i = 0; i < n_instr; i++) {
    snprintf(name, sizeof name, "%s.%d", vf_opcodes[i % 8], i);
    hbm_profile_add_step(p, i, name);
  }
  vf_live_t *live = calloc((size_t)n_instr + 8, sizeof *live);
  int n_live = 0;
  uint64_t off = 0;
  for (int i = 0; i < 4; i++) { /* parameters and one output */
    bool out = i == 3;
    uint64_t size = (64 + 32 * (uint64_t)i) * VF_MIB * scale;
    snprintf(name, sizeof name, out ? "output_tuple" : "Arg_%d.1", i);
    hbm_buffer_t b = {.address = off,
                      .size = size,
                      .unpadded_size = size,
                      .start = 0,
                      .end = -1,
                      .space = 0,
                      .category = out ? HBM_CAT_OUTPUT : HBM_CAT_PARAMETER,
                      .flags = out ? HBM_BUF_LIVE_OUT : HBM_BUF_INDEFINITE,
                      .op = name,
                      .shape = "f32[4096,4096]",
                      .opcode = out ? "tuple" : "parameter",
                      .source = "train.py:12"};
    if (!out)
      b.end = n_instr;
    if (hbm_profile_add_buffer(p, &b) < 0)
      break;
    live[n_live++] = (vf_live_t){off, size, n_instr};
    off += size;
  }
  for (int i = 0; i < n_instr; i++) {
    uint64_t size =
        ((uint64_t)(1 + vf_rand(&rng) % 48) * VF_MIB * scale) / 2 + (i % 5 == 0 ? 8192 : 0);
    bool tiled = i % 3 == 0;
    uint64_t unpadded = tiled ? size / 2 + size / 8 : size;
    int64_t end = i + 1 + (int64_t)(vf_rand(&rng) % 12);
    if (end > n_instr)
      end = n_instr;
    uint64_t at = vf_place(live, n_live, i, size);
    const char *opc = vf_opcodes[i % 8];
    snprintf(name, sizeof name, "%s.%d", opc, i);
    snprintf(shape, sizeof shape, tiled ? "f32[%llu,8]{1,0:T(8,128)}" : "f32[%llu,128]{1,0}",
             (unsigned long long)(unpadded / (tiled ? 32 : 512)));
    snprintf(label, sizeof label, "%%%s = %s %s(%%param.%d), metadata={op_name=\"jit(f)/%s\"}",
             name, shape, opc, i % 4, opc);
    hbm_buffer_t b = {.address = at,
                      .size = size,
                      .unpadded_size = unpadded,
                      .start = i,
                      .end = end,
                      .space = 0,
                      .category = HBM_CAT_TEMPORARY,
                      .op = name,
                      .shape = shape,
                      .group = i % 2 ? "activations" : "HLO temp",
                      .source = "model.py:57",
                      .opcode = opc,
                      .label = label};
    if (hbm_profile_add_buffer(p, &b) < 0)
      break;
    live[n_live++] = (vf_live_t){at, size, end};
  }
  free(live);
  if (hbm_profile_finish(p) != HBM_OK) {
    hbm_profile_free(p);
    return NULL;
  }
  return p;
}

/* ---- logdirs ---- */

static inline int vf_mkdirs(const char *path) {
  char buf[8192];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *s = buf + 1; *s; s++)
    if (*s == '/') {
      *s = '\0';
      mkdir(buf, 0755);
      *s = '/';
    }
  return mkdir(buf, 0755) == 0 || access(buf, F_OK) == 0 ? 0 : -1;
}

static inline int vf_save(hbm_profile_t *p, const char *dir, const char *file) {
  char path[8192];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  int rc = p && hbm_profile_save(p, path) == HBM_OK ? 0 : -1;
  if (rc)
    fprintf(stderr, "fixture %s: %s\n", path, hbm_last_error());
  hbm_profile_free(p);
  return rc;
}

/* Copies the first `keep` parts in 10 of src to dst: a trace cut short by a crash. */
static inline int vf_truncated_copy(const char *src, const char *dst, int keep) {
  FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
  if (!in || !out) {
    if (in)
      fclose(in);
    return -1;
  }
  fseek(in, 0, SEEK_END);
  long n = ftell(in) * keep / 10;
  fseek(in, 0, SEEK_SET);
  char buf[65536];
  while (n > 0) {
    size_t got = fread(buf, 1, (size_t)(n < (long)sizeof buf ? n : (long)sizeof buf), in);
    if (got == 0)
      break;
    fwrite(buf, 1, got, out);
    n -= (long)got;
  }
  fclose(in);
  return fclose(out) == 0 ? 0 : -1;
}

#define VF_RUN_PLANS "2026_01_02_10_00_00"
#define VF_RUN_TRAIN "2026_01_01_09_00_00"
#define VF_RUN_BROKEN "2026_01_01_08_00_00"

/* The standard test logdir: a run with two plans (two modules, the larger one the default),
 * a runtime run with an OOM, and a run with a corrupt and a truncated profile. */
static inline int vf_write_logdir(const char *logdir, int64_t runtime_events) {
  char plans[4096], train[4096], broken[4096], path[4200], cut[4200];
  snprintf(plans, sizeof plans, "%s/plugins/profile/%s", logdir, VF_RUN_PLANS);
  snprintf(train, sizeof train, "%s/plugins/profile/%s", logdir, VF_RUN_TRAIN);
  snprintf(broken, sizeof broken, "%s/plugins/profile/%s", logdir, VF_RUN_BROKEN);
  if (vf_mkdirs(plans) || vf_mkdirs(train) || vf_mkdirs(broken))
    return -1;
  if (vf_save(vf_plan_profile("jit_train_step", 160, 7, 4), plans,
              "module_0001.jit_train_step.hbmtrace") ||
      vf_save(vf_plan_profile("jit_eval_step", 40, 9, 1), plans,
              "module_0002.jit_eval_step.hbmtrace") ||
      vf_save(vf_runtime_profile("train", runtime_events, 1, true), train,
              "testhost.4242.hbmtrace") ||
      /* big enough for several blocks, so the cut keeps some of them */
      vf_save(
          vf_runtime_profile("train", runtime_events > 20000 ? runtime_events : 20000, 2, false),
          broken, "whole.hbmtrace"))
    return -1;
  snprintf(path, sizeof path, "%s/whole.hbmtrace", broken);
  snprintf(cut, sizeof cut, "%s/truncated.hbmtrace", broken);
  if (vf_truncated_copy(path, cut, 6))
    return -1;
  snprintf(path, sizeof path, "%s/corrupt.hbmtrace", broken);
  const char junk[] = "HBMTRACE\x01garbage that is not a trace at all\n";
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  fwrite(junk, 1, sizeof junk - 1, f);
  return fclose(f) == 0 ? 0 : -1;
}

#endif /* HBM_VIEWER_FIXTURES_H */
