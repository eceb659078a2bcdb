"""Checks and times the Hopper backward (cc/kernels/sm90/flash_bwd_sm90.cu, the default backward on
compute capability 9.0) through the kernel harness, without TensorFlow, on an H100/H200 (python3
with torch, triton and pybind11):

  ARCHS=90 bash benchmarks/build_harness.sh
  python3 benchmarks/sm90_bwd_check.py --phase selftest|numerics|bench|sanitize [--lib DIR] [--out DIR]

The sm90 backward is switched per call with the harness's set_sm90_bwd(1 / 0), so one process compares
it with our sm80 backward; its launch counter (sm90_info()["bwd_launches"]) shows which path ran.
Phases (each its own process in `gpu_run.sh sm90bwd`, under a timeout):
  selftest  the forward's building blocks (sm90_selftest) and the backward's (sm90_bwd_selftest): wgmma
            m64n64k16 from two K-major operands (S^T = K Q^T), from two MN-major operands (dQ = dS K with
            dS stored transposed; B from column panel 0 and 1, and from key row 64 with K = 64), and the
            S^T accumulators repacked as register A operands for dV += P^T dO.
  numerics  dq / dk / dv on odd shapes (Tq, Tk not multiples of the 64 / 128 tiles, B*H > 1, GQA ratios
            1 and 4 and MQA, causal with both alignments, rows that see no key, Tk = 1, Tq = 1, d_lse,
            D = 64 and 128) and bigger ones, bf16 and fp16, against a float64 torch autograd reference;
            bar: ours <= 3x the same-precision unfused reference's error + a floor (as
            kernel_harness_check.py); also our sm80 backward's error and max |sm90 - sm80|, and that
            the sm90 path ran exactly once per case.
  bench     backward TFLOP/s (FlashAttention's count: 2.5 x 4 B H T^2 D, halved when causal) at D = 128
            (H = 16) and D = 64 (H = 32), T in {4096, 16384}, B*T = 16384, causal and not, bf16 (and fp16
            at T = 4096): ours on sm90, ours on sm80 (same library), FlashAttention-2 and cuDNN (SDPA).
  sanitize  small odd cases, bf16, for compute-sanitizer.
Writes OUT/sm90_bwd_<phase>.json.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_harness_check import DEV, Harness, err, make_inputs, reference, torch_sdpa_ms  # noqa: E402
from sm90_check import run_fwd  # noqa: E402

NUM_CASES = [
    dict(name="odd_d128", B=2, Tq=113, Tk=203, H=3, D=128),
    dict(name="odd_d128_causal_br", B=2, Tq=113, Tk=203, H=3, D=128, causal=True, offset=203 - 113),
    dict(name="odd_d128_causal_tl", B=2, Tq=203, Tk=113, H=3, D=128, causal=True, offset=0),
    dict(name="empty_rows_causal", B=2, Tq=300, Tk=77, H=2, D=128, causal=True, offset=77 - 300),
    dict(name="gqa4_d128_causal_br", B=3, Tq=257, Tk=390, H=8, Hkv=2, D=128, causal=True, offset=390 - 257),
    dict(name="gqa4_d128", B=2, Tq=190, Tk=260, H=8, Hkv=2, D=128),
    dict(name="mqa_d128_causal_tl", B=2, Tq=321, Tk=200, H=4, Hkv=1, D=128, causal=True),
    dict(name="tk1", B=2, Tq=130, Tk=1, H=2, D=128),
    dict(name="tq1", B=2, Tq=1, Tk=300, H=4, D=128),
    dict(name="tiles_exact_causal", B=1, Tq=128, Tk=256, H=2, D=128, causal=True, offset=128),
    dict(name="tiles_65_129_causal", B=2, Tq=65, Tk=129, H=2, D=128, causal=True),
    dict(name="tiles_63_127", B=2, Tq=63, Tk=127, H=2, D=128),
    dict(name="dlse_scale", B=2, Tq=129, Tk=255, H=2, D=128, scale=0.3, dlse=True),
    dict(name="odd_d64", B=2, Tq=113, Tk=203, H=3, D=64),
    dict(name="odd_d64_causal_br", B=2, Tq=203, Tk=300, H=3, D=64, causal=True, offset=97),
    dict(name="gqa4_d64_causal_tl", B=2, Tq=300, Tk=200, H=8, Hkv=2, D=64, causal=True),
    dict(name="empty_rows_d64", B=2, Tq=200, Tk=70, H=2, D=64, causal=True, offset=70 - 200),
    dict(name="big_d128", B=2, Tq=2048, Tk=2048, H=4, D=128),
    dict(name="big_d128_causal", B=1, Tq=4096, Tk=4096, H=4, D=128, causal=True),
    dict(name="big_d64_causal", B=1, Tq=2048, Tk=2048, H=8, D=64, causal=True),
]
SANITIZE = ("odd_d128", "odd_d128_causal_br", "empty_rows_causal", "gqa4_d128_causal_br", "tiles_65_129_causal",
            "odd_d64", "gqa4_d64_causal_tl")
GRADS = ("dq", "dk", "dv")


def forward(h, c, t):
    """The forward (o, lse into NaN-filled buffers, as sm90_check.py runs it), then the backward's
    workspace."""
    run_fwd(h, c, t)
    t["ws"] = torch.empty(max(h.ws_bytes(c, t), 4) // 4, device=DEV)


def backward(h, c, t, sm90):
    """Our backward on the sm90 (True) or sm80 (False) path; returns (grads, sm90 launches)."""
    for n, like in (("dq", "q"), ("dk", "k"), ("dv", "v")):
        t[n] = torch.full_like(t[like], float("nan"))
    h.m.set_sm90_bwd(1 if sm90 else 0)
    n0 = h.m.sm90_info()["bwd_launches"]
    try:
        h.bwd(c, t)
        torch.cuda.synchronize()
    finally:
        h.m.set_sm90_bwd(-1)
    return {n: t[n].clone() for n in GRADS}, h.m.sm90_info()["bwd_launches"] - n0


def where_bad(mine, ref, bound):
    """(count of bad (b, t, h) rows, first one, sample of t) for a [B, T, H, D] gradient."""
    d = (mine.double() - ref.double()).abs().amax(-1)
    bad = (d > bound) | ~torch.isfinite(d)
    idx = bad.nonzero()
    return int(bad.sum()), (idx[0].tolist() if len(idx) else None), sorted(set(idx[:, 1].tolist()))[:16]


def phase_selftest(h, log):
    rows = h.m.sm90_selftest() + h.m.sm90_bwd_selftest()
    for r in rows:
        print(f"SELFTEST {r['result']:<7} {r['name']:<34} max_err={r['max_err']:.3g}  {r['detail']}", file=log, flush=True)
    if not rows:
        print("SELFTEST none: harness built without the sm90 kernels (ARCHS must include 90)", file=log, flush=True)
    return rows


def phase_numerics(h, log, cases, dtypes):
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    for c in cases:
        for dt in dtypes:
            dname = str(dt).split(".")[-1]
            print(f"RUNNING {c['name']} {dname}", file=log, flush=True)
            t = make_inputs(c, dt, gen)
            forward(h, c, t)
            ours, took = backward(h, c, t, True)
            sm80, took80 = backward(h, c, t, False)
            ref = reference(c, t, torch.float64, None)
            low = reference(c, t, dt, None)
            row = dict(case=c["name"], dtype=dname, sm90_launched=int(took), sm80_run_launched_sm90=int(took80))
            ok = took == 1 and took80 == 0
            floor = {torch.float16: 2e-3, torch.bfloat16: 1e-2}[dt]
            for n in GRADS:
                e = err(ours[n], ref[n])
                e80 = err(sm80[n], ref[n])
                el = err(low[n], ref[n])
                fin = torch.isfinite(ref[n])
                scale = max(1.0, float(ref[n][fin].abs().max())) if bool(fin.any()) else 1.0
                bound = 3.0 * el[0] + floor * scale
                good = e[0] <= bound
                ok &= good
                vs80 = float((ours[n].double() - sm80[n].double()).abs().max()) if ours[n].numel() else 0.0
                row[n] = dict(max=e[0], rel=e[1], sm80_max=e80[0], torch_max=el[0], sm90_vs_sm80=vs80, ok=good)
                if not good:
                    cnt, first, sample = where_bad(ours[n], ref[n], bound)
                    row[n].update(bad_rows=cnt, first_bad=first, bad_t_sample=sample)
            row["ok"] = bool(ok)
            rows.append(row)
            extra = "" if took == 1 else f" (sm90 path NOT taken: {took} launches)"
            brief = " ".join(f"{n}={row[n]['max']:.2e} (sm80 {row[n]['sm80_max']:.2e}, torch {row[n]['torch_max']:.2e})"
                             for n in GRADS)
            where = " ".join(f"{n}: bad_rows={row[n]['bad_rows']} first={row[n]['first_bad']} t={row[n]['bad_t_sample']}"
                             for n in GRADS if "bad_rows" in row[n])
            print(f"{'PASS' if ok else 'FAIL'} {c['name']:<22} {dname:<9} {brief}{extra} {where}", file=log, flush=True)
            del t, ref, low, ours, sm80
    return rows


def phase_bench(h, log, quick):
    import triton.testing as tt
    rows = []
    shapes = []
    for D, H in ((128, 16), (64, 32)):
        for T in ((4096,) if quick else (4096, 16384)):
            for causal in (False, True):
                shapes.append((D, H, T, causal, torch.bfloat16))
    shapes += [(128, 16, 4096, False, torch.float16)]
    for D, H, T, causal, dt in shapes:
        B = max(1, 16384 // T)
        c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=causal)
        gen = torch.Generator(device=DEV)
        gen.manual_seed(1)
        t = make_inputs(c, dt, gen)
        forward(h, c, t)
        for n, like in (("dq", "q"), ("dk", "k"), ("dv", "v")):
            t[n] = torch.empty_like(t[like])
        fl = 2.5 * 4 * B * H * T * T * D / (2 if causal else 1)
        r = dict(B=B, T=T, H=H, D=D, causal=causal, dtype=str(dt).split(".")[-1])
        h.m.set_sm90_bwd(1)
        n0 = h.m.sm90_info()["bwd_launches"]
        try:
            r["sm90_bwd_ms"] = tt.do_bench(lambda: h.bwd(c, t), warmup=25, rep=100, return_mode="median")
        except Exception as e:  # noqa: a launch error is reported, the other rows still run
            r["sm90_error"] = str(e)[:200]
        r["sm90_path_taken"] = h.m.sm90_info()["bwd_launches"] > n0
        h.m.set_sm90_bwd(0)
        r["sm80_bwd_ms"] = tt.do_bench(lambda: h.bwd(c, t), warmup=25, rep=100, return_mode="median")
        h.m.set_sm90_bwd(-1)
        sd = torch_sdpa_ms(t, causal)
        r.update({k: v for k, v in sd.items() if "_fwd" not in k})
        for k in list(r):
            if k.endswith("_bwd_ms"):
                r[k.replace("_ms", "_tflops")] = round(fl / r[k] / 1e9, 1)
        rows.append(r)
        print("BENCH " + json.dumps(r), file=log, flush=True)
        del t
    print("\nTFLOP/s backward (2.5 x 4 B H T^2 D, /2 causal; B*T = 16384)", file=log)
    print("                  D    T      causal dtype  sm90   sm80   FA2    cuDNN  sm90/cuDNN sm90/sm80", file=log)
    for r in rows:
        cu, s9, s8 = r.get("cudnn_bwd_tflops"), r.get("sm90_bwd_tflops"), r.get("sm80_bwd_tflops")
        print(f"                  {r['D']:<4} {r['T']:<6} {int(r['causal']):<6} {r['dtype']:<6} "
              f"{s9 if s9 else '-':<6} {s8:<6} {r.get('flash_bwd_tflops', '-'):<6} {cu if cu else '-':<6} "
              f"{round(s9 / cu, 2) if cu and s9 else '-':<10} {round(s9 / s8, 2) if s9 else '-'}"
              f"{'' if r['sm90_path_taken'] else '  (sm90 NOT taken)'}", file=log, flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", required=True, choices=("selftest", "numerics", "bench", "sanitize"))
    ap.add_argument("--lib", default=".harness_build")
    ap.add_argument("--out", default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    h = Harness(args.lib)
    log = sys.stdout
    print(f"device: {torch.cuda.get_device_name()}  sm90: {h.m.sm90_info()}", file=log, flush=True)
    if args.phase == "selftest":
        rows = phase_selftest(h, log)
    elif args.phase == "numerics":
        rows = phase_numerics(h, log, NUM_CASES, (torch.bfloat16, torch.float16))
        print(f"numerics: {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    elif args.phase == "sanitize":
        rows = phase_numerics(h, log, [c for c in NUM_CASES if c["name"] in SANITIZE], (torch.bfloat16,))
        print(f"numerics: {sum(r['ok'] for r in rows)} / {len(rows)} pass", file=log, flush=True)
    else:
        rows = phase_bench(h, log, args.quick)
    if args.out:
        with open(os.path.join(args.out, f"sm90_bwd_{args.phase}.json"), "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
