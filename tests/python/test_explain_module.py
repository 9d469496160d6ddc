"""`hbm explain --module` on a real out-of-memory error of the installed JAX: a program whose
temporaries need more than its process may take runs on the CPU under a memory limit
(RLIMIT_AS, set inside it once JAX has started and the program is compiled) with
XLA_FLAGS=--xla_dump_to, and hbm explains what JAX printed with XLA's dump beside it.

JAX 0.10 prints only "RESOURCE_EXHAUSTED: Out of memory allocating N bytes." there; the source
lines are in the dumped module's stack frames. Truth is the framework's: the bytes that failed
are compiled.memory_analysis()'s temp_size_in_bytes (XLA allocates the temporaries as one
buffer), and each line is where the program written here makes the call."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import run_hbm

PROGRAM = textwrap.dedent("""\
    import json, resource, sys
    import jax, jax.numpy as jnp

    def f(x):
        y = jnp.tanh(x @ x.T)
        return (y @ x).sum() + jnp.sort(y, axis=0)[0].sum()

    x = jnp.ones((30000, 16), jnp.float32)
    compiled = jax.jit(f).lower(x).compile()
    print(json.dumps({"temp": int(compiled.memory_analysis().temp_size_in_bytes)}), flush=True)
    with open("/proc/self/status") as status:
        vm = next(int(l.split()[1]) for l in status if l.startswith("VmSize:")) * 1024
    headroom = 2 << 30  # what running needs besides the temporaries (threads, their stacks)
    resource.setrlimit(resource.RLIMIT_AS, (vm + headroom, vm + headroom))
    print(compiled(x))
""")


def _line_of(code: str) -> int:
    return next(i for i, text in enumerate(PROGRAM.splitlines(), 1) if code in text)


@pytest.fixture(scope="module")
def oom_run(tmp_path_factory):
    pytest.importorskip("jax", reason="no JAX in this Python (python/requirements-test.txt)")
    work = tmp_path_factory.mktemp("explain_module")
    program = work / "oom_program.py"
    program.write_text(PROGRAM)
    dump = work / "dump"
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_dump_to={dump}",
               TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                          env=env, cwd=work, timeout=600)
    error = work / "error.txt"
    error.write_text(done.stdout + done.stderr)
    if "Out of memory allocating" not in done.stderr:
        pytest.fail("the program was to run out of memory under its limit; it printed:\n" +
                    (done.stdout + done.stderr)[-3000:])
    temp = json.loads(done.stdout.splitlines()[0])["temp"]
    return {"program": program, "dump": dump, "error": error, "temp": temp}


def test_cpu_oom_gets_the_module_and_its_source_lines(hbm_bin, oom_run):
    out = json.loads(run_hbm(hbm_bin, "explain", oom_run["error"], "--json", "--module",
                             oom_run["dump"]).stdout)
    assert out["kind"] == "XLA on CPU"
    assert out["bytes"]["requested"] == oom_run["temp"]  # XLA's own temp allocation
    assert out["module"]["name"] == "jit_f"
    buffers = out["buffers"]
    assert buffers, "no buffer at the peak from the dump"
    largest = max(buffers, key=lambda b: b["size"])
    assert largest["op_name"].endswith("/sort")
    assert largest["source_file"] == str(oom_run["program"])
    assert largest["source_line"] == _line_of("jnp.sort(")
    assert largest["source_from"] == "module"
    for b in buffers:  # never a line the module does not give
        assert b["source_file"] in (None, str(oom_run["program"]))
    text = run_hbm(hbm_bin, "explain", oom_run["error"], "--module", oom_run["dump"]).stdout
    assert f"{oom_run['program']}:{_line_of('jnp.sort(')}, from the module" in text


def test_without_the_module_no_line_is_made_up(hbm_bin, oom_run):
    out = json.loads(run_hbm(hbm_bin, "explain", oom_run["error"], "--json").stdout)
    assert out["kind"] == "XLA on CPU"
    assert out["buffers"] == [] and out["module"] is None
