"""Training a KerasHub Llama model with `fit`, with and without `tf_flashattn.enable_flash_attention()`.

A `keras_hub.models.LlamaCausalLM` built from its config (random weights, no download), trained
with `model.fit` on one batch of random tokens repeated (a tf.data dataset, `steps_per_epoch`
= warm-up + timed steps), Keras' defaults otherwise (XLA on a GPU: jit_compile="auto"). A
callback times each step from batch end to batch end after the warm-up (the first step holds the
tracing and XLA compilation). Each configuration runs in its own process, so memory and
compilation never carry over; an out-of-memory run is reported as OOM. Every run of a context
starts from the same weights and data, so their losses agree (the loss `fit` logs at the last
step: the mean over the epoch).

    python benchmarks/kerashub_train.py                          # GPU: contexts 4096 and 16384
    python benchmarks/kerashub_train.py --max-context-only       # the longest context each trains at
    python benchmarks/kerashub_train.py --contexts 4096 --op-paths   # the op alone, by mask form
    python benchmarks/kerashub_train.py --contexts 256 --layers 2 --dim 256 --heads 4 --kv-heads 2 \\
        --vocab 1000 --dtype float32 --tokens-per-step 512 --steps 2   # CPU smoke test

Variants: `keras` (KerasHub's own attention), `flash` (enable_flash_attention(): KerasHub's
padding mask reaches the op as `key_mask`, with the causal structure as `is_causal`).

The longest context (`--max-context`, after the table, or `--max-context-only`): batch 1, one
step per try (its time includes compilation), each try in a fresh process, doubling from
`--max-context-start` (default 8192, or per variant: "keras=8192,flash=32768"; after the table,
from twice the longest context that trained there) until a try runs out of memory or reaches
`--max-context-limit`; no try starts once `--max-context-budget` seconds are spent (counting from
the first try) or when the next try is expected to overrun it (1.5 x the previous try's time).

`--op-paths` (in its own process first): the op alone at the model's attention shape (batch and
context as in the table's first context, 16 query heads, D = 128, causal, the compute dtype),
forward + backward under XLA, with K/V repeated to the query heads as KerasHub passes them and
with 4 K/V heads, and with the padding as nothing / key_lengths / an all-True key_mask.

Defaults (the Keras-wide issue's model): 8 layers, hidden 2048, 16 query / 4 kv heads (head dim
128), intermediate 5632, vocabulary 32000, mixed_bfloat16, 16384 tokens per step. Prints a
markdown table: tokens/s, peak GPU memory, loss, whether the traced step held our op and compile
(setup + first step) seconds.
"""
import argparse
import json
import os
import sys
import time

from _train_common import cell, run_worker, timed_fit

VARIANTS = ("keras", "flash")


def _graph_ops(concrete):
    """Op types and node names of a concrete function's graph and of every function in its
    library (tf.cond branches, loop bodies)."""
    graph_def = concrete.graph.as_graph_def()
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    return {n.op for n in nodes}, {n.name for n in nodes}


def _profiler_calls():
    """(start, stop) of the CUDA profiler API (for `nsys --capture-range=cudaProfilerApi`), or
    None when no CUDA runtime library is found."""
    import ctypes
    import glob
    import site
    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    for d in site.getsitepackages() + [os.path.dirname(os.__file__)]:
        names += sorted(glob.glob(os.path.join(d, "nvidia", "cuda_runtime", "lib", "libcudart.so*")))
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            return lib.cudaProfilerStart, lib.cudaProfilerStop
        except OSError:
            continue
    return None


