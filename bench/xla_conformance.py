#!/usr/bin/env python3
"""Conformance of `hbm plan` with XLA's own buffer assignment on real dumps.

For every `*_after_optimizations.txt` in DIR (an XLA_FLAGS=--xla_dump_to directory), runs
`hbm plan --json` on the module and compares its numbers with the module's own
`*-buffer-assignment.txt` (allocations: parameters, maybe-live-out outputs, the
preallocated temp, constants, thread-local; `Total bytes used`) and the first totals of its
`*-memory-usage-report.txt`. Prints a per-module table, a table per module kind and the
summary the issue asks for. Python standard library only.

    python3 bench/xla_conformance.py ../shared/real/xla [--hbm build/hbm] [--worst 5]
"""

import argparse
import json
import os
import re
import subprocess
import sys

ALLOC_RE = re.compile(r"^allocation (\d+): size (\d+)(.*):\s*$")
TOTAL_RE = re.compile(r"^Total bytes used: (\d+)")


def read_buffer_assignment(path):
    """XLA's allocations, summed by kind, as XLA printed them (never re-packed)."""
    out = dict(args=0, outputs=0, alias=0, temp=0, const=0, thread_local=0, total=None,
               other=0, n_temp_allocs=0, sum=0)
    with open(path, errors="replace") as f:
        for line in f:
            m = ALLOC_RE.match(line)
            if m:
                size, flags = int(m.group(2)), m.group(3)
                out["sum"] += size
                is_param = re.search(r", parameter \d+", flags) is not None
                live_out = "maybe-live-out" in flags
                if is_param:
                    out["args"] += size
                if live_out:
                    out["outputs"] += size
                if is_param and live_out:
                    out["alias"] += size
                if "preallocated-temp" in flags:
                    out["temp"] += size
                    out["n_temp_allocs"] += 1
                elif "constant" in flags:
                    out["const"] += size
                elif "thread-local" in flags:
                    out["thread_local"] += size
                elif not is_param and not live_out:
                    out["other"] += size  # a temp allocation of its own (CPU, colours)
                continue
            m = TOTAL_RE.match(line)
            if m and out["total"] is None:
                out["total"] = int(m.group(1))
            if line.startswith("Used values:"):
                break
    # Newer XLA prints "Total bytes used" in the memory-usage report only.
    if out["total"] is None:
        out["total"] = out["sum"]
    # Without a preallocated temp allocation (CPU), the temporaries are the rest.
    if out["n_temp_allocs"] == 0:
        out["temp"] = out["other"]
    return out


def read_report_total(path):
    """The exact total the memory-usage report prints on its first lines."""
    if not os.path.exists(path):
        return None
    with open(path, errors="replace") as f:
        for i, line in enumerate(f):
            m = TOTAL_RE.match(line)
            if m:
                return int(m.group(1))
            if i > 20:
                break
    return None


def module_kind(hlo_text, path):
    """A coarse kind, from what the module contains (for the table per kind)."""
    if "_cpu_after" in path or ".cpu_after" in path:
        return "cpu"
    if re.search(r"\b(while|conditional|call)\(", hlo_text):
        return "control flow"
    if re.search(r"-start\(|-done\(|\b(all-reduce|all-gather|all-to-all|"
                 r"collective-permute|reduce-scatter)\(", hlo_text):
        return "collectives/async"
    if "custom-call(" in hlo_text:
        return "library calls"
    return "fusions"


def run_plan(hbm, path):
    r = subprocess.run([hbm, "plan", "--json", path], capture_output=True, text=True)
    if r.returncode not in (0, 2):
        return None, r.stderr.strip()
    try:
        return json.loads(r.stdout), r.stderr.strip()
    except json.JSONDecodeError as e:
        return None, "bad JSON: %s" % e


def rel(a, b):
    if b == 0:
        return 0.0 if a == 0 else float("inf")
    return (a - b) / b


def compare(hbm, directory):
    rows = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith("_after_optimizations.txt"):
            continue
        path = os.path.join(directory, name)
        stem = path[: -len(".txt")]
        ba_path = stem + "-buffer-assignment.txt"
        if not os.path.exists(ba_path):
            continue
        xla = read_buffer_assignment(ba_path)
        report_total = read_report_total(stem + "-memory-usage-report.txt")
        with open(path, errors="replace") as f:
            text = f.read()
        plan, err = run_plan(hbm, path)
        row = dict(name=name, kind=module_kind(text, name), xla=xla,
                   report_total=report_total, plan=plan, err=err)
        if plan is not None:
            row["ours"] = dict(args=plan["argument_bytes"], outputs=plan["output_bytes"],
                               alias=plan["alias_bytes"], temp=plan["temp_bytes"],
                               total=plan.get("total_bytes", plan["used_bytes"]))
        if plan.get("warnings"):
            row["err"] = "; ".join(plan["warnings"])
        rows.append(row)
    return rows


