# Session 59: the example model's training throughput (both models under XLA, contexts 4096 and 16384) with the op
# library carried as tf_flashattn's, only if the lease is on an H200 (the issue's figure is the H200's).
set -u
bash .device-tf/install.sh > /dev/null; . .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
so=$(ls tf_flashattn/_tf_flashattn_ops*.so); md5sum $so
mkdir -p $OUT/train
start=$SECONDS
timeout 560 python3 benchmarks/train_throughput.py --contexts 4096 16384 --json $OUT/train/train.json 2>&1 \
  | grep -v "^WARNING\|^I0000\|^W0000" > $OUT/train/train.log; echo "train rc=$? in $((SECONDS - start)) s"
tail -12 $OUT/train/train.log
