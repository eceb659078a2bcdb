# Session 58, lean call 1 (device starts were scarce: the bit-for-bit / numerics / timing answers for the two
# builds that must equal main first). Carry .harness_build/cand58.tgz. M = main's objects; U = M with flash_fwd_sm90.o
# built with -DFA_SM90_FWD_SOFTMAX_UNDER_PV=1; US1 = U with -DFA_SM90_FWD_SKIP_RESCALE=1 too. Both must equal M bit
# for bit (densesave SAVE_SET=all / densecmp: rc 1 unless every output is equal); then numerics; then the loop A/B of
# set fwd against M for each build that passed both.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand58.tgz -C .harness_build
for b in S1 S2 F2 FS2 U US1 US2; do cp --update=none .harness_build/M/*.o .harness_build/$b/; done
for b in M US1 U; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
for b in M US1 U; do
  start=$SECONDS
  SAVE_SET=all timeout -k 5 150 python3 benchmarks/sm90_check.py --phase densesave --lib .harness_build/$b \
    --save /root/fa_$b.pt > $OUT/fa_save_$b.log 2>&1
  echo "densesave(all) $b rc=$? in $((SECONDS - start)) s"; grep "^densesave" $OUT/fa_save_$b.log
done
for b in US1 U; do
  python3 benchmarks/sm90_check.py --phase densecmp --a /root/fa_$b.pt --b /root/fa_M.pt > $OUT/fa_cmp_$b.log 2>&1
  rc=$?; echo "densecmp $b vs M rc=$rc"; grep -E "^densecmp" $OUT/fa_cmp_$b.log; [[ $rc == 0 ]] && touch /root/eq_$b
  start=$SECONDS
  timeout -k 5 150 python3 benchmarks/sm90_check.py --phase numerics --lib .harness_build/$b > $OUT/${b}_numerics.log 2>&1
  rc=$?; echo "fwd numerics $b rc=$rc in $((SECONDS - start)) s"; grep -E "^FAIL|^numerics" $OUT/${b}_numerics.log | cut -c1-200 | head -6
  [[ $rc == 0 && -e /root/eq_$b ]] && touch /root/ok_$b
done
for b in US1 U; do
  [[ -e /root/ok_$b ]] || { echo "== $b fwd: skipped (not equal to M or numerics failed)"; continue; }
  start=$SECONDS
  AB_A=.harness_build/$b AB_B=.harness_build/M AB_CHECKS=loop AB_LOOP_SET=fwd bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
  echo "== $b fwd ($((SECONDS - start)) s)"; tail -14 $OUT/ab_summary.log
  mv $OUT/ab_summary.log $OUT/ab_summary_${b}_fwd.log; mv $OUT/ab_loop.log /root/ab_loop_${b}_fwd.log
done
