# Next session, call 1 (harness only): the head-dim-256 Hopper TF32 backward's variants 1, 2 and 3 (harness modes 2, 3, 4:
# the slot released before dQ^T; that with float4 dQ adds; that with consumer 0 on dV^T, 1 on dK^T), never run before, against variant 0 (mode 1, the
# default) and sm80's (0): N64b.tgz (6cc75a6's tree, ARCHS=90 objects built here), linked there;
# numerics of the 15 cases for each mode, TFLOP/s at T = 1024 / 4096 / 16384; then compute-sanitizer on modes 2, 3, 4.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
hb=/tmp/hb64b; mkdir -p $hb && tar -xzf .harness_build/N64b.tgz -C /tmp && mv /tmp/N64b/* $hb/
s=$SECONDS; OUTDIR=$hb ARCHS=90 HARNESS_ONLY=1 bash benchmarks/build_harness.sh > $OUT/nbuild.log 2>&1; echo "harness build rc=$? in $((SECONDS - s)) s"
s=$SECONDS
SM90_D256_MODES=1,2,3,4 HARNESS_DIR=$hb timeout -k 5 ${H6_LIMIT:-240} python3 benchmarks/tune_tf32_bwd.py --sm90-d256 > $OUT/d256v.log 2>&1
echo "d256 variants rc=$? in $((SECONDS - s)) s"; grep -v Warn $OUT/d256v.log | tail -30
for tool in memcheck racecheck synccheck; do
  s=$SECONDS
  cases=t256_causal_gqa,t256_window_no_key,t256_lengths_gqa,t256_tiny
  [[ $tool == memcheck ]] || cases=t256_tiny,t256_window_no_key
  SM90_D256_MODES=2,3,4 D256SAN_CASES=$cases HARNESS_DIR=$hb timeout -k 5 150 compute-sanitizer --tool $tool --print-limit 20 \
    python3 benchmarks/tune_tf32_bwd.py --sm90-d256 --sanitize > $OUT/d256v_$tool.log 2>&1
  echo "$tool rc=$? in $((SECONDS - s)) s"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|numerics|PASS|FAIL" $OUT/d256v_$tool.log | head -8
done
# Session 65 addition: what bounds the head-dim-256 TF32 forward without a mask (216 TFLOP/s at T = 16384 on the H100,
# 1.82x Keras+XLA): ncu's speed-of-light, memory, compute and warp-state sections of one forward launch, B = 4, T = 4096;
# then the head-dim-128 TF32 forward of the same tokens for comparison.
for d in 256 128; do
  s=$SECONDS
  PROFILE_B=4 HARNESS_DIR=$hb timeout -k 5 120 ncu --clock-control none -k regex:flash_fwd_sm90_tf32_kernel --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy \
    python3 benchmarks/profile_one.py 4096 $d 0 fp32 tf32 > $OUT/ncu_f32fwd_d$d.txt 2>&1
  echo "ncu d$d rc=$? in $((SECONDS - s)) s"
  grep -E "Duration|Throughput|Pipe|Shared|L2|Issue|Stall|Eligible" $OUT/ncu_f32fwd_d$d.txt | head -24
done
