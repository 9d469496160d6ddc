/* oom_fixes.h — the remedies hbm prints for out-of-memory errors, in one place: hbm's own
 * diagnosis (src/alloc/oom.c) and `hbm explain` for pasted errors (src/import/oom_text_explain.c)
 * say the same thing the same way. The wording follows the seeds (JAX's "GPU memory
 * allocation" page) and PyTorch's documentation. */
#ifndef HBM_BASE_OOM_FIXES_H
#define HBM_BASE_OOM_FIXES_H

/* The request alone is larger than the device. */
#define HBM_FIX_TOO_LARGE                                                                          \
  "No setting can make it fit: shard the array across devices, or make it smaller (a smaller "     \
  "batch, lower precision, rematerialization)."

/* Several processes share one GPU (a printf format: the fraction, the number of processes). */
#define HBM_FIX_SHARE_PROCESSES                                                                    \
  "Give each process its share with XLA_PYTHON_CLIENT_MEM_FRACTION (e.g. %.2f each for %zu "       \
  "processes), or set XLA_PYTHON_CLIENT_PREALLOCATE=false so that each takes only what it "        \
  "needs."

#define HBM_FIX_PREALLOCATE_FALSE                                                                  \
  "XLA_PYTHON_CLIENT_PREALLOCATE=false: JAX takes GPU memory as it needs it instead of 75% "       \
  "up front (more prone to fragmentation)."
#define HBM_FIX_MEM_FRACTION                                                                       \
  "XLA_PYTHON_CLIENT_MEM_FRACTION=.XX: the share of the GPU JAX preallocates (default .75); "      \
  "raise it when this process is alone on the GPU, lower it when others share it."
#define HBM_FIX_PLATFORM                                                                           \
  "XLA_PYTHON_CLIENT_ALLOCATOR=platform: allocate exactly what is needed and free what is "        \
  "not (slow; shows the program's minimal footprint)."
#define HBM_FIX_REMAT                                                                              \
  "Rematerialize activations instead of keeping them: jax.checkpoint (jax.remat) around "          \
  "layers (PyTorch: torch.utils.checkpoint; TensorFlow: tf.recompute_grad)."
#define HBM_FIX_SMALLER_BATCH "A smaller batch (or gradient accumulation over micro-batches)."
#define HBM_FIX_SHARDING                                                                           \
  "Shard parameters, optimizer state and activations over more devices (jax.sharding / "           \
  "pjit; PyTorch: FSDP)."
#define HBM_FIX_EXPANDABLE_SEGMENTS                                                                \
  "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: PyTorch's cached segments grow in place, "    \
  "so reserved-but-unallocated memory can serve large requests."
#define HBM_FIX_MAX_SPLIT_SIZE                                                                     \
  "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128: cached blocks larger than 128 MB are not "       \
  "split, so they stay whole for large requests (PyTorch releases before expandable_segments)."
#define HBM_FIX_TF_REPORT_TENSORS                                                                  \
  "List the live tensors at the OOM: run with "                                                    \
  "tf.compat.v1.RunOptions(report_tensor_allocations_upon_oom=True)."
#define HBM_FIX_CUDA_MALLOC_ASYNC                                                                  \
  "TF_GPU_ALLOCATOR=cuda_malloc_async: CUDA's stream-ordered pool instead of the BFC "             \
  "allocator (different fragmentation)."
#define HBM_FIX_PREALLOCATE_TRUE                                                                   \
  "Keep XLA_PYTHON_CLIENT_PREALLOCATE=true (the default): one preallocated pool fragments "        \
  "less than memory taken on demand."
#define HBM_FIX_FREE_ARRAYS                                                                        \
  "Free what is no longer needed before the step: delete arrays (del x; x.delete()), donate "      \
  "inputs (donate_argnums), do not keep old results alive."
#define HBM_FIX_TF_WITH_JAX                                                                        \
  "When JAX and TensorFlow share the GPU, keep TensorFlow off it "                                 \
  "(tf.config.experimental.set_visible_devices([], \"GPU\")) or let it grow "                      \
  "(tf.config.experimental.set_memory_growth)."
#define HBM_FIX_OTHER_GPU_PROCESSES                                                                \
  "Stop the other processes on the GPU (nvidia-smi lists them), or run on another GPU "            \
  "(CUDA_VISIBLE_DEVICES)."

#endif /* HBM_BASE_OOM_FIXES_H */
