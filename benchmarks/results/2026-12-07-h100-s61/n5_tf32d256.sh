# Session 61, harness call (carry .harness_build/cand61.tgz: M = main's ARCHS=90 objects; T = M's flash_fwd_sm90_tf32.o
# rebuilt with -DFA_SM90_TF32_D256=1; T2 = also -DFA_SM90_TF32_D256_OVERLAP=1). The head-dim-256 TF32 forward candidate:
# self-tests, numerics at D = 256 (vs float64, torch TF32, our sm80 TF32) for T and T2, T2 against T bit for bit,
# memcheck of the D = 256 sanitize cases (T, T2) and synccheck (T2), then TFLOP/s at D = 256 for T, T2, T.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand61.tgz -C .harness_build
for b in T T2; do cp --update=none .harness_build/M/*.o .harness_build/$b/; done
for b in T T2; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 NVCC_EXTRA="-DFA_SM90_TF32_D256=1" bash benchmarks/build_harness.sh 2>&1 | tail -1; done
export SM90_TF32_D256=1 TF32_D=256 TF32BENCH_D=256
ph() {  # ph BUILD PHASE TIMEOUT [extra args]
  local b=$1 p=$2 to=$3; shift 3; local s=$SECONDS
  timeout -k 5 $to python3 benchmarks/sm90_check.py --phase $p --lib .harness_build/$b --out $OUT/json_$b "$@" > $OUT/${b}_$p.log 2>&1
  echo "== $b $p rc=$? ($((SECONDS - s)) s)"; grep -E "^FAIL|pass|not run|^tf32|^densecmp|^SELFTEST|^  256 |^  D    T" $OUT/${b}_$p.log | cut -c1-220 | tail -14
}
ph T tf32selftest 60
ph T tf32 120
ph T2 tf32 120
ph T tf32save 60 --save $OUT/T_save.pt
ph T2 tf32save 60 --save $OUT/T2_save.pt
python3 benchmarks/sm90_check.py --phase densecmp --a $OUT/T2_save.pt --b $OUT/T_save.pt > $OUT/densecmp_T2_T.log 2>&1
echo "== densecmp T2 vs T rc=$?"; tail -4 $OUT/densecmp_T2_T.log
SAN="tf_d256,t256_edges_65_31_causal_tl,t256_empty_rows_causal,t256_gqa4_causal"
for b in T T2; do s=$SECONDS
  TF32SAN_CASES=$SAN timeout -k 5 150 compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_check.py \
    --phase tf32sanitize --lib .harness_build/$b > $OUT/${b}_memcheck.log 2>&1
  echo "== $b memcheck rc=$? ($((SECONDS - s)) s)"; grep -E "ERROR SUMMARY|Invalid|^FAIL" $OUT/${b}_memcheck.log | head -6
done
s=$SECONDS
TF32SAN_CASES=$SAN timeout -k 5 150 compute-sanitizer --tool synccheck --print-limit 20 python3 benchmarks/sm90_check.py \
  --phase tf32sanitize --lib .harness_build/T2 > $OUT/T2_synccheck.log 2>&1
echo "== T2 synccheck rc=$? ($((SECONDS - s)) s)"; grep -E "ERROR SUMMARY|Barrier|^FAIL" $OUT/T2_synccheck.log | head -6
for b in T T2 T; do ph $b tf32bench 150; mv $OUT/json_$b/sm90_tf32bench.json $OUT/json_$b/sm90_tf32bench_$SECONDS.json; done
