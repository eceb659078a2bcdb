"""FlashAttention for all of Keras and KerasHub on TensorFlow: `enable_flash_attention()`.

```python
import keras_hub, tf_flashattn

tf_flashattn.enable_flash_attention()          # or: with tf_flashattn.enable_flash_attention(): ...
model = keras_hub.models.Llama3CausalLM.from_preset(...)   # any time before or after enabling
model.fit(...); model.generate(...)            # attention runs through the FlashAttention op
tf_flashattn.disable_flash_attention()         # every replaced function is put back
```

Importing tf_flashattn changes nothing in Keras or KerasHub. `enable_flash_attention()` replaces
the functions and methods listed below (module attributes and class attributes, nothing else);
`disable_flash_attention()` puts the original objects back (the same objects: `is` holds). The
replacements act when Keras code runs, eagerly or while a `tf.function` is traced: a function
traced while enabled keeps the op in its graph after `disable`. Only on the TensorFlow backend,
and only with the Keras and KerasHub versions in `TESTED_VERSIONS` (others are refused with an
error naming the versions: the replaced functions are private and change between releases).

What is replaced in Keras (3.15):

- `keras.src.backend.tensorflow.nn.dot_product_attention` (what `keras.ops.dot_product_attention`
  calls on TensorFlow): `flash_attention=True` or `None` run `tf_flashattn.dot_product_attention`;
  `flash_attention=False` runs Keras' own computation, unchanged. Rows that see no key get the
  uniform average of the values, as Keras gives them, so results equal Keras' everywhere.
- `keras.ops.dot_product_attention` itself (the same function, bound in `keras.ops`,
  `keras.ops.nn`, `keras.src.ops` and `keras.src.ops.nn`): only to accept
  `attn_logits_soft_cap` on TensorFlow (Keras refuses it off JAX/TPU; the op applies
  `c * tanh(s / c)` to the scaled logits, as KerasHub's Gemma computes it unfused); all other
  calls go to Keras' function.
- `keras.layers.MultiHeadAttention` and `keras.layers.GroupQueryAttention`
  (`keras.src.layers.attention.multi_head_attention.MultiHeadAttention`,
  `keras.src.layers.attention.grouped_query_attention.GroupedQueryAttention`):
  `_compute_attention_mask` (records which padding masks, causal flag and window the dense
  mask it returns was made of) and `_compute_attention` (hands that record to the op). These
  layers already call `keras.ops.dot_product_attention` with their `flash_attention` setting
  (`None` by default and after `keras.config.enable_flash_attention()`, `True` with
  `flash_attention=True`, `False` for layers built after `keras.config.disable_flash_attention()`;
  Keras takes `flash_attention or keras.config.is_flash_attention_enabled()`, so a layer's own
  `flash_attention=False` counts only then), so they take the op without further change. A
  layer with `dropout > 0` called in inference (`training` false or None: its dropout does
  nothing) takes that same branch through the replaced `_compute_attention` (Keras would
  compute it unfused, with the same result; rows that see no key give 0 there, as in Keras'
  unfused path). In training with `dropout > 0`, and with `return_attention_scores=True`,
  Keras computes the attention itself (no call to `dot_product_attention`);
  `tf_flashattn.FlashMultiHeadAttention` fuses dropout.

What is replaced in KerasHub (0.32), when it is installed (`enable_flash_attention(keras_hub=False)`
leaves it alone):

- `fused_attention_op_available` (returns True) in `keras_hub.src.utils.keras_utils` and in the
  attention modules of the models in `_KERAS_HUB_MODELS` (llama, mistral, mixtral, gemma,
  gemma3, qwen, qwen3, qwen_moe, qwen3_moe, phi3, gpt_neo_x), which imported it by name.
  Other KerasHub models keep their current path (models that call
  `keras.ops.dot_product_attention` unconditionally reach the op through Keras).
- `_use_fused_attention_op` of `CachedGemmaAttention`, `CachedGemma3Attention`,
  `CachedMixtralAttention` and `QwenMoeAttention`: KerasHub allows the fused path there only
  on GPU (T4 excluded, no soft-cap) or TPU; the replacement allows it on CPU and GPU whenever
  the layer's dropout is 0 (as the original also requires).
- `compute_causal_mask` and `merge_padding_and_attention_mask`
  (`keras_hub.src.layers.modeling.transformer_layer_utils`, and every KerasHub module that
  imported them by name): same results; each records what the mask it returns is made of.
- The mask methods of the decoders in `_KERAS_HUB_MODELS` (`_compute_self_attention_mask` or
  `_compute_attention_mask` of LlamaTransformerDecoder, MistralTransformerDecoder,
  MixtralTransformerDecoder, GemmaDecoderBlock, Gemma3DecoderBlock, QwenTransformerDecoder,
  Qwen3TransformerDecoder, QwenMoeTransformerDecoder, Qwen3MoeTransformerDecoder,
  Phi3Decoder, GPTNeoXDecoder and `keras_hub.layers.TransformerDecoder` (GPT-2, OPT, ...)):
  same results; each records the structure of the mask it returns.
- `_compute_attention` of the attention layers of those models (LlamaAttention,
  CachedMistralAttention, CachedMixtralAttention, CachedGemmaAttention, CachedGemma3Attention,
  QwenAttention, Qwen3Attention, QwenMoeAttention, Qwen3MoeAttention, Phi3Attention,
  GPTNeoXAttention): hands the recorded structure to the op. For the Qwen layers (whose fused
  path drops the sliding window their unfused path applies) it also applies the layer's own
  `_mask_sliding_window` to the mask first, so results equal KerasHub's TensorFlow path.

How dense masks become the op's O(N) arguments. KerasHub decoders build a dense [B, T, S] mask
(`compute_causal_mask` AND the padding mask from `merge_padding_and_attention_mask`, Mistral and
Mixtral AND a band for their window) and pass it to the attention layer, which expands it to
[B, 1, T, S] for `keras.ops.dot_product_attention`; Gemma and Qwen AND their window band in the
attention layer. Reading a dense mask is much slower in the kernel than its index-only causal,
window and padding paths. The design:

1. The builders record, for the tensor they return, its structure: `compute_causal_mask(...,
   cache_index=c)` is "causal with offset c" (query i sees keys j <= i + c); a merged padding
   mask with no custom attention mask is "key padding mask [B, S]".
2. The replaced decoder mask methods run the original method, watch which builders it called,
   and record for the returned tensor the AND of their structures (plus the decoder's own
   window for Mistral/Mixtral). The result is recorded only when it is certain: the builders
   were called in the pattern the method's source has (one padding merge without a custom
   attention mask, one causal mask), the padding mask has the key length (no KV cache, or a
   cache whose length is provably the query length), no vision or bidirectional mask (Gemma3).
   Otherwise nothing is recorded.
3. The replaced `_compute_attention` finds the record of the exact tensor object it received
   (an identity lookup: a mask built any other way has no record), adds the layer's own window
   (Gemma: |i + c - j| < w, Qwen likewise) and hands it to the `dot_product_attention` call made
   inside (a thread-local slot, used by that one call and checked against its shapes).
4. `dot_product_attention` passes the structure as `is_causal` / `causal_offset` /
   `sliding_window` / `key_mask` / `query_mask` (for a traced offset c with one query, as in
   KV-cache decoding: `key_lengths = c + 1`) instead of the dense mask. The dense mask tensor the
   caller built is then unused: inside a `tf.function` (`fit`, `predict`, `generate`) TensorFlow
   prunes the ops that build it, so it is never computed; run eagerly it is still computed by
   the caller (the op does not read it). Gemma's and Gemma 3's attention layers read the mask
   themselves after the attention (to zero rows that attend to nothing), so for them KerasHub's
   mask is still computed, for that elementwise reduction only. Whenever any step is unsure (a
   window with a traced offset, shapes that disagree, a custom attention mask) the dense mask is
   passed, which is always exact.

Keras' MultiHeadAttention / GroupQueryAttention are handled the same way: `_compute_attention_mask`
records query/value/key padding masks, `use_causal_mask` and `sliding_window` (|i - j| < w); a
custom `attention_mask` is passed on as a dense mask (the caller built it), unless it is itself a
recorded one (KerasHub's `TransformerEncoder` (BERT, ...) and `TransformerDecoder` cross-attention
pass the merged padding mask, which becomes the key mask).

Where the op cannot serve a call (head dim above 256 or not static without a `scale`, float64
with a GPU, a non-float dtype, a mask or bias that does not broadcast or has an unknown rank or a
non-boolean mask, a `scale` or soft cap that is a traced tensor, query heads not a multiple of
key/value heads), Keras' own computation runs (with the soft cap applied when one is given) and a
warning is issued once per reason. Results on rows that see at least one key equal Keras' up to
float rounding; rows that see none get the uniform average of the values, as in Keras' fused
path (the op alone would give 0 there).
"""

