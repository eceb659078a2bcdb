"""GPU tests of the op (skipped without a CUDA GPU): numerics against a float64 reference, the
low-precision error judged against the same-precision unfused TensorFlow attention, every
feature, dropout masks equal to the CPU kernel's, determinism, unwritten-output poisoning.

float32 runs twice: "tf32" with TensorFlow's TF32 setting on (its default; the op then uses TF32
tensor cores, and the unfused baseline's matmuls use TF32 too) and "float32" with
tf.config.experimental.enable_tensor_float_32_execution(False) (full float32 accuracy).

On the lent H200: `bash benchmarks/gpu_run.sh tests` runs this file (see its header)."""
import contextlib
import os
import subprocess
import sys
import textwrap
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_flashattn as fa
from tf_flashattn import _ops
from reference import allowed_mask, dropout_keep_mask, f32_scale, rand, reference_attention

pytestmark = pytest.mark.gpu
if not tf.config.list_physical_devices("GPU"):
    pytest.skip("no GPU", allow_module_level=True)

TF32 = "tf32"  # float32 with TF32 on (a dtype parameter of the tests below)
# TF32: TensorFlow's unfused float32 baseline does not run every product on TF32 (e.g. k = 1), so
# the floor carries the 10-bit-mantissa error (gradients get 4x the floor).
FLOOR = {tf.float16: 2e-3, tf.bfloat16: 1.5e-2, tf.float32: 1e-5, TF32: 4e-3}


def dtype_id(d):
    return d if d == TF32 else d.name


@contextlib.contextmanager
def precision(dtype):
    """Yields the tensor dtype of a test dtype; float32 runs with TF32 off, TF32 with it on
    (restored after)."""
    if dtype not in (tf.float32, TF32):
        yield dtype
        return
    prev = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(dtype == TF32)
    try:
        yield tf.float32
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(prev)


def on_hopper():
    """Whether the first GPU is compute capability 9.0 (H100 / H200: the Hopper kernels' target)."""
    gpus = tf.config.list_physical_devices("GPU")
    return bool(gpus) and tf.config.experimental.get_device_details(gpus[0]).get("compute_capability") == (9, 0)


# The switches that keep a Hopper kernel family off (README, "For maintainers"), per family of
# _ops.kernel_launches().
_HOPPER_SWITCHES = {"sm90_fwd": ("TF_FLASHATTN_SM90",), "sm90_bwd": ("TF_FLASHATTN_SM90", "TF_FLASHATTN_SM90_BWD"),
                    "sm90_tf32_fwd": ("TF_FLASHATTN_SM90", "TF_FLASHATTN_SM90_TF32"),
                    "sm90_tf32_bwd_d64": ("TF_FLASHATTN_SM90", "TF_FLASHATTN_SM90_TF32_BWD"),
                    "sm90_tf32_bwd_d128": ("TF_FLASHATTN_SM90", "TF_FLASHATTN_SM90_TF32_BWD"),
                    "sm90_tf32_bwd_d256": ("TF_FLASHATTN_SM90", "TF_FLASHATTN_SM90_TF32_BWD",
                                           "TF_FLASHATTN_SM90_TF32_BWD_D256")}


@contextlib.contextmanager
def expect_launches(*names, absent=()):
    """On an H100 / H200, the block must launch each named Hopper kernel family (_ops.kernel_launches' keys) at
    least once: the test then exercised the sm_90 dispatch it is about; and must launch no family named in `absent`
    (a switch that keeps a family off), nor a family of `names` whose switch is set to 0 in the environment (that
    switch must keep it off: test_sm80_kernels_on_hopper). Nothing is checked on other GPUs."""
    def off(n):
        return any(os.environ.get(s) == "0" for s in _HOPPER_SWITCHES[n])
    wanted = [n for n in names if not off(n)]
    absent = tuple(absent) + tuple(n for n in names if off(n))
    before = _ops.kernel_launches() if (wanted or absent) and on_hopper() else None
    yield
    if before is not None:
        after = _ops.kernel_launches()
        missing = [n for n in wanted if after[n] <= before[n]]
        assert not missing, f"Hopper kernels not launched: {missing} (counts {after})"
        launched = [n for n in absent if after[n] > before[n]]
        assert not launched, f"Hopper kernels launched though switched off: {launched} (counts {after})"


def tf32_hopper(d, dv):
    """The Hopper kernel families a float32 (TF32) call of head dims d, dv runs: the TF32 forward and the TF32
    backward of the head dim it is padded up to (64 or 128)."""
    return "sm90_tf32_fwd", "sm90_tf32_bwd_d64" if max(d, dv) <= 64 else "sm90_tf32_bwd_d128"


def poison():
    """Fills then frees a large GPU buffer with NaN, so unwritten outputs show as NaN."""
    with tf.device("/GPU:0"):
        x = tf.fill([64 << 20], float("nan"))
        float(x[0])
        del x


def grads_of(fn, args, w):
    with tf.GradientTape() as tape:
        tape.watch(args)
        out = fn(*args)
        loss = tf.reduce_sum(tf.cast(out, tf.float64) * w)
    return out, tape.gradient(loss, args)


def max_err(a, b):
    return float(np.abs(tf.cast(a, tf.float64).numpy() - tf.cast(b, tf.float64).numpy()).max())


def compare(q, k, v, dtype, allowed=None, bias=None, softcap=None, keep=None, kw=None,
            keras_ok=True, with_grads=False):
    """ours(GPU) vs float64 reference, and vs the same-precision unfused baseline (for TF32: the
    unfused float32 attention with TF32 matmuls). Returns our output, and with_grads our gradients
    too (dq, dk, dv[, dbias])."""
    with precision(dtype) as tdtype:
        out, g = _compare(q, k, v, dtype, tdtype, allowed, bias, softcap, keep, kw, keras_ok)
    return (out, g) if with_grads else out


def _compare(q, k, v, fdtype, dtype, allowed, bias, softcap, keep, kw, keras_ok):
    kw = dict(kw or {})
    scale = f32_scale(q.shape[-1])
    rng = np.random.default_rng(0)
    qd, kd, vd = (tf.cast(t, dtype) for t in (q, k, v))
    bd = None if bias is None else tf.cast(bias, dtype)
    out_shape = (q.shape[0], q.shape[1], q.shape[2], v.shape[3])
    w = tf.constant(rng.standard_normal(out_shape))
    args = [qd, kd, vd] + ([bd] if bd is not None else [])

    def ours(*a):
        return fa.dot_product_attention(a[0], a[1], a[2], bias=a[3] if len(a) > 3 else None,
                                        scale=scale, attn_logits_soft_cap=softcap, **kw)

    def ref(*a):
        return reference_attention(a[0], a[1], a[2], bias=a[3] if len(a) > 3 else None,
                                   scale=scale, softcap=softcap, allowed=allowed, keep=keep,
                                   dropout_rate=kw.get("dropout_rate", 0.0))[0]

    poison()
    with tf.device("/GPU:0"):
        out, g = grads_of(ours, args, w)
    with tf.device("/CPU:0"):
        r_out, r_g = grads_of(ref, [tf.cast(t, tf.float64) for t in args], w)
    assert np.all(np.isfinite(tf.cast(out, tf.float32).numpy())), "unwritten or NaN output"
    e_out = max_err(out, r_out)
    e_g = [max_err(a, b) for a, b in zip(g, r_g)]
    if keras_ok and softcap is None and keep is None:
        mask = None if allowed is None else tf.constant(allowed)

        def base(*a):
            return keras.ops.dot_product_attention(a[0], a[1], a[2],
                                                   bias=a[3] if len(a) > 3 else None,
                                                   mask=mask, scale=scale)
        with tf.device("/GPU:0"):
            b_out, b_g = grads_of(base, args, w)
        if allowed is not None:  # Keras averages fully masked rows; compare visible rows only
            rows = np.any(allowed, axis=-1).transpose(0, 2, 1)[..., None]  # [B, Tq, H, 1]
            b_out = tf.where(rows, tf.cast(b_out, tf.float64), tf.cast(r_out, tf.float64))
        e_base = max_err(b_out, r_out)
        e_base_g = [max_err(a, b) for a, b in zip(b_g, r_g)]
    else:  # no unfused baseline for this feature: a fixed per-dtype budget
        e_base, e_base_g = FLOOR[fdtype] * 4, [FLOOR[fdtype] * 8] * len(e_g)
    # The floor scales with the magnitude of the reference (float32 sums over thousands of rows
    # differ from cuBLAS' summation order by a few ulps of the result, not of 1).
    def floor(ref):
        return FLOOR[fdtype] * max(1.0, float(np.abs(ref.numpy()).max()))

    assert e_out <= 2 * e_base + floor(r_out), (e_out, e_base)
    for eg, eb, rg in zip(e_g, e_base_g, r_g):
        assert eg <= 3 * eb + 4 * floor(rg), (e_g, e_base_g)
    return out, g


