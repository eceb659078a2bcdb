"""The XLA lowering (cc/ops/flash_attention_xla.cc): inside tf.function(jit_compile=True) the ops
become XLA custom calls running the same kernels: XLA:CPU on a CPU-only machine (CI), XLA:GPU
where TensorFlow sees a GPU (benchmarks/gpu_run.sh tests runs this file there too).

Each case runs the forward and the gradients of a random loss eagerly (TensorFlow kernels) and
under jit_compile=True, and requires them to agree (same kernel, so float32 agrees to rounding of
the ops around it), and checks the XLA result against the float64 reference once more."""
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_flashattn as fa
from reference import allowed_mask, dropout_keep_mask, f32_scale, rand, reference_attention


GPU = bool(tf.config.list_physical_devices("GPU"))


@pytest.fixture(autouse=True)
def _full_float32():
    """float32 in full precision (TF32 off) so that results can be held to float32 tolerances on
    GPU machines too (TF32 is on by default there); test_jit_tf32_equals_eager covers TF32."""
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    yield
    tf.config.experimental.enable_tensor_float_32_execution(before)


def _loss_and_grads(q, k, v, bias, w, wl, kw):
    watched = [q, k, v] + ([bias] if bias is not None else [])
    with tf.GradientTape() as tape:
        tape.watch(watched)
        out, lse = fa.dot_product_attention(q, k, v, bias=bias, return_lse=True, **kw)
        loss = tf.reduce_sum(tf.cast(out, tf.float32) * w)
        if wl is not None:
            loss += tf.reduce_sum(tf.where(tf.math.is_finite(lse), lse, 0.0) * wl)
    return (out, lse) + tuple(tape.gradient(loss, watched))


def _run(q, k, v, bias=None, with_lse=False, **kw):
    rng = np.random.default_rng(11)
    w = tf.constant(rng.standard_normal((q.shape[0], q.shape[1], q.shape[2], v.shape[3])), tf.float32)
    wl = tf.constant(rng.standard_normal((q.shape[0], q.shape[2], q.shape[1])), tf.float32) if with_lse else None
    eager = _loss_and_grads(q, k, v, bias, w, wl, kw)
    xla = tf.function(lambda q, k, v, b: _loss_and_grads(q, k, v, b, w, wl, kw),
                      jit_compile=True)(q, k, v, bias)
    return eager, xla


def _hlo(fn, *args):
    return tf.function(fn, jit_compile=True).experimental_get_compiler_ir(*args)(stage="hlo")


def test_the_op_becomes_one_custom_call_per_direction():
    rng = np.random.default_rng(0)
    q, k, v = rand(rng, 1, 8, 2, 16), rand(rng, 1, 8, 2, 16), rand(rng, 1, 8, 2, 16)

    def f(q, k, v):
        with tf.GradientTape() as t:
            t.watch([q, k, v])
            o = fa.dot_product_attention(q, k, v, is_causal=True)
            loss = tf.reduce_sum(o * o)
        return t.gradient(loss, [q, k, v])

    hlo = _hlo(f, q, k, v)
    assert hlo.count('custom_call_target="tf_flashattn_fwd"') == 1, hlo
    assert hlo.count('custom_call_target="tf_flashattn_bwd"') == 1, hlo


def test_custom_calls_pin_every_operand_and_result_to_row_major():
    """The kernels read and write dense row-major buffers and an FFI buffer carries no layout: a
    custom call without layout constraints lets XLA's layout assignment give its operands and
    results whatever layout producers and users prefer (on the H200 a model compiled with XLA
    trained to a different loss at one context). Each call must constrain every operand to the
    descending layout (the result's layouts, printed here before layout assignment, are a sanity
    check only)."""
    rng = np.random.default_rng(0)
    q, k, v = rand(rng, 1, 8, 2, 16), rand(rng, 1, 8, 2, 16), rand(rng, 1, 8, 2, 16)

    def f(q, k, v):
        with tf.GradientTape() as t:
            t.watch([q, k, v])
            o = fa.dot_product_attention(tf.transpose(q, [0, 2, 1, 3]), k, v, is_causal=True)
            loss = tf.reduce_sum(o * o)
        return t.gradient(loss, [q, k, v])

    q = tf.transpose(q, [0, 2, 1, 3])
    hlo = _hlo(f, q, k, v)
    calls = [line for line in hlo.splitlines() if 'custom_call_target="tf_flashattn' in line]
    assert len(calls) == 2, hlo

    def descending(text):
        """Each array shape in `text` has the layout {rank-1, ..., 0}."""
        found = re.findall(r"\[([\d,]*)\]\{([\d,]*)\}", text)
        assert found, text
        return all(layout == ",".join(map(str, reversed(range(len(dims.split(",")) if dims else 0))))
                   for dims, layout in found)

    for line in calls:
        assert "operand_layout_constraints={" in line, line
        assert descending(line.split("operand_layout_constraints=", 1)[1].split("}}", 1)[0] + "}"), line
        assert descending(line.split(" custom-call(")[0].split(" = ", 1)[1]), line


