#!/usr/bin/env bash
# The main job: installs what is missing, builds hbm, shows the device configuration, plans the
# seed's program as XLA HLO (compile time), runs it with profiling on (run time: the OOM),
# prints the report of that run, then serves the Memory Viewer on http://127.0.0.1:6006
# (Ctrl-C stops). The plan is written first so that the demo's run is the newest of the
# logdir: `hbm report DIR` and the viewer open on the OOM the demo just printed; the plan is
# the other run in the viewer's Run selector.
# Usage: scripts/run.sh [--no-serve]   (the logdir: $HBM_PROFILE_DIR, else /tmp/hbm)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/web-deps.sh
scripts/build.sh build >/dev/null
hbm=build/hbm
logdir=${HBM_PROFILE_DIR:-/tmp/hbm}

echo "== hbm info"
$hbm info
echo
echo "== hbm plan examples/seed_oom.hlo --memory 16GiB --logdir $logdir   (compile time: does not fit)"
$hbm plan examples/seed_oom.hlo --memory 16GiB --logdir "$logdir" || true
echo
echo "== hbm demo --logdir $logdir   (run time: the seed's program runs out of memory)"
$hbm demo --logdir "$logdir" || true
echo
echo "== hbm report $logdir   (the demo's run, the newest)"
$hbm report "$logdir"
if [[ "${1:-}" != "--no-serve" ]]; then
  echo
  echo "== hbm view --logdir $logdir --port 6006   (opens on the demo's OOM; the plan is the other run)"
  exec $hbm view --logdir "$logdir" --port 6006
fi