import functools
import importlib
import importlib.util
import inspect
import math
import threading
import warnings
import weakref

import numpy as np
import tensorflow as tf

# Versions this module was tested with (major.minor prefixes); others are refused.
TESTED_VERSIONS = {"keras": ("3.15",), "keras_hub": ("0.32",)}

_MAX_HEAD_DIM = 256

# KerasHub models whose fused path is enabled, with where their pieces live:
# (model name, attention module, attention class, decoder module, decoder class,
#  decoder mask method, recipe tags).
_KH = "keras_hub.src.models."
_KERAS_HUB_MODELS = (
    ("llama", _KH + "llama.llama_attention", "LlamaAttention",
     _KH + "llama.llama_decoder", "LlamaTransformerDecoder", "_compute_self_attention_mask", ()),
    ("mistral", _KH + "mistral.mistral_attention", "CachedMistralAttention",
     _KH + "mistral.mistral_transformer_decoder", "MistralTransformerDecoder",
     "_compute_self_attention_mask", ("decoder_window",)),
    ("mixtral", _KH + "mixtral.mixtral_attention", "CachedMixtralAttention",
     _KH + "mixtral.mixtral_decoder", "MixtralTransformerDecoder",
     "_compute_self_attention_mask", ("decoder_window", "gate")),
    ("gemma", _KH + "gemma.gemma_attention", "CachedGemmaAttention",
     _KH + "gemma.gemma_decoder_block", "GemmaDecoderBlock", "_compute_attention_mask",
     ("gemma_window", "gate")),
    ("gemma3", _KH + "gemma3.gemma3_attention", "CachedGemma3Attention",
     _KH + "gemma3.gemma3_decoder_block", "Gemma3DecoderBlock", "_compute_attention_mask",
     ("gemma_window", "gate", "gemma3")),
    ("qwen", _KH + "qwen.qwen_attention", "QwenAttention",
     _KH + "qwen.qwen_decoder", "QwenTransformerDecoder", "_compute_self_attention_mask",
     ("qwen_window",)),
    ("qwen3", _KH + "qwen3.qwen3_attention", "Qwen3Attention",
     _KH + "qwen3.qwen3_decoder", "Qwen3TransformerDecoder", "_compute_self_attention_mask",
     ("qwen_window",)),
    ("qwen_moe", _KH + "qwen_moe.qwen_moe_attention", "QwenMoeAttention",
     _KH + "qwen_moe.qwen_moe_decoder", "QwenMoeTransformerDecoder",
     "_compute_self_attention_mask", ("qwen_window", "gate")),
    ("qwen3_moe", _KH + "qwen3_moe.qwen3_moe_attention", "Qwen3MoeAttention",
     _KH + "qwen3_moe.qwen3_moe_decoder", "Qwen3MoeTransformerDecoder",
     "_compute_self_attention_mask", ("qwen_window",)),
    ("phi3", _KH + "phi3.phi3_attention", "Phi3Attention",
     _KH + "phi3.phi3_decoder", "Phi3Decoder", "_compute_self_attention_mask", ()),
    ("gpt_neo_x", _KH + "gpt_neo_x.gpt_neo_x_attention", "GPTNeoXAttention",
     _KH + "gpt_neo_x.gpt_neo_x_decoder", "GPTNeoXDecoder", "_compute_self_attention_mask", ()),
)
# Decoders whose attention is Keras' MultiHeadAttention (handled at the Keras level).
_KERAS_HUB_MHA_DECODERS = (
    ("keras_hub.src.layers.modeling.transformer_decoder", "TransformerDecoder",
     "_compute_self_attention_mask"),
)
_KH_UTILS = "keras_hub.src.utils.keras_utils"
_KH_MASK_UTILS = "keras_hub.src.layers.modeling.transformer_layer_utils"

