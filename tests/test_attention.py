"""CPU tests of the FlashAttention op against an unfused float64 reference on random inputs."""
import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_flashattn as fa
from reference import (allowed_mask, dropout_keep_mask, dropout_keep_scale, dropout_threshold16,
                       f32_scale, philox4x32_10, philox_key, rand, reference_attention)

# The CPU kernels, also on a machine with a GPU (conftest.on_cpu).
pytestmark = pytest.mark.usefixtures("on_cpu")

SIZES = [1, 17, 113, 203, 256, 1000]


def run_both(q, k, v, *, bias=None, keep=None, allowed=None, softcap=None, loss_w=None,
             with_lse=False, **kw):
    """Forward + gradients of ours and of the float64 reference for a random linear loss."""
    scale = kw.pop("scale", f32_scale(q.shape[-1]))
    watched = [q, k, v] + ([bias] if bias is not None else [])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(watched)
        out, lse = fa.dot_product_attention(q, k, v, bias=bias, scale=scale, return_lse=True,
                                            attn_logits_soft_cap=softcap, **kw)
        ref, ref_lse = reference_attention(q, k, v, bias=bias, scale=scale, softcap=softcap,
                                           allowed=allowed, keep=keep,
                                           dropout_rate=kw.get("dropout_rate", 0.0))
        w = loss_w if loss_w is not None else tf.constant(
            np.random.default_rng(7).standard_normal(out.shape))
        loss = tf.reduce_sum(tf.cast(out, tf.float64) * w)
        ref_loss = tf.reduce_sum(ref * w)
        if with_lse:
            wl = tf.constant(np.random.default_rng(8).standard_normal(lse.shape))
            finite = tf.math.is_finite(ref_lse)
            loss += tf.reduce_sum(tf.where(finite, tf.cast(lse, tf.float64), 0.0) * wl)
            ref_loss += tf.reduce_sum(tf.where(finite, ref_lse, 0.0) * wl)
    grads = tape.gradient(loss, watched)
    ref_grads = tape.gradient(ref_loss, watched)
    return (out, lse, grads), (ref, ref_lse, ref_grads)


def assert_close(ours, ref, tol):
    ours = tf.cast(ours, tf.float64).numpy()
    ref = ref.numpy() if hasattr(ref, "numpy") else ref
    np.testing.assert_allclose(ours, ref, atol=tol, rtol=tol)


def check(q, k, v, tol=2e-4, **kw):
    allowed = kw.pop("allowed", None)
    (out, lse, grads), (ref, ref_lse, ref_grads) = run_both(q, k, v, allowed=allowed, **kw)
    assert_close(out, ref, tol)
    lse_np, ref_lse_np = lse.numpy(), ref_lse.numpy()
    np.testing.assert_array_equal(np.isneginf(lse_np), np.isneginf(ref_lse_np))
    fin = np.isfinite(ref_lse_np)
    np.testing.assert_allclose(lse_np[fin], ref_lse_np[fin], atol=tol, rtol=tol)
    for g, rg in zip(grads, ref_grads):
        assert_close(g, rg, tol * 5)
    return out, grads


def test_ops_run_on_the_cpu():
    """This file tests the CPU kernels, so its ops land on the CPU also where TensorFlow sees a GPU
    (conftest.on_cpu); without the pin they would run the GPU kernels there, float32 as TF32, against
    this file's error bars. On a CPU-only machine this holds whatever the pin does."""
    q = tf.random.normal([1, 8, 1, 16])
    out = fa.dot_product_attention(q, q, q)
    assert out.device.endswith("CPU:0"), out.device


# ---- sizes, head dims, GQA ---------------------------------------------------------------
@pytest.mark.parametrize("tq,tk", list(itertools.product(SIZES, SIZES)))
def test_sizes(tq, tk):
    rng = np.random.default_rng(tq * 1000 + tk)
    q, k, v = rand(rng, 1, tq, 2, 64), rand(rng, 1, tk, 2, 64), rand(rng, 1, tk, 2, 64)
    check(q, k, v)


@pytest.mark.parametrize("d,dv", [(16, 16), (40, 40), (64, 64), (80, 80), (128, 128),
                                  (256, 256), (64, 40), (24, 128), (1, 3)])
def test_head_dims(d, dv):
    rng = np.random.default_rng(d * 7 + dv)
    q, k, v = rand(rng, 2, 70, 2, d), rand(rng, 2, 90, 2, d), rand(rng, 2, 90, 2, dv)
    check(q, k, v)


