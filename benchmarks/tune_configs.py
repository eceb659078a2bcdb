"""Times tile configurations of a tuning build (-DFA_TUNING: FA_FWD_CFG / FA_BWD_CFG select
variants at run time) on one shape, after checking each variant's numerics on two cases.
  python3 benchmarks/tune_configs.py [D] [T]
Build: NVCC_EXTRA=-DFA_TUNING bash benchmarks/build_harness.sh (module from $HARNESS_DIR, default .harness_build)."""
import os, sys, json, torch
sys.path.insert(0, os.path.dirname(__file__))
import triton.testing as tt
from kernel_harness_check import Harness, make_inputs, run_ours, check_numerics, torch_sdpa_ms, CASES, DEV

D = int(sys.argv[1]) if len(sys.argv) > 1 else 128
T = int(sys.argv[2]) if len(sys.argv) > 2 else 16384
h = Harness(os.environ.get("HARNESS_DIR", ".harness_build"))
cases = [c for c in CASES if c["name"] in ("d128_causal_ragged", "big_d128", "gqa_mqa_lengths", "basic", "d256_kvcache", "big_d64_1024")]
# Variants besides the default (0); at short T (B = 16384 / T) the forward's small-tile variants.
CF = {64: ((5, 7) if T < 4096 else (), (12,)), 128: ((5,) if T < 4096 else (), (10,)), 256: ((4, 6, 8, 9), (8, 13))}[D]
for var, vals in (("FA_FWD_CFG", (0,) + CF[0]), ("FA_BWD_CFG", (0,) + CF[1])):
    for v in vals:
        os.environ[var] = str(v)
        rows = check_numerics(h, (torch.bfloat16,), cases, open(os.devnull, "w"))
        print(var, v, "numerics", "PASS" if all(r["ok"] for r in rows) else "FAIL " + str([r["case"] for r in rows if not r["ok"]]))
        os.environ.pop(var)
for causal in (False, True):
    c = dict(B=max(1, 16384 // T), Tq=T, Tk=T, H=2048 // D, D=D, causal=causal)
    g = torch.Generator(device=DEV); g.manual_seed(0)
    t = make_inputs(c, torch.bfloat16, g)
    run_ours(h, c, t)
    fl = 4 * c["B"] * T * T * (2048 // D) * D / (2 if causal else 1)
    for var, vals in (("FA_FWD_CFG", (0,) + CF[0]), ("FA_BWD_CFG", (0,) + CF[1])):
        for v in vals:
            os.environ[var] = str(v)
            if var == "FA_FWD_CFG":
                ms = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
                print(f"D={D} T={T} causal={causal} {var}={v} fwd {fl / ms / 1e9:.1f} TFLOP/s ({ms:.3f} ms)")
            else:
                ms = tt.do_bench(lambda: h.bwd(c, t), warmup=25, rep=100, return_mode="median")
                print(f"D={D} T={T} causal={causal} {var}={v} bwd {2.5 * fl / ms / 1e9:.1f} TFLOP/s ({ms:.3f} ms)")
            os.environ.pop(var)
    # FlashAttention-2 on the same inputs, same process: the kernel-level ratio (the op adds
    # TensorFlow's per-call costs on top).
    fa2 = torch_sdpa_ms(t, causal, names=("flash",))
    if "flash_fwd_ms" in fa2:
        print(f"D={D} T={T} causal={causal} FA2 fwd {fl / fa2['flash_fwd_ms'] / 1e9:.1f} TFLOP/s "
              f"({fa2['flash_fwd_ms']:.3f} ms) bwd {2.5 * fl / fa2['flash_bwd_ms'] / 1e9:.1f} TFLOP/s "
              f"({fa2['flash_bwd_ms']:.3f} ms)")
