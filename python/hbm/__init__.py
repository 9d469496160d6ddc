"""hbm for Python: accelerator memory, understood.

    import jax, jax.numpy as jnp, hbm
    p = hbm.plan(jax.jit(lambda x: jnp.tanh(x @ x.T)), jnp.ones((4096, 1024)))
    print(p)                      # hbm's plan beside XLA's memory_analysis()
    print(p.report)               # XLA's E1000-style report, the buffers at the peak
    with hbm.trace("/tmp/xprof"): # jax.profiler.trace, read by `hbm view` / `hbm report`
        step(state, batch)
    hbm.report("/tmp/xprof")      # the report as a dict
    v = hbm.view("/tmp/xprof")    # the Memory Viewer; v.url, v.stop()
    f = hbm.fit(step, lambda b: (params, jax.ShapeDtypeStruct((b, 512), jnp.float32)),
                memory="16GiB")   # the largest batch that fits; f.next_plan: where it stops

The planner runs in libhbm through ctypes; report and view run the `hbm` executable that the
same wheel installs."""
from ._lib import HbmError, executable, library_path
from .api import Plan, Viewer, memory_analysis, plan, plan_text, report, trace, view
from .fit import Fit, fit

__version__ = "0.1.0"
__all__ = ["Fit", "HbmError", "Plan", "Viewer", "executable", "fit", "library_path",
           "memory_analysis", "plan", "plan_text", "report", "trace", "view"]
