"""The float32 backward on TF32 tensor cores (cc/kernels/sm80/flash_bwd_tf32.cu) in other tile
configurations, on an sm_90 GPU: numerics of each against float64, dK / dV against the default
configuration's bits where both sum the same query tiles in the same order, and backward TFLOP/s.
  python3 benchmarks/tune_tf32_bwd.py [--quick] [--fwd | --sm90 | --sm90-d128 | --sm90-d256 [--sanitize]]
--quick times T = 4096 only; --fwd checks and times the head-dim-256 forward's tiles instead
(FA_TF32_FWD_CFG in flash_fwd_tf32.cu: numerics, O / lse bits, forward TFLOP/s); --sm90 the Hopper TF32
backward (cc/kernels/sm90/flash_bwd_sm90_tf32.cu, head dim 64; set_sm90_tf32_bwd picks it off / each variant)
against sm80's: numerics of the head-dim-64 cases for each variant (and that it launched), then backward TFLOP/s.
Build: a tuning build, FA_TUNING defined for flash_bwd_tf32.cu / flash_fwd_tf32.cu (FA_TF32_BWD_CFG picks the configuration
at run time; 0 / unset: the default), e.g. NVCC_EXTRA=-DFA_TUNING bash benchmarks/build_harness.sh (module
from $HARNESS_DIR, default .harness_build). On the lent GPU, build and run: bash benchmarks/gpu_run.sh tf32tune."""
import os, sys
sys.path.insert(0, os.path.dirname(__file__))
import torch
import triton.testing as tt
from kernel_harness_check import Harness, make_inputs, run_ours, check_numerics, same_bits, CASES, DEV

# FA_TF32_BWD_CFG values (flash_bwd_tf32.cu, bwd_tf32): keys x queries per step, warps, Q / dO stages.
CFGS = {0: "default (HD 64 on sm_90: 128 x 32, 4 warps, MTK 2; general 128 x 16, 4 warps, 2 stages, MTK 2; HD 128 on sm_90: 128 x 32, 8 warps, 2 stages; general 64 x 32, "
           "4 warps; HD 256: 64 x 32, 4 warps, 2 column splits)",
        1: "HD 64: 128 x 64, 8 warps", 2: "HD 64: 128 x 32, 8 warps, 2 stages",
        3: "HD 128: 128 x 32, 8 warps, 2 stages (the default)", 4: "HD 128: 128 x 32, 8 warps, 1 stage",
        5: "HD 128 general: 64 x 32, 4 warps (the default)",
        6: "HD 128: 64 x 32, 4 warps, 2 stages (the default before 2026-12-04)",
        7: "HD 128 general: 32 x 32, 2 warps (the default before 2026-12-04)",
        8: "HD 256: 64 x 32, 4 warps, 2 column splits (the default)", 9: "HD 256: 64 x 16, 4 warps, 2 column splits",
        10: "HD 64: 64 x 32, 4 warps, 2 stages", 11: "HD 64: 64 x 32, 4 warps, 1 stage",
        12: "HD 256: 32 x 32, 2 warps, 2 column splits (the default before 2026-12-04)",
        # Two m16 key tiles per warp (MTK = 2); 13-15 and 17 without the general features only.
        13: "HD 64: 128 x 32, 4 warps, MTK 2 (the default)", 14: "HD 64: 128 x 32, 4 warps, 2 stages, MTK 2",
        15: "HD 64: 64 x 32, 2 warps, MTK 2", 16: "HD 64: 128 x 16, 4 warps, 2 stages, MTK 2 (the general default)",
        17: "HD 128: 128 x 32, 4 warps, 2 column splits, MTK 2", 18: "HD 64: 128 x 16, 4 warps, MTK 2",
        19: "HD 64: 64 x 64, 4 warps (the default before 2026-12-04 session 35)"}
