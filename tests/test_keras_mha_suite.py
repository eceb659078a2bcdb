"""Keras' own attention tests, run against the tf_flashattn layers.

The test files are read from the installed Keras package
(keras/src/layers/attention/multi_head_attention_test.py and
grouped_query_attention_test.py of the pinned Keras release) and loaded as
private module copies whose `layers` name resolves `MultiHeadAttention`,
`GroupedQueryAttention` and `GroupQueryAttention` to our classes and
everything else to `keras.src.layers`. Every test in those files runs,
except the ones in EXCLUDED below, each with its reason.
"""

import importlib.util
import os
import types

import keras
import pytest
from keras.src import layers as keras_layers

from tf_flashattn.layers import FlashGroupQueryAttention
from tf_flashattn.layers import FlashMultiHeadAttention

_KERAS_ATTENTION_DIR = os.path.join(
    os.path.dirname(keras.__file__), "src", "layers", "attention"
)

# Test-name prefix -> reason. A prefix also covers the parameterized variants.
# Empty: every case of both files passes against our layers. Four cases skip
# themselves on the TensorFlow backend, by Keras' own markers, for both files:
# test_basics_with_flash_attention ("Flash attention only supported on JAX and
# Torch") and test_flash_attention_with_errors ("Flash attention is not
# supported on tensorflow and numpy"); they test Keras' `flash_attention=True`
# switch of its JAX/Torch backends, which our layers accept and ignore.
EXCLUDED = {}


def _layers_with_flash():
    """A stand-in for `keras.src.layers` with our classes substituted."""
    proxy = types.ModuleType("tf_flashattn_keras_layers")
    proxy.__getattr__ = lambda name: getattr(keras_layers, name)
    proxy.MultiHeadAttention = FlashMultiHeadAttention
    proxy.GroupedQueryAttention = FlashGroupQueryAttention
    proxy.GroupQueryAttention = FlashGroupQueryAttention
    return proxy


def _load_keras_test_module(filename):
    path = os.path.join(_KERAS_ATTENTION_DIR, filename)
    if not os.path.exists(path):
        pytest.skip(
            f"{path} is not in the installed Keras wheel", allow_module_level=True
        )
    spec = importlib.util.spec_from_file_location(
        "tf_flashattn_suite_" + filename[:-3], path
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # Test bodies look `layers` up at call time, so this swaps the class
    # under test without editing Keras' source.
    module.layers = _layers_with_flash()
    return module


_mha_tests = _load_keras_test_module("multi_head_attention_test.py")
_gqa_tests = _load_keras_test_module("grouped_query_attention_test.py")


class _ExclusionsMixin:
    def setUp(self):
        for prefix, reason in EXCLUDED.items():
            if self._testMethodName.startswith(prefix):
                self.skipTest(reason)
        super().setUp()


class TestKerasMultiHeadAttentionSuite(
    _ExclusionsMixin, _mha_tests.MultiHeadAttentionTest
):
    """keras/src/layers/attention/multi_head_attention_test.py."""


class TestKerasGroupedQueryAttentionSuite(
    _ExclusionsMixin, _gqa_tests.GroupedQueryAttentionTest
):
    """keras/src/layers/attention/grouped_query_attention_test.py."""


def test_suite_really_uses_flash_layers():
    """Guards the substitution: the loaded Keras tests must build our layers."""
    assert _mha_tests.layers.MultiHeadAttention is FlashMultiHeadAttention
    assert _gqa_tests.layers.GroupedQueryAttention is FlashGroupQueryAttention
    assert _mha_tests.layers.Embedding is keras.layers.Embedding
    n_mha = [n for n in dir(TestKerasMultiHeadAttentionSuite) if n.startswith("test")]
    n_gqa = [n for n in dir(TestKerasGroupedQueryAttentionSuite) if n.startswith("test")]
    assert len(n_mha) > 30 and len(n_gqa) > 20, (len(n_mha), len(n_gqa))
