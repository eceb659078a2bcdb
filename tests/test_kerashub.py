"""KerasHub models with tf_flashattn.enable_flash_attention(), against KerasHub's own path.

Backbones are built from small configs (random weights, nothing downloaded), run in float32 on
a batch with right padding, once as KerasHub runs them on TensorFlow (unfused, dense masks) and
once enabled. With it enabled the traced model must contain the FlashAttention op with the mask
structure as O(N) arguments (no dense mask), the outputs on non-padded positions and the
gradients of every weight must equal KerasHub's, and greedy generate() must give the same
tokens (through the KV cache, whose decode steps have a traced cache index).
"""

import numpy as np
import pytest
import tensorflow as tf

keras_hub = pytest.importorskip("keras_hub")
import keras  # noqa: E402

import tf_flashattn  # noqa: E402

B, T, VOCAB, LAYERS = 2, 8, 40, 2
WINDOW = 3  # small enough to matter at T = 8
CAP = 1.0  # attention logit soft cap, small enough to matter

M = keras_hub.models
COMMON = dict(vocabulary_size=VOCAB, num_layers=LAYERS, hidden_dim=16, intermediate_dim=32)

# name: (backbone factory, expected (window_left, window_right) per layer, soft cap)
MODELS = {
    "llama": (lambda: M.LlamaBackbone(num_query_heads=4, num_key_value_heads=2, **COMMON),
              [(-1, -1)] * LAYERS, 0.0),
    "mistral": (lambda: M.MistralBackbone(num_query_heads=4, num_key_value_heads=2,
                                          sliding_window=WINDOW, **COMMON),
                [(WINDOW - 1, -1)] * LAYERS, 0.0),
    "mixtral": (lambda: M.MixtralBackbone(num_query_heads=4, num_key_value_heads=2,
                                          num_experts=4, top_k=2, sliding_window=WINDOW,
                                          **COMMON),
                [(WINDOW - 1, -1)] * LAYERS, 0.0),
    # Gemma 2: soft-capped logits, sliding window on every other layer.
    "gemma2": (lambda: M.GemmaBackbone(num_query_heads=4, num_key_value_heads=2, head_dim=8,
                                       query_head_dim_normalize=False, use_post_ffw_norm=True,
                                       use_post_attention_norm=True, attention_logit_soft_cap=CAP,
                                       final_logit_soft_cap=30.0,
                                       use_sliding_window_attention=True,
                                       sliding_window_size=WINDOW, **COMMON),
               [(WINDOW - 1, WINDOW - 1), (-1, -1)], CAP),
    "gemma3": (lambda: M.Gemma3Backbone(image_size=16, num_query_heads=4, num_key_value_heads=2,
                                        head_dim=8, attention_logit_soft_cap=CAP,
                                        use_sliding_window_attention=True,
                                        sliding_window_size=WINDOW, **COMMON),
               [(WINDOW - 1, WINDOW - 1)] * LAYERS, CAP),
    "qwen": (lambda: M.QwenBackbone(num_query_heads=4, num_key_value_heads=2,
                                    use_sliding_window_attention=True,
                                    sliding_window_size=WINDOW, **COMMON),
             [(WINDOW - 1, WINDOW - 1)] * LAYERS, 0.0),
    "qwen3": (lambda: M.Qwen3Backbone(num_query_heads=4, num_key_value_heads=2, head_dim=8,
                                      sliding_window_size=WINDOW, **COMMON),
              [(WINDOW - 1, WINDOW - 1)] * LAYERS, 0.0),
    "qwen_moe": (lambda: M.QwenMoeBackbone(num_query_heads=4, num_key_value_heads=2,
                                           moe_intermediate_dim=8,
                                           shared_expert_intermediate_dim=16, num_experts=2,
                                           top_k=1, use_sliding_window_attention=True,
                                           sliding_window_size=WINDOW, **COMMON),
                 [(WINDOW - 1, WINDOW - 1)] * LAYERS, 0.0),
    "qwen3_moe": (lambda: M.Qwen3MoeBackbone(num_query_heads=4, num_key_value_heads=2,
                                             moe_intermediate_dim=8, num_experts=2, top_k=1,
                                             head_dim=8, sliding_window_size=WINDOW,
                                             **COMMON),
                  [(WINDOW - 1, WINDOW - 1)] * LAYERS, 0.0),
    "phi3": (lambda: M.Phi3Backbone(num_query_heads=4, num_key_value_heads=2, **COMMON),
             [(-1, -1)] * LAYERS, 0.0),
    "gpt2": (lambda: M.GPT2Backbone(num_heads=2, dropout=0.0, max_sequence_length=16, **COMMON),
             [(-1, -1)] * LAYERS, 0.0),
    "gpt_neo_x": (lambda: M.GPTNeoXBackbone(num_heads=2, max_sequence_length=16, **COMMON),
                  [(-1, -1)] * LAYERS, 0.0),
    # An encoder (keras_hub.layers.TransformerEncoder on Keras' MultiHeadAttention), not causal,
    # with its default dropout 0.1 (inactive in inference).
    "bert": (lambda: M.BertBackbone(num_heads=2, max_sequence_length=16, **COMMON),
             [(-1, -1)] * LAYERS, 0.0),
}
CAUSAL = {name: name != "bert" for name in MODELS}


