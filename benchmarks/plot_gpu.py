"""Plots TFLOP/s against T from one GPU benchmark call: our rows (benchmarks/gpu_attention.py) and
the anchors (anchors_torch.py), JSON lists or JSON lines. One panel per direction and head dim;
solid lines not causal, dashed causal. PyTorch's "efficient" and "math" backends are left out.
    python benchmarks/plot_gpu.py out.png results/ours.json results/anchors.json
PLOT_OURS=steady (or gpu) plots our rows' fwd_tflops_steady / bwd_tflops_steady (or *_tflops_gpu: see
gpu_attention.py) instead of the loop's figures. PLOT_GPU names the GPU on the y axis (default H200; the JSON rows do
not say which GPU ran them)."""
import os
import sys

import matplotlib

from results_table import load  # JSON list or JSON lines

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NAMES = {"tf_flashattn": "tf_flashattn", "tf_flashattn_xla": "tf_flashattn (XLA)",
         "flash2": "PyTorch FlashAttention-2", "cudnn": "PyTorch cuDNN", "keras": "Keras (TF)",
         "keras_nofold": "Keras (TF, no constant folding)", "keras_xla": "Keras (TF, XLA)"}


OURS = os.environ.get("PLOT_OURS", "")
assert OURS in ("", "steady", "gpu"), f"PLOT_OURS: '', steady or gpu, not {OURS!r}"
rows = [r for p in sys.argv[2:] for r in load(p)
        if "error" not in r and r.get("impl", r.get("backend")) in NAMES]
dims = sorted({r["D"] for r in rows})
fig, axes = plt.subplots(2, len(dims), figsize=(5 * len(dims), 8), squeeze=False)
colors = {name: f"C{i}" for i, name in enumerate(NAMES)}
for col, D in enumerate(dims):
    for row, key in enumerate(("fwd_tflops", "bwd_tflops")):
        ax = axes[row][col]
        series = {}
        for r in rows:
            k = key + "_" + OURS if OURS and r.get("impl") == "tf_flashattn" else key
            if r["D"] == D and r.get(k) is not None:
                series.setdefault((r.get("impl", r.get("backend")), r["causal"]), {})[r.get("T", r.get("N"))] = r[k]
        for (name, causal), pts in sorted(series.items()):
            ts = sorted(pts)
            ax.plot(ts, [pts[t] for t in ts], marker="o", ms=3, color=colors[name],
                    linestyle="--" if causal else "-",
                    label=f"{NAMES[name]}{f' ({OURS})' if OURS and name == 'tf_flashattn' else ''}"
                          f"{' causal' if causal else ''}")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{'backward' if row else 'forward'}, D = {D}")
        ax.set_ylabel(f"TFLOP/s (bf16, {os.environ.get('PLOT_GPU', 'H200')})")
        ax.set_xlabel("T (B = 16384 / T, H = 2048 / D)")
        ax.grid(True, alpha=0.3)
for ax in axes[0]:
    ax.legend(fontsize=7)
fig.tight_layout()
fig.savefig(sys.argv[1], dpi=100)
