"""FlashMultiHeadAttention / FlashGroupQueryAttention against the Keras layers.

Every comparison builds the Keras layer and ours on the same shapes, copies
the Keras weights into ours with set_weights and compares in float32 with
dropout 0, so any difference is the attention core's.
"""

import itertools
import json
import os
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src import backend as keras_backend

import tf_flashattn as fa
from tf_flashattn import layers as flash_layers
from tf_flashattn.layers import FlashGroupQueryAttention
from tf_flashattn.layers import FlashMultiHeadAttention

# Float32 comparisons in full precision on a GPU (conftest.full_float32): with TensorFlow's default TF32 both
# sides of a 1e-4 comparison (and the fresh CPU process' export check at 1e-5) round differently (seen on an H100).
pytestmark = pytest.mark.usefixtures("full_float32")

slow = pytest.mark.slow

B, T, S, DIM = 2, 6, 9, 8
ATOL = 2e-5


def _rng(seed=0):
    return np.random.default_rng(seed)


def _inputs(seed=0, t=T, s=S, dim=DIM, query_rank=3):
    rng = _rng(seed)
    extra = (3,) if query_rank == 4 else ()
    query = rng.normal(size=(B,) + extra + (t, dim)).astype("float32")
    value = rng.normal(size=(B,) + extra + (s, dim)).astype("float32")
    key = rng.normal(size=(B,) + extra + (s, dim)).astype("float32")
    return query, value, key


def _masks(seed=0, t=T, s=S):
    """Padding masks with one batch row fully masked, and a dense mask with
    some empty rows: every way Keras can end up with a row of no keys."""
    rng = _rng(seed + 100)
    query_mask = np.ones((B, t), bool)
    query_mask[0, t - 2 :] = False
    value_mask = np.ones((B, s), bool)
    value_mask[0, s - 3 :] = False
    value_mask[1, :] = False  # batch 1: no key at all
    key_mask = rng.random((B, s)) > 0.3
    attention_mask = rng.random((B, t, s)) > 0.4
    attention_mask[1, 2, :] = False
    return query_mask, value_mask, key_mask, attention_mask


def _make_pair(kind, build_shapes, **kwargs):
    """Returns (keras_layer, flash_layer) built on build_shapes, same weights."""
    if kind == "mha":
        ref = keras.layers.MultiHeadAttention(**kwargs)
        ours = FlashMultiHeadAttention(**kwargs)
    else:
        ref = keras.layers.GroupQueryAttention(**kwargs)
        ours = FlashGroupQueryAttention(**kwargs)
    ref.build(*build_shapes)
    ours.build(*build_shapes)
    ours.set_weights(ref.get_weights())
    return ref, ours


MHA_KWARGS = dict(num_heads=2, key_dim=4)
GQA_KWARGS = dict(head_dim=4, num_query_heads=4, num_key_value_heads=2)


def _kwargs(kind):
    return dict(MHA_KWARGS if kind == "mha" else GQA_KWARGS)


def _call_with_keras_masks(layer, query, value, key, qm, vm, km, **call_kwargs):
    """Calls `layer` with the padding masks attached to the input tensors,
    as Keras mask propagation does (fresh tensors: the layers clear masks)."""
    query, value = tf.constant(query), tf.constant(value)
    key = None if key is None else tf.constant(key)
    for tensor, mask in ((query, qm), (value, vm), (key, km)):
        if tensor is not None and mask is not None:
            keras_backend.set_keras_mask(tensor, tf.constant(mask))
    return layer(query, value, key=key, **call_kwargs)


class _Spy:
    """Wraps the op as seen by the layers and records each call's arguments."""

    def __init__(self, monkeypatch):
        self.calls = []
        real = flash_layers.dot_product_attention

        def spy(query, key, value, **kwargs):
            self.calls.append(dict(kwargs, query=query, key=key, value=value))
            return real(query, key, value, **kwargs)

        monkeypatch.setattr(flash_layers, "dot_product_attention", spy)


# ---------------------------------------------------------------------------
# Drop-in equality.


@pytest.mark.parametrize("kind", ["mha", "gqa"])
@pytest.mark.parametrize("sliding_window", [None, 3])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    "use_q,use_v,use_k,use_dense", list(itertools.product([0, 1], repeat=4))
)
def test_equal_to_keras_over_mask_combinations(
    kind, sliding_window, causal, use_q, use_v, use_k, use_dense
):
    query, value, key = _inputs()
    qm, vm, km, dense = _masks()
    shapes = (query.shape, value.shape, key.shape)
    ref, ours = _make_pair(
        kind, shapes, sliding_window=sliding_window, **_kwargs(kind)
    )
    args = (
        query,
        value,
        key,
        qm if use_q else None,
        vm if use_v else None,
        km if use_k else None,
    )
    call_kwargs = dict(use_causal_mask=causal)
    if use_dense:
        call_kwargs["attention_mask"] = dense
    expected = _call_with_keras_masks(ref, *args, **call_kwargs)
    got = _call_with_keras_masks(ours, *args, **call_kwargs)
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=1e-5)
    if kind == "mha" and use_q:
        np.testing.assert_array_equal(keras_backend.get_keras_mask(got), qm)