DTYPES = [tf.float16, tf.bfloat16, tf.float32, TF32]
SIZES = [1, 17, 113, 203, 1023, 1024, 4096]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("tq,tk", [(a, b) for a in SIZES for b in SIZES
                                   if a * b <= 1024 * 4096])
def test_sizes(tq, tk, dtype):
    rng = np.random.default_rng(tq + 7 * tk)
    q, k, v = rand(rng, 1, tq, 2, 64), rand(rng, 1, tk, 2, 64), rand(rng, 1, tk, 2, 64)
    compare(q, k, v, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("d", [32, 59, 64, 80, 111, 128, 192, 256])
def test_head_dims(d, dtype):
    rng = np.random.default_rng(d)
    q, k, v = rand(rng, 2, 203, 4, d), rand(rng, 2, 113, 2, d), rand(rng, 2, 113, 2, d)
    compare(q, k, v, dtype, allowed=allowed_mask(2, 4, 203, 113, is_causal=True),
            kw=dict(is_causal=True))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_value_dim_differs(dtype):
    rng = np.random.default_rng(1)
    q, k, v = rand(rng, 2, 100, 4, 64), rand(rng, 2, 130, 4, 64), rand(rng, 2, 130, 4, 40)
    compare(q, k, v, dtype)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, TF32], ids=dtype_id)
@pytest.mark.parametrize("d,dv", [(80, 80), (96, 64), (40, 72), (192, 128), (160, 160)])
@pytest.mark.parametrize("feature", ["masks", "dropout", "bias_softcap"])
def test_padded_head_dims_with_features(feature, d, dv, dtype):
    """Head dims without a kernel of their own, and Dv != D: on a Hopper GPU the 16-bit sm90 kernels of
    head_dim_bucket(max(D, Dv)) run them, padded up (flash_fwd_sm90.cu, flash_bwd_sm90.cu; sm80's kernels
    elsewhere), and the TF32 forward and backwards up to 128 with the masks (flash_fwd_sm90_tf32.cu,
    flash_bwd_sm90_tf32.cu, flash_bwd_sm90_tf32_d128.cu); with GQA, causal with an offset, lengths, a window,
    dropout, bias with its gradient and soft-cap, against the float64 reference."""
    rng = np.random.default_rng(d + 3 * dv + len(feature))
    B, TQ_, TK_, H_ = 2, 113, 203, 4
    q, k, v = rand(rng, B, TQ_, H_, d), rand(rng, B, TK_, 2, d), rand(rng, B, TK_, 2, dv)
    if feature == "masks":
        kw = dict(is_causal=True, causal_offset=60, key_lengths=[203, 150], sliding_window=(70, None))
        allowed = allowed_mask(B, H_, TQ_, TK_, is_causal=True, causal_offset=60, window=(70, -1),
                               key_lengths=[203, 150])
        compare(q, k, v, dtype, allowed=allowed, kw=kw)
    elif feature == "dropout":
        seed, rate = [11, 4], 0.1
        kw = dict(dropout_rate=rate, seed=seed, is_causal=True, causal_offset=TK_ - TQ_, key_lengths=[203, 170])
        allowed = allowed_mask(B, H_, TQ_, TK_, is_causal=True, causal_offset=TK_ - TQ_, key_lengths=[203, 170])
        compare(q, k, v, dtype, allowed=allowed, keep=dropout_keep_mask(seed, B, H_, TQ_, TK_, rate), kw=kw)
    else:
        compare(q, k, v, dtype, bias=rand(rng, 1, H_, TQ_, TK_), softcap=20.0)


@pytest.mark.parametrize("dtype", [tf.bfloat16, TF32], ids=dtype_id)
@pytest.mark.parametrize("ratio", [2, 4, 8])
def test_gqa(ratio, dtype):
    rng = np.random.default_rng(ratio)
    q, k, v = rand(rng, 2, 150, 2 * ratio, 64), rand(rng, 2, 170, 2, 64), rand(rng, 2, 170, 2, 64)
    compare(q, k, v, dtype, allowed=allowed_mask(2, 2 * ratio, 150, 170, is_causal=True),
            kw=dict(is_causal=True))


@pytest.mark.parametrize("dtype", [tf.float32, TF32], ids=dtype_id)
@pytest.mark.parametrize("d,dv", [(128, 128), (256, 200), (59, 111)])
def test_float32_gqa_dropout_shapes(d, dv, dtype):
    """Odd sizes with GQA, lengths, window, bias and dropout together at several head dims."""
    rng = np.random.default_rng(d + dv)
    q, k, v = rand(rng, 2, 113, 4, d), rand(rng, 2, 203, 2, d), rand(rng, 2, 203, 2, dv)
    seed, rate = [5, 9], 0.1
    keep = dropout_keep_mask(seed, 2, 4, 113, 203, rate)
    kw = dict(dropout_rate=rate, seed=seed, is_causal=True, causal_offset=90,
              sliding_window=(64, None), key_lengths=[203, 150])
    allowed = allowed_mask(2, 4, 113, 203, is_causal=True, causal_offset=90, window=(64, -1),
                           key_lengths=[203, 150])
    compare(q, k, v, dtype, allowed=allowed, keep=keep, bias=rand(rng, 1, 4, 113, 203), kw=kw)


def build_switch(name, default):
    """The value the op library was built with for kernel switch `name`: build_ops.py's TF_FLASHATTN_CUDA_DEFINES as
    _build_info.CUDA_DEFINES records it (a bare name is 1), else `default`, the source's (also for a library built
    before that record)."""
    from tf_flashattn import _build_info
    for d in getattr(_build_info, "CUDA_DEFINES", []):
        key, _, value = d.partition("=")
        if key == name:
            return int(value or 1)
    return default


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_tf32_tile_edges(d, causal):
    """TF32 without the general features at sizes that cross several tiles of the TF32 kernels
    this GPU runs, with ragged last tiles, and GQA: on an H100 / H200 the forward at every head dim
    runs the Hopper TF32 forward (at 256 its 32-key tiles), the backward at 64 and 128 the Hopper TF32
    backwards (the head-dim-128 one: 64-key tiles, 32-query units, ragged at both ends here) and at 256
    the head-dim-256 Hopper TF32 backward unless switched off (test_tf32_d256_backward checks its launches)."""
    rng = np.random.default_rng(d + causal)
    tq, tk = 300, 517
    q, k, v = rand(rng, 2, tq, 4, d), rand(rng, 2, tk, 2, d), rand(rng, 2, tk, 2, d)
    kw = dict(is_causal=True, causal_offset=tk - tq) if causal else {}
    allowed = (allowed_mask(2, 4, tq, tk, is_causal=True, causal_offset=tk - tq) if causal else None)
    d256 = build_switch("FA_SM90_TF32_D256", 1) != 0  # (0: sm80's forward at head dim 256)
    with expect_launches(*((("sm90_tf32_fwd",) if d256 else ()) if d == 256 else tf32_hopper(d, d))):
        compare(q, k, v, TF32, allowed=allowed, kw=kw)




