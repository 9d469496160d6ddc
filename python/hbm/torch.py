"""hbm.torch — put hbm's allocator under PyTorch through its own plug.

    import hbm.torch
    hbm.torch.use(mode="expandable", memory_fraction=0.5, logdir="/tmp/hbm")
    # ... then use torch as usual; every CUDA tensor is placed by hbm, profiled into logdir,
    # and an out-of-memory error comes with hbm's diagnosis on stderr.

`use()` must run before PyTorch's first CUDA allocation (PyTorch refuses to change the
allocator after it). It loads libhbm_preload.so with torch.cuda.memory.CUDAPluggableAllocator
(the library's hbm_torch_malloc / hbm_torch_free) and installs it with
torch.cuda.memory.change_current_allocator. Without code changes, `hbm run -- python
train.py` does the same for PyTorch, JAX and TensorFlow at once (docs/run.md).

The library is found at $HBM_PRELOAD_LIB, else in this package's directory (a wheel), else in
the checkout's build/ directory, else next to the `hbm` executable ($HBM_BIN or PATH) or in
../lib* beside it (an installed tree). This module is self-contained: it needs nothing from
the rest of the hbm package.
"""

import os
import shutil

__all__ = ["library_path", "use", "MODES"]

MODES = ("bfc", "growth", "platform", "async", "expandable")
_LIBRARY = "libhbm_preload.so"
_PLACES = ("", "../lib", "../lib64", "../lib/x86_64-linux-gnu", "../lib/aarch64-linux-gnu")


def _candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, _LIBRARY)
    yield os.path.join(os.path.dirname(os.path.dirname(here)), "build", _LIBRARY)
    exe = os.environ.get("HBM_BIN") or shutil.which("hbm")
    if exe:
        bindir = os.path.dirname(os.path.realpath(exe))
        for place in _PLACES:
            yield os.path.normpath(os.path.join(bindir, place, _LIBRARY))


def library_path():
    """The path of libhbm_preload.so; FileNotFoundError saying where it looked."""
    env = os.environ.get("HBM_PRELOAD_LIB")
    if env:
        if not os.path.isfile(env):
            raise FileNotFoundError(f"HBM_PRELOAD_LIB={env}: no such file")
        return os.path.abspath(env)
    looked = []
    for candidate in _candidates():
        looked.append(candidate)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(
        f"cannot find {_LIBRARY}: set HBM_PRELOAD_LIB to its path (looked in: "
        f"{', '.join(looked)})")


def _set(name, value):
    if value is None:
        return
    os.environ[name] = str(value)


def use(mode=None, memory_fraction=None, logdir=None):
    """Installs hbm as PyTorch's CUDA allocator and returns the CUDAPluggableAllocator.

    mode: one of MODES (default: from the seeds' variables, as `hbm run` does; bfc
    preallocates memory_fraction of the GPU at the first allocation). memory_fraction: the
    share of the GPU this process may use, in (0, 1] (default 0.75, or
    XLA_PYTHON_CLIENT_MEM_FRACTION). logdir: where the profile goes (`hbm report LOGDIR`);
    None: no profile unless HBM_PROFILE_DIR is set.
    """
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    if memory_fraction is not None and not 0 < float(memory_fraction) <= 1:
        raise ValueError(f"memory_fraction {memory_fraction!r}: expected a fraction in (0, 1]")
    path = library_path()
    import torch  # late: the module can be imported (and library_path used) without torch

    # The library reads these at PyTorch's first allocation, as under `hbm run`.
    _set("HBM_RUN_MODE", mode)
    _set("HBM_RUN_MEM_FRACTION", memory_fraction)
    _set("HBM_RUN_LOGDIR", logdir and os.path.abspath(logdir))
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "hbm_torch_malloc",
                                                         "hbm_torch_free")
    torch.cuda.memory.change_current_allocator(allocator)
    return allocator