# Configurations whose dK / dV must equal the default's bit for bit (same query-tile height, so the
# same sums in the same order per key row), by head-dim bucket; 3, 5 and 8 are the defaults now (the
# check then shows that the dispatch picks them), 17 the two-key-tile form (MTK = 2) of the default's
# 32-query tiles; at HD 64 14 and 15 have the default's 32-query tiles (index masks only: the general
# cases fall back to the default). Until session 35 the HD 64 default had 64-query tiles, and 1 was
# checked against it (18 / 18).
SAME_SUMS = {14: 64, 15: 64, 3: 128, 4: 128, 5: 128, 6: 128, 7: 128, 8: 256, 12: 256, 17: 128}
# Configurations timed per head dim (2026-12-04's runs timed 128: 0, 3, 4 and 0, 5 with dropout, 64: 0,
# 1, 2, then 0, 10, 11, 256: 0, 8, 9; 3, 5 and 8 are now the default, 6, 7 and 12 the former one; 13-18
# ran first in session 35: 13 and 16 became the HD 64 defaults, 19 the former one).
BWD_SETS = {256: (0, 12), 128: (0, 6), 64: (0, 19, 14, 15, 18)}
BWD_DROP_SETS = {128: (0, 7), 256: (0, 12), 64: (0, 19, 18)}

# FA_TF32_FWD_CFG values (flash_fwd_tf32.cu, fwd_tf32): query rows per CTA x keys per step, warps.
FWD_CFGS = {0: "default (HD 256 on sm_90: 128 x 32, 8 warps)", 1: "HD 256: 128 x 16, 8 warps",
            2: "HD 256: 128 x 32, 8 warps (the default)",
            3: "HD 256: 64 x 16, 4 warps (the default before 2026-12-04, and where shared memory is smaller)"}
# (a, b, head-dim bucket): b's O / lse must equal a's bit for bit (each warp's 16 rows see the same
# 16-key steps).
FWD_SAME = ((3, 1, 256), (0, 2, 256))


def bucket(c):
    d = max(c["D"], c.get("Dv", c["D"]))
    return 64 if d <= 64 else 128 if d <= 128 else 256


def with_cfg(var, v, fn):
    """fn() with environment variable var = v, or, var a callable, after var(v) (and var(-1) after)."""
    if callable(var):
        var(v)
        try:
            return fn()
        finally:
            var(-1)
    os.environ[var] = str(v)
    try:
        return fn()
    finally:
        os.environ.pop(var)


def numerics(h, var, cfgs):
    """Every harness case in TF32 under each configuration of var; True when all pass."""
    ok = True
    for v in cfgs:
        rows = with_cfg(var, v, lambda: check_numerics(h, ("tf32",), CASES, open(os.devnull, "w")))
        bad = [r["case"] + ("/det" if r["det"] else "") for r in rows if not r["ok"]]
        ok &= not bad
        print(f"{var}={v} numerics {len(rows) - len(bad)} / {len(rows)}" + (f" FAIL {bad}" if bad else ""),
              flush=True)
    return ok


def same_outputs(h, var, va, vb, hd, names, need_bwd):
    """The harness cases of head-dim bucket hd, same inputs, under configurations va and vb: True when
    the named outputs hold the same bits."""
    g = torch.Generator(device=DEV)
    n = same = 0
    for c in CASES:
        if bucket(c) != hd:
            continue
        c2 = dict(c, tf32=True)
        ts = []
        for v in (va, vb):
            g.manual_seed(7)
            t = make_inputs(c2, torch.float32, g)
            with_cfg(var, v, lambda: run_ours(h, c2, t, need_bwd=need_bwd))
            ts.append(t)
        torch.cuda.synchronize()
        for name in names:
            n += 1
            same += same_bits(ts[0][name], ts[1][name])
    print(f"{var}={vb} {' / '.join(names)} bitwise equal to {va}'s: {same} / {n}", flush=True)
    return same == n


