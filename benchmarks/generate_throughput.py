"""Generation throughput of the example char LM: KV-cached loop vs recompute loop.

Builds the model of examples/train_char_lm.py with random weights (no training: the cost of a
byte does not depend on the weights) and times its `generate` (make_generate) both ways in the
same process:

- cached: the prompt runs once through the model into a KV cache per attention layer
  (prefill), then one forward of a single byte per step against the cache, the decode steps
  compiled by XLA as one loop (make_generate's default, jit_compile=True: each step writes the
  new position into each layer's cache in place, no TensorFlow executor per op);
- cached_noxla: the same loop without XLA (jit_compile=False: every op of every step through
  TensorFlow's executor; each cache write a scatter, or on a GPU with a bf16/fp16 cache a select
  over the whole cache);
- recompute: every step runs the model on the whole context (the loop before the cache).

The prompt has `context - tokens + 1` bytes, so the last byte is predicted from exactly
`context` positions and the cached loop never refills its cache: every step of the recompute
loop sees between `context - tokens + 1` and `context` positions. Each figure is the best of
--repeats calls (the first call, which builds the graph, is not timed). Reported: tokens/s of
the whole call (prefill included) and of the decode steps alone ((tokens - 1) / (time of the
call - time of a call making 1 token)), and the ratios to recompute. Also whether the loops gave
the same bytes (greedy; with random weights in bf16 near-ties can split them: the table shows how
many leading bytes agree with the recompute loop's).

--check-float32 (for a bf16/fp16 run): the same weights in a float32 model (TF32 off) run both
loops greedily once more (untimed): whether the float32 loops agree with each other, how many
leading bytes each low-precision loop shares with float32, and at the first byte where the
low-precision cached and recompute loops split, the float32 model's logit gap between their two
choices (a gap far below the logits' spread: a near-tie that bf16 rounding decides either way).

    python benchmarks/generate_throughput.py                    # CPU: context 2048, small model
    python benchmarks/generate_throughput.py --context 8192 --dim 1024 --heads 16 --layers 8 \\
        --dtype bf16 --tokens 256 --check-float32 --json h200_generate.json   # the H200 target

Prints a markdown table and writes the results as JSON (--json).
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
EXAMPLES = os.path.join(REPO, "examples")

DTYPES = {"float32": "float32", "fp32": "float32", "mixed_bfloat16": "mixed_bfloat16",
          "bf16": "mixed_bfloat16", "bfloat16": "mixed_bfloat16", "mixed_float16":
          "mixed_float16", "fp16": "mixed_float16", "float16": "mixed_float16"}
MODES = ("cached", "cached_noxla", "recompute")


def _device_name(tf):
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
    return f"CPU ({os.cpu_count()} cores)"


def _commit():
    try:
        return subprocess.run(["git", "-C", REPO, "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _time_call(generate, prompt, num_tokens, repeats):
    """(best seconds of `repeats` calls, the bytes of the last call)."""
    import tensorflow as tf

    args = (tf.constant(prompt, tf.int32), tf.constant(num_tokens, tf.int32),
            tf.constant(0.0, tf.float32), tf.constant([0, 0], tf.int64))
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = generate(*args).numpy()  # .numpy() waits for the device
        best = min(best, time.perf_counter() - start)
    return best, out


def measure(args):
    import keras
    import numpy as np
    import tensorflow as tf

    sys.path.insert(0, EXAMPLES)
    import tf_flashattn
    import train_char_lm

    if args.tokens > args.context:
        raise SystemExit(f"--tokens ({args.tokens}) must be at most --context ({args.context})")
    if args.dim % args.heads:
        raise SystemExit(f"--dim ({args.dim}) must be a multiple of --heads ({args.heads})")
    keras.config.set_dtype_policy(DTYPES[args.dtype])
    keras.utils.set_random_seed(args.seed)
    model = train_char_lm.build_model(args.context, args.dim, args.heads, args.layers, 0.0)
    prompt = np.random.default_rng(args.seed).integers(
        32, 127, size=args.context - args.tokens + 1).astype("int32")
    result = dict(
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        commit=_commit(),
        device=_device_name(tf),
        backends=tf_flashattn.backends(),
        context=args.context, dim=args.dim, heads=args.heads, layers=args.layers,
        dtype=DTYPES[args.dtype], tokens=args.tokens, prompt_len=len(prompt),
        params=model.count_params(), repeats=args.repeats, modes={},
    )
    outputs = {}
    for mode in args.modes.split(","):
        generate = train_char_lm.make_generate(model, args.context, cached=(mode != "recompute"),
                                               jit_compile=(mode == "cached"))
        started = time.perf_counter()
        _time_call(generate, prompt, 2, 1)  # traces and optimizes the graph (XLA: compiles)
        warm = time.perf_counter() - started
        first, _ = _time_call(generate, prompt, 1, args.repeats)
        total, out = _time_call(generate, prompt, args.tokens, args.repeats)
        outputs[mode] = out
        decode = total - first
        result["modes"][mode] = dict(
            seconds=round(total, 4),
            tokens_per_s=round(args.tokens / total, 2),
            first_token_s=round(first, 4),
            decode_tokens_per_s=(round((args.tokens - 1) / decode, 2)
                                 if args.tokens > 1 and decode > 0 else None),
            trace_s=round(warm, 1),
        )
        if mode != "recompute" and args.tokens > 1:
            result["modes"][mode]["decode_step_ms"] = _time_decode_steps(
                generate, prompt, args.tokens, args.repeats)
        print(f"  {mode}: {json.dumps(result['modes'][mode])}", flush=True)
    m = result["modes"]
    if "recompute" in outputs:
        for mode in outputs:
            if mode == "recompute":
                continue
            m[mode]["leading_bytes_equal"] = _leading_equal(outputs[mode], outputs["recompute"])
            m[mode]["same_output"] = m[mode]["leading_bytes_equal"] == args.tokens
            m[mode]["speedup"] = round(m[mode]["tokens_per_s"] / m["recompute"]["tokens_per_s"], 2)
            if m[mode]["decode_tokens_per_s"] and m["recompute"]["decode_tokens_per_s"]:
                m[mode]["decode_speedup"] = round(
                    m[mode]["decode_tokens_per_s"] / m["recompute"]["decode_tokens_per_s"], 2)
        if "cached" in outputs:  # the fields of earlier runs: the cached loop's
            for key in ("same_output", "leading_bytes_equal", "speedup", "decode_speedup"):
                if key in m["cached"]:
                    result[key] = m["cached"][key]
    if args.check_float32:
        result["float32_check"] = _float32_check(args, model, prompt, outputs)
        print(f"  float32 check: {json.dumps(result['float32_check'])}", flush=True)
    return result


def _time_decode_steps(generate, prompt, num_tokens, repeats):
    """Milliseconds per step of the cached loop's decode steps alone (make_generate's
    `decode_steps`, XLA-compiled or not, after an untimed prefill of `prompt`): best of
    `repeats` runs of num_tokens - 1 steps, over num_tokens - 1. Each run also copies the caches
    once on entry (the caller keeps its own), spread over the steps."""
    import tensorflow as tf

    logits, caches = tf.function(generate.prefill)(tf.constant(prompt, tf.int32))
    args = (logits, caches, tf.constant(len(prompt)), tf.constant(0), tf.constant(num_tokens),
            tf.constant(0.0), tf.constant([0, 0], tf.int64))
    _, made = generate.decode_steps(*args)
    if int(made) != num_tokens:
        raise RuntimeError(f"decode_steps made {int(made)} bytes, not {num_tokens}")
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        _, made = generate.decode_steps(*args)
        made.numpy()  # waits for the device
        best = min(best, time.perf_counter() - start)
    return round(1000 * best / (num_tokens - 1), 4)


def _leading_equal(a, b):
    """How many leading bytes a and b share."""
    import numpy as np

    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def _float32_check(args, model, prompt, outputs):
    """Both loops greedily on a float32 copy of `model` (TF32 off), against the low-precision
    outputs; the float32 logit gap where the low-precision cached and recompute loops split."""
    import keras
    import numpy as np
    import tensorflow as tf
    import train_char_lm

    before_policy = keras.config.dtype_policy()
    before_tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    keras.config.set_dtype_policy("float32")
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        f32 = train_char_lm.build_model(args.context, args.dim, args.heads, args.layers, 0.0)
        f32.set_weights(model.get_weights())  # mixed precision keeps float32 variables
        check = dict(tokens=args.tokens, tf32=False)
        ref = {}
        for mode in ("cached", "recompute"):
            generate = train_char_lm.make_generate(f32, args.context, cached=(mode == "cached"))
            started = time.perf_counter()
            _, ref[mode] = _time_call(generate, prompt, args.tokens, 1)
            check[f"{mode}_s"] = round(time.perf_counter() - started, 2)
        check["float32_cached_vs_recompute"] = _leading_equal(ref["cached"], ref["recompute"])
        for mode, out in outputs.items():
            for f32_mode in ("cached", "recompute"):
                check[f"{mode}_vs_float32_{f32_mode}"] = _leading_equal(out, ref[f32_mode])
        if "cached" in outputs and "recompute" in outputs:
            a, b = outputs["cached"], outputs["recompute"]
            split = _leading_equal(a, b)
            if split < len(a):
                context = np.concatenate([prompt, a[:split]])[-args.context:]
                logits = f32(context[None].astype("int32"), training=False)[0, -1].numpy()
                top2 = np.sort(logits)[-2:]
                check["split_at"] = split
                check["split_bytes"] = [int(a[split]), int(b[split])]
                check["split_float32_gap"] = float(abs(logits[a[split]] - logits[b[split]]))
                check["split_float32_choice"] = int(np.argmax(logits))
                check["float32_top2_gap_there"] = float(top2[1] - top2[0])
                check["float32_logit_std_there"] = float(np.std(logits))
        return check
    finally:
        keras.config.set_dtype_policy(before_policy)
        tf.config.experimental.enable_tensor_float_32_execution(before_tf32)


def table(r):
    lines = [
        f"{r['device']}, commit {r['commit']}, {r['date']}: context {r['context']}, dim {r['dim']}, "
        f"{r['heads']} heads, {r['layers']} layers, {r['dtype']}, {r['params']:,} parameters, "
        f"prompt {r['prompt_len']} + {r['tokens']} generated bytes, best of {r['repeats']}",
        "",
        "| generate | seconds | tokens/s (whole call) | first byte (s) | decode tokens/s | "
        "ms per decode step* | x recompute (call / decode) | leading bytes = recompute |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, m in r["modes"].items():
        decode = "-" if m["decode_tokens_per_s"] is None else f"{m['decode_tokens_per_s']:,.1f}"
        if m.get("decode_step_ms") is not None:
            step = f"{m['decode_step_ms']:.3f}"
        elif m["decode_tokens_per_s"]:
            step = f"{1000 / m['decode_tokens_per_s']:.2f}"
        else:
            step = "-"
        ratio = "-" if "speedup" not in m else (
            f"{m['speedup']}x / {m.get('decode_speedup', '-')}x")
        equal = "-" if "leading_bytes_equal" not in m else (
            f"{m['leading_bytes_equal']} of {r['tokens']}")
        lines.append(f"| {mode} | {m['seconds']:.3f} | {m['tokens_per_s']:,.1f} | "
                     f"{m['first_token_s']:.3f} | {decode} | {step} | {ratio} | {equal} |")
    lines.append("")
    lines.append("*cached loops: the decode steps alone, timed without the prefill; recompute: "
                 "1000 / decode tokens/s")
    check = r.get("float32_check")
    if check:
        lines.append("")
        lines.append("float32 check (same weights, TF32 off; leading bytes equal): "
                     + ", ".join(f"{k} {v}" for k, v in check.items()))
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--context", type=int, default=2048, help="model context = positions attended "
                   "by the last byte (default 2048)")
    p.add_argument("--dim", type=int, default=128, help="model width (default 128)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--layers", type=int, default=2, help="transformer blocks (default 2)")
    p.add_argument("--dtype", default="float32", choices=sorted(DTYPES),
                   help="Keras dtype policy (bf16 = mixed_bfloat16; default float32)")
    p.add_argument("--tokens", type=int, default=64, help="bytes generated per call (default 64)")
    p.add_argument("--repeats", type=int, default=2, help="timed calls per figure, best kept "
                   "(default 2)")
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"which loops to time, comma-separated, of {', '.join(MODES)} "
                        f"(default all)")
    p.add_argument("--check-float32", action="store_true",
                   help="also run both loops greedily on a float32 copy of the model and "
                        "compare (see above)")
    p.add_argument("--seed", type=int, default=0, help="weights and prompt seed (default 0)")
    p.add_argument("--json", default="generate_throughput.json",
                   help="where the results go (default generate_throughput.json; '' for none)")
    args = p.parse_args(argv)
    for name in ("context", "dim", "heads", "layers", "tokens", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    modes = args.modes.split(",")
    if not modes or any(m not in MODES for m in modes) or len(set(modes)) != len(modes):
        p.error(f"--modes must list some of {', '.join(MODES)}; got {args.modes!r}")
    return args


def main(argv=None):
    args = parse_args(argv)
    result = measure(args)
    print(table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
