"""Times the Hopper kernels at head dims they have no kernel of their own for (padded up to
head_dim_bucket(max(D, Dv)): flash_fwd_sm90.cu / flash_bwd_sm90.cu) against our sm80 kernels (which pad the
same way), FlashAttention-2 and cuDNN (PyTorch SDPA), through the kernel harness, without TensorFlow, on an
H100 / H200 (python3 with torch, triton and pybind11):

  ARCHS=90 bash benchmarks/build_harness.sh
  python3 benchmarks/pad_bench.py [--lib DIR] [--out FILE.json] [--shapes 128,80,96,192/128] [--t 4096,16384]
      [--sm90-only] [--tf32 [--det] [--softcap C] [--dropout R] [--bias] [--mask] [--bwd-dense -1|0|1]]

bf16, 16k tokens (B = 16384 / T), H = 16, causal and not; forward and backward milliseconds (triton's
do_bench, medians) and TFLOP/s by FlashAttention's count with the real head dims: forward
2 B H Tq Tk (D + Dv), halved when causal; backward 2.5x that. A head dim of 128 is timed too, as the
efficiency the padded ones are compared with. Each row says whether the sm90 path ran (launch counters).
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_harness_check import DEV, Harness, bench_ms, make_inputs, torch_sdpa_ms  # noqa: E402
from sm90_bwd_check import forward  # noqa: E402


def flops(B, H, T, D, Dv, causal):
    f = 2.0 * B * H * T * T * (D + Dv)
    return f / 2 if causal else f


def time_both(h, r, direction, switch, call, sm90_only):
    """Milliseconds of `call` with the Hopper kernels on (switch(1): r["sm90_<direction>_ms"], and whether they ran,
    from the launch counter: r["sm90_<direction>_taken"]) and, unless sm90_only, off (switch(0): sm80's)."""
    switch(1)
    n0 = h.m.sm90_info()[f"{direction}_launches"]
    r[f"sm90_{direction}_ms"] = bench_ms(call)
    r[f"sm90_{direction}_taken"] = h.m.sm90_info()[f"{direction}_launches"] > n0
    if not sm90_only:
        switch(0)
        r[f"sm80_{direction}_ms"] = bench_ms(call)
    switch(-1)


def tf32_rows(h, args, log):
    """--tf32: float32 inputs (allow_tf32), forward milliseconds of the Hopper TF32 kernel (set_sm90_tf32(1)) and
    of sm80's TF32 kernel (set_sm90_tf32(0)); backward milliseconds of the Hopper TF32 backwards (their switches
    left at the default) and of sm80's TF32 backward (set_sm90_tf32_bwd(0), set_sm90_tf32_bwd128(0) and
    set_sm90_tf32_bwd256(0))."""
    rows = []
    print(f"{'D/Dv':>8} {'T':>6} {'causal':>6} | {'fwd sm90':>9} {'sm80':>7} | sm90 TFLOP/s, sm90 / sm80 | "
          f"{'bwd sm90':>9} {'sm80':>7} | sm90 TFLOP/s, sm90 / sm80", file=log, flush=True)
    for spec in args.shapes.split(","):
        D, Dv = (int(x) for x in spec.split("/")) if "/" in spec else (int(spec), int(spec))
        for T in (int(x) for x in args.t.split(",")):
            for causal in (False, True):
                B, H = 16384 // T, args.h
                c = dict(name=f"pad_bench_tf32_{D}_{Dv}", B=B, Tq=T, Tk=T, H=H, D=D, Dv=Dv, causal=causal, tf32=True,
                         deterministic=args.det)
                if args.softcap:
                    c["softcap"] = args.softcap
                if args.dropout:
                    c.update(dropout=args.dropout, seed=(1, 2))
                if args.bias:  # [1, H, T, T]
                    c["bias"] = (0, 1)
                if args.mask:  # [B, 1, T, T]
                    c["mask"] = (1, 0)
                gen = torch.Generator(device=DEV)
                gen.manual_seed(1)
                t = make_inputs(c, torch.float32, gen)
                B_, Tq, H_, _ = t["q"].shape
                t["o"] = torch.empty((B_, Tq, H_, Dv), device=DEV)
                t["lse"] = torch.empty((B_, H_, Tq), device=DEV)
                ws = h.fwd_ws_bytes(c, t)
                if ws:
                    t["fws"] = torch.empty((ws,), dtype=torch.uint8, device=DEV)
                r = dict(D=D, Dv=Dv, T=T, B=B, H=H, causal=causal, dtype="tf32", softcap=args.softcap,
                         dropout=args.dropout, bias=args.bias, mask=args.mask)
                n0 = h.m.sm90_info()["tf32_fwd_launches"]
                h.m.set_sm90_tf32(1)
                r["sm90_fwd_ms"] = bench_ms(lambda: h.fwd(c, t))
                r["sm90_fwd_taken"] = h.m.sm90_info()["tf32_fwd_launches"] > n0
                r["variant"] = h.m.sm90_info()["last_tf32_variant"]
                h.m.set_sm90_tf32(0)
                r["sm80_fwd_ms"] = bench_ms(lambda: h.fwd(c, t))
                h.m.set_sm90_tf32(-1)
                r["sm90_fwd_tflops"] = flops(B, H, T, D, Dv, causal) / r["sm90_fwd_ms"] / 1e9
                forward(h, c, t)  # o, lse and the backward's workspace (the Hopper TF32 backward's room included)
                for n, like in (("dq", "q"), ("dk", "k"), ("dv", "v")):
                    t[n] = torch.empty_like(t[like])
                if args.bias:  # and its gradient, as a trained bias has
                    t["dbias"] = torch.empty((B_, H_, Tq, t["k"].shape[1]), device=DEV)
                info = h.m.sm90_info
                taken = lambda: sum(info()[k] for k in ("tf32_bwd_launches", "tf32_bwd128_launches",
                                                        "tf32_bwd256_launches"))
                n0 = taken()
                dense = args.bias or args.mask
                if dense:  # the Hopper TF32 backwards' dense instantiations (on by default)
                    h.m.set_sm90_tf32_bwd_dense(args.bwd_dense)
                    r["bwd_dense"] = args.bwd_dense
                try:
                    r["sm90_bwd_ms"] = bench_ms(lambda: h.bwd(c, t))
                    r["sm90_bwd_taken"] = taken() > n0
                    if args.det:  # the Hopper backward without op determinism (same switches), for the ratio
                        cn = dict(c, deterministic=False)
                        r["sm90_nondet_bwd_ms"] = bench_ms(lambda: h.bwd(cn, t))
                finally:
                    h.m.set_sm90_tf32_bwd_dense(-1)
                h.m.set_sm90_tf32_bwd(0)
                h.m.set_sm90_tf32_bwd128(0)
                h.m.set_sm90_tf32_bwd256(0)
                r["sm80_bwd_ms"] = bench_ms(lambda: h.bwd(c, t))
                h.m.set_sm90_tf32_bwd(-1)
                h.m.set_sm90_tf32_bwd128(-1)
                h.m.set_sm90_tf32_bwd256(-1)
                r["sm90_bwd_tflops"] = 2.5 * flops(B, H, T, D, Dv, causal) / r["sm90_bwd_ms"] / 1e9
                rows.append(r)
                print(f"{spec:>8} {T:>6} {str(causal):>6} | {r['sm90_fwd_ms']:9.3f} {r['sm80_fwd_ms']:7.3f} | "
                      f"{r['sm90_fwd_tflops']:.1f}, {r['sm80_fwd_ms'] / r['sm90_fwd_ms']:.2f}x (variant {r['variant']})"
                      f"{'' if r['sm90_fwd_taken'] else ' (sm90 TF32 NOT taken)'} | {r['sm90_bwd_ms']:9.3f} "
                      f"{r['sm80_bwd_ms']:7.3f} | {r['sm90_bwd_tflops']:.1f}, {r['sm80_bwd_ms'] / r['sm90_bwd_ms']:.2f}x"
                      f"{'' if r['sm90_bwd_taken'] else ' (sm90 TF32 bwd NOT taken)'}"
                      + (f" | det / default {r['sm90_nondet_bwd_ms'] / r['sm90_bwd_ms']:.2f}x ({r['sm90_nondet_bwd_ms']:.3f} ms)"
                         if args.det else ""), file=log, flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=".harness_build")
    ap.add_argument("--out", default=None)
    ap.add_argument("--shapes", default="128,80,96,192/128")
    ap.add_argument("--t", default="4096,16384")
    ap.add_argument("--h", type=int, default=16)
    ap.add_argument("--sm90-only", action="store_true", help="only our sm90 kernels (an A/B of two builds)")
    ap.add_argument("--det", action="store_true",
                    help="with --tf32: deterministic mode (the backwards' ordered dQ reductions; sm80's deterministic "
                         "TF32 backward when the Hopper ones are off), and the Hopper one without it")
    ap.add_argument("--softcap", type=float, default=0.0, help="with --tf32: soft-cap (attn_logits_soft_cap) C")
    ap.add_argument("--dropout", type=float, default=0.0, help="with --tf32: dropout rate R")
    ap.add_argument("--bias", action="store_true", help="with --tf32: an additive bias [1, H, T, T]")
    ap.add_argument("--mask", action="store_true", help="with --tf32: a dense mask [B, 1, T, T]")
    ap.add_argument("--bwd-dense", type=int, default=1,
                    help="with --bias / --mask: set_sm90_tf32_bwd_dense for the Hopper column (1: the Hopper TF32 "
                         "backwards' dense kernels, whatever their default; -1: the default)")
    ap.add_argument("--tf32", action="store_true",
                    help="float32 with TF32: the Hopper TF32 kernels against sm80's TF32 ones")
    args = ap.parse_args()
    h = Harness(args.lib)
    log = sys.stdout
    print(f"device: {torch.cuda.get_device_name()}  sm90: {h.m.sm90_info()}", file=log, flush=True)
    if args.tf32:
        rows = tf32_rows(h, args, log)
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(rows, fh, indent=1)
        return
    rows = []
    hdr = (f"{'D/Dv':>8} {'T':>6} {'causal':>6} | {'fwd sm90':>9} {'sm80':>7} {'FA2':>7} {'cuDNN':>7} | "
           f"{'bwd sm90':>9} {'sm80':>7} {'FA2':>7} {'cuDNN':>7} | TFLOP/s fwd / bwd sm90")
    print(hdr, file=log, flush=True)
    for spec in args.shapes.split(","):
        D, Dv = (int(x) for x in spec.split("/")) if "/" in spec else (int(spec), int(spec))
        for T in (int(x) for x in args.t.split(",")):
            for causal in (False, True):
                B, H = 16384 // T, args.h
                c = dict(name=f"pad_bench_{D}_{Dv}", B=B, Tq=T, Tk=T, H=H, D=D, Dv=Dv, causal=causal)
                gen = torch.Generator(device=DEV)
                gen.manual_seed(1)
                t = make_inputs(c, torch.bfloat16, gen)
                forward(h, c, t)  # o, lse and the backward's workspace
                for n, like in (("dq", "q"), ("dk", "k"), ("dv", "v")):
                    t[n] = torch.empty_like(t[like])
                r = dict(D=D, Dv=Dv, T=T, B=B, H=H, causal=causal, dtype="bfloat16")
                time_both(h, r, "fwd", h.m.set_sm90, lambda: h.fwd(c, t), args.sm90_only)
                time_both(h, r, "bwd", h.m.set_sm90_bwd, lambda: h.bwd(c, t), args.sm90_only)
                if not args.sm90_only:
                    r.update(torch_sdpa_ms(t, causal))
                f = flops(B, H, T, D, Dv, causal)
                r["sm90_fwd_tflops"] = f / r["sm90_fwd_ms"] / 1e9
                r["sm90_bwd_tflops"] = 2.5 * f / r["sm90_bwd_ms"] / 1e9
                rows.append(r)
                ms = lambda k: f"{r[k]:7.3f}" if k in r else "    n/a"  # noqa: E731
                taken = "" if r["sm90_fwd_taken"] and r["sm90_bwd_taken"] else \
                    f" (sm90 NOT taken: fwd {r['sm90_fwd_taken']} bwd {r['sm90_bwd_taken']})"
                print(f"{spec:>8} {T:>6} {str(causal):>6} | {r['sm90_fwd_ms']:9.3f} {ms('sm80_fwd_ms')} "
                      f"{ms('flash_fwd_ms')} {ms('cudnn_fwd_ms')} | {r['sm90_bwd_ms']:9.3f} {ms('sm80_bwd_ms')} "
                      f"{ms('flash_bwd_ms')} {ms('cudnn_bwd_ms')} | {r['sm90_fwd_tflops']:.1f} / "
                      f"{r['sm90_bwd_tflops']:.1f}{taken}", file=log, flush=True)
                for k in ("flash_error", "cudnn_error"):
                    if k in r:
                        print(f"    {k}: {r[k]}", file=log, flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
