# Session 62, harness call (carry .harness_build/cand62.tgz: M = main's (9679352) ARCHS=90 harness objects; G = M with
# flash_fwd_sm90_tf32.o built with -DFA_SM90_TF32_D256_FEAT=1). 1) M's whole tf32 phase (the dense-bias fma fix, 103ca49:
# variant 3 bit for bit with 0 / 1 on the dense mask + bias + soft-cap cases). 2) G at head dim 256 with the features:
# tf32 numerics, tf32dropexact, memcheck of the head-dim-256 sanitize cases; G's whole tf32 phase. 3) Loop A/B G vs M
# (set tf32d256: M runs sm80's TF32 kernel on the masked / feature rows).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
tar xzf .harness_build/cand62.tgz -C .harness_build
cp --update=none .harness_build/M/*.o .harness_build/G/
for b in M G; do OUTDIR=.harness_build/$b ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh 2>&1 | tail -1; done
ph() {  # ph BUILD PHASE TIMEOUT [extra args]
  local b=$1 p=$2 to=$3; shift 3; local s=$SECONDS
  timeout -k 5 $to python3 benchmarks/sm90_check.py --phase $p --lib .harness_build/$b --out $OUT/json_$b "$@" > $OUT/${b}_$p${TAG:-}.log 2>&1
  echo "== $b $p${TAG:-} rc=$? ($((SECONDS - s)) s)"; grep -E "^FAIL|pass|not run|^tf32|^SELFTEST" $OUT/${b}_$p${TAG:-}.log | cut -c1-220 | tail -12
}
ph M tf32 150
export SM90_TF32_D256_FEAT=1
TF32_D=256 TAG=_d256 ph G tf32 150
TF32_D=256 TAG=_d256 ph G tf32dropexact 120
s=$SECONDS
TF32SAN_CASES=tf_d256,t256_edges_65_31_causal_tl,t256_valid_causal_gqa,t256_drop_softcap_causal,t256_bias_nan_masked_window \
  timeout -k 5 150 compute-sanitizer --tool memcheck --print-limit 20 python3 benchmarks/sm90_check.py \
  --phase tf32sanitize --lib .harness_build/G > $OUT/G_memcheck.log 2>&1
echo "== G memcheck rc=$? ($((SECONDS - s)) s)"; grep -E "ERROR SUMMARY|Invalid|^FAIL|pass" $OUT/G_memcheck.log | head -6
TAG=_all ph G tf32 180
unset SM90_TF32_D256_FEAT
s=$SECONDS
AB_A=.harness_build/G AB_B=.harness_build/M AB_CHECKS=loop AB_LOOP_SET=tf32d256 bash benchmarks/gpu_run.sh ab > /dev/null 2>&1
echo "== G vs M loop, set tf32d256 ($((SECONDS - s)) s)"; tail -12 $OUT/ab_summary.log
