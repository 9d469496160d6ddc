"""torch.cuda.memory of the stand-in: CUDAPluggableAllocator loads the library as PyTorch does
(ctypes.CDLL, then the two functions by name, called with (size, device, stream) and
(ptr, size, device, stream)); change_current_allocator remembers the allocator."""
import ctypes

current = None


class CUDAPluggableAllocator:
    def __init__(self, path, alloc_fn_name, free_fn_name):
        self.library = ctypes.CDLL(path)
        self.malloc = getattr(self.library, alloc_fn_name)
        self.malloc.restype = ctypes.c_void_p
        self.malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        self.free = getattr(self.library, free_fn_name)
        self.free.restype = None
        self.free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]


def change_current_allocator(allocator):
    global current
    if current is not None:
        raise RuntimeError("the allocator was already changed")
    current = allocator
