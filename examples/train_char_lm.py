"""Trains a byte-level decoder-only transformer built from FlashMultiHeadAttention.

Default run (CPU, no network, a few minutes on 2 cores): trains on the Python
standard library's own source files with `model.fit` (progress bar, validation
bits per byte), samples some text, and exports a SavedModel that
examples/serve.py serves over HTTP:

    python examples/train_char_lm.py
    python examples/serve.py            # then: curl 'localhost:8000/complete?prompt=def%20'

Any text file or folder instead of the standard library:

    python examples/train_char_lm.py --data my_corpus.txt
    python examples/train_char_lm.py --data ~/src/project --pattern '*.md'

On a GPU, longer contexts and a bigger model in bfloat16:

    python examples/train_char_lm.py --seq-len 4096 --dim 512 --heads 8 --layers 8 \\
        --batch-size 8 --steps 2000 --dropout 0.1 --dtype mixed_bfloat16

Tokens are bytes (vocabulary 256), so the validation loss in bits is bits per
byte. The model: byte embedding + learned positions, `--layers` pre-norm blocks
(causal FlashMultiHeadAttention, GELU MLP), final norm and a float32 output
projection; `--dropout` turns on attention dropout (the op's fused dropout)
and residual dropout.

Sampling (`make_generate`, also the SavedModel's `generate` endpoint) runs the
prompt through the model once, filling a KV cache in each attention layer, and
then one byte per step against the cache, the whole loop in one graph; the
decode steps are compiled by XLA (`--generate-xla off`: plain TensorFlow, for a
server built without XLA).
"""

import argparse
import fnmatch
import math
import os
import random
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import tf_flashattn
from _cli import HelpWithDefaults
from _cli import int_in

VOCAB = 256


# ---------------------------------------------------------------------------
# Data.


def _is_text(path):
    with open(path, "rb") as f:
        return b"\0" not in f.read(4096)


def list_files(root, pattern, skip_dirs=()):
    """Sorted text files under `root` (or [root] for a file) matching `pattern`."""
    if os.path.isfile(root):
        return [root]
    if not os.path.isdir(root):
        raise SystemExit(f"--data {root!r} is neither a file nor a folder")
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs)
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if fnmatch.fnmatch(name, pattern) and os.path.isfile(path) and _is_text(path):
                files.append(path)
    if not files:
        raise SystemExit(f"no files matching {pattern!r} under {root!r}")
    return files


def load_corpus(args):
    """Returns (train_bytes, val_bytes) as uint8 arrays: whole files held out
    for validation (5% of the bytes), so validation text is never trained on."""
    if args.data is None:
        root = os.path.dirname(os.__file__)  # the standard library's sources
        skip = {"site-packages", "dist-packages", "test", "tests", "idlelib", "__pycache__"}
        files = list_files(root, "*.py", skip)
    else:
        files = list_files(os.path.expanduser(args.data), args.pattern)
    random.Random(args.seed).shuffle(files)
    chunks, total = [], 0
    for path in files:
        with open(path, "rb") as f:
            chunks.append(f.read(args.max_bytes - total))
        total += len(chunks[-1])
        if total >= args.max_bytes:
            break
    # Hold out about 5 %: whole files from the end of the shuffled list while they fit in 5 % of
    # the text, then the tail of the next one (a single large file cannot swallow the split).
    budget = total * 0.05
    val_chunks = []
    while len(chunks) > 1 and len(chunks[-1]) <= budget:
        budget -= len(chunks[-1])
        val_chunks.append(chunks.pop())
    if budget >= 1:
        last = chunks.pop()
        cut = len(last) - int(budget)
        chunks.append(last[:cut])
        val_chunks.append(last[cut:])
    train, val = b"\n".join(chunks), b"\n".join(val_chunks)
    need = args.seq_len + 2
    if len(train) < need or len(val) < need:
        raise SystemExit(
            f"corpus too small for --seq-len {args.seq_len}: {len(train)} train and "
            f"{len(val)} validation bytes"
        )
    print(
        f"corpus: {len(train):,} train bytes, {len(val):,} validation bytes "
        f"({len(files)} files found)"
    )
    return np.frombuffer(train, np.uint8), np.frombuffer(val, np.uint8)


