"""What the scripts of scripts/gpu/ share: the training steps' options and result line, and
the steps' reading of why something could not run and of their exit status."""
import argparse
import json
import re
import time


def step_parser(doc):
    """The options both training steps take (a model of LAYERS x WIDTH, BATCH rows)."""
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    return p


def result(framework, **fields):
    """The one line a training step prints for the step that ran it."""
    print("RESULT " + json.dumps(dict(framework=framework, **fields)), flush=True)


def timed_steps(args, step, is_oom, after_oom):
    """WARMUP then STEPS calls of step() (which returns once the device is done): the timed
    ones' milliseconds, the out-of-memory errors (after each, after_oom() sets up again) and
    the first one's message."""
    times, ooms, first_oom = [], 0, None
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        try:
            step()
        except Exception as e:  # noqa: BLE001 — an OOM is a result, anything else is not
            if not is_oom(e):
                raise
            ooms += 1
            first_oom = first_oom or str(e).splitlines()[0][:300]
            after_oom()
            continue
        if i >= args.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return times, ooms, first_oom


def step_result(stdout):
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return None


def cannot_run(rc, output):
    """Why a program says it cannot run here at all (its 'skipped: ...' line with exit status
    77, or a module missing from this Python), or None."""
    if rc == 77:
        return next((line[len("skipped: "):] for line in output.splitlines()
                     if line.startswith("skipped: ")), "it skipped")
    missing = re.search(r"ModuleNotFoundError: No module named '([^']+)'", output)
    return f"{missing.group(1)} is not installed in this Python" if missing else None


def tool_parser(*required):
    p = argparse.ArgumentParser()
    for name in required:
        p.add_argument(name, required=True)
    p.add_argument("--budget", type=float, required=True)
    return p


def exit_status(rows, good):
    """77 when nothing could run here, 0 when all that ran is `good`, 1 otherwise."""
    ran = [r for r in rows if r["status"] not in ("skipped", "not run")]
    if not ran:
        return 77
    return 0 if all(r["status"] == good for r in ran) else 1
