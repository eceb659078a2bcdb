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

--decode runs only the decoding path's section (issue 14, cc/kernels/sm80/flash_decode.cu), about a
minute on an H200:
  python3 benchmarks/kernel_harness_check.py --decode [--dtypes bf16,fp16,fp32,tf32] [--cases dec_g4]
      [--quick] [--no-check] [--no-bench] [--out DIR]
1. Numerics (DECODE_CASES: Tq 1 to 16 and a forced 40, odd Tk, GQA ratios 1/4/8 and MQA, every mask
   kind, odd / large head dims, misaligned and strided tensors, a NaN cache tail past k_lengths):
   the decoding path unsplit, with forced and automatic splits, decode auto and off, each against
   the float64 reference with check_numerics' error bar, outputs and workspace poisoned with NaN,
   the path taken checked (decode_plan, workspace size), a split run repeated bitwise.
2. Speed: K+V GB/s of ours, the tiled kernels (decode off), FlashAttention-2 and cuDNN at the
   issue's shapes (D = 128, Tq 1/4/16, bf16 and fp16), GPU time by CUDA events with the L2 emptied
   before each call; the 0.9x-FA2 bar; a sweep of forced split counts at the bar shapes.
   JSON in OUT/kernel_harness_decode.json.
--decode --dry-run runs that section's Python on the CPU against a reference stand-in (no GPU).
"""
import argparse
import contextlib
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

    @staticmethod
    def decode_options(c):
        """The forward's decoding-path settings of case c: decode (-1 off, 0 auto, 1 on), num_splits (0 auto)."""
        return dict(decode=int(c.get("decode", 0)), num_splits=int(c.get("splits", 0)))

    def fwd(self, c, t):
        self.m.fwd(*self.tensors(t, "q", "k", "v", "o", "lse"), stream=torch.cuda.current_stream().cuda_stream,
                   workspace=t.get("fws"), **self.decode_options(c), **self.options(c, t))

    def fwd_ws_bytes(self, c, t):
        return self.m.fwd_workspace_bytes(*self.tensors(t, "q", "k", "v"), **self.decode_options(c),
                                          **self.options(c, t))

    def decode_plan(self, c, t):
        return self.m.decode_plan(*self.tensors(t, "q", "k", "v"), **self.decode_options(c), **self.options(c, t))

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

    def case_keep(self, c):
        """Case c's keep mask [B, H, Tq, Tk] on the device (dropout_keep with its sizes), None without dropout."""
        if not c.get("dropout"):
            return None
        return self.dropout_keep(c, c["B"], c["H"], c["Tq"], c["Tk"], c["D"]).to(DEV)


def dropout_keep_scale(rate):
    """The kernels' keep scale (flash_params.h): float32 65536 / (65536 - t16), t16 = min(round(rate *
    65536), 65535) of the float32 rate."""
    r = float(torch.tensor(rate, dtype=torch.float32))
    t16 = 0 if r <= 0 else int(min(math.floor(r * 65536.0 + 0.5), 65535))
    return float(torch.tensor(65536.0 / (65536.0 - t16), dtype=torch.float32))


# ---------------------------------------------------------------------------------------------
def make_inputs(c, dtype, gen):
    B, Tq, Tk, H, Hkv, D = c["B"], c["Tq"], c["Tk"], c["H"], c.get("Hkv", c["H"]), c["D"]
    Dv = c.get("Dv", D)
    r = lambda *s: torch.randn(*s, device=DEV, generator=gen, dtype=torch.float32)
    t = {"q": r(B, Tq, H, D).to(dtype), "k": r(B, Tk, Hkv, D).to(dtype), "v": r(B, Tk, Hkv, Dv).to(dtype),
         "do": r(B, Tq, H, Dv).to(dtype)}
    # mask / bias: (batch, head[, key]) flags, 0 for a dimension broadcast (size 1, stride 0 after the
    # expand); the key dimension is present unless a third flag says 0.
    def dense_shape(f):
        return [B if f[0] else 1, H if f[1] else 1, Tq, Tk if len(f) < 3 or f[2] else 1]
    if c.get("mask"):
        m = torch.rand(*dense_shape(c["mask"]), device=DEV, generator=gen) > 0.3
        t["mask"] = m.expand(B, H, Tq, Tk)
    if c.get("bias"):
        t["bias"] = r(*dense_shape(c["bias"])).to(dtype).expand(B, H, Tq, Tk)
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


