# Session 51, call 2 (no TensorFlow): FA_SM90_BWD_D64_LAG, the plain D = 64 backward's dQ products issued a unit
# late (mbarriers instead of named barrier 1). LA = main's harness objects with flash_bwd_sm90.o built with
# -DFA_SM90_BWD_D64_LAG=1, LB = the same with it built at 0 (SASS identical to main's); .harness_build/lag51.tgz.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/lag51.tgz -C .harness_build
# Correctness first: numerics of LA (dq / dk / dv against float64, every mask kind, odd sizes, GQA).
OUTDIR=.harness_build/LA ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1
t0=$SECONDS
timeout -k 5 150 python3 benchmarks/sm90_bwd_check.py --phase numerics --lib .harness_build/LA > $OUT/lag_numerics.log 2>&1
echo "numerics LA rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^numerics" $OUT/lag_numerics.log | head -12
# Outputs against LB bit for bit (dk, dv) and dq within 1e-2, then the timings (loop and do_bench, alternating).
AB_A=.harness_build/LA AB_B=.harness_build/LB SAVE_SET=main AB_CHECKS=splitd,loop bash benchmarks/gpu_run.sh ab \
  > /dev/null 2>&1
tail -22 $OUT/ab_summary.log
for run in racecheck:LA memcheck:LA synccheck:LA; do
  tool=${run%%:*}; lib=${run#*:}
  t0=$SECONDS
  SANITIZE_PREFIX=odd_d64,gqa4_d64_causal_tl timeout -k 5 100 compute-sanitizer --tool $tool --print-limit 20 \
    python3 benchmarks/sm90_bwd_check.py --phase sanitize --lib .harness_build/$lib > $OUT/${tool}_$lib.log 2>&1
  echo "$tool $lib rc=$? ($((SECONDS - t0)) s)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|^numerics:|^FAIL" $OUT/${tool}_$lib.log | cut -c1-200 | head -6
done
