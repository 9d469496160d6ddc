#!/usr/bin/env python3
"""How many of the generated snapshots (rules_corpus.py) and of the hand-made ones of
tests/python/test_torch_rules.py an hbm executable reads exactly as memory_viz's Active
Memory Timeline draws them, field by field (for BENCHMARKS.md's "snapshot rules vs
MemoryViz.js" table).

Run: python3 tests/data/torch/rules_tally.py HBM_EXECUTABLE [N]   (N generated, default 240)
"""
import collections
import pickle
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "python"))
import rules_corpus  # noqa: E402
import test_torch_rules as rules  # noqa: E402


TIMELINE = {"peak", "peak_event", "end", "reserved", "reserved at the dump", "second decoder"}


def field_of(problem):
    """'device 0: peak hbm ...' -> 'peak'; the snapshot-wide ones by their words."""
    text = problem.split(": ", 1)[1]
    for word in ("memory_viz opens", "reserved at the dump", "OOM events", "second decoder"):
        if word in text:
            return word
    return text.split()[0]


def main(hbm, n):
    out = Path(tempfile.mkdtemp())
    exact, fields, timeline = collections.Counter(), collections.Counter(), 0
    total = collections.Counter()
    for p in rules_corpus.write_corpus(str(out), n):
        path = Path(p)
        version = path.stem.split("_v")[1]
        total[version] += 1
        problems = rules.check(hbm, path, pickle.loads(path.read_bytes()))
        exact[version] += not problems
        wrong = {field_of(x) for x in problems}
        timeline += not wrong & TIMELINE
        for f in wrong:
            fields[f] += 1
    print(f"generated: {sum(exact.values())} of {sum(total.values())} exact in every field, "
          f"{timeline} in the timeline's ({', '.join(sorted(TIMELINE))})")
    for v in sorted(total, key=lambda v: [int(x) for x in v.split(".")]):
        print(f"  PyTorch {v} format: {exact[v]} of {total[v]}")
    for f, k in sorted(fields.items()):
        print(f"  snapshots with '{f}' wrong: {k}")
    hand = 0
    for name, snap, *_ in rules.BY_HAND:
        path = out / f"{name}.pickle"
        path.write_bytes(pickle.dumps(snap, protocol=2))
        problems = [x for x in rules.check(hbm, path, snap) if field_of(x) in TIMELINE]
        hand += not problems
        print(f"  by hand {name}: {'exact' if not problems else problems[0]}")
    print(f"by hand: {hand} of {len(rules.BY_HAND)} exact in the timeline's fields")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 240)
