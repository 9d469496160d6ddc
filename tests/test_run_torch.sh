#!/usr/bin/env bash
# test_run_torch.sh — python/hbm/torch.py: hbm.torch.use() finds libhbm_preload.so next to the
# hbm executable on PATH and installs it through torch.cuda.memory.CUDAPluggableAllocator (a
# stand-in for PyTorch's, tests/run_progs/fake_torch, which loads and calls it as PyTorch
# does), on the CUDA driver double; the blocks are hbm's, in the profile, NULL past the limit.
# Args: hbm binary, source dir, build dir. Exit 77: skipped (says why).
set -uo pipefail
hbm=$1 src=$2 build=$3
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 77; }
# Sanitizer builds: the runtime goes first into the interpreter (its own leaks are not hbm's);
# python3 itself crashes at start with TSan's runtime preloaded.
runtime=$(ldd "$build/libhbm_preload.so" | awk '/lib(asan|tsan)\.so/ {print $3; exit}')
case $runtime in
*tsan*)
  echo "skipped: python3 crashes at start with TSan's runtime preloaded (without hbm too)"
  exit 77
  ;;
?*) export LD_PRELOAD=$runtime ASAN_OPTIONS=${ASAN_OPTIONS:-}:verify_asan_link_order=0:detect_leaks=0 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset HBM_PRELOAD_LIB HBM_RUN_MODE HBM_RUN_MEM_FRACTION HBM_RUN_LOGDIR XLA_PYTHON_CLIENT_MEM_FRACTION
export PATH=$(dirname "$hbm"):$PATH LD_LIBRARY_PATH=$build/tests/fakecuda FAKECUDA_MEMORY=2G
# hbm/torch.py alone in a directory of its own, so that it finds the library of this build
# through the hbm executable on PATH (not a checkout's build/ beside it).
mkdir -p "$tmp/py/hbm"
cp "$src/python/hbm/torch.py" "$tmp/py/hbm/"
export PYTHONPATH=$tmp/py:$src/tests/run_progs/fake_torch
# half of 2 GiB = 1073741824 bytes: 1048576 and 5000 fit, 2000000000 does not.
python3 - "$build/libhbm_preload.so" "$tmp/logdir" <<'PY' 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
import os, sys
import hbm.torch
import torch

assert hbm.torch.library_path() == os.path.realpath(sys.argv[1]), hbm.torch.library_path()
for bad in (dict(mode="fast"), dict(memory_fraction=1.5)):
    try:
        hbm.torch.use(**bad)
        raise SystemExit(f"use({bad}) was accepted")
    except ValueError:
        pass
a = hbm.torch.use(mode="platform", memory_fraction=0.5, logdir=sys.argv[2])
assert torch.cuda.memory.current is a
blocks = [(n, a.malloc(n, 0, None)) for n in (1048576, 5000, 2000000000)]
assert [bool(p) for n, p in blocks] == [True, True, False], blocks
for n, p in blocks:
    if p:
        a.free(p, n, 0, None)
print("python: ok")
PY
grep -q "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2000000000 bytes." \
  "$tmp/err" || { cat "$tmp/err"; echo "FAIL: no diagnosis"; exit 1; }
json=$("$hbm" report --json "$tmp/logdir") || exit 1
grep -q '"peak_bytes": 1053576,' <<<"$json" || { echo "FAIL: peak is not 1048576 + 5000"; exit 1; }
grep -q '"limit_bytes": 1073741824,' <<<"$json" || { echo "FAIL: limit is not half"; exit 1; }
echo "test_run_torch: 1 passed, 0 failed"
