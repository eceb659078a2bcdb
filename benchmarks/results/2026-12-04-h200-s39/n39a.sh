# Session 39, first call (no TensorFlow): other head dims padded up on the Hopper 16-bit kernels.
# objfin (session 38's final objects) + this tree's flash_fwd_sm90.o, flash_bwd_sm90.o, flash_bwd.o (sm80's
# uses_dq_sem). Numerics (forward, its pad cases; backward phase padded, numerics, d256, splitd, det), memcheck.
set -u
H=/tmp/h39; mkdir -p $H && tar xzf .device-tf/objfin.tgz -C $H && tar xzf .device-tf/obj39.tgz -C $H &&
  OUTDIR=$H HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
run fwd_numerics 150 python3 benchmarks/sm90_check.py --phase numerics --lib $H --out $R
grep -E "^FAIL|numerics:" $R/fwd_numerics.log | head -20; grep -c "^PASS pad_" $R/fwd_numerics.log
run bwd_padded 120 python3 benchmarks/sm90_bwd_check.py --phase padded --lib $H --out $R
grep -E "^FAIL|numerics" $R/bwd_padded.log | cut -c1-300 | head -20
run fwd_memcheck 150 compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_check.py --phase sanitize --lib $H
grep -E "ERROR SUMMARY|^FAIL" $R/fwd_memcheck.log | head -5
run bwd_memcheck 150 env SANITIZE_PREFIX=bpad compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_bwd_check.py --phase sanitize --lib $H
grep -E "ERROR SUMMARY|^FAIL|numerics" $R/bwd_memcheck.log | head -5
run bwd_numerics 150 python3 benchmarks/sm90_bwd_check.py --phase numerics --lib $H --out $R
grep -E "^FAIL|numerics" $R/bwd_numerics.log | cut -c1-200 | head -12
tar czf $OUT/n39a.tgz -C $OUT r && rm -rf $R
