"""PyTorch memory snapshots against the rule of memory_viz's Active Memory Timeline
(torch/utils/viz/MemoryViz.js, its process_alloc_data; docs/pytorch-snapshots.md writes each
rule down): small hand-made snapshots, one per rule, with the numbers worked out by hand
beside them; then a corpus of generated snapshots in the formats of PyTorch 2.0 to 2.15
(tests/data/torch/rules_corpus.py), each checked field by field — per device: the peak, the
trace event where it is first reached (its time), the bytes live at the dump as the timeline
ends, the reserved bytes — against the rule as written here AND against
tests/data/torch/second_decoder.py (a second formulation of the same rule, reading the
pickle's opcodes without unpickling)."""
import json
import pickle
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "data" / "torch"))
import rules_corpus  # noqa: E402
import second_decoder  # noqa: E402

FREES = ("free", "free_completed")
# The events hbm makes a step of (free_requested and snapshot change nothing it draws).
STEP_ACTIONS = ("alloc", "free", "free_completed", "segment_alloc", "segment_free",
                "segment_map", "segment_unmap", "oom")


def block_requested(b):
    """The size a block active at the dump is drawn with (annotate_snapshot's legacy rule)."""
    if "frames" in b:
        return b.get("requested_size", b["size"])
    if b.get("history"):
        return b.get("requested_size") or b["history"][0]["real_size"]
    return b.get("requested_size") or b["size"]


def default_device(snap):
    """The device the newest MemoryViz.js opens on: of the devices with a trace event or a
    segment, the one with the longest trace (the first of equals)."""
    with_segments = {s.get("device") for s in snap.get("segments", [])}
    best, best_len = None, -1
    for i, trace in enumerate(snap.get("device_traces", [])):
        if (trace or i in with_segments) and len(trace) > best_len:
            best, best_len = i, len(trace)
    return best


def timeline_rule(snap, device):
    """process_alloc_data(plot_segments=false) as elements and actions: an alloc is an
    element, its address's next free its second action; a free of an address not allocated
    in the trace at that moment is an element live from the start; a block in state
    active_allocated at the dump whose address no alloc of the trace still holds at its end is
    one too. The peak is the largest total over the timeline (its minimap's max_at_time,
    the state before the first action included); the first event reaching it is its index."""
    traces = snap.get("device_traces", [])
    trace = traces[device] if device < len(traces) else []
    size, holder, initial, actions = [], {}, [], []
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            size.append(e["size"])
            holder[e["addr"]] = len(size) - 1
            actions.append((i, len(size) - 1))
        elif e["action"] in FREES:
            if e["addr"] in holder:
                actions.append((i, holder.pop(e["addr"])))
            else:
                size.append(e["size"])
                initial.append(len(size) - 1)
                actions.append((i, len(size) - 1))
    reserved = 0
    for seg in snap.get("segments", []):
        if seg.get("device") != device:
            continue
        reserved += seg["total_size"]
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in holder:
                size.append(block_requested(b))
                initial.append(len(size) - 1)
            addr += b["size"]
    live = set(initial)
    total = sum(size[k] for k in live)
    peak, peak_event = total, -1
    for i, k in actions:
        if k in live:
            live.discard(k)
            total -= size[k]
        else:
            live.add(k)
            total += size[k]
        if total > peak:
            peak, peak_event = total, i
    return {"peak": peak, "peak_event": peak_event, "end": total, "reserved": reserved}


