# Session 39, last call: the final tree's objects (obj39f: host-side guard moved into launch_tf32_variant, sm80's
# uses_dq_sem limited to multiples of 8; device code as obj39t's). TF32 numerics, backward padded / det, and the
# refactored pad_bench.py once.
set -u
H=/tmp/hF; mkdir -p $H && tar xzf .device-tf/objfin.tgz -C $H && tar xzf .device-tf/obj39f.tgz -C $H &&
  OUTDIR=$H HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
run tf32 100 python3 benchmarks/sm90_check.py --phase tf32 --lib $H --out $R
grep -E "^FAIL|tf32:" $R/tf32.log | cut -c1-200 | head -6
run bwd_padded 80 python3 benchmarks/sm90_bwd_check.py --phase padded --lib $H --out $R
grep -E "^FAIL|numerics" $R/bwd_padded.log | cut -c1-200 | head -4
run bwd_det 80 python3 benchmarks/sm90_bwd_check.py --phase det --lib $H --out $R
grep -E "^FAIL|numerics" $R/bwd_det.log | cut -c1-200 | head -4
run pad_bench 60 python3 benchmarks/pad_bench.py --lib $H --shapes 96 --t 4096
grep -v "Warn\|f = lambda" $R/pad_bench.log | tail -3 | cut -c1-170
tar czf $OUT/n39g.tgz -C $OUT r && rm -rf $R
