"""Host time per call: does a call of the op return before its GPU work is done?

TensorFlow runs GPU work asynchronously: an op's kernel is queued on the GPU's stream and the host
goes on to queue the next one. An op that copies a GPU tensor to the host (or synchronizes the
stream) makes the host wait for everything queued before it, so the GPU then idles while Python and
TensorFlow queue what follows. This script measures, per case, N calls in a row with the result
read back once at the end:

    enqueue ms = host time of the N calls / N      (how long the host was busy per call)
    total ms   = time until the last result is ready / N

A call that blocks has enqueue ~ total; an asynchronous one has enqueue << total once its GPU work
is longer than the host's. Each case has a control: a bf16 batched matmul of similar GPU time, run
the same way (graph, eager, XLA; forward or forward + backward), whose enqueue time is what
TensorFlow itself costs per call.

The host's speed drifts during a run (on the H200's host the same control moved between 0.11 and
0.20 ms per call from one run to the next, and single cases by 2x within a run), so each case is
timed in turns with its control, block by block (--repeats pairs, the order swapped every pair):
the ratio column is the median over the pairs of case / control, each pair timed back to back.

    python benchmarks/host_overhead.py [--calls 20] [--repeats 3] [--seq 16384] [--json out.json]
    python benchmarks/host_overhead.py --cases graph_fwd,xla_fwd_bwd_dropout   # a subset

Cases: {graph, eager, xla} x {fwd, fwd_bwd}, plus causal, dropout 0.1 (the seed from a Keras
SeedGenerator, whose state lives on the GPU, through tf_flashattn.next_seed as our layers take it;
`fwd_dropout_keras_next` through Keras' own next(), and `control_keras_next` the matmul control
followed by next() alone: in eager mode Keras' next() waits for the GPU by itself), key_lengths (a [B] GPU tensor), key_mask ([B, T]) and
a dense [B, 1, T, T] mask. The shape is the asynchronous-execution issue's: bf16 q, k, v of
[B, T, H, D] = [1, 16384, 16, 128]. Distinct inputs per call position keep TensorFlow's graph
optimizer from merging calls (each call is its own function call anyway). Runs on the CPU too
(small shapes, --seq 256), where every call is synchronous by nature: only for checking the script.
"""
import argparse
import json
import statistics
import sys
import time


def _sync():
    import tensorflow as tf
    tf.test.experimental.sync_devices()


def _block(fn, calls):
    """(enqueue ms, total ms) per call of `calls` calls of fn() in a row, read back once."""
    _sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn()
    t1 = time.perf_counter()
    _sync()
    del out
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e3, (t2 - t0) / calls * 1e3


def _warm(fn):
    fn()  # trace / compile
    fn()
    _sync()


def measure(fn, calls, repeats):
    """Median over `repeats` of (enqueue ms, total ms) per call of fn() over `calls` calls."""
    _warm(fn)
    blocks = [_block(fn, calls) for _ in range(repeats)]
    return statistics.median(b[0] for b in blocks), statistics.median(b[1] for b in blocks)


def measure_paired(fn, control, calls, repeats):
    """fn and its control timed in turns: `repeats` pairs of blocks, back to back, the order
    swapped every pair. Returns fn's median (enqueue ms, total ms), the control's median enqueue
    ms over the same pairs, and the median over the pairs of fn's enqueue / the control's."""
    _warm(fn)
    _warm(control)
    mine, ctl, ratios = [], [], []
    for r in range(repeats):
        if r % 2:
            c = _block(control, calls)
            m = _block(fn, calls)
        else:
            m = _block(fn, calls)
            c = _block(control, calls)
        mine.append(m)
        ctl.append(c[0])
        ratios.append(m[0] / c[0])
    return (statistics.median(b[0] for b in mine), statistics.median(b[1] for b in mine),
            statistics.median(ctl), statistics.median(ratios))


