# Session 38, fifth call (no TensorFlow): the head-dim-128 Hopper TF32 backward with each ring slot's two halves
# on their own barriers (FA_D128_SPLIT=1: Qr / dOr / rows released after dS^T, QT / dOT after dK; warp 2 loads
# QT / dOT) against the committed kernel (sp0 = FA_D128_SPLIT=0). Numerics every dQ mode, sanitizers, A/B.
set -u
link() {  # dir set
  mkdir -p $1 && tar xzf .device-tf/obj38.tgz -C $1 && tar xzf .device-tf/$2.tgz -C $1 &&
    OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
}
link /tmp/h_sp0 sp0; link /tmp/h_sp1 sp1
export HARNESS_ONLY=1
HARNESS_DIR=/tmp/h_sp1 timeout 120 env SM90_D128_MODES=1,2,3 python3 benchmarks/tune_tf32_bwd.py --sm90-d128 --quick > $OUT/sp1_128.out 2>&1; echo "sp1 d128 rc=$?"; grep -E "numerics|FAIL|^\| 128" $OUT/sp1_128.out
for mode in 2 3 1; do for tool in memcheck racecheck; do
  HARNESS_DIR=/tmp/h_sp1 timeout 60 env SAN_MODE=$mode compute-sanitizer --tool $tool --error-exitcode 9 python3 .device-tf/san_sm90bwd128.py > $OUT/sp1_m${mode}_$tool.log 2>&1; echo "sp1 mode $mode $tool rc=$?"; tail -1 $OUT/sp1_m${mode}_$tool.log
done; done
for r in 1 2; do
  for v in sp0 sp1; do
    python3 .device-tf/ab_bwd.py . /tmp/h_$v $v 128 2>&1 | grep -v Warn | tee -a $OUT/ab.log
  done
done
tar czf $OUT/all.tgz -C $OUT $(cd $OUT && ls *.out *.log) && rm -f $OUT/*.out $OUT/sp1_*.log
