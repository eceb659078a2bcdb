# Session 52, call 1 (no TensorFlow): FA_SM90_BWD_D64_COLS_IDX, the D = 64 index-masked backward in the launch
# order (no dropout, no bias) with dQ split by columns and issued a unit late, as the plain kernel since f00a92c.
# IC = harness objects with flash_bwd_sm90.o built with -DFA_SM90_BWD_D64_COLS_IDX=1, IB = the same at the default 0
# (.harness_build/idx52.tgz, built on the CPU machine from 2b84385's tree; at 1a895d5 the object's SASS is the same).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/idx52.tgz -C .harness_build
OUTDIR=.harness_build/IC ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1
# Correctness first: numerics of IC (dq / dk / dv against float64, every mask kind, odd sizes, GQA).
t0=$SECONDS
timeout -k 5 150 python3 benchmarks/sm90_bwd_check.py --phase numerics --lib .harness_build/IC > $OUT/idx_numerics.log 2>&1
echo "numerics IC rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^numerics" $OUT/idx_numerics.log | head -12
# IC against IB: dk, dv bit for bit and dq within its bound (splitd), then the mask set timed, alternating.
AB_A=.harness_build/IC AB_B=.harness_build/IB SAVE_SET=main AB_CHECKS=splitd,loop AB_LOOP_SET=mask \
  bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
tail -24 $OUT/ab_summary.log
for tool in racecheck memcheck synccheck; do
  t0=$SECONDS
  SANITIZE_PREFIX=all_masks_d64,win_gqa_mqa_d64 timeout -k 5 100 compute-sanitizer --tool $tool --print-limit 20 \
    python3 benchmarks/sm90_bwd_check.py --phase sanitize --lib .harness_build/IC > $OUT/${tool}_IC.log 2>&1
  echo "$tool IC rc=$? ($((SECONDS - t0)) s)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|^numerics:|^FAIL|^sanitize" $OUT/${tool}_IC.log | cut -c1-200 | head -6
done
