# Session 38, fourth call (no TensorFlow): rows words unpacked again (5 words: lse2, dsum, kb, ke, whole groups);
# head-dim-64 kernel with the whole-group rule read before the S^T wait; the head-dim-128 kernel with it (g1) or with
# tile_in_range and no votes (g0). Numerics, sanitizers, A/B against HEAD (obj38.tgz) in one lease.
set -u
link() {  # dir [set]
  mkdir -p $1 && tar xzf .device-tf/obj38.tgz -C $1 && { [[ -z ${2:-} ]] || tar xzf .device-tf/$2.tgz -C $1; } &&
    OUTDIR=$1 HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
}
link /tmp/h_head; link /tmp/h_g0 g0; link /tmp/h_g1 g1
export HARNESS_ONLY=1
HARNESS_DIR=/tmp/h_g1 timeout 150 env SM90_TUNE_MODES=1,2,3,4,5,6,7 python3 benchmarks/tune_tf32_bwd.py --sm90 --quick > $OUT/g1_64.out 2>&1; echo "g1 d64 rc=$?"; grep -E "numerics|FAIL" $OUT/g1_64.out
for G in 1 0; do
  HARNESS_DIR=/tmp/h_g$G timeout 100 env SM90_D128_MODES=1,2,3 python3 benchmarks/tune_tf32_bwd.py --sm90-d128 --quick > $OUT/g${G}_128.out 2>&1; echo "g$G d128 rc=$?"; grep -E "numerics|FAIL" $OUT/g${G}_128.out
done
for tool in memcheck racecheck; do
  HARNESS_DIR=/tmp/h_g1 timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 python3 .device-tf/san_sm90bwd.py -1 > $OUT/g1_64_$tool.log 2>&1; echo "g1 d64 $tool rc=$?"; tail -1 $OUT/g1_64_$tool.log
  for G in 1 0; do
    HARNESS_DIR=/tmp/h_g$G timeout 60 env SAN_MODE=2 compute-sanitizer --tool $tool --error-exitcode 9 python3 .device-tf/san_sm90bwd128.py > $OUT/g${G}_128_$tool.log 2>&1; echo "g$G d128 $tool rc=$?"; tail -1 $OUT/g${G}_128_$tool.log
  done
done
for r in 1 2; do
  for v in head g0 g1; do
    python3 .device-tf/ab_bwd.py . /tmp/h_$v $v 64,128 2>&1 | grep -v Warn | tee -a $OUT/ab.log
  done
done
tar czf $OUT/all.tgz -C $OUT $(cd $OUT && ls *.out *.log) && rm -f $OUT/*.out $OUT/*_*.log
