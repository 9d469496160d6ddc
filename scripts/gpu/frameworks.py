"""The frameworks step of scripts/gpu-check.sh: the small PyTorch and JAX training steps
(torch_step.py, jax_step.py) under their own allocators and under `hbm run` in every mode and
with the seeds' variables, one process each, side by side.

For every run: its status (ok, oom, failed, timeout, skipped, not run), the step time, the
OOMs, the framework's own memory counters, and under `hbm run` what hbm says: the line it
prints per GPU (peak in use, peak reserved, limit, OOMs) and whether its profile opens in
`hbm report --json` (with the report's peak numbers). Runs go framework by framework in
turns, so that a spent budget leaves both with results; a framework whose first run says it
cannot run here (no module, no GPU) has its other runs skipped with that reason.

Usage: python3 frameworks.py --hbm HBM --python PY --work DIR --out JSON --budget SECONDS
                             [--run-timeout SECONDS] [--frameworks torch,jax] [--quick]
Writes JSON after every run (a killed step keeps what it measured); exit status 0 when every
run that ran is ok, 77 when none could run here (the reasons in the JSON), 1 otherwise."""
import json
import os
import re
import signal
import subprocess
import sys
import time

from common import cannot_run, exit_status, step_result, tool_parser

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ["bfc", "growth", "platform", "async", "expandable"]
# The seeds' variables, as users set them; under `hbm run` they choose hbm's mode and limit.
SEED_VARIABLES = [
    {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
    {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"},
    {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"},
    {"TF_GPU_ALLOCATOR": "cuda_malloc_async"},
]
# The framework's own allocator, and JAX's own under the seeds' variables that are JAX's.
OWN = {"torch": [{}], "jax": [{}] + SEED_VARIABLES[:3]}
_child = None  # the process group running now, killed with us


def runs_of(framework):
    """(name, env, hbm mode or None for no hbm run, or "" for hbm run without --mode)."""
    runs = [("own allocator" + "".join(f", {k}={v}" for k, v in env.items()), env, None)
            for env in OWN[framework]]
    runs += [(f"hbm run --mode {m}", {}, m) for m in MODES]
    runs += [(f"hbm run, {k}={v}", env, "") for env in SEED_VARIABLES for k, v in env.items()]
    return runs


def interleave(lists):
    out = []
    for i in range(max(len(x) for x in lists)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def run_process(cmd, env, timeout):
    """(returncode or None on timeout, stdout, stderr); the whole process group is killed."""
    global _child
    try:
        _child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, start_new_session=True)
    except OSError as e:  # no such program
        return 127, "", str(e)
    try:
        out, err = _child.communicate(timeout=timeout)
        return _child.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(_child.pid, signal.SIGKILL)
        out, err = _child.communicate()
        return None, out, err
    finally:
        _child = None


def hbm_side(hbm, logdir, stderr):
    """What hbm said about a run: its summary lines, and its profile through hbm report."""
    side = {"lines": [line for line in stderr.splitlines()
                      if re.match(r"hbm run: .*(peak in use|mode|one device allocation)", line)]}
    done = subprocess.run([hbm, "report", "--json", logdir], capture_output=True, text=True,
                          timeout=60)
    side["report_opens"] = done.returncode == 0
    if done.returncode != 0:
        side["report_error"] = (done.stderr or done.stdout).strip()[:500]
        return side
    report = json.loads(done.stdout)
    side["report"] = {k: report.get(k) for k in ("peak_bytes", "peak_reserved_bytes",
                                                  "limit_bytes", "device", "n_buffers")}
    side["report"]["ooms"] = len(report.get("oom_events") or [])
    return side


def status_of(rc, result, side):
    if rc is None:
        return "timeout"
    if rc == 77:
        return "skipped"
    if result is None or rc != 0:
        return "failed"
    if side is not None and not side["report_opens"]:
        return "failed"
    return result.get("status", "failed")


def one_run(args, framework, name, env_extra, mode, index, timeout):
    script = os.path.join(HERE, f"{framework}_step.py")
    cmd = [args.python, script] + (["--steps", "3", "--warmup", "1", "--width", "1024"]
                                   if args.quick else [])
    env = dict(os.environ, **env_extra)
    logdir = os.path.join(args.work, f"{framework}-{index}")
    if mode is not None:
        cmd = [args.hbm, "run", "--logdir", logdir] + (["--mode", mode] if mode else []) + \
              ["--"] + cmd
    t0 = time.monotonic()
    rc, out, err = run_process(cmd, env, timeout)
    row = {"framework": framework, "name": name, "env": env_extra,
           "allocator": "own" if mode is None else f"hbm ({mode or 'from the variables'})",
           "command": " ".join(cmd), "seconds": round(time.monotonic() - t0, 2), "exit": rc}
    row["step"] = step_result(out)
    side = hbm_side(args.hbm, logdir, err) if mode is not None and rc not in (None, 77) else None
    if side is not None:
        row["hbm"] = side
    row["status"] = status_of(rc, row["step"], side)
    if row["status"] in ("failed", "timeout", "skipped"):
        row["stderr_tail"] = err.strip().splitlines()[-12:]
    row["cannot_run"] = cannot_run(rc, out + err)
    return row


def numbers(row):
    """A run's step time and peak reserved bytes, for the log."""
    step, report = row.get("step") or {}, (row.get("hbm") or {}).get("report") or {}
    reserved = report.get("peak_reserved_bytes") if "hbm" in row else (
        step.get("max_memory_reserved") or (step.get("memory_stats") or {}).get(
            "peak_bytes_reserved") or (step.get("memory_stats") or {}).get("peak_pool_bytes"))
    parts = []
    if step.get("step_ms") is not None:
        parts.append(f"step {step['step_ms']:.2f} ms")
    if reserved is not None:
        parts.append(f"peak reserved {reserved / 2**20:.0f} MiB")
    if step.get("ooms") or report.get("ooms"):
        parts.append(f"OOMs {step.get('ooms') or 0} (hbm: {report.get('ooms', '-')})")
    return ", ".join(parts)


def write(path, rows, extra):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(dict(extra, runs=rows), f, indent=1)
    os.replace(tmp, path)


def parse():
    p = tool_parser("--hbm", "--python", "--work", "--out")
    p.add_argument("--run-timeout", type=float, default=45)
    p.add_argument("--frameworks", default="torch,jax")
    p.add_argument("--quick", action="store_true", help="a smaller model, fewer steps")
    return p.parse_args()


def main():
    args = parse()
    signal.signal(signal.SIGTERM, lambda *_: (_child and os.killpg(_child.pid, signal.SIGKILL),
                                              sys.exit(143)))
    os.makedirs(args.work, exist_ok=True)
    deadline = time.monotonic() + args.budget
    frameworks = args.frameworks.split(",")
    plan = interleave([[(fw, i, r) for i, r in enumerate(runs_of(fw))] for fw in frameworks])
    rows, cannot = [], {}
    for fw, i, (name, env, mode) in plan:
        left = deadline - time.monotonic()
        if fw in cannot or left < 10:
            why = cannot.get(fw) or "the step's time budget was spent"
            rows.append({"framework": fw, "name": name, "env": env, "status":
                         "skipped" if fw in cannot else "not run", "reason": why})
        else:
            row = one_run(args, fw, name, env, mode, i, min(args.run_timeout, left))
            rows.append(row)
            reason = row.pop("cannot_run")
            if i == 0 and reason:  # then the framework is not here at all
                cannot[fw] = row["reason"] = reason
                row["status"] = "skipped"
            elif row["status"] == "skipped":  # it ran alone, but not like this: a failure
                row["status"] = "failed"
                row["reason"] = f"the first run ran, this one could not: {reason}"
            print(f"  {fw:5s} {name:52s} {row['status']:8s} {row['seconds']:5.1f}s {numbers(row)}",
                  flush=True)
        write(args.out, rows, {"python": args.python, "budget_seconds": args.budget})
    for fw, why in cannot.items():
        print(f"skipped: {fw}: {why}")
    return exit_status(rows, "ok")


if __name__ == "__main__":
    sys.exit(main())
