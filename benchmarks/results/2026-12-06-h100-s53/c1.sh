# Session 53, call 1: the three candidates of session 52 (FA_SM90_BWD_D64_COLS_IDX_ORD, _COLS_DROP, _COLS_BIAS),
# harness only, as prepared in session 52 (its note holds this script in full).
# Candidates of session 52 (commit after 964d593), harness only: OA = main's objects (flash_bwd_sm90.o at the
# defaults), OB = the same with -DFA_SM90_BWD_D64_COLS_IDX_ORD=1 -DFA_SM90_BWD_D64_COLS_DROP=1
# -DFA_SM90_BWD_D64_COLS_BIAS=1 (.harness_build/cand53.tgz). Carry .harness_build/cand53.tgz.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand53.tgz -C .harness_build
OUTDIR=.harness_build/OB ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1
t0=$SECONDS
timeout -k 5 150 python3 benchmarks/sm90_bwd_check.py --phase numerics --lib .harness_build/OB > $OUT/ob_numerics.log 2>&1
echo "numerics OB rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^numerics" $OUT/ob_numerics.log | head -12
AB_A=.harness_build/OB AB_B=.harness_build/OA SAVE_SET=main AB_CHECKS=splitd,loop AB_LOOP_SET=mask \
  bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
mv $OUT/ab_summary.log $OUT/ab_summary_mask.log; mv $OUT/ab_loop.log $OUT/ab_loop_mask.log
AB_A=.harness_build/OB AB_B=.harness_build/OA AB_CHECKS=loop AB_LOOP_SET=feat \
  bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
tail -14 $OUT/ab_summary_mask.log; tail -8 $OUT/ab_summary.log
for tool in racecheck memcheck synccheck; do
  t0=$SECONDS
  SANITIZE_PREFIX=win_kvcache_odd_d64,drop05_d64_causal_gqa,bias_causal_len_gqa_d64,bias_softcap_len_d64 \
    timeout -k 5 150 compute-sanitizer --tool $tool --print-limit 20 \
    python3 benchmarks/sm90_bwd_check.py --phase sanitize --lib .harness_build/OB > $OUT/${tool}_OB.log 2>&1
  echo "$tool OB rc=$? ($((SECONDS - t0)) s)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|^numerics:|^FAIL" $OUT/${tool}_OB.log | cut -c1-200 | head -6
done