_ALIAS = "output_to_operand_aliasing={{0}: (0, {})}"


def _fwd_calls(hlo):
    return [line for line in hlo.splitlines() if 'custom_call_target="tf_flashattn_fwd"' in line]


def test_absent_seed_is_an_empty_operand():
    """Without dropout the seed operand is s64[0], as every other absent input: a [2] placeholder of
    zeros became a broadcast kernel under XLA (a splat constant), one launch per call, inside a
    decoding loop too. With dropout it is the [2] seed."""
    rng = np.random.default_rng(0)
    q = rand(rng, 1, 8, 2, 16)
    plain = _hlo(lambda q: fa.dot_product_attention(q, q, q), q)
    assert "s64[2]" not in plain, plain
    assert "s64[0]" in _fwd_calls(plain)[0].split(" custom-call(")[1], _fwd_calls(plain)
    dropped = _hlo(lambda q: fa.dot_product_attention(q, q, q, dropout_rate=0.1, seed=[1, 2]), q)
    assert "s64[2]" in _fwd_calls(dropped)[0].split(" custom-call(")[1], _fwd_calls(dropped)


def test_decoding_forward_aliases_its_output_to_the_query_on_gpu_only():
    """A forward with few query rows (Tq <= 16) and Dv == D declares its output aliased to the query
    (output_to_operand_aliasing) on XLA:GPU; training shapes (the query is live until the backward),
    Dv != D and XLA:CPU do not."""
    rng = np.random.default_rng(5)
    k, v = rand(rng, 2, 77, 2, 64), rand(rng, 2, 77, 2, 64)
    fwd = lambda q: fa.dot_product_attention(q, k, v, key_lengths=[77, 40])
    cpu = tf.function(fwd, jit_compile=True).experimental_get_compiler_ir(rand(rng, 2, 1, 8, 64))(
        stage="hlo", device_name="/device:CPU:0")
    assert _ALIAS not in _fwd_calls(cpu)[0], cpu
    if not GPU:
        return
    for tq, aliased in ((1, True), (16, True), (17, False)):
        call = _fwd_calls(_hlo(fwd, rand(rng, 2, tq, 8, 64)))
        assert (_ALIAS in call[0]) == aliased, (tq, call)
    dv = rand(rng, 2, 77, 2, 32)
    hlo = _hlo(lambda q: fa.dot_product_attention(q, k, dv), rand(rng, 2, 1, 8, 64))
    assert "output_to_operand_aliasing" not in hlo, hlo  # Dv != D: different shapes


@pytest.mark.skipif(not GPU, reason="the forward aliases its output to the query on XLA:GPU only")
@pytest.mark.parametrize("case", ["decode", "decode_one_split", "tiled_kernels", "dropout", "float32",
                                  "query_live_after"])
