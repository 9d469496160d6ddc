#!/usr/bin/env bash
# viewer_browser.sh — the Memory Viewer in headless Chromium (ctest entry). Writes the fixture
# logdir (test_viewer_api --write-fixtures) and the logdir of the main job's steps
# (scripts/main-job.sh, as scripts/run.sh runs them: the seed's plan, then its OOM demo),
# starts `hbm view` on a free port of 127.0.0.1 for each and another for an empty logdir,
# runs tests/browser/viewer.test.mjs (playwright-core),
# stops both servers with SIGINT and checks they exit 0. Screenshots: <build>/artifacts/viewer/.
# Usage: viewer_browser.sh HBM_BINARY SOURCE_DIR BUILD_DIR
# HBM_SKIP_BROWSER=1 skips it (the sanitizer builds do: Chromium is not what they test).
# A skip exits 77 (ctest's SKIP_RETURN_CODE): counted as skipped, not passed.
set -euo pipefail
hbm=$1 src=$2 build=$3

skip() { echo "viewer_browser: skipped ($1)"; exit 77; }
[[ "${HBM_SKIP_BROWSER:-0}" == 1 ]] && skip "HBM_SKIP_BROWSER=1"
chromium=${HBM_CHROMIUM:-/usr/bin/chromium}
[[ -x $chromium ]] || skip "no Chromium at $chromium: scripts/install-deps.sh --test installs it"
if "$hbm" view --logdir /nonexistent-hbm-viewer-check 2>&1 | grep "built without the viewer" >/dev/null; then
  skip "this hbm was built with -DHBM_VIEWER=OFF"
fi
fixtures=$build/tests/test_viewer_api
[[ -x $fixtures ]] || { echo "viewer_browser: $fixtures is missing"; exit 1; }
if [[ ! -d $src/web/node_modules/playwright-core ]]; then
  bash "$src/scripts/web-deps.sh"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/hbm-viewer-browser-XXXXXX")
artifacts=$build/artifacts/viewer
mkdir -p "$artifacts" "$work/logdir" "$work/empty" "$work/mainjob"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

"$fixtures" --write-fixtures "$work/logdir" 3000
# An RMM log (no reserved memory, no memory type recorded) in an older run of its own.
mkdir -p "$work/logdir/plugins/profile/2025_12_30_00_00_00"
cp "$src/tests/data/profile/small.csv" "$work/logdir/plugins/profile/2025_12_30_00_00_00/"
# The main job's steps, as scripts/run.sh runs them (a failure here fails the test).
bash "$src/scripts/main-job.sh" "$hbm" "$work/mainjob" >"$artifacts/main-job.log" 2>&1 ||
  { echo "viewer_browser: scripts/main-job.sh failed:"; tail -20 "$artifacts/main-job.log"; exit 1; }

# Starts `hbm view` on port 0 (the kernel picks a free one); sets $url from what it prints.
serve() {
  local logdir=$1 log=$2
  "$hbm" view --logdir "$logdir" --port 0 --host 127.0.0.1 2>"$log" &
  pids+=($!)
  for _ in $(seq 100); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$log" | head -1 || true)
    [[ -n $url ]] && return 0
    sleep 0.1
  done
  echo "viewer_browser: hbm view did not start:"; cat "$log"; exit 1
}
serve "$work/logdir" "$work/serve.log"
main_url=$url main_pid=${pids[0]}
# The "empty" logdir's one run is a link to a run outside it: skipped, and the page says so.
mkdir -p "$work/empty/plugins/profile" "$work/outside-run"
cp "$src/tests/data/profile/small.csv" "$work/outside-run/"
ln -s "$work/outside-run" "$work/empty/plugins/profile/linked_run"
serve "$work/empty" "$work/serve-empty.log"
empty_url=$url empty_pid=${pids[1]}
serve "$work/mainjob" "$work/serve-mainjob.log"
mainjob_url=$url mainjob_pid=${pids[2]}

status=0
node "$src/tests/browser/viewer.test.mjs" --url "$main_url" --empty-url "$empty_url" \
  --logdir "$work/logdir" --empty-logdir "$work/empty" --artifacts "$artifacts" \
  --mainjob-url "$mainjob_url" --mainjob-logdir "$work/mainjob" \
  --hbm "$hbm" --chromium "$chromium" --profiledir "$work/chromium-profile" || status=$?

# PyTorch memory snapshots (tests/browser/torch.test.mjs), in a logdir of their own.
mkdir -p "$work/torch/plugins/profile/run1"
cp "$src"/tests/data/torch/{small,two_devices}.pickle "$work/torch/plugins/profile/run1/"
serve "$work/torch" "$work/serve-torch.log"
torch_pid=${pids[-1]}
node "$src/tests/browser/torch.test.mjs" --url "$url" --logdir "$work/torch" --hbm "$hbm" \
  --artifacts "$artifacts" --chromium "$chromium" --profiledir "$work/chromium-torch" || status=$?
# Mode learn's step plan panel (tests/browser/step_plan.test.mjs), in a logdir of its own.
"$build/tests/test_viewer_step_plan" --write-fixtures "$work/learn"
serve "$work/learn" "$work/serve-learn.log"
learn_pid=${pids[-1]}
node "$src/tests/browser/step_plan.test.mjs" --url "$url" --artifacts "$artifacts" \
  --chromium "$chromium" --profiledir "$work/chromium-learn" || status=$?
# A real XProf profile (tests/browser/xplane.test.mjs): JAX's own when the venv has JAX.
xp=$work/xprof; mkdir -p "$xp/plugins/profile/r"
"$src/.venv/bin/python" "$src/tests/data/jax_xprof_profile.py" "$xp" >/dev/null 2>&1 ||
  cp "$src"/../shared/real/xprof/*gemm*.xplane.pb "$xp/plugins/profile/r/host.xplane.pb" ||
  echo "viewer_browser: no JAX and no shared XProf file: the XProf page is not checked"
if ls "$xp"/plugins/profile/*/*.xplane.pb >/dev/null 2>&1; then
  serve "$xp" "$work/serve-xprof.log"
  xp_pid=${pids[-1]}
  node "$src/tests/browser/xplane.test.mjs" --url "$url" --logdir "$xp" --hbm "$hbm" --chromium "$chromium" \
    --artifacts "$artifacts" --profiledir "$work/chromium-xprof" || status=$?
  kill -INT "$xp_pid"; wait "$xp_pid" || status=1
fi

# Ctrl-C stops the servers cleanly.
for pid in "$main_pid" "$empty_pid" "$mainjob_pid" "$torch_pid" "$learn_pid"; do
  kill -INT "$pid"
  rc=0
  wait "$pid" || rc=$?
  if ((rc != 0)); then
    echo "viewer_browser: hbm view exited $rc after SIGINT"; status=1
  fi
done
pids=()
echo "viewer_browser: screenshots in $artifacts"
exit $status
