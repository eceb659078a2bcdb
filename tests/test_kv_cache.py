"""KV cache of FlashMultiHeadAttention / FlashGroupQueryAttention (KerasHub's
CachedMultiHeadAttention form: `cache` [B, 2, S, Hkv, D], `cache_update_index`, returns
(output, new_cache)).

The reference is Keras' own layer (keras.layers.MultiHeadAttention / GroupQueryAttention with
the same weights) run without a cache: on the whole sequence (causal: each row sees only the
past, so its output cannot depend on later tokens) or on the sequence so far (not causal).
"""

import json
import os
import re
import subprocess
import sys
import urllib.request

import numpy as np
import pytest
import tensorflow as tf
import keras
from keras.src import backend as keras_backend

from tf_flashattn import layers as flash_layers
from tf_flashattn.layers import FlashGroupQueryAttention
from tf_flashattn.layers import FlashMultiHeadAttention


# Float32 comparisons in full precision on a GPU (conftest.full_float32).
pytestmark = pytest.mark.usefixtures("full_float32")

B, L, F, S_MAX = 2, 11, 16, 13  # batch, sequence, features, cache length
ATOL = 2e-6
CHUNKS = [3, 4, 1, 3]  # a prefill and then blocks of several sizes, 11 positions in all


def _x(seed=0, length=L):
    return np.random.default_rng(seed).normal(size=(B, length, F)).astype("float32")


def _pair(kind, **extra):
    """(keras_layer, flash_layer) with the same weights; the cache layout (Hkv, D)."""
    if kind == "mha":
        kwargs, layout = dict(num_heads=2, key_dim=4), (2, 4)
        ref, ours = keras.layers.MultiHeadAttention, FlashMultiHeadAttention
    else:
        kwargs, layout = dict(head_dim=4, num_query_heads=4, num_key_value_heads=2), (2, 4)
        ref, ours = keras.layers.GroupQueryAttention, FlashGroupQueryAttention
    kwargs.update(extra)
    ref, ours = ref(**kwargs), ours(**kwargs)
    x = _x()
    ref(x, x)
    ours(x, x)
    ours.set_weights(ref.get_weights())
    return ref, ours, layout


def _empty_cache(layout, dtype="float32", s_max=S_MAX):
    return tf.zeros((B, 2, s_max) + layout, dtype)


def _expected(ref, x, start, end, causal, **masks):
    """Rows [start, end) of Keras' layer without a cache on the sequence so far."""
    return ref(x[:, :end], x[:, :end], use_causal_mask=causal, **masks).numpy()[:, start:end]


class _Spy:
    """Records the keyword arguments of each op call made by the layers."""

    def __init__(self, monkeypatch):
        self.calls = []
        real = flash_layers.dot_product_attention

        def spy(query, key, value, **kwargs):
            self.calls.append(dict(kwargs, key_len=key.shape[1], query_len=query.shape[1]))
            return real(query, key, value, **kwargs)

        monkeypatch.setattr(flash_layers, "dot_product_attention", spy)


# ---------------------------------------------------------------------------
# Prefill + decode steps equal the layer without a cache.


@pytest.fixture(params=["scatter", "select"])
def cache_write(request, monkeypatch):
    """Both ways `_write_cache` writes: the scatter (CPU, float32 on GPU) and the select (a GPU
    with a float16 / bfloat16 cache)."""
    monkeypatch.setattr(flash_layers, "_scatter_writes", lambda dtype: request.param == "scatter")
    return request.param


@pytest.mark.parametrize("kind", ["mha", "gqa"])
@pytest.mark.parametrize("causal", [True, False])
def test_prefill_then_decode_loop_in_tf_function_equals_uncached(kind, causal, cache_write):
    """Prefill 5 positions (index 0, static), then decode the other 6 one per step inside one
    tf.function's tf.while_loop: the index is a loop variable (symbolic)."""
    ref, ours, layout = _pair(kind)
    x = _x(1)
    prefill = 5
    out0, cache = ours(x[:, :prefill], x[:, :prefill], use_causal_mask=causal,
                       cache=_empty_cache(layout), cache_update_index=0)

    @tf.function
    def decode(x, cache):
        def body(i, cache, outputs):
            token = x[:, i : i + 1]
            token.set_shape([B, 1, F])
            out, cache = ours(token, token, use_causal_mask=causal, cache=cache,
                              cache_update_index=i)
            return i + 1, cache, outputs.write(i - prefill, out[:, 0])

        _, cache, outputs = tf.while_loop(
            lambda i, *_: i < L, body,
            [tf.constant(prefill), cache, tf.TensorArray(tf.float32, size=L - prefill)])
        return tf.transpose(outputs.stack(), [1, 0, 2]), cache

    steps, cache = decode(tf.constant(x), cache)
    got = np.concatenate([out0.numpy(), steps.numpy()], axis=1)
    if causal:
        want = ref(x, x, use_causal_mask=True).numpy()
    else:
        want = np.concatenate([_expected(ref, x, 0, prefill, False)] + [
            _expected(ref, x, i, i + 1, False) for i in range(prefill, L)], axis=1)
    np.testing.assert_allclose(got, want, atol=ATOL)
    # The cache holds the projected keys and values of the 11 positions, zeros after them.
    keys = ours._key_dense(x).numpy()
    values = ours._value_dense(x).numpy()
    np.testing.assert_allclose(cache[:, 0, :L], keys, atol=1e-6)
    np.testing.assert_allclose(cache[:, 1, :L], values, atol=1e-6)
    assert not np.any(cache.numpy()[:, :, L:])


