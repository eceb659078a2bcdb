# A/B of the head-dim-64 Hopper TF32 backward's default variant: python3 ab_d64.py TREE LABEL
# (TREE: a source tree whose benchmarks/kernel_harness_check.py and .harness_build/ are used). Prints one line per
# shape: label, T, causal, ms (median of do_bench), launches of the Hopper TF32 backward (to show it ran).
import os, sys
tree, label = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(tree, "benchmarks"))
import torch
import triton.testing as tt
from kernel_harness_check import Harness, make_inputs, run_ours
h = Harness(os.path.join(tree, ".harness_build"))
g = torch.Generator(device="cuda")
for T in (4096, 16384):
    for causal in (False, True):
        c = dict(B=16384 // T, Tq=T, Tk=T, H=16, D=64, causal=causal, tf32=True)
        g.manual_seed(0)
        t = make_inputs(c, torch.float32, g)
        run_ours(h, c, t, need_bwd=True)
        n0 = h.m.sm90_info()["tf32_bwd_launches"]
        ms = tt.do_bench(lambda: h.bwd(c, t), warmup=25, rep=300, return_mode="median")
        fl = 2.5 * 4 * c["B"] * T * T * c["H"] * 64 / (2 if causal else 1)
        print(f"{label} T={T} causal={int(causal)} ms={ms:.4f} tflops={fl / ms / 1e9:.1f} "
              f"launches={h.m.sm90_info()['tf32_bwd_launches'] - n0}", flush=True)
