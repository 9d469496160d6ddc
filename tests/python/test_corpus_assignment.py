"""hbm's buffer assignment against XLA's, value by value, on both compiled corpora (the tuned
one, corpus_programs.py, and the held-out families, corpus_unseen.py).

The totals tests (test_corpus_plan.py, test_corpus_unseen.py) can pass while values sit at
other offsets or in other allocations; the Memory Viewer shows where each buffer at the peak
sits, so here every logical value XLA lists in its own *-buffer-assignment.txt dump is looked
up in `hbm plan --json --values` and compared: the kind of allocation (parameter, output,
temp, constant, thread-local), which allocation (see alloc_labels), the offset inside it and
the size. The expected side is parsed here from XLA's file, never from hbm.

A program is "exact" when every value matches, "equivalent" when the only differences are
temporaries of equal sizes trading places (the same set of (offset, size) slots: the same heap
for the user), else it differs and must be named in KNOWN with its reason; a KNOWN entry that
no longer differs fails too. Run as a script for the per-family table (BENCHMARKS.md):
  .venv/bin/python tests/python/test_corpus_assignment.py build/hbm build
"""
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import corpus_check
import corpus_programs
import corpus_unseen

ALLOC_RE = re.compile(r"^allocation (\d+): size (\d+)(.*):$")
VALUE_RE = re.compile(
    r"^ value: <\d+ (\S+?)(\{[\d,]*\})?( \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\)")

# Why a program may differ. LOOP: a while loop's carried values (XLA's phis, the loop state
# and the condition's predicate) sit at other offsets of the temp allocation. hbm has one value
# for a loop buffer where XLA has the condition's, body's and while's phis, each ticking the
# heap simulator's clock, so ties in its placement order can break differently; the heap has
# the same size (the totals tests are exact), but which 4-byte counter sits where differs.
LOOP = "while loop: carried values at other temp offsets (same heap size)"
# name -> reason. Programs whose assignment differs from XLA's (beyond equivalent swaps).
KNOWN = {
    "cumulative_logcumsumexp_1000_a0": (
        "broadcast_map_fusion takes the buffer of its operand wrapped_reduce-window.1 in XLA "
        "(a loop fusion around a map); hbm keeps it apart, one slot higher, same heap size"),
    "arrayops_interp_64x128": LOOP,
    "arrayops_interp_8x300x7": LOOP,
    "arrayops_searchsorted_64x128": LOOP,
    "arrayops_searchsorted_8x300x7": LOOP,
    "cond_cond_in_scan_128": LOOP,
    "cond_cond_in_scan_512": LOOP,
    "linalg_inv_1_16_f32": LOOP,
    "linalg_inv_1_16_f64": LOOP,
    "linalg_inv_2_128_f32": LOOP,
    "linalg_inv_2_128_f64": LOOP,
    "linalg_inv_4_64_f32": LOOP,
    "linalg_inv_4_64_f64": LOOP,
    "linalg_lu_2_128_f32": LOOP,
    "linalg_slogdet_grad_1_16_f32": LOOP,
    "linalg_slogdet_grad_1_16_f64": LOOP,
    "linalg_slogdet_grad_2_128_f32": LOOP,
    "linalg_slogdet_grad_2_128_f64": LOOP,
    "linalg_slogdet_grad_4_64_f32": LOOP,
    "linalg_slogdet_grad_4_64_f64": LOOP,
    "linalg_solve_1_16_f32": LOOP,
    "linalg_solve_1_16_f64": LOOP,
    "linalg_solve_2_128_f32": LOOP,
    "linalg_solve_2_128_f64": LOOP,
    "linalg_solve_4_64_f32": LOOP,
    "linalg_solve_4_64_f64": LOOP,
    "loops2_fori_tuple_5_32": LOOP,
    "loops2_fori_tuple_9_96": LOOP,
    "loops2_scan_remat_5_32": LOOP,
    "loops2_scan_remat_9_96": LOOP,
    "random_categorical_16x32x64": LOOP,
    "random_categorical_256": LOOP,
    "random_categorical_64x128": LOOP,
    "random_permutation_16x32x64": LOOP,
    "random_permutation_256": LOOP,
    "random_permutation_64x128": LOOP,
    "random_uniform_16x32x64": LOOP,
    "random_uniform_256": LOOP,
    "random_uniform_64x128": LOOP,
    "scan_grad_n12_w256_b16": LOOP,
    "scan_grad_n12_w64_b16": LOOP,
    "scan_grad_n4_w256_b16": LOOP,
    "scan_grad_n4_w64_b16": LOOP,
    "scan_nested_n12_w256_b16": LOOP,
    "scan_nested_n12_w64_b16": LOOP,
    "scan_nested_n4_w256_b16": LOOP,
    "scan_nested_n4_w64_b16": LOOP,
    "shard_map_ring_matmul_d4_x2xy2": LOOP,
    "shard_map_ring_matmul_d4_x4": LOOP,
    "shard_map_ring_matmul_d8_x2xy4": LOOP,
    "shard_map_ring_matmul_d8_x4xy2": LOOP,
    "shard_map_ring_matmul_d8_x8": LOOP,
    "special_betainc_1000": LOOP,
    "special_betainc_4096": LOOP,
    "vmaploop_vmap_scan_4_32": LOOP,
}