D256_BWD_SWITCH = "TF_FLASHATTN_SM90_TF32_BWD_D256"


@pytest.mark.parametrize("feature", ["none", "causal_gqa", "lengths_window", "key_mask", "one_unit"])
def test_tf32_d256_backward(feature):
    """Gradients at head dim 256 in float32 with TF32 (D == Dv == 256), odd sizes, against float64 on every GPU. On an
    H100 / H200 the head-dim-256 Hopper TF32 backward (flash_bwd_sm90_tf32_d256.cu, on by default) must run these, and
    must not where TF_FLASHATTN_SM90_TF32_BWD_D256=0 (test_tf32_d256_backward_switch_off) or the library was built
    with FA_SM90_TF32_BWD_D256=0 (sm80's TF32 backward takes them then)."""
    rng = np.random.default_rng(7 + len(feature))
    b, tq, tk, h, hkv = 2, 203, 333, 4, 4
    kw, allowed = {}, None
    if feature == "causal_gqa":
        hkv = 2
        kw = dict(is_causal=True, causal_offset=tk - tq)
        allowed = allowed_mask(b, h, tq, tk, is_causal=True, causal_offset=tk - tq)
    elif feature == "lengths_window":
        kw = dict(sliding_window=(70, 20), key_lengths=[333, 120], query_lengths=[150, 203])
        allowed = allowed_mask(b, h, tq, tk, window=(70, 20), key_lengths=[333, 120], query_lengths=[150, 203])
    elif feature == "key_mask":
        key_mask = rng.random((b, tk)) > 0.3
        kw = dict(key_mask=key_mask)
        allowed = np.broadcast_to(key_mask[:, None, None, :], (b, h, tq, tk))
    elif feature == "one_unit":
        tq, tk = 20, 100
    q, k, v = rand(rng, b, tq, h, 256), rand(rng, b, tk, hkv, 256), rand(rng, b, tk, hkv, 256)
    # The library's rule (d256_mode): "0" off, "1" .. "4" on with variant 0 .. 3, else the build's
    # FA_SM90_TF32_BWD_D256 (source default 1: on).
    switch = os.environ.get(D256_BWD_SWITCH)
    on = switch in ("1", "2", "3", "4") or (switch != "0" and build_switch("FA_SM90_TF32_BWD_D256", 1) != 0)
    with expect_launches(*(("sm90_tf32_bwd_d256",) if on else ()), absent=() if on else ("sm90_tf32_bwd_d256",)):
        compare(q, k, v, TF32, allowed=allowed, kw=kw)


def test_tf32_d256_backward_switch_off():
    """test_tf32_d256_backward in a process with TF_FLASHATTN_SM90_TF32_BWD_D256=0 (read once per process): on an
    H100 / H200 no case may run the head-dim-256 Hopper TF32 backward, and every case must match float64 on sm80's."""
    if not on_hopper():
        pytest.skip("the switch concerns a Hopper TF32 backward (compute capability 9.0)")
    pytest_with_env({D256_BWD_SWITCH: "0"}, [f"{__file__}::test_tf32_d256_backward"], passed=5, timeout=600)


@pytest.mark.parametrize("mode", ["1", "2", "3", "4"])
def test_tf32_d256_backward_variants(mode):
    """test_tf32_d256_backward in a process with TF_FLASHATTN_SM90_TF32_BWD_D256=mode: the kernel's variant mode - 1
    (flash_bwd_sm90_tf32_d256.cu's kVariants: the first form; the slot released early; that with float4 dQ adds; that
    with the d panels pipelined, the default) must run every case on an H100 / H200 and match float64."""
    if not on_hopper():
        pytest.skip("the variants are those of a Hopper TF32 backward (compute capability 9.0)")
    pytest_with_env({D256_BWD_SWITCH: mode}, [f"{__file__}::test_tf32_d256_backward"], passed=5, timeout=600)


@pytest.mark.parametrize("feature", ["key_mask", "window_lengths", "softcap", "dropout", "dense_bias"])
def test_tf32_d256_features(feature):
    """TF32 at head dim 256 with an index mask or an option, odd sizes with GQA: right against float64 on every GPU.
    On an H100 / H200 the Hopper TF32 forward runs these (FA_SM90_TF32_D256_FEAT, on by default); in a library
    built with FA_SM90_TF32_D256_FEAT=0 or FA_SM90_TF32_D256=0 (TF_FLASHATTN_CUDA_DEFINES) sm80's TF32 kernel does,
    and the Hopper forward must not launch (it would have run a call it was built not to take)."""
    rng = np.random.default_rng(256 + len(feature))
    b, tq, tk, h, hkv = 2, 200, 333, 4, 2
    q, k, v = rand(rng, b, tq, h, 256), rand(rng, b, tk, hkv, 256), rand(rng, b, tk, hkv, 256)
    kw, allowed, keep, softcap, bias = {}, None, None, None, None
    if feature == "key_mask":
        key_mask = rng.random((b, tk)) > 0.2
        kw = dict(key_mask=key_mask)
        allowed = np.broadcast_to(key_mask[:, None, None, :], (b, h, tq, tk))
    elif feature == "window_lengths":
        kw = dict(is_causal=True, causal_offset=tk - tq, sliding_window=(60, None), key_lengths=[333, 150])
        allowed = allowed_mask(b, h, tq, tk, is_causal=True, causal_offset=tk - tq, window=(60, -1),
                               key_lengths=[333, 150])
    elif feature == "softcap":
        softcap = 20.0
    elif feature == "dropout":
        kw = dict(dropout_rate=0.1, seed=[3, 4])
        keep = dropout_keep_mask([3, 4], b, h, tq, tk, 0.1)
    else:
        mask = rng.random((b, 1, tq, tk)) > 0.3
        kw = dict(mask=mask)
        allowed = np.broadcast_to(mask, (b, h, tq, tk))
        bias = rand(rng, 1, h, tq, tk)
    feat = build_switch("FA_SM90_TF32_D256", 1) != 0 and build_switch("FA_SM90_TF32_D256_FEAT", 1) != 0
    with expect_launches(*(("sm90_tf32_fwd",) if feat else ()), absent=() if feat else ("sm90_tf32_fwd",)):
        compare(q, k, v, TF32, allowed=allowed, bias=bias, softcap=softcap, keep=keep, kw=kw)


B, TQ, TK, H = 2, 203, 333, 4


FEATURES = {
    "causal_offset": dict(is_causal=True, causal_offset=TK - TQ),
    "window": dict(sliding_window=(40, 9)),
    "lengths": dict(query_lengths=[150, 203], key_lengths=[333, 70]),
    "padding_masks": "padding",
    "dense_mask": "dense",
    "all_masks": "all",
}


