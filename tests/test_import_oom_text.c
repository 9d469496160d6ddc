/* test_import_oom_text.c — the reader of pasted out-of-memory errors (src/import/oom_text*.c)
 * over every fixture in tests/data/explain/ (one per wording found in public issue threads,
 * written with our own numbers) and the seed's text. Each expected number is the fixture's
 * own text times its unit, written beside it: GIB(79.25) is "79.25 GiB" = 79.25 * 2^30 bytes
 * rounded to a byte; TensorFlow's request is the tensor's shape times its element size. The
 * cause each fixture must get is reasoned in its comment from those numbers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbm.h"
#include "helpers.h"
#include "oom_written.h"

#define DATA HBM_SOURCE_DIR "/tests/data/explain/"
/* Rounded to the nearest byte with a cast, not llround(): the tables below are static
 * initializers, which need constant expressions (clang does not fold llround()). */
#define KIB(x) ((uint64_t)((x)*1024.0 + 0.5))
#define MIB(x) ((uint64_t)((x)*1048576.0 + 0.5))
#define GIB(x) ((uint64_t)((x)*1073741824.0 + 0.5))
#define END                                                                                        \
  { HBM_OOMF_COUNT, 0 }
#define F(field, v)                                                                                \
  { HBM_OOMF_##field, (v) }

typedef struct field_value {
  hbm_oom_field_t field;
  uint64_t value;
} field_value_t;

typedef struct expect {
  const char *file;
  hbm_oom_kind_t kind;
  int64_t line;      /* the headline's line in the file */
  const char *cause; /* cause_names in oom_text_explain.c */
  size_t n_buffers;
  const char *top_group; /* the operator path with the most bytes (NULL: no buffers) */
  uint64_t top_group_bytes;
  field_value_t fields[16]; /* every number the text gives, and only those */
} expect_t;

static const expect_t expects[] = {
    /* ---- XLA on CPU ---- */
    /* JAX 0.10.2's own text (tests/data/explain/xla_cpu_dump/oom_cpu.py run under ulimit -v
     * 5000000): the host did not give the 7200000000 bytes; nothing else in it. */
    {"xla_cpu_oom.txt",
     HBM_OOM_XLA_CPU,
     13,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, 7200000000), END}},
    /* ---- XLA on GPU ---- */
    /* No numbers but the request; 8 GiB is no small request: over the limit. */
    {"xla_gpu_bare.txt",
     HBM_OOM_XLA_GPU,
     6,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, 8589934592), END}},
    /* The program needs 2.25GiB in all: over the limit. Groups: dense_1 768MiB > parameters
     * 512MiB > dense_0 256MiB. */
    {"xla_gpu_buffer_assignment.txt",
     HBM_OOM_XLA_GPU,
     1,
     "over_limit",
     3,
     "MLP/dense_1",
     MIB(768),
     {F(REQUESTED, 1610612736), F(PARAMETER, MIB(512)), F(CONSTANT, 0), F(MAYBE_LIVE_OUT, MIB(256)),
      F(PREALLOCATED_TEMP, GIB(1.5)), F(TOTAL_ALLOCATION, GIB(2.25)), F(TOTAL_FRAGMENTATION, 0),
      END}},
    /* Ray's "(MeshHostWorker pid=4821)" prefix in colour codes, tabs, the fragmentation row. */
    {"xla_gpu_ray_prefixed.txt",
     HBM_OOM_XLA_GPU,
     1,
     "over_limit",
     2,
     "GPTModule/lm_head",
     GIB(4),
     {F(REQUESTED, 4294967296), F(PARAMETER, GIB(7.5)), F(CONSTANT, 0), F(MAYBE_LIVE_OUT, MIB(320)),
      F(PREALLOCATED_TEMP, GIB(4)), F(TEMP_FRAGMENTATION, 0), F(TOTAL_ALLOCATION, GIB(11.81)),
      F(TOTAL_FRAGMENTATION, KIB(6)), END}},
    /* 2019's "Resource exhausted: Out \nof memory", wrapped, behind a log prefix. */
    {"xla_gpu_old_resource_exhausted.txt",
     HBM_OOM_XLA_GPU,
     1,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, 5368709120), END}},
    /* Older jaxlib's pool error; 64 MiB is a small request with no program numbers. */
    {"xla_gpu_failed_request.txt",
     HBM_OOM_XLA_GPU,
     1,
     "preallocation",
     0,
     NULL,
     0,
     {F(REQUESTED, 67108864), END}},
    /* BFC stats: 14.00GiB in use + 12.00GiB > limit 22.50GiB. */
    {"xla_gpu_bfc_log.txt",
     HBM_OOM_XLA_GPU,
     16,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, 12884901888), F(ROUNDED, 12884901888), F(LIMIT, GIB(22.5)), F(IN_USE, GIB(14)),
      F(MAX_IN_USE, GIB(14.25)), F(NUM_ALLOCS, 4821), F(MAX_ALLOC_SIZE, GIB(6)), F(BFC_RESERVED, 0),
      F(PEAK_RESERVED, 0), F(LARGEST_FREE_BLOCK, 0), END}},
    /* 32212254720 - 19327352832 = 12 GiB free in the limit >= 4 GiB, largest block 2 GiB. */
    {"xla_gpu_bfc_fragmentation.txt",
     HBM_OOM_XLA_GPU,
     12,
     "fragmentation",
     0,
     NULL,
     0,
     {F(REQUESTED, 4294967296), F(ROUNDED, 4294967296), F(LIMIT, 32212254720),
      F(IN_USE, 19327352832), F(MAX_IN_USE, 21474836480), F(NUM_ALLOCS, 90210),
      F(MAX_ALLOC_SIZE, 2147483648), F(BFC_RESERVED, 0), F(PEAK_RESERVED, 0),
      F(LARGEST_FREE_BLOCK, 2147483648), END}},
    /* cuda_malloc_async: 40 GiB asked, 20 GiB free of 80 GiB; Limit 0 means none. */
    {"xla_gpu_async.txt",
     HBM_OOM_XLA_GPU,
     1,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, 42949672960), F(FREE, 21474836480), F(CAPACITY, 85899345920), F(LIMIT, 0),
      F(IN_USE, 53687091200), F(MAX_IN_USE, 53687091200), F(NUM_ALLOCS, 21841),
      F(MAX_ALLOC_SIZE, 34359738368), F(BFC_RESERVED, 0), F(PEAK_RESERVED, 0),
      F(LARGEST_FREE_BLOCK, 0), END}},
    /* Jupyter: block_3/mlp holds 1.00GiB + 512.00MiB = 1.5 GiB of the 1.875 GiB listed. */
    {"xla_gpu_jupyter.txt",
     HBM_OOM_XLA_GPU,
     1,
     "over_limit",
     4,
     "Encoder/block_3/mlp",
     GIB(1.5),
     {F(REQUESTED, 2147483648), F(PARAMETER, GIB(1)), F(CONSTANT, KIB(16)),
      F(MAYBE_LIVE_OUT, MIB(512)), F(PREALLOCATED_TEMP, GIB(2)), F(TOTAL_ALLOCATION, GIB(3.5)),
      F(TOTAL_FRAGMENTATION, MIB(64)), END}},
    /* Cut inside Buffer 2; the program's 160 MiB is small: the pool is held elsewhere. */
    {"xla_gpu_cut_stats.txt",
     HBM_OOM_XLA_GPU,
     1,
     "preallocation",
     2,
     "Decoder/upsample",
     MIB(96),
     {F(REQUESTED, 100663296), F(PARAMETER, MIB(48)), F(CONSTANT, 0), F(MAYBE_LIVE_OUT, MIB(16)),
      F(PREALLOCATED_TEMP, MIB(96)), F(TOTAL_ALLOCATION, MIB(160)), F(TOTAL_FRAGMENTATION, 0),
      END}},
    /* pytest's "E   " prefix; 60 MiB in all: preallocation. */
    {"xla_gpu_pytest.txt",
     HBM_OOM_XLA_GPU,
     3,
     "preallocation",
     1,
     "Head",
     MIB(30),
     {F(REQUESTED, 31457280), F(PARAMETER, MIB(30)), F(CONSTANT, 0), F(MAYBE_LIVE_OUT, MIB(30)),
      F(PREALLOCATED_TEMP, 0), F(TOTAL_ALLOCATION, MIB(60)), F(TOTAL_FRAGMENTATION, 0), END}},
    /* torchrun-style "[rank1]: " prefix on every line. */
    {"xla_gpu_rank_prefixed.txt",
     HBM_OOM_XLA_GPU,
     4,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, 805306368), F(PARAMETER, GIB(2)), F(CONSTANT, 0), F(MAYBE_LIVE_OUT, GIB(2)),
      F(PREALLOCATED_TEMP, MIB(768)), F(TOTAL_ALLOCATION, GIB(4.75)),
      F(TOTAL_FRAGMENTATION, MIB(12)), END}},
    /* hbm's own diagnosis (`hbm demo`): 200 GiB requested > the 16.00GiB device. Three
     * groups of 125.0MiB tie; the first by name is adam/mu/embed. */
    {"xla_gpu_hbm_own_demo.txt",
     HBM_OOM_XLA_GPU,
     5,
     "too_large",
     10,
     "adam/mu/embed",
     131072000,
     {F(REQUESTED, 214748364800), F(CAPACITY, GIB(16)), F(FREE, GIB(4)), F(LIMIT, 12884901888),
      F(IN_USE, 493940736), F(LARGEST_FREE_BLOCK, 12390961152), END}},
    /* ---- XLA on TPU ---- */
    /* 17179869184 > 16106127360: larger than the device. */
    {"xla_tpu_allocation.txt",
     HBM_OOM_XLA_TPU,
     4,
     "too_large",
     1,
     "(no operator)",
     17179869184,
     {F(REQUESTED, 17179869184), F(CAPACITY, 16106127360), END}},
    /* attn: two 16.00G buffers = 32 GiB. */
    {"xla_tpu_compile_hbm.txt",
     HBM_OOM_XLA_TPU,
     1,
     "over_limit",
     3,
     "Llama/layers_0/attn",
     GIB(32),
     {F(USED, GIB(40.5)), F(CAPACITY, GIB(15.75)), F(EXCEEDED, GIB(24.75)), F(TOTAL_USAGE, GIB(41)),
      F(TPU_RESERVED, MIB(512)), F(PROGRAM, GIB(40.5)), F(ARGUMENTS, 0), F(OUTPUT, 0),
      F(HLO_TEMP, GIB(40.25)), END}},
    {"xla_tpu_vmem.txt",
     HBM_OOM_XLA_TPU,
     1,
     "over_limit",
     0,
     NULL,
     0,
     {F(USED, MIB(24.5)), F(CAPACITY, MIB(16)), F(EXCEEDED, MIB(8.5)), END}},
    {"xla_tpu_old_compilation_failure.txt",
     HBM_OOM_XLA_TPU,
     2,
     "over_limit",
     0,
     NULL,
     0,
     {F(USED, GIB(8.5)), F(CAPACITY, GIB(8)), F(EXCEEDED, MIB(512)), END}},
    /* The exact byte counts in parentheses win over the rounded sizes. */
    {"xla_tpu_reserve.txt",
     HBM_OOM_XLA_TPU,
     2,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, GIB(4.5)), F(FREE, GIB(2.25)), F(CAPACITY, GIB(8)), F(TPU_RESERVED, 536870912),
      F(ALLOCATED, 5637144576), F(PROGRAM, 4831838208), F(TOTAL_USAGE, GIB(10.25)), END}},
    {"xla_tpu_allocate_runtime.txt",
     HBM_OOM_XLA_TPU,
     1,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, MIB(192)), F(FREE, MIB(96)), END}},
    {"xla_tpu_log_prefixed.txt",
     HBM_OOM_XLA_TPU,
     1,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, GIB(12)), F(FREE, GIB(9.5)), END}},
    /* Both allocations sit in scan/while/body: 2.00G + 1.00G. */
    {"xla_tpu_labels.txt",
     HBM_OOM_XLA_TPU,
     1,
     "over_limit",
     2,
     "scan/while/body",
     GIB(3),
     {F(USED, GIB(20)), F(CAPACITY, GIB(15.48)), F(EXCEEDED, GIB(4.52)), F(TOTAL_USAGE, GIB(20.52)),
      F(TPU_RESERVED, MIB(530)), F(PROGRAM, GIB(20)), F(ARGUMENTS, MIB(256)), F(OUTPUT, MIB(128)),
      END}},
    /* Cut above "Ran out of memory": the report alone. */
    {"xla_tpu_cut_report.txt",
     HBM_OOM_XLA_TPU,
     1,
     "over_limit",
     2,
     "Falcon/h/0/self_attention",
     GIB(8),
     {F(TOTAL_USAGE, GIB(23)), F(TPU_RESERVED, GIB(1)), F(PROGRAM, GIB(22)), F(ARGUMENTS, 0),
      F(OUTPUT, 0), F(HLO_TEMP, GIB(21.5)), END}},
    {"xla_tpu_glog_prefixed.txt",
     HBM_OOM_XLA_TPU,
     3,
     "over_limit",
     0,
     NULL,
     0,
     {F(USED, GIB(17.25)), F(CAPACITY, GIB(15.75)), F(EXCEEDED, GIB(1.5)), END}},
    {"xla_tpu_hlo_temp_rows.txt",
     HBM_OOM_XLA_TPU,
     1,
     "over_limit",
     0,
     NULL,
     0,
     {F(USED, GIB(63.75)), F(CAPACITY, GIB(30.75)), F(EXCEEDED, GIB(33)), F(TOTAL_USAGE, GIB(65)),
      F(TPU_RESERVED, GIB(1.25)), F(PROGRAM, GIB(63.75)), F(ARGUMENTS, 0), F(OUTPUT, 0),
      F(HLO_TEMP, GIB(63.5)), END}},
    /* ---- PyTorch ---- */
    /* 5.25 GiB reserved but unallocated >= 4 GiB requested: fragmentation. */
    {"pytorch_new_this_process.txt",
     HBM_OOM_PYTORCH,
     4,
     "fragmentation",
     0,
     NULL,
     0,
     {F(REQUESTED, GIB(4)), F(CAPACITY, GIB(79.25)), F(FREE, GIB(2.5)), F(IN_USE, GIB(76.75)),
      F(ALLOCATED, GIB(70.5)), F(RESERVED_UNALLOCATED, GIB(5.25)), F(RESERVED, GIB(75.75)), END}},
    /* pid 31337 holds 40 GiB; 512 MiB free + 40 GiB >= 2 GiB. */
    {"pytorch_new_other_process.txt",
     HBM_OOM_PYTORCH,
     1,
     "other_processes",
     0,
     NULL,
     0,
     {F(REQUESTED, GIB(2)), F(CAPACITY, GIB(79.25)), F(FREE, MIB(512)), F(IN_USE, GIB(38.5)),
      F(ALLOCATED, GIB(36)), F(RESERVED_UNALLOCATED, GIB(1.5)), F(RESERVED, GIB(37.5)),
      F(OTHER_PROCESSES, GIB(40)), END}},
    /* 2.1's "capacty"; 2.25 GiB unallocated >= 1.75 GiB. */
    {"pytorch_capacty_typo.txt",
     HBM_OOM_PYTORCH,
     1,
     "fragmentation",
     0,
     NULL,
     0,
     {F(REQUESTED, GIB(1.75)), F(CAPACITY, GIB(6)), F(FREE, 0), F(ALLOCATED, GIB(3)),
      F(RESERVED_UNALLOCATED, GIB(2.25)), F(RESERVED, GIB(5.25)), END}},
    /* Process 20480 (14.50 GiB >= 14.00 GiB + 320 MiB reserved) is this one in a container;
     * 320 MiB unallocated and 256 MiB free are both < 512 MiB. */
    {"pytorch_container_pid.txt",
     HBM_OOM_PYTORCH,
     3,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, MIB(512)), F(CAPACITY, GIB(14.75)), F(FREE, MIB(256)), F(ALLOCATED, GIB(14)),
      F(RESERVED_UNALLOCATED, MIB(320)), F(RESERVED, GIB(14) + MIB(320)), F(IN_USE, GIB(14.5)),
      END}},
    /* reserved 14.75 - allocated 14.50 = 256 MiB >= 20 MiB. */
    {"pytorch_old_reserved.txt",
     HBM_OOM_PYTORCH,
     1,
     "fragmentation",
     0,
     NULL,
     0,
     {F(REQUESTED, MIB(20)), F(CAPACITY, GIB(15.78)), F(ALLOCATED, GIB(14.5)), F(FREE, MIB(4.75)),
      F(RESERVED, GIB(14.75)), F(RESERVED_UNALLOCATED, MIB(256)), END}},
    /* 5.25 - 3.50 = 1.75 GiB >= 1.50 GiB. */
    {"pytorch_old_max_split.txt",
     HBM_OOM_PYTORCH,
     1,
     "fragmentation",
     0,
     NULL,
     0,
     {F(REQUESTED, GIB(1.5)), F(CAPACITY, GIB(7.79)), F(ALLOCATED, GIB(3.5)), F(FREE, GIB(1.25)),
      F(RESERVED, GIB(5.25)), F(RESERVED_UNALLOCATED, GIB(1.75)), END}},
    /* "cached": nothing unallocated; 11.17 - 10.50 GiB - 16 MiB ~ 0.65 GiB is no quarter of
     * the device: over the limit. */
    {"pytorch_oldest_cached.txt",
     HBM_OOM_PYTORCH,
     1,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, MIB(64)), F(CAPACITY, GIB(11.17)), F(ALLOCATED, GIB(10.5)), F(FREE, MIB(16)),
      F(RESERVED, GIB(10.5)), F(RESERVED_UNALLOCATED, 0), END}},
    /* 10 GiB > 8 GiB. */
    {"pytorch_too_large.txt",
     HBM_OOM_PYTORCH,
     1,
     "too_large",
     0,
     NULL,
     0,
     {F(REQUESTED, GIB(10)), F(CAPACITY, GIB(8)), F(ALLOCATED, GIB(2)), F(FREE, 0),
      F(RESERVED, GIB(2.5)), F(RESERVED_UNALLOCATED, MIB(512)), END}},
    /* Wrapped over three "[rank3]: " lines; 512 MiB and 640 MiB are both < 896 MiB. */
    {"pytorch_rank_wrapped.txt",
     HBM_OOM_PYTORCH,
     4,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, MIB(896)), F(CAPACITY, GIB(39.39)), F(FREE, MIB(640)), F(IN_USE, GIB(38.75)),
      F(ALLOCATED, GIB(37)), F(RESERVED_UNALLOCATED, MIB(512)), F(RESERVED, GIB(37.5)), END}},
    /* Two other processes: 10 + 12 = 22 GiB. */
    {"pytorch_multi_process.txt",
     HBM_OOM_PYTORCH,
     1,
     "other_processes",
     0,
     NULL,
     0,
     {F(REQUESTED, GIB(1)), F(CAPACITY, GIB(24)), F(FREE, MIB(768)), F(IN_USE, GIB(1.25)),
      F(ALLOCATED, GIB(1)), F(RESERVED_UNALLOCATED, 0), F(RESERVED, GIB(1)),
      F(OTHER_PROCESSES, GIB(22)), END}},
    /* ROCm's "HIP out of memory"; 256 MiB and 1.5 GiB are < 2 GiB. */
    {"pytorch_hip.txt",
     HBM_OOM_PYTORCH,
     1,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, GIB(2)), F(CAPACITY, GIB(63.98)), F(FREE, GIB(1.5)), F(ALLOCATED, GIB(60)),
      F(RESERVED_UNALLOCATED, MIB(256)), F(RESERVED, GIB(60.25)), END}},
    /* set_per_process_memory_fraction: 11.75 + 1 GiB > 12 GiB allowed. */
    {"pytorch_allowed.txt",
     HBM_OOM_PYTORCH,
     1,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, GIB(1)), F(CAPACITY, GIB(23.69)), F(ALLOCATED, GIB(11.5)), F(FREE, GIB(10.75)),
      F(LIMIT, GIB(12)), F(RESERVED, GIB(11.75)), F(RESERVED_UNALLOCATED, MIB(256)), END}},
    /* 9.25 GiB free for 12 MiB: the text cannot say why. */
    {"pytorch_free_enough.txt",
     HBM_OOM_PYTORCH,
     1,
     "unknown",
     0,
     NULL,
     0,
     {F(REQUESTED, MIB(12)), F(CAPACITY, GIB(10.92)), F(ALLOCATED, MIB(8.5)), F(FREE, GIB(9.25)),
      F(RESERVED, MIB(4.5)), END}},
    /* ---- TensorFlow ---- */
    /* float[32,128,128,256] = 32*128*128*256*4 bytes; no allocator numbers. */
    {"tensorflow_tensor_node.txt",
     HBM_OOM_TENSORFLOW,
     2,
     "unknown",
     0,
     NULL,
     0,
     {F(REQUESTED, 32ull * 128 * 128 * 256 * 4), END}},
    /* float[16,1024,1024,16] = 1 GiB; 10200547328 in use + 1 GiB > 10737418240. */
    {"tensorflow_bfc_stats_old.txt",
     HBM_OOM_TENSORFLOW,
     10,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, 16ull * 1024 * 1024 * 16 * 4), F(LIMIT, 10737418240), F(IN_USE, 10200547328),
      F(MAX_IN_USE, 10468982784), F(NUM_ALLOCS, 82), F(MAX_ALLOC_SIZE, 3221225472), END}},
    /* float[8192,65536] = 2 GiB; 16374562816 - 10737418240 = 5.25 GiB free >= 2 GiB. */
    {"tensorflow_bfc_fragmentation.txt",
     HBM_OOM_TENSORFLOW,
     14,
     "fragmentation",
     0,
     NULL,
     0,
     {F(REQUESTED, 8192ull * 65536 * 4), F(ROUNDED, 2147483648), F(LIMIT, 16374562816),
      F(IN_USE, 10737418240), F(MAX_IN_USE, 12884901888), F(NUM_ALLOCS, 1234),
      F(MAX_ALLOC_SIZE, 4294967296), F(BFC_RESERVED, 0), F(PEAK_RESERVED, 0),
      F(LARGEST_FREE_BLOCK, 1073741824), END}},
    /* double[4096,4096] = 4096*4096*8 bytes. */
    {"tensorflow_of_shape_old.txt",
     HBM_OOM_TENSORFLOW,
     1,
     "unknown",
     0,
     NULL,
     0,
     {F(REQUESTED, 4096ull * 4096 * 8), END}},
    {"tensorflow_failed_to_allocate.txt", HBM_OOM_TENSORFLOW, 4, "unknown", 0, NULL, 0, {END}},
    /* TensorFlow beside JAX got a 2 GiB limit: 2013265920 + 256 MiB > 2147483648. */
    {"tensorflow_bfc_only_with_jax.txt",
     HBM_OOM_TENSORFLOW,
     1,
     "over_limit",
     0,
     NULL,
     0,
     {F(REQUESTED, MIB(256)), F(ROUNDED, 268435456), F(LIMIT, 2147483648), F(IN_USE, 2013265920),
      F(MAX_IN_USE, 2013265920), F(NUM_ALLOCS, 311), F(MAX_ALLOC_SIZE, 536870912),
      F(BFC_RESERVED, 0), F(PEAK_RESERVED, 0), F(LARGEST_FREE_BLOCK, 0), END}},
};

