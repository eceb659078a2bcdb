"""The float32 backward on TF32 tensor cores (cc/kernels/sm80/flash_bwd_tf32.cu) in other tile
configurations, on an sm_90 GPU: numerics of each against float64, dK / dV against the default
configuration's bits where both sum the same query tiles in the same order, and backward TFLOP/s.
  python3 benchmarks/tune_tf32_bwd.py [--quick]
  python3 benchmarks/tune_tf32_bwd.py --fwd   (the head-dim-256 forward's tiles, FA_TF32_FWD_CFG in
                                               flash_fwd_tf32.cu: numerics, O / lse bits, TFLOP/s)
Build: a tuning build, FA_TUNING defined for flash_bwd_tf32.cu (FA_TF32_BWD_CFG picks the configuration
at run time; 0 / unset: the default), e.g. NVCC_EXTRA=-DFA_TUNING bash benchmarks/build_harness.sh (module
from $HARNESS_DIR, default .harness_build). On the lent GPU, build and run: bash benchmarks/gpu_run.sh tf32tune."""
import os, sys
sys.path.insert(0, os.path.dirname(__file__))
import torch
import triton.testing as tt
from kernel_harness_check import Harness, make_inputs, run_ours, check_numerics, same_bits, CASES, DEV

# FA_TF32_BWD_CFG values (flash_bwd_tf32.cu, bwd_tf32): keys x queries per step, warps, Q / dO stages.
CFGS = {0: "default (HD 64: 64 x 64, 4 warps; HD 128 on sm_90: 128 x 32, 8 warps, 2 stages; general 64 x 32, "
           "4 warps)",
        1: "HD 64: 128 x 64, 8 warps", 2: "HD 64: 128 x 32, 8 warps, 2 stages",
        3: "HD 128: 128 x 32, 8 warps, 2 stages (the default)", 4: "HD 128: 128 x 32, 8 warps, 1 stage",
        5: "HD 128 general: 64 x 32, 4 warps (the default)",
        6: "HD 128: 64 x 32, 4 warps, 2 stages (the default before 2026-12-04)",
        7: "HD 128 general: 32 x 32, 2 warps (the default before 2026-12-04)",
        8: "HD 256: 64 x 32, 4 warps, 2 column splits (the default)", 9: "HD 256: 64 x 16, 4 warps, 2 column splits",
        10: "HD 64: 64 x 32, 4 warps, 2 stages", 11: "HD 64: 64 x 32, 4 warps, 1 stage",
        12: "HD 256: 32 x 32, 2 warps, 2 column splits (the default before 2026-12-04)"}
# Configurations whose dK / dV must equal the default's bit for bit (same query-tile height, so the
# same sums in the same order per key row), by head-dim bucket and general / not.
SAME_SUMS = {1: 64, 3: 128, 4: 128, 5: 128, 6: 128, 7: 128, 8: 256, 12: 256}


def bucket(c):
    d = max(c["D"], c.get("Dv", c["D"]))
    return 64 if d <= 64 else 128 if d <= 128 else 256


def with_cfg(v, fn, var="FA_TF32_BWD_CFG"):
    os.environ[var] = str(v)
    try:
        return fn()
    finally:
        os.environ.pop(var)


FWD_CFGS = {0: "default (HD 256 on sm_90: 128 x 32, 8 warps)", 1: "HD 256: 128 x 16, 8 warps",
            2: "HD 256: 128 x 32, 8 warps (the default)",
            3: "HD 256: 64 x 16, 4 warps (the default before 2026-12-04, and where shared memory is smaller)"}
# (a, b): b's O / lse must equal a's bit for bit (each warp's 16 rows see the same 16-key steps).
FWD_SAME = ((3, 1), (0, 2))


