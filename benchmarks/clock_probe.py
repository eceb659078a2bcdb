"""Does a longer series of calls run slower? Our Hopper forward (the harness) and cuDNN's (PyTorch SDPA) at D = 128,
bf16, no mask, B * T = 16384, H = 16, each timed as series of N back-to-back calls between two CUDA events (after 2
warm-up calls and a 0.5 s idle pause), N = 10 (gpu_attention.py's loop), 50, 200 and 1000, then with triton's
do_bench (the anchors' timer: 100 ms). The two kernels alternate, twice over. nvidia-smi, started beside it as below,
samples the SM clock, power and the throttle reasons every 10 ms, and each series prints its start and end time, so
the clock during every series can be read off (`summary`).

  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
      --format=csv,noheader -lms 10 > clocks.csv &
  python3 benchmarks/clock_probe.py time HARNESS_DIR > probe.log       # an H100 / H200 with torch, triton, the harness
  python3 benchmarks/clock_probe.py summary probe.log clocks.csv        # no GPU

If our 10-call loop is faster per call than our own do_bench while the SM clock drops over the longer series, the
loop's figure is a burst figure, and the fair comparison with the anchors (do_bench) is do_bench against do_bench."""
import json
import statistics
import sys
import time
from datetime import datetime

SERIES = (10, 50, 200, 1000)


def series_ms(fn, n):
    import torch
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    time.sleep(0.5)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    start.record()
    for _ in range(n):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n, t0, time.time()


def time_all(lib):
    import os
    import torch
    import torch.nn.functional as F
    import triton.testing as tt
    from torch.nn.attention import sdpa_kernel, SDPBackend
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from kernel_harness_check import Harness
    from sm90_bwd_check import bench_inputs
    h = Harness(lib)
    h.m.set_sm90(1)
    for T in (4096, 16384):
        B, H, D = 16384 // T, 16, 128
        c = dict(B=B, Tq=T, Tk=T, H=H, D=D, causal=False)
        t = bench_inputs(h, c, torch.bfloat16)
        qh, kh, vh = (t[n].permute(0, 2, 1, 3).contiguous() for n in ("q", "k", "v"))
        fns = {"ours": lambda: h.fwd(c, t)}
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            fns["cudnn"] = lambda: F.scaled_dot_product_attention(qh, kh, vh)
            flops = 4 * B * H * T * T * D
            for rnd in range(2):
                for name, fn in fns.items():
                    for n in SERIES:
                        ms, t0, t1 = series_ms(fn, n)
                        print("PROBE " + json.dumps(dict(T=T, kernel=name, round=rnd, timer=f"loop{n}", ms=ms,
                                                         tflops=flops / ms / 1e9, t0=t0, t1=t1)), flush=True)
                    time.sleep(0.5)
                    t0 = time.time()
                    ms = tt.do_bench(fn, warmup=25, rep=100, return_mode="median")
                    print("PROBE " + json.dumps(dict(T=T, kernel=name, round=rnd, timer="do_bench", ms=ms,
                                                     tflops=flops / ms / 1e9, t0=t0, t1=time.time())), flush=True)
        del t, qh, kh, vh
    h.m.set_sm90(-1)


def read_clocks(path):
    """nvidia-smi's csv lines: (unix time, SM MHz, watts, reasons)."""
    out = []
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 5:
            continue
        try:
            ts = datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((ts, float(f[1].split()[0]), float(f[2].split()[0]), f[4]))
        except ValueError:
            continue
    return out


def summary(log, clocks_path):
    rows = [json.loads(line.split(" ", 1)[1]) for line in open(log) if line.startswith("PROBE ")]
    clocks = read_clocks(clocks_path) if clocks_path else []
    out = ["T kernel round timer | ms per call | TFLOP/s | SM MHz min / median over the series (samples) | W max | throttle reasons seen"]
    for r in rows:
        inside = [c for c in clocks if r["t0"] <= c[0] <= r["t1"]]
        clk = (f"{min(c[1] for c in inside):.0f} / {statistics.median(c[1] for c in inside):.0f} ({len(inside)})"
               if inside else "no sample")
        watts = f"{max(c[2] for c in inside):.0f}" if inside else "-"
        reasons = " ".join(sorted({c[3] for c in inside}))
        out.append(f"{r['T']} {r['kernel']} {r['round']} {r['timer']} | {r['ms']:.4f} | {r['tflops']:.0f} | {clk} | {watts}"
                   + (f" | reasons {reasons}" if reasons else ""))
    for T in sorted({r["T"] for r in rows}):
        for timer in ["loop%d" % n for n in SERIES] + ["do_bench"]:
            ms = {k: statistics.median(r["ms"] for r in rows if r["T"] == T and r["timer"] == timer and r["kernel"] == k)
                  for k in ("ours", "cudnn") if any(r["T"] == T and r["timer"] == timer and r["kernel"] == k for r in rows)}
            if len(ms) == 2:
                out.append(f"T={T} {timer}: ours / cudnn speed {ms['cudnn'] / ms['ours']:.3f}x")
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "time":
        time_all(sys.argv[2])
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "summary":
        print(summary(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else None))
    else:
        sys.exit(__doc__)
