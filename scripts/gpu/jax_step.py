"""A small JAX training step on the GPU, for scripts/gpu-check.sh: an MLP (LAYERS dense layers
of WIDTH, ReLU) trained with Adam on random data by one jitted step (the parameters and the
optimizer state donated, as training loops do), WARMUP steps then STEPS timed ones.

Prints one line `RESULT {json}`: the step time (median, ms), out-of-memory errors, the
backend, and JAX's own memory statistics (device.memory_stats(): peak_bytes_in_use,
bytes_limit, ... whatever the allocator in use reports). With --trace DIR the whole run is
recorded by jax.profiler.trace(DIR) (what `hbm report` and XProf read). Exit status 0 when the
steps ran (OOMs included: they are results), 77 when JAX has no GPU (unless --allow-cpu,
which the tests use to run this file where there is none), 1 on any other error.

Usage: python3 jax_step.py [--width N] [--layers N] [--batch N] [--warmup N] [--steps N]
                           [--trace DIR] [--allow-cpu]"""
import contextlib
import statistics
import sys

from common import result as common_result
from common import step_parser, timed_steps


def parse():
    p = step_parser(__doc__)
    p.add_argument("--trace")
    p.add_argument("--allow-cpu", action="store_true")
    return p.parse_args()


def result(**fields):
    common_result("jax", **fields)


def build(jax, jnp, args):
    """Parameters, Adam state and the jitted step."""
    key = jax.random.PRNGKey(0)
    params = []
    for _ in range(args.layers):
        key, k = jax.random.split(key)
        params.append((jax.random.normal(k, (args.width, args.width), jnp.float32) * 0.01,
                       jnp.zeros((args.width,), jnp.float32)))
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    state = (zeros, jax.tree_util.tree_map(jnp.zeros_like, params), jnp.zeros((), jnp.int32))

    def loss(params, x, y):
        for w, b in params:
            x = jax.nn.relu(x @ w + b)
        return jnp.mean((x - y) ** 2)

    def step(params, state, x, y):
        m, v, t = state
        l, g = jax.value_and_grad(loss)(params, x, y)
        t = t + 1
        m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        scale = jnp.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        params = jax.tree_util.tree_map(
            lambda p, m, v: p - 1e-3 * scale * m / (jnp.sqrt(v) + 1e-8), params, m, v)
        return params, (m, v, t), l

    x = jax.random.normal(key, (args.batch, args.width), jnp.float32)
    y = jnp.zeros((args.batch, args.width), jnp.float32)
    return params, state, x, y, jax.jit(step, donate_argnums=(0, 1))


def is_oom(err):
    return "RESOURCE_EXHAUSTED" in str(err) or "out of memory" in str(err).lower()


def run(jax, jnp, args):
    """The steps, with the parameters and optimizer state carried from one to the next."""
    live = list(build(jax, jnp, args))  # params, state, x, y, step

    def one():
        params, state, x, y, step = live
        live[0], live[1], loss = step(params, state, x, y)
        jax.block_until_ready(loss)

    def again():  # the donated buffers are gone
        live[:] = build(jax, jnp, args)

    return timed_steps(args, one, is_oom, again)


def main():
    args = parse()
    import jax
    import jax.numpy as jnp

    backend = jax.default_backend()
    if backend != "gpu" and not args.allow_cpu:
        result(status="skipped", reason=f"JAX has no GPU backend (default backend: {backend})")
        print(f"skipped: JAX has no GPU backend (default backend: {backend})")
        return 77
    device = jax.devices()[0]
    trace = jax.profiler.trace(args.trace) if args.trace else contextlib.nullcontext()
    try:
        with trace:
            times, ooms, first_oom = run(jax, jnp, args)
    except Exception as e:  # noqa: BLE001 — reported, then the exit status says it failed
        result(status="error", error=f"{type(e).__name__}: {str(e)[:500]}", backend=backend)
        raise
    stats = device.memory_stats() or {}
    result(status="ok" if times else "oom", backend=backend, device=device.device_kind,
           jax=jax.__version__, step_ms=statistics.median(times) if times else None,
           step_ms_all=[round(t, 3) for t in times], ooms=ooms, first_oom=first_oom,
           memory_stats={k: v for k, v in stats.items() if isinstance(v, int)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
