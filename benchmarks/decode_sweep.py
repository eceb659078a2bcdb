"""Variants of the decoding kernel (cc/kernels/sm80/flash_decode.cu, tuning builds) against
FlashAttention-2 and cuDNN in one process, on the GPU: which configuration closes the gap at the
issue-14 bar shapes (bf16, D = 128, Tq = 1) and what it does at Tq = 4 and 16.

Needs the harness built with -DFA_TUNING (the variants are picked at run time through the
environment, FA_DECODE_WARPS / _STAGES / _MODE / _CTAS / _MERGE / _KT / _LOAD, read at every call):
  NVCC_EXTRA=-DFA_TUNING ARCHS=90 OUTDIR=.harness_build/tune bash benchmarks/build_harness.sh
  python3 benchmarks/decode_sweep.py --lib .harness_build/tune [--out DIR] [--quick]
(or HDECODE_SWEEP=1 bash benchmarks/gpu_run.sh hdecode). For each variant, first the numerics of the
decoding path (kernel_harness_check.check_decode on the head-dim-128 cases, bf16 and fp16: forced
splits 1/2/5, auto, decode auto and off, against the float64 reference); a variant that fails is
not timed; a variant whose arithmetic is the default's (the merge variants, and the K/V-load
variants at the default's 4 warps) must also give the default's bits (o and lse) on those cases with
forced splits 1 / 2 / 5 and auto, and at every timed shape and split count (bitwise_vs_default in
the rows; a load variant whose automatic split count differs from the default's is compared at the
forced counts only). Then each variant at each shape with its
automatic split count and a few forced ones,
CUDA-event GPU time with the L2 emptied before each call (kernel_harness_check.gpu_time_us), K+V
GB/s against FA2 and cuDNN (torch SDPA) on the same K/V. Two layout diagnostics at the bar shapes:
FA2 on our [B, Tk, Hkv, D] layout (a strided view) and ours on FA2's [B, Hkv, Tk, D] layout.
Prints a table per shape and the best variant; JSON in OUT/decode_sweep.json.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_harness_check as khc  # noqa: E402

ENV = ("FA_DECODE_WARPS", "FA_DECODE_STAGES", "FA_DECODE_MODE", "FA_DECODE_CTAS", "FA_DECODE_MERGE",
       "FA_DECODE_KT", "FA_DECODE_LOAD")

# name -> (environment, forced split counts to time besides auto). MODE: 1 warp units (each warp
# its own (batch, kv head, split), the warps of a CTA on neighbouring kv heads of the same keys,
# a Q tile per warp), 2 cp.async with the L2::256B prefetch hint, 4 with an L2 evict-first
# policy, 3 / 5 warp units with that hint. CTAS=1: one CTA per SM (shared memory padded).
# Shared memory, bf16 HD 128: Q tile 4.25 KiB, a stage (K + V tile of 16 keys) 8.5 KiB per warp.
# MERGE (several splits): 1 the merge kernel as a programmatic dependent launch (PDL: launched while
# the split kernel runs, waiting in griddepcontrol.wait), 2 no merge kernel: the split CTA that
# finishes its (batch, kv head, row tile) last merges it (counters zeroed by cudaMemsetAsync first),
# 3 the same with the counters zeroed by a one-CTA kernel that the split kernel follows under PDL.
# KT=32: 32-key tiles (a stage 17 KiB per warp; one wait, one online-softmax step per 32 keys).
# LOAD (Hopper only, flash_decode.cu's decode_async_kernel; the same tiles per warp and arithmetic as
# the default, only the K/V copies change): 1 "bulk", cp.async.bulk of whole key rows (one copy per
# lane per 16-key tile, the default's padded layout, mbarrier per slot); 2 "tma", tensor-map boxes
# (16 keys x 64 columns, 128-byte swizzle) issued by lane 0 of each warp; 3 "tma_cta", one stage of
# warps x 16 keys shared by the CTA's warps, 4 boxes per stage from a producer warp (one warp more;
# WARPS counts the compute warps, at most 7), full / empty mbarriers. Shared memory at 4 warps x 3
# stages: bulk 107.5 KiB, tma / tma_cta 102 KiB (2 CTAs/SM).
SPLITS = (2, 4, 8)
SPLITS_UNITS = (8, 16, 32)
VARIANTS = [
    ("auto", {}, SPLITS),                                              # the default build's plan (Hopper: tma)
    ("cpasync", {}, SPLITS),                                           # 4 warps x 3 stages, 2 CTAs/SM
    ("w4s2", dict(FA_DECODE_WARPS=4, FA_DECODE_STAGES=2), SPLITS),     # 2 CTAs/SM, less in flight
    ("w4s4", dict(FA_DECODE_WARPS=4, FA_DECODE_STAGES=4), SPLITS),     # 1 CTA/SM
    ("w2s4", dict(FA_DECODE_WARPS=2, FA_DECODE_STAGES=4), (4, 8, 16)),  # 3 CTAs/SM
    ("w2s6", dict(FA_DECODE_WARPS=2, FA_DECODE_STAGES=6), (4, 8, 16)),  # 2 CTAs/SM
    ("w8s2", dict(FA_DECODE_WARPS=8, FA_DECODE_STAGES=2), (2, 4)),     # 1 CTA/SM, 8 warps
    ("w8s3", dict(FA_DECODE_WARPS=8, FA_DECODE_STAGES=3), (2, 4)),     # 1 CTA/SM, 8 warps
    ("w4s3_1cta", dict(FA_DECODE_CTAS=1), SPLITS),                     # as auto, 1 CTA/SM
    ("pf256", dict(FA_DECODE_MODE=2), SPLITS),
    ("evict_first", dict(FA_DECODE_MODE=4), SPLITS),
    ("units_w4s2", dict(FA_DECODE_MODE=1, FA_DECODE_WARPS=4, FA_DECODE_STAGES=2), SPLITS_UNITS),  # 2 CTAs/SM
    ("units_w4s3", dict(FA_DECODE_MODE=1, FA_DECODE_WARPS=4, FA_DECODE_STAGES=3), SPLITS_UNITS),  # 1 CTA/SM
    ("units_w8s2", dict(FA_DECODE_MODE=1, FA_DECODE_WARPS=8, FA_DECODE_STAGES=2), SPLITS_UNITS),  # 1 CTA/SM
    ("units_w4s2_pf256", dict(FA_DECODE_MODE=3, FA_DECODE_WARPS=4, FA_DECODE_STAGES=2), SPLITS_UNITS),
    ("merge_pdl", dict(FA_DECODE_MERGE=1), SPLITS),                    # as auto, merge kernel under PDL
    ("fused_memset", dict(FA_DECODE_MERGE=2), SPLITS),                 # as auto, no merge kernel
    ("fused_pdl", dict(FA_DECODE_MERGE=3), SPLITS),                    # as auto, no merge kernel
    ("kt32", dict(FA_DECODE_KT=32), (2, 4)),                           # 4 warps x 3 stages, 1 CTA/SM
    ("kt32_w2s3", dict(FA_DECODE_KT=32, FA_DECODE_WARPS=2, FA_DECODE_STAGES=3), SPLITS),  # 2 CTAs/SM
    ("kt32_fused_pdl", dict(FA_DECODE_KT=32, FA_DECODE_MERGE=3), (2, 4)),
    ("kt32_w2s3_fused_pdl", dict(FA_DECODE_KT=32, FA_DECODE_WARPS=2, FA_DECODE_STAGES=3, FA_DECODE_MERGE=3),
     SPLITS),
    ("bulk", dict(FA_DECODE_LOAD=1), SPLITS),                          # 4x3, 2 CTAs/SM
    ("tma", dict(FA_DECODE_LOAD=2), SPLITS),                           # 4x3, 2 CTAs/SM
    ("tma_cta", dict(FA_DECODE_LOAD=3), SPLITS),                       # 4(+1)x3, 64-key stages, 2 CTAs/SM
    ("tma_fused_pdl", dict(FA_DECODE_LOAD=2, FA_DECODE_MERGE=3), SPLITS),
    ("tma_cta_fused_pdl", dict(FA_DECODE_LOAD=3, FA_DECODE_MERGE=3), SPLITS),
    ("tma_w4s4", dict(FA_DECODE_LOAD=2, FA_DECODE_WARPS=4, FA_DECODE_STAGES=4), SPLITS),  # 1 CTA/SM, 4 in flight
    ("tma_cta_w4s6", dict(FA_DECODE_LOAD=3, FA_DECODE_WARPS=4, FA_DECODE_STAGES=6), SPLITS),  # 1 CTA/SM, 192 KiB
    ("tma_cta_w6s3", dict(FA_DECODE_LOAD=3, FA_DECODE_WARPS=6, FA_DECODE_STAGES=3), (2, 3, 4)),  # 96-key stages, 1/SM
    ("tma_cta_w2s4", dict(FA_DECODE_LOAD=3, FA_DECODE_WARPS=2, FA_DECODE_STAGES=4), (4, 8, 16)),  # 3 CTAs/SM
]
# The tma load is the default on Hopper (FA_DECODE_LOAD unset): every variant without a load of
# its own runs the cp.async kernel (FA_DECODE_LOAD=0), as before that default.
VARIANTS = [(n, e if n == "auto" or "FA_DECODE_LOAD" in e else dict(e, FA_DECODE_LOAD=0), sp) for n, e, sp in VARIANTS]
# --quick: the default and the best merge variant of the 2026-12-01 sweep as references, then the
# K/V-load variants (the 32-key and L2-hint variants measured then are in the full list).
QUICK = ("auto", "cpasync", "fused_pdl", "bulk", "tma", "tma_cta", "tma_fused_pdl", "tma_cta_fused_pdl", "tma_w4s4",
         "tma_cta_w4s6", "tma_cta_w6s3", "tma_cta_w2s4")
# Same arithmetic as the default (auto) at the same split count: must give the same bits.
# (The load variants with 4 compute warps: the default's tiles per warp, whatever the stages.)
BITWISE = ("cpasync", "merge_pdl", "fused_memset", "fused_pdl", "bulk", "tma", "tma_cta", "tma_fused_pdl", "tma_cta_fused_pdl",
           "tma_w4s4", "tma_cta_w4s6")
# Of those, the ones whose automatic split count may differ from the default's (another kernel's
# occupancy): compared bitwise where the plans agree, the disagreement logged, not a failure.
BITWISE_SAME_PLAN_ONLY = ("cpasync", "bulk", "tma", "tma_cta", "tma_fused_pdl", "tma_cta_fused_pdl", "tma_w4s4", "tma_cta_w4s6")

# (B, Tk, H, Hkv, Tq): the four bar shapes at Tq = 1, then Tq 4 and 16 at the first.
SHAPES = [(8, 8192, 32, 8, 1), (8, 32768, 32, 8, 1), (1, 131072, 32, 8, 1), (64, 4096, 32, 32, 1),
          (8, 8192, 32, 8, 4), (8, 8192, 32, 8, 16)]
BAR = SHAPES[:4]

# Head-dim-128 cases of the decode numerics (the variants apply to HD 128 only), plus one whose
# warp units leave warps idle in the last CTA.
CHECK_CASES = [c for c in khc.DECODE_CASES if 64 < max(c["D"], c.get("Dv", c["D"])) <= 128]
CHECK_CASES.append(dict(name="dec_units_tail", B=3, Tq=1, Tk=777, H=12, Hkv=3, D=128, klen=True))


def set_variant(env):
    for k in ENV:
        os.environ.pop(k, None)
    for k, v in env.items():
        os.environ[k] = str(v)


def check_bitwise(h, env, cases, log, strict_plan=True):
    """The variant env against the default on cases (bf16 and fp16, forced splits 1 / 2 / 5 and auto): the
    same bits of o and lse. Returns the failures as 'case/dtype/splits'. strict_plan=False: a case whose
    split counts differ (the automatic choice of another kernel) is logged and skipped, not failed."""
    bad = []
    gen = torch.Generator(device=khc.DEV)
    gen.manual_seed(11)
    for c in cases:
        for dn, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
            t = khc.make_inputs(c, dt, gen)
            if c.get("unaligned"):
                for n in ("q", "k", "v"):
                    t[n] = khc.misalign(t[n])
            if c.get("strided"):
                t["k"], t["v"] = khc.in_cache(t["k"]), khc.in_cache(t["v"])
            if c.get("nan_tail"):
                khc.poison_tail(t)
            for sp in (1, 2, 5, 0):
                c2 = dict(c, decode=1, splits=sp)
                outs = []
                for e in ({}, env):
                    set_variant(e)
                    khc.run_decode(h, c2, t)
                    outs.append((t["o"].clone(), t["lse"].clone(), h.decode_plan(c2, t)["splits"]))
                same = khc.same_bits(outs[0][0], outs[1][0]) and khc.same_bits(outs[0][1], outs[1][1])
                if outs[0][2] != outs[1][2] and not strict_plan:
                    print(f"bitwise: {c['name']} {dn} splits {sp}: plans differ ({outs[0][2]} / {outs[1][2]}), "
                          "not compared", file=log, flush=True)
                    continue
                if not same or outs[0][2] != outs[1][2]:
                    bad.append(f"{c['name']}/{dn}/{sp}")
                    print(f"BITWISE MISMATCH {c['name']} {dn} splits {sp} (plans {outs[0][2]} / {outs[1][2]})",
                          file=log, flush=True)
            del t
    set_variant(env)
    return bad


def preflight(lib, names, log):
    """Each named variant's numerics (--check-only) in a child process first: a kernel fault or a hang
    (an mbarrier that never completes) would take down or stall this process's CUDA context and with
    it the whole sweep. Returns {name: reason} for the variants whose child failed, crashed or hung."""
    bad = {}
    for n in names:
        t0 = time.time()
        with tempfile.TemporaryDirectory() as d:
            cmd = [sys.executable, os.path.abspath(__file__), "--lib", lib, "--out", d, "--check-only",
                   "--variants", n]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
                rc, out = r.returncode, r.stdout + r.stderr
                try:
                    with open(os.path.join(d, "decode_sweep.log")) as fh:
                        out += fh.read()
                except OSError:
                    pass
            except subprocess.TimeoutExpired as e:
                rc, out = "timeout (180 s)", (e.stdout or b"").decode(errors="replace") if isinstance(
                    e.stdout, bytes) else (e.stdout or "")
        tail = out.strip().splitlines()[-12:]
        print(f"preflight {n} (child process, {time.time() - t0:.0f} s): rc {rc}", file=log, flush=True)
        print("\n".join("  " + x for x in tail), file=log, flush=True)
        if rc != 0:
            bad[n] = f"rc {rc}: " + " | ".join(tail[-3:])
            print(f"preflight {n:<18} FAILED ({bad[n][:300]})", flush=True)
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=".harness_build/tune", help="harness built with -DFA_TUNING")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true", help=f"variants {QUICK} only")
    ap.add_argument("--variants", default="", help="comma list of variant names (default: all)")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--check-only", action="store_true",
                    help="numerics (and bits) of the variants only, no timing; exit 1 if one fails (small shapes: "
                         "fit for compute-sanitizer)")
    ap.add_argument("--no-preflight", action="store_true",
                    help="check the FA_DECODE_LOAD variants in this process only (no child process first)")
    args = ap.parse_args()
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    h = khc.Harness(os.path.abspath(args.lib))
    variants = [v for v in VARIANTS if (not args.quick or v[0] in QUICK)
                and (not args.variants or v[0] in args.variants.split(","))]
    t_start = time.time()
    log = open(os.path.join(args.out, "decode_sweep.log"), "w")
    res = dict(variants={n: e for n, e, _ in variants}, checks={}, rows=[], anchors=[])

    # Is this a tuning build? FA_DECODE_WARPS=2 must show in the plan.
    gen = torch.Generator(device=khc.DEV)
    gen.manual_seed(1)
    probe_c = dict(B=1, Tq=1, Tk=4096, H=8, Hkv=2, D=128)
    probe_t = {n: torch.randn(1, s, x, 128, generator=gen, device=khc.DEV, dtype=torch.bfloat16)
               for n, s, x in (("q", 1, 8), ("k", 4096, 2), ("v", 4096, 2))}
    set_variant(dict(FA_DECODE_WARPS=2, FA_DECODE_STAGES=2))
    if h.decode_plan(probe_c, probe_t)["warps"] != 2:
        sys.exit(f"{args.lib}: not a tuning build (FA_DECODE_WARPS ignored); build with NVCC_EXTRA=-DFA_TUNING")
    # A tuning build older than the MERGE / KT variants ignores them: FA_DECODE_KT=32 must show in the plan.
    set_variant(dict(FA_DECODE_LOAD=0))  # the cp.async kernel (unset: tma on Hopper)
    smem16 = h.decode_plan(probe_c, probe_t)["smem_bytes"]
    set_variant(dict(FA_DECODE_KT=32))
    if h.decode_plan(probe_c, probe_t)["smem_bytes"] == smem16:
        sys.exit(f"{args.lib}: a tuning build without FA_DECODE_KT / FA_DECODE_MERGE; rebuild it (rm -rf {args.lib})")
    # The K/V-load variants (FA_DECODE_LOAD) change the shared memory too; they need sm_90 code in the
    # build (ARCHS with 90) and a compute-capability-9.x GPU, else the plan declines them silently.
    if any(e.get("FA_DECODE_LOAD", 0) > 0 for n, e, _ in variants):
        set_variant(dict(FA_DECODE_LOAD=2))
        if h.decode_plan(probe_c, probe_t)["smem_bytes"] == smem16:
            sys.exit(f"{args.lib}: FA_DECODE_LOAD ignored: a tuning build older than the load variants (rebuild: "
                     f"rm -rf {args.lib}), one without sm_90 code (ARCHS=90), or not a Hopper GPU")
        set_variant({})

    # The load variants (new device code) first in child processes: one that crashes or hangs is
    # reported and left out instead of ending the sweep.
    crashed = {}
    if not (args.check_only or args.no_check or args.no_preflight):
        crashed = preflight(os.path.abspath(args.lib), [n for n, e, _ in variants if e.get("FA_DECODE_LOAD", 0) > 0 or n == "auto"], log)
    ok_variants = []
    for name, env, _ in variants:
        if name in crashed:
            res["checks"][name] = dict(preflight_failed=crashed[name])
            continue
        set_variant(env)
        if args.no_check:
            ok_variants.append(name)
            continue
        t0 = time.time()
        rows = khc.check_decode(h, ["bf16", "fp16"], CHECK_CASES, log)
        bad = [f"{r['case']}/{r['dtype']}" for r in rows if not r["ok"]]
        res["checks"][name] = dict(n=len(rows), failed=bad)
        n_bad = len(bad)
        if name in BITWISE:
            bits_bad = check_bitwise(h, env, CHECK_CASES, log, strict_plan=name not in BITWISE_SAME_PLAN_ONLY)
            res["checks"][name]["bitwise_failed"] = bits_bad
            bad += [f"bits:{x}" for x in bits_bad]
        print(f"numerics {name:<18} {len(rows) - n_bad}/{len(rows)} pass ({time.time() - t0:.0f} s)"
              + (f", bits as the default's: {'no' if len(bad) > n_bad else 'yes'}" if name in BITWISE else "")
              + (f" FAILED: {bad}" if bad else ""), flush=True)
        if not bad:
            ok_variants.append(name)
    if args.check_only:
        set_variant({})
        with open(os.path.join(args.out, "decode_sweep.json"), "w") as fh:
            json.dump(res, fh, indent=1)
        failed = [n for n, _, _ in variants if n not in ok_variants]
        print(f"decode sweep --check-only: {len(ok_variants)} of {len(variants)} variants pass"
              + (f"; FAILED: {failed}" if failed else ""), flush=True)
        sys.exit(1 if failed else 0)

    D = 128
    dt = torch.bfloat16
    for (B, Tk, H, Hkv, Tq) in SHAPES:
        gen = torch.Generator(device=khc.DEV)
        gen.manual_seed(5)
        k = torch.randn(B, Tk, Hkv, D, generator=gen, device=khc.DEV, dtype=dt)
        v = torch.randn(B, Tk, Hkv, D, generator=gen, device=khc.DEV, dtype=dt)
        q = torch.randn(B, Tq, H, D, generator=gen, device=khc.DEV, dtype=dt)
        kh, vh = k.permute(0, 2, 1, 3).contiguous(), v.permute(0, 2, 1, 3).contiguous()
        qh = q.permute(0, 2, 1, 3).contiguous()
        kv_bytes = 2 * B * Tk * Hkv * D * k.element_size()
        shape = dict(B=B, Tk=Tk, H=H, Hkv=Hkv, Tq=Tq)
        anchor = dict(shape)
        set_variant({})
        c = dict(B=B, Tq=Tq, Tk=Tk, H=H, Hkv=Hkv, D=D)
        t = {"q": q, "k": k, "v": v}
        khc.run_decode(h, c, t)
        ref_o = t["o"].float()
        for nm in ("flash", "cudnn"):
            try:
                fn, mode = khc.sdpa_call(nm, qh, kh, vh)
                anchor[f"{nm}_us"] = khc.gpu_time_us(fn)
                anchor[f"{nm}_gqa"] = mode
                anchor[f"{nm}_maxdiff"] = float((fn().permute(0, 2, 1, 3).float() - ref_o).abs().max())
            except Exception as e:  # noqa: BLE001
                anchor[f"{nm}_error"] = f"{type(e).__name__}: {str(e)[:120]}"
        if (B, Tk, H, Hkv, Tq) in BAR:
            # Layout diagnostics: FA2 reading our [B, Tk, Hkv, D] K/V (strided views), ours reading FA2's.
            try:
                fn, _ = khc.sdpa_call("flash", qh, k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3))
                anchor["flash_btHd_us"] = khc.gpu_time_us(fn)
            except Exception as e:  # noqa: BLE001
                anchor["flash_btHd_error"] = f"{type(e).__name__}: {str(e)[:120]}"
            t_bh = {"q": q, "k": kh.permute(0, 2, 1, 3), "v": vh.permute(0, 2, 1, 3)}
            khc.run_decode(h, c, t_bh)
            anchor["ours_bhtd_us"] = khc.gpu_time_us(lambda: h.fwd(c, t_bh))
            anchor["ours_bhtd_maxdiff"] = float((t_bh["o"].float() - ref_o).abs().max())
            del t_bh
        for x in ("flash", "cudnn", "flash_btHd", "ours_bhtd"):
            if f"{x}_us" in anchor:
                anchor[f"{x}_gbs"] = kv_bytes / anchor[f"{x}_us"] / 1e3
        res["anchors"].append(anchor)
        print("ANCHOR " + json.dumps(anchor), file=log, flush=True)
        for name, env, splits in variants:
            if name not in ok_variants:
                continue
            set_variant(env)
            for sp in (0,) + tuple(splits):
                c_sp = dict(c, splits=sp)
                t_sp = {"q": q, "k": k, "v": v}
                plan = h.decode_plan(c_sp, t_sp)
                khc.run_decode(h, c_sp, t_sp)
                diff = float((t_sp["o"].float() - ref_o).abs().max())
                bits = None
                if name in BITWISE:
                    got = (t_sp["o"].clone(), t_sp["lse"].clone())
                    set_variant({})
                    same_plan = h.decode_plan(c_sp, t_sp)["splits"] == plan["splits"]
                    khc.run_decode(h, c_sp, t_sp)
                    bits = khc.same_bits(got[0], t_sp["o"]) and khc.same_bits(got[1], t_sp["lse"])
                    if not same_plan and name in BITWISE_SAME_PLAN_ONLY:
                        bits = None  # another split count than the default's: not comparable
                    set_variant(env)
                    khc.run_decode(h, c_sp, t_sp)
                us = khc.gpu_time_us(lambda: h.fwd(c_sp, t_sp), reps=20)
                r = dict(shape, variant=name, forced=sp, splits=plan["splits"], warps=plan["warps"],
                         stages=plan["stages"], smem=plan["smem_bytes"], ctas_per_sm=plan["ctas_per_sm"],
                         ctas=plan["ctas"], us=us, gbs=kv_bytes / us / 1e3, maxdiff_vs_auto=diff)
                if bits is not None:
                    r["bitwise_vs_default"] = bits
                for nm in ("flash", "cudnn"):
                    if f"{nm}_us" in anchor:
                        r[f"vs_{nm}"] = anchor[f"{nm}_us"] / us
                res["rows"].append(r)
                print("SWEEP " + json.dumps(r), file=log, flush=True)
                del t_sp
        del k, v, q, kh, vh, qh, t
        torch.cuda.empty_cache()
    set_variant({})

    # Tables.
    f = lambda x, fmt="{:.0f}": fmt.format(x) if x is not None else "-"  # noqa: E731
    for a in res["anchors"]:
        key = (a["B"], a["Tk"], a["H"], a["Hkv"], a["Tq"])
        print(f"\n== B={key[0]} Tk={key[1]} H/Hkv={key[2]}/{key[3]} Tq={key[4]} bf16 D=128: "
              f"FA2 {f(a.get('flash_us'), '{:.1f}')} us ({f(a.get('flash_gbs'))} GB/s, {a.get('flash_gqa', '-')}), "
              f"cuDNN {f(a.get('cudnn_us'), '{:.1f}')} us ({f(a.get('cudnn_gbs'))} GB/s)"
              + (f"; FA2 on [B,Tk,Hkv,D] {f(a.get('flash_btHd_gbs'))} GB/s, ours (auto) on [B,Hkv,Tk,D] "
                 f"{f(a.get('ours_bhtd_gbs'))} GB/s" if "ours_bhtd_us" in a else ""))
        print("| variant | forced | splits | warps x stages | smem KiB | CTAs/SM | CTAs | us | GB/s | /FA2 | /cuDNN "
              "| max diff vs auto |")
        print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
        rows = [r for r in res["rows"] if (r["B"], r["Tk"], r["H"], r["Hkv"], r["Tq"]) == key]
        for r in rows:
            print(f"| {r['variant']} | {r['forced'] or 'auto'} | {r['splits']} | {r['warps']}x{r['stages']} | "
                  f"{r['smem'] / 1024:.1f} | {r['ctas_per_sm']} | {r['ctas']} | {r['us']:.1f} | {r['gbs']:.0f} | "
                  f"{f(r.get('vs_flash'), '{:.2f}')} | {f(r.get('vs_cudnn'), '{:.2f}')} | {r['maxdiff_vs_auto']:.1e}"
                  + {True: " (bits =)", False: " (BITS DIFFER)"}.get(r.get("bitwise_vs_default"), "") + " |")
        if rows:
            best = min(rows, key=lambda r: r["us"])
            print(f"best: {best['variant']} splits {best['splits']}: {best['gbs']:.0f} GB/s = "
                  f"{f(best.get('vs_flash'), '{:.2f}')}x FA2")
    # One variant for all bar shapes: geometric mean of us / FA2 us with the variant's automatic
    # splits, and with its best forced count per shape.
    print("\nvariant summary at the bar shapes (Tq = 1): ours/FA2 bandwidth per shape, auto splits [best split]; "
          "min over shapes; geomean")
    summ = []
    for name, _, _ in variants:
        auto, best = [], []
        for key in BAR:
            rows = [r for r in res["rows"] if (r["B"], r["Tk"], r["H"], r["Hkv"], r["Tq"]) == key
                    and r["variant"] == name and "vs_flash" in r]
            if not rows:
                continue
            auto.append([r for r in rows if r["forced"] == 0][0]["vs_flash"])
            best.append(max(rows, key=lambda r: r["vs_flash"])["vs_flash"])
        if len(auto) == len(BAR):
            gm = math.exp(sum(math.log(x) for x in auto) / len(auto))
            summ.append((name, auto, best, gm))
            print(f"  {name:<18} " + " ".join(f"{a:.2f}[{b:.2f}]" for a, b in zip(auto, best))
                  + f"  min {min(auto):.2f}  geomean {gm:.2f}" + ("  BAR MET" if min(auto) >= 0.9 else ""))
    res["summary"] = [dict(variant=n, auto=a, best=b, geomean=g) for n, a, b, g in summ]
    with open(os.path.join(args.out, "decode_sweep.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"decode sweep: {time.time() - t_start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
