# Session 54, call 3: the parallel part of the test files, the same op library as call 2 (kept on the machine).
set -u
. .device-tf/env.sh
md5sum tf_flashattn/_tf_flashattn_ops*.so
export PYTEST_ARGS="--durations=5"
ALLTESTS_PART=parallel bash benchmarks/gpu_run.sh alltests
tail -3 $OUT/alltests_parallel.log
