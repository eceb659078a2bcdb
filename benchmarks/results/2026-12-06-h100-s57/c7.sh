# Session 57, call 7: the parallel part of the test files, the same op library as call 6 (/root/libs/new.so).
set -u
. .device-tf/env.sh
so=$(ls tf_flashattn/_tf_flashattn_ops*.so); cp /root/libs/new.so $so; md5sum $so
export PYTEST_ARGS="--durations=5"
ALLTESTS_PART=parallel bash benchmarks/gpu_run.sh alltests
tail -3 $OUT/alltests_parallel.log
