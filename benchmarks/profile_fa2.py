"""One forward and one backward of PyTorch's FlashAttention-2 SDPA backend (the anchor), for ncu
next to benchmarks/profile_one.py on the same shape (B from $PROFILE_B, default 1; H = 2048 / D; bf16).
PROFILE_BACKEND=cudnn takes the cuDNN backend instead. The forward runs inside the NVTX range "fwd" and the
backward inside "bwd", so that ncu can pick a direction's kernels without knowing their names
(`ncu --nvtx --nvtx-include "fwd/"`, as gpu_run.sh's profile mode does with PROFILE_ANCHOR=cudnn).
  python3 benchmarks/profile_fa2.py [T] [D] [causal]"""
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

T = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
D = int(sys.argv[2]) if len(sys.argv) > 2 else 128
causal = bool(int(sys.argv[3])) if len(sys.argv) > 3 else False
B = int(os.environ.get("PROFILE_B", "1"))
q, k, v = (torch.randn(B, 2048 // D, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
           for _ in range(3))
backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[
    os.environ.get("PROFILE_BACKEND", "flash")]
do = torch.randn(B, 2048 // D, T, D, device="cuda", dtype=torch.bfloat16)
with sdpa_kernel([backend]):
    torch.cuda.nvtx.range_push("fwd")
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push("bwd")
    o.backward(do)
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("ok", bool(torch.isfinite(q.grad).all()))