def index_visibility(c, t):
    """[B, Tq, Tk] bool: what each row sees by index (causal, window, lengths; no validity masks)."""
    B, Tq = t["q"].shape[:2]
    Tk = t["k"].shape[1]
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
    vis = vis[None].expand(B, Tq, Tk).clone()
    if t.get("qlen") is not None:
        vis &= i[None] < t["qlen"].long()[:, None, None]
    if t.get("klen") is not None:
        vis &= j[None] < t["klen"].long()[:, None, None]
    return vis


@contextlib.contextmanager
def tf32_matmuls():
    """torch's float32 matmuls on TF32 tensor cores inside the block (torch.backends.cuda.matmul.allow_tf32),
    the setting restored after it."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


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
    vis = index_visibility(c, t)[:, None].expand(B, H, Tq, Tk).clone()
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
        p = p * (keep.to(dtype) * dropout_keep_scale(c["dropout"]))
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


def same_bits(x, y):
    """x and y hold the same bits (NaN included)."""
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    return bool(torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)))


def print_ab_times(log, rows_a, rows_b, ms_key, label, extra=lambda r: ""):
    """Two builds' timing rows side by side (sm90_check.py densecmp, sm90_bwd_check.py splitdcmp): per row
    label(row) | build a's timings | build b's | b / a of their best | extra(row of a), and a note where
    either build's run did not take the sm90 path."""
    for ra, rb in zip(rows_a, rows_b):
        ma, mb = min(ra[ms_key]), min(rb[ms_key])
        taken = ra["sm90_path_taken"] and rb["sm90_path_taken"]
        print(f"  {label(ra)} | {' '.join(f'{x:.3f}' for x in ra[ms_key])} | {' '.join(f'{x:.3f}' for x in rb[ms_key])}"
              f" | {mb / ma:.3f}{extra(ra)}{'' if taken else '  (sm90 NOT taken)'}", file=log, flush=True)


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
                keep = h.case_keep(c2)
                run_ours(h, c2, t)
                torch.cuda.synchronize()
                ref = reference(c2, t, torch.float64, keep)
                low = None
                if tf32:
                    with tf32_matmuls():
                        low = reference(c2, t, torch.float32, keep)
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


def bench_ms(fn, reps=10):
    """Milliseconds per call of fn: triton's do_bench (median of single calls, each after an L2 flush), or with
    HARNESS_TIMING=loop gpu_attention.py's method (2 warm-up calls, then `reps` back to back between two CUDA
    events: warm caches, no gaps), to set the harness's figures beside those measured through TensorFlow."""
    if os.environ.get("HARNESS_TIMING", "do_bench") != "loop":
        import triton.testing as tt
        return tt.do_bench(fn, warmup=25, rep=100, return_mode="median")
    return loop_ms(fn, reps)


