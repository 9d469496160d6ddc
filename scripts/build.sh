#!/usr/bin/env bash
# Configures and builds hbm into a build directory, with warnings fatal (-DHBM_WERROR=ON; the
# CMake default is OFF, for packagers; HBM_WERROR=OFF in the environment or -DHBM_WERROR=OFF
# among the arguments turns it off here too).
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]   (default BUILD_DIR: build)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="${HBM_BUILD_TYPE:-RelWithDebInfo}" \
  -DHBM_WERROR="${HBM_WERROR:-ON}" "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
