"""Extra GPU memory of forward and backward is O(N): B=1, H=16, T=131072, D=128, bfloat16.

Prints TensorFlow's peak allocated bytes for each step beyond what the step's inputs and outputs
occupy, next to the size of one T x T score matrix of one head in bfloat16 (32 GiB).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

import tf_flashattn as fa  # noqa: E402

B, H, T, D = 1, 16, int(os.environ.get("MEM_T", 131072)), 128
GiB = 2.0**30
with tf.device("/GPU:0"):
    q, k, v = (tf.random.normal([B, T, H, D], dtype=tf.bfloat16) for _ in range(3))
    tensor = B * T * H * D * 2
    tf.config.experimental.reset_memory_stats("GPU:0")
    base = tf.config.experimental.get_memory_info("GPU:0")["current"]
    with tf.GradientTape() as tape:
        tape.watch([q, k, v])
        out = fa.dot_product_attention(q, k, v, is_causal=True)
        float(tf.reduce_sum(tf.cast(out[0, 0], tf.float32)))
        fwd_peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] - base
        loss = tf.reduce_sum(tf.cast(out, tf.float32))
    grads = tape.gradient(loss, [q, k, v])
    float(tf.reduce_sum(tf.cast(grads[0][0, 0], tf.float32)))
    peak = tf.config.experimental.get_memory_info("GPU:0")["peak"] - base
print(f"T={T} H={H} D={D} bf16: one q/k/v/out tensor {tensor / GiB:.2f} GiB")
print(f"forward peak beyond inputs: {fwd_peak / GiB:.2f} GiB (output {tensor / GiB:.2f} GiB + "
      f"lse {B * H * T * 4 / GiB:.3f} GiB)")
print(f"forward+backward peak beyond inputs: {peak / GiB:.2f} GiB (output, its gradient, the "
      f"loss temporaries and 3 input gradients are {6 * tensor / GiB:.2f} GiB; the float32 loss "
      f"cast {2 * tensor / GiB:.2f} GiB)")
print(f"one T x T score matrix of one head in bf16: {T * T * 2 / GiB:.0f} GiB")
