"""corpus_programs.py — the conformance corpus: several hundred small JAX programs, one per
family variant, that the planner (tests/python/test_corpus_plan.py) and the XProf side check
hbm against. Nothing here is committed output: the programs are compiled by whatever JAX the
tests install.

API:
    programs() -> [Program]      every program, in a stable order
    by_name() -> {name: Program}
    Program.name                 unique and stable (also the jitted function's name, so XLA's
                                 module is `jit_<name>` and its dumps/traces can be matched)
    Program.family               "dense", "conv", "attention", ..., "shard_map"
    Program.devices              host devices it needs (1, 4 or 8)
    Program.description          one line
    Program.build() -> (fn, args) fn has .lower(*args) and is callable as fn(*args)
                                 (a jax.jit object, or a thin wrapper for the float64 programs
                                 that enters jax.enable_x64 around both)

Import side effect (the only one): if jax has not been imported yet, XLA_FLAGS gets
`--xla_force_host_platform_device_count=8` appended (unless it already names a count), so that
the sharded programs find their 4 or 8 CPU devices. Import this module before jax, or set the
flag yourself; a program whose devices are missing raises a RuntimeError that says so from
build(). The single-device programs run on device 0 whatever the count.

Shapes, dtypes and data are varied deterministically: every variant is a fixed grid point, and
each program's data comes from a NumPy generator seeded with the CRC-32 of its name.
"""
import itertools
import os
import re
import sys
import zlib

DEVICE_COUNT = 8
_FLAG = "--xla_force_host_platform_device_count"
if "jax" not in sys.modules and _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" {_FLAG}={DEVICE_COUNT}").strip()


class Program:
    """One corpus program: a name, a family and a builder of (jitted function, arguments)."""

    def __init__(self, name, family, description, builder, devices=1):
        self.name, self.family, self.description = name, family, description
        self.devices, self._builder = devices, builder

    def build(self):
        import jax

        if len(jax.devices()) < self.devices:
            raise RuntimeError(f"{self.name} needs {self.devices} devices, JAX has "
                               f"{len(jax.devices())}: set XLA_FLAGS={_FLAG}={DEVICE_COUNT} "
                               "before importing jax (or import corpus_programs first)")
        return self._builder(_Ctx(self.name))

    def __repr__(self):
        return f"Program({self.name!r}, {self.family!r}, devices={self.devices})"


class _Ctx:
    """What a builder gets: deterministic data and a jit that names the module after the program."""

    def __init__(self, name):
        import numpy as np

        self.name = name
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))

    def normal(self, *shape, dtype="float32"):
        import numpy as np
        import jax.numpy as jnp

        return jnp.asarray(self.rng.standard_normal(shape).astype(np.float32)).astype(dtype)

    def ints(self, high, *shape, dtype="int32"):
        import jax.numpy as jnp

        return jnp.asarray(self.rng.integers(0, high, size=shape), dtype=dtype)

    def jit(self, fn, **kw):
        import jax

        fn.__name__ = fn.__qualname__ = self.name
        return jax.jit(fn, **kw)


class _X64Jit:
    """A jitted function whose tracing, lowering and calls all run with float64 enabled."""

    def __init__(self, jitted):
        self._jitted = jitted

    def lower(self, *args, **kw):
        import jax

        with jax.enable_x64(True):
            return self._jitted.lower(*args, **kw)

    def __call__(self, *args, **kw):
        import jax

        with jax.enable_x64(True):
            return self._jitted(*args, **kw)


def _tag(*parts):
    text = "_".join(str(p) for p in parts)
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def _dt(name):
    import jax.numpy as jnp

    return {"f32": jnp.float32, "bf16": jnp.bfloat16, "f16": jnp.float16, "f64": jnp.float64,
            "i32": jnp.int32, "u8": jnp.uint8, "c64": jnp.complex64}[name]


# ---------------------------------------------------------------------------------------------
# Shared model pieces.

def _mlp_params(c, sizes, dtype):
    return [(c.normal(a, b, dtype=dtype), c.normal(b, dtype=dtype))
            for a, b in zip(sizes, sizes[1:])]


