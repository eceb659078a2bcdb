"""Our attention through TensorFlow against the same kernels in the kernel harness, one shape at a time
(T = 4096 or GAP_T, bf16, 16k tokens, hidden 2048: D = 64 / 128): where the backward's extra 6-8 % per call
through TensorFlow goes (benchmarks/RESULTS.md, "Attention through TensorFlow" (r), (s)).
    python3 benchmarks/tf_gap.py time            # TensorFlow: the gradient op alone in a tf.function, timed as
                                                 # gpu_attention.py times ours (2 warm-up calls, GAP_REPS (10)
                                                 # back to back, wall time), three times, causal and not;
                                                 # GAP_FWD=1: the forward first, the same way
    python3 benchmarks/tf_gap.py hloop LIB       # the harness (LIB: a build_harness.sh folder), the same loop by
                                                 # kernel_harness_check.bench_ms (CUDA events)
    python3 benchmarks/tf_gap.py tf [D]          # TensorFlow: forward once, backward 3 times (for ncu)
    python3 benchmarks/tf_gap.py harness LIB [D] # the harness: the same (for ncu)
With TF_FLASHATTN_GPU_TIMING=12 (flash_cuda_dispatch.cu) both processes also print the GPU time of each call
(CUDA events around it on its stream) and the GPU time between calls, as the mean / median of every 12 calls:
one timing's 2 + 10. TF_GPU_ALLOCATOR and TF_FORCE_GPU_ALLOW_GROWTH are read by TensorFlow as usual. Run from the
repository root with the package importable (PYTHONPATH=. or installed), as gpu_attention.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
T = int(os.environ.get("GAP_T", "4096"))
REPS = int(os.environ.get("GAP_REPS", "10"))


def tensorflow_runs(mode, dims):
    """`time`: TIME lines of the backward op (and with GAP_FWD the forward) per D, causal and not; `tf`: D's
    forward once and its backward 3 times, no mask (for ncu)."""
    os.environ["BENCH_INNER"] = "1"
    import tensorflow as tf
    import gpu_attention as ga
    import tf_flashattn as fa
    from tf_flashattn import _ops
    lib = _ops.load()
    for D in dims:
        for causal in ((False, True) if mode == "time" else (False,)):
            B, H, qs, k, v = ga._inputs(D, T)
            q = qs[0]
            fwd = tf.function(lambda: fa.dot_product_attention(q, k, v, is_causal=causal, return_lse=True))
            if mode == "time" and os.environ.get("GAP_FWD"):
                ms = [round(ga.bench(fwd, reps=REPS, inner=1), 4) for _ in range(3)]
                print(f"TIME fwd reps={REPS} D={D} causal={causal} ms={ms}", flush=True)
            out, lse = fwd()
            do = tf.random.normal(out.shape, dtype=out.dtype)

            @tf.function
            def bwd():
                e_b, e_i, e_m = tf.zeros([0], q.dtype), tf.zeros([0], tf.int32), tf.zeros([0], tf.bool)
                return lib.flash_attn_flash_attention_grad(
                    q, k, v, e_m, e_b, e_i, e_i, e_m, e_m, tf.zeros([2], tf.int64), out, lse, do,
                    tf.zeros([0], tf.float32), scale=float(D) ** -0.5, causal=causal)[:3]
            if mode == "time":
                ms = [round(ga.bench(bwd, reps=REPS, inner=1), 4) for _ in range(3)]
                print(f"TIME alloc={os.environ.get('TF_GPU_ALLOCATOR', 'default')} reps={REPS} D={D} causal={causal}"
                      f" ms={ms}", flush=True)
            else:
                for _ in range(3):
                    r = bwd()
                ga._sync(r)


def harness_runs(mode, lib, dims):
    """`hloop`: TIME lines of the harness's backward (and with GAP_FWD its forward) as `time` gives them;
    `harness`: D's backward 3 times, no mask (for ncu)."""
    import torch
    os.environ["HARNESS_TIMING"] = "loop"  # bench_ms as gpu_attention.bench: 2 warm-up calls, REPS back to back
    from kernel_harness_check import Harness, bench_ms
    from sm90_bwd_check import bench_inputs
    h = Harness(lib)
    h.m.set_sm90_bwd(1)

    def loop_ms(fn):
        return round(bench_ms(fn, reps=REPS), 4)
    for D in dims:
        for causal in ((False, True) if mode == "hloop" else (False,)):
            c = dict(B=16384 // T, Tq=T, Tk=T, H=2048 // D, D=D, causal=causal)
            t = bench_inputs(h, c, torch.bfloat16)
            if mode == "harness":
                for _ in range(3):
                    h.bwd(c, t)
                torch.cuda.synchronize()
                continue
            if os.environ.get("GAP_FWD"):  # with its workspace, as the op allocates it
                t["fws"] = torch.empty(max(h.fwd_ws_bytes(c, t), 4) // 4, device="cuda")
                ms = [loop_ms(lambda c=c, t=t: h.fwd(c, t)) for _ in range(3)]
                print(f"TIME harness fwd reps={REPS} D={D} causal={causal} ms={ms}", flush=True)
            ms = [loop_ms(lambda c=c, t=t: h.bwd(c, t)) for _ in range(3)]
            print(f"TIME harness reps={REPS} D={D} causal={causal} ms={ms}", flush=True)
            del t


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "time":
        tensorflow_runs(mode, (64, 128))
    elif mode == "tf":
        tensorflow_runs(mode, (int(sys.argv[2]) if len(sys.argv) > 2 else 128,))
    elif mode == "hloop":
        harness_runs(mode, sys.argv[2], (64, 128))
    elif mode == "harness":
        harness_runs(mode, sys.argv[2], (int(sys.argv[3]) if len(sys.argv) > 3 else 128,))
    else:
        sys.exit(__doc__)