def _feature(spec, rng):
    """The call's keywords for a FEATURES value (a dict of them, or "padding", "dense", "all") and the allowed mask."""
    kw = dict(spec) if isinstance(spec, dict) else {}
    if spec in ("padding", "all"):
        kw.update(query_mask=rng.random((B, TQ)) > 0.1, key_mask=rng.random((B, TK)) > 0.2)
    if spec in ("dense", "all"):
        kw["mask"] = rng.random((B, 1, TQ, TK)) > 0.3
    if spec == "all":
        kw.update(is_causal=True, causal_offset=TK - TQ, sliding_window=(100, None),
                  key_lengths=[300, 333])
    window = kw.get("sliding_window") or (-1, -1)
    allowed = allowed_mask(B, H, TQ, TK, mask=kw.get("mask"), is_causal=kw.get("is_causal", False),
                           causal_offset=kw.get("causal_offset", 0),
                           window=tuple(-1 if x is None else x for x in window),
                           query_lengths=kw.get("query_lengths"),
                           key_lengths=kw.get("key_lengths"), query_mask=kw.get("query_mask"),
                           key_mask=kw.get("key_mask"))
    return kw, allowed


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", list(FEATURES))
def test_features(name, dtype):
    rng = np.random.default_rng(len(name))
    q, k, v = rand(rng, B, TQ, H, 64), rand(rng, B, TK, 2, 64), rand(rng, B, TK, 2, 64)
    kw, allowed = _feature(FEATURES[name], rng)
    # On an H100 / H200 float16 / bfloat16 run the Hopper forward and backward with every one of these masks, and
    # TF32 the Hopper TF32 forward and head-dim-64 backward.
    hopper = (("sm90_fwd", "sm90_bwd") if dtype in (tf.float16, tf.bfloat16) else
              tf32_hopper(64, 64) if dtype == TF32 else ())
    with expect_launches(*hopper):
        out = compare(q, k, v, dtype, allowed=allowed, kw=kw)
    dead = ~np.any(allowed, axis=-1).transpose(0, 2, 1)  # [B, Tq, H]
    assert np.all(tf.cast(out, tf.float32).numpy()[dead] == 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("masks", ["key", "query", "both"])
def test_padding_masks_with_causal_on_the_index_path(masks, d, dtype):
    """[B, T] validity masks are handled by the index-masked (fast) kernels, per key / per row:
    with causal limits and lengths, every head dim bucket and dtype, forward and gradients
    against the float64 reference."""
    rng = np.random.default_rng(d + len(masks))
    q, k, v = rand(rng, B, TQ, H, d), rand(rng, B, TK, 2, d), rand(rng, B, TK, 2, d)
    kw = dict(is_causal=True, causal_offset=TK - TQ, key_lengths=[333, 290])
    if masks in ("key", "both"):
        kw["key_mask"] = rng.random((B, TK)) > 0.3
    if masks in ("query", "both"):
        kw["query_mask"] = rng.random((B, TQ)) > 0.2
    allowed = allowed_mask(B, H, TQ, TK, is_causal=True, causal_offset=TK - TQ,
                           key_lengths=kw["key_lengths"], query_mask=kw.get("query_mask"),
                           key_mask=kw.get("key_mask"))
    compare(q, k, v, dtype, allowed=allowed, kw=kw)


@pytest.mark.parametrize("dtype", [tf.bfloat16, TF32], ids=dtype_id)
@pytest.mark.parametrize("d", [64, 128, 256])
def test_all_true_key_mask_is_bitwise_full_key_lengths(d, dtype):
    """An all-true [B, Tk] key mask (Keras' padding mask of an unpadded batch) gives bitwise the
    output and gradients of full key lengths: the index-masked kernels run for both (the general
    kernels' per-element score function rounds differently). Not against no mask at all: off Hopper
    that forward takes kernels that round differently (on Hopper the 16-bit forward is checked against it:
    test_all_true_key_mask_is_bitwise_no_mask_on_hopper). float32 (TF32): on
    the H200 the head-dim-64 and -128 backwards are the Hopper TF32 kernels for both (their per-row
    key ranges against their unmasked path)."""
    rng = np.random.default_rng(d)
    with precision(dtype) as dt, tf.device("/GPU:0"):
        q, k, v = (tf.cast(rand(rng, 2, 700, 4, d), dt) for _ in range(3))
        w = tf.cast(rng.standard_normal((2, 700, 4, d)), dt)
        res = []
        for kw in (dict(key_lengths=[700, 700]), dict(key_mask=tf.ones((2, 700), tf.bool))):
            with tf.GradientTape() as tape:
                tape.watch([q, k, v])
                out = fa.dot_product_attention(q, k, v, is_causal=True, **kw)
                loss = tf.reduce_sum(tf.cast(out * w, tf.float32))
            res.append([out] + tape.gradient(loss, [q, k, v]))
    (out0, dq0, dk0, dv0), (out1, dq1, dk1, dv1) = [[tf.cast(t, tf.float32).numpy() for t in r]
                                                    for r in res]
    for a, b in ((out0, out1), (dk0, dk1), (dv0, dv1)):  # no atomics: bitwise
        np.testing.assert_array_equal(a, b)
    # dQ is summed with float32 atomics in no fixed order: equal up to that order.
    tol = 1e-4 if dtype is TF32 else 1e-2
    np.testing.assert_allclose(dq0, dq1, rtol=0, atol=tol * np.abs(dq0).max())


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("d", [64, 128, 256])
def test_all_true_key_mask_is_bitwise_no_mask_on_hopper(d, dtype, causal):
    """On an H100 / H200 a 16-bit forward without a mask runs the plain Hopper kernel and one with an all-true [B, Tk]
    key mask the index-masked kernel (each call launches the Hopper forward); on an unmasked row both do the same
    arithmetic in the same order, so the output and the log-sum-exp are equal bit for bit. flash_fwd_sm90.cu keeps
    this where the two kernels' code differs: FA_SM90_FWD_SKIP_RESCALE / SOFTMAX_UNDER_PV (2 / 1 by default) put the
    kept running max (which changes the rounding) in both kernels and only bitwise-neutral steps in the plain one.
    1000 keys: several key tiles per row. Other GPUs: skipped (their two calls may take kernels that round
    differently)."""
    if not on_hopper() or os.environ.get("TF_FLASHATTN_SM90") == "0":
        pytest.skip("the Hopper forward kernels only")
    rng = np.random.default_rng(d + causal)
    with tf.device("/GPU:0"):
        q, k, v = (tf.cast(rand(rng, 2, 1000, 4, d), dtype) for _ in range(3))
        res = []
        for kw in ({}, dict(key_mask=tf.ones((2, 1000), tf.bool))):
            with expect_launches("sm90_fwd"):  # each call: the Hopper forward
                o, lse = fa.dot_product_attention(q, k, v, is_causal=causal, return_lse=True, **kw)
                res.append((tf.cast(o, tf.float32).numpy(), lse.numpy()))
    np.testing.assert_array_equal(res[0][0], res[1][0])
    np.testing.assert_array_equal(res[0][1], res[1][1])


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("bias_shape", [(B, H, TQ, TK), (1, 1, TQ, TK), (B, 1, 1, TK)])
def test_bias_with_gradient(bias_shape, dtype):
    rng = np.random.default_rng(sum(bias_shape))
    q, k, v = rand(rng, B, TQ, H, 64), rand(rng, B, TK, 2, 64), rand(rng, B, TK, 2, 64)
    compare(q, k, v, dtype, bias=rand(rng, *bias_shape), kw=dict(is_causal=True),
            allowed=allowed_mask(B, H, TQ, TK, is_causal=True))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_bias_nonfinite_where_masked(dtype):
    """A bias holding NaN and +inf wherever causal masking and key lengths hide the element: never read, so the
    output and the gradients are those of the bias zeroed there (every kernel: score_elem's rule)."""
    rng = np.random.default_rng(12)
    q, k, v = rand(rng, B, TQ, H, 64), rand(rng, B, TK, 2, 64), rand(rng, B, TK, 2, 64)
    allowed = allowed_mask(B, H, TQ, TK, is_causal=True, causal_offset=TK - TQ, key_lengths=[333, 200])
    bad = np.where(rng.random((B, H, TQ, TK)) < 0.5, np.nan, np.inf)
    bias = np.where(allowed, rand(rng, B, H, TQ, TK).numpy(), bad).astype(np.float32)
    compare(q, k, v, dtype, bias=tf.constant(bias), allowed=allowed, keras_ok=False,
            kw=dict(is_causal=True, causal_offset=TK - TQ, key_lengths=[333, 200]))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_softcap(dtype):
    rng = np.random.default_rng(3)
    q, k, v = rand(rng, B, TQ, H, 64) * 3, rand(rng, B, TK, 2, 64) * 3, rand(rng, B, TK, 2, 64)
    compare(q, k, v, dtype, softcap=4.0)


@pytest.mark.parametrize("d,dv", [(64, 64), (128, 128), (96, 80)])
@pytest.mark.parametrize("masks", [False, True], ids=["plain", "masks"])
def test_tf32_softcap(masks, d, dv):
    """Soft-cap in float32 with TF32 on: on an H100 / H200 the Hopper TF32 forward's and backwards' soft-cap
    instantiations run it (head dims 64, 128, and 96 / 80 padded up to 128), elsewhere sm80's TF32 kernels; a
    tight cap (tanh saturates for many scores), alone or with GQA, causal with an offset, lengths and a window."""
    rng = np.random.default_rng(d + dv + masks)
    B_, TQ_, TK_, H_ = 2, 150, 260, 4
    q, k, v = rand(rng, B_, TQ_, H_, d) * 3, rand(rng, B_, TK_, 2, d) * 3, rand(rng, B_, TK_, 2, dv)
    kw, allowed = {}, None
    if masks:
        kw = dict(is_causal=True, causal_offset=TK_ - TQ_, key_lengths=[260, 170], sliding_window=(90, None))
        allowed = allowed_mask(B_, H_, TQ_, TK_, is_causal=True, causal_offset=TK_ - TQ_, window=(90, -1),
                               key_lengths=[260, 170])
    with expect_launches(*tf32_hopper(d, dv)):
        compare(q, k, v, TF32, softcap=5.0, allowed=allowed, kw=kw)


@pytest.mark.parametrize("d,dv,softcap", [(64, 64, None), (128, 128, None), (96, 80, None), (128, 128, 20.0)])
def test_tf32_dropout(d, dv, softcap):
    """Dropout in float32 with TF32 on (the mask of the CPU and sm80, tests/reference.py's): on an H100 / H200 the
    Hopper TF32 forward's and backwards' dropout instantiations run it (head dims 64, 128, 96 / 80 padded up; with
    soft-cap too), elsewhere sm80's TF32 kernels; with GQA, causal with an offset and key lengths."""
    rng = np.random.default_rng(d + dv + (softcap is not None))
    B_, TQ_, TK_, H_ = 2, 150, 260, 4
    q, k, v = rand(rng, B_, TQ_, H_, d), rand(rng, B_, TK_, 2, d), rand(rng, B_, TK_, 2, dv)
    seed, rate = [21, d], 0.2
    kw = dict(dropout_rate=rate, seed=seed, is_causal=True, causal_offset=TK_ - TQ_, key_lengths=[260, 170])
    allowed = allowed_mask(B_, H_, TQ_, TK_, is_causal=True, causal_offset=TK_ - TQ_, key_lengths=[260, 170])
    with expect_launches(*tf32_hopper(d, dv)):
        compare(q, k, v, TF32, softcap=softcap, allowed=allowed,
                keep=dropout_keep_mask(seed, B_, H_, TQ_, TK_, rate), kw=kw)


DENSE_SWITCH = "TF_FLASHATTN_SM90_TF32_BWD_DENSE"  # the Hopper TF32 backwards' dense mask / bias kernels (on by default)


@pytest.mark.parametrize("d,dv,softcap", [(64, 64, None), (128, 128, None), (96, 80, None), (64, 64, 30.0),
                                          (128, 128, 20.0)])
def test_tf32_dense_mask_bias(d, dv, softcap):
    """A dense mask and a bias with its gradient in float32 with TF32 on: on an H100 / H200 the Hopper TF32 forward's
    dense instantiations run it, and the Hopper TF32 backwards' dense ones unless TF_FLASHATTN_SM90_TF32_BWD_DENSE=0
    (sm80's TF32 backward then; test_tf32_dense_backward_switch_off runs this test so); elsewhere sm80's TF32 kernels.
    A head bias with -inf at random elements and on whole rows of one head (lse = -inf there), a dense mask with
    rows all false, GQA, causal with an offset and key lengths; soft-cap at head dims 64 and 128."""
    rng = np.random.default_rng(d + dv + (softcap is not None))
    B_, TQ_, TK_, H_ = 2, 150, 260, 4
    q, k, v = rand(rng, B_, TQ_, H_, d), rand(rng, B_, TK_, 2, d), rand(rng, B_, TK_, 2, dv)
    mask = rng.random((B_, H_, TQ_, TK_)) > 0.3
    mask[:, :, 7::11] = False
    bias = rng.standard_normal((1, H_, TQ_, TK_)).astype(np.float32)
    bias[rng.random(bias.shape) < 0.1] = -np.inf
    bias[:, 2, 3::9] = -np.inf
    kw = dict(mask=mask, is_causal=True, causal_offset=TK_ - TQ_, key_lengths=[260, 170])
    allowed = allowed_mask(B_, H_, TQ_, TK_, mask=mask, is_causal=True, causal_offset=TK_ - TQ_,
                           key_lengths=[260, 170]) & np.isfinite(bias)
    # With the switch at 0 the forward still runs on Hopper, the backward must not.
    fwd, bwd = tf32_hopper(d, dv)
    launched, absent = ((fwd,), (bwd,)) if os.environ.get(DENSE_SWITCH) == "0" else ((fwd, bwd), ())
    with expect_launches(*launched, absent=absent):
        _, grads = compare(q, k, v, TF32, bias=tf.constant(bias), softcap=softcap, allowed=allowed, keras_ok=False,
                           kw=kw, with_grads=True)
    # dbias (summed over the batch; compare poisons GPU memory first) is exactly 0 wherever no batch row sees the
    # element: hidden elements, -inf biases and rows with nothing visible contribute nothing, not a rounding residue
    # or a NaN.
    dbias = grads[3].numpy()
    seen = np.any(allowed, axis=0, keepdims=True)
    assert np.all(dbias[~seen] == 0), np.abs(dbias[~seen]).max()
    assert np.count_nonzero(dbias[seen]) > 0.9 * seen.sum()


def pytest_with_env(settings, args, passed, timeout):
    """Runs pytest on `args` in a process of its own with the environment variables `settings` set (the library reads
    its switches once per process); every selected test must pass, `passed` of them."""
    env = dict(os.environ, **settings, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], env=env,
                          capture_output=True, text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert f"{passed} passed" in proc.stdout, proc.stdout[-3000:]


def test_tf32_dense_backward_switch_off():
    """test_tf32_dense_mask_bias in a process with TF_FLASHATTN_SM90_TF32_BWD_DENSE=0 (read once per process): on an
    H100 / H200 every case must run sm80's TF32 backward instead of the Hopper TF32 backwards (expect_launches) and
    match the float64 reference."""
    if not on_hopper():
        pytest.skip("the switch concerns the Hopper TF32 backwards (compute capability 9.0)")
    pytest_with_env({DENSE_SWITCH: "0"}, [f"{__file__}::test_tf32_dense_mask_bias"], passed=5, timeout=600)


def test_sm80_kernels_on_hopper():
    """With TF_FLASHATTN_SM90=0 an H100 / H200 runs sm80's kernels for every call. In a process of their own (the
    switch is read once), in float16, bfloat16 and TF32 against the float64 reference: test_features (the masks,
    head dim 64; its expect_launches now checks that no Hopper kernel ran), test_dropout_matches_reference_and_cpu
    (dropout, head dim 64), test_padded_head_dims_with_features (masks, dropout, bias and soft-cap at head dims
    padded to 128 and 256) and test_padding_masks_with_causal_on_the_index_path (the index-masked kernels at 64,
    128, 256). These are sm80's kernels for GPUs with >= 210 KiB of shared memory per SM (big_smem): the sm_90 SASS
    has no other bodies (SmemClass, cc/kernels/common/flash_cuda_common.cuh), so a dispatch that picked one of the
    small-smem kernels here would trap and fail. (The other side, kernels marked for big_smem alone that a compute
    8.x GPU would trap on, needs such a GPU.)"""
    if not on_hopper():
        pytest.skip("the switch concerns the Hopper kernels (compute capability 9.0)")
    tests = {"test_features": 3 * len(FEATURES), "test_dropout_matches_reference_and_cpu": 3,
             "test_padded_head_dims_with_features": 45, "test_padding_masks_with_causal_on_the_index_path": 27}
    pytest_with_env({"TF_FLASHATTN_SM90": "0"}, [__file__, "-k", f"({' or '.join(tests)}) and not float32"],
                    passed=sum(tests.values()), timeout=900)


# Calls of each Hopper forward kernel (flash_fwd_sm90.cu: the plain kernel, which causal alone runs, the
# index-masked one, the dense mask / bias one; flash_fwd_sm90_tf32.cu likewise) at head dims 64 and 128, as
# FEATURES values (_feature).
FORWARD_KERNELS = {"d64_causal": (64, dict(is_causal=True)), "d64_lengths": (64, dict(key_lengths=[333, 290])),
                   "d64_dense": (64, "dense"), "d128": (128, {}), "d128_causal": (128, dict(is_causal=True)),
                   "d128_window": (128, dict(sliding_window=(40, 9))), "d128_dense": (128, "dense")}


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, TF32], ids=dtype_id)
@pytest.mark.parametrize("kernel", list(FORWARD_KERNELS))
def test_hopper_forward_kernels_run(kernel, dtype):
    """Each Hopper forward kernel, on an H100 / H200 (expect_launches), against the float64 reference."""
    rng = np.random.default_rng(len(kernel))
    d, spec = FORWARD_KERNELS[kernel]
    q, k, v = rand(rng, B, TQ, H, d), rand(rng, B, TK, 2, d), rand(rng, B, TK, 2, d)
    kw, allowed = _feature(spec, rng)
    with expect_launches("sm90_tf32_fwd" if dtype == TF32 else "sm90_fwd"):
        compare(q, k, v, dtype, allowed=allowed, kw=kw)


