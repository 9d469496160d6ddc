#!/usr/bin/env python3
"""Generated PyTorch memory snapshots in the formats of PyTorch 2.0 through 2.15, for
tests/python/test_torch_rules.py: many small programs' worth of action sequences, each run
on a small caching allocator (blocks split out of 2 MiB / 20 MiB segments, freed blocks
reused, so addresses come back), recorded from a cut point on (the ring buffer), sometimes
stopped before the dump, on one to three devices, with what real traces hold besides
alloc / free: free_requested apart from its free_completed, blocks still pending free at the
dump, segment_alloc / segment_free, expandable segments' segment_map / segment_unmap,
snapshot and oom events; and in some, the contradictions MemoryViz.js still draws (an alloc
of a live address, a second free, a free of an address never allocated).

The snapshot is plain data, as _dump_snapshot pickles it; the keys are those of each
release (see FORMATS). Nothing here computes the expected numbers: the test does, from the
snapshot alone, by MemoryViz.js's rule (docs/pytorch-snapshots.md).

Run: python3 tests/data/torch/rules_corpus.py OUTDIR [N]   (writes N pickles, default 240)
"""
import os
import pickle
import random
import sys

MiB = 1 << 20
SMALL, LARGE = 2 * MiB, 20 * MiB

# What each release writes (the keys MemoryViz.js / _memory_viz.py read or pass over):
#   time: events carry time_us; history: blocks carry 'history' [{addr, real_size, frames}]
#   and no 'frames' (2.0); address: blocks carry 'address'; requested: blocks carry
#   'requested_size'; expandable: segments may grow by segment_map; extra: keys the newer
#   releases add (compile_context, user_metadata, forward_frames, segment_pool_id, ...).
FORMATS = {
    "2.0": dict(time=False, history=True, address=False, requested=False, expandable=False,
                extra=()),
    "2.1": dict(time=True, history=False, address=False, requested=True, expandable=True,
                extra=()),
    "2.3": dict(time=True, history=False, address=True, requested=True, expandable=True,
                extra=("compile_context",)),
    "2.6": dict(time=True, history=False, address=True, requested=True, expandable=True,
                extra=("compile_context", "user_metadata", "segment_pool_id")),
    "2.15": dict(time=True, history=False, address=True, requested=True, expandable=True,
                 extra=("compile_context", "user_metadata", "segment_pool_id",
                        "forward_frames")),
}

FILES = ["/home/me/proj/model.py", "/home/me/proj/train.py", "/usr/lib/torch/nn/module.py"]


