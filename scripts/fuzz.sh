#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for SECONDS (default 60), starting
# from its corpus in fuzz/corpus/<name>/. New inputs go to build-fuzz/corpus-<name>/; a crash
# stops the run with the input saved under build-fuzz/.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
CC=clang scripts/build.sh build-fuzz -DHBM_FUZZ=ON -DHBM_TESTS=OFF -DHBM_BENCH=OFF \
  -DHBM_VIEWER=ON -DCMAKE_C_COMPILER=clang
targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  mkdir -p "build-fuzz/corpus-$name" "fuzz/corpus/$name"
  echo "== fuzzing $name for ${seconds}s"
  log="build-fuzz/fuzz-$name.log"
  (cd build-fuzz && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
     "./fuzz/$t" -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=65536 \
     -print_final_stats=1 "corpus-$name" "../fuzz/corpus/$name") >"$log" 2>&1 || true
  grep -E '^(stat::number_of_executed_units|==[0-9]+==ERROR|SUMMARY)' "$log" || true
  # A sanitizer report, or an input libFuzzer saved as failing, fails the run.
  if grep -qE '^(==[0-9]+==ERROR|SUMMARY: )|runtime error:' "$log" ||
     ls build-fuzz/crash-* build-fuzz/leak-* build-fuzz/timeout-* >/dev/null 2>&1; then
    echo "fuzzer $name found a failing input (log: $log):"
    grep -m5 -E 'runtime error:|ERROR' "$log" || true
    ls build-fuzz/crash-* build-fuzz/leak-* build-fuzz/timeout-* 2>/dev/null || true
    exit 1
  fi
done