# Float32 comparisons in full precision on a GPU; the switch undone after every test (conftest).
pytestmark = pytest.mark.usefixtures("full_float32", "flash_disabled_after")


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(1, VOCAB, size=(B, T)).astype("int32")
    padding = np.ones((B, T), "int32")
    padding[1, 5:] = 0  # right padding, as KerasHub's preprocessors produce
    token_ids[1, 5:] = 0
    return {"token_ids": tf.constant(token_ids), "padding_mask": tf.constant(padding),
            "segment_ids": tf.zeros((B, T), "int32")}


def _model_inputs(backbone, inputs):
    return {name: inputs[name] for name in backbone.input}


def _forward_and_gradients(backbone, inputs):
    """Backbone output, and the gradients of a loss over non-padded positions only."""
    valid = tf.cast(inputs["padding_mask"], "float32")[..., None]
    with tf.GradientTape() as tape:
        out = backbone(_model_inputs(backbone, inputs))
        if isinstance(out, dict):
            out = out["sequence_output"]
        weights = tf.random.stateless_normal(tf.shape(out), seed=[3, 4])
        loss = tf.reduce_sum(out * valid * weights)
    grads = tape.gradient(loss, backbone.trainable_variables)
    return out, [None if g is None else tf.convert_to_tensor(g) for g in grads]


def _graph_nodes(concrete):
    """NodeDefs of a concrete function's graph and of every function in its library (loop
    bodies)."""
    graph_def = concrete.graph.as_graph_def()
    return list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]


def _assert_close_grads(grads, ref_grads, name):
    """Each gradient within 1e-4 of its own largest entry, plus 1e-6 of the largest gradient
    entry of the model: some gradients are zero up to rounding (a key bias under softmax,
    a router whose top-k weights are renormalized) and are float noise on both sides."""
    assert len(grads) == len(ref_grads) > 0
    largest = max(float(np.abs(r).max()) for r in ref_grads if r is not None)
    for g, r in zip(grads, ref_grads):
        assert (g is None) == (r is None), name
        if r is None:
            continue
        scale = float(np.abs(r).max())
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4 * scale + 1e-6 * largest,
                                   err_msg=name)