def worker(cfg):
    started = time.perf_counter()
    import numpy as np
    import tensorflow as tf

    import keras
    import keras_hub

    import tf_flashattn

    keras.config.set_dtype_policy(cfg["dtype"])
    keras.utils.set_random_seed(0)
    variant = cfg["variant"]
    if variant != "keras":
        tf_flashattn.enable_flash_attention()
    gpu = bool(tf.config.list_physical_devices("GPU"))
    profiler = _profiler_calls() if cfg.get("profile") and gpu else None
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
        spec = ({n: tf.TensorSpec(a.shape, a.dtype) for n, a in x.items()},
                tf.TensorSpec(y.shape, y.dtype))
        warmup_s, times, loss, first_loss = timed_fit(
            model, x, y, cfg["warmup"], cfg["steps"], gpu,
            on_warm=profiler[0] if profiler else None)
        if profiler:
            profiler[1]()
        peak = (tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**30 if gpu else None)
        # Whether our op is in the traced step (what enable_flash_attention() should give, and
        # the run without it should not).
        types, _ = (set(), set()) if cfg.get("probe") else _graph_ops(
            tf.function(model.train_step).get_concrete_function(spec))
    except tf.errors.OpError as e:
        if isinstance(e, tf.errors.ResourceExhaustedError) or "RESOURCE_EXHAUSTED" in str(e):
            return dict(cfg, oom=True, seconds_to_oom=round(time.perf_counter() - started, 1))
        raise
    step = float(np.median(times))
    result = dict(cfg, oom=False, tokens_per_s=batch * ctx / step, seconds_per_step=step,
                  step_seconds=[round(t, 4) for t in times], loss=loss, first_loss=first_loss,
                  jit=bool(model.jit_compile), setup_s=round(built - started, 1),
                  warmup_s=round(warmup_s, 1), wall_s=round(time.perf_counter() - started, 1),
                  has_flash_op=None if cfg.get("probe") else "FlashAttn>FlashAttention" in types,
                  has_flash_grad="FlashAttn>FlashAttentionGrad" in types)
    if peak is not None:
        result["peak_gib"] = peak
    if cfg.get("profile"):
        result["profiler_api"] = profiler is not None
    return result


def op_paths_worker(cfg):
    """The op alone at the model's attention shape, forward + backward under XLA: milliseconds per
    call for K/V repeated to the query heads (as KerasHub passes them) or not, and the padding as
    nothing, key_lengths or an all-True key_mask."""
    import tensorflow as tf

    import tf_flashattn
    dtype = {"mixed_bfloat16": tf.bfloat16, "mixed_float16": tf.float16}.get(cfg["dtype"],
                                                                             tf.float32)
    b, t, h, hkv = cfg["batch"], cfg["context"], cfg["heads"], cfg["kv_heads"]
    d = cfg["dim"] // h
    rows = []
    for kv in (h, hkv):
        q, k, v, do = (tf.cast(tf.random.stateless_normal(s, [i, 0]), dtype) for i, s in enumerate(
            ([b, t, h, d], [b, t, kv, d], [b, t, kv, d], [b, t, h, d])))
        for padding in ("none", "key_lengths", "key_mask"):
            kw = {"none": {}, "key_lengths": {"key_lengths": tf.fill([b], t)},
                  "key_mask": {"key_mask": tf.ones([b, t], tf.bool)}}[padding]

            @tf.function(jit_compile=cfg["jit"] is not False)
            def step(q, k, v, do, kw=kw):
                with tf.GradientTape() as tape:
                    tape.watch([q, k, v])
                    out = tf_flashattn.dot_product_attention(q, k, v, is_causal=True, **kw)
                    loss = tf.reduce_sum(tf.cast(out, tf.float32) * tf.cast(do, tf.float32))
                return tape.gradient(loss, [q, k, v])

            for _ in range(2):
                [g.numpy() for g in step(q, k, v, do)]
            n = cfg["steps"] * 2
            t0 = time.perf_counter()
            for _ in range(n):
                grads = step(q, k, v, do)
            [g.numpy() for g in grads]
            ms = (time.perf_counter() - t0) / n * 1e3
            flops = 4 * b * h * t * t * d / 2 * 3.5  # causal: half; fwd + bwd = 3.5 x fwd
            rows.append(dict(kv_heads=kv, padding=padding, ms=ms, tflops=flops / ms / 1e9))
    return dict(cfg, op_paths=rows)


def run(cfg, timeout):
    """Measures `worker(cfg)` in a fresh process; returns its dict (or an error)."""
    return run_worker(__file__, cfg, timeout)


def _starts(text, variants):
    """--max-context-start: one number for every variant, or "keras=8192,flash=32768"."""
    if text is None:
        return {}
    if "=" not in text:
        return {v: int(text) for v in variants}
    return {k.strip(): int(n) for k, n in (part.split("=") for part in text.split(","))}


