"""Checks and times the Hopper forward (cc/kernels/sm90/flash_fwd_sm90.cu) through the kernel harness,
without TensorFlow, on an H100/H200 (python3 with torch, triton and pybind11):

  ARCHS=90 bash benchmarks/build_harness.sh
  python3 benchmarks/sm90_check.py --phase selftest|numerics|bench|sanitize [--lib DIR] [--out DIR]

Phases (each its own process in `gpu_run.sh sm90`, under a timeout, so a hang in one still leaves the
others' answers):
  selftest  the building blocks one at a time (flash_harness.sm90_selftest): a TMA load of one tile into
            a 128-byte-swizzled buffer read back, wgmma m64n128k16 from two K-major shared-memory
            operands (S = Q K^T), wgmma with A from registers and B MN-major (O += P V; also with the
            descriptor's LBO / SBO swapped, to tell which convention the hardware takes), and the n64 form.
  numerics  the whole forward on odd shapes (Tq, Tk not multiples of 128, B*H > 1, GQA, causal with the
            bottom-right and top-left offsets, rows that see no key, strided q/k/v, D = 64) and on big
            ones, bf16 and fp16, against a float64 torch reference; the error bar is the same-precision
            unfused reference's error (ours <= 2x that + a floor, as kernel_harness_check.py). Each case
            also checks that the sm90 path ran (launch counter) and compares with our sm80 forward.
  bench     TFLOP/s (4 B H T^2 D, halved when causal) at D = 128 (and 64), T in {1024, 4096, 16384},
            B*T = 16384, H = 16 (32 at D = 64), causal and not, bf16 (and fp16 at T = 4096): ours on
            sm90, ours on sm80 (set_sm90(0), same library), FlashAttention-2 and cuDNN (torch SDPA).
  sanitize  one small odd case per dtype / causal setting, for compute-sanitizer.
Writes OUT/sm90_<phase>.json.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_harness_check import DEV, Harness, err, make_inputs, reference, torch_sdpa_ms  # noqa: E402

NUM_CASES = [
    # name, shape; decode=-1 keeps few-row cases on the tiled path (the decoding path takes Tq <= 16).
    dict(name="odd_d128", B=2, Tq=113, Tk=203, H=3, D=128),
    dict(name="odd_d128_causal_br", B=2, Tq=113, Tk=203, H=3, D=128, causal=True, offset=203 - 113),
    dict(name="odd_d128_causal_tl", B=2, Tq=203, Tk=113, H=3, D=128, causal=True, offset=0),
    dict(name="empty_rows_causal", B=2, Tq=300, Tk=77, H=2, D=128, causal=True, offset=77 - 300),
    dict(name="gqa_d128", B=3, Tq=257, Tk=390, H=8, Hkv=2, D=128, causal=True, offset=390 - 257),
    dict(name="tk1", B=2, Tq=130, Tk=1, H=2, D=128),
    dict(name="tq1_forced", B=2, Tq=1, Tk=300, H=4, D=128, decode=-1),
    dict(name="tile_edges", B=1, Tq=256, Tk=384, H=2, D=128, causal=True, offset=128),
    dict(name="strided_qkv", B=2, Tq=200, Tk=200, H=4, D=128, causal=True, packed=True),
    dict(name="scale", B=2, Tq=129, Tk=255, H=2, D=128, scale=0.3),
    dict(name="odd_d64", B=2, Tq=113, Tk=203, H=3, D=64),
    dict(name="odd_d64_causal", B=2, Tq=203, Tk=300, H=3, D=64, causal=True, offset=97),
    dict(name="big_d128", B=2, Tq=2048, Tk=2048, H=8, D=128),
    dict(name="big_d128_causal", B=1, Tq=4096, Tk=4096, H=8, D=128, causal=True),
    dict(name="big_d64_causal", B=1, Tq=4096, Tk=4096, H=8, D=64, causal=True),
]


def inputs(c, dt, gen):
    t = make_inputs(c, dt, gen)
    if c.get("packed"):  # q, k, v as views of one [B, T, 3, H, D] tensor: strides 3*H*D per time step
        B, T, H, D = t["q"].shape
        qkv = torch.stack([t["q"], t["k"], t["v"]], dim=2)
        t["q"], t["k"], t["v"] = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    return t


def run_fwd(h, c, t):
    B, Tq, H, _ = t["q"].shape
    Dv = t["v"].shape[3]
    t["o"] = torch.full((B, Tq, H, Dv), float("nan"), device=DEV, dtype=t["q"].dtype)
    t["lse"] = torch.full((B, H, Tq), float("nan"), device=DEV)
    h.fwd(c, t)
    torch.cuda.synchronize()


def phase_selftest(h, log):
    rows = h.m.sm90_selftest()
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
            t = inputs(c, dt, gen)
            h.m.set_sm90(1)
            n0 = h.m.sm90_info()["fwd_launches"]
            run_fwd(h, c, t)
            took = h.m.sm90_info()["fwd_launches"] - n0
            ours = {"o": t["o"].clone(), "lse": t["lse"].clone()}
            h.m.set_sm90(0)
            run_fwd(h, c, t)
            h.m.set_sm90(-1)
            sm80 = {"o": t["o"].clone(), "lse": t["lse"].clone()}
            ref = reference(c, t, torch.float64, None)
            low = reference(c, t, dt, None)
            row = dict(case=c["name"], dtype=dname, sm90_launched=int(took))
            ok = took == 1
            for name in ("o", "lse"):
                e = err(ours[name], ref[name])
                e80 = err(sm80[name], ref[name])
                el = err(low[name], ref[name])
                fin = torch.isfinite(ref[name])
                scale = max(1.0, float(ref[name][fin].abs().max())) if bool(fin.any()) else 1.0
                floor = {torch.float16: 2e-3, torch.bfloat16: 1e-2}[dt]
                good = e[0] <= 2.0 * el[0] + floor * scale
                ok &= good
                row[name] = dict(max=e[0], rel=e[1], sm80_max=e80[0], torch_max=el[0], ok=good)
                if not good and name == "o":  # where: first bad (b, t, h) and how many rows are off
                    d = (ours["o"].double() - ref["o"]).abs().amax(-1)  # [B, Tq, H]
                    bad = (d > 2.0 * el[0] + floor * scale) | ~torch.isfinite(d)
                    idx = bad.nonzero()
                    row["o_bad_rows"] = int(bad.sum())
                    row["o_first_bad"] = idx[0].tolist() if len(idx) else None
                    row["o_bad_row_indices_sample"] = sorted(set(idx[:, 1].tolist()))[:16]
            row["ok"] = bool(ok)
            rows.append(row)
            extra = "" if took == 1 else f" (sm90 path NOT taken: {took} launches)"
            where = f" bad_rows={row.get('o_bad_rows')} first={row.get('o_first_bad')} t={row.get('o_bad_row_indices_sample')}" \
                if "o_bad_rows" in row else ""
            print(f"{'PASS' if ok else 'FAIL'} {c['name']:<22} {dname:<9} o={row['o']['max']:.2e} (sm80 "
                  f"{row['o']['sm80_max']:.2e}, torch {row['o']['torch_max']:.2e}) lse={row['lse']['max']:.2e} "
                  f"(sm80 {row['lse']['sm80_max']:.2e}){extra}{where}", file=log, flush=True)
            del t, ref, low
    return rows


def phase_bench(h, log, quick):
    import triton.testing as tt
    rows = []
    shapes = []
    for D, H in ((128, 16), (64, 32)):
        for T in ((4096,) if quick else (1024, 4096, 16384)):
            if D == 64 and T == 1024:
                continue
            for causal in (False, True):
                shapes.append((D, H, T, causal, torch.bfloat16))
    shapes += [(128, 16, 4096, False, torch.float16), (128, 16, 4096, True, torch.float16)]
    for D, H, T, causal, dt in shapes:
        B = max(1, 16384 // T)
        c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=causal)
        gen = torch.Generator(device=DEV)
        gen.manual_seed(1)
        t = make_inputs(c, dt, gen)
        run_fwd(h, c, t)
        fl = 4 * B * H * T * T * D / (2 if causal else 1)
        r = dict(B=B, T=T, H=H, D=D, causal=causal, dtype=str(dt).split(".")[-1])
        h.m.set_sm90(1)
        n0 = h.m.sm90_info()["fwd_launches"]
        r["sm90_fwd_ms"] = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
        r["sm90_path_taken"] = h.m.sm90_info()["fwd_launches"] > n0
        h.m.set_sm90(0)
        r["sm80_fwd_ms"] = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
        h.m.set_sm90(-1)
        sd = torch_sdpa_ms(t, causal)
        r.update({k: v for k, v in sd.items() if "_bwd" not in k})
        for k in list(r):
            if k.endswith("_fwd_ms"):
                r[k.replace("_ms", "_tflops")] = round(fl / r[k] / 1e9, 1)
        rows.append(r)
        print("BENCH " + json.dumps(r), file=log, flush=True)
        del t
    print("\nTFLOP/s forward   D    T      causal dtype  sm90   sm80   FA2    cuDNN  sm90/cuDNN", file=log)
    for r in rows:
        cu = r.get("cudnn_fwd_tflops")
        print(f"                  {r['D']:<4} {r['T']:<6} {int(r['causal']):<6} {r['dtype']:<6} "
              f"{r['sm90_fwd_tflops']:<6} {r['sm80_fwd_tflops']:<6} {r.get('flash_fwd_tflops', '-'):<6} "
              f"{cu if cu else '-':<6} {round(r['sm90_fwd_tflops'] / cu, 2) if cu else '-'}"
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
        cases = [c for c in NUM_CASES if c["name"] in ("odd_d128", "odd_d128_causal_br", "empty_rows_causal", "odd_d64")]
        rows = phase_numerics(h, log, cases, (torch.bfloat16,))
    else:
        rows = phase_bench(h, log, args.quick)
    if args.out:
        with open(os.path.join(args.out, f"sm90_{args.phase}.json"), "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
