"""hbm.fit on JAX programs of different families (an MLP training step, causal attention over a
sequence, a convolution net's training step, a scan over layers of varying width, an Adam update
of a varying number of parameters): the answer's program fits in the memory per XLA's own
compiled.memory_analysis() (arguments + outputs - aliased + temporaries), and the next value's
does not — both compiled again here with JAX, independently of hbm. A memory too small for the
smallest value says so, with the plan of that value."""
import jax
import jax.numpy as jnp
import pytest
from jax import lax

F32 = jnp.float32


def sds(*shape):
    return jax.ShapeDtypeStruct(shape, F32)


def mlp_train(w1, w2, x, y):
    def loss(w1, w2):
        return jnp.mean((jnp.tanh(x @ w1) @ w2 - y) ** 2)

    g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2)
    return w1 - 1e-3 * g1, w2 - 1e-3 * g2


def attention(q, k, v):
    s = jnp.einsum("qd,kd->qk", q, k) / 8.0
    mask = jnp.tril(jnp.ones((q.shape[0], k.shape[0]), bool))
    return jax.nn.softmax(jnp.where(mask, s, -1e9), axis=-1) @ v


def conv_train(w, x):
    def loss(w):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.mean(jax.nn.relu(y) ** 2)

    return w - 1e-2 * jax.grad(loss)(w)


def scan_layers(ws, x):
    def layer(h, w):
        return jnp.tanh(h @ w), None

    return lax.scan(layer, x, ws)[0]


def adam(p, m, v, g):
    m = 0.9 * m + 0.1 * g
    v = 0.999 * v + 0.001 * g * g
    return p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), m, v


# name: (function, make_args(value), memory, multiple)
FAMILIES = {
    "mlp_batch": (mlp_train, lambda b: (sds(256, 512), sds(512, 128), sds(b, 256), sds(b, 128)),
                  "6MiB", 8),
    "attention_sequence": (attention, lambda n: (sds(n, 64), sds(n, 64), sds(n, 64)), "10MiB", 16),
    "conv_batch": (conv_train, lambda b: (sds(3, 3, 16, 32), sds(b, 16, 16, 16)), "5MiB", 1),
    "scan_width": (scan_layers, lambda d: (sds(4, d, d), sds(32, d)), "3MiB", 8),
    "adam_parameters": (adam, lambda n: (sds(n), sds(n), sds(n), sds(n)), "1MiB", 256),
}


def xla_bytes(fn, args):
    """What XLA's own memory_analysis() says the compiled program holds on the device."""
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    return (stats.argument_size_in_bytes + stats.output_size_in_bytes
            - stats.alias_size_in_bytes + stats.temp_size_in_bytes)


@pytest.fixture(scope="module")
def hbm(hbm_package):
    return hbm_package


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_fit_answer_fits_and_the_next_does_not(hbm, name):
    fn, make_args, memory, multiple = FAMILIES[name]
    f = hbm.fit(fn, make_args, memory=memory, multiple=multiple, lo=multiple, hi=1 << 16,
                dimension=name.split("_")[-1])
    limit = hbm._lib.parse_size(memory)
    assert f.fits and f.next == f.value + multiple, str(f)
    assert f.value > multiple, f"{name}: the family should fit more than its smallest member"
    assert xla_bytes(fn, make_args(f.value)) <= limit, str(f)
    assert xla_bytes(fn, make_args(f.next)) > limit, str(f)
    # The plans of both values, XLA's numbers beside them, and what is at the peak past it.
    assert f.plan.fits and not f.next_plan.fits
    assert f.plan.xla and f.next_plan.xla
    assert f.at_peak and f.at_peak[0]["size"] > 0
    assert f"is {f.value}" in str(f).splitlines()[0]
    assert "what is at the peak" in f.report


def test_smallest_does_not_fit_says_so_with_the_plan(hbm):
    fn, make_args, _, multiple = FAMILIES["mlp_batch"]
    f = hbm.fit(fn, make_args, memory="64KiB", lo=8, multiple=multiple, dimension="batch")
    assert not f.fits and f.value is None and f.plan is None
    assert f.next == 8
    assert not f.next_plan.fits and f.at_peak
    assert "even the smallest batch, 8, does not fit in 64.00KiB" in str(f)
    assert "Largest program allocations" in f.report
    assert xla_bytes(fn, make_args(8)) > 64 * 1024


def test_errors_from_make_args_are_raised(hbm):
    def broken(b):
        raise ValueError(f"no arguments for {b}")

    with pytest.raises(ValueError, match="no arguments for 1"):
        hbm.fit(mlp_train, broken, memory="1GiB")
    with pytest.raises(hbm.HbmError, match="no memory to fit in"):
        hbm.fit(mlp_train, FAMILIES["mlp_batch"][1], memory=0)