def _mlp(params, x, act):
    for w, b in params[:-1]:
        x = act(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def _act(name):
    import jax
    import jax.numpy as jnp

    return {"relu": jax.nn.relu, "gelu": jax.nn.gelu, "tanh": jnp.tanh, "silu": jax.nn.silu}[name]


def _layer_norm(x, g, b, eps=1e-5):
    from jax import lax

    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def _rms_norm(x, g, eps=1e-6):
    from jax import lax

    return x * lax.rsqrt((x * x).mean(-1, keepdims=True) + eps) * g


def _sgd(p, g, lr=1e-2):
    import jax
    import jax.numpy as jnp

    return jax.tree.map(lambda a, b: a - jnp.asarray(lr, a.dtype) * b, p, g)


# ---------------------------------------------------------------------------------------------
# Families. Each returns a list of Programs.

def _dense():
    out = []
    for sizes, batch, dtype, mode, act in itertools.product(
            [(64, 128, 32), (256, 512, 256), (128, 1024, 512, 64)], [8, 32], ["f32", "bf16"],
            ["fwd", "train"], ["relu"]):
        act = {"f32": "relu", "bf16": "gelu"}[dtype] if mode == "fwd" else "tanh"
        name = _tag("dense", mode, "b%d" % batch, "x".join(map(str, sizes)), dtype, act)

        def build(c, sizes=sizes, batch=batch, dtype=dtype, mode=mode, act=act):
            import jax
            import jax.numpy as jnp

            params = _mlp_params(c, sizes, _dt(dtype))
            x = c.normal(batch, sizes[0], dtype=_dt(dtype))
            if mode == "fwd":
                return c.jit(lambda p, x: _mlp(p, x, _act(act))), (params, x)
            y = c.normal(batch, sizes[-1], dtype=_dt(dtype))

            def step(p, x, y):
                loss = lambda p: jnp.mean((_mlp(p, x, _act(act)).astype(jnp.float32) - y) ** 2)
                l, g = jax.value_and_grad(loss)(p)
                return _sgd(p, g), l

            return c.jit(step), (params, x, y)

        out.append(Program(name, "dense", f"MLP {mode} {sizes} batch {batch} {dtype}", build))
    return out


def _conv():
    out = []
    configs = [  # (spatial dims, N, size, Cin, Cout, kernel, stride, padding, groups)
        (2, 4, 16, 3, 16, 3, 1, "SAME", 1), (2, 4, 32, 8, 32, 3, 2, "SAME", 1),
        (2, 2, 28, 16, 16, 5, 1, "VALID", 1), (2, 8, 16, 32, 32, 3, 1, "SAME", 32),
        (2, 2, 32, 16, 64, 1, 1, "VALID", 1), (2, 4, 24, 8, 8, 3, 2, "VALID", 2),
        (1, 8, 128, 16, 32, 5, 1, "SAME", 1), (1, 4, 256, 32, 32, 3, 2, "SAME", 1),
        (3, 2, 8, 4, 8, 3, 1, "SAME", 1), (2, 1, 64, 3, 8, 7, 2, "SAME", 1),
    ]
    for cfg, dtype, mode in itertools.product(configs, ["f32", "bf16"], ["fwd", "grad"]):
        if dtype == "bf16" and mode == "grad" and cfg[0] == 3:
            continue
        nd, n, size, cin, cout, k, s, pad, groups = cfg
        name = _tag("conv", "%dd" % nd, mode, n, size, cin, cout, "k%d" % k, "s%d" % s,
                    pad.lower(), "g%d" % groups, dtype)

        def build(c, nd=nd, n=n, size=size, cin=cin, cout=cout, k=k, s=s, pad=pad,
                  groups=groups, dtype=dtype, mode=mode):
            import jax
            import jax.numpy as jnp
            from jax import lax

            sp = "DHW"[3 - nd:]
            dn = ("N" + sp + "C", sp + "IO", "N" + sp + "C")
            x = c.normal(n, *([size] * nd), cin, dtype=_dt(dtype))
            w = c.normal(*([k] * nd), cin // groups, cout, dtype=_dt(dtype))

            def conv(x, w):
                y = lax.conv_general_dilated(x, w, (s,) * nd, pad, dimension_numbers=dn,
                                             feature_group_count=groups)
                return jax.nn.relu(y)

            if mode == "fwd":
                return c.jit(conv), (x, w)

            def grad(x, w):
                return jax.grad(lambda w, x: jnp.sum(conv(x, w).astype(jnp.float32) ** 2),
                                argnums=(0, 1))(w, x)

            return c.jit(grad), (x, w)

        out.append(Program(name, "conv", f"{nd}-D convolution {mode} {cfg} {dtype}", build))
    return out


def _attention():
    out = []
    for (b, t, h, d), causal, dtype, mode in itertools.product(
            [(2, 64, 4, 32), (1, 128, 8, 16), (4, 32, 2, 64), (2, 256, 4, 16), (1, 96, 6, 24)],
            [True, False], ["f32", "bf16"], ["fwd", "grad"]):
        if (b, t, h, d) == (2, 256, 4, 16) and dtype == "bf16" and not causal:
            continue
        name = _tag("attention", mode, b, t, h, d, "causal" if causal else "full", dtype)

        def build(c, b=b, t=t, h=h, d=d, causal=causal, dtype=dtype, mode=mode):
            import jax
            import jax.numpy as jnp

            dm = h * d
            p = {n: c.normal(dm, dm, dtype=_dt(dtype)) for n in ("wq", "wk", "wv", "wo")}
            x = c.normal(b, t, dm, dtype=_dt(dtype))

            def attn(p, x):
                q, k, v = [(x @ p[n]).reshape(b, t, h, d) for n in ("wq", "wk", "wv")]
                s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d).astype(x.dtype)
                if causal:
                    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, jnp.asarray(-1e9, s.dtype))
                a = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(x.dtype)
                return jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, t, dm) @ p["wo"]

            if mode == "fwd":
                return c.jit(attn), (p, x)
            return c.jit(lambda p, x: jax.grad(
                lambda p: jnp.mean(attn(p, x).astype(jnp.float32) ** 2))(p)), (p, x)

        out.append(Program(name, "attention", f"multi-head attention {mode} b{b} t{t} h{h} d{d}",
                           build))
    return out


