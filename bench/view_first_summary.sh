#!/bin/bash
# view_first_summary.sh — the time from `hbm view`'s first request about a profile to its first
# summary (/api/profile then /api/summary, as the page asks), wall and the server's CPU, with the
# file's pages dropped from the page cache first ("cold") or not ("warm"). For A/B runs of two
# binaries on one big file that bench_scale wrote (`--keep --dir DIR`), without writing it again.
#   bench/view_first_summary.sh HBM LOGDIR RUN PROFILE [cold|warm]
# HBM_INDEX is passed on (default never: no index read or written; auto: the viewer's default).
# Prints: binary mode index wall_s cpu_s peak_kb(the server's, at the summary) peak_bytes load.
set -euo pipefail
BIN=$1 LOG=$2 RUN=$3 PROF=$4 MODE=${5:-cold}
FILE=$LOG/plugins/profile/$RUN/$PROF
IDX=${HBM_INDEX:-never}
PORT=$((20000 + RANDOM % 20000))
if [ "$MODE" = cold ]; then
  python3 -c 'import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)' "$FILE"
fi
HBM_INDEX=$IDX "$BIN" view --logdir "$LOG" --port $PORT >/dev/null 2>&1 &
PID=$!
trap 'kill -KILL $PID 2>/dev/null || true' EXIT
for _ in $(seq 200); do curl -s -o /dev/null "http://127.0.0.1:$PORT/api/runs" && break; sleep 0.05; done
cpu() { awk '{print $14 + $15}' /proc/$PID/stat; }
T0=$(date +%s.%N) C0=$(cpu)
curl -sf -o /dev/null "http://127.0.0.1:$PORT/api/profile?run=$RUN&profile=$PROF"
BODY=$(curl -sf "http://127.0.0.1:$PORT/api/summary?run=$RUN&profile=$PROF")
T1=$(date +%s.%N) C1=$(cpu)
HWM=$(awk '/VmHWM/{print $2}' /proc/$PID/status)
kill -KILL $PID; wait $PID 2>/dev/null || true # not TERM: a clean stop waits for the whole file read behind the summary
[ "$IDX" = never ] || rm -f "$LOG/plugins/profile/$RUN/.$PROF.hbmindex"* # the index it wrote: the next run cold again
PEAK=$(grep -o '"peak_bytes":[ ]*[0-9]*' <<<"$BODY" | grep -o '[0-9]*$')
echo "$(basename "$BIN") $MODE $IDX $(echo "$T1 - $T0" | bc) $(echo "scale=2; ($C1 - $C0) / $(getconf CLK_TCK)" | bc) $HWM $PEAK $(cut -d' ' -f1 /proc/loadavg)"
