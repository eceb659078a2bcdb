"""Session 70: ours through TensorFlow with the UF library (FA_SM90_FWD_IDX_UNDER_PV=1 FA_SM90_FWD_FFMA_SOFTMAX=1, every
head dim) against R (the former defaults), from t1.sh's calls (ab/: R1 UF1 R2 UF2, UF2 lost to the file count; ab3/:
R3 UF3, a later call of the same lease), medians over the runs; cuDNN's forward the median of the two calls' anchors.
The backward is the same code in both builds, so its UF / R column shows the noise.
  python3 benchmarks/results/2026-12-08-h100-s70/compare_uf.py"""
import json, os, statistics as st

here = os.path.dirname(os.path.abspath(__file__))


def load(p):
    return {(r["D"], r["T"], r["causal"]): r for r in json.load(open(os.path.join(here, p)))}


R = [load("ab/ours_R1.json"), load("ab/ours_R2.json"), load("ab3/ours_R3.json")]
U = [load("ab/ours_UF1.json"), load("ab3/ours_UF3.json")]
A = [{(r["D"], r["N"], r["causal"]): r for r in json.load(open(os.path.join(here, p))) if r["backend"] == "cudnn"}
     for p in ["ab/anchors.json", "ab3/anchors.json"]]
print("| D | T | causal | fwd GPU R / UF | UF / R: GPU | steady | loop | bwd GPU (noise) | GPU / cuDNN R / UF |")
print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
for k in R[0]:
    def m(L, f):
        return st.median([x[k][f] for x in L])
    cu = st.median([a[k]["fwd_tflops"] for a in A])
    g = [m(R, "fwd_tflops_gpu"), m(U, "fwd_tflops_gpu")]
    print(f"| {k[0]} | {k[1]} | {'yes' if k[2] else 'no'} | {g[0]:.1f} / {g[1]:.1f} | {g[1] / g[0]:.3f} | "
          f"{m(U, 'fwd_tflops_steady') / m(R, 'fwd_tflops_steady'):.3f} | {m(U, 'fwd_tflops') / m(R, 'fwd_tflops'):.3f} | "
          f"{m(U, 'bwd_tflops_gpu') / m(R, 'bwd_tflops_gpu'):.3f} | {g[0] / cu:.2f}x / {g[1] / cu:.2f}x |")
