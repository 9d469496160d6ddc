"""The peak of a PyTorch memory snapshot as memory_viz's Active Memory Timeline draws it (every
rule of MemoryViz.js, docs/pytorch-snapshots.md; on the device memory_viz opens), computed by
the second,
Python decoder of tests/data/torch/second_decoder.py: it reads the pickle's data opcodes alone
and runs nothing. `hbm report` is checked against it.

Usage: python3 snapshot_peak.py SNAPSHOT.pickle
Prints {"peak_bytes": ..., "reserved_bytes": ..., "live_at_dump_bytes": ...}."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "data", "torch"))
from second_decoder import load, numbers  # noqa: E402


def main(path):
    with open(path, "rb") as f:
        peak, reserved, live_end = numbers(load(f.read()))
    print(json.dumps({"peak_bytes": peak, "reserved_bytes": reserved,
                      "live_at_dump_bytes": live_end}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
