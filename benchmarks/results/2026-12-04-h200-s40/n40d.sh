# Session 40, harness call 4: sm90_bwd_check.py with nan_grads (backward() and tf32_backward() share it), on the
# objects of call 2: phases tf32det, tf32pad (first mode), padded (the 16-bit backward's wide cases).
set -u
H=/tmp/hD; mkdir -p $H && tar xzf .device-tf/objfin.tgz -C $H && tar xzf .device-tf/obj39f.tgz -C $H &&
  tar xzf .device-tf/obj40.tgz -C $H && tar xzf .device-tf/obj40b.tgz -C $H &&
  OUTDIR=$H HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
R=$OUT/r; mkdir -p $R
timeout 60 python3 benchmarks/sm90_bwd_check.py --phase tf32det --lib $H > $R/tf32det.log 2>&1; echo "tf32det rc=$?"
TF32PAD_MODES=1 timeout 60 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib $H > $R/tf32pad.log 2>&1; echo "tf32pad rc=$?"
timeout 90 python3 benchmarks/sm90_bwd_check.py --phase padded --lib $H > $R/padded.log 2>&1; echo "padded rc=$?"
grep -E "^FAIL|tf32pad:|tf32det:|numerics" $R/*.log | cut -c1-200
tar czf $OUT/n40d.tgz -C $OUT r && rm -rf $R
