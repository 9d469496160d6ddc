#!/usr/bin/env bash
# bench_scale (bench/bench_scale.c) at a tiny size: each format's input is written, read cold,
# indexed, read from its index (equal to the cold report), viewed, and its peak is exact; the
# 1 GiB and 4 GiB runs are made by hand (BENCHMARKS.md, "Big captures"). The XProf input is
# made from ../shared/real/xprof when that is there. Args: hbm binary, source dir, build dir.
# Skipped (77) in builds without the benchmarks (-DHBM_BENCH=OFF).
set -uo pipefail
hbm=$1 src=$2 b=$3/bench
if [[ ! -x $b/bench_scale ]]; then
  echo "skipped: built without the benchmarks (HBM_BENCH=OFF)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
formats=torch,rmm,trace
xplane=$src/../shared/real/xprof/AMD-AGI_TraceLens__jax08_gemm__tw003.xplane.pb
[[ -f $xplane ]] && formats=$formats,xplane
if ! "$b/bench_scale" --size 1 --events 20000 --formats "$formats" --dir "$tmp/in" --hbm "$hbm" \
  --torch-src "$src/tests/data/torch/small.pickle" --rmm-src "$src/tests/data/profile/small.csv" \
  --xplane-src "$xplane" >"$tmp/out" 2>&1; then
  cat "$tmp/out"
  echo "FAIL: bench_scale exited non-zero"
  exit 1
fi
cat "$tmp/out"
for what in "PyTorch memory snapshot" "RMM allocation log" "hbm's own capture" "recording"; do
  grep -q "$what" "$tmp/out" || { echo "FAIL: no '$what' in bench_scale's output"; exit 1; }
done
[[ $(grep -c ": exact" "$tmp/out") -ge 3 ]] || { echo "FAIL: fewer than 3 exact peaks"; exit 1; }
echo "ok: bench_scale measured every format at 1 MiB ($formats)"
