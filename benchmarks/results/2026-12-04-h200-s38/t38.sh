# Session 38, the call through TensorFlow (after the 24 parts): GPU tests and the float32 table with the op library
# built here from the session's tree, then ncu of both Hopper TF32 backwards through the kernel harness (objects
# built here from the same tree: objfin.tgz). Everything into $OUT/t38.tgz.
set -u
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
mkdir -p $OUT/r
timeout 330 bash benchmarks/gpu_run.sh tests > $OUT/r/tests.out 2>&1; echo "tests rc=$?"
grep -E "passed|failed|error" $OUT/r/tests.out | tail -5
timeout 150 env F32_D=64,128 bash benchmarks/gpu_run.sh float32 > $OUT/r/float32.out 2>&1; echo "float32 rc=$?"
tail -30 $OUT/r/float32.out
mkdir -p .harness_build && tar xzf .device-tf/objfin.tgz -C .harness_build &&
  HARNESS_ONLY=1 NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
prof() {  # label D causal kernel-regex
  timeout 100 env PROFILE_B=4 ncu --clock-control none --set full --import-source no --kernel-name "regex:$4" \
    --launch-count 1 -f -o $OUT/r/$1 python3 benchmarks/profile_one.py 4096 $2 $3 fp32 tf32 > $OUT/r/ncu_$1.log 2>&1
  echo "ncu $1 rc=$?"
  ncu -i $OUT/r/$1.ncu-rep --page source --print-source sass --csv 2>/dev/null | gzip > $OUT/r/src_$1.csv.gz
  ncu -i $OUT/r/$1.ncu-rep --page details > $OUT/r/det_$1.txt 2>&1; rm -f $OUT/r/$1.ncu-rep
  grep -E "Duration|Executed Ipc Active" $OUT/r/det_$1.txt | head -2
}
prof d128_split 128 0 flash_bwd_sm90_tf32_d128_kernel
prof d128c_split 128 1 flash_bwd_sm90_tf32_d128_kernel
cp -r $OUT/*.json $OUT/*.log $OUT/*.md $OUT/r/ 2>/dev/null
tar czf $OUT/t38.tgz -C $OUT r && find $OUT -mindepth 1 ! -name t38.tgz -delete; ls -la $OUT