static hbm_oom_text_t *parse_file(const char *path) {
  size_t len;
  char *data = th_read(path, &len);
  assert_non_null(data);
  hbm_oom_text_t *t = hbm_oom_text_parse(data, len, path);
  free(data);
  return t;
}

/* The explanation's JSON, parsed. */
static json_t *as_json(const hbm_oom_text_t *t) {
  char *text = written(t, hbm_oom_text_json);
  json_t *o = json_loads(text, 0, NULL);
  free(text);
  assert_non_null(o);
  return o;
}

static void check_fields(const expect_t *e, const hbm_oom_text_t *t) {
  size_t listed = 0;
  for (const field_value_t *fv = e->fields; fv->field != HBM_OOMF_COUNT; fv++, listed++) {
    if (!t->known[fv->field] || t->value[fv->field] != fv->value)
      fail_msg("%s: %s expected %llu, got %s%llu", e->file, hbm_oom_field_name(fv->field),
               (unsigned long long)fv->value, t->known[fv->field] ? "" : "nothing ",
               (unsigned long long)t->value[fv->field]);
  }
  size_t known = 0;
  for (int f = 0; f < HBM_OOMF_COUNT; f++)
    known += t->known[f] != 0;
  if (known != listed)
    fail_msg("%s: %zu numbers parsed, %zu expected", e->file, known, listed);
}