def _assert_variant_equals_keras(kind, kwargs, seed, causal):
    """Keras' layer and ours, same weights and Keras masks: the same output."""
    query, value, key = _inputs(seed=seed)
    qm, vm, _, _ = _masks(seed=seed)
    ref, ours = _make_pair(kind, (query.shape, value.shape, key.shape), **kwargs)
    expected = _call_with_keras_masks(
        ref, query, value, key, qm, vm, None, use_causal_mask=causal
    )
    got = _call_with_keras_masks(
        ours, query, value, key, qm, vm, None, use_causal_mask=causal
    )
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_heads=2, key_dim=4, value_dim=6),
        dict(num_heads=3, key_dim=5, value_dim=7),  # odd head dims
        dict(num_heads=1, key_dim=33, value_dim=3),
        dict(num_heads=2, key_dim=4, output_shape=5),
        dict(num_heads=2, key_dim=4, output_shape=(3, 4)),
        dict(num_heads=2, key_dim=4, use_bias=False, use_gate=True),
        dict(num_heads=2, key_dim=8, value_dim=4, use_gate=True, output_shape=6),
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
@pytest.mark.parametrize("causal", [False, True])
def test_mha_projection_variants_equal_keras(kwargs, causal):
    _assert_variant_equals_keras("mha", kwargs, seed=1, causal=causal)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(head_dim=5, num_query_heads=6, num_key_value_heads=3),
        dict(head_dim=4, num_query_heads=4, num_key_value_heads=1),  # MQA
        dict(head_dim=4, num_query_heads=2, num_key_value_heads=2),
        dict(head_dim=3, num_query_heads=4, num_key_value_heads=2, use_gate=True),
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()),
)
def test_gqa_variants_equal_keras(kwargs):
    _assert_variant_equals_keras("gqa", kwargs, seed=2, causal=True)


@pytest.mark.parametrize("kind", ["mha", "gqa"])
def test_embedding_mask_propagation_in_functional_model(kind):
    """Masks from Embedding(mask_zero=True) through a Functional model."""
    tokens = np.array([[3, 1, 4, 1, 5, 0, 0], [2, 7, 0, 0, 0, 0, 0]])

    def model_for(layer):
        inputs = keras.Input((None,), dtype="int32")
        x = keras.layers.Embedding(10, DIM, mask_zero=True, name="emb")(inputs)
        x = layer(x, x, use_causal_mask=True)
        return keras.Model(inputs, x)

    ref, ours = _make_pair(kind, ((None, None, DIM), (None, None, DIM)), **_kwargs(kind))
    ref_model, our_model = model_for(ref), model_for(ours)
    our_model.set_weights(ref_model.get_weights())
    expected = ref_model(tokens)
    got = our_model(tokens)
    np.testing.assert_allclose(got, expected, atol=ATOL, rtol=1e-5)


def test_attention_mask_ranks_equal_keras():
    query, value, _ = _inputs(seed=3, s=T)
    ref, ours = _make_pair("mha", (query.shape, value.shape), **MHA_KWARGS)
    tril = np.tril(np.ones((T, T), "float32"))
    for mask in (tril, np.tile(tril[None], (B, 1, 1)), np.tile(tril[None, None], (B, 2, 1, 1))):
        np.testing.assert_allclose(
            ours(query, value, attention_mask=mask),
            ref(query, value, attention_mask=mask),
            atol=ATOL,
        )


# ---------------------------------------------------------------------------
# What reaches the op.


def test_padding_and_causal_masks_reach_the_op_as_o_n_inputs(monkeypatch):
    spy = _Spy(monkeypatch)
    query, value, key = _inputs()
    qm, vm, km, _ = _masks()
    shapes = (query.shape, value.shape, key.shape)
    _, ours = _make_pair("mha", shapes, sliding_window=2, **MHA_KWARGS)
    _call_with_keras_masks(ours, query, value, key, qm, vm, km, use_causal_mask=True)
    (call,) = spy.calls
    assert call["mask"] is None
    assert call["is_causal"] is True
    assert call["sliding_window"] == (1, 1)
    assert tuple(call["query_mask"].shape) == (B, T)
    np.testing.assert_array_equal(call["key_mask"], vm & km)
    assert call["dropout_rate"] == 0.0 and call["seed"] is None


def test_dense_mask_only_when_given(monkeypatch):
    spy = _Spy(monkeypatch)
    query, value, _ = _inputs()
    _, _, _, dense = _masks()
    _, ours = _make_pair("mha", (query.shape, value.shape), **MHA_KWARGS)
    ours(query, value, use_causal_mask=True)
    ours(query, value, attention_mask=dense)
    assert spy.calls[0]["mask"] is None
    assert tuple(spy.calls[1]["mask"].shape) == (B, 1, T, S)


