"""Decoding through TensorFlow: one attention call per step, as a serving loop makes it.

A decode step attends Tq new query rows per sequence (1, or a few with speculative decoding) to a
cache of Tk keys and values. The work is reading K and V once, so the figure is bandwidth:

    K+V bytes = 2 * B * Tk * Hkv * D * (2 bytes for bf16 / fp16),  GB/s = bytes / time per call

Ours (`tf_flashattn.dot_product_attention` in a tf.function: "ours"; the same function compiled
by XLA, where the op becomes a custom call: "ours_xla", as the example's cached generate runs its
decode steps) against Keras' `keras.ops.dot_product_attention` compiled by XLA (`jit_compile=True`,
what Keras gives on a GPU), each called once per step with a different query (N steps in a row,
the result read back once): host overheads count, as they do for a server. The implementations of
a row take turns, block by block (--repeats blocks of --steps calls each; the median block), so
that a drift of the host's speed during the run weighs on each alike. The kernels' own GPU time,
against PyTorch's FlashAttention-2 and cuDNN, comes from the kernel harness
(`kernel_harness_check.py --decode`).

With --loop N every implementation instead runs N decode steps inside one tf.function, in a
tf.while_loop (each step's query is the previous step's output, so no step can be merged with
another or hoisted out of the loop): the way the example's SavedModel `generate` runs its decoding
loop, one graph for the whole loop. The figure is then the time per step (one call of the
function / N): TensorFlow's cost of calling a function is paid once per N steps, and what remains
per step is the attention op inside the loop (and, for "ours", the graph executor's dispatch of it).

    python benchmarks/gpu_decode.py [--json out.json] [--steps 50] [--repeats 5] [--dtypes bfloat16,float16]
        [--shapes 8x8192x32x8,...] [--tq 1,4,16] [--impls ours,ours_xla,keras_xla] [--loop N]

Shapes are BxTkxHxHkv with D = 128; the defaults are the decoding issue's four shapes plus
Tk = 1024 and 2048. On the CPU it runs small shapes (a smoke test of the script).
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

DEFAULT_SHAPES = "8x8192x32x8,8x32768x32x8,1x131072x32x8,64x4096x32x32,8x1024x32x8,8x2048x32x8"


def sync():
    import tensorflow as tf
    tf.test.experimental.sync_devices()


def per_call_us(fns, qs, steps, repeats=5):
    """Median over repeats of the time per call of `steps` calls in a row (one query each), for
    each of fns (name -> function), the functions taking turns within every repeat: a host that
    drifts between a fast and a slow state (seen on the H200's host: the same call at about 200 or
    about 400 us from one block of calls to the next) then weighs on each the same way. Returns
    name -> us, or name -> the exception it raised (e.g. out of memory: the others go on)."""
    errors = {}
    for name, fn in fns.items():
        try:
            for q in qs[:2]:
                fn(q)
            sync()
        except Exception as e:  # noqa: BLE001
            errors[name] = e
    times = {name: [] for name in fns if name not in errors}
    for _ in range(repeats):
        for name in times:
            sync()
            t0 = time.perf_counter()
            for i in range(steps):
                out = fns[name](qs[i % len(qs)])
            sync()
            times[name].append((time.perf_counter() - t0) / steps * 1e6)
            del out
    return {**{name: statistics.median(t) for name, t in times.items()}, **errors}


def loop(step, n):
    """step itself (n = 0), or a function running n steps in a tf.while_loop, each step's query
    the previous step's output (Dv = D here, so the shapes agree)."""
    if not n:
        return step
    import tensorflow as tf

    def run(q):
        return tf.while_loop(lambda i, x: i < n, lambda i, x: (i + 1, step(x)),
                             (tf.constant(0), q), maximum_iterations=n)[1]
    return run


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", help=f"BxTkxHxHkv list (default {DEFAULT_SHAPES})")
    p.add_argument("--tq", default="1,4,16")
    p.add_argument("--dtypes", default="bfloat16,float16")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--repeats", type=int, default=5,
                   help="timed blocks of --steps calls per implementation, taken in turns")
    p.add_argument("--impls", default="ours,ours_xla,keras_xla")
    p.add_argument("--loop", type=int, default=0,
                   help="N > 0: N steps per function call in a tf.while_loop (time per step)")
    p.add_argument("--json")
    args = p.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    import tf_flashattn as fa

    gpu = bool(tf.config.list_physical_devices("GPU"))
    shapes = args.shapes or (DEFAULT_SHAPES if gpu else "2x512x8x2")
    rows = []
    unit = f"us/step ({args.loop} steps per call, in a tf.while_loop)" if args.loop else "us/call"
    print(f"| dtype | B | Tk | H/Hkv | Tq | impl | {unit} | K+V GB/s |")
    print("|---|---:|---:|---|---:|---|---:|---:|")
    rng = np.random.default_rng(0)
    for dname in args.dtypes.split(","):
        dtype = tf.as_dtype(dname)
        for spec in shapes.split(","):
            b, tk, h, hkv = (int(x) for x in spec.split("x"))
            d = args.dim
            k = tf.cast(tf.random.normal([b, tk, hkv, d], seed=1), dtype)
            v = tf.cast(tf.random.normal([b, tk, hkv, d], seed=2), dtype)
            kv_bytes = 2 * b * tk * hkv * d * dtype.size
            for tq in (int(x) for x in args.tq.split(",")):
                qs = [tf.constant(rng.standard_normal((b, tq, h, d)).astype("float32"), dtype)
                      for _ in range(4)]
                step = {"ours": lambda q: fa.dot_product_attention(q, k, v),
                        "keras": lambda q: keras.ops.dot_product_attention(q, k, v)}
                impls = {name: tf.function(loop(step[name.split("_")[0]], args.loop),
                                           jit_compile=name.endswith("_xla"))
                         for name in ("ours", "ours_xla", "keras_xla")}
                names = args.impls.split(",")
                calls = max(2, args.steps // args.loop) if args.loop else args.steps
                got = per_call_us({n: impls[n] for n in names}, qs, calls, args.repeats)
                if args.loop:  # per step: one call ran args.loop steps
                    got = {n: t / args.loop if isinstance(t, float) else t for n, t in got.items()}
                for name in names:
                    row = dict(dtype=dname, B=b, Tk=tk, H=h, Hkv=hkv, D=d, Tq=tq, impl=name,
                               kv_bytes=kv_bytes, steps=calls * max(args.loop, 1),
                               repeats=args.repeats, loop=args.loop)
                    us = got[name]
                    if isinstance(us, Exception):  # e.g. out of memory: the others went on
                        row["error"] = f"{type(us).__name__}: {str(us)[:200]}"
                        cells = "error | "
                    else:
                        row.update(us=us, gbps=kv_bytes / us / 1e3)
                        cells = f"{us:.1f} | {row['gbps']:.0f}"
                    rows.append(row)
                    print(f"| {dname} | {b} | {tk} | {h}/{hkv} | {tq} | {name} | {cells} |",
                          flush=True)
                    if args.json:
                        with open(args.json + ".tmp", "w") as f:
                            json.dump(rows, f, indent=1)
                        os.replace(args.json + ".tmp", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
