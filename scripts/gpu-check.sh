#!/usr/bin/env bash
# gpu-check.sh — hbm on a real NVIDIA GPU, in one go, within 8 minutes (issue 27): for the few
# minutes a GPU machine is lent, prepared and tested on machines without one.
#
# Steps, each with its own time budget (a failed or timed-out step is recorded and the next
# one runs; the whole never passes HBM_GPU_CHECK_BUDGET, default 460 s):
#   env         what the machine has: GPU, driver, Python, PyTorch, JAX, compilers, XProf
#   build       hbm's plain build (without the viewer: its page needs npm) in build-gpu/, with
#               the Debian packages gpu-prepare.sh carried where the machine lacks them; when
#               the build fails, the binaries built beforehand (.gpu/prebuilt) are used
#   cuda-tests  ctest -L cuda (the driver double's tests and test_alloc_cuda_gpu, which must
#               pass, not skip, on a GPU)
#   replay      bench_gpu_replay: the allocation logs (.gpu/traces, else ../shared/traces, else
#               tests/data/replay) through hbm's five modes on the GPU and beside the driver's
#               own cuMemAlloc and cuMemAllocAsync: time per operation, memory reserved
#   frameworks  a small PyTorch and a small JAX training step (scripts/gpu/*_step.py) under
#               their own allocators and under `hbm run` in every mode and with the seeds'
#               variables: peak reserved, step time, OOMs, whether the profiles open in
#               `hbm report`
#   profiles    jax.profiler.trace and torch.cuda.memory._dump_snapshot of the same steps:
#               `hbm report` must equal XProf's conversion and memory_viz's peak
#
# Results: DIR/summary.json (every step: status, seconds, budget, its numbers) and
# DIR/gpu-check.log (everything printed), DIR = $OUT when set, else build-gpu/results.
# The first line printed says whether there is a GPU. Exit status: 0 every step passed (or
# was skipped with its reason), 1 a step failed, 2 usage, 3 no GPU.
#
# Knobs: HBM_GPU_CHECK_DRIVER=PATH  use this libcuda.so.1 (tests/fakecuda's double: the
#          tests run every step here that can run on it)
#        HBM_GPU_CHECK_BUDGET=S     total seconds (default 460)
#        HBM_GPU_CHECK_<STEP>_BUDGET=S  one step's budget (e.g. HBM_GPU_CHECK_REPLAY_BUDGET)
#        HBM_GPU_CHECK_BUILD=DIR    build directory (default build-gpu; an existing one is only
#                                   rebuilt, with its own configuration)
#        HBM_GPU_CHECK_USE_PREBUILT=1  no build: .gpu/prebuilt's binaries
#        HBM_GPU_CHECK_PYTHON=PY    the Python with the frameworks (default python3)
#        HBM_GPU_CHECK_STEPS=a,b    only these steps
#        HBM_GPU_CHECK_TRACES=DIR   the allocation logs to replay
#        HBM_GPU_CHECK_QUICK=1      smaller models, fewer repeats (the tests use it)
#        HBM_GPU_CHECK_ALLOW_CPU=1  JAX's trace on the CPU (the tests use it; there is no GPU)
# Usage: scripts/gpu-check.sh [--step NAME]   (--step: one step, as the script runs it)
set -uo pipefail # no -e: a failed step is a result, not the end
root=$(cd "$(dirname "$0")/.." && pwd)
gpu=$root/scripts/gpu
out=${OUT:-$root/build-gpu/results}
work=${HBM_GPU_CHECK_WORK:-$root/build-gpu/work}
build=${HBM_GPU_CHECK_BUILD:-$root/build-gpu}
python=${HBM_GPU_CHECK_PYTHON:-python3}
carried=$root/.gpu
export LC_ALL=C

# ---- the steps (each run as `gpu-check.sh --step NAME`, under timeout) ----

say() { echo "$*"; }
skip() { echo "skipped: $*"; exit 77; }