@pytest.mark.parametrize("name", list(MODELS))
def test_backbone_equals_kerashub(name):
    factory, windows, cap = MODELS[name]
    keras.utils.set_random_seed(0)
    backbone = factory()
    inputs = _inputs()
    ref_out, ref_grads = tf.function(_forward_and_gradients)(backbone, inputs)
    with tf_flashattn.enable_flash_attention():
        fn = tf.function(_forward_and_gradients)
        out, grads = fn(backbone, inputs)
        graph = fn.get_concrete_function(backbone, inputs).graph
    valid = inputs["padding_mask"].numpy().astype(bool)
    np.testing.assert_allclose(np.asarray(out)[valid], np.asarray(ref_out)[valid],
                               atol=2e-5, rtol=1e-5)
    _assert_close_grads(grads, ref_grads, name)

    ops = [op for op in graph.get_operations() if op.type == "FlashAttn>FlashAttention"]
    assert len(ops) == LAYERS
    got = sorted((op.get_attr("window_left"), op.get_attr("window_right")) for op in ops)
    assert got == sorted(windows)
    for op in ops:
        mask, key_mask = op.inputs[3], op.inputs[8]
        assert mask.shape.as_list() == [0], "a dense mask reached the op"
        assert key_mask.shape.as_list() == [B, T], "the padding mask did not reach the op"
        assert op.get_attr("causal") == CAUSAL[name] and op.get_attr("causal_offset") == 0
        assert op.get_attr("softcap") == pytest.approx(cap)
    assert [op for op in graph.get_operations() if op.type == "FlashAttn>FlashAttentionGrad"]
    # KerasHub still builds its dense [B, T, S] mask, but nothing the function returns depends on
    # it: TensorFlow prunes such ops from a tf.function before running it, so it is never built.
    # (Except Gemma's: its attention layers' `call` reads the mask after the attention, to zero
    # rows that attend to nothing; that is KerasHub's own use of the mask it built.)
    masks = [t for op in _needed_ops(graph) for t in op.outputs
             if t.dtype in (tf.bool, tf.int32) and t.shape.as_list()[-2:] == [T, T]]
    if not name.startswith("gemma"):
        assert masks == [], [(t.name, t.shape) for t in masks]


def _needed_ops(graph):
    """The ops the outputs (and control outputs) of a FuncGraph depend on."""
    seen, todo = set(), [t.op for t in graph.outputs] + list(graph.control_outputs)
    while todo:
        op = todo.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        todo.extend(t.op for t in op.inputs)
        todo.extend(op.control_inputs)
    return [op for op in graph.get_operations() if op.name in seen]


def test_backbone_under_xla_and_eagerly(monkeypatch):
    """The same comparison for Llama compiled with XLA (jit_compile=True: Keras' default on a
    GPU), and run eagerly, where the structure must reach the op too."""
    keras.utils.set_random_seed(0)
    backbone = MODELS["llama"][0]()
    inputs = _inputs()
    valid = inputs["padding_mask"].numpy().astype(bool)
    ref_out, ref_grads = tf.function(_forward_and_gradients, jit_compile=True)(backbone, inputs)
    seen = []
    original = tf_flashattn.attention.dot_product_attention

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return original(*args, **kwargs)

    with tf_flashattn.enable_flash_attention():
        out, grads = tf.function(_forward_and_gradients, jit_compile=True)(backbone, inputs)
        np.testing.assert_allclose(np.asarray(out)[valid], np.asarray(ref_out)[valid], atol=2e-5,
                                   rtol=1e-5)
        _assert_close_grads(grads, ref_grads, "llama xla")
        monkeypatch.setattr(tf_flashattn.attention, "dot_product_attention", spy)
        eager = backbone(_model_inputs(backbone, inputs))
    np.testing.assert_allclose(np.asarray(eager)[valid], np.asarray(ref_out)[valid], atol=2e-5,
                               rtol=1e-5)
    assert len(seen) == LAYERS
    for kwargs in seen:
        assert kwargs["mask"] is None and kwargs["key_mask"] is not None and kwargs["is_causal"]


