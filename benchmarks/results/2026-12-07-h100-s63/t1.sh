# Session 63, call 22 (carry the op library of call 21 as tf_flashattn's .so and _build_info.py, .device-tf/env.sh,
# this script; keras-hub's wheels are in /tmp/site from call 21): every test file, the parallel part then the serial
# one (README's `python -m pytest tests -q` in two parts), with FA_SM90_TF32_D256_FEAT on (its new default):
# test_tf32_d256_features expects the Hopper TF32 forward at head dim 256 with masks and options.
set -u
ALLTESTS_PART=both timeout -k 10 585 bash benchmarks/gpu_run.sh alltests
