"""GPU benchmark through TensorFlow: tf_flashattn vs keras.ops.dot_product_attention (TensorFlow
backend, with and without XLA) on the FlashAttention benchmark shapes: 16k tokens (B*T = 16384),
hidden 2048 (H = 2048 / D), T from 512 to 16384, D in {64, 128, 256}, causal and not, bfloat16
(BENCH_DTYPE=float32: float32, which runs on TF32 tensor cores, ours and XLA's, while TensorFlow's
TF32 setting is on, its default).

FLOPs (FlashAttention count): forward 4*B*H*T*T*D, halved when causal; backward 2.5x forward.
Our backward is timed alone (the gradient op on saved output and log-sum-exp); Keras' backward,
and ours inside XLA ("tf_flashattn_xla", at the head dims where Keras runs), is
(forward+backward) - forward. Prints a JSON line per row and rewrites the file given as argv[1]
(a JSON list) after each row.

Each timed call is one tf.function running the attention INNER times (default 8) on INNER
different query tensors (distinct, so XLA cannot merge them), and the time per attention is the
call's time / INNER: the host's per-call dispatch (a few hundred microseconds through TensorFlow)
would otherwise dominate the short sequences, where the kernels take about as long. (Runs before
the fourth H200 round of 2026-11-29 timed one attention per call.)
Our rows carry three timings of the same calls. fwd_ms / bwd_ms: bench() as for every impl (2 warm-up
calls, 10 timed back to back between two syncs, wall time / 10). *_ms_steady: steady(), the time per call
in a steady stream (the slope between 10 and 40 calls: what a timing pays once, the first call's
dispatch and the syncs, about 2-3 ms through TensorFlow on the H200, cancels; BENCH_STEADY=0 leaves it out).
*_gpu_ms: the median GPU time of one call of ours from the library's probe (CUDA events around each call
on its stream, flash_cuda.h; BENCH_GPU_TIME=0 leaves it out) -- the measure the anchors' triton
do_bench gives theirs (events around each call, median). TFLOP/s for each: *_tflops, *_tflops_steady,
*_tflops_gpu.
Ours runs first at every shape, then the comparisons (a call cut short keeps our whole table).
Environment: BENCH_T, BENCH_D (shapes), BENCH_KERAS_D (head dims with the comparisons, in that
order), BENCH_IMPLS (which comparisons: keras,keras_nofold,keras_xla,tf_flashattn_xla),
BENCH_FOLD_MAX (see FOLD_MAX), BENCH_INNER, BENCH_HIDDEN and
BENCH_TOKENS (2048 and 16384; smaller for a smoke test on the CPU), BENCH_OURS=0 (only
the comparisons: `gpu_run.sh bench` on two GPUs runs them on the second GPU while ours and the
anchors run on the first). Each row records `wall_s`, the seconds it took (tracing, XLA
compilation and timing). Run in the same device call as ../shared/device/anchors_torch.py (see
benchmarks/gpu_run.sh).
"""
import contextlib
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import tf_flashattn as fa  # noqa: E402
from tf_flashattn import _ops  # noqa: E402

DIM = int(os.environ.get("BENCH_HIDDEN", "2048"))  # H = DIM / D
TOKENS = int(os.environ.get("BENCH_TOKENS", "16384"))  # B = TOKENS / T (smaller: a CPU smoke test)
SIZES = [int(x) for x in os.environ.get("BENCH_T", "512,1024,2048,4096,8192,16384").split(",")]
HEAD_DIMS = [int(x) for x in os.environ.get("BENCH_D", "64,128,256").split(",")]
# Head dims at which Keras (TensorFlow, with and without XLA) is timed too ("" for none).
KERAS_D = [int(x) for x in os.environ.get("BENCH_KERAS_D", "64,128,256").split(",")
           if x and int(x) in HEAD_DIMS]
INNER = int(os.environ.get("BENCH_INNER", "8"))
DTYPE = tf.as_dtype(os.environ.get("BENCH_DTYPE", "bfloat16"))
OURS = os.environ.get("BENCH_OURS", "1") != "0"
STEADY = os.environ.get("BENCH_STEADY", "1") != "0"  # ours: the *_steady figures (steady())
PROBE = None  # ours: the *_gpu figures (GpuProbe, made in main unless BENCH_GPU_TIME=0)


