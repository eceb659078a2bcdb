"""Dropout seeds from a Keras `SeedGenerator` without making the host wait for the GPU.

`keras.random.SeedGenerator.next()` (Keras 3, TensorFlow backend) returns a copy of its state and
adds `[0, 1]` to it. In eager mode the `[0, 1]` (and the `* 1` of the copy) are host tensors made
at every call; the state lives on the GPU, so each call copies them host-to-GPU, and TensorFlow
finishes such a copy only after the work already queued on the GPU: the host waits for the GPU at
every call. Inside a `tf.function` or under XLA the same constants are part of the graph and
nothing waits.

`next_seed(generator)` gives the same seeds (the state before the call; the state then advanced by
`[0, 1]`, as `next(ordered=True)` does) without host constants: for Keras' int64 state, with the
op library's NextSeed (the read and the update in one op, one eager dispatch); otherwise with an
increment made once per device and kept there.
"""
import threading

import tensorflow as tf
from tensorflow.python.ops import gen_resource_variable_ops, resource_variable_ops

from tf_flashattn import _ops

_INCREMENTS = {}
_LOCK = threading.Lock()


def _increment(variable):
    """[0, 1] in the state's dtype, on the state's device, made once (the one host-to-GPU copy)."""
    key = (variable.device, variable.dtype)
    inc = _INCREMENTS.get(key)
    if inc is None:
        with _LOCK, tf.device(variable.device):
            inc = _INCREMENTS.get(key)
            if inc is None:
                inc = tf.identity(tf.constant([0, 1], variable.dtype))
                _INCREMENTS[key] = inc
    return inc


def next_seed(seed_generator):
    """The next seed of `seed_generator` (a `keras.random.SeedGenerator`) as an int64 tensor of
    shape [2], equal to `seed_generator.next()`, and advances the generator the same way.

    Use it for the `seed` of `dot_product_attention(..., dropout_rate=r, seed=...)` in eager
    code: Keras' own `next()` makes the host wait for the GPU at every eager call (see the module
    docstring). In a `tf.function` or under XLA it is `next()` itself.
    """
    if not tf.executing_eagerly() or _in_stateless_scope():
        # In a graph both are the same ops; in a keras.StatelessScope the update must go to the
        # scope, as Keras' next() puts it, not to the variable.
        return tf.cast(seed_generator.next(), tf.int64)
    state = seed_generator.state  # a keras.Variable holding [2] integers
    # The backend variable (a plain tf.Variable's `value` is a method, not the variable).
    var = state if isinstance(state, tf.Variable) else getattr(state, "value", state)
    # An int64 [2] resource variable (Keras' TensorFlow backend makes one): the op library's
    # NextSeed, the read and the update in one eager dispatch (each dispatch costs about a matmul's
    # host time), where the op runs (_op_next_seed). Other resource variables: the two variable
    # ops themselves, one read (no identity after it, as read_value() would add; TensorFlow copies
    # the state's buffer before the update while this tensor still shares it, so it keeps the old
    # value) and one update, without the Python layers of value() / assign_add(); anything else
    # takes those methods.
    if isinstance(var, resource_variable_ops.BaseResourceVariable):
        if var.dtype == tf.int64 and var.shape == (2,):
            seed = _op_next_seed(var)
            if seed is not None:
                return seed
        seed = gen_resource_variable_ops.read_variable_op(var.handle, var.dtype)
        gen_resource_variable_ops.assign_add_variable_op(var.handle, _increment(var))
    else:
        seed = var.value()
        var.assign_add(_increment(var), read_value=False)
    return seed if seed.dtype == tf.int64 else tf.cast(seed, tf.int64)


try:
    from keras.src.backend.common.stateless_scope import in_stateless_scope as _in_stateless_scope
except ImportError:  # a Keras without it: no such scope to respect
    def _in_stateless_scope():
        return False


# Per device of a state variable: whether NextSeed runs there (True), or not (False: no op library,
# no kernel for that device, e.g. a CPU-only build on a GPU host, or a GPU the library has no code
# for); unknown until the first call there.
_OP_OK = {}


def _op_next_seed(var):
    """NextSeed on var (an int64 [2] resource variable), or None where the op cannot run on its
    device (the caller then reads and updates the variable itself). The op leaves the variable
    unchanged when it fails, so falling back after a failure draws the same seed."""
    ok = _OP_OK.get(var.device)
    if ok is False:
        return None
    try:
        seed = _ops.load().flash_attn_next_seed(var.handle)
    except (ImportError, tf.errors.NotFoundError, tf.errors.InternalError,
            tf.errors.UnimplementedError):
        if ok:  # it ran on this device before: a real error
            raise
        _OP_OK[var.device] = False
        return None
    _OP_OK[var.device] = True
    return seed