static void check_json(const expect_t *e, const hbm_oom_text_t *t) {
  json_t *o = as_json(t);
  assert_string_equal(json_string_value(json_object_get(o, "cause")), e->cause);
  json_t *groups = json_object_get(o, "groups");
  assert_int_equal(json_array_size(json_object_get(o, "buffers")), e->n_buffers);
  if (e->top_group) {
    json_t *top = json_array_get(groups, 0);
    assert_string_equal(json_string_value(json_object_get(top, "group")), e->top_group);
    assert_int_equal(json_integer_value(json_object_get(top, "bytes")), e->top_group_bytes);
  }
  assert_true(json_array_size(json_object_get(o, "fixes")) > 0);
  json_decref(o);
}

static void test_fixtures(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof expects / sizeof expects[0]; i++) {
    const expect_t *e = &expects[i];
    char path[512];
    snprintf(path, sizeof path, "%s%s", DATA, e->file);
    hbm_oom_text_t *t = parse_file(path);
    if (!t)
      fail_msg("%s: %s", e->file, hbm_last_error());
    if (t->kind != e->kind || t->line != e->line)
      fail_msg("%s: kind %s line %lld, expected %s line %lld", e->file, hbm_oom_kind_name(t->kind),
               (long long)t->line, hbm_oom_kind_name(e->kind), (long long)e->line);
    assert_int_equal(t->n_buffers, e->n_buffers);
    check_fields(e, t);
    check_json(e, t);
    hbm_oom_text_free(t);
  }
}