def bench(fn, reps=10, warmup=2, inner=None):
    """Milliseconds per attention: fn runs `inner` of them (default INNER; benchmarks/dense_tf_bench.py
    passes its own)."""
    inner = INNER if inner is None else inner
    for _ in range(warmup):
        r = fn()
    _sync(r)
    t = time.perf_counter()
    for _ in range(reps):
        r = fn()
    _sync(r)
    return (time.perf_counter() - t) / reps / inner * 1e3


def _sync(r):
    for x in tf.nest.flatten(r):
        float(tf.reduce_sum(tf.cast(x[..., :1], tf.float32)))


def steady(fn, reps=10, inner=None, loop_ms=None):
    """Milliseconds per attention in a steady stream of calls: bench's loop of reps (t1; loop_ms when the
    caller has timed it already) and of 4 * reps (t4), (4 * reps * t4 - reps * t1) / (3 * reps). What each
    bench pays once (the first call's dispatch while the GPU waits, the syncs after the last call: about 2-3 ms
    through TensorFlow on the H200, which bench's 10 calls spread as 0.2-0.3 ms each; benchmarks/RESULTS.md
    (t)) cancels; the calls' own host time stays wherever the host, not the GPU, sets the pace."""
    t1 = bench(fn, reps=reps, inner=inner) if loop_ms is None else loop_ms
    t4 = bench(fn, reps=4 * reps, inner=inner)
    return (4 * t4 - t1) / 3


