"""CPU tests of the decoding path (few query rows against many keys) through the TensorFlow op.

The path is switched per call with TF_FLASHATTN_DECODE = auto | on | off and
TF_FLASHATTN_DECODE_SPLITS = 0 (chosen from the shape) | n (forced key splits), read by the op at
every call. Every output is judged against the unfused float64 reference (tests/reference.py) and
against the tiled kernel (decode off); low precisions get the error bar of the same computation
done unfused in that precision.
"""
import zlib

import numpy as np
import pytest
import tensorflow as tf

import tf_flashattn as fa
from reference import allowed_mask, dropout_keep_mask, f32_scale, reference_attention

# The CPU kernels, also on a machine with a GPU (conftest.on_cpu; the GPU's decoding: test_gpu_decode.py).
pytestmark = pytest.mark.usefixtures("on_cpu")

MODES = {"off": ("off", "0"), "auto": ("auto", "0"), "on_1": ("on", "1"), "on_3": ("on", "3"),
         "on_7": ("on", "7")}
DECODE_MODES = [m for m in MODES if m != "off"]


@pytest.fixture
def mode(monkeypatch):
    def set_mode(name):
        monkeypatch.setenv("TF_FLASHATTN_DECODE", MODES[name][0])
        monkeypatch.setenv("TF_FLASHATTN_DECODE_SPLITS", MODES[name][1])
    return set_mode


def _rng(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def _window_tuple(window):
    if window is None:
        return (-1, -1)
    if isinstance(window, int):
        return (window, window)
    return tuple(-1 if w is None else w for w in window)


def _allowed(b, h, tq, tk, kw):
    return allowed_mask(b, h, tq, tk, mask=kw.get("mask"), is_causal=kw.get("is_causal", False),
                        causal_offset=kw.get("causal_offset", 0),
                        window=_window_tuple(kw.get("sliding_window")),
                        query_lengths=kw.get("query_lengths"), key_lengths=kw.get("key_lengths"),
                        query_mask=kw.get("query_mask"), key_mask=kw.get("key_mask"))


def _run_modes(mode, modes, q, k, v, **kw):
    """{mode: (out float64, lse)} of the op under each mode."""
    res = {}
    for m in modes:
        mode(m)
        out, lse = fa.dot_product_attention(q, k, v, return_lse=True, **kw)
        res[m] = (tf.cast(out, tf.float64).numpy(), lse.numpy())
    return res


def _check_lse(lse, ref_lse, tol):
    np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(ref_lse))
    fin = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[fin], ref_lse[fin], rtol=tol, atol=tol)


# ---- shapes: Tq 1..16, odd Tk, GQA ratios 1 / 4 / 8, head dims off the vector width ----------
SHAPES = {
    # name: (B, Tq, H, Hkv, Tk, D, Dv)
    "tq1_tk1": (2, 1, 4, 4, 1, 32, 32),
    "tq1_gqa4": (2, 1, 8, 2, 333, 64, 64),
    "tq1_mqa8_b1_long": (1, 1, 8, 1, 2049, 64, 64),  # B x Hkv = 1: automatic splits
    "tq2_gqa8_d40_dv24": (2, 2, 8, 1, 77, 40, 24),
    "tq3_mha": (3, 3, 4, 4, 129, 64, 64),
    "tq5_gqa4_d128": (1, 5, 8, 2, 1001, 128, 128),
    "tq8_gqa8_d16": (2, 8, 8, 1, 65, 16, 16),
    "tq13_gqa4_tk63": (2, 13, 8, 2, 63, 48, 48),
    "tq16_gqa4_dv72": (2, 16, 8, 2, 257, 64, 72),
    "tq16_mha_d256": (1, 16, 2, 2, 191, 256, 256),
    "tq64_gqa4_auto_limit": (1, 64, 4, 1, 150, 32, 32),  # the largest Tq auto sends to decode
    "tq100_forced_only": (1, 100, 4, 1, 150, 32, 32),  # auto: tiled; on: decode (up to 256)
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_shapes_against_reference_and_tiled(name, mode):
    b, tq, h, hkv, tk, d, dv = SHAPES[name]
    rng = _rng(name)
    q = tf.constant(rng.standard_normal((b, tq, h, d)), tf.float32)
    k = tf.constant(rng.standard_normal((b, tk, hkv, d)), tf.float32)
    v = tf.constant(rng.standard_normal((b, tk, hkv, dv)), tf.float32)
    scale = f32_scale(d)
    res = _run_modes(mode, list(MODES), q, k, v, scale=scale)
    ref, ref_lse = (x.numpy() for x in reference_attention(q, k, v, scale=scale))
    for m, (out, lse) in res.items():
        np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5, err_msg=m)
        _check_lse(lse, ref_lse, 2e-5)
        np.testing.assert_allclose(out, res["off"][0], rtol=1e-5, atol=1e-5, err_msg=m)


