"""Keras layers that run their attention core through `dot_product_attention`.

`FlashMultiHeadAttention` and `FlashGroupQueryAttention` subclass Keras 3's
`MultiHeadAttention` and `GroupQueryAttention`. Constructor arguments, call
signature, sublayers (`query`, `key`, `value`, `gate`, `attention_output`),
weight names and shapes, and `get_config` are inherited unchanged, so
`flash.set_weights(keras_layer.get_weights())` reproduces the Keras layer's
output. Only the attention core differs: the [B, H, T, S] score matrix is
never built.

How each Keras input reaches the op:

- Keras masks (`query_mask`, `value_mask`, `key_mask`, e.g. from
  `Embedding(mask_zero=True)`) become the op's O(N) `query_mask` [B, T] and
  `key_mask` [B, S] (value and key masks ANDed).
- `use_causal_mask` becomes `is_causal` (query i sees keys j <= i, top-left
  aligned like Keras when T != S).
- `sliding_window=w` (Keras: |i - j| < w) becomes the op's window
  `(w - 1, w - 1)`.
- `attention_mask` is passed on as a dense mask, broadcast to [B, 1, T, S],
  only when the caller gives one.
- Attention dropout is the op's fused dropout; its seeds come from the
  `SeedGenerator` of the Keras `Dropout` sublayer (made from the layer's
  `seed` argument), so the layer holds the same seed generators as Keras.
  Dropout runs only when `training` is true.

Rows with no key to attend to: Keras' fused path (dropout == 0) gives the
uniform average of all values there, its softmax path (dropout > 0) gives
zeros. The op gives zeros; with dropout == 0 the layer writes the uniform
average into those rows (found from the op's log-sum-exp) so outputs and
gradients match Keras everywhere, padded rows included.

`return_attention_scores=True`, non-default `attention_axes` (or inputs of
rank other than 3), head dims above 256 and subclasses that override
`_compute_attention` take Keras' own materializing path; all but the last
warn once per process.

KV cache (for decoding; the form of KerasHub's `CachedMultiHeadAttention`):
`call(query, value, ..., cache=cache, cache_update_index=index)` with `cache`
[B, 2, S_max, num_kv_heads, head_dim] (keys and values stacked on dim 1; for
`FlashMultiHeadAttention` num_kv_heads = num_heads and key_dim must equal
value_dim) returns `(output, new_cache)` (`(output, scores, new_cache)` with
`return_attention_scores=True`). `cache` may also be a pair (keys, values) of
[B, S_max, num_kv_heads, head_dim] each (new_cache is then a pair): the op reads
them as they are, where the stacked form's halves are copies under XLA (a decode
loop compiled with XLA then copies no cache per step: it writes the new
positions in place). The projected key/value of the call's `value`
/ `key` are written at positions [index, index + S_new); query row i is at
position index + i and attends over the filled positions [0, index + S_new),
cut by the op's `key_lengths` (never a [T, S] mask). `use_causal_mask` then
means key j <= index + i: with `index` known when traced (a Python int, e.g. 0
for the prefill) that is the op's `causal_offset`; with a symbolic index (a
`tf.while_loop` counter), one query row needs nothing beyond the lengths, and
blocks of several rows take two op calls (the prefix [0, index) by length, the
new block causally against itself) merged by their log-sum-exps. Only a
sliding window (or an `attention_mask` with `use_causal_mask`) on a block of
several rows at a symbolic index builds a dense [T, S_max] mask. Masks with a
cache cover it: `value_mask` / `key_mask` [B, S_max], `attention_mask`
[B, T, S_max]. `cache_update_index=None` uses the cache as is (cross-attention
against fixed keys). The output equals the layer without a cache on the
sequence so far, rows with no key included (the mean of the filled values).
"""

import types
import warnings

import keras
import numpy as np
import tensorflow as tf
from keras.src import backend as keras_backend
from tensorflow.compiler.tf2xla.python.xla import dynamic_update_slice as _xla_dynamic_update_slice
from tensorflow.python.ops import control_flow_util

from tf_flashattn.attention import dims_text
from tf_flashattn.attention import dot_product_attention
from tf_flashattn.attention import shape_fits
from tf_flashattn.seeds import next_seed

# Largest head dim the op takes; larger ones take Keras' path.
MAX_HEAD_DIM = 256

_warned = set()


def _warn_once(key, message):
    """Issues `message` as a UserWarning the first time `key` is seen."""
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(message, UserWarning, stacklevel=3)


def _dense_mask_4d(attention_mask):
    """Casts a Keras attention mask ([T, S], [B, T, S] or [B, N, T, S]) to a
    bool mask broadcastable to [B, H, T, S], the way Keras' fused path does."""
    mask = tf.cast(attention_mask, tf.bool)
    while mask.shape.rank < 4:
        mask = tf.expand_dims(mask, axis=-3)
    return mask


