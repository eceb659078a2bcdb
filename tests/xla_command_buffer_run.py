"""Run by test_xla.py's command-buffer test in a fresh process (XLA_FLAGS and
TF_FLASHATTN_XLA_COMMAND_BUFFER must be set before TensorFlow and the op library load): forward,
gradients and a decoding loop under jit_compile=True, each function called with two sets of inputs
(new buffers: XLA records again) and the first set once more (a replay), the results saved to the
.npz file named by argv[1]."""
import sys

import numpy as np
import tensorflow as tf

import tf_flashattn as fa


def main(path):
    rng = np.random.default_rng(7)

    def rand(*shape, dtype=tf.bfloat16):
        return tf.cast(tf.constant(rng.standard_normal(shape)), dtype)

    @tf.function(jit_compile=True)
    def train_step(q, k, v, lengths, seed):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = fa.dot_product_attention(q, k, v, is_causal=True, key_lengths=lengths,
                                           dropout_rate=0.1, seed=seed)
            loss = tf.reduce_sum(tf.cast(out, tf.float32) ** 2)
        return [out] + tape.gradient(loss, [q, k, v])

    @tf.function(jit_compile=True)
    def decode(q, k, v, lengths):  # 6 chained steps, one query row each (the decoding kernels)
        def body(i, x):
            return i + 1, fa.dot_product_attention(x, k, v, key_lengths=lengths + i)
        return tf.while_loop(lambda i, x: i < 6, body, (tf.constant(0), q))[1]

    saved = {}
    inputs = []
    for t in range(2):
        inputs.append(dict(
            train=(rand(2, 77, 4, 64), rand(2, 77, 2, 64), rand(2, 77, 2, 64),
                   tf.constant([77, 50 + t], tf.int32), tf.constant([3, t], tf.int64)),
            decode=(rand(3, 1, 8, 128), rand(3, 300, 2, 128), rand(3, 300, 2, 128),
                    tf.constant([200, 290, 17 + t], tf.int32))))
    for t, x in enumerate(inputs + inputs[:1]):
        for i, r in enumerate(train_step(*x["train"])):
            saved[f"train{t}_{i}"] = tf.cast(r, tf.float32).numpy()
        saved[f"decode{t}"] = tf.cast(decode(*x["decode"]), tf.float32).numpy()
    np.savez(path, **saved)


if __name__ == "__main__":
    main(sys.argv[1])
