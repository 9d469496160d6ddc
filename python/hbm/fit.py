"""fit.py — hbm.fit: the largest value of a varying dimension (a batch size, a sequence length)
whose JAX program fits in a given memory, found by compiling each candidate with JAX and planning
it with hbm's planner (libhbm's hbm_fit: exponential search for an upper bound, then bisection),
with the plans at the answer and at the next value — what is at the peak when it stops fitting.
Nothing is allocated: make_args may return jax.ShapeDtypeStruct."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import _lib
from ._lib import HbmError
from .api import (Plan, jax_backend, memory_analysis, module_name, plan_of_handle,
                  with_xla, _memory_bytes)


@dataclass
class Fit:
    """The answer of hbm.fit. `value` is None when not even the smallest value fits; then
    `next` is that smallest value and `next_plan` its plan."""

    memory: int
    value: Optional[int]
    next: Optional[int]                  # the value after it, which does not fit (None: all fit)
    plan: Optional[Plan]                 # at value, with XLA's memory_analysis() beside it
    next_plan: Optional[Plan]            # at next: what is at the peak when it stops fitting
    tried: List[Tuple[int, int, bool]] = field(default_factory=list)  # (value, used bytes, fits)
    report: str = ""                     # hbm's text: the answer, the plans, next's E1000 report

    @property
    def fits(self) -> bool:
        return self.value is not None

    @property
    def at_peak(self) -> List[Dict[str, Any]]:
        """The buffers at the peak of the first value that does not fit, largest first."""
        return self.next_plan.buffers_at_peak if self.next_plan else []

    def __str__(self) -> str:
        return self.report.split("\n\nwhat is at the peak", 1)[0]


class _Family:
    """Compiles fn for make_args(value) and plans it; remembers XLA's numbers per value."""

    def __init__(self, fn: Any, make_args: Callable[[int], Any]):
        import jax

        self.jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
        self.make_args = make_args
        self.xla: Dict[int, Dict[str, int]] = {}
        self.error: Optional[BaseException] = None
        self.callback = _lib.FIT_PLAN_FN(self._plan)

    def _plan(self, value: int, opts: Any, ctx: Any) -> Optional[int]:
        try:
            args = self.make_args(value)
            args = args if isinstance(args, tuple) else (args,)
            compiled = self.jitted.lower(*args).compile()
            text = compiled.as_text()
            self.xla[value] = memory_analysis(compiled)
            data = text.encode()
            handle = _lib.lib().hbm_plan_text(data, len(data), module_name(text).encode(), opts)
            if not handle:
                raise HbmError(f"{self.make_args.__name__}({value}): {_lib.last_error()}")
            return handle
        except BaseException as e:  # raised again once hbm_fit has returned
            self.error = self.error or e
            return None


def fit(fn: Any, make_args: Callable[[int], Any], memory: Union[int, str], *, lo: int = 1,
        hi: Optional[int] = None, multiple: int = 1, dimension: str = "value",
        reserved: Union[None, int, str] = None) -> Fit:
    """The largest value v in [lo, hi] (multiples of `multiple`) such that fn compiled for
    make_args(v) fits in `memory` ("16GiB" or bytes) as hbm plans it: arguments + outputs not
    aliased + constants + temporaries (with fragmentation) + `reserved`. Assumes memory grows
    with v. make_args returns fn's arguments (a tuple, or one argument), arrays or
    jax.ShapeDtypeStruct."""
    lib = _lib.lib()
    family = _Family(fn, make_args)
    opts = _lib.FitOptions(lo=lo, hi=hi or 0, multiple=multiple)
    opts.plan = _lib.PlanOptions(memory=_memory_bytes(memory), reserved=_memory_bytes(reserved),
                                 backend=_lib.BACKENDS[jax_backend()])
    result = _lib.FitResult()
    status = lib.hbm_fit(family.callback, None, ctypes.byref(opts), ctypes.byref(result))
    if family.error is not None:
        if status == 0:
            lib.hbm_fit_result_free(ctypes.byref(result))
        raise family.error
    if status != 0:
        raise HbmError(_lib.last_error())
    try:
        return _answer(result, family, dimension)
    finally:
        lib.hbm_fit_result_free(ctypes.byref(result))


def _answer(r: Any, family: _Family, dimension: str) -> Fit:
    lib = _lib.lib()

    def plan_at(handle: int, value: int) -> Plan:
        return with_xla(plan_of_handle(handle), family.xla.get(value, {}))

    return Fit(memory=r.memory,
               value=r.value if r.found else None,
               next=r.next if r.has_next else None,
               plan=plan_at(r.plan, r.value) if r.found else None,
               next_plan=plan_at(r.next_plan, r.next) if r.has_next else None,
               tried=[(r.tried[i].value, r.tried[i].used_bytes, bool(r.tried[i].fits))
                      for i in range(r.n_tried)],
               report=_lib.capture(lib.hbm_fit_report_text, ctypes.byref(r), dimension.encode()))
