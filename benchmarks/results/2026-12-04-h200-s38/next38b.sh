# Session 38, first call (no TensorFlow). (1) A/B in one lease of the head-dim-64 Hopper TF32 backward: 87149a8
# (old87.tgz tree, obj87.tgz objects) against HEAD (obj38.tgz, built here from HEAD), three alternating rounds.
# (2) ncu --set full of the head-dim-64 causal T=4096 backward in both trees, and of the head-dim-128 backward at
# T=4096 (HEAD). (3) numerics of HEAD's TF32 backwards (its PTX-identical refactors' first GPU run).
set -u
mkdir -p /tmp/old87 && tar xzf .device-tf/old87.tgz -C /tmp/old87 && mkdir -p /tmp/old87/.harness_build &&
  tar xzf .device-tf/obj87.tgz -C /tmp/old87/.harness_build
(cd /tmp/old87 && HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1)
mkdir -p .harness_build && tar xzf .device-tf/obj38.tgz -C .harness_build &&
  HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv | tee $OUT/smi.txt
for r in 1 2 3; do
  python3 .device-tf/ab_d64.py /tmp/old87 old87 2>&1 | grep -v Warn | tee -a $OUT/ab_d64.log
  python3 .device-tf/ab_d64.py . head 2>&1 | grep -v Warn | tee -a $OUT/ab_d64.log
done
prof() {  # tree label D causal kernel-regex
  timeout 150 env PROFILE_B=4 HARNESS_DIR=$1/.harness_build ncu --clock-control none --set full --import-source no \
    --kernel-name "regex:$5" --launch-count 1 -f -o $OUT/ncu_$2 python3 $1/benchmarks/profile_one.py 4096 $3 $4 fp32 tf32 \
    > $OUT/ncu_$2.log 2>&1; echo "ncu $2 rc=$?"
  ncu -i $OUT/ncu_$2.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip > $OUT/src_$2.csv.gz
  ncu -i $OUT/ncu_$2.ncu-rep --page details > $OUT/det_$2.txt 2>&1
  grep -E "Duration|Executed Ipc Active|Issue Slots Busy|Registers Per|Shared Memory Configuration Size|L1/TEX Hit|Bank" $OUT/det_$2.txt | head -14
}
prof /tmp/old87 d64c_old87 64 1 flash_bwd_sm90_tf32_kernel
prof . d64c_head 64 1 flash_bwd_sm90_tf32_kernel
prof . d128_head 128 0 flash_bwd_sm90_tf32_d128_kernel
export HARNESS_ONLY=1
timeout 150 env SM90_TUNE_MODES=1,2,3,4,5,6,7 TF32TUNE_ARGS="--sm90 --quick" bash benchmarks/gpu_run.sh tf32tune > $OUT/h64.out 2>&1; echo "d64 rc=$?"
grep -E "numerics|build of|error|FAIL" $OUT/h64.out
timeout 100 env SM90_D128_MODES=1,2,3 python3 benchmarks/tune_tf32_bwd.py --sm90-d128 --quick > $OUT/h128.out 2>&1; echo "d128 rc=$?"; grep -E "numerics|FAIL|^\| 128" $OUT/h128.out
