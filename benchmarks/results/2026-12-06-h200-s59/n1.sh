# Session 59, call 1 (prepared in session 58; carry .harness_build/cand58.tgz): what session 58's H200 lease left of
# the forward candidates. US2 (SOFTMAX_UNDER_PV + SKIP_RESCALE=2, 1.016x-1.036x at D = 128 without a mask there) and US1
# (the same bits as M): every schedule (--phase variants) for US2, S1's bit-for-bit check, then the index-masked
# forward's loop A/B (set fwdmask) for US2 and US1 against M.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand58.tgz -C .harness_build
for b in S1 US1 US2; do cp --update=none .harness_build/M/*.o .harness_build/$b/; done
for b in M S1 US1 US2; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
timeout -k 5 200 python3 benchmarks/sm90_check.py --phase variants --lib .harness_build/US2 > $OUT/US2_variants.log 2>&1
echo "fwd variants US2 rc=$?"; grep -E "^FAIL|^variants" $OUT/US2_variants.log | cut -c1-200 | head -6
for b in M S1; do
  SAVE_SET=all timeout -k 5 150 python3 benchmarks/sm90_check.py --phase densesave --lib .harness_build/$b \
    --save /root/fa_$b.pt > $OUT/fa_save_$b.log 2>&1; echo "densesave(all) $b rc=$?"; grep "^densesave" $OUT/fa_save_$b.log
done
python3 benchmarks/sm90_check.py --phase densecmp --a /root/fa_S1.pt --b /root/fa_M.pt > $OUT/fa_cmp_S1.log 2>&1
echo "densecmp S1 vs M rc=$?"; grep -E "^densecmp" $OUT/fa_cmp_S1.log
for b in US2 US1; do
  AB_A=.harness_build/$b AB_B=.harness_build/M AB_CHECKS=loop AB_LOOP_SET=fwdmask bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
  echo "== $b fwdmask"; tail -10 $OUT/ab_summary.log; mv $OUT/ab_summary.log $OUT/ab_summary_${b}_fwdmask.log
done
