#!/usr/bin/python3
"""record_torch_steps.py — records real multi-step training logs for mode learn's benchmark
(BENCHMARKS.md, "Mode learn"): PyTorch on the CPU (Debian's python3-torch and
python3-torchvision: `apt-get install python3-torch python3-torchvision`) trains a model for a
few steps; every tensor storage it allocates and frees is recorded, and written as an RMM CSV
log (Thread,Time,Action,Pointer,Size,Stream), the format of ../shared/traces/.

How: PyTorch's CPU allocator takes every storage from posix_memalign with 64-byte alignment and
gives it back with free; bench/torch_alloc_hook.c, built here with cc and preloaded (the script
runs itself again under LD_PRELOAD), writes those calls while recording is on. (Debian's build
has no Kineto, so torch.profiler reports no memory events.) Time is the event's order (1 µs
apart): the allocator's replay needs only the order.

Usage: /usr/bin/python3 bench/record_torch_steps.py OUT_DIR [--steps N] [--models a,b,...]
Models: torchvision names (resnet18, mobilenet_v3_small, ...), and `transformer` (a small
encoder with an LM head, written here). Random weights and data (224×224 images, batch 8;
the transformer: 4 sequences of 256 tokens), sized for a 2-core machine. One warm-up step runs before recording, so the optimizer's state exists. The
logs are generated data: keep them out of git (OUT_DIR under build/ or /tmp).
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def build(name, torch, torchvision):
    """The model, an input batch and its targets."""
    if name == "transformer":
        vocab, ctx, dim = 8000, 256, 256
        layer = torch.nn.TransformerEncoderLayer(dim, 4, 4 * dim, batch_first=True)
        model = torch.nn.Sequential()
        model.add_module("embed", torch.nn.Embedding(vocab, dim))
        model.add_module("encoder", torch.nn.TransformerEncoder(layer, 2))
        model.add_module("head", torch.nn.Linear(dim, vocab))
        x = torch.randint(0, vocab, (4, ctx))
        y = torch.randint(0, vocab, (4 * ctx,))
        return model, x, y, lambda out: out.reshape(-1, vocab)
    model = getattr(torchvision.models, name)(num_classes=100)
    x = torch.randn(8, 3, 224, 224)
    y = torch.randint(0, 100, (8,))
    return model, x, y, lambda out: out


def hook_events(log_path):
    """(index, address, bytes) per line of the hook's log: bytes > 0 allocated, < 0 freed."""
    out = []
    with open(log_path) as f:
        for i, line in enumerate(f):
            parts = line.split()
            if len(parts) == 3 and parts[0] == "a":
                out.append((float(i), i, int(parts[1], 16), int(parts[2])))
            elif len(parts) == 2 and parts[0] == "f":
                out.append((float(i), i, int(parts[1], 16), -1))
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


def record(name, steps, out_dir, torch, torchvision, hook):
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
    hook.hbm_torch_record(1)
    for _ in range(steps):
        step()
    hook.hbm_torch_record(0)
    events = hook_events(os.environ["HBM_TORCH_HOOK_LOG"])
    path = os.path.join(out_dir, f"{name}-train-{steps}steps-cpu.csv")
    rows = write_rmm(events, path)
    if rows == 0:
        sys.exit(f"record_torch_steps: {name}: no tensor storage was recorded")
    print(f"{path}: {rows} events")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--models", default="resnet18,mobilenet_v3_small,transformer,"
                        "squeezenet1_0,mobilenet_v2,shufflenet_v2_x1_0")
    args = parser.parse_args()
    if "HBM_TORCH_HOOK_LOG" not in os.environ:
        preload_hook()
    try:
        import torch
        import torchvision
    except ImportError as e:
        sys.exit(f"record_torch_steps: {e} (apt-get install python3-torch python3-torchvision)")
    torch.set_num_threads(1)  # one thread: the allocations come in one order
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.models.split(","):
        with open(os.environ["HBM_TORCH_HOOK_LOG"], "w"):
            pass  # each model's log starts empty
        record(name, args.steps, args.out_dir, torch, torchvision, ctypes.CDLL(None))


def preload_hook():
    """Runs this script again with the hook preloaded (built into a temporary directory)."""
    tmp = tempfile.mkdtemp(prefix="hbm-torch-hook-")
    lib = os.path.join(tmp, "hook.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", lib,
                    os.path.join(HERE, "torch_alloc_hook.c"), "-ldl", "-lpthread"], check=True)
    env = dict(os.environ, LD_PRELOAD=lib, HBM_TORCH_HOOK_LOG=os.path.join(tmp, "hook.log"))
    rc = subprocess.run([sys.executable] + sys.argv, env=env).returncode
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)
    sys.exit(rc)


if __name__ == "__main__":
    main()