# name: (CausalLM class around the backbone of MODELS[name], jit_compile)
CAUSAL_LMS = {
    "llama": (M.LlamaCausalLM, False),  # decode steps: key_lengths from the traced cache index
    # soft cap; window with a traced index: the dense mask; under XLA
    "gemma2": (M.GemmaCausalLM, True),
    "mistral": (M.MistralCausalLM, False),
    "gpt2": (M.GPT2CausalLM, False),  # Keras' MultiHeadAttention with a KV cache
}


@pytest.mark.parametrize("name", list(CAUSAL_LMS))
def test_greedy_generate_same_tokens(name):
    keras.utils.set_random_seed(1)
    cls, jit_compile = CAUSAL_LMS[name]
    lm = cls(backbone=MODELS[name][0](), preprocessor=None)
    lm.compile(sampler="greedy", jit_compile=jit_compile)
    rng = np.random.default_rng(2)
    length = 12
    token_ids = np.zeros((B, length), "int32")
    padding = np.zeros((B, length), bool)
    for row, prompt in enumerate((4, 3)):
        token_ids[row, :prompt] = rng.integers(1, VOCAB, size=prompt)
        padding[row, :prompt] = True
    inputs = {"token_ids": token_ids, "padding_mask": padding}
    reference = lm.generate(inputs, stop_token_ids=None)["token_ids"]
    with tf_flashattn.enable_flash_attention():
        lm.generate_function = None  # retrace under the replaced functions
        tokens = lm.generate(inputs, stop_token_ids=None)["token_ids"]
        concrete = lm.generate_function.get_concrete_function(
            {k: tf.constant(v) for k, v in inputs.items()}, None)
    lm.generate_function = None
    np.testing.assert_array_equal(tokens, reference)
    assert (tokens[:, 4:] != 0).any()  # something was generated
    nodes = [n for n in _graph_nodes(concrete) if n.op == "FlashAttn>FlashAttention"]
    # Prefill (the cache seeding pass) and the decode loop body, each layer.
    assert len(nodes) == 2 * LAYERS


def test_kv_cache_decode_step_equals_kerashub():
    """One KV-cache decode step with a traced cache index, logits compared directly: Llama uses
    key_lengths = index + 1 (no dense mask), Gemma 2's windowed layer the dense mask."""
    for name, cls in (("llama", M.LlamaCausalLM), ("gemma2", M.GemmaCausalLM)):
        keras.utils.set_random_seed(3)
        lm = cls(backbone=MODELS[name][0](), preprocessor=None)
        token_ids = tf.constant(np.random.default_rng(4).integers(1, VOCAB, (B, 10)), "int32")

        def step(index):
            _, cache = lm._build_cache(token_ids)
            logits, _, _ = lm.call_with_cache(token_ids[:, 6:7], cache, index)
            return logits

        reference = tf.function(step)(tf.constant(6))
        with tf_flashattn.enable_flash_attention():
            fn = tf.function(step)
            logits = fn(tf.constant(6))
            ops = [op for op in fn.get_concrete_function(tf.constant(6)).graph.get_operations()
                   if op.type == "FlashAttn>FlashAttention"]
        np.testing.assert_allclose(logits, reference, atol=2e-5, rtol=1e-5, err_msg=name)
        decode = [op for op in ops if op.inputs[0].shape[1] == 1]
        assert len(decode) == LAYERS
        for op in decode:
            uses_lengths = op.inputs[6].shape.as_list() == [B]
            dense = op.inputs[3].shape.rank == 4
            windowed = name == "gemma2" and op.get_attr("softcap") and dense
            assert uses_lengths or windowed, (name, op.name)


