"""GPU tests of the decoding path through TensorFlow (skipped without a CUDA GPU): few query rows
against many keys, with the path forced off, on with the split count chosen from the shape, and on
with forced split counts (TF_FLASHATTN_DECODE / TF_FLASHATTN_DECODE_SPLITS, read at every call).

Each output is judged against a float64 reference, with the error bar of the same-precision unfused
attention (Keras on TensorFlow) plus a small floor, and the decode variants against each other.
The kernel-level checks (path actually taken, poisoned workspace, bitwise repeatability, strides)
are in benchmarks/kernel_harness_check.py --decode."""
import contextlib
import os
import zlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_flashattn as fa
from reference import allowed_mask, f32_scale, reference_attention

pytestmark = pytest.mark.gpu
if not tf.config.list_physical_devices("GPU"):
    pytest.skip("no GPU", allow_module_level=True)

FLOOR = {tf.float16: 2e-3, tf.bfloat16: 1.5e-2, tf.float32: 1e-5}
MODES = {"off": ("off", "0"), "auto": ("auto", "0"), "on_1_split": ("on", "1"),
         "on_7_splits": ("on", "7")}


@contextlib.contextmanager
def decode_mode(mode):
    old = {k: os.environ.get(k) for k in ("TF_FLASHATTN_DECODE", "TF_FLASHATTN_DECODE_SPLITS")}
    os.environ["TF_FLASHATTN_DECODE"], os.environ["TF_FLASHATTN_DECODE_SPLITS"] = MODES[mode]
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


CASES = {
    # name: (B, Tq, H, Hkv, Tk, D, Dv, kwargs)
    "mha_tq1": (2, 1, 4, 4, 1023, 64, 64, {}),
    "gqa4_tq3_odd": (3, 3, 8, 2, 777, 128, 128, {}),
    "gqa8_tq16_long": (1, 16, 16, 2, 4099, 128, 128, {}),
    "mqa_d80": (2, 2, 4, 1, 301, 80, 80, {}),
    "kv_cache_causal": (2, 4, 8, 2, 513, 128, 128, dict(is_causal=True, causal_offset=509)),
    "key_lengths": (3, 1, 8, 2, 1000, 128, 128, dict(key_lengths=[1000, 17, 0])),
    "query_and_key_mask": (2, 5, 4, 2, 333, 64, 64, "masks"),
    "dense_mask": (2, 2, 4, 4, 257, 64, 64, "dense"),
    "window": (2, 3, 8, 4, 900, 128, 128, dict(sliding_window=(100, 0), causal_offset=897)),
    "softcap_bias": (2, 2, 4, 2, 300, 256, 200, "softcap_bias"),
}


def _inputs(name, dtype):
    b, tq, h, hkv, tk, d, dv, kw = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    q = rng.standard_normal((b, tq, h, d))
    k = rng.standard_normal((b, tk, hkv, d))
    v = rng.standard_normal((b, tk, hkv, dv))
    bias = softcap = None
    if kw == "masks":
        kw = dict(query_mask=rng.random((b, tq)) > 0.3, key_mask=rng.random((b, tk)) > 0.5)
    elif kw == "dense":
        kw = dict(mask=rng.random((b, 1, tq, tk)) > 0.4)
    elif kw == "softcap_bias":
        bias = rng.standard_normal((b, h, tq, tk))
        softcap, kw = 20.0, {}
    return q, k, v, bias, softcap, dict(kw)


