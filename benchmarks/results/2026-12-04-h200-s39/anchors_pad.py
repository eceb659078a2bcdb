"""Anchor figures on the GPU: PyTorch SDPA backends (FlashAttention-2, cuDNN, mem-efficient, math).
FLOPs as in the FlashAttention benchmark: fwd = 4*B*H*N*N*D (halved when causal), bwd = 2.5 * fwd.
"""
import sys, json, torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
import triton.testing as tt

dev = torch.device("cuda")
print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), file=sys.stderr)
backends = {"flash2": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
rows = []
dim = 2048
import os
for D in [int(x) for x in os.environ.get("ANCHOR_D", "64,128,256").split(",")]:
    H = dim // D
    for N in [int(x) for x in os.environ.get("ANCHOR_T", "512,1024,2048,4096,8192,16384").split(",")]:
        B = max(1, 16384 // N)
        for causal in (False, True):
            q, k, v = (torch.randn(B, H, N, D, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
            fl = 4 * B * H * N * N * D / (2 if causal else 1)
            for name, be in backends.items():
                if name == "math" and N > 4096:
                    continue
                try:
                    with sdpa_kernel(be):
                        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        o = f()
                        ms = tt.do_bench(f, warmup=25, rep=100, return_mode="median")
                        do = torch.randn_like(o)
                        fb = lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
                        msb = tt.do_bench(fb, warmup=25, rep=100, return_mode="median")
                    r = dict(backend=name, D=D, N=N, B=B, H=H, causal=causal,
                             fwd_ms=round(ms, 4), fwd_tflops=round(fl / ms / 1e9, 1),
                             bwd_ms=round(msb, 4), bwd_tflops=round(2.5 * fl / msb / 1e9, 1))
                except Exception as e:
                    r = dict(backend=name, D=D, N=N, B=B, H=H, causal=causal, error=str(e)[:120])
                rows.append(r)
                print(json.dumps(r), flush=True)
            del q, k, v
json.dump(rows, open(sys.argv[1], "w"), indent=0)
