# Session 63: compute-sanitizer racecheck of the head-dim-256 TF32 forward's FEAT sanitize cases (t256_valid_causal_gqa,
# t256_drop_softcap_causal, t256_bias_nan_masked_window: index masks with GQA, dropout with soft-cap, a dense mask with
# bias and a window), every variant twice each (sm90_check.py --phase tf32sanitize), with session 62's G harness (M's
# objects, flash_fwd_sm90_tf32.o built with -DFA_SM90_TF32_D256_FEAT=1: the same source as 5fb37c1's default build).
set -u
t=/tmp/c62; mkdir -p $t && tar -xzf .harness_build/cand62.tgz -C $t && cp $t/G/*.o $t/M/
s=$SECONDS; OUTDIR=$t/M ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh > $OUT/gbuild.log 2>&1; echo "harness build rc=$? in $((SECONDS - s)) s"
s=$SECONDS
TF32SAN_CASES=t256_valid_causal_gqa,t256_drop_softcap_causal,t256_bias_nan_masked_window timeout -k 5 ${R1_LIMIT:-140} \
  compute-sanitizer --tool racecheck --print-limit 20 python3 benchmarks/sm90_check.py --phase tf32sanitize --lib $t/M \
  > $OUT/tf32_racecheck.log 2>&1; echo "racecheck rc=$? in $((SECONDS - s)) s"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|^FAIL|^PASS|ours|launch" $OUT/tf32_racecheck.log | head -20; tail -5 $OUT/tf32_racecheck.log
