"""`dot_product_attention`: a drop-in for `keras.ops.dot_product_attention` on TensorFlow.

Same positional arguments, layout, mask semantics and causal convention as Keras, computed by
the FlashAttention op: the [B, H, Tq, Tk] score matrix is never written to memory.
"""
import math

import numpy as np
import tensorflow as tf

from tf_flashattn import _ops

_FLOAT_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
_ATTRS = ("scale", "softcap", "causal", "causal_offset", "window_left", "window_right",
          "dropout_rate")


_ABSENT_EAGER = {}


# Eager calls by signature: their checked attributes and absent-input placeholders, so that a
# repeated eager call (a training or decoding loop run eagerly) skips the Python checks, which cost
# several times the op's own dispatch. The optional tensor inputs may take part when they already
# are what the checked path would pass on (eager tensors of the op's dtype and rank): their shapes
# are part of the signature and the tensors of each call are used.
_EAGER_CALLS = {}

# Optional tensor inputs in the op's order (after query, key, value): name, dtype (None: the
# query's), rank. A lengths input is also range-checked at every call when its values are on the
# host (as the checked path does).
_OPTIONAL = (("mask", tf.bool, 4), ("bias", None, 4), ("query_lengths", tf.int32, 1),
             ("key_lengths", tf.int32, 1), ("query_mask", tf.bool, 2), ("key_mask", tf.bool, 2))


def _eager_tensor(x):
    """x as an eager tensor when it is one or a variable (read as a matmul reads it), else None."""
    if isinstance(x, tf.__internal__.EagerTensor):
        return x
    if isinstance(x, tf.Variable):
        t = tf.convert_to_tensor(x)
        return t if isinstance(t, tf.__internal__.EagerTensor) else None
    return None


def _eager_signature(query, key, value, optional, *settings):
    """A hashable key of an eager call's inputs (same-dtype eager tensors; the optional tensor
    inputs, each None or an eager tensor of the op's dtype and rank) and Python settings, or None
    when the call must take the checked path."""
    if not query.dtype == key.dtype == value.dtype:
        return None
    # Shapes through EagerTensor._shape_tuple() (a plain tuple from C++), not TensorShape: this
    # runs at every eager call, and building TensorShapes cost about as much as the op's dispatch.
    opt = []
    for (name, dtype, rank), t in zip(_OPTIONAL, optional):
        if t is None:
            opt.append(None)
            continue
        if not isinstance(t, tf.__internal__.EagerTensor) or t.dtype != (dtype or query.dtype):
            return None
        shape = t._shape_tuple()
        if len(shape) != rank:
            return None
        opt.append(shape)
    sig = (query._shape_tuple(), key._shape_tuple(), value._shape_tuple(), query.dtype,
           _eager_device(), tuple(opt)) + tuple((type(x), x) for x in settings)
    try:
        hash(sig)
    except TypeError:  # e.g. a list for sliding_window: the checked path
        return None
    return sig


def _absent(dtype):
    """The placeholder of an absent optional input (the seed without dropout included): a tensor of
    shape [0]. Eagerly, one tensor per (dtype, device) is made once and reused: a new one per call
    would cost an op (and a copy to the GPU) at every call."""
    if not tf.executing_eagerly():
        return tf.zeros([0], dtype)
    key = (dtype, _eager_device())
    t = _ABSENT_EAGER.get(key)
    if t is None:
        t = _ABSENT_EAGER[key] = tf.zeros([0], dtype)
    return t


def _eager_device():
    from tensorflow.python.eager import context
    return context.context().device_name


def _static_dim(t, i):
    return t.shape[i] if t.shape.rank is not None else None


def _check_rank4(t, name, layout):
    if t.shape.rank is not None and t.shape.rank != 4:
        raise ValueError(f"`{name}` must be rank 4 {layout}; got shape {t.shape}.")


