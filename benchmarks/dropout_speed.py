"""Dropout's cost in the CUDA kernels, and its mask, through the kernel harness (no TensorFlow).

Runs on the GPU machine (python3 with torch and pybind11) over the flash_harness module that
benchmarks/build_harness.sh builds (ARCHS=90 for an H100/H200):

  ARCHS=90 bash benchmarks/build_harness.sh && python3 benchmarks/dropout_speed.py [--lib DIR] [--out DIR]
  (or: bash benchmarks/gpu_run.sh hdropout)

1. Mask: the forward with dropout (bf16 and float16, tiled kernels; also the TF32 kernels) against a
   float64 reference built from the harness's host dropout_mask (flash_params.h's rule on the CPU):
   the GPU kernels draw the same mask, so the output error stays at the no-dropout level; a wrong
   draw would move whole probabilities (errors of order P * keep_scale). Also the host mask's
   keep rate against t16 / 65536.
2. Speed: bf16 forward and backward at [B, T, H, D] = [1, 16384, 16, D] and [4, 4096, 16, D] (D from
   --head-dims, default 128), not causal and causal, with dropout 0 and 0.1, GPU time by triton's
   do_bench (median), and the ratio with / without (issue 16's bar: within 10 %). JSON in
   OUT/dropout_speed.json. --idx-baseline: also without dropout but with k_lengths = T for every
   sequence (nothing masked): the index-masked kernel, which the calls with dropout run, so the
   dropout cost splits into that kernel's and the draws'.
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_harness_check import DEV, Harness, make_inputs, run_ours  # noqa: E402


def threshold16(rate):
    """flash_params.h: t16 = min(round(rate * 65536), 65535) of the float32 rate."""
    r = float(torch.tensor(rate, dtype=torch.float32))
    return 0 if r <= 0 else int(min(math.floor(r * 65536.0 + 0.5), 65535))


def keep_scale(rate):
    return float(torch.tensor(65536.0 / (65536.0 - threshold16(rate)), dtype=torch.float32))


def reference_fwd(c, t, keep, dtype=torch.float64):
    """Unfused forward with the keep mask [B, H, Tq, Tk] (None: no dropout)."""
    q, k, v = (t[n].to(dtype).permute(0, 2, 1, 3) for n in ("q", "k", "v"))  # [B, H, T, D]
    s = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(q.shape[-1]))
    if c.get("causal"):
        Tq, Tk = s.shape[-2:]
        i = torch.arange(Tq, device=DEV)[:, None]
        j = torch.arange(Tk, device=DEV)[None, :]
        s = s.masked_fill(j > i, float("-inf"))
    p = torch.softmax(s, dim=-1)
    if keep is not None:
        p = p * keep.to(dtype) * keep_scale(c["dropout"])
    return (p @ v).permute(0, 2, 1, 3)


def check_mask(h, log):
    rows = []
    cases = [dict(B=2, Tq=300, Tk=333, H=4, D=128, causal=False),
             dict(B=1, Tq=257, Tk=257, H=2, D=64, causal=True),
             dict(B=1, Tq=200, Tk=190, H=2, D=256, causal=False)]
    for c0 in cases:
        for dt_name in ("bf16", "fp16", "tf32"):
            dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[dt_name]
            c = dict(c0, dropout=0.1, seed=(77, -5), tf32=dt_name == "tf32")
            gen = torch.Generator(device=DEV)
            gen.manual_seed(3)
            t = make_inputs(c, dt, gen)
            run_ours(h, c, t, need_bwd=False)
            torch.cuda.synchronize()
            keep = h.case_keep(c)
            ref = reference_fwd(c, t, keep)
            ours = t["o"].to(torch.float64)
            e_drop = (ours - ref).abs().max().item()
            # the same inputs without dropout: the error level of this dtype
            c_nd = dict(c, dropout=0.0)
            run_ours(h, c_nd, t, need_bwd=False)
            torch.cuda.synchronize()
            e_plain = (t["o"].to(torch.float64) - reference_fwd(c_nd, t, None)).abs().max().item()
            # against a mask with one element flipped per row the error would be ~P * scale: compare
            # with the no-dropout error, 4x and a floor
            ok = math.isfinite(e_drop) and e_drop <= 4 * e_plain + 2e-3
            frac = 1.0 - keep.float().mean().item()
            r = dict(case=f"B{c['B']} Tq{c['Tq']} Tk{c['Tk']} H{c['H']} D{c['D']}{' causal' if c['causal'] else ''}",
                     dtype=dt_name, err_dropout=e_drop, err_plain=e_plain, ok=ok, dropped_fraction=round(frac, 4))
            rows.append(r)
            print("MASK " + json.dumps(r), file=log, flush=True)
    t16 = threshold16(0.1)
    keep = torch.empty((2, 4, 1024, 1024), dtype=torch.uint8)
    h.m.dropout_mask(2, 4, 1024, 1024, 0.1, (5, 6), out=keep)
    frac = 1.0 - keep.float().mean().item()
    sd = math.sqrt(0.1 * 0.9 / keep.numel())
    r = dict(case="host mask keep rate", t16=t16, rate_applied=t16 / 65536, dropped_fraction=frac,
             ok=abs(frac - t16 / 65536) < 5 * sd)
    rows.append(r)
    print("MASK " + json.dumps(r), file=log, flush=True)
    return rows


def bench(h, log, head_dims=(128,), drop_variant=-1, idx_baseline=False):
    """drop_variant >= 0: the Hopper forward's schedule for the calls with dropout (set_sm90_fwd_variant;
    the dropout kernel runs 0 or its default), recorded as the row's fwd_drop_variant."""
    import triton.testing as tt
    rows = []
    for (B, T, H, D) in ((16384 // T, T, 16, D) for D in head_dims for T in (16384, 4096)):
        for causal in (False, True):
            ms = {}
            for rate in (0.0, 0.1) + (("idx",) if idx_baseline else ()):
                c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=causal, dropout=0.0 if rate == "idx" else rate,
                         seed=(1, 2))
                gen = torch.Generator(device=DEV)
                gen.manual_seed(1)
                t = make_inputs(c, torch.bfloat16, gen)
                if rate == "idx":  # every key valid: the index-masked kernel with nothing to mask
                    t["klen"] = torch.full((B,), T, device=DEV, dtype=torch.int32)
                h.m.set_sm90_fwd_variant(drop_variant if rate != "idx" and rate > 0 else -1)
                run_ours(h, c, t)
                if rate == 0.1:  # the dropout call's schedule
                    ran = h.m.sm90_info().get("last_fwd_variant", -1)
                ms[rate] = (tt.do_bench(lambda: h.fwd(c, t), warmup=10, rep=60, return_mode="median"),
                            tt.do_bench(lambda: h.bwd(c, t), warmup=10, rep=60, return_mode="median"))
                t = None  # the inputs freed before the next case
            h.m.set_sm90_fwd_variant(-1)
            fl = 4 * B * H * T * T * D / (2 if causal else 1)
            r = dict(B=B, T=T, H=H, D=D, causal=causal, fwd_drop_variant=ran,
                     fwd_ms=round(ms[0.0][0], 3), fwd_drop_ms=round(ms[0.1][0], 3),
                     bwd_ms=round(ms[0.0][1], 3), bwd_drop_ms=round(ms[0.1][1], 3),
                     fwd_ratio=round(ms[0.1][0] / ms[0.0][0], 3), bwd_ratio=round(ms[0.1][1] / ms[0.0][1], 3),
                     fwdbwd_ratio=round(sum(ms[0.1]) / sum(ms[0.0]), 3),
                     fwd_tflops=round(fl / ms[0.0][0] / 1e9, 1), fwd_drop_tflops=round(fl / ms[0.1][0] / 1e9, 1),
                     bwd_tflops=round(2.5 * fl / ms[0.0][1] / 1e9, 1),
                     bwd_drop_tflops=round(2.5 * fl / ms[0.1][1] / 1e9, 1))
            if idx_baseline:
                r.update(fwd_idx_ms=round(ms["idx"][0], 3), bwd_idx_ms=round(ms["idx"][1], 3))
            rows.append(r)
            print("BENCH " + json.dumps(r), file=log, flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=".harness_build")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--head-dims", default="128", help="comma-separated head dims of the speed table")
    ap.add_argument("--idx-baseline", action="store_true",
                    help="also time the index-masked kernel without dropout (k_lengths = T)")
    ap.add_argument("--drop-variant", type=int, default=-1,
                    help="the Hopper forward's schedule for the calls with dropout (default: the kernel's own)")
    args = ap.parse_args()
    h = Harness(args.lib)
    log = sys.stdout
    print(f"device: {torch.cuda.get_device_name()}", flush=True)
    h.m.set_sm90_fwd_variant(args.drop_variant)  # the mask checked on that schedule too
    mask = check_mask(h, log)
    h.m.set_sm90_fwd_variant(-1)
    speed = [] if args.no_bench else bench(h, log, [int(d) for d in args.head_dims.split(",")], args.drop_variant,
                                           args.idx_baseline)
    print("\n| case | dtype | max err (dropout) | max err (none) | dropped | ok |\n|---|---|---|---|---|---|")
    for r in mask:
        print(f"| {r['case']} | {r.get('dtype', '')} | {r.get('err_dropout', float('nan')):.2e} | "
              f"{r.get('err_plain', float('nan')):.2e} | {r['dropped_fraction']:.4f} | {r['ok']} |")
    if speed:
        print("\n| B, T, H, D | causal | fwd ms (0 / 0.1) | ratio | bwd ms (0 / 0.1) | ratio | fwd+bwd ratio | "
              "fwd schedule (0.1) |\n|---|---|---|---|---|---|---|---|")
        for r in speed:
            print(f"| {r['B']}, {r['T']}, {r['H']}, {r['D']} | {r['causal']} | {r['fwd_ms']} / {r['fwd_drop_ms']} | "
                  f"{r['fwd_ratio']} | {r['bwd_ms']} / {r['bwd_drop_ms']} | {r['bwd_ratio']} | {r['fwdbwd_ratio']} | "
                  f"{r['fwd_drop_variant']} |")
        if args.idx_baseline:
            print("\n| B, T, H, D | causal | fwd ms (0 / k_lengths / 0.1) | bwd ms (0 / k_lengths / 0.1) |\n|---|---|---|---|")
            for r in speed:
                print(f"| {r['B']}, {r['T']}, {r['H']}, {r['D']} | {r['causal']} | {r['fwd_ms']} / {r['fwd_idx_ms']} / "
                      f"{r['fwd_drop_ms']} | {r['bwd_ms']} / {r['bwd_idx_ms']} / {r['bwd_drop_ms']} |")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "dropout_speed.json"), "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), mask=mask, speed=speed), f, indent=1)
    bad = [r for r in mask if not r["ok"]]
    print(f"\nmask checks: {len(mask) - len(bad)}/{len(mask)} ok")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
