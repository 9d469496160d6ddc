#!/usr/bin/env bash
# test_run.sh — `hbm run` on the CUDA driver double (tests/fakecuda): programs that reach the
# driver the three ways frameworks do (linked symbols, dlopen + dlsym, cuGetProcAddress) get
# hbm's blocks, every allocation is in the profile with its size, an over-limit allocation
# gets CUDA_ERROR_OUT_OF_MEMORY (2) and the diagnosis on stderr, two processes with
# --memory-fraction 0.5 each stay within their halves, and a program that never touches
# CUDA runs unchanged. Expected numbers are the programs' own requests and hand
# calculations on the double's 2 GiB (2147483648 bytes).
# Args: hbm binary, source dir, build dir.
set -uo pipefail
hbm=$1 build=$3
fake=$build/tests/fakecuda progs=$build/tests/run_progs
passed=0
fail() {
  echo "FAIL: $*"
  exit 1
}
ok() {
  passed=$((passed + 1))
  echo "ok: $*"
}
for f in "$fake/libcuda.so.1" "$progs/cuda_user" "$progs/cuda_user_linked" "$progs/torch_plug" \
  "$progs/libcudart.so.12" "$progs/cudart_user" "$progs/cudart_user_linked" "$progs/attrib_user" \
  "$build/libhbm_preload.so"; do
  [ -e "$f" ] || fail "$f was not built"
done

# A sanitizer's runtime must come first in LD_PRELOAD (hbm run appends its library after).
runtime=$(ldd "$build/libhbm_preload.so" | awk '/lib(asan|tsan)\.so/ {print $3; exit}')
if [ -n "$runtime" ]; then
  export LD_PRELOAD=$runtime ASAN_OPTIONS=${ASAN_OPTIONS:-}:verify_asan_link_order=0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export LD_LIBRARY_PATH=$fake:$progs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FAKECUDA_MEMORY=2G FAKECUDA_CONTEXT_OVERHEAD=64M
unset XLA_PYTHON_CLIENT_MEM_FRACTION XLA_PYTHON_CLIENT_PREALLOCATE XLA_PYTHON_CLIENT_ALLOCATOR \
  TF_GPU_ALLOCATOR HBM_DEVICE HBM_PROFILE_DIR HBM_PRELOAD_LIB

# 1. A program that never touches CUDA: same output, same exit status, no profile.
out=$("$hbm" run --logdir "$tmp/none" -- /bin/echo hi 2>"$tmp/none.err") || fail "echo: exit $?"
[ "$out" = hi ] || fail "echo printed '$out'"
"$hbm" run --logdir "$tmp/none" -- sh -c 'exit 7' 2>/dev/null
[ $? -eq 7 ] || fail "exit status of 'sh -c exit 7' not passed on"
[ ! -d "$tmp/none/plugins" ] || fail "a profile was written for a program without CUDA"
grep -q "XLA_PYTHON_CLIENT_ALLOCATOR=platform" "$tmp/none.err" || fail "switches not said"
grep -q "PYTORCH_NO_CUDA_MEMORY_CACHING=1" "$tmp/none.err" || fail "switches not said"
"$hbm" run -- /nonexistent/program 2>/dev/null
[ $? -eq 127 ] || fail "a missing program is not exit status 127"
ok "a program without CUDA runs unchanged (output, exit status, no profile)"

# 2. The three ways to the driver. In bfc mode hbm preallocates 0.75 x 2 GiB = 1610612736
#    bytes, so a peak reserved of exactly that says hbm placed the blocks, not the driver.
for way in linked dlsym procaddr; do
  prog=$progs/cuda_user
  [ $way = linked ] && prog=$progs/cuda_user_linked
  dir=$tmp/$way
  "$hbm" run --mode bfc --logdir "$dir" -- "$prog" $way cxx 0 alloc 1048576 async 3000 pool 5000 \
    alloc 77777 touch 0 touch 1 touch 2 touch 3 info free 1 free 0 free 2 free 3 exit 5 \
    >"$dir.out" 2>"$dir.err"
  rc=$?
  [ $rc -eq 5 ] || { cat "$dir.err"; fail "$way: exit status $rc, not the program's 5"; }
  [ "$(grep -c ': 0$' "$dir.out")" -eq 14 ] || { cat "$dir.out"; fail "$way: a call failed"; }
  # cuMemGetInfo: total = hbm's limit; free = the limit less what is in use, 1610612736 -
  # (1048576 + 3000 + 5000 + 77777 = 1134353) = 1609478383.
  grep -q "info free=1609478383 total=1610612736: 0" "$dir.out" ||
    { cat "$dir.out"; fail "$way: cuMemGetInfo does not say hbm's limit"; }
  json=$("$hbm" report --json "$dir") || fail "$way: hbm report failed"
  for size in 1048576 3000 5000 77777; do
    grep -q "\"size\": $size,\$" <<<"$json" || fail "$way: no buffer of $size bytes in the profile"
  done
  grep -q '"buffers": 4,' <<<"$json" || fail "$way: the profile does not have 4 buffers"
  grep -q '"peak_bytes": 1134353,' <<<"$json" || fail "$way: peak is not 1134353 bytes"
  grep -q '"peak_reserved_bytes": 1610612736,' <<<"$json" || fail "$way: not hbm's bfc region"
  grep -q '"source": "cuMemAllocAsync on stream 0x' <<<"$json" || fail "$way: no stream"
  grep -q '"group": "cuda_user' <<<"$json" || fail "$way: calling library not recorded"
  # cuMemAlloc_v2 is called from model::train_step() (_ZN5model10train_stepEv, demangled).
  grep -q '"op": "model::train_step()"' <<<"$json" || fail "$way: calling function not named"
  ok "$way: 4 allocations served by hbm, each in the profile with its size and caller"
