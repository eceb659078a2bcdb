"""One forward and one backward launch of our kernels (for ncu / compute-sanitizer on the GPU machine).
  python3 benchmarks/profile_one.py [T] [D] [causal] [dtype] [extra features: bias,mask,dropout,det,gqa,tf32,klen,kvalid,kvalid10]
The flash_harness module comes from $HARNESS_DIR (default .harness_build: bash benchmarks/build_harness.sh).
Batch from $PROFILE_B (default 1; the benchmark shapes have B = 16384 / T)."""
import sys, os, torch
sys.path.insert(0, os.path.dirname(__file__))
from kernel_harness_check import Harness, make_inputs, run_ours, DEV

T = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
D = int(sys.argv[2]) if len(sys.argv) > 2 else 128
causal = bool(int(sys.argv[3])) if len(sys.argv) > 3 else False
dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[sys.argv[4] if len(sys.argv) > 4 else "bf16"]
feats = sys.argv[5].split(",") if len(sys.argv) > 5 else []
c = dict(B=int(os.environ.get("PROFILE_B", "1")), Tq=T, Tk=T, H=2048 // D, D=D, causal=causal)
if "bias" in feats: c["bias"] = (1, 1)
if "mask" in feats: c["mask"] = (1, 0)
if "dropout" in feats: c["dropout"] = 0.1
if "det" in feats: c["deterministic"] = True
if "gqa" in feats: c["Hkv"] = c["H"] // 4
if "tf32" in feats: c["tf32"] = True  # with dtype fp32: the TF32 tensor-core kernels
h = Harness(os.environ.get("HARNESS_DIR", ".harness_build"))
g = torch.Generator(device=DEV); g.manual_seed(0)
t = make_inputs(c, dt, g)
if "klen" in feats:  # k_lengths = T for every sequence: the index-masked kernels with nothing masked
    t["klen"] = torch.full((c["B"],), T, device=DEV, dtype=torch.int32)
if "kvalid" in feats or "kvalid10" in feats:  # a [B, T] key mask, all true (kvalid) or the last 10 % invalid (kvalid10)
    t["kvalid"] = torch.ones(c["B"], T, dtype=torch.bool, device=DEV)
    if "kvalid10" in feats:
        t["kvalid"][:, T - T // 10:] = False
run_ours(h, c, t)
torch.cuda.synchronize()
print("ok", {k: bool(torch.isfinite(t[k]).all()) for k in ("o", "dq", "dk", "dv")})