def round_block(size):
    return max(512, (size + 511) // 512 * 512)


class Device:
    """One device's caching allocator: segments of blocks in address order."""

    def __init__(self, rng, device, fmt, clock, expandable):
        self.rng, self.device, self.fmt, self.clock = rng, device, fmt, clock
        self.expandable = expandable
        self.base = 0x7F0000000000 + device * 0x10000000000
        self.next_addr = self.base
        self.segments = []  # {address, size, stream, blocks: [block dict]}
        self.events = []  # the whole program's events (the trace is a window of them)
        self.live = {}  # addr -> block (allocated, not yet freed)
        self.pending = []  # blocks whose free is requested, not completed

    def event(self, action, addr, size, stream=0, frames=True):
        e = {"action": action, "addr": addr, "size": size, "stream": stream}
        if self.fmt["time"]:
            self.clock[0] += 2 * self.rng.randint(1, 20)  # even: contradict() fits one between
            e["time_us"] = self.clock[0]
        if frames and action not in ("snapshot",):
            e["frames"] = [{"filename": self.rng.choice(FILES), "line": self.rng.randint(1, 400),
                            "name": "forward"}]
        for key in self.fmt["extra"]:
            if key == "compile_context":
                e[key] = "N/A"
            elif key == "user_metadata" and self.rng.random() < 0.3:
                e[key] = {"step": str(self.rng.randint(0, 9))}
            elif key == "forward_frames" and self.rng.random() < 0.3:
                e[key] = ["  File \"model.py\", line 3, in forward\n"]
        self.events.append(e)
        return e

    def new_segment(self, need, stream):
        size = SMALL if need <= MiB else LARGE if need <= 10 * MiB else (need + SMALL - 1) // SMALL * SMALL
        seg = {"address": self.next_addr, "size": size, "stream": stream,
               "blocks": [{"addr": self.next_addr, "size": size, "state": "inactive"}]}
        self.next_addr += size
        if not self.expandable:
            self.next_addr += SMALL  # a gap: separate cudaMalloc ranges
        self.segments.append(seg)
        self.event("segment_map" if self.expandable else "segment_alloc", seg["address"], size,
                   stream, frames=False)
        return seg

    def alloc(self, requested, stream=0):
        size = round_block(requested)
        for seg in self.segments:
            if seg["stream"] != stream:
                continue
            for i, b in enumerate(seg["blocks"]):
                if b["state"] == "inactive" and b["size"] >= size:
                    return self.take(seg, i, size, requested, stream)
        seg = self.new_segment(size, stream)
        return self.take(seg, 0, size, requested, stream)

    def take(self, seg, i, size, requested, stream):
        b = seg["blocks"][i]
        if b["size"] > size:
            seg["blocks"].insert(i + 1, {"addr": b["addr"] + size, "size": b["size"] - size,
                                         "state": "inactive"})
            b["size"] = size
        b.update(state="active_allocated", requested=requested, recorded=False)
        e = self.event("alloc", b["addr"], requested, stream)
        b["frames"] = e.get("frames", [])
        self.live[b["addr"]] = b
        return b

    def free(self, b, defer=False):
        del self.live[b["addr"]]
        self.event("free_requested", b["addr"], b["requested"])
        b["state"] = "active_pending_free"
        if defer:
            self.pending.append(b)
        else:
            self.complete(b)

    def complete(self, b):
        b["state"] = "inactive"
        self.event("free_completed", b["addr"], b["requested"])

    def release_empty(self):
        """empty_cache(): segments with nothing active go back (segment_free / unmap)."""
        for seg in list(self.segments):
            if all(b["state"] == "inactive" for b in seg["blocks"]):
                self.segments.remove(seg)
                self.event("segment_unmap" if self.expandable else "segment_free",
                           seg["address"], seg["size"], seg["stream"], frames=False)

    def run(self, n_ops):
        rng = self.rng
        for _ in range(n_ops):
            r = rng.random()
            if r < 0.5 or not self.live:
                requested = rng.choice([rng.randint(1, 4096), rng.randint(4096, MiB),
                                        rng.randint(MiB, 12 * MiB), 8 * MiB, 2048])
                self.alloc(requested, stream=rng.choice([0, 0, 0, 7]))
            elif r < 0.88:
                b = self.live[rng.choice(list(self.live))]
                self.free(b, defer=rng.random() < 0.15)
            elif r < 0.92 and self.pending:
                self.complete(self.pending.pop(0))
            elif r < 0.95:
                self.release_empty()
            elif r < 0.975:
                self.event("snapshot", 0, 0, frames=False)
            else:  # the free device memory in 'device_free' (2.0) or addr (later), or both
                free = rng.randint(0, 1 << 30)
                e = self.event("oom", free, rng.randint(MiB, 1 << 34), frames=False)
                if not self.fmt["time"] or rng.random() < 0.5:
                    e["device_free"] = free
                if not self.fmt["time"]:
                    del e["addr"]

    def dump_segments(self):
        """The segments at the dump in the format's keys (expandable ones merged into one
        segment per stream, as PyTorch reports a mapped range)."""
        segs = sorted(self.segments, key=lambda s: s["address"])
        merged = []
        for s in segs:
            last = merged[-1] if merged else None
            if (self.expandable and last and last["address"] + last["size"] == s["address"]
                    and last["stream"] == s["stream"]):
                last["size"] += s["size"]
                last["blocks"] = last["blocks"] + s["blocks"]
            else:
                merged.append(dict(s, blocks=list(s["blocks"])))
        return [self.segment_dict(s) for s in merged]

    def segment_dict(self, s):
        fmt = self.fmt
        blocks = [self.block_dict(b) for b in s["blocks"]]
        active = sum(b["size"] for b in s["blocks"] if b["state"] != "inactive")
        d = {"device": self.device, "address": s["address"], "total_size": s["size"],
             "allocated_size": active, "active_size": active, "stream": s["stream"],
             "segment_type": "small" if s["size"] == SMALL else "large", "blocks": blocks}
        if fmt["requested"]:
            d["requested_size"] = sum(b.get("requested", 0) for b in s["blocks"]
                                      if b["state"] != "inactive")
        if fmt["expandable"]:
            d["is_expandable"] = self.expandable
        if "segment_pool_id" in fmt["extra"]:
            d["segment_pool_id"] = (0, 0)
            d["frames"] = []
        return d

    def block_dict(self, b):
        fmt, rng = self.fmt, self.rng
        d = {"size": b["size"], "state": b["state"]}
        if fmt["address"]:
            d["address"] = b["addr"]
        requested = b.get("requested", 0) if b["state"] != "inactive" else 0
        if fmt["history"]:
            if b["state"] != "inactive" and rng.random() < 0.7:
                d["history"] = [{"addr": b["addr"], "real_size": requested,
                                 "frames": b.get("frames", [])}]
            if rng.random() < 0.3:  # some 2.0 builds wrote requested_size beside history
                d["requested_size"] = requested
        else:
            d["requested_size"] = requested
            if b["state"] != "inactive" and (b.get("frames") or rng.random() < 0.5):
                d["frames"] = b.get("frames", [])
        return d


def contradict(rng, trace, device):
    """What a damaged or out-of-order trace can hold, that MemoryViz.js draws anyway."""
    allocs = [e for e in trace if e["action"] == "alloc"]
    frees = [e for e in trace if e["action"] == "free_completed"]
    kind = rng.choice(["alloc_again", "free_again", "free_unknown", "raw_free"])
    at = rng.randint(0, len(trace))
    if kind == "alloc_again" and allocs:
        e = dict(rng.choice(allocs), size=rng.randint(1, 3 * MiB))
    elif kind == "free_again" and frees:
        e = dict(rng.choice(frees))
        at = max(at, trace.index(next(f for f in frees if f["addr"] == e["addr"])) + 1)
    elif kind == "raw_free":  # the action name MemoryViz.js's own merge writes
        e = {"action": "free", "addr": 0x600000000000 + device * 0x1000 + rng.randint(0, 99) * 512,
             "size": rng.randint(1, MiB), "stream": 0}
    else:
        e = {"action": "free_completed", "addr": 0x500000000000 + rng.randint(0, 999) * 512,
             "size": rng.randint(1, 2 * MiB), "stream": 0}
    if any("time_us" in x for x in trace):  # a time of its own, between its neighbours
        before = [x["time_us"] for x in trace[:at] if "time_us" in x]
        e["time_us"] = (before[-1] if before else min(x["time_us"] for x in trace if "time_us" in x) - 2) + 1
    trace.insert(at, e)


def make_snapshot(seed, version=None):
    rng = random.Random(seed)
    version = version or rng.choice(sorted(FORMATS))
    fmt = FORMATS[version]
    n_dev = rng.choice([1, 1, 1, 2, 2, 3])
    clock = [1_700_000_000_000_000 + seed * 1000]
    traces, segments = [], []
    for d in range(n_dev):
        expandable = fmt["expandable"] and rng.random() < 0.35
        dev = Device(rng, d, fmt, clock, expandable)
        if rng.random() < 0.15:  # a device that recorded nothing
            traces.append([])
            continue
        dev.run(rng.randint(8, 90))
        events = dev.events
        start = rng.choice([0, 0, rng.randint(0, len(events)), rng.randint(0, len(events) // 2)])
        stop = len(events) if rng.random() < 0.85 else rng.randint(start, len(events))
        trace = [dict(e) for e in events[start:stop]]
        for _ in range(rng.choice([0, 0, 0, 1, 2])):
            contradict(rng, trace, d)
        traces.append(trace)
        segments.extend(dev.dump_segments())
    rng.shuffle(segments) if rng.random() < 0.2 else None
    snap = {"segments": segments, "device_traces": traces}
    if version != "2.0":
        snap["allocator_settings"] = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                                      "max_split_size": -1, "trace_alloc_max_entries": 100000,
                                      "trace_alloc_overflowed": False}
    return version, snap


def write_corpus(outdir, n=240, first_seed=0):
    os.makedirs(outdir, exist_ok=True)
    paths = []
    for seed in range(first_seed, first_seed + n):
        version, snap = make_snapshot(seed)
        path = os.path.join(outdir, f"gen_{seed:04d}_v{version}.pickle")
        with open(path, "wb") as f:
            pickle.dump(snap, f, protocol=2 + seed % 3)
        paths.append(path)
    return paths


if __name__ == "__main__":
    write_corpus(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 240)
