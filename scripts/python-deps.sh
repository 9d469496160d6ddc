#!/usr/bin/env bash
# Creates the Python virtual environment .venv/ (git-ignored) and installs the pinned test
# requirements (python/requirements-test.txt) into it; does nothing when they are already
# installed. Usage: scripts/python-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
req=python/requirements-test.txt
venv=.venv
stamp=$venv/.hbm-requirements
if [[ ! -x $venv/bin/python ]]; then
  echo "python-deps: creating $venv"
  python3 -m venv "$venv"
fi
if [[ -f $stamp ]] && cmp -s "$req" "$stamp"; then
  exit 0
fi
echo "python-deps: installing $(grep -cv '^#' "$req") pinned packages into $venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
cp "$req" "$stamp"
