"""Offsets are int64: a query tensor of more than 2^31 elements is addressed correctly."""
import numpy as np
import pytest
import tensorflow as tf

import tf_flashattn as fa


@pytest.mark.slow
def test_more_than_2_to_31_elements():
    D = 256
    T = (1 << 31) // D + 64  # query has 2^31 + 64*256 elements (4 GiB in float16)
    q = tf.ones([1, T, 1, D], tf.float16)
    k = tf.constant(np.random.default_rng(0).standard_normal((1, 2, 1, D)), tf.float16)
    v = tf.constant([[[[1.0] * D]], [[[3.0] * D]]], tf.float16)
    v = tf.reshape(v, [1, 2, 1, D])
    out = fa.dot_product_attention(q, k, v)
    # Every row sees the same two keys: its output is the same convex mix of 1 and 3.
    first = out[0, 0, 0].numpy().astype(np.float32)
    last = out[0, -1, 0].numpy().astype(np.float32)
    beyond = out[0, (1 << 31) // D + 10, 0].numpy().astype(np.float32)
    assert 1.0 < first[0] < 3.0
    np.testing.assert_array_equal(last, first)
    np.testing.assert_array_equal(beyond, first)