/* Texts beyond the numbers: devices, allocators, ops, buffers' fields, processes. */
static void test_details(void **state) {
  (void)state;
  hbm_oom_text_t *t = parse_file(DATA "xla_gpu_buffer_assignment.txt");
  assert_non_null(t);
  assert_string_equal(t->headline, "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: "
                                   "Out of memory while trying to allocate 1610612736 bytes.");
  assert_int_equal(t->buffers[0].size, MIB(768));
  assert_string_equal(t->buffers[0].source_file, "/home/ana/model.py");
  assert_int_equal(t->buffers[0].source_line, 41);
  assert_string_equal(t->buffers[0].label, "fusion");
  assert_string_equal(t->buffers[0].shape, "f32[4096,49152]");
  assert_true(t->buffers[1].parameter);
  assert_string_equal(t->buffers[1].group, "(entry parameters)");
  assert_string_equal(t->buffers[2].group, "MLP/dense_0"); /* transpose(jvp(MLP)) dropped */
  hbm_oom_text_free(t);

  t = parse_file(DATA "xla_tpu_labels.txt");
  assert_non_null(t);
  assert_string_equal(t->device, "hbm");
  assert_int_equal(t->buffers[1].unpadded_size, MIB(768));
  assert_string_equal(t->buffers[1].op_type, "mul");
  assert_string_equal(t->buffers[1].allocation_type, "HLO temp");
  hbm_oom_text_free(t);

  t = parse_file(DATA "pytorch_multi_process.txt");
  assert_non_null(t);
  assert_int_equal(t->n_processes, 2);
  assert_int_equal(t->processes[0].pid, 1001);
  assert_int_equal(t->processes[1].bytes, GIB(12));
  assert_false(t->this_process_listed);
  assert_string_equal(t->device, "GPU 0");
  hbm_oom_text_free(t);

  t = parse_file(DATA "pytorch_container_pid.txt");
  assert_non_null(t);
  assert_true(t->this_process_listed);
  assert_int_equal(t->processes[0].pid, 20480);
  hbm_oom_text_free(t);

  t = parse_file(DATA "tensorflow_bfc_stats_old.txt");
  assert_non_null(t);
  assert_string_equal(t->tensor_shape, "[16,1024,1024,16]");
  assert_string_equal(t->tensor_type, "float");
  assert_string_equal(t->device, "/job:localhost/replica:0/task:0/device:GPU:0");
  assert_string_equal(t->allocator, "GPU_0_bfc");
  assert_string_equal(t->op, "Tile_3");
  hbm_oom_text_free(t);

  t = parse_file(DATA "xla_gpu_async.txt");
  assert_non_null(t);
  assert_string_equal(t->allocator, "gpu_async_0");
  hbm_oom_text_free(t);
}