def loop_ms(fn, reps=10):
    """gpu_attention.py's timing of fn: 2 warm-up calls, then `reps` back to back between two CUDA events;
    milliseconds per call."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def torch_sdpa_ms(t, causal, names=("flash", "cudnn")):
    """Milliseconds of PyTorch's SDPA backends (flash: FlashAttention-2, cudnn) on the inputs of
    make_inputs: {name}_fwd_ms, {name}_bwd_ms (or {name}_error)."""
    from torch.nn.attention import sdpa_kernel, SDPBackend
    backends = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    r = {}
    qh, kh, vh = (x.permute(0, 2, 1, 3).contiguous().requires_grad_() for x in (t["q"], t["k"], t["v"]))
    for name in names:
        try:
            with sdpa_kernel(backends[name]):
                f = lambda: F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal)
                o = f()
                r[f"{name}_fwd_ms"] = bench_ms(f)
                do = torch.randn_like(o)
                fb = lambda: torch.autograd.grad(o, (qh, kh, vh), do, retain_graph=True)
                r[f"{name}_bwd_ms"] = bench_ms(fb)
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



# ---------------------------------------------------------------------------------------------
# Decoding path (issue 14, cc/kernels/sm80/flash_decode.cu): a few query rows against many keys, the
# keys split across CTAs and the splits merged by their log-sum-exp.

# (decode, num_splits) runs of each case: the decoding path unsplit, with forced splits (2 and 5,
# clamped to the 16-key tiles of Tk) and with the automatic count; decode=0 (auto: the decoding
# path when Tq <= 16); the tiled kernels (decode=-1).
DECODE_RUNS = ((1, 1), (1, 2), (1, 5), (1, 0), (0, 0), (-1, 0))

DECODE_CASES = [
    dict(name="dec_g4_t1", B=2, Tq=1, Tk=1000, H=8, Hkv=2, D=128),
    dict(name="dec_g1_t3", B=3, Tq=3, Tk=257, H=4, Hkv=4, D=64),
    dict(name="dec_g8_t16", B=1, Tq=16, Tk=517, H=16, Hkv=2, D=128),
    dict(name="dec_kvcache_klen_tail", B=3, Tq=5, Tk=1031, H=8, Hkv=2, D=128, causal=True, offset=1031 - 5, klen=True,
         nan_tail=True),
    dict(name="dec_window_causal", B=2, Tq=7, Tk=733, H=4, Hkv=1, D=64, causal=True, offset=733 - 7, wl=100, wr=3),
    dict(name="dec_window_lr", B=2, Tq=4, Tk=601, H=8, Hkv=2, D=128, offset=300, wl=50, wr=20),
    dict(name="dec_qlen_qvalid_kvalid", B=3, Tq=6, Tk=333, H=8, Hkv=2, D=128, qlen=True, qvalid=True, kvalid=True),
    dict(name="dec_mask_bias_bcast", B=2, Tq=2, Tk=299, H=8, Hkv=2, D=128, mask=(1, 0), bias=(0, 1)),
    dict(name="dec_softcap_bias_scale", B=2, Tq=3, Tk=411, H=4, Hkv=2, D=128, softcap=20.0, bias=(1, 1), scale=0.3),
    dict(name="dec_negative_scale", B=1, Tq=2, Tk=130, H=4, Hkv=1, D=64, scale=-0.2),
    dict(name="dec_d59_dv111", B=2, Tq=2, Tk=100, H=4, Hkv=2, D=59, Dv=111),
    dict(name="dec_d256", B=2, Tq=4, Tk=300, H=8, Hkv=2, D=256),
    dict(name="dec_d192_dv64_causal", B=1, Tq=3, Tk=250, H=4, Hkv=1, D=192, Dv=64, causal=True, offset=247),
    dict(name="dec_d32_tk1", B=3, Tq=1, Tk=1, H=2, Hkv=1, D=32),
    dict(name="dec_empty_rows", B=2, Tq=8, Tk=17, H=4, Hkv=2, D=64, causal=True, offset=-3),
    dict(name="dec_unaligned", B=2, Tq=3, Tk=200, H=8, Hkv=2, D=64, unaligned=True),
    dict(name="dec_strided_cache_tail", B=2, Tq=1, Tk=2000, H=16, Hkv=2, D=128, strided=True, klen=True,
         nan_tail=True),
    dict(name="dec_long_auto", B=1, Tq=1, Tk=20000, H=8, Hkv=2, D=128),
    dict(name="dec_mqa_d80", B=2, Tq=2, Tk=999, H=8, Hkv=1, D=80),
    dict(name="dec_forced_tq40", B=1, Tq=40, Tk=300, H=4, Hkv=2, D=64, causal=True, offset=260),
]

# B, Tk, H, Hkv of the timing rows (D = 128): the four bar shapes, then Tk 1024 and 2048.
DECODE_BENCH_SHAPES = ((8, 8192, 32, 8), (8, 32768, 32, 8), (1, 131072, 32, 8), (64, 4096, 32, 32),
                       (8, 1024, 32, 8), (8, 2048, 32, 8))
DECODE_BAR_SHAPES = DECODE_BENCH_SHAPES[:4]
DECODE_SWEEP_SPLITS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 0)


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def misalign(x):
    """x's values at a data pointer one element past an allocation (16-byte aligned): the element-load path."""
    buf = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
    y = buf[1:].view(x.shape)
    y.copy_(x)
    return y