_lock = threading.RLock()
_patches = []  # (owner, name, original, replacement), in the order applied
_local = threading.local()
_warned = set()


# --------------------------------------------------------------------------------------------
# Public API


class _FlashAttentionState:
    """What `enable_flash_attention()` returns: usable as a context manager that restores the
    state found on entry (disabled again on exit unless it was already enabled)."""

    def __init__(self, was_enabled):
        self._was_enabled = was_enabled

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self._was_enabled:
            disable_flash_attention()
        return False

    def __repr__(self):
        return f"<tf_flashattn flash attention: {'on' if is_flash_attention_enabled() else 'off'}>"


def is_flash_attention_enabled():
    """Whether `enable_flash_attention()` is in effect."""
    return bool(_patches)


def enable_flash_attention(*, keras_hub=None):
    """Routes Keras' and KerasHub's attention through `tf_flashattn.dot_product_attention`.

    Args:
      keras_hub: None (default) also patches KerasHub if it is installed (importing it);
        True requires it; False leaves KerasHub untouched.

    Returns:
      An object usable as a context manager: `with tf_flashattn.enable_flash_attention(): ...`
      disables again on exit (unless it was enabled before).

    Raises:
      RuntimeError: the Keras backend is not TensorFlow, or the Keras / KerasHub version is not
        one this was tested with (`TESTED_VERSIONS`), or the op library cannot be loaded.
      ImportError: `keras_hub=True` and KerasHub is not installed.

    See the module docstring (`tf_flashattn.keras_integration`) for exactly what is replaced.
    """
    import keras

    with _lock:
        if _patches:
            return _FlashAttentionState(True)
        if keras.config.backend() != "tensorflow":
            raise RuntimeError(
                "tf_flashattn.enable_flash_attention() needs the TensorFlow backend of Keras; the "
                f"backend is {keras.config.backend()!r} (set KERAS_BACKEND=tensorflow).")
        _check_version("keras", keras.__version__)
        hub = None
        if keras_hub is None:
            keras_hub = importlib.util.find_spec("keras_hub") is not None
        if keras_hub:
            hub = importlib.import_module("keras_hub")
            _check_version("keras_hub", hub.__version__)
        from tf_flashattn import _ops
        _ops.load()  # fail now, not inside a model, if the op library is missing
        try:
            _patch_keras()
            if hub is not None:
                _patch_keras_hub()
        except BaseException:
            _restore()
            raise
        return _FlashAttentionState(False)


def disable_flash_attention():
    """Puts back every function and method `enable_flash_attention()` replaced (no-op if it is
    not enabled)."""
    with _lock:
        _restore()


def _check_version(package, version):
    if not any(version == p or version.startswith(p + ".") for p in TESTED_VERSIONS[package]):
        tested = "; ".join(f"{name.replace('_', '-')} {', '.join(v + '.x' for v in vs)}"
                           for name, vs in TESTED_VERSIONS.items())
        hint = (" Pass keras_hub=False to patch Keras only." if package == "keras_hub" else "")
        raise RuntimeError(
            f"tf_flashattn.enable_flash_attention() was tested with {tested}; found "
            f"{package.replace('_', '-')} {version}. It replaces private functions of these "
            f"packages, which change between releases, so it refuses to run with untested "
            f"versions.{hint}")


# --------------------------------------------------------------------------------------------
# Patching and restoring


def _set(owner, name, replacement):
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, replacement)
    _patches.append((owner, name, original, replacement))


def _restore():
    while _patches:
        owner, name, original, replacement = _patches.pop()
        current = (owner.__dict__.get(name) if isinstance(owner, type)
                   else getattr(owner, name, None))
        if current is not replacement:
            warnings.warn(f"tf_flashattn.disable_flash_attention(): {_qualname(owner)}.{name} was "
                          f"replaced by someone else since enable; putting the original back "
                          f"anyway.", RuntimeWarning, stacklevel=3)
        setattr(owner, name, original)
    _warned.clear()


def _qualname(owner):
    return owner.__name__ if isinstance(owner, type) else getattr(owner, "__name__", repr(owner))


def _modules_binding(prefixes, name, obj):
    """Loaded modules (names starting with one of `prefixes`) whose attribute `name` is `obj`."""
    import sys
    found = []
    for mod_name, module in list(sys.modules.items()):
        if module is None or not any(mod_name == p or mod_name.startswith(p + ".")
                                     for p in prefixes):
            continue
        if getattr(module, name, None) is obj:
            found.append(module)
    return found