@pytest.mark.parametrize("ratio", [1, 2, 4, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa(ratio, causal):
    rng = np.random.default_rng(ratio)
    hkv = 2
    q, k, v = rand(rng, 2, 65, hkv * ratio, 32), rand(rng, 2, 77, hkv, 32), rand(rng, 2, 77, hkv, 32)
    allowed = allowed_mask(2, hkv * ratio, 65, 77, is_causal=causal)
    check(q, k, v, is_causal=causal, allowed=allowed)


# ---- masks -------------------------------------------------------------------------------
B, TQ, TK, H, HKV, D = 2, 67, 131, 4, 2, 48

MASK_KINDS = {
    "none": {},
    "causal": dict(is_causal=True),
    "causal_kv_cache": dict(is_causal=True, causal_offset=TK - TQ),
    "causal_negative_offset": dict(is_causal=True, causal_offset=-20),
    "window": dict(sliding_window=(9, 4)),
    "window_int": dict(sliding_window=7),
    "window_left_only_causal": dict(sliding_window=(16, None), is_causal=True),
    "lengths": dict(query_lengths=[50, 67], key_lengths=[131, 40]),
    "zero_lengths": dict(query_lengths=[0, 67], key_lengths=[131, 0]),
    "padding_masks": "padding",
    "dense_full": "dense_full",
    "dense_b1tk": "dense_b1tk",
    "dense_tqtk_rank2": "dense_rank2",
}


def _mask_kwargs(kind, rng):
    spec = MASK_KINDS[kind]
    if isinstance(spec, dict):
        return dict(spec)
    if spec == "padding":
        return dict(query_mask=rng.random((B, TQ)) > 0.2, key_mask=rng.random((B, TK)) > 0.3)
    if spec == "dense_full":
        return dict(mask=rng.random((B, H, TQ, TK)) > 0.4)
    if spec == "dense_b1tk":
        return dict(mask=rng.random((B, 1, 1, TK)) > 0.4)
    return dict(mask=rng.random((TQ, TK)) > 0.5)


def _allowed(kw):
    kw = dict(kw)
    window = kw.pop("sliding_window", None)
    if isinstance(window, int):
        window = (window, window)
    window = tuple(-1 if w is None else w for w in (window or (-1, -1)))
    mask = kw.pop("mask", None)
    return allowed_mask(B, H, TQ, TK, mask=mask, window=window, **kw)


@pytest.mark.parametrize("kind", list(MASK_KINDS))
def test_mask_kinds(kind):
    rng = np.random.default_rng(len(kind))
    q, k, v = rand(rng, B, TQ, H, D), rand(rng, B, TK, HKV, D), rand(rng, B, TK, HKV, D)
    kw = _mask_kwargs(kind, rng)
    check(q, k, v, allowed=_allowed(kw), with_lse=True, **kw)


@pytest.mark.parametrize("kinds", [("causal", "padding_masks", "dense_b1tk"),
                                   ("window", "lengths", "dense_full"),
                                   ("causal_kv_cache", "lengths", "padding_masks"),
                                   ("window_left_only_causal", "dense_rank2_alias")])
def test_mask_combinations(kinds):
    rng = np.random.default_rng(11)
    q, k, v = rand(rng, B, TQ, H, D), rand(rng, B, TK, HKV, D), rand(rng, B, TK, HKV, D)
    kw = {}
    for kind in kinds:
        kw.update(_mask_kwargs("dense_tqtk_rank2" if kind == "dense_rank2_alias" else kind, rng))
    bias = rand(rng, 1, H, TQ, TK)
    check(q, k, v, allowed=_allowed(kw), bias=bias, softcap=5.0, **kw)


@pytest.mark.parametrize("bias_shape", [(B, H, TQ, TK), (1, H, TQ, TK), (B, 1, 1, TK),
                                        (1, 1, TQ, 1), (TQ, TK), (TK,)])
def test_bias_and_its_gradient(bias_shape):
    rng = np.random.default_rng(sum(bias_shape))
    q, k, v = rand(rng, B, TQ, H, D), rand(rng, B, TK, HKV, D), rand(rng, B, TK, HKV, D)
    bias = rand(rng, *bias_shape)
    (out, _, grads), (ref, _, ref_grads) = run_both(q, k, v, bias=bias, is_causal=True,
                                                    allowed=_allowed(dict(is_causal=True)))
    assert grads[3].shape == bias.shape
    assert_close(out, ref, 2e-4)
    for g, rg in zip(grads, ref_grads):
        assert_close(g, rg, 1e-3)


def test_bias_nonfinite_where_masked():
    """A bias holding NaN and +inf wherever causal masking and key lengths hide the element is never read: the
    output and the gradients are those of the reference, which masks before the softmax (score_elem's rule; the
    GPU kernels are held to it in test_gpu.py)."""
    rng = np.random.default_rng(12)
    q, k, v = rand(rng, B, TQ, H, D), rand(rng, B, TK, HKV, D), rand(rng, B, TK, HKV, D)
    kw = dict(is_causal=True, key_lengths=[TK, TK // 2])
    allowed = _allowed(kw)
    bad = np.where(rng.random((B, H, TQ, TK)) < 0.5, np.nan, np.inf)
    bias = tf.constant(np.where(allowed, rng.standard_normal((B, H, TQ, TK)), bad).astype(np.float32))
    out, grads = check(q, k, v, allowed=allowed, bias=bias, **kw)
    assert np.all(np.isfinite(grads[3].numpy()))


def test_bias_neginf_hides_its_element():
    """A bias of -inf at visible elements hides them as a mask does, whole rows of one head included: those rows
    give O = 0 and lse = -inf (as a row that sees no key), every gradient stays finite and dbias is exactly 0 at
    the -inf elements (the reference, which masks them, agrees; the GPU kernels: test_gpu.py)."""
    rng = np.random.default_rng(13)
    q, k, v = rand(rng, B, TQ, H, D), rand(rng, B, TK, HKV, D), rand(rng, B, TK, HKV, D)
    bias = rng.standard_normal((1, H, TQ, TK)).astype(np.float32)
    bias[rng.random(bias.shape) < 0.1] = -np.inf
    bias[:, 1, 2::5, :] = -np.inf
    kw = dict(is_causal=True)
    allowed = _allowed(kw) & np.isfinite(bias)
    out, grads = check(q, k, v, allowed=allowed, bias=tf.constant(bias), **kw)
    assert np.all(out.numpy()[:, 2::5, 1] == 0)
    assert all(np.all(np.isfinite(g.numpy())) for g in grads)
    assert np.all(grads[3].numpy()[~np.isfinite(bias)] == 0)


def test_softcap():
    rng = np.random.default_rng(3)
    q, k, v = (rand(rng, 1, 50, 2, 32) * 4, rand(rng, 1, 60, 2, 32) * 4, rand(rng, 1, 60, 2, 32))
    out, _ = check(q, k, v, softcap=1.5)
    plain = fa.dot_product_attention(q, k, v)
    assert np.abs(out.numpy() - plain.numpy()).max() > 1e-2  # the cap changed the result


def test_fully_masked_rows_give_zero_output_and_gradients():
    rng = np.random.default_rng(5)
    q, k, v = rand(rng, 2, 9, 2, 16), rand(rng, 2, 12, 2, 16), rand(rng, 2, 12, 2, 16)
    mask = np.ones((2, 1, 9, 12), bool)
    mask[:, :, 3] = False
    bias = rand(rng, 2, 2, 9, 12)
    with tf.GradientTape() as tape:
        tape.watch([q, k, v, bias])
        out = fa.dot_product_attention(q, k, v, bias=bias, mask=mask)
        loss = tf.reduce_sum(out)
    dq, dk, dv, db = tape.gradient(loss, [q, k, v, bias])
    assert np.all(np.isfinite(out.numpy())) and np.all(out.numpy()[:, 3] == 0)
    assert np.all(dq.numpy()[:, 3] == 0) and np.all(db.numpy()[:, :, 3] == 0)
    for g in (dq, dk, dv, db):
        assert np.all(np.isfinite(g.numpy()))
    assert np.abs(out.numpy()[:, 2]).max() > 0


# ---- dropout -----------------------------------------------------------------------------
@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_dropout_matches_reference_with_the_philox_mask(rate):
    rng = np.random.default_rng(9)
    q, k, v = rand(rng, 2, 33, 4, 32), rand(rng, 2, 47, 2, 32), rand(rng, 2, 47, 2, 32)
    seed = [1234, -5]
    keep = dropout_keep_mask(seed, 2, 4, 33, 47, rate)
    allowed = allowed_mask(2, 4, 33, 47, is_causal=True)
    check(q, k, v, keep=keep, allowed=allowed, dropout_rate=rate, seed=seed, is_causal=True)


@pytest.mark.parametrize("rate", [1e-6, 0.1, 0.15, 0.3, 0.5, 0.9, 0.99999])
def test_dropout_rule_threshold_and_scale(rate):
    """flash_params.h's rule: t16 = min(round(rate * 65536), 65535), keep_scale = 65536 /
    (65536 - t16): the rate applied is within 2^-17 of the requested one (except near 1, where
    t16 stops at 65535) and E[keep * keep_scale] = 1 up to the float32 rounding of the scale."""
    t = dropout_threshold16(rate)
    r32 = float(np.float32(rate))
    assert 0 <= t <= 65535
    if r32 * 65536 < 65535:
        assert abs(t / 65536 - r32) <= 2.0**-17
    assert abs((65536 - t) / 65536 * dropout_keep_scale(rate) - 1) < 1e-7


def test_dropout_reference_mask_matches_the_rule_element_by_element():
    """The vectorized NumPy mask against a scalar reading of the rule, at elements on every side
    of the 16-row and 32-column call blocks."""
    seed, rate = [11, -3], 0.37
    B, H, Tq, Tk = 2, 3, 40, 70
    keep = dropout_keep_mask(seed, B, H, Tq, Tk, rate)
    k0, k1 = philox_key(seed)
    t16 = dropout_threshold16(rate)
    rng = np.random.default_rng(0)
    for _ in range(300):
        b, h, i, j = rng.integers(B), rng.integers(H), rng.integers(Tq), rng.integers(Tk)
        ctr0 = 8 * (j // 32) + j % 8
        ctr1 = 8 * (i // 16) + i % 8
        words = [int(w) for w in philox4x32_10(ctr0, ctr1, h, b, k0, k1)]
        kk = 4 * ((i // 8) % 2) + (j // 8) % 4
        draw = (words[kk // 2] >> (16 * (kk % 2))) & 0xFFFF
        assert keep[b, h, i, j] == (draw >= t16), (b, h, i, j)


def test_dropout_draws_are_uniform_and_independent_within_a_call():
    """Each of a call's 8 draw positions keeps at the rate's frequency, and elements that share a
    call (rows r, r + 8; columns c, c + 8) or neighbour each other are kept independently."""
    rate = 0.25
    keep = dropout_keep_mask([21, 22], 1, 2, 512, 512, rate)[0].astype(np.float64)  # [H, T, T]
    n_per_pos = keep.size / 8
    sd = np.sqrt(rate * (1 - rate) / n_per_pos)
    i = np.arange(512)[:, None]
    j = np.arange(512)[None, :]
    k = np.broadcast_to(((i >> 3) & 1) * 4 + ((j >> 3) & 3), (512, 512))
    for kk in range(8):
        frac = keep[:, k == kk].mean()
        assert abs(1 - frac - rate) < 5 * sd, (kk, frac)
    p = 1 - rate
    for name, a, b in [("row + 8", keep[:, :-8, :], keep[:, 8:, :]),
                       ("col + 8", keep[:, :, :-8], keep[:, :, 8:]),
                       ("col + 1", keep[:, :, :-1], keep[:, :, 1:]),
                       ("row + 1", keep[:, :-1, :], keep[:, 1:, :])]:
        both = (a * b).mean()
        sd2 = np.sqrt(p * p * (1 - p * p) / a.size)
        assert abs(both - p * p) < 5 * sd2, (name, both, p * p)


def test_dropout_mask_fraction_and_determinism():
    rate = 0.3
    keep = dropout_keep_mask([7, 8], 2, 4, 256, 256, rate)
    assert abs(1 - keep.mean() - rate) < 0.005
    # Through the op: with v = one-hot of the key index, out * (1 - rate) * l recovers the kept
    # probability mass; simpler: a uniform-attention setup where each output is the mean of kept
    # ones scaled, whose average over rows approaches 1.
    q = tf.zeros([1, 512, 1, 8])
    k = tf.zeros([1, 512, 1, 8])
    v = tf.ones([1, 512, 1, 1])
    out = fa.dot_product_attention(q, k, v, dropout_rate=rate, seed=[3, 4]).numpy()
    kept_fraction = out.mean() * (1 - rate)
    assert abs(kept_fraction - (1 - rate)) < 0.01
    again = fa.dot_product_attention(q, k, v, dropout_rate=rate, seed=[3, 4]).numpy()
    other = fa.dot_product_attention(q, k, v, dropout_rate=rate, seed=[3, 5]).numpy()
    np.testing.assert_array_equal(out, again)
    assert np.abs(out - other).max() > 0


# ---- numerical gradient checks in float64 -------------------------------------------------
@pytest.mark.parametrize("kw", [dict(), dict(is_causal=True, softcap=2.0),
                                dict(with_bias=True, sliding_window=(3, 2)),
                                dict(dropout_rate=0.25, seed=[1, 2], is_causal=True)])
def test_compute_gradient_float64(kw):
    kw = dict(kw)
    rng = np.random.default_rng(21)
    q = rand(rng, 1, 7, 2, 8, dtype=tf.float64)
    k = rand(rng, 1, 9, 1, 8, dtype=tf.float64)
    v = rand(rng, 1, 9, 1, 5, dtype=tf.float64)
    bias = rand(rng, 1, 2, 7, 9, dtype=tf.float64) if kw.pop("with_bias", False) else None
    softcap = kw.pop("softcap", None)

    def f(q, k, v, *b):
        return fa.dot_product_attention(q, k, v, bias=b[0] if b else None,
                                        attn_logits_soft_cap=softcap, **kw)

    args = [q, k, v] + ([bias] if bias is not None else [])
    theo, num = tf.test.compute_gradient(f, args)
    for t, n in zip(theo, num):
        np.testing.assert_allclose(t, n, atol=2e-6, rtol=1e-5)


# ---- graph modes ---------------------------------------------------------------------------
def test_tf_function_and_tf_gradients_in_graph():
    rng = np.random.default_rng(4)
    q, k, v = rand(rng, 2, 40, 4, 32), rand(rng, 2, 50, 2, 32), rand(rng, 2, 50, 2, 32)
    mask = rng.random((2, 1, 40, 50)) > 0.3

    @tf.function
    def step(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = fa.dot_product_attention(q, k, v, mask=mask, is_causal=True)
            loss = tf.reduce_sum(out * out)
        return out, tape.gradient(loss, [q, k, v])

    eager_out = fa.dot_product_attention(q, k, v, mask=mask, is_causal=True)
    out, grads = step(q, k, v)
    np.testing.assert_allclose(out.numpy(), eager_out.numpy(), atol=1e-6)

    graph = tf.Graph()
    with graph.as_default(), tf.device("/CPU:0"):  # a new graph starts without the fixture's device scope
        gq, gk, gv = (tf.compat.v1.placeholder(tf.float32, t.shape) for t in (q, k, v))
        gout = fa.dot_product_attention(gq, gk, gv, mask=mask, is_causal=True)
        gg = tf.gradients(tf.reduce_sum(gout * gout), [gq, gk, gv])
        with tf.compat.v1.Session() as sess:
            res = sess.run([gout] + gg, {gq: q.numpy(), gk: k.numpy(), gv: v.numpy()})
    np.testing.assert_allclose(res[0], out.numpy(), atol=1e-6)
    for a, b in zip(res[1:], grads):
        np.testing.assert_allclose(a, b.numpy(), atol=1e-5)


def test_dynamic_shapes_in_tf_function():
    spec = tf.TensorSpec([None, None, 2, 16], tf.float32)

    @tf.function(input_signature=[spec, spec, spec])
    def f(q, k, v):
        return fa.dot_product_attention(q, k, v, is_causal=True)

    rng = np.random.default_rng(0)
    for tq, tk in [(5, 9), (17, 3)]:
        q, k, v = rand(rng, 1, tq, 2, 16), rand(rng, 1, tk, 2, 16), rand(rng, 1, tk, 2, 16)
        ref, _ = reference_attention(q, k, v, scale=f32_scale(16),
                                     allowed=allowed_mask(1, 2, tq, tk, is_causal=True))
        assert_close(f(q, k, v), ref, 1e-5)


# ---- Keras equivalence --------------------------------------------------------------------
@pytest.mark.parametrize("kw", [dict(), dict(is_causal=True), dict(mask="dense"),
                                dict(bias=True), dict(gqa=True), dict(scale=0.3),
                                dict(is_causal=True, mask="dense", bias=True, gqa=True)])
def test_equals_keras_dot_product_attention(kw):
    kw = dict(kw)
    rng = np.random.default_rng(17)
    hkv = 2 if kw.pop("gqa", False) else 4
    q, k, v = rand(rng, 2, 30, 4, 24), rand(rng, 2, 45, hkv, 24), rand(rng, 2, 45, hkv, 24)
    if kw.get("mask") == "dense":
        m = rng.random((2, 1, 30, 45)) > 0.3
        m[..., 0] = True  # Keras averages fully masked rows; we give 0 (documented)
        kw["mask"] = m
    if kw.get("bias"):
        kw["bias"] = rand(rng, 1, 4, 30, 45)
    ours = fa.dot_product_attention(q, k, v, **kw)
    theirs = keras.ops.dot_product_attention(q, k, v, **kw)
    np.testing.assert_allclose(ours.numpy(), keras.ops.convert_to_numpy(theirs), atol=2e-6,
                               rtol=1e-5)


# ---- low precision ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,floor", [(tf.float16, 2e-3), (tf.bfloat16, 2e-2)])
def test_low_precision_error_vs_same_precision_unfused(dtype, floor):
    rng = np.random.default_rng(31)
    q, k, v = (rand(rng, 2, 129, 4, 64, dtype=dtype), rand(rng, 2, 200, 2, 64, dtype=dtype),
               rand(rng, 2, 200, 2, 64, dtype=dtype))
    w = tf.constant(rng.standard_normal((2, 129, 4, 64)))
    (out, _, grads), (ref, _, ref_grads) = run_both(q, k, v, is_causal=True, loss_w=w,
                                                    allowed=allowed_mask(2, 4, 129, 200,
                                                                         is_causal=True))
    with tf.GradientTape() as tape:
        tape.watch([q, k, v])
        base = keras.ops.dot_product_attention(q, k, v, is_causal=True,
                                               scale=f32_scale(64))
        loss = tf.reduce_sum(tf.cast(base, tf.float64) * w)
    base_grads = tape.gradient(loss, [q, k, v])

    def err(a, b):
        return float(np.abs(tf.cast(a, tf.float64).numpy() - b.numpy()).max())

    assert out.dtype == dtype
    assert err(out, ref) <= 2 * err(base, ref) + floor
    for g, bg, rg in zip(grads, base_grads, ref_grads):
        assert g.dtype == dtype
        assert err(g, rg) <= 3 * err(bg, rg) + floor


# ---- edge cases and errors ----------------------------------------------------------------
@pytest.mark.parametrize("shape_q,shape_k", [((0, 5, 2, 8), (0, 7, 2, 8)),
                                             ((2, 0, 2, 8), (2, 7, 2, 8)),
                                             ((2, 5, 2, 8), (2, 0, 2, 8))])
def test_empty_inputs(shape_q, shape_k):
    q, k, v = tf.ones(shape_q), tf.ones(shape_k), tf.ones(shape_k)
    with tf.GradientTape() as tape:
        tape.watch([q, k, v])
        out = fa.dot_product_attention(q, k, v)
        loss = tf.reduce_sum(out)
    assert out.shape == shape_q
    assert np.all(out.numpy() == 0)  # no key to see: rows give 0
    for g, t in zip(tape.gradient(loss, [q, k, v]), (q, k, v)):
        assert g.shape == t.shape and np.all(g.numpy() == 0)


def test_nan_input_gives_nan_in_affected_rows_only():
    rng = np.random.default_rng(2)
    q, k, v = rand(rng, 1, 6, 1, 8).numpy(), rand(rng, 1, 6, 1, 8), rand(rng, 1, 6, 1, 8)
    q[0, 2, 0, 3] = np.nan
    out = fa.dot_product_attention(q, k, v).numpy()
    assert np.all(np.isnan(out[0, 2])) and np.all(np.isfinite(np.delete(out, 2, axis=1)))


BAD_CALLS = [
    (dict(q=(2, 5, 2), ), "`query` must be rank 4"),
    (dict(k=(2, 5, 2, 9)), "same head_dim"),
    (dict(q=(2, 5, 3, 8)), "multiple of num_kv_heads"),
    (dict(q=(2, 5, 2, 300), k=(2, 7, 2, 300), v=(2, 7, 2, 300)), "must be in [1, 256]"),
    (dict(v=(2, 6, 2, 8)), "`value` must have the key_len (dim 1) of `key`, 7"),
    (dict(k=(3, 7, 2, 8), v=(3, 7, 2, 8)), "`key` must have the batch (dim 0) of `query`, 2"),
    (dict(v=(2, 7, 1, 8)), "`value` must have the num_kv_heads (dim 2) of `key`, 2"),
    (dict(attn_logits_soft_cap=0.0), "`attn_logits_soft_cap` must be a positive number"),
    (dict(attn_logits_soft_cap=True), "`attn_logits_soft_cap` must be a Python number"),
    (dict(scale=tf.constant(0.5)), "`scale` must be a Python number"),
    (dict(key_lengths=[2.9, 3.0]), "`key_lengths` must be an integer tensor"),
    (dict(sliding_window=True), "`sliding_window` must be"),
    (dict(sliding_window=(-2, 3)), "`sliding_window` must be"),
    (dict(mask=np.ones((2, 2, 5, 3), bool)), "`mask` of shape"),
    (dict(bias=np.ones((3, 1, 1, 7), np.float32)), "`bias` of shape"),
    (dict(query_lengths=[1, 9]), "query_lengths[1] = 9 is out of range [0, 5]"),
    (dict(key_lengths=[1, 2, 3]), "`key_lengths` must have shape [batch] = [2]"),
    (dict(key_lengths=np.zeros([0], np.int32)), "`key_lengths` must have shape [batch] = [2]"),
    (dict(key_mask=np.ones((2, 6), bool)), "`key_mask` must have shape [batch, length] = [2, 7]"),
    (dict(query_mask=np.ones((5,), bool)), "`query_mask` must have shape [batch, length] = [2, 5]"),
    (dict(dropout_rate=0.1), "needs a `seed`"),
    (dict(dropout_rate=1.0, seed=[1, 2]), "`dropout_rate` must be in [0, 1)"),
    (dict(seed=[1, 2, 3], dropout_rate=0.1), "`seed` must be a scalar or have shape [2]"),
    (dict(dtype=tf.int32), "must be float16, bfloat16, float32 or float64"),
    (dict(sliding_window="x"), "`sliding_window` must be"),
    # Lengths given from NumPy are checked in Python with their own values (not wrapped modulo
    # 2^32: 2^32 + 3 is not read as 3); symbolic ones by the kernel, see the test below.
    (dict(key_lengths=np.array([2**32 + 3, 3], np.int64)), "key_lengths[0] = 4294967299 is out of"),
    (dict(query_lengths=np.array([1, -2**32 + 2], np.int64)), "query_lengths[1] = -4294967294 is"),
    (dict(is_causal=True, causal_offset=1.7), "`causal_offset` must be a Python int"),
    (dict(is_causal=True, causal_offset="2"), "`causal_offset` must be a Python int"),
    (dict(is_causal=True, causal_offset=True), "`causal_offset` must be a Python int"),
    (dict(is_causal=True, causal_offset=np.array([1])), "`causal_offset` must be a Python int"),
    (dict(sliding_window=(True, 2)), "`sliding_window` must be"),
    (dict(sliding_window=np.float32(2)), "`sliding_window` must be"),
]


@pytest.mark.parametrize("call,message", BAD_CALLS)
def test_errors_name_the_argument(call, message):
    call = dict(call)
    dtype = call.pop("dtype", tf.float32)
    q = tf.ones(call.pop("q", (2, 5, 2, 8)), dtype)
    k = tf.ones(call.pop("k", (2, 7, 2, 8)), dtype)
    v = tf.ones(call.pop("v", (2, 7, 2, 8)), dtype)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError)) as e:
        fa.dot_product_attention(q, k, v, **call)
    assert message in str(e.value)


def test_integer_like_arguments_accept_numpy_and_eager_scalars():
    rng = np.random.default_rng(0)
    q, k, v = (tf.constant(rng.standard_normal((2, 5, 2, 8)), tf.float32) for _ in range(3))
    want = fa.dot_product_attention(q, k, v, is_causal=True, causal_offset=1, sliding_window=2)
    for off, win in ((np.int64(1), np.int32(2)), (tf.constant(1), (np.int64(2), 2)),
                     (np.array(1), tf.constant(2))):
        got = fa.dot_product_attention(q, k, v, is_causal=True, causal_offset=off,
                                       sliding_window=win)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_symbolic_causal_offset_names_the_argument():
    q = tf.ones((1, 4, 1, 8))

    @tf.function
    def f(offset):
        return fa.dot_product_attention(q, q, q, is_causal=True, causal_offset=offset)

    with pytest.raises(ValueError, match="`causal_offset` must be a Python int.*key_lengths"):
        f(tf.constant(2))


@pytest.mark.parametrize("name", ["query", "key", "mask", "key_lengths"])
def test_ragged_and_sparse_inputs_name_the_argument(name):
    q = tf.ones((2, 3, 1, 8))
    args = dict(query=q, key=q, value=q)
    ragged = tf.RaggedTensor.from_row_lengths(tf.ones((5, 1, 8)), [2, 3])
    if name in ("query", "key"):
        args[name] = ragged
    elif name == "mask":
        args[name] = tf.sparse.from_dense(tf.ones((2, 1, 3, 3), tf.bool))
    else:
        args[name] = tf.RaggedTensor.from_row_lengths([3, 3], [1, 1])
    with pytest.raises(TypeError, match=f"`{name}` must be a dense tensor"):
        fa.dot_product_attention(**args)


def test_second_order_gradient_raises_a_clear_error():
    """First-order gradients only: differentiating the gradient must fail loudly, not give a
    wrong or missing (None) result."""
    rng = np.random.default_rng(0)
    q, k, v = (tf.constant(rng.standard_normal((1, 4, 1, 8)), tf.float32) for _ in range(3))
    with tf.GradientTape() as outer:
        outer.watch(q)
        with tf.GradientTape() as inner:
            inner.watch(q)
            loss = tf.reduce_sum(fa.dot_product_attention(q, k, v) ** 2)
        penalty = tf.reduce_sum(inner.gradient(loss, q) ** 2)
    with pytest.raises(NotImplementedError, match="first-order gradients only"):
        outer.gradient(penalty, q)


def test_positional_arguments_match_keras():
    """The 8th positional argument is Keras' flash_attention, the 9th the soft cap."""
    rng = np.random.default_rng(12)
    q = rand(rng, 1, 4, 1, 8) * 3
    plain = fa.dot_product_attention(q, q, q)
    np.testing.assert_array_equal(
        fa.dot_product_attention(q, q, q, None, None, None, False, True).numpy(), plain.numpy())
    capped = fa.dot_product_attention(q, q, q, None, None, None, False, None, 1.0)
    np.testing.assert_array_equal(
        capped.numpy(), fa.dot_product_attention(q, q, q, attn_logits_soft_cap=1.0).numpy())
    assert np.abs(capped.numpy() - plain.numpy()).max() > 1e-3


@pytest.mark.parametrize("jit", [False, True], ids=["kernel", "xla"])
def test_op_level_errors_in_graph_with_unknown_shapes(jit):
    """Checks the C++ validation, which the Python wrapper cannot do for dynamic shapes: the
    TensorFlow kernel's at run time, or (jit_compile=True) the XLA lowering's at compile time;
    both are FillShapes (cc/ops/flash_attention_common.h)."""
    spec = tf.TensorSpec([None, None, None, None], tf.float32)

    @tf.function(input_signature=[spec, spec, spec], jit_compile=jit)
    def f(q, k, v):
        return fa.dot_product_attention(q, k, v, scale=1.0)

    with pytest.raises(tf.errors.InvalidArgumentError, match="multiple of num_kv_heads"):
        f(tf.ones([1, 3, 3, 4]), tf.ones([1, 3, 2, 4]), tf.ones([1, 3, 2, 4]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"head_dim .* must be in \[1, 256\]"):
        f(tf.ones([1, 3, 1, 257]), tf.ones([1, 3, 1, 257]), tf.ones([1, 3, 1, 4]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="key must have shape"):
        f(tf.ones([1, 3, 1, 4]), tf.ones([2, 3, 1, 4]), tf.ones([2, 3, 1, 4]))


@pytest.mark.parametrize("schedule", ["single_pass", "two_pass"])
def test_both_cpu_backward_schedules(schedule):
    """The CPU backward makes one pass per (batch, kv head) when B*Hkv >= 2 * threads, else two
    passes; size the batch from this machine's core count so both run here, with a broadcast
    bias (dbias), dropout, GQA and a causal mask."""
    import os
    b = max(2, os.cpu_count() or 2) if schedule == "single_pass" else 1
    hkv, h = (2, 4) if schedule == "single_pass" else (1, 2)
    rng = np.random.default_rng(b)
    tq, tk = 70, 150
    q, k, v = rand(rng, b, tq, h, 24), rand(rng, b, tk, hkv, 24), rand(rng, b, tk, hkv, 24)
    bias = rand(rng, 1, h, tq, tk)
    seed, rate = [5, 6], 0.2
    keep = dropout_keep_mask(seed, b, h, tq, tk, rate)
    allowed = allowed_mask(b, h, tq, tk, is_causal=True, causal_offset=tk - tq)
    check(q, k, v, bias=bias, keep=keep, allowed=allowed, dropout_rate=rate, seed=seed,
          is_causal=True, causal_offset=tk - tq)


@pytest.mark.parametrize("jit", [False, True], ids=["kernel", "xla"])
def test_gradient_op_checks_its_saved_inputs(jit):
    """The gradient op's output / lse / d_output / d_lse shapes are checked (CheckGradShapes),
    by the TensorFlow kernel and by the XLA lowering alike."""
    from tf_flashattn import _ops
    lib = _ops.load()
    q = tf.ones([1, 4, 2, 8])
    e_b, e_i, e_m = tf.zeros([0]), tf.zeros([0], tf.int32), tf.zeros([0], tf.bool)
    good_o, good_lse = tf.ones([1, 4, 2, 8]), tf.zeros([1, 2, 4])
    spec = tf.TensorSpec(None, tf.float32)

    @tf.function(jit_compile=jit, input_signature=[spec] * 4)
    def grad(o, lse, do, d_lse):
        return lib.flash_attn_flash_attention_grad(q, q, q, e_m, e_b, e_i, e_i, e_m, e_m,
                                                   tf.zeros([2], tf.int64), o, lse, do, d_lse,
                                                   scale=1.0)[0]

    grad(good_o, good_lse, good_o, e_b)  # accepted
    for args, message in (((tf.ones([1, 4, 2, 7]), good_lse, good_o, e_b), "output must have shape"),
                          ((good_o, tf.zeros([1, 4, 2]), good_o, e_b), "lse must have shape"),
                          ((good_o, good_lse, tf.ones([1, 3, 2, 8]), e_b), "d_output must have shape"),
                          ((good_o, good_lse, good_o, tf.zeros([2, 4])), "d_lse must have shape")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            grad(*args)


@pytest.mark.parametrize("jit", [False, True], ids=["kernel", "xla"])
def test_seed_may_be_absent_only_without_dropout(jit):
    """The seed input is [2], or [0] (absent) when dropout_rate is 0: the wrapper passes [0] then
    (a [2] placeholder of zeros became a broadcast kernel under XLA, one per call). The op names
    the seed when dropout wants one and gets [0], or gets another shape."""
    from tf_flashattn import _ops
    lib = _ops.load()
    rng = np.random.default_rng(3)
    q = rand(rng, 1, 5, 2, 8)
    e_b, e_i, e_m = tf.zeros([0]), tf.zeros([0], tf.int32), tf.zeros([0], tf.bool)

    def fwd(seed, rate):
        f = tf.function(lambda q, s: lib.flash_attn_flash_attention(q, q, q, e_m, e_b, e_i, e_i, e_m, e_m, s,
                                                                   scale=0.5, dropout_rate=rate)[0],
                        jit_compile=jit)
        return f(q, seed)

    no_seed = fwd(tf.zeros([0], tf.int64), 0.0)
    np.testing.assert_array_equal(no_seed.numpy(), fwd(tf.constant([5, 6], tf.int64), 0.0).numpy())
    np.testing.assert_allclose(no_seed.numpy(), fa.dot_product_attention(q, q, q, scale=0.5).numpy(),
                               rtol=1e-6, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"dropout_rate > 0 needs a seed of shape \[2\]"):
        fwd(tf.zeros([0], tf.int64), 0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"seed must have shape \[2\] \(int64\), or \[0\]"):
        fwd(tf.zeros([3], tf.int64), 0.0)


def test_lengths_not_on_the_host_are_checked_by_the_cpu_kernel():
    # Symbolic lengths (inside tf.function) reach the op unchecked in Python; the CPU kernel
    # reports them, int64 values saturated (not wrapped modulo 2^32) on the way to int32.
    q = tf.ones((2, 5, 2, 8))
    k = tf.ones((2, 7, 2, 8))
    f = tf.function(lambda kl: fa.dot_product_attention(q, k, k, key_lengths=kl))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"key_lengths\[0\] = 2147483647 is out of range \[0, 7\]"):
        f(tf.constant([2**32 + 3, 3], tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"key_lengths\[1\] = -1 is out of range \[0, 7\]"):
        f(tf.constant([3, -1], tf.int64))
    np.testing.assert_allclose(f(tf.constant([7, 3], tf.int64)).numpy(),
                               fa.dot_product_attention(q, k, k, key_lengths=[7, 3]).numpy())


def test_repeated_eager_calls_take_the_cached_path_with_their_own_settings():
    """Eager calls without optional tensors reuse their checked attributes by signature: each
    setting still counts (causal, window, offset, soft-cap, scale), shapes and dtypes are part of
    the key, and a call that fails its checks is never cached."""
    from tf_flashattn import attention
    rng = np.random.default_rng(8)
    q, k, v = (tf.constant(rng.standard_normal((2, 6, 2, 8)), tf.float32) for _ in range(3))
    attention._EAGER_CALLS.clear()
    settings = [dict(), dict(is_causal=True), dict(is_causal=True, causal_offset=2),
                dict(sliding_window=1), dict(attn_logits_soft_cap=0.5), dict(scale=0.9)]
    first = [fa.dot_product_attention(q, k, v, **kw).numpy() for kw in settings]
    assert len(attention._EAGER_CALLS) == len(settings)
    again = [fa.dot_product_attention(q, k, v, **kw).numpy() for kw in settings]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    for i in range(len(first)):
        for j in range(i):
            assert not np.allclose(first[i], first[j]), (settings[i], settings[j])
    out, lse = fa.dot_product_attention(q, k, v, is_causal=True, return_lse=True)
    np.testing.assert_array_equal(out.numpy(), first[1])
    assert lse.shape == (2, 2, 6)
    q64 = tf.cast(q, tf.float64)  # another dtype: another entry, its own result dtype
    assert fa.dot_product_attention(q64, tf.cast(k, tf.float64), tf.cast(v, tf.float64)).dtype == tf.float64
    n = len(attention._EAGER_CALLS)
    with pytest.raises(ValueError, match="head_dim"):
        fa.dot_product_attention(q, tf.ones((2, 6, 2, 4)), v)
    with pytest.raises(ValueError, match="head_dim"):
        fa.dot_product_attention(q, tf.ones((2, 6, 2, 4)), v)
    assert len(attention._EAGER_CALLS) == n == len(settings) + 1  # float64 cached, failures not


def test_eager_dropout_calls_take_the_cached_path_with_their_own_seed():
    """An int64 [2] eager seed rides the cached path: each call uses its own seed (not the one
    cached with the first call), equal to the checked path's output for that seed; a seed of
    another form (a Python list, int32) takes the checked path."""
    from tf_flashattn import attention
    rng = np.random.default_rng(9)
    q, k, v = (tf.constant(rng.standard_normal((1, 16, 2, 8)), tf.float32) for _ in range(3))
    seeds = [tf.constant([5, i], tf.int64) for i in range(3)]
    attention._EAGER_CALLS.clear()
    got = [fa.dot_product_attention(q, k, v, dropout_rate=0.5, seed=s).numpy() for s in seeds]
    assert len(attention._EAGER_CALLS) == 1
    assert not np.allclose(got[0], got[1]) and not np.allclose(got[1], got[2])
    for s, g in zip(seeds, got):  # the checked path (a graph call) with the same seed
        want = tf.function(lambda s: fa.dot_product_attention(q, k, v, dropout_rate=0.5, seed=s))(s)
        np.testing.assert_array_equal(g, want.numpy())
        np.testing.assert_array_equal(
            g, fa.dot_product_attention(q, k, v, dropout_rate=0.5, seed=[5, int(s[1])]).numpy())
    assert len(attention._EAGER_CALLS) == 1  # the list seeds took the checked path
    np.testing.assert_array_equal(fa.dot_product_attention(q, k, v).numpy(),
                                  fa.dot_product_attention(q, k, v, dropout_rate=0.0).numpy())


def test_eager_calls_with_variables_and_optional_tensors_take_the_cached_path():
    """Variables (read once, as a matmul reads them) and optional tensor inputs that are already
    what the op takes (eager tensors of its dtype and rank) ride the cached path: each call uses
    its own values, equal to a graph call's; host lengths are still range-checked at every call;
    inputs of another form (a rank-2 mask, int64 lengths) take the checked path."""
    from tf_flashattn import attention
    rng = np.random.default_rng(10)
    q, k, v = (tf.constant(rng.standard_normal((2, 7, 2, 8)), tf.float32) for _ in range(3))
    qv = tf.Variable(q)
    graph = tf.function(lambda q, **kw: fa.dot_product_attention(q, k, v, **kw))
    attention._EAGER_CALLS.clear()
    for lengths in ([7, 3], [2, 5], [0, 7]):
        kl = tf.constant(lengths, tf.int32)
        got = fa.dot_product_attention(qv, k, v, key_lengths=kl).numpy()
        np.testing.assert_array_equal(got, graph(q, key_lengths=kl).numpy())
    assert len(attention._EAGER_CALLS) == 1
    with pytest.raises(ValueError, match=r"key_lengths\[1\] = 8 is out of range \[0, 7\]"):
        fa.dot_product_attention(qv, k, v, key_lengths=tf.constant([1, 8], tf.int32))
    masks = [tf.constant(rng.random((2, 2, 7, 7)) > 0.3) for _ in range(2)]
    key_masks = [tf.constant(rng.random((2, 7)) > 0.3) for _ in range(2)]
    bias = [tf.constant(rng.standard_normal((2, 2, 7, 7)), tf.float32) for _ in range(2)]
    for i in range(2):
        got = fa.dot_product_attention(qv, k, v, mask=masks[i], key_mask=key_masks[i], bias=bias[i])
        want = graph(q, mask=masks[i], key_mask=key_masks[i], bias=bias[i])
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert len(attention._EAGER_CALLS) == 2
    assert not np.allclose(fa.dot_product_attention(qv, k, v, mask=masks[0]).numpy(),
                           fa.dot_product_attention(qv, k, v, mask=masks[1]).numpy())
    n = len(attention._EAGER_CALLS)
    fa.dot_product_attention(q, k, v, mask=tf.constant(rng.random((7, 7)) > 0.3))  # rank 2
    fa.dot_product_attention(q, k, v, key_lengths=tf.constant([7, 3], tf.int64))
    assert len(attention._EAGER_CALLS) == n  # both took the checked path
    # Gradients through a variable on the cached path: those of a graph call.
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(fa.dot_product_attention(qv, k, v, key_mask=key_masks[0]) ** 2)
    dq = tape.gradient(loss, qv)

    @tf.function
    def graph_grad():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(fa.dot_product_attention(qv, k, v, key_mask=key_masks[0]) ** 2)
        return tape.gradient(loss, qv)
    np.testing.assert_allclose(dq.numpy(), graph_grad().numpy(), rtol=1e-6, atol=1e-6)
