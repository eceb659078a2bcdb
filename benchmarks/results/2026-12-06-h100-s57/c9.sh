# Session 57, call 9: the 36-shape table again (a second sample) through TensorFlow (one call per step), right after its FlashAttention-2 /
# cuDNN anchors (PyTorch SDPA, the same GPU), with call 6's op library (FA_SM90_BWD_DROP_PAIR 1). Without the float32 table.
set -u
. .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
so=$(ls tf_flashattn/_tf_flashattn_ops*.so); cp /root/libs/new.so $so; md5sum $so
d=$OUT/bench2; mkdir -p $d
start=$SECONDS
python3 .device-tf/anchors_torch.py $d/anchors.json > /root/anchors_2.log 2>&1; echo "anchors rc=$? in $((SECONDS - start)) s"
start=$SECONDS
BENCH_INNER=1 BENCH_IMPLS= BENCH_KERAS_D= timeout 150 python3 benchmarks/gpu_attention.py $d/ours_new.json \
  > /root/ours_new_2.log 2>&1; echo "ours rc=$? in $((SECONDS - start)) s"
python3 benchmarks/results_table.py $d/anchors.json $d/ours_new.json > $d/table_new.md 2>&1; tail -40 $d/table_new.md
