# Session 47, second run (after review fixes: test_features checks the Hopper TF32 launches, test_sm80_kernels_on_hopper also runs test_dropout_matches_reference_and_cpu, 93 cases), through TensorFlow (after the 29 parts of .device-tf/rechunk3): install, then the GPU tests with the op
# library built here from the working tree of this session (sm80 kernel bodies only in the SASS of the targets whose
# devices run them: SmemClass in cc/kernels/common/flash_cuda_common.cuh; the new test_sm80_kernels_on_hopper runs
# 90 cases on sm80's kernels with TF_FLASHATTN_SM90=0).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/r
PYTEST_ARGS=-rA timeout ${T47_LIMIT:-540} bash benchmarks/gpu_run.sh tests > $OUT/r/tests.out 2>&1; echo "tests rc=$?"
grep -E "passed|failed|error" $OUT/r/tests.out | tail -5
grep -E "FAILED|ERROR" $OUT/gpu_tests.log | head -20
grep -E "^(PASSED|SKIPPED|FAILED).*(sm80_kernels_on_hopper|switch_off)" $OUT/gpu_tests.log | cut -c1-160 | head
grep -c "^PASSED" $OUT/gpu_tests.log
cp $OUT/*.log $OUT/r/ 2>/dev/null
tar czf $OUT/t47b.tgz -C $OUT r && find $OUT -mindepth 1 ! -name t47b.tgz -delete; ls -la $OUT