/* The seed's TPU text (seed 000) and its docs pages that hold no error (001, 002). */
static void test_seeds(void **state) {
  (void)state;
  th_need_shared();
  char path[512];
  snprintf(path, sizeof path, "%s/seeds/000_1372acd1c5972592.txt", HBM_SHARED_DIR);
  hbm_oom_text_t *t = parse_file(path);
  assert_non_null(t);
  /* "XlaRuntimeError: RESOURCE_EXHAUSTED: Allocation (size=107374182400) would exceed memory
   * (size=17179869184)" is the seed's line 18 (grep -n); 100 GiB > 16 GiB. */
  assert_int_equal(t->kind, HBM_OOM_XLA_TPU);
  assert_int_equal(t->line, 18);
  assert_int_equal(t->value[HBM_OOMF_REQUESTED], 107374182400);
  assert_int_equal(t->value[HBM_OOMF_CAPACITY], 17179869184);
  assert_int_equal(t->n_buffers, 1);
  assert_string_equal(t->buffers[0].shape, "u8[327680,327680]{1,0:T(8,128)(4,1)}");
  assert_string_equal(t->buffers[0].label, "output of xor_convert_fusion@{}");
  json_t *o = as_json(t);
  assert_string_equal(json_string_value(json_object_get(o, "cause")), "too_large");
  json_decref(o);
  hbm_oom_text_free(t);
  for (int i = 1; i <= 2; i++) {
    snprintf(path, sizeof path, "%s/seeds/%s", HBM_SHARED_DIR,
             i == 1 ? "001_a26ce7347ea9dc5e.txt" : "002_e6fe2c72b370b0ae.txt");
    assert_null(parse_file(path));
    assert_non_null(strstr(hbm_last_error(), "no out-of-memory error found"));
  }
}