def _replacement(implementation, original):
    """A new function calling `implementation`, named and documented as `original`."""
    @functools.wraps(original)
    def replacement(*args, **kwargs):
        return implementation(*args, **kwargs)
    replacement.__doc__ = (implementation.__doc__ or "") + "\n\nOriginal documentation:\n" + (
        original.__doc__ or "")
    return replacement


def _patch_keras():
    from keras.src.backend.tensorflow import nn as tf_nn
    from keras.src.layers.attention import grouped_query_attention as gqa_module
    from keras.src.layers.attention import multi_head_attention as mha_module
    from keras.src.ops import nn as ops_nn

    global _keras_dpa, _keras_ops_dpa
    _keras_dpa = tf_nn.dot_product_attention
    _keras_ops_dpa = ops_nn.dot_product_attention
    _set(tf_nn, "dot_product_attention", _replacement(_flash_dpa, _keras_dpa))
    ops_replacement = _replacement(_ops_dpa, _keras_ops_dpa)
    for module in _modules_binding(("keras",), "dot_product_attention", _keras_ops_dpa):
        _set(module, "dot_product_attention", ops_replacement)
    for cls in (mha_module.MultiHeadAttention, gqa_module.GroupedQueryAttention):
        _set(cls, "_compute_attention_mask",
             _recording_method(cls.__dict__["_compute_attention_mask"], _keras_mask_structure))
        _set(cls, "_compute_attention",
             _attention_method(cls.__dict__["_compute_attention"], None, keras_layer=True))


def _patch_keras_hub():
    utils = importlib.import_module(_KH_UTILS)
    mask_utils = importlib.import_module(_KH_MASK_UTILS)
    original_available = utils.fused_attention_op_available

    def fused_attention_op_available():
        return True

    fused_attention_op_available.__doc__ = (
        "Replaced by tf_flashattn.enable_flash_attention(): the fused op is available.")
    _set(utils, "fused_attention_op_available", fused_attention_op_available)

    for builder, recorder in ((mask_utils.compute_causal_mask, _causal_builder),
                              (mask_utils.merge_padding_and_attention_mask, _merge_builder)):
        replacement = functools.wraps(builder)(recorder(builder))
        for module in _modules_binding(("keras_hub",), builder.__name__, builder):
            _set(module, builder.__name__, replacement)

    for (_, att_mod, att_cls, dec_mod, dec_cls, dec_method, tags) in _KERAS_HUB_MODELS:
        att_module = importlib.import_module(att_mod)
        if getattr(att_module, "fused_attention_op_available", None) is original_available:
            _set(att_module, "fused_attention_op_available", fused_attention_op_available)
        attention = getattr(att_module, att_cls)
        if "gate" in tags:
            _set(attention, "_use_fused_attention_op", _fused_gate)
        recipe = (_gemma_attention_recipe if "gemma_window" in tags
                  else _qwen_attention_recipe if "qwen_window" in tags else None)
        _set(attention, "_compute_attention",
             _attention_method(attention.__dict__["_compute_attention"], recipe))
        decoder = getattr(importlib.import_module(dec_mod), dec_cls)
        _set(decoder, dec_method, _recording_method(
            decoder.__dict__[dec_method], functools.partial(_decoder_structure, tags=tags)))
    for dec_mod, dec_cls, dec_method in _KERAS_HUB_MHA_DECODERS:
        decoder = getattr(importlib.import_module(dec_mod), dec_cls)
        _set(decoder, dec_method, _recording_method(
            decoder.__dict__[dec_method], functools.partial(_decoder_structure, tags=())))


def _fused_gate(self):
    """Replaced by tf_flashattn.enable_flash_attention(): the fused path (the FlashAttention op)
    on CPU and GPU, soft-cap included, whenever dropout is 0."""
    return not self.dropout


# --------------------------------------------------------------------------------------------
# Mask structure: what a dense mask tensor is made of


class _Structure:
    """A boolean attention mask described by parts the op takes directly (all ANDed):
    key_mask [B, S], query_mask [B, T], causal with `offset` (query i sees keys j <= i + offset),
    window (left, right) around i + offset (None = unbounded), dense (a mask the caller built,
    broadcastable to [B, H, T, S])."""

    __slots__ = ("key_mask", "query_mask", "causal", "offset", "window", "dense")

    def __init__(self, key_mask=None, query_mask=None, causal=False, offset=0, window=None,
                 dense=None):
        self.key_mask = key_mask
        self.query_mask = query_mask
        self.causal = causal
        self.offset = offset
        self.window = window
        self.dense = dense

    def copy(self, **changes):
        values = {name: getattr(self, name) for name in self.__slots__}
        values.update(changes)
        return _Structure(**values)


