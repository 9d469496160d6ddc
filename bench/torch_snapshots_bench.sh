#!/usr/bin/env bash
# torch_snapshots_bench.sh — the real PyTorch memory snapshots of ../shared/real/torch/ through
# `hbm report` and `hbm replay`: per snapshot, hbm's peak in use, PyTorch's reserved bytes
# (the sum of its segments at the dump, and the most over the trace), and what hbm's
# allocator modes would have reserved for the same trace (growth and expandable: their peak
# reserved; bfc, which preallocates: the smallest memory it runs on), with the time of
# `hbm report` (read, model, analysis, text).
# Usage: bench/torch_snapshots_bench.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
files=("$src"/../shared/real/torch/*.pickle)
if [[ ! -e ${files[0]} ]]; then
  echo "skipped: no ../shared/real/torch/*.pickle"
  exit 0
fi
num() { grep -o "\"$1\": [0-9]*" | head -1 | grep -o '[0-9]*$'; }
gib() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1073741824 }'; }
echo "| snapshot | events | report ms | peak in use GiB | PyTorch reserved GiB (end / peak) | hbm growth | hbm expandable | hbm bfc min memory |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for f in "${files[@]}"; do
  start=$(date +%s%N)
  "$build/hbm" report "$f" >/dev/null
  ms=$((($(date +%s%N) - start) / 1000000))
  growth=$("$build/hbm" replay "$f" --mode growth --repeat 0 --json)
  expandable=$("$build/hbm" replay "$f" --mode expandable --repeat 0 --json)
  bfc=$("$build/hbm" replay "$f" --mode bfc --repeat 0 --min-memory --json)
  pytorch=$(sed -n '/"pytorch"/,$p' <<<"$growth")
  peak=$(num peak_live_bytes <<<"$growth")
  end=$(num reserved_bytes <<<"$pytorch")
  ppeak=$(num peak_reserved_bytes <<<"$pytorch")
  g=$(num peak_reserved_bytes <<<"$growth")
  x=$(num peak_reserved_bytes <<<"$expandable")
  b=$(num min_memory_bytes <<<"$bfc")
  name=$(basename "$f" .pickle)
  name=${name#*__} # the repository is in ../shared/real/README.md
  printf '| %s | %s | %s | %s | %s / %s | %s (%.3fx) | %s (%.3fx) | %s (%.3fx) |\n' \
    "$name" "$(num trace_events <<<"$pytorch")" "$ms" "$(gib "$peak")" "$(gib "$end")" \
    "$(gib "$ppeak")" "$(gib "$g")" "$(awk -v a="$g" -v b="$ppeak" 'BEGIN{print a/b}')" \
    "$(gib "$x")" "$(awk -v a="$x" -v b="$ppeak" 'BEGIN{print a/b}')" \
    "$(gib "$b")" "$(awk -v a="$b" -v b="$ppeak" 'BEGIN{print a/b}')"
done
echo
echo "(hbm's columns: GiB, and the ratio to PyTorch's peak reserved over the trace)"
