/* oom_text_explain.c — what a pasted out-of-memory error means: the framework's first line
 * kept, the numbers it gave, the cause (request larger than the device; in use + request
 * over the limit; fragmentation; other processes; preallocation) and the fixes, the same
 * remedies hbm gives for its own OOMs (base/oom_fixes.h), then the peak buffers grouped by
 * operator path so that the layer that dominates shows. Also the JSON and the profile. */
#include "base/oom_fixes.h"
#include "import/oom_text.h"
#include "profile/json_out.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum text_cause {
  TC_TOO_LARGE,
  TC_OVER_LIMIT,
  TC_FRAGMENTATION,
  TC_OTHER_PROCESSES,
  TC_PREALLOCATION,
  TC_UNKNOWN,
  TC_UNREADABLE_REQUEST /* the size requested is in the text, but no usable number */
} text_cause_t;

static const char *const cause_names[] = {"too_large",         "over_limit",    "fragmentation",
                                          "other_processes",   "preallocation", "unknown",
                                          "unreadable_request"};

static const char *const field_labels[HBM_OOMF_COUNT] = {
    "requested",
    "rounded by the allocator to",
    "device memory",
    "free on the device",
    "allocator limit",
    "in use",
    "allocated",
    "reserved",
    "reserved but unallocated",
    "held by other processes",
    "peak in use (MaxInUse)",
    "allocations (NumAllocs)",
    "largest allocation (MaxAllocSize)",
    "reserved (BFC)",
    "peak reserved",
    "largest free block",
    "parameters (BufferAssignment)",
    "constants",
    "maybe-live-out outputs",
    "preallocated temporaries",
    "temporaries' fragmentation",
    "program buffers in all (total allocation)",
    "total fragmentation",
    "used by the program",
    "over capacity by",
    "total usage at least",
    "reserved",
    "program",
    "arguments",
    "output",
    "HLO temporaries"};

static const char *fmt(uint64_t bytes, char *buf) { return hbm_format_bytes(bytes, buf, 32); }

/* The label of a number as the framework means it. */
static const char *label_of(const hbm_oom_text_t *t, hbm_oom_field_t f) {
  if (t->kind == HBM_OOM_PYTORCH) {
    if (f == HBM_OOMF_IN_USE)
      return "in use by this process";
    if (f == HBM_OOMF_ALLOCATED)
      return "allocated by PyTorch";
    if (f == HBM_OOMF_RESERVED)
      return "reserved by PyTorch";
    if (f == HBM_OOMF_LIMIT)
      return "allowed (per-process memory fraction)";
  }
  if (t->kind == HBM_OOM_XLA_TPU && f == HBM_OOMF_ALLOCATED)
    return "arrays already on the device";
  if (f == HBM_OOMF_IN_USE)
    return "in use (allocator)";
  return field_labels[f];
}

static bool has(const hbm_oom_text_t *t, hbm_oom_field_t f) { return t->known[f]; }
static uint64_t val(const hbm_oom_text_t *t, hbm_oom_field_t f) { return t->value[f]; }

static uint64_t request(const hbm_oom_text_t *t) {
  return has(t, HBM_OOMF_ROUNDED) ? val(t, HBM_OOMF_ROUNDED) : val(t, HBM_OOMF_REQUESTED);
}

/* ---- causes ---- */

/* An allocator with a limit and what is in use (BFC stats): larger than the limit, over it,
 * or enough free bytes in pieces. */
static text_cause_t classify_limit(const hbm_oom_text_t *t) {
  uint64_t req = request(t), limit = val(t, HBM_OOMF_LIMIT), in_use = val(t, HBM_OOMF_IN_USE);
  if (req > limit)
    return TC_TOO_LARGE;
  if (!has(t, HBM_OOMF_IN_USE) || in_use > limit - req)
    return TC_OVER_LIMIT;
  return TC_FRAGMENTATION;
}

static text_cause_t classify_xla_gpu(const hbm_oom_text_t *t) {
  uint64_t req = request(t);
  if (has(t, HBM_OOMF_CAPACITY) && req > val(t, HBM_OOMF_CAPACITY))
    return TC_TOO_LARGE;
  if (has(t, HBM_OOMF_LIMIT) && val(t, HBM_OOMF_LIMIT) > 0)
    return classify_limit(t);
  if (has(t, HBM_OOMF_FREE))
    return TC_OVER_LIMIT;
  /* No allocator numbers: a small request that fails means the pool is held elsewhere. */
  if (req <= (256ull << 20) && !has(t, HBM_OOMF_TOTAL_ALLOCATION))
    return TC_PREALLOCATION;
  if (has(t, HBM_OOMF_TOTAL_ALLOCATION) && val(t, HBM_OOMF_TOTAL_ALLOCATION) <= (256ull << 20))
    return TC_PREALLOCATION;
  return TC_OVER_LIMIT;
}

