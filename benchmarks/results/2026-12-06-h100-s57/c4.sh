# Session 57, call 4 (after the TensorFlow bring-over): dropout's cost as users see it, main's op library (session 56's
# defaults, built here, carried as tf_flashattn's library): one training step (forward + backward in one tf.function,
# one attention per step) through TensorFlow, bf16, without dropout and with 0.1, benchmarks/tf32_features_step.py.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bash .device-tf/install.sh > /dev/null; . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
so=$(ls tf_flashattn/_tf_flashattn_ops*.so); mkdir -p /root/libs && cp $so /root/libs/main.so; md5sum /root/libs/*.so
export STEP_DTYPE=bfloat16 STEP_IMPLS=ours STEP_FEATURES=none,dropout STEP_D=64,128 STEP_T=4096,16384 STEP_HIDDEN=2048 \
  STEP_TOKENS=16384 STEP_STEPS=20
STEP_LABEL=main timeout 200 python3 benchmarks/tf32_features_step.py $OUT/step_main_1.json 2>&1 | grep -v "^WARNING\|^I0000\|^W0000" | tail -9
