# Session 51, call 3 (after the TensorFlow bring-over): the op library built here with FA_SM90_BWD_D64_LAG on by
# default (launch-order plain D = 64 kernel): every test file but the serial set (gpu_run.sh alltests, parallel),
# then the head-dim-64 rows through TensorFlow, one call per step, beside the anchors.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
export PYTEST_ARGS="--durations=5"
ALLTESTS_PART=parallel bash benchmarks/gpu_run.sh alltests
export PYTHONPATH=$PWD:$PYTHONPATH TF_CPP_MIN_LOG_LEVEL=2
python3 .device-tf/anchors_torch.py $OUT/anchors.json > $OUT/anchors.log 2>&1; tail -1 $OUT/anchors.log
BENCH_D=64 BENCH_INNER=1 BENCH_IMPLS= BENCH_KERAS_D= timeout 200 python3 benchmarks/gpu_attention.py $OUT/ours.json \
  > $OUT/ours.log 2>&1; echo "ours rc=$?"
python3 benchmarks/results_table.py $OUT/anchors.json $OUT/ours.json > $OUT/table.md 2>&1; tail -14 $OUT/table.md
