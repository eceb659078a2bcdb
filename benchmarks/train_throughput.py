"""Training throughput of the example char LM: FlashMultiHeadAttention vs Keras.

Trains the model of examples/train_char_lm.py (same configuration, same
seed) once with tf_flashattn.FlashMultiHeadAttention and once with
keras.layers.MultiHeadAttention, and reports training tokens per second
(batch x context / the median seconds of a `train_on_batch` step, after
warm-up steps that trace and compile) and their ratio. Each measurement runs
in its own process, so memory and compilation never carry over; an
out-of-memory run is reported as OOM. With --repeats N (default 3 on CPU,
where other work shares the cores) the two layers are measured in turns N
times and each keeps its best. Both models start from the same weights and data, so their
losses after the timed steps agree (the table shows them) unless dropout is on.

    python benchmarks/train_throughput.py              # CPU: context 1024, float32
    python benchmarks/train_throughput.py --max-context  # GPU: also the longest context

With a GPU present the contexts are 1024, 4096 and 16384 in mixed_bfloat16
with a bigger model (flags below); the batch keeps batch x context at
--tokens-per-step. Both models compile with jit_compile="auto", what a user
gets: Keras then uses XLA on a GPU for both models (our op lowers to XLA custom
calls); --flash-no-xla keeps ours out of XLA. The table says which ran.
Prints a markdown table.
"""

import argparse
import json
import os
import sys
import time

from _train_common import cell, run_worker, timed_train_steps

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")

LAYERS = {"keras": "keras.layers.MultiHeadAttention", "flash": "FlashMultiHeadAttention"}


def worker(cfg):
    """Measures one (attention, context) configuration; returns a dict."""
    started = time.perf_counter()
    import numpy as np
    import tensorflow as tf

    import keras

    sys.path.insert(0, EXAMPLES)
    import tf_flashattn
    import train_char_lm

    if cfg.get("autocluster"):
        # XLA for the clusters of ops around the FlashAttn> op (GPU only).
        tf.config.optimizer.set_jit("autoclustering")
    keras.config.set_dtype_policy(cfg["dtype"])
    keras.utils.set_random_seed(0)
    attention_cls = (
        keras.layers.MultiHeadAttention
        if cfg["attention"] == "keras"
        else tf_flashattn.FlashMultiHeadAttention
    )
    gpu = bool(tf.config.list_physical_devices("GPU"))
    try:
        model = train_char_lm.build_model(
            cfg["context"], cfg["dim"], cfg["heads"], cfg["layers"], cfg["dropout"], attention_cls
        )
        if cfg.get("flash_no_xla"):
            # Keep our model out of XLA (the layers' supports_jit defaults to True): the model
            # around the op then runs op by op, as before the op had an XLA lowering.
            for layer in model._flatten_layers():
                if isinstance(layer, tf_flashattn.FlashMultiHeadAttention):
                    layer.supports_jit = False
        train_char_lm.compile_model(model, 1e-3, 1000, jit_compile=cfg["jit"])
        rng = np.random.default_rng(0)
        data = rng.integers(0, 256, size=(cfg["batch"], cfg["context"] + 1)).astype("int32")
        x, y = data[:, :-1], data[:, 1:]
        built = time.perf_counter()
        warmup_s, times, loss = timed_train_steps(model, x, y, cfg["warmup"], cfg["steps"], gpu)
    except tf.errors.OpError as e:
        if "RESOURCE_EXHAUSTED" in str(e) or isinstance(e, tf.errors.ResourceExhaustedError):
            return dict(cfg, oom=True)
        raise
    result = dict(
        cfg,
        oom=False,
        tokens_per_s=cfg["batch"] * cfg["context"] / float(np.median(times)),
        seconds_per_step=float(np.median(times)),
        loss=float(np.asarray(loss).reshape(-1)[0]),
        jit=bool(model.jit_compile),
        device=_device_name(tf),
        # Where the measurement's wall time went: start-up + model build, warm-up (tracing, XLA).
        setup_s=round(built - started, 1),
        warmup_s=round(warmup_s, 1),
    )
    if gpu:
        result["peak_gib"] = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**30
    return result


def _device_name(tf):
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return details.get("device_name", "GPU")
    return f"CPU ({os.cpu_count()} cores)"


def run(cfg, timeout):
    """Measures `worker(cfg)` in a fresh process; returns its dict (or an error)."""
    return run_worker(__file__, cfg, timeout)


def _peak(r):
    return cell(r, "peak_gib", "{:.1f}") if "peak_gib" in r or r.get("oom") else "-"


