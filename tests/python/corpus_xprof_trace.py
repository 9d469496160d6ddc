"""corpus_xprof_trace.py — runs programs of a corpus module (corpus_programs.py, the tuned
conformance corpus, or corpus_unseen.py, the held-out families) under jax.profiler.trace on the
CPU, as a user would, and keeps the .xplane.pb files JAX writes: XProf's and hbm's Memory
Viewers are then compared on them (test_corpus_xprof.py, test_corpus_xprof_unseen.py).

Many programs share one trace session (a batch), so that JAX starts its profiler a few times
rather than hundreds: batch K of programs is traced into ROOT/batch-K/ by worker K % JOBS
(`python corpus_xprof_trace.py --worker CORPUS ROOT K NAME...`). Nothing here is committed
output. By hand: `python corpus_xprof_trace.py [--corpus corpus_unseen] ROOT` traces a whole
corpus.
"""
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus_programs  # noqa: E402  (sets the host device count before jax loads)

BATCH = 24  # programs per trace session


STATS = ["argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
         "temp_size_in_bytes"]


def module_name(hlo_text: str) -> str:
    """The HLO module's name, as the trace names the program: XLA's, not always jit_<name>
    (it drops a trailing underscore)."""
    first = hlo_text.split("\n", 1)[0].split()
    return first[1].rstrip(",") if len(first) > 1 and first[0] == "HloModule" else ""


def worker(corpus: str, root: Path, batch: int, names) -> int:
    """Traces the programs `names` of the module `corpus` in one session into root/batch-K,
    then writes each one's compiled.memory_analysis() (XLA's own totals; JAX's cache makes it
    free) into root/batch-K/programs.json, and the errors into a JSON file."""
    import jax

    progs = importlib.import_module(corpus).by_name()
    errors, ran, stats = {}, [], {}
    out = root / f"batch-{batch}"
    with jax.profiler.trace(str(out)):
        for name in names:
            try:
                fn, args = progs[name].build()
                jax.block_until_ready(fn(*args))
                ran.append((name, fn, args))
            except Exception as e:  # reported by the test, not fatal to the batch
                errors[name] = f"{type(e).__name__}: {e}"[:2000]
    for name, fn, args in ran:
        compiled = fn.lower(*args).compile()
        ma = compiled.memory_analysis()
        stats[name] = {"module": module_name(compiled.as_text()), "family": progs[name].family,
                       **{k: int(getattr(ma, k)) for k in STATS}}
    (out / "programs.json").write_text(json.dumps(stats, indent=1))
    for f in out.glob("plugins/profile/*/*.trace.json.gz"):
        f.unlink()  # the timeline of kernels: neither XProf's memory tools nor hbm read it
    (root / f".errors-{batch}.json").write_text(json.dumps(errors, indent=1))
    return 0


def batches(names):
    return [names[i:i + BATCH] for i in range(0, len(names), BATCH)]


def build(root: Path, names, jobs: int = 2, corpus: str = "corpus_programs") -> dict:
    """Traces `names` of the module `corpus` in batches, `jobs` processes at a time. Returns
    {name or batch: error}."""
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    pending = list(enumerate(batches(names)))
    running, errors = [], {}
    while pending or running:
        while pending and len(running) < jobs:
            k, group = pending.pop(0)
            p = subprocess.Popen([sys.executable, __file__, "--worker", corpus, str(root), str(k),
                                  *group],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
            running.append((k, p))
        k, p = running.pop(0)
        output, _ = p.communicate()
        report = root / f".errors-{k}.json"
        if p.returncode != 0 or not report.is_file():
            errors[f"batch {k}"] = output[-4000:]
        else:
            errors.update(json.loads(report.read_text()))
    return errors


def xplanes(root: Path):
    """The .xplane.pb of each batch, in batch order."""
    found = []
    for d in sorted(root.glob("batch-*"), key=lambda p: int(p.name.split("-")[1])):
        found += sorted(d.glob("plugins/profile/*/*.xplane.pb"))
    return found


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "--worker":
        sys.exit(worker(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]))
    argv = sys.argv[1:]
    module = "corpus_programs"
    if len(argv) == 3 and argv[0] == "--corpus":
        module, argv = argv[1], argv[2:]
    if len(argv) == 1:
        t0 = time.time()
        all_names = [p.name for p in importlib.import_module(module).programs()]
        errs = build(Path(argv[0]), all_names, corpus=module)
        for k, v in errs.items():
            print(f"{k}: {v}", file=sys.stderr)
        print(f"traced {len(all_names) - len(errs)} programs in {time.time() - t0:.0f} s, "
              f"{len(errs)} failed")
        sys.exit(1 if errs else 0)
    print(__doc__, file=sys.stderr)
    sys.exit(2)
