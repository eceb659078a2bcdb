# Session 39: the exact head dims' backward kernels, three builds alternating (A = objfin, session 38's objects;
# B = obj39, this tree; C = objvc, B with the epilogue's D / Dv read by volatile loads), pad_bench --sm90-only.
set -u
link() { mkdir -p $1 && tar xzf .device-tf/objfin.tgz -C $1 && { [[ -z $2 ]] || tar xzf .device-tf/$2.tgz -C $1; } &&
  OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1; }
link /tmp/hA ""; link /tmp/hB obj39; link /tmp/hC objvc
mkdir -p $OUT/r
for r in 1 2 3; do for v in A B C; do
  timeout 60 python3 benchmarks/pad_bench.py --lib /tmp/h$v --sm90-only --shapes 64,128 > $OUT/r/ab_${v}$r.log 2>&1; echo "ab $v$r rc=$?"
done; done
python3 - $OUT/r <<'PY'
import sys, re, glob
d = sys.argv[1]
def rows(f):
    out = {}
    for line in open(f):
        m = re.match(r"\s*(\d+)\s+(\d+)\s+(True|False)\s+\|\s+([\d.]+)\s+\S+\s+\S+\s+\S+\s+\|\s+([\d.]+)\s", line)
        if m:
            out[(int(m[1]), int(m[2]), m[3])] = (float(m[4]), float(m[5]))
    return out
R = {v: [rows(f) for f in sorted(glob.glob(f"{d}/ab_{v}*.log"))] for v in "ABC"}
print("shape: bwd ms A / B / C (3 runs each); speed of B, C against A (medians)")
import statistics as st
for k in R["A"][0]:
    m = {v: [x[k][1] for x in R[v]] for v in "ABC"}
    med = {v: st.median(m[v]) for v in "ABC"}
    print(k, m["A"], m["B"], m["C"], "B %.3f C %.3f" % (med["A"] / med["B"], med["A"] / med["C"]))
print("fwd ms medians A / B / C")
for k in R["A"][0]:
    m = {v: st.median([x[k][0] for x in R[v]]) for v in "ABC"}
    print(k, m)
PY
tar czf $OUT/n39c.tgz -C $OUT r && rm -rf $OUT/r
