"""A small PyTorch training step on the GPU, for scripts/gpu-check.sh: an MLP (LAYERS Linear
layers of WIDTH, ReLU) trained with Adam on random data, WARMUP steps then STEPS timed ones.

Prints one line `RESULT {json}`: the step time (median, ms), out-of-memory errors, and
PyTorch's own counters (torch.cuda.max_memory_allocated / max_memory_reserved, the allocator
backend). With --snapshot FILE the run is recorded by torch.cuda.memory._record_memory_history
and dumped with _dump_snapshot(FILE) (what `hbm report` and memory_viz read). Exit status 0
when the steps ran (OOMs included: they are results), 77 when PyTorch has no GPU, 1 on any
other error.

Usage: python3 torch_step.py [--width N] [--layers N] [--batch N] [--warmup N] [--steps N]
                             [--snapshot FILE]"""
import statistics
import sys

from common import result as common_result
from common import step_parser, timed_steps


def parse():
    p = step_parser(__doc__)
    p.add_argument("--snapshot")
    return p.parse_args()


def result(**fields):
    common_result("torch", **fields)


def build(torch, args):
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, args.width, device="cuda")
    y = torch.zeros(args.batch, args.width, device="cuda")
    return model, opt, x, y


def train(torch, args):
    model, opt, x, y = build(torch, args)
    torch.cuda.synchronize()

    def one():
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        torch.cuda.synchronize()

    return timed_steps(args, one, lambda e: isinstance(e, torch.cuda.OutOfMemoryError),
                       lambda: None)


def main():
    args = parse()
    import torch

    if not torch.cuda.is_available():
        result(status="skipped", reason="PyTorch sees no GPU (torch.cuda.is_available() is False)")
        print("skipped: PyTorch sees no GPU (torch.cuda.is_available() is False)")
        return 77
    if args.snapshot:
        torch.cuda.memory._record_memory_history(max_entries=1000000)
    try:
        times, ooms, first_oom = train(torch, args)
    except Exception as e:  # noqa: BLE001 — reported, then the exit status says it failed
        result(status="error", error=f"{type(e).__name__}: {str(e)[:500]}")
        raise
    if args.snapshot:
        torch.cuda.memory._dump_snapshot(args.snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    result(status="ok" if times else "oom", device=torch.cuda.get_device_name(),
           torch=torch.__version__, step_ms=statistics.median(times) if times else None,
           step_ms_all=[round(t, 3) for t in times], ooms=ooms, first_oom=first_oom,
           allocator_backend=torch.cuda.get_allocator_backend(),
           max_memory_allocated=torch.cuda.max_memory_allocated(),
           max_memory_reserved=torch.cuda.max_memory_reserved())
    return 0


if __name__ == "__main__":
    sys.exit(main())
