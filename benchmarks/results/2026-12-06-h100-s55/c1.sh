# Session 55, call 1 (session 54's .harness_build/c55.sh as it was prepared).
# Session 54's forward candidates, harness only (.harness_build/cand55.tgz; carry it; it also holds c56.sh's R7 / R0).
# NA = main's harness objects at session 54's defaults (FA_SM90_TF32_BWD_DESC_ADD on; the others as session 53's).
# NF = NA with flash_fwd_sm90.o built with -DFA_SM90_FWD_FFMA_SOFTMAX=1: session 54's last version (the plain kernels as
#      session 54's measured FB; the index-masked ones, dropout too, defer the scale on every tile without a dense mask,
#      bias or soft-cap; those 22 functions have not run on a GPU yet).
# NT = NA with flash_fwd_sm90.o built with -DFA_SM90_FWD_TREE_MAX=1 (row maxima as trees; not yet run on a GPU).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand55.tgz -C .harness_build
for b in NA NF NT; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
# Numerics: every case; NF's nomask_bitwise ones (k_valid_all_true*) should pass again, and the exact dropout cases.
for b in NF NT; do
  t0=$SECONDS
  timeout -k 5 200 python3 benchmarks/sm90_check.py --phase numerics --lib .harness_build/$b > $OUT/${b}_numerics.log 2>&1
  echo "fwd numerics $b rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^numerics" $OUT/${b}_numerics.log | cut -c1-200 | head -12
done
t0=$SECONDS
timeout -k 5 150 python3 benchmarks/sm90_check.py --phase variants --lib .harness_build/NF > /root/nf_variants.log 2>&1
echo "variants NF rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^variants" /root/nf_variants.log | cut -c1-200 | head -6
for tool in memcheck racecheck; do
  t0=$SECONDS
  timeout -k 5 200 compute-sanitizer --tool $tool --print-limit 20 python3 benchmarks/sm90_check.py --phase sanitize \
    --lib .harness_build/NF > /root/nf_$tool.log 2>&1
  echo "$tool NF rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^numerics|SUMMARY" /root/nf_$tool.log | head -4
done
# Forward loop A/B against NA: NF on the plain kernels (fwd) and the index-masked ones (fwdmask: key mask, window,
# dropout); NT on the plain kernels.
for ab in NF:fwd NF:fwdmask NT:fwd; do
  b=${ab%%:*}; set=${ab#*:}
  AB_A=.harness_build/$b AB_B=.harness_build/NA AB_CHECKS=loop AB_LOOP_SET=$set bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
  echo "== $b $set"; tail -8 $OUT/ab_summary.log
  mv $OUT/ab_summary.log $OUT/ab_summary_${b}_$set.log; mv $OUT/ab_loop.log /root/ab_loop_${b}_$set.log
done