def main_fwd():
    """FA_TF32_FWD_CFG: numerics of every configuration (all harness cases; only head dim 256 changes),
    O / lse bits of the FWD_SAME pairs, forward TFLOP/s at 16k tokens, hidden 1024."""
    h = Harness(os.environ.get("HARNESS_DIR", ".harness_build"))
    ok_all = True
    for v in FWD_CFGS:
        rows = with_cfg(v, lambda: check_numerics(h, ("tf32",), CASES, open(os.devnull, "w")),
                        var="FA_TF32_FWD_CFG")
        bad = [r["case"] + ("/det" if r["det"] else "") for r in rows if not r["ok"]]
        ok_all &= not bad
        print(f"fwd cfg {v} numerics {len(rows) - len(bad)} / {len(rows)}" + (f" FAIL {bad}" if bad else ""),
              flush=True)
    g = torch.Generator(device=DEV)
    for va, vb in FWD_SAME:
        n = same = 0
        for c in CASES:
            if bucket(c) != 256:
                continue
            c2 = dict(c, tf32=True)
            g.manual_seed(7)
            t0 = make_inputs(c2, torch.float32, g)
            g.manual_seed(7)
            t1 = make_inputs(c2, torch.float32, g)
            with_cfg(va, lambda: run_ours(h, c2, t0, need_bwd=False), var="FA_TF32_FWD_CFG")
            with_cfg(vb, lambda: run_ours(h, c2, t1, need_bwd=False), var="FA_TF32_FWD_CFG")
            torch.cuda.synchronize()
            for name in ("o", "lse"):
                n += 1
                same += same_bits(t0[name], t1[name])
        ok_all &= same == n
        print(f"fwd cfg {vb} o / lse bitwise equal to cfg {va}: {same} / {n}", flush=True)
    print("| D | T | causal | options | fwd cfg | fwd ms | fwd TFLOP/s | / cfg 0 |")
    print("|---:|---:|---|---|---:|---:|---:|---:|")
    D = 256
    for T in (1024, 4096, 16384):
        for causal in (False, True):
            for drop in ((False, True) if T == 4096 else (False,)):
                c = dict(B=16384 // T, Tq=T, Tk=T, H=1024 // D, D=D, causal=causal, tf32=True,
                         dropout=0.1 if drop else 0.0)
                g.manual_seed(0)
                t = make_inputs(c, torch.float32, g)
                run_ours(h, c, t, need_bwd=False)
                fl = 4 * c["B"] * T * T * c["H"] * D / (2 if causal else 1)
                base = None
                for v in FWD_CFGS:
                    ms = with_cfg(v, lambda: tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=200,
                                                         return_mode="median"), var="FA_TF32_FWD_CFG")
                    base = base or ms
                    print(f"| {D} | {T} | {'yes' if causal else 'no'} | {'dropout 0.1' if drop else '-'} | {v} | "
                          f"{ms:.3f} | {fl / ms / 1e9:.1f} | {base / ms:.3f}x |", flush=True)
    print("ALL CHECKS PASS" if ok_all else "SOME CHECKS FAILED")


def main():
    if "--fwd" in sys.argv:
        return main_fwd()
    quick = "--quick" in sys.argv
    h = Harness(os.environ.get("HARNESS_DIR", ".harness_build"))
    cases = list(CASES)
    ok_all = True
    for v in CFGS:
        rows = with_cfg(v, lambda: check_numerics(h, ("tf32",), cases, open(os.devnull, "w")))
        bad = [r["case"] + ("/det" if r["det"] else "") for r in rows if not r["ok"]]
        ok_all &= not bad
        print(f"cfg {v} numerics {len(rows) - len(bad)} / {len(rows)}" + (f" FAIL {bad}" if bad else ""), flush=True)
    # dK / dV bits against the default, same inputs.
    g = torch.Generator(device=DEV)
    for v, hd in SAME_SUMS.items():
        n = same = 0
        for c in cases:
            if bucket(c) != hd:
                continue
            c2 = dict(c, tf32=True)
            g.manual_seed(7)
            t0 = make_inputs(c2, torch.float32, g)
            g.manual_seed(7)
            t1 = make_inputs(c2, torch.float32, g)
            with_cfg(0, lambda: run_ours(h, c2, t0))
            with_cfg(v, lambda: run_ours(h, c2, t1))
            torch.cuda.synchronize()
            for name in ("dk", "dv"):
                n += 1
                same += same_bits(t0[name], t1[name])
        ok_all &= same == n
        print(f"cfg {v} dk / dv bitwise equal to cfg 0: {same} / {n}", flush=True)
    # Backward TFLOP/s, float32 with TF32, 16k tokens, hidden 1024 (the float32 table's shapes).
    print("| D | T | causal | options | cfg | bwd ms | bwd TFLOP/s | / cfg 0 |")
    print("|---:|---:|---|---|---:|---:|---:|---:|")
    # Configurations timed per head dim (2026-12-04's runs timed 128: 0, 3, 4 and 0, 5 with dropout, 64:
    # 0, 1, 2, then 0, 10, 11, 256: 0, 8, 9; 3, 5 and 8 are now the default, 6, 7 and 12 the former one).
    sets = {128: (0, 6), 64: (0, 10, 11), 256: (0, 12, 9)}
    drop_sets = {128: (0, 7), 256: (0, 12)}
    for D in (256, 128, 64):
        for T in ((4096,) if quick else (1024, 4096, 16384)):
            for causal in (False, True):
                for drop in ((False, True) if D in drop_sets and T == 4096 else (False,)):
                    c = dict(B=16384 // T, Tq=T, Tk=T, H=1024 // D, D=D, causal=causal, tf32=True,
                             dropout=0.1 if drop else 0.0)
                    g.manual_seed(0)
                    t = make_inputs(c, torch.float32, g)
                    run_ours(h, c, t)
                    fl = 2.5 * 4 * c["B"] * T * T * c["H"] * D / (2 if causal else 1)
                    vs = drop_sets[D] if drop else sets[D]
                    base = None
                    for v in vs:
                        ms = with_cfg(v, lambda: tt.do_bench(lambda: h.bwd(c, t), warmup=25, rep=200,
                                                             return_mode="median"))
                        base = base or ms
                        print(f"| {D} | {T} | {'yes' if causal else 'no'} | {'dropout 0.1' if drop else '-'} | {v} | "
                              f"{ms:.3f} | {fl / ms / 1e9:.1f} | {base / ms:.3f}x |", flush=True)
    print("ALL CHECKS PASS" if ok_all else "SOME CHECKS FAILED")


if __name__ == "__main__":
    main()
