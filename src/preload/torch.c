/* torch.c — PyTorch's own plug for an allocator: torch.cuda.memory.CUDAPluggableAllocator
 * loads this library and calls these two functions for every block its caching allocator
 * would have made (python/hbm/torch.py installs it). PyTorch passes the device and stream
 * itself, so no context needs to be current; NULL is its out-of-memory signal, and hbm's
 * diagnosis goes to stderr. */
#include "preload/hooks.h"

PRELOAD_EXPORT void *hbm_torch_malloc(ssize_t size, int device, void *stream) {
  if (size <= 0)
    return NULL;
  hbm_device_t *dev = preload_device(device);
  if (!dev)
    return NULL;
  preload_call_t call = {.entry = "hbm_torch_malloc",
                         .caller = __builtin_return_address(0),
                         .stream = stream,
                         .ordered = true};
  void *p = NULL;
  return preload_alloc(dev, (size_t)size, &call, &p) == HBM_OK ? p : NULL;
}

PRELOAD_EXPORT void hbm_torch_free(void *ptr, ssize_t size, int device, void *stream) {
  (void)size;
  hbm_device_t *dev = preload_device(device);
  if (!dev || !ptr)
    return;
  preload_call_t call = {.entry = "hbm_torch_free",
                         .caller = __builtin_return_address(0),
                         .stream = stream,
                         .ordered = true};
  preload_free(dev, ptr, &call);
}
