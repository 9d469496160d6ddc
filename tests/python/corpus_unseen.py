"""corpus_unseen.py — held-out program families for the planner (issue 22): JAX programs of
kinds the tuned corpus (corpus_programs.py) does not generate, so that test_corpus_unseen.py
measures how `hbm plan` does on programs nobody tuned it on: CPU LAPACK custom calls, cumulative
scans, top-k and multi-key sorts, transposed/grouped/dilated convolutions, pooling and its
gradient (select-and-scatter), embeddings with one-hot and segment reductions, complex numbers
and 2-D/3-D real FFTs, integer and half-precision mixes, vmapped loops and lax.map, einsum
chains, jax.nn.dot_product_attention, cross-entropy training steps, jit with NamedShardings on
2-D meshes and shard_map rings / all-to-all / psum_scatter on other axes.

Same API as corpus_programs (programs(), by_name(), Program); its helpers are imported from
there, and importing it sets the host device count the same way.
"""
import itertools

import corpus_programs as cp
from corpus_programs import Program, _X64Jit, _dt, _mesh, _tag

DEVICE_COUNT = cp.DEVICE_COUNT


def _x64(c, make, f, **jit_kw):
    """A float64 program: arguments made and the function traced with x64 enabled."""
    import jax

    with jax.enable_x64(True):
        args = make()
    return _X64Jit(c.jit(f, **jit_kw)), args


def _spd(c, b, n, dtype):
    """A batch of symmetric positive-definite matrices."""
    import jax.numpy as jnp

    a = c.normal(b, n, n, dtype=dtype)
    return a @ jnp.swapaxes(a, -1, -2) + n * jnp.eye(n, dtype=dtype)


def _linalg():
    out = []
    for (b, n), dtype, op in itertools.product(
            [(1, 16), (4, 64), (2, 128)], ["f32", "f64"],
            ["cholesky", "qr", "svd", "eigh", "trisolve", "lu", "solve", "inv", "det",
             "slogdet_grad"]):
        if dtype == "f64" and op in ("qr", "det", "lu") and n != 64:
            continue
        name = _tag("linalg", op, b, n, dtype)

        def build(c, b=b, n=n, dtype=dtype, op=op):
            import jax
            import jax.numpy as jnp
            from jax import lax

            f = {"cholesky": lambda a, r: jnp.linalg.cholesky(a) @ r,
                 "qr": lambda a, r: jnp.linalg.qr(a + r)[1],
                 "svd": lambda a, r: jnp.linalg.svd(a + r, compute_uv=n < 128),
                 "eigh": lambda a, r: jnp.linalg.eigh(a),
                 "trisolve": lambda a, r: lax.linalg.triangular_solve(
                     jnp.linalg.cholesky(a), r, left_side=True, lower=True),
                 "lu": lambda a, r: lax.linalg.lu(a + r),
                 "solve": lambda a, r: jnp.linalg.solve(a, r),
                 "inv": lambda a, r: jnp.linalg.inv(a) + r,
                 "det": lambda a, r: jnp.linalg.det(a + r),
                 "slogdet_grad": lambda a, r: jax.grad(
                     lambda a: jnp.linalg.slogdet(a)[1].sum())(a) * r,
                 }[op]
            make = lambda: (_spd(c, b, n, _dt(dtype)), c.normal(b, n, n, dtype=_dt(dtype)))
            if dtype == "f64":
                return _x64(c, make, f)
            return c.jit(f), make()

        out.append(Program(name, "linalg", f"jnp.linalg {op} [{b},{n},{n}] {dtype}", build))
    return out


def _cumulative():
    out = []
    for shape, axis, op in itertools.product(
            [(1000,), (64, 96), (8, 32, 48)], [0, -1],
            ["cumsum", "cumprod", "cummax", "logcumsumexp", "assoc_scan", "cumsum_grad"]):
        if len(shape) == 1 and axis == -1:
            continue
        name = _tag("cumulative", op, "x".join(map(str, shape)), "a%d" % (axis % len(shape)))

        def build(c, shape=shape, axis=axis, op=op):
            import jax
            import jax.numpy as jnp
            from jax import lax

            def affine(p, q):  # composition of x -> a*x + b, an associative operator
                return p[0] * q[0], q[0] * p[1] + q[1]

            f = {"cumsum": lambda x: jnp.cumsum(x, axis=axis),
                 "cumprod": lambda x: jnp.cumprod(1 + 0.01 * x, axis=axis),
                 "cummax": lambda x: lax.cummax(x, axis=axis % x.ndim),
                 "logcumsumexp": lambda x: lax.cumlogsumexp(x, axis=axis % x.ndim),
                 "assoc_scan": lambda x: lax.associative_scan(affine, (jnp.tanh(x), x),
                                                              axis=axis % x.ndim)[1],
                 "cumsum_grad": lambda x: jax.grad(
                     lambda x: jnp.sum(jnp.cumsum(x, axis=axis) ** 2))(x)}[op]
            return c.jit(f), (c.normal(*shape),)

        out.append(Program(name, "cumulative", f"{op} over {shape} axis {axis}", build))
    return out


