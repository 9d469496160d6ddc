"""Compares hbm's Memory Viewer with XProf's own, field by field, program by program.

For every program of every file given, XProf's conversion (its Python package, the code
`xprof --logdir` serves: `xspace_to_tool_data([file], "memory_viewer", {"module_name": M,
"memory_space": C})`) turns the file into the Memory Viewer's data, and `hbm report --json`
reads the same file. For each program and memory colour hbm shows, compared in bytes:
  peak            peakHeapMib
  unpadded peak   peakUnpaddedHeapMib, with XProf's rule of adding the whole-program
                  allocations' padded size (docs/viewer.md, "Differences from XProf")
  peak position   peakHeapSizePosition (the heap-simulator event reaching the peak)
  arguments       entryComputationParametersMib
  outputs         maybeLiveOutMib (donated parameters that hold outputs included)
  temporaries     peakHeapMib - indefiniteBufferAllocationMib (XProf's "HLO temp")
  total           totalBufferAllocationMib (the colour's allocations, hbm's heap size)
  scoped VMEM     maxScopedVmemAllocationMib (colour 1)
  buffers         maxHeap: the whole-program ones as a set (XProf lists them in a hash map's
                  order), the heap-simulator ones in order, each with its name and shape
                  index, size, unpadded size, shape, framework op, allocation type, opcode,
                  source file:line and source stack; those under 16 KiB as XProf's one
                  "small" total; and the "by size" order (XProf's page sorts maxHeap by size,
                  stably)
And XProf's Memory Profile (`memory_profile`) of the allocators' runtime events: each
allocator's peak bytes in use (peakStats.peakBytesInUse) against hbm's allocator space.

Differences that are known are listed in KNOWN with their reason; any other fails.
Usage: python xprof_compare.py HBM_BINARY FILE.xplane.pb|FILE.hlo_proto.pb...
Exit 0: no unexplained difference; 1: some; the table is printed either way.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

MIB = float(1 << 20)
SMALL = 16 * 1024  # XProf's small_buffer_size
INDEFINITE = {"parameter", "output", "thread-local", "constant"}
GROUPS = {"Parameter": "parameter", "Output": "output", "Thread-local": "thread-local",
          "Constant": "constant", "Temporary": "temporary"}
# XLA's memory colours, as XProf's "Memory Types" list names them (and hbm's spaces).
COLORS = {0: "HBM", 1: "VMEM", 2: "Sflag", 3: "CMEM", 4: "SMEM", 5: "Host", 6: "SparseCore"}

# Differences hbm keeps on purpose, each with its reason (docs/viewer.md). A difference
# matching (field regex, program regex) is reported as known; any other fails the run.
KNOWN = [
    # ("field regex", "program regex", "reason"),
]


def to_bytes(mib):
    return int(round((mib or 0) * MIB))


class Diff:
    def __init__(self, where, field, ours, theirs):
        self.where, self.field, self.ours, self.theirs = where, field, ours, theirs
        self.reason = next((r for f, p, r in KNOWN
                            if re.search(f, field) and re.search(p, where)), None)

    def __str__(self):
        tail = f"  [known: {self.reason}]" if self.reason else ""
        return f"{self.where}: {self.field}: hbm {self.ours!r}, XProf {self.theirs!r}{tail}"


# ---- XProf's side ----

def xprof_modules(xplane):
    """Module names XProf lists for a file (it writes <module>.hlo_proto.pb beside it)."""
    from xprof.convert import raw_to_tool_data
    raw_to_tool_data.xspace_to_tool_names([xplane])
    folder = os.path.dirname(xplane)
    names = (f[: -len(".hlo_proto.pb")] for f in os.listdir(folder) if f.endswith(".hlo_proto.pb"))
    return sorted(n for n in names if n != "NO_MODULE")  # XProf's name for "no programs"


def xprof_viewer_text(xplane, module, color=0):
    """XProf's Memory Viewer data as the JSON text its converter returns (what a user saves
    as memory_viewer.json), or (None, why)."""
    from xprof.convert import raw_to_tool_data
    try:
        data, _ = raw_to_tool_data.xspace_to_tool_data(
            [xplane], "memory_viewer", {"module_name": module, "memory_space": str(color)})
    except Exception as e:  # XProf refuses some programs (a buffer freed twice, ...)
        return None, f"XProf failed: {e}"
    if not data:
        return None, "XProf gave no data"
    return (data.decode() if isinstance(data, bytes) else data), None


def xprof_viewer(xplane, module, color=0):
    """XProf's Memory Viewer data, or a string saying why there is none."""
    text, why = xprof_viewer_text(xplane, module, color)
    return json.loads(text) if text else why