# ---- every mask kind, bias, soft-cap, dropout -------------------------------------------------
MB, MTQ, MH, MHKV, MTK, MD = 2, 4, 8, 2, 203, 32

MASK_KINDS = {
    "none": {},
    "causal_kv_cache": dict(is_causal=True, causal_offset=MTK - MTQ),
    "causal_keras": dict(is_causal=True),  # query i sees keys j <= i: a few keys only
    "causal_negative_offset": dict(is_causal=True, causal_offset=-2),  # rows 0, 1 see nothing
    "causal_mid_offset": dict(is_causal=True, causal_offset=100),
    "window_kv_cache": dict(sliding_window=(50, 0), causal_offset=MTK - MTQ),
    "window_both": dict(sliding_window=(30, 70), causal_offset=80),
    "window_int_causal": dict(sliding_window=9, is_causal=True, causal_offset=150),
    "window_left_only": dict(sliding_window=(120, None), causal_offset=MTK - MTQ),
    "lengths": dict(query_lengths=[3, 4], key_lengths=[203, 77]),
    "zero_lengths": dict(query_lengths=[0, 4], key_lengths=[203, 0]),
    "lengths_and_kv_cache": dict(key_lengths=[150, 64], is_causal=True, causal_offset=146),
    "padding_masks": "padding",
    "dense_full": "dense_full",
    "dense_b11k": "dense_b11k",
    "dense_rank2": "dense_rank2",
    "bias_full": "bias_full",
    "bias_broadcast": "bias_broadcast",
    "softcap": dict(attn_logits_soft_cap=3.0),
    "softcap_bias_window": "softcap_bias_window",
    "dropout": dict(dropout_rate=0.3, seed=[17, -3]),
    "dropout_causal_lengths": dict(dropout_rate=0.5, seed=[5, 6], is_causal=True,
                                   causal_offset=MTK - MTQ, key_lengths=[203, 120]),
}


def _mask_kwargs(kind, rng):
    spec = MASK_KINDS[kind]
    if isinstance(spec, dict):
        return dict(spec)
    if spec == "padding":
        return dict(query_mask=rng.random((MB, MTQ)) > 0.3, key_mask=rng.random((MB, MTK)) > 0.4)
    if spec == "dense_full":
        return dict(mask=rng.random((MB, MH, MTQ, MTK)) > 0.4)
    if spec == "dense_b11k":
        return dict(mask=rng.random((MB, 1, 1, MTK)) > 0.4)
    if spec == "dense_rank2":
        return dict(mask=rng.random((MTQ, MTK)) > 0.5)
    if spec == "bias_full":
        return dict(bias=rng.standard_normal((MB, MH, MTQ, MTK)))
    if spec == "bias_broadcast":
        return dict(bias=rng.standard_normal((1, MH, 1, MTK)))
    return dict(bias=rng.standard_normal((MB, MH, MTQ, MTK)), attn_logits_soft_cap=2.0,
                sliding_window=(40, 10), causal_offset=150)


@pytest.mark.parametrize("kind", list(MASK_KINDS))
def test_mask_kinds(kind, mode):
    rng = _rng(kind)
    q = tf.constant(rng.standard_normal((MB, MTQ, MH, MD)), tf.float32)
    k = tf.constant(rng.standard_normal((MB, MTK, MHKV, MD)), tf.float32)
    v = tf.constant(rng.standard_normal((MB, MTK, MHKV, MD)), tf.float32)
    kw = _mask_kwargs(kind, rng)
    bias = kw.pop("bias", None)
    softcap = kw.pop("attn_logits_soft_cap", None)
    allowed = _allowed(MB, MH, MTQ, MTK, kw)
    rate = kw.get("dropout_rate", 0.0)
    keep = dropout_keep_mask(kw["seed"], MB, MH, MTQ, MTK, rate) if rate else None
    scale = f32_scale(MD)
    tb = None if bias is None else tf.constant(bias, tf.float32)
    res = _run_modes(mode, ["off", "auto", "on_1", "on_7"], q, k, v, bias=tb, scale=scale,
                     attn_logits_soft_cap=softcap, **kw)
    ref, ref_lse = (x.numpy() for x in reference_attention(
        q, k, v, bias=tb, scale=scale, softcap=softcap, allowed=allowed, keep=keep,
        dropout_rate=rate))
    for m, (out, lse) in res.items():
        np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5, err_msg=m)
        _check_lse(lse, ref_lse, 2e-5)
        np.testing.assert_allclose(out, res["off"][0], rtol=1e-5, atol=1e-5, err_msg=m)
    rows_seen = allowed.any(axis=-1).transpose(0, 2, 1)  # [B, Tq, H]
    for m, (out, lse) in res.items():  # rows that see no key: exactly 0 and -inf
        assert np.all(out[~rows_seen] == 0), m
        assert np.all(np.isneginf(lse.transpose(0, 2, 1)[~rows_seen])), m


