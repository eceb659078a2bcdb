# Session 57, call 6: the serial test files on the GPU with the op library carried as tf_flashattn's (built here; its
# md5 in calls.md).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bash .device-tf/install.sh > /dev/null; . .device-tf/env.sh
so=$(ls tf_flashattn/_tf_flashattn_ops*.so); md5sum $so
mkdir -p /root/libs && cp $so /root/libs/new.so
export PYTEST_ARGS="--durations=5"
ALLTESTS_PART=serial bash benchmarks/gpu_run.sh alltests
tail -3 $OUT/alltests_serial.log
