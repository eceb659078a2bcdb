"""Two harness builds of the Hopper backward timed against each other, as gpu_attention.py times ours through
TensorFlow (2 warm-up calls, then 10 back to back between two CUDA events) and with triton's do_bench, on the
shapes where a backward change is meant to show (SETS: "plain", D = 64 causal from T = 2048 to 16384, D = 64
without a mask at T = 4096 and 16384, D = 128 causal at T = 4096 as a control; "mask", the D = 64 index-masked kernel: a [B, T] key
mask with and without a causal mask, a causal window; "feat", the D = 64 kernels with dropout 0.1 and with a
head-broadcast bias and its gradient, without a mask, and D = 128 with dropout as a control; "d128", the D = 128
backward without a mask, causal, and with a key mask; "drop128", the D = 128 backward with dropout 0.1 (T = 4096 and
16384, causal and not) and, as a control, with a key mask; "drop64", the same at D = 64; "tf32", the float32 backward on the TF32 kernels (D = 128,
and D = 64 without a mask); "fwd", the forward
instead (FWD_SETS), at D = 128, 64 and 256, causal and not, where a forward change is meant to show; "fwdmask", the
forward's index-masked kernels (a key mask, a causal window, dropout 0.1) at D = 128 and 64; "fwdkeyfrac", those kernels
with full key lengths, an all-true key mask and one with 10 % of the keys invalid; "fwd256", the head-dim-256 forward's
kernels (plain, index-masked, dropout), with D = 128 without a mask as a control; "tf32d256", the float32
(TF32) forward at D = 256 without a mask and with a key mask, a window, soft-cap and dropout (the FA_SM90_TF32_D256_FEAT
candidate against a build without it); "fwdping", the forward's
dropout kernels (0.1) at D = 128 and 64 and its head-dim-256 kernels (plain, dropout, index-masked), with D = 128
without a mask as a control (session 61 timed the one-tile ping-pong candidates, since removed, on them); B * T = 16384,
H = 2048 / D, bf16). No TensorFlow; an
H100 / H200 with torch, triton and the harness (benchmarks/build_harness.sh).

  python3 benchmarks/harness_loop_ab.py time LIBDIR TAG [plain|mask|feat|d128|drop64|drop128|tf32|fwd|fwdmask|fwdkeyfrac|fwd256|fwdping|tf32d256] >> ab_loop.log   # one build: ABLOOP lines
  python3 benchmarks/harness_loop_ab.py summary ab_loop.log               # no GPU: A (tags A*) against B (B*)

`gpu_run.sh ab` with AB_CHECKS=...,loop runs `time` for A, B, A, B, A, B (one process each: the clock drifts
between processes, so the builds alternate) and then `summary`: per shape the medians over the processes of the
loop's milliseconds (each process: the median of 5 loops) and of do_bench's, and B / A (> 1: A faster), and the
tile order the last launch used (sm90_info's last_bwd_order_g: > 0 the ORD kernel; the forward's rows, named "fwd":
the schedule of its last launch, last_fwd_variant)."""
import json
import statistics
import sys