@pytest.mark.parametrize("kind", ["mha", "gqa"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("index_kind", ["python", "symbolic_any_length", "symbolic_one_row"])
def test_blocks_of_several_rows_equal_uncached(kind, causal, window, index_kind, cache_write):
    """Blocks of 3, 4, 1 and 3 rows, with the index a Python int, or a symbolic scalar in a
    tf.function whose block length is unknown (the log-sum-exp merge / dense-mask paths) or,
    for the 1-row block, static 1 (the lengths-only path)."""
    extra = {} if window is None else dict(sliding_window=window)
    ref, ours, layout = _pair(kind, **extra)
    x = _x(2)

    def symbolic(rows):
        @tf.function(input_signature=[tf.TensorSpec([B, rows, F]),
                                      tf.TensorSpec((B, 2, S_MAX) + layout),
                                      tf.TensorSpec([], tf.int32)])
        def call(xt, cache, index):
            return ours(xt, xt, use_causal_mask=causal, cache=cache, cache_update_index=index)

        return call

    any_rows, one_row = symbolic(None), symbolic(1)
    cache, start = _empty_cache(layout), 0
    for n in CHUNKS:
        xt = x[:, start : start + n]
        if index_kind == "python":
            out, cache = ours(xt, xt, use_causal_mask=causal, cache=cache,
                              cache_update_index=start)
        else:
            call = one_row if (n == 1 and index_kind == "symbolic_one_row") else any_rows
            out, cache = call(xt, cache, tf.constant(start))
        np.testing.assert_allclose(out, _expected(ref, x, start, start + n, causal),
                                   atol=ATOL, err_msg=f"block at {start}")
        start += n


@pytest.mark.parametrize("kind", ["mha", "gqa"])
@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("variant", ["padding_only", "attention_mask", "scores"])
def test_padding_masks_over_the_cache_equal_uncached(kind, symbolic, variant):
    """key_mask / value_mask [B, S_max] and attention_mask [B, T, S_max] cover the cache; query
    masks the new rows. Rows left with no key get the mean of the filled values, as the layer
    without a cache gives on the sequence so far. Padding only at a symbolic index takes the
    log-sum-exp merge for the blocks of several rows, an attention_mask the dense path, scores
    Keras' materializing core."""
    ref, ours, layout = _pair(kind)
    x = _x(3)
    rng = np.random.default_rng(4)
    key_mask = rng.random((B, S_MAX)) > 0.3
    key_mask[1, :] = False  # batch 1 sees no key at all
    value_mask = np.ones((B, S_MAX), bool)
    value_mask[0, 2] = False
    attention_mask = None
    if variant != "padding_only":
        attention_mask = rng.random((B, L, S_MAX)) > 0.2
    query_mask = np.ones((B, L), bool)
    query_mask[0, 4] = False
    scores = variant == "scores"

    def call(xt, cache, index, qm, am):
        kwargs = dict(use_causal_mask=True, cache=cache, cache_update_index=index,
                      value_mask=value_mask, key_mask=key_mask, attention_mask=am,
                      return_attention_scores=scores)
        if kind == "mha":  # MHA reads the query mask from the tensor (Keras mask propagation)
            xt = tf.identity(xt)
            keras_backend.set_keras_mask(xt, qm)
        else:
            kwargs["query_mask"] = qm
        result = ours(xt, xt, **kwargs)
        return (result[0], result[2]) if scores else result

    if symbolic:
        call = tf.function(call)
    cache, start = _empty_cache(layout), 0
    for n in CHUNKS:
        end = start + n
        xt = tf.constant(x[:, start:end])
        qm = tf.constant(query_mask[:, start:end])
        index = tf.constant(start) if symbolic else start
        am = None if attention_mask is None else attention_mask[:, start:end]
        out, cache = call(xt, cache, index, qm, am)
        masks = dict(value_mask=value_mask[:, :end], key_mask=key_mask[:, :end])
        if attention_mask is not None:
            masks["attention_mask"] = attention_mask[:, :end, :end]
        qx = tf.constant(x[:, :end])
        if kind == "mha":
            keras_backend.set_keras_mask(qx, tf.constant(query_mask[:, :end]))
        want = ref(qx, tf.constant(x[:, :end]), use_causal_mask=True,
                   query_mask=query_mask[:, :end], **masks).numpy()[:, start:end]
        np.testing.assert_allclose(out, want, atol=ATOL, err_msg=f"block at {start}")
        start = end


@pytest.mark.parametrize("kind", ["mha", "gqa"])
def test_gate_with_a_cache(kind):
    ref, ours, layout = _pair(kind, use_gate=True)
    x = _x(15)
    out0, cache = ours(x[:, :6], x[:, :6], use_causal_mask=True, cache=_empty_cache(layout),
                       cache_update_index=0)
    out1, _ = ours(x[:, 6:7], x[:, 6:7], use_causal_mask=True, cache=cache,
                   cache_update_index=tf.Variable(6))
    np.testing.assert_allclose(np.concatenate([out0, out1], 1),
                               ref(x[:, :7], x[:, :7], use_causal_mask=True), atol=ATOL)


@pytest.mark.parametrize("kind", ["mha", "gqa"])
def test_fixed_cache_attends_over_all_of_it(kind):
    """cache_update_index=None (KerasHub: cross-attention against a fixed cache): the cache is
    used as is, not written, and the output equals the uncached layer on the cached inputs."""
    ref, ours, layout = _pair(kind)
    x, memory = _x(5), _x(6, length=S_MAX)
    cache = tf.stack([ours._key_dense(memory), ours._value_dense(memory)], axis=1)
    out, same = ours(x, x, cache=cache)
    assert same is cache
    np.testing.assert_allclose(out, ref(x, memory), atol=ATOL)


@pytest.mark.parametrize("kind", ["mha", "gqa"])
@pytest.mark.parametrize("causal", [True, False])
def test_scores_with_a_cache_take_keras_path(kind, causal):
    """return_attention_scores=True with a cache: (output, scores, cache), Keras' materializing
    core on the filled positions; the scores of unfilled positions are 0."""
    ref, ours, layout = _pair(kind)
    x = _x(7)
    cache = _empty_cache(layout)
    out, scores, cache = ours(x[:, :6], x[:, :6], use_causal_mask=causal, cache=cache,
                              cache_update_index=0, return_attention_scores=True)
    out2, scores2, cache = ours(x[:, 6:7], x[:, 6:7], use_causal_mask=causal, cache=cache,
                                cache_update_index=6, return_attention_scores=True)
    want, want_scores = ref(x[:, :7], x[:, :7], use_causal_mask=causal,
                            return_attention_scores=True)
    np.testing.assert_allclose(out2, want[:, 6:], atol=ATOL)
    np.testing.assert_allclose(out, _expected(ref, x, 0, 6, causal), atol=ATOL)
    np.testing.assert_allclose(scores2[..., :7], want_scores[:, :, 6:7], atol=ATOL)
    assert not np.any(scores.numpy()[..., 6:]) and not np.any(scores2.numpy()[..., 7:])


def test_ops_arguments_per_path(monkeypatch):
    """Prefill at a Python index: is_causal with causal_offset, lengths, no dense mask. A decode
    step at a symbolic index: key_lengths only. A symbolic block of several rows: two calls
    (prefix by length, block causal), no dense mask. A dense mask only with a window there."""
    _, ours, layout = _pair("mha")
    x = _x(8)
    spy = _Spy(monkeypatch)
    _, cache = ours(x[:, :4], x[:, :4], use_causal_mask=True, cache=_empty_cache(layout),
                    cache_update_index=2)  # a non-zero static index
    (call,) = spy.calls
    assert call["is_causal"] and call["causal_offset"] == 2 and call["mask"] is None
    np.testing.assert_array_equal(call["key_lengths"], [6, 6])
    assert call["key_len"] == S_MAX

    @tf.function(input_signature=[tf.TensorSpec([B, None, F]),
                                  tf.TensorSpec((B, 2, S_MAX) + layout),
                                  tf.TensorSpec([], tf.int32)])
    def block(xt, cache, index):
        return ours(xt, xt, use_causal_mask=True, cache=cache, cache_update_index=index)

    @tf.function(input_signature=[tf.TensorSpec([B, 1, F]),
                                  tf.TensorSpec((B, 2, S_MAX) + layout),
                                  tf.TensorSpec([], tf.int32)])
    def step(xt, cache, index):
        return ours(xt, xt, use_causal_mask=True, cache=cache, cache_update_index=index)

    spy.calls.clear()
    step(x[:, 6:7], cache, tf.constant(6))
    (call,) = spy.calls
    assert not call["is_causal"] and call["mask"] is None and call["key_lengths"] is not None
    spy.calls.clear()
    block(x[:, 6:9], cache, tf.constant(6))
    prefix, new = spy.calls
    assert prefix["key_len"] == S_MAX and not prefix["is_causal"] and prefix["mask"] is None
    assert new["key_len"] is None and new["is_causal"] and new["mask"] is None

    _, windowed, _ = _pair("mha", sliding_window=3)
    spy.calls.clear()
    tf.function(lambda xt, c, i: windowed(xt, xt, use_causal_mask=True, cache=c,
                                          cache_update_index=i))(x[:, :3], cache, tf.constant(6))
    (call,) = spy.calls
    assert call["mask"] is not None and call["mask"].shape[-2:] == (3, S_MAX)


def test_xla_decode_step(cache_write):
    """A decode step and a symbolic block under jit_compile (the cache write is a
    dynamic-update-slice there, whichever way `_write_cache` writes outside XLA)."""
    ref, ours, layout = _pair("gqa")
    x = _x(9)

    @tf.function(jit_compile=True)
    def call(xt, cache, index):
        return ours(xt, xt, use_causal_mask=True, cache=cache, cache_update_index=index)

    out0, cache = call(x[:, :4], _empty_cache(layout), tf.constant(0))
    out1, cache = call(x[:, 4:5], cache, tf.constant(4))
    want = ref(x[:, :5], x[:, :5], use_causal_mask=True).numpy()
    np.testing.assert_allclose(np.concatenate([out0, out1], 1), want, atol=ATOL)


def _pair_cache(layout, dtype="float32", s_max=S_MAX):
    return (tf.zeros((B, s_max) + layout, dtype), tf.zeros((B, s_max) + layout, dtype))


@pytest.mark.parametrize("kind", ["mha", "gqa"])
@pytest.mark.parametrize("compiled", ["graph", "xla"])
def test_pair_cache_equals_uncached_and_stacked(kind, compiled, cache_write):
    """The cache as a pair (keys, values) [B, S, Hkv, D]: prefill of 4 (Python index), a block of
    3 and then single rows at a symbolic index, in a tf.function or under XLA: outputs equal
    Keras' layer without a cache, and the pair holds what the stacked cache holds."""
    ref, ours, layout = _pair(kind)
    x = _x(15)
    call = tf.function(lambda xt, c, i: ours(xt, xt, use_causal_mask=True, cache=c,
                                             cache_update_index=i),
                       jit_compile=(compiled == "xla"))
    out, cache = ours(x[:, :4], x[:, :4], use_causal_mask=True, cache=_pair_cache(layout),
                      cache_update_index=0)
    _, stacked = ours(x[:, :4], x[:, :4], use_causal_mask=True, cache=_empty_cache(layout),
                      cache_update_index=0)
    assert isinstance(cache, tuple) and len(cache) == 2
    outs, start = [out.numpy()], 4
    for n in (3, 1, 1, 1):
        out, cache = call(x[:, start : start + n], cache, tf.constant(start))
        _, stacked = call(x[:, start : start + n], stacked, tf.constant(start))
        outs.append(out.numpy())
        start += n
    want = ref(x[:, :start], x[:, :start], use_causal_mask=True).numpy()
    np.testing.assert_allclose(np.concatenate(outs, 1), want, atol=ATOL)
    np.testing.assert_array_equal(cache[0].numpy(), stacked[:, 0].numpy())
    np.testing.assert_array_equal(cache[1].numpy(), stacked[:, 1].numpy())
    assert not np.any(cache[0].numpy()[:, start:]) and not np.any(cache[1].numpy()[:, start:])


@pytest.mark.parametrize("cache, message", [
    ((np.zeros((B, S_MAX, 2, 4), "float32"),) * 3, "must be a pair (keys, values)"),
    ((np.zeros((B, S_MAX, 3, 4), "float32"),) * 2, "[2, ?, 2, 4]"),
    ((np.zeros((B, S_MAX, 2, 4), "float32"), np.zeros((B, S_MAX - 1, 2, 4), "float32")),
     "two float tensors of one dtype and shape"),
])
def test_pair_cache_errors(cache, message):
    _, ours, _ = _pair("mha")
    x = _x(16)[:, :3]
    with pytest.raises(ValueError) as e:
        ours(x, x, cache=cache, cache_update_index=0)
    assert message in str(e.value)


def _cache_shaped_ops(hlo, shape):
    """(opcode, in the entry computation, for a fusion its computation's root opcode) of the
    instructions of `hlo` (optimized HLO text) whose result has `shape`, outside fusions."""
    roots, found, computation, entry = {}, [], None, False
    fused = set(re.findall(r"calls=%([\w.-]+)", hlo))
    for line in hlo.splitlines():
        head = re.match(r"(ENTRY )?%(\S+) .*\{$", line)
        if head:
            computation, entry = head.group(2), bool(head.group(1))
            continue
        m = re.match(r"\s*(ROOT )?%\S+ = (\S+) ([\w-]+)\(", line)
        if not m:
            continue
        if m.group(1):
            roots[computation] = m.group(3)
        if m.group(2).split("{")[0] == shape:
            called = re.search(r"calls=%([\w.-]+)", line)
            found.append((m.group(3), entry, called.group(1) if called else None, computation))
    return [(op, entry, roots.get(called) if called else None)
            for op, entry, called, comp in found if comp not in fused]


def test_xla_decode_loop_writes_the_cache_in_place():
    """A decode loop compiled by XLA (the example's form: a pair cache carried by a
    tf.while_loop) updates the cache with dynamic-update-slices only: inside the loop no
    instruction of the cache's shape copies, selects, scatters or slices it, and the op's
    custom call reads the updated buffers as they are. (The stacked cache's halves would be
    slices: copies of the whole cache per step.)"""
    _, ours, layout = _pair("gqa")
    x = tf.constant(_x(17))

    @tf.function(jit_compile=True)
    def decode(cache, start):
        def body(i, cache, total, total_abs):
            token = tf.gather(x, [i % L], axis=1)
            out, cache = ours(token, token, use_causal_mask=True, cache=cache,
                              cache_update_index=i)
            return i + 1, cache, total + tf.reduce_sum(out), total_abs + tf.reduce_sum(tf.abs(out))

        _, cache, total, total_abs = tf.while_loop(
            lambda i, *_: i < S_MAX, body, [start, cache, tf.constant(0.0), tf.constant(0.0)])
        return cache, (total, total_abs)

    cache = _pair_cache(layout)
    hlo = decode.experimental_get_compiler_ir(cache, tf.constant(2))(stage="optimized_hlo")
    shape = "f32[%d,%d,%d,%d]" % ((B, S_MAX) + layout)
    ops = _cache_shaped_ops(hlo, shape)
    assert ops, hlo
    in_loop = [(op, root) for op, entry, root in ops if not entry]
    writes = [op for op, root in in_loop
              if op == "dynamic-update-slice" or (op == "fusion" and root ==
                                                  "dynamic-update-slice")]
    assert len(writes) == 2, in_loop  # keys and values, once per step
    others = [(op, root) for op, root in in_loop
              if (op, root) not in (("dynamic-update-slice", None),
                                    ("fusion", "dynamic-update-slice"))
              and op not in ("parameter", "get-tuple-element", "tuple")]
    assert not others, others
    # The results agree with the same loop outside XLA.
    got, (total, _) = decode(cache, tf.constant(2))
    want, (want_total, want_abs) = tf.function(decode.python_function)(cache, tf.constant(2))
    np.testing.assert_allclose(got[0], want[0], atol=1e-6)
    # The sums of the outputs over the steps: XLA fuses and orders the layer's float32 arithmetic and the sums
    # differently, so they agree to float32 rounding of the summands, sum |out| (a sum that cancels to a small total
    # would fail a bound relative to the total: seen once on the H200, 1.07e-5 of 0.42294).
    np.testing.assert_allclose(total, want_total, rtol=0, atol=1e-5 * float(want_abs))


def test_bfloat16_cache_under_mixed_precision(cache_write):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        ref, ours, layout = _pair("mha")
        x = _x(10)
        cache = _empty_cache(layout, "bfloat16")
        out0, cache = ours(x[:, :6], x[:, :6], use_causal_mask=True, cache=cache,
                           cache_update_index=0)
        out1, cache = tf.function(lambda xt, c, i: ours(
            xt, xt, use_causal_mask=True, cache=c, cache_update_index=i))(
            x[:, 6:7], cache, tf.constant(6))
        assert cache.dtype == tf.bfloat16 and out1.dtype == tf.bfloat16
        want = ref(x[:, :7], x[:, :7], use_causal_mask=True)
        got = tf.concat([out0, out1], 1)
        np.testing.assert_allclose(tf.cast(got, tf.float32), tf.cast(want, tf.float32),
                                   atol=3e-2)
    finally:
        keras.config.set_dtype_policy(previous)


def test_functional_model_with_cache_inputs():
    """compute_output_spec returns (output, cache): a functional decoding model works."""
    _, ours, layout = _pair("mha")
    tokens = keras.Input((1, F), batch_size=B)
    cache_in = keras.Input((2, S_MAX) + layout, batch_size=B)
    index = keras.Input((), batch_size=None, dtype="int32")
    out, cache_out = ours(tokens, tokens, cache=cache_in, cache_update_index=index[0],
                          use_causal_mask=True)
    assert tuple(cache_out.shape) == (B, 2, S_MAX) + layout
    assert tuple(out.shape) == (B, 1, F)


def test_training_with_dropout_runs_and_inference_is_deterministic():
    _, ours, layout = _pair("gqa", dropout=0.5)
    x = _x(11)
    cache = _empty_cache(layout)
    a, _ = ours(x[:, :5], x[:, :5], use_causal_mask=True, cache=cache, cache_update_index=0,
                training=True)
    b, _ = ours(x[:, :5], x[:, :5], use_causal_mask=True, cache=cache, cache_update_index=0,
                training=False)
    c, _ = ours(x[:, :5], x[:, :5], use_causal_mask=True, cache=cache, cache_update_index=0)
    assert np.all(np.isfinite(a)) and not np.allclose(a, b)
    np.testing.assert_array_equal(b, c)


# ---------------------------------------------------------------------------
# Errors name the argument.


@pytest.mark.parametrize("call_kwargs, message", [
    (dict(cache_update_index=0), "`cache_update_index` needs a `cache`"),
    (dict(cache=np.zeros((B, 2, S_MAX, 3, 4), "float32"), cache_update_index=0),
     "`cache` must be a float tensor of shape [batch, 2, max_len, num_kv_heads, head_dim] = "
     "[2, 2, ?, 2, 4]"),
    (dict(cache=np.zeros((B, S_MAX, 2, 4), "float32"), cache_update_index=0), "`cache` must be"),
    (dict(cache=np.zeros((B, 2, S_MAX, 2, 4), "float32"), cache_update_index=11),
     "do not fit in the cache of length 13"),
    (dict(cache=np.zeros((B, 2, S_MAX, 2, 4), "float32"), cache_update_index=-1),
     "`cache_update_index` must be >= 0"),
    (dict(cache=np.zeros((B, 2, S_MAX, 2, 4), "float32"), cache_update_index=1.0),
     "`cache_update_index` must be an integer scalar"),
    (dict(cache=np.zeros((B, 2, S_MAX, 2, 4), "float32"), cache_update_index=0,
          value_mask=np.ones((B, 3), bool)),
     "`value_mask` must have shape [batch, value_len] = [2, 13]"),
    (dict(cache=np.zeros((B, 2, S_MAX, 2, 4), "float32"), cache_update_index=0,
          attention_mask=np.ones((B, 3, 3), bool)), "`attention_mask` must broadcast"),
])
def test_errors_name_the_argument(call_kwargs, message):
    _, ours, _ = _pair("mha")
    x = _x(12)[:, :3]
    with pytest.raises(ValueError) as e:
        ours(x, x, **call_kwargs)
    assert message in str(e.value) and "FlashMultiHeadAttention" in str(e.value)


def test_symbolic_index_past_the_cache_is_an_error():
    _, ours, layout = _pair("gqa")
    x = _x(13)[:, :3]
    call = tf.function(lambda xt, c, i: ours(xt, xt, cache=c, cache_update_index=i))
    with pytest.raises(tf.errors.InvalidArgumentError, match="exceeds the cache length"):
        call(x, _empty_cache(layout), tf.constant(S_MAX - 2))


def test_mha_cache_needs_equal_key_and_value_dims():
    layer = FlashMultiHeadAttention(num_heads=2, key_dim=4, value_dim=6)
    x = _x(14)[:, :3]
    with pytest.raises(ValueError, match="key_dim and value_dim must be equal"):
        layer(x, x, cache=tf.zeros((B, 2, S_MAX, 2, 4)), cache_update_index=0)


# ---------------------------------------------------------------------------
# The example's generate (examples/train_char_lm.py), its SavedModel and serve.py.

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQ = 24  # the tiny model's context


def _lm():
    sys.path.insert(0, os.path.join(_REPO, "examples"))
    try:
        import train_char_lm
    finally:
        sys.path.pop(0)
    return train_char_lm


@pytest.fixture(scope="module")
def tiny_lm():
    """An untrained 2-block model whose weights are spread (std ~0.3) so that its logits have
    no near-ties: greedy choices then do not hinge on float rounding."""
    lm = _lm()
    keras.utils.set_random_seed(0)
    model = lm.build_model(SEQ, dim=32, heads=2, layers=2, dropout=0.0)
    rng = np.random.default_rng(0)
    model.set_weights([w + 0.3 * rng.normal(size=w.shape).astype(w.dtype)
                       for w in model.get_weights()])
    return lm, model


def _run(generate, prompt, n, temperature=0.0, seed=0):
    return generate(tf.constant(list(prompt), tf.int32), tf.constant(n, tf.int32),
                    tf.constant(temperature, tf.float32),
                    tf.constant([seed, 0], tf.int64)).numpy()


def test_example_forward_cached_equals_the_model(tiny_lm):
    """Prefill of 7 bytes, then 10 single-byte steps at a symbolic position: the logits equal
    the model's on the whole sequence (positions embedded at the right offsets)."""
    lm, model = tiny_lm
    tokens = np.random.default_rng(1).integers(0, 256, size=(1, 17)).astype("int32")
    want = model(tokens, training=False).numpy()
    caches = [tf.zeros([1, 2, SEQ, 2, 16]) for _ in range(2)]
    logits, caches = lm.forward_cached(model, tokens[:, :7], caches, 0)
    got = [logits.numpy()]
    step = tf.function(lambda t, c, i: lm.forward_cached(model, t, c, i))
    for i in range(7, 17):
        logits, caches = step(tokens[:, i : i + 1], caches, tf.constant(i))
        got.append(logits.numpy())
    np.testing.assert_allclose(np.concatenate(got, axis=1), want, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("jit_compile", [True, False])
def test_example_cached_generate_equals_recompute_loop(tiny_lm, jit_compile):
    """Greedy (and seeded sampling) of the cached loop, its decode steps compiled by XLA or not,
    equal the recompute-everything loop (never XLA) while the prompt and the output fit in the
    context (P + N <= SEQ + 1)."""
    lm, model = tiny_lm
    cached = lm.make_generate(model, SEQ, jit_compile=jit_compile)
    recompute = lm.make_generate(model, SEQ, cached=False)
    prompt = b"def f(x):"
    for n in (0, 1, 2, SEQ + 1 - len(prompt)):
        out = _run(cached, prompt, n)
        np.testing.assert_array_equal(out, _run(recompute, prompt, n), err_msg=f"n={n}")
        assert len(out) == n
    assert len(set(out.tolist())) > 3  # not a constant stream
    sampled = _run(cached, prompt, 12, 0.8, 5)
    np.testing.assert_array_equal(sampled, _run(recompute, prompt, 12, 0.8, 5))
    assert not np.array_equal(sampled, _run(cached, prompt, 12))  # sampling is not greedy
    assert not np.array_equal(sampled, _run(cached, prompt, 12, 0.8, 6))  # the seed counts
    # A prompt longer than the context: both condition on its last SEQ bytes.
    long_prompt = bytes(range(40, 40 + SEQ + 9))
    np.testing.assert_array_equal(_run(cached, long_prompt, 1), _run(recompute, long_prompt, 1))


def test_example_cached_generate_past_the_context(tiny_lm):
    """Past the context the cached loop keeps the last SEQ // 2 bytes and goes on: equal to a
    plain Python loop running the model on that window."""
    lm, model = tiny_lm
    prompt, n = b"import os\n", 3 * SEQ
    out = _run(lm.make_generate(model, SEQ), prompt, n)
    tokens, start = list(prompt), 0
    for _ in range(n):
        logits = model(np.array([tokens[start:]], "int32"), training=False)[0, -1]
        tokens.append(int(np.argmax(logits)))
        if len(tokens) - start > SEQ:
            start = len(tokens) - SEQ // 2
    np.testing.assert_array_equal(out, tokens[len(prompt):])


def test_example_decode_steps_write_the_caches_in_place(tiny_lm):
    """make_generate's XLA-compiled decode loop: inside it each block's (keys, values) caches
    change only by dynamic-update-slices (no per-step copy, select or slice of a cache), and it
    is one XLA computation with the loop inside."""
    lm, model = tiny_lm
    generate = lm.make_generate(model, SEQ)
    logits, caches = tf.function(generate.prefill)(tf.constant(list(b"def f(x):"), tf.int32))
    args = (logits, caches, tf.constant(9), tf.constant(0), tf.constant(5), tf.constant(0.0),
            tf.constant([0, 0], tf.int64))
    hlo = generate.decode_steps.experimental_get_compiler_ir(*args)(stage="optimized_hlo")
    assert " while(" in hlo
    ops = _cache_shaped_ops(hlo, "f32[1,%d,2,16]" % SEQ)
    in_loop = [(op, root) for op, entry, root in ops if not entry]
    writes = [x for x in in_loop if "dynamic-update-slice" in x]
    assert len(writes) == 2 * len(caches), in_loop  # keys and values of each block
    assert all(op in ("parameter", "get-tuple-element", "tuple") for op, root in in_loop
               if (op, root) not in writes), in_loop
    out, made = generate.decode_steps(*args)
    assert int(made) == 5
    np.testing.assert_array_equal(out[:5], _run(generate, b"def f(x):", 5))


def test_example_cached_generate_needs_flash_layers():
    lm = _lm()
    model = lm.build_model(8, dim=8, heads=2, layers=1, dropout=0.0,
                           attention_cls=keras.layers.MultiHeadAttention)
    with pytest.raises(ValueError, match="cached=False"):
        lm.make_generate(model, 8)
    assert len(_run(lm.make_generate(model, 8, cached=False), b"ab", 3)) == 3


def test_example_savedmodel_and_serve_run_the_cached_loop(tiny_lm, tmp_path):
    """export() writes the cached loop as `generate`; reloaded here, and served by serve.py in a
    fresh process (only `import tf_flashattn`), it answers what the recompute loop gives."""
    lm, model = tiny_lm
    path = str(tmp_path / "lm")
    lm.export(model, lm.make_generate(model, SEQ), path)
    # The decode steps are saved as an XLA-compiled function (compiled again when served).
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        assert b"_XlaMustCompile" in f.read()
    prompt = b"class A:"
    want = _run(lm.make_generate(model, SEQ, cached=False), prompt, 12)
    loaded = tf.saved_model.load(path)
    np.testing.assert_array_equal(_run(loaded.generate, prompt, 12), want)
    # Past the context the two loops differ (the cached one moves its window by SEQ // 2): the
    # SavedModel's is the cached one.
    past = _run(loaded.generate, prompt, 2 * SEQ)
    np.testing.assert_array_equal(past, _run(lm.make_generate(model, SEQ), prompt, 2 * SEQ))
    assert not np.array_equal(past, _run(lm.make_generate(model, SEQ, cached=False), prompt,
                                         2 * SEQ))

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_REPO, env.get("PYTHONPATH")]))
    server = subprocess.Popen(
        [sys.executable, os.path.join(_REPO, "examples", "serve.py"), "--model-dir", path,
         "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        line = server.stdout.readline()
        assert "serving" in line, line
        url = line.split()[-1]
        body = json.dumps({"prompt": prompt.decode(), "max_tokens": 12, "temperature": 0})
        reply = json.loads(urllib.request.urlopen(
            urllib.request.Request(url, data=body.encode()), timeout=120).read())
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert reply["completion"] == bytes(want.astype(np.uint8).tolist()).decode(
        "utf-8", errors="replace")


def test_example_savedmodel_without_xla(tiny_lm, tmp_path):
    """make_generate(jit_compile=False) (the example's --generate-xla off) exports a `generate`
    without XLA functions, for servers built without XLA; reloaded, it answers as the recompute
    loop does."""
    lm, model = tiny_lm
    path = str(tmp_path / "lm_noxla")
    lm.export(model, lm.make_generate(model, SEQ, jit_compile=False), path)
    from tensorflow.core.protobuf import saved_model_pb2
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    library = saved.meta_graphs[0].graph_def.library.function
    flags = [a.b for fn in library for a in [fn.attr.get("_XlaMustCompile")] + [
        n.attr.get("_XlaMustCompile") for n in fn.node_def] if a is not None]
    assert flags and not any(flags)  # the attribute is written, as false
    prompt = b"def f("
    want = _run(lm.make_generate(model, SEQ, cached=False), prompt, 10)
    loaded = tf.saved_model.load(path)  # kept: its variables live as long as it does
    np.testing.assert_array_equal(_run(loaded.generate, prompt, 10), want)
    assert lm.parse_args(["--generate-xla", "off"]).generate_xla == "off"
    assert lm.parse_args([]).generate_xla == "on"
    with pytest.raises(SystemExit):
        lm.parse_args(["--generate-xla", "maybe"])


def test_generate_throughput_benchmark_runs(tmp_path, capsys):
    """benchmarks/generate_throughput.py at toy size: both loops timed in one run, JSON written
    (random weights: no training)."""
    sys.path.insert(0, os.path.join(_REPO, "benchmarks"))
    try:
        import generate_throughput
    finally:
        sys.path.pop(0)
    out = tmp_path / "g.json"
    result = generate_throughput.main(["--context", "32", "--dim", "16", "--heads", "2",
                                       "--layers", "1", "--tokens", "8", "--repeats", "1",
                                       "--json", str(out)])
    assert json.loads(out.read_text()) == result
    for mode in ("cached", "cached_noxla", "recompute"):
        assert result["modes"][mode]["tokens_per_s"] > 0
    for mode in ("cached", "cached_noxla"):
        assert result["modes"][mode]["decode_step_ms"] > 0
        assert 0 <= result["modes"][mode]["leading_bytes_equal"] <= 8
    assert result["prompt_len"] == 32 - 8 + 1 and 0 <= result["leading_bytes_equal"] <= 8
    assert "| cached |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        generate_throughput.parse_args(["--modes", "fast"])
    # The float32 check of a bf16 run (the H200's): both float32 loops agree.
    try:
        result = generate_throughput.main(["--context", "32", "--dim", "16", "--heads", "2",
                                           "--layers", "1", "--tokens", "8", "--repeats", "1",
                                           "--dtype", "bf16", "--modes", "cached,recompute",
                                           "--check-float32", "--json", ""])
        assert keras.config.dtype_policy().name == "mixed_bfloat16"  # restored after the check
    finally:
        keras.config.set_dtype_policy("float32")
    check = result["float32_check"]
    assert check["float32_cached_vs_recompute"] == 8, check
    assert 0 <= check["cached_vs_float32_cached"] <= 8
