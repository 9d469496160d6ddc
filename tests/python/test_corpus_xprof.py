"""test_corpus_xprof.py — the XProf side of the conformance corpus: programs of
corpus_programs.py run under jax.profiler.trace on the CPU (corpus_xprof_trace.py, cached in
build/jax_corpus_xprof/ on the corpus, the tracer, JAX's and XProf's versions), then for
every program of every .xplane.pb, XProf's own conversion (xprof's
xspace_to_tool_data(..., "memory_viewer", ...) and "memory_profile") against:
  - `hbm report --json` on the .xplane.pb,
  - the viewer's JSON API (`hbm view` on the same files: /api/summary, /api/buffers_at_peak,
    /api/buffer),
  - `hbm report --json` on XProf's own memory_viewer JSON of the program (the input format
    users save from XProf's page),
field by field (tests/xprof_compare.py: peak, unpadded peak, peak position, arguments,
outputs, temporaries, total allocation, scoped VMEM, the buffers at the peak with names,
sizes, shapes, framework ops, types, opcodes, source lines and stacks, in XProf's order and
by size). XLA's own totals (compiled.memory_analysis(), outputs under donation included) are
checked against the figures hbm shows beside each program. The table is printed (and written
to build/jax_corpus_xprof/<set>/table.txt); any difference not listed in
xprof_compare.KNOWN with its reason fails.

The default run traces a deterministic subset (every 6th program of the corpus and the
first of each family and of each device count in it); HBM_CORPUS_FULL=1 traces all of it
(docs/viewer.md gives that run's result). The fixtures take the corpus from the `corpus`
fixture: test_corpus_xprof_unseen.py runs the same tests on the held-out families. A table
per family (programs, modules, fields compared, modules equal on every field, the fields
that differ) is printed for each of the three ways and written to families_<way>.txt beside
the tables. Through the viewer, the page's chart (each heap-simulator event's heap size,
unpadded size and instruction: XProf's heapSizes, unpaddedHeapSizes, hloInstructionNames)
and each heap buffer's span and offset at the peak (logicalBufferSpans, bufferBlocks) are
compared too. A synthetic TPU profile (test_import_xprof_tpu --write) is compared the same
way, and a run that XProf has opened must read as it did before.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: xprof_compare
import corpus_programs  # noqa: E402  (before jax: the host device count)
import corpus_xprof_trace  # noqa: E402
from conftest import build_dir, hbm_json, run_hbm  # noqa: E402

xc = pytest.importorskip("xprof_compare", reason="tests/xprof_compare.py not importable")
pytest.importorskip("xprof.convert.raw_to_tool_data",
                    reason="no xprof in this Python (pip install xprof==2.24.2, "
                           "python/requirements-test.txt)")

STRIDE = 6


class Corpus:
    """A corpus module traced and compared by this file's tests: its programs, the folder of
    build/ its traces are cached in, the subset a default run traces (every `stride`-th
    program, the first of each family and of each device count; HBM_CORPUS_FULL=1: all)."""

    def __init__(self, module, folder, stride):
        self.module, self.folder, self.stride = module, folder, stride

    def selected(self):
        progs = self.module.programs()
        if os.environ.get("HBM_CORPUS_FULL"):
            return [p.name for p in progs]
        chosen, seen = [], set()
        for i, p in enumerate(progs):
            if i % self.stride == 0 or p.family not in seen or (p.family, p.devices) not in seen:
                chosen.append(p.name)
            seen |= {p.family, (p.family, p.devices)}
        return chosen


@pytest.fixture(scope="module")
def corpus():
    return Corpus(corpus_programs, "jax_corpus_xprof", STRIDE)


def _key(corpus, names):
    import jax
    import xprof.version

    h = hashlib.sha256()
    for f in (corpus_programs.__file__, corpus.module.__file__, corpus_xprof_trace.__file__):
        h.update(Path(f).read_bytes())
    h.update(f"{jax.__version__} {xprof.version.__version__}\n".encode())
    h.update("\n".join(names).encode())
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def traced(corpus):
    names = corpus.selected()
    root = build_dir() / corpus.folder / ("full" if os.environ.get("HBM_CORPUS_FULL")
                                          else "subset")
    stamp = root / ".key"
    key = _key(corpus, names)
    if not (stamp.is_file() and stamp.read_text() == key):
        shutil.rmtree(root, ignore_errors=True)
        errors = corpus_xprof_trace.build(root, names, corpus=corpus.module.__name__)
        (root / "errors.json").write_text(json.dumps(errors, indent=1))
        stamp.write_text(key)
    errors = json.loads((root / "errors.json").read_text())
    if errors:
        pytest.fail("corpus programs did not run under jax.profiler.trace:\n" +
                    "\n".join(f"{k}: {v}" for k, v in errors.items()))
    stats = {}
    for f in root.glob("batch-*/programs.json"):
        stats.update(json.loads(f.read_text()))
    xplanes = corpus_xprof_trace.xplanes(root)
    assert xplanes, f"jax.profiler.trace wrote no .xplane.pb under {root}"
    return {"root": root, "xplanes": xplanes, "stats": stats, "names": names,
            "families": {st["module"]: st["family"] for st in stats.values()}}


@pytest.fixture(scope="module")
def xprof_side(hbm_bin, traced):
    """XProf's data for every program (its JSON text too), and hbm report's comparison."""
    rows, diffs, seen = [], [], {}
    for path in traced["xplanes"]:
        label = path.parent.parent.parent.parent.name  # batch-K

        def keep(module, color, text, xp, label=label):
            seen[(label, module, color)] = (text, xp)
        rows += xc.compare_xplane(hbm_bin, path, diffs, seen=keep, label=label)
    return {"rows": rows, "diffs": diffs, "seen": seen}


def _table(name, rows, diffs, root):
    out = root / f"{name}.txt"
    with open(out, "w") as f:
        unexplained = xc.print_table(rows, diffs, out=f)
    print(out.read_text())
    return unexplained


def _module_of(where):
    """'batch-3: jit_foo(12) VMEM (viewer)' -> 'jit_foo'; an allocator's row -> None."""
    tail = where.split(": ", 1)[1]
    if tail.startswith("allocator "):
        return None
    return re.sub(r"\(\d+\)$", "", tail.split(" ")[0])


