# Session 38, second call (no TensorFlow): the rows warp's whole-key-group word (tf32_bwd_needs_mask) in both Hopper
# TF32 backwards (obj38n.tgz, built here from the working tree) against HEAD (obj38.tgz) and 87149a8 (old87 / obj87):
# numerics, sanitizers, A/B timings in one lease, ncu source pages (tarred).
set -u
mkdir -p /tmp/old87 && tar xzf .device-tf/old87.tgz -C /tmp/old87 && mkdir -p /tmp/old87/.harness_build &&
  tar xzf .device-tf/obj87.tgz -C /tmp/old87/.harness_build
(cd /tmp/old87 && HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1)
mkdir -p .harness_head && tar xzf .device-tf/obj38.tgz -C .harness_head &&
  OUTDIR=.harness_head HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
mkdir -p .harness_build && tar xzf .device-tf/obj38n.tgz -C .harness_build &&
  HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
export HARNESS_ONLY=1
# numerics of the new objects (every d64 variant, every d128 dQ mode)
timeout 150 env SM90_TUNE_MODES=1,2,3,4,5,6,7 TF32TUNE_ARGS="--sm90 --quick" bash benchmarks/gpu_run.sh tf32tune > $OUT/n64.out 2>&1; echo "d64 rc=$?"
grep -E "numerics|error|FAIL" $OUT/n64.out
timeout 100 env SM90_D128_MODES=1,2,3 python3 benchmarks/tune_tf32_bwd.py --sm90-d128 --quick > $OUT/n128.out 2>&1; echo "d128 rc=$?"; grep -E "numerics|FAIL" $OUT/n128.out
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 .device-tf/san_sm90bwd.py -1 > $OUT/n64_memcheck.log 2>&1; echo "d64 memcheck rc=$?"; tail -1 $OUT/n64_memcheck.log
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 python3 .device-tf/san_sm90bwd.py -1 > $OUT/n64_racecheck.log 2>&1; echo "d64 racecheck rc=$?"; tail -1 $OUT/n64_racecheck.log
timeout 60 env SAN_MODE=2 compute-sanitizer --tool memcheck --error-exitcode 9 python3 .device-tf/san_sm90bwd128.py > $OUT/n128_memcheck.log 2>&1; echo "d128 memcheck rc=$?"; tail -1 $OUT/n128_memcheck.log
timeout 60 env SAN_MODE=2 compute-sanitizer --tool racecheck --error-exitcode 9 python3 .device-tf/san_sm90bwd128.py > $OUT/n128_racecheck.log 2>&1; echo "d128 racecheck rc=$?"; tail -1 $OUT/n128_racecheck.log
for r in 1 2; do
  python3 .device-tf/ab_bwd.py /tmp/old87 /tmp/old87/.harness_build old87 64 2>&1 | grep -v Warn | tee -a $OUT/ab.log
  python3 .device-tf/ab_bwd.py . .harness_head head 64,128 2>&1 | grep -v Warn | tee -a $OUT/ab.log
  python3 .device-tf/ab_bwd.py . .harness_build new 64,128 2>&1 | grep -v Warn | tee -a $OUT/ab.log
done
mkdir -p $OUT/ncu
prof() {  # tree label D causal kernel-regex (harness: tree/.harness_build)
  timeout 120 env PROFILE_B=4 HARNESS_DIR=$1/.harness_build ncu --clock-control none --set full --import-source no \
    --kernel-name "regex:$5" --launch-count 1 -f -o $OUT/ncu/$2 python3 $1/benchmarks/profile_one.py 4096 $3 $4 fp32 tf32 \
    > $OUT/ncu/$2.log 2>&1; echo "ncu $2 rc=$?"
  ncu -i $OUT/ncu/$2.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip > $OUT/ncu/src_$2.csv.gz
  ncu -i $OUT/ncu/$2.ncu-rep --page details > $OUT/ncu/det_$2.txt 2>&1
  grep -E "Duration|Executed Ipc Active|Registers Per" $OUT/ncu/det_$2.txt | head -4
}
prof /tmp/old87 d64c_old87 64 1 flash_bwd_sm90_tf32_kernel
prof . d64c_new 64 1 flash_bwd_sm90_tf32_kernel
prof . d128_new 128 0 flash_bwd_sm90_tf32_d128_kernel
prof . d128c_new 128 1 flash_bwd_sm90_tf32_d128_kernel
rm -f $OUT/ncu/*.ncu-rep; tar czf $OUT/ncu.tgz -C $OUT ncu && rm -rf $OUT/ncu
tar czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.out *.log 2>/dev/null)
