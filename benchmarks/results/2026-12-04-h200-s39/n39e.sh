# Session 39: the committed form (obj39b: the backward's plain kernels without column checks, padded calls on the IDX
# kernels). Checks (padded, numerics, det, memcheck of the bpad sanitize cases), the padded speed table, and an A/B
# of the exact head dims against objfin (session 38's objects).
set -u
link() { mkdir -p $1 && tar xzf .device-tf/objfin.tgz -C $1 && { [[ -z $2 ]] || tar xzf .device-tf/$2.tgz -C $1; } &&
  OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1; }
link /tmp/hA ""; link /tmp/hB obj39b
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
run bwd_padded 100 python3 benchmarks/sm90_bwd_check.py --phase padded --lib /tmp/hB --out $R
grep -E "^FAIL|numerics" $R/bwd_padded.log | cut -c1-200 | head -8
run bwd_numerics 100 python3 benchmarks/sm90_bwd_check.py --phase numerics --lib /tmp/hB --out $R
grep -E "^FAIL|numerics" $R/bwd_numerics.log | cut -c1-200 | head -6
run bwd_det 100 python3 benchmarks/sm90_bwd_check.py --phase det --lib /tmp/hB --out $R
grep -E "^FAIL|numerics" $R/bwd_det.log | cut -c1-200 | head -4
run bwd_memcheck 120 env SANITIZE_PREFIX=bpad compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_bwd_check.py --phase sanitize --lib /tmp/hB
grep -E "ERROR SUMMARY|^FAIL|numerics" $R/bwd_memcheck.log | head -4
run pad_bench 150 python3 benchmarks/pad_bench.py --lib /tmp/hB --out $R/pad_bench.json --shapes 80,96,192/128
grep -v Warn $R/pad_bench.log | grep -v "f = lambda" | cut -c1-170 | tail -14
for r in 1 2; do for v in A B; do
  timeout 60 python3 benchmarks/pad_bench.py --lib /tmp/h$v --sm90-only --shapes 64,128 > $R/ab_${v}$r.log 2>&1; echo "ab $v$r rc=$?"
done; done
python3 - $R <<'PY'
import sys, re, glob, statistics as st
d = sys.argv[1]
def rows(f):
    out = {}
    for line in open(f):
        m = re.match(r"\s*(\d+)\s+(\d+)\s+(True|False)\s+\|\s+([\d.]+)\s+\S+\s+\S+\s+\S+\s+\|\s+([\d.]+)\s", line)
        if m:
            out[(int(m[1]), int(m[2]), m[3])] = (float(m[4]), float(m[5]))
    return out
R = {v: [rows(f) for f in sorted(glob.glob(f"{d}/ab_{v}*.log"))] for v in "AB"}
print("shape: fwd ms A / B, bwd ms A / B; B's speed against A (medians)")
for k in R["A"][0]:
    fa, fb = [x[k][0] for x in R["A"]], [x[k][0] for x in R["B"]]
    ba, bb = [x[k][1] for x in R["A"]], [x[k][1] for x in R["B"]]
    print(k, fa, fb, ba, bb, "fwd %.3f bwd %.3f" % (st.median(fa) / st.median(fb), st.median(ba) / st.median(bb)))
PY
tar czf $OUT/n39e.tgz -C $OUT r && rm -rf $R
