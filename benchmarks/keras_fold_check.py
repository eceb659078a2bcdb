"""How long Keras' causal attention on TensorFlow (no XLA) takes to its first result, with
Grappler's constant folding on (TensorFlow's default) and off: the causal path builds a
[B, H, T, S] boolean mask from tf.ones_like(logits), which constant folding turns into a constant
on the host before the first run. Each setting runs in a fresh process (the setting is read when a
function is first run). Runs on the CPU or a GPU.

    python benchmarks/keras_fold_check.py [B H T D]     (default 2 8 2048 32)
"""
import os
import subprocess
import sys
import time


def child(b, h, t, d, folding):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"constant_folding": folding})
    q, k, v = (tf.random.normal([b, t, h, d]) for _ in range(3))
    f = tf.function(lambda: keras.ops.dot_product_attention(q, k, v, is_causal=True))
    start = time.perf_counter()
    float(tf.reduce_sum(f()))
    first = time.perf_counter() - start
    later = []
    for _ in range(3):
        start = time.perf_counter()
        float(tf.reduce_sum(f()))
        later.append(time.perf_counter() - start)
    print(f"B={b} H={h} T={t} D={d} (mask {b * h * t * t:,} elements), constant folding "
          f"{'on ' if folding else 'off'}: first call {first:.2f} s, later calls {min(later):.3f} s")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(*map(int, sys.argv[2:6]), folding=sys.argv[6] == "1")
    else:
        shape = sys.argv[1:5] or ["2", "8", "2048", "32"]
        for folding in ("1", "0"):
            subprocess.run([sys.executable, __file__, "--child", *shape, folding], check=True)