static text_cause_t classify_pytorch(const hbm_oom_text_t *t) {
  uint64_t req = request(t), cap = val(t, HBM_OOMF_CAPACITY), free_b = val(t, HBM_OOMF_FREE);
  if (has(t, HBM_OOMF_CAPACITY) && req > cap)
    return TC_TOO_LARGE;
  uint64_t others = val(t, HBM_OOMF_OTHER_PROCESSES);
  if (others && hbm__oom_add(free_b, others) >= req)
    return TC_OTHER_PROCESSES;
  if (has(t, HBM_OOMF_RESERVED_UNALLOCATED) && val(t, HBM_OOMF_RESERVED_UNALLOCATED) >= req)
    return TC_FRAGMENTATION;
  if (has(t, HBM_OOMF_LIMIT) && val(t, HBM_OOMF_RESERVED) + req > val(t, HBM_OOMF_LIMIT))
    return TC_OVER_LIMIT; /* torch.cuda.set_per_process_memory_fraction's "allowed" */
  if (has(t, HBM_OOMF_FREE) && free_b >= req)
    return TC_UNKNOWN;
  /* The old wording lists no processes: memory neither PyTorch's nor free is someone else's. */
  if (has(t, HBM_OOMF_CAPACITY) && has(t, HBM_OOMF_RESERVED) && !t->n_processes) {
    uint64_t reserved = val(t, HBM_OOMF_RESERVED), used = hbm__oom_add(free_b, reserved);
    if (cap > used && cap - used >= cap / 4 && hbm__oom_add(cap - used, free_b) >= req)
      return TC_OTHER_PROCESSES;
  }
  return TC_OVER_LIMIT;
}

static text_cause_t classify(const hbm_oom_text_t *t) {
  if (!has(t, HBM_OOMF_REQUESTED) && !has(t, HBM_OOMF_ROUNDED) &&
      (t->unreadable[HBM_OOMF_REQUESTED] || t->unreadable[HBM_OOMF_ROUNDED]))
    return TC_UNREADABLE_REQUEST; /* never compare a request taken as 0 */
  switch (t->kind) {
  case HBM_OOM_XLA_GPU: return classify_xla_gpu(t);
  case HBM_OOM_XLA_TPU:
    if (has(t, HBM_OOMF_CAPACITY) && has(t, HBM_OOMF_REQUESTED) &&
        val(t, HBM_OOMF_REQUESTED) > val(t, HBM_OOMF_CAPACITY))
      return TC_TOO_LARGE;
    return TC_OVER_LIMIT;
  case HBM_OOM_PYTORCH: return classify_pytorch(t);
  case HBM_OOM_XLA_CPU: return TC_OVER_LIMIT; /* the host gave no more */
  default:
    if (has(t, HBM_OOMF_LIMIT) && val(t, HBM_OOMF_LIMIT) > 0)
      return classify_limit(t);
    return TC_UNKNOWN;
  }
}

/* Other processes for the PyTorch texts: the listed ones, or what neither PyTorch holds nor
 * is free (old wording). */
static uint64_t others_bytes(const hbm_oom_text_t *t) {
  if (has(t, HBM_OOMF_OTHER_PROCESSES))
    return val(t, HBM_OOMF_OTHER_PROCESSES);
  uint64_t used = hbm__oom_add(val(t, HBM_OOMF_FREE), val(t, HBM_OOMF_RESERVED));
  return val(t, HBM_OOMF_CAPACITY) > used ? val(t, HBM_OOMF_CAPACITY) - used : 0;
}

static void cause_too_large(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  char a[32], b[32];
  bool limit_only = !has(t, HBM_OOMF_CAPACITY) && has(t, HBM_OOMF_LIMIT);
  uint64_t bound = limit_only ? val(t, HBM_OOMF_LIMIT) : val(t, HBM_OOMF_CAPACITY);
  hbm_strbuf_printf(sb, "request larger than the %s: %s requested, but the %s %s. ",
                    limit_only ? "allocator's limit" : "device", fmt(request(t), a),
                    limit_only ? "limit is" : "device has", fmt(bound, b));
  if (limit_only && t->kind == HBM_OOM_XLA_GPU)
    hbm_strbuf_puts(sb, "If the GPU is larger than the limit, raise "
                        "XLA_PYTHON_CLIENT_MEM_FRACTION; otherwise: ");
  hbm_strbuf_puts(sb, HBM_FIX_TOO_LARGE);
}

/* TPU: the program at compile time, or arrays already on the device at run time. */
static bool over_limit_tpu(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  char a[32], b[32], c[32], d[32];
  if (has(t, HBM_OOMF_USED))
    hbm_strbuf_printf(sb,
                      "the program needs more than the memory: it uses %s of the %s %s "
                      "(over by %s) at its peak. Make the program smaller.",
                      fmt(val(t, HBM_OOMF_USED), a), fmt(val(t, HBM_OOMF_CAPACITY), b),
                      t->device ? t->device : "hbm", fmt(val(t, HBM_OOMF_EXCEEDED), c));
  else if (has(t, HBM_OOMF_ALLOCATED))
    hbm_strbuf_printf(sb,
                      "in use + request over the limit: arrays already on the device hold %s, "
                      "and the %s requested does not fit in the %s free. Free arrays that are "
                      "no longer needed, or make the program smaller.",
                      fmt(val(t, HBM_OOMF_ALLOCATED), a), fmt(request(t), b),
                      fmt(val(t, HBM_OOMF_FREE), c));
  else if (has(t, HBM_OOMF_TOTAL_USAGE))
    hbm_strbuf_printf(sb,
                      "the program needs more than the memory: at least %s in all (program %s, "
                      "reserved %s, arguments %s). Make the program smaller.",
                      fmt(val(t, HBM_OOMF_TOTAL_USAGE), a), fmt(val(t, HBM_OOMF_PROGRAM), b),
                      fmt(val(t, HBM_OOMF_TPU_RESERVED), c), fmt(val(t, HBM_OOMF_ARGUMENTS), d));
  else
    return false;
  return true;
}