def windows(data, seq_len, batch_size, seed):
    """Endless batches of random windows: inputs [B, T] int32, targets the next bytes."""
    corpus = tf.constant(data)
    high = len(data) - seq_len - 1

    def window(start):
        chunk = tf.cast(corpus[start : start + seq_len + 1], tf.int32)
        return chunk[:-1], chunk[1:]

    starts = tf.data.Dataset.random(seed=seed).map(
        lambda r: tf.cast(tf.math.floormod(r, high), tf.int32)
    )
    return (
        starts.map(window, num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


# ---------------------------------------------------------------------------
# Model.


@keras.saving.register_keras_serializable(package="char_lm")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned embedding of each position (up to `max_len`)."""

    def __init__(self, max_len, **kwargs):
        super().__init__(**kwargs)
        self.max_len = max_len

    def build(self, input_shape):
        self.table = self.add_weight(
            shape=(self.max_len, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="table",
        )

    def call(self, x, start=0):
        """x [B, T, dim] gets the embeddings of positions [start, start + T) (`start` may be a
        tensor: the position of the first new token when decoding from a KV cache)."""
        length = keras.ops.shape(x)[1]
        if isinstance(start, int) and start == 0:
            table = self.table[:length]
        else:
            table = keras.ops.slice(self.table, [start, 0], [length, self.table.shape[1]])
        return x + keras.ops.cast(table, x.dtype)

    def get_config(self):
        return dict(super().get_config(), max_len=self.max_len)


def build_model(
    seq_len,
    dim=128,
    heads=4,
    layers=2,
    dropout=0.1,
    attention_cls=None,
):
    """The decoder-only transformer: [B, T] bytes -> [B, T, 256] float32 logits.

    `attention_cls` defaults to FlashMultiHeadAttention; the benchmark passes
    keras.layers.MultiHeadAttention to time the same model with Keras' layer.
    """
    attention_cls = attention_cls or tf_flashattn.FlashMultiHeadAttention
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    x = keras.layers.Embedding(VOCAB, dim, name="embed")(tokens)
    x = PositionEmbedding(seq_len, name="positions")(x)
    x = keras.layers.Dropout(dropout)(x)
    for i in range(layers):
        h = keras.layers.LayerNormalization(epsilon=1e-5, name=f"block{i}_norm1")(x)
        h = attention_cls(
            num_heads=heads,
            key_dim=dim // heads,
            dropout=dropout,
            name=f"block{i}_attention",
        )(h, h, use_causal_mask=True)
        x = x + keras.layers.Dropout(dropout)(h)
        h = keras.layers.LayerNormalization(epsilon=1e-5, name=f"block{i}_norm2")(x)
        h = keras.layers.Dense(4 * dim, activation="gelu", name=f"block{i}_mlp_in")(h)
        h = keras.layers.Dense(dim, name=f"block{i}_mlp_out")(h)
        x = x + keras.layers.Dropout(dropout)(h)
    x = keras.layers.LayerNormalization(epsilon=1e-5, name="final_norm")(x)
    logits = keras.layers.Dense(VOCAB, dtype="float32", name="logits")(x)
    return keras.Model(tokens, logits, name="char_lm")


def bits_per_byte(y_true, y_pred):
    """Cross-entropy in bits: with byte tokens, bits per byte."""
    nats = keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True)
    return nats / math.log(2.0)


def compile_model(model, lr, steps, jit_compile="auto"):
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=max(steps, 1), warmup_target=lr, warmup_steps=max(steps // 20, 1)
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.01, clipnorm=1.0),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[bits_per_byte],
        jit_compile=jit_compile,
    )


# ---------------------------------------------------------------------------
# Sampling and export.


def _attention_layers(model):
    """The model's attention layers, block0_attention, block1_attention, ..."""
    layers = []
    while any(layer.name == f"block{len(layers)}_attention" for layer in model.layers):
        layers.append(model.get_layer(f"block{len(layers)}_attention"))
    return layers


def forward_cached(model, tokens, caches, index):
    """The model of `build_model` on tokens [B, T] at positions [index, index + T), reading
    and extending a KV cache per block: returns (logits [B, T, 256], new caches).

    The same layers as `model(tokens, training=False)` in the same order (dropout is the
    identity at inference); each attention writes its keys and values at `index` into its
    cache and attends over positions [0, index + T). A cache is what the layer takes: keys and
    values stacked, [B, 2, seq_len, heads, head_dim], or a pair (keys, values) of
    [B, seq_len, heads, head_dim] (make_generate's: XLA reads those without copying them).
    `index` is a Python int (prefill: 0) or an int32 scalar tensor (a decode step in a loop)."""
    layer = model.get_layer
    x = layer("embed")(tokens)
    x = layer("positions")(x, start=index)
    new_caches = []
    for i, cache in enumerate(caches):
        h = layer(f"block{i}_norm1")(x)
        h, cache = layer(f"block{i}_attention")(
            h, h, use_causal_mask=True, cache=cache, cache_update_index=index)
        new_caches.append(cache)
        x = x + h
        h = layer(f"block{i}_norm2")(x)
        h = layer(f"block{i}_mlp_out")(layer(f"block{i}_mlp_in")(h))
        x = x + h
    x = layer("final_norm")(x)
    return layer("logits")(x), new_caches


def _next_token(logits, i, temperature, seed):
    """Byte i of the output from logits [256] float32: sampled at `temperature` from the
    stateless seed (seed + [0, i]), or the argmax when temperature is 0.

    Sampling is the Gumbel-max trick on Philox bits (`stateless_uniform` with
    alg="philox" and dtype uint32): TensorFlow's kernels and XLA draw the same bits, and the
    bits become uniforms in (0, 1) exactly, so the XLA-compiled decode loop and the recompute
    loop (no XLA) sample alike. (`stateless_categorical` draws differently under XLA, and
    does not compile there with an int64 seed.)"""
    bits = tf.random.stateless_uniform(
        [VOCAB],
        seed=seed + tf.stack([tf.constant(0, tf.int64), tf.cast(i, tf.int64)]),
        minval=None, maxval=None, dtype=tf.uint32, alg="philox",
    )
    # (k + 0.5) / 2^23 for the top 23 bits k: exact in float32, never 0 or 1.
    uniform = (tf.cast(tf.bitwise.right_shift(bits, 9), tf.float32) + 0.5) * (1.0 / (1 << 23))
    gumbel = -tf.math.log(-tf.math.log(uniform))
    sampled = tf.argmax(logits / tf.maximum(temperature, 1e-6) + gumbel, output_type=tf.int32)
    greedy = tf.argmax(logits, output_type=tf.int32)
    return tf.where(temperature > 0.0, sampled, greedy)


_GENERATE_SIGNATURE = [
    tf.TensorSpec([None], tf.int32, name="prompt"),
    tf.TensorSpec([], tf.int32, name="num_tokens"),
    tf.TensorSpec([], tf.float32, name="temperature"),
    tf.TensorSpec([2], tf.int64, name="seed"),
]


def make_generate(model, seq_len, cached=True, jit_compile=True):
    """A tf.function sampling `num_tokens` bytes after `prompt` (int32 [P], P >= 1) at
    `temperature` (0: greedy) from the stateless `seed` [2]. The whole loop is one graph,
    so the exported SavedModel serves it as is.

    cached=True: the prompt (its last `seq_len` bytes) is run once through the model, filling
    a KV cache per block (prefill); then each step runs only the new byte, attending over the
    cache. When the cache is full (`seq_len` positions), the last `seq_len // 2` bytes are
    run again into an emptied cache and decoding goes on from there, so the model always sees
    at least half its context.

    jit_compile=True (with cached=True): the decode steps between two prefills run as one
    XLA-compiled loop (`decode_steps`, a nested `tf.function(jit_compile=True)` of static
    shapes, compiled once per model and cache size), which XLA runs as one launch: it updates
    each layer's cache in place (a dynamic-update-slice of the new position on the loop-carried
    buffer) and runs each step's kernels without TensorFlow's per-op executor. The prefill (any
    prompt length) stays outside XLA. jit_compile=False: the same loop in plain TensorFlow,
    each op through the executor and each cache write a scatter or a select over the cache.

    cached=False: each step runs the model on the last `seq_len` bytes (the loop before the
    KV cache, kept as the reference and for the benchmark): cost per byte grows with the context.

    Both give the same bytes (greedy; the same samples up to float rounding) while
    P + num_tokens <= seq_len + 1; past that, cached=False slides its window one byte per step
    and cached=True moves it by half a context at a time.
    """
    if not cached:
        return _make_recompute_generate(model, seq_len)
    attention = _attention_layers(model)
    if not attention or not all(
        isinstance(a, tf_flashattn.FlashMultiHeadAttention) for a in attention
    ):
        raise ValueError(
            "make_generate(cached=True) needs the model's attention layers to be "
            "tf_flashattn.FlashMultiHeadAttention (they hold the KV cache); use cached=False "
            "for other layers"
        )
    cache_shape = [1, seq_len, attention[0].num_heads, attention[0].key_dim]
    cache_dtype = attention[0].compute_dtype
    keep = max(1, seq_len // 2)

    def prefill(context):
        """context [P] (P <= seq_len) into emptied caches, a (keys, values) pair per block:
        (logits of the last byte, caches)."""
        caches = [(tf.zeros(cache_shape, cache_dtype), tf.zeros(cache_shape, cache_dtype))
                  for _ in attention]
        logits, caches = forward_cached(model, context[None], caches, 0)
        return logits[0, -1], caches

    # At most seq_len bytes per run of decode_steps: it starts with >= 1 filled position.
    chunk_len = seq_len + 1

    @tf.function(jit_compile=jit_compile, autograph=False)
    def decode_steps(logits, caches, filled, start, num_tokens, temperature, seed):
        """From the logits of the byte at `filled - 1` and the caches filled up to `filled`:
        bytes start, start + 1, ... of the output, each decoded into the caches at the next
        position while the output wants more and the cache has room. Returns (bytes [chunk_len]
        int32, how many were made): at least one; the last one is not run through the model
        (the output is complete, or the cache is full and the caller refills it)."""

        def more(j, out, logits, filled, caches):
            return tf.logical_and(start + j + 1 < num_tokens, filled < seq_len)

        def step(j, out, logits, filled, caches):
            token = _next_token(logits, start + j, temperature, seed)
            out = tf.tensor_scatter_nd_update(out, [[j]], token[None])
            new_logits, caches = forward_cached(model, token[None, None], caches, filled)
            return j + 1, out, new_logits[0, -1], filled + 1, caches

        out = tf.zeros([chunk_len], tf.int32)
        j, out, logits, _, _ = tf.while_loop(
            more, step, [tf.constant(0), out, logits, filled, caches],
            maximum_iterations=seq_len)
        token = _next_token(logits, start + j, temperature, seed)
        return tf.tensor_scatter_nd_update(out, [[j]], token[None]), j + 1

    @tf.function(input_signature=_GENERATE_SIGNATURE)
    def generate(prompt, num_tokens, temperature, seed):
        def run(i, tokens, context):
            logits, caches = prefill(context)
            out, made = decode_steps(logits, caches, tf.shape(context)[0], i, num_tokens,
                                     temperature, seed)
            tokens = tf.concat([tokens, out[:made]], axis=0)
            # When more bytes are wanted the cache is full: refill it with the last `keep`.
            return i + made, tokens, tokens[-keep:]

        _, tokens, _ = tf.while_loop(
            lambda i, *_: i < num_tokens,
            run,
            [tf.constant(0), prompt, prompt[-seq_len:]],
            shape_invariants=[tf.TensorShape([]), tf.TensorShape([None]),
                              tf.TensorShape([None])],
        )
        return tokens[tf.shape(prompt)[0] :]

    # For tests and benchmarks: the compiled decode loop (its HLO, its time alone).
    generate.prefill = prefill
    generate.decode_steps = decode_steps
    return generate


def _make_recompute_generate(model, seq_len):
    """make_generate(cached=False): the model on the whole (last `seq_len` bytes of the)
    context for every new byte."""

    @tf.function(input_signature=_GENERATE_SIGNATURE)
    def generate(prompt, num_tokens, temperature, seed):
        def step(i, tokens):
            context = tokens[-seq_len:][None]
            logits = model(context, training=False)[0, -1]  # [256] float32
            next_token = _next_token(logits, i, temperature, seed)
            return i + 1, tf.concat([tokens, next_token[None]], axis=0)

        _, tokens = tf.while_loop(
            lambda i, tokens: i < num_tokens,
            step,
            [tf.constant(0), prompt],
            shape_invariants=[tf.TensorShape([]), tf.TensorShape([None])],
        )
        return tokens[tf.shape(prompt)[0] :]

    return generate


def sample(generate, prompt, num_tokens, temperature, seed):
    prompt_bytes = prompt.encode("utf-8") or b"\n"
    out = generate(
        tf.constant(list(prompt_bytes), tf.int32),
        tf.constant(num_tokens, tf.int32),
        tf.constant(temperature, tf.float32),
        tf.constant([seed, 0], tf.int64),
    )
    return bytes(out.numpy().astype(np.uint8).tolist()).decode("utf-8", errors="replace")


def export(model, generate, path):
    """SavedModel with two endpoints: `serve` (tokens [B, T] -> logits
    [B, T, 256]) and `generate` (make_generate's loop: main passes the cached one). Loading it needs
    `import tf_flashattn` first (it registers the FlashAttn> ops)."""
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        "serve",
        lambda tokens: model(tokens, training=False),
        input_signature=[tf.TensorSpec([None, None], tf.int32, name="tokens")],
    )
    archive.add_endpoint("generate", generate)
    archive.write_out(path, verbose=False)


# ---------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpWithDefaults)
    p.add_argument("--data", help="text file or folder (default: the Python standard library)")
    p.add_argument("--pattern", default="*", help="file-name pattern inside a --data folder")
    p.add_argument("--max-bytes", type=int_in(1), default=16_000_000, help="read at most this much text")
    p.add_argument("--seq-len", type=int_in(1), default=256, help="context length (bytes)")
    p.add_argument("--dim", type=int, default=128, help="model width")
    p.add_argument("--heads", type=int, default=4, help="attention heads per layer")
    p.add_argument("--layers", type=int, default=2, help="transformer blocks")
    p.add_argument(
        "--dropout", type=float, default=0.0, help="attention and residual dropout (0.1: long runs)"
    )
    p.add_argument("--batch-size", type=int_in(1), default=16, help="sequences per step")
    p.add_argument("--steps", type=int_in(1), default=800, help="training steps in all")
    p.add_argument("--epochs", type=int_in(1), default=2, help="--steps split into this many epochs")
    p.add_argument("--val-steps", type=int, default=20, help="validation batches after each epoch")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    p.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "mixed_bfloat16", "mixed_float16"],
        help="Keras dtype policy (mixed_bfloat16 on a GPU)",
    )
    p.add_argument("--prompt", default="def ", help="prompt of the sample printed at the end")
    p.add_argument("--sample-len", type=int, default=300, help="bytes of that sample")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature")
    p.add_argument("--export-dir", default="char_lm_savedmodel", help="where the SavedModel goes")
    p.add_argument(
        "--generate-xla",
        default="on",
        choices=["on", "off"],
        help="decode steps of `generate` (and the exported endpoint) compiled by XLA; 'off' for a "
        "server without XLA",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the data order, weights and sample")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    keras.config.set_dtype_policy(args.dtype)
    train, val = load_corpus(args)

    model = build_model(args.seq_len, args.dim, args.heads, args.layers, args.dropout)
    compile_model(model, args.lr, args.steps)
    print(
        f"model: {model.count_params():,} parameters, {args.layers} layers, dim {args.dim}, "
        f"{args.heads} heads, context {args.seq_len}, dtype policy {args.dtype}, "
        f"op backends {tf_flashattn.backends()}"
    )
    epochs = max(1, min(args.epochs, args.steps))
    start = time.time()
    model.fit(
        windows(train, args.seq_len, args.batch_size, args.seed),
        epochs=epochs,
        steps_per_epoch=args.steps // epochs,
        validation_data=windows(val, args.seq_len, args.batch_size, args.seed + 1),
        validation_steps=args.val_steps,
        shuffle=False,  # the windows are already random
    )
    seconds = time.time() - start
    tokens = epochs * (args.steps // epochs) * args.batch_size * args.seq_len
    print(f"trained {tokens:,} tokens in {seconds:.0f} s ({tokens / seconds:,.0f} tokens/s)")
    result = model.evaluate(
        windows(val, args.seq_len, args.batch_size, args.seed + 2),
        steps=args.val_steps,
        return_dict=True,
        verbose=0,
    )
    print(f"validation: {result['bits_per_byte']:.3f} bits per byte")

    generate = make_generate(model, args.seq_len, jit_compile=args.generate_xla == "on")
    text = sample(generate, args.prompt, args.sample_len, args.temperature, args.seed)
    print(f"--- sample (temperature {args.temperature}) ---\n{args.prompt}{text}\n---")

    export(model, generate, args.export_dir)
    print(
        f"exported SavedModel to {args.export_dir}\n"
        f"serve it: python examples/serve.py --model-dir {args.export_dir}"
    )
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
