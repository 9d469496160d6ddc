#!/usr/bin/env bash
# Installs what building and testing hbm needs on Debian, skipping what is already there:
# the Debian packages (compiler, libraries, with --test the fuzzing, formatting and browser
# tools) and, with --test or --python, the Python virtual environment .venv/ with JAX on the
# CPU, pytest and numpy (the test suite compiles real JAX programs and compares hbm with XLA).
# Waits for apt's lock when another apt is running instead of failing.
# Usage: scripts/install-deps.sh [--test] [--python]
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0 want_python=0
for arg in "$@"; do
  case $arg in
    --test) want_test=1 want_python=1 ;;
    --python) want_python=1 ;;
    *) echo "install-deps: unknown option $arg (expected --test or --python)" >&2; exit 2 ;;
  esac
done

packages=(build-essential cmake pkg-config clang libclang-rt-dev libzstd-dev zlib1g-dev
          libjansson-dev libmicrohttpd-dev libcmocka-dev libprotobuf-c-dev protobuf-c-compiler)
if ((want_test)); then
  packages+=(chromium zstd clang-format)
fi
if ((want_python)); then
  packages+=(python3 python3-venv)
fi
# Node.js may come from elsewhere than Debian (a newer npm cannot be installed over Debian's
# nodejs package): ask for Debian's only when the commands are missing.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  # python3/python3-venv may come from elsewhere (pyenv): a working `python3 -m venv` is enough.
  if [[ $p == python3 || $p == python3-venv ]] && python3 -c 'import venv, ensurepip' 2>/dev/null; then
    continue
  fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # Lock::Timeout makes apt wait for another apt (an unattended upgrade, a second install)
  # instead of failing with exit 100.
  apt_opts=(-o DPkg::Lock::Timeout=600 -o Acquire::Retries=3)
  $sudo apt-get "${apt_opts[@]}" update -qq || true
  $sudo apt-get "${apt_opts[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ((want_python)); then
  scripts/python-deps.sh
fi
