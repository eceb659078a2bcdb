"""Kernel-level check and benchmark of the CUDA FlashAttention kernels, without TensorFlow.

Runs on the GPU machine (python3 with torch and pybind11), over the pybind11 module flash_harness
(cc/harness/flash_harness.cc) that benchmarks/build_harness.sh builds there into .harness_build for
that python3; torch tensors are passed to it directly (DLPack):

  bash benchmarks/build_harness.sh    # ARCHS=90 for a quicker build on an H100/H200
  python3 benchmarks/kernel_harness_check.py [--lib DIR] [--out DIR] [--quick] [--no-bench] [--no-check]

1. Numerics: every feature (scale, soft-cap, causal + offset, window, lengths, q/k valid, dense
   mask, bias + dbias, GQA, dropout, d_lse, D != Dv, odd D, fully masked rows), float16 / bfloat16 /
   float32, against a float64 reference computed by torch on the GPU; the same reference run in
   the input precision (unfused torch) gives the error bar: ours <= 2x (forward) / 3x (gradients)
   of that error plus a small floor. Outputs are poisoned with NaN before each run. dtype "tf32":
   float32 inputs with allow_tf32 (TF32 tensor-core kernels), error bar from torch float32 with
   torch.backends.cuda.matmul.allow_tf32 = True; "float32" rows are the full-precision SIMT path.
   --dtypes tf32 --cases d128,gqa runs a subset.
2. Deterministic mode: the backward twice, bitwise equal.
3. Speed: forward / backward TFLOP/s against torch SDPA's FlashAttention-2 and cuDNN backends in
   the same process (FLOPs as in the FlashAttention benchmark: fwd 4 B H Tq Tk D, halved when
   causal; bwd 2.5x fwd).
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

DEV = torch.device("cuda")


class Harness:
    """The pybind11 module `flash_harness` (cc/harness/flash_harness.cc), imported from `path`: the
    build directory (default .harness_build) or a file in it. Torch tensors go in directly (DLPack)."""

    def __init__(self, path):
        d = path if os.path.isdir(path) else os.path.dirname(path)
        d = os.path.abspath(d or ".")
        sys.path.insert(0, d)
        try:
            import flash_harness
        except ImportError as e:
            raise ImportError(f"no flash_harness module for this python in {d} "
                              f"(build it with: bash benchmarks/build_harness.sh): {e}") from e
        finally:
            sys.path.remove(d)
        self.m = flash_harness

    @staticmethod
    def tensors(t, *names):
        """t[name] for each name (None where absent), detached where it requires grad: torch refuses DLPack
        export of those, and the reference may set requires_grad on t["bias"]."""
        xs = [t.get(n) for n in names]
        return [x.detach() if x is not None and x.requires_grad else x for x in xs]

    @classmethod
    def options(cls, c, t):
        """Keyword arguments shared by fwd / bwd / bwd_workspace_bytes for case c and its tensors t."""
        mask, bias, qlen, klen, qvalid, kvalid = cls.tensors(t, "mask", "bias", "qlen", "klen", "qvalid", "kvalid")
        return dict(scale=c.get("scale", 1.0 / math.sqrt(t["q"].shape[3])), softcap=c.get("softcap", 0.0),
                    causal=bool(c.get("causal", False)), causal_offset=c.get("offset", 0),
                    window_left=c.get("wl", -1), window_right=c.get("wr", -1), mask=mask, bias=bias,
                    q_lengths=qlen, k_lengths=klen, q_valid=qvalid, k_valid=kvalid,
                    dropout=c.get("dropout", 0.0), seed=tuple(c.get("seed", (1234, 5678))),
                    allow_tf32=bool(c.get("tf32", False)))

    def fwd(self, c, t):
        self.m.fwd(*self.tensors(t, "q", "k", "v", "o", "lse"), stream=torch.cuda.current_stream().cuda_stream,
                   **self.options(c, t))

    def ws_bytes(self, c, t):
        return self.m.bwd_workspace_bytes(*self.tensors(t, "q", "k", "v"),
                                          deterministic=bool(c.get("deterministic", False)), **self.options(c, t))

    def bwd(self, c, t):
        dbias, ws, dlse = self.tensors(t, "dbias", "ws", "dlse")
        self.m.bwd(*self.tensors(t, "q", "k", "v", "o", "lse", "do", "dq", "dk", "dv"), dbias=dbias, workspace=ws,
                   d_lse=dlse, deterministic=bool(c.get("deterministic", False)),
                   stream=torch.cuda.current_stream().cuda_stream, **self.options(c, t))

    def dropout_keep(self, c, B, H, Tq, Tk, D):
        """Keep mask [B, H, Tq, Tk] from the shared Philox code (host)."""
        out = torch.empty((B, H, Tq, Tk), dtype=torch.uint8)
        self.m.dropout_mask(B, H, Tq, Tk, c["dropout"], tuple(c.get("seed", (1234, 5678))), out=out)
        return out.bool()


# ---------------------------------------------------------------------------------------------
def make_inputs(c, dtype, gen):
    B, Tq, Tk, H, Hkv, D = c["B"], c["Tq"], c["Tk"], c["H"], c.get("Hkv", c["H"]), c["D"]
    Dv = c.get("Dv", D)
    r = lambda *s: torch.randn(*s, device=DEV, generator=gen, dtype=torch.float32)
    t = {"q": r(B, Tq, H, D).to(dtype), "k": r(B, Tk, Hkv, D).to(dtype), "v": r(B, Tk, Hkv, Dv).to(dtype),
         "do": r(B, Tq, H, Dv).to(dtype)}
    if c.get("mask"):  # shape given with 1 for broadcast dims
        shp = [B if c["mask"][0] else 1, H if c["mask"][1] else 1, Tq, Tk]
        m = torch.rand(*shp, device=DEV, generator=gen) > 0.3
        t["mask"] = m.expand(B, H, Tq, Tk)
    if c.get("bias"):
        shp = [B if c["bias"][0] else 1, H if c["bias"][1] else 1, Tq, Tk]
        t["bias"] = r(*shp).to(dtype).expand(B, H, Tq, Tk)
    if c.get("qlen"):
        t["qlen"] = torch.randint(0, Tq + 1, (B,), device=DEV, generator=gen, dtype=torch.int32)
        t["qlen"][0] = Tq
    if c.get("klen"):
        t["klen"] = torch.randint(0, Tk + 1, (B,), device=DEV, generator=gen, dtype=torch.int32)
        t["klen"][0] = Tk
    if c.get("qvalid"):
        t["qvalid"] = torch.rand(B, Tq, device=DEV, generator=gen) > 0.2
    if c.get("kvalid"):
        t["kvalid"] = torch.rand(B, Tk, device=DEV, generator=gen) > 0.2
    if c.get("dlse"):
        t["dlse"] = r(B, H, Tq)
    return t


def reference(c, t, dtype, keep):
    """Unfused attention in `dtype` (float64 for the reference), with autograd."""
    q, k, v = (t[n].to(dtype).detach().requires_grad_() for n in ("q", "k", "v"))
    B, Tq, H, D = q.shape
    Tk, Hkv = k.shape[1], k.shape[2]
    G = H // Hkv
    scale = c.get("scale", 1.0 / math.sqrt(D))
    qh = q.permute(0, 2, 1, 3)
    kh = k.permute(0, 2, 1, 3).repeat_interleave(G, 1)
    vh = v.permute(0, 2, 1, 3).repeat_interleave(G, 1)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if c.get("softcap", 0.0):
        s = c["softcap"] * torch.tanh(s / c["softcap"])
    bias = None
    if t.get("bias") is not None:
        bias = t["bias"].to(dtype).contiguous().requires_grad_()
        s = s + bias
    i = torch.arange(Tq, device=DEV)[:, None]
    j = torch.arange(Tk, device=DEV)[None, :]
    d = i + c.get("offset", 0)
    vis = torch.ones(Tq, Tk, dtype=torch.bool, device=DEV)
    if c.get("causal"):
        vis &= j <= d
    if c.get("wl", -1) >= 0:
        vis &= j >= d - c["wl"]
    if c.get("wr", -1) >= 0:
        vis &= j <= d + c["wr"]
    vis = vis[None, None].expand(B, H, Tq, Tk).clone()
    if t.get("qlen") is not None:
        vis &= (i[None, None] < t["qlen"].long()[:, None, None, None])
    if t.get("klen") is not None:
        vis &= (j[None, None] < t["klen"].long()[:, None, None, None])
    if t.get("qvalid") is not None:
        vis &= t["qvalid"][:, None, :, None]
    if t.get("kvalid") is not None:
        vis &= t["kvalid"][:, None, None, :]
    if t.get("mask") is not None:
        vis &= t["mask"]
    sm = s.masked_fill(~vis, float("-inf"))
    mx = sm.amax(-1, keepdim=True).detach()
    mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
    e = torch.exp(sm - mx)
    den = e.sum(-1, keepdim=True)
    p = e / torch.where(den > 0, den, torch.ones_like(den))
    lse = torch.where(den > 0, torch.log(den) + mx, torch.full_like(den, float("-inf")))[..., 0]
    lse_g = (torch.log(torch.where(den > 0, den, torch.ones_like(den))) + mx)[..., 0]
    if keep is not None:
        p = p * (keep.to(dtype) / (1.0 - c["dropout"]))
    o = torch.matmul(p, vh).permute(0, 2, 1, 3)
    loss = (o * t["do"].to(dtype)).sum()
    if t.get("dlse") is not None:
        loss = loss + (lse_g * t["dlse"].to(dtype)).sum()
    grads = torch.autograd.grad(loss, [q, k, v] + ([bias] if bias is not None else []))
    out = {"o": o.detach(), "lse": lse.detach().float(), "dq": grads[0], "dk": grads[1], "dv": grads[2]}
    if bias is not None:
        out["dbias"] = grads[3]
    return out


def run_ours(h, c, t, need_bwd=True):
    q = t["q"]
    B, Tq, H, D = q.shape
    Dv = t["v"].shape[3]
    t["o"] = torch.full((B, Tq, H, Dv), float("nan"), device=DEV, dtype=q.dtype)
    t["lse"] = torch.full((B, H, Tq), float("nan"), device=DEV)
    h.fwd(c, t)
    if not need_bwd:
        return
    t["dq"] = torch.full_like(q, float("nan"))
    t["dk"] = torch.full_like(t["k"], float("nan"))
    t["dv"] = torch.full_like(t["v"], float("nan"))
    if t.get("bias") is not None:
        t["dbias"] = torch.full((B, H, Tq, t["k"].shape[1]), float("nan"), device=DEV)
    t["ws"] = torch.empty(max(h.ws_bytes(c, t), 4) // 4, device=DEV)
    h.bwd(c, t)


def err(a, ref):
    a = a.double()
    ref = ref.double()
    fin = torch.isfinite(ref)
    if not torch.equal(torch.isfinite(a), fin):
        return float("inf"), float("inf")
    if not bool(fin.any()):
        return 0.0, 0.0
    da = (a[fin] - ref[fin]).abs()
    return float(da.max()), float(da.norm() / max(float(ref[fin].norm()), 1e-30))


# Cases also run in deterministic mode (bitwise repeat checked), for every dtype / for tf32 only.
DET_CASES = ("valid_mask_bias", "dropout_all", "d128_causal_ragged", "basic")
TF32_DET_CASES = ("d256_kvcache", "d59_dv111", "softcap_bias_dlse", "gqa_mqa_lengths", "d192_gqa_window",
                  "d32_t1", "d80_tk1", "empty_rows", "tf32_d128_window")

CASES = [
    dict(name="basic", B=2, Tq=256, Tk=256, H=4, D=64),
    dict(name="d128_causal_ragged", B=1, Tq=203, Tk=1023, H=2, D=128, causal=True),
    dict(name="d128_causal_ragged_rev", B=1, Tq=1023, Tk=203, H=2, D=128, causal=True),
    dict(name="d256_kvcache", B=2, Tq=113, Tk=1024, H=2, D=256, causal=True, offset=1024 - 113),
    dict(name="d59_dv111", B=2, Tq=113, Tk=203, H=2, D=59, Dv=111),
    dict(name="d32_t1", B=3, Tq=1, Tk=17, H=2, D=32),
    dict(name="d80_tk1", B=2, Tq=203, Tk=1, H=2, D=80),
    dict(name="d192_gqa_window", B=2, Tq=512, Tk=512, H=8, Hkv=2, D=192, wl=64, wr=16),
    dict(name="gqa_mqa_lengths", B=3, Tq=300, Tk=257, H=4, Hkv=1, D=64, qlen=True, klen=True, causal=True),
    dict(name="valid_mask_bias", B=2, Tq=200, Tk=190, H=3, D=64, qvalid=True, kvalid=True,
         mask=(1, 0), bias=(0, 1)),
    dict(name="softcap_bias_dlse", B=2, Tq=129, Tk=300, H=2, D=128, softcap=20.0, bias=(1, 1), dlse=True,
         scale=0.3),
    dict(name="dropout", B=2, Tq=128, Tk=200, H=2, D=64, dropout=0.15, causal=True),
    dict(name="dropout_all", B=2, Tq=97, Tk=150, H=4, Hkv=2, D=111, dropout=0.1, bias=(1, 1), mask=(1, 1),
         softcap=30.0, wl=40, causal=True, offset=20, qlen=True),
    dict(name="empty_rows", B=2, Tq=64, Tk=64, H=2, D=64, causal=True, offset=-20),
    dict(name="big_d128", B=1, Tq=4096, Tk=4096, H=4, D=128, causal=True),
    dict(name="big_d64_1024", B=2, Tq=1024, Tk=4096, H=4, D=64),
    # Shapes that stress the TF32 tiles (BK 16/32/64, 16-row m-tiles, column splits at HD 256).
    dict(name="tf32_d128_window", B=2, Tq=1023, Tk=1024, H=3, D=128, wl=300, causal=True, offset=1),
    dict(name="tf32_d256_gqa_dropout", B=1, Tq=203, Tk=113, H=4, Hkv=2, D=256, Dv=200, dropout=0.2, dlse=True),
    dict(name="tf32_d17_t1", B=2, Tq=17, Tk=1, H=2, D=17, Dv=9),
    dict(name="tf32_d64_bias_bcast_mask", B=2, Tq=113, Tk=203, H=2, D=64, bias=(0, 0), mask=(0, 1), kvalid=True),
]


def check_numerics(h, dtypes, cases, log):
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(0)
    for c in cases:
        for dt_name in dtypes:
            # "tf32": float32 tensors with allow_tf32 (TF32 tensor cores); its error bar is torch's
            # float32 reference with TF32 matmuls (torch.backends.cuda.matmul.allow_tf32 = True).
            tf32 = dt_name == "tf32"
            dt = torch.float32 if tf32 else dt_name
            for det in ((False, True) if dt != torch.float32 or tf32 else (False,)):
                c2 = dict(c, deterministic=det, tf32=tf32)
                if det and c["name"] not in DET_CASES and not (tf32 and c["name"] in TF32_DET_CASES):
                    continue
                t = make_inputs(c2, dt, gen)
                keep = None
                if c.get("dropout"):
                    keep = h.dropout_keep(c2, c["B"], c["H"], c["Tq"], c["Tk"], c["D"]).to(DEV)
                run_ours(h, c2, t)
                torch.cuda.synchronize()
                ref = reference(c2, t, torch.float64, keep)
                low = None
                if tf32:
                    prev = torch.backends.cuda.matmul.allow_tf32
                    torch.backends.cuda.matmul.allow_tf32 = True
                    try:
                        low = reference(c2, t, torch.float32, keep)
                    finally:
                        torch.backends.cuda.matmul.allow_tf32 = prev
                elif dt != torch.float32:
                    low = reference(c2, t, dt, keep)
                row = {"case": c["name"], "dtype": "tf32" if tf32 else str(dt).split(".")[-1], "det": det}
                ok = True
                for name in ("o", "lse", "dq", "dk", "dv", "dbias"):
                    if name not in ref:
                        continue
                    mine = t[name]
                    e_ours = err(mine, ref[name])
                    e_low = err(low[name], ref[name]) if low is not None else (0.0, 0.0)
                    fac = 2.0 if name in ("o", "lse") else 3.0
                    floor = {torch.float32: 2e-4, torch.float16: 2e-3, torch.bfloat16: 1e-2}[dt]
                    if name == "dbias":
                        floor *= 0.1
                    if tf32:
                        # torch's TF32 reference is no reliable error bar: cuBLAS runs some shapes
                        # (k = 1, some backward products) in full float32, and a gradient that is 0
                        # in exact arithmetic (Tk = 1: dS = P (dP - Dsum) with P = 1) is left with
                        # the TF32 error of dP - Dsum summed over the queries. Fixed floors sized for
                        # a 10-bit mantissa instead (a layout bug gives O(1) errors).
                        floor = {"o": 2e-3, "lse": 2e-3, "dbias": 1e-2}.get(name, 1.5e-2)
                    bound = fac * e_low[0] + floor * max(1.0, float(ref[name][torch.isfinite(ref[name])].abs().max()) if bool(torch.isfinite(ref[name]).any()) else 1.0)
                    good = e_ours[0] <= bound
                    ok &= good
                    row[name] = dict(max=e_ours[0], rel=e_ours[1], torch_max=e_low[0], torch_rel=e_low[1],
                                     ok=good)
                if det:
                    first = {n: t[n].clone() for n in ("dq", "dk", "dv") + (("dbias",) if "dbias" in t else ())}
                    h.bwd(c2, t)
                    torch.cuda.synchronize()
                    row["bitwise_repeat"] = all(torch.equal(first[n], t[n]) for n in first)
                    ok &= row["bitwise_repeat"]
                row["ok"] = ok
                rows.append(row)
                brief = " ".join(f"{n}={row[n]['max']:.2e}/{row[n]['torch_max']:.2e}" for n in
                                 ("o", "lse", "dq", "dk", "dv", "dbias") if n in row)
                print(f"{'PASS' if ok else 'FAIL'} {c['name']:<24} {row['dtype']:<9} det={int(det)} {brief}",
                      file=log, flush=True)
                del t, ref, low
    return rows


def torch_sdpa_ms(t, causal, names=("flash", "cudnn")):
    """Milliseconds of PyTorch's SDPA backends (flash: FlashAttention-2, cudnn) on the inputs of
    make_inputs: {name}_fwd_ms, {name}_bwd_ms (or {name}_error)."""
    import triton.testing as tt
    from torch.nn.attention import sdpa_kernel, SDPBackend
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    r = {}
    qh, kh, vh = (x.permute(0, 2, 1, 3).contiguous().requires_grad_() for x in (t["q"], t["k"], t["v"]))
    for name in names:
        try:
            with sdpa_kernel(backends[name]):
                f = lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
                o = f()
                r[f"{name}_fwd_ms"] = tt.do_bench(f, warmup=25, rep=100, return_mode="median")
                do = torch.randn_like(o)
                fb = lambda: torch.autograd.grad(o, (qh, kh, vh), do, retain_graph=True)
                r[f"{name}_bwd_ms"] = tt.do_bench(fb, warmup=25, rep=100, return_mode="median")
        except Exception as e:  # noqa
            r[f"{name}_error"] = str(e)[:100]
    return r


def bench(h, log, quick, extra_only=False):
    import triton.testing as tt
    rows = []
    shapes = []
    for D in (() if extra_only else (64, 128, 256)):
        Hh = 2048 // D
        for T in ((16384,) if quick else (512, 4096, 16384)):  # 512: where the op trails FA2 most
            for causal in (False, True):
                shapes.append((16384 // T, T, Hh, D, causal))
    for (B, T, H, D, causal) in shapes:
        fl = 4 * B * H * T * T * D / (2 if causal else 1)
        c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=causal)
        gen = torch.Generator(device=DEV)
        gen.manual_seed(1)
        t = make_inputs(c, torch.bfloat16, gen)
        run_ours(h, c, t)
        r = dict(B=B, T=T, H=H, D=D, causal=causal)
        r["ours_fwd_ms"] = tt.do_bench(lambda: h.fwd(c, t), warmup=25, rep=100, return_mode="median")
        r["ours_bwd_ms"] = tt.do_bench(lambda: h.bwd(c, t), warmup=25, rep=100, return_mode="median")
        r.update(torch_sdpa_ms(t, causal))
        for k in list(r):
            if k.endswith("_fwd_ms"):
                r[k.replace("_ms", "_tflops")] = round(fl / r[k] / 1e9, 1)
            if k.endswith("_bwd_ms"):
                r[k.replace("_ms", "_tflops")] = round(2.5 * fl / r[k] / 1e9, 1)
        rows.append(r)
        print("BENCH " + json.dumps(r), file=log, flush=True)
        del t
    # deterministic backward, float32 (SIMT) and float32 on TF32 tensor cores (D 128, T 16k)
    extra = []
    for (dt, det, T, tf32, causal) in ((torch.bfloat16, True, 4096, False, False), (torch.float32, False, 4096, False, False),
                                       (torch.float32, False, 16384, True, False), (torch.float32, False, 16384, True, True),
                                       (torch.float32, True, 16384, True, False)):
        c = dict(B=1, Tq=T, Tk=T, H=16, D=128, causal=causal, deterministic=det, tf32=tf32)
        gen = torch.Generator(device=DEV)
        gen.manual_seed(2)
        t = make_inputs(c, dt, gen)
        run_ours(h, c, t)
        fl = 4 * T * T * 16 * 128 / (2 if causal else 1)
        fms = tt.do_bench(lambda: h.fwd(c, t), warmup=5, rep=50, return_mode="median")
        bms = tt.do_bench(lambda: h.bwd(c, t), warmup=5, rep=50, return_mode="median")
        e = dict(dtype="tf32" if tf32 else str(dt), det=det, T=T, D=128, causal=causal, fwd_tflops=round(fl / fms / 1e9, 1),
                 bwd_tflops=round(2.5 * fl / bms / 1e9, 1))
        extra.append(e)
        print("BENCH " + json.dumps(e), file=log, flush=True)
    return rows, extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default=".harness_build", help="directory of the built flash_harness module")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dtypes", default="bf16,fp16,fp32,tf32",
                    help="comma list of bf16, fp16, fp32 (SIMT), tf32 (float32 on TF32 tensor cores)")
    ap.add_argument("--cases", default="", help="comma list of substrings of case names (default: all)")
    ap.add_argument("--tf32-bench-only", action="store_true", help="only the float32 / tf32 timing rows")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    h = Harness(os.path.abspath(args.lib))
    log = sys.stdout
    res = {}
    t0 = time.time()
    if not args.no_check:
        names = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": "tf32"}
        dts = tuple(names[x] for x in args.dtypes.split(","))
        cases = [c for c in CASES if not args.cases or any(x in c["name"] for x in args.cases.split(","))]
        res["numerics"] = check_numerics(h, dts, cases, log)
        print(f"numerics: {sum(r['ok'] for r in res['numerics'])}/{len(res['numerics'])} pass "
              f"({time.time() - t0:.0f} s)", flush=True)
    if not args.no_bench:
        res["bench"], res["bench_extra"] = bench(h, log, args.quick, args.tf32_bench_only)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "kernel_harness_check.json"), "w") as f:
        json.dump(res, f, indent=1)
    if "bench" in res:
        print(f"{'B':>2} {'T':>6} {'H':>3} {'D':>4} {'causal':>6} | fwd ours/flash/cudnn TFLOP/s | bwd ours/flash/cudnn")
        for r in res["bench"]:
            print(f"{r['B']:>2} {r['T']:>6} {r['H']:>3} {r['D']:>4} {str(r['causal']):>6} | "
                  f"{r.get('ours_fwd_tflops')}/{r.get('flash_fwd_tflops')}/{r.get('cudnn_fwd_tflops')} | "
                  f"{r.get('ours_bwd_tflops')}/{r.get('flash_bwd_tflops')}/{r.get('cudnn_bwd_tflops')}")
    if "numerics" in res:
        bad = [f"{r['case']}/{r['dtype']}/det{int(r['det'])}" for r in res["numerics"] if not r["ok"]]
        print("FAILED:", bad if bad else "none")


if __name__ == "__main__":
    main()
