"""zoo.py — a zoo of real JAX programs, compiled by XLA on the CPU, that hbm is checked against.

For each program, `python zoo.py --one NAME OUTDIR` (one process per program, so that each gets
its own XLA_FLAGS) writes into OUTDIR/NAME/:
  optimized.hlo         compiled.as_text(): the optimized, scheduled module that runs
  memory_analysis.json  compiled.memory_analysis(): argument, output, alias, temp sizes (XLA's own)
  dump/                 XLA_FLAGS=--xla_dump_to: after-optimizations HLO, buffer assignment,
                        memory usage report (XLA's own totals)
  trace/                a jax.profiler.trace logdir of one run (plugins/profile/<run>/*.xplane.pb)
  meta.json             the program's name, description, JAX version, module name
`python zoo.py --all OUTDIR` writes every program (the test fixture calls this once and caches
the result under build/). Nothing here is committed output: it is made in the test run.
"""
import json
import os
import subprocess
import sys

# Programs that need several devices get them from the host platform (set before jax loads).
MULTI_DEVICE = {"shard_map_psum": 8, "pjit_sharded_mlp": 8}


def _programs():
    """name -> (description, builder); a builder returns (jitted function, args)."""
    import numpy as np
    import jax
    import jax.numpy as jnp
    from jax import lax

    rng = np.random.default_rng(0)

    def normal(*shape, dtype=np.float32):
        return jnp.asarray(rng.standard_normal(shape).astype(np.float32)).astype(dtype)

    def mlp_params(sizes, dtype=np.float32):
        return [(normal(a, b, dtype=dtype), normal(b, dtype=dtype)) for a, b in zip(sizes, sizes[1:])]

    def mlp_apply(params, x):
        for w, b in params[:-1]:
            x = jax.nn.relu(x @ w + b)
        w, b = params[-1]
        return x @ w + b

    def mse(params, x, y):
        return jnp.mean((mlp_apply(params, x) - y) ** 2)

    def mlp_adam():
        # One Adam step written in plain JAX: gradients, first and second moments, update.
        def mlp_adam_step(params, m, v, x, y, step):
            g = jax.grad(mse)(params, x, y)
            b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
            m = jax.tree.map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
            v = jax.tree.map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_, v, g)
            mhat = jax.tree.map(lambda m_: m_ / (1 - b1**step), m)
            vhat = jax.tree.map(lambda v_: v_ / (1 - b2**step), v)
            params = jax.tree.map(lambda p, mh, vh: p - lr * mh / (jnp.sqrt(vh) + eps),
                                  params, mhat, vhat)
            return params, m, v

        params = mlp_params([512, 1024, 1024, 256])
        zeros = jax.tree.map(jnp.zeros_like, params)
        return jax.jit(mlp_adam_step), (params, zeros, zeros, normal(128, 512),
                                        normal(128, 256), jnp.float32(1))

    def layer_norm(x, g, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * lax.rsqrt(var + 1e-5) * g + b

    def block(p, x, heads=8):
        bsz, seq, d = x.shape
        h = layer_norm(x, p["ln1_g"], p["ln1_b"])
        q, k, v = [(h @ p[n]).reshape(bsz, seq, heads, d // heads) for n in ("wq", "wk", "wv")]
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(d // heads).astype(x.dtype)
        mask = jnp.tril(jnp.ones((seq, seq), bool))
        s = jnp.where(mask, s, jnp.asarray(-1e9, s.dtype))
        a = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(x.dtype)
        o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(bsz, seq, d)
        x = x + o @ p["wo"]
        h = layer_norm(x, p["ln2_g"], p["ln2_b"])
        return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]

    def block_params(d, dtype):
        p = {n: normal(d, d, dtype=dtype) for n in ("wq", "wk", "wv", "wo")}
        p.update(w1=normal(d, 4 * d, dtype=dtype), w2=normal(4 * d, d, dtype=dtype))
        for n in ("ln1", "ln2"):
            p[n + "_g"] = jnp.ones((d,), dtype)
            p[n + "_b"] = jnp.zeros((d,), dtype)
        return p

    def transformer(dtype):
        def transformer_train_step(p, x):
            loss = lambda p: jnp.mean(block(p, x).astype(jnp.float32) ** 2)
            g = jax.grad(loss)(p)
            return jax.tree.map(lambda a, b: a - jnp.asarray(1e-3, a.dtype) * b, p, g)

        return jax.jit(transformer_train_step), (block_params(256, dtype),
                                                 normal(4, 128, 256, dtype=dtype))

    def convnet():
        def conv(x, w):
            return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

        def convnet_train_step(p, x, y):
            def loss(p):
                h = jax.nn.relu(conv(x, p["c1"]))
                h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
                h = jax.nn.relu(conv(h, p["c2"]))
                h = h.mean(axis=(1, 2))
                return jnp.mean((h @ p["fc"] - y) ** 2)

            g = jax.grad(loss)(p)
            return jax.tree.map(lambda a, b: a - 1e-2 * b, p, g)

        p = {"c1": normal(3, 3, 3, 32), "c2": normal(3, 3, 32, 64), "fc": normal(64, 10)}
        return jax.jit(convnet_train_step), (p, normal(16, 32, 32, 3), normal(16, 10))

    def scan_layers():
        def scan_layers_forward(ws, x):
            def layer(h, w):
                return jnp.tanh(h @ w), (h * h).sum()

            h, norms = lax.scan(layer, x, ws)
            return h, norms

        return jax.jit(scan_layers_forward), (normal(12, 256, 256), normal(64, 256))

    def while_loop():
        def while_loop_power(a, x):
            def cond(c):
                return c[0] < 20

            def body(c):
                i, v = c
                v = a @ v
                return i + 1, v / jnp.linalg.norm(v)

            return lax.while_loop(cond, body, (0, x))[1]

        return jax.jit(while_loop_power), (normal(512, 512), normal(512, 64))

    def remat():
        def remat_mlp_grad(params, x, y):
            def loss(params):
                h = x
                for w, b in params:
                    h = jax.checkpoint(lambda h, w, b: jnp.tanh(h @ w + b))(h, w, b)
                return jnp.mean((h - y) ** 2)

            return jax.grad(loss)(params)

        return jax.jit(remat_mlp_grad), (mlp_params([256] * 6), normal(256, 256), normal(256, 256))

    def donate():
        def donated_sgd_update(params, grads):
            return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

        params = mlp_params([1024, 1024, 512])
        grads = jax.tree.map(jnp.ones_like, params)
        return jax.jit(donated_sgd_update, donate_argnums=(0,)), (params, grads)

    def shard_map_psum():
        from jax.sharding import Mesh, PartitionSpec as P
        from jax import shard_map

        mesh = Mesh(np.array(jax.devices()[:8]), ("d",))

        def shard_map_allreduce(x, w):
            def local(x, w):
                y = jnp.tanh(x @ w)
                return lax.psum(y.sum(0, keepdims=True), "d")

            return shard_map(local, mesh=mesh, in_specs=(P("d", None), P(None, None)),
                             out_specs=P(None, None))(x, w)

        return jax.jit(shard_map_allreduce), (normal(256, 128), normal(128, 128))

    def pjit_sharded_mlp():
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "model"))
        xs = NamedSharding(mesh, P("data", None))
        ws = NamedSharding(mesh, P(None, "model"))

        def sharded_mlp_step(w1, w2, x):
            def loss(w1, w2):
                return jnp.mean(jnp.tanh(x @ w1) @ w2)

            g1, g2 = jax.grad(loss, argnums=(0, 1))(w1, w2)
            return w1 - 0.1 * g1, w2 - 0.1 * g2

        w1 = jax.device_put(normal(256, 512), ws)
        w2 = jax.device_put(normal(512, 256), NamedSharding(mesh, P("model", None)))
        x = jax.device_put(normal(64, 256), xs)
        return jax.jit(sharded_mlp_step), (w1, w2, x)

    return {
        "mlp_adam_f32": ("MLP training step with Adam in plain JAX, f32", mlp_adam),
        "transformer_train_f32": ("transformer block (attention, layer norm, MLP), training, f32",
                                  lambda: transformer(jnp.float32)),
        "transformer_train_bf16": ("the same block in bf16", lambda: transformer(jnp.bfloat16)),
        "convnet_train_f32": ("small conv net, training step", convnet),
        "scan_layers": ("lax.scan over 12 layers", scan_layers),
        "while_loop": ("lax.while_loop: 20 power iterations", while_loop),
        "remat_checkpoint": ("jax.checkpoint (remat) on each layer, gradient", remat),
        "donate_argnums": ("SGD update with donate_argnums=(0,)", donate),
        "shard_map_psum": ("shard_map over 8 CPU devices with psum", shard_map_psum),
        "pjit_sharded_mlp": ("jit with NamedSharding on a 4x2 mesh, gradient step",
                             pjit_sharded_mlp),
    }


NAMES = ["mlp_adam_f32", "transformer_train_f32", "transformer_train_bf16", "convnet_train_f32",
         "scan_layers", "while_loop", "remat_checkpoint", "donate_argnums", "shard_map_psum",
         "pjit_sharded_mlp"]


def _memory_analysis_dict(stats):
    keys = ["argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes",
            "temp_size_in_bytes", "generated_code_size_in_bytes", "peak_memory_in_bytes"]
    return {k: int(getattr(stats, k)) for k in keys if hasattr(stats, k)}


def build_one(name, outdir):
    """Compiles one program in this process (XLA_FLAGS must already be set) and writes it."""
    import jax

    desc, builder = _programs()[name]
    fn, args = builder()
    lowered = fn.lower(*args)
    compiled = lowered.compile()
    text = compiled.as_text()
    with open(os.path.join(outdir, "optimized.hlo"), "w") as f:
        f.write(text)
    with open(os.path.join(outdir, "memory_analysis.json"), "w") as f:
        json.dump(_memory_analysis_dict(compiled.memory_analysis()), f, indent=1)
    module = text.split("\n", 1)[0].split()[1].rstrip(",")
    with jax.profiler.trace(os.path.join(outdir, "trace")):
        jax.block_until_ready(fn(*args))
    meta = {"name": name, "description": desc, "jax": jax.__version__, "module": module,
            "devices": len(jax.devices())}
    with open(os.path.join(outdir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)


def _child_env(name, dump):
    env = dict(os.environ)
    flags = [f"--xla_dump_to={dump}", "--xla_dump_hlo_as_text"]
    if name in MULTI_DEVICE:
        flags.append(f"--xla_force_host_platform_device_count={MULTI_DEVICE[name]}")
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def build_all(outroot, names=None, jobs=2):
    """Builds every program, `jobs` processes at a time. Returns {name: error text or None}."""
    names = names or NAMES
    os.makedirs(outroot, exist_ok=True)
    pending, running, errors = list(names), [], {}
    while pending or running:
        while pending and len(running) < jobs:
            name = pending.pop(0)
            out = os.path.join(outroot, name)
            os.makedirs(os.path.join(out, "dump"), exist_ok=True)
            proc = subprocess.Popen([sys.executable, __file__, "--one", name, out],
                                    env=_child_env(name, os.path.join(out, "dump")),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            running.append((name, proc))
        name, proc = running.pop(0)
        output, _ = proc.communicate()
        errors[name] = None if proc.returncode == 0 else output[-4000:]
    return errors


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        build_one(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "--all":
        failed = {k: v for k, v in build_all(sys.argv[2]).items() if v}
        for k, v in failed.items():
            print(f"zoo: {k} failed:\n{v}", file=sys.stderr)
        sys.exit(1 if failed else 0)
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
