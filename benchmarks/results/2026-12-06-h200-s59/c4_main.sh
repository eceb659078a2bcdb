# Session 59, call 4 (after the TensorFlow bring-over; carry main's op library, .harness_build/so_s57/, as
# tf_flashattn's library, with _build_info.py, install.sh, env.sh): keeps it as /root/libs/main.so and checks that
# TensorFlow loads it on the GPU.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
bash .device-tf/install.sh > /dev/null; . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
so=$(ls tf_flashattn/_tf_flashattn_ops*.so); mkdir -p /root/libs && cp $so /root/libs/main.so; md5sum /root/libs/*.so
python3 -c "import tensorflow as tf, tf_flashattn as fa; q = tf.random.normal([1, 256, 2, 128]); print(float(tf.reduce_sum(fa.dot_product_attention(q, q, q))), tf.config.list_physical_devices('GPU'))" 2>&1 | tail -1
