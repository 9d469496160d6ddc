#!/usr/bin/env bash
# gpu-prepare.sh — fills .gpu/ (git-ignored) with what scripts/gpu-check.sh needs on a GPU
# machine that reaches no package index, so that the device tool carries it there:
#   .gpu/traces/*.csv.gz   the allocation logs of ../shared/traces (that folder does not travel)
#   .gpu/debs/*.deb        the Debian packages hbm builds with (headers, pkg-config files,
#                          protoc-c), unpacked there into a folder of their own when missing
#   .gpu/wheels/*.whl      XProf (and the protobuf it was generated with) for the comparison
#                          of `hbm report` with XProf's conversion (the GPU image has no XProf)
#   .gpu/prebuilt/         hbm, libhbm_preload.so, bench_gpu_replay and test_alloc_cuda built
#                          here (Release, no viewer), with lib/ holding the shared libraries they
#                          need beyond glibc: used there only if the build there fails
# Then it checks that the repository and .gpu/ together fit what the device tool carries, and
# prints the call. Run it once here, again after changing hbm (the prebuilt follows the tree).
# Usage: scripts/gpu-prepare.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dest=.gpu
mkdir -p "$dest"/{traces,debs,wheels,prebuilt/lib}

echo "== traces"
shared=${HBM_SHARED_DIR:-$root/../shared}
if compgen -G "$shared/traces/*.csv" >/dev/null; then
  for f in "$shared"/traces/*.csv; do
    gz=$dest/traces/$(basename "$f").gz
    [[ $gz -nt $f ]] || gzip -9c "$f" >"$gz"
  done
else
  echo "no $shared/traces: gpu-check.sh will replay tests/data/replay instead"
fi

echo "== Debian packages (bookworm, amd64)"
debs=(libzstd-dev libzstd1 zlib1g-dev zlib1g libjansson-dev libjansson4 libprotobuf-c-dev
      libprotobuf-c1 protobuf-c-compiler libprotoc32 libprotobuf32 libcmocka-dev libcmocka0
      pkgconf pkgconf-bin libpkgconf3)
(cd "$dest/debs" && rm -f ./*.deb && apt-get download -o APT::Architecture=amd64 "${debs[@]}" 2>&1 |
  grep -v "^Get:\|unsandboxed" || true)
[[ $(ls "$dest"/debs/*.deb | wc -l) -eq ${#debs[@]} ]] || { echo "gpu-prepare: apt-get download failed"; exit 1; }

echo "== wheels (Python 3.12, manylinux x86-64: the GPU image's python3)"
wheels=(xprof==2.24.2 protobuf==7.36.2 six==1.17.0)
rm -f "$dest"/wheels/*.whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform any -d "$dest/wheels" "${wheels[@]}"

echo "== prebuilt hbm (Release, no viewer)"
pre=build-gpu-prebuilt
HBM_BUILD_TYPE=Release scripts/build.sh "$pre" -DHBM_VIEWER=OFF -DHBM_TESTS=ON -DHBM_BENCH=ON \
  >/dev/null
rm -rf "$dest"/prebuilt && mkdir -p "$dest"/prebuilt/lib
files=("$pre/hbm" "$pre/libhbm_preload.so" "$pre/bench/bench_gpu_replay" "$pre/tests/test_alloc_cuda")
for f in "${files[@]}"; do
  cp -L "$f" "$dest/prebuilt/"
  strip --strip-unneeded "$dest/prebuilt/$(basename "$f")"
done
# What they need beyond glibc (the GPU machine may lack any of it; gpu-check.sh links only
# what is missing there).
ldd "${files[@]}" | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*|libgcc_s)\.so' |
  while read -r lib; do cp -L "$lib" "$dest/prebuilt/lib/"; done

echo "== size"
tree_bytes=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
gpu_bytes=$(du -sb "$dest" | cut -f1)
total=$(((tree_bytes + gpu_bytes) / 1048576))
du -sh "$dest"/*
echo "repository ${tree_bytes} B + .gpu ${gpu_bytes} B = ${total} MiB (the device tool carries 64 MiB)"
((total < 60)) || { echo "gpu-prepare: too large to carry"; exit 1; }
grep -qx '/.gpu/' .gitignore || echo "gpu-prepare: .gpu/ is not in .gitignore: it would be committed"
cat <<'EOF'

Ready. On a GPU machine lent by the device tool (one call, about 8 minutes):
  run  command: scripts/gpu-check.sh   carry: [".gpu"]   timeout_s: 560
Its results come back as $OUT/summary.json and $OUT/gpu-check.log.
EOF
