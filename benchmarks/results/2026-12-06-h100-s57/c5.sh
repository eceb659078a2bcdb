# Session 57, call 5 (after call 4, the same machine): the same training step with the op library built here with
# FA_SM90_BWD_DROP_PAIR at 1 (carried as tf_flashattn's library), then main's again (call 4's /root/libs/main.so), then
# the candidate's again: A / B / A in one call.
set -u
. .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
so=$(ls tf_flashattn/_tf_flashattn_ops*.so); cp $so /root/libs/pair.so; md5sum /root/libs/*.so
export STEP_DTYPE=bfloat16 STEP_IMPLS=ours STEP_FEATURES=none,dropout STEP_D=64,128 STEP_T=4096,16384 STEP_HIDDEN=2048 \
  STEP_TOKENS=16384 STEP_STEPS=20
for lib in pair main pair; do
  cp /root/libs/$lib.so $so
  STEP_LABEL=$lib timeout 200 python3 benchmarks/tf32_features_step.py $OUT/step_${lib}_$SECONDS.json 2>&1 \
    | grep -v "^WARNING\|^I0000\|^W0000" | tail -8
done
cp /root/libs/pair.so $so
