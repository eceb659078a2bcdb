# Session 53, call 2 (after the TensorFlow bring-over): the serial test files on the GPU with the op library built on
# the CPU machine with the three candidate macros at 1 (FA_SM90_BWD_D64_COLS_IDX_ORD, _COLS_DROP, _COLS_BIAS; see
# calls.md), carried as tf_flashattn's library. The parallel part is call 3 (split: session 52's one call was cut).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
md5sum tf_flashattn/_tf_flashattn_ops*.so
export PYTEST_ARGS="--durations=5"
ALLTESTS_PART=serial bash benchmarks/gpu_run.sh alltests
tail -3 $OUT/alltests_serial.log
