"""Unfused float64 reference of the op's semantics, and a NumPy Philox for the dropout mask.

The reference materializes the [B, H, Tq, Tk] logits with plain TensorFlow ops, so its gradients
come from autodiff and it shares no code with the kernels.
"""
import numpy as np
import tensorflow as tf

M64 = (1 << 64) - 1


def rand(rng, *shape, dtype=tf.float32):
    """Fresh standard-normal inputs (never zeros) of the given shape and dtype."""
    return tf.cast(tf.constant(rng.standard_normal(shape)), dtype)


def f32_scale(d):
    """1/sqrt(d) as the op's float32 scale attribute holds it, for the reference."""
    return float(np.float32(1.0 / np.sqrt(d)))


def philox_key(seed):
    """Seed (two int64) -> the two 32-bit Philox key words (same recipe as flash_params.h)."""
    s0, s1 = (int(x) & M64 for x in seed)
    x = s0 ^ ((s1 * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & M64)
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    return x & 0xFFFFFFFF, x >> 32


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Vectorized Philox4x32-10 on uint32 arrays (Salmon et al. 2011)."""
    c = [np.asarray(x, np.uint64) for x in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(k0), np.uint64(k1)
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & mask
        hi1, lo1 = p1 >> np.uint64(32), p1 & mask
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0 = (k0 + np.uint64(0x9E3779B9)) & mask
        k1 = (k1 + np.uint64(0xBB67AE85)) & mask
    return c


def dropout_threshold16(rate):
    """t16 of flash_params.h's rule: min(round(rate * 65536), 65535) of the float32 rate (0: off)."""
    r = np.float64(np.float32(rate))
    if not r > 0:
        return 0
    return int(min(np.floor(r * 65536.0 + 0.5), 65535.0))


def dropout_keep_scale(rate):
    """The kernels' keep scale, float32 65536 / (65536 - t16): E[keep * scale] = 1 exactly."""
    return float(np.float32(65536.0 / (65536.0 - dropout_threshold16(rate))))


def dropout_keep_mask(seed, B, H, Tq, Tk, rate):
    """Boolean keep mask [B, H, Tq, Tk] exactly as the kernels draw it (flash_params.h): element
    (row i, col j) is the 16-bit half k = 4 ((i / 8) % 2) + (j / 8) % 4 of the Philox call with
    counter (8 (j / 32) + j % 8, 8 (i / 16) + i % 8, h, b), kept when >= t16."""
    k0, k1 = philox_key(seed)
    b, h, i, j = np.meshgrid(np.arange(B), np.arange(H), np.arange(Tq), np.arange(Tk),
                             indexing="ij")
    words = philox4x32_10(((j >> 5) << 3) | (j & 7), ((i >> 4) << 3) | (i & 7), h, b, k0, k1)
    k = ((i >> 3) & 1) * 4 + ((j >> 3) & 3)
    w = np.choose(k >> 1, words)
    draw = (w >> (16 * (k & 1)).astype(np.uint64)) & np.uint64(0xFFFF)
    return draw >= np.uint64(dropout_threshold16(rate))


def allowed_mask(B, H, Tq, Tk, mask=None, is_causal=False, causal_offset=0, window=(-1, -1),
                 query_lengths=None, key_lengths=None, query_mask=None, key_mask=None):
    """Boolean [B, H, Tq, Tk]: which logits are visible."""
    i = np.arange(Tq)[:, None]
    j = np.arange(Tk)[None, :]
    d = i + causal_offset
    ok = np.ones((Tq, Tk), bool)
    if is_causal:
        ok &= j <= d
    if window[0] >= 0:
        ok &= j >= d - window[0]
    if window[1] >= 0:
        ok &= j <= d + window[1]
    ok = np.broadcast_to(ok, (B, H, Tq, Tk)).copy()
    if mask is not None:
        ok &= np.broadcast_to(np.asarray(mask, bool), (B, H, Tq, Tk))
    if query_lengths is not None:
        ok &= (np.arange(Tq)[None, :] < np.asarray(query_lengths)[:, None])[:, None, :, None]
    if key_lengths is not None:
        ok &= (np.arange(Tk)[None, :] < np.asarray(key_lengths)[:, None])[:, None, None, :]
    if query_mask is not None:
        ok &= np.asarray(query_mask, bool)[:, None, :, None]
    if key_mask is not None:
        ok &= np.asarray(key_mask, bool)[:, None, None, :]
    return ok


def reference_attention(q, k, v, bias=None, scale=None, softcap=None, allowed=None,
                        keep=None, dropout_rate=0.0):
    """float64 attention on tf tensors [B,T,H,D]; returns (out [B,Tq,H,Dv], lse [B,H,Tq]).

    allowed: bool [B,H,Tq,Tk] (None: all); keep: bool dropout keep mask or None.
    """
    q, k, v = (tf.cast(t, tf.float64) for t in (q, k, v))
    H, Hkv = q.shape[2], k.shape[2]
    if H != Hkv:
        k = tf.repeat(k, H // Hkv, axis=2)
        v = tf.repeat(v, H // Hkv, axis=2)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    s = tf.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap:
        s = softcap * tf.tanh(s / softcap)
    if bias is not None:
        s = s + tf.cast(bias, tf.float64)
    if allowed is None:
        allowed = np.ones(s.shape, bool)
    allowed = tf.constant(allowed)
    s = tf.where(allowed, s, tf.constant(-1e300, tf.float64))
    any_row = tf.reduce_any(allowed, axis=-1, keepdims=True)
    p = tf.nn.softmax(s, axis=-1) * tf.cast(any_row, tf.float64)
    lse = tf.where(any_row[..., 0], tf.reduce_logsumexp(s, axis=-1),
                   tf.constant(-np.inf, tf.float64))
    if keep is not None:
        p = p * tf.constant(keep, tf.float64) * dropout_keep_scale(dropout_rate)
    out = tf.einsum("bhqk,bkhd->bqhd", p, v)
    return out, lse
