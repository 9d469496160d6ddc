#!/usr/bin/env bash
# Builds the benchmarks (RelWithDebInfo, no sanitizer) and runs every one the project has,
# printing their tables under a heading each: the bench/bench_*.c programs, then the
# bench/*_bench.sh scripts (which get the build directory). The allocator's benchmarks run
# over ../shared/traces/*.csv when that directory is there. BENCHMARKS.md quotes the output.
# Usage: scripts/bench.sh [BUILD_DIR] [NAME...]   (default build-bench; NAMEs pick benchmarks,
#        e.g. `scripts/bench.sh build-bench bench_replay bench_threads`)
set -uo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
dir=${1:-build-bench}
shift || true
only=("$@")
traces=("$src"/../shared/traces/*.csv)
[[ -e ${traces[0]} ]] || traces=()

wanted() { # name: empty selection means everything
  ((${#only[@]} == 0)) && return 0
  local n
  for n in "${only[@]}"; do [[ $n == "$1" ]] && return 0; done
  return 1
}

echo "== building benchmarks in $dir"
mkdir -p "$dir"
log=$dir/bench-build.log
if ! scripts/build.sh "$dir" -DHBM_BENCH=ON -DHBM_TESTS=OFF -DHBM_SANITIZE= >"$log" 2>&1; then
  echo "(build with the viewer failed, see $log: building without it)"
  scripts/build.sh "$dir" -DHBM_BENCH=ON -DHBM_TESTS=OFF -DHBM_SANITIZE= -DHBM_VIEWER=OFF \
    >>"$log" 2>&1 || { echo "build failed: $log"; exit 1; }
fi

echo
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)),"\
  "load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"

failed=0
run() { # title, command...
  echo
  echo "## $1"
  echo
  echo "\$ ${*:2}" | sed "s#$src/##g"
  echo
  if ! "${@:2}"; then
    echo "(failed with status $?)"
    failed=1
  fi
}

for exe in "$dir"/bench/bench_*; do
  [[ -x $exe && -f $exe ]] || continue
  name=$(basename "$exe")
  wanted "$name" || continue
  case $name in
  bench_replay)
    if ((${#traces[@]})); then
      run "$name" "$exe" --repeat 9 "${traces[@]}"
    else
      echo; echo "## $name"; echo; echo "(skipped: no ../shared/traces/*.csv)"
    fi
    ;;
  bench_threads) run "$name" "$exe" --runs 5 "${traces[@]}" ;;
  *) run "$name" "$exe" ;;
  esac
done

for script in bench/*_bench.sh; do
  [[ -f $script ]] || continue
  name=$(basename "$script" .sh)
  wanted "$name" || continue
  run "$name" bash "$script" "$dir"
done
exit $failed
