# Session 65, after n0.sh on the same machine: the 36-shape bf16 table twice, each after its own FlashAttention-2 / cuDNN
# anchors; then the training throughput (TRAIN=0 skips it). About 400 s.
set -u
. .device-tf/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH:/tmp/site TF_CPP_MIN_LOG_LEVEL=2
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
so=$(ls tf_flashattn/_tf_flashattn_ops*.so); md5sum $so
for run in ${RUNS:-1 2}; do
  d=$OUT/bench$run; mkdir -p $d
  s=$SECONDS
  timeout 120 python3 .device-tf/anchors_torch.py $d/anchors.json > $d/anchors.log 2>&1; echo "anchors $run rc=$? in $((SECONDS - s)) s"
  s=$SECONDS
  BENCH_INNER=1 BENCH_IMPLS= BENCH_KERAS_D= timeout 120 python3 benchmarks/gpu_attention.py $d/ours.json \
    > $d/ours.log 2>&1; echo "ours $run rc=$? in $((SECONDS - s)) s"
  python3 benchmarks/results_table.py $d/anchors.json $d/ours.json > $d/table.md 2>&1
  tail -37 $d/table.md | cut -d'|' -f1-4,8-11
done
[[ ${TRAIN:-1} == 1 ]] || exit 0
mkdir -p $OUT/train; s=$SECONDS
timeout 250 python3 benchmarks/train_throughput.py --contexts 4096 16384 --json $OUT/train/train.json 2>&1 \
  | grep -v "^WARNING\|^I0000\|^W0000" > $OUT/train/train.log; echo "train rc=$? in $((SECONDS - s)) s"
tail -12 $OUT/train/train.log