# ---- dtypes ------------------------------------------------------------------------------------
def _unfused_in(dtype, q, k, v, bias, scale, softcap, allowed):
    """The same attention unfused in `dtype` (every intermediate rounded to it): its distance to
    the float64 reference is the error bar for that precision."""
    group = q.shape[2] // k.shape[2]
    k, v = tf.repeat(k, group, axis=2), tf.repeat(v, group, axis=2)
    s = tf.einsum("bqhd,bkhd->bhqk", q, k) * tf.cast(scale, dtype)
    if softcap:
        s = tf.cast(softcap, dtype) * tf.tanh(s / tf.cast(softcap, dtype))
    if bias is not None:
        s = s + bias
    s = tf.where(tf.constant(allowed), s, tf.cast(-1e4 if dtype == tf.float16 else -1e30, dtype))
    p = tf.nn.softmax(s, axis=-1) * tf.cast(allowed.any(axis=-1, keepdims=True), dtype)
    return tf.einsum("bhqk,bkhd->bqhd", p, v)


DTYPE_CASES = {
    "gqa4_kv_cache": (2, 3, 8, 2, 333, 64, 64, dict(is_causal=True, causal_offset=330)),
    "gqa8_lengths_bias": (2, 1, 8, 1, 129, 72, 64, dict(key_lengths=[129, 50], bias=True)),
    "mha_tq16_softcap_window": (1, 16, 4, 4, 200, 32, 32,
                                dict(attn_logits_soft_cap=5.0, sliding_window=(60, 3),
                                     causal_offset=184)),
}
FLOOR = {tf.float16: 1e-3, tf.bfloat16: 8e-3, tf.float32: 2e-6, tf.float64: 1e-12}


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32, tf.float64],
                         ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(DTYPE_CASES))
def test_dtypes(name, dtype, mode):
    b, tq, h, hkv, tk, d, dv, kw = DTYPE_CASES[name]
    kw = dict(kw)
    rng = _rng(name)
    # Inputs rounded to dtype once; the references start from the same rounded values.
    q, k, v = (tf.cast(tf.constant(rng.standard_normal(s)), dtype)
               for s in ((b, tq, h, d), (b, tk, hkv, d), (b, tk, hkv, dv)))
    bias = tf.cast(tf.constant(rng.standard_normal((b, h, tq, tk))), dtype) if kw.pop(
        "bias", False) else None
    softcap = kw.pop("attn_logits_soft_cap", None)
    scale = f32_scale(d)
    allowed = _allowed(b, h, tq, tk, kw)
    res = _run_modes(mode, ["off", "on_1", "on_3"], q, k, v, bias=bias, scale=scale,
                     attn_logits_soft_cap=softcap, **kw)
    ref, ref_lse = (x.numpy() for x in reference_attention(
        q, k, v, bias=bias, scale=scale, softcap=softcap, allowed=allowed))
    if dtype == tf.float64:
        bar = 0.0
    else:
        lp = tf.cast(_unfused_in(dtype, q, k, v, bias, scale, softcap, allowed), tf.float64)
        bar = 2 * float(np.abs(lp.numpy() - ref).max())
        assert bar > 0
    floor = FLOOR[dtype] * max(1.0, float(np.abs(ref).max()))
    for m, (out, lse) in res.items():
        assert out.dtype == np.float64 and np.all(np.isfinite(out)), m
        err = float(np.abs(out - ref).max())
        assert err <= bar + floor, (m, err, bar, floor)
        _check_lse(lse, ref_lse, 2e-5)  # the log-sum-exp is float32 for every dtype
        err_off = float(np.abs(out - res["off"][0]).max())
        assert err_off <= bar + 2 * floor, (m, err_off)


