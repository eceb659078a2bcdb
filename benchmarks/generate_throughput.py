"""Generation throughput of the example char LM: KV-cached loop vs recompute loop.

Builds the model of examples/train_char_lm.py with random weights (no training: the cost of a
byte does not depend on the weights) and times its `generate` (make_generate) both ways in the
same process:

- cached: the prompt runs once through the model into a KV cache per attention layer
  (prefill), then one forward of a single byte per step against the cache;
- recompute: every step runs the model on the whole context (the loop before the cache).

The prompt has `context - tokens + 1` bytes, so the last byte is predicted from exactly
`context` positions and the cached loop never refills its cache: every step of the recompute
loop sees between `context - tokens + 1` and `context` positions. Each figure is the best of
--repeats calls (the first call, which builds the graph, is not timed). Reported: tokens/s of
the whole call (prefill included) and of the decode steps alone ((tokens - 1) / (time of the
call - time of a call making 1 token)), and the ratio. Also whether both loops gave the same
bytes (greedy; with random weights in bf16 near-ties can split them: the table shows how many
leading bytes agree).

    python benchmarks/generate_throughput.py                    # CPU: context 2048, small model
    python benchmarks/generate_throughput.py --context 8192 --dim 1024 --heads 16 --layers 8 \\
        --dtype mixed_bfloat16 --tokens 256 --json h200_generate.json      # the H200 target

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
          "bf16": "mixed_bfloat16", "mixed_float16": "mixed_float16", "fp16": "mixed_float16"}


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
        generate = train_char_lm.make_generate(model, args.context, cached=(mode == "cached"))
        started = time.perf_counter()
        _time_call(generate, prompt, 2, 1)  # traces and optimizes the graph
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
        print(f"  {mode}: {json.dumps(result['modes'][mode])}", flush=True)
    if len(outputs) == 2:
        a, b = outputs["cached"], outputs["recompute"]
        differ = np.flatnonzero(a != b)
        result["same_output"] = bool(differ.size == 0)
        result["leading_bytes_equal"] = int(differ[0]) if differ.size else len(a)
        m = result["modes"]
        result["speedup"] = round(m["cached"]["tokens_per_s"] / m["recompute"]["tokens_per_s"], 2)
        if m["cached"]["decode_tokens_per_s"] and m["recompute"]["decode_tokens_per_s"]:
            result["decode_speedup"] = round(
                m["cached"]["decode_tokens_per_s"] / m["recompute"]["decode_tokens_per_s"], 2)
    return result


def table(r):
    lines = [
        f"{r['device']}, commit {r['commit']}, {r['date']}: context {r['context']}, dim {r['dim']}, "
        f"{r['heads']} heads, {r['layers']} layers, {r['dtype']}, {r['params']:,} parameters, "
        f"prompt {r['prompt_len']} + {r['tokens']} generated bytes, best of {r['repeats']}",
        "",
        "| generate | seconds | tokens/s (whole call) | first byte (s) | decode tokens/s |",
        "|---|---:|---:|---:|---:|",
    ]
    for mode, m in r["modes"].items():
        decode = "-" if m["decode_tokens_per_s"] is None else f"{m['decode_tokens_per_s']:,.1f}"
        lines.append(f"| {mode} | {m['seconds']:.3f} | {m['tokens_per_s']:,.1f} | "
                     f"{m['first_token_s']:.3f} | {decode} |")
    if "speedup" in r:
        lines.append("")
        lines.append(f"cached / recompute: {r['speedup']}x whole call"
                     + (f", {r['decode_speedup']}x decode steps" if "decode_speedup" in r else "")
                     + f"; same bytes: {r['same_output']} (leading equal: "
                       f"{r['leading_bytes_equal']} of {r['tokens']})")
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
    p.add_argument("--modes", default="cached,recompute",
                   help="which loops to time, comma-separated (default both)")
    p.add_argument("--seed", type=int, default=0, help="weights and prompt seed (default 0)")
    p.add_argument("--json", default="generate_throughput.json",
                   help="where the results go (default generate_throughput.json; '' for none)")
    args = p.parse_args(argv)
    for name in ("context", "dim", "heads", "layers", "tokens", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    modes = args.modes.split(",")
    if not modes or any(m not in ("cached", "recompute") for m in modes):
        p.error(f"--modes must list cached and/or recompute; got {args.modes!r}")
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
