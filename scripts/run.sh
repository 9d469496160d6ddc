#!/usr/bin/env bash
# The main job: installs what is missing, builds hbm, then scripts/main-job.sh — the device
# configuration, the seed's HLO plan (compile time), the seed's OOM demo with profiling on
# (run time) and its report — and serves the Memory Viewer on http://127.0.0.1:6006, which
# opens on the demo's OOM (Ctrl-C stops).
# Usage: scripts/run.sh [--no-serve]   (the logdir: $HBM_PROFILE_DIR, else /tmp/hbm)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/web-deps.sh
scripts/build.sh build >/dev/null
hbm=build/hbm
logdir=${HBM_PROFILE_DIR:-/tmp/hbm}

scripts/main-job.sh "$hbm" "$logdir"
if [[ "${1:-}" != "--no-serve" ]]; then
  echo
  echo "== hbm view --logdir $logdir --port 6006   (opens on the demo's OOM; the plan is the other run)"
  exec $hbm view --logdir "$logdir" --port 6006
fi
