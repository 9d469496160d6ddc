#!/usr/bin/env bash
# Installs what building and testing hbm needs on Debian, skipping what is already there.
# Usage: scripts/install-deps.sh [--test]   (--test adds the browser and fuzzing tools)
set -euo pipefail

packages=(build-essential cmake pkg-config clang libclang-rt-dev libzstd-dev libjansson-dev
          libmicrohttpd-dev libcmocka-dev libprotobuf-c-dev protobuf-c-compiler)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(chromium zstd clang-format)
fi
# Node.js may come from elsewhere than Debian (a newer npm cannot be installed over Debian's
# nodejs package): ask for Debian's only when the commands are missing.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq || true
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
