"""One cuDNN attention forward + backward through PyTorch SDPA (for ncu): argv T D causal; B = 16384 / T, H = 2048 / D, bf16."""
import sys
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

T, D, causal = int(sys.argv[1]), int(sys.argv[2]), bool(int(sys.argv[3]))
B, H = 16384 // T, 2048 // D
q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    o.backward(torch.randn_like(o))
torch.cuda.synchronize()
print("ok", o.shape)
