"""hbm.view()'s server lives no longer than asked (issue 27: it outlived the Python process):
it stops with .stop(), at the end of a `with` block, and with the Python process that started
it, whether that process returns, dies of SIGTERM or is killed with SIGKILL."""
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def env(hbm_bin):
    libs = sorted(Path(hbm_bin).parent.glob("libhbm.so.*"))
    if not libs:
        pytest.fail(f"libhbm.so is not in {Path(hbm_bin).parent}")
    return dict(os.environ, HBM_BIN=hbm_bin, HBM_LIBRARY=str(libs[0]),
                PYTHONPATH=str(ROOT / "python"))


def serves(url):
    try:
        with urllib.request.urlopen(url + "api/runs", timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, OSError):
        return False


def gone(pid):
    """The process has ended (a zombie nobody reaped yet counts: it serves nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_gone(pid, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return False


def start_in_child(env, logdir, then):
    """A Python process that starts hbm.view(), prints the server's pid and URL, then `then`."""
    code = textwrap.dedent(f"""\
        import os, signal, sys, time
        import hbm
        v = hbm.view({str(logdir)!r}, port=0)
        print(v.process.pid, v.url, flush=True)
        {then}
        """)
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline().split()
    if len(line) != 2:
        child.kill()
        pytest.fail(f"the child printed no pid and URL: {child.communicate()[1]}")
    return child, int(line[0]), line[1]


@pytest.mark.parametrize("then", [
    "pass",                                  # the script ends
    "raise SystemExit(3)",                   # sys.exit
    "os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)",  # killed: no atexit
    "os.kill(os.getpid(), signal.SIGKILL); time.sleep(30)",
    "os._exit(0)",                           # no atexit either
])
def test_server_stops_with_its_python_process(env, tmp_path, then):
    child, pid, url = start_in_child(env, tmp_path, then)
    try:
        child.wait(timeout=30)
        assert wait_gone(pid), f"hbm view (pid {pid}) outlived its Python process ({then})"
        assert not serves(url)
    finally:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)


def test_stop_and_with_block_end_the_server(env, tmp_path):
    code = textwrap.dedent(f"""\
        import hbm, urllib.request
        v = hbm.view({str(tmp_path)!r}, port=0)
        urllib.request.urlopen(v.url + "api/runs", timeout=5).read()
        v.stop()
        print(v.process.poll(), flush=True)
        with hbm.view({str(tmp_path)!r}, port=0) as w:
            urllib.request.urlopen(w.url + "api/runs", timeout=5).read()
        print(w.process.poll(), flush=True)
        v.stop()  # twice is harmless
        """)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    # both exit 0: a clean stop on SIGINT; nothing about stopping on stderr
    assert done.stdout.split() == ["0", "0"]
    assert "stopping" not in done.stderr


def test_view_without_stdin_watch_still_serves_until_ctrl_c(hbm_bin, tmp_path):
    """`hbm view` on a terminal keeps its behaviour: stdin is not watched without the flag."""
    proc = subprocess.Popen([hbm_bin, "view", "--logdir", str(tmp_path), "--port", "0"],
                            stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in proc.stderr:
            if "http://" in line:
                url = line.split("open ", 1)[1].split()[0]
                break
        time.sleep(0.3)
        assert url and proc.poll() is None and serves(url)
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
