# Session 58, lean call 2 (after l1, the same machine): the level-2 builds (not M's bits): numerics, variants, and the
# loop A/B of set fwd against M: US2 (U and SKIP_RESCALE=2), S2 (SKIP_RESCALE=2); then S1 (must equal M) if time.
set -u
for b in US2 S2 S1; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
for b in US2 S2; do
  start=$SECONDS
  timeout -k 5 150 python3 benchmarks/sm90_check.py --phase numerics --lib .harness_build/$b > $OUT/${b}_numerics.log 2>&1
  rc=$?; echo "fwd numerics $b rc=$rc in $((SECONDS - start)) s"; grep -E "^FAIL|^numerics" $OUT/${b}_numerics.log | cut -c1-200 | head -6
  [[ $rc == 0 ]] && touch /root/ok_$b
done
for b in US2 S2; do
  [[ -e /root/ok_$b ]] || { echo "== $b fwd: skipped (numerics failed)"; continue; }
  start=$SECONDS
  AB_A=.harness_build/$b AB_B=.harness_build/M AB_CHECKS=loop AB_LOOP_SET=fwd bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
  echo "== $b fwd ($((SECONDS - start)) s)"; tail -14 $OUT/ab_summary.log
  mv $OUT/ab_summary.log $OUT/ab_summary_${b}_fwd.log; mv $OUT/ab_loop.log /root/ab_loop_${b}_fwd.log
done
