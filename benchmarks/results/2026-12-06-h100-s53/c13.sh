# Session 53, call 13: correctness of DB (call 11's objects): the backward's numerics and splitd against DA
# (SAVE_SET=main: dk, dv, dbias bit for bit, dq within 1e-2).
set -u
t0=$SECONDS
timeout -k 5 100 python3 benchmarks/sm90_bwd_check.py --phase numerics --lib .harness_build/DB > $OUT/db_bwd_numerics.log 2>&1
echo "bwd numerics DB rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|^numerics" $OUT/db_bwd_numerics.log | head -6
AB_A=.harness_build/DB AB_B=.harness_build/DA SAVE_SET=main AB_CHECKS=splitd timeout -k 5 170 \
  bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
echo "splitd rc=$?"; grep -E "cmp:|^FAIL" $OUT/ab_summary.log | head -6
