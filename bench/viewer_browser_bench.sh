#!/usr/bin/env bash
# viewer_browser_bench.sh — the page timings of the Memory Viewer on a profile of about 1M
# events: writes the logdir with bench_viewer --write, serves it with `hbm view` on a free
# loopback port, runs bench/viewer_browser_bench.mjs in headless Chromium, stops the server.
# Usage: bench/viewer_browser_bench.sh BUILD_DIR [EVENTS] [RUNS]
set -euo pipefail
build=$(cd "$1" && pwd) events=${2:-1000000} runs=${3:-5}
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/hbm-viewer-bench-XXXXXX")
pid=
cleanup() { [[ -n $pid ]] && kill -INT "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
"$build/bench/bench_viewer" --events "$events" --write "$work/logdir"
"$build/hbm" view --logdir "$work/logdir" --port 0 2>"$work/serve.log" &
pid=$!
url=
for _ in $(seq 100); do
  url=$(grep -o 'http://127.0.0.1:[0-9]*' "$work/serve.log" | head -1 || true)
  [[ -n $url ]] && break
  sleep 0.1
done
[[ -n $url ]] || { cat "$work/serve.log"; exit 1; }
node "$src/bench/viewer_browser_bench.mjs" --url "$url" --runs "$runs" \
  --profiledir "$work/chromium-profile" --chromium "${HBM_CHROMIUM:-/usr/bin/chromium}"