step_env() {
  local facts=$work/steps/env.json
  {
    echo "python: $($python --version 2>&1)"
    for m in torch jax jaxlib jax-cuda13-plugin xprof protobuf six numpy; do
      echo "$m: $(timeout 10 "$python" -c "import importlib.metadata as m; print(m.version('$m'))" 2>&1 | tail -1)"
    done
    echo "torch.cuda: $(timeout 15 "$python" -c 'import torch; print(torch.version.cuda, torch.cuda.is_available())' 2>&1 | tail -1)"
    echo "jax backend: $(timeout 15 "$python" -c 'import jax; print(jax.default_backend(), jax.devices())' 2>&1 | tail -1)"
    for tool in cmake cc gcc clang nvcc; do
      echo "$tool: $(command -v $tool >/dev/null && $tool --version 2>&1 | grep -m1 -E '[0-9]+\.[0-9]+' || echo none)"
    done
    echo "pkg-config: $(command -v pkg-config || echo none)"
    echo "protoc-c: $(command -v protoc-c || echo none)"
    echo "node/npm: $(command -v node || echo none) $(command -v npm || echo none)"
    echo "cpus: $(nproc)"
    echo "nvidia-smi: $(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 | head -2 | tr '\n' ' ')"
    echo "carried: $(ls "$carried" 2>/dev/null | tr '\n' ' ')"
  } | tee "$work/env.txt"
  python3 "$gpu/summary.py" lines "$work/env.txt" >"$facts"
}

