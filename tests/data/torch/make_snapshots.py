#!/usr/bin/env python3
"""Writes small PyTorch memory snapshots (the structure of torch.cuda.memory._dump_snapshot)
for tests/test_import_torch.c, and next to each a NAME.expected file with the numbers the
test checks, computed here from the simulated run itself (not from hbm).

CPU PyTorch cannot record CUDA memory history, so each snapshot is built from plain dicts:
a small simulated caching allocator runs a random workload; its trace starts at a cut point
(as the real ring buffer does), so some blocks were allocated before the trace began; the
segments and blocks at the end are the dump. The expected peak is the largest sum of live
requested bytes at or after the cut, straight from the simulation.

Also writes hand-made pickles that name Python code (os.system through GLOBAL and
STACK_GLOBAL with REDUCE) as raw bytes: they are never loaded, only refused by hbm.

Run: python3 tests/data/torch/make_snapshots.py  (stdlib only; deterministic output)
"""
import os
import pickle
import random

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
LARGE_SEGMENT = 20 * MiB
SMALL_SEGMENT = 2 * MiB

TORCH = "/usr/lib/python3/dist-packages/torch/nn/modules/module.py"
STACKS = [
    [("forward", "/home/me/proj/model.py", 54), ("_call_impl", TORCH, 1790),
     ("forward", "/home/me/proj/model.py", 245), ("_call_impl", TORCH, 1790),
     ("<module>", "/home/me/proj/train.py", 65)],
    [("softmax", "/home/me/proj/nn_utils.py", 7), ("forward", "/home/me/proj/model.py", 101),
     ("_call_impl", TORCH, 1790), ("<module>", "/home/me/proj/train.py", 65)],
    [("step", "/usr/lib/python3/dist-packages/torch/optim/adamw.py", 120),
     ("<module>", "/home/me/proj/train.py", 70)],
    [("empty", "??", 0), ("matmul", "aten/src/ATen/native/LinearAlgebra.cpp", 2000),
     ("forward", "/home/me/proj/attention.py", 33), ("<module>", "/home/me/proj/train.py", 65)],
    [],
]


def frames(stack):
    return [{"name": n, "filename": f, "line": line} for n, f, line in stack]


