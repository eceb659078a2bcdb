# Session 54, call 4: the 36-shape table through TensorFlow, one call per step, twice in one call, each run right after its
# own FlashAttention-2 / cuDNN anchors (PyTorch SDPA, the same GPU), as session 53's c5.sh. Main's op library (call 2):
# the first table with FA_SM90_BWD_DESC_ADD (the D = 128 backward).
set -u
. .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
for run in 1 2; do
  d=$OUT/bench$run; mkdir -p $d
  start=$SECONDS
  python3 .device-tf/anchors_torch.py $d/anchors.json > $d/anchors.log 2>&1; echo "anchors $run rc=$? in $((SECONDS - start)) s"
  start=$SECONDS
  BENCH_INNER=1 BENCH_IMPLS= BENCH_KERAS_D= timeout 250 python3 benchmarks/gpu_attention.py $d/ours.json \
    > $d/ours.log 2>&1; echo "ours $run rc=$? in $((SECONDS - start)) s"
  python3 benchmarks/results_table.py $d/anchors.json $d/ours.json > $d/table.md 2>&1; tail -40 $d/table.md
done