def test_schedule_requests_a_release_build_lacks():
    """The op library has, per Hopper forward kernel, its default schedules alone (flash_fwd_sm90.cu's
    schedule_built_for, flash_fwd_sm90_tf32.cu's tf32_variant_built); asked for one that a kernel lacks, a call must
    run that kernel's default, not fall back to sm80. test_hopper_forward_kernels_run and test_features in a process
    with TF_FLASHATTN_SM90_FWD_VARIANT=7 (the persistent schedule, built for the plain D = 128 kernel alone) and
    TF_FLASHATTN_SM90_TF32_VARIANT=2 (in tuning builds only), float16, bfloat16 and TF32."""
    if not on_hopper():
        pytest.skip("the schedules concern the Hopper forwards (compute capability 9.0)")
    tests = {"test_hopper_forward_kernels_run": 3 * len(FORWARD_KERNELS), "test_features": 3 * len(FEATURES)}
    pytest_with_env({"TF_FLASHATTN_SM90_FWD_VARIANT": "7", "TF_FLASHATTN_SM90_TF32_VARIANT": "2"},
                    [__file__, "-k", f"({' or '.join(tests)}) and not float32"], passed=sum(tests.values()), timeout=900)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_dropout_matches_reference_and_cpu(dtype):
    rng = np.random.default_rng(4)
    q, k, v = rand(rng, B, TQ, H, 64), rand(rng, B, TK, 2, 64), rand(rng, B, TK, 2, 64)
    seed, rate = [77, 3], 0.2
    keep = dropout_keep_mask(seed, B, H, TQ, TK, rate)
    kw = dict(dropout_rate=rate, seed=seed, is_causal=True)
    allowed = allowed_mask(B, H, TQ, TK, is_causal=True)
    gpu = compare(q, k, v, dtype, allowed=allowed, keep=keep, kw=kw)
    with tf.device("/CPU:0"):
        cpu = fa.dot_product_attention(*(tf.cast(t, tf.float32 if dtype == TF32 else dtype)
                                         for t in (q, k, v)), scale=f32_scale(64), **kw)
    # Same mask on both devices: the outputs agree to rounding (a different mask would not).
    assert max_err(gpu, cpu) <= 4 * FLOOR[dtype] + 1e-6


