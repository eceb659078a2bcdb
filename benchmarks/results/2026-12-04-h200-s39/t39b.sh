# Session 39, through TensorFlow (installed by t39.sh in this lease): the table at head dims 80 and 96, ours one call
# per step (gpu_attention.py); then (harness) the mutant check of the sentinel columns and an A/B of the exact head
# dims' kernels, objfin (session 38) against obj39 (this tree: the column checks in the epilogues).
set -u
. .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/r
BENCH_D=80,96 BENCH_T=4096,16384 BENCH_INNER=1 BENCH_KERAS_D= BENCH_IMPLS= timeout 200 python3 benchmarks/gpu_attention.py $OUT/r/ours_pad.json > $OUT/r/ours_pad.log 2>&1; echo "ours rc=$?"
grep -v "^WARNING\|^I0000" $OUT/r/ours_pad.log | tail -14
link() { mkdir -p $1 && tar xzf .device-tf/objfin.tgz -C $1 && { [[ -z $2 ]] || tar xzf .device-tf/$2.tgz -C $1; } &&
  OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1; }
link /tmp/hm obj39; tar xzf .device-tf/objmut.tgz -C /tmp/hm && rm -f /tmp/hm/flash_harness*.so &&
  OUTDIR=/tmp/hm HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
timeout 120 python3 benchmarks/sm90_check.py --phase numerics --lib /tmp/hm > $OUT/r/mut_fwd.log 2>&1; echo "mutant fwd rc=$?"
grep -E "^FAIL" $OUT/r/mut_fwd.log | cut -c1-60; grep "numerics:" $OUT/r/mut_fwd.log
timeout 100 python3 benchmarks/sm90_bwd_check.py --phase padded --lib /tmp/hm > $OUT/r/mut_bwd.log 2>&1; echo "mutant bwd rc=$?"
grep -E "^FAIL" $OUT/r/mut_bwd.log | cut -c1-60; grep "numerics" $OUT/r/mut_bwd.log
link /tmp/hA ""; link /tmp/hB obj39
for r in 1 2; do for v in A B; do
  timeout 60 python3 benchmarks/pad_bench.py --lib /tmp/h$v --sm90-only --shapes 64,128,256 > $OUT/r/ab_${v}$r.log 2>&1; echo "ab $v$r rc=$?"
done; done
python3 - $OUT/r <<'PY'
import sys, re, glob
d = sys.argv[1]
def rows(f):
    out = {}
    for line in open(f):
        m = re.match(r"\s*(\d+)\s+(\d+)\s+(True|False)\s+\|\s+([\d.]+)\s.*\|\s+([\d.]+)\s", line)
        if m:
            out[(m[1], m[2], m[3])] = (float(m[4]), float(m[5]))
    return out
A = [rows(f) for f in sorted(glob.glob(d + "/ab_A*.log"))]
B = [rows(f) for f in sorted(glob.glob(d + "/ab_B*.log"))]
print("shape (D T causal): fwd ms A (objfin) / B (this tree), bwd ms A / B, B/A speed")
for k in A[0]:
    fa = [a[k][0] for a in A]; fb = [b[k][0] for b in B]; ba = [a[k][1] for a in A]; bb = [b[k][1] for b in B]
    print(k, [round(x, 3) for x in fa], [round(x, 3) for x in fb], [round(x, 3) for x in ba], [round(x, 3) for x in bb],
          "fwd %.3f bwd %.3f" % (min(fa) / min(fb), min(ba) / min(bb)))
PY
tar czf $OUT/t39b.tgz -C $OUT r && find $OUT -mindepth 1 ! -name t39b.tgz -delete
