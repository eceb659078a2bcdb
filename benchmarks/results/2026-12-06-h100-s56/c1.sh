# Session 56, call 1: FA_SM90_BWD_DROP128 (flash_bwd_sm90.cu), harness only (.harness_build/cand56.tgz; carry it).
# NA = main's harness objects (session 54's defaults; its flash_bwd_sm90.o equals bd0f444's, all 81 functions);
# D1 / D2 = NA with flash_bwd_sm90.o built with -DFA_SM90_BWD_DROP128=1 / 2 (only the 4 <D = 128, IDX, DROP>
# functions differ from NA's). Checks: dK, dV (and dQ in deterministic mode) bit for bit NA's on the D = 128 dropout
# cases; sm90_bwd_check.py numerics and det; the dropout cost (dropout_speed.py, D = 128); the loop A/B on the
# drop128 set against NA; memcheck and racecheck on the sanitize list's dropout cases with D2.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand56.tgz -C .harness_build
for b in NA D1 D2; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
for b in NA D1 D2; do
  t0=$SECONDS
  timeout -k 5 60 python3 benchmarks/bwd_bitwise.py save .harness_build/$b /root/bw_$b.pt > $OUT/bw_save_$b.log 2>&1
  echo "bitwise save $b rc=$? ($((SECONDS - t0)) s)"; tail -1 $OUT/bw_save_$b.log
done
for b in D1 D2; do
  python3 benchmarks/bwd_bitwise.py compare /root/bw_NA.pt /root/bw_$b.pt > $OUT/bw_cmp_$b.log 2>&1
  echo "bitwise NA vs $b rc=$?"; tail -1 $OUT/bw_cmp_$b.log
done
for b in D1 D2; do
  for ph in numerics det; do
    t0=$SECONDS
    timeout -k 5 120 python3 benchmarks/sm90_bwd_check.py --phase $ph --lib .harness_build/$b --out $OUT/$b \
      > $OUT/${b}_$ph.log 2>&1
    echo "$ph $b rc=$? ($((SECONDS - t0)) s)"; grep -E "^FAIL|numerics" $OUT/${b}_$ph.log | cut -c1-200 | head -8
  done
done
for b in NA D1 D2; do
  d=$OUT/ds_$b; mkdir -p $d; t0=$SECONDS
  timeout -k 5 90 python3 benchmarks/dropout_speed.py --lib .harness_build/$b --head-dims 128 --out $d > $d/ds.log 2>&1
  echo "dropout_speed $b rc=$? ($((SECONDS - t0)) s)"; grep -E "^\| [0-9]|mask checks" $d/ds.log | tail -6
done
for b in D2; do
  t0=$SECONDS
  AB_A=.harness_build/$b AB_B=.harness_build/NA AB_CHECKS=loop AB_LOOP_SET=drop128 bash benchmarks/gpu_run.sh ab \
    > /dev/null 2>&1
  echo "== $b drop128 ($((SECONDS - t0)) s)"; tail -8 $OUT/ab_summary.log
  mv $OUT/ab_summary.log $OUT/ab_summary_${b}_drop128.log; mv $OUT/ab_loop.log /root/ab_loop_$b.log
done