done

# 2b. The seeds' variables keep their meaning: XLA_PYTHON_CLIENT_PREALLOCATE=false is hbm's
#     growth mode, XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 its limit: 0.3 x 2147483648 =
#     644245094.4, rounded down to 256 bytes = 644244992, what cuMemGetInfo says in total.
out=$(XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 "$hbm" run \
  --logdir "$tmp/seeds" -- "$progs/cuda_user" dlsym info 2>"$tmp/seeds.err")
grep -q "hbm run: mode growth, memory fraction 0.3 (XLA_PYTHON_CLIENT_MEM_FRACTION" \
  "$tmp/seeds.err" || { cat "$tmp/seeds.err"; fail "the seeds' variables were not read"; }
[ "$out" = "info free=644244992 total=644244992: 0" ] || fail "seeds' limit: $out"
ok "the seeds' variables keep their meaning under hbm run"

# 3. Over the limit: --memory-fraction 0.5 of 2 GiB = 1073741824 bytes. 700000000 fit;
#    another 400000000 would make 1100000000 > the limit: CUDA_ERROR_OUT_OF_MEMORY (2); then
#    200000000 still fit (900000000 in use). Another process (the double's pid 4242) holds
#    300 MiB: the diagnosis names it.
dir=$tmp/oom
FAKECUDA_OTHER_PROCESS=4242:300M "$hbm" run --mode growth --memory-fraction 0.5 \
  --logdir "$dir" -- "$progs/cuda_user" dlsym alloc 700000000 alloc 400000000 \
  alloc 200000000 >"$dir.out" 2>"$dir.err"
printf 'alloc 700000000: 0\nalloc 400000000: 2\nalloc 200000000: 0\n' | diff - "$dir.out" ||
  fail "over-limit allocation: wrong results"
grep -q "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 400000000 bytes." \
  "$dir.err" || { cat "$dir.err"; fail "no RESOURCE_EXHAUSTED line"; }
grep -q "hbm diagnosis:" "$dir.err" || fail "no diagnosis"
grep -q "limit: 1073741824 bytes" "$dir.err" || fail "the diagnosis does not give the limit"
grep -q "cause: in use + request over the limit" "$dir.err" || fail "wrong cause"
grep -q "pid 4242 holds 300.0MiB" "$dir.err" || fail "the other process is not named"
# hbm run's summary at the end: 700000000 + 200000000 bytes = 858.3MiB in use at the peak.
grep -q "hbm run: cuda:0 (FakeCUDA GPU): peak in use 858.3MiB, .*, limit 1.00GiB, 1 OOM(s)" \
  "$dir.err" || { cat "$dir.err"; fail "no summary after the program"; }
grep -q '"requested": 400000000' <<<"$("$hbm" report --json "$dir")" ||
  fail "the OOM is not in the profile"
ok "an over-limit allocation gets CUDA_ERROR_OUT_OF_MEMORY and the diagnosis"

# 3b. The other process holds 1500 MiB: 2048 - 1500 - 64 (our context) = 484 MiB are free, so
#     700000000 bytes fail within our limit, and the cause is the other process.
FAKECUDA_OTHER_PROCESS=4242:1500M "$hbm" run --mode growth --memory-fraction 0.5 \
  --logdir "$dir" -- "$progs/cuda_user" procaddr alloc 700000000 >"$dir.out" 2>"$dir.err"
