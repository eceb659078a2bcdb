#!/usr/bin/env bash
# One device call on the lent GPU (after TensorFlow was brought over, ../shared/device/README.md):
# GPU tests through the TF op, the O(N) memory check, and the benchmark with the PyTorch anchors
# in the same run. Carry .device-tf/env.sh and the built tf_flashattn/_tf_flashattn_ops*.so +
# tf_flashattn/_build_info.py. Writes logs and JSON to $OUT.
#   bash benchmarks/gpu_run.sh [tests|memory|bench|all]
set -uo pipefail
. .device-tf/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
what=${1:-all}
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee $OUT/gpu.txt
if [[ $what == tests || $what == all ]]; then
  TF_FORCE_GPU_ALLOW_GROWTH=true python3 -m pytest -q tests/test_gpu.py tests/test_xla.py -p no:cacheprovider \
    -n ${JOBS:-4} 2>&1 | tail -25 | tee $OUT/gpu_tests.log
fi
if [[ $what == memory || $what == all ]]; then
  python3 benchmarks/gpu_memory.py 2>&1 | tail -8 | tee $OUT/gpu_memory.log
fi
if [[ $what == bench || $what == all ]]; then
  BENCH_KERAS_D=${BENCH_KERAS_D:-128} python3 benchmarks/gpu_attention.py $OUT/ours.json > $OUT/ours.log 2>&1
  tail -3 $OUT/ours.log
  python3 .device-tf/anchors_torch.py $OUT/anchors.json > $OUT/anchors.log 2>&1
  tail -2 $OUT/anchors.log
fi
