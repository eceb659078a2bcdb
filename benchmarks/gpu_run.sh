#!/usr/bin/env bash
# Device calls on the lent GPU. Writes logs and JSON to $OUT.
#   bash benchmarks/gpu_run.sh harness   # no TensorFlow needed: kernel harness (pybind11, built there
#                                        # with nvcc) numerics + speed vs torch SDPA in one process,
#                                        # tile-configuration timings, compute-sanitizer (~6 min)
# After TensorFlow was brought over (../shared/device/README.md), carrying .device-tf/env.sh and the
# op library built here (tf_flashattn/_tf_flashattn_ops*.so + tf_flashattn/_build_info.py):
#   bash benchmarks/gpu_run.sh tests     # tests/test_gpu.py + tests/test_xla.py (XLA:GPU) (~1-2 min)
#   bash benchmarks/gpu_run.sh memory    # O(N) memory at T=131072
#   bash benchmarks/gpu_run.sh train     # training throughput, both layers under Keras' XLA (~4 min)
#   bash benchmarks/gpu_run.sh bench     # all shapes vs Keras (+XLA), then anchors_torch.py (~7 min)
set -uo pipefail
what=${1:-all}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee $OUT/gpu.txt
if [[ $what == harness ]]; then
  NVCC_EXTRA=-DFA_TUNING ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -2
  python3 benchmarks/kernel_harness_check.py --out $OUT > $OUT/harness.log 2>&1; tail -40 $OUT/harness.log
  for D in 64 128 256; do python3 benchmarks/tune_configs.py $D 16384 2>&1 | grep -v Warn | tee -a $OUT/tune.log; done
  bash benchmarks/sanitize.sh > $OUT/sanitize.log 2>&1; tail -20 $OUT/sanitize.log
  exit 0
fi
. .device-tf/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH TF_CPP_MIN_LOG_LEVEL=2
if [[ $what == tests || $what == all ]]; then
  TF_FORCE_GPU_ALLOW_GROWTH=true python3 -m pytest -q tests/test_gpu.py tests/test_xla.py -p no:cacheprovider \
    -n ${JOBS:-8} 2>&1 | tail -25 | tee $OUT/gpu_tests.log
fi
if [[ $what == memory || $what == all ]]; then
  python3 benchmarks/gpu_memory.py 2>&1 | tail -8 | tee $OUT/gpu_memory.log
fi
if [[ $what == train || $what == all ]]; then
  python3 benchmarks/train_throughput.py --flash-xla 2>&1 | grep -v "^WARNING\|^I0000\|^W0000" \
    | tee $OUT/train_flash_xla.log | tail -8
fi
if [[ $what == bench || $what == all ]]; then
  BENCH_KERAS_D=${BENCH_KERAS_D:-128} python3 benchmarks/gpu_attention.py $OUT/ours.json > $OUT/ours.log 2>&1
  tail -3 $OUT/ours.log
  python3 .device-tf/anchors_torch.py $OUT/anchors.json > $OUT/anchors.log 2>&1
  tail -2 $OUT/anchors.log
fi
