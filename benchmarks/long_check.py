"""GPU check at long T: bf16 op (eager and under XLA) against the float32 op (TF32 off), causal."""
import sys
import numpy as np
import tensorflow as tf
import tf_flashattn as fa

tf.config.experimental.enable_tensor_float_32_execution(False)


def run(q, k, v, do, dt, jit):
    def f(q, k, v):
        with tf.GradientTape() as t:
            t.watch([q, k, v])
            o = fa.dot_product_attention(tf.cast(q, dt), tf.cast(k, dt), tf.cast(v, dt), is_causal=True)
            loss = tf.reduce_sum(tf.cast(o, tf.float32) * do)
        return [tf.cast(o, tf.float32)] + t.gradient(loss, [q, k, v])
    g = tf.function(f, jit_compile=jit) if jit is not None else f
    return [x.numpy() for x in g(q, k, v)]


for B, T in [(4, 4096), (1, 16384), (1, 8192)]:
    H, D = 16, 64
    tf.random.set_seed(T)
    q, k, v, do = [tf.random.normal([B, T, H, D]) for _ in range(4)]
    ref = run(q, k, v, do, tf.float32, None)
    for name, dt, jit in [("bf16", tf.bfloat16, None), ("bf16_xla", tf.bfloat16, True), ("f32_xla", tf.float32, True)]:
        out = run(q, k, v, do, dt, jit)
        errs = [float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30)) for a, b in zip(out, ref)]
        print(f"B={B} T={T} {name}: rel max err o/dq/dk/dv " + " ".join(f"{e:.2e}" for e in errs), flush=True)