def in_cache(x, pad_t=7, pad_d=8):
    """x [B, T, Hk, D] as the [:, :T, :, :D] slice of a larger NaN-filled buffer (a cache with strides of
    its own): a read outside the slice shows up as NaN."""
    B, T, Hk, D = x.shape
    big = torch.full((B, T + pad_t, Hk, D + pad_d), float("nan"), dtype=x.dtype, device=x.device)
    y = big[:, :T, :, :D]
    y.copy_(x)
    return y


def poison_tail(t):
    """NaN in k and v past each batch's k_length (a cache's unfilled tail): the decoding path reads only
    the keys its rows see. (The tiled kernels read whole key tiles, so a NaN there reaches them.)"""
    for b, n in enumerate(t["klen"].tolist()):
        t["k"][b, n:] = float("nan")
        t["v"][b, n:] = float("nan")


def run_decode(h, c, t):
    """Forward of case c into NaN-poisoned o (misaligned like q/k/v for `unaligned`) and lse, with a
    NaN-poisoned workspace of fwd_workspace_bytes: every partial result read must have been written."""
    B, Tq, H, _ = t["q"].shape
    Dv = t["v"].shape[3]
    o = torch.full((B, Tq, H, Dv), float("nan"), dtype=t["q"].dtype, device=DEV)
    t["o"] = misalign(o) if c.get("unaligned") else o
    t["lse"] = torch.full((B, H, Tq), float("nan"), device=DEV)
    nbytes = h.fwd_ws_bytes(c, t)
    t["fws"] = torch.full(((nbytes + 3) // 4,), float("nan"), device=DEV) if nbytes else None
    h.fwd(c, t)
    sync()
    return nbytes


def check_decode(h, dt_names, cases, log):
    """Each case and dtype: every run of DECODE_RUNS against the float64 reference (bound: 2x the error of
    torch's unfused attention in the input precision + a floor, as check_numerics), the path taken (the
    decoding path where expected, forced splits as asked, a workspace exactly when it splits), a forced
    5-split run repeated bitwise, and the decoding path against itself unsplit and against the tiled
    kernels."""
    rows = []
    gen = torch.Generator(device=DEV)
    gen.manual_seed(3)
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32}
    floors = {"bf16": 1e-2, "fp16": 2e-3, "fp32": 2e-4, "tf32": 2e-3}  # tf32: the tiled run is TF32
    for c in cases:
        for dn in dt_names:
            dt = dtypes[dn]
            cd = dict(c, tf32=dn == "tf32")
            t = make_inputs(cd, dt, gen)
            if c.get("unaligned"):
                for n in ("q", "k", "v"):
                    t[n] = misalign(t[n])
            if c.get("strided"):
                t["k"], t["v"] = in_cache(t["k"]), in_cache(t["v"])
            ref = reference(cd, t, torch.float64, None)
            low = reference(cd, t, dt, None) if dt != torch.float32 else None
            if c.get("nan_tail"):
                poison_tail(t)
            bound = {}
            for name in ("o", "lse"):
                fin = torch.isfinite(ref[name])
                big = max(1.0, float(ref[name][fin].abs().max())) if bool(fin.any()) else 1.0
                e_low = err(low[name], ref[name])[0] if low is not None else 0.0
                bound[name] = 2.0 * e_low + floors[dn] * big
            tiles = -(-c["Tk"] // 16)
            row = {"case": c["name"], "dtype": dn, "bound_o": bound["o"], "bound_lse": bound["lse"], "runs": {}}
            ok = True
            outs = {}
            for dec, sp in DECODE_RUNS:
                if dec == -1 and c.get("nan_tail"):
                    continue
                c2 = dict(cd, decode=dec, splits=sp)
                plan = h.decode_plan(c2, t)
                nbytes = run_decode(h, c2, t)
                run = {"ws_bytes": nbytes, "applies": plan["applies"], "splits": plan["splits"]}
                good = True
                for name in ("o", "lse"):
                    run[name] = err(t[name], ref[name])[0]
                    good &= run[name] <= bound[name]
                path = plan["applies"] == (dec == 1 or (dec == 0 and c["Tq"] <= 16))
                if plan["applies"] and sp >= 1:
                    path &= plan["splits"] == max(1, min(sp, tiles, 256))
                    path &= (nbytes > 0) == (plan["splits"] > 1)
                if plan["applies"] and plan["splits"] > 1:
                    path &= nbytes > 0
                if not plan["applies"]:
                    path &= nbytes == 0
                run["path_ok"] = bool(path)
                good &= path
                if (dec, sp) == (1, 5):
                    first = (t["o"].clone(), t["lse"].clone())
                    run_decode(h, c2, t)
                    run["bitwise_repeat"] = bool(torch.equal(first[0], t["o"]) and torch.equal(first[1], t["lse"]))
                    good &= run["bitwise_repeat"]
                run["ok"] = bool(good)
                ok &= good
                outs[(dec, sp)] = t["o"].double()
                row["runs"][f"{dec},{sp}"] = run
            for key in ((1, 5), (-1, 0)):
                if (1, 1) in outs and key in outs:
                    d = float((outs[key] - outs[(1, 1)]).abs().max()) if outs[key].numel() else 0.0
                    row[f"diff_{key[0]},{key[1]}_vs_1,1"] = d
                    ok &= d <= 2 * bound["o"]  # NaN fails
            row["ok"] = bool(ok)
            rows.append(row)
            worst = max(row["runs"].values(), key=lambda r: r["o"] / max(bound["o"], 1e-30))
            auto = row["runs"].get("1,0", {}).get("splits")
            bad = [k for k, r in row["runs"].items() if not r["ok"]]
            print(f"{'PASS' if ok else 'FAIL'} {c['name']:<26} {dn:<5} o={worst['o']:.2e} (bound {bound['o']:.2e}) "
                  f"lse={max(r['lse'] for r in row['runs'].values()):.2e} auto_splits={auto} "
                  f"split/unsplit={row.get('diff_1,5_vs_1,1', float('nan')):.1e} "
                  f"tiled/decode={row.get('diff_-1,0_vs_1,1', float('nan')):.1e}"
                  + (f" failed runs (decode,splits): {bad}" if bad else ""), file=log, flush=True)
            del t, ref, low, outs
    return rows


_FLUSH = {}


def gpu_time_us(fn, reps=30, warmup=3):
    """Median time of fn in microseconds: on the GPU, CUDA events around each call, each call after a read
    of 256 MiB (the L2 emptied of K/V, and clean: nothing left to write back during the call) and a GPU sleep
    (~0.1 ms, so the host has enqueued the call before the GPU reaches it). On the CPU (--dry-run), host time."""
    if DEV.type != "cuda":
        fn()
        t0 = time.perf_counter()
        for _ in range(3):
            fn()
        return (time.perf_counter() - t0) / 3 * 1e6
    if "buf" not in _FLUSH:
        _FLUSH["buf"] = torch.ones(64 << 20, dtype=torch.float32, device=DEV)
    buf = _FLUSH["buf"]
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        buf.sum()
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(200000)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in events)
    return 1e3 * times[len(times) // 2]


def sdpa_call(name, qh, kh, vh):
    """(fn, gqa) running torch SDPA's backend `name` (flash: FlashAttention-2, cudnn) on [B, H, T, D] tensors:
    GQA through enable_gqa ("native"), or with K/V repeated to H heads ("repeat", more bytes read than the
    K+V figure counts) where the backend refuses it. Raises when the backend cannot run."""
    from torch.nn.attention import sdpa_kernel, SDPBackend
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[name]
    G = qh.shape[1] // kh.shape[1]

    def native():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=G > 1)
    try:
        native()
        return native, ("native" if G > 1 else "-")
    except Exception:  # noqa: BLE001 (the backend's refusal, whatever its type)
        if G == 1:
            raise
    kr, vr = kh.repeat_interleave(G, 1), vh.repeat_interleave(G, 1)

    def repeated():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qh, kr, vr)
    repeated()
    return repeated, "repeat"