def xprof_memory_profile(xplane):
    from xprof.convert import raw_to_tool_data
    data, _ = raw_to_tool_data.xspace_to_tool_data([xplane], "memory_profile", {})
    return json.loads(data) if data else {}


# ---- hbm's side ----

def hbm_report(hbm, path):
    out = subprocess.run([hbm, "report", "--json", str(path)], check=True, capture_output=True)
    return json.loads(out.stdout)


def space_starts(report):
    """First step of each space in the report's order (the profile's meta space_steps)."""
    ranges = (report.get("meta") or {}).get("space_steps")
    if not ranges:
        return [0] * len(report["spaces"])
    return [int(r.split("-")[0]) for r in ranges.split(",")]


def hbm_programs(report):
    """{(program, space name): (space, first step)} of a report."""
    return {(s["device"], s["space"]): (s, start)
            for s, start in zip(report["spaces"], space_starts(report))}


# ---- one program ----

def _buffer_fields(b):
    return {"name": b["op"], "size": b["size"], "unpadded": b["unpadded_size"], "shape": b["shape"],
            "framework op": b["group"], "type": b["category"], "opcode": b["opcode"],
            "source": b["source"], "stack": b.get("stack")}


def _heap_object_fields(o):
    src = o.get("sourceInfo") or {}
    source = f"{src['fileName']}:{src.get('lineNumber', 0)}" if src.get("fileName") else None
    return {"name": o.get("instructionName"), "size": to_bytes(o.get("logicalBufferSizeMib")),
            "unpadded": to_bytes(o.get("unpaddedShapeMib")), "shape": o.get("shapeString"),
            "framework op": o.get("tfOpName") or None, "type": GROUPS.get(o.get("groupName")),
            "opcode": o.get("opCode"), "source": source,
            "stack": src.get("stackFrame") or None if source else None}


def _is_small(o):
    return o.get("logicalBufferId") == "-1" or o.get("logicalBufferId") == -1 or \
        o.get("label", "").startswith("small (")


def _is_scoped(b):
    return (b.get("label") or "").startswith("largest scoped VMEM allocation")


def compare_buffers(where, xp, hs, color, diffs):
    """The buffers at the peak. Returns how many XProf lists (small ones as one). XProf draws
    the whole-program buffers only for HBM (their bytes are in every colour's peak), and
    VMEM's scoped allocation as a figure of its own, not a bar."""
    heap = xp.get("maxHeap", [])
    theirs = [_heap_object_fields(o) for o in heap if not _is_small(o)]
    small = sum(to_bytes(o.get("logicalBufferSizeMib")) for o in heap if _is_small(o))
    bufs = sorted((b for b in hs["buffers_at_peak"] if not _is_scoped(b)
                   and (color == 0 or b["category"] not in INDEFINITE)), key=lambda b: b["index"])
    ours = [_buffer_fields(b) for b in bufs if b["size"] >= SMALL]
    our_small = sum(b["size"] for b in bufs if b["size"] < SMALL)
    if our_small != small:
        diffs.append(Diff(where, "small buffers at the peak (bytes)", our_small, small))

    def key(f):
        return tuple(str(f[k]) for k in ("name", "size", "unpadded", "shape", "framework op",
                                         "type", "opcode", "source", "stack"))
    our_ind = sorted(key(f) for f in ours if f["type"] in INDEFINITE)
    their_ind = sorted(key(f) for f in theirs if f["type"] in INDEFINITE)
    if our_ind != their_ind:
        _list_diff(where, "whole-program buffers at the peak", our_ind, their_ind, diffs)
    our_heap = [key(f) for f in ours if f["type"] not in INDEFINITE]
    their_heap = [key(f) for f in theirs if f["type"] not in INDEFINITE]
    if our_heap != their_heap:
        _list_diff(where, "heap buffers at the peak, in order", our_heap, their_heap, diffs)
    # "By size": XProf's page sorts maxHeap by size, stably; hbm's JSON lists them so.
    # Equal-sized whole-program buffers come in XProf's hash-map order: compared as runs.
    their_by_size = [(f["size"], f["name"]) for f in
                     sorted(theirs, key=lambda f: -f["size"]) if f["type"] not in INDEFINITE]
    our_by_size = [(b["size"], b["op"]) for b in hs["buffers_at_peak"]
                   if b["size"] >= SMALL and b["category"] not in INDEFINITE and not _is_scoped(b)]
    if our_by_size != their_by_size:
        _list_diff(where, "heap buffers by size, in order", our_by_size, their_by_size, diffs)
    # fields compared: each listed buffer's nine, the small total, each by-size place
    return len(theirs) + (1 if small else 0), 9 * len(theirs) + 1 + len(their_by_size)


