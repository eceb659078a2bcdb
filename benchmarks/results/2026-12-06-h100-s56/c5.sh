# Session 56, call 5 (a second machine of the lease; call 1's objects again, .harness_build/cand56.tgz carried): a
# repeat of the drop128 loop A/B of D2 against NA, and dropout_speed.py at D = 64 and 128 with --idx-baseline for both.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand56.tgz -C .harness_build NA D2
for b in NA D2; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
for b in NA D2; do
  d=$OUT/ds2_$b; mkdir -p $d; t0=$SECONDS
  timeout -k 5 90 python3 benchmarks/dropout_speed.py --lib .harness_build/$b --head-dims 64,128 --idx-baseline \
    --out $d > $d/ds.log 2>&1
  echo "dropout_speed $b rc=$? ($((SECONDS - t0)) s)"; grep -E "^\| [0-9]|mask checks" $d/ds.log | tail -10
done
AB_A=.harness_build/D2 AB_B=.harness_build/NA AB_CHECKS=loop AB_LOOP_SET=drop128 bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
echo "== D2 drop128 (repeat)"; tail -7 $OUT/ab_summary.log; mv $OUT/ab_summary.log $OUT/ab_summary_D2_drop128_2.log
rm -f $OUT/ab_loop.log