static void test_no_oom(void **state) {
  (void)state;
  assert_null(parse_file(DATA "no_oom_traceback.txt"));
  assert_non_null(strstr(hbm_last_error(), "no_oom_traceback.txt: no out-of-memory error found"));
  assert_null(hbm_oom_text_parse("", 0, "empty"));
  assert_false(hbm_oom_text_is("RESOURCE_EXHAUSTED: something else", 34));
}

/* hbm_profile_load recognises a pasted error and makes its peak buffers a profile: one step,
 * every buffer live at it, the OOM as its event. */
static void test_profile(void **state) {
  (void)state;
  hbm_profile_t *p = hbm_profile_load(DATA "xla_gpu_jupyter.txt");
  assert_non_null(p);
  assert_int_equal(hbm_profile_buffer_count(p), 4);
  assert_int_equal(hbm_profile_oom_count(p), 1);
  assert_int_equal(hbm_profile_oom(p, 0)->requested, 2147483648);
  assert_string_equal(hbm_profile_buffer(p, 0)->group, "Encoder/block_3/mlp");
  assert_int_equal(hbm_profile_buffer(p, 3)->category, HBM_CAT_PARAMETER);
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_non_null(a);
  /* 1.00GiB + 512.00MiB + 256.00MiB + 128.00MiB live together */
  assert_int_equal(hbm_analysis_summary(a)->peak_bytes, GIB(1) + MIB(512 + 256 + 128));
  hbm_analysis_free(a);
  hbm_profile_free(p);
}

