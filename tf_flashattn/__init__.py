"""tf_flashattn: FlashAttention for TensorFlow and Keras.

Exact attention computed tile by tile with an online softmax: the N x N score matrix is never
written to memory. `dot_product_attention` is a drop-in for `keras.ops.dot_product_attention`.
Importing this package registers the `FlashAttn>*` ops, which a SavedModel that uses them needs.
"""
from tf_flashattn import _ops
from tf_flashattn._ops import backends
from tf_flashattn.attention import dot_product_attention
from tf_flashattn.seeds import next_seed

__version__ = "0.1.0"

# Register the ops at import, so tf.saved_model.load finds them after `import tf_flashattn`.
try:
    _ops.load()
except ImportError as e:  # not built yet: calls raise the same message
    import warnings
    warnings.warn(str(e))

from tf_flashattn.layers import FlashGroupQueryAttention, FlashMultiHeadAttention  # noqa: E402
# Keras-wide / KerasHub-wide switch; importing it patches nothing (see keras_integration).
from tf_flashattn.keras_integration import disable_flash_attention  # noqa: E402
from tf_flashattn.keras_integration import enable_flash_attention  # noqa: E402
from tf_flashattn.keras_integration import is_flash_attention_enabled  # noqa: E402

__all__ = ["dot_product_attention", "backends", "next_seed", "FlashMultiHeadAttention",
           "FlashGroupQueryAttention", "enable_flash_attention", "disable_flash_attention",
           "is_flash_attention_enabled"]