def _static_int(x):
    """x as a Python int when its value is known now, else None."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, np.ndarray) and x.shape == () and np.issubdtype(x.dtype, np.integer):
        return int(x)
    if isinstance(x, tf.Tensor) and x.shape.rank == 0 and x.dtype.is_integer:
        if hasattr(x, "numpy"):
            return int(x.numpy())
        value = tf.get_static_value(x)
        if value is not None:
            return int(value)
    return None


def _same_value(a, b):
    """Whether two lengths / offsets are provably equal (same object or equal static ints)."""
    if a is b:
        return True
    x, y = _static_int(a), _static_int(b)
    return x is not None and x == y


def _and_bool(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return tf.logical_and(a, b)


def _intersect_windows(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return tuple(y if x is None else x if y is None else min(x, y) for x, y in zip(a, b))


def _and_structures(a, b):
    """The structure of (mask a) AND (mask b), or None when it cannot be expressed."""
    if a is None or b is None:
        return None
    if (a.causal or a.window is not None) and (b.causal or b.window is not None):
        if not _same_value(a.offset, b.offset):
            return None
    offset = a.offset if (a.causal or a.window is not None) else b.offset
    if a.dense is not None and b.dense is not None:
        return None
    return _Structure(key_mask=_and_bool(a.key_mask, b.key_mask),
                      query_mask=_and_bool(a.query_mask, b.query_mask),
                      causal=a.causal or b.causal, offset=offset,
                      window=_intersect_windows(a.window, b.window),
                      dense=a.dense if a.dense is not None else b.dense)


# Records: id(tensor) -> (weak reference, structure). Looked up by identity only.
_records = {}


def _record(tensor, structure):
    if tensor is None or structure is None:
        return
    key = id(tensor)

    def forget(ref, key=key):
        entry = _records.get(key)
        if entry is not None and entry[0] is ref:
            del _records[key]

    try:
        ref = weakref.ref(tensor, forget)
    except TypeError:
        return
    _records[key] = (ref, structure)


def _lookup(tensor):
    if tensor is None:
        return None
    entry = _records.get(id(tensor))
    if entry is not None and entry[0]() is tensor:
        return entry[1]
    return None


def _recorders():
    stack = getattr(_local, "recorders", None)
    if stack is None:
        stack = _local.recorders = []
    return stack


def _note_builder(kind, info):
    stack = _recorders()
    if stack:
        stack[-1].append((kind, info))


def _causal_builder(original):
    def compute_causal_mask(batch_size, input_length, output_length, cache_index=0):
        mask = original(batch_size, input_length, output_length, cache_index)
        structure = _Structure(causal=True, offset=cache_index)
        _record(mask, structure)
        _note_builder("causal", (structure, input_length, output_length))
        return mask
    return compute_causal_mask


def _merge_builder(original):
    def merge_padding_and_attention_mask(inputs, padding_mask, attention_mask):
        from keras.src.backend import get_keras_mask
        merged = original(inputs, padding_mask, attention_mask)
        structure = None
        if merged is not None and attention_mask is None:
            mask = padding_mask if padding_mask is not None else get_keras_mask(inputs)
            # As the original: cast to int32 first (then nonzero = attend).
            structure = _Structure(key_mask=tf.cast(tf.cast(mask, tf.int32), tf.bool))
            _record(merged, structure)
        _note_builder("merge", (merged is None, structure))
        return merged
    return merge_padding_and_attention_mask


def _recording_method(original, describe):
    """Wraps a mask-building method: runs it, then records `describe(self, arguments,
    builder_calls, result)` as the structure of its result."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def method(self, *args, **kwargs):
        calls = []
        stack = _recorders()
        stack.append(calls)
        try:
            result = original(self, *args, **kwargs)
        finally:
            stack.pop()
        if result is not None and _lookup(result) is None:
            try:
                arguments = signature.bind(self, *args, **kwargs)
                arguments.apply_defaults()
                structure = describe(self, arguments.arguments, calls, result)
            except Exception:  # describing is an optimization: never break the model
                structure = None
            _record(result, structure)
        return result
    return method


def _keras_mask_structure(self, arguments, calls, result):
    """Keras MultiHeadAttention / GroupedQueryAttention `_compute_attention_mask`."""
    def as_bool(mask):
        return None if mask is None else tf.cast(mask, tf.bool)

    window = getattr(self, "_sliding_window", getattr(self, "sliding_window", None))
    structure = _Structure(
        query_mask=as_bool(arguments.get("query_mask")),
        key_mask=_and_bool(as_bool(arguments.get("value_mask")),
                           as_bool(arguments.get("key_mask"))),
        causal=bool(arguments.get("use_causal_mask")),
        window=None if window is None else (window - 1, window - 1))
    custom = arguments.get("attention_mask")
    if custom is not None:
        known = _lookup(custom)
        if known is not None:
            return _and_structures(structure, known)
        custom = tf.cast(custom, tf.bool)
        if custom.shape.rank is None or not 2 <= custom.shape.rank <= 4:
            return None
        while custom.shape.rank < 4:
            custom = tf.expand_dims(custom, axis=-3)
        structure.dense = custom
    return structure


def _decoder_structure(self, arguments, calls, result, tags):
    """A KerasHub decoder's mask method: the AND of the builder calls it made (one padding
    merge without a custom mask, then at most one causal mask), plus the decoder's window."""
    if "gemma3" in tags and (arguments.get("vision_mask") is not None
                             or getattr(self, "use_bidirectional_attention", False)):
        return None
    kinds = [kind for kind, _ in calls]
    if kinds not in (["merge"], ["merge", "causal"]):
        return None
    merged_none, padding = calls[0][1]
    if not merged_none and padding is None:  # a custom attention mask was merged in
        return None
    if kinds == ["merge"]:
        return padding  # the result is the merged padding mask itself
    causal, input_length, output_length = calls[1][1]
    if padding is not None and not _same_value(input_length, output_length):
        return None  # [B, T] padding against S != T keys (KV cache): left to the dense mask
    structure = causal if padding is None else _and_structures(causal, padding)
    if "decoder_window" in tags and self.sliding_window is not None:
        # Mistral / Mixtral: i + c < j + w, i.e. keys from i + c - (w - 1).
        if self.sliding_window < 1:
            return None
        structure = structure.copy(
            window=_intersect_windows(structure.window, (self.sliding_window - 1, None)))
    return structure


