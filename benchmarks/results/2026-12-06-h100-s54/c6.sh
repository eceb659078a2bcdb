# Session 54, call 6: the parallel part of the test files with the candidates' op library (left in tf_flashattn/ by
# call 5: FA_SM90_FWD_FFMA_SOFTMAX and FA_SM90_TF32_BWD_DESC_ADD at 1).
set -u
. .device-tf/env.sh
md5sum tf_flashattn/_tf_flashattn_ops*.so
export PYTEST_ARGS="--durations=5"
ALLTESTS_PART=parallel bash benchmarks/gpu_run.sh alltests
tail -3 $OUT/alltests_parallel.log