def table(rows):
    lines = [
        "| device | context | batch | dtype | Keras MHA tokens/s | FlashMHA tokens/s | speedup "
        "| Keras peak GiB | Flash peak GiB | XLA (Keras / Flash) | last loss (Keras / Flash) |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for keras_r, flash_r in rows:
        if "tokens_per_s" in keras_r and "tokens_per_s" in flash_r:
            speedup = f"{flash_r['tokens_per_s'] / keras_r['tokens_per_s']:.2f}x"
        else:
            speedup = "n/a"
        device = flash_r.get("device") or keras_r.get("device") or "?"
        lines.append(
            f"| {device} | {flash_r['context']} | {flash_r['batch']} | {flash_r['dtype']} "
            f"| {cell(keras_r, 'tokens_per_s', '{:,.0f}')} "
            f"| {cell(flash_r, 'tokens_per_s', '{:,.0f}')} | {speedup} "
            f"| {_peak(keras_r)} | {_peak(flash_r)} "
            f"| {keras_r.get('jit', '?')} / {flash_r.get('jit', '?')} "
            f"| {cell(keras_r, 'loss', '{:.4f}')} / {cell(flash_r, 'loss', '{:.4f}')} |"
        )
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--device", choices=["auto", "cpu", "gpu"], default="auto")
    p.add_argument(
        "--contexts", type=int, nargs="+", help="default: 1024 (CPU), 1024 4096 16384 (GPU)"
    )
    p.add_argument("--dtype", help="default: float32 (CPU), mixed_bfloat16 (GPU)")
    p.add_argument("--dim", type=int, help="default: 128 (CPU, the example's), 1024 (GPU)")
    p.add_argument("--heads", type=int, help="default: 4 (CPU), 16 (GPU): head dim 32 / 64")
    p.add_argument("--layers", type=int, help="default: 2 (CPU), 4 (GPU)")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--tokens-per-step", type=int, help="default: 4096 (CPU), 16384 (GPU)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, help="timed steps; default 4 (CPU), 10 (GPU)")
    p.add_argument(
        "--jit", default="auto", help='jit_compile of both models: "auto", "true" or "false"'
    )
    p.add_argument("--only", choices=sorted(LAYERS), help="measure one layer only")
    p.add_argument(
        "--flash-no-xla",
        action="store_true",
        help="keep the FlashMultiHeadAttention model out of XLA (layer.supports_jit = False)",
    )
    p.add_argument(
        "--autocluster",
        action="store_true",
        help="turn on TensorFlow's XLA auto-clustering (GPU): the model around the op gets XLA",
    )
    p.add_argument(
        "--max-context",
        action="store_true",
        help="also find the longest context each layer trains at (batch 1, doubling from --max-context-start)",
    )
    p.add_argument("--max-context-limit", type=int, default=1 << 18)
    p.add_argument("--max-context-start", type=int, default=1024,
                   help="first context of the --max-context doubling (e.g. one the rows showed trains)")
    p.add_argument("--skip-rows", action="store_true",
                   help="with --max-context: only the longest-context search, no throughput rows")
    p.add_argument("--repeats", type=int, help="measurements per layer, best kept; 3 (CPU), 1 (GPU)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per measurement")
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args(argv)

    if args.worker:
        print("RESULT " + json.dumps(worker(json.loads(args.worker))), flush=True)
        return 0

    device = args.device
    if device == "auto":
        import tensorflow as tf

        device = "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
    gpu = device == "gpu"
    jit = {"auto": "auto", "true": True, "false": False}[args.jit.lower()]
    base = dict(
        dtype=args.dtype or ("mixed_bfloat16" if gpu else "float32"),
        dim=args.dim or (1024 if gpu else 128),
        heads=args.heads or (16 if gpu else 4),
        layers=args.layers or (4 if gpu else 2),
        dropout=args.dropout,
        warmup=args.warmup,
        steps=args.steps or (10 if gpu else 4),
        jit=jit,
        autocluster=args.autocluster,
        flash_no_xla=args.flash_no_xla,
    )
    contexts = args.contexts or ([1024, 4096, 16384] if gpu else [1024])
    tokens_per_step = args.tokens_per_step or (16384 if gpu else 4096)
    names = [args.only] if args.only else ["keras", "flash"]
    print(
        f"model: dim {base['dim']}, {base['heads']} heads, {base['layers']} layers, "
        f"dropout {base['dropout']}, {base['dtype']}, {tokens_per_step} tokens per step, "
        f"{base['warmup']} warm-up + {base['steps']} timed steps, jit_compile={jit}, "
        f"auto-clustering {'on' if args.autocluster else 'off'}",
        flush=True,
    )

    rows, results = [], []
    for context in [] if args.skip_rows else contexts:
        batch = max(1, tokens_per_step // context)
        pair = {}
        for _ in range(args.repeats or (1 if gpu else 3)):
            for name in names:
                cfg = dict(base, attention=name, context=context, batch=batch)
                r = run(cfg, args.timeout)
                results.append(r)
                print(f"  {LAYERS[name]} @ {context}: {json.dumps(r)}", flush=True)
                if name not in pair or r.get("tokens_per_s", 0) > pair[name].get(
                    "tokens_per_s", 0
                ):
                    pair[name] = r
        rows.append((pair.get("keras", {"context": context}), pair.get("flash", pair.get("keras"))))
        if args.json:  # after every context: a table problem or a later timeout loses nothing
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    if rows:
        print()
        print(table(rows))

    if args.max_context:
        longest = []
        for name in names:
            best, context, stop = None, args.max_context_start, ""
            while context <= args.max_context_limit:
                cfg = dict(base, attention=name, context=context, batch=1, warmup=1, steps=1)
                r = run(cfg, args.timeout)
                results.append(r)
                print(f"  {LAYERS[name]} @ {context}: {json.dumps(r)}", flush=True)
                if "tokens_per_s" not in r:
                    stop = f" (at {context:,}: {'OOM' if r.get('oom') else 'error'})"
                    break
                best, context = r, context * 2
            where = f"{best['context']:,}" if best else "none"
            rate = f"{best['tokens_per_s']:,.0f}" if best else "-"
            peak = f"{best['peak_gib']:.1f}" if best and "peak_gib" in best else "-"
            longest.append(f"| {LAYERS[name]} | {where}{stop} | {rate} | {peak} |")
        print()
        print("| layer | longest context trained (batch 1) | tokens/s there | peak GiB |")
        print("|---|---:|---:|---:|")
        print("\n".join(longest))

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