def short(name):
    m = re.match(r"^[0-9a-f]+__module_(\d+)\.(.*?)\.(sm_[0-9.]+_gpu|cpu)_after", name)
    return "%s.%s" % (m.group(1), m.group(2)) if m else name


def verdicts(row):
    x, o = row["xla"], row.get("ours")
    if o is None:
        return dict(ok=False)
    return dict(
        ok=True,
        args=o["args"] == x["args"],
        outputs=o["outputs"] == x["outputs"],
        temp_exact=o["temp"] == x["temp"],
        temp_1pct=abs(rel(o["temp"], x["temp"])) <= 0.01,
        total_1pct=abs(rel(o["total"], x["total"])) <= 0.01,
        under=rel(o["total"], x["total"]) < -0.01,
        warned=bool(row["err"]),
    )


def pct(a, b):
    return "%d/%d (%.0f%%)" % (a, b, 100.0 * a / b if b else 0)


def print_rows(rows):
    print("| module | kind | args | outputs | temp XLA | temp hbm | total XLA | total hbm | Δ total |")
    print("| --- | --- | :-: | :-: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        x, o, v = r["xla"], r.get("ours"), verdicts(r)
        if o is None:
            print("| %s | %s | error: %s |" % (short(r["name"]), r["kind"], r["err"][:80]))
            continue
        print("| %s | %s | %s | %s | %d | %d | %d | %d | %+.1f%% |" % (
            short(r["name"]), r["kind"], "=" if v["args"] else "≠",
            "=" if v["outputs"] else "≠", x["temp"], o["temp"], x["total"], o["total"],
            100 * rel(o["total"], x["total"])))


def summary(rows, label="all"):
    vs = [verdicts(r) for r in rows]
    n = len(vs)
    ok = [v for v in vs if v["ok"]]
    count = lambda k: sum(1 for v in ok if v[k])
    under_silent = sum(1 for v in ok if v["under"] and not v["warned"])
    return ("| %s | %d | %s | %s | %s | %s | %s | %d (%d without a warning) |" % (
        label, n, pct(count("args"), n), pct(count("outputs"), n), pct(count("temp_exact"), n),
        pct(count("temp_1pct"), n), pct(count("total_1pct"), n), count("under"), under_silent))


def worst(rows, k):
    scored = [r for r in rows if r.get("ours")]
    scored.sort(key=lambda r: (-abs(rel(r["ours"]["total"], r["xla"]["total"])),
                               -min(abs(rel(r["ours"]["temp"], r["xla"]["temp"])), 1e9)))
    out = []
    for r in scored[:k]:
        x, o = r["xla"], r["ours"]
        out.append("| %s | %s | %d | %d | %+.1f%% | %s |" % (
            short(r["name"]), r["kind"], x["total"], o["total"],
            100 * rel(o["total"], x["total"]), (r["err"] or "").replace("\n", " ")[:120]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("directory")
    ap.add_argument("--hbm", default=os.path.join(os.path.dirname(__file__), "..", "build", "hbm"))
    ap.add_argument("--worst", type=int, default=5)
    ap.add_argument("--quiet", action="store_true", help="summary tables only")
    ap.add_argument("--json", help="write the per-module numbers to this file")
    a = ap.parse_args()
    rows = compare(a.hbm, a.directory)
    if not rows:
        print("no *_after_optimizations.txt with a buffer assignment in %s" % a.directory)
        return 1
    if not a.quiet:
        print_rows(rows)
        print()
    print("| kind | modules | arguments exact | outputs exact | temp exact | temp within 1% "
          "| total within 1% | under by > 1% |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in sorted(set(r["kind"] for r in rows)):
        print(summary([r for r in rows if r["kind"] == kind], kind))
    print(summary(rows, "**all**"))
    print()
    print("| worst | kind | total XLA | total hbm | Δ | hbm's warning |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for line in worst(rows, a.worst):
        print(line)
    report_mismatch = [r for r in rows if r["report_total"] is not None
                       and r["report_total"] != r["xla"]["total"]]
    print()
    print("memory-usage reports whose total differs from the buffer assignment's: %d"
          % len(report_mismatch))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{k: r[k] for k in ("name", "kind", "xla", "report_total")}
                       | {"ours": r.get("ours"), "warning": r["err"]} for r in rows], f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