def test_decoding_forward_in_place_equals_eager(case, monkeypatch):
    """With the output aliased to the query the forward runs in place: each kernel that can take such
    a call must read a tile's query rows before any output row lands on them. A decoding loop whose
    next query is the output (no copy of the output per step left in XLA's optimized HLO) equals the
    eager loop: the decoding kernel with key splits and without, the tiled kernels (decoding turned
    off: the Hopper forward on an H200, else sm80's), with dropout (the tiled kernels), in float32;
    and a query that stays live after the call is left intact (XLA copies it)."""
    rng = np.random.default_rng(7)
    dtype = tf.float32 if case == "float32" else tf.bfloat16
    if case == "decode_one_split":
        monkeypatch.setenv("TF_FLASHATTN_DECODE_SPLITS", "1")
    if case == "tiled_kernels":
        monkeypatch.setenv("TF_FLASHATTN_DECODE", "off")
    k, v = rand(rng, 2, 300, 2, 64, dtype=dtype), rand(rng, 2, 300, 2, 64, dtype=dtype)
    kw = dict(dropout_rate=0.1, seed=[3, 4]) if case == "dropout" else {}
    fwd = lambda q: fa.dot_product_attention(q, k, v, key_lengths=[300, 129], **kw)
    close = lambda a, b: np.testing.assert_allclose(tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy(),
                                                    rtol=2e-2, atol=2e-2)
    if case == "query_live_after":
        q = rand(rng, 2, 3, 8, 64, dtype=dtype)
        out, q_after = tf.function(lambda q: (fwd(q), q * 2), jit_compile=True)(q)
        np.testing.assert_array_equal(tf.cast(q_after, tf.float32).numpy(), tf.cast(q * 2, tf.float32).numpy())
        close(out, fwd(q))
        return

    def chain(x):
        return tf.while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, fwd(x)), (tf.constant(0), x))[1]

    x0 = rand(rng, 2, 1, 8, 64, dtype=dtype)
    eager = x0
    for _ in range(5):
        eager = fwd(eager)
    close(tf.function(chain, jit_compile=True)(x0), eager)
    # The loop's optimized HLO: no copy of the forward's output (XLA put it in the loop's buffer).
    hlo = tf.function(chain, jit_compile=True).experimental_get_compiler_ir(x0)(stage="optimized_hlo")
    call = _fwd_calls(hlo)[0].split(" = ", 1)[0].strip().removeprefix("ROOT ")
    outs = [line.split(" = ", 1)[0].strip() for line in hlo.splitlines()
            if "get-tuple-element(" + call + ")" in line and "index=0" in line]
    copies = [line for line in hlo.splitlines() if any(f"copy({o})" in line for o in outs)]
    assert outs and not copies, (call, outs, copies)


@pytest.mark.parametrize("batch", [1, 3])
def test_jit_with_transposed_and_projected_operands_equals_eager(batch):
    """Operands XLA would rather keep in another layout (a transpose's result, which layout
    assignment can turn into a layout change, and dots whose preferred output layouts depend on
    the shape) and results consumed by a transpose and a dot: under jit_compile the custom calls
    must still see and produce row-major buffers, so forward and gradients equal eager ones."""
    rng = np.random.default_rng(batch)
    T, H, D, C = 48, 4, 16, 24
    x = rand(rng, batch, H, T, D)  # [B, H, T, D]: the op takes [B, T, H, D]
    y = rand(rng, batch, T, C)
    wk, wv = rand(rng, C, H, D), rand(rng, C, H, D)
    wo = rand(rng, H, D, C)
    w1, w2 = rand(rng, batch, T, C), rand(rng, batch, H, D, T)  # random linear loss weights

    def f(x, y, wk, wv, wo):
        with tf.GradientTape() as tape:
            tape.watch([x, y, wk, wv, wo])
            q = tf.transpose(x, [0, 2, 1, 3])
            k = tf.einsum("btc,chd->bthd", y, wk) * 0.2
            v = tf.einsum("btc,chd->bthd", y, wv)
            o = fa.dot_product_attention(q, k, v, is_causal=True)  # [B, T, H, D]
            out = tf.einsum("bthd,hdc->btc", o, wo)
            loss = tf.reduce_sum(out * w1) + tf.reduce_sum(tf.transpose(o, [0, 2, 3, 1]) * w2)
        return [out] + tape.gradient(loss, [x, y, wk, wv, wo])

    args = (x, y, wk, wv, wo)
    eager = f(*args)
    xla = tf.function(f, jit_compile=True)(*args)
    for i, (a, b) in enumerate(zip(eager, xla)):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"result {i}")


@pytest.mark.parametrize("shape", [(0, 5, 2, 8, 7, 2, 8), (2, 0, 2, 8, 7, 2, 8), (2, 5, 2, 8, 0, 1, 8)],
                         ids=["no_batch", "no_queries", "no_keys"])
