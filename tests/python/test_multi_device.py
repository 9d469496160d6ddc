"""Many devices, one view: a JAX program sharded over 4 devices (the CPU platform with
--xla_force_host_platform_device_count=4), traced with jax.profiler.trace at two batch sizes,
as two hosts of one run. `hbm report --json` gives a summary of the devices first: each
device's figure must equal XProf's own (its Memory Viewer's peak heap of the largest program
XLA assigned to that device, from xprof.convert.raw_to_tool_data, as tests/xprof_compare.py
calls it), the largest named, the spread the largest less the smallest."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, hbm_json, run_hbm

sys.path.insert(0, str(ROOT / "tests"))
import xprof_compare  # noqa: E402

# Inputs are put on the devices shard by shard from host arrays, so that the step is the only
# program compiled: every device runs it, and XProf's peak of it is each device's figure.
PROGRAM = r"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
assert len(jax.devices()) == 4, jax.devices()
mesh = Mesh(np.array(jax.devices()), ("d",))
def step(w, x):
    return (jnp.tanh(x @ w) @ w.T).sum(axis=0)
def sharded(shape, spec, seed):
    host = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return jax.make_array_from_callback(shape, NamedSharding(mesh, spec), lambda i: host[i])
for logdir, batch in zip(sys.argv[1::2], map(int, sys.argv[2::2])):
    w = sharded((256, 512), P(None, "d"), 0)
    x = sharded((batch, 256), P("d", None), 1)
    with jax.profiler.trace(logdir):
        jax.jit(step)(w, x).block_until_ready()
"""


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """Two xplanes of the sharded program (batch 1024 and 4096), and a logdir of one run
    holding them as host0 and host1."""
    root = tmp_path_factory.mktemp("multi")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", PROGRAM, root / "a", "1024", root / "b", "4096"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    run = root / "logdir" / "plugins" / "profile" / "2026_01_01_00_00_00"
    run.mkdir(parents=True)
    files = {}
    for host, trace in (("host0", "a"), ("host1", "b")):
        (xplane,) = (root / trace).glob("plugins/profile/*/*.xplane.pb")
        files[host] = run / f"{host}.xplane.pb"
        shutil.copyfile(xplane, files[host])
    return {"logdir": root / "logdir", **files}


def xprof_peaks(xplane, work):
    """{module: XProf's Memory Viewer peak heap in bytes} for every program of one xplane."""
    work.mkdir()
    copy = work / "host.xplane.pb"  # XProf writes its .hlo_proto.pb files beside it
    shutil.copyfile(xplane, copy)
    peaks = {}
    for module in xprof_compare.xprof_modules(str(copy)):
        viewer = xprof_compare.xprof_viewer(str(copy), module)
        assert viewer is not None, f"XProf gave no Memory Viewer for {module}"
        peaks[module] = xprof_compare.to_bytes(viewer.get("peakHeapMib", 0))
    return peaks


def test_four_devices_equal_xprof(hbm_bin, hosts, tmp_path):
    for host in ("host0", "host1"):
        report = hbm_json(hbm_bin, "report", "--json", hosts[host])
        devices = report["devices"]
        theirs = xprof_peaks(hosts[host], tmp_path / host)
        assert theirs and all(m.startswith("jit_step") for m in theirs), theirs
        # Every program runs on all four devices (hbm read XLA's device assignment):
        assert {report["meta"][f"devices:{m}"] for m in theirs} == {"0,1,2,3"}
        assert devices["count"] == 4
        assert sorted(d["device"] for d in devices["per_device"]) == [0, 1, 2, 3]
        for d in devices["per_device"]:
            assert d["source"] == "program"
            assert d["peak_bytes"] == max(theirs.values()), (host, d, theirs)
        assert devices["spread_bytes"] == 0
        assert devices["difference"] is None  # nothing sets one device apart


def test_two_hosts_name_the_largest_and_the_spread(hbm_bin, hosts, tmp_path):
    small = max(xprof_peaks(hosts["host0"], tmp_path / "h0").values())
    large = max(xprof_peaks(hosts["host1"], tmp_path / "h1").values())
    assert large > small
    devices = hbm_json(hbm_bin, "report", "--json", hosts["logdir"])["devices"]
    assert devices["count"] == 8
    assert devices["largest"]["label"] == "host1.xplane.pb device 0"
    assert devices["largest"]["peak_bytes"] == large
    assert devices["smallest"]["peak_bytes"] == small
    assert devices["spread_bytes"] == large - small
    # What the largest holds beyond the median (a host0 device, the lower middle of 8): the
    # rows of every table add up to the difference of the two peaks.
    diff = devices["difference"]
    assert diff["change"] == large - devices["median"]["peak_bytes"]
    for key, rows in diff.items():
        if key.startswith("by_") and not key.endswith("_rest"):
            rest = diff.get(f"{key}_rest", {}).get("delta", 0)
            assert sum(r["delta"] for r in rows) + rest == diff["change"], key
    text = run_hbm(hbm_bin, "report", hosts["logdir"], "--width", "80").stdout
    first = text.splitlines()[:6]
    assert first[0] == "== 8 devices ==", first
    assert "host1.xplane.pb device 0" in first[1] and first[1].lstrip().startswith("largest")
    assert first[4].split()[0] == "spread"