def _list_diff(where, field, ours, theirs, diffs):
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            diffs.append(Diff(where, f"{field} [{i}]", a, b))
            return
    diffs.append(Diff(where, f"{field}: count", len(ours), len(theirs)))


def compare_program(where, xp, hs, start, color, diffs):
    """One program in one colour. Returns its row for the table."""
    bufs = hs["buffers_at_peak"]
    indefinite = [b for b in bufs if b["category"] in INDEFINITE]
    scoped = [b for b in bufs if _is_scoped(b)]
    peak = to_bytes(xp.get("peakHeapMib"))
    indef = to_bytes(xp.get("indefiniteBufferAllocationMib"))
    total = to_bytes(xp.get("totalBufferAllocationMib"))
    their_scoped = to_bytes(xp.get("maxScopedVmemAllocationMib"))
    if their_scoped:  # XProf's page for VMEM: "HLO temp" plus the scoped allocation
        peak, total = peak - indef + their_scoped, total - indef + their_scoped
        indef = 0
    unpadded = to_bytes(xp.get("peakUnpaddedHeapMib")) + (peak - to_bytes(xp.get("peakHeapMib")))
    fields = [
        ("peak", hs["peak_bytes"], peak),
        # XProf adds the whole-program allocations' padded size to the unpadded peak.
        ("unpadded peak", hs["peak_unpadded_bytes"] - sum(b["unpadded_size"] for b in indefinite)
         + sum(b["size"] for b in indefinite), unpadded),
        # (an empty heap has no peak to place: XProf says 0, hbm the profile's first step)
        ("peak position", hs["peak_step"] - start if hs["peak_bytes"] else 0,
         int(xp.get("peakHeapSizePosition", 0))),
        ("arguments", hs["argument_bytes"], to_bytes(xp.get("entryComputationParametersMib"))),
        ("outputs", hs["output_bytes"], to_bytes(xp.get("maybeLiveOutMib"))),
        ("temporaries", hs["temporary_bytes"], max(0, peak - indef)),
        ("total allocation", hs["heap_bytes"], total),
        ("largest scoped VMEM", (scoped[0]["size"], scoped[0]["op"]) if scoped else (0, None),
         (their_scoped, xp.get("maxScopedVmemInstructionName"))),
    ]
    for field, ours, theirs in fields:
        if ours != theirs:
            diffs.append(Diff(where, field, ours, theirs))
    n, buffer_fields = compare_buffers(where, xp, hs, color, diffs)
    with_source = sum(1 for o in xp.get("maxHeap", []) if (o.get("sourceInfo") or {}).get("fileName"))
    return {"program": where, "peak": peak, "arguments": fields[3][2], "outputs": fields[4][2],
            "temporaries": fields[5][2], "buffers": n, "sources": with_source,
            "fields": len(fields) + buffer_fields}


