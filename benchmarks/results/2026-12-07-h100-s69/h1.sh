# Session 68, harness only (no TensorFlow): ncu of cuDNN's forward beside ours at D = 128, T = 4096 (bf16, no mask),
# then ours alone with a key-length mask (klen: nothing masked) with and without FA_SM90_FWD_FFMA_SOFTMAX.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for d in hR hF; do mkdir -p /tmp/$d && tar -xzf .harness_build/h67.tgz -C /tmp/$d; done
cp .harness_build/ffma_fwd.o /tmp/hF/flash_fwd_sm90.o
for d in hR hF; do OUTDIR=/tmp/$d ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
prof() {  # name, harness dir, then env assignments
  local n=$1 h=$2; shift 2; local s=$SECONDS; mkdir -p $OUT/$n
  env OUT=$OUT/$n HARNESS_DIR=$h PROFILE_DIR=fwd PROFILE_D=128 PROFILE_T=4096 PROFILE_KNAME=flash_fwd_sm90_kernel "$@" \
    timeout -k 5 ${T_PROF:-150} bash benchmarks/gpu_run.sh profile > $OUT/$n.log 2>&1
  echo "== $n rc=$? ($((SECONDS - s)) s)"; cat $OUT/$n.log | cut -c1-200
}
prof cudnn /tmp/hR PROFILE_ANCHOR=cudnn
prof klenR /tmp/hR PROFILE_FA2=0 PROFILE_FEATS=klen
prof klenF /tmp/hF PROFILE_FA2=0 PROFILE_FEATS=klen