def test_jit_empty_sizes_equal_eager(shape):
    """Zero-size batches and sequences under jit_compile: the same (empty or zero) outputs and
    gradients as the eager op (XLA does not zero its buffers: every element must be written)."""
    B, Tq, H, D, Tk, Hkv, Dv = shape
    rng = np.random.default_rng(sum(shape))
    q, k, v = rand(rng, B, Tq, H, D), rand(rng, B, Tk, Hkv, D), rand(rng, B, Tk, Hkv, Dv)
    eager, xla = _run(q, k, v, with_lse=True)
    for i, (a, b) in enumerate(zip(eager, xla)):
        assert a.shape == b.shape, i
        np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=f"result {i}")


def test_dynamic_dimension_under_jit_names_the_argument():
    """tf.boolean_mask inside jit_compile gives a bounded-dynamic dimension (f32[1,<=8,2,16]): the
    kernels need static shapes, and the error names the argument that has one."""
    rng = np.random.default_rng(3)
    q = rand(rng, 1, 8, 2, 16)
    keep = tf.constant([True, False] * 4)

    @tf.function(jit_compile=True)
    def f(q, keep):
        k = tf.boolean_mask(q, keep, axis=1)
        return fa.dot_product_attention(q, k, k)

    with pytest.raises(tf.errors.UnimplementedError, match="`key` has a dynamic dimension"):
        f(q, keep)


