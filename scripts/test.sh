#!/usr/bin/env bash
# Runs every test of hbm: installs what is missing, then builds and runs the suite three
# times — plain, under ASan+UBSan, under TSan — and gives each fuzzer a short run on top of
# its corpus. Usage: scripts/test.sh [--quick]   (--quick: the plain build only)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
scripts/web-deps.sh 2>/dev/null || true

scripts/format.sh
jobs=$(nproc)
passed=0 # tests run and passed over every suite (a failure stops the script)
run_suite() { # name, build dir, cmake args...
  local name=$1 dir=$2
  shift 2
  echo "== $name build"
  scripts/build.sh "$dir" "$@"
  echo "== $name tests"
  (cd "$dir" && ctest --output-on-failure -j"$jobs" --timeout 900)
  passed=$((passed + $(cd "$dir" && ctest -N | sed -n 's/^Total Tests: //p')))
}

run_suite "plain" build
if [[ "${1:-}" != "--quick" ]]; then
  # Leak checking stays on; the sanitizer builds skip the browser tests (Chromium itself is
  # not what is under test there).
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    HBM_SKIP_BROWSER=1 run_suite "asan+ubsan" build-asan -DHBM_SANITIZE=address -DHBM_BENCH=OFF
  TSAN_OPTIONS=halt_on_error=1 HBM_SKIP_BROWSER=1 \
    run_suite "tsan" build-tsan -DHBM_SANITIZE=thread -DHBM_BENCH=OFF
  scripts/fuzz.sh 20
fi
echo "all test suites passed"
echo "tests: $passed passed, 0 failed"
