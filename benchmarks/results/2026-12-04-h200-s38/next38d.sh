# Session 38, third call (no TensorFlow): how the P pass's mask decision is made, A/B in one lease, both Hopper TF32
# backwards: HEAD (obj38.tgz) and the working tree built with FA_TF32_MASK_FORM 0 (tile_in_range, rows words packed),
# 1 (the rows warp's whole-group word, read after the S^T wait), 2 (the word read before the wait).
set -u
link() {  # dir [form]
  mkdir -p $1 && tar xzf .device-tf/obj38.tgz -C $1 && { [[ -z ${2:-} ]] || tar xzf .device-tf/form$2.tgz -C $1; } &&
    OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
}
link /tmp/h_head; link /tmp/h_f0 0; link /tmp/h_f1 1; link /tmp/h_f2 2
export HARNESS_ONLY=1
for F in 2 1; do
  M=$([[ $F == 2 ]] && echo 1,2,3,4,5,6,7 || echo 4)
  HARNESS_DIR=/tmp/h_f$F timeout 150 env SM90_TUNE_MODES=$M python3 benchmarks/tune_tf32_bwd.py --sm90 --quick > $OUT/f${F}_64.out 2>&1; echo "f$F d64 rc=$?"
  grep -E "numerics|FAIL" $OUT/f${F}_64.out
  HARNESS_DIR=/tmp/h_f$F timeout 100 env SM90_D128_MODES=$([[ $F == 2 ]] && echo 1,2,3 || echo 2) python3 benchmarks/tune_tf32_bwd.py --sm90-d128 --quick > $OUT/f${F}_128.out 2>&1; echo "f$F d128 rc=$?"
  grep -E "numerics|FAIL" $OUT/f${F}_128.out
done
for r in 1 2; do
  for v in head f0 f1 f2; do
    python3 .device-tf/ab_bwd.py . /tmp/h_$v $v 64,128 2>&1 | grep -v Warn | tee -a $OUT/ab.log
  done
done
tar czf $OUT/all.tgz -C $OUT $(cd $OUT && ls *.out *.log) && rm -f $OUT/*.out
