"""tf_flashattn.enable_flash_attention(): Keras' ops and layers against Keras' own path.

Every comparison runs Keras' own computation (nothing enabled, or flash_attention=False) and
the enabled one on the same inputs and weights, in float32, and compares outputs and gradients.
KerasHub models are tested in tests/test_kerashub.py.
"""

import importlib.util
import os
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_flashattn
from tf_flashattn import keras_integration

ATOL = 2e-5
HAVE_KERAS_HUB = importlib.util.find_spec("keras_hub") is not None

# Every function object in Keras' (and KerasHub's) modules and classes, to compare by identity.
_SNAPSHOT_SRC = '''
def snapshot():
    import sys, types
    kinds = (types.FunctionType, staticmethod, classmethod, property)
    out = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "keras" or name.startswith(("keras.", "keras_hub"))):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, types.FunctionType):
                out[(name, attr)] = value
            elif isinstance(value, type) and value.__module__ == name:
                for cattr, cvalue in list(vars(value).items()):
                    if isinstance(cvalue, kinds):
                        out[(name, attr, cattr)] = cvalue
    return out


def changed(a, b):
    return sorted(k for k in set(a) | set(b) if a.get(k) is not b.get(k))
'''
exec(_SNAPSHOT_SRC)


@pytest.fixture
def flash():
    """Enabled for the test (Keras only), always disabled after it."""
    tf_flashattn.enable_flash_attention(keras_hub=False)
    try:
        yield
    finally:
        tf_flashattn.disable_flash_attention()


# Float32 comparisons in full precision on a GPU (conftest).
pytestmark = pytest.mark.usefixtures("full_float32")


@pytest.fixture(autouse=True)
def _always_disabled_after(flash_disabled_after):
    """The switch undone (conftest), then Keras' own flash setting back at its default (None)."""
    yield
    keras.config.enable_flash_attention()  # Keras' default (None)


def flash_ops(fn, *args):
    """The FlashAttention ops in the graph of tf.function `fn` traced for `args`."""
    graph = fn.get_concrete_function(*args).graph
    return [op for op in graph.get_operations() if op.type == "FlashAttn>FlashAttention"]


# ------------------------------------------------------------------------------------------
# Enabling, disabling, versions