# (D, T, causal, feature); feature "": no mask, "key_mask": a [B, T] key mask with the last 10 % of each sequence
# invalid, "key_mask0": the same mask all true (no key invalid), "klen_full": key lengths of T for every sequence
# (no k_valid bytes, nothing masked), "window": a causal sliding window of 1024 keys (all four the index-masked
# kernel); "dropout": rate 0.1;
# "bias": a [1, H, T, T] bias with dbias (a [B, H, T, T] float32 buffer: 8.6 GB at D = 64, T = 4096); "tf32": float32
# inputs with TF32 allowed (the Hopper TF32 backward); "tf32_<x>": float32 with TF32 and feature x (key_mask, a causal
# window of 1024 keys, soft-cap 30, dropout 0.1).
SETS = {"plain": [(64, 2048, True, ""), (64, 4096, True, ""), (64, 8192, True, ""), (64, 16384, True, ""),
                  (64, 4096, False, ""), (64, 16384, False, ""), (128, 4096, True, "")],
        "mask": [(64, 4096, True, ""), (64, 4096, False, "key_mask"), (64, 4096, True, "key_mask"),
                 (64, 16384, False, "key_mask"), (64, 16384, True, "key_mask"), (64, 4096, True, "window"),
                 (128, 4096, False, "key_mask")],
        "feat": [(64, 4096, False, "dropout"), (64, 16384, False, "dropout"), (64, 4096, True, "dropout"),
                 (64, 4096, False, "bias"), (128, 4096, False, "dropout")],
        "tf32": [(128, 4096, False, "tf32"), (128, 16384, False, "tf32"), (128, 4096, True, "tf32"),
                 (64, 4096, False, "tf32")],
        "drop64": [(64, 4096, False, "dropout"), (64, 16384, False, "dropout"), (64, 4096, True, "dropout"),
                   (64, 16384, True, "dropout"), (64, 4096, False, "key_mask")],
        "drop128": [(128, 4096, False, "dropout"), (128, 16384, False, "dropout"), (128, 4096, True, "dropout"),
                    (128, 16384, True, "dropout"), (128, 4096, False, "key_mask")],
        "d128": [(128, 4096, False, ""), (128, 16384, False, ""), (128, 4096, True, ""), (128, 16384, True, ""),
                 (128, 4096, False, "key_mask")],
        "fwd": [(128, 4096, False, ""), (128, 8192, False, ""), (128, 16384, False, ""), (128, 4096, True, ""),
                (128, 16384, True, ""), (64, 4096, False, ""), (64, 4096, True, ""), (256, 4096, False, ""),
                (256, 8192, True, "")],
        "fwdmask": [(128, 4096, False, "key_mask"), (128, 16384, True, "key_mask"), (64, 4096, False, "key_mask"),
                    (64, 4096, True, "window"), (128, 4096, False, "dropout"), (64, 4096, False, "dropout")],
        "fwdkeyfrac": [(128, 4096, False, "klen_full"), (128, 4096, False, "key_mask0"), (128, 4096, False, "key_mask"),
                       (128, 16384, False, "key_mask0"), (128, 16384, False, "key_mask"), (64, 4096, False, "klen_full"),
                       (64, 4096, False, "key_mask0"), (64, 4096, False, "key_mask")],
        "fwd256": [(256, 4096, False, ""), (256, 16384, False, ""), (256, 8192, True, ""), (256, 4096, False, "key_mask"),
                   (256, 4096, False, "key_mask0"), (256, 16384, True, "key_mask"), (256, 4096, True, "window"),
                   (256, 4096, False, "dropout"), (128, 4096, False, "")],
        "fwdping": [(128, 4096, False, "dropout"), (128, 16384, False, "dropout"), (128, 4096, True, "dropout"),
                    (128, 16384, True, "dropout"), (64, 4096, False, "dropout"), (64, 16384, True, "dropout"),
                    (256, 4096, False, ""), (256, 16384, True, ""), (256, 4096, False, "dropout"),
                    (256, 4096, True, "key_mask"), (128, 4096, False, "")],
        "tf32d256": [(256, 4096, False, "tf32"), (256, 4096, False, "tf32_key_mask"), (256, 16384, True, "tf32_key_mask"),
                     (256, 4096, True, "tf32_window"), (256, 4096, False, "tf32_softcap"),
                     (256, 4096, False, "tf32_dropout"), (256, 1024, False, "tf32"), (256, 16384, False, "tf32"),
                     (256, 4096, True, "tf32"), (256, 1024, True, "tf32")]}
FWD_SETS = {"fwd", "fwdmask", "fwdkeyfrac", "fwd256", "fwdping", "tf32d256"}  # timed forward (h.fwd, FLOPs 4 B H T^2 D, halved when causal); the others the backward
FEATURES = {"": {}, "key_mask": {}, "key_mask0": {}, "klen_full": {}, "window": dict(wl=1024), "dropout": dict(dropout=0.1, seed=(1, 2)),
            "bias": dict(bias=(0, 1)), "tf32": dict(tf32=True), "tf32_key_mask": dict(tf32=True),
            "tf32_window": dict(tf32=True, wl=1024), "tf32_softcap": dict(tf32=True, softcap=30.0),
            "tf32_dropout": dict(tf32=True, dropout=0.1, seed=(1, 2))}