def compare_timeline(where, xp, timeline, indefinite, diffs):
    """The Memory Viewer's chart of one program: XProf's heapSizes and unpaddedHeapSizes (the
    heap before each heap-simulator event, then at the end, the whole-program allocations'
    padded bytes added to both) and hloInstructionNames (each event's instruction), against
    hbm's timeline of the program's steps (`/api/timeline`: one step per event, the heap
    after it). Returns the number of fields compared."""
    ops = timeline["ops"]
    our_names = [ops[o] if o >= 0 else None for o in timeline["op"]]
    if not xp.get("heapSizes"):
        # No heap-simulator event: XProf draws no chart; hbm's program has the one step a
        # space needs, labelled as such.
        if our_names != ["no heap-simulator trace"]:
            diffs.append(Diff(where, "timeline of a program without events", our_names, []))
        return 1
    sizes = [to_bytes(m) for m in xp["heapSizes"]][1:]  # [0]: the heap before any event
    unpadded = [to_bytes(m) for m in xp.get("unpaddedHeapSizes", [])][1:]
    names = [n or None for n in xp.get("hloInstructionNames", [])][:-1]  # [-1]: the end's ""
    pad = sum(b["size"] - b["unpadded_size"] for b in indefinite)
    ours = list(zip(timeline["bytes"], [u + pad for u in timeline["unpadded"]], our_names))
    theirs = list(zip(sizes, unpadded, names))
    if ours != theirs:
        _list_diff(where, "timeline (bytes, unpadded, instruction) per event", ours, theirs,
                   diffs)
    return 3 * len(theirs)


def compare_spans(where, xp, hs, start, diffs):
    """When and where each heap buffer at the peak lives (hbm's buffer card: first step, end
    step, offset) against XProf's logicalBufferSpans (the events that allocate and free it:
    a buffer revived by SHARE_WITH ends at its own FREE even when a later sharer keeps its
    bytes) and bufferBlocks (its offset: the heap-simulated allocations laid end to end),
    buffer by buffer in XProf's order. Returns the number of fields compared."""
    spans = xp.get("logicalBufferSpans") or {}
    offsets = {str(b.get("logicalBufferId")): int(b.get("offset", 0))
               for b in xp.get("bufferBlocks", [])}
    theirs = [o for o in xp.get("maxHeap", []) if not _is_small(o)
              and GROUPS.get(o.get("groupName")) not in INDEFINITE]
    ours = sorted((b for b in hs["buffers_at_peak"] if b["size"] >= SMALL and not _is_scoped(b)
                   and b["category"] not in INDEFINITE), key=lambda b: b["index"])
    n = 0
    for b, o in zip(ours, theirs):
        key = str(o.get("logicalBufferId"))
        span = spans.get(key, {})
        mine = (b["start"] - start, b["end"] - start, b["offset"])
        other = (int(span.get("start", 0)), int(span.get("limit", 0)), offsets.get(key))
        if mine != other:
            diffs.append(Diff(where, f"heap buffer {o.get('instructionName')}: "
                                     "(start, end, offset)", mine, other))
        n += 3
    return n


def compare_allocators(where, xplane, report, diffs):
    spaces = hbm_programs(report)
    rows = []
    profile = xprof_memory_profile(xplane)
    for allocator, mp in sorted(profile.get("memoryProfilePerAllocator", {}).items()):
        theirs = int(mp.get("profileSummary", {}).get("peakStats", {}).get("peakBytesInUse", 0))
        ours = spaces.get(("allocator", allocator))
        if ours is None:
            diffs.append(Diff(where, f"allocator {allocator}", "no space", theirs))
        elif ours[0]["peak_bytes"] != theirs:
            diffs.append(Diff(where, f"allocator {allocator}: peak bytes in use",
                              ours[0]["peak_bytes"], theirs))
        rows.append({"program": f"{where}: allocator {allocator}", "peak": theirs, "fields": 1})
    shown = set(profile.get("memoryProfilePerAllocator", {}))
    for device, name in spaces:
        if device == "allocator" and name not in shown:
            diffs.append(Diff(where, f"allocator {name}", "shown", "not in XProf's profile"))
    return rows