def bench_decode(h, log, dt_names, tqs, shapes, sweep_shapes=DECODE_BAR_SHAPES):
    """GB/s of K and V (2 B Tk Hkv D bytes per call) of ours (decode auto), the tiled kernels (decode=-1),
    FlashAttention-2 and cuDNN (torch SDPA) at D = 128, no mask; the largest |ours - torch| per backend as
    a sanity check; at the bar shapes (bf16, Tq = 1) a sweep of forced split counts; one float32 row."""
    rows, sweeps = [], []
    D = 128
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    for dn in dt_names:
        dt = dtypes[dn]
        for (B, Tk, H, Hkv) in shapes:
            gen = torch.Generator(device=DEV)
            gen.manual_seed(5)
            k = torch.randn(B, Tk, Hkv, D, generator=gen, device=DEV, dtype=dt)
            v = torch.randn(B, Tk, Hkv, D, generator=gen, device=DEV, dtype=dt)
            kh, vh = k.permute(0, 2, 1, 3).contiguous(), v.permute(0, 2, 1, 3).contiguous()
            kv_bytes = 2 * B * Tk * Hkv * D * k.element_size()
            for Tq in tqs:
                q = torch.randn(B, Tq, H, D, generator=gen, device=DEV, dtype=dt)
                c = dict(B=B, Tq=Tq, Tk=Tk, H=H, Hkv=Hkv, D=D)
                t = {"q": q, "k": k, "v": v}
                plan = h.decode_plan(c, t)
                r = dict(dtype=dn, B=B, Tk=Tk, H=H, Hkv=Hkv, Tq=Tq, D=D, kv_bytes=kv_bytes,
                         splits=plan["splits"], warps=plan["warps"], stages=plan["stages"], ctas=plan["ctas"])
                run_decode(h, c, t)
                r["ours_us"] = gpu_time_us(lambda: h.fwd(c, t))
                ours = t["o"].float()
                c_off = dict(c, decode=-1)
                t_off = dict(t)
                run_decode(h, c_off, t_off)
                r["tiled_us"] = gpu_time_us(lambda: h.fwd(c_off, t_off), reps=10)
                r["tiled_maxdiff"] = float((t_off["o"].float() - ours).abs().max())
                del t_off
                qh = q.permute(0, 2, 1, 3).contiguous()
                for name in ("flash", "cudnn"):
                    try:
                        fn, mode = sdpa_call(name, qh, kh, vh)
                        r[f"{name}_us"] = gpu_time_us(fn)
                        r[f"{name}_gqa"] = mode
                        r[f"{name}_maxdiff"] = float((fn().permute(0, 2, 1, 3).float() - ours).abs().max())
                    except Exception as e:  # noqa: BLE001
                        r[f"{name}_error"] = f"{type(e).__name__}: {str(e)[:120]}"
                for x in ("ours", "tiled", "flash", "cudnn"):
                    if f"{x}_us" in r:
                        r[f"{x}_gbs"] = kv_bytes / r[f"{x}_us"] / 1e3
                rows.append(r)
                print("DECODE_BENCH " + json.dumps(r), file=log, flush=True)
                if dn == "bf16" and Tq == 1 and (B, Tk, H, Hkv) in sweep_shapes:
                    sw = dict(B=B, Tk=Tk, H=H, Hkv=Hkv, auto_splits=plan["splits"], runs=[])
                    for sp in DECODE_SWEEP_SPLITS:
                        c_sp = dict(c, decode=1, splits=sp)
                        t_sp = dict(t)
                        run_decode(h, c_sp, t_sp)
                        us = gpu_time_us(lambda: h.fwd(c_sp, t_sp), reps=15)
                        sw["runs"].append(dict(forced=sp, splits=h.decode_plan(c_sp, t_sp)["splits"], us=us,
                                               gbs=kv_bytes / us / 1e3))
                    sweeps.append(sw)
                    print("DECODE_SWEEP " + json.dumps(sw), file=log, flush=True)
                del t, q, qh, ours
            del k, v, kh, vh
            if DEV.type == "cuda":
                torch.cuda.empty_cache()
    # float32 (CUDA-core decoding kernel) against the tiled float32 kernel, one shape.
    (B, Tk, H, Hkv) = shapes[0]
    gen = torch.Generator(device=DEV)
    gen.manual_seed(6)
    c = dict(B=B, Tq=1, Tk=Tk, H=H, Hkv=Hkv, D=D)
    t = {n: torch.randn(*s, generator=gen, device=DEV) for n, s in
         (("q", (B, 1, H, D)), ("k", (B, Tk, Hkv, D)), ("v", (B, Tk, Hkv, D)))}
    kv_bytes = 2 * B * Tk * Hkv * D * 4
    r = dict(dtype="fp32", B=B, Tk=Tk, H=H, Hkv=Hkv, Tq=1, D=D, kv_bytes=kv_bytes, splits=h.decode_plan(c, t)["splits"])
    run_decode(h, c, t)
    r["ours_us"] = gpu_time_us(lambda: h.fwd(c, t))
    c_off = dict(c, decode=-1)
    t_off = dict(t)
    run_decode(h, c_off, t_off)
    r["tiled_us"] = gpu_time_us(lambda: h.fwd(c_off, t_off), reps=10)
    r["tiled_maxdiff"] = float((t_off["o"] - t["o"]).abs().max())
    for x in ("ours", "tiled"):
        r[f"{x}_gbs"] = kv_bytes / r[f"{x}_us"] / 1e3
    rows.append(r)
    print("DECODE_BENCH " + json.dumps(r), file=log, flush=True)
    return rows, sweeps