def _norm():
    out = []
    for shape, kind, dtype, mode in itertools.product(
            [(32, 256), (8, 64, 512), (4, 16, 16, 128)], ["layer", "rms"], ["f32", "bf16"],
            ["fwd", "grad"]):
        if kind == "rms" and dtype == "bf16" and len(shape) == 4:
            continue
        name = _tag("norm", kind, mode, "x".join(map(str, shape)), dtype)

        def build(c, shape=shape, kind=kind, dtype=dtype, mode=mode):
            import jax
            import jax.numpy as jnp

            x = c.normal(*shape, dtype=_dt(dtype))
            g = c.normal(shape[-1], dtype=_dt(dtype))
            bias = c.normal(shape[-1], dtype=_dt(dtype))

            def norm(x, g, bias):
                if kind == "layer":
                    return _layer_norm(x, g, bias)
                return _rms_norm(x, g) + bias

            if mode == "fwd":
                return c.jit(norm), (x, g, bias)
            return c.jit(lambda x, g, b: jax.grad(
                lambda x, g, b: jnp.sum(norm(x, g, b).astype(jnp.float32) ** 2),
                argnums=(0, 1, 2))(x, g, b)), (x, g, bias)

        out.append(Program(name, "layer_norm", f"{kind} norm {mode} {shape} {dtype}", build))
    return out


def _scan():
    out = []
    for length, width, batch, variant in itertools.product(
            [4, 12], [64, 256], [16], ["plain", "reverse", "unroll2", "grad", "stacked", "nested"]):
        name = _tag("scan", variant, "n%d" % length, "w%d" % width, "b%d" % batch)

        def build(c, length=length, width=width, batch=batch, variant=variant):
            import jax
            import jax.numpy as jnp
            from jax import lax

            ws = c.normal(length, width, width)
            x = c.normal(batch, width)

            def layer(h, w):
                return jnp.tanh(h @ w), (h * h).sum()

            if variant in ("plain", "reverse", "unroll2"):
                kw = {"reverse": variant == "reverse", "unroll": 2 if variant == "unroll2" else 1}
                return c.jit(lambda ws, x: lax.scan(layer, x, ws, **kw)), (ws, x)
            if variant == "grad":
                return c.jit(lambda ws, x: jax.grad(
                    lambda ws: jnp.sum(lax.scan(layer, x, ws)[0] ** 2))(ws)), (ws, x)
            if variant == "stacked":
                return c.jit(lambda ws, x: lax.scan(lambda h, w: (h @ w, jnp.tanh(h @ w)), x,
                                                    ws)), (ws, x)

            def outer(h, w):
                h, _ = lax.scan(lambda g, _: (jnp.tanh(g @ w), None), h, None, length=3)
                return h, h.sum()

            return c.jit(lambda ws, x: lax.scan(outer, x, ws)), (ws, x)

        out.append(Program(name, "scan", f"lax.scan {variant}, {length} steps of {width}", build))
    return out


def _while():
    out = []
    for n, width, variant in itertools.product(
            [64, 256], [32, 128], ["fori", "power", "dynamic", "nested", "tuple_carry",
                                   "fori_dus"]):
        name = _tag("while", variant, n, width)

        def build(c, n=n, width=width, variant=variant):
            import jax.numpy as jnp
            from jax import lax

            a = c.normal(n, n) / n
            x = c.normal(n, width)
            if variant == "fori":
                return c.jit(lambda a, x: lax.fori_loop(0, 10, lambda i, v: jnp.tanh(a @ v), x)), \
                    (a, x)
            if variant == "power":
                def power(a, x):
                    def body(cv):
                        i, v = cv
                        v = a @ v
                        return i + 1, v / jnp.linalg.norm(v)

                    return lax.while_loop(lambda cv: cv[0] < 8, body, (0, x))[1]

                return c.jit(power), (a, x)
            if variant == "dynamic":
                def until(a, x):
                    def body(cv):
                        v, e = cv
                        w = jnp.tanh(a @ v)
                        return w, jnp.abs(w - v).max()

                    return lax.while_loop(lambda cv: cv[1] > 1e-3, body, (x, jnp.float32(1)))

                return c.jit(until), (a, x)
            if variant == "nested":
                def nested(a, x):
                    inner = lambda i, v: lax.fori_loop(0, 3, lambda j, u: jnp.sin(a @ u), v)
                    return lax.fori_loop(0, 4, inner, x)

                return c.jit(nested), (a, x)
            if variant == "tuple_carry":
                def carry(a, x):
                    def body(i, cv):
                        u, v, s = cv
                        return v, jnp.tanh(a @ u + v), s + u.sum()

                    return lax.fori_loop(0, 6, body, (x, x * 2, jnp.float32(0)))

                return c.jit(carry), (a, x)

            def fill(a, x):
                buf = jnp.zeros((8,) + x.shape, x.dtype)

                def body(i, cv):
                    v, buf = cv
                    v = jnp.tanh(a @ v)
                    return v, lax.dynamic_update_index_in_dim(buf, v, i, 0)

                return lax.fori_loop(0, 8, body, (x, buf))

            return c.jit(fill), (a, x)

        out.append(Program(name, "while", f"while loop {variant} {n}x{width}", build))
    return out


