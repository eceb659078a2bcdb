"""GPU benchmark through TensorFlow of a dense mask and an additive bias (what users see): bf16, D = 128,
16k tokens (B * T = 16384), H = 16, T = 4096 and 16384, tf_flashattn.dot_product_attention with no dense
tensor, a bias [1, H, T, T] (broadcast over the batch) and a boolean mask [B, 1, T, T] (broadcast over the
heads), all in the same process; and keras.ops.dot_product_attention under XLA with the same bias at T = 4096
(BENCH_DENSE_KERAS=0 leaves it out). BENCH_DENSE_FEATURES picks the rows (default none,bias,mask); two more:
key_mask, a [B, T] key padding mask with the last 10 % of each sequence invalid (the index-masked kernels), and
key_mask_causal, the same with a causal mask (FLOPs halved). BENCH_DENSE_D sets the head dim (default 128; H = 2048 / D).

Per feature and T: the forward timed one call per step (INNER = 1: one tf.function call per attention, the
host's dispatch included) and eight per call (INNER = 8, distinct query tensors so that the graph optimizer
cannot merge them: nearer the kernels' time), and the forward + backward one call per step (a GradientTape
over q, k, v and the bias, a random dO). TFLOP/s by FlashAttention's count: forward 4 B H T^2 D, forward +
backward 3.5 times that. Prints a JSON line per row and writes them all to argv[1] (a JSON list).

  python3 benchmarks/dense_tf_bench.py OUT.json      (BENCH_T=4096 for the shorter one; BENCH_T=64
  BENCH_TOKENS=128 for a smoke test on the CPU)
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_flashattn as fa  # noqa: E402
from gpu_attention import bench  # noqa: E402  (timing and the device sync: one definition)

SIZES = [int(x) for x in os.environ.get("BENCH_T", "4096,16384").split(",")]
D = int(os.environ.get("BENCH_DENSE_D", "128"))
H = 2048 // D
FEATURES = os.environ.get("BENCH_DENSE_FEATURES", "none,bias,mask").split(",")
KNOWN = ("none", "bias", "mask", "key_mask", "key_mask_causal")
assert set(FEATURES) <= set(KNOWN), f"BENCH_DENSE_FEATURES: unknown {sorted(set(FEATURES) - set(KNOWN))}"
TOKENS = int(os.environ.get("BENCH_TOKENS", "16384"))  # B = TOKENS / T (smaller: a CPU smoke test)
KERAS = os.environ.get("BENCH_DENSE_KERAS", "1") != "0"


def dense_args(feature, B, T):
    if feature == "bias":
        return dict(bias=tf.random.normal([1, H, T, T], dtype=tf.bfloat16))
    if feature == "mask":
        return dict(mask=tf.random.uniform([B, 1, T, T]) > 0.3)
    if feature.startswith("key_mask"):
        valid = tf.range(T) < T - T // 10  # the last 10 % of each sequence is padding
        return dict(key_mask=tf.tile(valid[None], [B, 1]), is_causal=feature.endswith("_causal"))
    return {}


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else None
    rows = []
    tf.random.set_seed(0)
    for T in SIZES:
        B = TOKENS // T
        fl_full = 4 * B * H * T * T * D
        qs = [tf.random.normal([B, T, H, D], dtype=tf.bfloat16) for _ in range(8)]
        k = tf.random.normal([B, T, H, D], dtype=tf.bfloat16)
        v = tf.random.normal([B, T, H, D], dtype=tf.bfloat16)
        do = tf.random.normal([B, T, H, D], dtype=tf.bfloat16)
        for feature in FEATURES:
            extra = dense_args(feature, B, T)
            fl = fl_full / (2 if extra.get("is_causal") else 1)
            r = dict(T=T, B=B, H=H, D=D, dtype="bfloat16", feature=feature, fwd_flops=fl)
            f1 = tf.function(lambda: fa.dot_product_attention(qs[0], k, v, **extra))
            f8 = tf.function(lambda: [fa.dot_product_attention(q, k, v, **extra) for q in qs])
            watched = [qs[0], k, v] + ([extra["bias"]] if "bias" in extra else [])

            @tf.function
            def fb():
                with tf.GradientTape() as tape:
                    tape.watch(watched)
                    o = fa.dot_product_attention(qs[0], k, v, **extra)
                return tape.gradient(o, watched, output_gradients=do)

            r["fwd_ms_inner1"] = round(bench(f1, inner=1), 3)
            r["fwd_ms_inner8"] = round(bench(f8, inner=8), 3)
            r["fwd_bwd_ms_inner1"] = round(bench(fb, reps=5, inner=1), 3)
            r["fwd_tflops_inner1"] = round(fl / r["fwd_ms_inner1"] / 1e9, 1)
            r["fwd_tflops_inner8"] = round(fl / r["fwd_ms_inner8"] / 1e9, 1)
            r["fwd_bwd_tflops_inner1"] = round(3.5 * fl / r["fwd_bwd_ms_inner1"] / 1e9, 1)
            if KERAS and feature == "bias" and T <= 4096:
                kx = tf.function(lambda q: keras.ops.dot_product_attention(q, k, v, bias=extra["bias"]),
                                 jit_compile=True)
                kf = tf.function(lambda: kx(qs[0]))
                r["keras_xla_fwd_ms_inner1"] = round(bench(kf, inner=1), 3)
                r["keras_xla_fwd_tflops_inner1"] = round(fl / r["keras_xla_fwd_ms_inner1"] / 1e9, 1)
            rows.append(r)
            print(json.dumps(r), flush=True)
            if out_path:
                with open(out_path, "w") as f:
                    json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
