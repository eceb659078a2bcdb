# Session 67, harness only (no TensorFlow): two forward candidates against R = this tree's ARCHS=90 harness objects
# (h67.tgz, the defaults). Q = R with flash_fwd_sm90.o built with -DFA_SM90_FWD_SPLIT_Q=1 (splitq_fwd.o: the
# persistent schedules 7 / 10 with Q's rows and barriers per consumer warpgroup, the turns running on across tiles);
# F = R with -DFA_SM90_FWD_FFMA_SOFTMAX=1 (ffma_fwd.o). Loop A/B: A = candidate, B = R (B / A > 1: candidate faster).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for d in hR hQ hF; do mkdir -p /tmp/$d && tar -xzf .harness_build/h67.tgz -C /tmp/$d; done
cp .harness_build/splitq_fwd.o /tmp/hQ/flash_fwd_sm90.o
cp .harness_build/ffma_fwd.o /tmp/hF/flash_fwd_sm90.o
for d in hR hQ hF; do OUTDIR=/tmp/$d ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
chk() {  # name, env, phase, lib, limit
  local s=$SECONDS; mkdir -p $OUT/$1
  env $2 timeout -k 5 $5 python3 benchmarks/sm90_check.py --phase $3 --lib $4 --out $OUT/$1 > $OUT/$1.log 2>&1
  echo "$1 rc=$? ($((SECONDS - s)) s)"
  grep -E "^FAIL|numerics:|variants:|defaults:|bitwise_vs_v0=False|bitwise_vs_nomask=False|NOT taken|Error|error" $OUT/$1.log | cut -c1-220 | head -10
}
ab() {  # name, candidate lib, set
  local s=$SECONDS; mkdir -p $OUT/$1
  OUT=$OUT/$1 AB_A=$2 AB_B=/tmp/hR AB_CHECKS=loop AB_LOOP_SET=$3 timeout -k 5 ${T_AB:-200} bash benchmarks/gpu_run.sh ab \
    > /dev/null 2>&1; echo "ab $1 rc=$? ($((SECONDS - s)) s)"; tail -12 $OUT/$1/ab_summary.log
}
chk q_variants X=1 variants /tmp/hQ 200
chk q_vcap TF_FLASHATTN_SM90_PERSISTENT_CTAS=2 variants /tmp/hQ 150
ab q_fwd /tmp/hQ fwd
chk f_numerics X=1 numerics /tmp/hF 150
ab f_fwd /tmp/hF fwd
ab f_fwdmask /tmp/hF fwdmask
for tool in synccheck racecheck; do
  s=$SECONDS
  TF_FLASHATTN_SM90_PERSISTENT_CTAS=2 timeout -k 5 ${T_SAN:-150} compute-sanitizer --tool $tool --print-limit 20 \
    python3 benchmarks/sm90_check.py --phase vsanitize --lib /tmp/hQ > $OUT/q_$tool.log 2>&1
  echo "q $tool rc=$? ($((SECONDS - s)) s)"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|Barrier|^FAIL|^variant " $OUT/q_$tool.log | head -8
done