def _band_window(size):
    """KerasHub's band |i + c - j| <= size - 1 (tf.linalg.band_part), as a window."""
    if size is None or size < 1:
        return None
    return (size - 1, size - 1)


def _gemma_attention_recipe(self, arguments, structure):
    """Gemma / Gemma3 `_compute_attention`: the layer ANDs its window band into the mask
    (`_mask_sliding_window`, centred on i + cache_update_index) before its fused branch."""
    if getattr(self, "use_bidirectional_attention", False):
        return None, arguments
    if structure is not None and self.use_sliding_window_attention:
        offset = arguments.get("cache_update_index", 0)
        window = _band_window(self.sliding_window_size)
        if window is None or ((structure.causal or structure.window is not None)
                              and not _same_value(structure.offset, offset)):
            return None, arguments
        structure = structure.copy(offset=offset,
                                   window=_intersect_windows(structure.window, window))
    return structure, arguments


def _qwen_attention_recipe(self, arguments, structure):
    """Qwen-family `_compute_attention`: the unfused path ANDs the window band
    (`_mask_sliding_window`) into the mask, the fused path does not; apply it in both."""
    size = (self.sliding_window_size if getattr(self, "use_sliding_window_attention", True)
            else None)
    mask = arguments.get("attention_mask")
    if not size or mask is None:
        return structure, arguments
    index = arguments.get("cache_update_index")
    offset = 0 if index is None else index
    arguments = dict(arguments)
    arguments["attention_mask"] = self._mask_sliding_window(mask, cache_update_index=offset)
    if structure is not None:
        window = _band_window(size)
        if window is None or ((structure.causal or structure.window is not None)
                              and not _same_value(structure.offset, offset)):
            structure = None
        else:
            structure = structure.copy(offset=offset,
                                       window=_intersect_windows(structure.window, window))
    return structure, arguments


def _pending_stack():
    stack = getattr(_local, "pending", None)
    if stack is None:
        stack = _local.pending = []
    return stack