static uint64_t profile_peak(const char *file) {
  char path[512];
  snprintf(path, sizeof path, "%s%s", DATA, file);
  hbm_profile_t *p = hbm_profile_load(path);
  if (!p)
    fail_msg("%s: %s", file, hbm_last_error());
  hbm_analysis_t *a = hbm_analyze(p, 0);
  assert_non_null(a);
  uint64_t peak = hbm_analysis_summary(a)->peak_bytes;
  hbm_analysis_free(a);
  hbm_profile_free(p);
  return peak;
}

/* Without a buffer list the totals the text gives become the profile's buffers, and its peak
 * is the framework's own total row: XLA's "total allocation", TPU's "Total hbm usage", what
 * PyTorch allocated, the BFC allocator's InUse. */
static void test_profile_of_totals(void **state) {
  (void)state;
  /* parameters 2.00GiB + maybe_live_out 2.00GiB + temporaries 768.00MiB = total 4.75GiB */
  assert_int_equal(profile_peak("xla_gpu_rank_prefixed.txt"), GIB(4.75));
  /* reserved 512.00M + currently allocated 5,637,144,576 + program 4,831,838,208 bytes =
   * "Total hbm usage >= 10.25G" */
  assert_int_equal(profile_peak("xla_tpu_reserve.txt"), GIB(10.25));
  /* reserved 1.25G + program 63.75G (+ arguments 0B) = "Total hbm usage >= 65.00G" */
  assert_int_equal(profile_peak("xla_tpu_hlo_temp_rows.txt"), GIB(65));
  assert_int_equal(profile_peak("pytorch_hip.txt"), GIB(60)); /* allocated by PyTorch */
  assert_int_equal(profile_peak("tensorflow_bfc_stats_old.txt"), 10200547328); /* InUse */
}

/* ---- numbers that are no size (issue 26, finding 8) ---- */

static hbm_oom_text_t *parse_text(const char *text) {
  hbm_oom_text_t *t = hbm_oom_text_parse(text, strlen(text), "pasted");
  assert_non_null(t);
  return t;
}

/* A request the text gives as no usable size is never taken as a small one: not known,
 * marked unreadable, noted with the number as written, and the cause says it cannot be told
 * (before: "1e308 GiB" was 1 byte, "99999999999999.99E" 90.95 TiB, "-5 bytes" "a request of
 * only 0B"). */
