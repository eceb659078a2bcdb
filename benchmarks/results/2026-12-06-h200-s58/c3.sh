# Session 58, call 3 (after l2, the same machine; the command given to the device tool, kept here as a script): a
# second loop A/B of set fwd against M for US2 and US1, and S1's first (-DFA_SM90_FWD_SKIP_RESCALE=1 alone).
set -u; for b in US2 US1 S1; do start=$SECONDS; AB_A=.harness_build/$b AB_B=.harness_build/M AB_CHECKS=loop AB_LOOP_SET=fwd bash benchmarks/gpu_run.sh ab > /dev/null 2>&1; echo "== $b fwd rerun ($((SECONDS - start)) s)"; tail -10 $OUT/ab_summary.log; mv $OUT/ab_summary.log $OUT/ab_summary_${b}_fwd_rerun.log; done
