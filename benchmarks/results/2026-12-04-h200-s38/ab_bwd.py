# A/B of the Hopper TF32 backward's default: python3 ab_bwd.py TREE HARNESS_DIR LABEL D[,D] (TREE: a source tree
# whose benchmarks/kernel_harness_check.py is used). One line per shape: label, D, T, causal, ms (median of
# do_bench), TFLOP/s, launches of the Hopper TF32 backward of that head dim (to show it ran).
import os, sys
tree, hdir, label = sys.argv[1], sys.argv[2], sys.argv[3]
Ds = [int(x) for x in sys.argv[4].split(",")]
sys.path.insert(0, os.path.join(tree, "benchmarks"))
import torch
import triton.testing as tt
from kernel_harness_check import Harness, make_inputs, run_ours
h = Harness(hdir)
g = torch.Generator(device="cuda")
for D in Ds:
    key = "tf32_bwd_launches" if D == 64 else "tf32_bwd128_launches"
    for T in (1024, 4096, 16384):
        for causal in (False, True):
            c = dict(B=16384 // T, Tq=T, Tk=T, H=1024 // D, D=D, causal=causal, tf32=True)
            g.manual_seed(0)
            t = make_inputs(c, torch.float32, g)
            run_ours(h, c, t, need_bwd=True)
            n0 = h.m.sm90_info().get(key, -1)
            ms = tt.do_bench(lambda: h.bwd(c, t), warmup=25, rep=200, return_mode="median")
            fl = 2.5 * 4 * c["B"] * T * T * c["H"] * D / (2 if causal else 1)
            print(f"{label} D={D} T={T} causal={int(causal)} ms={ms:.4f} tflops={fl / ms / 1e9:.1f} "
                  f"launches={h.m.sm90_info().get(key, -1) - n0}", flush=True)
