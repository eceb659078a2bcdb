# Session 49: the 36-shape table through TensorFlow with FlashAttention-2 and cuDNN (PyTorch SDPA) in the same call,
# op library of f8bb395 (release build: the pruned Hopper forward schedules; the default ones unchanged).
set -u
. .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
mkdir -p $OUT/b
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/b/gpu.txt
start=$SECONDS
python3 .device-tf/anchors_torch.py $OUT/b/anchors.json > $OUT/b/anchors.log 2>&1; echo "anchors rc=$? in $((SECONDS - start)) s"
start=$SECONDS
BENCH_INNER=1 BENCH_IMPLS= BENCH_KERAS_D= timeout ${B49_LIMIT:-400} python3 benchmarks/gpu_attention.py $OUT/b/ours.json > $OUT/b/ours.log 2>&1; echo "ours rc=$? in $((SECONDS - start)) s"
tail -2 $OUT/b/ours.log
tar czf $OUT/b49.tgz -C $OUT b && rm -rf $OUT/b; ls -la $OUT
