#!/usr/bin/env python3
"""A second decoder of PyTorch memory snapshots, for test_import_torch_real.c's table.

It never unpickles: pickletools.genops only lists the opcodes of the file with their
arguments, and the stack machine below builds plain data from the data opcodes alone (any
other opcode stops it). From the tree it computes, for the device memory_viz opens on, the numbers of
its Active Memory Timeline (MemoryViz.js's rule, docs/pytorch-snapshots.md): the peak, the
reserved bytes (the segments' total_size) and the bytes live as the timeline ends.

Run: python3 tests/data/torch/second_decoder.py ../shared/real/torch/*.pickle
"""
import os
import pickletools
import sys

DATA = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "BININT1", "BININT", "BININT2",
        "LONG1", "LONG4", "BINFLOAT", "SHORT_BINBYTES", "BINBYTES", "BINBYTES8"}


def load(data):
    stack, marks, memo = [], [], {}
    for op, arg, _ in pickletools.genops(data):
        name = op.name
        if name in ("PROTO", "FRAME"):
            continue
        if name in DATA:
            stack.append(arg)
        elif name == "EMPTY_DICT":
            stack.append({})
        elif name == "EMPTY_LIST":
            stack.append([])
        elif name in ("NEWFALSE", "NEWTRUE", "NONE"):
            stack.append({"NEWFALSE": False, "NEWTRUE": True, "NONE": None}[name])
        elif name == "MARK":
            marks.append(len(stack))
        elif name == "MEMOIZE":
            memo[len(memo)] = stack[-1]
        elif name in ("BINPUT", "LONG_BINPUT"):
            memo[arg] = stack[-1]
        elif name in ("BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif name in ("SETITEMS", "APPENDS"):
            m = marks.pop()
            items, stack[m:] = stack[m:], []
            if name == "SETITEMS":
                stack[-1].update(zip(items[::2], items[1::2]))
            else:
                stack[-1].extend(items)
        elif name == "SETITEM":
            v, k = stack.pop(), stack.pop()
            stack[-1][k] = v
        elif name == "APPEND":
            v = stack.pop()
            stack[-1].append(v)
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            n = int(name[-1])
            t = tuple(stack[-n:])
            del stack[-n:]
            stack.append(t)
        elif name == "TUPLE":
            m = marks.pop()
            t = tuple(stack[m:])
            del stack[m:]
            stack.append(t)
        elif name == "EMPTY_TUPLE":
            stack.append(())
        elif name == "STOP":
            return stack.pop()
        else:
            raise ValueError(f"opcode {name}: not plain data")


def drawn_size(block):
    """The size a block active at the dump is drawn with: with 'frames' (2.1 on) its
    requested_size; without, its requested_size unless missing or 0, then the first history
    entry's real_size (2.0), then its size."""
    if "frames" in block:
        return block.get("requested_size", block["size"])
    history = block.get("history") or [{}]
    return block.get("requested_size") or history[0].get("real_size") or block["size"]


def default_device(snapshot):
    """Of the devices with a trace event or a segment, the one with the longest trace."""
    with_segments = {s.get("device") for s in snapshot.get("segments", [])}
    listed = [(len(t), -i) for i, t in enumerate(snapshot.get("device_traces", []))
              if t or i in with_segments]
    return -max(listed)[1] if listed else 0


def rule(snapshot, device):
    """One device's Active Memory Timeline as running totals: a first pass finds what was
    live before the trace (a free of an address no alloc of the trace holds at that moment;
    a block active_allocated at the dump, placed by the sizes before it in its segment, that
    no alloc holds at the trace's end), a second walks the trace from that total: an alloc
    adds its size (an alloc of a held address leaves the earlier one live for good), a free
    takes off the held alloc's size, or its own. Returns the peak (before the trace
    included), the first event reaching it (-1: before), the total at the end, and the
    segments' reserved bytes."""
    traces = snapshot.get("device_traces", [])
    trace = traces[device] if device < len(traces) else []
    held, before = {}, 0
    for e in trace:
        if e["action"] == "alloc":
            held[e["addr"]] = e["size"]
        elif e["action"] in ("free", "free_completed"):
            if held.pop(e["addr"], None) is None:
                before += e["size"]
    reserved = 0
    for seg in snapshot.get("segments", []):
        if seg.get("device") != device:
            continue
        reserved += seg["total_size"]
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in held:
                before += drawn_size(b)
            addr += b["size"]
    now = peak = before
    at, held = -1, {}
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            held[e["addr"]] = e["size"]
            now += e["size"]
        elif e["action"] in ("free", "free_completed"):
            now -= held.pop(e["addr"], e["size"])
        else:
            continue
        if now > peak:
            peak, at = now, i
    return {"peak": peak, "peak_event": at, "end": now, "reserved": reserved}


def numbers(snapshot):
    """The default device's peak, reserved bytes and bytes live as its timeline ends."""
    r = rule(snapshot, default_device(snapshot))
    return r["peak"], r["reserved"], r["end"]


def main(paths):
    for path in sorted(paths):
        with open(path, "rb") as f:
            peak, reserved, live_end = numbers(load(f.read()))
        print('    {"%s", %du, %du, %du},' % (os.path.basename(path), peak, reserved, live_end))


if __name__ == "__main__":  # scripts/gpu/snapshot_peak.py imports load and numbers
    main(sys.argv[1:])