[ "$(cat "$dir.out")" = "alloc 700000000: 2" ] || fail "a full device did not refuse"
grep -q "cause: other processes hold the device's memory: pid 4242 holds 1.46GiB" "$dir.err" ||
  { cat "$dir.err"; fail "the cause does not name the other process"; }
ok "an OOM caused by another process names it and what it holds"

# 4. Two processes on one GPU with half each, at the same time: each holds 700000000, then
#    asks for 400000000 more (over its half: refused) and 300000000 (within it: served).
#    cuMemGetInfo says 1073741824 - 700000000 = 373741824 free.
for p in a b; do
  "$hbm" run --mode growth --memory-fraction 0.5 --logdir "$tmp/two" -- "$progs/cuda_user" \
    procaddr alloc 700000000 sleep 300 info alloc 400000000 alloc 300000000 \
    >"$tmp/two-$p.out" 2>"$tmp/two-$p.err" &
done
wait
for p in a b; do
  printf '%s\n' "alloc 700000000: 0" "info free=373741824 total=1073741824: 0" \
    "alloc 400000000: 2" "alloc 300000000: 0" | diff - "$tmp/two-$p.out" ||
    { cat "$tmp/two-$p.err"; fail "process $p went beyond its half"; }
done
ok "two processes with --memory-fraction 0.5 each stay within their halves"

# 4b. Threads: 8 threads allocate and free at once from the start (the first allocations open
#     hbm's device concurrently), every block written and read back through the driver.
for way in linked procaddr; do
  prog=$progs/cuda_user
  [ $way = linked ] && prog=$progs/cuda_user_linked
  out=$("$hbm" run --mode growth --logdir "$tmp/threads" -- "$prog" $way threads 8 \
    2>"$tmp/threads.err") || { cat "$tmp/threads.err"; fail "threads ($way): exit status $?"; }
  [ "$out" = "threads 8: 0" ] || { cat "$tmp/threads.err"; fail "threads ($way): $out"; }
done
ok "8 threads allocating and freeing at once"

# 4c. Two GPUs: a block is placed on the device of the current context. After 4096 bytes on
#     GPU 0 and 8192 on GPU 1, GPU 1 says 1610612736 - 8192 = 1610604544 free; the profile
#     has one memory space per GPU.
out=$(FAKECUDA_DEVICES=2 "$hbm" run --mode platform --logdir "$tmp/gpus" -- "$progs/cuda_user" \
  procaddr alloc 4096 device 1 alloc 8192 info 2>"$tmp/gpus.err")
printf '%s\n' "alloc 4096: 0" "device 1: 0" "alloc 8192: 0" \
  "info free=1610604544 total=1610612736: 0" | diff - <(echo "$out") ||
  { cat "$tmp/gpus.err"; fail "two GPUs: wrong results"; }
report=$("$hbm" report "$tmp/gpus") || fail "two GPUs: hbm report failed"
grep -q "== HBM on cuda:0" <<<"$report" && grep -q "== HBM on cuda:1" <<<"$report" ||
  fail "two GPUs: not one memory space per GPU"
ok "two GPUs: each block on the device of the current context"

# 4d. No current context: the driver's own answer, CUDA_ERROR_INVALID_CONTEXT (201), for an
#     allocation and for cuMemGetInfo; after making one current again, served.
out=$("$hbm" run --mode platform --logdir "$tmp/noctx" -- "$progs/cuda_user" dlsym nocontext 0 \
  alloc 4096 info device 0 alloc 4096 2>"$tmp/noctx.err")
printf '%s\n' "nocontext: 0" "alloc 4096: 201" "info free=0 total=0: 201" "device 0: 0" \
  "alloc 4096: 0" | diff - <(echo "$out") || { cat "$tmp/noctx.err"; fail "no context: wrong results"; }
ok "without a current context the driver's error, as from the driver"

