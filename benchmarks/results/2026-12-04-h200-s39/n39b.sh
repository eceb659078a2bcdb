# Session 39, second call (no TensorFlow): the padded head dims' speed (pad_bench.py, with FA2 / cuDNN),
# and the other phases of both checks with the pad cases (variants: every schedule; det, d256, splitd).
set -u
H=/tmp/h39; [[ -f $H/flash_harness.cpython-312-x86_64-linux-gnu.so ]] || { mkdir -p $H && tar xzf .device-tf/objfin.tgz -C $H && tar xzf .device-tf/obj39.tgz -C $H &&
  OUTDIR=$H HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1; }
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
run pad_bench 200 python3 benchmarks/pad_bench.py --lib $H --out $R/pad_bench.json
cat $R/pad_bench.log | cut -c1-170
run fwd_variants 150 python3 benchmarks/sm90_check.py --phase variants --lib $H --out $R
grep -E "^FAIL|variants:|defaults:" $R/fwd_variants.log | cut -c1-200 | head -12
run bwd_det 100 python3 benchmarks/sm90_bwd_check.py --phase det --lib $H --out $R
grep -E "^FAIL|numerics" $R/bwd_det.log | cut -c1-200 | head -6
run bwd_d256 100 python3 benchmarks/sm90_bwd_check.py --phase d256 --lib $H --out $R
grep -E "^FAIL|numerics" $R/bwd_d256.log | cut -c1-200 | head -6
run bwd_splitd 100 python3 benchmarks/sm90_bwd_check.py --phase splitd --lib $H --out $R
grep -E "^FAIL|numerics" $R/bwd_splitd.log | cut -c1-200 | head -6
tar czf $OUT/n39b.tgz -C $OUT r && rm -rf $R
