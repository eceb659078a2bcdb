"""The Hopper TF32 forward's IDX kernels (index masks) at the exact head dims, one build: ms by do_bench."""
import sys, os, torch
sys.path.insert(0, "benchmarks")
from kernel_harness_check import DEV, Harness, bench_ms, make_inputs
h = Harness(sys.argv[1])
for D, H in ((128, 16), (64, 32)):
    for label, extra in (("window", dict(causal=True, wl=512)), ("kvalid", dict(kvalid=True))):
        c = dict(B=4, Tq=4096, Tk=4096, H=H, D=D, tf32=True, **extra)
        gen = torch.Generator(device=DEV); gen.manual_seed(1)
        t = make_inputs(c, torch.float32, gen)
        t["o"] = torch.empty_like(t["q"]); t["lse"] = torch.empty((4, H, 4096), device=DEV)
        ws = h.fwd_ws_bytes(c, t)
        if ws: t["fws"] = torch.empty((ws,), dtype=torch.uint8, device=DEV)
        h.m.set_sm90_tf32(1)
        ms = bench_ms(lambda: h.fwd(c, t))
        print(f"TF32IDX {sys.argv[2]} D={D} {label} {ms:.4f} variant {h.m.sm90_info()['last_tf32_variant']}", flush=True)