# 5. The runtime (PyTorch's way with PYTORCH_NO_CUDA_MEMORY_CACHING=1), linked and from a
#    library opened RTLD_LOCAL. cudaMalloc of 0 bytes is the runtime's own (success, NULL);
#    cudaMemGetInfo says 1610612736 - (1048576 + 3000) = 1609561160 free; 3000000000 bytes
#    are more than the limit: cudaErrorMemoryAllocation (2).
for way in linked dlopen; do
  prog=$progs/cudart_user
  [ $way = linked ] && prog=$progs/cudart_user_linked
  dir=$tmp/rt-$way
  "$hbm" run --mode growth --logdir "$dir" -- "$prog" $way alloc 1048576 async 3000 alloc 0 \
    info touch 0 touch 1 free 0 free 1 alloc 3000000000 >"$dir.out" 2>"$dir.err" ||
    { cat "$dir.err"; fail "runtime $way: exit status $?"; }
  printf '%s\n' "alloc 1048576: 0" "async 3000: 0" "alloc 0: 0" \
    "info free=1609561160 total=1610612736: 0" "touch 0: 0" "touch 1: 0" "free 0: 0" \
    "free 1: 0" "alloc 3000000000: 2" | diff - "$dir.out" || fail "runtime $way: wrong results"
  grep -q "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 3000000000 bytes." \
    "$dir.err" || fail "runtime $way: no diagnosis"
  json=$("$hbm" report --json "$dir") || fail "runtime $way: hbm report failed"
  grep -q '"buffers": 2,' <<<"$json" || fail "runtime $way: the profile does not have 2 buffers"
  grep -q '"peak_bytes": 1051576,' <<<"$json" || fail "runtime $way: peak is not 1051576"
  grep -q '"source": "cudaMallocAsync on stream 0x' <<<"$json" || fail "runtime $way: no stream"
  # Served by the runtime's hooks themselves (which found the runtime's cudaGetDevice, out of
  # the global scope for "dlopen"), not only at the driver below the runtime.
  grep -q '"source": "cudaMalloc from cudart_user' <<<"$json" ||
    fail "runtime $way: cudaMalloc not served at the runtime"
  ok "runtime ($way): cudaMalloc/cudaMallocAsync served by hbm, OOM is cudaErrorMemoryAllocation"
done

# 6. PyTorch's plug, loaded as CUDAPluggableAllocator loads it (no LD_PRELOAD), with the
#    settings hbm.torch.use() passes: platform mode, half of 2 GiB = 1073741824 bytes, so
#    2000000000 bytes get NULL (PyTorch's out-of-memory signal) and the diagnosis.
dir=$tmp/torch
HBM_RUN_MODE=platform HBM_RUN_MEM_FRACTION=0.5 HBM_RUN_LOGDIR=$dir \
  "$progs/torch_plug" "$build/libhbm_preload.so" 1048576 5000 2000000000 \
  >"$dir.out" 2>"$dir.err" || { cat "$dir.err"; fail "torch plug: exit status $?"; }
printf '%s\n' "malloc 1048576: ok" "malloc 5000: ok" "malloc 2000000000: null" |
  diff - "$dir.out" || fail "torch plug: wrong results"
grep -q "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2000000000 bytes." \
  "$dir.err" || fail "torch plug: no diagnosis"
json=$("$hbm" report --json "$dir") || fail "torch plug: hbm report failed"
grep -q '"peak_bytes": 1053576,' <<<"$json" || fail "torch plug: peak is not 1048576 + 5000"
grep -q 'mode: platform (' <<<"$json" || fail "torch plug: not in platform mode"
ok "PyTorch's plug: hbm_torch_malloc/hbm_torch_free serve and profile, NULL on OOM"

# 7. Attribution by library: attrib_user allocates 1 MiB + 2 MiB from its own code, 4 MiB from
#    libattrib_a.so (cudaMalloc, served at the runtime) and 5 MiB + 6 MiB from libattrib_b.so
#    (cudaMallocPitch: the runtime passes it to the driver, where hbm sees the runtime as the
#    caller and must walk past it). Totals, by hand: the program 3145728 bytes in 2, a 4194304
#    in 1, b 11534336 in 2, all live at the peak. NVML (the double) names another process,
#    pid 4242 with 512 MiB.
dir=$tmp/attrib
FAKECUDA_OTHER_PROCESS=4242:512M "$hbm" run --mode platform --logdir "$dir" -- \
  "$progs/attrib_user" self:1048576 a:4194304 b:5242880 self:2097152 b:6291456 \
  >"$dir.out" 2>"$dir.err" || { cat "$dir.err"; fail "attribution: exit status $?"; }
for want in "libattrib_b.so .* 11.00MiB  61.1%   2 buffers   11.00MiB (11534336 bytes) in 2" \
  "libattrib_a.so .*  4.00MiB  22.2%   1 buffer     4.00MiB (4194304 bytes) in 1" \
  "attrib_user (the program) .*  3.00MiB  16.7%   2 buffers    3.00MiB (3145728 bytes) in 2" \
  "other processes on cuda:0 (FakeCUDA GPU): pid 4242 holds 512.0MiB (536870912 bytes)"; do
  grep -q "^hbm run: .*$want" "$dir.err" || { cat "$dir.err"; fail "attribution: no '$want'"; }
