#!/usr/bin/env bash
# Builds the benchmarks (RelWithDebInfo, no sanitizer) and runs every one the project has,
# printing their tables under a heading each: the bench/bench_*.c programs, then the
# bench/*_bench.sh scripts (which get the build directory). The allocator's benchmarks run
# over ../shared/traces/*.csv when that directory is there. BENCHMARKS.md quotes the output.
# Usage: scripts/bench.sh [BUILD_DIR] [NAME...]   (default build-bench; NAMEs pick benchmarks,
#        e.g. `scripts/bench.sh build-bench bench_replay bench_threads`)
# HBM_BENCH_OFFSET_REPLAY=CMD adds `side_by_side` (also a NAME): hbm against another
# allocator's replay program CMD, run as `CMD LOG` and printing its median ns/op (one untimed
# replay, 5 timed), a fresh process per allocator per log, 9 rounds, order rotated (bench/
# bench_replay.c --side-by-side), with hbm's arena alone (--ns-arena) timed beside them. The
# project ships no such program (BENCHMARKS.md says how the offset allocator's was built,
# outside the repository). `learn_table` and `side_by_side_learn` are mode learn's (the second
# also needs HBM_BENCH_OFFSET_REPLAY; HBM_BENCH_LEARN_LOGS=DIR adds DIR/*.csv to both).
# Every benchmark prints the machine's facts (cores, CPU, clocksource, TSC flags, load
# average); the script fails when any benchmark fails or measured nothing.
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
tsc_flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'tsc|constant_tsc|nonstop_tsc|tsc_known_freq' | xargs)
echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)),"\
  "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo unknown),"\
  "TSC flags: ${tsc_flags:-none}, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"

failed=0
run() { # title, command...
  echo
  echo "## $1"
  echo
  echo "\$ ${*:2}" | sed "s#$src/##g"
  echo
  "${@:2}"
  local status=$?
  if ((status != 0)); then
    echo "(failed with status $status)"
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
  bench_threads) run "$name" "$exe" --runs 15 "${traces[@]}" ;;
  *) run "$name" "$exe" ;;
  esac
done

if wanted side_by_side; then
  if [[ -n ${HBM_BENCH_OFFSET_REPLAY:-} ]] && ((${#traces[@]})); then
    run side_by_side "$dir/bench/bench_replay" --side-by-side "$HBM_BENCH_OFFSET_REPLAY" 9 "${traces[@]}"
  else
    echo; echo "## side_by_side"; echo
    echo "(not run: needs HBM_BENCH_OFFSET_REPLAY and ../shared/traces/*.csv)"
    ((${#only[@]})) && failed=1 # asked for by name: not run is a failure
  fi
fi

# Mode learn (BENCHMARKS.md "Mode learn"): its table over the logs, and (with the other
# allocator) its time side by side, the default mode beside them. HBM_BENCH_LEARN_LOGS=DIR adds
# DIR/*.csv (the multi-step logs bench/record_torch_steps.py records) to both.
learn_logs=("${traces[@]}")
if [[ -n ${HBM_BENCH_LEARN_LOGS:-} ]]; then
  for f in "$HBM_BENCH_LEARN_LOGS"/*.csv; do [[ -f $f ]] && learn_logs+=("$f"); done
fi
if wanted learn_table; then
  if ((${#traces[@]})); then
    run learn_table "$dir/bench/bench_replay" --learn "${learn_logs[@]}"
  else
    echo; echo "## learn_table"; echo; echo "(skipped: no ../shared/traces/*.csv)"
  fi
fi
if wanted side_by_side_learn; then
  if [[ -n ${HBM_BENCH_OFFSET_REPLAY:-} ]] && ((${#traces[@]})); then
    run side_by_side_learn "$dir/bench/bench_replay" --side-by-side-learn \
      "$HBM_BENCH_OFFSET_REPLAY" 9 "${learn_logs[@]}"
  else
    echo; echo "## side_by_side_learn"; echo
    echo "(not run: needs HBM_BENCH_OFFSET_REPLAY and ../shared/traces/*.csv)"
    ((${#only[@]})) && failed=1
  fi
fi

for script in bench/*_bench.sh; do
  [[ -f $script ]] || continue
  name=$(basename "$script" .sh)
  wanted "$name" || continue
  run "$name" bash "$script" "$dir"
done
exit $failed