static void expect_unreadable_request(const char *text, const char *as_written, const char *why) {
  hbm_oom_text_t *t = parse_text(text);
  assert_false(t->known[HBM_OOMF_REQUESTED]);
  assert_true(t->unreadable[HBM_OOMF_REQUESTED]);
  assert_non_null(t->notes);
  assert_non_null(strstr(t->notes, as_written));
  assert_non_null(strstr(t->notes, why));
  char *e = written(t, hbm_oom_text_explain);
  assert_non_null(strstr(e, "cause: cannot be told: the size requested in the text is not"));
  assert_null(strstr(e, "requested: 1 bytes"));
  assert_null(strstr(e, "only 0B"));
  assert_null(strstr(e, "90.95TiB"));
  free(e);
  json_t *o = as_json(t);
  assert_string_equal(json_string_value(json_object_get(o, "cause")), "unreadable_request");
  assert_string_equal(json_string_value(json_array_get(json_object_get(o, "unreadable"), 0)),
                      "requested");
  json_decref(o);
  hbm_oom_text_free(t);
}

static void test_numbers_out_of_range(void **state) {
  (void)state;
  const char *torch = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %s. GPU 0 "
                      "has a total capacity of 79.15 GiB of which 1.00 GiB is free.\n";
  char text[512];
  snprintf(text, sizeof text, torch, "1e308 GiB");
  expect_unreadable_request(text, "'1e308 GiB'", "16 EiB or more");
  snprintf(text, sizeof text, torch, "99999999999999.99E"); /* 10^14 EiB: past 2^64 */
  expect_unreadable_request(text, "'99999999999999.99E'", "16 EiB or more");
  snprintf(text, sizeof text, torch, "18446744073709551614 bytes"); /* 2^64 - 2 */
  expect_unreadable_request(text, "'18446744073709551614 bytes'", "16 EiB or more");
  expect_unreadable_request("RESOURCE_EXHAUSTED: Out of memory while trying to allocate -5 "
                            "bytes.\n",
                            "'-5 bytes'", "negative, not a size");

  /* in range, whatever the notation: 2.5e9 bytes = 2,500,000,000; 8.00E (XLA's exa) =
   * 8 x 2^60 = 2^63 = 9223372036854775808; 18446744073709551613 bytes = 2^64 - 3, the most */
  snprintf(text, sizeof text, torch, "2.5e9 bytes");
  hbm_oom_text_t *t = parse_text(text);
  assert_true(t->known[HBM_OOMF_REQUESTED] && t->value[HBM_OOMF_REQUESTED] == 2500000000u);
  assert_null(t->notes);
  hbm_oom_text_free(t);
  /* a unit of 2^80 bytes with a zero number (found by fuzz_oom_text: UBSan, the unit itself
   * converted to 64 bits): 0.00 YiB = 0 bytes, and no undefined conversion */
  snprintf(text, sizeof text, torch, "0.00 YiB");
  t = parse_text(text);
  assert_true(t->known[HBM_OOMF_REQUESTED] && t->value[HBM_OOMF_REQUESTED] == 0);
  hbm_oom_text_free(t);
  /* zero with an exponent past long double's range (found by fuzz_oom_text: UBSan, 0 × inf
   * = NaN converted to 64 bits): 0e3082021 GiB = 0 bytes */
  snprintf(text, sizeof text, torch, "0e3082021 GiB");
  t = parse_text(text);
  assert_true(t->known[HBM_OOMF_REQUESTED] && t->value[HBM_OOMF_REQUESTED] == 0);
  hbm_oom_text_free(t);
  snprintf(text, sizeof text, torch, "8.00E");
  t = parse_text(text);
  assert_true(t->value[HBM_OOMF_REQUESTED] == UINT64_C(9223372036854775808));
  hbm_oom_text_free(t);
  snprintf(text, sizeof text, torch, "18446744073709551613 bytes");
  t = parse_text(text);
  assert_true(t->known[HBM_OOMF_REQUESTED] &&
              t->value[HBM_OOMF_REQUESTED] == UINT64_C(18446744073709551613));
  hbm_oom_text_free(t);

  /* a peak buffer whose size is out of range is left out, with a note; the others stay */
  t = parse_text("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1024 bytes.\n"
                 "Peak buffers:\n\tBuffer 1:\n\t\tSize: 1e30 GiB\n\t\tXLA Label: fusion.9\n"
                 "\t\tShape: f32[4]\n\t\t==========================\n\n"
                 "\tBuffer 2:\n\t\tSize: 2.00KiB\n\t\tXLA Label: fusion.7\n"
                 "\t\tShape: f32[512]\n\t\t==========================\n");
  assert_int_equal(t->n_buffers, 1);
  assert_true(t->buffers[0].size == 2048);
  assert_non_null(strstr(t->notes, "buffer 1 (fusion.9): its size in the text is 16 EiB or"));
  hbm_oom_text_free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fixtures),
      cmocka_unit_test(test_details),
      cmocka_unit_test(test_seeds),
      cmocka_unit_test(test_no_oom),
      cmocka_unit_test(test_profile),
      cmocka_unit_test(test_profile_of_totals),
      cmocka_unit_test(test_numbers_out_of_range),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