def _cond():
    out = []
    for n, variant in itertools.product(
            [128, 512], ["cond", "cond_tuple", "switch3", "switch5", "cond_in_scan", "cond_grad",
                         "cond_inplace", "switch_dus"]):
        name = _tag("cond", variant, n)

        def build(c, n=n, variant=variant):
            import jax
            import jax.numpy as jnp
            from jax import lax

            x = c.normal(n, 64)
            w = c.normal(64, 64)
            p = jnp.int32(1)
            if variant == "cond":
                return c.jit(lambda p, x, w: lax.cond(p > 0, lambda x: jnp.tanh(x @ w),
                                                      lambda x: x * 2.0, x)), (p, x, w)
            if variant == "cond_tuple":
                return c.jit(lambda p, x, w: lax.cond(p > 0, lambda x: (x @ w, x.sum()),
                                                      lambda x: (x, -x.sum()), x)), (p, x, w)
            if variant in ("switch3", "switch5"):
                k = int(variant[-1])
                branches = [lambda x, j=j: jnp.sin(x @ w) * j for j in range(k - 1)] + \
                    [lambda x: x]
                return c.jit(lambda p, x, w: lax.switch(p, branches, x)), (p, x, w)
            if variant == "cond_in_scan":
                def f(p, x, w):
                    def step(h, i):
                        h = lax.cond(i % 2 == 0, lambda h: jnp.tanh(h @ w), lambda h: h * 0.5, h)
                        return h, h.sum()

                    return lax.scan(step, x, jnp.arange(6))

                return c.jit(f), (p, x, w)
            if variant == "cond_grad":
                return c.jit(lambda p, x, w: jax.grad(lambda w: jnp.sum(lax.cond(
                    p > 0, lambda x: jnp.tanh(x @ w), lambda x: x @ (w * w), x)))(w)), (p, x, w)
            if variant == "cond_inplace":
                return c.jit(lambda p, x, w: lax.cond(p > 0, lambda x: x.at[0].set(1.0),
                                                      lambda x: x.at[1].add(2.0), x),
                             donate_argnums=(1,)), (p, x, w)

            def swdus(p, x, w):
                return lax.switch(p, [lambda x: lax.dynamic_update_slice(x, w, (p * 8, 0)),
                                      lambda x: x + 1.0, lambda x: x @ w], x)

            return c.jit(swdus), (p, x, w)

        out.append(Program(name, "cond", f"lax.cond/switch {variant} {n}x64", build))
    return out


def _remat():
    out = []
    policies = ["none", "nothing_saveable", "everything_saveable", "dots_saveable",
                "dots_with_no_batch_dims_saveable", "save_only_these_names",
                "save_anything_except_these_names", "offload_names"]
    for policy, (depth, width) in itertools.product(policies, [(4, 128), (6, 256)]):
        name = _tag("remat", policy, depth, width)

        def build(c, policy=policy, depth=depth, width=width):
            import jax
            import jax.numpy as jnp
            from jax.ad_checkpoint import checkpoint_name

            cp = jax.checkpoint_policies
            pol = {"none": None, "nothing_saveable": cp.nothing_saveable,
                   "everything_saveable": cp.everything_saveable,
                   "dots_saveable": cp.dots_saveable,
                   "dots_with_no_batch_dims_saveable": cp.dots_with_no_batch_dims_saveable,
                   "save_only_these_names": cp.save_only_these_names("hidden"),
                   "save_anything_except_these_names":
                       cp.save_anything_except_these_names("hidden"),
                   "offload_names": cp.save_and_offload_only_these_names(
                       names_which_can_be_saved=["hidden"], names_which_can_be_offloaded=[],
                       offload_src="device", offload_dst="pinned_host")}[policy]
            params = _mlp_params(c, [width] * (depth + 1), jnp.float32)
            x, y = c.normal(64, width), c.normal(64, width)

            def layer(h, w, b):
                h = checkpoint_name(jnp.tanh(h @ w + b), "hidden")
                return jax.nn.gelu(h * 1.5)

            layer = jax.checkpoint(layer, policy=pol)

            def grad(params, x, y):
                def loss(params):
                    h = x
                    for w, b in params:
                        h = layer(h, w, b)
                    return jnp.mean((h - y) ** 2)

                return jax.grad(loss)(params)

            return c.jit(grad), (params, x, y)

        out.append(Program(name, "remat", f"jax.checkpoint policy {policy}, {depth} layers",
                           build))
    return out