def _check_call_masks(layer, query, value, key, query_mask, value_mask, key_mask,
                      attention_mask):
    """Static shape checks of a call's masks, named as the caller named them (the op would
    report its own argument names and the reshaped shapes)."""
    def dims(x):
        shape = getattr(x, "shape", None)
        return None if shape is None else tf.TensorShape(shape)

    q, v, k = dims(query), dims(value), dims(key)
    if q is None or v is None or k is None or None in (q.rank, v.rank, k.rank):
        return
    batch, t_len, s_len = q[0], q[1], k[1]
    for mask, name, want, what in (
            (query_mask, "query_mask", [batch, t_len], "query_len"),
            (value_mask, "value_mask", [v[0], v[1]], "value_len"),
            (key_mask, "key_mask", [k[0], s_len], "key_len")):
        m = dims(mask)
        if m is None or m.rank is None:
            continue
        if not shape_fits(m, want):
            raise ValueError(f"{layer}: `{name}` must have shape [batch, {what}] = "
                             f"{dims_text(want)}; got {tuple(m)}.")
    m = dims(attention_mask)
    if m is None or m.rank is None:
        return
    want = [(-1, s_len, "key_len"), (-2, t_len, "query_len")] + (
        [(0, batch, "batch")] if m.rank >= 3 else [])
    bad = m.rank < 2 or m.rank > 4 or any(
        m[d] is not None and n is not None and m[d] not in (1, n) for d, n, _ in want)
    if bad:
        raise ValueError(f"{layer}: `attention_mask` must broadcast to [batch, query_len, key_len] "
                         f"= [{batch}, {t_len}, {s_len}] (or have shape [batch, num_heads, "
                         f"query_len, key_len]); got {tuple(m)}.")


def _and_masks(*masks):
    """Logical AND of the given [B, S] masks (None entries skipped)."""
    result = None
    for mask in masks:
        if mask is None:
            continue
        mask = tf.cast(mask, tf.bool)
        result = mask if result is None else tf.logical_and(result, mask)
    return result


def fused_attention(
    query,
    key,
    value,
    *,
    scale,
    query_mask=None,
    key_mask=None,
    attention_mask=None,
    is_causal=False,
    sliding_window=None,
    dropout_rate=0.0,
    seed_generator=None,
    training=False,
    uniform_empty_rows=True,
):
    """Runs the attention core of the layers through the fused op.

    Args:
        query: [B, T, H, D] projected queries.
        key: [B, S, Hkv, D] projected keys, H a multiple of Hkv.
        value: [B, S, Hkv, Dv] projected values.
        scale: multiplier of the logits.
        query_mask: bool [B, T] or None (False rows attend to nothing).
        key_mask: bool [B, S] or None (False keys are never attended).
        attention_mask: Keras attention mask ([T, S], [B, T, S] or
            [B, N, T, S]) or None.
        is_causal: query i sees keys j <= i.
        sliding_window: Keras window w (|i - j| < w) or None.
        dropout_rate: attention dropout rate, applied only if `training`.
        seed_generator: `keras.random.SeedGenerator` for the dropout seeds.
        training: Python bool.
        uniform_empty_rows: give rows without any visible key the uniform
            average of `value` over all S keys (Keras' fused path) instead
            of zeros (Keras' softmax path).

    Returns:
        [B, T, H, Dv] attention output.
    """
    mask = None if attention_mask is None else _dense_mask_4d(attention_mask)
    window = None
    if sliding_window is not None:
        window = (sliding_window - 1, sliding_window - 1)
    rate = 0.0
    seed = None
    if training and dropout_rate > 0.0:
        rate = float(dropout_rate)
        seed = next_seed(seed_generator)  # no host wait in eager mode
    # Causal alone never empties a row (row i always sees key 0).
    may_have_empty_rows = uniform_empty_rows and (
        query_mask is not None
        or key_mask is not None
        or mask is not None
        or window is not None
    )
    result = dot_product_attention(
        query,
        key,
        value,
        mask=mask,
        scale=scale,
        is_causal=bool(is_causal),
        dropout_rate=rate,
        seed=seed,
        sliding_window=window,
        query_mask=query_mask,
        key_mask=key_mask,
        return_lse=may_have_empty_rows,
    )
    if not may_have_empty_rows:
        return result
    output, lse = result
    # lse: [B, H, T], -inf where the row saw no key.
    empty = tf.equal(tf.stop_gradient(lse), float("-inf"))
    empty = tf.expand_dims(tf.transpose(empty, [0, 2, 1]), -1)  # [B, T, H, 1]
    # Uniform probabilities over all S keys: the mean of value, [B, 1, Hkv, Dv].
    mean_value = tf.reduce_mean(value, axis=1, keepdims=True)
    groups = query.shape[2] // value.shape[2]
    if groups > 1:
        # Query head h reads key/value head h // groups, as Keras' repeat does.
        mean_value = tf.repeat(mean_value, groups, axis=2)
    mean_value = tf.cast(mean_value, output.dtype)
    return tf.where(empty, mean_value, output)


# ---------------------------------------------------------------------------
# KV cache helpers.


