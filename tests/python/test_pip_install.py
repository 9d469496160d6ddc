"""`pip install .` into a new virtual environment gives a working `hbm` on PATH and
`import hbm` whose planner runs in the installed libhbm (no source tree on the path)."""
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pip_install_gives_hbm_and_import_hbm(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items()
           if k not in ("HBM_BIN", "HBM_LIBRARY", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{env_dir / 'bin'}:{env['PATH']}"
    done = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                           str(ROOT)], capture_output=True, text=True, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    hbm = env_dir / "bin" / "hbm"
    done = subprocess.run([hbm, "--version"], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout.startswith("hbm "), done.stderr
    # Two f32[1024] parameters (4096 bytes each) and an f32[1024] output (4096 bytes).
    code = ("import hbm\n"
            "p = hbm.plan_text('HloModule m\\n\\nENTRY e {\\n  a = f32[1024]{0} parameter(0)\\n"
            "  b = f32[1024]{0} parameter(1)\\n  ROOT c = f32[1024]{0} add(a, b)\\n}\\n')\n"
            "assert p.argument_bytes == 8192 and p.output_bytes == 4096, p\n"
            "assert str(hbm.library_path()).startswith(hbm.__path__[0]), hbm.library_path()\n"
            "print('ok', hbm.executable())\n")
    done = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert str(env_dir) in done.stdout
