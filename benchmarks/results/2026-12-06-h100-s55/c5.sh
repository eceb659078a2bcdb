# Session 55 (session 54's .harness_build/c57.sh as it was prepared).
# The head-dim-128 Hopper TF32 backward's dQ modes on the H100 (the float32 bar's failing cell: D = 128 backward without
# a mask, 1.74x-1.80x Keras+XLA in session 49). Mode 4 (kKtRows: K^T fragments from row addresses plus immediate
# offsets, 112 fewer instructions; 25ba3e2) has never run on a GPU; modes 2 (the default) and 3 were timed on the H200
# only. Harness only, NA of .harness_build/cand55.tgz (session 54's defaults, FA_SM90_TF32_BWD_DESC_ADD on: every mode
# is in a release build). Numerics of each mode (13 cases + the harness's head-dim-128 ones), then TFLOP/s at 16k
# tokens, hidden 1024, T = 1024 / 4096 / 16384, causal or not, against sm80's TF32 kernel (mode 0).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
[[ -d .harness_build/NA ]] || tar xzf .harness_build/cand55.tgz -C .harness_build
ls .harness_build/NA/flash_harness*.so > /dev/null 2>&1 || OUTDIR=.harness_build/NA ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1
t0=$SECONDS
HARNESS_DIR=.harness_build/NA timeout -k 5 300 python3 benchmarks/tune_tf32_bwd.py --sm90-d128 2>&1 | grep -v Warn \
  > $OUT/tune_tf32_d128.log
echo "tune --sm90-d128 rc=$? ($((SECONDS - t0)) s)"; grep -E "^\||FAIL|pass" $OUT/tune_tf32_d128.log | tail -40
