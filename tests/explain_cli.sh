#!/usr/bin/env bash
# explain_cli.sh — `hbm explain` as a user runs it: a file, standard input, --json, a text
# with no OOM (exit 1 and a clear message), a bad flag (exit 2), --logdir giving a profile
# that `hbm report` reads, and --module with XLA's dump (a source line from its stack frames;
# a path with no module: exit 1). Arguments: the hbm binary, the source dir, the build dir.
set -euo pipefail
hbm="$1"
src="$2"
data="$src/tests/data/explain"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A file: XLA's first line kept, then the cause and the fixes, then the groups.
out="$("$hbm" explain "$data/xla_gpu_jupyter.txt")" || fail "explain FILE exited $?"
[[ "$(head -1 <<<"$out")" == "XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 2147483648 bytes." ]] ||
  fail "first line not XLA's: $(head -1 <<<"$out")"
grep -q "^  cause: in use + request over the limit" <<<"$out" || fail "no cause line"
grep -q "jax.checkpoint" <<<"$out" || fail "no remat fix"
# block_3/mlp: 1.00GiB + 512.00MiB of the 1.875 GiB listed = 80.0%
grep -Eq "1\.50GiB +80\.0% +2  Encoder/block_3/mlp" <<<"$out" || fail "no group line: $out"

# Standard input, with and without '-'.
# (outputs go through variables: `cmd | grep -q` may end cmd with SIGPIPE under pipefail)
out="$("$hbm" explain <"$data/pytorch_capacty_typo.txt")" || fail "stdin: exit $?"
grep -q "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" <<<"$out" || fail "stdin: no expandable_segments fix"
out="$("$hbm" explain - <"$data/pytorch_capacty_typo.txt")" || fail "'-': exit $?"
grep -q "^  cause: fragmentation" <<<"$out" || fail "'-': no cause"

# --json: the numbers (1.75 GiB = 1879048192 bytes requested).
"$hbm" explain "$data/pytorch_capacty_typo.txt" --json >"$tmp/out.json" || fail "--json exited $?"
grep -q '"requested": 1879048192' "$tmp/out.json" || fail "--json: no requested bytes"
grep -q '"cause": "fragmentation"' "$tmp/out.json" || fail "--json: no cause"

# No OOM in the text: exit 1 and say so.
set +e
msg="$("$hbm" explain "$data/no_oom_traceback.txt" 2>&1)"
rc=$?
"$hbm" explain --bogus </dev/null >/dev/null 2>&1
rc_usage=$?
set -e
[[ $rc -eq 1 ]] || fail "no-OOM text: exit $rc, expected 1"
grep -q "no out-of-memory error found" <<<"$msg" || fail "no-OOM text: message '$msg'"
[[ $rc_usage -eq 2 ]] || fail "bad flag: exit $rc_usage, expected 2"

# --logdir: a profile of the peak buffers that hbm report reads (3 buffers at the peak).
"$hbm" explain "$data/xla_tpu_compile_hbm.txt" --logdir "$tmp/logdir" >/dev/null 2>&1 || fail "--logdir"
out="$("$hbm" report "$tmp/logdir")" || fail "report of --logdir: exit $?"
grep -q "buffers live at the peak, largest first (3)" <<<"$out" || fail "report of --logdir profile"
# and hbm report reads the pasted text itself
out="$("$hbm" report "$data/xla_tpu_compile_hbm.txt")" || fail "report of the text: exit $?"
grep -q "Llama/layers_0/" <<<"$out" || fail "report of the text"
# --module: JAX 0.10's CPU text names only the bytes; the dump gives the module, the buffers
# at its peak and the line of the program that sorts (oom_cpu.py line 4).
out="$("$hbm" explain "$data/xla_cpu_oom.txt" --module "$data/xla_cpu_dump")" || fail "--module: exit $?"
grep -q "allocation 30 (preallocated-temp) of module jit_f" <<<"$out" || fail "--module: no module line"
grep -q "jit(f)/jit(sort)/sort  (/tmp/hbm-explain/oom_cpu.py:4, from the module)" <<<"$out" ||
  fail "--module: no source line: $out"
set +e
msg="$("$hbm" explain "$data/xla_cpu_oom.txt" --module "$tmp" 2>&1)"
rc=$?
set -e
[[ $rc -eq 1 ]] || fail "--module without a module: exit $rc, expected 1"
grep -q "no module in it" <<<"$msg" || fail "--module without a module: message '$msg'"
echo "explain_cli: ok"
