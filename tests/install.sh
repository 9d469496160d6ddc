#!/usr/bin/env bash
# Installs the build into a temporary prefix, compiles examples/train_step.c against it with
# pkg-config as the README says — shared (`pkg-config --cflags --libs hbm`, no -rpath and no
# LD_LIBRARY_PATH: the .pc file carries the rpath) and static (`pkg-config --static`, linked
# with -static: no libhbm.so needed) — runs both, and reports the profile each wrote with the
# installed hbm. Skipped (exit 77) in sanitizer builds (their library needs the sanitizer
# runtime).
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
unset LD_LIBRARY_PATH
cc -std=c11 -Wall -Wextra -Werror "$src/examples/train_step.c" $(pkg-config --cflags --libs hbm) \
  -o "$tmp/shared"
# (glibc warns that dlopen, which finds libcuda, needs its shared libraries at run time)
cc -std=c11 "$src/examples/train_step.c" $(pkg-config --cflags --libs --static hbm) -static \
  -o "$tmp/static" 2> >(grep -v "dlopen\|load_driver" >&2)
if readelf -d "$tmp/shared" | grep 'NEEDED.*libhbm.so' >/dev/null &&
  ! readelf -d "$tmp/static" 2>/dev/null | grep 'libhbm.so' >/dev/null; then :; else
  echo "install: expected shared to need libhbm.so and static not to"; exit 1
fi
for kind in shared static; do
  out=$(HBM_DEVICE=sim HBM_SIM_NAME="install-$$" HBM_SIM_MEMORY=1GiB "$tmp/$kind" "$tmp/logdir-$kind")
  grep -q "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1099511627776 bytes." <<<"$out"
  grep -q "peak in use: 18.00MiB" <<<"$out"
  report=$("$tmp/prefix/bin/hbm" report "$tmp/logdir-$kind" --json)
  grep -q '"peak_bytes": 18874368' <<<"$report" || { echo "$report" | head -20; exit 1; }
done
echo "install: shared and static builds of examples/train_step.c ran; 1 passed, 0 failed"