def _donation():
    out = []
    for width, variant in itertools.product(
            [256, 1024], ["sgd_all", "sgd_first", "adam", "unusable", "partial", "pytree_dict",
                          "inplace_scale", "swap"]):
        name = _tag("donate", variant, width)

        def build(c, width=width, variant=variant):
            import jax
            import jax.numpy as jnp

            params = _mlp_params(c, [width, width // 2, 64], jnp.float32)
            grads = jax.tree.map(jnp.ones_like, params)
            if variant == "sgd_all":
                return c.jit(lambda p, g: _sgd(p, g), donate_argnums=(0, 1)), (params, grads)
            if variant == "sgd_first":
                return c.jit(lambda p, g: _sgd(p, g), donate_argnums=(0,)), (params, grads)
            if variant == "adam":
                # Two moment trees of their own: JAX refuses an array donated twice.
                m = jax.tree.map(jnp.zeros_like, params)
                v = jax.tree.map(jnp.zeros_like, params)

                def adam(p, m, v, g):
                    m = jax.tree.map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
                    v = jax.tree.map(lambda a, b: 0.99 * a + 0.01 * b * b, v, g)
                    p = jax.tree.map(lambda a, b, d: a - 1e-3 * b / (jnp.sqrt(d) + 1e-8), p, m, v)
                    return p, m, v

                return c.jit(adam, donate_argnums=(0, 1, 2)), (params, m, v, grads)
            if variant == "unusable":
                # Donated buffers no output can take (shapes differ): XLA warns and ignores.
                x = c.normal(width, 8)
                return c.jit(lambda x: x.sum(0), donate_argnums=(0,)), (x,)
            if variant == "partial":
                x = c.normal(width, 64)
                return c.jit(lambda x, y: (x * 2.0, (x + y).sum()), donate_argnums=(0, 1)), \
                    (x, c.normal(width, 64))
            if variant == "pytree_dict":
                d = {"w": c.normal(width, 64), "b": c.normal(64), "s": c.normal(width)}
                return c.jit(lambda d, lr: {k: v * lr for k, v in d.items()},
                             donate_argnums=(0,)), (d, jnp.float32(0.5))
            if variant == "inplace_scale":
                x = c.normal(width, width)
                return c.jit(lambda x: jnp.tanh(x) * x, donate_argnums=(0,)), (x,)
            x, y = c.normal(width, 32), c.normal(width, 32)
            return c.jit(lambda x, y: (y + 1.0, x - 1.0), donate_argnums=(0, 1)), (x, y)

        out.append(Program(name, "donation", f"donate_argnums {variant} width {width}", build))
    return out


def _custom_vjp():
    out = []
    for n, variant in itertools.product([256, 1024], ["clip", "softplus", "layer", "straight",
                                                      "checkpointed", "fwd_only"]):
        name = _tag("custom_vjp", variant, n)

        def build(c, n=n, variant=variant):
            import jax
            import jax.numpy as jnp

            @jax.custom_vjp
            def clip_grad(x):
                return x

            clip_grad.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1, 1),))

            @jax.custom_vjp
            def softplus(x):
                return jnp.logaddexp(x, 0.0)

            softplus.defvjp(lambda x: (softplus(x), x),
                            lambda x, g: (g * jax.nn.sigmoid(x),))

            @jax.custom_vjp
            def dense(x, w):
                return jnp.tanh(x @ w)

            def dense_fwd(x, w):
                y = jnp.tanh(x @ w)
                return y, (x, w, y)

            def dense_bwd(res, g):
                x, w, y = res
                gy = g * (1 - y * y)
                return gy @ w.T, x.T @ gy

            dense.defvjp(dense_fwd, dense_bwd)

            @jax.custom_vjp
            def round_ste(x):
                return jnp.round(x)

            round_ste.defvjp(lambda x: (jnp.round(x), None), lambda _, g: (g,))

            x, w = c.normal(64, n), c.normal(n, n)
            f = {"clip": lambda x, w: clip_grad(x @ w) ** 2,
                 "softplus": lambda x, w: softplus(x @ w),
                 "layer": lambda x, w: dense(dense(x, w), w),
                 "straight": lambda x, w: round_ste(x * 4) @ w,
                 "checkpointed": lambda x, w: jax.checkpoint(lambda x: dense(x, w))(x),
                 "fwd_only": lambda x, w: dense(x, w) + softplus(x)}[variant]
            if variant == "fwd_only":
                return c.jit(f), (x, w)
            return c.jit(lambda x, w: jax.grad(lambda x, w: jnp.sum(f(x, w)), argnums=(0, 1))(
                x, w)), (x, w)

        out.append(Program(name, "custom_vjp", f"jax.custom_vjp {variant} {n}", build))
    return out


def _sort():
    out = []
    for (shape, axis), dtype, variant in itertools.product(
            [((1024,), 0), ((64, 256), 1), ((128, 32), 0)], ["f32", "i32", "bf16"],
            ["sort", "argsort", "multi", "topk"]):
        if dtype == "bf16" and variant == "multi":
            continue
        name = _tag("sort", variant, "x".join(map(str, shape)), "a%d" % axis, dtype)

        def build(c, shape=shape, axis=axis, dtype=dtype, variant=variant):
            import jax.numpy as jnp
            from jax import lax

            x = c.ints(1000, *shape, dtype=_dt(dtype)) if dtype == "i32" else \
                c.normal(*shape, dtype=_dt(dtype))
            if variant == "sort":
                return c.jit(lambda x: jnp.sort(x, axis=axis)), (x,)
            if variant == "argsort":
                return c.jit(lambda x: jnp.argsort(x, axis=axis, stable=True)), (x,)
            if variant == "multi":
                y = c.normal(*shape)
                return c.jit(lambda x, y: lax.sort((x, y, -y), dimension=axis, num_keys=1)), \
                    (x, y)
            return c.jit(lambda x: lax.top_k(jnp.moveaxis(x, axis, -1), 8)), (x,)

        out.append(Program(name, "sort", f"{variant} {shape} axis {axis} {dtype}", build))
    return out


