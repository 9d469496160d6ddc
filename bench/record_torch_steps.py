#!/usr/bin/env python3
"""record_torch_steps.py — records real multi-step training logs for mode learn's benchmark
(BENCHMARKS.md, "Mode learn"): PyTorch on the CPU (Debian's python3-torch and
python3-torchvision: `apt-get install python3-torch python3-torchvision`) trains a model for a
few steps under torch.profiler with profile_memory=True, which reports every tensor storage's
allocation and free with its address and size; they are written as an RMM CSV log
(Thread,Time,Action,Pointer,Size,Stream), the format of ../shared/traces/.

Usage: python3 bench/record_torch_steps.py OUT_DIR [--steps N] [--models a,b,...]
Models: torchvision names (resnet18, mobilenet_v3_small, ...), and `transformer` (a small
encoder with an LM head, written here). Random weights and data; batch and sizes small enough
for a 2-core machine. One warm-up step is run before recording, so the optimizer's state exists.
The logs are generated data: keep them out of git (OUT_DIR under build/ or /tmp).
"""
import argparse
import json
import os
import sys
import tempfile


def build(name, torch, torchvision):
    """The model, an input batch and its targets."""
    if name == "transformer":
        vocab, ctx, dim = 2000, 64, 128
        layer = torch.nn.TransformerEncoderLayer(dim, 4, 4 * dim, batch_first=True)
        model = torch.nn.Sequential()
        model.add_module("embed", torch.nn.Embedding(vocab, dim))
        model.add_module("encoder", torch.nn.TransformerEncoder(layer, 2))
        model.add_module("head", torch.nn.Linear(dim, vocab))
        x = torch.randint(0, vocab, (8, ctx))
        y = torch.randint(0, vocab, (8 * ctx,))
        return model, x, y, lambda out: out.reshape(-1, vocab)
    model = getattr(torchvision.models, name)(num_classes=100)
    x = torch.randn(4, 3, 128, 128)
    y = torch.randint(0, 100, (4,))
    return model, x, y, lambda out: out


def memory_events(trace_path):
    """(time µs, address, bytes) of every [memory] event in a chrome trace, in time order."""
    with open(trace_path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    out = []
    for i, e in enumerate(events):
        args = e.get("args") or {}
        if e.get("name") != "[memory]" or "Addr" not in args or "Bytes" not in args:
            continue
        out.append((float(e.get("ts", 0)), i, int(args["Addr"]), int(args["Bytes"])))
    out.sort()
    return out


def write_rmm(events, path):
    """The events as an RMM CSV log; frees of blocks allocated before recording are left out."""
    live = {}
    rows = 0
    t0 = events[0][0] if events else 0.0
    with open(path, "w") as f:
        f.write("Thread,Time,Action,Pointer,Size,Stream\n")
        for ts, _, addr, nbytes in events:
            if nbytes > 0 and addr not in live:
                live[addr] = nbytes
                f.write(f"1,{(ts - t0) / 1e6:.9f},allocate,{addr:#x},{nbytes},0x0\n")
                rows += 1
            elif nbytes < 0 and addr in live:
                f.write(f"1,{(ts - t0) / 1e6:.9f},free,{addr:#x},{live.pop(addr)},0x0\n")
                rows += 1
    return rows


def record(name, steps, out_dir, torch, torchvision):
    torch.manual_seed(0)
    model, x, y, shape = build(name, torch, torchvision)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(shape(model(x)), y)
        loss.backward()
        optimizer.step()

    step()  # the optimizer's state, before recording
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        for _ in range(steps):
            step()
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(trace)
        events = memory_events(trace)
    path = os.path.join(out_dir, f"{name}-train-{steps}steps-cpu.csv")
    rows = write_rmm(events, path)
    if rows == 0:
        sys.exit(f"record_torch_steps: {name}: the profiler reported no memory events")
    print(f"{path}: {rows} events")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--models", default="resnet18,mobilenet_v3_small,transformer")
    args = parser.parse_args()
    try:
        import torch
        import torchvision
    except ImportError as e:
        sys.exit(f"record_torch_steps: {e} (apt-get install python3-torch python3-torchvision)")
    torch.set_num_threads(1)  # one thread: the allocations come in one order
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.models.split(","):
        record(name, args.steps, args.out_dir, torch, torchvision)


if __name__ == "__main__":
    main()