@pytest.mark.parametrize("dtype", [tf.float32, TF32], ids=dtype_id)
def test_lse_output(dtype):
    rng = np.random.default_rng(6)
    q, k, v = rand(rng, B, TQ, H, 64), rand(rng, B, TK, 2, 64), rand(rng, B, TK, 2, 64)
    with precision(dtype), tf.device("/GPU:0"):
        _, lse = fa.dot_product_attention(q, k, v, return_lse=True, is_causal=True,
                                          query_lengths=[100, 203])
    _, ref = reference_attention(q, k, v, scale=f32_scale(64),
                                 allowed=allowed_mask(B, H, TQ, TK, is_causal=True,
                                                      query_lengths=[100, 203]))
    ref = ref.numpy()
    np.testing.assert_array_equal(np.isneginf(lse.numpy()), np.isneginf(ref))
    fin = np.isfinite(ref)
    tol = 1e-4 if dtype == tf.float32 else 5e-3  # TF32: 10-bit mantissa products
    np.testing.assert_allclose(lse.numpy()[fin], ref[fin], atol=tol, rtol=tol / 10)


DETERMINISM = textwrap.dedent("""
    import sys
    import numpy as np, tensorflow as tf, tf_flashattn as fa
    tf.config.experimental.enable_op_determinism()
    tf.config.experimental.enable_tensor_float_32_execution(True)  # float32: the TF32 kernels
    # (dtype, head dim, bias, dropout rate). On the H200: bias with dropout runs sm80's deterministic
    # backward; bfloat16_d256 the Hopper head-dim-256 kernel's deterministic dropout copy; the _bias rows
    # without dropout the split kernel's deterministic score copies (head dims 128 and 256); bfloat16_d64
    # the head-dim-64 causal deterministic kernel (sm80's before 2026-12-02); the float32_*_plain rows the Hopper
    # TF32 backwards' ordered dQ reduction (head dims 64, 128 and 80, padded up to 128), the _softcap and _dropout
    # rows their soft-cap and dropout instantiations (float32 with bias and dropout: sm80's).
    softcap = 5.0 if sys.argv[1].endswith("_softcap") else None
    dt, d, with_bias, rate = {
        "bfloat16": (tf.bfloat16, 128, True, 0.1), "float32": (tf.float32, 128, True, 0.1),
        "float32_d256": (tf.float32, 256, True, 0.1), "bfloat16_d256": (tf.bfloat16, 256, False, 0.1),
        "bfloat16_bias": (tf.bfloat16, 128, True, 0.0), "bfloat16_d256_bias": (tf.bfloat16, 256, True, 0.0),
        "bfloat16_d64": (tf.bfloat16, 64, False, 0.0), "float32_d64_plain": (tf.float32, 64, False, 0.0),
        "float32_d128_plain": (tf.float32, 128, False, 0.0), "float32_d80_plain": (tf.float32, 80, False, 0.0),
        "float32_d64_softcap": (tf.float32, 64, False, 0.0), "float32_d64_dropout": (tf.float32, 64, False, 0.1),
        "float32_d128_dropout": (tf.float32, 128, False, 0.1),
        "float32_d128_softcap": (tf.float32, 128, False, 0.0)}[sys.argv[1]]
    rng = np.random.default_rng(0)
    q, k, v = (tf.constant(rng.standard_normal(s), dt) for s in
               [(2, 1500, 8, d), (2, 1700, 2, d), (2, 1700, 2, d)])
    bias = tf.constant(rng.standard_normal((1, 8, 1500, 1700)), dt) if with_bias else None
    def run():
        with tf.device('/GPU:0'), tf.GradientTape() as t:
            t.watch([q, k, v] + ([bias] if with_bias else []))
            o = fa.dot_product_attention(q, k, v, bias=bias, is_causal=True, attn_logits_soft_cap=softcap,
                                         dropout_rate=rate, seed=[1, 2] if rate else None)
            l = tf.reduce_sum(tf.cast(o, tf.float32) ** 2)
        return [o] + t.gradient(l, [q, k, v] + ([bias] if with_bias else []))
    if sys.argv[2:] == ["xla"]:  # the XLA custom calls, compiled after determinism was enabled
        run = tf.function(run, jit_compile=True)
    a, b = run(), run()
    diff = [name for name, x, y in zip(["o", "dq", "dk", "dv", "dbias"], a, b)
            if not np.array_equal(tf.cast(x, tf.float32).numpy(), tf.cast(y, tf.float32).numpy())]
    print('BITWISE' if not diff else 'DIFFERENT: ' + ' '.join(diff))
""")