def _gather_scatter():
    out = []
    for (vocab, dim, n), variant in itertools.product(
            [(1000, 64, 128), (4096, 128, 512), (256, 32, 2048)],
            ["take", "embed_grad", "set", "add", "mul", "max", "take_along", "segment_sum"]):
        name = _tag("gather", variant, vocab, dim, n)

        def build(c, vocab=vocab, dim=dim, n=n, variant=variant):
            import jax
            import jax.numpy as jnp

            table = c.normal(vocab, dim)
            idx = c.ints(vocab, n)
            upd = c.normal(n, dim)
            if variant == "take":
                return c.jit(lambda t, i: jnp.take(t, i, axis=0) * 2.0), (table, idx)
            if variant == "embed_grad":
                return c.jit(lambda t, i: jax.grad(lambda t: jnp.sum(t[i] ** 2))(t)), (table, idx)
            if variant in ("set", "add", "mul", "max"):
                return c.jit(lambda t, i, u: getattr(t.at[i], variant)(u)), (table, idx, upd)
            if variant == "take_along":
                cols = c.ints(dim, vocab, 4)
                return c.jit(lambda t, j: jnp.take_along_axis(t, j, axis=1)), (table, cols)
            return c.jit(lambda u, i: jax.ops.segment_sum(u, i % 97, num_segments=97)), (upd, idx)

        out.append(Program(name, "gather_scatter", f"{variant} on [{vocab},{dim}] with {n} indices",
                           build))
    return out


def _dus():
    out = []
    for (seq, dim), variant in itertools.product(
            [(128, 64), (512, 128)], ["dus", "dslice", "kv_cache", "loop_fill", "donated",
                                      "at_set_dynamic", "dus_fused", "two_updates"]):
        name = _tag("dus", variant, seq, dim)

        def build(c, seq=seq, dim=dim, variant=variant):
            import jax.numpy as jnp
            from jax import lax

            buf = c.normal(4, seq, dim)
            upd = c.normal(4, 16, dim)
            pos = jnp.int32(seq // 3)
            if variant == "dus":
                return c.jit(lambda b, u, p: lax.dynamic_update_slice(b, u, (0, p, 0))), \
                    (buf, upd, pos)
            if variant == "dslice":
                return c.jit(lambda b, u, p: lax.dynamic_slice(b, (0, p, 0), (4, 16, dim)) + u), \
                    (buf, upd, pos)
            if variant == "kv_cache":
                def step(k, v, u, p):
                    return (lax.dynamic_update_slice(k, u, (0, p, 0)),
                            lax.dynamic_update_slice(v, u * 2, (0, p, 0)))

                return c.jit(step, donate_argnums=(0, 1)), (buf, buf + 1, upd, pos)
            if variant == "loop_fill":
                def fill(b, u, p):
                    return lax.fori_loop(0, seq // 16, lambda i, b: lax.dynamic_update_slice(
                        b, u * i.astype(u.dtype), (0, i * 16, 0)), b)

                return c.jit(fill), (buf, upd, pos)
            if variant == "donated":
                return c.jit(lambda b, u, p: lax.dynamic_update_slice(b, jnp.tanh(u), (0, p, 0)),
                             donate_argnums=(0,)), (buf, upd, pos)
            if variant == "at_set_dynamic":
                return c.jit(lambda b, u, p: b.at[:, p].set(u[:, 0])), (buf, upd, pos)
            if variant == "dus_fused":
                return c.jit(lambda b, u, p: lax.dynamic_update_slice(b * 2.0, u, (0, p, 0))), \
                    (buf, upd, pos)
            return c.jit(lambda b, u, p: lax.dynamic_update_slice(
                lax.dynamic_update_slice(b, u, (0, p, 0)), -u, (0, 0, 0))), (buf, upd, pos)

        out.append(Program(name, "dynamic_update_slice", f"{variant} on [4,{seq},{dim}]", build))
    return out