def test_gqa_key_value_heads_not_repeated(monkeypatch):
    spy = _Spy(monkeypatch)
    query, value, _ = _inputs()
    _, ours = _make_pair("gqa", (query.shape, value.shape), **GQA_KWARGS)
    ours(query, value, use_causal_mask=True)
    (call,) = spy.calls
    assert call["query"].shape[2] == 4
    assert call["key"].shape[2] == 2 and call["value"].shape[2] == 2


# ---------------------------------------------------------------------------
# Gradients.


@pytest.mark.parametrize("kind", ["mha", "gqa"])
@pytest.mark.parametrize("mode", ["eager", "tf.function"])
@pytest.mark.parametrize("masked", [False, True])
def test_gradients_equal_keras(kind, mode, masked):
    query, value, key = _inputs(seed=4)
    qm, vm, km, dense = _masks(seed=4)
    ref, ours = _make_pair(kind, (query.shape, value.shape, key.shape), **_kwargs(kind))
    cotangent = tf.constant(_rng(5).normal(size=(B, T, DIM)).astype("float32"))

    def grads(layer):
        def step(q, v, k):
            with tf.GradientTape() as tape:
                tape.watch([q, v, k])
                if masked:
                    for tensor, mask in ((q, qm), (v, vm), (k, km)):
                        keras_backend.set_keras_mask(tensor, tf.constant(mask))
                out = layer(
                    q,
                    v,
                    key=k,
                    use_causal_mask=True,
                    attention_mask=dense if masked else None,
                )
                loss = tf.reduce_sum(out * cotangent)
            return tape.gradient(loss, [q, v, k] + layer.trainable_variables)

        if mode == "tf.function":
            step = tf.function(step)
        return step(tf.constant(query), tf.constant(value), tf.constant(key))

    expected, got = grads(ref), grads(ours)
    assert len(got) == len(expected) > 3
    for g, e in zip(got, expected):
        assert g is not None
        np.testing.assert_allclose(g, e, atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------
# Dropout.


def test_dropout_fused_seeded_and_unbiased(monkeypatch):
    query, value, _ = _inputs(seed=6)
    kwargs = dict(num_heads=2, key_dim=4, dropout=0.3, seed=1234)
    ref, ours = _make_pair("mha", (query.shape, value.shape), **kwargs)
    # Inference: no dropout, Keras' result (its softmax path: empty rows 0).
    qm, vm, _, _ = _masks(seed=6)
    np.testing.assert_allclose(
        _call_with_keras_masks(ours, query, value, None, qm, vm, None),
        _call_with_keras_masks(ref, query, value, None, qm, vm, None),
        atol=ATOL,
    )
    clean = ours(query, value, training=False).numpy()

    spy = _Spy(monkeypatch)
    first = ours(query, value, training=True).numpy()
    second = ours(query, value, training=True).numpy()
    assert spy.calls[0]["dropout_rate"] == pytest.approx(0.3)
    assert spy.calls[0]["seed"].shape == (2,)
    assert not np.allclose(first, clean)
    assert not np.allclose(first, second)  # the seed generator advances

    # Same layer seed, same weights: the same dropout masks.
    twin = FlashMultiHeadAttention(**kwargs)
    twin.build(query.shape, value.shape)
    twin.set_weights(ours.get_weights())
    fresh = FlashMultiHeadAttention(**kwargs)
    fresh.build(query.shape, value.shape)
    fresh.set_weights(ours.get_weights())
    np.testing.assert_allclose(
        twin(query, value, training=True), fresh(query, value, training=True)
    )

    # Inverted dropout is unbiased: the mean over draws nears the clean output
    # (the output projection is linear in the attention output).
    draws = np.mean([ours(query, value, training=True).numpy() for _ in range(300)], axis=0)
    scale = np.abs(clean).mean()
    assert np.abs(draws - clean).mean() < 0.05 * scale, (np.abs(draws - clean).mean(), scale)


# ---------------------------------------------------------------------------
# Fallback paths.


def test_return_attention_scores_falls_back_to_keras(monkeypatch):
    monkeypatch.setattr(flash_layers, "_warned", set())
    query, value, _ = _inputs(seed=7)
    qm, vm, _, _ = _masks(seed=7)
    for kind in ("mha", "gqa"):
        ref, ours = _make_pair(kind, (query.shape, value.shape), **_kwargs(kind))
        expected = _call_with_keras_masks(
            ref, query, value, None, qm, vm, None,
            return_attention_scores=True, use_causal_mask=True,
        )
        with pytest.warns(UserWarning, match="return_attention_scores"):
            got = _call_with_keras_masks(
                ours, query, value, None, qm, vm, None,
                return_attention_scores=True, use_causal_mask=True,
            )
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, atol=ATOL)
        # Only once per process: a second call gives no such warning. (Only ours is looked at:
        # "error" on every warning also failed on unrelated Keras/TensorFlow warnings.)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ours(query, value, return_attention_scores=True)
        assert not [w for w in seen if "return_attention_scores" in str(w.message)], seen