def compare_xplane(hbm, path, diffs, work=None, seen=None, label=None):
    """Every program of an .xplane.pb (copied: XProf writes its .hlo_proto.pb files beside
    the file it reads) and its allocators. Returns the table's rows. `seen(module, color,
    text, xp)` gets XProf's JSON text and data of each program compared."""
    own = work is None
    work = work or tempfile.mkdtemp(prefix="hbm_xprof_")
    try:
        xplane = os.path.join(work, "host.xplane.pb")
        shutil.copyfile(path, xplane)
        report = hbm_report(hbm, path)
        programs = hbm_programs(report)
        rows = []
        base = label or os.path.basename(str(path))
        for module in xprof_modules(xplane):
            colors = sorted({c for c, name in COLORS.items() if (module, name) in programs} | {0})
            for color in colors:
                where = f"{base}: {module}" + (f" {COLORS[color]}" if color else "")
                found = programs.get((module, COLORS[color]))
                text, why = xprof_viewer_text(xplane, module, color)
                xp = json.loads(text) if text else why
                if text and seen:
                    seen(module, color, text, xp)
                if isinstance(xp, str) or found is None:
                    if isinstance(xp, str) and found is None:
                        continue  # neither shows this colour
                    diffs.append(Diff(where, "shown", found is not None, xp if isinstance(xp, str)
                                      else "shown"))
                    continue
                rows.append(compare_program(where, xp, found[0], found[1], color, diffs))
        rows += compare_allocators(base, xplane, report, diffs)
        return rows
    finally:
        if own:
            shutil.rmtree(work, ignore_errors=True)


def compare_hlo_proto(hbm, path, diffs):
    """A bare .hlo_proto.pb: XProf reads <module>.hlo_proto.pb from the run's directory."""
    work = tempfile.mkdtemp(prefix="hbm_xprof_")
    try:
        module = "program"
        copy = os.path.join(work, module + ".hlo_proto.pb")
        shutil.copyfile(path, copy)
        xplane = os.path.join(work, "host.xplane.pb")
        open(xplane, "wb").close()
        xp = xprof_viewer(xplane, module)
        report = hbm_report(hbm, copy)
        found = next(((s, st) for (_, name), (s, st) in hbm_programs(report).items()
                      if name == "HBM"), None)
        where = os.path.basename(str(path))
        if isinstance(xp, str) or found is None:
            diffs.append(Diff(where, "shown", found is not None, xp if isinstance(xp, str) else "shown"))
            return []
        return [compare_program(where, xp, found[0], found[1], 0, diffs)]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare_file(hbm, path, diffs):
    if str(path).endswith(".hlo_proto.pb"):
        return compare_hlo_proto(hbm, path, diffs)
    return compare_xplane(hbm, path, diffs)


def print_table(rows, diffs, out=sys.stdout):
    width = max([len(r["program"]) for r in rows] + [7])
    width = min(width, 90)
    print(f"{'program':<{width}} {'peak':>13} {'arguments':>13} {'outputs':>13} "
          f"{'temporaries':>13} {'buffers':>7} {'sources':>7}  result", file=out)
    bad = {d.where for d in diffs if not d.reason}
    known = {d.where for d in diffs if d.reason}
    for r in rows:
        mark = "DIFFERENT" if r["program"] in bad else "known" if r["program"] in known else "same"
        print(f"{r['program'][-width:]:<{width}} {r['peak']:>13} {r.get('arguments', ''):>13} "
              f"{r.get('outputs', ''):>13} {r.get('temporaries', ''):>13} "
              f"{r.get('buffers', ''):>7} {r.get('sources', ''):>7}  {mark}", file=out)
    for d in diffs:
        print(("KNOWN:     " if d.reason else "DIFFERENT: ") + str(d), file=out)
    unexplained = sum(1 for d in diffs if not d.reason)
    print(f"{len(rows)} programs and allocators compared, {unexplained} unexplained "
          f"differences, {len(diffs) - unexplained} known", file=out)
    return unexplained


def main():
    hbm, files = sys.argv[1], sys.argv[2:]
    diffs, rows = [], []
    for f in files:
        rows += compare_file(hbm, f, diffs)
    unexplained = print_table(rows, diffs)
    return 1 if unexplained or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