def _attention_method(original, recipe, keras_layer=False):
    """Wraps an attention layer's `_compute_attention`: finds the structure recorded for its
    `attention_mask` and offers it to the one `dot_product_attention` call made inside.

    `keras_layer` (Keras' MultiHeadAttention / GroupedQueryAttention): a layer with dropout > 0
    called in inference (`training` false or None, so its dropout does nothing) takes Keras'
    fused branch too, instead of Keras' materializing one (same result)."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def method(self, *args, **kwargs):
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:
            return original(self, *args, **kwargs)
        arguments = bound.arguments
        structure = _lookup(arguments.get("attention_mask"))
        if recipe is not None:
            full = dict(arguments)
            for name, parameter in signature.parameters.items():
                if name not in full and parameter.default is not inspect.Parameter.empty:
                    full[name] = parameter.default
            structure, changed = recipe(self, full, structure)
            if changed is not full:
                bound.arguments["attention_mask"] = changed["attention_mask"]
        # [structure, rows with no key give 0 (Keras' softmax path) instead of uniform]
        slot = [structure, False]
        stack = _pending_stack()
        stack.append(slot)
        try:
            if keras_layer and _keras_inference_with_dropout(self, arguments):
                # Keras' path for this layer is its softmax one: empty rows give 0 there.
                slot[1] = True
                return _keras_fused_branch(self, arguments)
            return original(*bound.args, **bound.kwargs)
        finally:
            stack.pop()
    return method


def _keras_dropout(layer):
    return getattr(layer, "_dropout", getattr(layer, "dropout", 0.0)) or 0.0


def _keras_inference_with_dropout(layer, arguments):
    return (_keras_dropout(layer) > 0.0
            and not arguments.get("training")
            and not arguments.get("return_attention_scores")
            and not getattr(layer, "_return_attention_scores", False)
            and (layer._flash_attention is None or layer._flash_attention)
            and len(arguments["query"].shape) == 4
            and tuple(getattr(layer, "_attention_axes", None) or (1,)) == (1,))


def _keras_fused_branch(layer, arguments):
    """What Keras' MultiHeadAttention / GroupedQueryAttention `_compute_attention` does when it
    uses `dot_product_attention` (its dropout-free branch), for an inference call."""
    from keras.src import ops
    mask = arguments.get("attention_mask")
    if mask is not None:
        for _ in range(4 - len(mask.shape)):
            mask = ops.expand_dims(mask, axis=-3)
        mask = ops.cast(mask, dtype="bool")
    scale = getattr(layer, "_inverse_sqrt_key_dim", getattr(layer, "_inverse_sqrt_head_dim", None))
    output = ops.dot_product_attention(
        query=arguments["query"], key=arguments["key"], value=arguments["value"], bias=None,
        mask=mask, scale=scale, is_causal=bool(arguments.get("use_causal_mask")),
        flash_attention=layer._flash_attention)
    return output, None


def _take_pending():
    """(structure or None, whether rows with no key give 0) for this dot_product_attention
    call; the structure is handed out once."""
    stack = _pending_stack()
    if not stack:
        return None, False
    slot = stack[-1]
    structure, slot[0] = slot[0], None
    return structure, slot[1]


# --------------------------------------------------------------------------------------------
# dot_product_attention


_keras_dpa = None  # Keras' TensorFlow dot_product_attention, set by enable
_keras_ops_dpa = None  # keras.ops.dot_product_attention, set by enable


class _Unsupported(Exception):
    pass


def _warn_once(reason):
    if reason in _warned:
        return
    _warned.add(reason)
    warnings.warn(f"tf_flashattn: keras.ops.dot_product_attention runs Keras' own attention for "
                  f"this call: {reason}. (Warned once per reason.)", UserWarning, stacklevel=4)


def _ops_dpa(query, key, value, bias=None, mask=None, scale=None, is_causal=False,
             flash_attention=None, attn_logits_soft_cap=None):
    """keras.ops.dot_product_attention, accepting `attn_logits_soft_cap` on TensorFlow
    (replaced by tf_flashattn.enable_flash_attention())."""
    if attn_logits_soft_cap is None or (flash_attention is not None and not flash_attention):
        return _keras_ops_dpa(query, key, value, bias=bias, mask=mask, scale=scale,
                              is_causal=is_causal, flash_attention=flash_attention,
                              attn_logits_soft_cap=attn_logits_soft_cap)
    from keras.src.backend import any_symbolic_tensors
    from keras.src.ops.nn import DotProductAttention
    if any_symbolic_tensors((query, key, value)):
        return DotProductAttention(
            is_causal=is_causal, flash_attention=flash_attention,
            attn_logits_soft_cap=attn_logits_soft_cap,
        ).symbolic_call(query, key, value, bias=bias, mask=mask, scale=scale)
    return _flash_dpa(query, key, value, bias=bias, mask=mask, scale=scale, is_causal=is_causal,
                      flash_attention=flash_attention, attn_logits_soft_cap=attn_logits_soft_cap)


def _flash_dpa(query, key, value, bias=None, mask=None, scale=None, is_causal=False,
               flash_attention=None, attn_logits_soft_cap=None):
    """Keras' TensorFlow `dot_product_attention`, computed by the FlashAttention op for
    `flash_attention` True or None (replaced by tf_flashattn.enable_flash_attention())."""
    structure, zero_empty_rows = _take_pending()
    if flash_attention is not None and not flash_attention:
        return _keras_dpa(query, key, value, bias=bias, mask=mask, scale=scale,
                          is_causal=is_causal, flash_attention=flash_attention,
                          attn_logits_soft_cap=attn_logits_soft_cap)
    from keras.src.backend.tensorflow.core import convert_to_tensor
    query, key, value = (convert_to_tensor(t) for t in (query, key, value))
    try:
        plan = _plan(query, key, value, bias, mask, scale, attn_logits_soft_cap)
    except _Unsupported as reason:
        _warn_once(str(reason))
        return _keras_attention(query, key, value, bias, mask, scale, is_causal,
                                attn_logits_soft_cap)
    args = None
    if structure is not None and plan["mask"] is not None:
        args = _structured_args(structure, plan["mask"], query, key, is_causal)
    if args is None:
        args = dict(mask=plan["mask"], is_causal=bool(is_causal))
    from tf_flashattn.attention import dot_product_attention
    may_have_empty_rows = not zero_empty_rows and any(args.get(name) is not None for name in
                              ("mask", "key_mask", "query_mask", "key_lengths", "sliding_window")
                              ) or args.get("causal_offset", 0) < 0
    result = dot_product_attention(query, key, value, bias=plan["bias"], scale=plan["scale"],
                                   attn_logits_soft_cap=plan["soft_cap"],
                                   return_lse=may_have_empty_rows, **args)
    if not may_have_empty_rows:
        return result
    return _uniform_where_empty(*result, value)


def _number(x, name):
    """A Python float from a number known now; _Unsupported for a traced tensor."""
    if isinstance(x, bool):
        raise _Unsupported(f"`{name}` is a bool")
    if isinstance(x, (int, float, np.integer, np.floating)):
        return float(x)
    if isinstance(x, np.ndarray) and x.shape == ():
        return float(x)
    if isinstance(x, tf.Tensor) and x.shape.rank == 0:
        if hasattr(x, "numpy"):
            return float(x.numpy())
        static = tf.get_static_value(x)
        if static is not None:
            return float(static)
        raise _Unsupported(f"`{name}` is a traced tensor (the op needs its value when traced)")
    raise _Unsupported(f"`{name}` of type {type(x).__name__} is not a number")


def _broadcasts(shape, full):
    return shape.rank is not None and shape.rank <= 4 and all(
        n is None or f is None or n in (1, f)
        for n, f in zip(shape.as_list()[::-1], full[::-1]))


def _on_gpu():
    return bool(tf.config.list_logical_devices("GPU"))


def _plan(query, key, value, bias, mask, scale, soft_cap):
    """The op's arguments for a call, or _Unsupported naming why the op cannot serve it."""
    import keras
    for t, name in ((query, "query"), (key, "key"), (value, "value")):
        if t.shape.rank != 4:
            raise _Unsupported(f"`{name}` of shape {t.shape} is not rank 4")
    dtype = keras.backend.result_type(query.dtype.name, key.dtype.name, value.dtype.name)
    if dtype not in ("float16", "bfloat16", "float32", "float64"):
        raise _Unsupported(f"dtype {dtype} (the op takes float16, bfloat16, float32, float64)")
    if dtype == "float64" and _on_gpu() and "CPU" not in (query.device or "").upper():
        raise _Unsupported("float64 with a GPU (the op has no float64 GPU kernel)")
    d, dk, dv = query.shape[3], key.shape[3], value.shape[3]
    if d is not None and dk is not None and d != dk:
        raise _Unsupported(f"query head dim {d} differs from key head dim {dk}")
    for n, name in ((d, "query"), (dk, "key"), (dv, "value")):
        if n is not None and n > _MAX_HEAD_DIM:
            raise _Unsupported(f"{name} head dim {n} is above {_MAX_HEAD_DIM}")
    if scale is None and dk is None and d is None:
        raise _Unsupported("the head dim is not static and no `scale` is given")
    h, hkv = query.shape[2], key.shape[2]
    if h is None or hkv is None or hkv == 0 or h % hkv or value.shape[2] not in (None, hkv):
        raise _Unsupported(f"{h} query heads against {hkv} key/value heads (the op needs static "
                           f"head counts, query heads a multiple of key/value heads)")
    full = [query.shape[0], h, query.shape[1], key.shape[1]]
    plan = {"scale": None if scale is None else _number(scale, "scale"), "soft_cap": None,
            "mask": None, "bias": None}
    if soft_cap is not None:
        cap = _number(soft_cap, "attn_logits_soft_cap")
        if not (cap > 0 and math.isfinite(cap)):
            raise _Unsupported(f"`attn_logits_soft_cap` {cap} is not a positive number")
        plan["soft_cap"] = cap
    if mask is not None:
        mask = tf.convert_to_tensor(mask)
        if mask.dtype != tf.bool:
            raise _Unsupported(f"a mask of dtype {mask.dtype.name} (Keras takes boolean masks)")
        if not _broadcasts(mask.shape, full):
            raise _Unsupported(f"a mask of shape {mask.shape} that does not broadcast to "
                               f"[batch, heads, query_len, key_len] = {full}")
        plan["mask"] = mask
    if bias is not None:
        bias = tf.convert_to_tensor(bias)
        if not _broadcasts(bias.shape, full):
            raise _Unsupported(f"a bias of shape {bias.shape} that does not broadcast to "
                               f"[batch, heads, query_len, key_len] = {full}")
        plan["bias"] = bias
    return plan