def timings(h, var, bwd, Ts, sets, drop_sets, name=None):
    """TFLOP/s of each configuration in sets[D] (drop_sets[D] with dropout 0.1 at T = 4096), float32 with
    TF32, 16k tokens, hidden 1024 (the float32 table's shapes)."""
    print(f"| D | T | causal | options | {name or var} | ms | TFLOP/s | / the first |")
    print("|---:|---:|---|---|---:|---:|---:|---:|")
    g = torch.Generator(device=DEV)
    for D, vs_plain in sets.items():
        for T in Ts:
            for causal in (False, True):
                for drop in ((False, True) if D in drop_sets and T == 4096 else (False,)):
                    c = dict(B=16384 // T, Tq=T, Tk=T, H=1024 // D, D=D, causal=causal, tf32=True,
                             dropout=0.1 if drop else 0.0)
                    g.manual_seed(0)
                    t = make_inputs(c, torch.float32, g)
                    run_ours(h, c, t, need_bwd=bwd)
                    if bwd and callable(var):  # a switch may change the workspace size: the largest
                        need = max(with_cfg(var, v, lambda: h.ws_bytes(c, t)) for v in vs_plain)
                        t["ws"] = torch.empty(max(need, 4) // 4, device=DEV)
                    fl = (2.5 if bwd else 1.0) * 4 * c["B"] * T * T * c["H"] * D / (2 if causal else 1)
                    call = (lambda: h.bwd(c, t)) if bwd else (lambda: h.fwd(c, t))
                    base = None
                    for v in (drop_sets[D] if drop else vs_plain):
                        ms = with_cfg(var, v, lambda: tt.do_bench(call, warmup=25, rep=200, return_mode="median"))
                        base = base or ms
                        print(f"| {D} | {T} | {'yes' if causal else 'no'} | {'dropout 0.1' if drop else '-'} | "
                              f"{v} | {ms:.3f} | {fl / ms / 1e9:.1f} | {base / ms:.3f}x |", flush=True)


# The Hopper TF32 backward's checks (--sm90): the harness's head-dim-64 cases it takes (index masks only: causal,
# window, lengths, validity; d_lse is fine), then ragged tiles, GQA, causal alignments (rows that see no key),
# tiny T, and each index mask.
SM90_CASES = [
    dict(name="t32_ragged_gqa", B=2, Tq=300, Tk=517, H=4, Hkv=2, D=64),
    dict(name="t32_causal_gqa", B=2, Tq=300, Tk=517, H=4, Hkv=2, D=64, causal=True),
    dict(name="t32_causal_rev", B=1, Tq=517, Tk=300, H=2, D=64, causal=True),
    dict(name="t32_causal_br", B=1, Tq=517, Tk=300, H=2, D=64, causal=True, offset=300 - 517),
    dict(name="t32_kvcache", B=2, Tq=40, Tk=1000, H=4, Hkv=1, D=64, causal=True, offset=1000 - 40),
    dict(name="t32_tiny", B=3, Tq=1, Tk=17, H=2, D=64),
    dict(name="t32_dlse", B=2, Tq=129, Tk=257, H=2, D=64, dlse=True),
    dict(name="t32_long", B=1, Tq=1024, Tk=1024, H=2, D=64, causal=True),
    # Index masks (lengths, [B, T] validity, windows): random lengths (0 possible), rows that see no key.
    dict(name="t32_lengths_gqa", B=3, Tq=300, Tk=517, H=4, Hkv=2, D=64, qlen=True, klen=True),
    dict(name="t32_valid_causal", B=2, Tq=200, Tk=330, H=2, D=64, qvalid=True, kvalid=True, causal=True),
    dict(name="t32_window", B=2, Tq=700, Tk=700, H=4, Hkv=2, D=64, wl=100, wr=20),
    dict(name="t32_window_causal_len", B=2, Tq=517, Tk=1000, H=2, D=64, causal=True, offset=1000 - 517, wl=150,
         qlen=True, klen=True),
    dict(name="t32_window_no_key", B=1, Tq=300, Tk=260, H=2, D=64, wl=0, wr=0, offset=-50),
    dict(name="t32_kvalid_long", B=2, Tq=1024, Tk=1024, H=2, D=64, kvalid=True, dlse=True),
    # Added after the session-36 run (not yet run on a GPU): one-sided windows, offsets past Tq.
    dict(name="t32_window_left_only", B=2, Tq=400, Tk=450, H=2, D=64, wl=70),
    dict(name="t32_window_right_offset", B=2, Tq=300, Tk=600, H=2, D=64, wr=40, offset=150, klen=True),
    dict(name="t32_causal_offset_past_tq", B=1, Tq=100, Tk=700, H=2, D=64, causal=True, offset=650),
]


# set_sm90_tf32_bwd modes: 1 + the kernel's variant (flash_bwd_sm90_tf32.cu: 0 S^T / dP^T by wgmma SS, 1 by RS
# with K / V fragments in registers, 2 as 1 with a 3-stage ring, 3 as 1 with dQ^T added by bulk reduce-adds (the
# default), 4 as 1 with the next unit's S^T / dP^T issued before the dQ adds, 5 as 3 with 4's order, 6 as 3
# with a 3-stage ring).
SM90_MODES = tuple(int(x) for x in os.environ.get("SM90_TUNE_MODES", "1,2,3,4,5,6,7").split(","))  # a subset: faster


def hopper_cases(D, extra):
    """The harness's head-dim-D cases a Hopper TF32 backward takes (index masks only), then extra."""
    return [c for c in CASES if c["D"] == D and c.get("Dv", D) == D and
            not any(c.get(k) for k in ("mask", "bias", "softcap", "dropout"))] + extra


def switched_numerics(h, switch, mode, cases, counter, label, det_runs=True):
    """check_numerics of cases (TF32) with switch(mode); the kernel must have launched once per row, twice for those
    in deterministic mode (check_numerics runs them again for the bitwise repeat; the DET instantiations' ordered dQ
    reduction), counted by sm90_info()[counter]; det_runs=False: a kernel without a deterministic mode, never for
    those rows. Prints a line; True when all pass."""
    m = h.m
    n0 = m.sm90_info()[counter]
    rows = with_cfg(switch, mode, lambda: check_numerics(h, ("tf32",), cases, open(os.devnull, "w")))
    launched = m.sm90_info()[counter] - n0
    bad = [r["case"] for r in rows if not r["ok"]]
    for r in rows:
        if not r["ok"]:
            print(r, flush=True)
    want = sum((2 if det_runs else 0) if r["det"] else 1 for r in rows)
    print(f"{label}: numerics {len(rows) - len(bad)} / {len(rows)}, launches {launched} (expected {want})"
          + (f" FAIL {bad}" if bad else ""), flush=True)
    return not bad and launched == want


def sm90_main(h, Ts):
    """--sm90: numerics with the Hopper TF32 backward on, each variant (set_sm90_tf32_bwd(1 + variant)), then
    TFLOP/s of sm80's (0) and each mode in SM90_MODES at head dim 64."""
    m = h.m
    cases = hopper_cases(64, SM90_CASES)
    ok = True
    for mode in SM90_MODES:
        ok &= switched_numerics(h, m.set_sm90_tf32_bwd, mode, cases, "tf32_bwd_launches",
                                f"sm90 tf32 bwd mode {mode}")
    timings(h, m.set_sm90_tf32_bwd, True, Ts, {64: (0,) + SM90_MODES}, {}, name="sm90 TF32 bwd mode")
    masked_timings(h, SM90_MASKED_MODES)
    return ok


# The index-masked backward at T = 4096 (16k tokens, hidden 1024): sm80's TF32 backward (mode 0) against the
# Hopper one (the default variant, mode 4), for masks as users pass them.
SM90_MASKED_MODES = (0, 4)


def masked_timings(h, modes):
    print("| D | T | mask | sm90 TF32 bwd mode | ms | / the first |")
    print("|---:|---:|---|---:|---:|---:|")
    g = torch.Generator(device=DEV)
    T, D = 4096, 64
    B, H = 16384 // T, 1024 // D
    for label, extra in (("[B, Tk] padding mask, all true", dict(kvalid=True)),
                         ("key lengths 3T/4, query lengths 3T/4", dict(klen=True, qlen=True)),
                         ("[B, Tq] and [B, Tk] masks, random (80 % true), causal", dict(qvalid=True, kvalid=True,
                                                                                      causal=True)),
                         ("causal, window 512", dict(causal=True, wl=512))):
        c = dict(B=B, Tq=T, Tk=T, H=H, D=D, tf32=True, **extra)
        g.manual_seed(0)
        t = make_inputs(c, torch.float32, g)
        if label.endswith("all true"):
            t["kvalid"] = torch.ones(B, T, dtype=torch.bool, device=DEV)
        if "lengths" in label:
            t["klen"].fill_(3 * T // 4)
            t["qlen"].fill_(3 * T // 4)
        run_ours(h, c, t, need_bwd=True)
        need = max(with_cfg(h.m.set_sm90_tf32_bwd, v, lambda: h.ws_bytes(c, t)) for v in modes)
        t["ws"] = torch.empty(max(need, 4) // 4, device=DEV)
        base = None
        for v in modes:
            ms = with_cfg(h.m.set_sm90_tf32_bwd, v,
                          lambda: tt.do_bench(lambda: h.bwd(c, t), warmup=25, rep=200, return_mode="median"))
            base = base or ms
            print(f"| {D} | {T} | {label} | {v} | {ms:.3f} | {base / ms:.3f}x |", flush=True)


# --sm90-d128: the head-dim-128 Hopper TF32 backward (flash_bwd_sm90_tf32_d128.cu, set_sm90_tf32_bwd128): the
# harness's head-dim-128 cases it takes and these, then TFLOP/s against sm80's (modes below).
SM90_D128_CASES = [
    dict(name="t128_ragged_gqa", B=2, Tq=300, Tk=517, H=4, Hkv=2, D=128),
    dict(name="t128_causal_gqa", B=2, Tq=300, Tk=517, H=4, Hkv=2, D=128, causal=True),
    dict(name="t128_causal_rev", B=1, Tq=517, Tk=300, H=2, D=128, causal=True),
    dict(name="t128_causal_br", B=1, Tq=517, Tk=300, H=2, D=128, causal=True, offset=300 - 517),
    dict(name="t128_kvcache", B=2, Tq=40, Tk=1000, H=4, Hkv=1, D=128, causal=True, offset=1000 - 40),
    dict(name="t128_tiny", B=3, Tq=1, Tk=17, H=2, D=128),
    dict(name="t128_one_unit", B=1, Tq=20, Tk=100, H=1, D=128),
    dict(name="t128_dlse", B=2, Tq=129, Tk=257, H=2, D=128, dlse=True),
    dict(name="t128_long", B=1, Tq=1024, Tk=1024, H=2, D=128, causal=True),
    dict(name="t128_lengths_gqa", B=3, Tq=300, Tk=517, H=4, Hkv=2, D=128, qlen=True, klen=True),
    dict(name="t128_valid_causal", B=2, Tq=200, Tk=330, H=2, D=128, qvalid=True, kvalid=True, causal=True),
    dict(name="t128_window", B=2, Tq=700, Tk=700, H=4, Hkv=2, D=128, wl=100, wr=20),
    dict(name="t128_window_no_key", B=1, Tq=300, Tk=260, H=2, D=128, wl=0, wr=0, offset=-50),
]


# Its modes (set_sm90_tf32_bwd128): 0 off (sm80's), 1 + i on with dQ mode i (flash_bwd_sm90_tf32_d128.cu's
# kDqModes: 0 scalar atomics, 1 float4 atomics in fragment order, 2 bulk reduce-adds, 3 as 1 with K^T's fragments
# from row addresses and immediate offsets, kKtRows); SM90_D128_MODES to pick.
SM90_D128_MODES = tuple(int(x) for x in os.environ.get("SM90_D128_MODES", "1,2,3,4").split(","))


def sm90_d128_main(h, Ts):
    m = h.m
    ok = True
    for mode in SM90_D128_MODES:
        ok &= switched_numerics(h, m.set_sm90_tf32_bwd128, mode, hopper_cases(128, SM90_D128_CASES),
                                "tf32_bwd128_launches", f"sm90 tf32 bwd d128 mode {mode}")
    timings(h, m.set_sm90_tf32_bwd128, True, Ts, {128: (0,) + SM90_D128_MODES}, {},
            name="sm90 TF32 bwd d128 mode (0 off)")
    return ok


# --sm90-d256: the head-dim-256 Hopper TF32 backward (flash_bwd_sm90_tf32_d256.cu, set_sm90_tf32_bwd256; D == Dv == 256,
# index masks or none, no deterministic mode; first run 2026-12-07): the harness's head-dim-256 cases it takes and
# these (ragged tiles, GQA, causal alignments, rows that see no key, tiny T, each index mask), then TFLOP/s against
# sm80's TF32 backward (0).
SM90_D256_CASES = [dict(c, name=c["name"].replace("t128", "t256"), D=256) for c in SM90_D128_CASES]


# --sanitize (with --sm90-d256): numerics of a few small cases only, no timings, for compute-sanitizer to wrap;
# D256SAN_CASES (comma-separated names) picks them.
D256_SANITIZE = os.environ.get("D256SAN_CASES", "t256_causal_gqa,t256_window_no_key,t256_lengths_gqa,t256_tiny")


# Its modes (set_sm90_tf32_bwd256): 0 off (sm80's), 1 + i on with variant i (flash_bwd_sm90_tf32_d256.cu's kVariants:
# 1 the first form, 2 the slot released before dQ^T, 3 (the default from RESULTS "Hopper TF32 kernels" (u) to (v)) as 2
# with float4 dQ adds into fragment-ordered blocks, 4 (the default since (v)) as 3 with each d panel's loads and dQ
# adds under the other panel's products (not the consumer roles of (u)'s mode 4, removed)); SM90_D256_MODES to pick (numerics of each, then timings
# against 0).
SM90_D256_MODES = tuple(int(x) for x in os.environ.get("SM90_D256_MODES", "1,2,3,4").split(","))


def sm90_d256_main(h, Ts):
    m = h.m
    cases = hopper_cases(256, SM90_D256_CASES)
    if "--sanitize" in sys.argv:
        names = D256_SANITIZE.split(",")
        cases = [c for c in cases if c["name"] in names]
        assert len(cases) == len(names), f"D256SAN_CASES: unknown names in {names}"
    ok = True
    for mode in SM90_D256_MODES:
        ok &= switched_numerics(h, m.set_sm90_tf32_bwd256, mode, cases, "tf32_bwd256_launches",
                                f"sm90 tf32 bwd d256 mode {mode}", det_runs=False)
    if "--sanitize" in sys.argv:
        return ok
    timings(h, m.set_sm90_tf32_bwd256, True, Ts, {256: (0,) + SM90_D256_MODES}, {},
            name="sm90 TF32 bwd d256 mode (0 off: sm80's)")
    return ok


def main():
    h = Harness(os.environ.get("HARNESS_DIR", ".harness_build"))
    Ts = (4096,) if "--quick" in sys.argv else (1024, 4096, 16384)
    if "--sm90-d128" in sys.argv:
        ok = sm90_d128_main(h, Ts)
    elif "--sm90-d256" in sys.argv:
        ok = sm90_d256_main(h, Ts)
    elif "--sm90" in sys.argv:
        ok = sm90_main(h, Ts)
    elif "--fwd" in sys.argv:
        var = "FA_TF32_FWD_CFG"
        ok = numerics(h, var, FWD_CFGS)
        for va, vb, hd in FWD_SAME:
            ok &= same_outputs(h, var, va, vb, hd, ("o", "lse"), need_bwd=False)
        timings(h, var, False, Ts, {256: tuple(FWD_CFGS)}, {256: tuple(FWD_CFGS)})
    else:
        # sm80's TF32 backward's configurations: the Hopper TF32 backwards (on by default) off, so that it runs.
        for off in (h.m.set_sm90_tf32_bwd, h.m.set_sm90_tf32_bwd128, h.m.set_sm90_tf32_bwd256):
            off(0)
        var = "FA_TF32_BWD_CFG"
        ok = numerics(h, var, CFGS)
        for v, hd in SAME_SUMS.items():
            ok &= same_outputs(h, var, 0, v, hd, ("dk", "dv"), need_bwd=True)
        timings(h, var, True, Ts, BWD_SETS, BWD_DROP_SETS)
    print("ALL CHECKS PASS" if ok else "SOME CHECKS FAILED")


if __name__ == "__main__":
    main()
