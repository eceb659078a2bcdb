# Session 52, call 4: the example model's training throughput (both models under XLA, contexts 4096 and 16384).
set -u
. .device-tf/env.sh
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TF_CPP_MIN_LOG_LEVEL=2
mkdir -p $OUT/train
start=$SECONDS
timeout 560 python3 benchmarks/train_throughput.py --contexts 4096 16384 --json $OUT/train/train.json 2>&1 \
  | grep -v "^WARNING\|^I0000\|^W0000" > $OUT/train/train.log; echo "train rc=$? in $((SECONDS - start)) s"
tail -12 $OUT/train/train.log
