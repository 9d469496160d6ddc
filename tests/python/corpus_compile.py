"""corpus_compile.py — compiles a corpus of programs (corpus_programs.py, the tuned conformance
corpus, or corpus_unseen.py, the held-out families) with the installed JAX on the CPU and writes,
for each program, into ROOT/NAME/:
  optimized.hlo         compiled.as_text(): the optimized, scheduled module
  memory_analysis.json  compiled.memory_analysis(): XLA's argument, output, alias, temp sizes
  dump/                 XLA's after-optimizations HLO, buffer assignment and memory usage report
  meta.json             name, family, devices, JAX version, module name
`build(root, module)` runs `jobs` worker processes (`python corpus_compile.py --worker MODULE ROOT
I N`), each compiling every N-th program of MODULE with its own XLA dump folder; nothing is
committed output.
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import importlib  # noqa: E402
import corpus_programs  # noqa: E402  (sets the host device count before jax loads)

STATS = ["argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
         "temp_size_in_bytes", "generated_code_size_in_bytes", "peak_memory_in_bytes"]
KEEP = ("after_optimizations.txt", "after_optimizations-buffer-assignment.txt",
        "after_optimizations-memory-usage-report.txt")


def _collect_dump(dump: Path, module: str, into: Path) -> None:
    """Moves XLA's text dumps of `module` into `into`; drops everything else in the folder
    (other modules JAX compiled on the way, LLVM IR, objects)."""
    into.mkdir(parents=True, exist_ok=True)
    for f in dump.iterdir():
        mine = f".{module}." in f.name and f.name.endswith(KEEP)
        if mine:
            shutil.move(str(f), into / f.name)
        elif f.is_file():
            f.unlink()
        else:
            shutil.rmtree(f)


def _compile_one(prog, root: Path, dump: Path) -> None:
    import jax

    fn, args = prog.build()
    compiled = fn.lower(*args).compile()
    text = compiled.as_text()
    out = root / prog.name
    out.mkdir(parents=True, exist_ok=True)
    (out / "optimized.hlo").write_text(text)
    stats = compiled.memory_analysis()
    (out / "memory_analysis.json").write_text(json.dumps(
        {k: int(getattr(stats, k)) for k in STATS if hasattr(stats, k)}, indent=1))
    module = text.split("\n", 1)[0].split()[1].rstrip(",")
    _collect_dump(dump, module, out / "dump")
    meta = {"name": prog.name, "family": prog.family, "devices": prog.devices,
            "description": prog.description, "jax": jax.__version__, "module": module}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))


def worker(module: str, root: Path, index: int, count: int) -> int:
    """Compiles programs index, index+count, ... of `module`; writes errors to
    ROOT/.errors-INDEX.json."""
    dump = Path(os.environ["CORPUS_DUMP"])
    errors = {}
    for prog in importlib.import_module(module).programs()[index::count]:
        try:
            _compile_one(prog, root, dump)
        except Exception as e:  # a program that does not compile is reported, not fatal here
            errors[prog.name] = f"{type(e).__name__}: {e}"[:2000]
    (root / f".errors-{index}.json").write_text(json.dumps(errors, indent=1))
    return 0


def build(root: Path, module: str = "corpus_programs", jobs: int = 2) -> dict:
    """Compiles every program of `module` into root with `jobs` processes. Returns
    {name: error}."""
    root.mkdir(parents=True, exist_ok=True)
    procs = []
    for i in range(jobs):
        dump = root / f".dump-{i}"
        dump.mkdir(exist_ok=True)
        env = dict(os.environ, JAX_PLATFORMS="cpu", CORPUS_DUMP=str(dump))
        env["XLA_FLAGS"] = (f"--xla_dump_to={dump} --xla_dump_hlo_as_text "
                            f"--xla_force_host_platform_device_count="
                            f"{corpus_programs.DEVICE_COUNT}")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", module, str(root),
                                       str(i), str(jobs)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    errors = {}
    for i, p in enumerate(procs):
        output, _ = p.communicate()
        shutil.rmtree(root / f".dump-{i}", ignore_errors=True)
        report = root / f".errors-{i}.json"
        if p.returncode != 0 or not report.is_file():
            errors[f"worker {i}"] = output[-4000:]
        else:
            errors.update(json.loads(report.read_text()))
    return errors


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--worker":
        sys.exit(worker(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
    if len(sys.argv) in (2, 3):
        t0 = time.time()
        mod = sys.argv[2] if len(sys.argv) == 3 else "corpus_programs"
        errs = build(Path(sys.argv[1]), mod)
        for k, v in errs.items():
            print(f"{k}: {v}", file=sys.stderr)
        print(f"compiled {len(importlib.import_module(mod).programs()) - len(errs)} programs in "
              f"{time.time() - t0:.0f} s, {len(errs)} failed")
        sys.exit(1 if errs else 0)
    print(__doc__, file=sys.stderr)
    sys.exit(2)