def print_decode_tables(rows, sweeps):
    def f(r, key, fmt="{:.0f}"):
        return fmt.format(r[key]) if key in r else "-"
    print("\nDecoding, D = 128, no mask; us of GPU time per call (CUDA events, L2 emptied before each call); "
          "GB/s = K+V bytes (2 B Tk Hkv D x dtype size) / time")
    print("| dtype | B | Tk | H/Hkv | Tq | splits | ours us | ours GB/s | FA2 us | FA2 GB/s | cuDNN us | cuDNN GB/s "
          "| ours/FA2 | ours/cuDNN | tiled (before) us | max diff vs FA2 |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        vs = lambda x: f"{r['ours_gbs'] / r[x + '_gbs']:.2f}x" if r.get(x + "_gbs") else "-"  # noqa: E731
        gqa = {r.get("flash_gqa"), r.get("cudnn_gqa")}
        print(f"| {r['dtype']} | {r['B']} | {r['Tk']} | {r['H']}/{r['Hkv']} | {r['Tq']} | {r['splits']} | "
              f"{f(r, 'ours_us')} | {f(r, 'ours_gbs')} | {f(r, 'flash_us')} | {f(r, 'flash_gbs')} | {f(r, 'cudnn_us')} | "
              f"{f(r, 'cudnn_gbs')} | {vs('flash')} | {vs('cudnn')} | {f(r, 'tiled_us')} | "
              f"{f(r, 'flash_maxdiff', '{:.1e}')}{' (K/V repeated for torch)' if 'repeat' in gqa else ''} |")
    errors = sorted({(r["dtype"], k, r[k]) for r in rows for k in r if k.endswith("_error")})
    for e in errors:
        print("torch backend error:", *e)
    print("\nBar (issue 14): ours >= 0.9x FlashAttention-2's GB/s at the four shapes, Tq = 1")
    for r in rows:
        if (r["B"], r["Tk"], r["H"], r["Hkv"]) in DECODE_BAR_SHAPES and r["Tq"] == 1 and r.get("flash_gbs"):
            ratio = r["ours_gbs"] / r["flash_gbs"]
            print(f"  {r['dtype']} {r['B']},{r['Tk']},{r['H']}/{r['Hkv']}: {r['ours_gbs']:.0f} vs {r['flash_gbs']:.0f} "
                  f"GB/s = {ratio:.2f}x -> {'met' if ratio >= 0.9 else 'MISSED'}")
    for sw in sweeps:
        best = max(sw["runs"], key=lambda x: x["gbs"])
        auto = [x for x in sw["runs"] if x["forced"] == 0][0]
        print(f"splits sweep {sw['B']},{sw['Tk']},{sw['H']}/{sw['Hkv']} bf16 Tq=1: auto {auto['splits']} -> "
              f"{auto['gbs']:.0f} GB/s; best {best['splits']} -> {best['gbs']:.0f} GB/s; "
              + " ".join(f"{x['splits']}:{x['gbs']:.0f}" for x in sw["runs"] if x["forced"]))


class RefHarness:
    """CPU stand-in for the module (--dry-run): fwd writes the float64 reference (NaN tails zeroed first) in
    the output's dtype, the plan and the workspace follow the decoding path's rules. Checks the decode
    section's own code without a GPU; it says nothing about the kernels."""

    @staticmethod
    def decode_plan(c, t):
        dec, sp = int(c.get("decode", 0)), int(c.get("splits", 0))
        applies = dec == 1 or (dec == 0 and c["Tq"] <= 16)
        tiles = -(-c["Tk"] // 16)
        splits = max(1, min(sp if sp >= 1 else 4, tiles, 256)) if applies else 0
        return dict(applies=applies, splits=splits, warps=4, stages=3, ctas=splits)

    def fwd_ws_bytes(self, c, t):
        plan = self.decode_plan(c, t)
        return 4096 if plan["applies"] and plan["splits"] > 1 else 0

    def fwd(self, c, t):
        clean = dict(t, k=torch.nan_to_num(t["k"]), v=torch.nan_to_num(t["v"]))
        clean.setdefault("do", torch.zeros(t["o"].shape, dtype=t["o"].dtype))
        r = reference(c, clean, torch.float64, None)
        t["o"].copy_(r["o"].to(t["o"].dtype))
        t["lse"].copy_(r["lse"])


def run_decode_section(args, h, log):
    """--decode: the decoding path's numerics, then its timing tables; JSON in OUT/kernel_harness_decode.json."""
    res = {}
    t0 = time.time()
    dry = DEV.type != "cuda"
    if not args.no_check:
        names = [x for x in args.dtypes.split(",") if x]
        cases = [c for c in DECODE_CASES if not args.cases or any(x in c["name"] for x in args.cases.split(","))]
        res["decode_numerics"] = check_decode(h, names, cases, log)
        n_ok = sum(r["ok"] for r in res["decode_numerics"])
        print(f"decode numerics: {n_ok}/{len(res['decode_numerics'])} pass ({time.time() - t0:.0f} s)", flush=True)
    if not args.no_bench:
        shapes = ((2, 256, 8, 2), (1, 512, 4, 4)) if dry else DECODE_BENCH_SHAPES
        dts = [x for x in args.dtypes.split(",") if x in ("bf16", "fp16")] or ["bf16"]
        tqs = (1,) if args.quick else (1, 4, 16)
        sweep = () if args.quick else shapes[:1] if dry else DECODE_BAR_SHAPES
        res["decode_bench"], res["decode_sweeps"] = bench_decode(h, log, dts, tqs, shapes, sweep)
        print_decode_tables(res["decode_bench"], res["decode_sweeps"])
        print(f"decode section: {time.time() - t0:.0f} s", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "kernel_harness_decode.json"), "w") as f:
        json.dump(res, f, indent=1)
    if "decode_numerics" in res:
        bad = [f"{r['case']}/{r['dtype']}" for r in res["decode_numerics"] if not r["ok"]]
        print("decode FAILED:", bad if bad else "none")
    return res


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
    ap.add_argument("--decode", action="store_true",
                    help="only the decoding path's section (issue 14): numerics (--dtypes, --cases select), then K+V "
                         "GB/s against FlashAttention-2 and cuDNN (--quick: Tq = 1, no split sweep)")
    ap.add_argument("--dry-run", action="store_true",
                    help="with --decode, on the CPU: a reference stand-in for the harness, small timing shapes; "
                         "checks this script, not the kernels")
    args = ap.parse_args()
    if args.dry_run and not args.decode:
        ap.error("--dry-run goes with --decode")
    global DEV
    if args.dry_run:
        DEV = torch.device("cpu")
        print(torch.__version__, "CPU dry run (RefHarness: no kernels run)", flush=True)
        h = RefHarness()
    else:
        print(torch.__version__, torch.cuda.get_device_name(), flush=True)
        h = Harness(os.path.abspath(args.lib))
    log = sys.stdout
    if args.decode:
        run_decode_section(args, h, log)
        return
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
