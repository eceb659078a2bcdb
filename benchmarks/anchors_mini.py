"""The PyTorch SDPA anchors (FlashAttention-2, cuDNN) at chosen shapes only, same method and FLOP
count as ../shared/device/anchors_torch.py; for a short device call beside gpu_attention.py.
    python3 benchmarks/anchors_mini.py out.json D:T[,D:T...]

HARNESS_TIMING=loop times them the way gpu_attention.py times ours instead (kernel_harness_check.bench_ms: 2
warm-up calls, then 10 calls back to back between two CUDA events, milliseconds per call); the default
(do_bench) is triton's median of single calls, each after an L2 flush. On the H200 our backward through
TensorFlow (timed by the loop) ran 0.14-0.34 ms per call slower than the same kernels timed by do_bench in the
harness at T = 4096 (benchmarks/RESULTS.md "Attention through TensorFlow" (p)): the loop rows say how much of
that is the timing method."""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_harness_check import bench_ms  # noqa: E402

LOOP = os.environ.get("HARNESS_TIMING", "do_bench") == "loop"

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
                ms = bench_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                do = torch.randn_like(o)
                msb = bench_ms(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True))
            rows.append(dict(backend=name, D=D, N=N, B=B, H=H, causal=causal, timing="loop" if LOOP else "do_bench",
                             fwd_ms=round(ms, 4), fwd_tflops=round(fl / ms / 1e9, 1),
                             bwd_ms=round(msb, 4), bwd_tflops=round(2.5 * fl / msb / 1e9, 1)))
            print(json.dumps(rows[-1]), flush=True)
json.dump(rows, open(sys.argv[1], "w"), indent=0)