# The Debian packages hbm builds with, from .gpu/debs when the machine lacks them: unpacked
# into $work/deps (never into /), their .pc files pointed there. Writes $work/deps.env.
deps_from_debs() {
  local need=(libzstd zlib jansson libprotobuf-c cmocka) missing=()
  command -v pkg-config >/dev/null || missing+=(pkg-config)
  command -v protoc-c >/dev/null || missing+=(protoc-c)
  for m in "${need[@]}"; do pkg-config --exists "$m" 2>/dev/null || missing+=("$m"); done
  : >"$work/deps.env"
  if ((${#missing[@]} == 0)) && [[ ${HBM_GPU_CHECK_DEBS:-} != force ]]; then
    say "build dependencies: all here"
    return 0
  fi
  say "build dependencies missing: ${missing[*]}"
  ls "$carried"/debs/*.deb >/dev/null 2>&1 || { say "no .gpu/debs carried (scripts/gpu-prepare.sh)"; return 1; }
  local p=$work/deps
  rm -rf "$p" && mkdir -p "$p"
  for d in "$carried"/debs/*.deb; do dpkg-deb -x "$d" "$p" || return 1; done
  # Absolute links in the packages (zlib1g-dev's libz.so -> /lib/...) point into the tree.
  local link target
  while read -r link; do
    target=$(readlink "$link")
    [[ $target == /* ]] && ln -sfn "$p$target" "$link"
  done < <(find "$p" -type l)
  # The .pc files say prefix=/usr: point them at the unpacked tree.
  find "$p" -name '*.pc' -exec sed -i "s|=/usr|=$p/usr|; s|-I/usr/|-I$p/usr/|g; s|-L/usr/|-L$p/usr/|g" {} +
  local lib=$p/usr/lib/x86_64-linux-gnu
  cat >"$work/deps.env" <<EOF
export PATH="$p/usr/bin:\$PATH"
export PKG_CONFIG_PATH="$lib/pkgconfig:$p/usr/share/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
export CMAKE_PREFIX_PATH="$p/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export CPATH="$p/usr/include\${CPATH:+:\$CPATH}"
export LIBRARY_PATH="$lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export HBM_GPU_DEPS_LIB="$lib"
export LD_LIBRARY_PATH="$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" # protoc-c, pkgconf
EOF
  [[ -x $p/usr/bin/pkgconf && ! -e $p/usr/bin/pkg-config ]] && ln -s pkgconf "$p/usr/bin/pkg-config"
  prefer_system_libs "$lib" "$p"
  say "unpacked $(ls "$carried"/debs/*.deb | wc -l) packages into $p"
}

# hbm links what is in DIR by full path, so its programs find DIR's libraries first (CMake's
# build RPATH), libhbm_preload.so too, inside the frameworks' processes: where the machine
# has a library itself (zlib, zstd), link with the machine's and drop the carried copy. Only
# what lies inside the unpacked tree PREFIX is ever changed or removed.
prefer_system_libs() { # DIR PREFIX
  command -v objdump >/dev/null || return 0
  local dev real soname system f
  for dev in "$1"/lib*.so; do
    real=$(readlink -f "$dev")
    [[ $real == "$2"/* ]] || continue
    soname=$(objdump -p "$real" 2>/dev/null | awk '$1 == "SONAME" {print $2}')
    system=$(ldconfig -p 2>/dev/null | awk -v s="$soname" '$1 == s && /x86-64/ {print $NF; exit}')
    [[ -n $soname && -n $system ]] || continue
    for f in "$1/$soname" "$real"; do
      [[ $(readlink -f "$f") == "$2"/* ]] && rm -f "$f"
    done
    ln -sfn "$system" "$dev"
    say "  $soname: the machine's own ($system)"
  done
}

# Not one of the run's steps: prepares the carried build dependencies alone (to try them).
step_deps() {
  mkdir -p "$work"
  deps_from_debs && cat "$work/deps.env"
}

# A directory of links to the shared libraries that the programs in $@ need and this
# machine lacks, taken from $1 (the unpacked packages' or the prebuilt's lib/): only those,
# so that the frameworks keep the machine's own zlib and friends. Prints the directory.
missing_libs_dir() {
  local from=$1 dir=$work/missing-libs
  shift
  mkdir -p "$dir"
  for prog in "$@"; do
    ldd "$prog" 2>/dev/null | awk '/not found/ {print $1}' | while read -r soname; do
      [[ -e $from/$soname ]] && ln -sf "$from/$soname" "$dir/$soname"
    done
  done
  echo "$dir"
}

build_once() { # BUILD_DIR [cmake args]: configures only a fresh directory
  local dir=$1
  shift
  if [[ -f $dir/CMakeCache.txt ]]; then
    cmake --build "$dir" -j"$(nproc)"
  else
    HBM_WERROR=OFF "$root/scripts/build.sh" "$dir" -DHBM_VIEWER=OFF "$@"
  fi
}

# The plain build; then without cuda.h (a driver header hbm's declarations disagree with);
# then the prebuilt binaries. Writes $work/hbm.env for the steps after it.
step_build() {
  deps_from_debs || say "carrying on without them"
  # shellcheck disable=SC1091
  source "$work/deps.env"
  local log=$work/build.log status=built
  if [[ ${HBM_GPU_CHECK_USE_PREBUILT:-0} == 1 ]]; then
    : >"$log"
    build=$carried/prebuilt
    status="not built: HBM_GPU_CHECK_USE_PREBUILT=1, using .gpu/prebuilt"
  elif ! build_once "$build" >"$log" 2>&1; then
    say "the build failed: $(grep -m3 -E 'error|Error' "$log" | tr '\n' ' ')"
    say "again without cuda.h (-DHBM_CUDA_HEADERS=OFF)"
    build=$build-nocudah
    status="built without cuda.h"
    if ! build_once "$build" -DHBM_CUDA_HEADERS=OFF >>"$log" 2>&1; then
      tail -30 "$log"
      [[ -x $carried/prebuilt/hbm ]] || { say "build: failed, and no .gpu/prebuilt"; return 1; }
      status="failed; using .gpu/prebuilt (built on the preparing machine)"
      build=$carried/prebuilt
    fi
  fi
  say "build: $status in $build; $(grep -c 'warning:' "$log") compiler warnings"
  local hbm=$build/hbm bench=$build/bench/bench_gpu_replay ld libs=${HBM_GPU_DEPS_LIB:-}
  [[ -x $bench ]] || bench=$build/bench_gpu_replay # the prebuilt's flat layout
  [[ -z $libs || $build == "$carried/prebuilt" ]] && libs=$carried/prebuilt/lib
  ld=$(missing_libs_dir "$libs" "$hbm" "$bench" "$build"/libhbm_preload.so \
    "$build"/test_alloc_cuda "$build"/tests/test_alloc_cuda)
  cat >"$work/hbm.env" <<EOF
export HBM_BIN="$hbm" HBM_BENCH_REPLAY="$bench" HBM_BUILD_DIR="$build"
export LD_LIBRARY_PATH="\${LD_LIBRARY_PATH:+\$LD_LIBRARY_PATH:}$ld"
EOF
  # shellcheck disable=SC1091
  source "$work/hbm.env"
  "$hbm" info || { say "the hbm binary does not run here"; return 1; }
  [[ $status == built || ${HBM_GPU_CHECK_USE_PREBUILT:-0} == 1 ]] # else the step failed,
  # though the steps after it have binaries
}

step_cuda_tests() {
  local junit=$work/cuda-junit.xml
  if [[ ! -f $HBM_BUILD_DIR/CTestTestfile.cmake ]]; then # the prebuilt: no ctest there
    local t=$HBM_BUILD_DIR/test_alloc_cuda
    [[ -x $t ]] || skip "no test_alloc_cuda in $HBM_BUILD_DIR"
    HBM_DEVICE=cuda "$t" | tee "$work/cuda-tests.txt"
    local rc=${PIPESTATUS[0]}
    grep -q "^skipped: no GPU" "$work/cuda-tests.txt" && { say "test_alloc_cuda skipped on a GPU"; return 1; }
    return "$rc"
  fi
  rm -f "$junit"
  (cd "$HBM_BUILD_DIR" && ctest -L cuda -j4 --output-on-failure --timeout 120 --output-junit "$junit")
  local rc=$?
  python3 "$gpu/summary.py" junit "$junit" >"$work/steps/cuda-tests.json"
  # On a GPU the real-driver test must have run, not skipped.
  if grep -q '"test_alloc_cuda_gpu": "skipped"' "$work/steps/cuda-tests.json"; then
    say "test_alloc_cuda_gpu was skipped: the GPU did not answer hbm's CUDA backend"
    return 1
  fi
  return "$rc"
}

replay_logs() { # prints the logs to replay, one a line
  local dir=${HBM_GPU_CHECK_TRACES:-}
  if [[ -z $dir && -n $(ls "$carried"/traces/*.csv* 2>/dev/null) ]]; then
    mkdir -p "$work/traces"
    for f in "$carried"/traces/*.csv*; do
      case $f in
      *.gz) gzip -dc "$f" >"$work/traces/$(basename "$f" .gz)" ;;
      *) cp "$f" "$work/traces/" ;;
      esac
    done
    dir=$work/traces
  fi
  [[ -z $dir && -d $root/../shared/traces ]] && dir=$root/../shared/traces
  [[ -z $dir ]] && dir=$root/tests/data/replay && ls "$dir"/small.csv && return
  ls -S -r "$dir"/*.csv # smallest first: a spent budget leaves the most logs done
}

step_replay() {
  local logs budget=$((${STEP_SECONDS:-60} - 10)) repeat=5
  mapfile -t logs < <(replay_logs)
  ((${#logs[@]})) || { say "no allocation log to replay"; return 1; }
  if [[ ${HBM_GPU_CHECK_QUICK:-0} == 1 ]]; then
    repeat=1
    logs=("${logs[@]:0:3}")
  fi
  if [[ -n ${HBM_GPU_CHECK_DRIVER:-} ]]; then
    # The double as big as the largest log needs (its memory is never touched), its pools
    # reusing a stream's own frees at once as the driver does.
    export FAKECUDA_MEMORY=${FAKECUDA_MEMORY:-64G} FAKECUDA_POOL_STREAM_REUSE=1
  fi
  say "replaying ${#logs[@]} logs, ${budget}s"
  "$HBM_BENCH_REPLAY" --repeat "$repeat" --budget "$((budget > 5 ? budget : 5))" \
    --out "$work/steps/replay.json" "${logs[@]}"
}

step_frameworks() {
  local quick=()
  [[ ${HBM_GPU_CHECK_QUICK:-0} == 1 ]] && quick=(--quick)
  python3 "$gpu/frameworks.py" --hbm "$HBM_BIN" --python "$python" --work "$work/frameworks" \
    --out "$work/steps/frameworks.json" --budget "$((${STEP_SECONDS:-60} - 5))" "${quick[@]}"
}

step_profiles() {
  local extra=()
  [[ ${HBM_GPU_CHECK_QUICK:-0} == 1 ]] && extra+=(--quick)
  [[ ${HBM_GPU_CHECK_ALLOW_CPU:-0} == 1 ]] && extra+=(--allow-cpu)
  python3 "$gpu/profiles.py" --hbm "$HBM_BIN" --python "$python" --src "$root" \
    --work "$work/profiles" --out "$work/steps/profiles.json" --wheels "$carried/wheels" \
    --budget "$((${STEP_SECONDS:-60} - 5))" "${extra[@]}"
}

if [[ ${1:-} == --step ]]; then
  mkdir -p "$work/steps"
  # What the build step found; without it (a step run alone), the build directory's.
  export HBM_BIN=$build/hbm HBM_BENCH_REPLAY=$build/bench/bench_gpu_replay HBM_BUILD_DIR=$build
  # shellcheck disable=SC1091
  [[ -f $work/hbm.env ]] && source "$work/hbm.env"
  "step_${2//-/_}"
  exit $?
fi
[[ $# -eq 0 ]] || { echo "usage: scripts/gpu-check.sh [--step NAME]" >&2; exit 2; }

# ---- the run ----

start=$(date +%s)
deadline=$((start + ${HBM_GPU_CHECK_BUDGET:-460}))
mkdir -p "$out" "$work/steps"
rm -f "$work"/steps/* "$work"/steps.jsonl "$work/hbm.env"
log=$out/gpu-check.log
exec > >(tee "$log") 2>&1
tee_pid=$!
finish() { # the exit status, once the log has everything
  exec 1>&- 2>&-
  wait "$tee_pid" 2>/dev/null
  exit "$1"
}

# The first line: is there a GPU?
if [[ -n ${HBM_GPU_CHECK_DRIVER:-} ]]; then
  export LD_LIBRARY_PATH=$(dirname "$HBM_GPU_CHECK_DRIVER")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if command -v python3 >/dev/null; then
  probe=$(python3 "$gpu/probe.py" "${HBM_GPU_CHECK_DRIVER:-libcuda.so.1}" 2>&1)
  has_gpu=$?
else
  probe='{"gpu": false, "reason": "no python3 to ask the driver with"}'
  has_gpu=3
fi
if ((has_gpu != 0)); then
  reason=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["reason"])' <<<"$probe" 2>/dev/null ||
    echo "the probe failed: $(tail -1 <<<"$probe" | tr -d '"\\')")
  echo "gpu-check: no GPU: $reason"
  python3 -c 'import json, sys; json.dump({"gpu": False, "reason": sys.argv[2], "steps": [],
    "exit_status": 3}, open(sys.argv[1], "w"), indent=1)' "$out/summary.json" "$reason" ||
    printf '{"gpu": false, "reason": "%s", "steps": [], "exit_status": 3}\n' \
      "$(tr -d '"\\\000-\037' <<<"$reason")" >"$out/summary.json"
  finish 3
fi
echo "$probe" >"$work/probe.json"
echo "gpu-check: GPU: $(python3 -c 'import json, sys; print(json.load(sys.stdin)["line"])' <<<"$probe")"
echo "gpu-check: results in $out (budget $((deadline - start)) s)"

# name budget reserve: the reserve is what the steps after it are sure to keep.
# What the steps after each are sure to keep: build 60, cuda-tests 30, replay 30, frameworks
# 60, profiles 40 seconds (expected on an H200: about 15, 60, 20, 60, 150 and 40).
steps=(env:40:220 build:150:160 cuda-tests:90:130 replay:75:100 frameworks:170:40 profiles:60:0)
want=${HBM_GPU_CHECK_STEPS:-}
failed=0
for s in "${steps[@]}"; do
  IFS=: read -r name budget reserve <<<"$s"
  [[ -z $want || ,$want, == *,$name,* ]] || continue
  own=HBM_GPU_CHECK_${name^^}_BUDGET # e.g. HBM_GPU_CHECK_REPLAY_BUDGET: this step's own
  own=${own//-/_}
  budget=${!own:-$budget}
  left=$((deadline - $(date +%s) - reserve))
  ((budget < left)) || budget=$left
  echo "== $name (up to ${budget}s)"
  t0=$(date +%s)
  if ((budget < 5)); then
    rc=-1
  else
    STEP_SECONDS=$budget timeout --kill-after=5 "$budget" \
      bash "$root/scripts/gpu-check.sh" --step "$name" >"$work/$name.out" 2>&1
    rc=$?
  fi
  cat "$work/$name.out" 2>/dev/null
  python3 "$gpu/summary.py" record "$work" "$name" "$rc" "$(($(date +%s) - t0))" "$budget"
  case $rc in 0 | 77) ;; *) failed=1 ;; esac
  python3 "$gpu/summary.py" write "$work" "$out/summary.json" "$failed" "$(($(date +%s) - start))"
done
python3 "$gpu/summary.py" write "$work" "$out/summary.json" "$((failed ? 1 : 0))" \
  "$(($(date +%s) - start))"
echo "gpu-check: $((failed ? 1 : 0)) ($(($(date +%s) - start)) s); summary in $out/summary.json"
finish $((failed ? 1 : 0))
