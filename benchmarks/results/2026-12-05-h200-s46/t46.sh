# Session 46, through TensorFlow (after the 29 parts): install, then the GPU tests with the op library built here from
# HEAD (the dense TF32 backwards on by default: test_tf32_dense_mask_bias, test_tf32_dense_backward_switch_off, and
# session 42's expect_launches assertions, first run through TensorFlow).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/r
PYTEST_ARGS=-rA timeout ${T46_LIMIT:-480} bash benchmarks/gpu_run.sh tests > $OUT/r/tests.out 2>&1; echo "tests rc=$?"
grep -E "passed|failed|error" $OUT/r/tests.out | tail -5
grep -E "FAILED|ERROR" $OUT/gpu_tests.log | head -20
grep -E "^(PASSED|SKIPPED).*(tf32_dense|expect_launch)" $OUT/gpu_tests.log | cut -c1-160 | head; grep -c "^PASSED" $OUT/gpu_tests.log
cp $OUT/*.log $OUT/r/ 2>/dev/null
tar czf $OUT/t46.tgz -C $OUT r && find $OUT -mindepth 1 ! -name t46.tgz -delete; ls -la $OUT