def _cache_index(index, name):
    """`cache_update_index` as a Python int when its value is known when the call is traced (a
    Python or NumPy integer, an eager tensor, a graph constant), otherwise as an int32 scalar
    tensor (e.g. a `tf.while_loop` counter)."""
    if isinstance(index, bool) or isinstance(index, (float, np.floating)):
        raise ValueError(f"{name}: `cache_update_index` must be an integer scalar; got {index!r}.")
    if isinstance(index, (int, np.integer)):
        value = int(index)
    else:
        if isinstance(index, (tf.RaggedTensor, tf.SparseTensor)):
            raise ValueError(f"{name}: `cache_update_index` must be an integer scalar; got a "
                             f"{type(index).__name__}.")
        t = tf.convert_to_tensor(index)
        if not t.dtype.is_integer or t.shape.rank not in (0, None):
            raise ValueError(f"{name}: `cache_update_index` must be an integer scalar; got "
                             f"dtype {t.dtype.name}, shape {t.shape}.")
        static = tf.get_static_value(t)
        if static is None:
            return tf.cast(tf.reshape(t, []), tf.int32)
        value = int(static)
    if value < 0:
        raise ValueError(f"{name}: `cache_update_index` must be >= 0; got {value}.")
    return value


def _write_cache(cache, key, value, index, name):
    """Writes key and value [B, Sn, Hkv, D] at positions [index, index + Sn) of the cache:
    [B, 2, S, Hkv, D] (keys and values stacked), or a pair (key cache, value cache) of
    [B, S, Hkv, D] each. Returns the new cache (of the same form) and the filled lengths [B]
    (index + Sn).

    Under XLA (traced inside `tf.function(jit_compile=True)`): a dynamic-update-slice of the new
    positions, which XLA applies in place to the cache's buffer when the old cache has no other
    use (a loop-carried cache in a decode loop): each step writes only the new rows. Outside
    XLA: a scatter (`tf.tensor_scatter_nd_update`) where its kernel exists for the dtype on every
    device present; else (a GPU with a float16 / bfloat16 cache: TensorFlow has no GPU scatter
    for them) a select over the positions, element-wise on any device. Either way the new cache
    is then a new tensor: TensorFlow may forward the old buffer to the scatter, but in the
    example's decode loop it copies (a memcpy of the cache per layer and step, measured on the
    CPU); the select reads the cache and writes it once. An index past the cache is an error
    from the graph; under XLA asserts are dropped and the dynamic-update-slice clamps the start
    so that the new positions end at the cache's end (they overwrite its last positions)."""
    if isinstance(cache, tuple):
        key_cache, value_cache = cache
        new_keys, lengths = _write_rows(key_cache, key, index, 1, key_cache.shape, name)
        new_values, _ = _write_rows(value_cache, value, index, 1, key_cache.shape, name)
        return (new_keys, new_values), lengths
    block = tf.stack([key, value], axis=1)  # [B, 2, Sn, Hkv, D]
    return _write_rows(cache, block, index, 2, cache.shape, name)


def _write_rows(buffer, rows, index, axis, cache_shape, name):
    """`rows` written into `buffer` at [index, index + Sn) along `axis` (the positions axis of
    both; every other dim of `rows` spans the buffer's). Returns (new buffer, lengths [B])."""
    s_max, s_new = tf.shape(buffer)[axis], tf.shape(rows)[axis]
    static_s, static_new = buffer.shape[axis], rows.shape[axis]
    end = index + s_new
    checks = []
    if isinstance(index, int) and static_s is not None and static_new is not None:
        if index + static_new > static_s:
            raise ValueError(f"{name}: the {static_new} new key/value positions at "
                             f"`cache_update_index` {index} do not fit in the cache of length "
                             f"{static_s} (cache shape {tuple(cache_shape)}).")
    else:
        checks.append(tf.debugging.assert_less_equal(
            end, s_max, message=f"{name}: `cache_update_index` + the number of new positions "
                                f"exceeds the cache length (dim {axis} of `cache`)"))
    with tf.control_dependencies(checks):
        rows = tf.identity(rows)
    rank = rows.shape.rank
    positions = tf.range(s_max)
    if _in_xla_context():
        start = [0] * rank
        start[axis] = tf.cast(index, tf.int32)
        new_buffer = _xla_dynamic_update_slice(buffer, rows, tf.stack(start))
    elif _scatter_writes(buffer.dtype):
        # Index tuples over the dims up to the positions axis: [B, (2,) Sn, axis + 1].
        ranges = [tf.range(tf.shape(rows)[d]) for d in range(axis)] + [index + tf.range(s_new)]
        grid = tf.meshgrid(*ranges, indexing="ij")
        new_buffer = tf.tensor_scatter_nd_update(buffer, tf.stack(grid, axis=-1), rows)
    else:
        if static_new == 1:  # a decode step: the select broadcasts the one new position
            spread = rows
        else:
            source = tf.clip_by_value(positions - index, 0, tf.maximum(s_new - 1, 0))
            spread = tf.gather(rows, source, axis=axis)  # the buffer's shape
        inside = tf.logical_and(positions >= index, positions < end)
        shape = [1] * rank
        shape[axis] = -1
        new_buffer = tf.where(tf.reshape(inside, shape), spread, buffer)
    lengths = tf.fill(tf.shape(buffer)[:1], tf.cast(end, tf.int32))
    return new_buffer, lengths


