#!/usr/bin/env bash
# Installs the build into a temporary prefix, compiles examples/train_step.c against it with
# pkg-config (shared and static), runs it, and reports the profile it wrote with the
# installed hbm. Skipped in sanitizer builds (their library needs the sanitizer runtime).
# Args: hbm binary, source dir, build dir.
set -euo pipefail
src=$2 build=$3
if grep -qE '^HBM_SANITIZE:STRING=.+' "$build/CMakeCache.txt"; then
  echo "install: skipped (sanitizer build: the installed library needs the sanitizer runtime)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pcdir=$(dirname "$(find "$tmp/prefix" -name hbm.pc | head -1)")
export PKG_CONFIG_PATH=$pcdir
libdir=$(pkg-config --variable=libdir hbm)
cc -std=c11 -Wall -Wextra -Werror "$src/examples/train_step.c" $(pkg-config --cflags --libs hbm) \
  -Wl,-rpath,"$libdir" -o "$tmp/shared"
cc -std=c11 "$src/examples/train_step.c" $(pkg-config --cflags hbm) \
  "$libdir/libhbm.a" $(pkg-config --libs --static hbm | sed 's/-lhbm//') -o "$tmp/static"
for kind in shared static; do
  out=$(HBM_DEVICE=sim HBM_SIM_NAME="install-$$" HBM_SIM_MEMORY=1GiB "$tmp/$kind" "$tmp/logdir-$kind")
  grep -q "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1099511627776 bytes." <<<"$out"
  grep -q "peak in use: 18.00MiB" <<<"$out"
  report=$("$tmp/prefix/bin/hbm" report "$tmp/logdir-$kind" --json)
  grep -q '"peak_bytes": 18874368' <<<"$report" || { echo "$report" | head -20; exit 1; }
done
echo "install: shared and static builds of examples/train_step.c ran; 1 passed, 0 failed"
