"""Loads the compiled op library (lazily, with a clear message when it is missing)."""
import glob
import os

import tensorflow as tf

_HERE = os.path.dirname(os.path.abspath(__file__))
_lib = None


def library_path():
    """The op library's file (the last of the package's matches), None when it is not built."""
    paths = sorted(glob.glob(os.path.join(_HERE, "_tf_flashattn_ops*.so")))
    return paths[-1] if paths else None


def load():
    """Returns the loaded op module, building nothing: run the README's set-up command first."""
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    if path is None:
        raise ImportError(
            "tf_flashattn's op library is not built. From the repository root run:\n"
            "    pip install -v -e .        (or, to rebuild in place: python build_ops.py)")
    try:
        from tf_flashattn import _build_info
        built_for = _build_info.TF_VERSION
    except ImportError:
        built_for = "unknown"
    if built_for not in ("unknown", tf.__version__):
        raise ImportError(
            f"tf_flashattn's op library was built against TensorFlow {built_for}, but TensorFlow "
            f"{tf.__version__} is installed; rebuild: pip install -v -e . (or python build_ops.py)")
    _lib = tf.load_op_library(path)
    return _lib


def backends():
    """The backends the installed library was built with, e.g. ['CPU', 'CUDA (...)']."""
    try:
        from tf_flashattn import _build_info
    except ImportError:
        raise ImportError("tf_flashattn's build information is missing: rebuild with "
                          "pip install -v -e . (or python build_ops.py)") from None
    return list(_build_info.BACKENDS)


def c_function(name):
    """The op library's C function `name` (cc/kernels/flash_cuda.h) through ctypes, None when the library lacks it
    (built without CUDA) or is not built. TensorFlow loads the library first; ctypes then shares the loaded copy."""
    import ctypes

    path = library_path()
    if path is None:
        return None
    load()
    return getattr(ctypes.CDLL(path), name, None)


def cpu_scratch_fresh():
    """The CPU kernels' scratch pool: (blocks, bytes) it has allocated afresh in this process rather than taken from
    blocks earlier calls released (tf_flashattn_cpu_scratch_fresh in cc/kernels/cpu/flash_cpu.h); None when the
    library is not built. For tests and tools."""
    import ctypes

    fn = c_function("tf_flashattn_cpu_scratch_fresh")
    if fn is None:
        return None
    fn.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    fn.restype = ctypes.c_int
    out = (ctypes.c_int64 * 2)()
    if fn(out) != 2:
        return None
    return int(out[0]), int(out[1])


KERNEL_LAUNCH_NAMES = ("sm90_fwd", "sm90_bwd", "sm90_tf32_fwd", "sm90_tf32_bwd_d64", "sm90_tf32_bwd_d128",
                       "sm90_tf32_bwd_d256")


def kernel_launches():
    """How many times each Hopper kernel family has been launched in this process (host-side counters of the
    library, read without a wait: tf_flashattn_kernel_launches in cc/kernels/flash_cuda.h), as a dict keyed by
    KERNEL_LAUNCH_NAMES; None for a library built without the Hopper kernels or without CUDA. For tests and
    tools that check which path a call took on an H100 / H200."""
    import ctypes

    fn = c_function("tf_flashattn_kernel_launches")
    if fn is None:
        return None
    fn.argtypes = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int]
    fn.restype = ctypes.c_int
    counts = (ctypes.c_int64 * len(KERNEL_LAUNCH_NAMES))()
    n = fn(counts, len(KERNEL_LAUNCH_NAMES))
    if n != len(KERNEL_LAUNCH_NAMES):
        return None
    return dict(zip(KERNEL_LAUNCH_NAMES, (int(c) for c in counts)))
