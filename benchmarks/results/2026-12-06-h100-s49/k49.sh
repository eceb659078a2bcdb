# Session 49, the two calls after x49.sh in the same lease (TensorFlow and /tmp/site still installed there):
# test_layers.py again after it took conftest's full_float32, then Keras' MultiHeadAttention suite and the KerasHub
# training benchmark. Outputs: keras/layers_after_fix.log, keras/mha_suite.log, keras/kerashub_*.
set -u
. .device-tf/env.sh; export PYTHONPATH=$PWD:${PYTHONPATH:-}:/tmp/site TF_CPP_MIN_LOG_LEVEL=2
mkdir -p $OUT/x $OUT/k
TF_FORCE_GPU_ALLOW_GROWTH=true timeout 300 python3 -m pytest -q -p no:cacheprovider -n 8 -rA tests/test_layers.py > $OUT/x/layers.log 2>&1
TF_FORCE_GPU_ALLOW_GROWTH=true timeout 150 python3 -m pytest -q -p no:cacheprovider -n 8 tests/test_keras_mha_suite.py > $OUT/k/mha_suite.log 2>&1
timeout 330 bash benchmarks/gpu_run.sh kerashub > $OUT/k/kerashub_run.log 2>&1
cp $OUT/kerashub_train.* $OUT/k/ 2>/dev/null
