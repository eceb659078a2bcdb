import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# On a GPU machine the suite's process and the fresh TensorFlow processes some tests start (switches read once per
# process, determinism, export) share the GPU: without growth the first would take nearly all its memory at its
# first GPU op and the others could not start. benchmarks/gpu_run.sh has always run the GPU tests so.
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


import pytest  # noqa: E402


@pytest.fixture
def full_float32():
    """Full float32 matmuls for the test (restored after). On a GPU TensorFlow's float32 matmuls
    default to TF32 (about 1e-3 relative error), which would round the two sides of a tight
    float32 comparison differently; no effect on the CPU."""
    import tensorflow as tf
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    yield
    tf.config.experimental.enable_tensor_float_32_execution(before)


@pytest.fixture
def on_cpu():
    """The test's ops on the CPU, also where TensorFlow sees a GPU (there they would land on the GPU
    kernels, held to their own error bars in test_gpu.py / test_gpu_decode.py, and float32 would run
    as TF32): for the CPU kernels' test files. No effect on a CPU-only machine."""
    import tensorflow as tf
    with tf.device("/CPU:0"):
        yield


@pytest.fixture
def flash_disabled_after():
    """tf_flashattn.enable_flash_attention() undone after the test, whatever it left."""
    yield
    import tf_flashattn
    tf_flashattn.disable_flash_attention()
