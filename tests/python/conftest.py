"""Fixtures of the Python tests: the hbm executable under test and the JAX zoo (real programs
compiled by XLA on the CPU, generated once per zoo.py/JAX version and cached under build/)."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo  # noqa: E402


def build_dir() -> Path:
    return Path(os.environ.get("HBM_BUILD_DIR", ROOT / "build"))


@pytest.fixture(scope="session")
def hbm_bin() -> str:
    path = os.environ.get("HBM_BIN", str(build_dir() / "hbm"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"the hbm executable {path} is missing: build it first (scripts/build.sh)")
    return path


@pytest.fixture(scope="session")
def hbm_package(hbm_bin):
    """`import hbm` from the source tree, on the libhbm and hbm executable under test."""
    libs = sorted(Path(hbm_bin).parent.glob("libhbm.so.*"))
    if not libs:
        pytest.fail(f"libhbm.so is not in {Path(hbm_bin).parent}")
    os.environ["HBM_LIBRARY"] = str(libs[0])
    os.environ["HBM_BIN"] = hbm_bin
    sys.path.insert(0, str(ROOT / "python"))
    import hbm

    return hbm


def run_hbm(hbm_bin, *args, check=True):
    done = subprocess.run([hbm_bin, *map(str, args)], capture_output=True, text=True)
    if check and done.returncode != 0:
        pytest.fail(f"hbm {' '.join(map(str, args))} exited {done.returncode}:\n{done.stderr}")
    return done


def hbm_json(hbm_bin, *args):
    return json.loads(run_hbm(hbm_bin, *args).stdout)


def _zoo_key() -> str:
    import jax

    h = hashlib.sha256(Path(zoo.__file__).read_bytes())
    h.update(jax.__version__.encode())
    return h.hexdigest()[:16]


def _prune_dump(dump: Path) -> None:
    """Keeps XLA's text dumps; the CPU backend also writes LLVM IR and objects we never read."""
    for f in dump.iterdir():
        if not f.name.endswith(".txt"):
            f.unlink() if f.is_file() else shutil.rmtree(f)


@pytest.fixture(scope="session")
def zoo_dir() -> Path:
    root = build_dir() / "jax_zoo"
    stamp = root / ".key"
    key = _zoo_key()
    if not (stamp.is_file() and stamp.read_text() == key):
        shutil.rmtree(root, ignore_errors=True)
        errors = {k: v for k, v in zoo.build_all(str(root)).items() if v}
        if errors:
            pytest.fail("the JAX zoo did not compile:\n" +
                        "\n".join(f"{k}:\n{v}" for k, v in errors.items()))
        for name in zoo.NAMES:
            _prune_dump(root / name / "dump")
        stamp.write_text(key)
    return root


class Program:
    """One program of the zoo and the files XLA wrote for it."""

    def __init__(self, root: Path, name: str):
        self.name, self.dir = name, root / name
        self.meta = json.loads((self.dir / "meta.json").read_text())
        self.memory_analysis = json.loads((self.dir / "memory_analysis.json").read_text())
        self.hlo = self.dir / "optimized.hlo"
        self.trace = self.dir / "trace"
        module = self.meta["module"]
        dumps = sorted((self.dir / "dump").glob(f"module_*.{module}.*after_optimizations*"))
        self.dump = {}
        for f in dumps:
            kind = f.name.split("after_optimizations", 1)[1]
            self.dump[{".txt": "hlo", "-buffer-assignment.txt": "buffer_assignment",
                       "-memory-usage-report.txt": "memory_report"}.get(kind, kind)] = f


@pytest.fixture(scope="session")
def programs(zoo_dir):
    return {name: Program(zoo_dir, name) for name in zoo.NAMES}
