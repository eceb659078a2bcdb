# Session 57, call 3 (after call 2, the same machine): loop A/B against D2 of the forward candidates that call 1 found
# correct: F3 / F1 (bit for bit) and F2 (numerics) on the forward's index-masked kernels (fwdmask: key mask, window,
# dropout), F2 also on the plain forward.
set -u
for ab in F3:fwdmask F1:fwdmask F2:fwdmask F2:fwd; do
  b=${ab%%:*}; set=${ab#*:}
  [[ -e /root/ok_$b ]] || { echo "== $b $set: skipped (not correct in call 1)"; continue; }
  AB_A=.harness_build/$b AB_B=.harness_build/D2 AB_CHECKS=loop AB_LOOP_SET=$set bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
  echo "== $b $set"; tail -8 $OUT/ab_summary.log
  mv $OUT/ab_summary.log $OUT/ab_summary_${b}_$set.log; mv $OUT/ab_loop.log /root/ab_loop_${b}_$set.log
done