def _to_rank4(t, name, full):
    """Left-pads a broadcastable mask/bias to rank 4 and checks it against [B, H, Tq, Tk]."""
    rank = t.shape.rank
    if rank is None:
        raise ValueError(f"`{name}` must have a known rank (at most 4).")
    if rank > 4:
        raise ValueError(f"`{name}` must be broadcastable to [batch, num_heads, query_len, "
                         f"key_len] = {full}; got rank {rank} shape {t.shape}.")
    if rank < 4:
        t = tf.reshape(t, [1] * (4 - rank) + ([] if rank == 0 else tf.unstack(tf.shape(t))))
    for d, (n, f) in enumerate(zip(t.shape, full)):
        if n is not None and f is not None and n not in (1, f):
            raise ValueError(f"`{name}` of shape {t.shape} does not broadcast to [batch, "
                             f"num_heads, query_len, key_len] = {full} (dim {d} is {n}).")
    return t


def _seed_tensor(seed):
    seed = tf.convert_to_tensor(seed)
    if not seed.dtype.is_integer:
        raise ValueError(f"`seed` must be an integer tensor of shape [2]; got dtype {seed.dtype}.")
    seed = tf.cast(seed, tf.int64)
    if seed.shape.rank == 0:
        seed = tf.stack([seed, tf.constant(0, tf.int64)])
    if seed.shape.rank is not None and (seed.shape.rank != 1 or seed.shape[0] not in (None, 2)):
        raise ValueError(f"`seed` must be a scalar or have shape [2]; got shape {seed.shape}.")
    return seed


def _window(sliding_window):
    if sliding_window is None:
        return -1, -1
    bad = ValueError("`sliding_window` must be None, an int w >= 0 (keys within w positions of "
                     f"the diagonal), or a pair (left, right) of such ints or None; got "
                     f"{sliding_window!r}.")
    sliding_window = _int_like(sliding_window)
    pair = (sliding_window, sliding_window) if isinstance(sliding_window, int) else sliding_window
    try:
        left, right = (_int_like(w) for w in pair)
    except (TypeError, ValueError):
        raise bad from None
    for w in (left, right):
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 0):
            raise bad
    return (-1 if left is None else left), (-1 if right is None else right)


def _int_like(x):
    """x as a Python int if it is an integer scalar whose value is known now (a Python or numpy
    integer, a 0-d integer array, an eager integer scalar tensor); otherwise x unchanged."""
    if isinstance(x, tf.Tensor) and x.shape.rank == 0 and x.dtype.is_integer and hasattr(x, "numpy"):
        x = x.numpy()
    if isinstance(x, np.ndarray) and x.shape == () and np.issubdtype(x.dtype, np.integer):
        x = x.item()
    if isinstance(x, np.integer):
        x = int(x)
    return x


def _offset(x):
    """causal_offset as a Python int (it becomes an attribute of the op)."""
    x = _int_like(x)
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(
            f"`causal_offset` must be a Python int (it becomes an attribute of the op, fixed when "
            f"a tf.function is traced); got {x!r}. For an offset known only at run time, express "
            f"it with `key_lengths` / `query_lengths` or a dense `mask` instead.")
    return x


def _number(x, name):
    """A Python number for an op attribute (tensors cannot be attributes)."""
    numpy_scalar = isinstance(x, (np.generic, np.ndarray)) and np.shape(x) == ()
    if isinstance(x, bool) or not (isinstance(x, (int, float)) or numpy_scalar):
        raise ValueError(f"`{name}` must be a Python number (it becomes an attribute of the op); "
                         f"got {x!r}.")
    return float(x)


def _host_values(x):
    """x's values as a NumPy array when they are on the host already (a Python sequence, a NumPy
    array, an eager tensor in CPU memory); None otherwise (reading a GPU tensor would wait for
    the GPU)."""
    if isinstance(x, (list, tuple, np.ndarray, np.generic, int)):
        return np.asarray(x)
    if isinstance(x, tf.Tensor) and hasattr(x, "numpy") and x.device.endswith("CPU:0"):
        return x.numpy()
    return None


