# Session 68: the serial part of every test file but the float32 / TF32 cases (run in session 67's call 34).
set -u
. .device-tf/env.sh; export PYTHONPATH=$PWD:$PYTHONPATH:/tmp/site TF_CPP_MIN_LOG_LEVEL=2
md5sum tf_flashattn/_tf_flashattn_ops*.so
s=$SECONDS
timeout -k 5 ${T_SER:-500} python3 -m pytest -q tests -p no:cacheprovider -rfEs \
  -k "(deterministic or past_2_to_31 or dense_backward_switch or command_buffers) and not (float32 or tf32)" \
  > $OUT/serial.log 2>&1; echo "serial rc=$? ($((SECONDS - s)) s)"
grep -E "^(FAILED|ERROR)|^E  " $OUT/serial.log | cut -c1-240 | head -30; tail -3 $OUT/serial.log