def round_block(size):
    """PyTorch's 512-byte rounding (blocks are at least 512 bytes)."""
    return max(512, (size + 511) // 512 * 512)


class Sim:
    """A caching allocator small enough to check by eye: bump allocation inside segments,
    a freed block's address reused by the next request of the same rounded size."""

    def __init__(self, rng, device, base, sizes_512=False):
        self.rng, self.device, self.base = rng, device, base
        self.sizes_512 = sizes_512
        self.t = 1_700_000_000_000_000 + device * 7
        self.segments = []  # dicts: address, total_size, used, small
        self.live = {}  # addr -> (requested, block, stack, stream)
        self.free_blocks = {}  # rounded size -> [addr]
        self.events = []  # the whole history, trace events as PyTorch writes them
        self.pending = []  # (addr, completes at op number)

    def tick(self):
        self.t += self.rng.randint(1, 50)
        return self.t

    def event(self, action, addr, size, stream=0, stack=()):
        self.events.append({"action": action, "addr": addr, "size": size, "stream": stream,
                            "time_us": self.tick(), "frames": frames(stack)})

    def place(self, block):
        small = block <= MiB
        for seg in self.segments:
            if seg["small"] == small and seg["total_size"] - seg["used"] >= block:
                addr = seg["address"] + seg["used"]
                seg["used"] += block
                return addr
        total = SMALL_SEGMENT if small else max(LARGE_SEGMENT, (block + 2 * MiB - 1) // (2 * MiB) * 2 * MiB)
        addr = self.base + sum(s["total_size"] for s in self.segments) + len(self.segments) * MiB
        self.segments.append({"address": addr, "total_size": total, "used": block, "small": small})
        self.event("segment_alloc", addr, total)
        return addr

    def alloc(self):
        size = self.rng.choice([512, 4096, 65536, 3 * MiB, 8 * MiB, 5 * MiB + 1000, 777, 12345])
        if self.sizes_512:
            size = round_block(size)
        block = round_block(size)
        stack = self.rng.choice(STACKS)
        stream = self.rng.choice([0, 0, 0, 140000001])
        reuse = self.free_blocks.get(block)
        addr = reuse.pop() if reuse else self.place(block)
        self.live[addr] = (size, block, stack, stream)
        self.event("alloc", addr, size, stream, stack)

    def free(self, op):
        addr = self.rng.choice(sorted(self.live))
        if any(a == addr for a, _ in self.pending):
            return
        size, block, stack, stream = self.live[addr]
        self.event("free_requested", addr, size, stream, stack)
        delay = 3 if stream else 0  # record_stream: the memory is reusable later
        self.pending.append((addr, op + delay))

    def complete(self, op, everything=False):
        keep = []
        for addr, when in self.pending:
            if when <= op or everything:
                size, block, stack, stream = self.live.pop(addr)
                self.event("free_completed", addr, size, stream, stack)
                self.free_blocks.setdefault(block, []).append(addr)
            else:
                keep.append((addr, when))
        self.pending = keep

    def run(self, n_ops, oom_at=None):
        for op in range(n_ops):
            self.complete(op)
            if self.live and self.rng.random() < 0.45:
                self.free(op)
            else:
                self.alloc()
            if op == oom_at:
                # PyTorch records the free device memory in addr and the request in size
                self.events.append({"action": "oom", "addr": 123 * MiB, "size": 40 << 30,
                                    "stream": 0, "time_us": self.tick(), "frames": []})

    def snapshot_segments(self):
        """The dump: segments with their live blocks (pending frees included) and the rest
        as one inactive block."""
        out = []
        for seg in self.segments:
            blocks, used, at = [], 0, seg["address"]
            for addr in sorted(self.live):
                if seg["address"] <= addr < seg["address"] + seg["total_size"]:
                    size, block, stack, stream = self.live[addr]
                    if addr > at:  # freed blocks between: inactive (memory_viz places blocks
                        blocks.append({"address": at, "size": addr - at,  # by their sizes)
                                       "requested_size": 0, "state": "inactive", "frames": []})
                    pending = any(a == addr for a, _ in self.pending)
                    blocks.append({"address": addr, "size": block, "requested_size": size,
                                   "state": "active_pending_free" if pending else "active_allocated",
                                   "frames": frames(stack)})
                    used += block
                    at = addr + block
            blocks.append({"address": at, "size": seg["address"] + seg["total_size"] - at,
                           "requested_size": 0, "state": "inactive", "frames": []})
            out.append({"device": self.device, "address": seg["address"],
                        "total_size": seg["total_size"], "allocated_size": used,
                        "active_size": used, "requested_size": used, "stream": 0,
                        "segment_type": "small" if seg["small"] else "large",
                        "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                        "blocks": blocks})
        return out


def truth(events, cut):
    """From the whole history: the most live requested bytes at or after the cut, and the
    most reserved bytes over the trace."""
    live, reserved = {}, 0
    peak = peak_reserved = None
    for i, e in enumerate(events):
        if i == cut:
            peak = sum(live.values())
            peak_reserved = reserved
        a = e["action"]
        if a == "alloc":
            live[e["addr"]] = e["size"]
        elif a == "free_completed":
            del live[e["addr"]]
        elif a == "segment_alloc":
            reserved += e["size"]
        if i >= cut:
            peak = max(peak, sum(live.values()))
            peak_reserved = max(peak_reserved, reserved)
    if peak is None:  # the cut is after the last event
        peak, peak_reserved = sum(live.values()), reserved
    return peak, peak_reserved


def device_run(seed, device, n_ops, cut_fraction, oom_at=None, sizes_512=False):
    sim = Sim(random.Random(seed), device, (0x7F00 + device) << 32, sizes_512)
    sim.run(n_ops, oom_at)
    cut = int(len(sim.events) * cut_fraction)
    peak, peak_reserved = truth(sim.events, cut)
    segs = sim.snapshot_segments()
    expected = {
        "peak_bytes": peak,
        "reserved_end": sum(s["total_size"] for s in segs),
        "peak_reserved": peak_reserved,
        "ooms": sum(1 for e in sim.events[cut:] if e["action"] == "oom"),
        "live_end": sum(v[0] for v in sim.live.values()),
    }
    trace = sim.events[cut:]
    # a 'snapshot' marker event, as _dump_snapshot leaves in the trace
    trace.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0,
                  "time_us": sim.tick(), "frames": []})
    return segs, trace, expected


SETTINGS = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
            "garbage_collection_threshold": 0.0, "expandable_segments": False,
            "roundup_power2_divisions": {"1": 0, "2": 0}}


def write(name, obj, protocol, expected):
    with open(os.path.join(HERE, name + ".pickle"), "wb") as f:
        f.write(pickle.dumps(obj, protocol=protocol))
    with open(os.path.join(HERE, name + ".expected"), "w") as f:
        f.write("# from make_snapshots.py's simulation, not from hbm\n")
        for device, exp in enumerate(expected):
            for key, value in exp.items():
                f.write(f"cuda:{device} {key} {value}\n")


def strip(d, keys):
    return {k: v for k, v in d.items() if k not in keys}


def main():
    segs, trace, exp = device_run(seed=1, device=0, n_ops=160, cut_fraction=0.3, oom_at=120)
    small = {"segments": segs, "device_traces": [trace], "allocator_settings": SETTINGS,
             "external_annotations": []}
    write("small", small, 4, [exp])
    write("small_p2", small, 2, [exp])
    write("small_p5", small, 5, [exp])

    # two devices: a space each
    segs0, trace0, exp0 = device_run(seed=2, device=0, n_ops=80, cut_fraction=0.5)
    segs1, trace1, exp1 = device_run(seed=3, device=1, n_ops=60, cut_fraction=0.0)
    write("two_devices", {"segments": segs0 + segs1, "device_traces": [trace0, trace1]}, 4,
          [exp0, exp1])

    # an old snapshot: only the keys every release wrote (sizes are whole blocks, since
    # without requested_size a block counts with its size; 'device' every release wrote, and
    # memory_viz draws a segment without it on no device)
    segs, trace, exp = device_run(seed=4, device=0, n_ops=80, cut_fraction=0.4, sizes_512=True)
    old_segs = [{"device": s["device"], "address": s["address"], "total_size": s["total_size"],
                 "blocks": [strip(b, ("requested_size", "frames")) for b in s["blocks"]]}
                for s in segs]
    old_trace = [strip(e, ("time_us", "stream")) for e in trace]
    write("old", {"segments": old_segs, "device_traces": [old_trace]}, 2, [exp])

    write_expandable()
    write_inconsistent()
    write("empty", {"segments": [], "device_traces": []}, 4,
          [{"peak_bytes": 0, "reserved_end": 0, "peak_reserved": 0, "ooms": 0, "live_end": 0}])
    write_refused()


def write_expandable():
    """Expandable segments: one reserved range whose pages are mapped and unmapped. 20 MiB
    were mapped before the trace; it maps 40 MiB more (peak 60 MiB) and unmaps 20 MiB, so
    the segment holds 40 MiB at the dump. One 30 MiB tensor lives there at the end, one of
    10 MiB was freed: peak in use 10 + 30 = 40 MiB while both lived."""
    base = 0x7E00 << 32
    t = [1_700_000_000_000_000]

    def ev(action, addr, size, stack=()):
        t[0] += 10
        return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t[0],
                "frames": frames(stack)}

    trace = [ev("segment_map", base + 20 * MiB, 40 * MiB),
             ev("alloc", base, 10 * MiB, STACKS[0]),
             ev("alloc", base + 10 * MiB, 30 * MiB, STACKS[1]),
             ev("free_requested", base, 10 * MiB), ev("free_completed", base, 10 * MiB),
             ev("segment_unmap", base + 40 * MiB, 20 * MiB)]
    seg = {"device": 0, "address": base, "total_size": 40 * MiB, "stream": 0,
           "segment_type": "large", "is_expandable": True,
           "blocks": [{"address": base, "size": 10 * MiB, "requested_size": 0, "state": "inactive"},
                      {"address": base + 10 * MiB, "size": 30 * MiB, "requested_size": 30 * MiB,
                       "state": "active_allocated", "frames": frames(STACKS[1])}]}
    settings = dict(SETTINGS, expandable_segments=True,
                    PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    write("expandable", {"segments": [seg], "device_traces": [trace],
                         "allocator_settings": settings}, 4,
          [{"peak_bytes": 40 * MiB, "reserved_end": 40 * MiB, "peak_reserved": 60 * MiB,
            "ooms": 0, "live_end": 30 * MiB}])


def write_inconsistent():
    """A trace that contradicts itself, by hand, drawn as memory_viz's Active Memory
    Timeline draws it (docs/pytorch-snapshots.md): a second alloc of a live address leaves the
    first live for good; a free of an address no alloc holds (B, twice) is an allocation live
    from the start. What memory_viz cannot draw at all (an event without addr: its address is
    "undefined"; a negative size; one too big for 64 bits: a BigInt it cannot add) hbm skips
    and counts; an unknown action is ignored. The segment at 0x5000 holds E (0x5000, 512
    bytes, requested 300) then F (0x5200, requested 4000).
    Before the trace: B 500 + B 500 + F 4000 (E is held by the trace's alloc at its end) =
    5000; alloc A 1000 -> 6000; A again 2000 -> 8000 (the peak); free B -> 7500; free B ->
    7000; 'free' (older releases' action) of A ends the second A -> 5000; alloc E 300 -> 5300
    at the end = F + the first A + E."""
    A, B, E, F = 0x1000, 0x2000, 0x5000, 0x5200

    def ev(action, **kw):
        return dict({"action": action, "stream": 0, "frames": []}, **kw)

    trace = [ev("alloc", addr=A, size=1000), ev("alloc", addr=A, size=2000),
             ev("free_completed", addr=B, size=500), ev("free_completed", addr=B, size=500),
             ev("alloc", size=7), ev("weird_action", addr=1, size=1),
             ev("free", addr=A, size=2000), ev("alloc", addr=0x3000, size=-5),
             ev("alloc", addr=0x4000, size=2 ** 70), ev("alloc", addr=E, size=300)]
    seg = {"device": 0, "address": E, "total_size": MiB,
           "blocks": [{"address": E, "size": 512, "requested_size": 300,
                       "state": "active_allocated"},
                      {"address": F, "size": 4096, "requested_size": 4000,
                       "state": "active_allocated"},
                      {"address": F + 4096, "size": MiB - 512 - 4096, "requested_size": 0,
                       "state": "inactive"}]}
    write("inconsistent", {"segments": [seg], "device_traces": [trace]}, 4,
          [{"peak_bytes": 8000, "reserved_end": MiB, "peak_reserved": MiB, "ooms": 0,
            "live_end": 5300, "inconsistent": 5}])


def write_refused():
    """Pickles that would run os.system("echo pwned") if loaded by Python. Raw bytes, so
    nothing here imports or calls anything."""
    cmd = b"echo pwned"
    arg = b"X" + len(cmd).to_bytes(4, "little") + cmd  # BINUNICODE
    # protocol 2: PROTO 2, GLOBAL 'os\nsystem\n', the argument, TUPLE1, REDUCE, STOP
    global_reduce = b"\x80\x02" + b"cos\nsystem\n" + arg + b"\x85" + b"R" + b"."
    # protocol 4: the names as strings, STACK_GLOBAL, the argument, TUPLE1, REDUCE, STOP
    short = lambda s: b"\x8c" + bytes([len(s)]) + s  # SHORT_BINUNICODE
    stack_global = b"\x80\x04" + short(b"os") + short(b"system") + b"\x93" + arg + b"\x85R."
    # a snapshot-like dict whose value is built by the call: SETITEM never runs
    in_dict = (b"\x80\x04}" + short(b"segments") + short(b"posix") + short(b"system") +
               b"\x93" + arg + b"\x85Rs.")
    for name, data in (("refused_global", global_reduce), ("refused_stack_global", stack_global),
                       ("refused_in_dict", in_dict)):
        with open(os.path.join(HERE, name + ".pickle"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
