"""corpus_check.py — what the planner's corpus tests share (test_corpus_plan.py on the tuned
corpus, test_corpus_unseen.py on the held-out families): the cached compile of a corpus module
into build/, one row per program comparing `hbm plan --json --backend cpu` on
compiled.as_text() with compiled.memory_analysis() and XLA's memory usage report, the printed
table with per-family counts, and the check of the differences against a KNOWN dict.

The expected values are always XLA's; hbm's are what is checked.
"""
import hashlib
import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import corpus_compile

FIELDS = [("arguments", "argument_size_in_bytes", "argument_bytes"),
          ("outputs", "output_size_in_bytes", "output_bytes"),
          ("alias", "alias_size_in_bytes", "alias_bytes"),
          ("temp", "temp_size_in_bytes", "temp_bytes")]


def corpus_key(module) -> str:
    """Key of a compiled corpus: the program module, the compiler script and the JAX version."""
    import jax

    h = hashlib.sha256()
    for mod in (module, corpus_compile):
        h.update(Path(mod.__file__).read_bytes())
    h.update(jax.__version__.encode())
    return h.hexdigest()[:16]


def compiled_corpus(root: Path, module) -> Path:
    """root holding every program of `module` compiled, rebuilt when its key changed. Raises
    RuntimeError listing the programs that did not compile."""
    stamp = root / ".key"
    key = corpus_key(module)
    if not (stamp.is_file() and stamp.read_text() == key):
        shutil.rmtree(root, ignore_errors=True)
        errors = corpus_compile.build(root, module.__name__)
        if errors:
            raise RuntimeError("the corpus did not compile:\n" +
                               "\n".join(f"{k}: {v}" for k, v in errors.items()))
        stamp.write_text(key)
    return root


def corpus_fixture_dir(root: Path, module) -> Path:
    """compiled_corpus for a pytest fixture: a corpus that does not compile fails the test."""
    import pytest

    try:
        return compiled_corpus(root, module)
    except RuntimeError as e:
        pytest.fail(str(e))


def xla_total(prog_dir: Path):
    """The sum of XLA's allocations in its memory usage report (None when it is missing)."""
    reports = list((prog_dir / "dump").glob("*memory-usage-report.txt"))
    if len(reports) != 1:
        return None
    return sum(int(t) for t in re.findall(r"^Total bytes: (\d+)", reports[0].read_text(), re.M))


def compare(hbm_bin: str, prog_dir: Path) -> dict:
    """One row: XLA's and hbm's numbers and the fields that differ (or the error)."""
    xla = json.loads((prog_dir / "memory_analysis.json").read_text())
    done = subprocess.run([hbm_bin, "plan", "--json", "--backend", "cpu",
                           str(prog_dir / "optimized.hlo")], capture_output=True, text=True)
    row = {"name": prog_dir.name, "xla": xla, "hbm": None, "diff": {}, "warned": False}
    if done.returncode not in (0, 2):
        row["diff"]["error"] = done.stderr.strip().splitlines()[-1] if done.stderr else "no output"
        return row
    plan = json.loads(done.stdout)
    row["hbm"], row["warned"] = plan, bool(plan.get("warnings"))
    for field, xla_key, hbm_key in FIELDS:
        if plan[hbm_key] != xla[xla_key]:
            row["diff"][field] = f"{plan[hbm_key]} vs XLA's {xla[xla_key]}"
    total = xla_total(prog_dir)
    if total is None:
        row["diff"]["total"] = "XLA's memory usage report is missing"
    elif plan["total_bytes"] != total:
        row["diff"]["total"] = f"{plan['total_bytes']} vs XLA's {total}"
    return row


def temp_stats(rows) -> dict:
    """Counts of the issue's held-out criteria on temporaries: exact, within 1%, below XLA's
    with and without a warning (a row that did not plan counts as neither exact nor within)."""
    exact = within = low_silent = low_warned = 0
    for r in rows:
        if not r["hbm"]:
            continue
        mine, theirs = r["hbm"]["temp_bytes"], r["xla"]["temp_size_in_bytes"]
        exact += mine == theirs
        within += abs(mine - theirs) <= 0.01 * theirs
        if mine < theirs:
            low_warned += r["warned"]
            low_silent += not r["warned"]
    return {"programs": len(rows), "temp_exact": exact, "temp_within_1pct": within,
            "below_silent": low_silent, "below_warned": low_warned}


def table(rows, families) -> str:
    """The printed table: XLA's numbers, hbm's differences, per-family counts and temp stats."""
    lines = [f"{'program':58s} {'arguments':>10s} {'outputs':>10s} {'alias':>10s} {'temp':>10s}"
             "  differences (hbm vs XLA)"]
    for r in rows:
        x = r["xla"]
        diff = "; ".join(f"{k} {v}" for k, v in r["diff"].items()) or "="
        if r["diff"] and r["warned"]:
            diff += " (warned)"
        lines.append(f"{r['name']:58s} {x['argument_size_in_bytes']:10d} "
                     f"{x['output_size_in_bytes']:10d} {x['alias_size_in_bytes']:10d} "
                     f"{x['temp_size_in_bytes']:10d}  {diff}")
    by_fam = {}
    for r in rows:
        by_fam.setdefault(families[r["name"]], []).append(r)
    lines.append("")
    lines.append(f"{'family':22s} {'all fields':>10s} {'temp exact':>10s} {'temp ±1%':>9s} "
                 f"{'below, silent':>13s}")
    for fam, frows in list(by_fam.items()) + [("all", rows)]:
        s = temp_stats(frows)
        n = len(frows)
        every = sum(1 for r in frows if not r["diff"])
        lines.append(f"{fam:22s} {every:4d}/{n:<5d} {s['temp_exact']:4d}/{n:<5d} "
                     f"{s['temp_within_1pct']:4d}/{n:<4d} {s['below_silent']:13d}")
    return "\n".join(lines)


def rows_and_table(hbm_bin, root: Path, progs):
    """Compares every program, writes the table to root/table.txt and prints it."""
    rows = [compare(hbm_bin, root / p.name) for p in progs]
    text = table(rows, {p.name: p.family for p in progs})
    (root / "table.txt").write_text(text + "\n")
    print("\n" + text)
    return rows


def unexplained(rows, known) -> list:
    """Differences KNOWN does not name, and KNOWN entries that no longer differ."""
    bad = []
    for r in rows:
        mine = known.get(r["name"], {})
        for field, what in r["diff"].items():
            if field not in mine:
                bad.append(f"{r['name']}: {field} {what}")
        for field in mine:
            if field not in r["diff"]:
                bad.append(f"{r['name']}: {field} now equals XLA's (remove it from KNOWN)")
    return bad


def silently_below(rows) -> list:
    """Programs whose temporaries hbm puts below XLA's without a warning."""
    return [r["name"] for r in rows if r["hbm"] and not r["warned"]
            and r["hbm"]["temp_bytes"] < r["xla"]["temp_size_in_bytes"]]


if __name__ == "__main__":
    # python corpus_check.py HBM_BIN ROOT MODULE: compile (cached) and print the table
    import importlib
    import sys

    mod = importlib.import_module(sys.argv[3])
    root = compiled_corpus(Path(sys.argv[2]), mod)
    rs = rows_and_table(sys.argv[1], root, mod.programs())
    print(json.dumps(temp_stats(rs)))
