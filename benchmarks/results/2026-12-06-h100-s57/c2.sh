# Session 57, call 2 (after call 1, the same machine; its .harness_build builds): loop A/B against D2 of the backward
# candidates that call 1 found bit for bit equal to D2 (/root/ok_<build>): P1 on the D = 128 and D = 64 dropout
# backward, D3 on D = 128's, U1 on D = 64's.
set -u
for ab in P1:drop128 P1:drop64 D3:drop128 U1:drop64; do
  b=${ab%%:*}; set=${ab#*:}
  [[ -e /root/ok_$b ]] || { echo "== $b $set: skipped (not equal to D2 in call 1)"; continue; }
  AB_A=.harness_build/$b AB_B=.harness_build/D2 AB_CHECKS=loop AB_LOOP_SET=$set bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
  echo "== $b $set"; tail -8 $OUT/ab_summary.log
  mv $OUT/ab_summary.log $OUT/ab_summary_${b}_$set.log; mv $OUT/ab_loop.log /root/ab_loop_${b}_$set.log
done
