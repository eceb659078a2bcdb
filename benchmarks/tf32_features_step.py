"""One training step of float32 attention with soft-cap, dropout or a bias through TensorFlow (TF32 on, its default), as
a Keras user runs it: forward and backward in one tf.function per step, one attention per step, timed over
several steps (the host's per-call overheads included). Ours (tf_flashattn.dot_product_attention) against the
same attention unfused under XLA (jit_compile): keras.ops.dot_product_attention without an option; soft-cap as
c tanh(s / c) on the scores (Keras' attn_logits_soft_cap is for its flash path only), dropout by a stateless keep
mask on the softmax (what a Keras layer with attention dropout computes; not the same mask as ours, the same
work); "bias": a head-broadcast bias [1, H, T, T] (float32) with its gradient, keras.ops.dot_product_attention's
bias argument for the unfused one.

  python3 benchmarks/tf32_features_step.py [OUT.json]

Environment: STEP_D (head dims, default 64,128), STEP_T (default 4096), STEP_TOKENS (B T, default 16384),
STEP_HIDDEN (H D, default 1024), STEP_FEATURES (none,softcap,dropout; also bias), STEP_IMPLS (ours,keras_xla), STEP_STEPS
(timed steps, default 10), STEP_DTYPE (float32, the default, or bfloat16 / float16: the 16-bit kernels, e.g. dropout's
cost as users see it), STEP_LABEL (the name of "ours" in the rows: e.g. ours_sm80 in a process with
TF_FLASHATTN_SM90_TF32=0 TF_FLASHATTN_SM90_TF32_BWD=0, which keeps float32 on the sm_80 TF32 kernels).
TFLOP/s by FlashAttention's count: forward 4 B H T^2 D (halved when causal), the step 3.5x that.
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_flashattn as fa  # noqa: E402

HEAD_DIMS = [int(x) for x in os.environ.get("STEP_D", "64,128").split(",")]
SIZES = [int(x) for x in os.environ.get("STEP_T", "4096").split(",")]
TOKENS = int(os.environ.get("STEP_TOKENS", "16384"))
HIDDEN = int(os.environ.get("STEP_HIDDEN", "1024"))
FEATURES = os.environ.get("STEP_FEATURES", "none,softcap,dropout").split(",")
IMPLS = os.environ.get("STEP_IMPLS", "ours,keras_xla").split(",")
STEPS = int(os.environ.get("STEP_STEPS", "10"))
LABEL = os.environ.get("STEP_LABEL", "ours")
DTYPE = tf.as_dtype(os.environ.get("STEP_DTYPE", "float32"))
assert DTYPE in (tf.float32, tf.bfloat16, tf.float16), f"STEP_DTYPE: float32, bfloat16 or float16, not {DTYPE.name}"
CAP, RATE = 30.0, 0.1


def unfused(q, k, v, feature, seed, bias):
    """The attention unfused, [B, T, H, D] in and out (run under XLA)."""
    scale = 1.0 / float(q.shape[-1]) ** 0.5
    if feature == "none":
        return keras.ops.dot_product_attention(q, k, v, scale=scale)
    if feature == "bias":
        return keras.ops.dot_product_attention(q, k, v, bias=bias, scale=scale)
    s = tf.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if feature == "softcap":  # keras.ops.dot_product_attention takes attn_logits_soft_cap only with flash_attention
        s = CAP * tf.tanh(s / CAP)
    p = tf.nn.softmax(s, axis=-1)
    if feature == "dropout":
        keep = tf.random.stateless_uniform(tf.shape(p), seed=seed) >= RATE
        p = tf.where(keep, p / (1.0 - RATE), tf.zeros_like(p))
    return tf.einsum("bhqk,bkhd->bqhd", p, v)


def make_step(impl, feature):
    def step(q, k, v, w, seed, bias):
        xs = [q, k, v] + ([bias] if feature == "bias" else [])
        with tf.GradientTape() as tape:
            tape.watch(xs)
            if impl == "keras_xla":
                o = unfused(q, k, v, feature, seed, bias)
            else:
                o = fa.dot_product_attention(q, k, v, bias=bias if feature == "bias" else None,
                                             attn_logits_soft_cap=CAP if feature == "softcap" else None,
                                             dropout_rate=RATE if feature == "dropout" else 0.0,
                                             seed=seed if feature == "dropout" else None)
            loss = tf.reduce_sum(o * w)
        return [loss] + tape.gradient(loss, xs)
    return tf.function(step, jit_compile=impl == "keras_xla")


def run(impl, feature, D, T):
    B, H = TOKENS // T, HIDDEN // D
    gen = tf.random.Generator.from_seed(D + T)
    with tf.device("/GPU:0" if tf.config.list_physical_devices("GPU") else "/CPU:0"):
        q, k, v, w = (tf.cast(gen.normal([B, T, H, D], dtype=tf.float32), DTYPE) for _ in range(4))
        bias = (tf.cast(gen.normal([1, H, T, T], dtype=tf.float32), DTYPE) if feature == "bias"
                else tf.zeros([1], DTYPE))
        step = make_step(impl, feature)
        t0 = time.time()
        for i in range(2):  # tracing / compilation, warm-up
            float(step(q, k, v, w, tf.constant([1, i], tf.int64), bias)[0])
        compile_s = time.time() - t0
        t0 = time.perf_counter()
        for i in range(STEPS):
            out = step(q, k, v, w, tf.constant([1, 10 + i], tf.int64), bias)
        float(out[0])  # waits for the last step
        ms = (time.perf_counter() - t0) * 1e3 / STEPS
    flops = 3.5 * 4.0 * B * H * T * T * D
    return dict(impl=LABEL if impl == "ours" else impl, dtype=out[0].dtype.name, feature=feature, D=D, T=T, B=B, H=H,
                step_ms=ms, tflops=flops / ms / 1e9, warmup_s=compile_s, steps=STEPS)


def main():
    rows = []
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    print(f"device: {tf.config.list_physical_devices('GPU')}, {DTYPE.name}, TF32 {tf32}", flush=True)
    for D in HEAD_DIMS:
        for T in SIZES:
            for feature in FEATURES:
                for impl in IMPLS:
                    try:
                        r = run(impl, feature, D, T)
                    except Exception as e:  # noqa: BLE001 - a failed impl keeps the table going
                        r = dict(impl=LABEL if impl == "ours" else impl, feature=feature, D=D, T=T,
                                 error=str(e)[:300])
                    rows.append(r)
                    print(json.dumps(r), flush=True)
                    if len(sys.argv) > 1:
                        with open(sys.argv[1], "w") as fh:
                            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
