"""api.py — what `import hbm` offers JAX users: plan a jitted function with hbm's planner and
see XLA's own numbers beside it (plan), profile a block of code (trace), open the Memory Viewer
(view) and read any profile hbm understands as a dict (report)."""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Any, Dict, Iterator, List, Optional, Union

from . import _lib
from ._lib import HbmError

# memory_analysis() field -> hbm plan's JSON field, for the numbers both sides give.
_COMPARED = [("argument_size_in_bytes", "argument_bytes", "arguments"),
             ("output_size_in_bytes", "output_bytes", "outputs"),
             ("alias_size_in_bytes", "alias_bytes", "aliased"),
             ("temp_size_in_bytes", "temp_bytes", "temporaries")]


@dataclass
class Plan:
    """hbm's plan of one compiled module, with XLA's memory_analysis() beside it."""

    module: str
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    peak_bytes: int
    fits: bool
    buffers_at_peak: List[Dict[str, Any]]
    report: str                       # XLA's E1000-style report and hbm's diagnosis
    json: Dict[str, Any]              # everything `hbm plan --json` gives
    xla: Dict[str, int] = field(default_factory=dict)  # compiled.memory_analysis()
    differences: List[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"hbm plan of {self.module}: peak {_fmt(self.peak_bytes)}"
                 f"{'' if self.fits else ' (does not fit)'}"]
        for xla_key, hbm_key, what in _COMPARED:
            xla = self.xla.get(xla_key)
            mine = self.json.get(hbm_key)
            side = "" if xla is None else f"   XLA {_fmt(xla)}"
            lines.append(f"  {what:12s} hbm {_fmt(mine)}{side}")
        lines += [f"  differs: {d}" for d in self.differences]
        return "\n".join(lines)


def _fmt(n: Optional[int]) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def _memory_bytes(memory: Union[None, int, str]) -> int:
    if memory is None:
        return 0
    return memory if isinstance(memory, int) else _lib.parse_size(memory)


def plan_text(hlo_text: str, *, name: str = "<module>", memory: Union[None, int, str] = None,
              remat: bool = False, backend: str = "auto") -> Plan:
    """Plans HLO text (an optimized module, as compiled.as_text() prints it) with hbm.
    `backend` ("gpu", "cpu", "tpu"; "auto" guesses from the text) says whose buffer
    assignment to reproduce."""
    if backend not in _lib.BACKENDS:
        raise ValueError(f"backend must be one of {sorted(_lib.BACKENDS)}, not {backend!r}")
    lib = _lib.lib()
    opts = _lib.PlanOptions(memory=_memory_bytes(memory), remat=int(remat),
                            backend=_lib.BACKENDS[backend])
    data = hlo_text.encode()
    handle = lib.hbm_plan_text(data, len(data), name.encode(), ctypes.byref(opts))
    if not handle:
        raise HbmError(_lib.last_error())
    try:
        return plan_of_handle(handle, name)
    finally:
        lib.hbm_plan_free(handle)


def plan_of_handle(handle: int, name: str = "<module>") -> Plan:
    """A Plan of an hbm_plan_t* (which stays the caller's to free)."""
    lib = _lib.lib()
    doc = json.loads(_lib.capture(lib.hbm_plan_report_json, handle))
    report = _lib.capture(lib.hbm_plan_report_text, handle)
    return Plan(module=doc.get("module", name), argument_bytes=doc["argument_bytes"],
                output_bytes=doc["output_bytes"], alias_bytes=doc["alias_bytes"],
                temp_bytes=doc["temp_bytes"], peak_bytes=doc["peak_bytes"],
                fits=bool(doc.get("fits", True)), buffers_at_peak=doc.get("buffers_at_peak", []),
                report=report, json=doc)


def with_xla(result: Plan, xla: Dict[str, int]) -> Plan:
    """Puts XLA's memory_analysis() beside hbm's plan and lists where they differ."""
    result.xla = xla
    for xla_key, hbm_key, what in _COMPARED:
        theirs, mine = xla.get(xla_key), result.json.get(hbm_key)
        if theirs is not None and mine is not None and theirs != mine:
            result.differences.append(f"{what}: hbm {mine} bytes, XLA {theirs} bytes")
    return result


def module_name(hlo_text: str) -> str:
    found = re.match(r"HloModule\s+([^\s,]+)", hlo_text)
    return found.group(1) if found else "<module>"