def _allowed(q, k, kw):
    b, tq, h, _ = q.shape
    tk = k.shape[1]
    return allowed_mask(b, h, tq, tk, mask=kw.get("mask"), is_causal=kw.get("is_causal", False),
                        causal_offset=kw.get("causal_offset", 0),
                        window=kw.get("sliding_window", (-1, -1)) or (-1, -1),
                        query_lengths=kw.get("query_lengths"),
                        key_lengths=kw.get("key_lengths"), query_mask=kw.get("query_mask"),
                        key_mask=kw.get("key_mask"))


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32], ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(CASES))
def test_decode_paths_match_the_reference(name, dtype):
    q, k, v, bias, softcap, kw = _inputs(name, dtype)
    scale = f32_scale(q.shape[-1])
    window = kw.get("sliding_window")
    allowed = _allowed(q, k, dict(kw, sliding_window=window))
    tq_, tk_, tv_ = (tf.constant(x, dtype) for x in (q, k, v))
    tb = None if bias is None else tf.constant(bias, dtype)
    prev = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        outs = {}
        for mode in MODES:
            with decode_mode(mode), tf.device("/GPU:0"):
                outs[mode] = tf.cast(fa.dot_product_attention(
                    tq_, tk_, tv_, bias=tb, scale=scale, attn_logits_soft_cap=softcap, **kw),
                    tf.float64).numpy()
        ref = reference_attention(*(tf.constant(x, tf.float64) for x in (q, k, v)),
                                  bias=None if bias is None else tf.constant(bias, tf.float64),
                                  scale=scale, softcap=softcap, allowed=allowed)[0].numpy()
        if softcap is None:  # the same-precision unfused attention gives the error bar
            group = q.shape[2] // k.shape[2]  # Keras' TensorFlow backend wants K/V repeated
            with tf.device("/GPU:0"):
                base = keras.ops.dot_product_attention(
                    tq_, tf.repeat(tk_, group, axis=2), tf.repeat(tv_, group, axis=2), bias=tb,
                    mask=tf.constant(allowed), scale=scale)
            rows = np.any(allowed, axis=-1).transpose(0, 2, 1)[..., None]
            base = np.where(rows, tf.cast(base, tf.float64).numpy(), ref)
            bar = 2 * float(np.abs(base - ref).max())
        else:
            bar = 4 * FLOOR[dtype]
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(prev)
    floor = FLOOR[dtype] * max(1.0, float(np.abs(ref).max()))
    for mode, out in outs.items():
        assert np.all(np.isfinite(out)), f"{mode}: unwritten or NaN output"
        err = float(np.abs(out - ref).max())
        assert err <= bar + floor, (mode, err, bar, floor)
    # The split variants compute the same function as the tiled kernels, up to rounding.
    for mode in ("auto", "on_1_split", "on_7_splits"):
        assert float(np.abs(outs[mode] - outs["off"]).max()) <= bar + 2 * floor, mode


def test_decode_lse_and_empty_rows():
    """Rows that see no key give output 0 and log-sum-exp -inf on the decoding path too."""
    rng = np.random.default_rng(3)
    q = tf.constant(rng.standard_normal((2, 2, 8, 64)), tf.bfloat16)
    k = tf.constant(rng.standard_normal((2, 600, 2, 64)), tf.bfloat16)
    for mode in ("on_1_split", "on_7_splits"):
        with decode_mode(mode), tf.device("/GPU:0"):
            out, lse = fa.dot_product_attention(q, k, k, key_lengths=[600, 0], return_lse=True)
        assert np.all(out.numpy()[1] == 0) and np.all(np.isneginf(lse.numpy()[1]))
        with decode_mode("off"), tf.device("/GPU:0"):
            out0, lse0 = fa.dot_product_attention(q, k, k, key_lengths=[600, 0], return_lse=True)
        np.testing.assert_allclose(lse.numpy()[0], lse0.numpy()[0], rtol=1e-5, atol=1e-5)


def test_decode_under_xla_and_the_gradient():
    """The decoding path under jit_compile (its workspace is an extra custom-call result), and the
    gradient of a forward that took it (the backward is the tiled one)."""
    rng = np.random.default_rng(4)
    q = tf.Variable(tf.constant(rng.standard_normal((2, 1, 8, 128)), tf.float32))
    k, v = (tf.constant(rng.standard_normal((2, 2000, 2, 128)), tf.float32) for _ in range(2))

    def step():
        with tf.GradientTape() as tape:
            y = fa.dot_product_attention(q, k, v, key_lengths=[2000, 1500])
            loss = tf.reduce_sum(y * y)
        return y, tape.gradient(loss, q)

    with decode_mode("off"):
        y0, g0 = tf.function(step, jit_compile=True)()
    with decode_mode("on_7_splits"):
        y1, g1 = tf.function(step, jit_compile=True)()
        y2, g2 = step()
    for a, b in ((y0, y1), (g0, g1), (y0, y2), (g0, g2)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-3, atol=2e-3)