class GpuProbe:
    """The library's GPU-time probe (tf_flashattn_gpu_timing_collect / _take, cc/kernels/flash_cuda.h)
    through ctypes: the GPU time of each forward / backward call of ours, from CUDA events around it on
    its stream, beside the wall-clock figures. `available` is False for a library built without CUDA."""

    def __init__(self):
        import ctypes
        self._collect = _ops.c_function("tf_flashattn_gpu_timing_collect")
        self._take = _ops.c_function("tf_flashattn_gpu_timing_take")
        self.available = False
        if self._collect is None or self._take is None:
            return
        self._collect.argtypes = [ctypes.c_int]
        self._take.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_float),
                               ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        self._ctypes = ctypes
        self.available = True

    def median_ms(self, fn, direction, reps=10, warmup=2):
        """The median GPU time (ms) of the `direction` (0 forward, 1 backward) calls of ours in fn's last
        reps runs (warmup runs first; each run may make several calls: INNER), None if none ran on a
        GPU."""
        c = self._ctypes
        for _ in range(warmup):
            r = fn()
        _sync(r)
        self._collect(1)
        try:
            for _ in range(reps):
                r = fn()
            _sync(r)
            cap = 1 << 16
            ms, gaps, n_gaps = (c.c_float * cap)(), (c.c_float * cap)(), c.c_int(0)
            n = self._take(direction, ms, gaps, cap, c.byref(n_gaps))
        finally:
            self._collect(0)
        got = sorted(ms[i] for i in range(min(n, cap)))
        return got[len(got) // 2] if got else None


def our_steps(qs, k, v, causal):
    """Forward (INNER calls) and the gradient op alone (INNER calls on saved outputs)."""
    lib = _ops.load()
    fwd = tf.function(lambda: [fa.dot_product_attention(q, k, v, is_causal=causal, return_lse=True)
                               for q in qs])
    saved = fwd()
    do = tf.random.normal(saved[0][0].shape, dtype=saved[0][0].dtype)
    q0 = qs[0]
    empty_b, empty_i, empty_m = tf.zeros([0], q0.dtype), tf.zeros([0], tf.int32), tf.zeros([0], tf.bool)
    attrs = dict(scale=float(q0.shape[-1]) ** -0.5, causal=causal)

    @tf.function
    def bwd():
        return [lib.flash_attn_flash_attention_grad(
            q, k, v, empty_m, empty_b, empty_i, empty_i, empty_m, empty_m, tf.zeros([2], tf.int64),
            out, lse, do, tf.zeros([0], tf.float32), **attrs)[:3] for q, (out, lse) in zip(qs, saved)]
    return (lambda: [o for o, _ in fwd()]), bwd


def xla_steps(attention, qs, k, v, causal, jit):
    """Forward and forward+backward of `attention` (Keras', or ours inside XLA as custom calls),
    INNER of each per call. With XLA, one attention is compiled (a tf.function with jit_compile
    taking the query) and the outer tf.function calls it INNER times: XLA compiles one attention
    per shape instead of INNER copies (most likely why the one-GPU table overran 600 s)."""
    do = tf.random.normal(qs[0].shape, dtype=qs[0].dtype)  # a random dO, as ours gets: no shortcut

    def one_fwd(q):
        return attention(q, k, v, is_causal=causal)

    def one_fwd_bwd(q):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            o = attention(q, k, v, is_causal=causal)
        return tape.gradient(o, [q, k, v], output_gradients=do)

    one_fwd, one_fwd_bwd = (tf.function(f, jit_compile=True) if jit else f
                            for f in (one_fwd, one_fwd_bwd))
    fwd = tf.function(lambda: [one_fwd(q) for q in qs])
    fwd_bwd = tf.function(lambda: [one_fwd_bwd(q) for q in qs])
    return fwd, fwd_bwd


IMPLS = {"keras": (keras.ops.dot_product_attention, False),
         # Keras without XLA with Grappler's constant folding off: the same ops, but the causal
         # mask is computed on every call instead of folded into a constant (see _folding).
         "keras_nofold": (keras.ops.dot_product_attention, False),
         "keras_xla": (keras.ops.dot_product_attention, True),
         # Ours inside XLA (the op's custom calls): should match the plain op's speed.
         "tf_flashattn_xla": (fa.dot_product_attention, True)}

# Keras' causal path without XLA builds a [B, H, T, S] boolean mask from tf.ones_like(logits),
# which Grappler's constant folding turns into a constant on the host before the first run: on the
# H200's host 36, 64 and 134 s per row (two traced functions) at T = 512, 1024 and 2048 (D = 128, so
# B*H*T*T = 2^27, 2^28, 2^29 mask elements; sixth round of 2026-11-29): the cost follows the mask's
# size, and the table could not finish in 600 s. Causal "keras" rows whose mask has more than
# FOLD_MAX elements are skipped (with that reason in the row); "keras_nofold" times the same
# attention with constant folding off everywhere, and the rows where both ran show what that
# costs Keras' run time.
FOLD_MAX = int(os.environ.get("BENCH_FOLD_MAX", str(2**26)))


@contextlib.contextmanager
def _folding(on):
    """Grappler's constant folding on or off while functions are first run and timed (the setting
    is read when a function is instantiated: it stays until the rows are timed)."""
    saved = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({"constant_folding": on})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options(
            {"constant_folding": saved.get("constant_folding", True)})


# Which of IMPLS run next to ours (at the head dims in KERAS_D); each compiles with XLA per shape.
BENCH_IMPLS = [x for x in os.environ.get("BENCH_IMPLS", ",".join(IMPLS)).split(",") if x]
assert set(BENCH_IMPLS) <= set(IMPLS), f"BENCH_IMPLS: unknown {set(BENCH_IMPLS) - set(IMPLS)}"


def _batch_heads(D, T):
    """B and H of the benchmark shape at head dim D and length T (B*T tokens, H*D hidden)."""
    return max(1, TOKENS // T), DIM // D


def _inputs(D, T):
    """The shape's B and H and INNER random queries with one K and V (BENCH_DTYPE, on the GPU)."""
    B, H = _batch_heads(D, T)
    with tf.device("/GPU:0"):
        qs = [tf.random.normal([B, T, H, D], dtype=DTYPE) for _ in range(INNER)]
        k, v = (tf.random.normal([B, T, H, D], dtype=DTYPE) for _ in range(2))
    return B, H, qs, k, v


def _timed_row(name, D, T, B, H, causal, steps, reps):
    """Times steps() = (forward, backward-or-forward+backward) and returns the row, with Grappler's
    constant-folding setting it ran under. For the comparisons the backward is (forward+backward)
    - forward; where that is not positive (timing noise) bwd_ms and bwd_tflops are None."""
    fl = 4 * B * H * T * T * D / (2 if causal else 1)
    started = time.perf_counter()
    f, b = steps()
    fms = bench(f, reps=reps)
    bms = bench(b, reps=reps)
    row = dict(impl=name, D=D, T=T, B=B, H=H, causal=causal, dtype=DTYPE.name,
               tf32=tf.config.experimental.tensor_float_32_execution_enabled(),
               constant_folding=tf.config.optimizer.get_experimental_options().get(
                   "constant_folding", True))
    if name != "tf_flashattn":  # theirs: (forward+backward) - forward
        row["fwd_bwd_ms"] = round(bms, 4)
        bms = bms - fms
    row.update(fwd_ms=round(fms, 4), fwd_tflops=round(fl / fms / 1e9, 1),
               bwd_ms=round(bms, 4) if bms > 0 else None,
               bwd_tflops=round(2.5 * fl / bms / 1e9, 1) if bms > 0 else None)
    if name == "tf_flashattn":  # ours also as a steady stream of calls, and each call's GPU time
        for key, fn, direction, flops, loop_ms in (("fwd", f, 0, fl, fms), ("bwd", b, 1, 2.5 * fl, bms)):
            if STEADY:
                ms = steady(fn, reps=reps, loop_ms=loop_ms)
                row[key + "_ms_steady"] = round(ms, 4) if ms > 0 else None
                row[key + "_tflops_steady"] = round(flops / ms / 1e9, 1) if ms > 0 else None
            if PROBE is not None and PROBE.available:
                ms = PROBE.median_ms(fn, direction, reps=reps)
                row[key + "_gpu_ms"] = round(ms, 4) if ms else None
                row[key + "_tflops_gpu"] = round(flops / ms / 1e9, 1) if ms else None
    row["wall_s"] = round(time.perf_counter() - started, 1)
    return row


def main():
    rows = []
    out_path = sys.argv[1] if len(sys.argv) > 1 else None

    def emit(r):
        """Prints a row and rewrites the JSON file, so a run cut short keeps what it measured."""
        rows.append(r)
        print(json.dumps(r), flush=True)
        if out_path:  # written whole, then renamed: a call cut mid-write keeps the last file
            with open(out_path + ".tmp", "w") as fh:
                json.dump(rows, fh, indent=0)
            os.replace(out_path + ".tmp", out_path)

    # Pass 1, ours at every shape (about 35 s on the H200), so that a call cut short still has the
    # whole table against the anchors; pass 2, the comparisons, head dims in BENCH_KERAS_D's order.
    shapes = [(D, T, causal) for D in HEAD_DIMS for T in SIZES for causal in (False, True)]
    global PROBE
    if OURS and os.environ.get("BENCH_GPU_TIME", "1") != "0":
        PROBE = GpuProbe()
    if OURS:
        for D, T, causal in shapes:
            B, H, qs, k, v = _inputs(D, T)
            emit(_timed_row("tf_flashattn", D, T, B, H, causal,
                            lambda: our_steps(qs, k, v, causal), reps=10))
            del qs, k, v
    for D in KERAS_D:
        for T in SIZES:
            for causal in (False, True):
                B, H = _batch_heads(D, T)
                for name in BENCH_IMPLS:
                    attention, jit = IMPLS[name]
                    skip = None
                    if name.startswith("keras") and B * H * T * T >= 2**31:
                        # TensorFlow's own GPU kernels fail past 2^31 logits (seen on the H200:
                        # CUDA_ERROR_ILLEGAL_ADDRESS at B=2, H=16, T=8192), which poisons the
                        # CUDA context for the rest of the run.
                        skip = "skipped: B*H*T*T >= 2^31 logits"
                    elif name == "keras" and causal and B * H * T * T > FOLD_MAX:
                        skip = (f"skipped: B*H*T*T > BENCH_FOLD_MAX={FOLD_MAX} (Grappler folds the "
                                "causal mask for minutes; see keras_nofold)")
                    if skip:
                        emit(dict(impl=name, D=D, T=T, B=B, H=H, causal=causal, error=skip))
                        continue
                    B, H, qs, k, v = _inputs(D, T)
                    started = time.perf_counter()
                    try:
                        with _folding(name != "keras_nofold"):
                            r = _timed_row(name, D, T, B, H, causal,
                                           lambda: xla_steps(attention, qs, k, v, causal, jit), reps=3)
                    except Exception as e:  # out of memory at long T, typically
                        r = dict(impl=name, D=D, T=T, B=B, H=H, causal=causal,
                                 error=type(e).__name__ + ": " + str(e)[:100],
                                 wall_s=round(time.perf_counter() - started, 1))
                    emit(r)
                    del qs, k, v


if __name__ == "__main__":
    main()