def jax_backend() -> str:
    """The backend hbm reproduces for what JAX compiles here."""
    import jax

    platform = jax.default_backend()
    return platform if platform in _lib.BACKENDS else "auto"


def memory_analysis(compiled: Any) -> Dict[str, int]:
    """compiled.memory_analysis() as a dict of its byte counts."""
    stats = compiled.memory_analysis()
    keys = ["argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
            "temp_size_in_bytes", "generated_code_size_in_bytes"]
    return {k: int(getattr(stats, k)) for k in keys if getattr(stats, k, None) is not None}


def plan(fn: Any, *args: Any, memory: Union[None, int, str] = None, remat: bool = False,
         **kwargs: Any) -> Plan:
    """Compiles `fn` (jitted or not) for `args` with JAX, plans the optimized module with hbm's
    planner and returns the plan with XLA's memory_analysis() beside it; `differences` says
    where hbm and XLA disagree. `memory` ("16GiB" or bytes) checks the fit; `remat` lets hbm
    rematerialize to fit it."""
    import jax

    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    compiled = jitted.lower(*args, **kwargs).compile()
    text = compiled.as_text()
    result = plan_text(text, name=module_name(text), memory=memory, remat=remat,
                       backend=jax_backend())
    if remat:  # a rematerialized plan is meant to differ from what XLA compiled
        result.xla = memory_analysis(compiled)
        return result
    return with_xla(result, memory_analysis(compiled))


@contextlib.contextmanager
def trace(logdir: Union[str, os.PathLike]) -> Iterator[str]:
    """Profiles the block with jax.profiler.trace into `logdir` (an XProf logdir that
    `hbm view` and `hbm report` read); yields the logdir."""
    import jax

    logdir = os.fspath(logdir)
    with jax.profiler.trace(logdir):
        yield logdir


def report(path: Union[str, os.PathLike], *, space: Optional[str] = None) -> Dict[str, Any]:
    """`hbm report PATH --json` as a dict: PATH is anything hbm reads (a logdir, a profile,
    an XLA dump, HLO text, an RMM log...)."""
    cmd = [_lib.executable(), "report", os.fspath(path), "--json"]
    if space:
        cmd += ["--space", space]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise HbmError(done.stderr.strip() or f"hbm report exited {done.returncode}")
    return json.loads(done.stdout)


class Viewer:
    """A running `hbm view`: .url to open, .stop() (or use it as a context manager). It stops
    with the Python process too, however that ends: the server runs with --stop-with-stdin and
    its standard input is a pipe only this process holds, which the kernel closes when the
    process goes (an exit, an exception, SIGTERM, SIGKILL, a crash); a normal exit also waits
    for the clean stop (atexit), so the port is free when Python returns."""

    def __init__(self, process: subprocess.Popen, url: str):
        self.process, self.url = process, url
        _running.add(self)

    def stop(self) -> None:
        _running.discard(self)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # the server's clean stop
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdin:
            self.process.stdin.close()

    def __enter__(self) -> "Viewer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<hbm.Viewer {self.url}>"


_running: "set[Viewer]" = set()  # stopped at exit; also keeps each server's stdin pipe open


@atexit.register
def _stop_all() -> None:
    for v in list(_running):
        v.stop()


def _forward(stream: IO[str]) -> None:
    """Passes the server's later messages (errors it answered) on to our stderr, and so keeps
    its pipe from filling; its own "..., stopping" lines say only what the caller did."""
    with contextlib.suppress(Exception):
        for line in stream:
            if not line.rstrip().endswith(", stopping"):
                sys.stderr.write(line)


def view(logdir: Union[str, os.PathLike], port: int = 6006, host: str = "127.0.0.1",
         timeout: float = 30.0) -> Viewer:
    """Starts the Memory Viewer (`hbm view`) on `logdir` and returns once it serves. The server
    stops with .stop(), at the end of a `with` block, or when this Python process exits."""
    cmd = [_lib.executable(), "view", "--logdir", os.fspath(logdir), "--port", str(port),
           "--host", host, "--stop-with-stdin"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        found = re.search(r"(http://\S+)", line)
        if found:
            threading.Thread(target=_forward, args=(proc.stderr,), daemon=True,
                             name="hbm-view-stderr").start()
            return Viewer(proc, found.group(1))
    proc.kill()
    proc.wait()
    rest = proc.stderr.read() if proc.stderr else ""
    if proc.stdin:
        proc.stdin.close()
    raise HbmError(f"hbm view did not start: {rest.strip() or 'no address printed'}")
