"""Plots TFLOP/s against T from the GPU benchmark's JSON lines (benchmarks/results/*.jsonl/json).
    python benchmarks/plot_gpu.py out.png results/a.jsonl [results/b.json ...]"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    text = open(path).read().strip()
    return json.loads(text) if text.startswith("[") else [json.loads(l) for l in text.splitlines()]


rows = [r for p in sys.argv[2:] for r in load(p) if "error" not in r]
fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
for col, causal in enumerate((False, True)):
    for row, key in enumerate(("fwd_tflops", "bwd_tflops")):
        ax = axes[row][col]
        series = {}
        for r in rows:
            if r["causal"] != causal:
                continue
            name = f"{r.get('impl', r.get('backend'))} D={r['D']}"
            T = r.get("T", r.get("N"))
            series.setdefault(name, {})[T] = r[key]
        for name, pts in sorted(series.items()):
            ts = sorted(pts)
            ax.plot(ts, [pts[t] for t in ts], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{'backward' if row else 'forward'}, {'causal' if causal else 'not causal'}")
        ax.set_ylabel("TFLOP/s (bf16, H200)")
        ax.set_xlabel("T (B = 16384 / T, H = 2048 / D)")
        ax.grid(True, alpha=0.3)
axes[0][0].legend(fontsize=7)
fig.tight_layout()
fig.savefig(sys.argv[1], dpi=110)
