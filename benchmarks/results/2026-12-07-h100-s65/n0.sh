# Session 65, after the 20 TensorFlow parts (carry install.sh, env.sh, small, stubs, anchors_torch.py, .whl, the op library
# and _build_info.py): install; keras-hub's wheels; then every head-dim-256 TF32 backward test (the default, the switch
# off, and variants 1-3 by TF_FLASHATTN_SM90_TF32_BWD_D256=2/3/4, each in a process of its own) and the forward features.
set -u
# (installed by inst.sh)

. .device-tf/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH:/tmp/site TF_CPP_MIN_LOG_LEVEL=2
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
so=$(ls tf_flashattn/_tf_flashattn_ops*.so); md5sum $so; tail -2 tf_flashattn/_build_info.py
s=$SECONDS
timeout -k 5 ${N0_LIMIT:-400} python3 -m pytest -q tests/test_gpu.py -p no:cacheprovider -n 5 -rfEs \
  -k "tf32_d256_backward or tf32_d256_features" > $OUT/d256_tests.log 2>&1
echo "d256 tests rc=$? in $((SECONDS - s)) s"; tail -8 $OUT/d256_tests.log