def _ints(text):
    return [int(x) for x in text.replace(",", " ").split()]


def table(base, contexts, variants, rows):
    """The markdown table: one row per context, the variants side by side."""
    lines = ["| context | batch | " + " | ".join(f"{v} tokens/s" for v in variants) + " | "
             + " | ".join(f"{v} vs keras" for v in variants if v != "keras" and "keras" in variants)
             + (" | " if "keras" in variants and len(variants) > 1 else "")
             + " | ".join(f"{v} peak GiB" for v in variants)
             + f" | loss ({' / '.join(variants)}) | our op in the step ({' / '.join(variants)})"
             f" | compile s ({' / '.join(variants)}) |"]
    n = lines[0].count("|") - 1
    lines.append("|" + "---:|" * 2 + "---:|" * (n - 5) + "---|---|---|")
    for ctx in contexts:
        r = rows[ctx]
        k = r.get("keras", {})
        cells = [str(ctx), str(max(1, base["tokens_per_step"] // ctx))]
        cells += [cell(r[v], "tokens_per_s", "{:,.0f}") for v in variants]
        for v in variants:
            if v != "keras" and "keras" in variants:
                ok = "tokens_per_s" in k and "tokens_per_s" in r[v]
                cells.append(f"{r[v]['tokens_per_s'] / k['tokens_per_s']:.2f}x" if ok else "n/a")
        cells += [cell(r[v], "peak_gib", "{:.1f}") for v in variants]
        cells.append(" / ".join(cell(r[v], "loss", "{:.4f}") for v in variants))
        op = []
        for v in variants:
            x = r[v]
            op.append("-" if "has_flash_op" not in x else "yes" if x["has_flash_op"] else "no")
        cells.append(" / ".join(op))
        cells.append(" / ".join(cell(r[v], "warmup_s", "{:.0f}") if "warmup_s" not in r[v] else
                                f"{r[v]['setup_s'] + r[v]['warmup_s']:.0f}" for v in variants))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def max_context(base, variants, starts, limits, budget, timeout, results, log=print,
                floor=None):
    """The longest-context search (see the module docstring): doubling from the start while tries
    train; when the first try runs out of memory, halving until one trains (not down to
    `floor[variant]`, a context known to train). Returns {variant: longest context that trained,
    or None}."""
    t0, longest, floor = time.perf_counter(), {}, floor or {}
    for w in variants:
        start, limit, known = starts.get(w, 8192), limits.get(w, 1 << 17), floor.get(w, 0)
        ctx, best, failed, last, down, note = start, None, None, None, False, ""
        while True:
            if ctx > limit:
                note = f"; stopped at the limit {limit}"
                break
            if ctx <= known:
                break
            left = budget - (time.perf_counter() - t0)
            expect = 1.5 * last if last else 60.0
            if left < expect:
                note = f"; stopped by the budget ({left:.0f} s left, {expect:.0f} s expected for {ctx})"
                break
            began = time.perf_counter()
            r = run(dict(base, variant=w, context=ctx, batch=1, warmup=0, steps=1, probe=True),
                    int(min(timeout, max(left, 30))))
            last = time.perf_counter() - began
            results.append(dict(r, max_context_probe=True, probe_s=round(last, 1)))
            ok = "tokens_per_s" in r
            what = ("trains: one step (with compilation) "
                    f"{r['seconds_per_step']:.1f} s, peak {cell(r, 'peak_gib', '{:.1f}')} GiB" if ok else
                    "OOM" if r.get("oom") else f"error: {r.get('error')}")
            log(f"  longest-context {w} {ctx}: {what} ({last:.0f} s in all)")
            if ok:
                best = ctx
                if down:
                    break
                ctx *= 2
                continue
            failed = ctx
            if best is None and r.get("oom"):
                down, ctx, last = True, ctx // 2, None  # halve; compile time is the estimate again
                continue
            break
        if best is None and known:
            best = known
        longest[w] = best
        nxt = f"; {failed}: OOM" if failed and best and failed == 2 * best else ""
        log(f"longest context {w}: {best if best else 'none found'} (batch 1, powers of two from "
            f"{start}{nxt}{note})")
    return longest


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--contexts", default="4096,16384", help="comma- or space-separated")
    p.add_argument("--variants", default="keras,flash",
                   help=f"comma-separated, of {', '.join(VARIANTS)}")
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
    p.add_argument("--profile", action="store_true",
                   help="call cudaProfilerStart after the warm-up (for nsys "
                        "--capture-range=cudaProfilerApi)")
    p.add_argument("--op-paths", action="store_true", help="the op alone first (see above)")
    p.add_argument("--max-context", action="store_true", help="the table, then the longest context")
    p.add_argument("--max-context-only", action="store_true", help="the longest context only")
    p.add_argument("--max-context-start", help="default: 8192, or after the table twice the "
                   "longest context that trained there")
    p.add_argument("--max-context-limit", default=str(1 << 17),
                   help='the longest context tried, or per variant: "keras=8192,flash=131072"')
    p.add_argument("--max-context-known", help='contexts known to train (batch 1), per variant: '
                   '"keras=4096,flash=16384": the search does not go down to them')
    p.add_argument("--max-context-budget", type=float, default=270.0,
                   help="seconds for all longest-context tries together")
    p.add_argument("--timeout", type=int, default=400, help="seconds per configuration")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.worker:
        cfg = json.loads(args.worker)
        out = op_paths_worker(cfg) if cfg.get("op_paths") else worker(cfg)
        print("RESULT " + json.dumps(out), flush=True)
        return 0
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            p.error(f"unknown variant {v!r} (one of {', '.join(VARIANTS)})")
    contexts = _ints(args.contexts)
    jit = {"auto": "auto", "true": True, "false": False}[args.jit.lower()]
    base = dict(layers=args.layers, dim=args.dim, heads=args.heads, kv_heads=args.kv_heads,
                intermediate=args.intermediate or int(args.dim * 2.75), vocab=args.vocab,
                dtype=args.dtype, jit=jit, warmup=args.warmup, steps=args.steps,
                profile=args.profile)
    results = []

    def dump():
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(results, fh, indent=1)

    if args.op_paths:
        ctx = contexts[0]
        r = run(dict(base, op_paths=True, context=ctx,
                     batch=max(1, args.tokens_per_step // ctx)), args.timeout)
        results.append(r)
        print(f"The op alone, B={r['batch']} T={ctx} H={args.heads} D={args.dim // args.heads} "
              f"causal {args.dtype}, forward + backward, jit={jit}:")
        for row in r.get("op_paths", []):
            print(f"  kv heads {row['kv_heads']:3d}  padding {row['padding']:12s} "
                  f"{row['ms']:8.2f} ms  {row['tflops']:6.1f} TFLOP/s", flush=True)
        if "error" in r:
            print("  error:", r["error"])
        dump()
    longest_trained = {}
    if not args.max_context_only:
        rows = {}
        for ctx in contexts:
            batch = max(1, args.tokens_per_step // ctx)
            rows[ctx] = {}
            for w in variants:
                r = run(dict(base, context=ctx, batch=batch, variant=w), args.timeout)
                rows[ctx][w] = r
                results.append(r)
                dump()
                if "tokens_per_s" in r:
                    longest_trained[w] = max(longest_trained.get(w, 0), ctx)
                if "error" in r:
                    print(f"  {w} at {ctx}: {r['error']}", flush=True)
                else:
                    print(f"  {w} at {ctx}: " + ("OOM" if r.get("oom") else
                          f"{r['tokens_per_s']:,.0f} tokens/s, loss {r['loss']:.4f}, "
                          f"{r['setup_s'] + r['warmup_s']:.0f} s to warm"), flush=True)
        print(table(dict(base, tokens_per_step=args.tokens_per_step), contexts, variants, rows),
              flush=True)
    if args.max_context or args.max_context_only:
        starts = {w: 2 * longest_trained[w] if w in longest_trained else 8192 for w in variants}
        starts.update(_starts(args.max_context_start, variants))
        limits = _starts(args.max_context_limit, variants)
        for w, n in _starts(args.max_context_known, variants).items():
            longest_trained[w] = max(longest_trained.get(w, 0), n)
        max_context(base, variants, starts, limits, args.max_context_budget, args.timeout,
                    results, log=lambda s: print(s, flush=True), floor=longest_trained)
    dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
