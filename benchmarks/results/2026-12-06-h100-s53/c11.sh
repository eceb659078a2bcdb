# Session 53, call 11 (the lease's remaining time, harness only): first timings of this session's candidates.
# .harness_build/cand54.tgz: DA = main's objects at a01132c's defaults, DB = the same with flash_fwd_sm90.o and
# flash_bwd_sm90.o built with FA_SM90_FWD_DESC_ADD=1 / FA_SM90_BWD_DESC_ADD=1, T54 = DA with flash_fwd_sm90.o built
# with -DFA_TUNING (head dim 256 on schedules 0, 2, 3, 6). The full checks are .harness_build/c54_*.sh (next lease).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand54.tgz -C .harness_build
AB_A=.harness_build/DB AB_B=.harness_build/DA AB_CHECKS=loop AB_LOOP_SET=fwd timeout -k 5 150 \
  bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
echo "fwd loop rc=$?"; tail -9 $OUT/ab_summary.log; mv $OUT/ab_summary.log $OUT/ab_summary_fwd.log; mv $OUT/ab_loop.log $OUT/ab_loop_fwd.log
AB_A=.harness_build/DB AB_B=.harness_build/DA AB_CHECKS=loop AB_LOOP_SET=plain timeout -k 5 120 \
  bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
echo "bwd loop rc=$?"; tail -8 $OUT/ab_summary.log
OUTDIR=.harness_build/T54 ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1
t0=$SECONDS
SM90_VARIANTS=2,3,6 VBENCH_D=256 VBENCH_T=4096,8192 timeout -k 5 90 python3 benchmarks/sm90_check.py \
  --phase vbench --lib .harness_build/T54 > $OUT/vbench_d256.log 2>&1
echo "vbench d256 rc=$? ($((SECONDS - t0)) s)"; tail -6 $OUT/vbench_d256.log
t0=$SECONDS
timeout -k 5 90 python3 benchmarks/sm90_check.py --phase numerics --lib .harness_build/DB > $OUT/db_fwd_numerics.log 2>&1
echo "fwd numerics DB rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^numerics" $OUT/db_fwd_numerics.log | head -6
