# Session 59, harness call (carry .harness_build/cand59.tgz). M = main's objects (as in cand58); G2 = M with
# flash_fwd_sm90.o built with -DFA_SM90_FWD_SOFTMAX_UNDER_PV=1 -DFA_SM90_FWD_SKIP_RESCALE=2 (this session's code
# with their new scope: the vote and the softmax under P V in the plain kernel only, the kept max in every kernel
# without dropout; the dropout kernels' SASS equal to M's, the plain kernels' equal to session 58's US2). Numerics
# (its nomask_bitwise cases: an all-true key mask against no mask, bit for bit), the variants phase, then the
# index-masked forward's loop A/B (set fwdmask) and the plain forward's (set fwd) against M.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand59.tgz -C .harness_build
cp --update=none .harness_build/M/*.o .harness_build/G2/
for b in M G2; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
start=$SECONDS
timeout -k 5 150 python3 benchmarks/sm90_check.py --phase numerics --lib .harness_build/G2 > $OUT/G2_numerics.log 2>&1
echo "fwd numerics G2 rc=$? in $((SECONDS - start)) s"; grep -E "^FAIL|^numerics" $OUT/G2_numerics.log | cut -c1-200 | head -8
start=$SECONDS
timeout -k 5 200 python3 benchmarks/sm90_check.py --phase variants --lib .harness_build/G2 > $OUT/G2_variants.log 2>&1
echo "fwd variants G2 rc=$? in $((SECONDS - start)) s"; grep -E "^FAIL|^variants" $OUT/G2_variants.log | cut -c1-200 | head -6
for set in fwdmask fwd; do
  start=$SECONDS
  AB_A=.harness_build/G2 AB_B=.harness_build/M AB_CHECKS=loop AB_LOOP_SET=$set bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
  echo "== G2 $set ($((SECONDS - start)) s)"; tail -14 $OUT/ab_summary.log
  mv $OUT/ab_summary.log $OUT/ab_summary_G2_$set.log; mv $OUT/ab_loop.log $OUT/ab_loop_G2_$set.log
done
# Nsight Compute of main's D = 128 forward (M's harness), with dropout 0.1 and without (call 37 of lease 1 named no
# kernel filter, so ncu profiled nothing).
for feats in dropout ""; do
  HARNESS_DIR=.harness_build/M PROFILE_DIR=fwd PROFILE_D=128 PROFILE_T=4096 PROFILE_KNAME=flash_fwd_sm90_kernel \
    PROFILE_FA2=0 PROFILE_FEATS=$feats timeout -k 5 120 bash benchmarks/gpu_run.sh profile 2>&1 | tail -40
done