/* PyTorch: over what this process is allowed, or what it allocated with little free. */
static bool over_limit_pytorch(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  char a[32], b[32], c[32];
  if (has(t, HBM_OOMF_LIMIT))
    hbm_strbuf_printf(sb,
                      "in use + request over the limit: PyTorch reserved %s and %s was "
                      "requested, over the %s this process is allowed "
                      "(torch.cuda.set_per_process_memory_fraction).",
                      fmt(val(t, HBM_OOMF_RESERVED), a), fmt(request(t), b),
                      fmt(val(t, HBM_OOMF_LIMIT), c));
  else if (has(t, HBM_OOMF_ALLOCATED))
    hbm_strbuf_printf(sb,
                      "in use + request over the limit: PyTorch has %s allocated and %s was "
                      "requested, with %s free on the device.",
                      fmt(val(t, HBM_OOMF_ALLOCATED), a), fmt(request(t), b),
                      fmt(val(t, HBM_OOMF_FREE), c));
  else
    return false;
  return true;
}

static void cause_over_limit(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  char a[32], b[32], c[32], d[32], e[32];
  uint64_t req = request(t);
  if ((t->kind == HBM_OOM_XLA_TPU && over_limit_tpu(sb, t)) ||
      (t->kind == HBM_OOM_PYTORCH && over_limit_pytorch(sb, t)))
    return;
  if (t->kind == HBM_OOM_XLA_CPU) {
    hbm_strbuf_printf(sb,
                      "the host did not give XLA's CPU runtime the %s it asked for: the "
                      "process's memory limit (ulimit -v, a container's or job's limit) or the "
                      "machine's free memory is smaller than what the program needs then.",
                      fmt(req, a));
    return;
  }
  if (has(t, HBM_OOMF_LIMIT) && has(t, HBM_OOMF_IN_USE))
    hbm_strbuf_printf(sb, "in use + request over the limit: %s in use + %s requested > limit %s.",
                      fmt(val(t, HBM_OOMF_IN_USE), a), fmt(req, b), fmt(val(t, HBM_OOMF_LIMIT), c));
  else if (has(t, HBM_OOMF_FREE))
    hbm_strbuf_printf(sb, "in use + request over the limit: %s requested, %s free.", fmt(req, a),
                      fmt(val(t, HBM_OOMF_FREE), b));
  else if (has(t, HBM_OOMF_TOTAL_ALLOCATION)) /* XLA's BufferAssignment stats */
    hbm_strbuf_printf(sb,
                      "in use + request over the limit: the program's buffers need %s "
                      "(parameters %s, outputs %s, temporaries %s) and %s more did not fit in "
                      "what the allocator had left.",
                      fmt(val(t, HBM_OOMF_TOTAL_ALLOCATION), a), fmt(val(t, HBM_OOMF_PARAMETER), b),
                      fmt(val(t, HBM_OOMF_MAYBE_LIVE_OUT), c),
                      fmt(val(t, HBM_OOMF_PREALLOCATED_TEMP), d), fmt(req, e));
  else
    hbm_strbuf_printf(sb, "in use + request over the limit: %s more did not fit.", fmt(req, a));
}

static void cause_fragmentation(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  char a[32], b[32], c[32];
  if (t->kind == HBM_OOM_PYTORCH) {
    hbm_strbuf_printf(sb,
                      "fragmentation: PyTorch holds %s reserved but unallocated, more than the "
                      "%s requested, but not in one block that fits.",
                      fmt(val(t, HBM_OOMF_RESERVED_UNALLOCATED), a), fmt(request(t), b));
    return;
  }
  uint64_t free_in_limit = val(t, HBM_OOMF_LIMIT) - val(t, HBM_OOMF_IN_USE);
  hbm_strbuf_printf(sb,
                    "fragmentation: %s are free within the limit but the largest contiguous "
                    "free block is %s, smaller than the %s requested.",
                    fmt(free_in_limit, a), fmt(val(t, HBM_OOMF_LARGEST_FREE_BLOCK), b),
                    fmt(request(t), c));
}

static void cause_other_processes(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  char a[32], b[32], c[32];
  hbm_strbuf_printf(sb, "other processes hold the device's memory: ");
  const char *sep = "";
  for (size_t i = (size_t)t->this_process_listed; i < t->n_processes; i++, sep = ", ")
    hbm_strbuf_printf(sb, "%spid %lld holds %s", sep, (long long)t->processes[i].pid,
                      fmt(t->processes[i].bytes, a));
  if (!*sep)
    hbm_strbuf_printf(sb, "%s is neither PyTorch's nor free", fmt(others_bytes(t), a));
  hbm_strbuf_printf(sb, " (of %s; %s free), so the %s requested could not be had.",
                    fmt(val(t, HBM_OOMF_CAPACITY), b), fmt(val(t, HBM_OOMF_FREE), c),
                    fmt(request(t), a));
}

static void cause_preallocation(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  char a[32];
  hbm_strbuf_printf(sb,
                    "preallocation: a request of only %s failed, so the memory is held "
                    "elsewhere. JAX preallocates a pool (XLA_PYTHON_CLIENT_MEM_FRACTION of the "
                    "GPU, .75 by default) at its first operation: either arrays still alive "
                    "fill it, or the pool is small because another process (another JAX "
                    "process, TensorFlow) took the GPU first.",
                    fmt(request(t), a));
}

