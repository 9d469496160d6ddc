#!/usr/bin/env bash
# xprof_compare.sh — hbm's Memory Viewer numbers against XProf's own conversion
# (tests/xprof_compare.py) on ../shared/real/xprof/*.{xplane,hlo_proto}.pb and on a profile JAX writes
# here with jax.profiler.trace (tests/data/jax_xprof_profile.py).
# Usage: xprof_compare.sh HBM_BINARY SOURCE_DIR BUILD_DIR
# Skips (exit 77) when no Python has the xprof package; CI installs it into .venv with
#   .venv/bin/pip install xprof==2.24.2
set -uo pipefail
hbm=$1 src=$2 build=$3
python=${HBM_XPROF_PYTHON:-$src/.venv/bin/python}
if ! [[ -x $python ]] || ! "$python" -c 'import xprof.convert.raw_to_tool_data' 2>/dev/null; then
  echo "skipped: no xprof in $python (pip install xprof==2.24.2 into .venv, or set HBM_XPROF_PYTHON)"
  exit 77
fi
files=()
shared=${HBM_SHARED_DIR:-$src/../shared}
for f in "$shared"/real/xprof/*.xplane.pb "$shared"/real/xprof/*.hlo_proto.pb; do [[ -f $f ]] && files+=("$f"); done
[[ ${#files[@]} -gt 0 ]] || echo "note: no $shared/real/xprof, comparing the JAX profile only"
if "$python" -c 'import jax' 2>/dev/null; then
  logdir=$build/xprof_compare_jax
  rm -rf "$logdir"
  # A failing setup must fail the test, not skip it.
  "$python" "$src/tests/data/jax_xprof_profile.py" "$logdir" || { echo "FAIL: JAX could not write a profile"; exit 1; }
  jax_file=$(find "$logdir" -name '*.xplane.pb' | head -1)
  [[ -n $jax_file ]] || { echo "FAIL: jax.profiler.trace wrote no .xplane.pb under $logdir"; exit 1; }
  files+=("$jax_file")
else
  echo "note: no jax in $python, comparing ../shared files only"
fi
[[ ${#files[@]} -gt 0 ]] || { echo "skipped: no profile to compare"; exit 77; }
"$python" "$src/tests/xprof_compare.py" "$hbm" "${files[@]}" 2> >(grep -v '^[IWE]0000\|^WARNING: All log' >&2)
