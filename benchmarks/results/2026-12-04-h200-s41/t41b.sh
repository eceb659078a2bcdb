# Session 41 (second lease), through TensorFlow (after the 29 parts): GPU tests with the op library built here from this session's
# tree (soft-cap on the Hopper TF32 forward and backwards: test_tf32_softcap, the float32 _softcap determinism rows).
set -u
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/r
timeout 420 bash benchmarks/gpu_run.sh tests > $OUT/r/tests.out 2>&1; echo "tests rc=$?"
grep -E "passed|failed|error" $OUT/r/tests.out | tail -5
grep -E "tf32_dropout|tf32_softcap" $OUT/gpu_tests.log | grep -c PASSED
grep -E "FAILED|ERROR" $OUT/gpu_tests.log | head -10
grep -E "determinis" $OUT/gpu_tests.log | grep -c PASSED
cp -r $OUT/*.json $OUT/*.log $OUT/*.md $OUT/r/ 2>/dev/null
tar czf $OUT/t41b.tgz -C $OUT r && find $OUT -mindepth 1 ! -name t41b.tgz -delete; ls -la $OUT
