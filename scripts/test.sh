#!/usr/bin/env bash
# Runs every test of hbm: installs what is missing (Debian packages, npm packages, the Python
# virtual environment with JAX), then builds and runs the C suite five times — plain, under
# ASan+UBSan, under TSan, and Release builds with gcc and with clang —, the Python tests (the
# JAX zoo: real XLA programs compiled on the CPU, hbm checked against XLA's own numbers;
# `pip install .`), and gives each fuzzer a short run on top of its corpus. Warnings are
# fatal in every build (scripts/build.sh). Every suite runs even when an earlier one failed;
# the last line is `tests: N passed, M failed, K skipped` over all of them, and the exit
# status is 1 if any test failed. Usage: scripts/test.sh [--quick]   (--quick: the plain
# build and Python only)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
scripts/web-deps.sh

scripts/format.sh
jobs=$(nproc)
results=()     # SUITE=JUNIT.xml for the summary
extras=()      # --extra NAME:P:F:S for suites without a JUnit file
run_suite() { # name, build dir, cmake args...
  local name=$1 dir=$2
  shift 2
  echo "== $name build"
  if ! scripts/build.sh "$dir" "$@"; then
    echo "== $name: the build failed"
    extras+=(--extra "$name-build:0:1:0")
    return
  fi
  echo "== $name tests"
  rm -f "$dir/junit.xml"
  (cd "$dir" && ctest --output-on-failure -j"$jobs" --timeout 900 \
     --output-junit "$PWD/junit.xml") || true
  results+=("$name=$dir/junit.xml")
}

# The Python tests first (on the plain build): they build the JAX zoo under build/, which the
# C suites' zoo test reads too (HBM_JAX_ZOO), so no suite skips it for want of it.
echo "== python tests (JAX zoo, hbm vs XLA; the Python package)"
rm -f build/pytest.xml
if scripts/build.sh build; then
  HBM_BIN=$PWD/build/hbm HBM_BUILD_DIR=$PWD/build .venv/bin/python -m pytest tests/python -q \
    -p no:cacheprovider -rs --junitxml=build/pytest.xml || true
  results+=("python=build/pytest.xml")
else
  extras+=(--extra "python:0:1:0")
fi
export HBM_JAX_ZOO=$PWD/build/jax_zoo
run_suite "plain" build

if [[ "${1:-}" != "--quick" ]]; then
  # Leak checking stays on; the sanitizer builds skip the browser tests (Chromium itself is
  # not what is under test there) and say so in the summary.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    HBM_SKIP_BROWSER=1 run_suite "asan+ubsan" build-asan -DHBM_SANITIZE=address -DHBM_BENCH=OFF
  TSAN_OPTIONS=halt_on_error=1 HBM_SKIP_BROWSER=1 \
    run_suite "tsan" build-tsan -DHBM_SANITIZE=thread -DHBM_BENCH=OFF
  # Release builds as packagers make them (cmake -DCMAKE_BUILD_TYPE=Release), with gcc and
  # with clang, warnings fatal: a warning either compiler shows fails CI, not a user's build.
  # Their tests run too (about a minute each; the browser test once is enough: plain build).
  for cc in gcc clang; do
    HBM_BUILD_TYPE=Release HBM_SKIP_BROWSER=1 \
      run_suite "release-$cc" "build-release-$cc" -DCMAKE_C_COMPILER="$cc"
  done
  n_fuzz=$(ls fuzz/fuzz_*.c | wc -l)
  if scripts/fuzz.sh 20; then
    extras+=(--extra "fuzz:$n_fuzz:0:0")
  else
    extras+=(--extra "fuzz:0:1:0")
  fi
fi
python3 scripts/test-summary.py "${extras[@]}" "${results[@]}"