def _fits(shape, want):
    return shape.rank == len(want) and all(
        a is None or b is None or a == b for a, b in zip(shape.as_list(), want))


def _structured_args(structure, mask, query, key, is_causal):
    """The op's O(N) arguments equal to `mask` (which the structure describes), or None."""
    batch, t_len, s_len = query.shape[0], query.shape[1], key.shape[1]
    if mask.shape.rank != 4 or mask.shape[1] not in (1, None):
        return None
    for part, want in ((structure.key_mask, [batch, s_len]),
                       (structure.query_mask, [batch, t_len])):
        if part is not None and not _fits(part.shape, want):
            return None
    causal, offset, window = structure.causal, structure.offset, structure.window
    if is_causal:  # Keras' is_causal (offset 0) ANDed with the mask
        if (causal or window is not None) and _static_int(offset) != 0:
            return None
        causal, offset = True, 0
    args = dict(key_mask=structure.key_mask, query_mask=structure.query_mask,
                mask=structure.dense, is_causal=causal)
    if not causal and window is None:
        return args
    static_offset = _static_int(offset)
    if static_offset is not None:
        args.update(causal_offset=static_offset, sliding_window=window)
        return args
    # A traced offset c (KV-cache decoding): one query row sees keys j <= c.
    if window is not None or t_len != 1:
        return None
    s_dyn = tf.shape(key)[1]
    length = tf.clip_by_value(tf.cast(offset, tf.int32) + 1, 0, s_dyn)
    args.update(is_causal=False, key_lengths=tf.fill([tf.shape(query)[0]], length))
    return args


def _uniform_where_empty(output, lse, value):
    """Keras gives a row with no visible key the uniform average of all values; the op gives 0.
    lse [B, H, T] is -inf exactly on those rows."""
    empty = tf.equal(tf.stop_gradient(lse), float("-inf"))
    empty = tf.expand_dims(tf.transpose(empty, [0, 2, 1]), -1)  # [B, T, H, 1]
    mean = tf.reduce_mean(tf.cast(value, output.dtype), axis=1, keepdims=True)  # [B, 1, Hkv, Dv]
    groups = output.shape[2] // value.shape[2]
    if groups > 1:
        mean = tf.repeat(mean, groups, axis=2)
    return tf.where(empty, mean, output)


def _keras_attention(query, key, value, bias, mask, scale, is_causal, soft_cap):
    """Keras' own computation; with a soft cap, Keras' TensorFlow computation with
    c * tanh(s / c) applied to the scaled logits (Keras' TensorFlow backend has no soft cap)."""
    if soft_cap is None:
        return _keras_dpa(query, key, value, bias=bias, mask=mask, scale=scale,
                          is_causal=is_causal, flash_attention=False)
    import keras
    from keras.src.backend.tensorflow import nn as tf_nn
    dtype = keras.backend.result_type(query.dtype.name, key.dtype.name, value.dtype.name)
    query, key, value = (tf.cast(t, dtype) for t in (query, key, value))
    h, hkv = query.shape[2], key.shape[2]
    if h is not None and hkv is not None and h != hkv and h % hkv == 0:
        key = tf.repeat(key, h // hkv, axis=2)
        value = tf.repeat(value, h // hkv, axis=2)
    logits_dtype = keras.backend.result_type(dtype, "float32")
    logits = tf.cast(tf.einsum("BTNH,BSNH->BNTS", query, key), logits_dtype)
    if scale is None:
        scale = 1.0 / tf.sqrt(tf.cast(tf.shape(key)[-1], "float32"))
    logits = logits * tf.cast(scale, logits_dtype)
    cap = tf.cast(soft_cap, logits_dtype)
    logits = cap * tf.tanh(logits / cap)
    if bias is not None:
        logits = logits + tf.cast(bias, logits_dtype)
    logits = tf_nn._apply_masks(logits, mask, is_causal)
    probs = tf.cast(tf.nn.softmax(tf.cast(logits, keras.backend.result_type(
        logits.dtype.name, "float32")), axis=-1), key.dtype)
    return tf.einsum("BNTS,BSNH->BTNH", probs, value)


__all__ = ["enable_flash_attention", "disable_flash_attention", "is_flash_attention_enabled",
           "TESTED_VERSIONS"]