def _topk():
    out = []
    for (shape, k), variant in itertools.product(
            [((4096,), 16), ((32, 500), 5), ((16, 8, 300), 40)],
            ["top_k", "argsort_desc", "sort_2keys", "top_k_grad"]):
        name = _tag("topk", variant, "x".join(map(str, shape)), "k%d" % k)

        def build(c, shape=shape, k=k, variant=variant):
            import jax
            import jax.numpy as jnp
            from jax import lax

            x = c.normal(*shape)
            if variant == "top_k":
                return c.jit(lambda x: lax.top_k(x * 2, k)), (x,)
            if variant == "argsort_desc":
                return c.jit(lambda x: jnp.argsort(-x, axis=-1)[..., :k]), (x,)
            if variant == "sort_2keys":
                keys = c.ints(7, *shape)
                return c.jit(lambda a, x: lax.sort((a, x, x * x), num_keys=2)), (keys, x)
            return c.jit(lambda x: jax.grad(lambda x: lax.top_k(x, k)[0].sum())(x)), (x,)

        out.append(Program(name, "topk_sort", f"{variant} {shape} k={k}", build))
    return out


def _conv_variants():
    out = []
    configs = [  # (kind, N, size, Cin, Cout, kernel, stride, dilation, groups)
        ("transpose", 2, 16, 8, 16, 3, 2, 1, 1), ("transpose", 4, 8, 32, 8, 4, 2, 1, 1),
        ("grouped", 2, 16, 32, 64, 3, 1, 1, 4), ("depthwise", 4, 20, 24, 24, 5, 1, 1, 24),
        ("dilated", 2, 32, 8, 16, 3, 1, 2, 1), ("dilated", 1, 48, 16, 16, 3, 1, 3, 1),
        ("strided1d", 4, 200, 12, 24, 7, 3, 1, 1), ("depthwise_s2", 2, 32, 16, 32, 3, 2, 1, 16),
    ]
    for cfg, mode in itertools.product(configs, ["fwd", "grad"]):
        kind, n, size, cin, cout, k, s, d, groups = cfg
        name = _tag("convx", kind, mode, n, size, cin, cout, "k%d" % k, "s%d" % s, "d%d" % d,
                    "g%d" % groups)

        def build(c, kind=kind, n=n, size=size, cin=cin, cout=cout, k=k, s=s, d=d,
                  groups=groups, mode=mode):
            import jax
            import jax.numpy as jnp
            from jax import lax

            nd = 1 if kind == "strided1d" else 2
            sp = "HW"[2 - nd:]
            dn = ("N" + sp + "C", sp + "IO", "N" + sp + "C")
            x = c.normal(n, *([size] * nd), cin)
            if kind == "transpose":
                w = c.normal(k, k, cin, cout)

                def conv(x, w):
                    return jnp.tanh(lax.conv_transpose(x, w, (s, s), "SAME",
                                                       dimension_numbers=dn))
            else:
                w = c.normal(*([k] * nd), cin // groups, cout)

                def conv(x, w):
                    return jax.nn.gelu(lax.conv_general_dilated(
                        x, w, (s,) * nd, "SAME", rhs_dilation=(d,) * nd, dimension_numbers=dn,
                        feature_group_count=groups))

            if mode == "fwd":
                return c.jit(conv), (x, w)
            return c.jit(lambda x, w: jax.grad(lambda x, w: jnp.sum(conv(x, w) ** 2),
                                               argnums=(0, 1))(x, w)), (x, w)

        out.append(Program(name, "conv_variants", f"{kind} convolution {mode} {cfg}", build))
    return out


def _pooling():
    out = []
    for (n, size, ch), (win, stride), kind, mode in itertools.product(
            [(4, 32, 16), (2, 17, 8)], [(2, 2), (3, 2)], ["max", "avg"], ["fwd", "grad"]):
        name = _tag("pool", kind, mode, n, size, ch, "w%d" % win, "s%d" % stride)

        def build(c, n=n, size=size, ch=ch, win=win, stride=stride, kind=kind, mode=mode):
            import jax
            import jax.numpy as jnp
            from jax import lax

            dims, strides = (1, win, win, 1), (1, stride, stride, 1)

            def pool(x):
                if kind == "max":
                    return lax.reduce_window(x, -jnp.inf, lax.max, dims, strides, "VALID")
                return lax.reduce_window(x, 0.0, lax.add, dims, strides, "SAME") / (win * win)

            x = c.normal(n, size, size, ch)
            if mode == "fwd":
                return c.jit(lambda x: pool(jax.nn.relu(x))), (x,)
            return c.jit(lambda x: jax.grad(lambda x: jnp.sum(pool(x * 1.5) ** 2))(x)), (x,)

        out.append(Program(name, "pooling", f"{kind} pool {mode} {win}/{stride} on "
                           f"[{n},{size},{size},{ch}]", build))
    return out


def _embedding():
    out = []
    for (vocab, dim, batch, seq), variant in itertools.product(
            [(512, 32, 4, 16), (3000, 64, 8, 40)],
            ["lookup_onehot", "onehot_matmul", "segment_max", "segment_mean", "train_step",
             "bag"]):
        name = _tag("embed", variant, vocab, dim, batch, seq)

        def build(c, vocab=vocab, dim=dim, batch=batch, seq=seq, variant=variant):
            import jax
            import jax.numpy as jnp

            table = c.normal(vocab, dim)
            ids = c.ints(vocab, batch, seq)
            if variant == "lookup_onehot":
                return c.jit(lambda t, i: (t[i], jax.nn.one_hot(i[:, 0], 10))), (table, ids)
            if variant == "onehot_matmul":
                return c.jit(lambda t, i: jax.nn.one_hot(i, vocab, dtype=t.dtype) @ t), \
                    (table, ids)
            if variant in ("segment_max", "segment_mean"):
                def seg(t, i):
                    rows, segs = t[i.reshape(-1)], i.reshape(-1) % 50
                    if variant == "segment_max":
                        return jax.ops.segment_max(rows, segs, num_segments=50)
                    s = jax.ops.segment_sum(rows, segs, num_segments=50)
                    cnt = jax.ops.segment_sum(jnp.ones_like(segs, jnp.float32), segs,
                                              num_segments=50)
                    return s / jnp.maximum(cnt, 1.0)[:, None]

                return c.jit(seg), (table, ids)
            if variant == "bag":
                w = c.normal(batch, seq)
                return c.jit(lambda t, i, w: jnp.einsum("bs,bsd->bd", w, t[i])), (table, ids, w)
            out_w = c.normal(dim, vocab)

            def step(t, o, i):
                def loss(t, o):
                    h = t[i[:, :-1]].mean(1)
                    logits = h @ o
                    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits),
                                                         i[:, -1:], axis=1))

                gt, go = jax.grad(loss, argnums=(0, 1))(t, o)
                return t - 0.1 * gt, o - 0.1 * go

            return c.jit(step, donate_argnums=(0, 1)), (table, out_w, ids)

        out.append(Program(name, "embedding", f"embedding {variant} vocab {vocab} dim {dim}",
                           build))
    return out


