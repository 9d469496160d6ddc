#!/usr/bin/env bash
# instructions_bench.sh — instructions per allocation + free, counted by cachegrind: a count,
# not a timing, so it reads the same whatever else the machine is doing. For each log, hbm
# (`bench_replay --ns LOG`: one checked and five timed replays) and, when
# HBM_BENCH_OFFSET_REPLAY names another allocator's replay program (the side-by-side one,
# BENCHMARKS.md), that program on the same log.
#   hbm: everything executed in src/alloc/{arena.c,alloc.h} ("arena", its address index
#        included) and src/alloc/{front.c,lock.h} + src/profile/recorder.h ("front": argument
#        checks, the device lock, statistics, the capture test), wherever it was inlined;
#   the other: the functions whose names match HBM_BENCH_OFFSET_FUNCS (default: the offset
#        allocator's allocate, free, insertNodeIntoBin, removeNodeFromBin) over
#        HBM_BENCH_OFFSET_PASSES replays (default 6: the driver's one untimed and five timed).
# Per pair = instructions / (replays × the log's allocations). Mispredicted branches are
# cachegrind's simple predictor, not the processor's. Fails when it measured nothing.
# Usage: bench/instructions_bench.sh BUILD_DIR [LOG...]   (default ../shared/traces/*.csv)
set -uo pipefail
build=$(cd "$1" && pwd) || exit 1
shift
src=$(cd "$(dirname "$0")/.." && pwd)
logs=("$@")
((${#logs[@]})) || logs=("$src"/../shared/traces/*.csv)
other=${HBM_BENCH_OFFSET_REPLAY:-}
funcs=${HBM_BENCH_OFFSET_FUNCS:-'Allocator::(allocate|free|insertNodeIntoBin|removeNodeFromBin)\('}
passes=${HBM_BENCH_OFFSET_PASSES:-6}
hbm_passes=6 # bench_replay --ns: replay_checked once, then 5 timed (bench/bench_replay.c)
for tool in valgrind cg_annotate; do
  if ! command -v "$tool" >/dev/null; then
    echo "instructions_bench: $tool is not installed (apt-get install valgrind)"
    exit 1
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# cachegrind OUT COMMAND...: the command under cachegrind, its counts in OUT; false on failure.
cachegrind() {
  local out=$1
  shift
  valgrind --tool=cachegrind --cache-sim=no --branch-sim=yes --cachegrind-out-file="$out" \
    "$@" >/dev/null 2>"$tmp/valgrind.err"
}

# sums AWK_CONDITION: "instructions mispredicted" summed over cg_annotate's file:function rows
# for which the condition (on $3, the file:function) holds.
sums() {
  cg_annotate --show=Ir,Bcm "$tmp/cg.out" 2>/dev/null | sed 's/( *[0-9.]*%)//g' |
    awk "$1"' { gsub(/,/, ""); ir += $1; if ($2 != ".") b += $2 } END { print ir + 0, b + 0 }'
}

# per X N [DIGITS]: X / N with DIGITS decimals (default 1).
per() { awk -v x="$1" -v n="$2" -v d="${3:-1}" 'BEGIN { printf "%.*f", d, x / n }'; }

echo "| log | allocations | hbm per pair | front | arena | hbm mispredicted |" \
  "other per pair | other mispredicted | hbm / other |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
measured=0
for log in "${logs[@]}"; do
  name=$(basename "$log" .csv)
  allocs=$(grep -c ',allocate,' "$log" 2>/dev/null)
  if [[ -z $allocs || $allocs == 0 ]]; then
    echo "instructions_bench: $log: no allocations to count" >&2
    continue
  fi
  if ! cachegrind "$tmp/cg.out" "$build/bench/bench_replay" --ns "$log"; then
    echo "instructions_bench: bench_replay --ns $log failed under cachegrind" >&2
    cat "$tmp/valgrind.err" >&2
    continue
  fi
  read -r front front_b < <(sums '$3 ~ /src\/alloc\/(front\.c|lock\.h):/ ||
                                  $3 ~ /src\/profile\/recorder\.h:/')
  read -r arena arena_b < <(sums '$3 ~ /src\/alloc\/(arena\.c|alloc\.h):/')
  pairs=$((hbm_passes * allocs))
  total=$((front + arena))
  row="| $name | $allocs | $(per "$total" "$pairs") | $(per "$front" "$pairs")"
  row+=" | $(per "$arena" "$pairs") | $(per $((front_b + arena_b)) "$pairs" 2)"
  if [[ -n $other ]] && cachegrind "$tmp/cg.out" $other "$log"; then
    read -r o o_b < <(sums "\$3 ~ /$funcs/")
    if ((o > 0)); then
      opairs=$((passes * allocs))
      ratio=$(awk -v h="$total" -v hp="$pairs" -v o="$o" -v op="$opairs" \
        'BEGIN { printf "%.2f", (h / hp) / (o / op) }')
      row+=" | $(per "$o" "$opairs") | $(per "$o_b" "$opairs" 2) | $ratio |"
    else
      row+=" | (no function matched) | — | — |"
    fi
  elif [[ -n $other ]]; then
    row+=" | (failed) | — | — |"
  else
    row+=" | — | — | — |"
  fi
  ((total > 0)) && measured=$((measured + 1))
  echo "$row"
done
if ((measured == 0)); then
  echo
  echo "instructions_bench: measured nothing"
  exit 1
fi
echo
echo "Counted on $measured logs (hbm: $hbm_passes replays a log; other: $passes)."
