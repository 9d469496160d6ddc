"""hbm's planner against XLA on the conformance corpus (corpus_programs.py, several hundred JAX
programs compiled on the CPU by the installed JAX): for every program, `hbm plan --json
--backend cpu` on compiled.as_text() gives the arguments, outputs, aliased bytes and
temporaries of compiled.memory_analysis(), and the total of XLA's memory usage report. The
expected values are XLA's, never hbm's. A difference passes only when KNOWN below names it
with its reason; a KNOWN entry that no longer differs fails too (it would hide a regression).

The compiled corpus is cached in build/jax_corpus, keyed on corpus_programs.py,
corpus_compile.py and the JAX version (about 2-3 minutes to build on 2 cores, then seconds).
The table is printed (pytest -s, or on failure) and written to build/jax_corpus/table.txt.
"""
import re
from collections import Counter
from pathlib import Path

import pytest

import corpus_check
import corpus_programs
from conftest import build_dir

# name -> {field: reason}. Every difference from XLA that is allowed, and why.
# (norm_layer_grad_32x256_bf16 and _4x16x16x128_bf16 were here, 1,024 and 16,384 bytes low:
# XLA's heap simulator frees an operand whose memory a result takes (ShareWith) at that
# result's step, not the step before, which reorders the ties of its placement; see
# docs/planner.md and tests/test_plan_share_events.c.)
KNOWN = {}


@pytest.fixture(scope="session")
def corpus_dir():
    return corpus_check.corpus_fixture_dir(build_dir() / "jax_corpus", corpus_programs)


@pytest.fixture(scope="session")
def corpus_rows(hbm_bin, corpus_dir):
    return corpus_check.rows_and_table(hbm_bin, corpus_dir, corpus_programs.programs())


def test_corpus_is_large_and_covers_every_family():
    progs = corpus_programs.programs()
    families = Counter(p.family for p in progs)
    assert len(progs) >= 300, len(progs)
    for fam in ["dense", "conv", "attention", "layer_norm", "scan", "while", "cond", "remat",
                "donation", "custom_vjp", "sort", "gather_scatter", "dynamic_update_slice",
                "fft", "random", "sharded", "shard_map"]:
        assert families[fam] >= 10, (fam, families[fam])
    assert {p.devices for p in progs} == {1, 4, 8}


def test_sharded_programs_use_every_collective(corpus_dir):
    """The sharded families compile to every collective XLA has on the CPU (the truth is the
    compiled modules, read here, not what the programs were meant to do)."""
    seen = Counter()
    for p in corpus_programs.programs():
        if p.devices > 1:
            text = (corpus_dir / p.name / "optimized.hlo").read_text()
            for op in ("all-gather", "reduce-scatter", "all-reduce", "all-to-all",
                       "collective-permute"):
                if re.search(rf"\b{op}(-start)?\(", text):
                    seen[op] += 1
    for op in ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute"):
        assert seen[op] >= 3, f"{op} appears in {seen[op]} sharded programs"


def test_every_program_agrees_with_xla(corpus_rows):
    """Arguments, outputs, alias, temp and total equal XLA's on every program, except the
    differences KNOWN names with their reasons."""
    bad = corpus_check.unexplained(corpus_rows, KNOWN)
    assert not bad, "\n".join(bad)


def test_temporaries_never_below_xla_without_a_warning(corpus_rows):
    low = corpus_check.silently_below(corpus_rows)
    assert not low, f"temp below XLA's with no warning: {low}"
