"""Training a KerasHub Llama model with and without `tf_flashattn.enable_flash_attention()`.

A `keras_hub.models.LlamaCausalLM` built from its config (random weights, no download), trained
with `train_on_batch` (what `fit` runs per step) on random tokens, Keras' defaults otherwise
(XLA on a GPU: jit_compile="auto"). Each configuration runs in its own process, so memory and
compilation never carry over; an out-of-memory run is reported as OOM. Both runs of a context start
from the same weights and data, so their losses agree.

    python benchmarks/kerashub_train.py                      # GPU: contexts 4096 and 16384
    python benchmarks/kerashub_train.py --max-context        # also the longest context each trains at
    python benchmarks/kerashub_train.py --contexts 256 --layers 2 --dim 256 --heads 4 --kv-heads 2 \\
        --dtype float32 --tokens-per-step 512                # CPU smoke test

Defaults (the Keras-wide issue's model): 8 layers, hidden 2048, 16 query / 4 kv heads (head dim
128), intermediate 5632, vocabulary 32000, mixed_bfloat16, 16384 tokens per step. Prints a
markdown table: tokens/s, peak GPU memory, last loss, and whether the traced step held our op.
"""
import argparse
import json
import sys
import time

from _train_common import cell, run_worker, timed_train_steps


def worker(cfg):
    started = time.perf_counter()
    import numpy as np
    import tensorflow as tf

    import keras
    import keras_hub

    import tf_flashattn

    keras.config.set_dtype_policy(cfg["dtype"])
    keras.utils.set_random_seed(0)
    if cfg["flash"]:
        tf_flashattn.enable_flash_attention()
    gpu = bool(tf.config.list_physical_devices("GPU"))
    try:
        backbone = keras_hub.models.LlamaBackbone(
            vocabulary_size=cfg["vocab"], num_layers=cfg["layers"], num_query_heads=cfg["heads"],
            hidden_dim=cfg["dim"], intermediate_dim=cfg["intermediate"],
            num_key_value_heads=cfg["kv_heads"])
        model = keras_hub.models.LlamaCausalLM(backbone=backbone, preprocessor=None)
        model.compile(optimizer=keras.optimizers.AdamW(1e-4),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=cfg["jit"])
        rng = np.random.default_rng(0)
        batch, ctx = cfg["batch"], cfg["context"]
        tokens = rng.integers(1, cfg["vocab"], size=(batch, ctx + 1)).astype("int32")
        x = {"token_ids": tokens[:, :-1], "padding_mask": np.ones((batch, ctx), bool)}
        y = tokens[:, 1:]
        built = time.perf_counter()
        warmup_s, times, loss = timed_train_steps(model, x, y, cfg["warmup"], cfg["steps"], gpu)
        # Whether our op is in the traced model (the check that enable_flash_attention() should
        # pass, and the run without it should fail).
        spec = {n: tf.TensorSpec(a.shape, a.dtype) for n, a in x.items()}
        cf = tf.function(lambda d: model(d, training=True)).get_concrete_function(spec)
        graph_ops = {op.type for op in cf.graph.get_operations()}
    except tf.errors.OpError as e:
        if isinstance(e, tf.errors.ResourceExhaustedError) or "RESOURCE_EXHAUSTED" in str(e):
            return dict(cfg, oom=True)
        raise
    result = dict(cfg, oom=False, tokens_per_s=batch * ctx / float(np.median(times)),
                  seconds_per_step=float(np.median(times)),
                  loss=float(np.asarray(loss).reshape(-1)[0]), jit=bool(model.jit_compile),
                  setup_s=round(built - started, 1), warmup_s=round(warmup_s, 1),
                  has_flash_op="FlashAttn>FlashAttention" in graph_ops)
    if gpu:
        result["peak_gib"] = tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**30
    return result


def run(cfg, timeout):
    """Measures `worker(cfg)` in a fresh process; returns its dict (or an error)."""
    return run_worker(__file__, cfg, timeout)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--contexts", type=int, nargs="+", default=[4096, 16384])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, help="default: 2.75 x dim")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dtype", default="mixed_bfloat16")
    p.add_argument("--tokens-per-step", type=int, default=16384)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--jit", default="auto", help='"auto" (Keras default), "true" or "false"')
    p.add_argument("--only", choices=["flash", "keras"], help="measure one of the two only")
    p.add_argument("--max-context", action="store_true",
                   help="also the longest context each trains at (batch 1, doubling)")
    p.add_argument("--max-context-start", type=int, default=16384)
    p.add_argument("--max-context-limit", type=int, default=1 << 17)
    p.add_argument("--timeout", type=int, default=400, help="seconds per configuration")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(worker(json.loads(args.worker))), flush=True)
        return 0
    jit = {"auto": "auto", "true": True, "false": False}[args.jit.lower()]
    base = dict(layers=args.layers, dim=args.dim, heads=args.heads, kv_heads=args.kv_heads,
                intermediate=args.intermediate or int(args.dim * 2.75), vocab=args.vocab,
                dtype=args.dtype, jit=jit, warmup=args.warmup, steps=args.steps)
    which = [args.only] if args.only else ["keras", "flash"]
    results = []
    print("| context | batch | Keras tokens/s | enable_flash_attention tokens/s | speedup | "
          "Keras peak GiB | flash peak GiB | loss (Keras / flash) | our op in the step "
          "(Keras / flash) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for ctx in args.contexts:
        batch = max(1, args.tokens_per_step // ctx)
        r = {w: run(dict(base, context=ctx, batch=batch, flash=w == "flash"), args.timeout)
             for w in which}
        results += list(r.values())
        k, f = r.get("keras", {}), r.get("flash", {})
        speed = (f"{f['tokens_per_s'] / k['tokens_per_s']:.2f}x"
                 if "tokens_per_s" in k and "tokens_per_s" in f else "n/a")
        print(f"| {ctx} | {batch} | {cell(k, 'tokens_per_s', '{:,.0f}') if k else '-'} | "
              f"{cell(f, 'tokens_per_s', '{:,.0f}') if f else '-'} | {speed} | "
              f"{cell(k, 'peak_gib', '{:.1f}') if 'peak_gib' in k or k.get('oom') else '-'} | "
              f"{cell(f, 'peak_gib', '{:.1f}') if 'peak_gib' in f or f.get('oom') else '-'} | "
              f"{cell(k, 'loss', '{:.4f}') if k else '-'} / {cell(f, 'loss', '{:.4f}') if f else '-'}"
              f" | {k.get('has_flash_op', '-')} / {f.get('has_flash_op', '-')} |", flush=True)
        for x in r.values():
            if "error" in x:
                print(f"  {'flash' if x['flash'] else 'keras'} at {ctx}: {x['error']}", flush=True)
    if args.max_context:
        for w in which:
            ctx, best = args.max_context_start, None
            while ctx <= args.max_context_limit:
                r = run(dict(base, context=ctx, batch=1, flash=w == "flash", warmup=1, steps=1),
                        args.timeout)
                results.append(dict(r, max_context_probe=True))
                ok = "tokens_per_s" in r
                print(f"  longest-context probe {w} {ctx}: "
                      f"{'trains' if ok else ('OOM' if r.get('oom') else r.get('error'))}",
                      flush=True)
                if not ok:
                    break
                best, ctx = ctx, ctx * 2
            print(f"longest context {w}: {best} (probed from {args.max_context_start} up to "
                  f"{args.max_context_limit}, batch 1)", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
