# Session 56, call 2 (after call 1, the same machine: .harness_build/NA, D1, D2 built there): the loop A/B of D1 against
# NA on the drop128 set, then memcheck and racecheck on the sanitize list's dropout cases with D2.
set -u
for b in D1; do
  t0=$SECONDS
  AB_A=.harness_build/$b AB_B=.harness_build/NA AB_CHECKS=loop AB_LOOP_SET=drop128 bash benchmarks/gpu_run.sh ab \
    > /dev/null 2>&1
  echo "== $b drop128 ($((SECONDS - t0)) s)"; tail -8 $OUT/ab_summary.log
  mv $OUT/ab_summary.log $OUT/ab_summary_${b}_drop128.log; mv $OUT/ab_loop.log /root/ab_loop_$b.log
done
for tool in memcheck racecheck; do
  t0=$SECONDS
  SANITIZE_PREFIX=drop,bpad_d80 timeout -k 5 100 compute-sanitizer --tool $tool --print-limit 20 python3 \
    benchmarks/sm90_bwd_check.py --phase sanitize --lib .harness_build/D2 > $OUT/D2_$tool.log 2>&1
  echo "$tool D2 rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^numerics|SUMMARY" $OUT/D2_$tool.log | head -4
done
