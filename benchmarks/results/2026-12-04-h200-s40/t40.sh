# Session 40, through TensorFlow (after the 29 parts): GPU tests with the op library built here from this session's
# tree (the Hopper TF32 backwards padded up; the 16-bit IDX routing and the TF32 padded forward of session 39, first
# time through TensorFlow), then the float32 table at head dims 80 and 96 against Keras under XLA.
set -u
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p $OUT/r
timeout 330 bash benchmarks/gpu_run.sh tests > $OUT/r/tests.out 2>&1; echo "tests rc=$?"
grep -E "passed|failed|error" $OUT/r/tests.out | tail -5
grep -E "padded_head_dims" $OUT/gpu_tests.log | grep -c PASSED
grep -E "FAILED|ERROR" $OUT/gpu_tests.log | head -10
F32_D=80,96 F32_T=1024,4096,16384 timeout 200 bash benchmarks/gpu_run.sh float32 > $OUT/r/float32.out 2>&1; echo "float32 rc=$?"
grep -v "^I0000\|^WARNING" $OUT/float32.log | tail -16
cp -r $OUT/*.json $OUT/*.log $OUT/*.md $OUT/r/ 2>/dev/null
tar czf $OUT/t40.tgz -C $OUT r && find $OUT -mindepth 1 ! -name t40.tgz -delete; ls -la $OUT