def _fft():
    out = []
    for n, dtype, variant in itertools.product(
            [64, 256], ["f32", "f64"], ["fft", "ifft", "rfft", "irfft", "fft2", "fftn3",
                                        "rfftn", "conv", "pipeline3d"]):
        if dtype == "f64" and variant in ("ifft", "fft2"):
            continue
        name = _tag("fft", variant, n, dtype)

        def build(c, n=n, dtype=dtype, variant=variant):
            import jax
            import jax.numpy as jnp

            def make():
                real = c.normal(8, n, dtype=_dt(dtype))
                if variant in ("fft", "ifft"):
                    return (real + 1j * c.normal(8, n, dtype=_dt(dtype)),)
                if variant in ("rfft", "conv"):
                    other = c.normal(8, n, dtype=_dt(dtype))
                    return (real,) if variant == "rfft" else (real, other)
                if variant == "irfft":
                    return (jnp.fft.rfft(real),)
                m = max(8, n // 16)
                if variant in ("fft2", "rfftn"):
                    return (c.normal(4, m, m, dtype=_dt(dtype)),)
                return (c.normal(m, m, m, dtype=_dt(dtype)),)

            f = {"fft": jnp.fft.fft, "ifft": jnp.fft.ifft, "rfft": jnp.fft.rfft,
                 "irfft": jnp.fft.irfft, "fft2": lambda x: jnp.fft.fft2(x),
                 "fftn3": lambda x: jnp.fft.fftn(x),
                 "rfftn": lambda x: jnp.fft.irfftn(jnp.fft.rfftn(x) * 2, s=x.shape),
                 "conv": lambda a, b: jnp.fft.irfft(jnp.fft.rfft(a) * jnp.fft.rfft(b), n=n),
                 # forward 3-D transform one axis at a time with transposes between, and back
                 "pipeline3d": lambda x: jnp.fft.ifft(jnp.fft.fft(jnp.fft.fft(jnp.fft.fft(
                     x.astype(jnp.result_type(x.dtype, jnp.complex64)), axis=2).transpose(
                     0, 2, 1), axis=2).transpose(2, 1, 0), axis=2), axis=0).real,
                 }[variant]
            if dtype == "f64":
                with jax.enable_x64(True):
                    args = make()
                fn = c.jit(f)
                return _X64Jit(fn), args
            return c.jit(f), make()

        out.append(Program(name, "fft", f"jnp.fft {variant} {n} {dtype}", build))
    return out


def _random():
    out = []
    for shape, variant in itertools.product(
            [(256,), (64, 128), (16, 32, 64)], ["normal", "uniform", "bernoulli", "categorical",
                                                "permutation", "dropout_grad"]):
        name = _tag("random", variant, "x".join(map(str, shape)))

        def build(c, shape=shape, variant=variant):
            import jax
            import jax.numpy as jnp

            key = jax.random.key(zlib.crc32(c.name.encode()) % 1000)
            x = c.normal(*shape)
            if variant == "normal":
                return c.jit(lambda k, x: x + jax.random.normal(k, shape)), (key, x)
            if variant == "uniform":
                def two(k, x):
                    k1, k2 = jax.random.split(k)
                    return x * jax.random.uniform(k1, shape), jax.random.truncated_normal(
                        k2, -2.0, 2.0, shape)

                return c.jit(two), (key, x)
            if variant == "bernoulli":
                return c.jit(lambda k, x: jnp.where(jax.random.bernoulli(k, 0.3, shape), x, 0.0)), \
                    (key, x)
            if variant == "categorical":
                return c.jit(lambda k, x: jax.random.categorical(k, x, axis=-1)), (key, x)
            if variant == "permutation":
                return c.jit(lambda k, x: jax.random.permutation(k, x.reshape(-1))), (key, x)

            def dropout_grad(k, x):
                def loss(x):
                    keep = jax.random.bernoulli(k, 0.9, shape)
                    return jnp.sum(jnp.where(keep, jnp.tanh(x) / 0.9, 0.0) ** 2)

                return jax.grad(loss)(x)

            return c.jit(dropout_grad), (key, x)

        out.append(Program(name, "random", f"jax.random {variant} {shape}", build))
    return out


def _mesh(devices, axes):
    import numpy as np
    import jax
    from jax.sharding import Mesh

    shape = tuple(n for _, n in axes)
    return Mesh(np.array(jax.devices()[:devices]).reshape(shape), tuple(a for a, _ in axes))


_MESHES = [(4, (("x", 4),)), (4, (("x", 2), ("y", 2))), (8, (("x", 8),)),
           (8, (("x", 4), ("y", 2))), (8, (("x", 2), ("y", 4)))]


def _mesh_variants(family, variants, one_axis_only):
    """(name, devices, axes, variant) for every mesh of 4 and 8 devices and every variant;
    the variants in one_axis_only only on 1-D meshes."""
    for devices, axes in _MESHES:
        for variant in variants:
            if len(axes) > 1 and variant in one_axis_only:
                continue
            mesh_tag = "x".join(f"{a}{n}" for a, n in axes)
            yield _tag(family, variant, "d%d" % devices, mesh_tag), devices, axes, variant


def _sharded():
    """jit over NamedShardings: XLA's SPMD partitioner inserts the collectives."""
    out = []
    variants = ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "permute_roll",
                "mlp_train", "constraint_chain", "halo_conv"]
    for name, devices, axes, variant in _mesh_variants("sharded", variants, ("halo_conv",)):

        def build(c, devices=devices, axes=axes, variant=variant):
            import jax
            import jax.numpy as jnp
            from jax import lax
            from jax.sharding import NamedSharding, PartitionSpec as P

            mesh = _mesh(devices, axes)
            ax = axes[0][0]
            other = axes[1][0] if len(axes) > 1 else None
            S = lambda *spec: NamedSharding(mesh, P(*spec))
            put = lambda a, *spec: jax.device_put(a, S(*spec))
            x = put(c.normal(128, 256), ax, None)
            w = put(c.normal(256, 128), None, other)
            if variant == "all_gather":
                return c.jit(lambda x: jnp.tanh(x) * 2.0, out_shardings=S(None, None)), (x,)
            if variant == "reduce_scatter":
                a = put(c.normal(128, 256), None, ax)
                b = put(c.normal(256, 128), ax, None)
                return c.jit(lambda a, b: a @ b, out_shardings=S(ax, None)), (a, b)
            if variant == "all_reduce":
                a = put(c.normal(128, 256), None, ax)
                b = put(c.normal(256, 128), ax, None)
                return c.jit(lambda a, b: jnp.tanh(a @ b), out_shardings=S(None, None)), (a, b)
            if variant == "all_to_all":
                return c.jit(lambda x: lax.with_sharding_constraint(jnp.sin(x), S(None, ax)) * 3,
                             out_shardings=S(None, ax)), (x,)
            if variant == "permute_roll":
                return c.jit(lambda x: jnp.roll(x, 3, axis=0) + x), (x,)
            if variant == "mlp_train":
                w2 = put(c.normal(128, 256), other, None)

                def step(w1, w2, x):
                    g1, g2 = jax.grad(lambda a, b: jnp.mean(jnp.tanh(x @ a) @ b),
                                      argnums=(0, 1))(w1, w2)
                    return w1 - 0.1 * g1, w2 - 0.1 * g2

                return c.jit(step), (w, w2, x)
            if variant == "constraint_chain":
                def chain(x, w):
                    h = lax.with_sharding_constraint(x @ w, S(None, ax))
                    h = lax.with_sharding_constraint(jnp.tanh(h), S(ax, None))
                    return h.sum(0)

                return c.jit(chain), (x, w)
            img = put(c.normal(4, 64, 16), None, ax, None)
            k = c.normal(3, 16, 16)

            def conv(img, k):
                return lax.conv_general_dilated(img, k, (1,), "SAME",
                                                dimension_numbers=("NWC", "WIO", "NWC"))

            return c.jit(conv, out_shardings=S(None, ax, None)), (img, k)

        out.append(Program(name, "sharded", f"jit with NamedSharding, {variant}, mesh {axes}",
                           build, devices=devices))
    return out


