# Session 39, the call through TensorFlow (after the 24 parts): GPU tests with the op library built here from the
# session's tree (the padded head dims on the Hopper 16-bit kernels), then the table at head dims 80 and 96
# (ours one call per step as gpu_attention.py, FA2 / cuDNN through PyTorch in the same call).
set -u
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
mkdir -p $OUT/r
timeout 330 bash benchmarks/gpu_run.sh tests > $OUT/r/tests.out 2>&1; echo "tests rc=$?"
grep -E "passed|failed|error" $OUT/r/tests.out | tail -5
grep -E "padded_head_dims" $OUT/gpu_tests.log | head -5
BENCH_D=80,96 BENCH_T=4096,16384 BENCH_INNER=1 BENCH_KERAS_D= BENCH_IMPLS= timeout 200 python3 benchmarks/gpu_attention.py $OUT/r/ours_pad.json > $OUT/r/ours_pad.log 2>&1; echo "ours rc=$?"
ANCHOR_D=80,96 ANCHOR_T=4096,16384 timeout 120 python3 .device-tf/anchors_pad.py $OUT/r/anchors_pad.json > $OUT/r/anchors_pad.log 2>&1; echo "anchors rc=$?"
tail -20 $OUT/r/ours_pad.log
grep -v efficient $OUT/r/anchors_pad.log | grep -v math | tail -16
cp -r $OUT/*.json $OUT/*.log $OUT/*.md $OUT/r/ 2>/dev/null
tar czf $OUT/t39.tgz -C $OUT r && find $OUT -mindepth 1 ! -name t39.tgz -delete; ls -la $OUT