static void cause_unknown(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  char a[32], b[32];
  if (t->kind == HBM_OOM_PYTORCH && has(t, HBM_OOMF_FREE))
    hbm_strbuf_printf(sb,
                      "unclear: the device reports %s free, enough for the %s requested. A "
                      "per-process limit (torch.cuda.set_per_process_memory_fraction), a MIG "
                      "slice, or another process taking the memory meanwhile can do this.",
                      fmt(val(t, HBM_OOMF_FREE), a), fmt(request(t), b));
  else {
    hbm_strbuf_puts(sb, "not in the text: the message does not say how much memory was in use "
                        "or free");
    if (has(t, HBM_OOMF_REQUESTED))
      hbm_strbuf_printf(sb, " (%s requested)", fmt(request(t), a));
    hbm_strbuf_puts(sb, ". The allocator's log (TensorFlow prints its BFC stats just before the "
                        "error) tells more.");
  }
}

static void write_cause(hbm_strbuf_t *sb, const hbm_oom_text_t *t, text_cause_t cause) {
  hbm_strbuf_puts(sb, "  cause: ");
  switch (cause) {
  case TC_UNREADABLE_REQUEST:
    hbm_strbuf_puts(sb, "cannot be told: the size requested in the text is not a size hbm can "
                        "use (see the note), so it is compared with nothing. A request that "
                        "large, or negative, is a bug in the program or a damaged paste.");
    break;
  case TC_TOO_LARGE: cause_too_large(sb, t); break;
  case TC_OVER_LIMIT: cause_over_limit(sb, t); break;
  case TC_FRAGMENTATION: cause_fragmentation(sb, t); break;
  case TC_OTHER_PROCESSES: cause_other_processes(sb, t); break;
  case TC_PREALLOCATION: cause_preallocation(sb, t); break;
  default: cause_unknown(sb, t); break;
  }
  hbm_strbuf_puts(sb, "\n");
}

/* ---- fixes ---- */

typedef struct fixes {
  const char *text[8];
  size_t n;
  size_t share; /* > 0: HBM_FIX_SHARE_PROCESSES for this many processes comes first */
} fixes_t;

static void fix(fixes_t *f, const char *text) {
  for (size_t i = 0; i < f->n; i++)
    if (f->text[i] == text)
      return; /* listed already */
  if (f->n < HBM_ARRAY_LEN(f->text))
    f->text[f->n++] = text;
}

static void fixes_shrink(fixes_t *f, hbm_oom_kind_t kind) {
  fix(f, HBM_FIX_SMALLER_BATCH);
  fix(f, HBM_FIX_REMAT);
  if (kind != HBM_OOM_XLA_CPU) /* the host's devices share one process's memory */
    fix(f, HBM_FIX_SHARDING);
  if (kind == HBM_OOM_XLA_GPU)
    fix(f, HBM_FIX_MEM_FRACTION);
  if (kind == HBM_OOM_XLA_TPU || kind == HBM_OOM_XLA_GPU)
    fix(f, HBM_FIX_FREE_ARRAYS);
  if (kind == HBM_OOM_TENSORFLOW) /* a small BFC limit: often JAX took the GPU first */
    fix(f, HBM_FIX_TF_WITH_JAX);
  if (kind == HBM_OOM_XLA_CPU) /* host memory: donated or deleted arrays free it too */
    fix(f, HBM_FIX_FREE_ARRAYS);
}

/* PyTorch before 2.1 said "reserved in total by PyTorch" (or "cached"): it has no
 * expandable_segments yet, but max_split_size_mb. */
static bool old_pytorch(const hbm_oom_text_t *t) {
  return t->headline &&
         (strstr(t->headline, "reserved in total by PyTorch") || strstr(t->headline, " cached)"));
}

static fixes_t choose_fixes(const hbm_oom_text_t *t, text_cause_t cause) {
  fixes_t f = {.n = 0};
  switch (cause) {
  case TC_TOO_LARGE:
    fix(&f, HBM_FIX_SHARDING);
    fix(&f, HBM_FIX_SMALLER_BATCH);
    break;
  case TC_FRAGMENTATION:
    if (t->kind == HBM_OOM_PYTORCH) {
      if (old_pytorch(t))
        fix(&f, HBM_FIX_MAX_SPLIT_SIZE);
      fix(&f, HBM_FIX_EXPANDABLE_SEGMENTS);
    } else {
      if (t->kind == HBM_OOM_XLA_GPU)
        fix(&f, HBM_FIX_PREALLOCATE_TRUE);
      fix(&f, HBM_FIX_CUDA_MALLOC_ASYNC);
      if (t->kind == HBM_OOM_XLA_GPU)
        fix(&f, HBM_FIX_PLATFORM);
    }
    fix(&f, HBM_FIX_SMALLER_BATCH);
    break;
  case TC_OTHER_PROCESSES:
    f.share = t->n_processes > (size_t)t->this_process_listed
                  ? t->n_processes + 1 - (size_t)t->this_process_listed
                  : 2;
    fix(&f, HBM_FIX_OTHER_GPU_PROCESSES);
    fix(&f, HBM_FIX_PREALLOCATE_FALSE);
    fix(&f, HBM_FIX_MEM_FRACTION);
    fix(&f, HBM_FIX_TF_WITH_JAX);
    break;
  case TC_PREALLOCATION:
    fix(&f, HBM_FIX_PREALLOCATE_FALSE);
    fix(&f, HBM_FIX_MEM_FRACTION);
    fix(&f, HBM_FIX_TF_WITH_JAX);
    fix(&f, HBM_FIX_FREE_ARRAYS);
    fix(&f, HBM_FIX_PLATFORM);
    break;
  case TC_UNREADABLE_REQUEST: /* nothing to go on: no fix to suggest */ break;
  case TC_UNKNOWN:
    if (t->kind == HBM_OOM_TENSORFLOW)
      fix(&f, HBM_FIX_TF_REPORT_TENSORS);
    fixes_shrink(&f, t->kind);
    break;
  default:
    if (t->kind == HBM_OOM_XLA_TPU && has(t, HBM_OOMF_ALLOCATED))
      fix(&f, HBM_FIX_FREE_ARRAYS); /* arrays already on the device hold the memory */
    fixes_shrink(&f, t->kind);
    break;
  }
  if (t->kind == HBM_OOM_PYTORCH && cause != TC_FRAGMENTATION && cause != TC_TOO_LARGE &&
      has(t, HBM_OOMF_RESERVED_UNALLOCATED) && val(t, HBM_OOMF_RESERVED_UNALLOCATED) > 0)
    fix(&f, HBM_FIX_EXPANDABLE_SEGMENTS);
  return f;
}

