#!/usr/bin/env python3
"""test-summary.py — the closing lines of scripts/test.sh, read from the JUnit files that ctest
and pytest write: per suite, how many tests passed, failed and were skipped (with each skipped
test's reason, and the cmocka cases skipped inside tests that otherwise ran), then one line
`tests: N passed, M failed, K skipped` over every suite.

Usage: test-summary.py [--extra NAME:PASSED:FAILED:SKIPPED]... SUITE=JUNIT.xml...
A missing JUnit file counts as one failed test: a suite that wrote nothing did not pass."""
import re
import sys
import xml.etree.ElementTree as ET


def reasons_in(lines):
    """The distinct 'skipped: ...' lines a test printed (first three), joined; '' if none."""
    reasons = []
    for line in lines:
        own = line.startswith("[") or "SKIPPED TEST" in line  # cmocka's lines, not a reason
        line = line.strip()
        if line.lower().startswith("skipped:"):
            line = line[len("skipped:"):].strip()  # the summary says "skipped" already
        elif "skip" not in line.lower():
            continue
        if not own and line and line not in reasons:
            reasons.append(line)
    return " / ".join(reasons[:3]) + (" / ..." if len(reasons) > 3 else "")


def reason_of(case):
    """The skip reason: the test's own 'skipped: ...' lines, else the runner's message."""
    reasons = reasons_in((case.findtext("system-out") or "").splitlines())
    if reasons:
        return reasons
    skipped = case.find("skipped")
    if skipped is not None:
        return (skipped.get("message") or skipped.text or "").strip() or "no reason given"
    return "no reason given"


def outcome(case):
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    if case.find("skipped") is not None:
        return "skipped"
    status = case.get("status")
    if status in ("fail",):
        return "failed"
    if status in ("notrun", "disabled"):
        return "skipped"
    return "passed"


def cmocka_skips(case):
    """The cmocka cases skipped inside a test that ran, each with its own reason: what it
    printed between `[ RUN      ] name` and `[  SKIPPED ] name` (th_skip's 'skipped: ...')."""
    skips, current, lines = {}, None, []
    for line in (case.findtext("system-out") or "").splitlines():
        started = re.match(r"^\[ RUN      \] (\S+)$", line)
        ended = re.match(r"^\[  SKIPPED \] (\S+)$", line)
        if started:
            current, lines = started.group(1), []
        elif ended and ended.group(1) == current:
            skips[current] = reasons_in(lines) or "no reason given"
            current = None
        elif current:
            lines.append(line)
    return skips


def read_suite(path):
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    notes = []
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        counts["failed"] = 1
        notes.append(f"no results ({e})")
        return counts, notes
    for case in root.iter("testcase"):
        name = case.get("name")
        kind = outcome(case)
        counts[kind] += 1
        if kind == "skipped":
            notes.append(f"skipped {name}: {reason_of(case)}")
        elif kind == "failed":
            notes.append(f"FAILED {name}")
        inner = cmocka_skips(case) if kind == "passed" else {}
        for inner_name, reason in sorted(inner.items()):
            notes.append(f"{name} ran, but skipped the case {inner_name}: {reason}")
    return counts, notes


def main(argv):
    total = {"passed": 0, "failed": 0, "skipped": 0}
    suites = []
    args = list(argv)
    while args and args[0] == "--extra":
        name, p, f, s = args[1].split(":")
        suites.append((name, {"passed": int(p), "failed": int(f), "skipped": int(s)}, []))
        args = args[2:]
    for arg in args:
        name, path = arg.split("=", 1)
        counts, notes = read_suite(path)
        suites.append((name, counts, notes))
    print("== summary")
    for name, counts, notes in suites:
        print(f"{name}: {counts['passed']} passed, {counts['failed']} failed, "
              f"{counts['skipped']} skipped")
        for note in notes:
            print(f"  {note}")
        for k in total:
            total[k] += counts[k]
    print(f"tests: {total['passed']} passed, {total['failed']} failed, "
          f"{total['skipped']} skipped")
    return 1 if total["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
