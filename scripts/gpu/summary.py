"""The JSON of scripts/gpu-check.sh: one record per step as it ends, and summary.json (written
again after every step, so that a run stopped from outside keeps what it measured).

Usage: summary.py lines FILE                       "key: value" lines as a JSON object
       summary.py junit FILE                       a ctest JUnit file: counts, each test's outcome
       summary.py record WORK STEP RC SECONDS BUDGET   the step's record (its output is
                                                   WORK/STEP.out, its numbers WORK/steps/STEP.json)
       summary.py write WORK OUT EXIT SECONDS      summary.json from the probe and the records"""
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
STATUS = {0: "passed", 77: "skipped", 124: "timed out", 137: "timed out", -1: "not run"}


def test_summary():
    """scripts/test-summary.py, for its reading of JUnit outcomes."""
    spec = importlib.util.spec_from_file_location(
        "test_summary", os.path.join(HERE, "..", "test-summary.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lines(path):
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            key, _, value = line.partition(":")
            if value:
                out[key.strip()] = value.strip()
    return out


def junit(path):
    ts = test_summary()
    import xml.etree.ElementTree as ET

    counts, tests = {"passed": 0, "failed": 0, "skipped": 0}, {}
    for case in ET.parse(path).getroot().iter("testcase"):
        kind = ts.outcome(case)
        counts[kind] += 1
        tests[case.get("name")] = kind
        if kind == "skipped":
            tests[case.get("name") + " (reason)"] = ts.reason_of(case)
    return dict(counts, tests=tests)


def reason(output, status):
    """What the step said about why it skipped or failed."""
    said = [line[len("skipped: "):] for line in output if line.startswith("skipped: ")]
    if status == "skipped" and said:
        return " / ".join(said[:4])
    if status in ("failed", "timed out"):
        return " | ".join(line.strip() for line in output[-3:])
    return None


def record(work, step, rc, seconds, budget):
    rc = int(rc)
    status = STATUS.get(rc, "failed")
    out_path = os.path.join(work, f"{step}.out")
    output = open(out_path, errors="replace").read().splitlines() if os.path.exists(out_path) else []
    row = {"name": step, "status": status, "exit": rc, "seconds": int(seconds),
           "budget_seconds": int(budget)}
    why = reason(output, status) if rc != -1 else "the total time budget was spent"
    if why:
        row["reason"] = why
    with open(os.path.join(work, "steps.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    return 0


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"unreadable": f"{path}: {e}"}


def write(work, out, exit_status, seconds):
    rows = []
    if os.path.exists(os.path.join(work, "steps.jsonl")):
        with open(os.path.join(work, "steps.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    for row in rows:
        detail = os.path.join(work, "steps", row["name"] + ".json")
        if os.path.exists(detail):
            row["detail"] = load(detail)
    summary = {"gpu": load(os.path.join(work, "probe.json")), "exit_status": int(exit_status),
               "seconds": int(seconds), "steps": rows}
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(summary, f, indent=1)
    os.replace(tmp, out)
    return 0


def main(argv):
    if len(argv) >= 2 and argv[0] in ("lines", "junit"):
        print(json.dumps((lines if argv[0] == "lines" else junit)(argv[1]), indent=1))
        return 0
    if len(argv) == 6 and argv[0] == "record":
        return record(*argv[1:])
    if len(argv) == 5 and argv[0] == "write":
        return write(*argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
