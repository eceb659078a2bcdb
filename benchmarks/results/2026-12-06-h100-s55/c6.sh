# Session 55 (session 54's .harness_build/c56.sh as it was prepared).
# What dropout would cost with a cheaper Philox (timing only; session 54's FA_PHILOX_ROUNDS, flash_params.h), harness
# only (.harness_build/cand55.tgz; carry it): NA = main's harness objects (session 54's defaults, 10 rounds);
# R7 / R0 = NA with flash_fwd_sm90.o and flash_bwd_sm90.o built with -DFA_PHILOX_ROUNDS=7 / 0. Their mask checks
# must FAIL (the host's mask keeps 10 rounds): that shows the macro took effect. The speed table's with / without
# ratio is each build's own; --idx-baseline splits the index-masked kernel's part from the draws'.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand55.tgz -C .harness_build
for b in NA R7 R0; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
i=0
for b in NA R7 R0; do
  i=$((i + 1)); d=$OUT/ds${i}_$b; mkdir -p $d
  t0=$SECONDS
  timeout -k 5 170 python3 benchmarks/dropout_speed.py --lib .harness_build/$b --head-dims 64,128 --idx-baseline \
    --out $d > $d/ds.log 2>&1
  echo "dropout_speed $b rc=$? ($((SECONDS - t0)) s)"; grep -E "^\| [0-9]|mask checks" $d/ds.log | tail -17
done
