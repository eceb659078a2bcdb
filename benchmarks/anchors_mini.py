"""The PyTorch SDPA anchors (FlashAttention-2, cuDNN) at chosen shapes only, same method and FLOP
count as ../shared/device/anchors_torch.py; for a short device call beside gpu_attention.py.
    python3 benchmarks/anchors_mini.py out.json D:T[,D:T...]

ANCHOR_TIMING=loop times them the way gpu_attention.py times ours instead: 2 warm-up calls, then 10
calls back to back (no synchronization or cache flush between them) between two CUDA events,
milliseconds per call; the default (do_bench) is triton's median of single calls, each after an L2
flush. On the H200 our backward through TensorFlow (timed by the loop) ran 0.14-0.34 ms per call
slower than the same kernels timed by do_bench in the harness at T = 4096 (benchmarks/RESULTS.md
"Attention through TensorFlow" (p)): the loop rows say how much of that is the timing method."""
import json
import os
import sys

import torch
import torch.nn.functional as F
import triton.testing as tt
from torch.nn.attention import SDPBackend, sdpa_kernel

LOOP = os.environ.get("ANCHOR_TIMING", "do_bench") == "loop"


def loop_ms(fn, reps=10, warmup=2):
    """Milliseconds per call of fn run reps times back to back (gpu_attention.py's bench)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def timed_ms(fn):
    return loop_ms(fn) if LOOP else tt.do_bench(fn, warmup=25, rep=100, return_mode="median")


rows = []
for spec in sys.argv[2].split(","):
    D, N = (int(x) for x in spec.split(":"))
    H, B = 2048 // D, max(1, 16384 // N)
    for causal in (False, True):
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        fl = 4 * B * H * N * N * D / (2 if causal else 1)
        for name, be in (("flash2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            with sdpa_kernel(be):
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                ms = timed_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                do = torch.randn_like(o)
                msb = timed_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
            rows.append(dict(backend=name, D=D, N=N, B=B, H=H, causal=causal, timing="loop" if LOOP else "do_bench",
                             fwd_ms=round(ms, 4), fwd_tflops=round(fl / ms / 1e9, 1),
                             bwd_ms=round(msb, 4), bwd_tflops=round(2.5 * fl / msb / 1e9, 1)))
            print(json.dumps(rows[-1]), flush=True)
json.dump(rows, open(sys.argv[1], "w"), indent=0)
