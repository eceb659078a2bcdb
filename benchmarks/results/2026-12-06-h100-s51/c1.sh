# Session 51, call 1 (no TensorFlow): the bulk reduce-add A/B of the plain D = 64 backward's dQ.
# B = main's default harness objects (eba54e0's tree: FA_SM90_BWD_D64_COLS=1), C = B with flash_bwd_sm90.o built
# with -DFA_SM90_BWD_D64_BULK=1 (.harness_build/ab51.tgz, built here).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
# (the TF parts go over in calls of their own: with ab51.tgz a part exceeds the 64 MiB a call carries)
tar xzf .harness_build/ab51.tgz -C .harness_build
AB_A=.harness_build/C AB_B=.harness_build/B SAVE_SET=main AB_CHECKS=splitd,loop bash benchmarks/gpu_run.sh ab \
  > /dev/null 2>&1
tail -45 $OUT/ab_summary.log
# racecheck of the two sanitize cases that take the plain D = 64 kernels, for B (the columns' default) and C;
# memcheck of the same for C.
for run in racecheck:B racecheck:C memcheck:C; do
  tool=${run%%:*}; lib=${run#*:}
  t0=$SECONDS
  SANITIZE_PREFIX=odd_d64,gqa4_d64_causal_tl timeout -k 5 150 compute-sanitizer --tool $tool --print-limit 20 \
    python3 benchmarks/sm90_bwd_check.py --phase sanitize --lib .harness_build/$lib > $OUT/${tool}_$lib.log 2>&1
  echo "$tool $lib rc=$? ($((SECONDS - t0)) s)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|^numerics:|^FAIL" $OUT/${tool}_$lib.log | cut -c1-200 | head -8
done