def family_table(name, traced, rows, diffs):
    """Per family: the programs' modules (and colours) compared, the fields compared, how many
    modules equal XProf's on every field (known differences listed apart), and the fields that
    differ (in how many modules). Printed and written to families_<name>.txt."""
    families = traced["families"]
    fam = lambda where: families.get(_module_of(where), "(JAX's own programs)") \
        if _module_of(where) else "(allocators)"
    by = {}
    for r in rows:
        f = by.setdefault(fam(r["program"]), {"modules": 0, "fields": 0, "exact": 0, "bad": {}})
        f["modules"] += 1
        f["fields"] += r.get("fields", 0)
    bad_where = {}
    for d in diffs:
        field = re.sub(r" \[\d+\]$", "", d.field) + (" [known]" if d.reason else "")
        bad_where.setdefault(d.where, set()).add(re.sub(r"^heap buffer \S+: ", "heap buffer: ",
                                                        field))
    for r in rows:
        f = by[fam(r["program"])]
        if r["program"] not in bad_where:
            f["exact"] += 1
        for field in bad_where.get(r["program"], ()):
            f["bad"][field] = f["bad"].get(field, 0) + 1
    traces = {}
    for st in traced["stats"].values():
        fm = families.get(st["module"])
        traces[fm] = traces.get(fm, 0) + 1
    lines = [f"{'family':<22} {'programs':>8} {'modules':>7} {'fields':>8} {'exact':>7}  differing"]
    for family in sorted(by):
        f = by[family]
        bad = ", ".join(f"{k} ({v})" for k, v in sorted(f["bad"].items()))
        lines.append(f"{family:<22} {traces.get(family, ''):>8} {f['modules']:>7} {f['fields']:>8} "
                     f"{f['exact']:>7}  {bad}")
    total = [sum(f[k] for f in by.values()) for k in ("modules", "fields", "exact")]
    lines.append(f"{'all':<22} {len(traced['stats']):>8} {total[0]:>7} {total[1]:>8} "
                 f"{total[2]:>7}")
    text = "\n".join(lines) + "\n"
    (traced["root"] / f"families_{name}.txt").write_text(text)
    print(text)
    return by


def test_every_program_as_xprof_shows_it(traced, xprof_side):
    rows, diffs = xprof_side["rows"], xprof_side["diffs"]
    print(f"\n{len(traced['names'])} corpus programs traced")
    unexplained = _table("table", rows, diffs, traced["root"])
    family_table("report", traced, rows, diffs)
    programs = [r for r in rows if "allocator" not in r["program"]]
    assert len(programs) >= len(traced["stats"]), "a traced program is missing from the table"
    assert sum(r["sources"] for r in programs) > 0, "no source line at all: nothing compared"
    assert not unexplained, "\n".join(str(d) for d in diffs if not d.reason)