def _lengths(x, name, limit):
    """Lengths as int32. Values given from Python or NumPy (or eager tensors on the CPU) are
    range-checked here against `limit` (the static query_len / key_len), before any op runs;
    the op checks the others (under XLA the kernels clamp them)."""
    values = _host_values(x) if limit is not None else None
    if values is not None and values.size and np.issubdtype(values.dtype, np.integer):
        _check_range(values, name, limit)
    t = _tensor(x, name)
    if not t.dtype.is_integer:
        raise ValueError(f"`{name}` must be an integer tensor of shape [batch]; got dtype "
                         f"{t.dtype.name}.")
    if t.dtype.size > 4 or t.dtype.is_unsigned:
        # Saturate instead of wrapping modulo 2^32: a length past int32 stays out of range and is
        # reported by the op (under XLA: clamped to [0, T], as every out-of-range length).
        t = tf.minimum(t, tf.cast(2**31 - 1, t.dtype))
        if not t.dtype.is_unsigned:
            t = tf.maximum(t, tf.cast(-2**31, t.dtype))
    return tf.cast(t, tf.int32)


def _check_range(values, name, limit):
    bad = np.flatnonzero((values < 0) | (values > limit))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{name}[{i}] = {values.reshape(-1)[i]} is out of range [0, "
                         f"{limit}] (`{name}` counts positions along its axis).")


def _tensor(x, name):
    """x as a dense tf.Tensor; ragged and sparse tensors are refused by name."""
    if isinstance(x, (tf.RaggedTensor, tf.SparseTensor)):
        raise TypeError(f"`{name}` must be a dense tensor; got a {type(x).__name__} (pad it, e.g. "
                        f"with .to_tensor(), and pass the lengths as `query_lengths` / "
                        f"`key_lengths`).")
    return tf.convert_to_tensor(x)


def shape_fits(shape, want):
    """Whether a static shape (rank known) can be `want`; None on either side is unknown."""
    return shape.rank == len(want) and all(
        a is None or b is None or a == b for a, b in zip(shape, want))


def dims_text(dims):
    """[2, ?, 9] for [2, None, 9]."""
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _check_same(a, b, dim, name, what, other):
    if a.shape.rank is None or b.shape.rank is None:
        return
    x, y = a.shape[dim], b.shape[dim]
    if x is not None and y is not None and x != y:
        raise ValueError(f"`{name}` must have the {what} (dim {dim}) of `{other}`, {x}; got shape "
                         f"{b.shape} against {a.shape}.")


