# Session 56, call 3 (after the TensorFlow bring-over and install): the serial test files on the GPU with the op
# library built here with FA_SM90_BWD_DROP128 at its new default 2 (md5 0bf14f62...), carried as tf_flashattn's library.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
so=$(ls tf_flashattn/_tf_flashattn_ops*.so); md5sum $so
mkdir -p /root/libs && cp $so /root/libs/new.so
export PYTEST_ARGS="--durations=5"
ALLTESTS_PART=serial bash benchmarks/gpu_run.sh alltests
tail -3 $OUT/alltests_serial.log
