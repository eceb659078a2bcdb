"""One training step of the example model compiled with XLA against the same step without XLA.

A diagnostic for the GPU (`bash benchmarks/gpu_run.sh xlacheck`): whether a
whole model with our layer computes the same step under XLA as without it (a
fault in how XLA hands buffers to our custom calls once made the example model
train to a different loss at context 16384 while the op alone matched). For
each context this builds the model of
examples/train_char_lm.py (the GPU configuration of train_throughput.py) with
our layer and with Keras' layer from the same seed, computes the loss and the
gradient of every weight in one `tf.function` with and without
`jit_compile=True`, and prints the relative difference per weight (worst
first). With --dump DIR it also dumps XLA's optimized HLO and lists the
layouts our custom calls got (an operand or result that is not row-major
would be read or written wrongly by the kernels).

    python benchmarks/xla_model_check.py --contexts 4096 16384 --dump /tmp/xla_dump
"""

import argparse
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--contexts", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--tokens-per-step", type=int, default=16384)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dtype", default="mixed_bfloat16")
    p.add_argument("--dump", help="dump XLA's optimized HLO here and list our custom calls' layouts")
    args = p.parse_args(argv)
    if args.dump:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_dump_to={args.dump} --xla_dump_hlo_as_text")

    import numpy as np
    import tensorflow as tf

    import keras

    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
    import tf_flashattn
    import train_char_lm

    keras.config.set_dtype_policy(args.dtype)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(model, x, y, jit):
        @tf.function(jit_compile=jit)
        def run(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            return loss, tape.gradient(loss, model.trainable_variables)

        loss, grads = run(x, y)
        return float(loss), [tf.convert_to_tensor(g).numpy().astype(np.float64) for g in grads]

    for context in args.contexts:
        batch = max(1, args.tokens_per_step // context)
        data = np.random.default_rng(0).integers(0, 256, size=(batch, context + 1)).astype("int32")
        x, y = tf.constant(data[:, :-1]), tf.constant(data[:, 1:])
        results = {}
        # Keras' layer without XLA only below 2^31 logits: TensorFlow's own GPU kernels fail past
        # that (see gpu_attention.py) and would poison the CUDA context for what follows.
        keras_eager = batch * args.heads * context * context < 2**31
        runs = [("flash", False), ("flash", True), ("keras", True)] + (
            [("keras", False)] if keras_eager else [])
        names = ref = floor = None
        for name, jit in runs:
            keras.utils.set_random_seed(0)
            cls = tf_flashattn.FlashMultiHeadAttention if name == "flash" else keras.layers.MultiHeadAttention
            model = train_char_lm.build_model(context, args.dim, args.heads, args.layers, 0.0, cls)
            names = names or [v.path for v in model.trainable_variables]
            loss, grads = results[name, jit] = step(model, x, y, jit)
            del model
            label = f"{name}{'+XLA' if jit else ''}"
            if ref is None:  # flash without XLA: the reference for the others
                ref = grads
                # Relative to each weight's largest gradient, floored at 1e-3 of the largest of
                # all (the key projection's bias has a zero gradient in exact arithmetic).
                floor = 1e-3 * max(float(np.max(np.abs(r))) for r in ref)
                print(f"context {context}, batch {batch}: {label} loss {loss:.6f}", flush=True)
                continue
            errs = sorted(((float(np.max(np.abs(g - r)) / max(float(np.max(np.abs(r))), floor)), n)
                           for g, r, n in zip(grads, ref, names)), reverse=True)
            worst = ", ".join(f"{n} {e:.2e}" for e, n in errs[:4])
            print(f"  {label}: loss {loss:.6f}; worst gradients against flash: {worst}", flush=True)
        if not keras_eager:
            print("  keras without XLA: skipped (2^31 logits or more)", flush=True)

    if args.dump:
        # Our custom calls with the layouts of their results and operands.
        for path in sorted(glob.glob(os.path.join(args.dump, "*after_optimizations.txt"))):
            text = open(path).read()
            shapes = dict(re.findall(r"^\s*(?:ROOT )?(%\S+) = (\S+\{[^}]*\}|\([^)]*\))", text, re.M))
            for line in text.splitlines():
                if 'custom_call_target="tf_flashattn' not in line:
                    continue
                m = re.match(r"\s*(?:ROOT )?(%\S+) = (.*?) custom-call\((.*?)\), custom_call_target=\"(\w+)\"",
                             line)
                if not m:
                    continue
                operands = [o.strip() for o in re.sub(r"/\*index=\d+\*/", "", m.group(3)).split(",")]
                print(f"{os.path.basename(path)[:40]} {m.group(4)}: result {m.group(2)}")
                print("    operands " + " ".join(shapes.get(o, o) for o in operands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