# ---- fully masked rows, with empty splits ---------------------------------------------------
@pytest.mark.parametrize("m", ["auto", "on_1", "on_3", "on_7"])
def test_fully_masked_rows_give_zero_and_neg_inf(m, mode):
    rng = _rng("empty" + m)
    b, tq, h, hkv, tk, d = 4, 3, 8, 2, 500, 32
    q = tf.constant(rng.standard_normal((b, tq, h, d)), tf.float32)
    k = tf.constant(rng.standard_normal((b, tk, hkv, d)), tf.float32)
    key_mask = np.ones((b, tk), bool)
    key_mask[2] = False  # batch 2: every key masked
    key_mask[3, :450] = False  # batch 3: only the last 50 keys (the last split's) visible
    mode(m)
    out, lse = fa.dot_product_attention(q, k, k, key_lengths=[500, 0, 500, 500],
                                        query_lengths=[3, 3, 3, 1], key_mask=key_mask,
                                        return_lse=True)
    out, lse = out.numpy(), lse.numpy()
    empty = np.zeros((b, tq), bool)
    empty[1] = empty[2] = True
    empty[3, 1:] = True
    assert np.all(out[empty] == 0) and np.all(np.isneginf(lse.transpose(0, 2, 1)[empty]))
    assert np.all(np.isfinite(lse.transpose(0, 2, 1)[~empty]))
    allowed = allowed_mask(b, h, tq, tk, key_lengths=[500, 0, 500, 500],
                           query_lengths=[3, 3, 3, 1], key_mask=key_mask)
    ref, ref_lse = (x.numpy() for x in reference_attention(q, k, k, allowed=allowed))
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5)
    _check_lse(lse, ref_lse, 2e-5)


# ---- gradient of a forward that took the decode path ---------------------------------------
@pytest.mark.parametrize("kw", [dict(is_causal=True, causal_offset=95),
                                dict(bias=True, key_lengths=[99, 40], attn_logits_soft_cap=4.0),
                                dict(dropout_rate=0.2, seed=[8, 9])], ids=["kv_cache", "bias",
                                                                           "dropout"])
def test_gradient_after_decode_forward(kw, mode):
    kw = dict(kw)
    rng = _rng(str(sorted(kw)))
    b, tq, h, hkv, tk, d = 2, 4, 8, 2, 99, 32
    q = tf.constant(rng.standard_normal((b, tq, h, d)), tf.float32)
    k = tf.constant(rng.standard_normal((b, tk, hkv, d)), tf.float32)
    v = tf.constant(rng.standard_normal((b, tk, hkv, d)), tf.float32)
    bias = tf.constant(rng.standard_normal((b, h, tq, tk)), tf.float32) if kw.pop(
        "bias", False) else None
    softcap = kw.get("attn_logits_soft_cap")
    w = tf.constant(rng.standard_normal((b, tq, h, d)), tf.float32)
    wl = tf.constant(rng.standard_normal((b, h, tq)), tf.float32)
    watched = [q, k, v] + ([bias] if bias is not None else [])

    def grads(fn):
        with tf.GradientTape() as tape:
            tape.watch(watched)
            out, lse = fn()
            loss = tf.reduce_sum(tf.cast(out, tf.float64) * tf.cast(w, tf.float64))
            loss += tf.reduce_sum(tf.cast(lse, tf.float64) * tf.cast(wl, tf.float64))
        return [g.numpy() for g in tape.gradient(loss, watched)]

    ours = {}
    for m in ("off", "on_7"):
        mode(m)
        ours[m] = grads(lambda: fa.dot_product_attention(q, k, v, bias=bias, return_lse=True,
                                                         **kw))
    allowed = _allowed(b, h, tq, tk, kw)
    rate = kw.get("dropout_rate", 0.0)
    keep = dropout_keep_mask(kw["seed"], b, h, tq, tk, rate) if rate else None
    ref = grads(lambda: reference_attention(q, k, v, bias=bias, softcap=softcap, allowed=allowed,
                                            keep=keep, dropout_rate=rate, scale=f32_scale(d)))
    for g_dec, g_off, g_ref in zip(ours["on_7"], ours["off"], ref):
        np.testing.assert_allclose(g_dec, g_ref, rtol=2e-4, atol=2e-4)
        np.testing.assert_allclose(g_dec, g_off, rtol=2e-5, atol=2e-5)


# ---- the switch, determinism, XLA --------------------------------------------------------------
def test_decode_is_a_different_computation_and_deterministic(mode):
    """The environment switch reaches the kernel (decode and tiled round differently), and each
    setting is bitwise repeatable (fixed split merge order, no atomics)."""
    rng = _rng("switch")
    q = tf.constant(rng.standard_normal((1, 2, 8, 64)), tf.float32)
    k = tf.constant(rng.standard_normal((1, 3000, 2, 64)), tf.float32)
    v = tf.constant(rng.standard_normal((1, 3000, 2, 64)), tf.float32)
    outs = {}
    for m in ("off", "on_1", "on_7"):
        mode(m)
        first = fa.dot_product_attention(q, k, v).numpy()
        for _ in range(2):
            np.testing.assert_array_equal(fa.dot_product_attention(q, k, v).numpy(), first)
        outs[m] = first
    assert not np.array_equal(outs["off"], outs["on_1"])
    assert not np.array_equal(outs["on_1"], outs["on_7"])  # the 7-way merge rounds differently
    np.testing.assert_allclose(outs["on_7"], outs["off"], rtol=1e-5, atol=1e-5)