def allocation_kind(attrs: str) -> str:
    """The kind of an allocation from the attributes XLA prints after its size."""
    if re.search(r"\bparameter \d+", attrs):
        return "parameter"
    if "constant" in attrs:
        return "constant"
    if "thread-local" in attrs:
        return "thread-local"
    if "temp" in attrs:
        return "temp"
    if "maybe-live-out" in attrs or "output shape" in attrs:
        return "output"
    return "other"


def parse_xla_assignment(text: str) -> dict:
    """XLA's dump as {(instruction, shape index): (kind, allocation, offset, size)}."""
    values, alloc = {}, None
    for lineno, line in enumerate(text.splitlines(), 1):
        m = ALLOC_RE.match(line)
        if m:
            alloc = (allocation_kind(m.group(3)), int(m.group(1)))
            continue
        m = VALUE_RE.match(line)
        if m:
            if alloc is None:
                raise ValueError(f"line {lineno}: a value before any allocation")
            key = (m.group(1), m.group(2) or "{}")
            values[key] = (alloc[0], alloc[1], int(m.group(5)), int(m.group(4)))
        elif line.startswith(("Total bytes used", "Used values", "HloLiveRange")):
            break  # the sections after the allocations
    return values


def hbm_assignment(hbm_bin: str, prog_dir: Path) -> dict:
    """hbm's plan of the same module in the same form (first instance of each value)."""
    done = subprocess.run([hbm_bin, "plan", "--json", "--values", "--backend", "cpu",
                           str(prog_dir / "optimized.hlo")], capture_output=True, text=True)
    if done.returncode not in (0, 2):
        raise RuntimeError(f"{prog_dir.name}: {done.stderr.strip()}")
    values = {}
    for v in json.loads(done.stdout)["values"]:
        values.setdefault((v["instruction"], v["index"]),
                          (v["kind"], v["allocation"], v["offset"], v["size"]))
    return values


def alloc_labels(values: dict, common: set) -> dict:
    """Names each allocation independently of its number: every temp allocation is "temp";
    another is named by its largest value (ties: the smallest name) among those both sides
    list, so that one extra value in it does not rename it."""
    groups = {}
    for key, (kind, alloc, _, size) in values.items():
        if key in common:
            groups.setdefault(alloc, []).append((-size, key))
    labels = {}
    for alloc, members in groups.items():
        kind = values[min(members)[1]][0]
        labels[alloc] = "temp" if kind == "temp" else min(members)[1]
    return labels


def compare_program(hbm_bin: str, prog_dir: Path) -> dict:
    """One program: values matched / total, missing ones, and exact / equivalent / differs."""
    dumps = list((prog_dir / "dump").glob("*-buffer-assignment.txt"))
    if len(dumps) != 1:
        raise RuntimeError(f"{prog_dir.name}: expected one buffer-assignment dump")
    xla = parse_xla_assignment(dumps[0].read_text())
    mine = hbm_assignment(hbm_bin, prog_dir)
    common = set(xla) & set(mine)
    xl, ml = alloc_labels(xla, common), alloc_labels(mine, common)
    matched, wrong = 0, []
    for key in sorted(common):
        xk, xa, xo, xs = xla[key]
        mk, ma, mo, ms = mine[key]
        if (xk, xl.get(xa), xo, xs) == (mk, ml.get(ma), mo, ms):
            matched += 1
        else:
            wrong.append((key, xla[key], mine[key]))
    missing = sorted(set(xla) - common)
    temps_only = all(x[0] == "temp" and m[0] == "temp" for _, x, m in wrong)
    same_slots = (Counter((x[2], x[3]) for _, x, _ in wrong) ==
                  Counter((m[2], m[3]) for _, _, m in wrong))
    status = ("exact" if not wrong and not missing else
              "equivalent" if not missing and temps_only and same_slots else "differs")
    has_while = " while(" in (prog_dir / "optimized.hlo").read_text()
    return {"name": prog_dir.name, "values": len(xla), "matched": matched, "missing": missing,
            "wrong": wrong, "status": status, "has_while": has_while}


