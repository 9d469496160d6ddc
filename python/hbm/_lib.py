"""_lib.py — finds and loads libhbm with ctypes, declares the C functions the package calls,
and finds the `hbm` executable. Where the files are looked for, in order: the environment
(HBM_LIBRARY, HBM_BIN), next to this package (an installed wheel), the source tree's build/
directory (running from a checkout), then PATH for the executable."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
from pathlib import Path
from typing import Optional

_HERE = Path(__file__).resolve().parent
_SOURCE_BUILD = _HERE.parent.parent / "build"  # python/hbm -> <checkout>/build


class HbmError(RuntimeError):
    """An error from libhbm or the hbm executable; the message is hbm_last_error()'s."""


class PlanOptions(ctypes.Structure):
    """hbm_plan_options_t (include/hbm.h)."""

    _fields_ = [("memory", ctypes.c_uint64), ("reserved", ctypes.c_uint64),
                ("remat", ctypes.c_int), ("space_color", ctypes.c_int),
                ("alignment", ctypes.c_uint64), ("top", ctypes.c_int), ("backend", ctypes.c_int),
                ("values", ctypes.c_int)]


class FitOptions(ctypes.Structure):
    """hbm_fit_options_t (include/hbm.h)."""

    _fields_ = [("plan", PlanOptions), ("lo", ctypes.c_int64), ("hi", ctypes.c_int64),
                ("multiple", ctypes.c_int64), ("values", ctypes.POINTER(ctypes.c_int64)),
                ("n_values", ctypes.c_size_t)]


class FitTry(ctypes.Structure):
    """hbm_fit_try_t."""

    _fields_ = [("value", ctypes.c_int64), ("used_bytes", ctypes.c_uint64), ("fits", ctypes.c_int)]


class FitResult(ctypes.Structure):
    """hbm_fit_result_t."""

    _fields_ = [("memory", ctypes.c_uint64), ("found", ctypes.c_int), ("value", ctypes.c_int64),
                ("has_next", ctypes.c_int), ("next", ctypes.c_int64), ("plan", ctypes.c_void_p),
                ("next_plan", ctypes.c_void_p), ("tried", ctypes.POINTER(FitTry)),
                ("n_tried", ctypes.c_size_t)]


# hbm_fit_plan_fn: the plan of one member of the family, or NULL.
FIT_PLAN_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(PlanOptions),
                               ctypes.c_void_p)

# HBM_PLAN_BACKEND_* (include/hbm.h): whose buffer assignment the planner reproduces.
BACKENDS = {"auto": 0, "gpu": 1, "cuda": 1, "rocm": 1, "cpu": 2, "tpu": 3, "none": 4}


def _candidates_for_library() -> list[Path]:
    env = os.environ.get("HBM_LIBRARY")
    found = [Path(env)] if env else []
    for d in (_HERE, _SOURCE_BUILD):
        found += sorted(d.glob("libhbm.so*"))
    return found


def library_path() -> Path:
    for p in _candidates_for_library():
        if p.is_file():
            return p
    raise HbmError("libhbm not found: set HBM_LIBRARY, `pip install` hbm, or build it with "
                   "scripts/build.sh")


def executable() -> str:
    """The path of the `hbm` executable."""
    env = os.environ.get("HBM_BIN")
    if env:
        return env
    for p in (Path(os.sys.prefix) / "bin" / "hbm", _SOURCE_BUILD / "hbm"):
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    found = shutil.which("hbm")
    if found:
        return found
    raise HbmError("the hbm executable was not found: set HBM_BIN, `pip install` hbm, or "
                   "build it with scripts/build.sh")


_lib: Optional[ctypes.CDLL] = None
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.open_memstream.restype = ctypes.c_void_p
_libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
_libc.fclose.argtypes = [ctypes.c_void_p]
_libc.free.argtypes = [ctypes.c_void_p]


def lib() -> ctypes.CDLL:
    """libhbm, loaded once, with the signatures of the functions used here declared."""
    global _lib
    if _lib is None:
        l = ctypes.CDLL(str(library_path()))
        l.hbm_last_error.restype = ctypes.c_char_p
        l.hbm_plan_text.restype = ctypes.c_void_p
        l.hbm_plan_text.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                    ctypes.POINTER(PlanOptions)]
        l.hbm_plan_free.argtypes = [ctypes.c_void_p]
        for name in ("hbm_plan_report_json", "hbm_plan_report_text"):
            getattr(l, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            getattr(l, name).restype = ctypes.c_int
        l.hbm_parse_size.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                     ctypes.POINTER(ctypes.c_uint64)]
        l.hbm_parse_size.restype = ctypes.c_int
        l.hbm_fit.argtypes = [FIT_PLAN_FN, ctypes.c_void_p, ctypes.POINTER(FitOptions),
                              ctypes.POINTER(FitResult)]
        l.hbm_fit.restype = ctypes.c_int
        l.hbm_fit_result_free.argtypes = [ctypes.POINTER(FitResult)]
        l.hbm_fit_report_text.argtypes = [ctypes.POINTER(FitResult), ctypes.c_char_p,
                                          ctypes.c_void_p]
        l.hbm_fit_report_text.restype = ctypes.c_int
        _lib = l
    return _lib


def last_error() -> str:
    msg = lib().hbm_last_error()
    return msg.decode("utf-8", "replace") if msg else "unknown error"


def capture(write, *args) -> str:
    """Calls a libhbm writer `write(*args, FILE *out)` and returns what it wrote."""
    buf, size = ctypes.c_void_p(), ctypes.c_size_t()
    stream = _libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not stream:
        raise HbmError(f"open_memstream failed (errno {ctypes.get_errno()})")
    try:
        status = write(*args, stream)
    finally:
        _libc.fclose(stream)
    text = ctypes.string_at(buf, size.value).decode("utf-8", "replace")
    _libc.free(buf)
    if status != 0:
        raise HbmError(last_error())
    return text


def parse_size(text: str) -> int:
    """'16GiB', '1.5G', '4096' -> bytes, with hbm's rules (hbm_parse_size)."""
    out = ctypes.c_uint64()
    if lib().hbm_parse_size(text.encode(), b"memory", ctypes.byref(out)) != 0:
        raise HbmError(last_error())
    return out.value
