"""The PyTorch SDPA anchors (FlashAttention-2, cuDNN) at chosen shapes only, same method and FLOP
count as ../shared/device/anchors_torch.py; for a short device call beside gpu_attention.py.
    python3 benchmarks/anchors_mini.py out.json D:T[,D:T...]"""
import json
import sys

import torch
import torch.nn.functional as F
import triton.testing as tt
from torch.nn.attention import SDPBackend, sdpa_kernel

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
                ms = tt.do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                 warmup=25, rep=100, return_mode="median")
                do = torch.randn_like(o)
                msb = tt.do_bench(lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True),
                                  warmup=25, rep=100, return_mode="median")
            rows.append(dict(backend=name, D=D, N=N, B=B, H=H, causal=causal,
                             fwd_tflops=round(fl / ms / 1e9, 1),
                             bwd_tflops=round(2.5 * fl / msb / 1e9, 1)))
            print(json.dumps(rows[-1]), flush=True)
json.dump(rows, open(sys.argv[1], "w"), indent=0)
