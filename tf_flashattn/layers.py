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
"""

import warnings

import keras
import tensorflow as tf
from keras.src import backend as keras_backend

from tf_flashattn.attention import dims_text
from tf_flashattn.attention import dot_product_attention
from tf_flashattn.attention import shape_fits

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
        seed = tf.cast(seed_generator.next(), tf.int64)
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
    ):
        keras_path = type(self)._compute_attention is not self._flash_class._compute_attention
        reason = self._fallback_reason(query, value, key, return_attention_scores)
        name = self._flash_class.__name__
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

    def _fused_call(self, query, value, key, query_mask, value_mask, key_mask,
                    attention_mask, training, use_causal_mask):
        # Like Keras: the query mask is read from the tensor, and the input
        # masks are cleared so that the projections do not propagate them.
        query_mask = keras_backend.get_keras_mask(query)
        for t in (query, value, key):
            keras_backend.set_keras_mask(t, None)
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