def test_attention_axes_falls_back_to_keras(monkeypatch):
    monkeypatch.setattr(flash_layers, "_warned", set())
    query, value, _ = _inputs(seed=8, query_rank=4)
    ref, ours = _make_pair(
        "mha", (query.shape, value.shape), num_heads=2, key_dim=4, attention_axes=(1, 2)
    )
    with pytest.warns(UserWarning, match="attention_axes"):
        got = ours(query, value)
    np.testing.assert_allclose(got, ref(query, value), atol=ATOL)


@pytest.mark.parametrize("kind", ["mha", "gqa"])
def test_head_dim_above_op_limit_falls_back_to_keras(kind, monkeypatch):
    monkeypatch.setattr(flash_layers, "_warned", set())
    query, value, _ = _inputs(seed=13)
    if kind == "mha":
        kwargs = dict(num_heads=1, key_dim=8, value_dim=flash_layers.MAX_HEAD_DIM + 3)
    else:
        kwargs = dict(
            head_dim=flash_layers.MAX_HEAD_DIM + 1, num_query_heads=2, num_key_value_heads=1
        )
    ref, ours = _make_pair(kind, (query.shape, value.shape), **kwargs)
    with pytest.warns(UserWarning, match="head dims above"):
        got = ours(query, value, use_causal_mask=True)
    np.testing.assert_allclose(got, ref(query, value, use_causal_mask=True), atol=ATOL)


@pytest.mark.parametrize("kind", ["mha", "gqa"])
def test_subclass_overriding_compute_attention_gets_the_fused_core(kind, monkeypatch):
    """Keras' extension point: a subclass that overrides _compute_attention and calls super()
    takes Keras' call path; the core it reaches through super() is the op, with Keras' result."""

    def doubled(base):
        class Doubled(base):
            def _compute_attention(self, query, key, value, *args, **kwargs):
                output, scores = super()._compute_attention(query, key, value, *args, **kwargs)
                return output * 2.0, scores

        return Doubled

    query, value, _ = _inputs(seed=21)
    if kind == "mha":
        ref = doubled(keras.layers.MultiHeadAttention)(**_kwargs(kind))
        ours = doubled(FlashMultiHeadAttention)(**_kwargs(kind))
    else:
        ref = doubled(keras.layers.GroupQueryAttention)(**_kwargs(kind))
        ours = doubled(FlashGroupQueryAttention)(**_kwargs(kind))
    ref.build(query.shape, value.shape)
    ours.build(query.shape, value.shape)
    ours.set_weights(ref.get_weights())
    spy = _Spy(monkeypatch)
    got = ours(query, value, use_causal_mask=True)
    assert len(spy.calls) == 1
    np.testing.assert_allclose(got, ref(query, value, use_causal_mask=True), atol=ATOL)


# ---------------------------------------------------------------------------
# Config, serialization, export.


@pytest.mark.parametrize("kind", ["mha", "gqa"])
def test_config_identical_to_keras(kind):
    kwargs = dict(_kwargs(kind), dropout=0.1, seed=3, sliding_window=4, use_gate=True)
    if kind == "mha":
        kwargs.update(value_dim=6, output_shape=(5,))
        ref = keras.layers.MultiHeadAttention(name="att", **kwargs)
        ours = FlashMultiHeadAttention(name="att", **kwargs)
    else:
        ref = keras.layers.GroupQueryAttention(name="att", **kwargs)
        ours = FlashGroupQueryAttention(name="att", **kwargs)
    assert ours.get_config() == ref.get_config()
    assert ours.supports_jit is True  # the op has an XLA lowering (tests/test_xla.py)
    # Positional arguments as Keras takes them.
    positional = (2, 4, 6) if kind == "mha" else (4, 4, 2)
    ref_cls = keras.layers.MultiHeadAttention if kind == "mha" else keras.layers.GroupQueryAttention
    assert (
        type(ours)(*positional, name="p").get_config()
        == ref_cls(*positional, name="p").get_config()
    )
    clone = type(ours).from_config(ours.get_config())
    assert clone.get_config() == ours.get_config()
    serialized = keras.saving.serialize_keras_object(ours)
    assert serialized["registered_name"] == "tf_flashattn>" + type(ours).__name__
    restored = keras.saving.deserialize_keras_object(json.loads(json.dumps(serialized)))
    assert type(restored) is type(ours)


@keras.saving.register_keras_serializable(package="tf_flashattn_tests")
class AddPositions(keras.layers.Layer):
    """Adds a learned embedding of the position (the tests' tasks need one)."""

    def __init__(self, max_len=64, **kwargs):
        super().__init__(**kwargs)
        self.max_len = max_len

    def build(self, input_shape):
        self.table = self.add_weight(
            shape=(self.max_len, input_shape[-1]), initializer="random_normal", name="table"
        )

    def call(self, x):
        return x + self.table[: keras.ops.shape(x)[1]]

    def get_config(self):
        return dict(super().get_config(), max_len=self.max_len)


