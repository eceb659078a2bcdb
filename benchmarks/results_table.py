"""Markdown table of one GPU benchmark call for RESULTS.md: our rows (gpu_attention.py) next to
PyTorch's anchors (anchors_torch.py) of the same call, with the ratios, and Keras' rows where
they ran. Files are JSON lists or JSON lines; several ours-files are merged (e.g. keras.json of a
BENCH_SPLIT=1 run).

    python benchmarks/results_table.py anchors.json ours.json [keras.json ...]
"""
import json
import sys


def load(path):
    text = open(path).read().strip()
    return json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines()]


def fmt(r):
    if r is None:
        return "-"
    if "error" in r:
        return "skipped" if r["error"].startswith("skipped") else "error"
    bwd = r.get("bwd_tflops")  # None: (forward+backward) - forward was not positive
    return f"{r['fwd_tflops']:.1f} / " + (f"{bwd:.1f}" if bwd is not None else "-")


def ratio(a, b):
    if a is None or b is None or "error" in a or "error" in b:
        return "-"
    return f"{a['fwd_tflops'] / b['fwd_tflops']:.2f}x / {a['bwd_tflops'] / b['bwd_tflops']:.2f}x"


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    anchors = {(r["backend"], r["D"], r["N"], r["causal"]): r for r in load(argv[1])}
    rows = [r for path in argv[2:] for r in load(path)]
    by = {(r["impl"], r["D"], r["T"], r["causal"]): r for r in rows}
    print("| D | T | causal | ours fwd / bwd | FA2 fwd / bwd | cuDNN fwd / bwd | ours / FA2 "
          "| ours / cuDNN | Keras fwd / bwd | Keras, no constant folding | Keras+XLA fwd / bwd "
          "| ours in XLA fwd / bwd |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["impl"] != "tf_flashattn":
            continue
        key = (r["D"], r["T"], r["causal"])
        fa2, cudnn = anchors.get(("flash2",) + key), anchors.get(("cudnn",) + key)
        print(f"| {r['D']} | {r['T']} | {'yes' if r['causal'] else 'no'} | {fmt(r)} | {fmt(fa2)} "
              f"| {fmt(cudnn)} | {ratio(r, fa2)} | {ratio(r, cudnn)} | {fmt(by.get(('keras',) + key))} "
              f"| {fmt(by.get(('keras_nofold',) + key))} | {fmt(by.get(('keras_xla',) + key))} | {fmt(by.get(('tf_flashattn_xla',) + key))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
