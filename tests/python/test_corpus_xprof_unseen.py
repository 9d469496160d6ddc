"""test_corpus_xprof_unseen.py — hbm's Memory Viewer against XProf's own conversion on the
held-out program families (corpus_unseen.py: LAPACK custom calls, cumulative scans, top-k,
convolution variants, pooling, embeddings, complex numbers, dtype mixes, vmapped loops,
einsum chains, dot_product_attention, cross-entropy training, NamedShardings on 2-D meshes
and shard_map collectives on 4 and 8 host devices, ...), which hbm's XProf readers were never
tuned on. The same tests as test_corpus_xprof.py (imported from it), on programs traced with
jax.profiler.trace by corpus_xprof_trace.py: every field of memory_viewer (every program
module of the trace, every colour hbm shows) and of memory_profile (every allocator) through
`hbm report --json`, through the viewer's API and through XProf's own JSON read back; XLA's
totals against compiled.memory_analysis(). XProf's values are the expected ones.

Kept small for CI: the default run traces a fixed subset — every 8th program, the first of
each family and the first of each family on each device count (1, 4 and 8 host devices) — 59
of the 340 programs, cached in build/jax_corpus_xprof_unseen/subset/ on the corpus, the tracer
and JAX's and XProf's versions. HBM_CORPUS_FULL=1 traces all 340 (BENCHMARKS.md, "Memory
Viewer vs XProf on unseen families", gives that run's per-family table and its command).
"""
import pytest

import corpus_unseen
from test_corpus_xprof import (Corpus, test_every_program_as_xprof_shows_it,  # noqa: F401
                               test_viewer_api_as_xprof_shows_it,
                               test_xla_totals_and_donated_outputs,
                               test_xprofs_own_json_reads_the_same, traced, xprof_side)

STRIDE = 8


@pytest.fixture(scope="module")
def corpus():
    return Corpus(corpus_unseen, "jax_corpus_xprof_unseen", STRIDE)
