"""The profiles step of scripts/gpu-check.sh: the frameworks' own profiles of the same small
training steps, read by `hbm report` and checked against the frameworks' own tools.

  - jax.profiler.trace of jax_step.py: `hbm report` on its .xplane.pb must equal XProf's own
    conversion of the same file (tests/xprof_compare.py: every program's peak, unpadded
    peak, arguments and buffers at the peak, every allocator's peak in use), with XProf from
    the wheels gpu-prepare.sh carries when this Python has none;
  - torch.cuda.memory._dump_snapshot of torch_step.py: `hbm report`'s peak in use must equal
    memory_viz's (snapshot_peak.py, its Active Memory Timeline's rule), and is shown beside
    PyTorch's own torch.cuda.max_memory_allocated.

Usage: python3 profiles.py --hbm HBM --python PY --src REPO --work DIR --out JSON
                           --budget SECONDS [--wheels DIR] [--allow-cpu] [--quick]
Exit status 0 when both compared equal, 77 when neither could run here, 1 otherwise."""
import glob
import json
import os
import re
import subprocess
import sys
import time

from common import cannot_run, exit_status, step_result, tool_parser

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, timeout, env=None):
    """(returncode or None on timeout, stdout + stderr)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return done.returncode, done.stdout + done.stderr
    except OSError as e:  # no such program
        return 127, str(e)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + (e.stderr or b"")
        return None, out.decode(errors="replace") if isinstance(out, bytes) else out


def tail(text, n=12):
    return text.strip().splitlines()[-n:]


def xprof_env(args):
    """An environment whose Python imports XProf: this Python's own, else the carried wheels
    installed into the work directory (for this comparison only: PYTHONPATH)."""
    probe = [args.python, "-c", "import xprof.convert.raw_to_tool_data"]
    if run(probe, 60)[0] == 0:
        return dict(os.environ), "this Python's"
    wheels = sorted(glob.glob(os.path.join(args.wheels or "", "*.whl")))
    if not wheels:
        return None, "no xprof in this Python and no wheels carried (scripts/gpu-prepare.sh)"
    site = os.path.join(args.work, "xprof-site")
    rc, out = run([args.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                   "--no-compile", "--target", site] + wheels, 120)
    if rc != 0:
        return None, f"installing the carried wheels failed: {' '.join(tail(out, 3))}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [site] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    if run(probe, 60, env)[0] != 0:
        return None, "the carried xprof does not import: " + " ".join(tail(run(probe, 60, env)[1], 3))
    return env, "carried wheels: " + ", ".join(os.path.basename(w) for w in wheels)


def jax_trace(args, deadline):
    logdir = os.path.join(args.work, "jax_trace")
    cmd = [args.python, os.path.join(HERE, "jax_step.py"), "--trace", logdir, "--warmup", "1",
           "--steps", "3"] + (["--width", "512"] if args.quick else [])
    cmd += ["--allow-cpu"] if args.allow_cpu else []
    rc, out = run(cmd, max(5, deadline - time.monotonic()))
    row = {"name": "jax.profiler.trace vs XProf", "command": " ".join(cmd)}
    if cannot_run(rc, out):
        return dict(row, status="skipped", reason=cannot_run(rc, out))
    files = sorted(glob.glob(os.path.join(logdir, "plugins/profile/*/*.xplane.pb")))
    if rc != 0 or not files:
        return dict(row, status="failed", reason=f"jax_step.py exited {rc}, {len(files)} "
                    ".xplane.pb written", output=tail(out))
    row["xplane"] = files[0]
    rc, out = run([args.hbm, "report", "--json", files[0]], 120)
    row["report_opens"] = rc == 0
    env, row["xprof"] = xprof_env(args)
    if env is None:
        return dict(row, status="failed" if rc != 0 else "skipped", reason=row["xprof"])
    compare = os.path.join(args.src, "tests", "xprof_compare.py")
    rc, out = run([args.python, compare, args.hbm, files[0]],
                  max(5, deadline - time.monotonic()), env)
    found = re.search(r"(\d+) programs and allocators compared, (\d+) unexplained", out)
    row["compared"] = int(found.group(1)) if found else 0
    row["differences"] = [line for line in out.splitlines() if line.startswith("DIFFERENT:")]
    row["status"] = "passed" if rc == 0 and found else "failed"
    if row["status"] == "failed":
        row["output"] = tail(out, 20)
    return row


def torch_snapshot(args, deadline):
    snapshot = os.path.join(args.work, "torch_snapshot.pickle")
    cmd = [args.python, os.path.join(HERE, "torch_step.py"), "--snapshot", snapshot,
           "--warmup", "1", "--steps", "3"] + (["--width", "512"] if args.quick else [])
    rc, out = run(cmd, max(5, deadline - time.monotonic()))
    row = {"name": "torch snapshot vs memory_viz", "command": " ".join(cmd)}
    if cannot_run(rc, out):
        return dict(row, status="skipped", reason=cannot_run(rc, out))
    if rc != 0 or not os.path.exists(snapshot):
        return dict(row, status="failed", reason=f"torch_step.py exited {rc}", output=tail(out))
    result = step_result(out) or {}
    row["max_memory_allocated"] = result.get("max_memory_allocated")
    rc, out = run([args.python, os.path.join(HERE, "snapshot_peak.py"), snapshot], 120)
    row["memory_viz"] = json.loads(out) if rc == 0 else {"error": tail(out, 3)}
    rc, out = run([args.hbm, "report", "--json", snapshot], 120)
    row["report_opens"] = rc == 0
    hbm_peak = json.loads(out).get("peak_bytes") if rc == 0 else None
    row["hbm_peak_bytes"] = hbm_peak
    viz_peak = row["memory_viz"].get("peak_bytes")
    row["status"] = "passed" if hbm_peak is not None and hbm_peak == viz_peak else "failed"
    return row


def parse():
    p = tool_parser("--hbm", "--python", "--src", "--work", "--out")
    p.add_argument("--wheels")
    p.add_argument("--allow-cpu", action="store_true", help="JAX's trace on the CPU (tests)")
    p.add_argument("--quick", action="store_true")
    return p.parse_args()


def main():
    args = parse()
    os.makedirs(args.work, exist_ok=True)
    start = time.monotonic()
    rows = []
    # Half the budget each, the second also gets what the first left.
    for i, check in enumerate((jax_trace, torch_snapshot)):
        deadline = start + args.budget * (i + 1) / 2
        rows.append(check(args, deadline))
        print(f"  {rows[-1]['name']:32s} {rows[-1]['status']}"
              f"{': ' + rows[-1]['reason'] if rows[-1].get('reason') else ''}", flush=True)
        with open(args.out, "w") as f:
            json.dump({"checks": rows}, f, indent=1)
    for r in rows:
        if r["status"] == "skipped":
            print(f"skipped: {r['name']}: {r['reason']}")
    return exit_status(rows, "passed")


if __name__ == "__main__":
    sys.exit(main())
