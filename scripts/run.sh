#!/usr/bin/env bash
# The main job: installs what is missing, builds hbm, shows the device configuration, runs the
# seed's OOM program with profiling on, prints the report of that profile, plans the seed's
# program as XLA HLO, then serves the Memory Viewer on http://127.0.0.1:6006 (Ctrl-C stops).
# Usage: scripts/run.sh [--no-serve]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/web-deps.sh
scripts/build.sh build >/dev/null
hbm=build/hbm
logdir=${HBM_DEMO_LOGDIR:-/tmp/hbm}

echo "== hbm info"
$hbm info
echo
echo "== hbm demo --logdir $logdir   (the seed's program: expected to run out of memory)"
$hbm demo --logdir "$logdir" || true
echo
echo "== hbm report $logdir"
$hbm report "$logdir"
echo
echo "== hbm plan examples/seed_oom.hlo --memory 16GiB --logdir $logdir"
$hbm plan examples/seed_oom.hlo --memory 16GiB --logdir "$logdir" || true
if [[ "${1:-}" != "--no-serve" ]]; then
  echo
  echo "== hbm view --logdir $logdir --port 6006"
  exec $hbm view --logdir "$logdir" --port 6006
fi
