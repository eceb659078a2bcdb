# Session 53, calls 5 and 6: the 36-shape table through TensorFlow, one call per step, twice, each run right after its own
# FlashAttention-2 / cuDNN anchors (PyTorch SDPA, the same GPU), as session 49's b49.sh; one run per call
# (RUN=1, then RUN=2). The op library: the candidates' (call 2), which these shapes do not exercise.
set -u
. .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
run=${RUN:?1 or 2}
d=$OUT/bench$run; mkdir -p $d
start=$SECONDS
python3 .device-tf/anchors_torch.py $d/anchors.json > $d/anchors.log 2>&1; echo "anchors $run rc=$? in $((SECONDS - start)) s"
start=$SECONDS
BENCH_INNER=1 BENCH_IMPLS= BENCH_KERAS_D= timeout 400 python3 benchmarks/gpu_attention.py $d/ours.json \
  > $d/ours.log 2>&1; echo "ours $run rc=$? in $((SECONDS - start)) s"
python3 benchmarks/results_table.py $d/anchors.json $d/ours.json > $d/table.md 2>&1; tail -40 $d/table.md