def test_import_changes_nothing():
    """A fresh process: Keras' (and KerasHub's) functions are the same objects before and after
    `import tf_flashattn`."""
    script = _SNAPSHOT_SRC + textwrap.dedent(f"""
        import keras
        if {HAVE_KERAS_HUB}:
            import keras_hub
        before = snapshot()
        import tf_flashattn
        after = snapshot()
        assert not tf_flashattn.is_flash_attention_enabled()
        diff = changed(before, after)
        assert not diff, diff
        assert len(before) > 1000, len(before)
        print("OK", len(before))
    """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", script], cwd=root, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK" in result.stdout


def test_enable_replaces_documented_functions_and_disable_restores_them():
    if HAVE_KERAS_HUB:
        import keras_hub  # noqa: F401  (loaded before the snapshot)
    before = snapshot()
    tf_flashattn.enable_flash_attention()
    try:
        assert tf_flashattn.is_flash_attention_enabled()
        during = snapshot()
        patched = [(owner, name) for owner, name, _, _ in keras_integration._patches]
    finally:
        tf_flashattn.disable_flash_attention()
    after = snapshot()
    assert not tf_flashattn.is_flash_attention_enabled()
    # Disable puts back the very same objects, everywhere.
    assert changed(before, after) == []
    replaced = changed(before, during)
    expected = [
        ("keras.src.backend.tensorflow.nn", "dot_product_attention"),
        ("keras.ops", "dot_product_attention"),
        ("keras.src.ops.nn", "dot_product_attention"),
        ("keras.src.layers.attention.multi_head_attention", "MultiHeadAttention",
         "_compute_attention"),
        ("keras.src.layers.attention.multi_head_attention", "MultiHeadAttention",
         "_compute_attention_mask"),
        ("keras.src.layers.attention.grouped_query_attention", "GroupedQueryAttention",
         "_compute_attention"),
    ]
    if HAVE_KERAS_HUB:
        expected += [
            ("keras_hub.src.utils.keras_utils", "fused_attention_op_available"),
            ("keras_hub.src.models.llama.llama_attention", "fused_attention_op_available"),
            ("keras_hub.src.models.llama.llama_attention", "LlamaAttention", "_compute_attention"),
            ("keras_hub.src.models.gemma.gemma_attention", "CachedGemmaAttention",
             "_use_fused_attention_op"),
            ("keras_hub.src.models.llama.llama_decoder", "compute_causal_mask"),
            ("keras_hub.src.layers.modeling.transformer_decoder", "TransformerDecoder",
             "_compute_self_attention_mask"),
        ]
    for key in expected:
        assert key in replaced, key
    # Everything replaced is named in the module docstring (class and attribute).
    doc = keras_integration.__doc__
    for key in replaced:
        for part in key[1:]:
            assert part in doc, key
    # The snapshot sees exactly what the module says it replaced, each once.
    assert len(replaced) == len(patched) == len(set(map(lambda p: (id(p[0]), p[1]), patched)))


def test_context_manager_and_nesting():
    with tf_flashattn.enable_flash_attention(keras_hub=False) as state:
        assert tf_flashattn.is_flash_attention_enabled()
        assert "on" in repr(state)
    assert not tf_flashattn.is_flash_attention_enabled()
    tf_flashattn.enable_flash_attention(keras_hub=False)
    with tf_flashattn.enable_flash_attention(keras_hub=False):
        pass
    assert tf_flashattn.is_flash_attention_enabled()  # it was on before the `with`
    tf_flashattn.disable_flash_attention()
    tf_flashattn.disable_flash_attention()  # a second disable is a no-op
    assert not tf_flashattn.is_flash_attention_enabled()


def test_refuses_untested_keras(monkeypatch):
    monkeypatch.setattr(keras, "__version__", "3.14.2")
    with pytest.raises(RuntimeError, match=r"keras 3\.15\.x.*found keras 3\.14\.2"):
        tf_flashattn.enable_flash_attention(keras_hub=False)
    assert not tf_flashattn.is_flash_attention_enabled()
    assert keras_integration.TESTED_VERSIONS["keras"] == ("3.15",)


@pytest.mark.skipif(not HAVE_KERAS_HUB, reason="keras_hub not installed")
def test_refuses_untested_keras_hub(monkeypatch):
    import keras_hub
    monkeypatch.setattr(keras_hub, "__version__", "0.33.0")
    with pytest.raises(RuntimeError, match=r"keras-hub 0\.32\.x.*found keras-hub 0\.33\.0.*"
                                           r"keras_hub=False"):
        tf_flashattn.enable_flash_attention()
    assert not tf_flashattn.is_flash_attention_enabled()
    with tf_flashattn.enable_flash_attention(keras_hub=False):  # Keras alone is fine
        from keras_hub.src.utils import keras_utils
        assert not keras_utils.fused_attention_op_available()


def test_refuses_other_backends(monkeypatch):
    monkeypatch.setattr(keras.config, "backend", lambda: "jax")
    with pytest.raises(RuntimeError, match="TensorFlow backend"):
        tf_flashattn.enable_flash_attention(keras_hub=False)
    assert not tf_flashattn.is_flash_attention_enabled()


# ------------------------------------------------------------------------------------------
# keras.ops.dot_product_attention


def _qkv(b=2, t=5, s=7, h=4, hkv=2, d=8, dv=None, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(b, t, h, d)).astype("float32")
    k = rng.normal(size=(b, s, hkv, d)).astype("float32")
    v = rng.normal(size=(b, s, hkv, dv or d)).astype("float32")
    return tf.constant(q), tf.constant(k), tf.constant(v)


def _ops_case(name):
    rng = np.random.default_rng(1)
    b, t, s, h, hkv = 2, 5, 7, 4, 2
    kwargs, shape = {}, dict(b=b, t=t, s=s, h=h, hkv=hkv)
    if name == "plain":
        pass
    elif name == "causal":
        kwargs["is_causal"] = True
    elif name == "causal_t_gt_s":
        shape.update(t=9, s=4)
        kwargs["is_causal"] = True
    elif name == "mask_b1ts_empty_rows":
        mask = rng.random((b, 1, t, s)) > 0.4
        mask[0, 0, 1] = False  # a row with no key
        mask[1] = False  # a whole batch entry with no key
        kwargs["mask"] = tf.constant(mask)
    elif name == "mask_ts_causal":
        kwargs["mask"] = tf.constant(rng.random((t, s)) > 0.3)
        kwargs["is_causal"] = True
    elif name == "mask_bhts":
        kwargs["mask"] = tf.constant(rng.random((b, h, t, s)) > 0.3)
    elif name == "bias_and_mask":
        kwargs["bias"] = tf.constant(rng.normal(size=(1, h, t, s)).astype("float32"))
        kwargs["mask"] = tf.constant(rng.random((b, 1, 1, s)) > 0.3)
    elif name == "mha_dv":
        shape.update(hkv=h, dv=6)
        kwargs["scale"] = 0.3
    return shape, kwargs


OPS_CASES = ["plain", "causal", "causal_t_gt_s", "mask_b1ts_empty_rows", "mask_ts_causal",
             "mask_bhts", "bias_and_mask", "mha_dv"]


def _ops_result(q, k, v, kwargs, flash_attention=None):
    watched = [q, k, v] + ([kwargs["bias"]] if "bias" in kwargs else [])
    with tf.GradientTape() as tape:
        tape.watch(watched)
        out = keras.ops.dot_product_attention(q, k, v, flash_attention=flash_attention, **kwargs)
        weights = tf.constant(np.random.default_rng(9).normal(size=out.shape).astype("float32"))
        loss = tf.reduce_sum(out * weights)
    return out, tape.gradient(loss, watched)


@pytest.mark.parametrize("case", OPS_CASES)
def test_ops_dot_product_attention_equals_keras(case):
    shape, kwargs = _ops_case(case)
    q, k, v = _qkv(**shape)  # GQA (4 query heads, 2 key/value heads) unless the case says
    ref_out, ref_grads = _ops_result(q, k, v, kwargs)
    with pytest.raises(ValueError, match="not supported in tensorflow"):
        keras.ops.dot_product_attention(q, k, v, flash_attention=True, **kwargs)
    with tf_flashattn.enable_flash_attention(keras_hub=False):
        for flash_attention in (None, True):
            out, grads = _ops_result(q, k, v, kwargs, flash_attention)
            np.testing.assert_allclose(out, ref_out, atol=ATOL, rtol=1e-5)
            for g, r in zip(grads, ref_grads):
                np.testing.assert_allclose(g, r, atol=1e-4, rtol=1e-4)
        # flash_attention=False is Keras' own computation, no op.
        fn = tf.function(lambda q, k, v: keras.ops.dot_product_attention(
            q, k, v, flash_attention=False, **kwargs))
        assert flash_ops(fn, q, k, v) == []
        np.testing.assert_allclose(fn(q, k, v), ref_out, atol=ATOL)
        fn = tf.function(lambda q, k, v: keras.ops.dot_product_attention(q, k, v, **kwargs))
        assert len(flash_ops(fn, q, k, v)) == 1
        np.testing.assert_allclose(fn(q, k, v), ref_out, atol=ATOL, rtol=1e-5)


def _numpy_attention(q, k, v, scale, cap=None, mask=None):
    """float64 reference: softmax(cap * tanh(scale q.k / cap)) v, GQA by repeating K/V."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    logits = np.einsum("bthd,bshd->bhts", q, k) * scale
    if cap is not None:
        logits = cap * np.tanh(logits / cap)
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhts,bshd->bthd", p, v)


@pytest.mark.parametrize("d", [8, 300])
def test_soft_cap(d):
    """Keras refuses attn_logits_soft_cap on TensorFlow; enabled, it is applied (by the op, or
    for d=300 by the fallback), as c * tanh(s / c) on the scaled logits."""
    q, k, v = _qkv(d=d, seed=3)
    q = q * 3.0
    mask = np.random.default_rng(4).random((2, 1, 5, 7)) > 0.3
    mask[..., 0] = True
    scale = 1.0 / np.sqrt(d)
    with pytest.raises(ValueError, match="attn_logits_soft_cap"):
        keras.ops.dot_product_attention(q, k, v, attn_logits_soft_cap=2.0)
    expected = _numpy_attention(q, k, v, scale, cap=2.0, mask=mask)
    with tf_flashattn.enable_flash_attention(keras_hub=False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = keras.ops.dot_product_attention(q, k, v, mask=tf.constant(mask),
                                              attn_logits_soft_cap=2.0)
        np.testing.assert_allclose(out, expected, atol=3e-5)
        # Without the cap the answer is different: the cap is not ignored.
        assert np.abs(_numpy_attention(q, k, v, scale, mask=mask) - expected).max() > 1e-2
        with pytest.raises(ValueError, match="attn_logits_soft_cap"):
            keras.ops.dot_product_attention(q, k, v, attn_logits_soft_cap=2.0,
                                            flash_attention=False)


def test_fallback_warns_once_and_equals_keras(flash):
    q, k, v = _qkv(d=300, seed=5)
    mask = tf.constant(np.random.default_rng(6).random((2, 1, 5, 7)) > 0.3)
    ref = keras.ops.dot_product_attention(q, k, v, mask=mask, flash_attention=False)
    with pytest.warns(UserWarning, match="head dim 300 is above 256"):
        out = keras.ops.dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_allclose(out, ref, atol=ATOL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning for the same reason
        keras.ops.dot_product_attention(q, k, v, mask=mask)

    # A scale that is a traced tensor: the op needs it when traced.
    q, k, v = _qkv(seed=7)
    fn = tf.function(lambda q, k, v, scale: keras.ops.dot_product_attention(
        q, k, v, scale=scale, is_causal=True))
    with pytest.warns(UserWarning, match="`scale` is a traced tensor"):
        out = fn(q, k, v, tf.constant(0.2))
    ref = keras.ops.dot_product_attention(q, k, v, scale=0.2, is_causal=True,
                                          flash_attention=False)
    np.testing.assert_allclose(out, ref, atol=ATOL)

    # A mask that does not broadcast: Keras' own computation, which raises.
    bad = tf.ones((2, 1, 5, 8), tf.bool)
    with pytest.warns(UserWarning, match="does not broadcast"):
        with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
            keras.ops.dot_product_attention(q, k, v, mask=bad)


# ------------------------------------------------------------------------------------------
# Keras' MultiHeadAttention and GroupQueryAttention


B, T, DIM = 2, 8, 16


def _layer_inputs(seed=0):
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(size=(B, T, DIM)).astype("float32"))
    padding = np.ones((B, T), bool)
    padding[0, 5:] = False
    padding[1, :] = False  # batch entry 1 has no key at all: Keras gives uniform rows
    return x, tf.constant(padding)


LAYER_CASES = {
    "causal_only": dict(call=dict(use_causal_mask=True)),
    "padding_causal": dict(call=dict(use_causal_mask=True), masks=("value_mask", "key_mask")),
    "padding_window": dict(layer=dict(sliding_window=3), call=dict(use_causal_mask=True),
                           masks=("value_mask",)),
    "custom_mask_causal": dict(call=dict(use_causal_mask=True), masks=("value_mask",),
                               custom=True),
    "dropout_inference": dict(layer=dict(dropout=0.25), call=dict(use_causal_mask=True),
                              masks=("value_mask",)),
}


def _make_layer(kind, seed, **kwargs):
    keras.utils.set_random_seed(seed)
    if kind == "mha":
        return keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, **kwargs)
    return keras.layers.GroupQueryAttention(head_dim=8, num_query_heads=4,
                                            num_key_value_heads=2, **kwargs)


def _layer_call(layer, x, case, padding, training=False):
    kwargs = dict(case.get("call", {}))
    for name in case.get("masks", ()):
        kwargs[name] = padding
    if case.get("custom"):
        rng = np.random.default_rng(11)
        kwargs["attention_mask"] = tf.constant(rng.random((B, T, T)) > 0.3)
    weights = tf.constant(np.random.default_rng(12).normal(size=(B, T, DIM)).astype("float32"))
    with tf.GradientTape() as tape:
        out = layer(x, x, training=training, **kwargs)
        loss = tf.reduce_sum(out * weights)
    return out, tape.gradient(loss, layer.trainable_variables)


@pytest.mark.parametrize("kind", ["mha", "gqa"])
@pytest.mark.parametrize("case_name", list(LAYER_CASES))
@pytest.mark.parametrize("switch", ["flash_attention_argument", "keras_config"])
def test_keras_attention_layers_equal_default_path(kind, case_name, switch):
    case = LAYER_CASES[case_name]
    if switch == "flash_attention_argument" and case_name == "dropout_inference":
        pytest.skip("Keras refuses flash_attention=True with dropout")
    x, padding = _layer_inputs()
    layer_kwargs = dict(case.get("layer", {}))
    if switch == "flash_attention_argument":
        layer_kwargs["flash_attention"] = True
    else:
        keras.config.enable_flash_attention()  # Keras' own switch (its default)
    reference = _make_layer(kind, 0, **{k: v for k, v in layer_kwargs.items()
                                        if k != "flash_attention"})
    ref_out, ref_grads = _layer_call(reference, x, case, padding)
    layer = _make_layer(kind, 0, **layer_kwargs)
    with tf_flashattn.enable_flash_attention(keras_hub=False):
        _layer_call(layer, x, case, padding)  # build (Keras alone refuses flash_attention=True)
        layer.set_weights(reference.get_weights())
        fn = tf.function(lambda x: _layer_call(layer, x, case, padding))
        out, grads = fn(x)
        ops = flash_ops(fn, x)
    np.testing.assert_allclose(out, ref_out, atol=ATOL, rtol=1e-5)
    assert len(grads) == len(ref_grads) > 0
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g, r, atol=1e-4, rtol=1e-4)
    assert len(ops) == 1
    op = ops[0]
    mask_input, key_mask_input = op.inputs[3], op.inputs[8]
    if case.get("custom"):
        assert mask_input.shape.rank == 4  # the caller's mask, passed on
    else:
        assert mask_input.shape.as_list() == [0]  # no dense mask reaches the op
    assert op.get_attr("causal")
    if case.get("masks"):
        assert key_mask_input.shape.as_list() == [B, T]
    if case_name == "padding_window":
        assert (op.get_attr("window_left"), op.get_attr("window_right")) == (2, 2)


def test_keras_layers_without_flash(flash):
    """Layers built after keras.config.disable_flash_attention() keep Keras' path (in Keras,
    a layer's flash_attention=False counts only then: `flash_attention or
    is_flash_attention_enabled()`); a layer with dropout keeps it in training."""
    x, padding = _layer_inputs()
    keras.config.disable_flash_attention()
    for kind in ("mha", "gqa"):
        layer = _make_layer(kind, 0)
        fn = tf.function(lambda x: layer(x, x, use_causal_mask=True))
        assert flash_ops(fn, x) == []
    keras.config.enable_flash_attention()
    layer = _make_layer("mha", 0, dropout=0.25)
    fn = tf.function(lambda x: layer(x, x, use_causal_mask=True, training=True))
    assert flash_ops(fn, x) == []
    fn = tf.function(lambda x: layer(x, x, use_causal_mask=True, training=False))
    assert len(flash_ops(fn, x)) == 1


def test_eager_layer_call_uses_structure(flash, monkeypatch):
    """Eagerly too, the recorded structure reaches the op (no dense mask argument)."""
    seen = []
    original = tf_flashattn.attention.dot_product_attention

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(tf_flashattn.attention, "dot_product_attention", spy)
    x, padding = _layer_inputs()
    layer = _make_layer("mha", 0, sliding_window=3)
    reference = layer(x, x, value_mask=padding, use_causal_mask=True)
    assert len(seen) == 1
    assert seen[0]["mask"] is None and seen[0]["key_mask"] is not None
    assert seen[0]["is_causal"] and seen[0]["sliding_window"] == (2, 2)
    tf_flashattn.disable_flash_attention()
    np.testing.assert_allclose(reference, layer(x, x, value_mask=padding, use_causal_mask=True),
                               atol=ATOL)


@pytest.mark.gpu
@pytest.mark.skipif(not tf.config.list_physical_devices("GPU"), reason="no GPU")
def test_float64_with_gpu_falls_back(flash):
    """The op has no float64 GPU kernel: Keras' own computation runs there, with a warning."""
    q, k, v = (tf.cast(t, "float64") for t in _qkv(seed=8))
    ref = keras.ops.dot_product_attention(q, k, v, is_causal=True, flash_attention=False)
    with pytest.warns(UserWarning, match="float64 with a GPU"):
        out = keras.ops.dot_product_attention(q, k, v, is_causal=True)
    np.testing.assert_allclose(out, ref, atol=1e-12)

