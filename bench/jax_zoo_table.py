#!/usr/bin/env python3
"""jax_zoo_table.py — the table of hbm's plan against XLA's memory_analysis() for each program
of the JAX zoo (tests/python/zoo.py), in Markdown, for docs/planner.md and BENCHMARKS.md.
Builds the zoo into ZOO_DIR first when it is not there (the test suite caches it in
build/jax_zoo/). Usage: .venv/bin/python bench/jax_zoo_table.py [HBM_BIN] [ZOO_DIR]"""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
import zoo  # noqa: E402

FIELDS = [("argument_size_in_bytes", "argument_bytes", "arguments"),
          ("output_size_in_bytes", "output_bytes", "outputs"),
          ("alias_size_in_bytes", "alias_bytes", "aliased"),
          ("temp_size_in_bytes", "temp_bytes", "temp")]


def cell(xla, mine):
    if xla == mine:
        return f"{xla:,} (=)"
    ratio = f"{mine / xla:.3f}x" if xla else "n/a"
    return f"{xla:,} vs **{mine:,}** ({ratio})"


def main():
    hbm = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "build" / "hbm")
    root = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "build" / "jax_zoo"
    missing = [n for n in zoo.NAMES if not (root / n / "meta.json").is_file()]
    if missing:
        errors = {k: v for k, v in zoo.build_all(str(root), missing).items() if v}
        if errors:
            sys.exit(f"jax_zoo_table: the zoo did not compile: {sorted(errors)}")
    import jax

    print(f"JAX {jax.__version__} on the CPU; each cell: XLA's bytes (memory_analysis), then "
          "hbm's where they differ.\n")
    print("| program | " + " | ".join(f[2] for f in FIELDS) + " |")
    print("|---" * (len(FIELDS) + 1) + "|")
    exact = 0
    for name in zoo.NAMES:
        xla = json.loads((root / name / "memory_analysis.json").read_text())
        done = subprocess.run([hbm, "plan", str(root / name / "optimized.hlo"), "--json"],
                              capture_output=True, text=True)
        if done.returncode not in (0, 2):
            print(f"| {name} | hbm plan failed: {done.stderr.strip()[:80]} |")
            continue
        plan = json.loads(done.stdout)
        cells = [cell(xla[a], plan[b]) for a, b, _ in FIELDS]
        exact += all(xla[a] == plan[b] for a, b, _ in FIELDS)
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\n{exact} of {len(zoo.NAMES)} programs match XLA exactly on all four numbers.")


if __name__ == "__main__":
    main()
