#!/usr/bin/env python3
"""A second decoder of PyTorch memory snapshots, for test_import_torch_real.c's table.

It never unpickles: pickletools.genops only lists the opcodes of the file with their
arguments, and the stack machine below builds plain data from the data opcodes alone (any
other opcode stops it). From the tree it computes, for the one device of each real snapshot:
the peak of live requested bytes (the trace's alloc / free_completed, plus what was live
before the trace: addresses whose first event is a free, blocks active at the dump that the
trace never names), the sum of the segments' total_size, and the requested bytes of the
blocks active at the dump.

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


def numbers(snapshot):
    trace = snapshot["device_traces"][0]
    named, before = set(), 0
    for e in trace:
        if e["action"] == "free_completed" and e["addr"] not in named:
            before += e["size"]
        if e["action"] in ("alloc", "free_completed"):
            named.add(e["addr"])
    reserved = live_end = 0
    for seg in snapshot["segments"]:
        reserved += seg["total_size"]
        for b in seg["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                live_end += b["requested_size"]
                if b["address"] not in named:
                    before += b["requested_size"]
    now = peak = before
    live = {}
    for e in trace:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
            now += e["size"]
        elif e["action"] == "free_completed":
            now -= live.pop(e["addr"], e["size"])
        peak = max(peak, now)
    return peak, reserved, live_end


def main(paths):
    for path in sorted(paths):
        with open(path, "rb") as f:
            peak, reserved, live_end = numbers(load(f.read()))
        print('    {"%s", %du, %du, %du},' % (os.path.basename(path), peak, reserved, live_end))


if __name__ == "__main__":  # scripts/gpu/snapshot_peak.py imports load and numbers
    main(sys.argv[1:])