def _complex():
    out = []
    for n, variant in itertools.product(
            [32, 96], ["matmul", "abs_angle", "rfft2", "irfft2", "rfftn3", "fft_conv2d",
                       "grad_real", "c128_matmul"]):
        name = _tag("complex", variant, n)

        def build(c, n=n, variant=variant):
            import jax
            import jax.numpy as jnp

            re_, im = c.normal(4, n, n), c.normal(4, n, n)
            z = re_ + 1j * im
            if variant == "matmul":
                return c.jit(lambda a, b: a @ b.conj().swapaxes(-1, -2)), (z, z * 2)
            if variant == "abs_angle":
                return c.jit(lambda z: (jnp.abs(z), jnp.angle(z), jnp.exp(z))), (z,)
            if variant == "rfft2":
                return c.jit(lambda x: jnp.fft.rfft2(x)), (re_,)
            if variant == "irfft2":
                return c.jit(lambda x: jnp.fft.irfft2(jnp.fft.rfft2(x) * 0.5, s=(n, n))), (re_,)
            if variant == "rfftn3":
                m = n // 4
                x = c.normal(m, m, m)
                return c.jit(lambda x: jnp.fft.irfftn(jnp.fft.rfftn(x) ** 2, s=x.shape)), (x,)
            if variant == "fft_conv2d":
                k = c.normal(n, n)
                return c.jit(lambda x, k: jnp.fft.irfft2(jnp.fft.rfft2(x) * jnp.fft.rfft2(k),
                                                         s=(n, n))), (re_, k)
            if variant == "grad_real":
                return c.jit(lambda z: jax.grad(lambda z: jnp.sum(jnp.abs(z @ z) ** 2))(z)), (z,)
            make = lambda: (z.astype(jnp.complex128),)
            return _x64(c, make, lambda z: z @ z + z.conj())

        out.append(Program(name, "complex", f"complex {variant} {n}", build))
    return out