def dot_product_attention(query, key, value, bias=None, mask=None, scale=None, is_causal=False,
                          flash_attention=None, attn_logits_soft_cap=None, *, dropout_rate=0.0,
                          seed=None,
                          sliding_window=None, query_lengths=None, key_lengths=None,
                          query_mask=None, key_mask=None, causal_offset=0, return_lse=False,
                          name=None):
    """Exact scaled dot-product attention by the FlashAttention algorithm.

    Shapes follow `keras.ops.dot_product_attention`: query `[B, Tq, H, D]`, key `[B, Tk, Hkv, D]`,
    value `[B, Tk, Hkv, Dv]`, output `[B, Tq, H, Dv]`. H must be a multiple of Hkv (grouped-query
    and multi-query attention: query head h reads key/value head h // (H // Hkv); K and V are never
    repeated in memory). Head dims from 1 to 256. dtypes float16, bfloat16, float32 (float64 on CPU).

    logit[b, h, i, j] = softcap(scale * q_i . k_j) + bias[b, h, i, j], over the keys row i sees;
    softcap(s) = c * tanh(s / c) when `attn_logits_soft_cap` = c is given (before the bias).

    Args:
      query, key, value: the tensors above.
      bias: optional additive logit bias broadcastable to `[B, H, Tq, Tk]` (its gradient is
        returned; the backward then holds one float32 [B, H, Tq, Tk] tensor).
      mask: optional boolean mask broadcastable to `[B, H, Tq, Tk]`, True = attend (as Keras).
      scale: softmax scale, a Python number; default 1/sqrt(D) (then D must be static).
      is_causal: query i sees keys j <= i + causal_offset (Keras' convention with offset 0).
      flash_attention: accepted for compatibility with Keras' signature (None, True or False);
        the computation is always the fused one.
      attn_logits_soft_cap: optional soft cap c > 0. (Keras' TensorFlow backend ignores this
        argument; the JAX backend documents another formula. Ours is c * tanh(s / c).)
      dropout_rate: dropout on the attention probabilities, fused; needs `seed`. The rate applied
        is round(rate * 65536) / 65536 and kept probabilities are scaled so that their expected
        value is unchanged exactly (README, Dropout).
      seed: int tensor of shape [2] (or a scalar): the dropout mask is a pure function of
        (seed, batch, head, row, column) (Philox), regenerated in the backward, never stored.
      sliding_window: None, an int w, or (left, right): row i sees keys in
        [i + causal_offset - left, i + causal_offset + right]; None in a pair = unbounded.
      query_lengths, key_lengths: optional int32 `[B]`: rows/keys at or past the length are padding.
        A length outside [0, length of its axis] is an error (the lengths are host-memory
        inputs, checked without waiting for the GPU); under XLA, where the values are not seen
        before the kernel runs, it is clamped to that range.
      query_mask, key_mask: optional boolean `[B, Tq]` / `[B, Tk]` padding masks, True = valid.
        Lengths and these masks are O(N) inputs: nothing of size Tq x Tk is built.
      causal_offset: diagonal offset of the causal mask and window (a Python int); `Tk - Tq` gives
        the KV-cache (bottom-right) convention.
      return_lse: also return the log-sum-exp of the logits per row, float32 `[B, H, Tq]`.

    Masked keys must hold finite values: their value rows are multiplied by a zero probability,
    so a NaN or infinity at a masked or padded position can make the output NaN.
    A row that sees no key at all (fully masked) gives output 0 and zero gradients, never NaN.
    This differs on purpose from Keras, which gives such a row the uniform average of the values.
    First-order gradients only: differentiating the gradient (gradient penalties, Hessian-vector
    products, forward-mode autodiff) raises NotImplementedError.

    Returns:
      The output `[B, Tq, H, Dv]`, and the log-sum-exp if `return_lse`.
    """
    lib = _ops.load()
    sig = None
    # A seed may come along as an int64 [2] eager tensor (what next_seed gives): it is the one
    # tensor input that changes from call to call of a training loop.
    eager_seed = (seed is not None and isinstance(seed, tf.__internal__.EagerTensor)
                  and seed.dtype == tf.int64 and seed._shape_tuple() == (2,))
    if tf.executing_eagerly() and (seed is None or eager_seed):
        q_e, k_e, v_e = _eager_tensor(query), _eager_tensor(key), _eager_tensor(value)
        optional = (mask, bias, query_lengths, key_lengths, query_mask, key_mask)
        if q_e is not None and k_e is not None and v_e is not None:
            sig = _eager_signature(q_e, k_e, v_e, optional, scale, is_causal,
                                   attn_logits_soft_cap, dropout_rate, sliding_window,
                                   causal_offset, seed is not None)
        cached = _EAGER_CALLS.get(sig) if sig is not None else None
        if cached is not None:  # checked before: the same shapes, dtypes and settings
            attrs, absent = cached
            tq, tk = sig[0][1], sig[1][1]  # from the signature's query and key shapes
            for (name, _, _), t, limit in zip(_OPTIONAL[2:4], optional[2:4], (tq, tk)):
                if t is not None and t.device.endswith("CPU:0"):
                    _check_range(t.numpy(), name, limit)
            inputs = tuple(a if t is None else t for a, t in zip(absent, optional + (seed,)))
            out, lse = lib.flash_attn_flash_attention(q_e, k_e, v_e, *inputs, **attrs)
            return (out, lse) if return_lse else out
        if sig is not None:
            query, key, value = q_e, k_e, v_e
    with tf.name_scope(name or "flash_attention"):
        query = _tensor(query, "query")
        key = _tensor(key, "key")
        value = _tensor(value, "value")
        dtype = tf.as_dtype(_result_dtype(query.dtype, key.dtype, value.dtype))
        if dtype not in _FLOAT_DTYPES:
            raise ValueError(f"`query`, `key` and `value` must be float16, bfloat16, float32 or "
                             f"float64; got {query.dtype}, {key.dtype}, {value.dtype}.")
        query, key, value = (tf.cast(t, dtype) for t in (query, key, value))
        _check_rank4(query, "query", "[batch, query_len, num_heads, head_dim]")
        _check_rank4(key, "key", "[batch, key_len, num_kv_heads, head_dim]")
        _check_rank4(value, "value", "[batch, key_len, num_kv_heads, value_dim]")
        head_dim = _static_dim(key, 3) or _static_dim(query, 3)
        for t, nm in ((query, "query"), (key, "key"), (value, "value")):
            d = _static_dim(t, 3)
            if d is not None and not 1 <= d <= 256:
                raise ValueError(f"The last dim of `{nm}` must be in [1, 256]; got shape {t.shape}.")
        if query.shape[3] is not None and key.shape[3] is not None and query.shape[3] != key.shape[3]:
            raise ValueError(f"`query` and `key` must have the same head_dim (last dim); got "
                             f"{query.shape} and {key.shape}.")
        _check_same(query, key, 0, "key", "batch", "query")
        _check_same(query, value, 0, "value", "batch", "query")
        _check_same(key, value, 1, "value", "key_len", "key")
        _check_same(key, value, 2, "value", "num_kv_heads", "key")
        h, hkv = _static_dim(query, 2), _static_dim(key, 2)
        if h is not None and hkv is not None and (hkv == 0 or h % hkv):
            raise ValueError(f"num_heads of `query` ({h}) must be a multiple of num_kv_heads of "
                             f"`key` ({hkv}); got query {query.shape}, key {key.shape}.")
        if scale is None:
            if head_dim is None:
                raise ValueError("`scale` must be given when the head_dim of `key` is not static.")
            scale = 1.0 / math.sqrt(head_dim)
        scale = _number(scale, "scale")
        full = [_static_dim(query, 0), h, _static_dim(query, 1), _static_dim(key, 1)]

        if mask is None:
            mask_t = _absent(tf.bool)
        else:
            mask_t = _to_rank4(tf.cast(_tensor(mask, "mask"), tf.bool), "mask", full)
        bias_t = _absent(dtype) if bias is None else _to_rank4(
            tf.cast(_tensor(bias, "bias"), dtype), "bias", full)
        ql = _absent(tf.int32) if query_lengths is None else _lengths(
            query_lengths, "query_lengths", full[2])
        kl = _absent(tf.int32) if key_lengths is None else _lengths(
            key_lengths, "key_lengths", full[3])
        qv = _absent(tf.bool) if query_mask is None else tf.cast(
            _tensor(query_mask, "query_mask"), tf.bool)
        kv = _absent(tf.bool) if key_mask is None else tf.cast(_tensor(key_mask, "key_mask"), tf.bool)
        given = {"query_lengths": query_lengths, "key_lengths": key_lengths,
                 "query_mask": query_mask, "key_mask": key_mask}
        for t, nm, want in ((ql, "query_lengths", [full[0]]), (kl, "key_lengths", [full[0]]),
                            (qv, "query_mask", [full[0], full[2]]),
                            (kv, "key_mask", [full[0], full[3]])):
            if given[nm] is None or t.shape.rank is None:
                continue
            if not shape_fits(t.shape, want):
                shape = "[batch]" if len(want) == 1 else "[batch, length]"
                raise ValueError(f"`{nm}` must have shape {shape} = {dims_text(want)}; got "
                                 f"{t.shape}.")

        dropout_rate = _number(dropout_rate, "dropout_rate")
        if not 0.0 <= dropout_rate < 1.0:
            raise ValueError(f"`dropout_rate` must be in [0, 1); got {dropout_rate}.")
        if dropout_rate > 0.0 and seed is None:
            raise ValueError("`dropout_rate` > 0 needs a `seed` (an int tensor of shape [2]), "
                             "so the backward can regenerate the same dropout mask.")
        seed_t = _absent(tf.int64) if seed is None else _seed_tensor(seed)
        cap = 0.0
        if attn_logits_soft_cap is not None:
            cap = _number(attn_logits_soft_cap, "attn_logits_soft_cap")
            if not (cap > 0.0 and math.isfinite(cap)):
                raise ValueError(f"`attn_logits_soft_cap` must be a positive number or None; got "
                                 f"{attn_logits_soft_cap!r}.")
        left, right = _window(sliding_window)
        causal_offset = _offset(causal_offset)
        attrs = dict(scale=scale, softcap=cap, causal=bool(is_causal), causal_offset=causal_offset,
                     window_left=left, window_right=right, dropout_rate=dropout_rate)
        absent = (mask_t, bias_t, ql, kl, qv, kv, seed_t)
        if sig is not None:
            if len(_EAGER_CALLS) >= 256:
                _EAGER_CALLS.clear()
            # Placeholders only: the given tensors are the next call's own (none kept alive here).
            _EAGER_CALLS[sig] = (attrs, tuple(None if g is not None else a for a, g in
                                              zip(absent, optional + (seed,))))
        out, lse = lib.flash_attn_flash_attention(query, key, value, *absent, **attrs)
        return (out, lse) if return_lse else out