def _shard_map():
    """shard_map with every collective JAX has, on 4 and 8 devices."""
    out = []
    variants = ["psum", "pmean_pmax", "all_gather", "all_gather_tiled", "psum_scatter",
                "all_to_all", "ppermute_ring", "ppermute_pairs", "axis_index", "ring_matmul"]
    for name, devices, axes, variant in _mesh_variants("shard_map", variants,
                                                      ("ppermute_pairs", "axis_index")):

        def build(c, devices=devices, axes=axes, variant=variant):
            import jax
            import jax.numpy as jnp
            from jax import lax
            from jax.sharding import PartitionSpec as P

            mesh = _mesh(devices, axes)
            ax = axes[0][0]
            n = axes[0][1]
            x = c.normal(32 * n, 128)
            w = c.normal(128, 128)

            def smap(f, in_specs, out_specs):
                return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)

            if variant == "psum":
                f = smap(lambda x, w: lax.psum(jnp.tanh(x @ w), ax), (P(ax), P()), P())
            elif variant == "pmean_pmax":
                f = smap(lambda x, w: (lax.pmean(x @ w, ax), lax.pmax(x.max(0), ax)),
                         (P(ax), P()), (P(), P()))
            elif variant == "all_gather":
                f = smap(lambda x, w: lax.all_gather(x @ w, ax, to="invarying"), (P(ax), P()), P())
            elif variant == "all_gather_tiled":
                f = smap(lambda x, w: lax.all_gather(x, ax, tiled=True, to="invarying") @ w,
                         (P(ax), P()), P())
            elif variant == "psum_scatter":
                f = smap(lambda x, w: lax.psum_scatter(x @ w, ax, scatter_dimension=0,
                                                       tiled=True), (P(ax), P()), P(ax))
            elif variant == "all_to_all":
                f = smap(lambda x, w: lax.all_to_all(x @ w, ax, 1, 0, tiled=True),
                         (P(ax), P()), P(None, ax))
            elif variant == "ppermute_ring":
                perm = [(i, (i + 1) % n) for i in range(n)]
                f = smap(lambda x, w: lax.ppermute(x, ax, perm) @ w, (P(ax), P()), P(ax))
            elif variant == "ppermute_pairs":
                perm = [(i, i ^ 1) for i in range(n)]
                f = smap(lambda x, w: x + lax.ppermute(jnp.tanh(x @ w), ax, perm),
                         (P(ax), P()), P(ax))
            elif variant == "axis_index":
                f = smap(lambda x, w: x * lax.axis_index(ax).astype(x.dtype) @ w,
                         (P(ax), P()), P(ax))
            else:
                perm = [(i, (i + 1) % n) for i in range(n)]

                def ring(x, w):
                    def step(i, cw):
                        acc, blk = cw
                        return acc + jnp.tanh(x @ blk), lax.ppermute(blk, ax, perm)

                    return lax.fori_loop(0, n, step, ((x @ w) * 0.0, w))[0]

                f = smap(ring, (P(ax), P(None, ax)), P(ax))
            return c.jit(lambda x, w: f(x, w)), (x, w)

        out.append(Program(name, "shard_map", f"shard_map {variant}, mesh {axes}", build,
                           devices=devices))
    return out


_FAMILIES = [_dense, _conv, _attention, _norm, _scan, _while, _cond, _remat, _donation,
             _custom_vjp, _sort, _gather_scatter, _dus, _fft, _random, _sharded, _shard_map]


def collect(families, taken=()):
    """The programs of every family builder, in order; raises on a name used twice or in
    `taken` (the names of another corpus)."""
    progs = [p for family in families for p in family()]
    names = [p.name for p in progs]
    clash = sorted({n for n in names if names.count(n) > 1 or n in taken})
    if clash:
        raise AssertionError(f"duplicate program names {clash}")
    return progs


def print_families(progs):
    from collections import Counter

    for fam, n in Counter(p.family for p in progs).items():
        print(f"{fam:22s} {n}")
    print(f"{'total':22s} {len(progs)}")


def programs():
    """Every program of the corpus, in a stable order (families as listed, then variants)."""
    return collect(_FAMILIES)


def by_name():
    return {p.name: p for p in programs()}


if __name__ == "__main__":
    print_families(programs())
