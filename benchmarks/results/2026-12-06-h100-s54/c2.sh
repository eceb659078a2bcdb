# Session 54, call 2 (after the TensorFlow bring-over): the serial test files on the GPU with main's op library (built on
# the CPU machine at 4d564b9 in 133 s, md5 dbc1b4c9...; the later commits change off-by-default macros, comments and a
# helper whose SASS is the same), carried as tf_flashattn's library: FA_SM90_BWD_DESC_ADD's first run through TensorFlow.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
md5sum tf_flashattn/_tf_flashattn_ops*.so
export PYTEST_ARGS="--durations=5"
ALLTESTS_PART=serial bash benchmarks/gpu_run.sh alltests
tail -3 $OUT/alltests_serial.log
