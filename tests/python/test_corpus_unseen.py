"""hbm's planner against XLA on held-out program families (corpus_unseen.py: LAPACK custom
calls, cumulative scans, top-k, transposed/grouped/dilated convolutions, pooling, embeddings,
complex numbers, dtype mixes, vmapped loops, einsum chains, jax.nn.dot_product_attention,
cross-entropy training, NamedShardings on 2-D meshes, shard_map collectives on other axes),
which the planner was not tuned on (issue 22's held-out criterion). For every program, `hbm plan
--json --backend cpu` on compiled.as_text() against compiled.memory_analysis() and XLA's memory
usage report, exactly as test_corpus_plan.py does (corpus_check.py). XLA's values are the
expected ones. A difference passes only when KNOWN names it with its reason; a KNOWN entry that
no longer differs fails too.

Cached in build/jax_corpus_unseen, keyed on corpus_unseen.py, corpus_compile.py and the JAX
version (about 2 minutes to build on 2 cores). The table (pytest -s, or on failure) is also written
to build/jax_corpus_unseen/table.txt.
"""
from collections import Counter

import pytest

import corpus_check
import corpus_programs
import corpus_unseen
from conftest import build_dir

# name -> {field: reason}. Every difference from XLA that is allowed, and why.
KNOWN = {}


@pytest.fixture(scope="session")
def unseen_dir():
    return corpus_check.corpus_fixture_dir(build_dir() / "jax_corpus_unseen", corpus_unseen)


@pytest.fixture(scope="session")
def unseen_rows(hbm_bin, unseen_dir):
    return corpus_check.rows_and_table(hbm_bin, unseen_dir, corpus_unseen.programs())


def test_unseen_families_are_many_and_new():
    progs = corpus_unseen.programs()
    families = Counter(p.family for p in progs)
    assert len(progs) >= 150, len(progs)
    assert len(families) >= 12, families
    assert not set(families) & {p.family for p in corpus_programs.programs()}
    assert {p.devices for p in progs} == {1, 4, 8}


def test_every_unseen_program_agrees_with_xla(unseen_rows):
    """Arguments, outputs, alias, temp and total equal XLA's, except what KNOWN explains."""
    bad = corpus_check.unexplained(unseen_rows, KNOWN)
    assert not bad, "\n".join(bad)


def test_issue_22_held_out_criteria(unseen_rows):
    """Temporaries exact on >= 90% and within 1% on >= 98% of the held-out programs."""
    s = corpus_check.temp_stats(unseen_rows)
    assert s["temp_exact"] >= 0.90 * s["programs"], s
    assert s["temp_within_1pct"] >= 0.98 * s["programs"], s


def test_unseen_temporaries_never_below_xla_without_a_warning(unseen_rows):
    low = corpus_check.silently_below(unseen_rows)
    assert not low, f"temp below XLA's with no warning: {low}"