def test_xprofs_own_json_reads_the_same(hbm_bin, traced, xprof_side, tmp_path):
    """Each program's memory_viewer JSON from XProf, read back by hbm (as users save it),
    the spans and offsets of the heap buffers at the peak included."""
    rows, diffs = [], []
    for (label, module, color), (text, xp) in sorted(xprof_side["seen"].items()):
        path = tmp_path / f"{module}.{color}.memory_viewer.json"
        path.write_text(text)
        report = hbm_json(hbm_bin, "report", "--json", path)
        where = f"{label}: {module}{' ' + xc.COLORS[color] if color else ''} (its JSON)"
        if report.get("lost"):
            diffs.append(xc.Diff(where, "read", report["lost"], None))
        row = xc.compare_program(where, xp, report["spaces"][0], 0, color, diffs)
        # spans and offsets too: a temporary's address is its bufferBlocks offset
        bufs = [{**b, "offset": b["address"]} for b in report["spaces"][0]["buffers_at_peak"]]
        row["fields"] += xc.compare_spans(where, xp, {"buffers_at_peak": bufs}, 0, diffs)
        rows.append(row)
        path.unlink()
    unexplained = _table("table_json", rows, diffs, traced["root"])
    family_table("json", traced, rows, diffs)
    assert rows
    assert not unexplained, "\n".join(str(d) for d in diffs if not d.reason)


def test_xla_totals_and_donated_outputs(hbm_bin, traced):
    """Beside each program hbm shows XLA's totals; they are compiled.memory_analysis()'s,
    and a donated argument holding an output counts in the outputs (jax.jit(..,
    donate_argnums=...)), on the program's page as in memory_analysis()."""
    bad, donated = [], 0
    for path in traced["xplanes"]:
        report = hbm_json(hbm_bin, "report", "--json", path)
        spaces = {s["device"].rsplit("(", 1)[0]: s for s in report["spaces"]
                  if s["space"] == "HBM"}
        meta = report["meta"]
        for name, st in json.loads((path.parents[3] / "programs.json").read_text()).items():
            s = spaces.get(st["module"])
            if s is None:
                bad.append(f"{name}: no HBM space for {st['module']}")
                continue
            program = s["device"]
            donated += st["alias_size_in_bytes"] > 0
            checks = [("arguments", s["argument_bytes"], st["argument_size_in_bytes"]),
                      ("outputs", s["output_bytes"], st["output_size_in_bytes"]),
                      ("XLA temp beside it", int(meta.get(f"xla_temp_bytes:{program}", -1)),
                       st["temp_size_in_bytes"])]
            bad += [f"{name}: {what}: hbm {ours}, memory_analysis() {theirs}"
                    for what, ours, theirs in checks if ours != theirs]
    print(f"\n{len(traced['stats'])} programs against memory_analysis(), {donated} with donated "
          f"arguments, {len(bad)} differences")
    assert donated > 0, "no program with donated arguments in the traced set"
    assert not bad, "\n".join(bad)


# ---- the viewer's JSON API ----

