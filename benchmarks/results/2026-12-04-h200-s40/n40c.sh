# Session 40, harness call 3: the refactored sm90_bwd_check.py (env_selected, tf32_bound) on the objects of call 2.
set -u
H=/tmp/hD; mkdir -p $H && tar xzf .device-tf/objfin.tgz -C $H && tar xzf .device-tf/obj39f.tgz -C $H &&
  tar xzf .device-tf/obj40.tgz -C $H && tar xzf .device-tf/obj40b.tgz -C $H &&
  OUTDIR=$H HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
R=$OUT/r; mkdir -p $R
timeout 100 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib $H --out $R > $R/tf32pad.log 2>&1; echo "tf32pad rc=$?"
timeout 100 python3 benchmarks/sm90_bwd_check.py --phase tf32det --lib $H --out $R > $R/tf32det.log 2>&1; echo "tf32det rc=$?"
TF32DET_CASES=tdet_d64_ragged_gqa,tdet_d40_kvalid_wide timeout 60 python3 benchmarks/sm90_bwd_check.py --phase tf32det --lib $H > $R/tf32det_sel.log 2>&1; echo "sel rc=$?"
grep -E "^FAIL|tf32pad:|tf32det:" $R/*.log | cut -c1-200
tar czf $OUT/n40c.tgz -C $OUT r && rm -rf $R