def test_decode_under_xla_matches_eager(mode):
    """jit_compile runs the same kernel through the XLA custom call: the same plan, so the same
    bits."""
    rng = _rng("xla")
    q = tf.constant(rng.standard_normal((2, 3, 8, 64)), tf.float32)
    k = tf.constant(rng.standard_normal((2, 700, 2, 64)), tf.float32)
    f = tf.function(lambda q, k: fa.dot_product_attention(
        q, k, k, is_causal=True, causal_offset=697, key_lengths=[700, 300]), jit_compile=True)
    for m in ("on_3", "off"):
        mode(m)
        eager = fa.dot_product_attention(q, k, k, is_causal=True, causal_offset=697,
                                         key_lengths=[700, 300]).numpy()
        np.testing.assert_array_equal(f(q, k).numpy(), eager)


def test_bad_settings_are_refused(monkeypatch):
    q = tf.zeros([1, 1, 2, 8])
    monkeypatch.setenv("TF_FLASHATTN_DECODE", "sometimes")
    with pytest.raises(tf.errors.InvalidArgumentError, match="TF_FLASHATTN_DECODE"):
        fa.dot_product_attention(q, q, q)
    monkeypatch.setenv("TF_FLASHATTN_DECODE", "on")
    monkeypatch.setenv("TF_FLASHATTN_DECODE_SPLITS", "-2")
    with pytest.raises(tf.errors.InvalidArgumentError, match="TF_FLASHATTN_DECODE_SPLITS"):
        fa.dot_product_attention(q, q, q)


# ---- the AVX2 build (flash_cpu.cc is compiled once per instruction set) -----------------------
def _has_avx512():
    """Whether this processor has AVX-512 F and VL (the CPU dispatch's test, flash_cpu_dispatch.cc): without them
    "auto" runs the AVX2 build too, and the two runs are the same computation."""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:
        return True  # not Linux: keep the check
    return "avx512f" in flags and "avx512vl" in flags


@pytest.mark.parametrize("name", ["tq2_gqa8_d40_dv24", "tq16_gqa4_dv72", "tq1_mqa8_b1_long"])
def test_avx2_build_matches(name, mode, monkeypatch):
    """TF_FLASHATTN_CPU_ISA=avx2 runs the AVX2 build (8-lane tile transposes, folds and
    conversions) where the processor would pick AVX-512: same reference, same tolerance (on a processor without
    AVX-512 both runs are the AVX2 build, and the check that they differ is left out)."""
    b, tq, h, hkv, tk, d, dv = SHAPES[name]
    rng = _rng("avx2" + name)
    for dtype, tol in ((tf.float32, 2e-5), (tf.bfloat16, 3e-2), (tf.float16, 4e-3)):
        q, k, v = (tf.cast(tf.constant(rng.standard_normal(s)), dtype)
                   for s in ((b, tq, h, d), (b, tk, hkv, d), (b, tk, hkv, dv)))
        key_lengths = [tk - 5] + [tk] * (b - 1)
        ref, ref_lse = (x.numpy() for x in reference_attention(
            q, k, v, scale=f32_scale(d), allowed=allowed_mask(b, h, tq, tk, key_lengths=key_lengths)))
        outs = {}
        for isa in ("avx2", "auto"):
            monkeypatch.setenv("TF_FLASHATTN_CPU_ISA", isa)
            outs[isa] = _run_modes(mode, ["on_1", "on_3"], q, k, v, scale=f32_scale(d),
                                   key_lengths=key_lengths)
        for isa, res in outs.items():
            for m, (out, lse) in res.items():
                np.testing.assert_allclose(out, ref, rtol=tol, atol=tol, err_msg=(isa, m))
                _check_lse(lse, ref_lse, 2e-5)
                np.testing.assert_allclose(out, outs["auto"][m][0], rtol=tol, atol=tol)
        if dtype == tf.float32 and _has_avx512():  # the switch took effect: 8- and 16-lane sums round differently
            assert any(not (np.array_equal(outs["avx2"][m][0], outs["auto"][m][0]) and
                            np.array_equal(outs["avx2"][m][1], outs["auto"][m][1]))
                       for m in outs["auto"])