def _in_xla_context():
    """Whether the graph being built is compiled by XLA (inside `tf.function(jit_compile=True)`
    or an XLA compilation context)."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def _scatter_writes(dtype):
    """Whether `_write_cache` scatters: TensorFlow's GPU TensorScatterUpdate has no float16 or
    bfloat16 kernel (it would run on the CPU, copying the cache there and back)."""
    return dtype in (tf.float32, tf.float64) or not tf.config.list_logical_devices("GPU")


def _split_cache(cache):
    """(keys, values) [B, S, Hkv, D] of a cache [B, 2, S, Hkv, D] (or of a pair: as they are).
    With a batch of 1 (static) they are slices along the first dim of a reshape, which
    TensorFlow hands out without copying (the cache is read once per step, by the op);
    otherwise strided copies. Under XLA both are copies (XLA gives a custom call no views of a
    buffer): a pair avoids them."""
    if isinstance(cache, tuple):
        return cache
    if cache.shape[0] == 1:
        pairs = tf.reshape(cache, tf.concat([[2], tf.shape(cache)[2:]], axis=0))
        return pairs[0:1], pairs[1:2]
    return cache[:, 0], cache[:, 1]


def _filled_mean(value, lengths, groups, dtype):
    """Mean of value [B, S, Hkv, Dv] over the filled keys (j < lengths[b]; all S when lengths is
    None), repeated for each query head of a group: [B, 1, Hq, Dv] in `dtype`."""
    v = tf.cast(value, tf.float32)
    if lengths is None:
        mean = tf.reduce_mean(v, axis=1, keepdims=True)
    else:
        valid = tf.range(tf.shape(v)[1])[None, :] < lengths[:, None]  # [B, S]
        total = tf.reduce_sum(tf.where(valid[:, :, None, None], v, 0.0), axis=1, keepdims=True)
        count = tf.cast(tf.maximum(lengths, 1), tf.float32)[:, None, None, None]
        mean = total / count
    if groups > 1:
        mean = tf.repeat(mean, groups, axis=2)
    return tf.cast(mean, dtype)


def _merge_lse(out1, lse1, out2, lse2):
    """Attention over two disjoint key sets, each normalized on its own (outputs [B, T, H, Dv],
    log-sum-exps [B, H, T]), merged into the attention over their union (the log-sum-exp merge
    of the online softmax). Rows empty in both give 0 and -inf."""
    top = tf.stop_gradient(tf.maximum(lse1, lse2))  # the result does not depend on it
    top = tf.where(tf.math.is_finite(top), top, 0.0)
    w1, w2 = tf.exp(lse1 - top), tf.exp(lse2 - top)
    total = w1 + w2
    lse = top + tf.math.log(total)

    def rows(w):  # [B, H, T] -> [B, T, H, 1]
        return tf.transpose(w, [0, 2, 1])[..., None]

    out = tf.math.divide_no_nan(rows(w1) * tf.cast(out1, tf.float32)
                                + rows(w2) * tf.cast(out2, tf.float32), rows(total))
    return tf.cast(out, out1.dtype), lse


def _positions_mask(t_len, s_len, offset, causal, window):
    """Bool [T, S]: query i (at position offset + i) may see key j (causal: j <= offset + i;
    Keras window w: |offset + i - j| < w)."""
    rows = offset + tf.range(t_len)[:, None]
    cols = tf.range(s_len)[None, :]
    mask = tf.ones([t_len, s_len], tf.bool)
    if causal:
        mask = tf.logical_and(mask, cols <= rows)
    if window is not None:
        mask = tf.logical_and(mask, tf.abs(rows - cols) < window)
    return mask


class _FlashLayer:
    """What both layers share: `call` with its fallback to Keras, and the fused core.

    A subclass names the Keras attributes that differ between the two Keras layers
    (`_FLASH_ATTRS`: scale, window, dropout, use_gate), says when a call must take
    Keras' path (`_fallback_reason`), and gives the projections around the core
    (`_fused_call`).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Keras may compile the model with XLA (jit_compile="auto" does on GPU machines): the op
        # lowers to XLA custom calls running the same kernels (cc/ops/flash_attention_xla.cc),
        # tested on XLA:CPU in CI and on XLA:GPU on the H200 (tests/test_xla.py). Set
        # layer.supports_jit = False to keep a model containing it out of XLA.
        self.supports_jit = True

    def _flash_attr(self, name):
        return getattr(self, self._FLASH_ATTRS[name])

    def _seed_generator(self):
        return getattr(self._dropout_layer, "seed_generator", None)

    def _fused(self, query, key, value, *, attention_mask, use_causal_mask, training,
               query_mask=None, key_mask=None, sliding_window=None):
        """The op on projected heads: query [B, T, Hq, h], key [B, S, Hkv, h],
        value [B, S, Hkv, hv] -> [B, T, Hq, hv]."""
        return fused_attention(
            query,
            key,
            value,
            scale=self._flash_attr("scale"),
            query_mask=query_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            is_causal=use_causal_mask,
            sliding_window=sliding_window,
            dropout_rate=self._flash_attr("dropout"),
            seed_generator=self._seed_generator(),
            training=training,
            uniform_empty_rows=self._flash_attr("dropout") == 0.0,
        )

    def _fused_or_keras(self, use_keras, query, key, value, attention_mask, training,
                        use_causal_mask, **keras_kwargs):
        """Both layers' `_compute_attention` (Keras' override point): Keras' own core where
        `use_keras`, otherwise the fused one. Returns (output, None) as Keras does without
        scores."""
        if use_keras:
            return super(self._flash_class, self)._compute_attention(
                query, key, value, attention_mask=attention_mask, training=training,
                use_causal_mask=use_causal_mask, **keras_kwargs)
        output = self._fused(query, key, value, attention_mask=attention_mask,
                             use_causal_mask=use_causal_mask, training=training)
        return output, None

    def _project_and_attend(self, query, value, key, query_mask, value_mask,
                            key_mask, attention_mask, training, use_causal_mask):
        """Projections, the fused core on O(N) masks, the gate and the output."""
        if self._flash_attr("use_gate"):
            gate = self._gate_dense(query)  # [B, T, Hq, hv]
        query = self._query_dense(query)  # [B, T, Hq, h]
        key = self._key_dense(key)  # [B, S, Hkv, h]
        value = self._value_dense(value)  # [B, S, Hkv, hv]
        output = self._fused(
            query,
            key,
            value,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            training=training,
            query_mask=_and_masks(query_mask),
            key_mask=_and_masks(value_mask, key_mask),
            sliding_window=self._flash_attr("window"),
        )
        if self._flash_attr("use_gate"):
            output = keras.ops.multiply(output, gate)
        return self._output_dense(output)

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
    ):
        keras_path = type(self)._compute_attention is not self._flash_class._compute_attention
        name = self._flash_class.__name__
        if cache is not None or cache_update_index is not None:
            return self._cached_call(
                query, value, key, query_mask, value_mask, key_mask, attention_mask,
                return_attention_scores, training, use_causal_mask, cache, cache_update_index,
                keras_path)
        reason = self._fallback_reason(query, value, key, return_attention_scores)
        if reason is not None:
            _warn_once(
                (name, reason),
                f"{name}: {reason}; using Keras' materializing attention for such calls.",
            )
        if keras_path or reason is not None:
            return super().call(
                query,
                value,
                key=key,
                query_mask=query_mask,
                value_mask=value_mask,
                key_mask=key_mask,
                attention_mask=attention_mask,
                return_attention_scores=return_attention_scores,
                training=training,
                use_causal_mask=use_causal_mask,
            )
        key = value if key is None else key
        _check_call_masks(name, query, value, key, query_mask, value_mask, key_mask,
                          attention_mask)
        return self._fused_call(query, value, key, query_mask, value_mask, key_mask,
                                attention_mask, training, use_causal_mask)


    # -----------------------------------------------------------------------
    # KV cache (the form of KerasHub's CachedMultiHeadAttention).

    def compute_output_spec(self, query, value, key=None, query_mask=None, value_mask=None,
                            key_mask=None, attention_mask=None, return_attention_scores=False,
                            training=None, use_causal_mask=False, cache=None,
                            cache_update_index=None):
        spec = super().compute_output_spec(
            query, value, key=key, query_mask=query_mask, value_mask=value_mask,
            key_mask=key_mask, attention_mask=attention_mask,
            return_attention_scores=return_attention_scores, training=training,
            use_causal_mask=use_causal_mask)
        if cache is None:
            return spec
        if isinstance(cache, (tuple, list)):
            cache_spec = tuple(keras.KerasTensor(c.shape, dtype=c.dtype) for c in cache)
        else:
            cache_spec = keras.KerasTensor(cache.shape, dtype=cache.dtype)
        return (*spec, cache_spec) if isinstance(spec, tuple) else (spec, cache_spec)

    def _cached_call(self, query, value, key, query_mask, value_mask, key_mask, attention_mask,
                     return_attention_scores, training, use_causal_mask, cache, index,
                     keras_path):
        """`call` with `cache` [B, 2, S, Hkv, D] (keys and values stacked): writes the projected
        key/value of this call at [index, index + Sn) (nothing when index is None), attends the
        query (query i at position index + i) over the filled keys, returns
        (output[, scores], new_cache)."""
        name = self._flash_class.__name__
        if cache is None:
            raise ValueError(f"{name}: `cache_update_index` needs a `cache`; got cache=None, "
                             f"cache_update_index={index!r}.")
        if isinstance(cache, (tf.RaggedTensor, tf.SparseTensor)):
            raise ValueError(f"{name}: `cache` must be a dense tensor; got a "
                             f"{type(cache).__name__}.")
        key = value if key is None else key
        ranks = {len(t.shape) for t in (query, value, key)}
        if ranks != {3} or tuple(getattr(self, "_attention_axes", None) or (1,)) != (1,):
            raise ValueError(f"{name}: a `cache` needs inputs of rank 3 [batch, length, "
                             f"features] and the default attention_axes; got query "
                             f"{tuple(query.shape)}, value {tuple(value.shape)}.")
        kv_heads, head_dim = self._cache_layout()
        if isinstance(cache, (tuple, list)):
            cache = self._check_cache_pair(cache, query, kv_heads, head_dim)
            batch_len = [cache[0].shape[0], cache[0].shape[1]]
        else:
            cache = tf.convert_to_tensor(cache)
            want = [query.shape[0], 2, None, kv_heads, head_dim]
            if not cache.dtype.is_floating or not shape_fits(cache.shape, want):
                raise ValueError(f"{name}: `cache` must be a float tensor of shape [batch, 2, "
                                 f"max_len, num_kv_heads, head_dim] = {dims_text(want)} (keys "
                                 f"and values stacked on dim 1), or a pair (keys, values) of "
                                 f"[batch, max_len, num_kv_heads, head_dim]; got "
                                 f"{cache.dtype.name} {tuple(cache.shape)}.")
            batch_len = [cache.shape[0], cache.shape[2]]
        if index is not None:
            index = _cache_index(index, name)
        query_mask = self._take_query_mask(query, value, key, query_mask)
        # The key masks and the attention mask cover the cache (key_len = its max_len).
        cached_keys = types.SimpleNamespace(shape=tf.TensorShape(batch_len + [None]))
        _check_call_masks(f"{name} (with a cache, key_len is the cache's max_len)",
                          query, cached_keys, cached_keys, query_mask, value_mask, key_mask,
                          attention_mask)

        use_gate = self._flash_attr("use_gate")
        if use_gate:
            gate = self._gate_dense(query)
        query_heads = self._query_dense(query)  # [B, T, Hq, D]
        if index is None:  # a fixed cache (e.g. cross-attention): attend over all of it
            new_cache, lengths = cache, None
            new_keys = new_values = None
        else:
            dtype = (cache[0] if isinstance(cache, tuple) else cache).dtype
            new_keys = tf.cast(self._key_dense(key), dtype)  # [B, Sn, Hkv, D]
            new_values = tf.cast(self._value_dense(value), dtype)
            new_cache, lengths = _write_cache(cache, new_keys, new_values, index, name)
        keys, values = _split_cache(new_cache)
        key_mask = _and_masks(value_mask, key_mask)
        query_mask = _and_masks(query_mask)

        reason = self._fallback_reason(query, value, key, return_attention_scores)
        if reason is not None:
            _warn_once((name, reason),
                       f"{name}: {reason}; using Keras' materializing attention for such calls.")
        scores = None
        if keras_path or reason is not None:
            output, scores = self._cached_materialized(
                query_heads, keys, values, index, lengths, query_mask, key_mask,
                attention_mask, use_causal_mask, training, return_attention_scores)
        else:
            output = self._cached_fused(query_heads, keys, values, new_keys, new_values, index,
                                        lengths, query_mask, key_mask, attention_mask,
                                        use_causal_mask, training)
        if use_gate:
            output = keras.ops.multiply(output, gate)
        output = self._output_dense(output)
        if query_mask is not None and self._flash_class is FlashMultiHeadAttention:
            keras_backend.set_keras_mask(output, query_mask)
        if return_attention_scores:
            return output, scores, new_cache
        return output, new_cache

    def _check_cache_pair(self, cache, query, kv_heads, head_dim):
        """A cache given as (keys, values): both dense float tensors of one dtype and shape
        [B, S, Hkv, D]. Returns them as a tuple of tensors."""
        name = self._flash_class.__name__
        if len(cache) != 2:
            raise ValueError(f"{name}: a `cache` given as a sequence must be a pair (keys, "
                             f"values); got {len(cache)} items.")
        if any(isinstance(c, (tf.RaggedTensor, tf.SparseTensor)) for c in cache):
            raise ValueError(f"{name}: `cache` must hold dense tensors.")
        keys, values = (tf.convert_to_tensor(c) for c in cache)
        want = [query.shape[0], None, kv_heads, head_dim]
        if (not keys.dtype.is_floating or keys.dtype != values.dtype
                or not shape_fits(keys.shape, want) or not shape_fits(values.shape, want)
                or not keys.shape.is_compatible_with(values.shape)):
            raise ValueError(f"{name}: a `cache` pair (keys, values) must hold two float tensors "
                             f"of one dtype and shape [batch, max_len, num_kv_heads, head_dim] = "
                             f"{dims_text(want)}; got {keys.dtype.name} {tuple(keys.shape)} and "
                             f"{values.dtype.name} {tuple(values.shape)}.")
        return keys, values

    def _cached_fused(self, query, keys, values, new_keys, new_values, index, lengths,
                      query_mask, key_mask, attention_mask, causal, training):
        """The cached call's core on the op. The unfilled tail is cut by `key_lengths`; causality
        needs the query's position `index`, which the op takes only as a Python int
        (`causal_offset`). So:

        - index known when traced (prefill at 0, Python loops): is_causal with causal_offset=index;
        - symbolic index, one query row (a decode step): key_lengths = index + 1 is exactly the
          causal mask; a sliding window becomes an O(S) key_mask;
        - symbolic index, T > 1 rows, causal: two calls merged by their log-sum-exps, the prefix
          [0, index) unmasked and the new block causally against itself (still O(N));
        - symbolic index, T > 1, with a sliding window or (causal) with an `attention_mask`: a
          dense [T, S] mask of the positions, the only case that builds one.
        """
        rate = float(self._flash_attr("dropout")) if training else 0.0
        scale = self._flash_attr("scale")
        window = self._flash_attr("window")
        dense = None if attention_mask is None else _dense_mask_4d(attention_mask)
        offset = 0 if index is None else index
        uniform = self._flash_attr("dropout") == 0.0 and (
            query_mask is not None or key_mask is not None or dense is not None
            or window is not None)

        def run(k, v, *, need_lse, key_lengths=None, key_mask=None, mask=None, is_causal=False,
                causal_offset=0, sliding_window=None):
            seed = None
            if rate > 0.0:
                seed = next_seed(self._seed_generator())
            result = dot_product_attention(
                query, k, v, mask=mask, scale=scale, is_causal=is_causal,
                causal_offset=causal_offset, sliding_window=sliding_window,
                key_lengths=key_lengths, query_mask=query_mask, key_mask=key_mask,
                dropout_rate=rate, seed=seed, return_lse=need_lse)
            return result if need_lse else (result, None)

        s_len = tf.shape(keys)[1]
        if isinstance(offset, int):
            op_window = None if window is None else (window - 1, window - 1)
            output, lse = run(keys, values, need_lse=uniform, key_lengths=lengths,
                              key_mask=key_mask, mask=dense, is_causal=causal,
                              causal_offset=offset, sliding_window=op_window)
        elif query.shape[1] == 1:
            row_lengths = tf.minimum(lengths, offset + 1) if causal else lengths
            if window is not None:
                near = tf.abs(tf.range(s_len) - offset) < window  # [S]
                near = tf.broadcast_to(near[None], [tf.shape(keys)[0], s_len])
                key_mask = _and_masks(key_mask, near)
            output, lse = run(keys, values, need_lse=uniform, key_lengths=row_lengths,
                              key_mask=key_mask, mask=dense)
        elif not causal and window is None:
            output, lse = run(keys, values, need_lse=uniform, key_lengths=lengths,
                              key_mask=key_mask, mask=dense)
        elif window is None and dense is None:
            prefix = tf.fill(tf.shape(lengths), offset)
            out1, lse1 = run(keys, values, need_lse=True, key_lengths=prefix, key_mask=key_mask)
            block_mask = None if key_mask is None else tf.slice(
                key_mask, [0, offset], [-1, tf.shape(new_keys)[1]])
            out2, lse2 = run(new_keys, new_values, need_lse=True, key_mask=block_mask,
                             is_causal=True)
            output, lse = _merge_lse(out1, lse1, out2, lse2)
        else:
            positions = _positions_mask(tf.shape(query)[1], s_len, offset, causal, window)
            mask = positions[None, None]
            if dense is not None:
                mask = tf.logical_and(mask, dense)
            output, lse = run(keys, values, need_lse=uniform, key_lengths=lengths,
                              key_mask=key_mask, mask=mask)
        if not uniform:
            return output
        # Rows that see no key: the mean of the filled values (what the layer without a cache
        # gives on the sequence so far), as in `fused_attention`.
        empty = tf.equal(tf.stop_gradient(lse), float("-inf"))
        empty = tf.expand_dims(tf.transpose(empty, [0, 2, 1]), -1)  # [B, T, H, 1]
        fill = _filled_mean(values, lengths, query.shape[2] // values.shape[2], output.dtype)
        return tf.where(empty, fill, output)

    def _cached_materialized(self, query, keys, values, index, lengths, query_mask, key_mask,
                             attention_mask, causal, training, return_attention_scores):
        """The cached call on `_compute_attention` (Keras' materializing core, or a subclass's)
        with a dense [B, T, S] mask of the filled, visible positions. Rows with no visible key
        get the same values as on the fused path."""
        batch, t_len, s_len = tf.shape(query)[0], tf.shape(query)[1], tf.shape(keys)[1]
        offset = 0 if index is None else index
        mask = _positions_mask(t_len, s_len, offset, causal, self._flash_attr("window"))[None]
        if lengths is not None:
            mask = tf.logical_and(mask, tf.range(s_len)[None, None, :] < lengths[:, None, None])
        if key_mask is not None:
            mask = tf.logical_and(mask, key_mask[:, None, :])
        if query_mask is not None:
            mask = tf.logical_and(mask, query_mask[:, :, None])
        mask = tf.broadcast_to(mask, [batch, t_len, s_len])
        if attention_mask is not None:
            user = tf.cast(attention_mask, tf.bool)
            if user.shape.rank == 4:
                mask = mask[:, None]
            mask = tf.logical_and(mask, user)
        groups = query.shape[2] // keys.shape[2]
        if self._flash_class is FlashGroupQueryAttention:
            if groups > 1:  # Keras' GroupQueryAttention repeats before its core
                keys = tf.repeat(keys, groups, axis=2)
                values_rep = tf.repeat(values, groups, axis=2)
            else:
                values_rep = values
            self._return_attention_scores = return_attention_scores
            output, scores = self._compute_attention(query, keys, values_rep,
                                                     attention_mask=mask, training=training)
        else:
            output, scores = self._compute_attention(query, keys, values, mask, training,
                                                     return_attention_scores)
        mask4 = mask if mask.shape.rank == 4 else mask[:, None]
        empty = tf.logical_not(tf.reduce_any(mask4, axis=-1))  # [B, N or 1, T]
        empty = tf.expand_dims(tf.transpose(empty, [0, 2, 1]), -1)  # [B, T, N or 1, 1]
        if self._flash_attr("dropout") == 0.0:
            fill = _filled_mean(values, lengths, groups, output.dtype)
        else:
            fill = tf.zeros([], output.dtype)
        return tf.where(empty, fill, output), scores


_SCORES_REASON = "return_attention_scores=True materializes the [B, H, T, S] scores"


@keras.saving.register_keras_serializable(package="tf_flashattn")
class FlashMultiHeadAttention(_FlashLayer, keras.layers.MultiHeadAttention):
    """`keras.layers.MultiHeadAttention` with a fused, O(N)-memory core.

    Same arguments, weights and config as `keras.layers.MultiHeadAttention`
    (see the module docstring for how masks, dropout and fallbacks map).
    `flash_attention` is accepted for compatibility and otherwise ignored.
    """

    # Where this Keras layer keeps what _FlashLayer needs.
    _FLASH_ATTRS = dict(scale="_inverse_sqrt_key_dim", window="_sliding_window",
                        dropout="_dropout", use_gate="_use_gate")

    def _fallback_reason(self, query, value, key, return_attention_scores):
        if return_attention_scores:
            return _SCORES_REASON
        ranks = {len(query.shape), len(value.shape)}
        if key is not None:
            ranks.add(len(key.shape))
        if ranks != {3} or tuple(self._attention_axes) != (1,):
            return (
                "inputs of rank other than 3 or non-default attention_axes "
                f"(attention_axes={self._attention_axes}) are not fused"
            )
        if max(self._key_dim, self._value_dim) > MAX_HEAD_DIM:
            return (
                f"head dims above {MAX_HEAD_DIM} (key_dim={self._key_dim}, "
                f"value_dim={self._value_dim}) are not fused"
            )
        return None

    def _cache_layout(self):
        """(num_kv_heads, head_dim) of the cache."""
        if self._key_dim != self._value_dim:
            raise ValueError(f"FlashMultiHeadAttention: a `cache` stacks keys and values, so "
                             f"key_dim and value_dim must be equal; got key_dim={self._key_dim}, "
                             f"value_dim={self._value_dim}.")
        return self._num_heads, self._key_dim

    def _take_query_mask(self, query, value, key, query_mask):
        # Like Keras: the query mask is read from the tensor, and the input
        # masks are cleared so that the projections do not propagate them.
        query_mask = keras_backend.get_keras_mask(query)
        for t in (query, value, key):
            keras_backend.set_keras_mask(t, None)
        return query_mask

    def _fused_call(self, query, value, key, query_mask, value_mask, key_mask,
                    attention_mask, training, use_causal_mask):
        query_mask = self._take_query_mask(query, value, key, query_mask)
        output = self._project_and_attend(query, value, key, query_mask, value_mask,
                                          key_mask, attention_mask, training,
                                          use_causal_mask)
        if query_mask is not None:
            keras_backend.set_keras_mask(output, query_mask)
        return output

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        """Keras' override point, fused unless scores or extra axes are
        asked for. Shapes as in Keras: query [B, T, N, key_dim], key
        [B, S, N, key_dim], value [B, S, N, value_dim], attention_mask
        broadcastable to [B, T, S]."""
        use_keras = (
            return_attention_scores
            or len(query.shape) != 4
            or tuple(self._attention_axes) != (1,)
            or max(query.shape[-1], value.shape[-1]) > MAX_HEAD_DIM
        )
        return self._fused_or_keras(use_keras, query, key, value, attention_mask, training,
                                    use_causal_mask,
                                    return_attention_scores=return_attention_scores)


FlashMultiHeadAttention._flash_class = FlashMultiHeadAttention


@keras.saving.register_keras_serializable(package="tf_flashattn")
class FlashGroupQueryAttention(_FlashLayer, keras.layers.GroupQueryAttention):
    """`keras.layers.GroupQueryAttention` with a fused core that reads each
    key/value head in place for its group of query heads (never repeated).

    Same arguments, weights and config as the Keras layer; masks, dropout and
    the `return_attention_scores=True` fallback as in the module docstring.
    """

    _FLASH_ATTRS = dict(scale="_inverse_sqrt_head_dim", window="sliding_window",
                        dropout="dropout", use_gate="use_gate")

    def _fallback_reason(self, query, value, key, return_attention_scores):
        if return_attention_scores:
            return _SCORES_REASON
        if self.head_dim > MAX_HEAD_DIM:
            return (
                f"head dims above {MAX_HEAD_DIM} (head_dim={self.head_dim}) "
                "are not fused"
            )
        return None

    def _cache_layout(self):
        """(num_kv_heads, head_dim) of the cache."""
        return self.num_key_value_heads, self.head_dim

    def _take_query_mask(self, query, value, key, query_mask):
        return query_mask

    def _fused_call(self, query, value, key, query_mask, value_mask, key_mask,
                    attention_mask, training, use_causal_mask):
        self._return_attention_scores = False
        return self._project_and_attend(query, value, key, query_mask, value_mask,
                                        key_mask, attention_mask, training,
                                        use_causal_mask)

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        use_causal_mask=False,
    ):
        """Keras' override point: fused unless scores are asked for.
        query [B, T, Hq, h], key/value [B, S, Hkv or Hq, h]."""
        use_keras = self._return_attention_scores or self.head_dim > MAX_HEAD_DIM
        return self._fused_or_keras(use_keras, query, key, value, attention_mask, training,
                                    use_causal_mask)


FlashGroupQueryAttention._flash_class = FlashGroupQueryAttention
