"""CPU benchmark: tf_flashattn vs keras.ops.dot_product_attention (TensorFlow backend).

Forward and forward+backward wall time at B=1, H=8, D=64, float32, T in {512, 2048, 8192},
both measured in this one run (ratios, not absolute times, are the result), then the largest T
each can run (forward+backward) by doubling until it fails or passes --max-t.

    python benchmarks/cpu_attention.py [--max-t 65536] [--skip-largest]
    python benchmarks/cpu_attention.py --batch 8 --heads 12 --sizes 128,256,512 --skip-largest
      (short sequences in batches, as a BERT-base layer sees them)

FLOPs (FlashAttention count): forward 4*B*H*T*T*D, backward 2.5x forward.
"""
import argparse
import datetime
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_flashattn as fa  # noqa: E402

B, H, D = 1, 8, 64  # defaults; --batch / --heads set B and H


def timed(fn, repeats):
    fn()  # trace and warm up
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def make_steps(attn, q, k, v):
    fwd = tf.function(lambda: attn(q, k, v))

    @tf.function
    def fwd_bwd():
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            loss = tf.reduce_sum(attn(q, k, v))
        return tape.gradient(loss, [q, k, v])

    return (lambda: fwd().numpy()), (lambda: [g.numpy() for g in fwd_bwd()])


IMPLS = {"tf_flashattn": fa.dot_product_attention, "keras": keras.ops.dot_product_attention}


def largest_t(name, max_t):
    """Largest T (doubling from 8192) whose forward+backward completes, in a fresh process."""
    code = ("import sys, tensorflow as tf, keras, tf_flashattn as fa\n"
            "T=int(sys.argv[1]); f={'tf_flashattn': fa.dot_product_attention, "
            "'keras': keras.ops.dot_product_attention}[sys.argv[2]]\n"
            f"q,k,v=(tf.random.normal([{B},T,{H},{D}]) for _ in range(3))\n"
            "with tf.GradientTape() as t:\n t.watch([q,k,v]); l=tf.reduce_sum(f(q,k,v))\n"
            "[g.numpy() for g in t.gradient(l,[q,k,v])]; print('OK')\n")
    best, t = None, 8192
    while t <= max_t:
        res = subprocess.run([sys.executable, "-c", code, str(t), name], capture_output=True,
                             text=True, timeout=3600)
        if "OK" not in res.stdout:
            break
        best, t = t, t * 2
    return best, t if t <= max_t else None


def main():
    global B, H
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="512,2048,8192")
    ap.add_argument("--max-t", type=int, default=32768)
    ap.add_argument("--skip-largest", action="store_true")
    ap.add_argument("--batch", type=int, default=B)
    ap.add_argument("--heads", type=int, default=H)
    args = ap.parse_args()
    B, H = args.batch, args.heads
    # The commit of the tf_flashattn actually imported (an editable install may point elsewhere).
    pkg = os.path.dirname(os.path.abspath(fa.__file__))
    commit = subprocess.run(["git", "-C", pkg, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", pkg, "status", "--porcelain", "--untracked-files=no",
                            "--", "../cc", "."], capture_output=True, text=True).stdout.strip()
    print(f"# CPU benchmark, {datetime.date.today()}, tf_flashattn from {pkg} at commit {commit}"
          f"{' (with uncommitted changes)' if dirty else ''}, {os.cpu_count()} cores, "
          f"TensorFlow {tf.__version__}, B={B} H={H} D={D} float32")
    print("FLOPs: forward 4*B*H*T*T*D, backward 2.5x forward\n")
    print("| T | ours fwd ms | keras fwd ms | fwd speed-up | ours fwd+bwd ms | keras fwd+bwd ms"
          " | fwd+bwd speed-up | ours fwd GFLOP/s | ours fwd+bwd GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for T in (int(x) for x in args.sizes.split(",")):
        q, k, v = (tf.random.normal([B, T, H, D], seed=i) for i in range(3))
        res = {}
        reps = 5 if T <= 2048 else 2
        for name, attn in IMPLS.items():
            f, fb = make_steps(attn, q, k, v)
            res[name] = (timed(f, reps), timed(fb, reps))
        flops = 4 * B * H * T * T * D
        (of, ofb), (kf, kfb) = res["tf_flashattn"], res["keras"]
        print(f"| {T} | {of * 1e3:.1f} | {kf * 1e3:.1f} | {kf / of:.2f}x | {ofb * 1e3:.1f} | "
              f"{kfb * 1e3:.1f} | {kfb / ofb:.2f}x | {flops / of / 1e9:.1f} | "
              f"{3.5 * flops / ofb / 1e9:.1f} |", flush=True)
    if not args.skip_largest:
        print(f"\nLargest T with forward+backward (B={B}, H={H}, D={D}, float32), doubling from "
              f"8192 up to {args.max_t}:")
        for name in IMPLS:
            best, failed = largest_t(name, args.max_t)
            print(f"- {name}: {best}" + (f" (T={failed} failed)" if failed else
                                          f" (stopped at --max-t {args.max_t})"), flush=True)


if __name__ == "__main__":
    main()
