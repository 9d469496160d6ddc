"""Compares hbm's Memory Viewer numbers with XProf's own, field by field.

For every program in every .xplane.pb given, XProf's conversion (its Python package, the
same code `xprof --logdir` serves) turns the file into the Memory Viewer's data
(`xspace_to_tool_data(..., 'memory_viewer', {'module_name': ..., 'memory_space': '0'})`),
and `hbm report --json` reads the same file. Compared, for the HBM (colour 0) space:
  - peak heap size (peakHeapMib, exact in bytes),
  - unpadded peak (peakUnpaddedHeapMib), allowing for XProf adding the indefinite
    allocations' padded size to it (docs/viewer.md, "Differences from XProf"),
  - total argument size (entryComputationParametersMib),
  - the buffers at the peak (maxHeap): heap-simulator buffers in order, indefinite ones as a
    set, names with shape index and sizes; buffers under 16 KiB as XProf's one "small" total.
And XProf's Memory Profile (`memory_profile`) of the allocators' runtime events: each
allocator's peak bytes in use (peakStats.peakBytesInUse) against hbm's allocator space.
Usage: python xprof_compare.py HBM_BINARY FILE.xplane.pb|FILE.hlo_proto.pb...   Exit 0 all equal, 1 a difference.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from xprof.convert import raw_to_tool_data

MIB = float(1 << 20)
SMALL = 16 * 1024  # XProf's small_buffer_size
INDEFINITE = {"parameter", "output", "thread-local", "constant"}


def xprof_modules(xplane):
    """Module names XProf lists for a file (it writes <module>.hlo_proto.pb beside it)."""
    raw_to_tool_data.xspace_to_tool_names([xplane])
    folder = os.path.dirname(xplane)
    names = (f[: -len(".hlo_proto.pb")] for f in os.listdir(folder) if f.endswith(".hlo_proto.pb"))
    return sorted(n for n in names if n != "NO_MODULE")  # XProf's name for "no programs"


def xprof_viewer(xplane, module):
    data, _ = raw_to_tool_data.xspace_to_tool_data(
        [xplane], "memory_viewer", {"module_name": module, "memory_space": "0"})
    return json.loads(data) if data else None


def hbm_spaces(hbm, xplane):
    out = subprocess.run([hbm, "report", "--json", xplane], check=True, capture_output=True)
    report = json.loads(out.stdout)
    return {(s["space"], s["device"]): s for s in report["spaces"]}


def to_bytes(mib):
    return int(round(mib * MIB))


def compare_program(name, xp, hs, problems):
    def check(field, ours, theirs):
        if ours != theirs:
            problems.append(f"{name}: {field}: hbm {ours}, XProf {theirs}")

    bufs = hs["buffers_at_peak"]
    indefinite = [b for b in bufs if b["category"] in INDEFINITE]
    check("peak heap bytes", hs["peak_bytes"], to_bytes(xp.get("peakHeapMib", 0)))
    # XProf adds the indefinite allocations' padded size to the unpadded peak.
    xprof_rule = (hs["peak_unpadded_bytes"] - sum(b["unpadded_size"] for b in indefinite)
                  + sum(b["size"] for b in indefinite))
    check("unpadded peak bytes", xprof_rule, to_bytes(xp.get("peakUnpaddedHeapMib", 0)))
    check("argument bytes", hs["argument_bytes"], to_bytes(xp.get("entryComputationParametersMib", 0)))
    # hbm's heap_bytes (the highest address in use, allocations laid end to end) is at most
    # XProf's total allocation, which also counts allocations no buffer is ever live in.
    total = to_bytes(xp.get("totalBufferAllocationMib", 0))
    if hs["heap_bytes"] > total:
        check("heap bytes at most the total allocation", hs["heap_bytes"], total)

    heap = xp.get("maxHeap", [])
    small = sum(to_bytes(o.get("logicalBufferSizeMib", 0)) for o in heap
                if o.get("label", "").startswith("small ("))
    theirs = [o for o in heap if not o.get("label", "").startswith("small (")]
    ours = [b for b in sorted(bufs, key=lambda b: b["index"]) if b["size"] >= SMALL]
    check("small buffers at the peak (bytes)", sum(b["size"] for b in bufs if b["size"] < SMALL),
          small)
    their_ind = sorted((o["instructionName"], to_bytes(o.get("logicalBufferSizeMib", 0))) for o in theirs
                       if o.get("groupName") in ("Parameter", "Output", "Thread-local", "Constant"))
    our_ind = sorted((b["op"], b["size"]) for b in ours if b["category"] in INDEFINITE)
    check("indefinite buffers at the peak", our_ind, their_ind)
    their_heap = [(o["instructionName"], to_bytes(o.get("logicalBufferSizeMib", 0))) for o in theirs
                  if o.get("groupName") not in ("Parameter", "Output", "Thread-local", "Constant")]
    our_heap = [(b["op"], b["size"]) for b in ours if b["category"] not in INDEFINITE]
    check("heap buffers at the peak, in order", our_heap, their_heap)
    return len(theirs)


def compare_allocators(xplane, spaces, name, problems):
    data, _ = raw_to_tool_data.xspace_to_tool_data([xplane], "memory_profile", {})
    profile = json.loads(data) if data else {}
    n = 0
    for allocator, mp in profile.get("memoryProfilePerAllocator", {}).items():
        theirs = int(mp.get("profileSummary", {}).get("peakStats", {}).get("peakBytesInUse", 0))
        ours = spaces.get((allocator, "allocator"))
        if ours is None:
            problems.append(f"{name}: allocator {allocator}: hbm has no space for it")
        elif ours["peak_bytes"] != theirs:
            problems.append(f"{name}: allocator {allocator}: peak bytes in use: hbm "
                            f"{ours['peak_bytes']}, XProf {theirs}")
        n += 1
        print(f"  allocator {allocator}: peak in use {theirs} B")
    return n


def compare_hlo_proto(hbm, path, problems):
    """A bare .hlo_proto.pb: XProf reads <module>.hlo_proto.pb from the run's directory."""
    work = tempfile.mkdtemp(prefix="hbm_xprof_")
    try:
        module = "program"
        shutil.copyfile(path, os.path.join(work, module + ".hlo_proto.pb"))
        xplane = os.path.join(work, "host.xplane.pb")
        open(xplane, "wb").close()
        xp = xprof_viewer(xplane, module)
        spaces = hbm_spaces(hbm, os.path.join(work, module + ".hlo_proto.pb"))
        hs = next((s for (name, _), s in spaces.items() if name == "HBM"), None)
        if xp is None or hs is None:
            problems.append(f"{path}: no {'XProf' if xp is None else 'hbm'} memory viewer data")
            return 0
        compare_program(os.path.basename(path), xp, hs, problems)
        print(f"{path}: peak {hs['peak_bytes']} B, compared")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare_file(hbm, path, problems):
    if path.endswith(".hlo_proto.pb"):
        return compare_hlo_proto(hbm, path, problems)
    work = tempfile.mkdtemp(prefix="hbm_xprof_")
    try:
        xplane = os.path.join(work, "host.xplane.pb")
        shutil.copyfile(path, xplane)  # XProf writes its .hlo_proto.pb files beside it
        spaces = hbm_spaces(hbm, xplane)
        compared = 0
        for module in xprof_modules(xplane):
            xp = xprof_viewer(xplane, module)
            hs = spaces.get(("HBM", module))
            if xp is None:
                problems.append(f"{path}: {module}: XProf gave no memory viewer data")
                continue
            if hs is None:
                problems.append(f"{path}: {module}: hbm has no HBM space for it")
                continue
            n = compare_program(f"{os.path.basename(path)}: {module}", xp, hs, problems)
            compared += 1
            print(f"  {module}: peak {hs['peak_bytes']} B, {n} buffers at the peak")
        allocators = compare_allocators(xplane, spaces, os.path.basename(path), problems)
        print(f"{path}: {compared} programs, {allocators} allocators compared")
        return compared + allocators
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    hbm, files = sys.argv[1], sys.argv[2:]
    problems = []
    total = sum(compare_file(hbm, f, problems) for f in files)
    for p in problems:
        print("DIFFERENT:", p)
    print(f"{total} programs and allocators, {len(problems)} differences")
    return 1 if problems or not total else 0


if __name__ == "__main__":
    sys.exit(main())
