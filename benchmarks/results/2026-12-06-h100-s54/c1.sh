# Session 54, call 1: session 53's prepared script (.harness_build/c54.sh), as it was; carry .harness_build/cand54.tgz.
# Session 53's candidates, harness only (.harness_build/cand54.tgz; carry it): TA = main's objects at session 53's
# defaults (9d24e4f / its successor: FA_SM90_BWD_DESC_ADD on at D = 128); TB = TA with flash_bwd_sm90_tf32.o and
# flash_bwd_sm90_tf32_d128.o built with -DFA_SM90_TF32_BWD_DESC_ADD=1; FB = TA with flash_fwd_sm90.o built with
# -DFA_SM90_FWD_FFMA_SOFTMAX=1.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand54.tgz -C .harness_build
OUTDIR=.harness_build/TB ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1
t0=$SECONDS
timeout -k 5 200 python3 benchmarks/kernel_harness_check.py --lib .harness_build/TB --dtypes tf32 --no-bench \
  --out $OUT > $OUT/tb_tf32_numerics.log 2>&1
echo "tf32 numerics TB rc=$? ($((SECONDS - t0)) s)"; grep -E "FAIL|pass" $OUT/tb_tf32_numerics.log | tail -4
for ph in tf32pad tf32det; do
  t0=$SECONDS
  timeout -k 5 150 python3 benchmarks/sm90_bwd_check.py --phase $ph --lib .harness_build/TB > $OUT/tb_$ph.log 2>&1
  echo "$ph TB rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^$ph|pass" $OUT/tb_$ph.log | tail -3
done
AB_A=.harness_build/TB AB_B=.harness_build/TA AB_CHECKS=loop AB_LOOP_SET=tf32 bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
tail -5 $OUT/ab_summary.log; mv $OUT/ab_summary.log $OUT/ab_summary_tf32.log; mv $OUT/ab_loop.log $OUT/ab_loop_tf32.log
t0=$SECONDS
timeout -k 5 150 compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/kernel_harness_check.py \
  --lib .harness_build/TB --dtypes tf32 --no-bench --cases d128 --out /tmp > $OUT/tb_memcheck.log 2>&1
echo "memcheck TB rc=$? ($((SECONDS - t0)) s)"; grep -E "ERROR SUMMARY" $OUT/tb_memcheck.log | head -2
# The deterministic-mode kernels at session 53's defaults (FA_SM90_BWD_DESC_ADD at D = 128 covers the DET kernels
# too; not yet run in deterministic mode): TA is HEAD's defaults.
t0=$SECONDS
timeout -k 5 200 python3 benchmarks/sm90_bwd_check.py --phase det --lib .harness_build/TA > $OUT/ta_det.log 2>&1
echo "det TA rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^det" $OUT/ta_det.log | tail -4
# FA_SM90_FWD_FFMA_SOFTMAX (FB): numerics (its nomask_bitwise cases are expected to FAIL: the plain kernel's P changes
# in the last bits, the index-masked kernel's does not), then the forward loop A/B against TA.
OUTDIR=.harness_build/FB ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1
t0=$SECONDS
timeout -k 5 200 python3 benchmarks/sm90_check.py --phase numerics --lib .harness_build/FB > $OUT/fb_numerics.log 2>&1
echo "fwd numerics FB rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^numerics" $OUT/fb_numerics.log | head -8
AB_A=.harness_build/FB AB_B=.harness_build/TA AB_CHECKS=loop AB_LOOP_SET=fwd bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
tail -9 $OUT/ab_summary.log