def build_cases(seq, batch=1, heads=16, dim=128):
    import keras
    import numpy as np
    import tensorflow as tf

    import tf_flashattn

    gpu = bool(tf.config.list_physical_devices("GPU"))
    dtype = tf.bfloat16 if gpu else tf.float32
    rng = np.random.default_rng(0)

    def rand(*shape):
        return tf.constant(rng.standard_normal(shape).astype("float32"), dtype)

    q, k, v = (rand(batch, seq, heads, dim) for _ in range(3))
    qv = tf.Variable(q)  # a variable, so the gradient has something to flow to
    key_lengths = tf.constant([seq - 3] * batch, tf.int32)
    key_mask = tf.constant(rng.random((batch, seq)) > 0.1)
    dense = tf.constant(np.tril(np.ones((seq, seq), bool))[None, None].repeat(batch, 0))
    seed_gen = keras.random.SeedGenerator(7)
    # Control: a bf16 batched matmul of similar GPU time (FLOPs of the attention forward,
    # 4 B H T T D, as [B H] products of [T, D] x [D, T] then [T, T] x [T, D]).
    a = rand(batch * heads, seq, dim)
    b = rand(batch * heads, dim, seq)
    aw = tf.Variable(a)

    def attn(**kw):
        return tf_flashattn.dot_product_attention(qv, k, v, **kw)

    def fwd(**kw):
        return lambda: attn(**kw)

    def fwd_bwd(**kw):
        def step():
            with tf.GradientTape() as tape:
                y = attn(**kw)
                loss = tf.reduce_sum(tf.cast(y, tf.float32))
            return tape.gradient(loss, qv)
        return step

    def mm():
        return tf.matmul(tf.matmul(aw, b), a)

    def mm_bwd():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(mm(), tf.float32))
        return tape.gradient(loss, aw)

    def dropout(kw_fn, keras_next=False):
        # The seed as our layers make it: tf_flashattn.next_seed(generator) (Keras' next() in a
        # graph; in eager mode the same seeds without Keras' per-call host-to-GPU copy), the
        # generator's state on the GPU; keras_next: Keras' own SeedGenerator.next().
        next_seed = getattr(tf_flashattn, "next_seed", None)  # None in builds before it existed

        def seed():
            if keras_next or next_seed is None:
                return tf.cast(seed_gen.next(), tf.int64)
            return next_seed(seed_gen)
        return lambda: kw_fn(dropout_rate=0.1, seed=seed())()

    def keras_next():  # the matmul control, then Keras' SeedGenerator.next() alone
        out = mm()
        seed_gen.next()
        return out

    raw = {
        "fwd": fwd(),
        "fwd_bwd": fwd_bwd(),
        "fwd_causal": fwd(is_causal=True),
        "fwd_bwd_causal": fwd_bwd(is_causal=True),
        "fwd_dropout": dropout(fwd),
        "fwd_dropout_keras_next": dropout(fwd, keras_next=True),
        "fwd_bwd_dropout": dropout(fwd_bwd),
        "fwd_key_lengths": fwd(key_lengths=key_lengths),
        "fwd_bwd_key_lengths": fwd_bwd(key_lengths=key_lengths),
        "fwd_key_mask": fwd(key_mask=key_mask),
        "fwd_dense_mask": fwd(mask=dense),
        "control_fwd": mm,
        "control_fwd_bwd": mm_bwd,
        "control_keras_next": keras_next,
    }
    cases = {}
    for name, f in raw.items():
        cases["graph_" + name] = tf.function(f)
        cases["xla_" + name] = tf.function(f, jit_compile=True)
        cases["eager_" + name] = f
    # Under XLA the dropout seed comes from the SeedGenerator inside the compiled function too.
    return cases, gpu


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seq", type=int, help="sequence length (default 16384 on a GPU, 256 on CPU)")
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--label", default="", help="label stored with the rows (e.g. before / after)")
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args(argv)
    import tensorflow as tf
    gpu = bool(tf.config.list_physical_devices("GPU"))
    seq = args.seq or (16384 if gpu else 256)
    cases, gpu = build_cases(seq)
    names = args.cases.split(",") if args.cases else list(cases)
    unknown = [n for n in names if n not in cases]
    if unknown:
        p.error(f"unknown cases {unknown}; known: {sorted(cases)}")
    rows = []
    print(f"| case | enqueue ms/call | total ms/call | control's enqueue (same pairs) | "
          f"enqueue / control's (median of pairs) |  (T={seq}, {'GPU' if gpu else 'CPU'}, "
          f"{args.label or 'this build'}, {args.repeats} pairs of {args.calls} calls)")
    print("|---|---:|---:|---:|---:|")
    for name in sorted(names, key=lambda n: ("control" not in n, n)):
        mode, _, what = name.partition("_")
        kind = "fwd_bwd" if "fwd_bwd" in what else "fwd"
        if what.endswith("_keras_next"):  # its control also calls Keras' next(), eagerly a wait
            kind = "keras_next"
        control_name = None if what.startswith("control") else f"{mode}_control_{kind}"
        control = cases.get(control_name)
        row = dict(case=name, seq=seq, label=args.label, calls=args.calls, repeats=args.repeats,
                   control=control_name)
        try:
            if control is None:
                enq, tot = measure(cases[name], args.calls, args.repeats)
                row.update(enqueue_ms=enq, total_ms=tot)
            else:
                enq, tot, ctl, ratio = measure_paired(cases[name], control, args.calls, args.repeats)
                row.update(enqueue_ms=enq, total_ms=tot, control_enqueue_ms=ctl, control_ratio=ratio)
        except Exception as e:  # noqa: BLE001 (a case that fails is reported, the rest run)
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        rows.append(row)
        if "error" in row:
            print(f"| {name} | error | {row['error'][:80]} | | |", flush=True)
            continue
        ctl_cell = f"{row['control_enqueue_ms']:.3f}" if "control_ratio" in row else ""
        ratio_cell = f"{row['control_ratio']:.2f}x" if "control_ratio" in row else ""
        print(f"| {name} | {row['enqueue_ms']:.3f} | {row['total_ms']:.3f} | {ctl_cell} | "
              f"{ratio_cell} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