@pytest.mark.parametrize("which", ["bfloat16", "float32", "float32_d256", "bfloat16_d256",
                                   "bfloat16_bias", "bfloat16_d256_bias", "bfloat16_d64", "bfloat16 xla",
                                   "float32 xla", "bfloat16_d256 xla", "bfloat16_bias xla", "float32_d64_plain",
                                   "float32_d128_plain", "float32_d80_plain", "float32_d128_plain xla",
                                   "float32_d64_softcap", "float32_d128_softcap xla", "float32_d64_dropout",
                                   "float32_d128_dropout xla"])
def test_deterministic_mode_is_bitwise_reproducible(which):
    res = subprocess.run([sys.executable, "-c", DETERMINISM] + which.split(), capture_output=True,
                         text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), timeout=600)
    assert "BITWISE" in res.stdout, res.stdout + res.stderr[-3000:]


# ---- offsets past 2^31 elements (int64 addressing) ---------------------------------------------
def _fwd_bwd(q, k, v, do, **kw):
    with tf.GradientTape() as tape:
        tape.watch([q, k, v])
        o = fa.dot_product_attention(q, k, v, **kw)
    return [o] + tape.gradient(o, [q, k, v], output_gradients=do)


def _assert_same(a, b, what):
    a, b = tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy()
    assert np.all(np.isfinite(a)), what
    np.testing.assert_allclose(a, b, rtol=1e-2, atol=1e-2, err_msg=what)


def test_query_side_past_2_to_31_elements():
    """q, dO, O, dQ of 2^31 + 8192 elements (bf16, 4 GiB each): the last rows, past element 2^31,
    give what the same rows give alone. dO is zero except there, so dK / dV come from them only."""
    D, tail = 128, 64
    T = (1 << 31) // D + tail
    with tf.device("/GPU:0"):
        q = tf.random.normal([1, T, 1, D], dtype=tf.bfloat16, seed=1)
        k = tf.random.normal([1, 64, 1, D], dtype=tf.bfloat16, seed=2)
        v = tf.random.normal([1, 64, 1, D], dtype=tf.bfloat16, seed=3)
        do_tail = tf.random.normal([1, tail, 1, D], dtype=tf.bfloat16, seed=4)
        do = tf.concat([tf.zeros([1, T - tail, 1, D], tf.bfloat16), do_tail], axis=1)
        big = _fwd_bwd(q, k, v, do)
        small = _fwd_bwd(q[:, -tail:], k, v, do_tail)
    _assert_same(big[0][:, -tail:], small[0], "output")
    _assert_same(big[1][:, -tail:], small[1], "dq")
    _assert_same(big[2], small[2], "dk")
    _assert_same(big[3], small[3], "dv")


def test_key_side_past_2_to_31_elements():
    """K, V, dK, dV of 2^31 + 8192 elements: 64 queries aligned to the last keys (causal with
    offset Tk - Tq, a window of 64 keys) see only keys past element 2^31, and give what the same
    keys give alone."""
    D, tq, window = 128, 64, 63
    T = (1 << 31) // D + tq
    near = tq + window  # the keys the queries can see: the last `near`
    with tf.device("/GPU:0"):
        q = tf.random.normal([1, tq, 1, D], dtype=tf.bfloat16, seed=5)
        k = tf.random.normal([1, T, 1, D], dtype=tf.bfloat16, seed=6)
        v = tf.random.normal([1, T, 1, D], dtype=tf.bfloat16, seed=7)
        do = tf.random.normal([1, tq, 1, D], dtype=tf.bfloat16, seed=8)
        big = _fwd_bwd(q, k, v, do, is_causal=True, causal_offset=T - tq, sliding_window=(window, 0))
        small = _fwd_bwd(q, k[:, -near:], v[:, -near:], do, is_causal=True,
                         causal_offset=near - tq, sliding_window=(window, 0))
    _assert_same(big[0], small[0], "output")
    _assert_same(big[1], small[1], "dq")
    _assert_same(big[2][:, -near:], small[2], "dk")
    _assert_same(big[3][:, -near:], small[3], "dv")
    assert float(tf.reduce_max(tf.abs(tf.cast(big[2][:, :-near], tf.float32)))) == 0.0  # unseen keys


# ---- asynchronous execution -------------------------------------------------------------------
def _host_and_total_ms(fn, calls=10):
    """(host ms per call, total ms per call) over `calls` calls of fn in a row, read back once."""
    for _ in range(2):
        fn()
    tf.test.experimental.sync_devices()
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn()
    t1 = time.perf_counter()
    tf.test.experimental.sync_devices()
    del out
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e3, (t2 - t0) / calls * 1e3


def _long_call_inputs():
    # One forward is several milliseconds of GPU work on an H100/H200 (about 2.2 TFLOP), so the
    # GPU's time dwarfs the host's when the call does not wait for the GPU.
    rng = np.random.default_rng(11)
    shape = (1, 16384, 16, 128)
    q, k, v = (tf.constant(rng.standard_normal(shape).astype("float32"), tf.bfloat16)
               for _ in range(3))
    return tf.Variable(q), k, v


