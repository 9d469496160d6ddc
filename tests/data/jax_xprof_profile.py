"""Writes a real jax.profiler.trace logdir: a small MLP's loss and gradient step, compiled by
XLA and run under the profiler, with no hbm code in the program (the seed's workflow).

Usage: python jax_xprof_profile.py LOGDIR
The logdir gets <LOGDIR>/plugins/profile/<run>/<host>.xplane.pb, whose /host:metadata plane
holds each compiled program's HloProto (module + XLA's buffer assignment)."""
import sys

import jax
import jax.numpy as jnp


def init(key, sizes):
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        params.append((jax.random.normal(k, (n_in, n_out)) * 0.01, jnp.zeros((n_out,))))
    return params


def loss(params, x, y):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return jnp.mean((x @ w + b - y) ** 2)


@jax.jit
def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return [(w - 0.1 * gw, b - 0.1 * gb) for (w, b), (gw, gb) in zip(params, grads)]


def main(logdir):
    key = jax.random.PRNGKey(0)
    params = init(key, [256, 1024, 1024, 10])
    x = jnp.ones((128, 256))
    y = jnp.zeros((128, 10))
    with jax.profiler.trace(logdir):
        for _ in range(2):
            params = step(params, x, y)
        jax.block_until_ready(params)
        jax.block_until_ready(jax.jit(lambda a: jnp.sort(a * 2.0))(jnp.arange(100000.0)))


if __name__ == "__main__":
    main(sys.argv[1])
