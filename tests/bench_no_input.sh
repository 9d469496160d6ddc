#!/usr/bin/env bash
# A benchmark that measured nothing fails and reports no target as met (issue 13 item 12,
# issue 16): bench_replay of a missing log or of a log without events, its --ns, --ns-arena
# and --side-by-side modes (and --ns-arena does time a log with events), bench_threads of a
# missing log, bench_alloc_log of a directory without logs, instructions_bench.sh of a missing
# log or one without events. Args: hbm binary, source dir, build dir. Skipped (77) in builds
# without the benchmarks (-DHBM_BENCH=OFF).
set -uo pipefail
b=$3/bench
if [[ ! -x $b/bench_replay || ! -x $b/bench_threads || ! -x $b/bench_alloc_log ]]; then
  echo "skipped: built without the benchmarks (HBM_BENCH=OFF)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/no-logs"
echo "Thread,Time,Action,Pointer,Size,Stream" >"$tmp/header-only.csv"
failed=0

expect_failure() { # what, command...
  local what=$1
  shift
  if "$@" >"$tmp/out" 2>&1; then
    echo "FAIL: $what exited 0"
  elif grep -qE ': met(\)|\.|$)' "$tmp/out"; then # the verdicts' wording: "...: met"
    echo "FAIL: $what reports a target as met"
  else
    echo "ok: $what fails"
    return
  fi
  cat "$tmp/out"
  failed=1
}

expect_failure "bench_replay of a missing log" "$b/bench_replay" "$tmp/missing.csv"
expect_failure "bench_replay of a log without events" "$b/bench_replay" "$tmp/header-only.csv"
expect_failure "bench_replay --ns of a missing log" "$b/bench_replay" --ns "$tmp/missing.csv"
expect_failure "bench_replay --ns-arena of a missing log" \
  "$b/bench_replay" --ns-arena "$tmp/missing.csv"
expect_failure "bench_replay --ns-arena of a log without events" \
  "$b/bench_replay" --ns-arena "$tmp/header-only.csv"
expect_failure "bench_replay --side-by-side with a failing allocator" \
  "$b/bench_replay" --side-by-side false 1 "$tmp/header-only.csv"
expect_failure "bench_threads of a missing log" \
  "$b/bench_threads" --runs 1 --ops 2000 "$tmp/missing.csv"
expect_failure "bench_alloc_log of a directory without logs" "$b/bench_alloc_log" "$tmp/no-logs"
expect_failure "instructions_bench of a missing log" \
  bash "$2/bench/instructions_bench.sh" "$3" "$tmp/missing.csv"
expect_failure "instructions_bench of a log without events" \
  bash "$2/bench/instructions_bench.sh" "$3" "$tmp/header-only.csv"
# And the arena alone does time a log that has events: one positive number.
{
  echo "Thread,Time,Action,Pointer,Size,Stream"
  echo "0,0.1,allocate,0x1000,300,0x0"
  echo "0,0.2,allocate,0x2000,5000000,0x0"
  echo "0,0.3,free,0x1000,300,0x0"
  echo "0,0.4,free,0x2000,5000000,0x0"
} >"$tmp/tiny.csv"
if ns=$("$b/bench_replay" --ns-arena "$tmp/tiny.csv") && awk -v x="$ns" 'BEGIN { exit !(x > 0) }'; then
  echo "ok: bench_replay --ns-arena times a log ($ns ns/op)"
else
  echo "FAIL: bench_replay --ns-arena of a 4-event log printed '$ns'"
  failed=1
fi
exit $failed