def _int_mix():
    out = []
    for (m, k, n), variant in itertools.product(
            [(64, 128, 32), (256, 512, 128)],
            ["int8_matmul", "uint8_image", "bool_mask", "f16_mlp", "quant_dequant",
             "int_argmax", "f16_softmax", "mixed_cast_chain"]):
        name = _tag("intmix", variant, m, k, n)

        def build(c, m=m, k=k, n=n, variant=variant):
            import jax
            import jax.numpy as jnp
            from jax import lax

            if variant == "int8_matmul":
                a = c.ints(127, m, k, dtype=jnp.int8)
                b = c.ints(127, k, n, dtype=jnp.int8)
                return c.jit(lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32)), \
                    (a, b)
            if variant == "uint8_image":
                img = c.ints(256, 4, m, k // 4, 3, dtype=jnp.uint8)
                return c.jit(lambda x: (x.astype(jnp.float32) / 255.0 - 0.5).mean(-1)), (img,)
            if variant == "bool_mask":
                x = c.normal(m, k)
                return c.jit(lambda x: (x > 0, jnp.where(x > 0.5, x, 0).sum(0),
                                        jnp.any(x > 2, axis=1))), (x,)
            if variant == "f16_mlp":
                x, w1, w2 = c.normal(m, k, dtype=jnp.float16), \
                    c.normal(k, n, dtype=jnp.float16), c.normal(n, n, dtype=jnp.float16)
                return c.jit(lambda x, a, b: jax.nn.relu(x @ a) @ b), (x, w1, w2)
            if variant == "quant_dequant":
                w = c.normal(k, n)

                def qdq(w):
                    scale = jnp.max(jnp.abs(w), axis=0) / 127.0
                    q = jnp.clip(jnp.round(w / scale), -127, 127).astype(jnp.int8)
                    return q, q.astype(jnp.float32) * scale

                return c.jit(qdq), (w,)
            if variant == "int_argmax":
                x = c.ints(1000, m, k, dtype=jnp.int32)
                return c.jit(lambda x: (jnp.argmax(x, axis=1), x.max(0).astype(jnp.int16))), (x,)
            if variant == "f16_softmax":
                x = c.normal(m, k, dtype=jnp.float16)
                return c.jit(lambda x: jax.nn.softmax(x.astype(jnp.float32)).astype(
                    jnp.float16) * x), (x,)
            x = c.normal(m, k)
            return c.jit(lambda x: ((x.astype(jnp.bfloat16) * 3).astype(jnp.float16)
                                    .astype(jnp.int8).astype(jnp.uint8).astype(jnp.float32)
                                    + x)), (x,)

        out.append(Program(name, "int_mix", f"dtype mix {variant} {m}x{k}x{n}", build))
    return out


def _vmap_loops():
    out = []
    for (b, w), variant in itertools.product(
            [(4, 32), (16, 128)],
            ["vmap_while", "vmap_scan", "lax_map", "vmap_fori_dynamic", "map_batched",
             "vmap_cond"]):
        name = _tag("vmaploop", variant, b, w)

        def build(c, b=b, w=w, variant=variant):
            import jax
            import jax.numpy as jnp
            from jax import lax

            x = c.normal(b, w)
            m = c.normal(w, w) / w
            if variant == "vmap_while":
                def one(x):
                    return lax.while_loop(lambda s: s[1] < 5 + (s[0][0] > 0),
                                          lambda s: (jnp.tanh(s[0] @ m), s[1] + 1), (x, 0))[0]

                return c.jit(jax.vmap(one)), (x,)
            if variant == "vmap_scan":
                xs = c.normal(b, 6, w)
                return c.jit(jax.vmap(lambda h, xs: lax.scan(
                    lambda h, x: (jnp.tanh(h @ m + x), h.sum()), h, xs))), (x, xs)
            if variant == "lax_map":
                return c.jit(lambda x: lax.map(lambda r: jnp.outer(r, r).sum(0) @ m, x)), (x,)
            if variant == "map_batched":
                return c.jit(lambda x: lax.map(lambda r: jnp.sin(r) @ m, x,
                                               batch_size=2)), (x,)
            if variant == "vmap_fori_dynamic":
                n = c.ints(6, b)

                def one(x, n):
                    return lax.fori_loop(0, n, lambda i, h: jnp.tanh(h @ m) + i, x)

                return c.jit(jax.vmap(one)), (x, n)
            return c.jit(jax.vmap(lambda x: lax.cond(x.sum() > 0, lambda x: x @ m,
                                                     lambda x: jnp.flip(x) * 2, x))), (x,)

        out.append(Program(name, "vmap_loops", f"{variant} batch {b} width {w}", build))
    return out


def _einsum():
    out = []
    specs = [("bij,bjk,bkl->bil", [(4, 16, 32), (4, 32, 8), (4, 8, 24)]),
             ("ij,jk,kl,lm->im", [(64, 32), (32, 128), (128, 16), (16, 64)]),
             ("bhqd,bhkd,bhkv->bhqv", [(2, 4, 32, 16), (2, 4, 32, 16), (2, 4, 32, 8)]),
             ("abc,cd,bd->a", [(8, 16, 32), (32, 12), (16, 12)]),
             ("ii->i", [(128, 128)]), ("bi,bj->bij", [(16, 64), (16, 48)]),
             ("nchw,oc->nohw", [(2, 8, 16, 16), (12, 8)]),
             ("xyz,zyx->", [(8, 12, 16), (16, 12, 8)])]
    for (spec, shapes), mode in itertools.product(specs, ["fwd", "grad"]):
        if mode == "grad" and spec == "ii->i":
            continue
        name = _tag("einsum", mode, spec.replace("->", "_to_").replace(",", "_"))

        def build(c, spec=spec, shapes=shapes, mode=mode):
            import jax
            import jax.numpy as jnp

            args = tuple(c.normal(*s) for s in shapes)
            f = lambda *a: jnp.einsum(spec, *a)
            if mode == "fwd":
                return c.jit(f), args
            return c.jit(jax.grad(lambda *a: jnp.sum(jnp.tanh(f(*a))),
                                  argnums=tuple(range(len(args))))), args

        out.append(Program(name, "einsum", f"einsum {spec} {mode}", build))
    return out


def _dpa():
    out = []
    for (b, t, h, d), variant in itertools.product(
            [(2, 64, 4, 32), (1, 200, 2, 64), (4, 16, 8, 8)],
            ["plain", "causal", "mask_bias", "grad", "gqa"]):
        name = _tag("dpa", variant, b, t, h, d)

        def build(c, b=b, t=t, h=h, d=d, variant=variant):
            import jax
            import jax.numpy as jnp

            q, k, v = (c.normal(b, t, h, d) for _ in range(3))
            dpa = jax.nn.dot_product_attention
            if variant == "plain":
                return c.jit(lambda q, k, v: dpa(q, k, v)), (q, k, v)
            if variant == "causal":
                return c.jit(lambda q, k, v: dpa(q, k, v, is_causal=True)), (q, k, v)
            if variant == "mask_bias":
                bias = c.normal(1, h, t, t)
                mask = c.ints(2, b, 1, t, t).astype(bool)
                return c.jit(lambda q, k, v, bi, m: dpa(q, k, v, bias=bi, mask=m)), \
                    (q, k, v, bias, mask)
            if variant == "gqa":
                kv = c.normal(b, t, 1, d)
                return c.jit(lambda q, k, v: dpa(q, k, v, is_causal=True)), (q, kv, kv * 2)
            return c.jit(lambda q, k, v: jax.grad(lambda q, k, v: jnp.sum(
                dpa(q, k, v, is_causal=True) ** 2), argnums=(0, 1, 2))(q, k, v)), (q, k, v)

        out.append(Program(name, "dot_product_attention", f"jax.nn.dot_product_attention "
                           f"{variant} b{b} t{t} h{h} d{d}", build))
    return out


def _xent():
    out = []
    for (batch, dims, classes), opt in itertools.product(
            [(32, (64, 128), 10), (128, (784, 256, 128), 10), (16, (32,), 1000)],
            ["sgd", "momentum", "adam"]):
        name = _tag("xent", opt, batch, "x".join(map(str, dims)), classes)

        def build(c, batch=batch, dims=dims, classes=classes, opt=opt):
            import jax
            import jax.numpy as jnp

            sizes = list(dims) + [classes]
            params = [(c.normal(a, b_) / a ** 0.5, jnp.zeros(b_)) for a, b_ in
                      zip(sizes, sizes[1:])]
            x, y = c.normal(batch, dims[0]), c.ints(classes, batch)

            def loss(p):
                h = x
                for w, bias in p[:-1]:
                    h = jax.nn.relu(h @ w + bias)
                logits = h @ p[-1][0] + p[-1][1]
                return -jnp.mean(jnp.sum(jax.nn.one_hot(y, classes) *
                                         jax.nn.log_softmax(logits), -1))

            tmap = jax.tree_util.tree_map
            if opt == "sgd":
                def step(p):
                    l, g = jax.value_and_grad(loss)(p)
                    return tmap(lambda a, b_: a - 0.1 * b_, p, g), l

                return c.jit(step), (params,)
            if opt == "momentum":
                def step(p, m):
                    l, g = jax.value_and_grad(loss)(p)
                    m = tmap(lambda a, b_: 0.9 * a + b_, m, g)
                    return tmap(lambda a, b_: a - 0.1 * b_, p, m), m, l

                return c.jit(step, donate_argnums=(0, 1)), (params, tmap(jnp.zeros_like, params))

            def step(p, m, v, t):
                l, g = jax.value_and_grad(loss)(p)
                m = tmap(lambda a, b_: 0.9 * a + 0.1 * b_, m, g)
                v = tmap(lambda a, b_: 0.999 * a + 0.001 * b_ * b_, v, g)
                upd = tmap(lambda a, b_: a / (1 - 0.9 ** t) / (jnp.sqrt(b_ / (1 - 0.999 ** t))
                                                               + 1e-8), m, v)
                return tmap(lambda a, u: a - 1e-3 * u, p, upd), m, v, l

            # Two moment trees of their own: JAX refuses to run an array donated twice.
            m, v = tmap(jnp.zeros_like, params), tmap(jnp.zeros_like, params)
            return c.jit(step, donate_argnums=(0, 1, 2)), (params, m, v, jnp.float32(1.0))

        out.append(Program(name, "xent_train", f"softmax cross-entropy {opt} step {dims} to "
                           f"{classes} classes, batch {batch}", build))
    return out


_MESHES_2D = [(4, (("a", 2), ("b", 2))), (8, (("a", 4), ("b", 2))), (8, (("a", 2), ("b", 4)))]


def _spmd2d():
    """jit with NamedShardings in and out on 2-D meshes: the SPMD partitioner's collectives."""
    out = []
    variants = ["matmul_2d", "matmul_contract_sharded", "transpose_reshard", "reduce_rows",
                "softmax_rows", "mlp_fsdp_tp", "outer_product", "gather_rows"]
    for (devices, axes), variant in itertools.product(_MESHES_2D, variants):
        mesh_tag = "x".join(f"{a}{n}" for a, n in axes)
        name = _tag("spmd2d", variant, "d%d" % devices, mesh_tag)

        def build(c, devices=devices, axes=axes, variant=variant):
            import jax
            import jax.numpy as jnp
            from jax.sharding import NamedSharding, PartitionSpec as P

            mesh = _mesh(devices, axes)
            S = lambda *spec: NamedSharding(mesh, P(*spec))
            a = c.normal(64, 96)
            b = c.normal(96, 128)
            if variant == "matmul_2d":
                return c.jit(lambda a, b: a @ b, in_shardings=(S("a", None), S(None, "b")),
                             out_shardings=S("a", "b")), (a, b)
            if variant == "matmul_contract_sharded":
                return c.jit(lambda a, b: jnp.tanh(a @ b),
                             in_shardings=(S("b", "a"), S("a", None)),
                             out_shardings=S("b", None)), (a, b)
            if variant == "transpose_reshard":
                return c.jit(lambda a: a.T * 2, in_shardings=(S("a", "b"),),
                             out_shardings=S("a", "b")), (a,)
            if variant == "reduce_rows":
                return c.jit(lambda a: (a.sum(0), a.max(1)), in_shardings=(S(("a", "b"), None),),
                             out_shardings=(S(None), S("a"))), (a,)
            if variant == "softmax_rows":
                return c.jit(lambda a: jax.nn.softmax(a, axis=0),
                             in_shardings=(S("a", "b"),), out_shardings=S(None, "b")), (a,)
            if variant == "mlp_fsdp_tp":
                w1, w2, x = c.normal(96, 128), c.normal(128, 96), c.normal(32, 96)

                def step(w1, w2, x):
                    g = jax.grad(lambda w1, w2: jnp.mean((jax.nn.gelu(x @ w1) @ w2) ** 2),
                                 argnums=(0, 1))(w1, w2)
                    return w1 - 0.01 * g[0], w2 - 0.01 * g[1]

                return c.jit(step, in_shardings=(S("a", "b"), S("b", "a"), S("a", None)),
                             out_shardings=(S("a", "b"), S("b", "a")),
                             donate_argnums=(0, 1)), (w1, w2, x)
            if variant == "outer_product":
                u, v = c.normal(256), c.normal(128)
                return c.jit(lambda u, v: jnp.outer(u, v), in_shardings=(S("a"), S("b")),
                             out_shardings=S("b", "a")), (u, v)
            idx = c.ints(64, 48)
            return c.jit(lambda a, i: a[i] * 3, in_shardings=(S("a", "b"), S(None)),
                         out_shardings=S(None, "b")), (a, idx)

        out.append(Program(name, "spmd_2d", f"jit NamedSharding {variant} mesh {axes}", build,
                           devices=devices))
    return out


def _collectives():
    """shard_map collectives on other axes and shapes than the tuned corpus's."""
    out = []
    variants = ["ppermute_bidir", "ppermute_shift2", "all_to_all_a2_s0", "all_to_all_3d",
                "psum_scatter_d1", "all_gather_d1", "psum_both_axes", "ring_allreduce"]
    meshes = [(4, (("a", 4),)), (8, (("a", 4), ("b", 2))), (8, (("a", 2), ("b", 4)))]
    for (devices, axes), variant in itertools.product(meshes, variants):
        if variant == "psum_both_axes" and len(axes) == 1:
            continue
        mesh_tag = "x".join(f"{a}{n}" for a, n in axes)
        name = _tag("coll", variant, "d%d" % devices, mesh_tag)

        def build(c, devices=devices, axes=axes, variant=variant):
            import jax
            import jax.numpy as jnp
            from jax import lax
            from jax.sharding import PartitionSpec as P

            mesh = _mesh(devices, axes)
            ax, n = axes[-1]
            x = c.normal(8 * n, 16 * n, 4)

            def smap(f, ins, outs):
                return jax.shard_map(f, mesh=mesh, in_specs=ins, out_specs=outs)

            ring = [(i, (i + 1) % n) for i in range(n)]
            if variant == "ppermute_bidir":
                back = [(j, i) for i, j in ring]
                f = smap(lambda x: lax.ppermute(x, ax, ring) - lax.ppermute(x * 2, ax, back),
                         P(ax), P(ax))
            elif variant == "ppermute_shift2":
                f = smap(lambda x: lax.ppermute(jnp.sin(x), ax,
                                                [(i, (i + 2) % n) for i in range(n)]),
                         P(None, ax), P(None, ax))
            elif variant == "all_to_all_a2_s0":
                f = smap(lambda x: lax.all_to_all(x * 2, ax, 0, 2, tiled=True) + 1,
                         P(None, ax), P(None, None, ax))
            elif variant == "all_to_all_3d":
                f = smap(lambda x: lax.all_to_all(x, ax, 1, 0, tiled=True).sum(-1),
                         P(ax), P(None, ax))
            elif variant == "psum_scatter_d1":
                f = smap(lambda x: lax.psum_scatter(jnp.tanh(x), ax, scatter_dimension=1,
                                                    tiled=True), P(ax), P(ax))
                return c.jit(lambda x: f(x)), (c.normal(8 * n, 16 * n * n, 4),)
            elif variant == "all_gather_d1":
                f = smap(lambda x: lax.all_gather(x, ax, axis=1, tiled=True, to="invarying")
                         .mean(-1), P(None, ax), P())
            elif variant == "psum_both_axes":
                names = tuple(a for a, _ in axes)
                f = smap(lambda x: lax.psum(jnp.einsum("ijk,ijl->kl", x, jnp.tanh(x)), names),
                         P(names[0], names[1]), P())
            else:
                def ring_allreduce(x):
                    def step(i, cv):
                        acc, blk = cv
                        blk = lax.ppermute(blk, ax, ring)
                        return acc + blk, blk

                    return lax.fori_loop(0, n - 1, step, (x, x))[0]

                f = smap(ring_allreduce, P(ax), P(ax))
            return c.jit(lambda x: f(x)), (x,)

        out.append(Program(name, "collectives", f"shard_map {variant} mesh {axes}", build,
                           devices=devices))
    return out


# ---------------------------------------------------------------------------------------------
# Second held-out round: families written after the planner changes the first round led to,
# measured once before anything else was changed (BENCHMARKS.md, issue 22's section).

def _autodiff():
    out = []
    for (n, m), variant in itertools.product(
            [(16, 32), (64, 48)], ["hessian", "jacfwd", "jacrev", "per_example_grad",
                                   "hvp", "vjp_pytree"]):
        name = _tag("autodiff", variant, n, m)

        def build(c, n=n, m=m, variant=variant):
            import jax
            import jax.numpy as jnp

            w, x = c.normal(n, m), c.normal(8, n)
            f = lambda w, x: jnp.sum(jnp.tanh(x @ w) ** 2)
            if variant == "hessian":
                return c.jit(lambda v: jax.hessian(lambda v: jnp.sum(jnp.sin(v) * v.sum()))(v)), \
                    (c.normal(n),)
            if variant == "jacfwd":
                return c.jit(lambda w, x: jax.jacfwd(lambda x: jnp.tanh(x @ w))(x[0])), (w, x)
            if variant == "jacrev":
                return c.jit(lambda w, x: jax.jacrev(lambda x: jnp.tanh(x @ w))(x[0])), (w, x)
            if variant == "per_example_grad":
                return c.jit(lambda w, x: jax.vmap(jax.grad(f), in_axes=(None, 0))(w, x[:, None])), \
                    (w, x)
            if variant == "hvp":
                def hvp(w, x):
                    g = lambda w: jax.grad(f)(w, x)
                    return jax.jvp(g, (w,), (jnp.ones_like(w),))[1]

                return c.jit(hvp), (w, x)
            params = {"w": w, "b": c.normal(m), "s": c.normal(1).reshape(())}

            def loss(p, x):
                return jnp.mean(jax.nn.softplus(x @ p["w"] + p["b"]) * p["s"])

            return c.jit(lambda p, x: jax.vjp(lambda p: loss(p, x), p)[1](1.0)), (params, x)

        out.append(Program(name, "autodiff", f"{variant} {n}x{m}", build))
    return out


def _array_ops():
    out = []
    for shape, variant in itertools.product(
            [(64, 128), (8, 300, 7)],
            ["pad_concat", "roll_flip", "searchsorted", "interp", "median", "bincount",
             "resize", "where_chain", "take_clip", "repeat_tile"]):
        name = _tag("arrayops", variant, "x".join(map(str, shape)))

        def build(c, shape=shape, variant=variant):
            import jax
            import jax.numpy as jnp

            x = c.normal(*shape)
            if variant == "pad_concat":
                return c.jit(lambda x: jnp.concatenate([jnp.pad(x, 2), jnp.pad(x, 2) * 2], 0)), (x,)
            if variant == "roll_flip":
                return c.jit(lambda x: jnp.roll(jnp.flip(x, -1), 5, axis=0) - x), (x,)
            if variant == "searchsorted":
                edges = jnp.sort(c.normal(33))
                return c.jit(lambda e, x: jnp.searchsorted(e, x)), (edges, x)
            if variant == "interp":
                xp = jnp.sort(c.normal(50))
                return c.jit(lambda xp, x: jnp.interp(x, xp, jnp.cos(xp))), (xp, x)
            if variant == "median":
                return c.jit(lambda x: (jnp.median(x, axis=-1), jnp.percentile(x, 90.0))), (x,)
            if variant == "bincount":
                i = c.ints(40, *shape)
                return c.jit(lambda i: jnp.bincount(i.reshape(-1), length=40)), (i,)
            if variant == "resize":
                img = c.normal(2, 24, 24, 3)
                return c.jit(lambda im: jax.image.resize(im, (2, 40, 40, 3), "bilinear")), (img,)
            if variant == "where_chain":
                return c.jit(lambda x: jnp.where(x > 0, jnp.log1p(jnp.abs(x)),
                                                 jnp.where(x < -1, jnp.exp(x), x * x))), (x,)
            if variant == "take_clip":
                i = c.ints(shape[0] * 2, 50)
                return c.jit(lambda x, i: jnp.take(x, i, axis=0, mode="clip") + 1), (x, i)
            return c.jit(lambda x: jnp.tile(jnp.repeat(x[:4], 3, axis=0), (2,) + (1,) *
                                            (x.ndim - 1))), (x,)

        out.append(Program(name, "array_ops", f"{variant} {shape}", build))
    return out


def _special():
    out = []
    for n, variant in itertools.product(
            [1000, 4096], ["erf_gelu", "logsumexp", "lgamma_digamma", "bessel", "betainc",
                           "softmax_grad", "log_softmax_int"]):
        name = _tag("special", variant, n)

        def build(c, n=n, variant=variant):
            import jax
            import jax.numpy as jnp
            import jax.scipy.special as sp

            x = c.normal(4, n // 4)
            f = {"erf_gelu": lambda x: x * 0.5 * (1 + sp.erf(x / 2 ** 0.5)),
                 "logsumexp": lambda x: sp.logsumexp(x, axis=0) + sp.logsumexp(x),
                 "lgamma_digamma": lambda x: sp.gammaln(jnp.abs(x) + 1) + sp.digamma(
                     jnp.abs(x) + 1),
                 "bessel": lambda x: sp.i0e(x) + sp.i1e(x),
                 "betainc": lambda x: sp.betainc(2.0, 3.0, jax.nn.sigmoid(x)),
                 "softmax_grad": lambda x: jax.grad(lambda x: jnp.sum(jax.nn.softmax(x) *
                                                                      jnp.arange(x.shape[-1])))(x),
                 "log_softmax_int": lambda x: jax.nn.log_softmax(x)[:, :3].astype(jnp.int32),
                 }[variant]
            return c.jit(f), (x,)

        out.append(Program(name, "special", f"{variant} {n}", build))
    return out


def _loops2():
    out = []
    for (n, w), variant in itertools.product(
            [(5, 32), (9, 96)], ["fori_tuple", "while_dslice", "scan_pytree", "scan_remat",
                                  "nested_while", "while_argmax"]):
        name = _tag("loops2", variant, n, w)

        def build(c, n=n, w=w, variant=variant):
            import jax
            import jax.numpy as jnp
            from jax import lax

            x, m = c.normal(16, w), c.normal(w, w) / w
            if variant == "fori_tuple":
                return c.jit(lambda x: lax.fori_loop(0, n, lambda i, s: (s[1] @ m, s[0] + i),
                                                     (x, x * 2))), (x,)
            if variant == "while_dslice":
                seq = c.normal(n * 4, w)

                def body(s):
                    i, acc = s
                    return i + 1, acc + jnp.tanh(lax.dynamic_slice_in_dim(seq, i * 4, 4) @ m).sum(0)

                return c.jit(lambda seq: lax.while_loop(lambda s: s[0] < n, body,
                                                        (0, jnp.zeros(w)))[1]), (seq,)
            if variant == "scan_pytree":
                xs = {"a": c.normal(n, 16, w), "b": c.normal(n, w)}
                return c.jit(lambda x, xs: lax.scan(lambda h, e: (jnp.tanh(h @ m + e["a"]) *
                                                                  e["b"], {"h": h.mean(0)}),
                                                    x, xs)), (x, xs)
            if variant == "scan_remat":
                ws = c.normal(n, w, w) / w
                step = jax.checkpoint(lambda h, w_: (jnp.tanh(h @ w_), None))
                return c.jit(lambda ws, x: jax.grad(lambda ws: jnp.sum(
                    lax.scan(step, x, ws)[0] ** 2))(ws)), (ws, x)
            if variant == "nested_while":
                def inner(h):
                    return lax.while_loop(lambda s: s[1] < 3, lambda s: (jnp.sin(s[0] @ m),
                                                                        s[1] + 1), (h, 0))[0]

                return c.jit(lambda x: lax.while_loop(lambda s: s[1] < n, lambda s: (
                    inner(s[0]) + 1, s[1] + 1), (x, 0))[0]), (x,)
            return c.jit(lambda x: lax.while_loop(
                lambda s: (jnp.argmax(s[0].sum(0)) != 0) & (s[1] < n),
                lambda s: (jnp.roll(s[0], 1, axis=1) @ m, s[1] + 1), (x, 0))), (x,)

        out.append(Program(name, "loops2", f"{variant} {n} steps width {w}", build))
    return out


def _sharded2():
    """More SPMD-partitioner and shard_map shapes: 3-D arrays, multi-axis specs, pytrees."""
    out = []
    meshes = [(4, (("a", 2), ("b", 2))), (8, (("a", 2), ("b", 2), ("c", 2)))]
    variants = ["spec_two_axes", "batch_matmul_3d", "shmap_psum_pytree", "shmap_allgather_int",
                "layer_norm_sharded", "shmap_pmax_argmax"]
    for (devices, axes), variant in itertools.product(meshes, variants):
        mesh_tag = "x".join(f"{a}{n}" for a, n in axes)
        name = _tag("sharded2", variant, "d%d" % devices, mesh_tag)

        def build(c, devices=devices, axes=axes, variant=variant):
            import jax
            import jax.numpy as jnp
            from jax import lax
            from jax.sharding import NamedSharding, PartitionSpec as P

            mesh = _mesh(devices, axes)
            S = lambda *spec: NamedSharding(mesh, P(*spec))
            names = tuple(a for a, _ in axes)
            x = c.normal(32, 64, 16)
            smap = lambda f, i, o: jax.shard_map(f, mesh=mesh, in_specs=i, out_specs=o)
            if variant == "spec_two_axes":
                return c.jit(lambda x: jnp.tanh(x) @ jnp.ones((16, 8)),
                             in_shardings=(S(None, names[:2], None),),
                             out_shardings=S(names[0], None, None)), (x,)
            if variant == "batch_matmul_3d":
                y = c.normal(32, 16, 24)
                return c.jit(lambda x, y: jnp.einsum("bij,bjk->bik", x, y),
                             in_shardings=(S("a", "b", None), S("a", None, "b")),
                             out_shardings=S("a", None, None)), (x, y)
            if variant == "shmap_psum_pytree":
                f = smap(lambda x: lax.psum({"s": x.sum(0), "m": x.max(0)}, "a"), P("a"), P())
                return c.jit(lambda x: f(x)), (x,)
            if variant == "shmap_allgather_int":
                i = c.ints(100, 32, 64)
                f = smap(lambda i: lax.all_gather(i * 2, "b", axis=1, tiled=True,
                                                  to="invarying"), P(None, "b"), P())
                return c.jit(lambda i: f(i)), (i,)
            if variant == "layer_norm_sharded":
                g = c.normal(16)

                def ln(x, g):
                    mu = x.mean(-1, keepdims=True)
                    return (x - mu) * lax.rsqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g

                return c.jit(ln, in_shardings=(S(names, None, None), S(None)),
                             out_shardings=S(names, None, None)), (x, g)
            f = smap(lambda x: (lax.pmax(x.max(), names), lax.pmin(jnp.argmax(x, -1), names)),
                     P(names), (P(), P(None)))
            return c.jit(lambda x: f(x)), (x,)

        out.append(Program(name, "sharded2", f"{variant} mesh {axes}", build, devices=devices))
    return out


_FAMILIES = [_linalg, _cumulative, _topk, _conv_variants, _pooling, _embedding, _complex,
             _int_mix, _vmap_loops, _einsum, _dpa, _xent, _spmd2d, _collectives,
             _autodiff, _array_ops, _special, _loops2, _sharded2]


def programs():
    """Every held-out program, in a stable order; names never collide with the tuned corpus."""
    return cp.collect(_FAMILIES, taken=set(cp.by_name()))


def by_name():
    return {p.name: p for p in programs()}


if __name__ == "__main__":
    cp.print_families(programs())
