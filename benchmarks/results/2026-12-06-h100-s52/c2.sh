# Session 52, call 2 (after the TensorFlow bring-over): every test file on the GPU with the op library built on the
# CPU machine (see calls.md for which build: main's defaults, or FA_SM90_BWD_D64_COLS_IDX=1 if call 1's A/B holds),
# the serial set first (not yet run with the lagged D = 64 dQ), then the rest in parallel.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bash .device-tf/install.sh > /dev/null && . .device-tf/env.sh
python3 -c "import tf_flashattn._build_info as b; print(b.__dict__.get('BACKENDS'))"
export PYTEST_ARGS="--durations=5"
ALLTESTS_PART=serial bash benchmarks/gpu_run.sh alltests
tail -3 $OUT/alltests_serial.log
ALLTESTS_PART=parallel bash benchmarks/gpu_run.sh alltests
tail -3 $OUT/alltests_parallel.log