def test_keras_mha_flash_attention_argument_equals_default():
    """Keras' own MultiHeadAttention with flash_attention=True equals its default path."""
    rng = np.random.default_rng(5)
    x = tf.constant(rng.normal(size=(B, T, 16)).astype("float32"))
    padding = tf.constant(_inputs()["padding_mask"].numpy().astype(bool))
    keras.utils.set_random_seed(6)
    default = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)
    reference = default(x, x, value_mask=padding, use_causal_mask=True)
    with tf_flashattn.enable_flash_attention():
        flash = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8, flash_attention=True)
        flash(x, x)
        flash.set_weights(default.get_weights())
        out = flash(x, x, value_mask=padding, use_causal_mask=True)
    np.testing.assert_allclose(out, reference, atol=2e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not tf.config.list_physical_devices("GPU"), reason="no GPU")
def test_gpu_mixed_bfloat16_llama(monkeypatch):
    """On a GPU, with Keras' mixed_bfloat16 policy and XLA: the op runs on the GPU, with the
    structure (no dense mask), and the outputs agree with KerasHub's to bfloat16 accuracy."""
    devices = []
    original = tf_flashattn.attention.dot_product_attention

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        devices.append((out[0] if isinstance(out, tuple) else out).device)
        assert kwargs["mask"] is None and kwargs["key_mask"] is not None
        return out

    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        keras.utils.set_random_seed(0)
        backbone = M.LlamaBackbone(vocabulary_size=VOCAB, num_layers=LAYERS, hidden_dim=256,
                                   intermediate_dim=512, num_query_heads=4, num_key_value_heads=2)
        inputs = _inputs()
        valid = inputs["padding_mask"].numpy().astype(bool)
        inputs = _model_inputs(backbone, inputs)
        reference = tf.function(backbone, jit_compile=True)(inputs)
        with tf_flashattn.enable_flash_attention():
            out = tf.function(backbone, jit_compile=True)(inputs)
            monkeypatch.setattr(tf_flashattn.attention, "dot_product_attention", spy)
            backbone(inputs)  # eagerly: where the op ran
    finally:
        keras.config.set_dtype_policy("float32")
    assert len(devices) == LAYERS and all("GPU" in d for d in devices), devices
    ref = np.asarray(tf.cast(reference, "float32"))[valid]
    got = np.asarray(tf.cast(out, "float32"))[valid]
    assert np.abs(got - ref).max() <= 0.05 * np.abs(ref).max()


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_fit_trains_the_same_weights(name, monkeypatch):
    """`fit` itself (Keras' train_function, XLA when jit_compile) with the op: two identical
    CausalLMs trained for a few steps on padded batches end with the same losses and weights, and
    only the enabled run put the op into its traced steps."""
    from tf_flashattn import _ops
    lib = _ops.load()
    calls = []
    op = lib.flash_attn_flash_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return op(*args, **kwargs)

    monkeypatch.setattr(lib, "flash_attn_flash_attention", counted)
    rng = np.random.default_rng(5)
    token_ids = rng.integers(1, VOCAB, size=(4, T + 1)).astype("int32")
    padding = np.ones((4, T), bool)
    padding[1, 5:] = padding[3, 6:] = False  # right padding
    x = {"token_ids": token_ids[:, :-1] * padding, "padding_mask": padding}
    y, weights = token_ids[:, 1:], padding.astype("float32")

    def train():
        keras.utils.set_random_seed(3)
        lm = CAUSAL_LMS[name][0](backbone=MODELS[name][0](), preprocessor=None)
        lm.compile(optimizer=keras.optimizers.SGD(0.1),
                   loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                   jit_compile=CAUSAL_LMS[name][1])
        history = lm.fit(x, y, sample_weight=weights, batch_size=2, epochs=2, shuffle=False,
                         verbose=0)
        return history.history["loss"], [w.numpy() for w in lm.weights]

    ref_loss, ref_w = train()
    assert not calls
    with tf_flashattn.enable_flash_attention():
        loss, w = train()
    assert len(calls) >= LAYERS  # traced into the train step (once per layer per trace)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5, atol=1e-6)
    for a, b in zip(w, ref_w):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    assert ref_loss[1] < ref_loss[0]  # it trained
