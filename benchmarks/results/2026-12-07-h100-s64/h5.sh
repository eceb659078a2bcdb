# Session 64, call 1: the first GPU run of the head-dim-256 Hopper TF32 backward candidate (fa2f891; HEAD 9fe0d8f's
# sources), kernel harness only: HEAD's ARCHS=90 harness objects built here (N64.tgz), linked there;
# tune_tf32_bwd.py --sm90-d256 (numerics of the harness's head-dim-256 cases and 13 more against float64 with the
# candidate on, launch counts; TFLOP/s at T = 1024 / 4096 / 16384 against sm80's TF32 backward), under a timeout
# (a hang shows as rc 124); then, if every case passed, compute-sanitizer memcheck, racecheck and synccheck on a few
# small cases (--sanitize).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
hb=/tmp/hb64; mkdir -p $hb && tar -xzf .harness_build/N64.tgz -C /tmp && mv /tmp/N64/* $hb/
s=$SECONDS; OUTDIR=$hb ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh > $OUT/nbuild.log 2>&1; echo "harness build rc=$? in $((SECONDS - s)) s"
s=$SECONDS
HARNESS_DIR=$hb timeout -k 5 ${H5_LIMIT:-200} python3 benchmarks/tune_tf32_bwd.py --sm90-d256 ${H5_ARGS:-} > $OUT/d256.log 2>&1
echo "d256 rc=$? in $((SECONDS - s)) s"; grep -v Warn $OUT/d256.log | tail -40
grep -q "ALL CHECKS PASS" $OUT/d256.log || exit 0
for tool in memcheck racecheck synccheck; do
  s=$SECONDS
  cases=t256_causal_gqa,t256_window_no_key,t256_lengths_gqa,t256_tiny
  [[ $tool == memcheck ]] || cases=t256_tiny,t256_window_no_key
  D256SAN_CASES=$cases HARNESS_DIR=$hb timeout -k 5 150 compute-sanitizer --tool $tool --print-limit 20 \
    python3 benchmarks/tune_tf32_bwd.py --sm90-d256 --sanitize > $OUT/d256_$tool.log 2>&1
  echo "$tool rc=$? in $((SECONDS - s)) s"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|numerics|PASS|FAIL" $OUT/d256_$tool.log | head -8
done
