#!/usr/bin/env bash
# The steps of the main job (scripts/run.sh), without installing or building: shows the device
# configuration, plans the seed's program as XLA HLO (compile time: it does not fit), runs it
# with profiling on (run time: the OOM), and prints the report of that run. The plan is written
# first so that the demo's run is the newest of the logdir: `hbm report LOGDIR` and the viewer
# open on the OOM the demo just printed; the plan is the other run in the viewer's Run selector.
# The browser test (tests/viewer_browser.sh) runs these same steps.
# Usage: scripts/main-job.sh HBM_BINARY LOGDIR
set -euo pipefail
hbm=$1 logdir=$2
cd "$(dirname "$0")/.."

echo "== hbm info"
"$hbm" info
echo
echo "== hbm plan examples/seed_oom.hlo --memory 16GiB --logdir $logdir   (compile time: does not fit)"
"$hbm" plan examples/seed_oom.hlo --memory 16GiB --logdir "$logdir" || [[ $? == 2 ]]
echo
echo "== hbm demo --logdir $logdir   (run time: the seed's program runs out of memory)"
"$hbm" demo --logdir "$logdir" || [[ $? == 1 ]]
echo
echo "== hbm report $logdir   (the demo's run, the newest)"
"$hbm" report "$logdir"
