"""Where an eager call's host time goes: the wrapper's Python, TensorFlow's eager dispatch of the
op, and the placement of the absent optional inputs, beside the matmul controls.

The host-time benchmark (host_overhead.py) found eager forward calls at 1.3x-1.7x the host time
of its eager control (two bf16 batched matmuls); this script splits that time. Each case is run
CALLS times in a row (the result read back once) and timed on the host, median of REPEATS:

    control_mm2      host_overhead.py's eager control: matmul(matmul(var, b), a)
    control_mm1      one matmul of eager tensors (one op's dispatch)
    wrapper_var      tf_flashattn.dot_product_attention(q_variable, k, v), as host_overhead.py
    wrapper          the same with an eager q (no variable read)
    raw              the op itself, with the wrapper's cached attributes and absent inputs
    raw_absent_cpu   the op with the absent inputs made under tf.device("/CPU:0")
    raw_absent_gpu   the op with the absent inputs copied to /GPU:0 (the int32 lengths stay on the
                     host: their inputs are HostMemory)
    read_var         the variable read alone

at the benchmark's shape [1, 16384, 16, 128] (GPU-bound: the host time is all dispatch) and at
[1, 128, 16, 128] (host-bound), then a cProfile of the wrapper's calls (Python functions against
the C++ execution). On the CPU it runs a small shape (a check of the script).

    python benchmarks/eager_probe.py [--calls 50] [--repeats 7] [--json out.json]
"""
import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--json")
    args = p.parse_args(argv)

    import numpy as np
    import tensorflow as tf

    import tf_flashattn
    from tf_flashattn import _ops
    from tf_flashattn import attention as A

    gpu = bool(tf.config.list_physical_devices("GPU"))
    dtype = tf.bfloat16 if gpu else tf.float32
    lib = _ops.load()
    rng = np.random.default_rng(0)
    rows = []

    def sync():
        tf.test.experimental.sync_devices()

    def timed(fn):
        fn()
        fn()
        sync()
        enq = []
        for _ in range(args.repeats):
            sync()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                out = fn()
            enq.append((time.perf_counter() - t0) / args.calls * 1e6)
            sync()
            del out
        return statistics.median(enq), min(enq)

    seqs = (16384, 128) if gpu else (64,)
    for seq in seqs:
        def rand(*shape):
            return tf.constant(rng.standard_normal(shape).astype("float32"), dtype)
        q, k, v = (rand(1, seq, 16, 128) for _ in range(3))
        qv = tf.Variable(q)
        a, b = rand(16, seq, 128), rand(16, 128, seq)
        aw = tf.Variable(a)
        tf_flashattn.dot_product_attention(q, k, v)  # fills the wrapper's eager cache
        sig = next(s for s in A._EAGER_CALLS if s[0] == tuple(q.shape) and s[3] == dtype)
        attrs, absent = A._EAGER_CALLS[sig]
        with tf.device("/CPU:0"):
            absent_cpu = tuple(tf.zeros(t.shape, t.dtype) for t in absent)
        if gpu:
            with tf.device("/GPU:0"):
                absent_gpu = tuple(t if t.dtype == tf.int32 else tf.identity(t) for t in absent)
        else:
            absent_gpu = absent
        placement = {name: [f"{t.dtype.name}{t.shape.as_list()}@{t.device.split('device:')[-1]}"
                            for t in ts]
                     for name, ts in (("cached", absent), ("cpu", absent_cpu), ("gpu", absent_gpu))}
        print(f"T={seq}: absent inputs {json.dumps(placement)}", flush=True)
        cases = {
            "control_mm2": lambda: tf.matmul(tf.matmul(aw, b), a),
            "control_mm1": lambda: tf.matmul(a, b),
            "read_var": lambda: tf.convert_to_tensor(qv),
            "wrapper_var": lambda: tf_flashattn.dot_product_attention(qv, k, v),
            "wrapper": lambda: tf_flashattn.dot_product_attention(q, k, v),
            "raw": lambda: lib.flash_attn_flash_attention(q, k, v, *absent, **attrs),
            "raw_absent_cpu": lambda: lib.flash_attn_flash_attention(q, k, v, *absent_cpu, **attrs),
            "raw_absent_gpu": lambda: lib.flash_attn_flash_attention(q, k, v, *absent_gpu, **attrs),
        }
        print(f"| T={seq} case | host us/call (median) | min |")
        print("|---|---:|---:|")
        for name, fn in cases.items():
            med, lo = timed(fn)
            rows.append(dict(seq=seq, case=name, host_us=med, host_us_min=lo, placement=placement))
            print(f"| {name} | {med:.1f} | {lo:.1f} |", flush=True)
        # cProfile of the wrapper's calls: which Python functions and which C++ entry points.
        prof = cProfile.Profile()
        sync()
        prof.enable()
        for _ in range(200):
            tf_flashattn.dot_product_attention(qv, k, v)
        prof.disable()
        sync()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(12)
        print(f"cProfile, 200 wrapper calls (variable q), T={seq}:\n" + s.getvalue(), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
