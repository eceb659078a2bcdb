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


def fmt(r, how=""):
    """Forward / backward TFLOP/s of row r; how: "" (the loop), "_steady" or "_gpu" (ours only)."""
    if r is None:
        return "-"
    if "error" in r:
        return "skipped" if r["error"].startswith("skipped") else "error"
    fwd, bwd = r.get("fwd_tflops" + how), r.get("bwd_tflops" + how)  # bwd None: (fwd+bwd) - fwd <= 0
    return (f"{fwd:.1f}" if fwd is not None else "-") + " / " + (f"{bwd:.1f}" if bwd is not None else "-")


def ratio(a, b, how=""):
    if a is None or b is None or "error" in a or "error" in b:
        return "-"

    def one(d):
        x, y = a.get(f"{d}_tflops" + how), b.get(f"{d}_tflops")
        return f"{x / y:.2f}x" if x and y else "-"
    return f"{one('fwd')} / {one('bwd')}"


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
    ours = [r for r in rows if r["impl"] == "tf_flashattn" and ("fwd_tflops_steady" in r or "fwd_tflops_gpu" in r)]
    if ours:  # gpu_attention.py's other timings of our calls, against cuDNN's of the same call
        print("\nOurs timed three ways (gpu_attention.py: the loop of 10 calls as above, a steady stream of calls, "
              "the GPU time of one call) against cuDNN (triton do_bench: the median GPU time of one call):\n")
        print("| D | T | causal | ours loop fwd / bwd | ours steady fwd / bwd | ours GPU fwd / bwd | cuDNN fwd / bwd "
              "| loop / cuDNN | steady / cuDNN | GPU / cuDNN |")
        print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in ours:
            key = (r["D"], r["T"], r["causal"])
            cudnn = anchors.get(("cudnn",) + key)
            print(f"| {r['D']} | {r['T']} | {'yes' if r['causal'] else 'no'} | {fmt(r)} | {fmt(r, '_steady')} "
                  f"| {fmt(r, '_gpu')} | {fmt(cudnn)} | {ratio(r, cudnn)} | {ratio(r, cudnn, '_steady')} "
                  f"| {ratio(r, cudnn, '_gpu')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
