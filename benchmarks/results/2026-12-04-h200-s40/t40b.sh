# Session 40, second call through TensorFlow (after the 29 parts): GPU tests with the op library built here from this session's
# tree (the Hopper TF32 backwards in deterministic mode too).
set -u
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/r
timeout 330 bash benchmarks/gpu_run.sh tests > $OUT/r/tests.out 2>&1; echo "tests rc=$?"
grep -E "passed|failed|error" $OUT/r/tests.out | tail -5
grep -E "padded_head_dims" $OUT/gpu_tests.log | grep -c PASSED
grep -E "FAILED|ERROR" $OUT/gpu_tests.log | head -10
grep -E "determinis" $OUT/gpu_tests.log | head -5
cp -r $OUT/*.json $OUT/*.log $OUT/*.md $OUT/r/ 2>/dev/null
tar czf $OUT/t40b.tgz -C $OUT r && find $OUT -mindepth 1 ! -name t40b.tgz -delete; ls -la $OUT