@tf.RegisterGradient("FlashAttn>FlashAttentionGrad")
def _flash_attention_grad_grad(op, *grads):
    raise NotImplementedError(
        "tf_flashattn.dot_product_attention has first-order gradients only: differentiating its "
        "gradient (a gradient penalty, a Hessian-vector product, or forward-mode autodiff such as "
        "tf.autodiff.ForwardAccumulator, which TensorFlow builds from double backprop) is not "
        "implemented. Use keras.ops.dot_product_attention for that computation.")


def _result_dtype(*dtypes):
    import keras
    return keras.backend.result_type(*(tf.as_dtype(d).name for d in dtypes))


@tf.RegisterGradient("FlashAttn>FlashAttention")
def _flash_attention_grad(op, d_out, d_lse):
    lib = _ops.load()
    attrs = {a: op.get_attr(a) for a in _ATTRS}
    inputs = list(op.inputs[:10])
    out, lse = op.outputs
    if d_lse is None:
        d_lse = _absent(tf.float32)
    dq, dk, dv, d_logits = lib.flash_attn_flash_attention_grad(
        *inputs, out, lse, d_out, d_lse, **attrs)
    bias = inputs[4]
    d_bias = None
    if bias.shape.rank == 4:
        # Sum dL/dlogit over the dims along which the bias was broadcast.
        if bias.shape.is_fully_defined():
            axes = [i for i in range(4) if bias.shape[i] == 1]
            d_bias = tf.reduce_sum(d_logits, axis=axes, keepdims=True) if axes else d_logits
        else:
            axes = tf.where(tf.equal(tf.shape(bias), 1))[:, 0]
            d_bias = tf.reshape(tf.reduce_sum(d_logits, axis=axes, keepdims=True), tf.shape(bias))
        d_bias = tf.cast(d_bias, bias.dtype)
    return [dq, dk, dv, None, d_bias, None, None, None, None, None]
