"""The Python package `hbm` from the source tree: plan() against XLA's memory_analysis(),
plan_text() errors, report() and view()."""
import json
import urllib.request

import pytest


@pytest.fixture(scope="module")
def hbm(hbm_package):
    return hbm_package


def test_plan_gives_xlas_arguments_and_outputs(hbm):
    import jax
    import jax.numpy as jnp

    def step(w, x):
        return jnp.tanh(x @ w) @ w.T

    w, x = jnp.ones((512, 256)), jnp.ones((64, 512))
    p = hbm.plan(jax.jit(step), w, x)
    compiled = jax.jit(step).lower(w, x).compile().memory_analysis()
    # Both sides are XLA's: 512*256*4 + 64*512*4 bytes of arguments, 64*512*4 of output.
    assert p.argument_bytes == compiled.argument_size_in_bytes == 512 * 256 * 4 + 64 * 512 * 4
    assert p.output_bytes == compiled.output_size_in_bytes == 64 * 512 * 4
    assert p.xla["temp_size_in_bytes"] == compiled.temp_size_in_bytes
    # hbm's planner reproduces XLA's CPU buffer assignment: the same temporaries, no difference.
    assert p.temp_bytes == compiled.temp_size_in_bytes
    assert p.differences == []
    assert p.json["backend"] == "cpu"
    assert p.module.startswith("jit_step")
    assert "Total hbm usage" in p.report
    assert "arguments" in str(p)


def test_plan_checks_the_fit(hbm):
    import jax.numpy as jnp

    p = hbm.plan(lambda x: x * 2, jnp.ones((1024, 1024)), memory="1MiB")
    assert not p.fits  # 4 MiB in, 4 MiB out: more than 1 MiB
    assert "RESOURCE_EXHAUSTED" in p.report


def test_plan_text_reports_parse_errors(hbm):
    with pytest.raises(hbm.HbmError, match="expected"):
        hbm.plan_text("HloModule m\n\nENTRY e {\n  p = f32[4] parameter(0\n}\n")


def test_report_reads_an_rmm_log(hbm, tmp_path):
    log = tmp_path / "small.csv"
    # Two allocations of 1000 and 3000 bytes live together: the peak is 4000 bytes.
    log.write_text("Thread,Time,Action,Pointer,Size,Stream\n"
                   "1,0.0,allocate,0x1000,1000,0x0\n1,0.1,allocate,0x9000,3000,0x0\n"
                   "1,0.2,free,0x1000,1000,0x0\n1,0.3,free,0x9000,3000,0x0\n")
    assert hbm.report(log)["peak_bytes"] == 4000


def test_view_serves_the_page(hbm, tmp_path):
    with hbm.view(tmp_path, port=0) as v:
        with urllib.request.urlopen(v.url, timeout=10) as r:
            assert r.status == 200
            assert b"<html" in r.read().lower()
        with urllib.request.urlopen(v.url.rstrip("/") + "/api/runs", timeout=10) as r:
            assert isinstance(json.loads(r.read()), (list, dict))
    assert v.process.poll() is not None
