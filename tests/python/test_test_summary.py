"""scripts/test-summary.py and the tests' skips: every skipped test and every cmocka case
skipped inside a test that ran is listed with its own reason (issue 27: the summary said
`skipped the cases jax_zoo_traces: no reason given`)."""
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import ROOT, build_dir

SUMMARY = ROOT / "scripts" / "test-summary.py"


def summarize(tmp_path, xml):
    junit = tmp_path / "junit.xml"
    junit.write_text(xml)
    done = subprocess.run([sys.executable, str(SUMMARY), f"c={junit}"], capture_output=True,
                          text=True, check=True)
    return done.stdout


def test_each_cmocka_case_gets_its_own_reason(tmp_path):
    # What ctest writes for a cmocka test with two cases skipped for different reasons and a
    # third skipped without one (the reason printed by th_skip precedes cmocka's line).
    out = textwrap.dedent("""\
        [==========] Running 4 test(s).
        [ RUN      ] first
        skipped: the shared data is absent (/x/shared)
        [  SKIPPED ] first
        [ RUN      ] second
        some output
        skipped: the JAX zoo is not built (../jax_zoo)
        [  SKIPPED ] second
        [ RUN      ] third
        [  SKIPPED ] third
        [ RUN      ] fourth
        [       OK ] fourth
        [==========] 4 test(s) run.
        [  PASSED  ] 1 test(s).
        [  SKIPPED ] 3 test(s), listed below:
        [  SKIPPED ] first
        [  SKIPPED ] second
        [  SKIPPED ] third
        """)
    xml = ('<?xml version="1.0"?><testsuite><testcase name="test_x" status="run"><system-out>'
           f"{out}</system-out></testcase></testsuite>")
    lines = summarize(tmp_path, xml).splitlines()
    assert "  test_x ran, but skipped the case first: the shared data is absent (/x/shared)" \
        in lines
    assert "  test_x ran, but skipped the case second: the JAX zoo is not built (../jax_zoo)" \
        in lines
    assert "  test_x ran, but skipped the case third: no reason given" in lines
    assert lines[-1] == "tests: 1 passed, 0 failed, 0 skipped"


def test_no_test_skips_without_a_reason():
    # cmocka's skip() says nothing; th_skip (tests/helpers.h) prints the reason first.
    bare = []
    for src in sorted((ROOT / "tests").glob("*.c")):
        for n, line in enumerate(src.read_text().splitlines(), 1):
            if re.search(r"(?<![\w.])skip\(\)", line):
                bare.append(f"{src.name}:{n}: {line.strip()}")
    assert not bare, "skip() without a reason (use th_skip):\n" + "\n".join(bare)


def test_jax_zoo_traces_skip_says_why(tmp_path):
    """The case of the issue, through ctest and the summary as scripts/test.sh runs them."""
    build = build_dir()
    if not (build / "tests" / "test_import_hlo_proto_text").exists():
        pytest.skip(f"{build} has no test_import_hlo_proto_text (build it: scripts/build.sh)")
    junit = tmp_path / "junit.xml"
    env = dict(os.environ, HBM_JAX_ZOO=str(tmp_path / "no-zoo"))
    subprocess.run(["ctest", "--test-dir", str(build), "-R", "^test_import_hlo_proto_text$",
                    "--output-junit", str(junit)], env=env, capture_output=True, check=True)
    done = subprocess.run([sys.executable, str(SUMMARY), f"plain={junit}"],
                          capture_output=True, text=True, check=True)
    line = next(x for x in done.stdout.splitlines() if "jax_zoo_traces" in x)
    assert line.strip() == ("test_import_hlo_proto_text ran, but skipped the case "
                            f"jax_zoo_traces: the JAX zoo is not built ({tmp_path}/no-zoo: "
                            "tests/python/zoo.py builds it)")