CASES = {
    "plain_odd_sizes": dict(shape=(2, 37, 4, 40, 53, 4, 24), kw=dict()),
    "causal_gqa": dict(shape=(2, 113, 4, 64, 203, 2, 64), kw=dict(is_causal=True)),
    "window_softcap_lse": dict(shape=(1, 65, 2, 32, 65, 1, 32),
                               kw=dict(sliding_window=(5, 3), attn_logits_soft_cap=2.0), lse=True),
    "lengths_and_masks": dict(shape=(3, 17, 2, 16, 33, 2, 16),
                              kw=dict(query_lengths=[17, 5, 0], key_lengths=[33, 1, 20])),
    "bias_dense_mask": dict(shape=(2, 19, 2, 8, 23, 2, 8), kw=dict(), bias=(2, 1, 19, 23), mask=True),
    "dropout": dict(shape=(2, 33, 4, 32, 47, 2, 32), kw=dict(dropout_rate=0.2, seed=[5, 6], is_causal=True)),
    "kv_cache_offset": dict(shape=(1, 7, 2, 16, 40, 2, 16), kw=dict(is_causal=True, causal_offset=33)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_jit_compile_equals_eager(name):
    c = CASES[name]
    B, Tq, H, D, Tk, Hkv, Dv = c["shape"]
    rng = np.random.default_rng(len(name))
    q, k, v = rand(rng, B, Tq, H, D), rand(rng, B, Tk, Hkv, D), rand(rng, B, Tk, Hkv, Dv)
    kw = dict(c["kw"])
    bias = None
    if "bias" in c:
        bias = tf.constant(rng.standard_normal(c["bias"]), tf.float32)
    if c.get("mask"):
        kw["mask"] = tf.constant(rng.random((B, 1, Tq, Tk)) > 0.3)
    eager, xla = _run(q, k, v, bias=bias, with_lse=c.get("lse", False), **kw)
    assert len(eager) == len(xla)
    for i, (a, b) in enumerate(zip(eager, xla)):
        a, b = a.numpy(), b.numpy()
        np.testing.assert_array_equal(np.isneginf(a), np.isneginf(b))
        fin = np.isfinite(a)
        np.testing.assert_allclose(b[fin], a[fin], rtol=2e-5, atol=2e-5, err_msg=f"result {i}")
    if "dropout_rate" not in kw and "mask" not in kw and bias is None:
        # And against the float64 reference (the eager path is tested against it elsewhere too).
        allowed = allowed_mask(B, H, Tq, Tk, is_causal=kw.get("is_causal", False),
                               causal_offset=kw.get("causal_offset", 0),
                               window=kw.get("sliding_window", (-1, -1)),
                               query_lengths=kw.get("query_lengths"),
                               key_lengths=kw.get("key_lengths"))
        ref, _ = reference_attention(q, k, v, scale=f32_scale(D), allowed=allowed,
                                     softcap=kw.get("attn_logits_soft_cap"))
        np.testing.assert_allclose(xla[0].numpy(), ref.numpy(), rtol=2e-4, atol=2e-4)


@pytest.mark.skipif(not GPU, reason="TF32 exists on GPUs only")
def test_jit_tf32_equals_eager():
    """float32 with TF32 on: the XLA:GPU custom call runs the TF32 kernels like the eager op
    (same kernel, so the results agree to the rounding of the ops around it)."""
    rng = np.random.default_rng(9)
    q, k, v = rand(rng, 2, 113, 4, 64), rand(rng, 2, 203, 2, 64), rand(rng, 2, 203, 2, 64)
    tf.config.experimental.enable_tensor_float_32_execution(True)
    eager, xla = _run(q, k, v, is_causal=True)
    for i, (a, b) in enumerate(zip(eager, xla)):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"result {i}")
    ref, _ = reference_attention(q, k, v, scale=f32_scale(64),
                                 allowed=allowed_mask(2, 4, 113, 203, is_causal=True))
    err = np.abs(xla[0].numpy() - ref.numpy()).max()
    assert 0 < err < 5e-3, err  # TF32 products (10-bit mantissa): not float32-exact, not wrong


@pytest.mark.skipif(not GPU, reason="command buffers are XLA:GPU's")
def test_custom_calls_recorded_in_command_buffers_equal_launched_ones(tmp_path):
    """The CUDA handlers declare themselves command-buffer compatible, so XLA:GPU may record them
    into CUDA graphs and replay them. With every run of commands recorded
    (--xla_gpu_graph_min_graph_size=1), a training step (causal, key lengths, dropout) and a
    decoding loop, each called with new inputs and again with the first ones (a replay), equal
    bit for bit those of a process whose handlers are registered without the trait
    (TF_FLASHATTN_XLA_COMMAND_BUFFER=0), but dq, whose float atomics may add in another order
    from run to run (within 2 % of its largest value); the replay equals the first call."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    results = []
    for trait in ("1", "0"):
        out = tmp_path / f"cb{trait}.npz"
        env = dict(os.environ, XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                                          " --xla_gpu_graph_min_graph_size=1").strip(),
                   TF_FLASHATTN_XLA_COMMAND_BUFFER=trait, TF_CPP_MIN_LOG_LEVEL="2",
                   PYTHONPATH=os.pathsep.join([os.path.dirname(here)] + sys.path))
        run = subprocess.run([sys.executable, os.path.join(here, "xla_command_buffer_run.py"),
                              str(out)], env=env, timeout=600, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-3000:]
        results.append(dict(np.load(out)))
    recorded, launched = results
    assert sorted(recorded) == sorted(launched) and len(recorded) == 3 * 5
    for name in recorded:
        # dq: float atomics on the GPU. At this size (77 keys: one 128-key tile) each element gets
        # at most two additions, whose order does not change the sum; larger ones would, so dq is
        # held to a tolerance rather than to its bits.
        if name.endswith("_1"):
            scale = np.abs(launched[name]).max()
            np.testing.assert_allclose(recorded[name], launched[name], rtol=0, atol=2e-2 * scale,
                                       err_msg=name)
        else:
            np.testing.assert_array_equal(recorded[name], launched[name], err_msg=name)
    for first, again in (("decode0", "decode2"), ("train0_0", "train2_0"), ("train0_2", "train2_2"),
                         ("train0_3", "train2_3")):  # the replay: decoding, out, dk, dv
        np.testing.assert_array_equal(recorded[first], recorded[again], err_msg=again)
    assert np.abs(recorded["decode0"] - recorded["decode1"]).max() > 0  # other inputs, other result
    assert np.abs(recorded["train0_0"] - recorded["train1_0"]).max() > 0


def test_jit_dropout_is_the_philox_mask_of_the_seed():
    rng = np.random.default_rng(3)
    q, k, v = rand(rng, 1, 21, 2, 16), rand(rng, 1, 30, 2, 16), rand(rng, 1, 30, 2, 16)
    rate, seed = 0.3, [11, -4]

    @tf.function(jit_compile=True)
    def f(q, k, v, seed):
        return fa.dot_product_attention(q, k, v, dropout_rate=rate, seed=seed)

    out = f(q, k, v, tf.constant(seed, tf.int64))
    keep = dropout_keep_mask(seed, 1, 2, 21, 30, rate)
    ref, _ = reference_attention(q, k, v, scale=f32_scale(16), keep=keep, dropout_rate=rate)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=2e-4, atol=2e-4)
    other = f(q, k, v, tf.constant([11, -5], tf.int64))
    assert np.abs(other.numpy() - out.numpy()).max() > 1e-3


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float64])
def test_jit_compile_other_dtypes(dtype):
    rng = np.random.default_rng(5)
    q, k, v = (tf.cast(rand(rng, 2, 29, 2, 24), dtype) for _ in range(3))
    bias = tf.cast(rand(rng, 1, 2, 29, 29), dtype)  # broadcast over the batch: dbias sums it

    def f(q, k, v, bias):
        with tf.GradientTape() as t:
            t.watch([q, k, v, bias])
            o = fa.dot_product_attention(q, k, v, bias=bias, is_causal=True)
            loss = tf.reduce_sum(tf.cast(o, tf.float32) ** 2)
        return [o] + t.gradient(loss, [q, k, v, bias])

    # float64 runs on the CPU only (on a GPU machine XLA:GPU would refuse it, by design).
    with tf.device("/CPU:0" if dtype == tf.float64 else None):
        eager = f(q, k, v, bias)
        xla = tf.function(f, jit_compile=True)(q, k, v, bias)
    tol = {tf.float16: 2e-3, tf.bfloat16: 2e-2, tf.float64: 1e-10}[dtype]
    for a, b in zip(eager, xla):
        assert b.dtype == dtype
        np.testing.assert_allclose(tf.cast(b, tf.float64).numpy(), tf.cast(a, tf.float64).numpy(),
                                   rtol=tol, atol=tol)


def test_keras_model_compiled_with_xla_trains():
    """A Keras model calling the op, compiled with jit_compile=True, fits (loss goes down)."""
    keras.utils.set_random_seed(1)

    class Attn(keras.layers.Layer):
        def build(self, shape):
            self.proj = self.add_weight(shape=(shape[-1], 3 * shape[-1]), initializer="glorot_uniform")

        def call(self, x):
            B, T, C = tf.shape(x)[0], x.shape[1], x.shape[2]
            qkv = tf.reshape(tf.matmul(x, self.proj), [B, T, 3, 2, C // 2])
            o = fa.dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], is_causal=True)
            return tf.reshape(o, [B, T, C])

    x = np.random.default_rng(0).standard_normal((16, 12, 8)).astype("float32")
    y = np.cumsum(x, axis=1) / 4
    model = keras.Sequential([keras.Input((12, 8)), Attn(), keras.layers.Dense(8)])
    model.compile(keras.optimizers.Adam(0.01), "mse", jit_compile=True)
    hist = model.fit(x, y, epochs=20, batch_size=8, verbose=0)
    assert model.jit_compile
    assert hist.history["loss"][-1] < 0.9 * hist.history["loss"][0]


LAYERS = {"mha": lambda: fa.FlashMultiHeadAttention(num_heads=2, key_dim=8),
          "gqa": lambda: fa.FlashGroupQueryAttention(head_dim=8, num_query_heads=4,
                                                     num_key_value_heads=2)}


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("batch,length", [(4, 10), (1, 96)])
def test_flash_layer_under_keras_xla_equals_eager(batch, length, layer):
    """Both layers (supports_jit is True): Keras compiles them with XLA, and predictions and one
    training step equal the non-XLA model's. Batch 1 too, as the example model at context 16384
    that trained wrong under XLA:GPU on the H200 (XLA:CPU gives custom calls row-major layouts
    anyway: this case guards the GPU, where tests/test_xla.py runs too)."""
    keras.utils.set_random_seed(2)

    def build():
        inp = keras.Input((length, 16))
        att = LAYERS[layer]()
        assert att.supports_jit
        out = att(inp, inp, use_causal_mask=True)
        return keras.Model(inp, keras.layers.Dense(4)(out))

    x = np.random.default_rng(1).standard_normal((batch, length, 16)).astype("float32")
    y = np.random.default_rng(2).standard_normal((batch, length, 4)).astype("float32")
    a, b = build(), build()
    b.set_weights(a.get_weights())
    a.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=True)
    b.compile(keras.optimizers.SGD(0.1), "mse", jit_compile=False)
    np.testing.assert_allclose(a.predict(x, verbose=0), b.predict(x, verbose=0), rtol=1e-5, atol=1e-5)
    la, lb = a.train_on_batch(x, y), b.train_on_batch(x, y)
    assert a.jit_compile and not b.jit_compile
    np.testing.assert_allclose(la, lb, rtol=1e-5)
    for wa, wb in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(wa, wb, rtol=1e-4, atol=1e-5)
