"""The `jax.profiler.trace` logdir of each JAX zoo program, as a user opens it: `hbm report`
reads it with no hbm code in the program, finds the program by its module name, reads XLA's
own buffer assignment (whose temp allocation must be memory_analysis()'s), and shows hbm's
own plan of the same module beside it — equal to XLA's here, since hbm reproduces XLA's CPU
buffer assignment on every zoo program. `hbm export --format chrome` works on it."""
import json

import pytest

import zoo
from conftest import hbm_json, run_hbm


def _plan_meta(report, module):
    """{field: value} of the program whose XProf name is `module(N)`."""
    meta = report.get("meta") or {}
    found = {}
    for key, value in meta.items():
        field, _, program = key.partition(":")
        if program.rsplit("(", 1)[0] == module:
            found[field] = value
    return found


@pytest.mark.parametrize("name", zoo.NAMES)
def test_trace_shows_xlas_assignment_and_hbms_plan(hbm_bin, programs, name):
    prog = programs[name]
    report = hbm_json(hbm_bin, "report", prog.trace, "--json")
    meta = _plan_meta(report, prog.meta["module"])
    assert meta, f"{name}: the program {prog.meta['module']} is not in the trace's report"
    xla_temp = prog.memory_analysis["temp_size_in_bytes"]
    assert int(meta["xla_temp_bytes"]) == xla_temp, f"{name}: {meta}"
    assert int(meta["hbm_plan_temp_bytes"]) == xla_temp, f"{name}: {meta['hbm_plan']}"
    assert meta["hbm_plan_differs"] == "0"


@pytest.mark.parametrize("name", ["mlp_adam_f32", "shard_map_psum"])
def test_trace_exports_to_chrome(hbm_bin, programs, name):
    out = run_hbm(hbm_bin, "export", programs[name].trace, "--format", "chrome").stdout
    doc = json.loads(out)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    assert any(e.get("ph") == "C" for e in events), "no memory counter in the export"