def hbm_numbers(hbm_bin, path, snap):
    """Per device in the snapshot: hbm's peak, its event, the timeline's last bytes and
    reserved. The peak's event from its time (each generated event has its own time_us) or,
    without times (2.0), from its step on a single device."""
    done = subprocess.run([hbm_bin, "report", "--json", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    spaces = report.get("spaces") or [report]
    traces = snap.get("device_traces", [])
    times = [e["time_us"] for t in traces for e in t
             if e["action"] in STEP_ACTIONS and "time_us" in e]
    t0 = min(times) if times else 0
    out = {}
    for s in spaces:
        device = int(s["device"].split(":")[1])
        trace = traces[device] if device < len(traces) else []
        if s["peak_step"] == 0:
            event = -1
        elif times:
            at = t0 + s["peak_time_ns"] // 1000
            event = next(i for i, e in enumerate(trace) if e.get("time_us") == at)
        elif len(spaces) == 1:
            steps = [i for i, e in enumerate(trace) if e["action"] in STEP_ACTIONS]
            event = steps[s["peak_step"] - 1]
        else:
            event = None  # several devices without times: hbm's step order is its own
        last = s["timeline"][-1] if s["timeline"] else {"bytes": 0, "reserved": 0}
        out[device] = {"peak": s["peak_bytes"], "peak_event": event, "end": last["bytes"],
                       "reserved": last["reserved"], "ooms": len(s["oom_events"])}
    out["reserved_at_dump"] = int(report["meta"].get("pytorch_reserved_bytes", 0))
    out["memory_viz_device"] = report["meta"].get("memory_viz_device")
    return out


def reserves_past_dump(snap, device, reserved):
    """Whether the trace maps more than the dump holds (it stopped, then segments were
    released unrecorded): hbm's timeline then ends at the trace's reservation, not the
    dump's (docs/pytorch-snapshots.md)."""
    net = 0
    for e in snap["device_traces"][device]:
        if e["action"] in ("segment_alloc", "segment_map"):
            net += e["size"]
        elif e["action"] in ("segment_free", "segment_unmap"):
            net -= e["size"]
    return net > reserved


def devices_drawn(snap):
    """The devices memory_viz lists (a trace event or a segment); hbm makes a space of each."""
    with_segments = {s.get("device") for s in snap.get("segments", [])}
    return [i for i, t in enumerate(snap.get("device_traces", [])) if t or i in with_segments]


def check(hbm_bin, path, snap):
    """Every field of every drawn device: the rule here, the second decoder, hbm."""
    tree = second_decoder.load(path.read_bytes())
    got = hbm_numbers(hbm_bin, path, snap)
    problems = []
    dump = sum(timeline_rule(snap, d)["reserved"] for d in devices_drawn(snap))
    shown = default_device(snap)
    if got["memory_viz_device"] != (None if shown is None else f"cuda:{shown}"):
        problems.append(f"device all: memory_viz opens cuda:{shown}, hbm says "
                        f"{got['memory_viz_device']}")
    if got["reserved_at_dump"] != dump:
        problems.append(f"device all: reserved at the dump hbm {got['reserved_at_dump']}, "
                        f"segments {dump}")
    for device in devices_drawn(snap):
        want = timeline_rule(snap, device)
        second = second_decoder.rule(tree, device)
        if second != want:
            problems.append(f"device {device}: second decoder {second}, rule {want}")
        mine = got.get(device)
        if mine is None:
            if want["peak"] or want["reserved"]:
                problems.append(f"device {device}: no space in hbm's report")
            continue
        for key in want:
            if key == "peak_event" and mine[key] is None:
                continue
            if key == "reserved" and reserves_past_dump(snap, device, want[key]):
                continue
            if mine[key] != want[key]:
                problems.append(f"device {device}: {key} hbm {mine[key]}, rule {want[key]}")
        ooms = sum(e["action"] == "oom" for e in snap["device_traces"][device])
        if mine["ooms"] != ooms:
            problems.append(f"device {device}: hbm {mine['ooms']} OOM events, the trace {ooms}")
    return problems


def snapshot_of(events, blocks=(), device=0, segment_size=1 << 21):
    """One device's snapshot: one segment at 0x1000 holding `blocks` (size, requested,
    state, then an inactive rest), and the trace."""
    used = sum(b[0] for b in blocks)
    block_dicts = [{"address": 0x1000 + sum(x[0] for x in blocks[:i]), "size": s,
                    "requested_size": r, "state": st, "frames": []}
                   for i, (s, r, st) in enumerate(blocks)]
    block_dicts.append({"address": 0x1000 + used, "size": segment_size - used,
                        "requested_size": 0, "state": "inactive", "frames": []})
    traces = [[] for _ in range(device + 1)]
    traces[device] = [dict(action=a, addr=addr, size=size, stream=0, frames=[],
                           time_us=1000 + 10 * i)
                      for i, (a, addr, size) in enumerate(events)]
    return {"segments": [{"device": device, "address": 0x1000, "total_size": segment_size,
                          "stream": 0, "blocks": block_dicts}],
            "device_traces": traces}


A, B, C = 0x9000, 0xA000, 0xB000

# (name, snapshot, expected on device 0 worked by hand: peak, the event index first reaching
# it (-1: before the trace), bytes at the end of the timeline)
BY_HAND = [
    # alloc A 100, free_requested A (nothing), alloc B 30, free_completed A:
    # 100, 100, 130, 30 -> peak 130 at event 2, end 30
    ("free_requested_changes_nothing",
     snapshot_of([("alloc", A, 100), ("free_requested", A, 100), ("alloc", B, 30),
                  ("free_completed", A, 100)]), 130, 2, 30),
    # a free of C never allocated: C's 40 live from the start. 40; alloc A 100 -> 140;
    # free C -> 100 -> peak 140 at event 0, end 100
    ("free_of_unknown_address_counts_from_start",
     snapshot_of([("alloc", A, 100), ("free_completed", C, 40)]), 140, 0, 100),
    # alloc A 100, alloc A 50 (no free between: the first stays live for good), free A frees
    # the 50: 100, 150, 100 -> peak 150 at event 1, end 100
    ("alloc_of_live_address_keeps_the_first",
     snapshot_of([("alloc", A, 100), ("alloc", A, 50), ("free_completed", A, 50)]),
     150, 1, 100),
    # alloc A 100, free A, free A again (size 70): the second free is an element live from
    # the start: 70, 170, 70, 0 -> peak 170 at event 0, end 0
    ("second_free_counts_from_start",
     snapshot_of([("alloc", A, 100), ("free_completed", A, 100), ("free_completed", A, 70)]),
     170, 0, 0),
    # a raw 'free' (the action MemoryViz.js's own merge writes) frees like free_completed:
    # alloc A 100, free A -> 100, 0 -> peak 100 at event 0, end 0
    ("raw_free_action_frees",
     snapshot_of([("alloc", A, 100), ("free", A, 100)]), 100, 0, 0),
    # blocks at the dump: active_allocated at 0x1000 (512, requested 200) never in the
    # trace: live from the start; active_pending_free at 0x1200 (512, requested 300) never
    # in the trace: not drawn. 200; alloc A 10 -> 210 -> peak 210 at event 0, end 210
    ("pending_free_block_not_drawn",
     snapshot_of([("alloc", A, 10)], [(512, 200, "active_allocated"),
                                      (512, 300, "active_pending_free")]), 210, 0, 210),
    # the block at 0x1000 (requested 200) is active at the dump; the trace allocated and
    # freed 0x1000 (it was allocated again after recording stopped): no alloc holds it at
    # the trace's end, so it is drawn from the start: 200, alloc 0x1000 64 -> 264, free ->
    # 200 -> peak 264 at event 0, end 200
    ("active_block_freed_in_trace_counts_from_start",
     snapshot_of([("alloc", 0x1000, 64), ("free_completed", 0x1000, 64)],
                 [(512, 200, "active_allocated")]), 264, 0, 200),
    # the block at 0x1000 is still held by the trace's alloc (100): not counted twice:
    # alloc 0x1000 100 -> 100 -> peak 100 at event 0, end 100
    ("active_block_held_by_trace_alloc",
     snapshot_of([("alloc", 0x1000, 100)], [(512, 100, "active_allocated")]), 100, 0, 100),
    # the state before the first action is the peak: block 0x1000 requested 500 plus a free
    # of C (300) never allocated: 800 before; free C -> 500; alloc A 100 -> 600:
    # peak 800 before the trace (-1), end 600
    ("peak_before_the_trace",
     snapshot_of([("free_completed", C, 300), ("alloc", A, 100)],
                 [(512, 500, "active_allocated")]), 800, -1, 600),
    # segment, snapshot and oom events change nothing drawn: alloc A 100, segment_alloc,
    # snapshot, oom, alloc B 20 -> 100, 120 -> peak 120 at event 4, end 120
    ("segment_snapshot_oom_change_nothing",
     snapshot_of([("alloc", A, 100), ("segment_alloc", 0x400000, 1 << 21),
                  ("snapshot", 0, 0), ("oom", 1 << 20, 1 << 30), ("alloc", B, 20)]),
     120, 4, 120),
]


@pytest.mark.parametrize("name,snap,peak,event,end", BY_HAND, ids=[c[0] for c in BY_HAND])
def test_rule_by_hand(hbm_bin, tmp_path, name, snap, peak, event, end):
    want = timeline_rule(snap, 0)
    assert (want["peak"], want["peak_event"], want["end"]) == (peak, event, end)
    path = tmp_path / f"{name}.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=2))
    assert check(hbm_bin, path, snap) == []


def test_block_sizes_by_format():
    """annotate_snapshot's legacy rule for a block's drawn size, by hand: with 'frames' its
    requested_size as it is (0 included); without, 'history'[0].real_size when requested_size
    is missing or 0 (2.0); without either, its size."""
    assert block_requested({"size": 512, "requested_size": 0, "frames": []}) == 0
    assert block_requested({"size": 512, "requested_size": 0}) == 512
    assert block_requested({"size": 512, "history": [{"real_size": 77}]}) == 77
    assert block_requested({"size": 512, "requested_size": 99,
                            "history": [{"real_size": 77}]}) == 99
    assert block_requested({"size": 512}) == 512


def test_block_sizes_by_format_in_hbm(hbm_bin, tmp_path):
    """The same blocks, one snapshot, no trace: the timeline is flat at their sum.
    0 + 512 + 77 + 99 + 512 = 1200 (blocks without 'address': placed by the sizes before
    them, as MemoryViz.js does)."""
    blocks = [{"size": 512, "requested_size": 0, "frames": [], "state": "active_allocated"},
              {"size": 512, "requested_size": 0, "state": "active_allocated"},
              {"size": 512, "history": [{"addr": 0, "real_size": 77, "frames": []}],
               "state": "active_allocated"},
              {"size": 512, "requested_size": 99, "history": [{"addr": 0, "real_size": 77}],
               "state": "active_allocated"},
              {"size": 512, "state": "active_allocated"},
              {"size": (1 << 21) - 5 * 512, "state": "inactive"}]
    snap = {"segments": [{"device": 0, "address": 0x200000, "total_size": 1 << 21,
                          "stream": 0, "blocks": blocks}], "device_traces": [[]]}
    assert timeline_rule(snap, 0)["peak"] == 1200
    path = tmp_path / "sizes.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=2))
    assert check(hbm_bin, path, snap) == []


def test_default_device_by_hand():
    """Device 1 has the longest trace (3 events against 1): the newest MemoryViz.js opens
    on it; device 2 has only a segment and is listed; device 3 has nothing."""
    snap = {"segments": [{"device": 2, "address": 0, "total_size": 512, "blocks": []}],
            "device_traces": [[{"action": "alloc", "addr": 1, "size": 1}],
                              [{"action": "alloc", "addr": 1, "size": 1}] * 3, [], []]}
    assert default_device(snap) == 1
    assert devices_drawn(snap) == [0, 1, 2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("rules_corpus")
    return rules_corpus.write_corpus(str(out), 240)


def test_generated_corpus(hbm_bin, corpus):
    """240 generated snapshots (about 48 of each format), every field of every device."""
    from pathlib import Path

    failed = {}
    versions = {}
    for p in corpus:
        path = Path(p)
        snap = pickle.loads(path.read_bytes())
        version = path.stem.split("_v")[1]
        versions[version] = versions.get(version, 0) + 1
        problems = check(hbm_bin, path, snap)
        if problems:
            failed[path.name] = problems
    assert set(versions) == set(rules_corpus.FORMATS)
    assert not failed, f"{len(failed)} of {len(corpus)}: " + json.dumps(
        dict(list(failed.items())[:5]), indent=1)
