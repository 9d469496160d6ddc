#!/usr/bin/env bash
# test_run_jax.sh — a real framework under `hbm run`: a JAX program on the CPU (the venv's
# jax; no GPU here, so it never touches CUDA) prints the same and exits the same with and
# without hbm's library preloaded, although every extension module JAX loads is looked up
# through the interposed dlsym; and it sees the switch hbm run set for it.
# Args: hbm binary, source dir, build dir. Exit 77: skipped (says why).
set -uo pipefail
hbm=$1 src=$2 build=$3
python=$src/.venv/bin/python
[ -x "$python" ] || { echo "skipped: no $src/.venv (a venv with jax)"; exit 77; }
"$python" -c "import jax" 2>/dev/null || { echo "skipped: the venv has no jax"; exit 77; }
# Sanitizer builds: TSan reports races between the interpreter's uninstrumented threads, and
# ASan's runtime aborts inside jaxlib itself (its __cxa_throw interceptor), hbm or not.
if ldd "$build/libhbm_preload.so" | grep -E 'lib(asan|tsan)\.so' >/dev/null; then # no -q: under pipefail an early exit of grep could fail ldd with SIGPIPE
  echo "skipped: a sanitizer's runtime cannot run the venv's jaxlib (TSan: false races in its" \
    "threads; ASan: aborts in its exception handling, with or without hbm)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/step.py" <<'PY'
import os, sys
import jax, jax.numpy as jnp

def loss(w, x):
    return jnp.sum((x @ w) ** 2)

w = jnp.arange(12.0).reshape(4, 3)
x = jnp.ones((2, 4))
g = jax.jit(jax.grad(loss))(w, x)
print(g.tolist(), float(loss(w, x)))
print("allocator", os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR"), file=sys.stderr)
sys.exit(3)
PY
JAX_PLATFORMS=cpu "$python" "$tmp/step.py" >"$tmp/plain.out" 2>/dev/null
plain=$?
JAX_PLATFORMS=cpu "$hbm" run --logdir "$tmp/logdir" -- "$python" "$tmp/step.py" \
  >"$tmp/hbm.out" 2>"$tmp/hbm.err"
under=$?
[ $plain -eq 3 ] && [ $under -eq 3 ] || { cat "$tmp/hbm.err"; echo "FAIL: exit $plain / $under"; exit 1; }
diff "$tmp/plain.out" "$tmp/hbm.out" || { echo "FAIL: JAX printed something else under hbm run"; exit 1; }
grep -q "^allocator platform$" "$tmp/hbm.err" || { echo "FAIL: the switch did not reach JAX"; exit 1; }
echo "test_run_jax: 1 passed, 0 failed"
