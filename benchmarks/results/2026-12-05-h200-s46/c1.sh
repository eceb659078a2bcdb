# Session 46, call 1 (no TensorFlow): the harness objects of HEAD carried (.harness_build/h90.tgz) and linked there;
# racecheck of two dense TF32 backward cases (the summary this time), pad_bench --tf32 --bias on an H200 (the
# H100's figures are in RESULTS.md (m)), and ncu of the Hopper forward with and without dropout (pipe use).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
hb=/tmp/hb_sm90; mkdir -p $hb && tar xzf .harness_build/h90.tgz -C $hb
OUTDIR=$hb HARNESS_ONLY=1 ARCHS=90 bash benchmarks/build_harness.sh 2>&1 | tail -1
R=$OUT/r; mkdir -p $R
run() { local name=$1 lim=$2; shift 2; local t0=$SECONDS left=$((${C1_DEADLINE:-570} - SECONDS))
  (( left < 15 )) && { echo "$name skipped (call time)"; return; }; (( lim > left )) && lim=$left
  timeout -k 5 $lim "$@" > $R/$name.log 2>&1; echo "$name rc=$? ($((SECONDS - t0)) s)"; }
run racecheck 260 env TF32PAD_CASES=tbbias_h_d64,tbmask_rows_d64 TF32PAD_MODES=1 compute-sanitizer --tool racecheck \
  --print-limit 20 python3 benchmarks/sm90_bwd_check.py --phase tf32pad --lib $hb
grep -E "RACECHECK SUMMARY|hazard|^FAIL|^PASS|^tf32pad:" $R/racecheck.log | cut -c1-200 | head -8
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  run pad 110 python3 benchmarks/pad_bench.py --lib $hb --tf32 --bias --shapes 64,128 --t 4096,16384 --out $R/pad_tf32_bias.json
  grep -E "^\|" $R/pad.log | head -14
fi
for feats in dropout none; do for d in 64 128; do
  left=$((${C1_DEADLINE:-570} - SECONDS)); (( left < 50 )) && { echo "profile $feats D=$d skipped"; continue; }
  f=; [[ $feats != none ]] && f=$feats
  HARNESS_DIR=$hb PROFILE_DIR=fwd PROFILE_D=$d PROFILE_KNAME=flash_fwd_sm90_kernel PROFILE_FEATS=$f PROFILE_FA2=0 \
    timeout 80 bash benchmarks/gpu_run.sh profile > $R/profile_${feats}_d$d.out 2>&1; echo "profile $feats D=$d rc=$?"
  cat $R/profile_${feats}_d$d.out | cut -c1-150 | head -60
done; done
cp $OUT/ncu_*.txt $R/ 2>/dev/null; rm -f $OUT/ncu_*.txt
