"""Where the host time of a small decoding call goes: ours against one matmul, with and without XLA.

At B = 8, Tk = 1024 / 2048 (32 query heads, 8 kv heads, D = 128) a decode step's kernels take
10-20 us but a call through TensorFlow 170-230 us, and Keras' unfused attention under XLA was
4-10 % faster per call than ours (benchmarks/gpu_decode.py, RESULTS.md "Decoding"): the per-call
host cost decides those rows. This script times, per call (CALLS calls in a row, the result read
back once, each call with another of 4 queries; the cases of a group take turns block by block,
median of REPEATS blocks: gpu_decode.py's per_call_us):

    graph_ours    tf.function(tf_flashattn.dot_product_attention)   (gpu_decode.py's "ours")
    graph_raw     tf.function of the op itself, absent inputs as function constants
    graph_mm      tf.function of one batched matmul of the same q, k (TensorFlow's floor for one
                  GPU op in a function)
    xla_ours      the same as graph_ours compiled by XLA (the op is a custom call)
    xla_keras     keras.ops.dot_product_attention compiled by XLA (gpu_decode.py's "keras_xla")
    xla_mm        the matmul compiled by XLA
    eager_raw     the op itself, eagerly
    eager_mm      the matmul, eagerly

so that graph_ours - graph_mm is what our op costs a function call beyond the cheapest GPU op,
xla_ours - xla_mm the same for the custom call, and xla_keras - xla_mm Keras' attention.

    python benchmarks/decode_host_probe.py [--tk 1024,2048] [--tq 1] [--calls 100] [--repeats 9]
        [--json out.json]

On the CPU it runs a small shape (a check of the script).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_decode import per_call_us  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tk", default="1024,2048")
    p.add_argument("--tq", type=int, default=1)
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--json")
    args = p.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    import tf_flashattn as fa
    from tf_flashattn import _ops

    gpu = bool(tf.config.list_physical_devices("GPU"))
    b, h, hkv, d = (8, 32, 8, 128) if gpu else (2, 4, 2, 32)
    tks = [int(x) for x in args.tk.split(",")] if gpu else [64]
    dtype = tf.bfloat16 if gpu else tf.float32
    lib = _ops.load()
    rng = np.random.default_rng(0)
    rows = []
    print(f"| Tk | case | us per call |  (B={b}, Tq={args.tq}, H={h}/{hkv}, D={d}, {dtype.name}, "
          f"{args.calls} calls x {args.repeats} blocks)")
    print("|---:|---|---:|")
    for tk in tks:
        k = tf.constant(rng.standard_normal((b, tk, hkv, d)).astype("float32"), dtype)
        v = tf.constant(rng.standard_normal((b, tk, hkv, d)).astype("float32"), dtype)
        # The matmul: q of each kv head's group against that head's keys, [B*Hkv, G*Tq, D] x
        # [B*Hkv, D, Tk] (the first half of the unfused attention's work); its q made beforehand,
        # so that the control is one op.
        km = tf.reshape(tf.transpose(k, (0, 2, 3, 1)), (b * hkv, d, tk))
        xs = []  # per call: (q, the matmul's q)
        for _ in range(4):
            q = tf.constant(rng.standard_normal((b, args.tq, h, d)).astype("float32"), dtype)
            qm = tf.reshape(tf.transpose(tf.reshape(q, (b, args.tq, hkv, h // hkv, d)), (0, 2, 3, 1, 4)),
                            (b * hkv, h // hkv * args.tq, d))
            xs.append((q, qm))
        # The op with the wrapper's attributes and absent inputs (scale 1/sqrt(D), nothing else).
        absent = (tf.zeros([0], tf.bool), tf.zeros([0], dtype), tf.zeros([0], tf.int32),
                  tf.zeros([0], tf.int32), tf.zeros([0], tf.bool), tf.zeros([0], tf.bool),
                  tf.zeros([2], tf.int64))
        attrs = dict(scale=1.0 / d ** 0.5, softcap=0.0, causal=False, causal_offset=0,
                     window_left=-1, window_right=-1, dropout_rate=0.0)

        def ours(x):
            return fa.dot_product_attention(x[0], k, v)

        def raw(x):
            return lib.flash_attn_flash_attention(x[0], k, v, *absent, **attrs)[0]

        def mm(x):
            return tf.matmul(x[1], km)

        def keras_attn(x):
            return keras.ops.dot_product_attention(x[0], k, v)

        groups = {
            "graph": {"graph_ours": tf.function(ours), "graph_raw": tf.function(raw),
                      "graph_mm": tf.function(mm)},
            "xla": {"xla_ours": tf.function(ours, jit_compile=True),
                    "xla_keras": tf.function(keras_attn, jit_compile=True),
                    "xla_mm": tf.function(mm, jit_compile=True)},
            "eager": {"eager_raw": raw, "eager_mm": mm},
        }
        for group in groups.values():
            got = per_call_us(group, xs, args.calls, args.repeats)
            for name, us in got.items():
                row = dict(Tk=tk, case=name, B=b, Tq=args.tq, H=h, Hkv=hkv, D=d, dtype=dtype.name,
                           calls=args.calls, repeats=args.repeats)
                if isinstance(us, Exception):  # the others went on
                    row["error"] = f"{type(us).__name__}: {str(us)[:200]}"
                    print(f"| {tk} | {name} | error |", flush=True)
                else:
                    row["us"] = us
                    print(f"| {tk} | {name} | {us:.1f} |", flush=True)
                rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