/* HBM_FIX_SHARE_PROCESSES with its numbers, as oom.c prints it (malloc'd). */
static char *share_text(size_t processes) {
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  hbm_strbuf_printf(&sb, HBM_FIX_SHARE_PROCESSES, floor(100.0 / (double)processes) / 100.0,
                    processes);
  char *s = sb.failed ? NULL : hbm__strdup(hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
  return s;
}

static void write_fixes(hbm_strbuf_t *sb, const fixes_t *f) {
  if (!f->share && !f->n)
    return;
  hbm_strbuf_puts(sb, "  fixes:\n");
  if (f->share) {
    char *s = share_text(f->share);
    hbm_strbuf_printf(sb, "    - %s\n", s ? s : "");
    free(s);
  }
  for (size_t i = 0; i < f->n; i++)
    hbm_strbuf_printf(sb, "    - %s\n", f->text[i]);
}

/* ---- the numbers ---- */

static void write_numbers(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  char a[32];
  if (t->device || t->allocator)
    hbm_strbuf_printf(sb, "  device: %s%s%s\n", t->device ? t->device : "",
                      t->device && t->allocator ? ", allocator " : "",
                      t->allocator ? t->allocator : "");
  if (t->tensor_shape)
    hbm_strbuf_printf(sb, "  tensor: %s %s%s%s\n", t->tensor_type ? t->tensor_type : "?",
                      t->tensor_shape, t->op ? " by op " : "", t->op ? t->op : "");
  for (int f = 0; f < HBM_OOMF_COUNT; f++) {
    if (!t->known[f])
      continue;
    if (f == HBM_OOMF_NUM_ALLOCS)
      hbm_strbuf_printf(sb, "  %s: %llu\n", label_of(t, f), (unsigned long long)t->value[f]);
    else
      hbm_strbuf_printf(sb, "  %s: %llu bytes (%s)\n", label_of(t, f),
                        (unsigned long long)t->value[f], fmt(t->value[f], a));
  }
  for (const char *n = t->notes, *nl; n && *n; n = nl ? nl + 1 : n + strlen(n)) {
    nl = strchr(n, '\n');
    hbm_strbuf_printf(sb, "  note: %.*s\n", (int)(nl ? nl - n : (ptrdiff_t)strlen(n)), n);
  }
  for (size_t i = 0; i < t->n_processes; i++)
    hbm_strbuf_printf(sb, "  process %lld: %s%s\n", (long long)t->processes[i].pid,
                      fmt(t->processes[i].bytes, a),
                      i == 0 && t->this_process_listed ? " (taken to be this process)" : "");
  /* What this process holds beyond PyTorch's cache: the CUDA context and the libraries. */
  if (t->kind == HBM_OOM_PYTORCH && has(t, HBM_OOMF_IN_USE) && has(t, HBM_OOMF_RESERVED) &&
      val(t, HBM_OOMF_IN_USE) > val(t, HBM_OOMF_RESERVED))
    hbm_strbuf_printf(sb,
                      "  outside PyTorch's cache in this process: %s (in use - reserved: the "
                      "CUDA context, cuBLAS/cuDNN workspaces, NCCL, other libraries)\n",
                      fmt(val(t, HBM_OOMF_IN_USE) - val(t, HBM_OOMF_RESERVED), a));
}

/* ---- groups ---- */

typedef struct group_total {
  const char *group;
  uint64_t bytes;
  size_t count;
} group_total_t;

static int by_bytes_desc(const void *a, const void *b) {
  const group_total_t *x = a, *y = b;
  return x->bytes != y->bytes ? (x->bytes < y->bytes ? 1 : -1) : strcmp(x->group, y->group);
}

/* The buffers' sizes summed by group, largest first (*n groups; malloc'd). */
static group_total_t *group_totals(const hbm_oom_text_t *t, size_t *n, uint64_t *all) {
  group_total_t *g = calloc(t->n_buffers ? t->n_buffers : 1, sizeof *g);
  *n = 0;
  *all = 0;
  if (!g)
    return NULL;
  for (size_t i = 0; i < t->n_buffers; i++) {
    const hbm_oom_buffer_t *b = &t->buffers[i];
    const char *name = b->group ? b->group : "(no operator)";
    size_t k = 0;
    while (k < *n && strcmp(g[k].group, name))
      k++;
    if (k == *n)
      g[(*n)++].group = name;
    g[k].bytes = hbm__oom_add(g[k].bytes, b->size);
    g[k].count++;
    *all = hbm__oom_add(*all, b->size);
  }
  qsort(g, *n, sizeof *g, by_bytes_desc);
  return g;
}

#define LISTED_GROUPS 10
#define LISTED_BUFFERS 10

static void write_groups(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  size_t n;
  uint64_t all;
  group_total_t *g = group_totals(t, &n, &all);
  if (!g || !n) {
    free(g);
    return;
  }
  char a[32];
  hbm_strbuf_printf(sb, "%s by operator path (%zu buffer%s, %s):\n",
                    t->kind == HBM_OOM_XLA_TPU ? "Largest program allocations" : "Peak buffers",
                    t->n_buffers, t->n_buffers == 1 ? "" : "s", fmt(all, a));
  for (size_t i = 0; i < n && i < LISTED_GROUPS; i++)
    hbm_strbuf_printf(sb, "  %10s %5.1f%% %3zu  %s\n", fmt(g[i].bytes, a),
                      all ? 100.0 * (double)g[i].bytes / (double)all : 0.0, g[i].count, g[i].group);
  if (n > LISTED_GROUPS)
    hbm_strbuf_printf(sb, "  ... and %zu more paths\n", n - LISTED_GROUPS);
  free(g);
}

static void write_buffers(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  char a[32];
  for (size_t i = 0; i < t->n_buffers && i < LISTED_BUFFERS; i++) {
    const hbm_oom_buffer_t *b = &t->buffers[i];
    hbm_strbuf_printf(sb, "  %zu. %s %s", i + 1, fmt(b->size, a), b->shape ? b->shape : "");
    if (b->op_name)
      hbm_strbuf_printf(sb, "  %s", b->op_name);
    else if (b->label)
      hbm_strbuf_printf(sb, "  %s", b->label);
    else if (b->parameter)
      hbm_strbuf_puts(sb, "  (entry parameter)");
    if (b->source_file)
      hbm_strbuf_printf(sb, "  (%s:%lld%s)", b->source_file, (long long)b->source_line,
                        b->source_from_module ? ", from the module" : "");
    hbm_strbuf_puts(sb, "\n");
  }
  if (t->n_buffers > LISTED_BUFFERS)
    hbm_strbuf_printf(sb, "  ... and %zu more\n", t->n_buffers - LISTED_BUFFERS);
}

static void write_explanation(hbm_strbuf_t *sb, const hbm_oom_text_t *t) {
  text_cause_t cause = classify(t);
  hbm_strbuf_printf(sb, "%s\nhbm explain: %s out-of-memory error (line %lld)\n",
                    t->headline ? t->headline : "", hbm_oom_kind_name(t->kind), (long long)t->line);
  write_numbers(sb, t);
  if (t->module_finding)
    hbm_strbuf_printf(sb, "  module: %s\n", t->module_finding);
  write_cause(sb, t, cause);
  fixes_t f = choose_fixes(t, cause);
  write_fixes(sb, &f);
  if (t->n_buffers) {
    write_groups(sb, t);
    hbm_strbuf_puts(sb, "Largest buffers, as listed:\n");
    write_buffers(sb, t);
  }
}

hbm_status_t hbm_oom_text_explain(const hbm_oom_text_t *t, FILE *out) {
  if (!t || !out)
    return hbm__error(HBM_ERR_INVALID, "hbm_oom_text_explain: no text or stream");
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  write_explanation(&sb, t);
  hbm_status_t s = sb.failed ? hbm__error(HBM_ERR_NO_MEMORY, "out of memory writing the text")
                             : hbm__write_out(out, sb.data, sb.len, "the explanation");
  hbm_strbuf_free(&sb);
  return s;
}

/* ---- JSON ---- */

static json_t *buffer_json(const hbm_oom_buffer_t *b) {
  json_t *o = json_object();
  json_object_set_new(o, "size", json_integer(hbm__json_bytes(b->size)));
  if (b->unpadded_size)
    json_object_set_new(o, "unpadded_size", json_integer(hbm__json_bytes(b->unpadded_size)));
  json_object_set_new(o, "op_name", hbm__json_string(b->op_name));
  json_object_set_new(o, "op_type", hbm__json_string(b->op_type));
  json_object_set_new(o, "source_file", hbm__json_string(b->source_file));
  json_object_set_new(o, "source_line", json_integer(b->source_line));
  json_object_set_new(o, "label", hbm__json_string(b->label));
  json_object_set_new(o, "shape", hbm__json_string(b->shape));
  json_object_set_new(o, "allocation_type", hbm__json_string(b->allocation_type));
  json_object_set_new(o, "group", hbm__json_string(b->group));
  json_object_set_new(o, "parameter", json_boolean(b->parameter));
  json_object_set_new(o, "instruction", hbm__json_string(b->instruction));
  json_object_set_new(o, "source_from",
                      b->source_file ? json_string(b->source_from_module ? "module" : "text")
                                     : json_null());
  return o;
}

static json_t *groups_json(const hbm_oom_text_t *t) {
  json_t *a = json_array();
  size_t n;
  uint64_t all;
  group_total_t *g = group_totals(t, &n, &all);
  for (size_t i = 0; g && i < n; i++)
    json_array_append_new(a, json_pack("{s:o, s:I, s:I}", "group", hbm__json_string(g[i].group),
                                       "bytes", hbm__json_bytes(g[i].bytes), "buffers",
                                       (json_int_t)g[i].count));
  free(g);
  return a;
}

static json_t *text_json(const hbm_oom_text_t *t) {
  json_t *o = json_object();
  text_cause_t cause = classify(t);
  json_object_set_new(o, "kind", json_string(hbm_oom_kind_name(t->kind)));
  json_object_set_new(o, "headline", hbm__json_string(t->headline));
  json_object_set_new(o, "line", json_integer(t->line));
  json_object_set_new(o, "device", hbm__json_string(t->device));
  json_object_set_new(o, "allocator", hbm__json_string(t->allocator));
  json_object_set_new(o, "tensor_shape", hbm__json_string(t->tensor_shape));
  json_object_set_new(o, "tensor_type", hbm__json_string(t->tensor_type));
  json_object_set_new(o, "op", hbm__json_string(t->op));
  json_object_set_new(o, "module",
                      t->module || t->module_finding
                          ? json_pack("{s:o, s:o, s:o}", "name", hbm__json_string(t->module),
                                      "file", hbm__json_string(t->module_file), "finding",
                                      hbm__json_string(t->module_finding))
                          : json_null());
  json_t *numbers = json_object();
  for (int f = 0; f < HBM_OOMF_COUNT; f++)
    if (t->known[f])
      json_object_set_new(numbers, hbm_oom_field_name(f),
                          json_integer(hbm__json_bytes(t->value[f])));
  json_object_set_new(o, "bytes", numbers);
  json_t *unreadable = json_array(), *notes = json_array();
  for (int f = 0; f < HBM_OOMF_COUNT; f++)
    if (t->unreadable[f])
      json_array_append_new(unreadable, json_string(hbm_oom_field_name(f)));
  for (const char *n = t->notes, *nl; n && *n; n = nl ? nl + 1 : n + strlen(n)) {
    nl = strchr(n, '\n');
    json_array_append_new(notes, json_stringn(n, nl ? (size_t)(nl - n) : strlen(n)));
  }
  json_object_set_new(o, "unreadable", unreadable); /* fields given as no usable size */
  json_object_set_new(o, "notes", notes);
  json_t *procs = json_array();
  for (size_t i = 0; i < t->n_processes; i++)
    json_array_append_new(procs,
                          json_pack("{s:I, s:I, s:b}", "pid", (json_int_t)t->processes[i].pid,
                                    "bytes", hbm__json_bytes(t->processes[i].bytes), "this",
                                    i == 0 && t->this_process_listed));
  json_object_set_new(o, "processes", procs);
  json_object_set_new(o, "cause", json_string(cause_names[cause]));
  fixes_t f = choose_fixes(t, cause);
  json_t *fx = json_array();
  if (f.share) {
    char *share = share_text(f.share);
    json_array_append_new(fx, hbm__json_string(share));
    free(share);
  }
  for (size_t i = 0; i < f.n; i++)
    json_array_append_new(fx, json_string(f.text[i]));
  json_object_set_new(o, "fixes", fx);
  json_t *bufs = json_array();
  for (size_t i = 0; i < t->n_buffers; i++)
    json_array_append_new(bufs, buffer_json(&t->buffers[i]));
  json_object_set_new(o, "buffers", bufs);
  json_object_set_new(o, "groups", groups_json(t));
  return o;
}

hbm_status_t hbm_oom_text_json(const hbm_oom_text_t *t, FILE *out) {
  if (!t || !out)
    return hbm__error(HBM_ERR_INVALID, "hbm_oom_text_json: no text or stream");
  json_t *o = text_json(t);
  char *s = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(o);
  if (!s)
    return hbm__error(HBM_ERR_NO_MEMORY, "out of memory writing JSON");
  hbm_status_t st = hbm__write_out(out, s, strlen(s), "JSON");
  if (st == HBM_OK)
    st = hbm__write_out(out, "\n", 1, "JSON");
  free(s);
  return st;
}

/* ---- the profile ---- */

static hbm_category_t category_of(const hbm_oom_buffer_t *b) {
  if (b->parameter)
    return HBM_CAT_PARAMETER;
  const char *type = b->allocation_type ? b->allocation_type : "";
  if (strstr(type, "utput") || strstr(type, "live"))
    return HBM_CAT_OUTPUT;
  if (strstr(type, "onstant"))
    return HBM_CAT_CONSTANT;
  return HBM_CAT_TEMPORARY;
}

static int64_t add_profile_buffer(hbm_profile_t *p, int space, const hbm_oom_buffer_t *b) {
  char source[1200] = "";
  if (b->source_file)
    snprintf(source, sizeof source, "%s:%lld", b->source_file, (long long)b->source_line);
  hbm_buffer_t buf = {.size = b->size,
                      .unpadded_size = b->unpadded_size ? b->unpadded_size : b->size,
                      .start = 0,
                      .end = 1,
                      .space = space,
                      .category = category_of(b),
                      .flags = b->parameter ? HBM_BUF_INDEFINITE : 0,
                      .op = b->op_name ? b->op_name : b->label,
                      .shape = b->shape,
                      .group = b->group,
                      .source = b->source_file ? source : NULL,
                      .opcode = b->op_type,
                      .label = b->label};
  return hbm_profile_add_buffer(p, &buf);
}

static char *explanation_text(const hbm_oom_text_t *t) {
  hbm_strbuf_t sb;
  hbm_strbuf_init(&sb);
  write_explanation(&sb, t);
  if (sb.len && sb.data[sb.len - 1] == '\n')
    sb.data[--sb.len] = '\0';
  char *s = sb.failed ? NULL : hbm__strdup(hbm_strbuf_str(&sb));
  hbm_strbuf_free(&sb);
  return s;
}

/* When the text lists no buffers, the totals it gives stand in for them, one buffer each, so
 * that the profile's peak is what the framework said was in use. */
typedef struct aggregate {
  hbm_oom_kind_t kind;
  hbm_oom_field_t field;
  hbm_category_t category;
  const char *what;
} aggregate_t;

static const aggregate_t aggregates[] = {
    {HBM_OOM_XLA_GPU, HBM_OOMF_PARAMETER, HBM_CAT_PARAMETER, "parameters (in all)"},
    {HBM_OOM_XLA_GPU, HBM_OOMF_CONSTANT, HBM_CAT_CONSTANT, "constants (in all)"},
    {HBM_OOM_XLA_GPU, HBM_OOMF_MAYBE_LIVE_OUT, HBM_CAT_OUTPUT, "maybe-live-out outputs (in all)"},
    {HBM_OOM_XLA_GPU, HBM_OOMF_PREALLOCATED_TEMP, HBM_CAT_TEMPORARY, "temporaries (in all)"},
    {HBM_OOM_XLA_TPU, HBM_OOMF_TPU_RESERVED, HBM_CAT_UNKNOWN, "reserved by the runtime"},
    {HBM_OOM_XLA_TPU, HBM_OOMF_ALLOCATED, HBM_CAT_UNKNOWN, "arrays already on the device"},
    {HBM_OOM_XLA_TPU, HBM_OOMF_ARGUMENTS, HBM_CAT_PARAMETER, "arguments (in all)"},
    {HBM_OOM_XLA_TPU, HBM_OOMF_PROGRAM, HBM_CAT_TEMPORARY, "program (in all)"},
    {HBM_OOM_PYTORCH, HBM_OOMF_ALLOCATED, HBM_CAT_UNKNOWN, "allocated by PyTorch (in all)"},
};

static bool add_aggregates(hbm_profile_t *p, int space, const hbm_oom_text_t *t) {
  bool any = false;
  for (size_t i = 0; i < HBM_ARRAY_LEN(aggregates); i++) {
    const aggregate_t *g = &aggregates[i];
    if (g->kind != t->kind || !has(t, g->field) || !val(t, g->field))
      continue;
    hbm_buffer_t b = {.size = val(t, g->field),
                      .unpadded_size = val(t, g->field),
                      .start = 0,
                      .end = 1,
                      .space = space,
                      .category = g->category,
                      .op = g->what,
                      .group = "(totals from the error text)"};
    if (hbm_profile_add_buffer(p, &b) < 0)
      return false;
    any = true;
  }
  if (!any && has(t, HBM_OOMF_IN_USE) && val(t, HBM_OOMF_IN_USE)) { /* an allocator's InUse */
    hbm_buffer_t b = {.size = val(t, HBM_OOMF_IN_USE),
                      .unpadded_size = val(t, HBM_OOMF_IN_USE),
                      .start = 0,
                      .end = 1,
                      .space = space,
                      .category = HBM_CAT_UNKNOWN,
                      .op = "in use in the allocator (in all)",
                      .group = "(totals from the error text)"};
    if (hbm_profile_add_buffer(p, &b) < 0)
      return false;
  }
  return true;
}

static bool fill_profile(hbm_profile_t *p, const hbm_oom_text_t *t, const char *name) {
  uint64_t limit = has(t, HBM_OOMF_CAPACITY) ? val(t, HBM_OOMF_CAPACITY) : val(t, HBM_OOMF_LIMIT);
  const char *space_name = t->kind == HBM_OOM_XLA_TPU && t->device ? t->device
                           : t->kind == HBM_OOM_XLA_CPU            ? "host"
                                                                   : "HBM";
  int space = hbm_profile_add_space(p, space_name, t->device ? t->device : "pasted", 0, limit);
  if (space < 0 || hbm_profile_add_step(p, 0, "out of memory") < 0)
    return false;
  hbm_profile_set_meta(p, "source_path", name);
  hbm_profile_set_meta(p, "format", "pasted out-of-memory error");
  hbm_profile_set_meta(p, "framework", hbm_oom_kind_name(t->kind));
  if (t->notes) /* numbers of the text that were not used, and why */
    hbm_profile_set_meta(p, "notes", t->notes);
  for (size_t i = 0; i < t->n_buffers; i++)
    if (add_profile_buffer(p, space, &t->buffers[i]) < 0)
      return false;
  if (!t->n_buffers && !add_aggregates(p, space, t))
    return false;
  char *message = explanation_text(t);
  /* TPU's compile-time error has no single request: the program's need stands for it. */
  uint64_t requested = has(t, HBM_OOMF_REQUESTED) ? request(t) : val(t, HBM_OOMF_USED);
  hbm_oom_event_t e = {.step = 0, .space = space, .requested = requested, .message = message};
  bool ok = message && hbm_profile_add_oom(p, &e) == HBM_OK;
  free(message);
  return ok && hbm_profile_finish(p) == HBM_OK;
}

hbm_profile_t *hbm_oom_text_to_profile(const hbm_oom_text_t *t, const char *name) {
  if (!t) {
    hbm__error(HBM_ERR_INVALID, "hbm_oom_text_to_profile: no text");
    return NULL;
  }
  hbm_profile_t *p = hbm_profile_new(HBM_PROFILE_PLAN, name ? name : "pasted OOM");
  if (!p) {
    hbm__error(HBM_ERR_NO_MEMORY, "out of memory building the profile");
    return NULL;
  }
  if (fill_profile(p, t, name ? name : "pasted OOM"))
    return p;
  hbm_profile_free(p);
  return NULL;
}