done
report=$("$hbm" report "$dir") || fail "attribution: hbm report failed"
grep -q "libattrib_b.so .*(11534336 bytes) in 2" <<<"$report" &&
  grep -q "pid 4242 holds 512.0MiB" <<<"$report" || fail "attribution: not in hbm report"
json=$("$hbm" report --json "$dir")
grep -q '"source": "cuMemAlloc_v2 from libattrib_b.so+0x' <<<"$json" ||
  fail "attribution: the runtime's driver call not attributed to libattrib_b.so"
ok "attribution: the program, libattrib_a.so and libattrib_b.so, each total exact; pid 4242 named"

# 8. Fails closed. Whatever would leave the program unguarded stops hbm run before the program
#    starts (status 125, the reason on stderr, the program's output absent): a logdir that
#    cannot be written (/proc/x: nothing can be created in /proc, even by root), a library that
#    is not a shared object, a shared object that is not hbm's, no library at all, a
#    set-user-ID program (the loader does not preload into it). --best-effort runs it anyway.
expect_refused() { # what-it-says command...
  local says=$1
  shift
  "$@" >"$tmp/refused.out" 2>"$tmp/refused.err"
  local rc=$?
  [ $rc -eq 125 ] || { cat "$tmp/refused.err"; fail "'$says': exit status $rc, not 125"; }
  [ ! -s "$tmp/refused.out" ] || fail "'$says': the program ran: $(cat "$tmp/refused.out")"
  grep -q "$says" "$tmp/refused.err" || { cat "$tmp/refused.err"; fail "no '$says' on stderr"; }
  grep -q "The program was not started" "$tmp/refused.err" || fail "'$says': not said"
}
prog=("$progs/cuda_user" dlsym alloc 4096)
expect_refused "the profile directory (--logdir) cannot be written: /proc/x/plugins/profile" \
  "$hbm" run --logdir /proc/x -- "${prog[@]}"
touch "$tmp/plainfile"
expect_refused "$tmp/plainfile is not a directory" "$hbm" run --logdir "$tmp/plainfile/d" -- "${prog[@]}"
echo "not a library" >"$tmp/notlib.so"
expect_refused "the preload library cannot be loaded: $tmp/notlib.so: " \
  env HBM_PRELOAD_LIB="$tmp/notlib.so" "$hbm" run --logdir "$tmp/closed" -- "${prog[@]}"
expect_refused "not hbm's preload library (it does not export hbm_torch_malloc)" \
  env HBM_PRELOAD_LIB="$fake/libcuda.so.1" "$hbm" run --logdir "$tmp/closed" -- "${prog[@]}"
expect_refused "the preload library cannot be found: HBM_PRELOAD_LIB=/nonexistent/lib.so" \
  env HBM_PRELOAD_LIB=/nonexistent/lib.so "$hbm" run --logdir "$tmp/closed" -- "${prog[@]}"
cp "$progs/cuda_user" "$tmp/setuid_user" && chmod u+s "$tmp/setuid_user"
expect_refused "setuid_user is set-user-ID: the loader does not preload libraries into it" \
  "$hbm" run --logdir "$tmp/closed" -- "$tmp/setuid_user" dlsym alloc 4096
[ ! -e "$tmp/closed" ] || fail "a refused run left $tmp/closed behind"
out=$("$hbm" run --best-effort --logdir /proc/x -- "${prog[@]}" 2>"$tmp/best.err") ||
  fail "--best-effort: exit status $?"
[ "$out" = "alloc 4096: 0" ] || fail "--best-effort: the program did not run: $out"
grep -q "running it anyway (--best-effort)" "$tmp/best.err" || fail "--best-effort: no warning"
grep -q "they go to the CUDA driver unchanged" "$tmp/best.err" || fail "--best-effort: not said"
# The library itself, as hbm run sets it up (HBM_RUN_STRICT=1) but with a logdir that fails
# only at the program's first allocation: it stops the program there with 125 and the reason.
LD_PRELOAD=${LD_PRELOAD:+$LD_PRELOAD:}$build/libhbm_preload.so HBM_RUN_STRICT=1 \
  HBM_RUN_LOGDIR=/proc/x "${prog[@]}" >"$tmp/strict.out" 2>"$tmp/strict.err"
rc=$?
[ $rc -eq 125 ] && [ ! -s "$tmp/strict.out" ] || { cat "$tmp/strict.err"; fail "strict: exit $rc"; }
grep -q "hbm: stopping the program (exit status 125)" "$tmp/strict.err" || fail "strict: not said"
ok "fails closed: refused before the program starts (125, the reason), unless --best-effort"

echo "test_run: $passed passed, 0 failed"