def table(rows, families) -> str:
    """Per family: programs exact / equivalent, values matched / total, temp values matched."""
    by_fam = {}
    for r in rows:
        by_fam.setdefault(families[r["name"]], []).append(r)
    lines = [f"{'family':24s} {'programs':>8s} {'exact':>6s} {'equiv':>6s} "
             f"{'values matched':>16s}"]
    for fam, frs in sorted(by_fam.items()) + [("all", rows)]:
        st = Counter(r["status"] for r in frs)
        matched, total = sum(r["matched"] for r in frs), sum(r["values"] for r in frs)
        lines.append(f"{fam:24s} {len(frs):8d} {st['exact']:6d} {st['equivalent']:6d} "
                     f"{matched:8d}/{total:<7d}")
    return "\n".join(lines)


def differences(rows) -> list:
    """Programs that differ and are not in KNOWN, and KNOWN entries that no longer differ."""
    bad = []
    for r in rows:
        if r["status"] == "differs" and r["name"] not in KNOWN:
            first = r["wrong"][:3]
            bad.append(f"{r['name']}: {r['values'] - r['matched']} of {r['values']} values "
                       f"differ (missing {r['missing'][:3]}; first: {first})")
        elif r["status"] != "differs" and r["name"] in KNOWN:
            bad.append(f"{r['name']}: now agrees with XLA (remove it from KNOWN)")
        elif KNOWN.get(r["name"]) == LOOP and not r["has_while"]:
            bad.append(f"{r['name']}: KNOWN says LOOP but the program has no while loop")
    return bad


def corpus_rows(hbm_bin, root: Path, progs) -> list:
    rows = [compare_program(hbm_bin, root / p.name) for p in progs]
    print("\n" + table(rows, {p.name: p.family for p in progs}))
    return rows


@pytest.fixture(scope="module")
def rows(hbm_bin):
    from conftest import build_dir

    out = []
    for sub, mod in (("jax_corpus", corpus_programs), ("jax_corpus_unseen", corpus_unseen)):
        root = corpus_check.corpus_fixture_dir(build_dir() / sub, mod)
        out += corpus_rows(hbm_bin, root, mod.programs())
    return out


def test_parser_reads_a_dump_written_by_hand():
    text = ("BufferAssignment:\n"
            "allocation 0: size 8, parameter 1, shape |f32[2]| at ShapeIndex {}:\n"
            " value: <3 p1 @0> (size=8,offset=0): f32[2]{0}\n"
            "allocation 1: size 64, preallocated-temp:\n"
            " value: <4 t{1} @0> (size=8,offset=32): f32[2]{0}\n"
            " value: <5 w (phi) @0> (size=16,offset=0): f32[4]{0}\n")
    assert parse_xla_assignment(text) == {("p1", "{}"): ("parameter", 0, 0, 8),
                                          ("t", "{1}"): ("temp", 1, 32, 8),
                                          ("w", "{}"): ("temp", 1, 0, 16)}


def test_every_value_is_where_xla_puts_it(rows):
    assert sum(r["values"] for r in rows) > 10000
    bad = differences(rows)
    assert not bad, "\n".join(bad[:40]) + f"\n({len(bad)} programs)"


if __name__ == "__main__":
    # test_corpus_assignment.py HBM_BIN BUILD_DIR: the per-family table of both corpora
    all_rows = []
    for sub, mod in (("jax_corpus", corpus_programs), ("jax_corpus_unseen", corpus_unseen)):
        root = corpus_check.compiled_corpus(Path(sys.argv[2]) / sub, mod)
        print(f"== {sub}")
        all_rows += corpus_rows(sys.argv[1], root, mod.programs())
    st = Counter(r["status"] for r in all_rows)
    print(json.dumps(dict(st)))
    for r in all_rows:
        if r["status"] == "differs":
            print(r["name"], r["values"] - r["matched"], "of", r["values"],
                  "missing", len(r["missing"]), r["wrong"][:2])