class Viewer:
    def __init__(self, hbm, logdir):
        self.proc = subprocess.Popen([hbm, "view", "--logdir", str(logdir), "--port", "0"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        self.url = None
        while time.monotonic() < deadline and not self.url:
            line = self.proc.stderr.readline()
            if not line:
                break
            found = re.search(r"(http://\S+)", line)
            self.url = found.group(1).rstrip("/") if found else None
        if not self.url:
            self.proc.kill()
            pytest.fail("hbm view did not start")

    def get(self, endpoint, **args):
        url = f"{self.url}/api/{endpoint}?{urllib.parse.urlencode(args)}"
        with urllib.request.urlopen(url, timeout=60) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.send_signal(2)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _api_space(v, run, profile, index, space_steps):
    """One space through the API, in the report's terms, for xprof_compare, and its timeline
    at full resolution (`/api/timeline` over the program's steps)."""
    s = v.get("summary", run=run, profile=profile, space=index)
    start, end = space_steps
    timeline = v.get("timeline", run=run, profile=profile, space=index, **{"from": start},
                     to=end, points=max(1, end - start))
    bars = v.get("buffers_at_peak", run=run, profile=profile, space=index, order="program")
    by_size = v.get("buffers_at_peak", run=run, profile=profile, space=index, order="size")
    cards = {}
    for b in bars["buffers"]:
        if b["size"] >= xc.SMALL:
            cards[b["id"]] = v.get("buffer", run=run, profile=profile, id=b["id"])
    order = {b["id"]: i for i, b in enumerate(bars["buffers"])}

    def as_report(b):
        c = cards.get(b["id"], {})
        return {"index": order[b["id"]], "op": b["op"], "size": b["size"],
                "unpadded_size": b["unpadded"], "shape": b["shape"], "group": b["group"],
                "category": b["category"], "opcode": c.get("opcode"), "source": b.get("source"),
                "stack": c.get("stack"), "label": c.get("label"), "start": c.get("start"),
                "end": c.get("end"), "offset": c.get("offset")}
    return {**s, "buffers_at_peak": [as_report(b) for b in by_size["buffers"]]}, start, timeline


def _space_ranges(info):
    """[(first step, end step)] of each space of a profile (its meta space_steps)."""
    ranges = (info.get("meta") or {}).get("space_steps")
    if not ranges:
        return [(0, info["n_steps"])] * len(info["spaces"])
    return [tuple(int(x) for x in r.split("-")) for r in ranges.split(",")]


def test_viewer_api_as_xprof_shows_it(hbm_bin, traced, xprof_side, tmp_path):
    """The page's numbers: `hbm view` on the traced runs (hard links, one run per batch)."""
    logdir = tmp_path / "logdir"
    for path in traced["xplanes"]:
        run = logdir / "plugins" / "profile" / path.parents[3].name
        run.mkdir(parents=True)
        os.link(path, run / path.name)
    v = Viewer(hbm_bin, logdir)
    rows, diffs = [], []
    try:
        for r in v.get("runs")["runs"]:
            for prof in v.get("profiles", run=r["run"])["profiles"]:
                info = v.get("profile", run=r["run"], profile=prof["file"])
                ranges = _space_ranges(info)
                for sp, steps in zip(info["spaces"], ranges):
                    color = next((c for c, n in xc.COLORS.items() if n == sp["name"]), None)
                    got = xprof_side["seen"].get((r["run"], sp["device"], color))
                    if got is None:
                        continue  # an allocator, or a colour XProf was not asked for
                    hs, start, timeline = _api_space(v, r["run"], prof["file"], sp["index"],
                                                     steps)
                    where = f"{r['run']}: {sp['device']}" + (f" {sp['name']}" if color else "")
                    row = xc.compare_program(where + " (viewer)", got[1], hs, start, color,
                                             diffs)
                    indefinite = [b for b in hs["buffers_at_peak"]
                                  if b["category"] in xc.INDEFINITE]
                    row["fields"] += xc.compare_timeline(where + " (viewer)", got[1], timeline,
                                                         indefinite, diffs)
                    row["fields"] += xc.compare_spans(where + " (viewer)", got[1], hs, start,
                                                      diffs)
                    rows.append(row)
    finally:
        v.stop()
    unexplained = _table("table_viewer", rows, diffs, traced["root"])
    family_table("viewer", traced, rows, diffs)
    assert len(rows) == len(xprof_side["seen"]), "a program XProf shows is not in the viewer"
    assert not unexplained, "\n".join(str(d) for d in diffs if not d.reason)


# ---- a run XProf has opened; a TPU profile ----

def test_run_reads_the_same_after_xprof_opened_it(hbm_bin, traced, tmp_path):
    """XProf writes <module>(<id>).hlo_proto.pb beside the .xplane.pb it opens: hbm lists
    and reports the run exactly as before."""
    from xprof.convert import raw_to_tool_data

    src = min(traced["xplanes"], key=lambda p: p.stat().st_size)
    run = tmp_path / "logdir" / "plugins" / "profile" / "run"
    run.mkdir(parents=True)
    xplane = run / src.name
    shutil.copyfile(src, xplane)
    before = run_hbm(hbm_bin, "report", tmp_path / "logdir").stdout
    before_json = hbm_json(hbm_bin, "report", "--json", run)
    raw_to_tool_data.xspace_to_tool_names([str(xplane)])
    modules = xc.xprof_modules(str(xplane))
    raw_to_tool_data.xspace_to_tool_data([str(xplane)], "memory_viewer",
                                         {"module_name": modules[0], "memory_space": "0"})
    raw_to_tool_data.xspace_to_tool_data([str(xplane)], "memory_profile", {})
    copies = [f for f in os.listdir(run) if f.endswith(".hlo_proto.pb")]
    assert copies, "XProf wrote no .hlo_proto.pb: nothing to check"
    assert run_hbm(hbm_bin, "report", tmp_path / "logdir").stdout == before
    assert hbm_json(hbm_bin, "report", "--json", run) == before_json


def test_tpu_profile_as_xprof_shows_it(hbm_bin, tmp_path):
    """A synthetic TPU .xplane.pb (four chips, VMEM with scoped allocations, Sflag,
    SparseCore) written by the C test: XProf's converter and hbm agree on every field and
    allocator."""
    writer = build_dir() / "tests" / "test_import_xprof_tpu"
    if not os.access(writer, os.X_OK):
        pytest.fail(f"{writer} is missing: build the C tests first")
    subprocess.run([str(writer), "--write", str(tmp_path)], check=True, capture_output=True)
    diffs = []
    rows = xc.compare_xplane(hbm_bin, tmp_path / "tpu.xplane.pb", diffs)
    with open(tmp_path / "table.txt", "w") as f:
        xc.print_table(rows, diffs, out=f)
    print((tmp_path / "table.txt").read_text())
    names = [r["program"] for r in rows]
    assert sum("allocator" in n for n in names) == 4, names
    assert any(n.endswith("VMEM") for n in names), names
    assert not [d for d in diffs if not d.reason], "\n".join(map(str, diffs))