@pytest.mark.parametrize("case", ["graph", "graph_lengths_dropout", "eager", "xla_dropout_grad",
                                  "graph_grad_dropout", "eager_dropout_next_seed"])
def test_calls_do_not_wait_for_the_gpu(case):
    """A call returns to the host long before its GPU work ends (the host would otherwise wait at
    every call: an op that copies a GPU tensor to the host, e.g. a HostMemory seed or lengths
    input, or a stream synchronization in a custom call, makes each call as slow on the host as
    on the GPU)."""
    qv, k, v = _long_call_inputs()
    gen = keras.random.SeedGenerator(3)  # its state lives on the GPU
    lengths = tf.constant([16000], tf.int32)
    drop = "dropout" in case

    # Eager code takes its seeds through fa.next_seed: Keras' own gen.next() copies host
    # constants to the GPU state at every eager call (see test_keras_next_waits_in_eager_mode).
    next_seed = fa.next_seed if case.startswith("eager") else (lambda g: tf.cast(g.next(), tf.int64))

    def attn():
        kw = dict(dropout_rate=0.1, seed=next_seed(gen)) if drop else {}
        if "lengths" in case:
            kw["key_lengths"] = lengths
        return fa.dot_product_attention(qv, k, v, **kw)

    def grad():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(attn(), tf.float32))
        return tape.gradient(loss, qv)

    body = grad if "grad" in case else attn
    fn = {"graph": tf.function, "eager": lambda f: f,
          "xla": lambda f: tf.function(f, jit_compile=True)}[case.split("_")[0]](body)
    # Best of three rounds: with the GPU tests' 8 workers on one machine a round's host time can
    # stretch (1.44 ms of 3.66 once, 2026-12-04); a call that waits for the GPU fails every round.
    for _ in range(3):
        host, total = _host_and_total_ms(fn)
        if host < 0.3 * total:
            break
    assert host < 0.3 * total, (
        f"{case}: the host spent {host:.2f} ms per call of {total:.2f} ms: the call waits for "
        f"the GPU")


def test_keras_next_waits_in_eager_mode():
    """Why eager code should take fa.next_seed: Keras' SeedGenerator.next() waits for the GPU in
    eager mode (its host-made increment is copied to the GPU state). If this starts failing,
    Keras no longer waits, and fa.next_seed could become gen.next() again."""
    qv, k, v = _long_call_inputs()
    gen = keras.random.SeedGenerator(3)

    def keras_next():
        out = fa.dot_product_attention(qv, k, v)
        gen.next()
        return out

    host, total = _host_and_total_ms(keras_next)
    assert host > 0.5 * total, (host, total)
    a, b = keras.random.SeedGenerator(9), keras.random.SeedGenerator(9)
    for _ in range(3):
        np.testing.assert_array_equal(a.next().numpy(), fa.next_seed(b).numpy())


def test_next_seed_op_runs_on_the_gpu():
    """Eager next_seed is the op library's NextSeed on the state's device: the seed stays on the
    GPU (its CUDA kernel advances the state there), the sequence is Keras' and wraps as an int64
    add."""
    a, b = keras.random.SeedGenerator(4), keras.random.SeedGenerator(4)
    assert b.state.value.device.endswith("GPU:0")
    for _ in range(3):
        s = fa.next_seed(b)
        assert s.device.endswith("GPU:0"), s.device
        np.testing.assert_array_equal(s.numpy(), a.next().numpy())
    from tensorflow.python.ops import gen_resource_variable_ops
    lib = fa._ops.load()
    with tf.device("/GPU:0"):
        v = tf.Variable(np.array([3, 2**63 - 1], np.int64))
    read = gen_resource_variable_ops.read_variable_op(v.handle, tf.int64)  # shares the buffer
    first = lib.flash_attn_next_seed(v.handle)
    second = lib.flash_attn_next_seed(v.handle)
    np.testing.assert_array_equal(first.numpy(), [3, 2**63 - 1])
    np.testing.assert_array_equal(second.numpy(), [3, -2**63])
    np.testing.assert_array_equal(v.numpy(), [3, -2**63 + 1])
    np.testing.assert_array_equal(read.numpy(), [3, 2**63 - 1])  # not updated in place


def test_out_of_range_lengths_are_errors_on_the_gpu():
    """The lengths are host-memory inputs on the GPU too (int32 tensors live on the host in
    TensorFlow): they are range-checked there, without waiting for the GPU, and reach the kernels
    through pinned memory."""
    rng = np.random.default_rng(5)
    q, k, v = (tf.constant(rng.standard_normal((2, 9, 2, 16)).astype("float32")) for _ in range(3))
    f = tf.function(lambda ql, kl: fa.dot_product_attention(q, k, v, query_lengths=ql,
                                                            key_lengths=kl))
    with tf.device("/GPU:0"):
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"query_lengths\[0\] = 12 is out"):
            f(tf.constant([12, 3]), tf.constant([9, 4]))
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"key_lengths\[1\] = -1 is out"):
            f(tf.constant([9, 3]), tf.constant([9, -1]))
        out = f(tf.constant([9, 0]), tf.constant([9, 4]))
    want = reference_attention(*(tf.cast(t, tf.float64) for t in (q, k, v)), scale=0.25,
                               allowed=allowed_mask(2, 2, 9, 9, query_lengths=[9, 0],
                                                    key_lengths=[9, 4]))[0]
    assert "GPU" in out.device
    np.testing.assert_allclose(out.numpy(), want.numpy(), atol=2e-3)


def test_gpu_time_probe_times_each_call():
    """The library's GPU-time probe as tools reach it (tf_flashattn_gpu_timing_collect / _take through
    ctypes; benchmarks/gpu_attention.py's *_gpu figures): while collecting, one positive GPU time per
    forward and per backward call, and the gaps between the calls on their stream; nothing after it
    stops."""
    import ctypes

    from tf_flashattn import _ops
    lib = ctypes.CDLL(_ops.library_path())
    collect, take = lib.tf_flashattn_gpu_timing_collect, lib.tf_flashattn_gpu_timing_take
    take.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_float),
                     ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    rng = np.random.default_rng(12)
    q, k, v = (rand(rng, 2, 1000, 4, 64, dtype=tf.bfloat16) for _ in range(3))

    def step():
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            o = fa.dot_product_attention(q, k, v, is_causal=True)
        return tape.gradient(o, [q, k, v])

    def taken(direction):
        ms, gaps, n_gaps = (ctypes.c_float * 16)(), (ctypes.c_float * 16)(), ctypes.c_int(-1)
        n = take(direction, ms, gaps, 16, ctypes.byref(n_gaps))
        return list(ms[:max(min(n, 16), 0)]), list(gaps[:n_gaps.value]), n

    float(tf.reduce_sum(tf.cast(step()[0], tf.float32)))  # compiled and warm
    assert collect(1) == 0
    try:
        for _ in range(3):
            r = step()
        float(tf.reduce_sum(tf.cast(r[0], tf.float32)))
        fwd, bwd = taken(0), taken(1)
        assert take(2, None, None, 0, None) == -1
    finally:
        collect(0)
    for what, (ms, gaps, n) in (("forward", fwd), ("backward", bwd)):
        assert n == 3 and len(ms) == 3 and all(0 < x < 1000 for x in ms), (what, ms, n)
        assert len(gaps) == 2 and all(x >= 0 for x in gaps), (what, gaps)  # none before the first
    r = step()
    float(tf.reduce_sum(tf.cast(r[0], tf.float32)))
    assert taken(0)[2] == 0 and taken(1)[2] == 0