def _tiny_lm(vocab=16, dim=DIM, layer=None):
    inputs = keras.Input((None,), dtype="int32")
    x = AddPositions()(keras.layers.Embedding(vocab, dim)(inputs))
    layer = layer or FlashMultiHeadAttention(num_heads=2, key_dim=4)
    x = x + layer(x, x, use_causal_mask=True)
    outputs = keras.layers.Dense(vocab)(x)
    return keras.Model(inputs, outputs)


@pytest.mark.parametrize("kind", ["mha", "gqa"])
def test_keras_file_round_trip(kind, tmp_path):
    layer = (
        FlashMultiHeadAttention(num_heads=2, key_dim=4, value_dim=3, dropout=0.1, seed=7)
        if kind == "mha"
        else FlashGroupQueryAttention(**GQA_KWARGS)
    )
    model = _tiny_lm(layer=layer)
    tokens = _rng(9).integers(0, 16, size=(B, T))
    expected = model(tokens)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert any(type(l) is type(layer) for l in loaded.layers)
    np.testing.assert_allclose(loaded(tokens), expected, atol=1e-6)


_RELOAD_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf
    if sys.argv[2] == "import":
        import tf_flashattn  # registers the op
    tokens, expected = np.load(sys.argv[1] + "/tokens.npy"), np.load(sys.argv[1] + "/expected.npy")
    exported = tf.saved_model.load(sys.argv[1] + "/export")
    np.testing.assert_allclose(exported.serve(tokens), expected, atol=1e-5)
    module = tf.saved_model.load(sys.argv[1] + "/module")
    np.testing.assert_allclose(module(tokens), expected, atol=1e-5)
    print("RELOAD_OK")
    """
)


class _Serving(tf.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def __call__(self, tokens):
        return self.model(tokens, training=False)


def _export_for_reload(tmp_path):
    model = _tiny_lm()
    tokens = _rng(10).integers(0, 16, size=(B, T)).astype("int32")
    np.save(tmp_path / "tokens.npy", tokens)
    np.save(tmp_path / "expected.npy", model(tokens).numpy())
    model.export(str(tmp_path / "export"), verbose=False)
    tf.saved_model.save(_Serving(model), str(tmp_path / "module"))


def _reload(tmp_path, mode):
    return subprocess.run(
        [sys.executable, "-c", _RELOAD_SCRIPT, str(tmp_path), mode],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES=""),
    )


def test_savedmodel_export_reload_in_fresh_process(tmp_path):
    _export_for_reload(tmp_path)
    result = _reload(tmp_path, "import")
    assert "RELOAD_OK" in result.stdout, result.stderr[-3000:]


@slow
def test_savedmodel_without_import_names_the_op(tmp_path):
    """The error README_layers.md explains: loading without `import tf_flashattn`."""
    _export_for_reload(tmp_path)
    result = _reload(tmp_path, "no-import")
    assert result.returncode != 0
    assert "Op type not registered" in result.stderr, result.stderr[-3000:]


# ---------------------------------------------------------------------------
# Training.


def _copy_task(n=256, t=12, vocab=16, seed=11):
    """Target at position i is the token at i - 3: needs attention to look back."""
    tokens = _rng(seed).integers(1, vocab, size=(n, t + 3)).astype("int32")
    return tokens[:, 3:], tokens[:, :-3]


def test_fit_lowers_the_loss():
    keras.utils.set_random_seed(0)
    model = _tiny_lm(dim=16, layer=FlashMultiHeadAttention(num_heads=2, key_dim=8, dropout=0.1))
    model.compile(
        optimizer=keras.optimizers.Adam(3e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x, y = _copy_task()
    history = model.fit(x, y, batch_size=32, epochs=6, verbose=0)
    losses = history.history["loss"]
    # log(15) = 2.71 is the best loss without looking back 3 positions.
    assert losses[-1] < 0.7 * losses[0], losses


def test_custom_loop_in_tf_function_lowers_the_loss():
    keras.utils.set_random_seed(0)
    layer = FlashGroupQueryAttention(head_dim=8, num_query_heads=2, num_key_value_heads=1)
    model = _tiny_lm(dim=16, layer=layer)
    optimizer = keras.optimizers.Adam(3e-2)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x, y = _copy_task()

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = [float(step(x, y)) for _ in range(60)]
    assert losses[-1] < 0.7 * losses[0], losses[::10]


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_policies(policy):
    tolerance = 1e-2 if policy == "mixed_float16" else 5e-2
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        query, value, _ = _inputs(seed=12)
        qm, vm, _, _ = _masks(seed=12)
        ref, ours = _make_pair("mha", (query.shape, value.shape), **MHA_KWARGS)
        args = (query, value, None, qm, vm, None)
        got = _call_with_keras_masks(ours, *args, use_causal_mask=True)
        expected = _call_with_keras_masks(ref, *args, use_causal_mask=True)
        assert got.dtype == ours.compute_dtype != "float32"
        np.testing.assert_allclose(
            tf.cast(got, tf.float32), tf.cast(expected, tf.float32), atol=tolerance, rtol=tolerance
        )
        keras.utils.set_random_seed(0)
        model = _tiny_lm(dim=16, layer=FlashMultiHeadAttention(num_heads=2, key_dim=8))
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        if policy == "mixed_float16":
            assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
        x, y = _copy_task()
        losses = model.fit(x, y, batch_size=16, epochs=3, verbose=0).history["loss"]
        assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    finally:
        keras.config.set_dtype_policy(previous)


# ---------------------------------------------------------------------------
# The examples, end to end at toy size.

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@slow
def test_example_train_export_and_serve(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [_REPO, env.get("PYTHONPATH")]))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 300)
    export_dir = tmp_path / "lm"
    train = subprocess.run(
        [
            sys.executable, os.path.join(_REPO, "examples", "train_char_lm.py"),
            "--data", str(corpus), "--seq-len", "32", "--dim", "32", "--heads", "2",
            "--layers", "1", "--batch-size", "8", "--steps", "60", "--epochs", "2",
            "--val-steps", "2", "--sample-len", "20", "--lr", "1e-2",
            "--export-dir", str(export_dir),
        ],
        capture_output=True, text=True, timeout=600, env=env,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    bpb = float(train.stdout.split("validation: ")[1].split(" bits")[0])
    assert bpb < 4.0, train.stdout[-2000:]  # a uniform guess is 8 bits per byte
    assert "val_bits_per_byte" in train.stdout

    server = subprocess.Popen(
        [sys.executable, os.path.join(_REPO, "examples", "serve.py"),
         "--model-dir", str(export_dir), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )
    try:
        line = server.stdout.readline()
        assert "serving" in line, line
        url = line.split()[-1]
        import urllib.request

        body = {"prompt": "the quick ", "max_tokens": 12, "temperature": 0}
        request = urllib.request.Request(url, data=json.dumps(body).encode())
        reply = json.loads(urllib.request.urlopen(request, timeout=120).read())
        # Bad requests get a 400 naming the problem (before: some crashed the handler, some hung,
        # some were answered from the wrong prompt).
        import http.client
        from urllib.parse import urlparse

        where = urlparse(url)
        bad = [(b'{"prompt": "\xff\xfe"}', {}, "UTF-8"),
               (b'{"prompt": "x", "max_tokens": 1e400}', {}, "`max_tokens`"),
               (b'{"prompt": "x", "max_tokens": -1}', {}, "`max_tokens` must be in"),
               (b'{"prompt": null}', {}, "`prompt` must be a string"),
               (b'{"temperature": NaN}', {}, "`temperature`"),
               (b"{}", {"Content-Length": "abc"}, "Content-Length"),
               (b"{}", {"Content-Length": "-5"}, "Content-Length")]
        for data, headers, message in bad:
            conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
            conn.putrequest("POST", where.path)
            conn.putheader("Content-Length", headers.get("Content-Length", str(len(data))))
            conn.endheaders(data)
            answer = conn.getresponse()
            text = answer.read().decode()
            conn.close()
            assert answer.status == 400 and message in text, (data, answer.status, text)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "?prompt=%ff%fe", timeout=60)
        assert e.value.code == 400
    finally:
        server.terminate()
        server.wait(timeout=60)
    assert len(reply["completion"].encode()) == 12
    assert reply["completion"].startswith("br"), reply  # learned the sentence


@pytest.mark.parametrize("kind", ["mha", "gqa"])
@pytest.mark.parametrize("name,shape,message", [
    ("value_mask", (B, S - 1), "`value_mask` must have shape [batch, value_len] = [2, 9]"),
    ("key_mask", (B, S + 1), "`key_mask` must have shape [batch, key_len] = [2, 9]"),
    ("query_mask", (B, T - 1), "`query_mask` must have shape [batch, query_len] = [2, 6]"),
    ("attention_mask", (B, T, S - 1), "`attention_mask` must broadcast to [batch, query_len, "
                                      "key_len] = [2, 6, 9]"),
    ("attention_mask", (B + 1, T, S), "`attention_mask` must broadcast"),
])
def test_wrong_mask_shapes_name_the_layer_argument(kind, name, shape, message):
    """The op would report its own argument (`key_mask` for a bad `value_mask`) and reshaped
    shapes; the layers name what the caller passed."""
    query, value, _ = _inputs()
    layer = FlashMultiHeadAttention(**MHA_KWARGS) if kind == "mha" else \
        FlashGroupQueryAttention(**GQA_KWARGS)
    with pytest.raises(ValueError) as e:
        layer(query, value, **{name: np.ones(shape, bool)})
    assert message in str(e.value) and type(layer).__name__ in str(e.value)


@pytest.mark.parametrize("shape", [(T, S), (B, T, S), (B, 1, S), (1, T, S), (B, 2, T, S)])
def test_legal_attention_mask_shapes_pass_the_check(shape):
    query, value, _ = _inputs()
    ref, ours = _make_pair("mha", [query.shape, value.shape], **MHA_KWARGS)
    mask = _rng(3).random(shape) > 0.3
    np.testing.assert_allclose(ours(query, value, attention_mask=mask),
                               ref(query, value, attention_mask=mask), atol=ATOL)


def _example(name):
    sys.path.insert(0, os.path.join(_REPO, "examples"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


@pytest.mark.parametrize("name, shown, bad", [
    ("train_char_lm", ["--seq-len", "context length (bytes) (default: 256)", "(default: 'def ')"],
     ["--steps", "0"]),
    ("serve", ["--max-tokens", "(default: 200)", "(default: 'char_lm_savedmodel')"],
     ["--max-tokens", "2001"]),
])
def test_example_help_shows_defaults_and_refuses_bad_values(name, shown, bad, capsys):
    """--help lists every option with its default; an out-of-range value is an argparse error
    naming the option (serve's --max-tokens had no range check; the HTTP field had)."""
    module = _example(name)
    with pytest.raises(SystemExit) as e:
        module.parse_args(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for s in shown:
        assert s in " ".join(text.split()), (s, text)
    assert "None" not in text  # options without a default say nothing, not "(default: None)"
    with pytest.raises(SystemExit) as e:
        module.parse_args(bad)
    assert e.value.code == 2 and bad[0] in capsys.readouterr().err


def test_example_holds_out_about_five_percent(tmp_path):
    """A folder with one large and one small file: the validation split is about 5 % of the
    text whichever file the shuffle puts last (before: the whole large file could be held out)."""
    train_char_lm = _example("train_char_lm")
    (tmp_path / "big.txt").write_text("abcdefghij" * 1000)
    (tmp_path / "small.txt").write_text("klmnopqrst" * 40)
    for seed in range(4):
        args = train_char_lm.parse_args(["--data", str(tmp_path), "--seq-len", "64",
                                         "--seed", str(seed)])
        train, val = train_char_lm.load_corpus(args)
        assert 0.04 < len(val) / (len(train) + len(val)) < 0.06, (seed, len(train), len(val))
    for flag in ("--steps", "--epochs", "--seq-len", "--batch-size"):  # 0 trained forever
        with pytest.raises(SystemExit):
            train_char_lm.parse_args([flag, "0"])


def test_next_seed_gives_keras_seeds_from_a_cached_increment(monkeypatch):
    """fa.next_seed(gen) = gen.next() (the same seeds, the generator advanced the same way), in
    eager mode and in a tf.function; for a state that is not int64 [2] (here a plain int32
    tf.Variable) eagerly from an increment made once per device (Keras' next() makes host
    constants at every eager call, which a GPU state must then wait for)."""
    from tf_flashattn import seeds
    a, b = keras.random.SeedGenerator(11), keras.random.SeedGenerator(11)
    got = [fa.next_seed(b) for _ in range(3)]
    assert all(s.dtype == tf.int64 and s.shape == (2,) for s in got)
    np.testing.assert_array_equal(np.stack([s.numpy() for s in got]),
                                  np.stack([a.next().numpy() for _ in range(3)]))
    f = tf.function(lambda: fa.next_seed(b))
    np.testing.assert_array_equal(f().numpy(), a.next().numpy())
    np.testing.assert_array_equal(f().numpy(), a.next().numpy())
    np.testing.assert_array_equal(b.state.value.numpy(), a.state.value.numpy())

    class Int32State:  # next_seed reads only `.state` eagerly
        state = tf.Variable(np.array([11, 0], np.int32))

    monkeypatch.setattr(seeds, "_INCREMENTS", {})
    got = [fa.next_seed(Int32State).numpy() for _ in range(3)]
    np.testing.assert_array_equal(np.stack(got), [[11, 0], [11, 1], [11, 2]])
    assert all(s.dtype == np.int64 for s in got)
    np.testing.assert_array_equal(Int32State.state.numpy(), [11, 3])
    assert list(seeds._INCREMENTS) == [(Int32State.state.device, tf.int32)]  # one, made once


def test_next_seed_in_a_stateless_scope_updates_the_scope_not_the_variable():
    """Inside keras.StatelessScope, next_seed is Keras' next(): the seeds advance in the scope and
    the generator's variable keeps its value."""
    a, b = keras.random.SeedGenerator(6), keras.random.SeedGenerator(6)
    with keras.StatelessScope() as sa:
        want = [a.next().numpy() for _ in range(2)]
    with keras.StatelessScope() as sb:
        got = [fa.next_seed(b).numpy() for _ in range(2)]
        np.testing.assert_array_equal(sb.get_current_value(b.state).numpy(),
                                      sa.get_current_value(a.state).numpy())
    np.testing.assert_array_equal(np.stack(got), np.stack(want))
    np.testing.assert_array_equal(b.state.value.numpy(), [6, 0])


def test_next_seed_falls_back_where_the_op_cannot_run(monkeypatch):
    """Where NextSeed cannot run (no op library, no kernel for the state's device) next_seed
    reads and updates the state itself, with the same seeds, and stops trying the op there."""
    from tf_flashattn import _ops, seeds
    tries = []

    def no_library():
        tries.append(1)
        raise ImportError("no op library")

    monkeypatch.setattr(_ops, "load", no_library)
    monkeypatch.setattr(seeds, "_OP_OK", {})
    a, b = keras.random.SeedGenerator(8), keras.random.SeedGenerator(8)
    got = np.stack([fa.next_seed(b).numpy() for _ in range(3)])
    np.testing.assert_array_equal(got, np.stack([a.next().numpy() for _ in range(3)]))
    assert len(tries) == 1
    np.testing.assert_array_equal(b.state.value.numpy(), a.state.value.numpy())


def test_next_seed_takes_one_op_for_keras_int64_state(monkeypatch):
    """Keras' generator state is an int64 resource variable: eager next_seed is then the op
    library's NextSeed alone (one dispatch, not a read and an update), with Keras' seeds."""
    from tf_flashattn import _ops
    lib = _ops.load()
    calls = []

    class Spy:
        def __getattr__(self, name):
            return getattr(lib, name)

        def flash_attn_next_seed(self, handle):
            calls.append(handle)
            return lib.flash_attn_next_seed(handle)

    def not_called(*args, **kwargs):
        raise AssertionError("next_seed dispatched a variable op besides NextSeed")

    from tf_flashattn import seeds
    a, b = keras.random.SeedGenerator(5), keras.random.SeedGenerator(5)
    assert b.state.dtype == "int64"
    want = np.stack([a.next().numpy() for _ in range(3)])
    monkeypatch.setattr(_ops, "load", lambda: Spy())
    with monkeypatch.context() as m:  # only around next_seed (Keras' next() reads the state too)
        m.setattr(seeds.gen_resource_variable_ops, "read_variable_op", not_called)
        m.setattr(seeds.gen_resource_variable_ops, "assign_add_variable_op", not_called)
        got = [fa.next_seed(b) for _ in range(3)]
    np.testing.assert_array_equal(np.stack([s.numpy() for s in got]), want)
    assert len(calls) == 3
    np.testing.assert_array_equal(b.state.value.numpy(), a.state.value.numpy())


def test_next_seed_op_keeps_earlier_seeds_wraps_and_names_bad_state():
    """The op returns the state before the call and gives the variable a new tensor: a seed taken
    earlier keeps its value after later calls; the low word wraps as TensorFlow's int64 add; a
    state that is not int64 [2] is refused by name."""
    from tensorflow.python.ops import gen_resource_variable_ops
    lib = fa._ops.load()
    v = tf.Variable(np.array([7, 2**63 - 2], np.int64))
    read = gen_resource_variable_ops.read_variable_op(v.handle, tf.int64)  # shares the buffer
    s1 = lib.flash_attn_next_seed(v.handle)
    s2 = lib.flash_attn_next_seed(v.handle)
    s3 = lib.flash_attn_next_seed(v.handle)
    np.testing.assert_array_equal(s1.numpy(), [7, 2**63 - 2])
    np.testing.assert_array_equal(s2.numpy(), [7, 2**63 - 1])
    np.testing.assert_array_equal(s3.numpy(), [7, -2**63])
    np.testing.assert_array_equal(v.numpy(), [7, -2**63 + 1])
    np.testing.assert_array_equal(read.numpy(), [7, 2**63 - 2])  # the variable got new tensors
    assert s1.dtype == tf.int64 and s1.shape == (2,)
    f = tf.function(lambda: lib.flash_attn_next_seed(v.handle))
    np.testing.assert_array_equal(f().numpy(), [7, -2**63 + 1])
    np.testing.assert_array_equal(v.numpy(), [7, -2**63 + 2])
    for bad in (tf.Variable(np.array([1, 2], np.int32)), tf.Variable(np.zeros(3, np.int64))):
        with pytest.raises(tf.errors.InvalidArgumentError, match="int64 variable of shape \\[2\\]"):
            lib.flash_attn_next_seed(bad.handle)


def test_layer_dropout_seeds_advance_like_keras():
    """The layer takes its dropout seeds through next_seed: two training calls drop differently,
    and a layer rebuilt with the same seed repeats them."""
    def make():
        return fa.FlashMultiHeadAttention(num_heads=2, key_dim=8, dropout=0.5, seed=21)
    x = tf.constant(np.random.default_rng(0).standard_normal((1, 12, 16)).astype("float32"))
    l1, l2 = make(), make()
    l1(x, x)
    l2(x, x)
    l2.set_weights(l1.get_weights())
    y1 = [l1(x, x, training=True).numpy() for _ in range(2)]
    y2 = [l2(x, x, training=True).numpy() for _ in range(2)]
    assert not np.allclose(y1[0], y1[1])
    np.testing.assert_array_equal(y1[0], y2[0])
    np.testing.assert_array_equal(y1[1], y2[1])