def time_build(lib, tag, shape_set="plain"):
    import os
    import torch
    import triton.testing as tt
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kernel_harness_check import Harness, loop_ms
    from sm90_bwd_check import bench_inputs, key_mask_padded
    h = Harness(lib)
    for D, T, causal, feature in SETS[shape_set]:
        H, B = 2048 // D, 16384 // T
        c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=causal, **FEATURES[feature])
        dt = torch.float32 if feature.startswith("tf32") else torch.bfloat16  # tf32*: float32 inputs, the TF32 kernels
        pct = 0 if feature == "key_mask0" else 10
        before = key_mask_padded(B, T, pct) if "key_mask" in feature else None
        if feature == "klen_full":
            before = lambda t, B=B, T=T: t.update(klen=torch.full((B,), T, dtype=torch.int32, device=t["q"].device))  # noqa: E731
        t = bench_inputs(h, c, dt, before_forward=before)
        if feature == "bias":
            t["dbias"] = torch.empty((B, H, T, T), device=t["q"].device)
        fwd = shape_set in FWD_SETS
        switch = h.m.set_sm90 if fwd else h.m.set_sm90_bwd  # the Hopper kernels on for this direction, then back
        switch(1)
        f = (lambda c=c, t=t: h.fwd(c, t)) if fwd else (lambda c=c, t=t: h.bwd(c, t))  # noqa: E731
        loops = [loop_ms(f) for _ in range(5)]
        db = tt.do_bench(f, warmup=25, rep=100, return_mode="median")
        flops = (1 if fwd else 2.5) * 4 * B * H * T * T * D / (2 if causal else 1)
        info = h.m.sm90_info()
        r = dict(tag=tag, D=D, T=T, causal=causal, feature=feature, loop_ms=statistics.median(loops), loops=loops, dobench_ms=db,
                 tflops_loop=flops / statistics.median(loops) / 1e9,
                 order_g=info.get("last_fwd_variant") if fwd else info.get("last_bwd_order_g"))
        if fwd:
            r["direction"] = "fwd"
        switch(-1)
        print("ABLOOP " + json.dumps(r), flush=True)
        del t, f


def summary(lines):
    """The table of `time`'s ABLOOP lines (tags starting with A: this build, B: the reference), one row per shape."""
    rows = [json.loads(line.split(" ", 1)[1]) for line in lines if line.startswith("ABLOOP ")]
    out = ["D T causal [feature] | loop ms A / B (medians over processes) B/A | do_bench ms A / B B/A | order_g A B"]
    shape = lambda r: (r.get("direction", ""), r["D"], r["T"], r["causal"], r.get("feature", ""))  # noqa: E731
    for key in sorted({shape(r) for r in rows}):
        a = [r for r in rows if shape(r) == key and r["tag"].startswith("A")]
        b = [r for r in rows if shape(r) == key and r["tag"].startswith("B")]
        name = (f"{key[0]} " if key[0] else "") + f"{key[1]} {key[2]} {int(key[3])}" + (f" {key[4]}" if key[4] else "")
        if not a or not b:
            out.append(f"{name} | missing: {'A' if not a else 'B'}")
            continue
        la, lb = (statistics.median(x["loop_ms"] for x in s) for s in (a, b))
        da, db = (statistics.median(x["dobench_ms"] for x in s) for s in (a, b))
        out.append(f"{name} | {la:.3f} / {lb:.3f} {lb / la:.3f} | {da:.3f} / {db:.3f} "
                   f"{db / da:.3f} | {a[0]['order_g']} {b[0]['order_g']}")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) in (4, 5) and sys.argv[1] == "time" and (len(sys.argv) == 4 or sys.argv[4] in SETS):
        time_build(*sys.argv[2:])
    elif len(sys.argv) == 3 and sys.argv[1] == "summary":
        with open(sys.argv[2]) as f:
            print(summary(f.read().splitlines()))
    else:
        sys.exit(__doc__)
